"""Effects at the reference tier: a claim's paired effect, or a level, in every cell of
a sensitivity grid and at every checkpoint, with its t-interval over seeds, whether the
trainings had converged, and how many of their seeds collapsed.

A claim compares a *treated* configuration with a *control* (post-norm against no norm,
dropout against none) on the same seeds. Every other field that varies in the sweep
(target kind, init, learning rate...) spans the cells of the sensitivity grid; every
checkpoint is a budget. :func:`paired_effects` gives, for each cell and budget, the
paired t-interval of ``sign * (control - treated)`` over seeds (so > 0 means the claim
holds); :func:`level_effects` a level against a bar. The claim itself decides them
(:meth:`lengthgen_lite.runs.claims.Claim.decide`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .claims import Effect
from .results import Results
from .spec import CONFIG_FIELDS
from .stats import (
    MIN_PLATEAU_STEPS,
    converged,
    loss_windows,
    paired_interval,
    rising,
    t_interval,
    unstable_seeds,
)

# a live run's loss curve is cut into as many windows as a stored sweep keeps, each at
# least LIVE_WINDOW_STEPS long: a window's mean over fewer steps carries enough batch
# noise (sampled targets) to read as a collapse (a 400-step search run, 7-step windows)
LIVE_WINDOWS = 60
LIVE_WINDOW_STEPS = 50


def training_state(results: Results, config: int, step: int) -> tuple[bool, np.ndarray]:
    """Whether a configuration's seed-mean loss was flat at ``step`` (the plateau test,
    which a rising loss fails), and which of its seeds had collapsed by then: from a
    stored sweep's loss windows, or from a live run's loss curve. A configuration with
    neither (a live run loaded from disk): not converged, no seed flagged."""
    if config in results.stored_training:
        training = results.stored_training[config]
        ends = np.asarray(training["window_ends"])
        windows = np.asarray(training["loss_windows"], dtype=float)[:, ends <= step]
        flat = bool(training["converged"][str(step)]) and not rising(
            windows, ends[ends <= step], step
        )
        return flat, unstable_seeds(windows)
    if config in results.live_training:
        loss = results.live_training[config].loss[:step]
        flat = len(loss) >= MIN_PLATEAU_STEPS and converged(loss, len(loss))
        return flat, collapsed_in(loss)
    return False, np.zeros(len(results.seeds), dtype=bool)


def collapsed_in(loss: np.ndarray) -> np.ndarray:
    """Per seed, whether a live training's loss curve ``loss`` [steps, K] ended well
    above its best (:func:`~lengthgen_lite.runs.stats.unstable_seeds` on windows of at
    least ``LIVE_WINDOW_STEPS`` steps, at most as many as a stored sweep keeps)."""
    count = min(LIVE_WINDOWS, max(2, len(loss) // LIVE_WINDOW_STEPS))
    _, windows = loss_windows(loss, count)
    return unstable_seeds(windows)


def collapsed(
    results: Results, seeds: Sequence[int] | None = None, **where: object
) -> np.ndarray:
    """Per seed (of ``seeds``, default the configuration's own), whether the one
    configuration matching ``where`` collapsed in training (:func:`training_state` at
    its last step). A cell with such a seed is judged inconclusive."""
    config = results.select(**where)[0]["config"]
    flags = training_state(results, config, results.configs[config].steps)[1]
    order = results.seeds_of(**where)
    return np.array(
        [bool(flags[order.index(seed)]) for seed in (order if seeds is None else seeds)]
    )


def _axes(results: Results, pinned: set[str], where: Mapping[str, Any]) -> list[str]:
    """The fields that span a claim's cells: those of the sweep that vary among the
    configurations ``where`` selects, less the ``pinned`` ones (a field that varies only
    between tasks, as chapter 7's learning rate, is not a cell of either task)."""
    chosen = [
        c
        for c in results.configs
        if all(getattr(c, k) == v for k, v in where.items() if k in CONFIG_FIELDS)
    ]
    return [
        k
        for k in results.spec.varying()
        if k not in pinned and len({getattr(c, k) for c in chosen}) > 1
    ]


def paired_effects(
    results: Results,
    metric: str,
    treated: Mapping[str, Any],
    control: Mapping[str, Any],
    sign: int = 1,
    **where: Any,
) -> list[Effect]:
    """``sign * (metric[control] - metric[treated])`` per cell and checkpoint step, over
    the seeds both share. ``metric`` is a column of
    :meth:`~lengthgen_lite.runs.results.Results.values` ("tv_beyond"); ``where`` pins
    more fields (``variant="ema"``)."""
    if sign not in (1, -1):
        raise ValueError(f"sign={sign!r} is invalid; allowed: 1 or -1")
    if unknown := set(treated) ^ set(control):
        raise ValueError(
            f"treated and control must set the same fields; {sorted(unknown)} differ"
        )
    pinned = set(treated) | set(where)
    axes = _axes(results, pinned, where)
    steps = sorted({r["step"] for r in results.rows})
    cells = {
        tuple(getattr(c, k) for k in axes)
        for c in results.configs
        if all(getattr(c, k) == v for k, v in where.items() if k in CONFIG_FIELDS)
    }
    effects = []
    for values in sorted(cells, key=str):
        cell = dict(zip(axes, values))
        for step in steps:
            sides = []
            for side in (control, treated):
                rows = results.select(**cell, **side, **where, step=step)
                configs = {r["config"] for r in rows}
                if not configs and results.provenance.get("missing"):
                    break  # a partial sweep: this side is not stored yet
                if len(configs) != 1:
                    raise ValueError(
                        f"{cell | dict(side)} at step {step} matches {len(configs)} "
                        "configurations; pin the other fields with where"
                    )
                sides.append(configs.pop())
            if len(sides) < 2:
                continue
            a, b = (results.values(metric, config=i, step=step, **where) for i in sides)
            flat, collapsed = zip(*(training_state(results, i, step) for i in sides))
            effects.append(
                Effect(
                    cell,
                    step,
                    paired_interval(sign * a, sign * b),
                    all(flat),
                    int(np.logical_or(*collapsed).sum()),
                )
            )
    return effects


def level_effects(
    results: Results,
    metric: str | Callable[..., np.ndarray],
    minus: float = 0.0,
    **where: Any,
) -> list[Effect]:
    """``metric - minus`` per cell (every varying field not in ``where``) and
    checkpoint step, with its t-interval over seeds: a claim about a level ("TV at
    the longest length is above 0.5"), not a comparison. ``metric`` is a column of
    :meth:`~lengthgen_lite.runs.results.Results.values`, or a function
    ``(results, **where) -> [seeds]`` for a quantity derived from several."""
    value = (
        (lambda r, **w: r.values(metric, **w)) if isinstance(metric, str) else metric
    )
    axes = _axes(results, set(where), where)
    effects = []
    for index, config in enumerate(results.configs):
        if not results.select(config=index, **where):
            continue
        cell = {k: getattr(config, k) for k in axes}
        for step in sorted({r["step"] for r in results.select(config=index)}):
            values = value(results, config=index, step=step, **where) - minus
            flat, collapsed = training_state(results, index, step)
            effects.append(
                Effect(cell, step, t_interval(values), flat, int(collapsed.sum()))
            )
    return effects


def unstable_counts(results: Results, **where: Any) -> dict[int, int]:
    """Configuration index -> seeds whose training collapsed (at the last stored
    step), for the configurations matching ``where``."""
    out = {}
    for index in sorted({r["config"] for r in results.select(**where)}):
        last = max(r["step"] for r in results.select(config=index))
        out[index] = int(training_state(results, index, last)[1].sum())
    return out


__all__ = [
    "collapsed",
    "collapsed_in",
    "level_effects",
    "paired_effects",
    "training_state",
    "unstable_counts",
]
