"""Chapter 3 by training: does gradient descent find the construction's width threshold?

:class:`LengthOneTwo` serves every input of lengths 1-2 as one full batch; :func:`dimension_sweep`
trains at each width d and reads the fit, the per-input KL and the pair of tokens a stalled run
confuses. The hand-built side (weights, margins, the LN gap) is :mod:`.ch3_construction`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np
import torch
from torch import nn

from ..core import metrics
from ..core.model import ModelConfig
from ..core.tasks import Batch, enumerate_sequences, seen_mask, target_distribution
from ..core.training import TrainConfig, train
from .ch3_construction import _check_positive, _check_v, _is_int


@dataclass(frozen=True)
class LengthOneTwo:
    """Every input of length 1 and 2 over v tokens, each counted once, served as one full batch.

    The v(v-1) length-2 sequences give every length-2 input at position 1; position 0 repeats each
    length-1 input v-1 times, so the loss mask keeps it once (in its first sequence). With soft
    targets the loss is then the mean cross-entropy over the v + v(v-1) inputs of lengths 1-2.
    """

    v: int

    def __post_init__(self) -> None:
        _check_v(self.v, minimum=3)

    @property
    def n_outputs(self) -> int:
        return self.v

    @property
    def n_sequences(self) -> int:
        return self.v * (self.v - 1)

    def train_sizes(self) -> Sequence[int]:
        return (2,)

    def full_batch(self) -> Batch:
        return self._full_batch  # built once: the loop asks for it K times per step

    @cached_property
    def _full_batch(self) -> Batch:
        tokens = enumerate_sequences(self.v, 2)  # [v(v-1), 2], lexicographic: first token sorted
        mask = torch.ones(tokens.shape, dtype=torch.bool)
        mask[:, 0] = torch.arange(self.n_sequences) % (self.v - 1) == 0  # first sequence per first token
        return Batch(tokens, target_distribution(tokens, self.v), mask)

    def sample_train_batch(self, batch: int, size: int, generator: torch.Generator) -> Batch:
        if batch != self.n_sequences or size != 2:
            raise ValueError(
                f"LengthOneTwo serves the full batch of v(v-1) = {self.n_sequences} length-2 sequences; "
                f"use TrainConfig(batch={self.n_sequences}) (got batch={batch!r}, size={size!r})"
            )
        return self.full_batch()

    def entropy_floor(self) -> float:
        """The lowest reachable loss: the mean entropy of p* over the inputs, in nats."""
        v = self.v
        return (v * math.log(v - 1) + v * (v - 1) * math.log(v - 2)) / (v + v * (v - 1))


@torch.no_grad()
def input_kl(model: nn.Module, v: int) -> tuple[np.ndarray, np.ndarray]:
    """KL(p* || model) in nats on every input: ([v] by token at length 1, [v, v] by (t_1, t_2) at length 2).

    The diagonal of the length-2 table (repeated tokens: not an input) is NaN.
    """
    task = LengthOneTwo(v)
    batch = task.full_batch()
    logits = model(batch.inputs)  # [v(v-1), 2, v]
    kl = metrics.kl_divergence(batch.targets.to(logits.dtype), logits).double().numpy()  # [v(v-1), 2]
    first, second = batch.inputs[:, 0].numpy(), batch.inputs[:, 1].numpy()
    length_one = np.zeros(v)
    length_one[first[batch.loss_mask[:, 0].numpy()]] = kl[batch.loss_mask[:, 0].numpy(), 0]
    length_two = np.full((v, v), np.nan)
    length_two[first, second] = kl[:, 1]
    return length_one, length_two


@torch.no_grad()
def length_one_two_fit(model: nn.Module, v: int) -> tuple[float, float]:
    """(excess loss in nats, smallest margin) of ``model`` over all inputs of lengths 1-2.

    The excess loss is the mean KL(p* || model) over the v + v(v-1) inputs: 0 only at a perfect fit.
    """
    task = LengthOneTwo(v)
    batch = task.full_batch()
    logits = model(batch.inputs)  # [v(v-1), 2, v]
    kl = metrics.kl_divergence(batch.targets.to(logits.dtype), logits)  # [v(v-1), 2]
    gap = metrics.logit_gap(logits, seen_mask(batch.inputs, v))
    mask = batch.loss_mask
    return float(kl[mask].mean()), float(gap[mask].min())


@dataclass(frozen=True)
class TiedPair:
    """The two tokens a stalled run confuses most, and its KL where exactly one of them is present."""

    tokens: tuple[int, int]
    kl_exactly_one: float  # mean KL over the length-2 inputs holding exactly one of the pair (nats)
    kl_others: float  # mean KL over the remaining length-2 inputs (nats)

    @staticmethod
    def split_cost(v: int) -> float:
        """log 2 / (v - 2): the KL of splitting the absent one's mass 1/(v-2) evenly over the pair."""
        _check_v(v, minimum=3)
        return math.log(2.0) / (v - 2)


def tied_pair(kl_two: np.ndarray) -> TiedPair:
    """Find the pair of tokens with the largest mean KL over the length-2 inputs that contain them.

    A model that cannot tell two tokens apart as context loses ``TiedPair.split_cost(v)`` on every
    input holding exactly one of them, and nothing elsewhere.
    """
    kl_two = np.asarray(kl_two, dtype=float)
    v = kl_two.shape[0]
    if kl_two.ndim != 2 or kl_two.shape != (v, v) or v < 3:
        raise ValueError(f"kl_two must be a [v, v] table with v >= 3, got shape {kl_two.shape}")
    score = np.array([np.nanmean(np.concatenate([kl_two[x], kl_two[:, x]])) for x in range(v)])
    a, b = sorted(int(x) for x in np.argsort(-score, kind="stable")[:2])
    inside = np.isin(np.arange(v), [a, b])
    exactly_one = inside[:, None] ^ inside[None, :]  # [v, v]
    valid = ~np.isnan(kl_two)
    return TiedPair(
        tokens=(a, b),
        kl_exactly_one=float(kl_two[exactly_one & valid].mean()),
        kl_others=float(kl_two[~exactly_one & valid].mean()),
    )


@dataclass(frozen=True)
class DimensionSweep:
    """Training on all inputs of lengths 1-2 for each width d: arrays are [len(dims), len(seeds)]."""

    v: int
    dims: np.ndarray  # d_model = d_head = d
    seeds: np.ndarray
    best_excess: np.ndarray  # lowest training loss minus the entropy floor, over all steps (nats)
    final_excess: np.ndarray  # excess loss of the final weights (nats)
    final_margin: np.ndarray  # smallest logit margin of the final weights over all inputs
    curves: np.ndarray  # [len(dims), steps, len(seeds)] training loss minus the entropy floor
    kl_length_one: np.ndarray  # [len(dims), len(seeds), v] final KL per length-1 input (``input_kl``)
    kl_length_two: np.ndarray  # [len(dims), len(seeds), v, v] final KL per length-2 input, NaN diagonal

    def fits(self, threshold: float) -> np.ndarray:
        """[len(dims), len(seeds)] bool: the final excess loss is below ``threshold`` nats."""
        _check_positive("threshold", threshold)
        return self.final_excess < threshold


def dimension_sweep(
    v: int, dims: Sequence[int], seeds: Sequence[int], cfg: TrainConfig, progress: bool = True
) -> DimensionSweep:
    """Fit lengths 1-2 exactly (soft targets, full batch) at d_model = d_head = d for each d in ``dims``.

    The seeds of one d are trained together in one ``train`` call. Returns every run's loss curve,
    its best loss and the final weights' fit (chapter 3's "exists vs is found").
    """
    task = LengthOneTwo(v)
    if cfg.batch != task.n_sequences or cfg.targets != "soft":
        raise ValueError(
            f"dimension_sweep needs TrainConfig(batch={task.n_sequences}, targets='soft'), got "
            f"batch={cfg.batch}, targets={cfg.targets!r}"
        )
    dims = list(dims)
    if not dims or any(not _is_int(d) or d < 1 for d in dims):
        raise ValueError(f"dims must be a non-empty list of positive ints, got {dims!r}")
    dims = [int(d) for d in dims]
    floor = task.entropy_floor()
    curves, final_excess, final_margin, kl_one, kl_two = [], [], [], [], []
    for d in dims:
        model_cfg = ModelConfig(vocab_size=v, d_model=d, n_heads=1, d_head=d, norm="none")
        result = train(model_cfg, task, cfg, seeds, progress=progress, desc=f"v={v}, d={d}")
        curves.append(result.loss.astype(np.float64) - floor)
        fits = [length_one_two_fit(model, v) for model in result.models]
        final_excess.append([f[0] for f in fits])
        final_margin.append([f[1] for f in fits])
        kls = [input_kl(model, v) for model in result.models]
        kl_one.append([k[0] for k in kls])
        kl_two.append([k[1] for k in kls])
    curves_arr = np.stack(curves)  # [len(dims), steps, K]
    return DimensionSweep(
        v=v,
        dims=np.array(dims),
        seeds=np.array(list(seeds)),
        best_excess=curves_arr.min(axis=1),
        final_excess=np.array(final_excess),
        final_margin=np.array(final_margin),
        curves=curves_arr,
        kl_length_one=np.array(kl_one),
        kl_length_two=np.array(kl_two),
    )
