"""What keeps the notebook tests honest (the tests themselves are nbval items: see
nbval_tolerant.py).

The comparison is exact for words and integers and tolerant for decimals, so the stored
outputs pass on any CPU while the claims stay asserted inside the notebooks (and hold on
new seeds). A real regression must still fail: chapter 1 with every model built with the
wrong norm placement fails, on one of its claims, under the same plugin. (Its margins go
to a scratch folder, not over the real run's.)
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from nbval_tolerant import CHAPTERS, ON_OLDER_CPU, runs_for

ROOT = pathlib.Path(__file__).resolve().parents[1]

# A regression the tests must catch: every model silently built with Post-Norm instead
# of the placement its config asks for.
WRONG_PLACEMENT = """\
import dataclasses
import lengthgen_lite
_build = lengthgen_lite.Transformer.__init__
lengthgen_lite.Transformer.__init__ = lambda self, cfg, *a, **k: _build(self, dataclasses.replace(cfg, norm="post"), *a, **k)
"""  # noqa: E501  (a notebook prelude: one line of code per statement)


def test_every_chapter_runs_on_stored_and_new_seeds() -> None:
    chapters = sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb"))
    assert len(chapters) >= 7
    for path in chapters:
        assert [run.name for run in runs_for(path)] == [
            "stored-outputs",
            "new-seeds",
        ], path.name
    assert ON_OLDER_CPU in [path.stem for path in chapters]


@pytest.mark.notebook
def test_wrong_placement_is_caught(tmp_path: pathlib.Path) -> None:
    prelude = tmp_path / "wrong_placement.py"
    prelude.write_text(WRONG_PLACEMENT)
    chapter = "notebooks/01_set_complement.ipynb"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-x",
            "-q",
            f"--nb-prelude={prelude}",
            f"--nb-margins={tmp_path / 'margins'}",
            "-k",
            "stored-outputs",
            chapter,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, (
        "chapter 1 with Post-Norm models passed (exit "
        f"{result.returncode}):\n{out[-3000:]}"
    )
    # stopped by one of its own claims: caught
    if "Cell execution caused an exception" in out:
        assert "AssertionError" in out, (
            f"chapter 1 failed, but not on a claim:\n{out[-3000:]}"
        )
    else:
        assert "Cell outputs differ" in out, (
            f"chapter 1 failed for another reason:\n{out[-3000:]}"
        )
