import numpy as np
import pytest

from lengthgen_lite.averaging import make_ema
from lengthgen_lite.search import (
    RunSpec,
    SearchSpace,
    bootstrap_mean_difference,
    factor_importance,
    run_spec,
    sample_specs,
    score_rows,
)


@pytest.fixture(scope="module")
def run():
    return run_spec(RunSpec(norm="attn_out", lr=1e-2, batch=16), [0, 1], 30, averagers={"ema": make_ema(0.9)},
                    scales=(0.5, 1.0, 2.0), n_sequences=100, progress=False)


def test_run_scores_every_variant_at_every_scale(run):
    assert set(run.tv) == {"raw", "ema"}
    assert run.tv["raw"].shape == (2, 3, 15)  # K, scales, v - 1 (the baseline's v = 16)
    np.testing.assert_array_equal(run.curve("raw"), run.tv["raw"][:, 1])
    np.testing.assert_allclose(run.mean_tv("ema", "train"), run.tv["ema"][:, 1, :4].mean(-1))
    np.testing.assert_allclose(run.mean_tv("ema", "beyond", 2.0), run.tv["ema"][:, 2, 4:].mean(-1))
    assert run.scale_curve("raw", "beyond").shape == (2, 3)
    assert run.result.models[0].cfg.resid_dropout == 0.0


def test_score_rows_flatten_runs(run):
    rows = score_rows([run])
    assert len(rows) == 2 * 2  # variants x seeds
    assert {r["variant"] for r in rows} == {"raw", "ema"}
    assert {"norm", "lr", "batch", "dropout", "targets", "run", "seed", "ema", "tv_train", "tv_beyond"} <= set(rows[0])
    assert {r["run"] for r in rows} == {0} and {r["ema"] for r in rows} == {True, False}
    raw0 = next(r for r in rows if r["variant"] == "raw" and r["seed"] == 0)
    assert raw0["tv_train"] == pytest.approx(float(run.mean_tv("raw", "train")[0]))


def test_run_rejects_bad_arguments(run):
    with pytest.raises(ValueError, match="variant"):
        run.curve("bema")
    with pytest.raises(ValueError, match="variant"):
        run.scale_curve("bema", "train")
    with pytest.raises(ValueError, match="scale"):
        run.curve("raw", 3.0)
    with pytest.raises(ValueError, match="lengths"):
        run.mean_tv("raw", "long")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1.0"):
        run_spec(RunSpec(), [0], 2, scales=(2.0,), progress=False)
    with pytest.raises(ValueError, match="raw"):
        run_spec(RunSpec(), [0], 2, averagers={"raw": make_ema()}, progress=False)


def test_sample_specs_is_reproducible_balanced_and_in_range():
    space = SearchSpace()
    a, b = sample_specs(12, 3), sample_specs(12, 3)
    assert a == b and a != sample_specs(12, 4)
    norms = [s.norm for s in a]
    assert all(norms.count(n) in (2, 3) for n in space.norm)
    assert all(1e-3 <= s.lr <= 3e-2 + 1e-12 and s.batch in space.batch and 0 <= s.dropout <= 0.3 for s in a)
    assert all(s.targets == "sampled" for s in a)


@pytest.mark.parametrize(
    "kwargs",
    [{"lr": (1e-2, 1e-3)}, {"lr": (0.0, 1e-2)}, {"dropout": (0.2, 0.1)}, {"dropout": (0.0, 1.0)}, {"batch": ()}, {"norm": ()}],
)
def test_search_space_rejects_bad_ranges(kwargs):
    with pytest.raises(ValueError):
        SearchSpace(**kwargs)


def test_sample_specs_rejects_bad_n():
    with pytest.raises(ValueError, match="n must"):
        sample_specs(0, 0)


def test_factor_importance_finds_the_factor_that_matters():
    rng = np.random.default_rng(0)
    rows = [{"a": str(rng.choice(["x", "y", "z"])), "b": float(rng.uniform(1, 10)), "c": float(rng.normal())} for _ in range(200)]
    for r in rows:
        r["y"] = {"x": 0.0, "y": 1.0, "z": 2.0}[r["a"]] + 0.5 * np.log10(r["b"]) + 0.01 * rng.normal()
    fit = factor_importance(rows, "y", {"a": "categorical", "b": "log", "c": "numeric"})
    imp = fit.importance
    assert imp["a"] > imp["b"] > 0.01 > imp["c"]
    assert fit.r_squared > 0.99
    assert fit.effects["a"] == pytest.approx({"y": 1.0, "z": 2.0}, abs=0.01)  # relative to level "x"
    assert fit.effects["b"]["slope"] == pytest.approx(0.5, abs=0.01)
    with pytest.raises(ValueError, match="kind"):
        factor_importance(rows, "y", {"a": "ordinal"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="missing"):
        factor_importance(rows, "y", {"d": "numeric"})
    with pytest.raises(ValueError, match="at least one row"):
        factor_importance([], "y", {"a": "categorical"})


def test_bootstrap_mean_difference():
    mean, low, high = bootstrap_mean_difference([1.0, 2.0, 3.0, 4.0], seed=0)
    assert mean == 2.5 and 1.0 <= low < mean < high <= 4.0
    assert bootstrap_mean_difference([1.0, 2.0, 3.0, 4.0], seed=0) == (mean, low, high)
    with pytest.raises(ValueError, match="differences"):
        bootstrap_mean_difference([1.0])
