"""Chapter 2's measurements of dispersion: the power-law exponent of the logit gap, and how far
from -1 the attention itself lets it be.

Under the balanced reading of the logits (each seen token lowers its own logit by c times its
attention weight), the gap after s tokens is c times the smallest weight on a seen token other than
the query. Uniform attention gives c/s, an exponent of exactly -1; a model whose ``s * min a``
varies by a factor ``spread`` over the lengths can move the fitted exponent by at most
:func:`exponent_slack` ``(s, spread)``. Chapter 2 uses that bound as its tolerance, so the
tolerance comes from the model's attention, not from the gap it is compared with.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core.evaluation import loglog_slope


def _lengths(s: Sequence[float]) -> np.ndarray:
    s = np.asarray(s, dtype=float)
    if s.ndim != 1 or len(s) < 2 or not np.all(s > 0) or len(np.unique(s)) != len(s):
        raise ValueError(f"s must be at least two distinct positive lengths, got {s.tolist()!r}")
    return s


def power_law_exponent(s: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log y against log s: -1 for y ~ 1/s."""
    s = _lengths(s)
    y = np.asarray(y, dtype=float)
    if y.shape != s.shape or not np.all(y > 0):
        raise ValueError(f"y must hold one positive value per length ({len(s)}), got {y.tolist()!r}")
    return loglog_slope(s, y)


def exponent_slack(s: Sequence[float], spread: float) -> float:
    """The largest change of the fitted exponent when ``s * y`` varies by a factor ``spread`` over ``s``.

    If y = c/s times a factor that stays in [f, f * spread], log(s y) lies in a band of width
    log(spread), and a least-squares slope over the lengths s can move by at most
    log(spread) * sum_{x_i > mean}(x_i - mean) / sum(x_i - mean)^2, with x = log s.
    """
    x = np.log(_lengths(s))
    if isinstance(spread, bool) or not isinstance(spread, (int, float, np.floating)) or not spread >= 1:
        raise ValueError(f"spread must be a number >= 1 (largest over smallest factor), got {spread!r}")
    centred = x - x.mean()
    return float(np.log(spread) * centred[centred > 0].sum() / (centred**2).sum())


def scaled_min_weight(pattern: np.ndarray) -> np.ndarray:
    """Mean over sequences of ``s * min_j a_j`` over the seen tokens before the query, for s = 2..L.

    ``pattern`` is [batch, query_pos, key_pos] (one head). 1 for uniform attention; the balanced
    reading's gap is c/s times this factor (the least-attended seen token sets the gap).
    """
    pattern = np.asarray(pattern, dtype=float)
    if pattern.ndim != 3 or pattern.shape[1] != pattern.shape[2] or pattern.shape[1] < 2:
        raise ValueError(f"pattern must be [batch, query_pos, key_pos] with at least 2 positions, got {pattern.shape}")
    length = pattern.shape[1]
    return np.array([((q + 1) * pattern[:, q, :q].min(axis=-1)).mean() for q in range(1, length)])
