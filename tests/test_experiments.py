import copy
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from lengthgen_lite.chapters.ch1_set_complement import baseline_setup
from lengthgen_lite.experiments import (
    METRICS,
    OVERRIDE_KEYS,
    RAY_ENV,
    ExperimentConfig,
    Results,
    run_configuration,
    run_experiment,
)

from tiny_experiment import TINY

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"



def with_change(path: str, value: object) -> dict:
    """TINY with one key set (``section.key`` or a top-level key); the value DELETE removes it."""
    data = copy.deepcopy(TINY)
    *sections, leaf = path.split(".")
    node = data
    for section in sections:
        node = node[section]
    if value is DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return data


class _Delete:
    """Marks a key to delete (a stable repr keeps test ids the same in every xdist worker)."""

    def __repr__(self) -> str:
        return "<deleted>"


DELETE = _Delete()

# (changed key, bad value, substrings the message must contain: the field and the bad value)
BAD_CONFIGS = [
    ("nmae", "x", ["unknown key 'nmae'", "allowed keys"]),
    ("name", DELETE, ["config.name", "missing"]),
    ("name", "  ", ["name=", "non-empty string"]),
    ("task.vv", 6, ["task has unknown key 'vv'", "train_length"]),
    ("task.name", "argmax_retrieval", ["task.name='argmax_retrieval'", "set_complement"]),
    ("task.name", ["set_complement"], ["task.name=['set_complement']", "set_complement"]),
    ("task.v", 1, ["task", "v must be an int >= 2, got 1"]),
    ("task.train_length", 0, ["task", "train_length=0", "1..v-1"]),
    ("task.train_length", 6, ["task", "train_length=6", "1..5"]),
    ("task.train_length", -2, ["train_length=-2"]),
    ("evaluation.lengths", [-1], ["evaluation.lengths[0]=-1", "int >= 1"]),
    ("evaluation.lengths", [2, 6], ["evaluation.lengths[1]=6", "1..5"]),
    ("evaluation.lengths", [2, 2], ["evaluation.lengths=[2, 2]", "distinct"]),
    ("evaluation.lengths", [], ["evaluation.lengths=[]", "non-empty"]),
    ("evaluation.lengths", "1-5", ["evaluation.lengths='1-5'"]),
    ("evaluation.n_sequences", 0, ["evaluation.n_sequences=0", "int >= 1"]),
    ("evaluation.seed", -1, ["evaluation.seed=-1", "int >= 0"]),
    ("model.n_heads", 3, ["model", "d_model=16", "n_heads=3"]),
    ("model.d_model", 0, ["model", "d_model must be an int"]),
    ("model.n_layers", 0, ["n_layers must be an int"]),
    ("model.d_head", 0, ["d_head must be an int"]),
    ("model.placements", ["none", "postt"], ["model.placements[1]='postt'", "attn_out"]),
    ("model.placements", [], ["model.placements=[]", "non-empty"]),
    ("model.placements", ["post", "post"], ["model.placements=['post', 'post']", "distinct"]),
    ("model.placements", "post", ["model.placements='post'", "list"]),
    ("model.norm_kind", "rms", ["norm_kind='rms'", "layernorm"]),
    ("model.attn_dropout", 1.5, ["attn_dropout", "[0, 1)", "1.5"]),
    ("model.resid_dropout", "lots", ["model.resid_dropout='lots'", "number"]),
    ("train.targets", ["hard"], ["train.targets[0]='hard'", "soft", "sampled"]),
    ("train.targets", ["soft", "soft"], ["train.targets", "distinct"]),
    ("train.steps", -5, ["train", "steps must be a positive int, got -5"]),
    ("train.steps", 2.5, ["steps must be a positive int, got 2.5"]),
    ("train.batch", 0, ["batch must be a positive int, got 0"]),
    ("train.lr", -0.1, ["lr must be positive, got -0.1"]),
    ("train.lr", "fast", ["train.lr='fast'", "number"]),
    ("train.warmup", 50, ["warmup must be an int in 0..steps=30, got 50"]),
    ("train.schedule", "linear", ["schedule='linear'", "cosine"]),
    ("train.weight_decay", -1.0, ["weight_decay must be >= 0, got -1.0"]),
    ("train.ema_beta", 1.0, ["train.ema_beta", "beta must be in (0, 1), got 1.0"]),
    ("train.ema_beta", 0, ["train.ema_beta", "beta must be in (0, 1), got 0"]),
    ("train.ema_beta", "0.9", ["train.ema_beta='0.9'", "null"]),
    ("train.bema", "yes", ["train.bema='yes'", "true or false"]),
    ("seeds", [], ["seeds=[]", "non-empty"]),
    ("seeds", [0, 0], ["seeds=[0, 0]", "distinct"]),
    ("seeds", [-1], ["seeds[0]=-1", "int >= 0"]),
    ("seeds", [0, True], ["seeds[1]=True", "int >= 0"]),
    ("train", [1], ["train=[1]", "JSON object"]),
]


@pytest.mark.parametrize("key, value, expected", BAD_CONFIGS, ids=[f"{k}={v!r}"[:40] for k, v, _ in BAD_CONFIGS])
def test_bad_config_names_field_and_value(key, value, expected):
    with pytest.raises(ValueError) as info:
        ExperimentConfig.from_dict(with_change(key, value))
    for text in expected:
        assert text in str(info.value), f"{text!r} not in {str(info.value)!r}"


def test_bad_config_not_an_object():
    with pytest.raises(ValueError, match=r"config=\[1, 2\] is invalid"):
        ExperimentConfig.from_dict([1, 2])


def test_good_config_round_trips_and_defaults():
    config = ExperimentConfig.from_dict(TINY)
    assert ExperimentConfig.from_dict(config.to_dict()) == config
    assert config.lengths == (1, 2, 3, 4, 5)
    assert config.configurations() == [("none", "sampled"), ("attn_out", "sampled")]
    assert ExperimentConfig.from_dict(with_change("evaluation.lengths", [5, 2])).lengths == (2, 5)  # sorted


def test_overrides_are_validated():
    config = ExperimentConfig.from_dict(TINY)
    bigger = config.with_overrides({"seeds": [0, 1, 2, 3], "train.steps": 60, "task.v": 8})
    assert bigger.seeds == (0, 1, 2, 3) and bigger.train.steps == 60 and bigger.lengths == tuple(range(1, 8))
    assert config.train.steps == 30  # the original is unchanged
    with pytest.raises(ValueError, match=r"override key='train.stepz' is invalid"):
        config.with_overrides({"train.stepz": 1})
    with pytest.raises(ValueError, match=r"override key='task' is invalid"):
        config.with_overrides({"task": {"v": 8}})
    with pytest.raises(ValueError, match=r"1..v-1 = 1..2.*train_length=3"):
        config.with_overrides({"task.v": 3})  # train_length 3 no longer fits
    assert "train.ema_beta" in OVERRIDE_KEYS and "model.placements" in OVERRIDE_KEYS


def test_load_names_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"config file .*nope.json' does not exist"):
        ExperimentConfig.load(tmp_path / "nope.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "x",')
    with pytest.raises(ValueError, match=r"broken.json' is not valid JSON"):
        ExperimentConfig.load(broken)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_shipped_configs_are_valid(path):
    config = ExperimentConfig.load(path)
    assert config.name == path.stem
    assert config.task.v == 16 and config.task.train_length == 4 and config.train.steps == 1000


@pytest.mark.parametrize("name", ["ch1_set_complement", "ch5_post_norm"])
def test_chapter_configs_mirror_the_baseline(name):
    # chapters 1 and 5 train baseline_setup(targets, norm); the config must build the same objects
    config = ExperimentConfig.load(CONFIGS / f"{name}.json")
    for norm, targets in config.configurations():
        task, model_cfg, train_cfg = baseline_setup(targets, norm)
        assert config.task.build() == task
        assert config.model.build(config.task.v, norm) == model_cfg
        assert config.train.build(targets) == train_cfg
    assert config.seeds == (0, 1, 2, 3, 4)


def test_ch6_config_mirrors_the_chapter():
    config = ExperimentConfig.load(CONFIGS / "ch6_ema.json")
    assert config.model.placements == ("none", "attn_out") and config.train.targets == ("sampled",)
    assert config.train.ema_beta == 0.99 and config.train.bema and config.seeds == (0, 1, 2)
    assert (config.train.lr, config.train.batch, config.train.warmup) == (3e-3, 128, 100)  # RunSpec defaults


@pytest.fixture(scope="module")
def tiny_local() -> Results:
    return run_experiment(ExperimentConfig.from_dict(TINY), progress=False)


def test_local_run_rows(tiny_local):
    rows = tiny_local.rows
    assert len(rows) == 2 * 2 * 2 * 5  # placements x variants (raw, ema) x seeds x lengths
    assert {(r["norm"], r["variant"]) for r in rows} == {(n, v) for n in ("none", "attn_out") for v in ("raw", "ema")}
    tv = np.array([r["tv"] for r in rows])
    invalid = np.array([r["invalid_mass"] for r in rows])
    assert ((tv >= 0) & (tv <= 1)).all() and (invalid <= tv + 1e-6).all()  # invalid mass is part of the TV
    assert all(r["entropy_ratio"] == 1.0 for r in rows if r["s"] == 1)
    # the experiment is the one training loop: the same numbers as a direct call
    direct = run_configuration(tiny_local.config, "attn_out", "sampled", [0, 1], progress=False)
    assert direct == tiny_local.select(norm="attn_out")


def test_results_array_shapes_and_errors(tiny_local):
    tv = tiny_local.array("tv", norm="attn_out", variant="ema")
    assert tv.shape == (2, 5) and not np.isnan(tv).any()
    assert list(tiny_local.lengths) == [1, 2, 3, 4, 5] and tiny_local.seeds == [0, 1]
    assert not np.array_equal(tv, tiny_local.array("tv", norm="attn_out"))  # EMA differs from raw
    with pytest.raises(ValueError, match=r"metric='accuracy' is invalid"):
        tiny_local.array("accuracy", norm="none")
    with pytest.raises(ValueError, match=r"several configurations"):
        tiny_local.array("tv")  # two placements: norm must be given
    with pytest.raises(ValueError, match=r"no rows match"):
        tiny_local.array("tv", norm="post")
    with pytest.raises(ValueError, match=r"cannot select on \['lr'\]"):
        tiny_local.select(lr=0.1)


def test_results_json_round_trip(tiny_local, tmp_path):
    path = tiny_local.save(tmp_path / "results.json")
    loaded = Results.load(path)
    assert loaded.rows == tiny_local.rows  # floats round-trip exactly
    assert loaded.config == tiny_local.config and loaded.version == tiny_local.version != ""
    np.testing.assert_array_equal(loaded.array("logit_gap", norm="none"), tiny_local.array("logit_gap", norm="none"))
    data = json.loads(path.read_text())
    data["rows"][0].pop("tv")
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"row 0 must have the columns"):
        Results.load(path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"backend": "dask"}, r"backend='dask' is invalid; allowed: one of \('local', 'ray'\)"),
        ({"seeds_per_task": 1}, r"seeds_per_task=1 is invalid; allowed: None with backend='local'"),
        ({"backend": "ray", "seeds_per_task": 0}, r"seeds_per_task=0 is invalid"),
        ({"backend": "ray", "ray_num_cpus": -1}, r"ray_num_cpus=-1 is invalid"),
        ({"backend": "ray", "ray_address": "auto", "ray_num_cpus": 2}, r"ray_num_cpus=2 is invalid"),
    ],
)
def test_bad_run_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_experiment(ExperimentConfig.from_dict(TINY), progress=False, **kwargs)


def test_ray_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'lengthgen_lite\[ray\]'"):
        run_experiment(ExperimentConfig.from_dict(TINY), backend="ray", progress=False)


def test_package_imports_without_ray():
    code = "import sys; sys.modules['ray'] = None; import lengthgen_lite, lengthgen_lite.experiments, lengthgen_lite.cli"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.fixture(scope="module")
def ray_cluster():
    import ray  # pinned in requirements.txt: `make test` has it (an error here, never a skip)

    # Ray gives its raylet a fixed 30 s to register; beside two notebook kernels, the book build and
    # a browser on a 2-core machine that once was not enough. A slow start is retried, twice.
    for attempt in range(3):
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": RAY_ENV})
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
        assert {k: x[k] for k in ("norm", "targets", "variant", "seed", "s")} == {k: y[k] for k in ("norm", "targets", "variant", "seed", "s")}
        for metric in METRICS:
            assert abs(x[metric] - y[metric]) <= 1e-6, (x, y, metric)


def test_ray_matches_local(ray_cluster, tiny_local):
    by_configuration = run_experiment(tiny_local.config, backend="ray", progress=False)
    _assert_same_rows(by_configuration.rows, tiny_local.rows)
    by_seed = run_experiment(tiny_local.config, backend="ray", progress=False, seeds_per_task=1)  # 4 tasks
    _assert_same_rows(by_seed.rows, tiny_local.rows)
    assert ray_cluster.is_initialized()  # a running session is used, not stopped
