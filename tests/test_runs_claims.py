"""The verdict protocol: each word comes out of a synthetic case built for it."""

import json

import numpy as np
import pytest

from lengthgen_lite.runs import claims
from lengthgen_lite.runs.claims import (
    MARGINS_FILE_VARIABLE,
    VERDICTS,
    Claim,
    Effect,
    cell_word,
    claim_word,
    load_margins,
    tally,
)
from lengthgen_lite.runs.stats import t_interval

SESOI = 0.01
CLAIM = Claim(
    "ch9-score-test",
    "a remedy lowers TV beyond L",
    "[ours]",
    metric="TV beyond L",
    unit="TV",
    effect="without minus with",
    sesoi=SESOI,
    cells=("init",),
)
NOISE = np.random.default_rng(0).normal(0, 1, 10)
NOISE = (NOISE - NOISE.mean()) / NOISE.std(ddof=1)  # mean 0, sd 1 exactly


def cell(mean: float, sd: float, step: int = 6000, unstable: int = 0, **where):
    """One cell whose ten seeds have exactly this mean and standard deviation."""
    values = mean + sd * NOISE
    return Effect(where or {"init": "book"}, step, t_interval(values), False, unstable)


@pytest.mark.parametrize(
    "mean, sd, word",
    [
        (0.05, 0.01, "helps"),  # far above 0 and above the SESOI
        (0.005, 0.001, "equivalent"),  # above 0 but below the SESOI, tightly
        (-0.002, 0.002, "equivalent"),  # a harm too small to matter, tightly
        (-0.05, 0.01, "hurts"),
        (-0.008, 0.004, "hurts"),  # below 0, and not shown negligible
        (0.008, 0.004, "inconclusive"),  # above 0 but not shown of interest
        (0.0, 0.05, "inconclusive"),  # too noisy to say anything
    ],
)
def test_cell_words(mean, sd, word):
    assert cell_word(cell(mean, sd), SESOI) == word


def test_an_unstable_seed_makes_a_cell_inconclusive():
    assert cell_word(cell(0.05, 0.01, unstable=1), SESOI) == "inconclusive"


@pytest.mark.parametrize(
    "cells, word, counts",
    [
        ([(0.05, 0.01), (0.08, 0.01)], "reproduced", {"helps": 2}),
        ([(-0.05, 0.01), (-0.03, 0.01)], "reversed", {"hurts": 2}),
        ([(0.001, 0.002), (-0.001, 0.002)], "no effect", {"equivalent": 2}),
        ([(0.0, 0.05), (0.0, 0.08)], "inconclusive", {"inconclusive": 2}),
        ([(0.05, 0.01), (-0.05, 0.01)], "mixed", {"helps": 1, "hurts": 1}),
    ],
)
def test_claim_words_and_their_counts(cells, word, counts):
    effects = [cell(m, sd, init=str(i)) for i, (m, sd) in enumerate(cells)]
    decision = CLAIM.decide(effects, "reference")
    assert decision.word == word and decision.counts == counts
    total = len(cells)
    for name, n in counts.items():
        assert f"{name} {n}/{total}" in decision.number


def test_mixed_names_its_counts_and_cells():
    effects = [cell(0.03, 0.01, init=f"h{i}") for i in range(4)] + [
        cell(-0.1, 0.01, init=f"r{i}") for i in range(28)
    ]
    decision = CLAIM.decide(effects)
    assert decision.word == "mixed"
    assert decision.counts_text() == "helps 4/32, hurts 28/32"
    assert [c["init"] for c in decision.cells_with("helps")] == [
        f"h{i}" for i in range(4)
    ]


def test_unstable_seeds_cannot_yield_reproduced():
    stable = [cell(0.05, 0.01, init="a"), cell(0.05, 0.01, init="b")]
    assert CLAIM.decide(stable).word == "reproduced"
    collapsed = [cell(0.05, 0.01, init="a"), cell(0.05, 0.01, unstable=3, init="b")]
    decision = CLAIM.decide(collapsed)
    assert decision.word == "mixed" and decision.unstable == 3
    assert "3 unstable seeds" in decision.number


def test_still_moving_needs_a_move_beyond_the_interval_and_the_sesoi():
    settled = [cell(0.05, 0.01, step=3000), cell(0.0502, 0.01, step=6000)]
    moving = [cell(0.116, 0.01, step=1000), cell(0.043, 0.01, step=3000)] + [
        cell(0.021, 0.01, step=6000)
    ]
    assert not CLAIM.decide(settled).still_moving
    decision = CLAIM.decide(moving)
    assert decision.still_moving and "still moving" in decision.number
    assert decision.budget.endswith("still moving")
    # a move wider than a very narrow interval but below the SESOI is not a move
    narrow = [cell(0.05, 0.0001, step=3000), cell(0.055, 0.0001, step=6000)]
    assert not CLAIM.decide(narrow).still_moving


def test_the_pooled_estimate_weighs_every_cell_once():
    effects = [cell(0.02, 0.01, init="a"), cell(0.06, 0.03, init="b")]
    pooled = CLAIM.decide(effects).pooled
    assert pooled.mean == pytest.approx(0.04)
    expected_se = np.sqrt(0.01**2 / 10 + 0.03**2 / 10) / 2
    assert pooled.se == pytest.approx(expected_se)
    assert pooled.low < 0.04 < pooled.high


def test_require_asserts_the_word_and_records_the_weakest_cell(tmp_path, monkeypatch):
    path = tmp_path / "margins.jsonl"
    monkeypatch.setenv(MARGINS_FILE_VARIABLE, str(path))
    decision = CLAIM.decide([cell(0.05, 0.01, init="a"), cell(0.02, 0.01, init="b")])
    CLAIM.require(decision, "reproduced")
    (margin,) = load_margins(path)
    weakest = decision.final[1].interval
    assert margin.slack == pytest.approx(min(weakest.low, weakest.mean - SESOI))
    assert margin.spread == pytest.approx(weakest.se) and margin.rule == "verdict"
    with pytest.raises(AssertionError, match="'reproduced', expected mixed"):
        CLAIM.require(decision, "mixed")
    CLAIM.require(decision, {"reproduced", "mixed"})  # an allowed set of words
    assert len(load_margins(path)) == 1, "a set of words records no margin"


def test_demonstration_and_not_testable_rows():
    built = Claim(
        "ch9-score-built",
        "a construction works",
        "[ours]",
        "m",
        "u",
        "e",
        None,
        kind="demonstration",
    )
    assert built.demonstrate([0.5, 0.2], "margin 0.2").word == "demonstration"
    with pytest.raises(AssertionError, match="does not hold"):
        built.demonstrate([0.5, -0.1], "margin -0.1")
    with pytest.raises(ValueError, match="use demonstrate"):
        built.decide([cell(0.05, 0.01)])
    far = Claim(
        "ch9-score-far",
        "needs a GPU",
        "[paper]",
        "m",
        "u",
        "e",
        None,
        kind="not testable here",
    )
    assert far.not_testable("needs a GPU").number == "needs a GPU"
    with pytest.raises(ValueError, match="not a demonstration"):
        far.demonstrate([1.0, 1.0], "x")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"key": "postnorm"}, "looks like 'ch5-score-postnorm'"),
        ({"source": "the paper"}, "carries no tag"),
        ({"sesoi": 0.0}, "sesoi"),
        ({"sesoi": None}, "sesoi"),
        ({"kind": "anecdote"}, "kind"),
    ],
)
def test_bad_declarations(kwargs, message):
    fields = {
        "key": "ch9-score-x",
        "statement": "s",
        "source": "[ours]",
        "metric": "m",
        "unit": "u",
        "effect": "e",
        "sesoi": 0.01,
    } | kwargs
    with pytest.raises(ValueError, match=message):
        Claim(**fields)


def test_words_and_tally():
    assert claim_word(["helps", "equivalent"]) == "mixed"
    with pytest.raises(ValueError, match="cell word"):
        claim_word(["helps", "great"])
    with pytest.raises(ValueError, match="at least one"):
        CLAIM.decide([])
    decisions = [CLAIM.decide([cell(0.05, 0.01)]), CLAIM.decide([cell(-0.05, 0.01)])]
    assert tally(decisions) == {"reproduced": 1, "reversed": 1}
    assert set(tally(decisions)) <= set(VERDICTS)


def test_nothing_is_written_unless_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(MARGINS_FILE_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    CLAIM.require(CLAIM.decide([cell(0.05, 0.01)]), "reproduced")
    assert not list(tmp_path.iterdir())
    assert json.loads(json.dumps(claims.VERDICTS)) == list(VERDICTS)


def test_a_fixed_model_names_its_replicates_and_no_budget():
    fixed = Claim(
        "ch9-score-fixed",
        "a pretrained model decays",
        "[ours]",
        "slope",
        "slope",
        "minus the slope",
        0.05,
        replicates="sequences",
    )
    decided = fixed.decide([cell(0.2, 0.05, step=0)])
    assert "1 cell x 10 sequences;" in decided.number and "steps" not in decided.number
    assert decided.budget == "no training budget: a fixed model"
    assert CLAIM.decide([cell(0.2, 0.05)]).budget == "one budget (6000 steps)"
    assert "x 10 seeds, 6000 steps" in CLAIM.decide([cell(0.2, 0.05)]).number


def test_the_number_gives_the_range_of_replicates_when_cells_differ():
    sixteen = Effect(
        {"init": "torch"}, 6000, t_interval(0.05 + 0.01 * NOISE[:8].repeat(2))
    )
    decision = CLAIM.decide([cell(0.05, 0.01), sixteen], "reference")
    assert "pooled over 2 cells x 10-16 seeds, 6000 steps" in decision.number
    same = CLAIM.decide([cell(0.05, 0.01), cell(0.05, 0.01, init="torch")], "reference")
    assert "2 cells x 10 seeds" in same.number


AT_MOST = Claim(
    "ch9-score-at-most",
    "a change gains at most 0.01 of TV",
    "[ours]",
    metric="TV beyond L",
    unit="TV",
    effect="without minus with",
    sesoi=SESOI,
    cells=("init",),
    test="at most",
)


@pytest.mark.parametrize(
    "mean, sd, word",
    [
        (0.002, 0.002, "below"),  # the one-sided 95% bound is under the SESOI
        (-0.05, 0.01, "below"),  # a harm is "at most" too
        (0.05, 0.01, "above"),  # the 95% interval is over the SESOI
        (0.008, 0.004, "inconclusive"),  # the bound reaches past the SESOI
        (0.0, 0.05, "inconclusive"),
    ],
)
def test_at_most_cell_words(mean, sd, word):
    assert cell_word(cell(mean, sd), SESOI, "at most") == word


def test_an_at_most_claim_is_reproduced_below_its_bound_and_records_its_margin(
    tmp_path, monkeypatch
):
    path = tmp_path / "margins.jsonl"
    monkeypatch.setenv(MARGINS_FILE_VARIABLE, str(path))
    below = AT_MOST.decide([cell(0.002, 0.002), cell(-0.03, 0.003, init="torch")])
    assert below.word == "reproduced" and below.counts == {"below": 2}
    AT_MOST.require(below, "reproduced")
    (margin,) = load_margins(path)
    # the closest cell: 0.01 minus the 90% interval's upper end, in standard errors
    narrow = below.final[0].interval.at_level(0.9)
    assert margin.slack == pytest.approx(SESOI - narrow.high)
    assert margin.in_spreads > 1
    above = AT_MOST.decide([cell(0.05, 0.01), cell(0.08, 0.01, init="torch")])
    assert above.word == "reversed" and "above 2/2" in above.number
    mixed = AT_MOST.decide([cell(0.002, 0.002), cell(0.05, 0.01, init="torch")])
    assert mixed.word == "mixed" and mixed.cells_with("below") == [{"init": "book"}]


def test_a_claim_names_its_test():
    with pytest.raises(ValueError, match="test"):
        Claim("ch9-score-x", "x", "[ours]", "m", "u", "e", 0.1, test="at least")
    with pytest.raises(ValueError, match="test"):
        cell_word(cell(0.0, 0.01), SESOI, "between")
