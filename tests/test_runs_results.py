import json

import numpy as np
import pytest

from lengthgen_lite.runs import Results, run
from lengthgen_lite.runs.results import PROVENANCE_KEYS
from tiny_experiment import tiny_spec


@pytest.fixture(scope="module")
def results():
    return run(tiny_spec(), progress=False, command="pytest tiny")


def test_one_selector_per_seed_or_per_config(results):
    tv = results.curves("tv", norm="attn_out", variant="ema")
    assert tv.shape == (2, 5) and not np.isnan(tv).any()
    assert results.curves("tv").shape == (2, 2, 5)  # [configs, seeds, lengths]
    beyond = results.values("tv_beyond", norm="none")
    np.testing.assert_allclose(beyond, results.curves("tv", norm="none")[:, 3:].mean(1))
    np.testing.assert_allclose(
        results.values("tv_train", norm="none"),
        results.curves("tv", norm="none")[:, :3].mean(1),
    )
    assert results.values("tv_longest").shape == (2, 2)
    np.testing.assert_array_equal(
        results.values("logit_gap_first", norm="none"),
        results.curves("logit_gap", norm="none")[:, 0],
    )
    assert not np.array_equal(
        results.values("tv_beyond", norm="none", scale=2.0), beyond
    )
    assert list(results.lengths()) == [1, 2, 3, 4, 5] and results.seeds == [0, 1]
    assert results.variants == ("raw", "ema")


def test_selector_errors_say_what_is_allowed(results):
    with pytest.raises(
        ValueError, match="metric 'accuracy' is unknown; this table has"
    ):
        results.curves("accuracy")
    with pytest.raises(ValueError, match="needs a suffix"):
        results.values("tv")
    with pytest.raises(ValueError, match="no rows match"):
        results.values("tv_beyond", norm="post")
    with pytest.raises(ValueError, match=r"cannot select on \['colour'\]"):
        results.select(colour="red")


def test_summary_rows_and_trained_models(results):
    rows = results.summary(["tv_train", "tv_beyond"], variant="raw")
    assert [(r["norm"], r["seed"]) for r in rows] == [
        ("none", 0),
        ("none", 1),
        ("attn_out", 0),
        ("attn_out", 1),
    ]
    assert len(results.summary(["tv_beyond"])) == 8  # both variants
    assert len(results.result(norm="none").models) == 2
    with pytest.raises(ValueError, match="matches 2 configurations"):
        results.result()


def test_save_load_round_trip_with_provenance(results, tmp_path):
    path = results.save(tmp_path / "results.json")
    loaded = Results.load(path)
    # json.dumps: nan (a length where a metric has no position) compares equal to itself
    assert (
        json.dumps(loaded.rows) == json.dumps(results.rows)
        and loaded.spec == results.spec
    )
    assert set(PROVENANCE_KEYS) <= set(loaded.provenance)
    prov = loaded.provenance
    assert (
        prov["command"] == "pytest tiny"
        and prov["threads"] >= 1
        and prov["wall_seconds"] > 0
    )
    assert len(prov["git_commit"]) == 40 and isinstance(prov["git_clean"], bool)
    np.testing.assert_array_equal(
        loaded.values("tv_beyond", norm="none"),
        results.values("tv_beyond", norm="none"),
    )
    with pytest.raises(ValueError, match="not kept in a loaded results file"):
        loaded.result(norm="none")
    data = json.loads(path.read_text())
    data["provenance"].pop("cpu")
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"provenance lacks \['cpu'\]"):
        Results.load(path)
