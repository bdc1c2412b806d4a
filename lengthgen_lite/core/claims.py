"""Asserted claims with their margins.

A scorecard claim is an inequality between measured quantities, and a chapter asserts
it. Whether it is a claim or a coincidence of the seeds depends on how far it is from
flipping: its *slack* (by how much the inequality holds) in units of its *spread* (how
much the quantity moves from seed to seed). A claim with less than one spread of slack
can flip on the next seeds or the next CPU.

``holds`` asserts a claim from its per-seed margins (positive = the claim holds for that
seed) and, when ``LENGTHGEN_MARGINS_FILE`` names a file, appends the margin to it as one
JSON line. The notebook tests set that variable for every run (stored seeds and new
seeds), and ``make margins`` prints the table of every claim's slack in spreads on both.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal, get_args

import numpy as np

from .seeding import seed_offset

MARGINS_FILE_VARIABLE = "LENGTHGEN_MARGINS_FILE"
Rule = Literal["every seed", "mean"]
RULES: tuple[str, ...] = get_args(Rule)


@dataclass(frozen=True)
class Margin:
    """How far one asserted claim is from flipping.

    ``slack`` is the deciding value (the smallest per-seed margin for "every seed", the
    mean for "mean"), ``spread`` how far that value moves with the seeds (the per-seed
    standard deviation, or the standard error of the mean, or a sampling error the
    caller states), ``in_spreads`` their ratio: below 1, the claim sits on a knife edge.
    """

    key: str
    statement: str
    rule: str
    slack: float
    spread: float
    n: int
    seed_offset: int

    @property
    def in_spreads(self) -> float:
        if self.spread > 0:
            return self.slack / self.spread
        return math.inf if self.slack > 0 else -math.inf


def seed_spread(values: Sequence[float] | np.ndarray) -> float:
    """The standard deviation over seeds (ddof=1). For [configurations, seeds], the
    pooled spread within configurations: how far a value moves when only the seed
    changes, not the setting."""
    array = np.asarray(values, dtype=float)
    if array.ndim == 1:
        array = array[None]
    if array.ndim != 2 or array.shape[1] < 2:
        raise ValueError(
            "need at least 2 seeds per row ([seeds] or [configurations, "
            f"seeds]), got shape {array.shape}"
        )
    return float(np.sqrt(array.var(axis=1, ddof=1).mean()))


def holds(
    key: str,
    statement: str,
    margins: Sequence[float] | np.ndarray,
    *,
    rule: Rule = "every seed",
    spread: float | None = None,
) -> Margin:
    """Assert a claim whose per-seed ``margins`` are positive where it holds; record its
    margin.

    ``margins`` is [seeds], or [configurations, seeds] for a claim over several
    settings. ``rule="every seed"``: every margin must be positive; the spread is
    :func:`seed_spread`, how far one seed's margin moves. ``rule="mean"``: their mean
    must be positive; the spread is that of the mean, :func:`seed_spread` over the
    square root of the number of margins. ``spread`` overrides it, for a claim decided
    by one value with a known sampling error.
    """
    values = np.asarray(margins, dtype=float)
    if values.ndim == 0:
        values = values[None]
    if rule not in RULES:
        raise ValueError(f"rule={rule!r} is unknown; allowed: {RULES}")
    if values.ndim > 2 or values.size == 0 or not np.isfinite(values).all():
        raise ValueError(
            "margins must be a non-empty 1-D or 2-D array of finite values, "
            f"got {values!r}"
        )
    if spread is None:
        if values.shape[-1] < 2:
            raise ValueError(
                "one margin has no seed spread: pass spread= (e.g. its sampling error)"
            )
        spread = seed_spread(values) / (np.sqrt(values.size) if rule == "mean" else 1.0)
    if not spread >= 0:
        raise ValueError(f"spread must be non-negative, got {spread!r}")
    slack = float(values.min() if rule == "every seed" else values.mean())
    margin = Margin(
        key, statement, rule, slack, float(spread), int(values.size), seed_offset()
    )
    _record(margin)
    assert slack > 0, (
        f"{key}: {statement} does not hold ({rule}): slack {slack:.4g}, "
        f"margins {np.round(values, 4)}"
    )
    return margin


def _record(margin: Margin) -> None:
    path = os.environ.get(MARGINS_FILE_VARIABLE)
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(json.dumps(asdict(margin)) + "\n")


def load_margins(path: str | pathlib.Path) -> list[Margin]:
    """Every margin recorded in one file (one JSON object per line)."""
    with open(path, encoding="utf-8") as file:
        return [Margin(**json.loads(line)) for line in file if line.strip()]
