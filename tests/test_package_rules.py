"""House rules that a grep can check (CONTRIBUTING.md): where heavy imports may live, and what
every chapter notebook must contain."""

import ast
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lengthgen_lite"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PLOTTING = {"matplotlib", "seaborn", "plotly", "ipywidgets", "IPython"}


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_plotting_only_in_viz_and_tqdm_only_in_training(path):
    modules = imported_modules(path)
    if "viz" not in path.relative_to(PACKAGE).parts:
        assert not modules & PLOTTING, f"{path.name} imports {modules & PLOTTING}; drawing code belongs in viz/"
    if path.name != "training.py":
        assert "tqdm" not in modules, "progress bars belong to the one training loop"


@pytest.mark.parametrize("path", sorted(p for p in PACKAGE.rglob("*.py") if "viz" not in p.parts))
def test_nothing_outside_viz_imports_viz(path):
    assert not re.findall(r"from \.+viz|lengthgen_lite\.viz", path.read_text()), "nothing imports viz"


def test_package_never_prints():
    offenders = [p.name for p in PACKAGE.rglob("*.py") if re.search(r"^\s*print\(", p.read_text(), re.M)]
    assert not offenders


def test_all_chapters_exist():
    assert [p.stem[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_skeleton_and_stored_outputs(path):
    nb = json.loads(path.read_text())
    cells = nb["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    code = [c for c in cells if c["cell_type"] == "code"]
    assert re.search(r"^\(ch\d-[\w-]+\)=", "".join(cells[0]["source"]), re.M), "first cell starts with a (chN-...)= label"
    for heading in ("What you will learn", "Summary", "Exercises"):
        assert heading in text, f"missing section {heading!r}"
    assert "lengthgen_lite" in "".join(code[0]["source"]), "the first code cell imports the package"
    assert "seed_everything" in "".join(code[0]["source"]), "the first code cell seeds everything"
    assert all(c.get("execution_count") for c in code), "stored outputs come from a full execution"
    source = "\n".join("".join(c["source"]) for c in code)
    assert not re.search(r"class \w+\((nn\.)?Module\)", source), "notebooks import models, never define them"
    assert "assert " in source, "key claims are asserted in code"
    assert "glue(" in source, "numbers in prose are glued"
