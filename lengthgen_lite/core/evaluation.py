"""Per-length evaluation. Chapter 1 introduces it on set complement.

:func:`length_metrics` is the one per-length evaluation: a model's logits on a batch of
prefixes, their target sets and which prefixes count, at one or more logit scales, give
one :class:`LengthTable` per scale. Chapters 5, 6 and 7 build on it.

One pass over random permutations of length ``v - 1`` scores every prefix length ``s =
1..v-1`` (the causal mask makes position ``s - 1`` see exactly the first ``s`` tokens).
:func:`prefix_profile` reads one model on one sequence the same way (chapters 3 and 5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from . import metrics
from .hooks import run_with_cache
from .seeding import make_generator
from .tasks import Batch, sample_sequences, seen_mask, target_distribution
from .validation import require_number


@dataclass(frozen=True)
class LengthTable:
    """Metrics by prefix length ``s``: each field is a [len(s)] array of means over the
    sequences whose prefix of length ``s`` counts (``nan`` where none does)."""

    s: np.ndarray
    tv: np.ndarray
    invalid_mass: np.ndarray
    kl: np.ndarray
    logit_gap: np.ndarray  # nan where every output is legal (no gap to measure)
    # attention entropy / log s (1 = uniform over the seen tokens); layer 0, head mean
    entropy_ratio: np.ndarray
    max_attention: np.ndarray  # layer 0, mean over heads
    n_eff: np.ndarray  # 1/sum a^2, layer 0, mean over heads
    # fraction of sequences whose argmax token is legal (top-1 accuracy)
    top1_legal: np.ndarray
    tv_set: np.ndarray  # TV at positions with two or more legal outputs
    tv_single: np.ndarray  # TV at positions with exactly one legal output
    share_single: np.ndarray  # fraction of positions whose target is a single output


PATTERN = "blocks.0.attn.hook_pattern"  # the attention the attention metrics read
ATTN_OUT = "blocks.0.hook_attn_out"  # what the attention adds to the residual


def _check_batch(
    logits: Tensor, targets: Tensor, positions: Tensor | None, pattern: Tensor | None
) -> Tensor:
    """:func:`length_metrics`'s checks; returns ``positions`` (all True if None)."""
    if logits.dim() != 3:
        shape = tuple(logits.shape)
        raise ValueError(f"logits must be [batch, pos, n_out], got {shape}")
    if targets.shape != logits.shape:
        raise ValueError(
            f"targets must match logits {tuple(logits.shape)}, "
            f"got {tuple(targets.shape)}"
        )
    batch, n_pos = logits.shape[:2]
    if positions is None:
        positions = torch.ones(batch, n_pos, dtype=torch.bool)
    if positions.shape != (batch, n_pos) or positions.dtype != torch.bool:
        raise ValueError(
            f"positions must be a bool mask [batch, pos] = {(batch, n_pos)}, "
            f"got {tuple(positions.shape)} {positions.dtype}"
        )
    if pattern is not None and (
        pattern.dim() != 4
        or pattern.shape[0] != batch
        or pattern.shape[2:] != (n_pos, n_pos)
    ):
        raise ValueError(
            f"pattern must be [batch, head, pos, pos] with batch={batch}, pos={n_pos}, "
            f"got {tuple(pattern.shape)}"
        )
    return positions


def _masked_mean(values: Tensor, counted: Tensor) -> np.ndarray:
    """Mean over the batch of ``values`` [batch, pos] where ``counted``: [pos], nan
    where nothing counts. With every position counted this is ``values.mean(0)`` to the
    bit (a sum, then one division).
    """
    total = counted.float().sum(0)
    mean = torch.where(counted, values, 0.0).sum(0) / total.clamp_min(1)
    return torch.where(total > 0, mean, torch.nan).numpy()


def entropy_ratio(pattern: Tensor) -> Tensor:
    """Attention entropy over ``log s``, mean over heads: [batch, head, pos, pos] ->
    [batch, pos]. 1 means uniform over the ``s`` seen tokens. At ``s = 1`` the ratio is
    0/0: one key is uniform by definition, so it is 1 there (the book's one place for
    that rule).
    """
    s = torch.arange(1, pattern.shape[-2] + 1)
    ratio = metrics.attention_entropy(pattern).mean(1) / s.log().clamp_min(1e-30)
    ratio[:, 0] = 1.0
    return ratio


def length_metrics(
    logits: Tensor,
    targets: Tensor,
    *,
    positions: Tensor | None = None,
    pattern: Tensor | None = None,
    logit_scales: Sequence[float] = (1.0,),
) -> list[LengthTable]:
    """Every per-length metric of one model's outputs on a batch of prefixes: the book's
    one per-length evaluation (chapters 1, 5, 6 and 7 build on it).

    ``logits`` [batch, pos, n_out] is the prediction after each prefix (position ``s -
    1`` has seen ``s`` tokens); ``targets`` [batch, pos, n_out] is p*, whose nonzero
    entries are the legal set (``targets == 0``: illegal). ``positions`` [batch, pos]
    bool says which prefixes count (a game can end early; None: all). ``pattern`` is
    layer 0's attention [batch, head, pos, pos] (None: the attention fields are nan).
    One table per logit scale, in the order of ``logit_scales``: the logits are
    multiplied by the scale first (a temperature control).
    """
    positions = _check_batch(logits, targets, positions, pattern)
    scales = [require_number("logit_scale", c, minimum=0.0) for c in logit_scales]
    if not scales:
        raise ValueError("logit_scales must hold at least one scale (1.0: as trained)")
    illegal = targets == 0
    n_legal = (~illegal).sum(-1)  # [batch, pos]
    s = torch.arange(1, logits.shape[1] + 1)
    unscaled = {"share_single": _masked_mean((n_legal == 1).float(), positions)}
    if pattern is None:
        nan = np.full(len(s), np.nan, dtype=np.float32)
        unscaled |= {"entropy_ratio": nan, "max_attention": nan, "n_eff": nan}
    else:
        per_head = {
            "entropy_ratio": entropy_ratio(pattern),
            "max_attention": metrics.max_attention(pattern).mean(1),
            "n_eff": metrics.effective_tokens(pattern).mean(1),
        }
        unscaled |= {name: _masked_mean(x, positions) for name, x in per_head.items()}
    has_gap = positions & illegal.any(-1)  # every output legal: no gap
    # what does not depend on the scale, once (the same numbers, bit for bit)
    log_p = metrics.log_targets(targets)
    smallest_legal, largest_illegal = metrics.logit_extremes(logits, illegal)
    tables = []
    for scale in scales:
        scaled = logits * scale
        probs = scaled.softmax(dim=-1)
        tv = metrics.total_variation(probs, targets)
        # (c x)'s extremes are c times x's for c > 0: rounding is monotone
        gap = (
            smallest_legal * scale - largest_illegal * scale
            if scale > 0
            else metrics.logit_gap(scaled, illegal)
        )
        per_position = {
            "tv": _masked_mean(tv, positions),
            "invalid_mass": _masked_mean(
                metrics.invalid_mass(probs, illegal), positions
            ),
            "kl": _masked_mean(
                metrics.kl_divergence(targets, scaled, log_p), positions
            ),
            "logit_gap": _masked_mean(gap, has_gap),
            "top1_legal": _masked_mean(metrics.top1_legal(scaled, illegal), positions),
            "tv_set": _masked_mean(tv, positions & (n_legal >= 2)),
            "tv_single": _masked_mean(tv, positions & (n_legal == 1)),
        }
        tables.append(LengthTable(s=s.numpy(), **per_position, **unscaled))
    return tables


def evaluate_set_complement(
    model: nn.Module,
    v: int,
    n_sequences: int = 2000,
    seed: int = 0,
    logit_scale: float = 1.0,
) -> LengthTable:
    """Score ``model`` at every prefix length on ``n_sequences`` random permutations.

    ``logit_scale`` multiplies the logits first (a temperature control for chapter 6).
    """
    return evaluate_at_scales(model, v, (logit_scale,), n_sequences, seed)[0]


@torch.no_grad()
def evaluate_at_scales(
    model: nn.Module,
    v: int,
    logit_scales: Sequence[float],
    n_sequences: int = 2000,
    seed: int = 0,
) -> list[LengthTable]:
    """:func:`evaluate_set_complement` at every logit scale, one table per scale, from
    one forward pass (the scales only change what is computed from the logits)."""
    # [batch, v-1]
    tokens = sample_sequences(v, v - 1, n_sequences, make_generator(seed))
    logits, cache = run_with_cache(model, tokens, names=[PATTERN])
    targets = target_distribution(tokens, v)
    return length_metrics(
        logits, targets, pattern=cache[PATTERN], logit_scales=logit_scales
    )


# every per-length metric
METRICS = tuple(f.name for f in fields(LengthTable) if f.name != "s")


def evaluate_seeds(
    models: Sequence[nn.Module], v: int, **kwargs: Any
) -> list[LengthTable]:
    """One :class:`LengthTable` per model (e.g. ``TrainResult.models``), all on the same
    sequences.

    ``kwargs`` go to :func:`evaluate_set_complement`; sharing its ``seed`` means the
    seeds differ only in their weights, not in the test sequences.
    """
    if not models:
        raise ValueError(
            "models must hold at least one model (e.g. TrainResult.models)"
        )
    return [evaluate_set_complement(model, v, **kwargs) for model in models]


@dataclass(frozen=True)
class LengthCurves:
    """Per-length metrics of several models (one row per seed): every field but ``s`` is
    [K, len(s)]. Chapter 7 introduces it on the game and the languages.

    Means over the test positions that exist at each length (a game can end early).
    ``nan`` where a metric has no position (e.g. no set-valued target at that length).
    """

    s: np.ndarray  # lengths 1..test_length
    tv: np.ndarray  # TV to the uniform target over the legal set
    invalid_mass: np.ndarray  # probability on illegal outputs
    logit_gap: np.ndarray  # smallest legal minus largest illegal logit
    # attention entropy / log s, layer 0, mean over heads (1 = uniform)
    entropy_ratio: np.ndarray
    tv_set: np.ndarray  # TV at positions with two or more legal outputs
    # TV at positions with exactly one legal output (e.g. END after a game)
    tv_single: np.ndarray
    # [len(s)] fraction of positions whose target is a single output
    share_single: np.ndarray


CURVE_FIELDS = (
    "tv",
    "invalid_mass",
    "logit_gap",
    "entropy_ratio",
    "tv_set",
    "tv_single",
)


@torch.no_grad()
def evaluate_lengths(models: Sequence[nn.Module], batch: Batch) -> LengthCurves:
    """Score every model at every length of ``batch`` (one forward pass per model): any
    task whose targets are distributions over its outputs (the game, the languages)."""
    if not models:
        raise ValueError(
            "models must hold at least one model (e.g. TrainResult.models)"
        )
    tables = []
    for model in models:
        logits, cache = run_with_cache(model, batch.inputs, names=[PATTERN])
        tables += length_metrics(
            logits, batch.targets, positions=batch.loss_mask, pattern=cache[PATTERN]
        )
    curves = {f: np.stack([getattr(t, f) for t in tables]) for f in CURVE_FIELDS}
    return LengthCurves(s=tables[0].s, **curves, share_single=tables[0].share_single)


def stack_metric(tables: Sequence[LengthTable], metric: str) -> np.ndarray:
    """One metric of several tables (one per seed) as a [K, len(s)] array, for plots and
    asserts."""
    if not tables:
        raise ValueError("tables must hold at least one LengthTable")
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is unknown; allowed: {METRICS}")
    if any(not np.array_equal(t.s, tables[0].s) for t in tables):
        raise ValueError("tables must share the same prefix lengths s")
    return np.stack([getattr(t, metric) for t in tables])


@dataclass(frozen=True)
class SeedSpread:
    """Mean, minimum and maximum over seeds of every metric, by prefix length. Chapter
    1."""

    mean: LengthTable
    low: LengthTable
    high: LengthTable
    n_seeds: int


def aggregate_seeds(tables: Sequence[LengthTable]) -> SeedSpread:
    """Summarise one table per seed as mean/min/max per length: the spread the book
    plots."""
    stacked = {metric: stack_metric(tables, metric) for metric in METRICS}
    s = tables[0].s
    summary = {
        name: LengthTable(
            s=s,
            **{metric: reduce(values, axis=0) for metric, values in stacked.items()},
        )
        for name, reduce in (("mean", np.mean), ("low", np.min), ("high", np.max))
    }
    return SeedSpread(**summary, n_seeds=len(tables))


@dataclass(frozen=True)
class PrefixProfile:
    """One model on one input, at every prefix length s = 1..v-1 (arrays of length
    v-1)."""

    s: np.ndarray
    logits: np.ndarray  # [v-1, v] logits after each prefix
    probs: np.ndarray  # [v-1, v] softmax of the logits
    targets: np.ndarray  # [v-1, v] p*
    margin: np.ndarray  # smallest absent minus largest present logit
    tv: np.ndarray  # TV(probs, p*)


@torch.no_grad()
def prefix_profile(model: nn.Module, tokens: Sequence[int]) -> PrefixProfile:
    """Run ``model`` on one sequence of v-1 distinct tokens; read every prefix (causal
    mask)."""
    v = model.cfg.vocab_size
    if (
        len(tokens) != v - 1
        or sorted(set(tokens)) != sorted(tokens)
        or not all(0 <= t < v for t in tokens)
    ):
        raise ValueError(
            f"tokens must be v-1 = {v - 1} distinct ids in 0..{v - 1}, got "
            f"{list(tokens)!r}"
        )
    x = torch.tensor([list(tokens)], dtype=torch.long)  # [1, v-1]
    logits = model(x)[0]  # [v-1, v]
    targets = target_distribution(x, v)[0].to(logits.dtype)  # [v-1, v]
    # equal nonzero entries: exactly 1/(v-s) in float64
    targets = targets / targets.sum(-1, keepdim=True)
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


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log y against log x: -1 for y ~ 1/x (chapter 2's gap),
    -1/2 for y ~ x^(-1/2) (chapter 4's std)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.ndim != 1 or xs.shape != ys.shape or xs.size < 2:
        raise ValueError(
            "x and y must be 1-D of the same length >= 2, got shapes "
            f"{xs.shape} and {ys.shape}"
        )
    if (xs <= 0).any() or (ys <= 0).any() or not np.isfinite(ys).all():
        raise ValueError("x and y must be positive and finite for a log-log fit")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])
