"""The scorecard's claims: each declared once, with its smallest effect of interest, and
one verdict protocol for the live and the reference tier.

A :class:`Claim` is declared in its chapter module, before anything is measured: the
statement and its source tag, the metric and its unit, the signed effect (``> 0``
means the claim's direction), the smallest effect of interest (SESOI) and the cells of
the grid it is judged over. Everything else derives from it: the notebook's assert
(:meth:`Claim.require`), the margin recorded for ``make margins``, the live and the
reference scorecard rows (:meth:`Claim.decide`) and the glued text.

The protocol (:func:`cell_word`, :func:`claim_word`), for one cell's effect with its
95% paired t-interval over seeds:

- **helps**: the interval is above 0 and the estimate is at least the SESOI;
- **equivalent**: the equivalence test (TOST at 5% each side, i.e. the 90% interval)
  puts the effect inside ``±SESOI``;
- **hurts**: the interval is below 0 (and the effect is not shown to be negligible);
- **inconclusive**: none of these, or a configuration with an unstable (collapsed)
  seed: a cell whose training collapsed cannot be judged either way.

A claim is **reproduced** if it helps in every cell, **reversed** if it hurts in every
cell, **no effect** if it is equivalent in every cell, **inconclusive** if no cell can
be judged, and **mixed** otherwise, always with the counts. Beside the counts stands the
pooled, cell-stratified estimate (:func:`~lengthgen_lite.runs.stats.pooled`). A claim
whose pooled effect moved between the last two budgets by more than its interval's
half-width, and by at least the SESOI, is *still moving* (ten seeds in many cells make
intervals so narrow that a move far below any effect of interest would count without
the second condition). Rows the book builds rather than measures are
**demonstration**; rows a laptop cannot decide are **not testable here**.

A claim that an effect is *at most* a bound (``test="at most"``: "sharpening gains
at most 0.01 of TV", chapter 8) is judged one-sided, as one side of TOST: a cell is
**below** when its 90% interval's upper end (a one-sided test at 5%) is under the
SESOI, **above** when its 95% interval's lower end is over it, and **inconclusive**
otherwise. Every cell below is **reproduced**, every cell above **reversed**.

Thresholds come from the declared SESOI, never from a seed set: a bound moved after
looking at a run is a defect (CONTRIBUTING.md).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

import numpy as np

from ..core.seeding import seed_offset
from ..core.validation import require_choice, require_number
from .stats import TOST_ALPHA, Interval, equivalent, pooled, t_interval

VERDICTS = (
    "reproduced",
    "mixed",
    "no effect",
    "reversed",
    "inconclusive",
    "demonstration",
    "not testable here",
)
# a difference claim's cell words, then an "at most" claim's ("inconclusive": both)
CELL_WORDS = ("helps", "equivalent", "hurts", "inconclusive", "below", "above")
Kind = Literal["measured", "demonstration", "not testable here"]
KINDS: tuple[str, ...] = get_args(Kind)
# what a measured claim asserts of its effect: a difference of at least the SESOI (or
# none, or a reversal), or an effect of at most the SESOI (one-sided)
Test = Literal["difference", "at most"]
TESTS: tuple[str, ...] = get_args(Test)
Tier = Literal["live", "reference"]
MARGINS_FILE_VARIABLE = "LENGTHGEN_MARGINS_FILE"

#: The book's smallest difference of interest in a predicted distribution: a hundredth
#: of the probability mass, in TV. Declared once, before looking, for every claim and
#: comparison on TV (chapters 1, 5, 6 and 7), never taken from a seed set.
TV_SESOI = 0.01


@dataclass(frozen=True)
class Effect:
    """One cell of a claim's grid at one budget: the effect (``> 0``: the claim's
    direction) with its t-interval over seeds."""

    cell: dict[str, Any]
    step: int
    interval: Interval
    converged: bool = False  # both trainings' mean loss was flat (reference only)
    unstable: int = 0  # seeds whose training collapsed, in either configuration

    @classmethod
    def of(
        cls,
        values: Sequence[float] | np.ndarray,
        step: int,
        *,
        unstable: int = 0,
        **cell: Any,
    ) -> Effect:
        """The effect of per-seed ``values`` (a live run's, already signed), with how
        many of its seeds collapsed in training
        (:func:`~lengthgen_lite.runs.compare.collapsed`)."""
        return cls(dict(cell), step, t_interval(values), unstable=int(unstable))


def cell_word(effect: Effect, sesoi: float, test: Test = "difference") -> str:
    """One cell's word under the protocol (see the module docstring): helps,
    equivalent, hurts or inconclusive for a difference; below, above or inconclusive
    for ``test="at most"``."""
    require_choice("test", test, TESTS)
    interval = effect.interval
    if effect.unstable:
        return "inconclusive"
    if test == "at most":
        if interval.at_level(1 - 2 * TOST_ALPHA).high < sesoi:
            return "below"
        if interval.low > sesoi:
            return "above"
        return "inconclusive"
    if interval.low > 0 and interval.mean >= sesoi:
        return "helps"
    if equivalent(interval, sesoi):
        return "equivalent"
    if interval.high < 0:
        return "hurts"
    return "inconclusive"


def claim_word(words: Sequence[str]) -> str:
    """The claim's word from its cells' words."""
    if not words:
        raise ValueError("words is empty; allowed: at least one cell")
    for word in words:
        require_choice("cell word", word, CELL_WORDS)
    for cell, claim in (
        ("helps", "reproduced"),
        ("below", "reproduced"),
        ("hurts", "reversed"),
        ("above", "reversed"),
        ("equivalent", "no effect"),
        ("inconclusive", "inconclusive"),
    ):
        if all(w == cell for w in words):
            return claim
    return "mixed"


def at_step(effects: Sequence[Effect], step: int | None = None) -> list[Effect]:
    """The cells at ``step`` (default: the last budget)."""
    last = max(e.step for e in effects) if step is None else step
    return [e for e in effects if e.step == last]


@dataclass(frozen=True)
class Margin:
    """How far one asserted claim is from flipping: ``slack`` (by how much its deciding
    inequality holds) in units of ``spread`` (how much that value moves with the
    seeds); below 1, the claim sits on a knife edge."""

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


def _record(margin: Margin) -> None:
    path = os.environ.get(MARGINS_FILE_VARIABLE)
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(json.dumps(asdict(margin)) + "\n")


def load_margins(path: str | pathlib.Path) -> list[Margin]:
    """Every margin recorded in one file (one JSON object per line)."""
    with open(path, encoding="utf-8") as file:
        return [Margin(**json.loads(line)) for line in file if line.strip()]


@dataclass(frozen=True)
class Decision:
    """A claim decided at one tier (live or reference): its word, the cells' words and
    counts at the last budget, the pooled estimate, and whether it is still moving."""

    claim: Claim
    tier: str  # "live" or "reference"
    word: str
    effects: tuple[Effect, ...]
    words: tuple[str, ...]  # the cells' words at the last budget, in ``final`` order
    pooled: Interval | None
    still_moving: bool
    detail: str = ""

    @property
    def final(self) -> list[Effect]:
        return at_step(self.effects) if self.effects else []

    @property
    def counts(self) -> dict[str, int]:
        """Cell word -> number of cells, for the words that occur."""
        seen = Counter(self.words)
        return {w: seen[w] for w in CELL_WORDS if seen[w]}

    @property
    def unstable(self) -> int:
        return sum(e.unstable for e in self.final)

    def counts_text(self) -> str:
        """``helps 4/32, hurts 28/32``."""
        total = len(self.words)
        return ", ".join(f"{w} {n}/{total}" for w, n in self.counts.items())

    @property
    def number(self) -> str:
        """The key number: the pooled effect with its interval, the counts, the SESOI,
        the unstable seeds and whether it is still moving."""
        if self.pooled is None:
            return self.detail
        claim, final = self.claim, self.final
        sizes = sorted({e.interval.n for e in final})
        n = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        budget = f", {final[0].step} steps" if final[0].step else ""
        parts = [
            f"{claim.effect} ({claim.unit}): {self.pooled.text(3, signed=True)} "
            f"pooled over {len(final)} cell{'s' * (len(final) > 1)} x {n} "
            f"{claim.replicates}{budget}",
            self.counts_text(),
            f"SESOI {claim.sesoi:g}",
        ]
        if self.unstable:
            parts.append(f"{self.unstable} unstable seed{'s' * (self.unstable > 1)}")
        if self.still_moving:
            parts.append("still moving")
        text = "; ".join(parts)
        return f"{self.detail}; {text}" if self.detail else text

    @property
    def budget(self) -> str:
        """The word at every budget, and whether the effect is still moving."""
        steps = sorted({e.step for e in self.effects})
        if steps == [0]:  # measured on a fixed model (step 0): nothing was trained
            return "no training budget: a fixed model"
        if len(steps) < 2:
            return f"one budget ({steps[0]} steps)" if steps else "no budget"
        sesoi, test = self.claim.sesoi, self.claim.test
        words = {
            s: claim_word([cell_word(e, sesoi, test) for e in at_step(self.effects, s)])
            for s in steps
        }
        moving = "; still moving" if self.still_moving else "; stable"
        if len(set(words.values())) == 1:
            return f"the same verdict at {', '.join(map(str, steps))} steps{moving}"
        per_step = "; ".join(f"{s} steps: {w}" for s, w in words.items())
        return f"flips with budget: {per_step}{moving}"

    def cells_with(self, word: str) -> list[dict[str, Any]]:
        """The cells (at the last budget) whose word is ``word``."""
        require_choice("word", word, CELL_WORDS)
        return [e.cell for e, w in zip(self.final, self.words) if w == word]


@dataclass(frozen=True)
class Claim:
    """One scorecard row, declared once in its chapter module before looking.

    ``effect`` names the signed quantity (``"no norm minus post-norm"``: above 0 the
    claim holds), in ``unit`` of ``metric``; ``sesoi`` is the smallest effect of
    interest in that unit; ``cells`` the grid axes it is judged over. ``test`` "at
    most" makes the SESOI a bound the effect stays under ("gains at most 0.01 of TV"),
    judged one-sided (the module docstring).
    """

    key: str  # "ch5-score-postnorm", as book/scorecard.md names it
    statement: str
    source: str  # "2510.08341 v2 [paper]"; tags as in book/sources.md
    metric: str
    unit: str
    effect: str
    sesoi: float | None  # None only for a demonstration or a row not testable here
    cells: tuple[str, ...] = ()
    kind: Kind = "measured"
    # what the interval is over: trained seeds, or e.g. the input sequences of a fixed
    # pretrained model (whose effects then carry step 0: no training budget)
    replicates: str = "seeds"
    test: Test = "difference"

    def __post_init__(self) -> None:
        if not self.key.startswith("ch") or "-score-" not in self.key:
            raise ValueError(
                f"a claim key looks like 'ch5-score-postnorm', got {self.key!r}"
            )
        require_choice("kind", self.kind, KINDS)
        require_choice("test", self.test, TESTS)
        if self.kind == "measured" or self.sesoi is not None:
            require_number("sesoi", self.sesoi, 0.0, strict=True)
        if not any(tag in self.source for tag in ("[paper]", "[secondary]", "[ours]")):
            raise ValueError(
                f"{self.key}: source {self.source!r} carries no tag; allowed: "
                "[paper], [secondary], [ours]"
            )

    def decide(
        self, effects: Sequence[Effect], tier: Tier = "live", detail: str = ""
    ) -> Decision:
        """The claim's word from its cells (every budget; the last decides)."""
        require_choice("tier", tier, get_args(Tier))
        if self.kind != "measured":
            raise ValueError(
                f"{self.key} is a {self.kind!r} claim: use demonstrate() or "
                "not_testable(); decide() is for measured claims"
            )
        if not effects:
            raise ValueError(
                f"{self.key}: no cell to decide it (a sweep in progress stores no "
                "cell with both sides yet); allowed: at least one effect"
            )
        final = at_step(effects)
        words = tuple(cell_word(e, self.sesoi, self.test) for e in final)
        estimate = pooled([e.interval for e in final])
        steps = sorted({e.step for e in effects})
        moving = False
        if len(steps) > 1:
            before = pooled([e.interval for e in at_step(effects, steps[-2])])
            moved = abs(estimate.mean - before.mean)
            moving = moved > estimate.half_width and moved >= self.sesoi
        return Decision(
            self,
            tier,
            claim_word(words),
            tuple(effects),
            words,
            estimate,
            moving,
            detail,
        )

    def demonstrate(
        self,
        margins: Sequence[float] | np.ndarray,
        detail: str,
        spread: float | None = None,
    ) -> Decision:
        """A row the book builds: asserts that the construction holds (every margin
        ``> 0``), records its margin, and returns the word "demonstration"."""
        if self.kind != "demonstration":
            raise ValueError(f"{self.key} is {self.kind!r}, not a demonstration")
        self.holds(margins, spread=spread)
        return Decision(self, "live", "demonstration", (), (), None, False, detail)

    def not_testable(self, reason: str) -> Decision:
        """A row a laptop cannot decide, with the reason as its number."""
        if self.kind != "not testable here":
            raise ValueError(f"{self.key} is {self.kind!r}, not 'not testable here'")
        return Decision(self, "live", "not testable here", (), (), None, False, reason)

    def require(self, decision: Decision, words: str | Collection[str]) -> None:
        """Assert that ``decision`` earned one of ``words`` (the chapter's reading of
        its own run) and, where ``words`` is one decisive word ("reproduced",
        "reversed" or "no effect"), record its margin: how many standard errors the
        weakest cell clears its bar by."""
        allowed = (words,) if isinstance(words, str) else tuple(words)
        for word in allowed:
            require_choice("word", word, VERDICTS)
        if decision.claim.key != self.key:
            raise ValueError(f"decision is {decision.claim.key!r}, not {self.key!r}")
        # a margin means "how far from losing this one word": recorded where the chapter
        # claims one decisive word, not where it allows a set (its word may move)
        decisive = ("reproduced", "reversed", "no effect")
        if allowed == (decision.word,) and decision.word in decisive:
            slack, spread = self._bar(decision)
            margin = Margin(
                self.key,
                f"{decision.tier}: {decision.word} ({self.statement})",
                "verdict",
                slack,
                spread,
                sum(e.interval.n for e in decision.final),
                seed_offset(),
            )
            _record(margin)
        assert decision.word in allowed, (
            f"{self.key} ({decision.tier}): {decision.word!r}, expected "
            f"{' or '.join(allowed)}; {decision.number}"
        )

    def _bar(self, decision: Decision) -> tuple[float, float]:
        """(slack, standard error) of the cell closest to losing its word."""
        closest: tuple[float, float] | None = None
        for effect in decision.final:
            i = effect.interval
            narrow = i.at_level(1 - 2 * TOST_ALPHA)
            if self.test == "at most" and decision.word == "reproduced":
                slack = self.sesoi - narrow.high
            elif self.test == "at most":  # reversed: above the bound
                slack = i.low - self.sesoi
            elif decision.word == "reproduced":
                slack = min(i.low, i.mean - self.sesoi)
            elif decision.word == "reversed":
                slack = -i.high
            else:
                slack = min(self.sesoi - narrow.high, narrow.low + self.sesoi)
            if closest is None or slack / max(i.se, 1e-12) < closest[0] / max(
                closest[1], 1e-12
            ):
                closest = (float(slack), float(i.se))
        assert closest is not None
        return closest

    def holds(
        self,
        margins: Sequence[float] | np.ndarray,
        spread: float | None = None,
    ) -> Margin:
        """Assert a construction whose per-case ``margins`` are positive where it
        holds, every one of them; record the smallest with its spread (the per-seed
        standard deviation, or ``spread`` for one value with a known error)."""
        values = np.atleast_1d(np.asarray(margins, dtype=float))
        if values.ndim > 2 or values.size == 0 or not np.isfinite(values).all():
            raise ValueError(
                "margins must be a non-empty 1-D or 2-D array of finite values, "
                f"got {values!r}"
            )
        if spread is None:
            if values.shape[-1] < 2:
                raise ValueError(
                    "one margin has no seed spread: pass spread= (its sampling error)"
                )
            rows = values.reshape(-1, values.shape[-1])
            spread = float(np.sqrt(rows.var(axis=1, ddof=1).mean()))
        require_number("spread", spread, 0.0)
        slack = float(values.min())
        margin = Margin(
            self.key,
            self.statement,
            "every case",
            slack,
            float(spread),
            int(values.size),
            seed_offset(),
        )
        _record(margin)
        assert slack > 0, (
            f"{self.key}: {self.statement} does not hold: slack {slack:.4g}, "
            f"margins {np.round(values, 4)}"
        )
        return margin


def tally(decisions: Sequence[Decision]) -> dict[str, int]:
    """Verdict -> count, in ``VERDICTS`` order, for the words that occur."""
    seen = Counter(d.word for d in decisions)
    return {w: seen[w] for w in VERDICTS if seen[w]}


__all__ = [
    "CELL_WORDS",
    "KINDS",
    "MARGINS_FILE_VARIABLE",
    "TESTS",
    "TV_SESOI",
    "VERDICTS",
    "Claim",
    "Decision",
    "Effect",
    "Margin",
    "at_step",
    "cell_word",
    "claim_word",
    "load_margins",
    "tally",
]
