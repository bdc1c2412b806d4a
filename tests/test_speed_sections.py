"""benchmarks/speed.py measures one section alone and merges it into the results file,
leaving every other section as it was; two sections in one run are refused."""

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import speed  # noqa: E402

EARLIER = {
    "machine": {"cpu": "old"},
    "chapters": [{"chapter": "01_old"}],
    "two_at_a_time": {"wall_seconds": 1.0},
    "batching": [{"seeds": 4}],
    "fast_path": {"rows": ["fast"]},
    "retrieval": {"rows": ["retrieval"]},
    "depth": {"rows": ["depth"]},
}


def run(monkeypatch, tmp_path, *flags):
    out = tmp_path / "speed.json"
    out.write_text(json.dumps(EARLIER))
    monkeypatch.setattr(
        speed,
        "measure_chapters",
        lambda: {
            "machine": {"cpu": "new"},
            "chapters": [{"chapter": "01_new"}],
            "two_at_a_time": {"wall_seconds": 2.0},
        },
    )
    monkeypatch.setattr(speed, "measure_depth", lambda *args: {"rows": ["new depth"]})
    monkeypatch.setattr(sys, "argv", ["speed.py", "--out", str(out), *flags])
    speed.main()
    return json.loads(out.read_text())


def test_chapters_alone_replace_the_machine_and_both_chapter_sections_only(
    monkeypatch, tmp_path
):
    merged = run(monkeypatch, tmp_path, "--chapters")
    assert merged["machine"] == {"cpu": "new"}
    assert merged["chapters"] == [{"chapter": "01_new"}]
    assert merged["two_at_a_time"] == {"wall_seconds": 2.0}
    for kept in ("batching", "fast_path", "retrieval", "depth"):
        assert merged[kept] == EARLIER[kept]


def test_another_section_alone_leaves_the_chapters(monkeypatch, tmp_path):
    merged = run(monkeypatch, tmp_path, "--depth")
    assert merged["depth"] == {"rows": ["new depth"]}
    assert merged["machine"] == {"cpu": "old"}
    assert merged["chapters"] == EARLIER["chapters"]


def test_two_sections_in_one_run_are_refused(monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run(monkeypatch, tmp_path, "--chapters", "--depth")
    assert "one section per run" in capsys.readouterr().err
