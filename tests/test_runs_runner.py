import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from lengthgen_lite.chapters import ch4_vanishing_variance as ch4
from lengthgen_lite.chapters import ch7_beyond_set_complement as ch7
from lengthgen_lite.core.evaluation import evaluate_seeds
from lengthgen_lite.core.retrieval import RetrievalTransformer
from lengthgen_lite.core.task_registry import task_entry
from lengthgen_lite.core.training import train
from lengthgen_lite.runs import run
from lengthgen_lite.runs.runner import RAY_ENV, run_configuration
from tiny_experiment import tiny_spec

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_local():
    return run(tiny_spec(), progress=False)


def test_rows_cover_configs_variants_scales_and_seeds(tiny_local):
    rows = tiny_local.rows
    assert len(rows) == 2 * 2 * 2 * 2  # configurations x variants x scales x seeds
    assert [(r["config"], r["variant"], r["scale"], r["seed"]) for r in rows[:4]] == [
        (0, "raw", 1.0, 0),
        (0, "raw", 1.0, 1),
        (0, "raw", 2.0, 0),
        (0, "raw", 2.0, 1),
    ]
    tv, invalid = (
        np.array([r["tv"] for r in rows]),
        np.array([r["invalid_mass"] for r in rows]),
    )
    assert ((tv >= 0) & (tv <= 1)).all() and (invalid <= tv + 1e-6).all()
    assert all(r["s"] == [1, 2, 3, 4, 5] and r["entropy_ratio"][0] == 1.0 for r in rows)


def test_the_runner_is_the_one_training_loop(tiny_local):
    spec = tiny_spec()
    config = spec.configurations()[1]
    direct = train(
        config.model_config(),
        config.setup().task,
        config.train_config(),
        [0, 1],
        averagers=spec.averager_factories(),
        progress=False,
    )
    tables = evaluate_seeds(direct.averaged["ema"], 6, n_sequences=200, logit_scale=2.0)
    got = tiny_local.curves("tv", norm="attn_out", variant="ema", scale=2.0)
    np.testing.assert_array_equal(got, np.stack([t.tv for t in tables]))
    direct_rows = run_configuration(spec, 1, progress=False)[0]
    # nan-safe
    assert json.dumps(direct_rows) == json.dumps(tiny_local.select(norm="attn_out"))


def test_a_sequence_task_is_scored_by_its_registered_evaluation():
    spec = ch7.SPECS["ch7/placements"].with_overrides(
        configs=[{"task": "anbn", "norm": "post", "d_model": 16, "steps": 3}],
        seeds=[0, 1],
        n_test=40,
    )
    results = run(spec, progress=False)
    assert results.curves("tv", variant="ema").shape == (2, 48)
    assert results.values("tv_beyond", task="anbn").shape == (2,)
    assert set(results.metrics) >= {"tv", "tv_set", "tv_single", "share_single"}
    with pytest.raises(ValueError, match="logit scale 1.0 only"):
        run(spec.with_overrides(scales=(1.0, 2.0)), progress=False)


def test_a_retrieval_task_trains_its_model_and_is_scored_per_set_size():
    spec = ch4.SPECS["ch4/retrieval"]
    small = {"d_model": 16, "n_heads": 2, "d_mlp": 32, "batch": 8, "test_length": 16}
    spec = spec.with_overrides(
        configs=[{"task": "dictionary_lookup", "norm": "attn_out"}],
        base={**spec.base, **small},
        seeds=[0, 1],
        steps=3,
        n_test=10,
    )
    config = spec.configurations()[0]
    assert task_entry(config.task).model is RetrievalTransformer
    results = run(spec, progress=False)
    assert isinstance(results.result().models[0], RetrievalTransformer)
    np.testing.assert_array_equal(results.lengths(), [8, 16])
    assert results.values("accuracy_train").shape == (2,)
    assert {"normed_global_var", "feature_var_2"} <= set(results.metrics)
    with pytest.raises(ValueError, match="logit scale 1.0 only"):
        run(spec.with_overrides(scales=(1.0, 2.0)), progress=False)


def test_a_test_time_factor_scores_the_raw_weights_at_every_checkpoint():
    spec = tiny_spec(
        averagers={}, scales=(1.0,), test_time=("logn",), checkpoints=(10,)
    )
    results = run(spec, progress=False)
    assert results.variants == ("raw", "test_logn")
    config = spec.configurations()[1]
    evaluate = task_entry("set_complement").evaluate_test_time["logn"]
    curves = evaluate(
        results.result(norm="attn_out").models, config.setup(), 200, spec.eval_seed
    )
    factored = results.curves("tv", norm="attn_out", variant="test_logn")
    np.testing.assert_allclose(factored, curves["tv"], rtol=1e-6)
    assert not np.allclose(factored, results.curves("tv", norm="attn_out"))
    steps = {r["step"] for r in results.select(variant="test_logn")}
    assert steps == {10, 30}


def test_every_task_runs_without_its_chapter_imported():
    """The registry is the core's: a fresh interpreter runs chapter 7's and chapter
    4's tasks from plain specs, with no chapter module ever loaded."""
    code = """
import sys
from lengthgen_lite.runs import Spec, run
small = {"d_model": 8, "steps": 2, "batch": 4}
configs = [{"task": "anbn"}, {"task": "tictactoe"}, {"task": "argmax_retrieval",
    "train_length": 4, "test_length": 8, "n_heads": 2}]
results = run(Spec("fresh", configs=configs, base=small, seeds=[0], n_test=4),
    progress=False)
assert len(results.rows) == 3, results.rows
assert not [m for m in sys.modules if m.startswith("lengthgen_lite.chapters")]
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"backend": "dask"}, r"unknown backend 'dask'; allowed: 'local', 'ray'"),
        (
            {"seeds_per_task": 1},
            r"seeds_per_task=1 is invalid; allowed: only with backend='ray'",
        ),
        (
            {"backend": "ray", "seeds_per_task": 0},
            r"seeds_per_task must be an integer >= 1",
        ),
        (
            {"backend": "ray", "ray_num_cpus": -1},
            r"ray_num_cpus must be an integer >= 1",
        ),
        (
            {"backend": "ray", "ray_address": "auto", "ray_num_cpus": 2},
            r"ray_num_cpus must be unset when ray_address is given",
        ),
    ],
)
def test_bad_run_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        run(tiny_spec(), progress=False, **kwargs)
    with pytest.raises(ValueError, match="a Spec"):
        run({"name": "tiny"})


def test_ray_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'lengthgen_lite\[ray\]'"):
        run(tiny_spec(), backend="ray", progress=False)


def test_package_imports_without_ray():
    code = (
        "import sys; sys.modules['ray'] = None; import lengthgen_lite, "
        "lengthgen_lite.runs, lengthgen_lite.cli"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.fixture(scope="module")
def ray_cluster():
    # pinned in requirements.txt: `make test` has it (an error here, never a skip)
    import ray

    # Ray gives its raylet a fixed 30 s to register; beside two notebook kernels, the
    # book build and a browser on a 2-core machine that once was not enough. A slow
    # start is retried, twice.
    for attempt in range(3):
        try:
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"env_vars": RAY_ENV},
            )
            break
        except Exception as error:  # Ray raises a bare Exception for it
            ray.shutdown()
            if "timed out during startup" not in str(error) or attempt == 2:
                raise
    yield ray
    ray.shutdown()


def _assert_same_rows(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert {k: x[k] for k in ("config", "variant", "seed", "scale", "s")} == {
            k: y[k] for k in ("config", "variant", "seed", "scale", "s")
        }
        for metric in ("tv", "invalid_mass", "logit_gap"):
            np.testing.assert_allclose(x[metric], y[metric], atol=1e-6)


def test_ray_matches_local(ray_cluster, tiny_local):
    by_configuration = run(tiny_spec(), backend="ray", progress=False)
    _assert_same_rows(by_configuration.rows, tiny_local.rows)
    by_seed = run(
        tiny_spec(), backend="ray", progress=False, seeds_per_task=1
    )  # 4 tasks
    _assert_same_rows(by_seed.rows, tiny_local.rows)
    assert ray_cluster.is_initialized()  # a running session is used, not stopped
