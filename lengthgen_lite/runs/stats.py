"""Statistics of the reference scale: bootstrap confidence intervals over seeds, and
whether training has converged.

Seeds are the unit of replication: a claim compares two configurations trained on the
same seeds, so its uncertainty is a *paired* bootstrap over seeds (resample seeds, keep
each seed's pair together). The intervals are percentile intervals from a fixed
generator, so a re-run prints the same bounds.

Convergence is measured on the training loss, not assumed from a step count:
:func:`loss_plateau` is the share of the loss's whole fall that the last tenth of
training still bought. A configuration has converged at a step when that share, on the
seeds' mean loss, is at most ``PLATEAU_TOLERANCE`` (1%).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.validation import require_int, require_number

PLATEAU_TOLERANCE = 0.01  # the last 10% of steps bought at most 1% of the fall
BOOTSTRAP_SAMPLES = 10_000


@dataclass(frozen=True)
class Interval:
    """A mean over seeds with its bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    n: int  # seeds
    level: float = 0.95

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def text(self, digits: int = 3) -> str:
        """``0.085 [0.071, 0.098]``: the mean and its interval, rounded."""
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def _per_seed(name: str, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or len(values) < 2 or not np.isfinite(values).all():
        raise ValueError(
            f"{name} must be a 1-d array of at least 2 finite per-seed values, got "
            f"shape {values.shape}"
        )
    return values


def bootstrap(
    values: np.ndarray,
    level: float = 0.95,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
) -> Interval:
    """The mean of per-seed ``values`` [seeds] with a percentile bootstrap interval."""
    values = _per_seed("values", values)
    require_number("level", level, 0.0, 1.0, strict=True)
    require_int("samples", samples, 100)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(values), size=(samples, len(values)))
    means = values[picks].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Interval(float(values.mean()), float(low), float(high), len(values), level)


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, level: float = 0.95, seed: int = 0
) -> Interval:
    """The mean of ``a - b`` over seeds (the same seeds, in the same order) with its
    interval: seeds are resampled as pairs."""
    a, b = _per_seed("a", a), _per_seed("b", b)
    if a.shape != b.shape:
        raise ValueError(
            f"a and b must hold the same seeds, got {a.shape} and {b.shape}"
        )
    return bootstrap(a - b, level=level, seed=seed)


def loss_plateau(loss: np.ndarray, step: int) -> np.ndarray:
    """Per seed, the share of the training loss's fall over the first ``step`` steps
    that the last tenth of them bought.

    ``loss`` is [steps, seeds] (``TrainResult.loss``). The fall is the mean over the
    first 1% of steps minus the mean over the last 10%; what the last tenth bought is
    the mean over the tenth before it minus the same. 0 means flat at the end; 0.2
    means still falling.
    """
    loss = np.asarray(loss, dtype=float)
    if loss.ndim != 2:
        raise ValueError(f"loss must be [steps, seeds], got shape {loss.shape}")
    require_int("step", step, 20)
    if step > len(loss):
        raise ValueError(f"step={step} is invalid; allowed: 20..{len(loss)}")
    tenth = step // 10
    first = loss[: max(1, step // 100)].mean(axis=0)
    last = loss[step - tenth : step].mean(axis=0)
    before = loss[step - 2 * tenth : step - tenth].mean(axis=0)
    return (before - last) / np.maximum(first - last, 1e-12)


def converged(loss: np.ndarray, step: int) -> bool:
    """Whether the seeds' mean training loss has plateaued by ``step``."""
    mean = np.asarray(loss, dtype=float).mean(axis=1, keepdims=True)
    return bool(loss_plateau(mean, step)[0] <= PLATEAU_TOLERANCE)


__all__ = [
    "BOOTSTRAP_SAMPLES",
    "PLATEAU_TOLERANCE",
    "Interval",
    "bootstrap",
    "converged",
    "loss_plateau",
    "paired_bootstrap",
]
