"""Statistics over seeds: t-intervals, equivalence tests, pooled estimates, and whether
a training converged or collapsed.

Seeds are the unit of replication. A claim compares two configurations trained on the
same seeds, so its uncertainty is a *paired* t-interval over seeds: the per-seed
differences, their mean, and Student's t quantile with ``n - 1`` degrees of freedom.
(A percentile bootstrap over ten seeds is about 18% narrower than the t-interval: too
optimistic at this sample size, so the book uses t everywhere.)

*No effect* is a claim of its own: two one-sided tests (TOST) at level ``alpha`` put the
effect inside ``±sesoi``, the smallest effect of interest declared with the claim. That
is the same as the ``1 - 2 alpha`` (90%) t-interval lying inside ``(-sesoi, sesoi)``.

Convergence is measured on the training loss: :func:`loss_plateau` is the share of the
loss's whole fall that the last tenth of training still bought. A configuration has
converged at a step when that share, on the seeds' mean loss, is within
``PLATEAU_TOLERANCE`` (1%) of zero on *either* side: a loss that rises again has not
converged (:func:`rising` reads the rise from a stored sweep's loss windows).
:func:`unstable_seeds` flags a seed whose loss ended well above its own best.

A random search (chapter 6) is read by main-effects least squares:
:func:`factor_importance` says how much each factor explains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
from scipy import stats as scipy_stats

from ..core.validation import require_int, require_number

PLATEAU_TOLERANCE = (
    0.01  # the last 10% of steps moved the loss by at most 1% of its fall
)
# a seed is unstable when its last loss window sits above its best window by more than
# this share of its fall (first window minus best window)
UNSTABLE_RISE = 0.05
LEVEL = 0.95  # two-sided confidence level of every interval the book shows
TOST_ALPHA = 0.05  # each one-sided test of the equivalence test


@dataclass(frozen=True)
class Interval:
    """A mean over seeds with its t confidence interval (``se`` its standard error,
    ``df`` its degrees of freedom)."""

    mean: float
    low: float
    high: float
    n: int  # seeds
    se: float
    df: float
    level: float = LEVEL

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def at_level(self, level: float) -> Interval:
        """The same estimate with the interval at another confidence level."""
        require_number("level", level, 0.0, 1.0, strict=True)
        width = float(scipy_stats.t.ppf(0.5 + level / 2, self.df)) * self.se
        return Interval(
            self.mean,
            self.mean - width,
            self.mean + width,
            self.n,
            self.se,
            self.df,
            level,
        )

    def text(self, digits: int = 3, signed: bool = False) -> str:
        """``0.085 [0.071, 0.098]``: the mean and its interval, rounded."""
        form = f"{'+' if signed else ''}.{digits}f"
        return f"{self.mean:{form}} [{self.low:{form}}, {self.high:{form}}]"


def _per_seed(name: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or len(array) < 2 or not np.isfinite(array).all():
        raise ValueError(
            f"{name} must be a 1-d array of at least 2 finite per-seed values, got "
            f"shape {array.shape}"
        )
    return array


def _interval(mean: float, se: float, n: int, df: float, level: float) -> Interval:
    width = float(scipy_stats.t.ppf(0.5 + level / 2, df)) * se
    return Interval(float(mean), mean - width, mean + width, n, float(se), df, level)


def t_interval(values: Sequence[float] | np.ndarray, level: float = LEVEL) -> Interval:
    """The mean of per-seed ``values`` [seeds] with its t-interval."""
    array = _per_seed("values", values)
    require_number("level", level, 0.0, 1.0, strict=True)
    n = len(array)
    se = float(array.std(ddof=1) / np.sqrt(n))
    return _interval(float(array.mean()), se, n, n - 1.0, level)


def paired_interval(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    level: float = LEVEL,
) -> Interval:
    """The mean of ``a - b`` over seeds (the same seeds, in the same order) with its
    paired t-interval."""
    a, b = _per_seed("a", a), _per_seed("b", b)
    if a.shape != b.shape:
        raise ValueError(
            f"a and b must hold the same seeds, got {a.shape} and {b.shape}"
        )
    return t_interval(a - b, level)


def equivalent(interval: Interval, sesoi: float, alpha: float = TOST_ALPHA) -> bool:
    """TOST: both one-sided tests at ``alpha`` reject an effect of ``sesoi`` or more
    in either direction: the ``1 - 2 alpha`` interval lies inside ``(-sesoi, sesoi)``.
    """
    require_number("sesoi", sesoi, 0.0, strict=True)
    require_number("alpha", alpha, 0.0, 0.5, strict=True)
    narrow = interval.at_level(1 - 2 * alpha)
    return bool(-sesoi < narrow.low and narrow.high < sesoi)


def pooled(intervals: Sequence[Interval], level: float = LEVEL) -> Interval:
    """The cell-stratified estimate: the unweighted mean of the cells' means, its
    standard error from the cells' own (``sqrt(sum se^2) / k``), and Welch-Satterthwaite
    degrees of freedom. Every cell counts once, however many seeds it has."""
    if not intervals:
        raise ValueError("intervals is empty; allowed: at least one cell")
    k = len(intervals)
    variances = np.array([i.se**2 for i in intervals])
    mean = float(np.mean([i.mean for i in intervals]))
    se = float(np.sqrt(variances.sum()) / k)
    n = sum(i.n for i in intervals)
    if variances.sum() == 0:
        df = float(n - k) if n > k else 1.0
    else:
        dfs = np.array([i.df for i in intervals])
        df = float(variances.sum() ** 2 / np.sum(variances**2 / dfs))
    return _interval(mean, se, n, df, level)


#: the shortest loss curve whose plateau can be read (a tenth of it is two steps)
MIN_PLATEAU_STEPS = 20


def loss_plateau(loss: np.ndarray, step: int) -> np.ndarray:
    """Per seed, the share of the training loss's fall over the first ``step`` steps
    that the last tenth of them bought.

    ``loss`` is [steps, seeds] (``TrainResult.loss``). The fall is the mean over the
    first 1% of steps minus the mean over the last 10%; what the last tenth bought is
    the mean over the tenth before it minus the same. 0 means flat at the end; 0.2
    means still falling; below 0, the loss rose again.
    """
    loss = np.asarray(loss, dtype=float)
    if loss.ndim != 2:
        raise ValueError(f"loss must be [steps, seeds], got shape {loss.shape}")
    require_int("step", step, MIN_PLATEAU_STEPS)
    if step > len(loss):
        raise ValueError(
            f"step={step} is invalid; allowed: {MIN_PLATEAU_STEPS}..{len(loss)}"
        )
    tenth = step // 10
    first = loss[: max(1, step // 100)].mean(axis=0)
    last = loss[step - tenth : step].mean(axis=0)
    before = loss[step - 2 * tenth : step - tenth].mean(axis=0)
    return (before - last) / np.maximum(first - last, 1e-12)


def converged(loss: np.ndarray, step: int) -> bool:
    """Whether the seeds' mean training loss is flat by ``step``: neither still
    falling nor rising again by more than ``PLATEAU_TOLERANCE`` of its fall."""
    mean = np.asarray(loss, dtype=float).mean(axis=1, keepdims=True)
    return bool(abs(loss_plateau(mean, step)[0]) <= PLATEAU_TOLERANCE)


def rising(windows: np.ndarray, window_ends: Sequence[int], step: int) -> bool:
    """Whether the seeds' mean loss rose at the end of the first ``step`` steps, read
    from stored loss windows ([seeds, windows], each the mean over the steps up to its
    end): the windows ending in the last tenth of ``step`` sit above those of the tenth
    before by more than ``PLATEAU_TOLERANCE`` of the fall since the first window. The
    stored convergence flag was tested on the whole loss curve for a fall only; this
    adds the other side."""
    windows = np.asarray(windows, dtype=float)
    ends = np.asarray(window_ends)
    if windows.ndim != 2 or windows.shape[1] != len(ends):
        raise ValueError(
            f"windows must be [seeds, {len(ends)}] for {len(ends)} window ends, got "
            f"shape {windows.shape}"
        )
    if step not in set(ends.tolist()):
        raise ValueError(f"step={step} is not a window end; allowed: {ends.tolist()}")
    mean = windows.mean(axis=0)
    tenth = max(step // 10, int(ends[0]))
    last = mean[(ends > step - tenth) & (ends <= step)].mean()
    before = mean[(ends > step - 2 * tenth) & (ends <= step - tenth)]
    if before.size == 0:
        return False
    fall = max(mean[0] - min(last, before.mean()), 1e-12)
    return bool((last - before.mean()) / fall > PLATEAU_TOLERANCE)


def loss_windows(loss: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """A loss curve [steps, seeds] as ``count`` window means: (window ends [count],
    means [seeds, count]), the form a stored sweep keeps."""
    loss = np.asarray(loss, dtype=float)
    if loss.ndim != 2 or len(loss) < count:
        raise ValueError(
            f"loss must be [steps >= {count}, seeds], got shape {loss.shape}"
        )
    edges = np.linspace(0, len(loss), count + 1).astype(int)
    means = [loss[a:b].mean(axis=0) for a, b in zip(edges[:-1], edges[1:])]
    return edges[1:], np.array(means).T


def unstable_seeds(windows: np.ndarray) -> np.ndarray:
    """Per seed, whether training collapsed: the last loss window sits above the
    seed's lowest window by more than ``UNSTABLE_RISE`` of its fall (first window
    minus lowest). ``windows`` is [seeds, windows] of a seed's loss window means."""
    windows = np.asarray(windows, dtype=float)
    if windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError(
            f"windows must be [seeds, windows >= 2], got shape {windows.shape}"
        )
    best = windows.min(axis=1)
    fall = np.maximum(windows[:, 0] - best, 1e-12)
    return (windows[:, -1] - best) > UNSTABLE_RISE * fall


# A random search's factors (chapter 6): which one explains the response.

FactorKind = Literal["categorical", "numeric", "log"]


@dataclass(frozen=True)
class FactorFit:
    """A main-effects least-squares fit of one response on the factors of a search."""

    r_squared: float  # of the full fit
    importance: dict[str, float]  # factor -> drop in R^2 when it is left out
    # factor -> {level: effect vs the first level} or {"slope": per unit / per decade}
    effects: dict[str, dict[str, float]]


def factor_importance(
    rows: Sequence[Mapping[str, object]],
    response: str,
    factors: Mapping[str, FactorKind],
) -> FactorFit:
    """How much each factor explains: the drop in R^2 of a main-effects least-squares
    fit without it.

    Categorical factors enter as one-hot columns (levels sorted as strings; effects
    relative to the first), ``numeric`` as they are, ``log`` as log10 (slope per
    decade). The drops need not add up to the full R^2 (factors can share explained
    variance).
    """
    if not rows:
        raise ValueError("rows must hold at least one row")
    for name, kind in factors.items():
        if kind not in get_args(FactorKind):
            raise ValueError(
                f"factor {name!r} has kind {kind!r}; allowed: {get_args(FactorKind)}"
            )
        if any(name not in row for row in rows):
            raise ValueError(f"factor {name!r} is missing from some rows")
    y = np.array([float(row[response]) for row in rows])  # type: ignore[arg-type]
    columns = {name: factor_columns(rows, name, kind) for name, kind in factors.items()}
    full, coef = _fit(y, [block for block, _ in columns.values()])
    importance = {
        name: full
        - _fit(y, [block for other, (block, _) in columns.items() if other != name])[0]
        for name in factors
    }
    effects, start = {}, 1
    for name, (block, labels) in columns.items():
        effects[name] = {
            label: float(c)
            for label, c in zip(labels, coef[start : start + block.shape[1]])
        }
        start += block.shape[1]
    return FactorFit(r_squared=full, importance=importance, effects=effects)


def factor_columns(
    rows: Sequence[Mapping[str, object]], name: str, kind: FactorKind
) -> tuple[np.ndarray, list[str]]:
    """One factor's design columns over ``rows`` and their labels: one-hot columns
    for a categorical factor (levels sorted as strings, the first left out), else one
    column (log10 for ``log``) labelled ``"slope"``."""
    values = [row[name] for row in rows]
    if kind == "categorical":
        levels = sorted({str(v) for v in values})
        block = np.array(
            [[float(str(v) == level) for level in levels[1:]] for v in values]
        ).reshape(len(rows), -1)
        return block, levels[1:]
    numbers = np.array([float(v) for v in values])  # type: ignore[arg-type]
    return (np.log10(numbers) if kind == "log" else numbers)[:, None], ["slope"]


def _fit(y: np.ndarray, blocks: Sequence[np.ndarray]) -> tuple[float, np.ndarray]:
    X = np.concatenate([np.ones((len(y), 1)), *blocks], axis=1)
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    residual = y - X @ coef
    total = ((y - y.mean()) ** 2).sum()
    return (float(1.0 - (residual**2).sum() / total) if total > 0 else 0.0), coef


__all__ = [
    "LEVEL",
    "MIN_PLATEAU_STEPS",
    "PLATEAU_TOLERANCE",
    "TOST_ALPHA",
    "UNSTABLE_RISE",
    "FactorFit",
    "FactorKind",
    "Interval",
    "converged",
    "equivalent",
    "factor_columns",
    "factor_importance",
    "loss_plateau",
    "loss_windows",
    "paired_interval",
    "pooled",
    "t_interval",
    "unstable_seeds",
    "rising",
]
