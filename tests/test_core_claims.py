import json
import math

import numpy as np
import pytest

from lengthgen_lite.core import claims
from lengthgen_lite.core.claims import MARGINS_FILE_VARIABLE, holds, load_margins


def test_every_seed_uses_the_worst_seed_and_the_spread_over_seeds():
    margin = holds("k", "a beats b", [0.3, 0.5, 0.4])
    assert margin.slack == pytest.approx(0.3)
    assert margin.spread == pytest.approx(0.1)
    assert margin.in_spreads == pytest.approx(3.0)


def test_mean_rule_tolerates_one_losing_seed_but_not_a_losing_mean():
    margin = holds("k", "on average", [0.5, -0.1, 0.5], rule="mean")
    assert margin.slack == pytest.approx(0.3)
    # of the mean
    assert margin.spread == pytest.approx(np.std([0.5, -0.1, 0.5], ddof=1) / np.sqrt(3))
    with pytest.raises(AssertionError, match="on average does not hold"):
        holds("k", "on average", [0.1, -0.5, 0.1], rule="mean")


def test_a_failing_seed_fails_the_claim_with_its_numbers():
    with pytest.raises(
        AssertionError, match=r"k: a beats b does not hold \(every seed\)"
    ):
        holds("k", "a beats b", np.array([0.3, -0.01, 0.4]))


def test_a_single_value_needs_a_stated_spread():
    with pytest.raises(ValueError, match="spread="):
        holds("k", "one value", 0.2)
    assert holds("k", "one value", 0.2, spread=0.05).in_spreads == pytest.approx(4.0)
    assert math.isinf(holds("k", "exact", [1.0, 1.0]).in_spreads)


def test_over_configurations_the_spread_is_the_seed_spread_within_them():
    # two settings far apart, seeds close within each
    margins = np.array([[1.0, 1.2], [3.0, 3.2]])
    margin = holds("k", "s", margins)
    assert margin.slack == pytest.approx(1.0)
    assert margin.spread == pytest.approx(np.sqrt(0.02))
    assert margin.n == 4


@pytest.mark.parametrize(
    ("margins", "kwargs", "message"),
    [
        ([], {}, "non-empty"),
        ([[[1.0, 2.0]]], {}, "1-D or 2-D"),
        ([1.0, np.nan], {}, "finite"),
        ([1.0, 2.0], {"rule": "most"}, "rule='most' is unknown"),
        ([1.0, 2.0], {"spread": -1.0}, "non-negative"),
    ],
)
def test_bad_input(margins, kwargs, message):
    with pytest.raises(ValueError, match=message):
        holds("k", "s", margins, **kwargs)


def test_margins_are_recorded_where_the_tests_ask(tmp_path, monkeypatch):
    path = tmp_path / "margins.jsonl"
    monkeypatch.setenv(MARGINS_FILE_VARIABLE, str(path))
    holds("first", "a beats b", [0.3, 0.5])
    with pytest.raises(AssertionError):
        # recorded too: the report shows what failed
        holds("second", "c beats d", [-0.3, 0.5])
    recorded = load_margins(path)
    assert [m.key for m in recorded] == ["first", "second"]
    assert recorded[1].slack == pytest.approx(-0.3)
    assert json.loads(path.read_text().splitlines()[0])["statement"] == "a beats b"


def test_nothing_is_written_unless_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(MARGINS_FILE_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    holds("k", "s", [1.0, 2.0])
    assert list(tmp_path.iterdir()) == []
    assert claims.RULES == ("every seed", "mean")
