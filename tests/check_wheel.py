"""The wheel on its own: installed into an empty folder, it executes a notebook of the
book with nothing of the repository on the path (make check-dist).

    python tests/check_wheel.py <wheel> <notebook>

The wheel is installed without its dependencies (they come from the running Python's
environment, as a reader's venv would provide them) into a temporary folder, and the
notebook is copied to another one and executed there, in a kernel whose PYTHONPATH is
that folder alone. A first cell, added to the copy, fails the run unless
`lengthgen_lite` is imported from the installed wheel and no path of the repository is
on `sys.path` (the venv's own folders aside): the venv's editable install points at
the repository, so without this check a wheel missing a file could pass by reading the
checkout. Exit 0 on success.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
WHERE = """import sys, pathlib, lengthgen_lite
site, repo = pathlib.Path({site!r}), pathlib.Path({repo!r})
where = pathlib.Path(lengthgen_lite.__file__)
assert where.is_relative_to(site), where
# the repository's own folders (its venv aside, which may live inside it)
inside = [p for p in sys.path if pathlib.Path(p or ".").resolve().is_relative_to(repo)]
assert all(pathlib.Path(p).is_relative_to(sys.prefix) for p in inside), sys.path"""


def main(wheel: pathlib.Path, notebook: pathlib.Path) -> int:
    if not wheel.is_file() or wheel.suffix != ".whl":
        raise ValueError(f"expected a built wheel (.whl), got {wheel}")
    with tempfile.TemporaryDirectory(prefix="lengthgen-wheel-") as tmp:
        site, work = pathlib.Path(tmp, "site"), pathlib.Path(tmp, "work")
        work.mkdir()
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
            + ["--no-index", "--target", str(site), str(wheel)],
            check=True,
        )
        copy = work / notebook.name
        shutil.copy(notebook, copy)
        nb = nbformat.read(copy, as_version=4)
        check = WHERE.format(site=str(site), repo=str(ROOT))
        nb.cells.insert(0, nbformat.v4.new_code_cell(check))
        os.environ["PYTHONPATH"] = str(site)
        os.environ["OMP_NUM_THREADS"] = "1"
        start = time.perf_counter()
        client = NotebookClient(
            nb,
            timeout=900,
            kernel_name="python3",
            resources={"metadata": {"path": work}},
        )
        client.execute(cwd=str(work))
        seconds = time.perf_counter() - start
        stored = sum(1 for _ in site.glob("lengthgen_lite/data/reference/*/*.json.gz"))
        print(
            f"{wheel.name}: installed alone ({stored} stored sweep files inside); "
            f"{notebook} executed from it in {seconds:.0f} s"
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/check_wheel.py <wheel> <notebook>")
    sys.exit(main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])))
