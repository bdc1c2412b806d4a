"""The notebook plugin on tiny notebooks: tolerant comparison, a failed run stops, seeds
move."""

from __future__ import annotations

import os
import pathlib

import nbformat
import pytest

TESTS = pathlib.Path(__file__).resolve().parent


def notebook(path: pathlib.Path, cells: list[tuple[str, str]]) -> None:
    """A notebook whose code cells hold `source` and, as their stored output, the
    printed `stored`."""
    nb = nbformat.v4.new_notebook()
    for count, (source, stored) in enumerate(cells, start=1):
        cell = nbformat.v4.new_code_cell(source, execution_count=count)
        cell.outputs = (
            [nbformat.v4.new_output("stream", name="stdout", text=stored)]
            if stored
            else []
        )
        nb.cells.append(cell)
    nbformat.write(nb, path)


@pytest.fixture
def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )

    def run_pytest(*args: str) -> pytest.RunResult:
        return pytester.runpytest_subprocess(
            "-p",
            "nbval_tolerant",
            "--nbval-current-env",
            "-p",
            "no:cacheprovider",
            "--color=no",
            *args,
        )

    return run_pytest


def test_a_rounding_move_passes_and_a_real_change_fails(
    pytester: pytest.Pytester, run
) -> None:
    notebook(pytester.path / "moved.ipynb", [("print(0.411)", "0.410\n")])
    notebook(
        pytester.path / "changed.ipynb",
        [("print(0.52)", "0.410\n"), ("print('ok')", "ok\n")],
    )
    result = run("moved.ipynb", "changed.ipynb")
    result.assert_outcomes(passed=2, failed=1)  # the run goes on after a difference
    result.stdout.fnmatch_lines(
        [
            "*changed.ipynb::stored-outputs::Cell 0*",
            "*0.410 (stored) vs 0.52 (fresh)*",
            "FAILED changed.ipynb::stored-outputs::Cell 0*",
        ]
    )


def test_cells_after_a_raising_cell_are_skipped(pytester: pytest.Pytester, run) -> None:
    notebook(
        pytester.path / "claim.ipynb",
        [("assert 1 > 2, 'a claim'", ""), ("print(x)", "1\n")],
    )
    result = run("claim.ipynb", "-rs")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["*AssertionError: a claim*", "*Cell 0 of this run failed*"]
    )
