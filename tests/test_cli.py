import importlib
import pathlib
import subprocess
import sys
import tomllib

import pytest

from lengthgen_lite import cli
from lengthgen_lite.cli import discover, main, parse_indices, parse_seeds, resolve
from lengthgen_lite.runs import Results
from tiny_experiment import tiny_spec

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny(monkeypatch):
    """The command line with one more experiment, tiny/placements, beside the
    chapters'."""
    specs = discover() | {"tiny/placements": tiny_spec()}
    monkeypatch.setattr(cli, "discover", lambda: specs)
    return specs


def test_parse_seeds():
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("4,9") == [4, 9]


def test_parse_indices_keeps_the_order():
    assert parse_indices("5-7,2") == [5, 6, 7, 2] and parse_indices("3") == [3]


def test_every_chapter_with_experiments_is_discovered():
    specs = discover()
    assert {name.split("/")[0] for name in specs} == {"ch1", "ch4", "ch5", "ch6", "ch7"}
    assert all(spec.name == name for name, spec in specs.items())
    # a chapter runs its first spec
    assert resolve("ch5", specs) is specs["ch5/placements"]
    assert resolve("ch5/dropout", specs) is specs["ch5/dropout"]


def test_list_and_show(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in (
        "ch1/baseline",
        "ch4/retrieval",
        "ch5/dropout",
        "ch6/search",
        "ch7/placements",
    ):
        assert name in out
    assert main(["show", "ch5/dropout"]) == 0
    assert '"name": "ch5/dropout"' in capsys.readouterr().out


def test_run_with_overrides(tiny, tmp_path):
    out = tmp_path / "sub" / "results.json"
    assert (
        main(
            [
                "run",
                "tiny",
                "--seeds",
                "3",
                "--steps",
                "4",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    results = Results.load(out)
    assert results.spec.seeds == (0, 1, 2) and {c.steps for c in results.configs} == {4}
    # warm-up capped at half the steps
    assert results.configs[0].train_config().warmup == 2
    assert results.values("tv_beyond", norm="none").shape == (3,)
    assert results.provenance["command"].startswith("lengthgen-lite run tiny --seeds 3")


def test_run_chapter_four_retrieval(tmp_path):
    """Chapter 4's retrieval experiment runs by its chapter's name: both tasks, three
    variants, scored at every set size N (on 50 test sets, not the spec's 500)."""
    out = tmp_path / "ch4.json"
    argv = ["run", "ch4", "--seeds", "2", "--steps", "50", "--test-sets", "50"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    results = Results.load(out)
    assert results.spec.name == "ch4/retrieval" and len(results.configs) == 6
    assert results.spec.n_test == 50
    assert results.lengths().tolist() == [8, 16, 32, 64, 128, 256, 512, 1024]
    accuracy = results.values("accuracy_train", task="dictionary_lookup", norm="none")
    assert accuracy.shape == (2,) and ((accuracy >= 0) & (accuracy <= 1)).all()


# (arguments after NAME, substrings of the error: the option or field and the bad value)
BAD_ARGS = [
    (["--seeds", "abc"], ["--seeds='abc'", "comma list"]),
    (["--seeds", "0"], ["--seeds='0'", "N >= 1"]),
    (["--seeds", "1,1"], ["seeds=[1, 1]", "distinct"]),
    (["--seeds", "0,-3"], ["seeds must be a non-empty sequence of integers >= 0"]),
    (["--steps", "-1"], ["steps must be an integer >= 1, got -1"]),
    (["--steps", "many"], ["--steps", "invalid int value: 'many'"]),
    (["--backend", "dask"], ["--backend", "invalid choice: 'dask'"]),
    (["--test-sets", "0"], ["n_test must be an integer >= 1, got 0"]),
    (["--seeds-per-task", "2"], ["seeds_per_task=2", "backend='local'"]),
    (["--backend", "ray", "--ray-cpus", "0"], ["ray_num_cpus must be an integer >= 1"]),
    (["--configs", "0"], ["--configs is invalid with --scale live"]),
    (["--scale", "reference", "--configs", "1-x"], ["--configs='1-x' is invalid"]),
    (["--scale", "reference", "--configs", "1,9"], ["configurations [9] do not exist"]),
]


@pytest.mark.parametrize(
    "extra, expected", BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS]
)
def test_bad_input_exits_2_with_the_message(tiny, tmp_path, capsys, extra, expected):
    out = tmp_path / "results.json"
    with pytest.raises(SystemExit) as info:
        main(["run", "tiny", "--out", str(out), "--no-progress", *extra])
    assert info.value.code == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, f"{text!r} not in {err!r}"
    assert not out.exists()  # nothing trained, nothing written


def test_bad_names_exit_2(tmp_path, tiny, capsys):
    cases = [
        (
            ["run", "ch9"],
            "no experiment named 'ch9'; allowed: a chapter ['ch1', 'ch4', 'ch5', "
            "'ch6', 'ch7'",
        ),
        (["show", "ch5/dropin"], "'ch5/dropout'"),
        (["run", "tiny", "--out", str(tmp_path)], "is a directory"),
        (["run"], "the following arguments are required: NAME"),
        ([], "the following arguments are required: command"),
    ]
    for argv, expected in cases:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert expected in capsys.readouterr().err


def test_ray_backend_without_ray_exits_2(tiny, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(SystemExit) as info:
        main(["run", "tiny", "--backend", "ray"])
    assert info.value.code == 2
    assert "pip install 'lengthgen_lite[ray]'" in capsys.readouterr().err


def test_module_entry_point_in_a_subprocess():
    # python -m lengthgen_lite: bad input is an argparse error, exit code 2, message on
    # stderr
    done = subprocess.run(
        [sys.executable, "-m", "lengthgen_lite", "run", "ch7", "--steps", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert "lengthgen-lite: error: steps must be an integer >= 1, got 0" in done.stderr
    assert done.stdout == ""


def test_console_script_and_ray_extra_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module, _, function = project["scripts"]["lengthgen-lite"].partition(":")
    assert getattr(importlib.import_module(module), function) is main
    assert project["optional-dependencies"]["ray"] == ["ray>=2.9"]
    assert "ray==2.60.0" in (ROOT / "requirements.txt").read_text().split()
