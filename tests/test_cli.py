import importlib
import json
import pathlib
import subprocess
import sys
import tomllib

import pytest

import lengthgen_lite
from lengthgen_lite import cli
from lengthgen_lite.cli import (
    discover,
    main,
    parse_indices,
    parse_seeds,
    resolve,
    without_specs,
)
from lengthgen_lite.runs import Results, Spec
from lengthgen_lite.runs.store import DAMAGED, Store, read_file
from tiny_experiment import tiny_spec
from tiny_models import causal_test_by_hand

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
    chapters = {name.split("/")[0] for name in specs}
    assert chapters == {"ch1", "ch4", "ch5", "ch6", "ch7", "ch8"}
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


def test_list_says_why_a_chapter_has_no_experiments(capsys):
    """Every chapter either declares SPECS or says why not, and list shows why."""
    files = (ROOT / "lengthgen_lite" / "chapters").glob("ch[0-9]*_*.py")
    chapters = {p.stem.split("_")[0] for p in files}
    # every chapter is imported by the command line, in order
    names = [cli.chapter_name(module) for module in cli.CHAPTERS]
    assert names == sorted(chapters, key=lambda c: int(c[2:]))
    with_specs = {name.split("/")[0] for name in discover()}
    reasons = without_specs()
    assert set(reasons) == {"ch2", "ch3"} == chapters - with_specs
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for chapter, reason in reasons.items():
        line = f"{chapter:16} no experiment of its own: {reason}"
        assert line in lines
    assert "chapter 1's baseline models" in reasons["ch2"]


def test_smollm2_stores_chapter_eight_causal_test(tmp_path, monkeypatch, capsys):
    """The command's path without the model: the 20-window test made by hand."""
    p6 = cli.ch8_smollm2
    monkeypatch.setattr(p6, "smollm2_causal_test", lambda n: causal_test_by_hand(n))
    assert main(["smollm2", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"stored {tmp_path / 'ch8__smollm2' / 'causal_test.json.gz'}"
    assert (
        out[1]
        == "natural text (20 windows): mean loss none 2.500, logn 2.510, std 2.500"
    )
    assert out[3].startswith("ch8-score-logn-smollm2: no effect (SmolLM2-135M, 20 text")
    stored = read_file(tmp_path / "ch8__smollm2" / "causal_test.json.gz")
    assert (
        stored["provenance"]["command"] == f"lengthgen-lite smollm2 --store {tmp_path}"
    )


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"lengthgen-lite {lengthgen_lite.__version__}\n"


def test_run_with_overrides(tiny, tmp_path, capsys):
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
    # the summary: where, seeds, steps, wall time, the key metric per configuration
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(
        "tiny/placements: 2 configurations, seeds 0..2, 4 steps, wall time "
    )
    assert lines[1] == f"results: {out}"
    assert lines[2].startswith("key metric tv_beyond: tv averaged over the lengths")
    for i, norm in enumerate(("none", "attn_out")):
        values = results.values("tv_beyond", norm=norm)
        assert lines[4 + i].split() == [
            str(i),
            "set_complement,",
            f"norm={norm},",
            "sampled",
            f"{values.mean():.4g}",
            f"[{values.min():.4g},",
            f"{values.max():.4g}]",
        ]
    assert len(lines) == 6


def test_a_spec_printed_by_show_runs_as_it_is(tiny, tmp_path, capsys):
    assert main(["show", "tiny/placements"]) == 0
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(capsys.readouterr().out)
    assert Spec.from_dict(json.loads(spec_file.read_text())) == tiny_spec()
    out = tmp_path / "results.json"
    argv = ["run", "--spec", str(spec_file), "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert Results.load(out).spec == tiny_spec()
    assert capsys.readouterr().out.startswith("tiny/placements: 2 configurations")


def test_run_chapter_four_retrieval(tmp_path, capsys):
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
    # no TV in a retrieval table: the summary quotes accuracy beyond the training sizes
    assert results.key_metric() == "accuracy_beyond"
    assert "key metric accuracy_beyond" in capsys.readouterr().out


def test_a_resumed_reference_run_sets_a_damaged_file_aside(tiny, tmp_path, capsys):
    """One truncated store file: named in one line, moved aside, trained again."""
    store = tmp_path / "store"
    argv = ["run", "tiny", "--tier", "reference", "--store", str(store)]
    assert main([*argv, "--seeds", "2", "--steps", "60", "--no-progress"]) == 0
    first = capsys.readouterr().out.splitlines()
    assert first[0] == "tiny/placements: 0 of 2 stored, 2 to run"
    assert first[3].startswith(
        "tiny/placements: 2 configurations, seeds 0,1, 60 steps, wall time "
    )
    folder = store / "tiny__placements"
    assert first[4] == f"results: store folder {folder} (2 of 2 configurations)"
    spec = (
        tiny_spec()
        .at_tier("reference")
        .with_overrides(seeds=2, steps=60, checkpoints=())
    )
    damaged = Store(store).path(spec, 1)
    damaged.write_bytes(damaged.read_bytes()[:100])
    assert main([*argv, "--seeds", "2", "--steps", "60", "--no-progress"]) == 0
    again = capsys.readouterr().out.splitlines()
    assert again[0].startswith(f"{damaged} is damaged (Compressed file ended ")
    assert again[0].endswith(
        f": moved to {damaged.name}{DAMAGED}; configuration 1 is trained again"
    )
    assert again[1:3] == [
        "tiny/placements: 1 of 2 stored, 1 to run",
        f"saved {damaged}",
    ]
    assert (folder / f"{damaged.name}{DAMAGED}").exists()
    assert first[-2:] == again[-2:]  # the same seeds retrained: the same numbers


# (arguments after NAME, substrings of the error: the flag as typed and the bad value)
BAD_ARGS = [
    (["--seeds", "abc"], ["--seeds='abc'", "comma list"]),
    (["--seeds", "0"], ["--seeds='0'", "N >= 1"]),
    (["--seeds", "1,1"], ["--seeds='1,1' is invalid; allowed: distinct seeds >= 0"]),
    (["--seeds", "0,-3"], ["--seeds='0,-3' is invalid; allowed: distinct seeds >= 0"]),
    (
        ["--steps", "-1"],
        ["argument --steps: '-1' is invalid; allowed: an integer >= 1"],
    ),
    (["--steps", "many"], ["argument --steps: 'many' is invalid"]),
    (["--backend", "dask"], ["--backend", "invalid choice: 'dask'"]),
    (
        ["--test-sets", "0"],
        ["argument --test-sets: '0' is invalid; allowed: an integer"],
    ),
    (
        ["--seeds-per-task", "2"],
        ["--seeds-per-task=2 is invalid; allowed: only with --backend='ray'"],
    ),
    (["--ray-cpus", "2"], ["--ray-cpus=2 is invalid; allowed: only with --backend"]),
    (["--ray-address", "auto"], ["--ray-address='auto' is invalid; allowed: only"]),
    (
        ["--backend", "ray", "--seeds-per-task", "0"],
        ["argument --seeds-per-task: '0' is invalid"],
    ),
    (["--backend", "ray", "--ray-cpus", "0"], ["argument --ray-cpus: '0' is invalid"]),
    (
        ["--backend", "ray", "--ray-address", "auto", "--ray-cpus", "2"],
        ["--ray-cpus must be unset when --ray-address is given"],
    ),
    (["--backend", "ray", "--ray-address", ""], ["--ray-address='' is invalid"]),
    (["--configs", "0"], ["--configs is invalid with --tier live"]),
    (["--tier", "reference", "--configs", "1-x"], ["--configs='1-x' is invalid"]),
    (
        ["--tier", "reference", "--configs", "3-1"],
        ["--configs='3-1' is invalid: the range 3-1 is empty"],
    ),
    (["--tier", "reference", "--configs", "2-"], ["--configs='2-' is invalid"]),
    (["--tier", "reference", "--configs", "-2"], ["--configs='-2' is invalid"]),
    (["--tier", "reference", "--configs", "1,"], ["--configs='1,' is invalid"]),
    (
        ["--tier", "reference", "--configs", "0-2,1"],
        ["--configs='0-2,1' is invalid: configurations [1] are named more than once"],
    ),
    (
        ["--tier", "reference", "--configs", "1,9"],
        ["--configs='1,9' is invalid: configurations [9] do not exist"],
    ),
]
# what the runner and the spec call them: never in an error of the command line
FIELDS = ("n_test", "seeds_per_task", "ray_num_cpus", "ray_address", " backend=")


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
    assert not any(field in err for field in FIELDS), err
    assert not out.exists()  # nothing trained, nothing written


def test_a_bad_spec_file_exits_2_naming_it(tiny, tmp_path, capsys):
    spec_file = tmp_path / "spec.json"
    cases = [
        ("{", "is invalid: Expecting property name"),
        ('{"name": "x", "seed": [0]}', "is invalid: spec has unknown field 'seed'"),
        ('{"name": "x", "n_test": 0}', "is invalid: n_test must be an integer >= 1"),
    ]
    for text, expected in cases:
        spec_file.write_text(text)
        with pytest.raises(SystemExit) as info:
            main(["run", "--spec", str(spec_file)])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert f"--spec={str(spec_file)!r} {expected}" in err
        assert "allowed: a JSON file as `lengthgen-lite show NAME` prints it" in err
    for argv, expected in [
        (["--spec", str(tmp_path / "none.json")], "cannot be read"),
        (["tiny", "--spec", str(spec_file)], "run got both NAME and --spec"),
    ]:
        with pytest.raises(SystemExit):
            main(["run", *argv])
        assert expected in capsys.readouterr().err


def test_bad_names_exit_2(tmp_path, tiny, capsys):
    cases = [
        (
            ["run", "ch9"],
            "no experiment named 'ch9'; allowed: a chapter ['ch1', 'ch4', 'ch5', "
            "'ch6', 'ch7'",
        ),
        (["show", "ch5/dropin"], "'ch5/dropout'"),
        (["run", "tiny", "--out", str(tmp_path)], "is a directory"),
        (["run"], "run got neither NAME nor --spec; allowed: exactly one"),
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
    assert (
        "lengthgen-lite run: error: argument --steps: '0' is invalid; allowed: an "
        "integer >= 1" in done.stderr
    )
    assert done.stdout == ""


def test_console_script_and_ray_extra_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module, _, function = project["scripts"]["lengthgen-lite"].partition(":")
    assert getattr(importlib.import_module(module), function) is main
    assert project["optional-dependencies"]["ray"] == ["ray>=2.9"]
    assert "ray==2.60.0" in (ROOT / "requirements.txt").read_text().split()
