"""A real pretrained encoder, offline: MiniLM-L6 (all-MiniLM-L6-v2). Chapter 4's
contrast.

The paper measures Llama-3.2-1B; :mod:`lengthgen_lite.chapters.ch4_llama` measures a
decoder of the same family. This module measures an encoder of another family, the
sentence-transformers model all-MiniLM-L6-v2: a 6-layer BERT (d_model 384, 12 heads,
Post-LN, absolute position embeddings, at most 512 tokens), loaded offline by
:func:`lengthgen_lite.core.pretrained.load_minilm`.

The measurement runs the embeddings and layer 0's self-attention on ``[CLS] random word
pieces [SEP]`` and records, at chosen positions, the attention output before W_O (the
per-head contexts, concatenated) and after W_O (before the residual add and the
Post-LN).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core.pretrained import minilm_path, random_token_sequences
from ..core.validation import is_int

# "the": ids below are [PAD], [unused*], [UNK], [CLS], [SEP], [MASK] and single
# characters
FIRST_WORD_PIECE = 1996


def special_ids(path: Path | None = None) -> tuple[int, int]:
    """The ([CLS], [SEP]) token ids, read from the packaged vocabulary."""
    vocab = (
        ((path or minilm_path()) / "vocab.txt").read_text(encoding="utf-8").splitlines()
    )
    return vocab.index("[CLS]"), vocab.index("[SEP]")


Position = int | str  # an index (negative: from the end) or "middle" (N // 2)


def resolve_position(position: Position, N: int) -> int:
    """The index in 0..N-1 that ``position`` names in a sequence of N tokens."""
    if position == "middle":
        return N // 2
    if not is_int(position) or not -N <= position < N:
        raise ValueError(
            f"position must be 'middle' or an int in -N..N-1 = {-N}..{N - 1}, "
            f"got {position!r}"
        )
    return position % N


@torch.no_grad()
def layer0_attention_outputs(
    model: Any, tokens: torch.Tensor, positions: Sequence[Position]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layer 0's attention at ``positions``: (output before W_O, output after W_O), each
    [batch, len(positions), d_model], and N_eff = 1 / sum_i a_i^2 per head, [batch,
    head, len(positions)].

    Only the embeddings and layer 0's attention run; bidirectional, so every position
    attends over all N tokens. Only the rows of the read positions are computed: their
    queries against every key, through the model's own projections and its eager
    attention function (the same numbers as the full layer at those rows; a unit test
    checks it), so N = 512 costs O(N), not O(N^2). The model must use eager attention
    (:func:`~lengthgen_lite.core.pretrained.load_minilm` does).
    """
    if tokens.dim() != 2 or tokens.dtype != torch.long:
        raise ValueError(
            f"tokens must be [batch, N] long, got {tuple(tokens.shape)} {tokens.dtype}"
        )
    N, limit = tokens.shape[1], model.config.max_position_embeddings
    if limit < N:
        raise ValueError(f"N={N} exceeds the model's {limit} position embeddings")
    if not positions:
        raise ValueError("positions must name at least one position")
    if model.config._attn_implementation != "eager":
        raise ValueError(
            "the model computes no attention weights; load it with "
            "attn_implementation='eager'"
        )
    from transformers.models.bert.modeling_bert import eager_attention_forward

    index = [resolve_position(p, N) for p in positions]
    attention = model.encoder.layer[0].attention
    heads = attention.self
    hidden = model.embeddings(input_ids=tokens)  # [batch, N, d_model]

    # [batch, n, d_model] -> [batch, head, n, d_head]
    def split(x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], -1, heads.attention_head_size).transpose(
            1, 2
        )

    query = split(heads.query(hidden[:, index]))
    context, weights = eager_attention_forward(
        heads,
        query,
        split(heads.key(hidden)),
        split(heads.value(hidden)),
        None,
        scaling=heads.scaling,
    )  # [batch, len(positions), head, d_head], [batch, head, len(positions), N]
    context = context.reshape(tokens.shape[0], len(index), -1)
    n_eff = 1.0 / weights.square().sum(dim=-1)  # [batch, head, len(positions)]
    return context, attention.output.dense(context), n_eff


@dataclass(frozen=True)
class StdTable:
    """Std across sequences of every component, per N and position: arrays [len(N),
    len(positions), d_model]."""

    N: np.ndarray
    # as given (negative: from the end; "middle": N // 2)
    positions: tuple[Position, ...]
    before_wo: np.ndarray
    after_wo: np.ndarray
    n_eff: np.ndarray  # [len(N), len(positions)]: mean over sequences and heads


def attention_output_std(
    model: Any,
    sizes: Sequence[int],
    positions: Sequence[Position],
    n_sequences: int = 128,
    seed: int = 0,
    chunk: int = 16,
) -> StdTable:
    """The std across ``n_sequences`` random-token sequences of layer 0's attention
    output components.

    Every model given the same ``seed`` sees the same sequences. Sequences run ``chunk``
    at a time.
    """
    if not sizes:
        raise ValueError("sizes must name at least one length N")
    cls_id, sep_id = special_ids()
    vocab = model.config.vocab_size
    before, after, n_eff = [], [], []
    for N in sizes:
        tokens = random_token_sequences(
            n_sequences,
            N,
            vocab,
            FIRST_WORD_PIECE,
            seed * 100_003 + N,
            start_id=cls_id,
            end_id=sep_id,
        )
        outs = [
            layer0_attention_outputs(model, t, positions) for t in tokens.split(chunk)
        ]
        # [len(positions), d_model]
        before.append(torch.cat([o[0] for o in outs]).std(dim=0).numpy())
        after.append(torch.cat([o[1] for o in outs]).std(dim=0).numpy())
        # [len(positions)]
        n_eff.append(torch.cat([o[2] for o in outs]).mean(dim=(0, 1)).numpy())
    return StdTable(
        np.asarray(sizes),
        tuple(positions),
        np.stack(before),
        np.stack(after),
        np.stack(n_eff),
    )


def minilm_curves(
    tables: dict[str, StdTable], positions: Sequence[Position]
) -> dict[Position, dict[str, np.ndarray]]:
    """Per position (in ``positions``' order), per model name: the std after W_O as the
    median over the components (``"<name>, median"``) and of the fixed component o_0
    (``"<name>, o_0"``), each [len(N)]."""
    out: dict[Position, dict[str, np.ndarray]] = {}
    for i, position in enumerate(positions):
        curves = {}
        for name, table in tables.items():
            curves[f"{name}, median"] = np.median(table.after_wo[:, i], axis=1)
            curves[f"{name}, o_0"] = table.after_wo[:, i, 0]
        out[position] = curves
    return out
