"""Vanishing variance (chapter 4), the law: a Monte Carlo of one random attention head.

A single attention head with a fixed query over N i.i.d. items outputs ``o = sum_i a_i
v_i``. With uniform weights ``Var(o_j) = sigma_j^2 / N``; with weights independent of
zero-mean values ``Var(o_j) = sigma_j^2 E[1 / N_eff]``, ``N_eff = 1 / sum_i a_i^2``.
:func:`random_head_outputs` samples ``o`` so a notebook can check both;
:func:`law_check` summarises the check and :func:`law_margins` decides ``LAW_CLAIM``
on it (``core.retrieval.shift_statistics`` summarises any [samples, d] set of
outputs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..core.evaluation import loglog_slope
from ..core.seeding import make_generator
from ..core.validation import is_int
from ..runs.claims import Claim


@dataclass(frozen=True)
class RandomHead:
    """One random head: W_Q, W_K, W_V ~ N(0, 1/d_model) entries, a fixed query q ~ N(0,
    I)."""

    w_q: Tensor  # [d_model, d_model]
    w_k: Tensor  # [d_model, d_model]
    w_v: Tensor  # [d_model, d_model]
    query: Tensor  # [d_model]

    @property
    def d_model(self) -> int:
        return self.query.shape[0]

    def logit_std(self, logit_scale: float) -> float:
        """tau: the std of the logits s_i for x ~ N(0, I) (they are Gaussian, N(0,
        tau^2))."""
        return float(
            logit_scale
            * (self.w_k.T @ (self.w_q @ self.query)).norm()
            / math.sqrt(self.d_model)
        )

    @property
    def value_std(self) -> np.ndarray:
        """sigma_j = std of v_ij = ||row j of W_V|| for x ~ N(0, I): [d_model]."""
        return self.w_v.norm(dim=1).numpy()


def random_head(d_model: int = 64, seed: int = 0) -> RandomHead:
    """The head's weights, fixed by ``seed`` (its own generator: independent of the
    items' stream)."""
    if not is_int(d_model) or d_model < 1:
        raise ValueError(f"d_model must be a positive int, got {d_model!r}")
    g = make_generator(seed)
    w_q, w_k, w_v = (
        torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model)
        for _ in range(3)
    )
    return RandomHead(w_q, w_k, w_v, torch.randn(d_model, generator=g))


@dataclass(frozen=True)
class HeadSample:
    """Outputs of one head on ``n_sequences`` fresh sets of N items."""

    outputs: Tensor  # [n_sequences, d_model]: o = sum_i a_i W_V x_i
    n_eff: Tensor  # [n_sequences]: 1 / sum_i a_i^2


@torch.no_grad()
def random_head_outputs(
    head: RandomHead,
    N: int,
    n_sequences: int,
    logit_scale: float,
    generator: torch.Generator,
    chunk: int = 32,
    item_mean: float = 0.0,
) -> HeadSample:
    """Sample x_i ~ N(item_mean, I), i = 1..N, ``n_sequences`` times; logits
    ``logit_scale q W_Q^T W_K x_i / sqrt(d)``.

    ``logit_scale`` sets the sharpness: 0 gives exactly uniform attention, larger is
    sharper. ``item_mean`` shifts every item by the same constant vector (every entry
    ``item_mean``): the values then have a non-zero mean, and the logits all move by one
    constant, which the softmax ignores. Sequences are drawn ``chunk`` at a time: small
    chunks keep every tensor in reused memory instead of fresh pages from the system (at
    N = 1024 that halves the cost).
    """
    for name, value in (("N", N), ("n_sequences", n_sequences), ("chunk", chunk)):
        if not is_int(value) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not math.isfinite(logit_scale) or logit_scale < 0:
        raise ValueError(
            f"logit_scale must be a finite number >= 0, got {logit_scale!r}"
        )
    if not math.isfinite(item_mean):
        raise ValueError(f"item_mean must be a finite number, got {item_mean!r}")
    d = head.d_model
    # [d]: s_i = x_i . key_direction
    key_direction = head.w_k.T @ (head.w_q @ head.query) / math.sqrt(d)
    outputs, n_eff = [], []
    for start in range(0, n_sequences, chunk):
        # [chunk, N, d]
        x = (
            torch.randn(min(chunk, n_sequences - start), N, d, generator=generator)
            + item_mean
        )
        weights = (logit_scale * (x @ key_direction)).softmax(dim=-1)  # [chunk, N]
        # [chunk, d]
        outputs.append(torch.einsum("bn,bnd->bd", weights, x @ head.w_v.T))
        n_eff.append(1.0 / weights.square().sum(dim=-1))
    return HeadSample(torch.cat(outputs), torch.cat(n_eff))


def standardize(outputs: Tensor, eps: float = 1e-5) -> Tensor:
    """(o - mean(o)) / std(o) over the last (feature) axis: LayerNorm without its
    affine."""
    return torch.nn.functional.layer_norm(outputs, outputs.shape[-1:], eps=eps)


def head_monte_carlo(
    head: RandomHead,
    N: Sequence[int],
    sharpness: dict[str, float],
    n_sets: int = 1000,
    seed: int = 1,
) -> tuple[dict[str, np.ndarray], ...]:
    """Section 1's Monte Carlo: per sharpness label, on the same ``n_sets`` input sets
    per N (``seed``): the std of o_0 [len(N)], the law's prediction
    sigma_0 sqrt(E[1/N_eff]) [len(N)], the mean N_eff [len(N)], and every component's
    std [len(N), d_model]."""
    std, law, n_eff, all_std = {}, {}, {}, {}
    for label, scale in sharpness.items():
        gen = make_generator(seed)  # the same input sets for every sharpness
        samples = [random_head_outputs(head, n, n_sets, scale, gen) for n in N]
        all_std[label] = np.array([s.outputs.std(dim=0).numpy() for s in samples])
        std[label] = all_std[label][:, 0]  # the fixed component j = 0
        law[label] = head.value_std[0] * np.sqrt(
            [(1 / s.n_eff).mean().item() for s in samples]
        )
        n_eff[label] = np.array([s.n_eff.mean().item() for s in samples])
    return std, law, n_eff, all_std


@dataclass(frozen=True)
class LawCheck:
    """The Monte Carlo of the law (a random head, ``n_sets`` input sets per N),
    summarised."""

    slopes: dict[str, float]  # log-log slope of std(o_0) against N, per sharpness label
    all_slopes: np.ndarray  # [d_model]: uniform attention, every component's slope
    law_err: dict[str, float]  # largest |std / (sigma sqrt(E[1/N_eff])) - 1| over N
    rel_se: float  # relative standard error of a std from n_sets Gaussian samples
    slope_se: float  # standard error of a fitted slope over the independent points of N
    tau: dict[str, float]  # the logits' std per sharpness
    # N E[1/N_eff] at the largest N over its limit e^(tau^2)
    limit_share: dict[str, float]

    @property
    def law_dev(self) -> float:
        return max(self.law_err.values())


UNIFORM, DIFFUSE, SHARP = "uniform (scale 0)", "diffuse (scale 1)", "sharp (scale 3)"


def law_check(
    head: RandomHead,
    N: Sequence[int],
    sharpness: dict[str, float],
    std: dict[str, np.ndarray],
    law: dict[str, np.ndarray],
    all_std: dict[str, np.ndarray],
    n_eff: dict[str, np.ndarray],
    n_sets: int,
) -> LawCheck:
    """Slopes, the law's error and the sampling errors of :func:`random_head_outputs`
    runs: per sharpness label, ``std`` [len(N)] of o_0, ``law`` its prediction,
    ``all_std`` [len(N), d] of every component, ``n_eff`` [len(N)] the mean N_eff. A std
    from M Gaussian samples has relative standard error 1 / sqrt(2 (M - 1)); the slope
    over N, that over sqrt(sum (log N - mean)^2)."""
    rel_se = 1 / np.sqrt(2 * (n_sets - 1))
    log_N = np.log(N)
    tau = {k: head.logit_std(s) for k, s in sharpness.items()}
    return LawCheck(
        slopes={label: loglog_slope(N, y) for label, y in std.items()},
        all_slopes=np.array(
            [
                loglog_slope(N, all_std[UNIFORM][:, j])
                for j in range(all_std[UNIFORM].shape[1])
            ]
        ),
        law_err={k: float(np.abs(std[k] / law[k] - 1).max()) for k in sharpness},
        rel_se=rel_se,
        slope_se=rel_se / np.sqrt(((log_N - log_N.mean()) ** 2).sum()),
        tau=tau,
        limit_share={
            k: N[-1] / n_eff[k][-1] / np.exp(tau[k] ** 2) for k in (DIFFUSE, SHARP)
        },
    )


def law_margins(check: LawCheck, n_sets: int) -> tuple[np.ndarray, str]:
    """:data:`LAW_CLAIM`'s demonstration: a Monte Carlo of the law under its own
    assumptions (i.i.d. inputs, a random head) shows the law at work and how sharpness
    bends it, but could not have refuted the paper. The margins, each in its own
    standard errors (> 0 where it holds): uniform attention's slope within 5 of them of
    -1/2; the law's worst relative error below 15 % (the book's bar for "good");
    every sharpness's slope below 0. And the row's detail text."""
    uniform, diffuse, sharp = (check.slopes[k] for k in (UNIFORM, DIFFUSE, SHARP))
    margins = np.array(
        [
            (5 * check.slope_se - abs(uniform + 0.5)) / check.slope_se,
            (0.15 - check.law_dev) / check.rel_se,
            -max(check.slopes.values()) / check.slope_se,
        ]
    )
    detail = (
        f"std slope {uniform:.2f} (uniform), {diffuse:.2f} (diffuse), "
        f"{sharp:.2f} (sharp attention); "
        f"sigma sqrt(E[1/N_eff]) within {check.law_dev:.2f} at every N; "
        f"one random head, {n_sets} input sets per N"
    )
    return margins, detail


# The chapter's scorecard claim on the law, declared once (book/scorecard.md).
#: The scorecard claim ch4-score-law, declared once.
LAW_CLAIM = Claim(
    "ch4-score-law",
    "The variance of attention outputs vanishes with length (std ~ N^-1/2 under "
    "diffuse attention)",
    "2504.02827 [paper]; the rate [ours]",
    metric="log-log slope of the output's std against N",
    unit="standard errors",
    # ch4.law_margins: each margin in its own standard errors
    effect="5 minus |slope + 1/2| (uniform); 0.15 minus the law's relative error; "
    "minus the shallowest slope",
    sesoi=None,
    kind="demonstration",
)
