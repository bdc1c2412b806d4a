"""The reference page's views: the effects table and the forest plot read a claim's
own test ("at most" claims are judged one-sided, not as differences)."""

import dataclasses

import numpy as np

from lengthgen_lite.runs.claims import Claim, Effect
from lengthgen_lite.runs.stats import t_interval
from lengthgen_lite.viz import reference as view

AT_MOST = Claim(
    "ch9-score-at-most",
    "a variant gains at most 0.01",
    "[ours]",
    metric="TV beyond L",
    unit="TV",
    effect="without minus with",
    sesoi=0.01,
    cells=("init",),
    test="at most",
)
NOISE = np.random.default_rng(0).normal(0, 1, 10)


def test_the_effects_table_uses_the_claims_own_test():
    # tightly below the SESOI: "below" under "at most" ("equivalent" as a difference)
    effect = Effect({"init": "book"}, 6000, t_interval(0.002 + 0.001 * NOISE), False, 0)
    decision = AT_MOST.decide([effect], "reference")
    frame = view.effects_frame(decision)
    assert frame[("word", 6000)].tolist() == ["below"] == list(decision.words)
    as_difference = dataclasses.replace(AT_MOST, test="difference")
    frame = view.effects_frame(as_difference.decide([effect], "reference"))
    assert frame[("word", 6000)].tolist() == ["equivalent"]


def test_the_forest_plot_marks_zero_and_the_sesoi():
    effect = Effect({"init": "book"}, 6000, t_interval(0.002 + 0.001 * NOISE), False, 0)
    ax = view.plot_effects(AT_MOST.decide([effect], "reference"), "TV")
    lines = {round(line.get_xdata()[0], 6): line.get_linestyle() for line in ax.lines}
    assert lines == {0.0: "--", 0.01: ":"}
    assert "SESOI 0.01" in [t.get_text() for t in ax.get_legend().get_texts()]
