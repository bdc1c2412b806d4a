"""Claims at the reference scale: a paired effect, with its confidence interval, in
every cell of a sensitivity grid and at every checkpoint, and the verdict it earns.

A claim compares a *treated* configuration with a *control* (post-norm against no norm,
dropout against none) on the same seeds. Every other field that varies in the sweep
(target kind, init, learning rate...) spans the cells of the sensitivity grid; every
checkpoint is a budget. :func:`paired_effects` gives, for each cell and budget, the
paired bootstrap interval of ``sign * (control - treated)`` over seeds (so > 0 means the
claim holds) and whether both trainings had converged.

:func:`reference_verdict` turns the cells at one budget into a word: "reproduced" if
the interval is above zero in every cell, "partly reproduced" if in some, "robust null"
if it contains zero in every cell (no effect anywhere in the grid), "not reproduced" if
it is below zero somewhere and above nowhere. :func:`budget_note` says whether that
word changes with the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .results import Results
from .scorecard import Claim
from .spec import CONFIG_FIELDS
from .stats import Interval, bootstrap, paired_bootstrap


@dataclass(frozen=True)
class Effect:
    """One cell of a sensitivity grid at one budget."""

    cell: dict[str, Any]  # the other varying fields, fixed in this cell
    step: int
    interval: Interval  # sign * (control - treated), paired over seeds
    converged: bool  # both trainings' seed-mean loss had plateaued by ``step``


def _converged(results: Results, config: int, step: int) -> bool:
    if config not in results.training:  # a live run: convergence is not recorded
        return False
    return bool(results.training[config]["converged"][str(step)])


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
    axes = [k for k in results.spec.varying() if k not in pinned]
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
            interval = paired_bootstrap(sign * a, sign * b)
            ok = all(_converged(results, i, step) for i in sides)
            effects.append(Effect(cell, step, interval, ok))
    return effects


def level_effects(
    results: Results,
    metric: str | Callable[..., np.ndarray],
    minus: float = 0.0,
    **where: Any,
) -> list[Effect]:
    """``metric - minus`` per cell (every varying field not in ``where``) and
    checkpoint step, with its bootstrap interval over seeds: a claim about a level
    ("TV at the longest length is above 0.5"), not a comparison. ``metric`` is a column
    of :meth:`~lengthgen_lite.runs.results.Results.values`, or a function
    ``(results, **where) -> [seeds]`` for a quantity derived from several."""
    value = (
        (lambda r, **w: r.values(metric, **w)) if isinstance(metric, str) else metric
    )
    axes = [k for k in results.spec.varying() if k not in where]
    effects = []
    for index, config in enumerate(results.configs):
        if not results.select(config=index, **where):
            continue
        cell = {k: getattr(config, k) for k in axes}
        for step in sorted({r["step"] for r in results.select(config=index)}):
            values = value(results, config=index, step=step, **where) - minus
            ok = _converged(results, index, step)
            effects.append(Effect(cell, step, bootstrap(values), ok))
    return effects


def reference_verdict(effects: Sequence[Effect]) -> str:
    """The word the cells earn (see the module docstring)."""
    if not effects:
        raise ValueError("effects is empty; allowed: at least one cell")
    above = [e.interval.low > 0 for e in effects]
    below = [e.interval.high < 0 for e in effects]
    if all(above):
        return "reproduced"
    if any(above):
        return "partly reproduced"
    if not any(below):
        return "robust null"
    return "not reproduced"


def at_step(effects: Sequence[Effect], step: int | None = None) -> list[Effect]:
    """The cells at ``step`` (default: the last budget)."""
    last = max(e.step for e in effects) if step is None else step
    return [e for e in effects if e.step == last]


def budget_note(effects: Sequence[Effect]) -> str:
    """ "holds at every budget" or, e.g., "1000 steps: partly reproduced; 3000 steps:
    reproduced": the verdict per budget when it changes."""
    steps = sorted({e.step for e in effects})
    words = {s: reference_verdict(at_step(effects, s)) for s in steps}
    if len(set(words.values())) == 1:
        return f"the same verdict at {', '.join(map(str, steps))} steps"
    return "flips with budget: " + "; ".join(
        f"{s} steps: {w}" for s, w in words.items()
    )


def effect_range(effects: Sequence[Effect], digits: int = 3) -> str:
    """The smallest and largest cell, each with its interval: the claim's key number."""
    ordered = sorted(effects, key=lambda e: e.interval.mean)
    low, high = ordered[0].interval, ordered[-1].interval
    return f"{low.text(digits)} to {high.text(digits)}"


def converged_share(effects: Sequence[Effect]) -> float:
    return float(np.mean([e.converged for e in effects]))


@dataclass(frozen=True)
class ReferenceClaim:
    """A scorecard row at the reference scale: the verdict at the last budget, its key
    number, whether the verdict changes with budget, and every cell behind it."""

    claim: Claim  # key as the live row's (e.g. "ch5-score-postnorm")
    budget: str
    effects: tuple[Effect, ...]


def reference_claim(key: str, effects: Sequence[Effect], what: str) -> ReferenceClaim:
    """The row for ``effects`` (from :func:`paired_effects` or :func:`level_effects`);
    ``what`` names the effect in the number text ("TV beyond L, no norm - post")."""
    if not effects:
        raise ValueError(
            f"{key}: no cell to decide it (a sweep in progress stores no cell with "
            "both sides yet); allowed: at least one effect"
        )
    final = at_step(effects)
    converged = sum(e.converged for e in final)
    # a claim of several parts (cell label "part") gives each part's range
    parts = dict.fromkeys(e.cell.get("part") for e in final)
    ranges = "; ".join(
        f"{part + ': ' if part else ''}from "
        + effect_range([e for e in final if e.cell.get("part") == part])
        for part in parts
    )
    number = (
        f"{what}; {final[0].interval.n} seeds, {final[0].step} steps, "
        f"{len(final)} cells, mean [95% CI] {ranges}; "
        f"converged in {converged} of {len(final)} cells"
    )
    claim = Claim(key, reference_verdict(final), number)
    return ReferenceClaim(claim, budget_note(effects), tuple(effects))


__all__ = [
    "Effect",
    "ReferenceClaim",
    "level_effects",
    "reference_claim",
    "at_step",
    "budget_note",
    "converged_share",
    "effect_range",
    "paired_effects",
    "reference_verdict",
]
