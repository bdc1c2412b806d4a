"""House rules that a grep can check (CONTRIBUTING.md): where heavy imports may live,
and what every chapter notebook must contain."""

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


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_plotting_only_in_viz_and_tqdm_only_in_training(path):
    modules = imported_modules(path)
    if "viz" not in path.relative_to(PACKAGE).parts:
        assert not modules & PLOTTING, (
            f"{path.name} imports {modules & PLOTTING}; drawing code belongs in viz/"
        )
    if path.relative_to(PACKAGE) != pathlib.Path("core/training.py"):
        assert "tqdm" not in modules, "progress bars belong to the one training loop"


@pytest.mark.parametrize(
    "path",
    sorted(
        p for p in PACKAGE.rglob("*.py") if "viz" not in p.relative_to(PACKAGE).parts
    ),
)
def test_nothing_outside_viz_imports_viz(path):
    assert not [
        name for name in package_imports(path) if name.split(".")[0] == "viz"
    ], "nothing imports viz"


def package_imports(path: pathlib.Path) -> set[str]:
    """Dotted names, relative to the package, of what ``path`` imports from inside the
    package."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(parts[: len(parts) - node.level])
            elif node.module and node.module.split(".")[0] == "lengthgen_lite":
                base = []
            else:
                continue
            module = [*base, *(node.module.split(".") if node.module else [])]
            if module[:1] == ["lengthgen_lite"]:
                module = module[1:]
            # `from ..chapters import ch1_x` imports the module ch1_x
            # `from . import __version__` at the top imports the package root
            for alias in node.names:
                is_module = (PACKAGE.joinpath(*module, f"{alias.name}.py")).exists()
                name = ".".join([*module, alias.name] if is_module else module)
                names.add(name or "__init__")
        elif isinstance(node, ast.Import):
            names |= {
                a.name.removeprefix("lengthgen_lite.")
                for a in node.names
                if a.name.startswith("lengthgen_lite.")
            }
    return names


def chapter_number(name: str) -> int:
    return int(re.match(r"ch(\d+)_", name.split(".")[-1]).group(1))


CHAPTER_MODULES = sorted((PACKAGE / "chapters").glob("ch*_*.py"))
VIZ_CHAPTER_MODULES = sorted((PACKAGE / "viz").glob("ch*_*.py"))


def test_every_chapter_module_and_viz_module_is_checked():
    # the rules below would pass vacuously otherwise
    assert CHAPTER_MODULES and VIZ_CHAPTER_MODULES
    assert all(
        re.fullmatch(r"ch\d+_\w+", p.stem)
        for p in CHAPTER_MODULES + VIZ_CHAPTER_MODULES
    )


def _layer(path: pathlib.Path) -> str:
    return (
        path.relative_to(PACKAGE).parts[0]
        if len(path.relative_to(PACKAGE).parts) > 1
        else path.stem
    )


# The layers, bottom up: core -> runs -> chapters -> viz. A layer imports only the
# layers below it (and itself). The command line sits on the chapters: it imports
# each chapter's front module for its SPECS (cli.CHAPTERS), runs for the runner and
# the store, and the package root for its version; nothing imports the command line
# but __main__, so no chapter can come to depend on it.
LAYERS = {
    "core": {"core"},
    "runs": {"core", "runs"},
    "chapters": {"core", "runs", "chapters"},
    "viz": {"core", "runs", "chapters", "viz"},
    "cli": {"chapters", "runs", "__init__"},
    "__main__": {"cli"},
}


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(PACKAGE.rglob("*.py")) if _layer(p) in LAYERS],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_layering_core_runs_chapters_viz_and_cli_on_chapters(path):
    allowed = LAYERS[_layer(path)]
    for name in package_imports(path):
        assert name.split(".")[0] in allowed, (
            f"{path.relative_to(PACKAGE)} imports {name}; allowed: {sorted(allowed)}"
        )


def test_the_layering_rule_covers_the_whole_package():
    top = {_layer(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert top <= set(LAYERS), (
        f"modules outside every layer: {sorted(top - set(LAYERS))}"
    )


@pytest.mark.parametrize("path", CHAPTER_MODULES, ids=lambda p: p.stem)
def test_chapters_import_only_core_runs_and_earlier_chapters(path):
    own = chapter_number(path.stem)
    for name in package_imports(path):
        # the floors below: core -> runs -> chapters
        if name.startswith(("core", "runs")):
            continue
        assert name.startswith("chapters.ch"), (
            f"{path.stem} imports {name}: chapters build on core and runs"
        )
        assert chapter_number(name) <= own, (
            f"{path.stem} imports the later chapter {name}"
        )


@pytest.mark.parametrize("path", VIZ_CHAPTER_MODULES, ids=lambda p: p.stem)
def test_viz_chapters_import_only_common_core_and_their_own_chapter(path):
    own = chapter_number(path.stem)
    for name in package_imports(path):
        if name in ("viz.common", "viz.sliders", "viz.style") or name.startswith(
            ("core", "runs")
        ):
            continue
        assert name.startswith("chapters.ch") and chapter_number(name) == own, (
            f"viz/{path.stem} imports {name}: allowed are "
            f"viz.common/sliders/style, core and chapters.ch{own}_*"
        )


def test_package_never_prints():
    # the command line is the one exception: `lengthgen-lite list` and `show` print what
    # was asked for
    printing = [
        p
        for p in PACKAGE.rglob("*.py")
        if re.search(r"^\s*print\(", p.read_text(), re.M)
    ]
    assert [p.relative_to(PACKAGE) for p in printing] in ([], [pathlib.Path("cli.py")])


def test_chapters_are_numbered_contiguously_from_01():
    """A chapter is one page or several (chapter 4: the law and the retrieval models,
    then the pretrained models), each page a notebook with the chapter's number and a
    name of its own; the numbers run 1, 2, 3, ... with no gap."""
    numbers = sorted({int(p.stem[:2]) for p in NOTEBOOKS})
    assert numbers == list(range(1, len(numbers) + 1)), (
        f"chapter numbers {numbers} must run 1, 2, 3, ... with no gap"
    )
    assert len(numbers) >= 6  # the book's six chapters at least
    toc = (ROOT / "_toc.yml").read_text()
    assert all(f"file: notebooks/{p.stem}\n" in toc for p in NOTEBOOKS)
    listed = sorted(NOTEBOOKS, key=lambda p: toc.index(f"file: notebooks/{p.stem}\n"))
    assert [p.stem[:2] for p in listed] == sorted(p.stem[:2] for p in NOTEBOOKS), (
        "_toc.yml lists the chapters in order, the pages of a chapter together"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_skeleton_and_stored_outputs(path):
    nb = json.loads(path.read_text())
    cells = nb["cells"]
    text = "\n".join(
        "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
    )
    code = [c for c in cells if c["cell_type"] == "code"]
    assert re.search(r"^\(ch\d-[\w-]+\)=", "".join(cells[0]["source"]), re.M), (
        "first cell starts with a (chN-...)= label"
    )
    for heading in ("What you will learn", "Summary", "Exercises"):
        assert heading in text, f"missing section {heading!r}"
    assert "lengthgen_lite" in "".join(code[0]["source"]), (
        "the first code cell imports the package"
    )
    assert "seed_everything" in "".join(code[0]["source"]), (
        "the first code cell seeds everything"
    )
    assert all(c.get("execution_count") for c in code), (
        "stored outputs come from a full execution"
    )
    source = "\n".join("".join(c["source"]) for c in code)
    assert not re.search(r"class \w+\((nn\.)?Module\)", source), (
        "notebooks import models, never define them"
    )
    assert "assert " in source, "key claims are asserted in code"
    assert re.search(r"\bglue(_round)?\(", source), "numbers in prose are glued"


def test_api_page_documents_every_module():
    """book/api.md lists every module of the package, so a new module cannot be left
    out."""
    page = (ROOT / "book" / "api.md").read_text()
    documented = set(re.findall(r"automodule:: (lengthgen_lite[\w.]*)", page))
    modules = {
        ".".join(("lengthgen_lite", *p.relative_to(PACKAGE).with_suffix("").parts))
        for p in PACKAGE.rglob("*.py")
        if p.name not in {"__init__.py", "__main__.py"}
    }
    assert modules <= documented, f"not on the API page: {sorted(modules - documented)}"


CELL_NOTEBOOKS = sorted(
    [*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "book").glob("*.ipynb")]
)
MAX_CELL_LINES = 15
SETUP_DECLARATION = "# The setup cell"


def code_cells(path: pathlib.Path) -> list[dict]:
    cells = json.loads(path.read_text())["cells"]
    return [cell for cell in cells if cell["cell_type"] == "code"]


@pytest.mark.parametrize("path", CELL_NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_cells_are_short_and_define_nothing(path):
    """At most 15 lines a cell, except the first code cell when its first line declares
    it the setup cell; no cell defines a function or a class (the package does)."""
    long, defining = [], []
    for index, cell in enumerate(code_cells(path)):
        lines = "".join(cell["source"]).splitlines()
        setup = index == 0 and bool(lines) and lines[0].startswith(SETUP_DECLARATION)
        if len(lines) > MAX_CELL_LINES and not setup:
            long.append(f"{cell['id']} ({len(lines)} lines)")
        if any(re.match(r"\s*(async\s+)?(def|class)\s", line) for line in lines):
            defining.append(cell["id"])
    assert not long, (
        f"cells over {MAX_CELL_LINES} lines: {long}; split them along their logic (the"
        f" computation, the asserts, the glue). Only the first code cell may be"
        f" longer, if its first line starts {SETUP_DECLARATION!r}"
    )
    assert not defining, (
        f"cells define a function or class: {defining}; move it to the package"
    )
