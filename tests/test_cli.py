import importlib
import json
import pathlib
import subprocess
import sys
import tomllib

import pytest

from lengthgen_lite.cli import main, parse_lengths, parse_seeds
from lengthgen_lite.experiments import Results

from tiny_experiment import TINY

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny_config(tmp_path) -> pathlib.Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return path


def test_parse_seeds_and_lengths():
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("4,9") == [4, 9]
    assert parse_lengths("2-4") == [2, 3, 4] and parse_lengths("1,5") == [1, 5] and parse_lengths("3") == [3]


def test_run_with_overrides(tiny_config, tmp_path):
    out = tmp_path / "sub" / "results.json"
    argv = ["run", str(tiny_config), "--seeds", "3", "--steps", "4", "--lengths", "2-4", "--placements", "post",
            "--set", "train.ema_beta=null", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    results = Results.load(out)
    config = results.config
    assert config.seeds == (0, 1, 2) and config.train.steps == 4 and config.train.warmup == 4  # warm-up capped
    assert config.model.placements == ("post",) and config.train.ema_beta is None
    assert {r["variant"] for r in results.rows} == {"raw"} and list(results.lengths) == [2, 3, 4]
    assert results.array("tv").shape == (3, 3)


# (arguments after CONFIG, substrings of the error: the option or field and the bad value)
BAD_ARGS = [
    (["--seeds", "abc"], ["--seeds='abc'", "comma list"]),
    (["--seeds", "0"], ["--seeds='0'", "N >= 1"]),
    (["--seeds", "1,1"], ["seeds=[1, 1]", "distinct"]),
    (["--seeds", "0,-3"], ["seeds[1]=-3"]),
    (["--steps", "-1"], ["steps must be a positive int, got -1"]),
    (["--steps", "many"], ["--steps", "invalid int value: 'many'"]),
    (["--lengths", "5-2"], ["--lengths='5-2'", "a <= b"]),
    (["--lengths", "1-9"], ["evaluation.lengths[5]=6", "1..5"]),
    (["--lengths", "0-3"], ["evaluation.lengths[0]=0"]),
    (["--placements", "none", "postt"], ["model.placements[1]='postt'", "attn_out"]),
    (["--targets", "hard"], ["train.targets[0]='hard'", "soft"]),
    (["--set", "train.lr=-1"], ["lr must be positive, got -1"]),
    (["--set", "task.v=3"], ["1..v-1 = 1..2", "train_length=3"]),
    (["--set", "model.n_heads=3"], ["d_model=16", "n_heads=3"]),
    (["--set", "train.ema_beta=2"], ["train.ema_beta", "got 2"]),
    (["--set", "optimizer=adam"], ["--set 'optimizer=adam'", "train.lr"]),
    (["--set", "train.lr"], ["--set 'train.lr'", "KEY=VALUE"]),
    (["--backend", "dask"], ["--backend", "invalid choice: 'dask'"]),
    (["--seeds-per-task", "2"], ["seeds_per_task=2", "backend='local'"]),
    (["--backend", "ray", "--ray-cpus", "0"], ["ray_num_cpus=0", "int >= 1"]),
]


@pytest.mark.parametrize("extra, expected", BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS])
def test_bad_input_exits_2_with_the_message(tiny_config, tmp_path, capsys, extra, expected):
    out = tmp_path / "results.json"
    with pytest.raises(SystemExit) as info:
        main(["run", str(tiny_config), "--out", str(out), "--no-progress", *extra])
    assert info.value.code == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, f"{text!r} not in {err!r}"
    assert not out.exists()  # nothing trained, nothing written


def test_bad_files_exit_2(tmp_path, tiny_config, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    cases = [
        (["run", str(tmp_path / "missing.json")], "missing.json' does not exist"),
        (["run", str(broken)], "is not valid JSON"),
        (["run", str(tiny_config), "--out", str(tmp_path)], "is a directory"),
        (["run"], "the following arguments are required: CONFIG"),
        ([], "the following arguments are required: command"),
    ]
    for argv, expected in cases:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert expected in capsys.readouterr().err


def test_ray_backend_without_ray_exits_2(tiny_config, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(SystemExit) as info:
        main(["run", str(tiny_config), "--backend", "ray"])
    assert info.value.code == 2
    assert "pip install 'lengthgen_lite[ray]'" in capsys.readouterr().err


def test_module_entry_point_in_a_subprocess(tiny_config):
    # python -m lengthgen_lite: bad input is an argparse error, exit code 2, message on stderr
    done = subprocess.run(
        [sys.executable, "-m", "lengthgen_lite", "run", str(tiny_config), "--set", "task.v=1"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert done.returncode == 2
    assert "lengthgen-lite: error: task: vocabulary size v must be an int >= 2, got 1" in done.stderr
    assert done.stdout == ""


def test_console_script_and_ray_extra_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module, _, function = project["scripts"]["lengthgen-lite"].partition(":")
    assert getattr(importlib.import_module(module), function) is main
    assert project["optional-dependencies"]["ray"] == ["ray>=2.9"]
    assert "ray==2.60.0" in (ROOT / "requirements.txt").read_text().split()
