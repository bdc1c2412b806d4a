"""Every chapter, re-executed in a fresh kernel and compared with its stored outputs.

The comparison (`nbcompare.py`) is exact for words and integers and tolerant for decimals, so the
stored outputs pass on any CPU while the claims stay asserted inside the notebooks. Two things show
both halves of that promise: chapter 2 is executed on an emulated older CPU (other matmul kernels,
so other low bits) and must still pass, having had something to tolerate; and chapter 1 with a real
regression (the wrong norm placement) must fail. Chapter 2 runs only that way: a pass on other
kernels implies a pass on the ones that made the outputs, and one execution instead of two saves
its cost (about 30 s). Marked `notebook`: `make unit` leaves these out, `make nbval` runs only these.
"""

from __future__ import annotations

import copy
import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from costliest_first import costliest_first
from nbcompare import Report, compare_cell

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Costliest first: with `--dist loadgroup` the two workers start the long chapters at once.
NOTEBOOKS = costliest_first(sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted((ROOT / "book").glob("*.ipynb")))
CELL_TIMEOUT = 1800  # seconds; a chapter executes in minutes

# Caps MKL's matmul kernels at an older instruction set than any machine this book runs on uses by
# default: the arithmetic is the same, the rounding is not (as on another CPU). Not AVX2, although
# it is faster (chapter 2: 50 s against 66 s, measured): if the stored outputs were ever made on an
# AVX2 machine, an AVX2 run would move nothing and this check would prove nothing.
OLDER_CPU = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
ON_OLDER_CPU = "02_attention_dispersion"  # cheap, and the emulated CPU moves some of its printed numbers

# A regression the tests must catch: every model silently built with Post-Norm instead of the
# placement its config asks for.
WRONG_PLACEMENT = """\
import dataclasses
import lengthgen_lite
_build = lengthgen_lite.Transformer.__init__
lengthgen_lite.Transformer.__init__ = lambda self, cfg, *a, **k: _build(self, dataclasses.replace(cfg, norm="post"), *a, **k)
"""


def execute_and_compare(
    path: pathlib.Path, *, env: dict[str, str] | None = None, prelude: str | None = None, stop_early: bool = False
) -> Report:
    """Run the notebook cell by cell in a fresh kernel, comparing each cell as soon as it ran.

    `prelude` is code run first (not compared); `stop_early` ends at the first difference.
    A cell that raises propagates as `CellExecutionError`.
    """
    stored = nbformat.read(path, as_version=4)
    fresh = copy.deepcopy(stored)
    # The prelude is a cell of its own at the top: nbclient stores every executed cell back into
    # the notebook at the index it is given, so a cell run under another cell's index replaces it.
    fresh.cells.insert(0, nbformat.v4.new_code_cell(prelude or ""))
    client = NotebookClient(
        fresh, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    report = Report()
    with client.setup_kernel(env={**os.environ, **(env or {})}):
        client.execute_cell(fresh.cells[0], 0)
        code = 0
        for index, stored_cell in enumerate(stored.cells, start=1):
            cell = fresh.cells[index]
            if cell.cell_type != "code":
                continue
            code += 1
            cell.outputs = []
            client.execute_cell(cell, index)
            compare_cell(stored_cell, cell, f"{path.stem} code cell {code}", report)
            if stop_early and report.problems:
                break
    return report


def _test_id(path: pathlib.Path) -> str:
    return f"{path.stem}-on-an-older-cpu" if path.stem == ON_OLDER_CPU else path.stem


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_test_id)
def test_notebook_reproduces_its_stored_outputs(path: pathlib.Path) -> None:
    older_cpu = path.stem == ON_OLDER_CPU
    report = execute_and_compare(path, env=OLDER_CPU if older_cpu else None)
    assert report.ok, report.describe()
    if older_cpu:  # other rounding everywhere: the comparison must have had something to tolerate
        assert report.moved > 0, "the emulated CPU changed no printed number: this test would prove nothing"


def test_one_chapter_runs_on_an_older_cpu() -> None:
    assert ON_OLDER_CPU in [path.stem for path in NOTEBOOKS]


@pytest.mark.notebook
def test_wrong_placement_is_caught() -> None:
    try:
        report = execute_and_compare(ROOT / "notebooks" / "01_set_complement.ipynb", prelude=WRONG_PLACEMENT, stop_early=True)
    except CellExecutionError as err:  # the chapter stopped on one of its own claims: caught
        assert "AssertionError" in str(err), f"chapter 1 failed, but not on a claim:\n{err}"
        return
    assert not report.ok, "chapter 1 with Post-Norm models reproduced the no-norm outputs"
