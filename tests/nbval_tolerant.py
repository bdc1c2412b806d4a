"""Every chapter as nbval tests: one pytest item per code cell, each chapter executed
twice.

nbval executes a notebook cell by cell in a fresh kernel, one pytest item per code cell,
so a failure is named by its notebook and cell
(`notebooks/05_post_norm.ipynb::new-seeds::Cell 6`). This plugin (registered by the root
`conftest.py`) builds on it without forking it, and collects every notebook it is given
(`testpaths`: those under `notebooks/` and `book/`) as up to two runs:

- `stored-outputs`: each cell's outputs are compared with the stored ones by
  `nbcompare`, which is exact for words and integers and tolerant for decimals (another
  CPU's rounding), instead of nbval's byte-for-byte comparison. Chapter 2 runs with
  MKL's kernels capped at an older instruction set (on Intel CPUs other kernels, other
  rounding; on this book's AMD machines MKL's cap changed no printed number, so it is
  not relied on as proof).
- `new-seeds`: chapters only, with every seed moved by `LENGTHGEN_SEED_OFFSET` (default
  `NEW_SEED_OFFSET`), so the run uses seeds no stored output used. Outputs are not
  compared; every claim a chapter asserts must hold.

Every run's kernel records the margin of each claim it asserts through
`lengthgen_lite.runs.claims` in `<--nb-margins>/<run>/<notebook>.jsonl` (default
`_build/margins`); `margins_report.py` tabulates them.

After a cell raises, the rest of its run is skipped (its later cells would fail only for
want of the variables it did not define); after a cell whose outputs differ, the run
goes on. `--nb-prelude FILE` runs code in each kernel before the first cell: the
regression test in `test_notebooks.py` uses it to build every model with the wrong norm
placement. Each cell item carries the `notebook` marker. A run's cells must execute in
order in one kernel, so the notebook tests run under `pytest -n 2 --dist loadfile`,
which keeps every item of a file (both runs of a notebook) on one worker and hands out
whole files, costliest first. nbval's own `--nbval` flag is not used: it would collect
every notebook once more, with the exact comparison.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
from collections import defaultdict
from collections.abc import Iterator

import pytest
from nbval.plugin import IPyNbCell, IPyNbFile, NbCellError

from costliest_first import costliest_first
from lengthgen_lite.core.seeding import SEED_OFFSET_VARIABLE
from lengthgen_lite.runs.claims import MARGINS_FILE_VARIABLE
from nbcompare import Report, compare_cell

CHAPTERS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"

# No stored output uses a seed this large: every chapter's seeds are below 100.
NEW_SEED_OFFSET = "1000"

# Caps MKL's matmul kernels at an older instruction set than any machine this book runs
# on uses by default: the arithmetic is the same, the rounding is not (as on another
# CPU). Not AVX2: if the stored outputs were ever made on an AVX2 machine, an AVX2 run
# would move nothing and prove nothing.
OLDER_CPU = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
# cheap; on Intel CPUs the cap moves some of its printed numbers
ON_OLDER_CPU = "02_attention_dispersion"


@dataclasses.dataclass(frozen=True)
class Run:
    """One execution of a notebook: its name in the test id, its kernel's environment,
    and whether outputs are compared with the stored ones."""

    name: str
    env: dict[str, str]
    compare: bool


RUN_NAMES = ("stored-outputs", "new-seeds")
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
# nbval's message when a cell ran but its outputs differ
OUTPUTS_DIFFER = "Cell outputs differ"


def runs_for(path: pathlib.Path) -> list[Run]:
    # the stored seeds even where the caller's environment sets an offset for the
    # new-seeds run
    stored_env = {
        SEED_OFFSET_VARIABLE: "0",
        **(OLDER_CPU if path.stem == ON_OLDER_CPU else {}),
    }
    stored = Run("stored-outputs", stored_env, compare=True)
    if path.parent != CHAPTERS:
        return [stored]
    offset = os.environ.get(SEED_OFFSET_VARIABLE) or NEW_SEED_OFFSET
    if offset == "0":
        raise pytest.UsageError(
            f"{SEED_OFFSET_VARIABLE}=0 would make the new-seeds run repeat "
            "the stored seeds"
        )
    return [stored, Run("new-seeds", {SEED_OFFSET_VARIABLE: offset}, compare=False)]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--nb-prelude",
        metavar="FILE",
        help="Python code run in every notebook kernel before its first cell",
    )
    parser.addoption(
        "--nb-margins",
        metavar="DIR",
        default="_build/margins",
        help="where each run's kernel records the margins of its claims (relative "
        "to the rootdir)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "notebook: executes a notebook (minutes); `make unit` leaves these out",
    )


def pytest_collect_file(
    file_path: pathlib.Path, parent: pytest.Collector
) -> pytest.Collector | None:
    if file_path.suffix == ".ipynb" and ".ipynb_checkpoints" not in file_path.parts:
        return NotebookRuns.from_parent(parent, path=file_path)
    return None


class NotebookRuns(pytest.File):
    """A notebook file: one child collector per run."""

    def collect(self) -> Iterator[pytest.Collector]:
        for run in runs_for(self.path):
            yield NotebookRun.from_parent(
                self,
                path=self.path,
                name=run.name,
                nodeid=f"{self.nodeid}::{run.name}",
                run=run,
            )


@contextlib.contextmanager
def environment(extra: dict[str, str]) -> Iterator[None]:
    """os.environ with `extra` set, restored afterwards: a kernel inherits it when it
    starts."""
    saved = dict(os.environ)
    os.environ.update(extra)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class NotebookRun(IPyNbFile):
    """nbval's notebook collector, with its kernel started in the run's environment."""

    def __init__(self, *args, run: Run, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.run = run
        self.compare_outputs = run.compare
        self.failed_cell: int | None = None

    def setup(self) -> None:
        margins = (
            self.config.rootpath
            / self.config.getoption("--nb-margins")
            / self.run.name
            / f"{self.path.stem}.jsonl"
        )
        margins.parent.mkdir(parents=True, exist_ok=True)
        margins.unlink(missing_ok=True)
        with environment({**self.run.env, MARGINS_FILE_VARIABLE: str(margins)}):
            super().setup()
        prelude = self.config.getoption("--nb-prelude")
        if prelude:
            reply = self.kernel.kc.execute_interactive(
                pathlib.Path(prelude).read_text(),
                timeout=120,
                output_hook=lambda msg: None,
            )
            if reply["content"]["status"] != "ok":
                raise RuntimeError(
                    f"the prelude {prelude} failed: {reply['content'].get('evalue')}"
                )

    def collect(self) -> Iterator[pytest.Item]:
        # nbval builds its own cell class: rebuilt as ours
        for item in super().collect():
            cell = ToleratedCell.from_parent(
                self,
                name=item.name,
                cell_num=item.cell_num,
                cell=item.cell,
                options=item.options,
            )
            yield self._marked(cell)

    @staticmethod
    def _marked(item: pytest.Item) -> pytest.Item:
        item.add_marker(pytest.mark.notebook)
        return item


class ToleratedCell(IPyNbCell):
    """nbval's cell item, compared by `nbcompare` and skipped once its run has
    failed."""

    parent: NotebookRun

    def runtest(self) -> None:
        if self.parent.failed_cell is not None:
            pytest.skip(f"Cell {self.parent.failed_cell} of this run failed")
        try:
            super().runtest()
        except NbCellError as error:
            # it raised: later cells would miss what it defines
            if str(error) != OUTPUTS_DIFFER:
                self.parent.failed_cell = self.cell_num
            raise
        except BaseException:
            self.parent.failed_cell = self.cell_num
            raise

    def reportinfo(self):
        # nbval's leaves out the run
        return self.path, None, f"{self.parent.nodeid}::{self.name}"

    def repr_failure(self, excinfo) -> str:
        """nbval's report; the kernel's traceback without colour codes where colour is
        off (CI logs)."""
        text = super().repr_failure(excinfo)
        return ANSI_COLOUR.sub("", text) if self.config.option.color == "no" else text

    def compare_outputs(self, test, ref, skip_compare=None) -> bool:
        report = Report()
        compare_cell(
            {"metadata": self.cell.metadata, "outputs": ref},
            {"outputs": test},
            f"Cell {self.cell_num}",
            report,
        )
        self.comparison_traceback = [report.describe()]
        return report.ok


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Notebook runs first, costliest notebook first (as last measured by `make bench`),
    its stored-outputs run before its new-seeds run; then other notebook tests; the unit
    tests last.

    With `--dist loadfile` each worker takes the next file as it frees up, so the long
    chapters start at once and the many short unit tests fill the gaps at the end.
    """
    paths = sorted(
        {item.path for item in items if isinstance(item.parent, NotebookRun)}
    )
    rank = {path: i for i, path in enumerate(costliest_first(paths))}

    def key(item: pytest.Item) -> tuple[int, int, int]:
        if isinstance(item.parent, NotebookRun):
            return (0, rank[item.path], RUN_NAMES.index(item.parent.name))
        return (1 if item.get_closest_marker("notebook") else 2, 0, 0)

    items.sort(key=key)  # stable: cells keep their order within a run


_run_seconds: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    run, _, _ = report.nodeid.rpartition("::")
    if run.rpartition("::")[2] in RUN_NAMES:
        _run_seconds[run] += report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    if _run_seconds:
        terminalreporter.section("notebook runs (seconds, all cells)")
        for run, seconds in sorted(_run_seconds.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{seconds:7.1f}  {run}")
