"""The scorecard's vocabulary: verdict words, and Claim rows that refuse what the book
cannot show."""

import pytest

from lengthgen_lite.runs.scorecard import VERDICTS, Claim, demonstration, verdict


def test_verdict_words():
    assert verdict(True) == verdict(True, partly=True) == "reproduced"
    assert (
        verdict(False, partly=True) == "partly reproduced"
        and verdict(False) == "not reproduced"
    )
    assert (
        demonstration(True) == "demonstration"
        and demonstration(False) == "not reproduced"
    )
    assert {
        verdict(True),
        verdict(False, True),
        verdict(False),
        demonstration(True),
    } <= set(VERDICTS)


def test_claim_checks_its_key_and_verdict():
    assert (
        Claim("ch5-score-postnorm", "reproduced", "0.12 vs 0.20").number
        == "0.12 vs 0.20"
    )
    with pytest.raises(ValueError, match="unknown verdict 'sort of'"):
        Claim("ch5-score-postnorm", "sort of", "")
    with pytest.raises(ValueError, match="a claim key looks like"):
        Claim("postnorm", "reproduced", "")


def test_glue_claims_glues_verdict_and_number(monkeypatch):
    import myst_nb

    from lengthgen_lite.viz.common import glue_claims

    glued = {}
    monkeypatch.setattr(
        myst_nb, "glue", lambda name, value, display: glued.setdefault(name, value)
    )
    glue_claims([Claim("ch1-score-fails", "reproduced", "5 of 5 seeds")])
    assert glued == {
        "ch1-score-fails-verdict": "reproduced",
        "ch1-score-fails-number": "5 of 5 seeds",
    }
