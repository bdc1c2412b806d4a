"""Vanishing variance: the Monte-Carlo law and the distribution-shift statistics. Chapter 4.

A single attention head with a fixed query over N i.i.d. items outputs ``o = sum_i a_i v_i``. With
uniform weights ``Var(o_j) = sigma_j^2 / N``; with weights independent of zero-mean values
``Var(o_j) = sigma_j^2 E[1 / N_eff]``, ``N_eff = 1 / sum_i a_i^2``. ``random_head_outputs`` samples
``o`` so a notebook can check both; ``shift_statistics`` summarises any [samples, d] set of outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from .seeding import make_generator


@dataclass(frozen=True)
class RandomHead:
    """One random head: W_Q, W_K, W_V ~ N(0, 1/d_model) entries, a fixed query q ~ N(0, I)."""

    w_q: Tensor  # [d_model, d_model]
    w_k: Tensor  # [d_model, d_model]
    w_v: Tensor  # [d_model, d_model]
    query: Tensor  # [d_model]

    @property
    def d_model(self) -> int:
        return self.query.shape[0]

    def logit_std(self, logit_scale: float) -> float:
        """tau: the std of the logits s_i for x ~ N(0, I) (they are Gaussian, N(0, tau^2))."""
        return float(logit_scale * (self.w_k.T @ (self.w_q @ self.query)).norm() / math.sqrt(self.d_model))

    @property
    def value_std(self) -> np.ndarray:
        """sigma_j = std of v_ij = ||row j of W_V|| for x ~ N(0, I): [d_model]."""
        return self.w_v.norm(dim=1).numpy()


def random_head(d_model: int = 64, seed: int = 0) -> RandomHead:
    """The head's weights, fixed by ``seed`` (its own generator: independent of the items' stream)."""
    if not isinstance(d_model, int) or isinstance(d_model, bool) or d_model < 1:
        raise ValueError(f"d_model must be a positive int, got {d_model!r}")
    g = make_generator(seed)
    w_q, w_k, w_v = (torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model) for _ in range(3))
    return RandomHead(w_q, w_k, w_v, torch.randn(d_model, generator=g))


@dataclass(frozen=True)
class HeadSample:
    """Outputs of one head on ``n_sequences`` fresh sets of N items."""

    outputs: Tensor  # [n_sequences, d_model]: o = sum_i a_i W_V x_i
    n_eff: Tensor  # [n_sequences]: 1 / sum_i a_i^2


@torch.no_grad()
def random_head_outputs(
    head: RandomHead, N: int, n_sequences: int, logit_scale: float, generator: torch.Generator, chunk: int = 128
) -> HeadSample:
    """Sample x_i ~ N(0, I), i = 1..N, ``n_sequences`` times; logits ``logit_scale q W_Q^T W_K x_i / sqrt(d)``.

    ``logit_scale`` sets the sharpness: 0 gives exactly uniform attention, larger is sharper.
    Sequences are drawn ``chunk`` at a time so N = 1024 fits in memory.
    """
    for name, value in (("N", N), ("n_sequences", n_sequences), ("chunk", chunk)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not math.isfinite(logit_scale) or logit_scale < 0:
        raise ValueError(f"logit_scale must be a finite number >= 0, got {logit_scale!r}")
    d = head.d_model
    key_direction = head.w_k.T @ (head.w_q @ head.query) / math.sqrt(d)  # [d]: s_i = x_i . key_direction
    outputs, n_eff = [], []
    for start in range(0, n_sequences, chunk):
        x = torch.randn(min(chunk, n_sequences - start), N, d, generator=generator)  # [chunk, N, d]
        weights = (logit_scale * (x @ key_direction)).softmax(dim=-1)  # [chunk, N]
        outputs.append(torch.einsum("bn,bnd->bd", weights, x @ head.w_v.T))  # [chunk, d]
        n_eff.append(1.0 / weights.square().sum(dim=-1))
    return HeadSample(torch.cat(outputs), torch.cat(n_eff))


def loglog_slope(N: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log y against log N: -1/2 for y ~ N^(-1/2)."""
    n, v = np.asarray(N, dtype=float), np.asarray(y, dtype=float)
    if n.ndim != 1 or n.shape != v.shape or n.size < 2:
        raise ValueError(f"N and y must be 1-D of the same length >= 2, got shapes {n.shape} and {v.shape}")
    if (n <= 0).any() or (v <= 0).any() or not np.isfinite(v).all():
        raise ValueError("N and y must be positive and finite for a log-log fit")
    return float(np.polyfit(np.log(n), np.log(v), 1)[0])


@dataclass(frozen=True)
class ShiftStatistics:
    """The paper's distribution-shift statistics of a set of output vectors [samples, d]."""

    feature_var: np.ndarray  # [d]: Var over samples of each fixed component o_j
    global_mean: float  # E over samples of (1/d) sum_j o_j
    global_var: float  # E over samples of (1/d) sum_j (o_j - mean_j o)^2

    @property
    def median_feature_var(self) -> float:
        return float(np.median(self.feature_var))


def shift_statistics(outputs: Tensor) -> ShiftStatistics:
    """Per-feature variance across samples, and the per-vector (global) mean and variance, averaged."""
    if outputs.dim() != 2 or outputs.shape[0] < 2:
        raise ValueError(f"outputs must be [samples >= 2, d], got {tuple(outputs.shape)}")
    x = outputs.double()
    return ShiftStatistics(
        feature_var=x.var(dim=0).numpy(),
        global_mean=float(x.mean(dim=1).mean()),
        global_var=float(x.var(dim=1, unbiased=False).mean()),
    )


def standardize(outputs: Tensor, eps: float = 1e-5) -> Tensor:
    """(o - mean(o)) / std(o) over the last (feature) axis: LayerNorm without its affine."""
    return torch.nn.functional.layer_norm(outputs, outputs.shape[-1:], eps=eps)
