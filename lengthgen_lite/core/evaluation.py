"""Per-length evaluation on set complement. Chapter 1 introduces it.

One pass over random permutations of length ``v - 1`` scores every prefix length ``s = 1..v-1``
(the causal mask makes position ``s - 1`` see exactly the first ``s`` tokens).
:func:`prefix_profile` reads one model on one sequence the same way (chapters 3 and 5).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from . import metrics
from .model import run_with_cache
from .seeding import make_generator
from .tasks import sample_sequences, seen_mask, target_distribution


@dataclass(frozen=True)
class LengthTable:
    """Metrics by prefix length ``s``: each field is a [len(s)] array of means over sequences."""

    s: np.ndarray
    tv: np.ndarray
    invalid_mass: np.ndarray
    kl: np.ndarray
    logit_gap: np.ndarray
    entropy_ratio: np.ndarray  # attention entropy / log s (1 = uniform over the seen tokens); layer 0, mean over heads
    max_attention: np.ndarray  # layer 0, mean over heads
    n_eff: np.ndarray  # 1/sum a^2, layer 0, mean over heads
    top1_legal: np.ndarray  # fraction of sequences whose argmax token is legal (top-1 accuracy)


@torch.no_grad()
def evaluate_set_complement(
    model: nn.Module, v: int, n_sequences: int = 2000, seed: int = 0, logit_scale: float = 1.0
) -> LengthTable:
    """Score ``model`` at every prefix length on ``n_sequences`` random permutations.

    ``logit_scale`` multiplies the logits first (a temperature control for chapter 6).
    """
    tokens = sample_sequences(v, v - 1, n_sequences, make_generator(seed))  # [batch, v-1]
    logits, cache = run_with_cache(model, tokens, names=["blocks.0.attn.hook_pattern"])
    logits = logits * logit_scale  # [batch, s, v]
    targets, seen = target_distribution(tokens, v), seen_mask(tokens, v)
    probs = logits.softmax(dim=-1)
    pattern = cache["blocks.0.attn.hook_pattern"]  # [batch, head, query_pos, key_pos]
    s = torch.arange(1, v)
    per_position = {
        "tv": metrics.total_variation(probs, targets),
        "invalid_mass": metrics.invalid_mass(probs, seen),
        "kl": metrics.kl_divergence(targets, logits),
        "logit_gap": metrics.logit_gap(logits, seen),
        "entropy_ratio": metrics.attention_entropy(pattern).mean(1) / s.log().clamp_min(1e-30),
        "max_attention": metrics.max_attention(pattern).mean(1),
        "n_eff": metrics.effective_tokens(pattern).mean(1),
        "top1_legal": metrics.top1_legal(logits, seen),
    }
    means = {name: value.mean(dim=0).numpy() for name, value in per_position.items()}
    means["entropy_ratio"][0] = 1.0  # s = 1: one key, the ratio 0/0 is uniform by definition
    return LengthTable(s=s.numpy(), **means)


METRICS = tuple(f.name for f in fields(LengthTable) if f.name != "s")  # every per-length metric


def evaluate_seeds(models: Sequence[nn.Module], v: int, **kwargs: Any) -> list[LengthTable]:
    """One :class:`LengthTable` per model (e.g. ``TrainResult.models``), all on the same sequences.

    ``kwargs`` go to :func:`evaluate_set_complement`; sharing its ``seed`` means the seeds differ
    only in their weights, not in the test sequences.
    """
    if not models:
        raise ValueError("models must hold at least one model (e.g. TrainResult.models)")
    return [evaluate_set_complement(model, v, **kwargs) for model in models]


def stack_metric(tables: Sequence[LengthTable], metric: str) -> np.ndarray:
    """One metric of several tables (one per seed) as a [K, len(s)] array, for plots and asserts."""
    if not tables:
        raise ValueError("tables must hold at least one LengthTable")
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is unknown; allowed: {METRICS}")
    if any(not np.array_equal(t.s, tables[0].s) for t in tables):
        raise ValueError("tables must share the same prefix lengths s")
    return np.stack([getattr(t, metric) for t in tables])


@dataclass(frozen=True)
class SeedSpread:
    """Mean, minimum and maximum over seeds of every metric, by prefix length. Chapter 1."""

    mean: LengthTable
    low: LengthTable
    high: LengthTable
    n_seeds: int


def aggregate_seeds(tables: Sequence[LengthTable]) -> SeedSpread:
    """Summarise one table per seed as mean/min/max per length: the spread the book plots."""
    stacked = {metric: stack_metric(tables, metric) for metric in METRICS}
    s = tables[0].s
    summary = {
        name: LengthTable(s=s, **{metric: reduce(values, axis=0) for metric, values in stacked.items()})
        for name, reduce in (("mean", np.mean), ("low", np.min), ("high", np.max))
    }
    return SeedSpread(**summary, n_seeds=len(tables))


@dataclass(frozen=True)
class PrefixProfile:
    """One model on one input, at every prefix length s = 1..v-1 (arrays of length v-1)."""

    s: np.ndarray
    logits: np.ndarray  # [v-1, v] logits after each prefix
    probs: np.ndarray  # [v-1, v] softmax of the logits
    targets: np.ndarray  # [v-1, v] p*
    margin: np.ndarray  # smallest absent minus largest present logit
    tv: np.ndarray  # TV(probs, p*)


@torch.no_grad()
def prefix_profile(model: nn.Module, tokens: Sequence[int]) -> PrefixProfile:
    """Run ``model`` on one sequence of v-1 distinct tokens; read every prefix (causal mask)."""
    v = model.cfg.vocab_size
    if len(tokens) != v - 1 or sorted(set(tokens)) != sorted(tokens) or not all(0 <= t < v for t in tokens):
        raise ValueError(f"tokens must be v-1 = {v - 1} distinct ids in 0..{v - 1}, got {list(tokens)!r}")
    x = torch.tensor([list(tokens)], dtype=torch.long)  # [1, v-1]
    logits = model(x)[0]  # [v-1, v]
    targets = target_distribution(x, v)[0].to(logits.dtype)  # [v-1, v]
    targets = targets / targets.sum(-1, keepdim=True)  # equal nonzero entries: exactly 1/(v-s) in float64
    seen = seen_mask(x, v)[0]
    probs = logits.softmax(-1)
    return PrefixProfile(
        s=np.arange(1, v),
        logits=logits.numpy(),
        probs=probs.numpy(),
        targets=targets.numpy(),
        margin=metrics.logit_gap(logits, seen).numpy(),
        tv=metrics.total_variation(probs, targets).numpy(),
    )


def seed_values(rows: Sequence[dict[str, object]], column: str, **where: object) -> np.ndarray:
    """``column`` of the tidy result rows matching ``where`` (e.g. ``norm="post", targets="soft"``),
    one value per seed in seed order: the per-seed numbers a chapter asserts on. [K] float."""
    chosen = [row for row in rows if all(row.get(key) == value for key, value in where.items())]
    if not chosen:
        raise ValueError(f"no row matches {where!r}")
    if column not in chosen[0]:
        raise ValueError(f"column {column!r} is unknown; rows have {sorted(chosen[0])}")
    return np.array([row[column] for row in sorted(chosen, key=lambda row: row["seed"])], dtype=float)


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log y against log x: -1 for y ~ 1/x (chapter 2's gap), -1/2 for
    y ~ x^(-1/2) (chapter 4's std)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.ndim != 1 or xs.shape != ys.shape or xs.size < 2:
        raise ValueError(f"x and y must be 1-D of the same length >= 2, got shapes {xs.shape} and {ys.shape}")
    if (xs <= 0).any() or (ys <= 0).any() or not np.isfinite(ys).all():
        raise ValueError("x and y must be positive and finite for a log-log fit")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])
