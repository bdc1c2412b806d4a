"""The chapters read as a story: verification folded out of the reader's path, every
figure captioned and followed by its takeaway, each tested section opened by its claim,
and the long-run check in one dropdown per chapter (issue 35).

These read the stored notebooks only: nothing executes.
"""

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))

SLIDER_MARK = "data-lengthgen-slider"  # in a slider figure's text/html (viz.sliders)
GLUE_RECORD = "application/papermill.record/"  # glue's outputs: never shown in place
HIDDEN_INPUT = {"remove-input", "hide-input", "remove-cell"}
VERIFICATION = re.compile(r"\bassert\b|\bglue\(|\.require\(|\breference\.")
SCORE_LABEL = re.compile(r"^\((ch\d-score-[\w-]+)\)=", re.M)
SURVIVES = "```{dropdown} Does this survive longer training?"


def cells(path: pathlib.Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def code_lines(cell: dict) -> str:
    """A code cell's code without its comments."""
    lines = (line.split("#", 1)[0] for line in source(cell).splitlines())
    return "\n".join(line for line in lines if line.strip())


def tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def shows_output(cell: dict) -> bool:
    """Whether any of a code cell's outputs appears on the page (glue's do not)."""
    if "remove-output" in tags(cell):
        return False
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            return True
        keys = output.get("data", {}).keys()
        if any(not key.startswith(GLUE_RECORD) for key in keys):
            return True
    return False


def renders(cell: dict) -> bool:
    """Whether a cell puts anything on the page."""
    if cell["cell_type"] == "markdown":
        return bool(source(cell).strip())
    if "remove-cell" in tags(cell):
        return False
    return "remove-input" not in tags(cell) or shows_output(cell)


def is_figure(cell: dict) -> bool:
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        if "image/png" in data or SLIDER_MARK in "".join(data.get("text/html", "")):
            return True
    return False


def is_verification(cell: dict) -> bool:
    """A code cell that checks, glues or reads the reference store (not the setup
    cell: it imports)."""
    if cell["cell_type"] != "code" or source(cell).startswith("# The setup cell"):
        return False
    return bool(VERIFICATION.search(code_lines(cell)))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_verification_cells_are_folded(path):
    visible = [
        cell["id"]
        for cell in cells(path)
        if is_verification(cell) and not tags(cell) & HIDDEN_INPUT
    ]
    assert not visible, (
        f"cells that assert, glue or read the store show their code: {visible} (tag "
        "them remove-input when they show nothing, hide-input when they show a table)"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_a_figure_is_followed_by_its_takeaway(path):
    nb = cells(path)
    misplaced = []
    for i, cell in enumerate(nb):
        if cell["cell_type"] != "code" or not is_figure(cell):
            continue
        after = next((c for c in nb[i + 1 :] if renders(c)), None)
        if after is not None and after["cell_type"] != "markdown":
            misplaced.append((cell["id"], after["id"]))
    assert not misplaced, (
        f"(figure cell, next thing on the page) not followed by prose: {misplaced}"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_figure_has_a_caption_and_a_name(path):
    missing = []
    for cell in cells(path):
        if cell["cell_type"] == "code" and is_figure(cell):
            figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
            if not str(figure.get("caption", "")).strip() or not figure.get("name"):
                missing.append(cell["id"])
    assert not missing, (
        f"figure cells without metadata mystnb.figure.caption and .name: {missing}"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_each_tested_section_opens_with_its_claim(path):
    boxless = [
        label
        for cell in cells(path)
        if cell["cell_type"] == "markdown"
        for label in SCORE_LABEL.findall(source(cell))
        if ":class: claim" not in source(cell)
    ]
    assert not boxless, f"scorecard sections without a claim box: {boxless}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_one_long_run_dropdown_where_the_store_is_read(path):
    nb = cells(path)
    text = "\n".join(source(c) for c in nb if c["cell_type"] == "markdown")
    reads_store = any(
        "reference.load(" in source(c) for c in nb if c["cell_type"] == "code"
    )
    assert text.count(SURVIVES) == (1 if reads_store else 0)
    assert "**At convergence.**" not in text, "fold the asides into the dropdown"
