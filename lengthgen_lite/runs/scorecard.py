"""The scorecard's vocabulary: the words a claim can earn, and a ``Claim`` row a chapter
returns.

Verdicts are computed from the same quantities a chapter asserts, so the scorecard
cannot drift from the data; each chapter's ``scorecard(...)`` returns its ``Claim`` rows
and the notebook glues them (``lengthgen_lite.viz.common.glue_claims``) for
``book/scorecard.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.validation import require_choice

VERDICTS = (
    "reproduced",
    "partly reproduced",
    "not reproduced",
    "robust null",
    "demonstration",
    "not testable here",
)


def verdict(holds: bool, partly: bool = False) -> str:
    """The word for a measured claim: "reproduced" if ``holds``, else "partly
    reproduced" if ``partly``, else "not reproduced"."""
    return (
        "reproduced" if holds else "partly reproduced" if partly else "not reproduced"
    )


def demonstration(holds: bool) -> str:
    """The word for a row the book builds rather than measures (a hand-built model, a
    Monte Carlo of a theorem): it shows the claim at work but could not have refuted it,
    so it is not counted as a replication. "not reproduced" if even the construction
    fails."""
    return "demonstration" if holds else "not reproduced"


@dataclass(frozen=True)
class Row:
    """One scorecard row's result: ``key`` as in ``book/scorecard.md`` (e.g.
    "ch5-score-postnorm"), its verdict word and the number text shown beside it."""

    key: str
    verdict: str
    number: str

    def __post_init__(self) -> None:
        if not self.key.startswith("ch") or "-score-" not in self.key:
            raise ValueError(
                f"a claim key looks like 'ch5-score-postnorm', got {self.key!r}"
            )
        require_choice("verdict", self.verdict, VERDICTS)
