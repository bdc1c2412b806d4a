"""Every figure in the book has alt text: tools/apply_alt_text.py writes
book/alt_text.yml into the notebooks' cell metadata, and nothing is left out either
way."""

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import apply_alt_text  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
    (ROOT / "book").glob("*.ipynb")
)


def load(path: pathlib.Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_has_alt_text(path):
    missing = [
        cell.get("id")
        for cell in load(path)["cells"]
        if cell["cell_type"] == "code"
        and apply_alt_text.is_figure(cell)
        and not (apply_alt_text.alt_text(cell) or "").strip()
    ]
    assert not missing, (
        f"figure cells without alt text: {missing} (add them to book/alt_text.yml "
        "and run python tools/apply_alt_text.py)"
    )


def test_the_data_file_names_only_figure_cells():
    for name, texts in apply_alt_text.read_alt_texts().items():
        path = ROOT / name
        assert path.is_file(), f"book/alt_text.yml names {name}, which does not exist"
        cells = {cell.get("id"): cell for cell in load(path)["cells"]}
        for cell_id, text in texts.items():
            assert cell_id in cells, f"{name} has no cell {cell_id!r}"
            assert apply_alt_text.is_figure(cells[cell_id]), (
                f"{name}, cell {cell_id!r} shows no figure"
            )
            assert apply_alt_text.alt_text(cells[cell_id]) == text.strip(), (
                f"{name}, cell {cell_id!r}: metadata differs from book/alt_text.yml "
                "(run python tools/apply_alt_text.py)"
            )


def test_apply_is_idempotent_and_keeps_the_layout():
    figure = {
        "cell_type": "code",
        "id": "fig",
        "metadata": {"tags": ["hide-input"]},
        "outputs": [{"data": {"image/png": "AAAA"}, "output_type": "display_data"}],
        "source": "plot()",
    }
    text = {"cell_type": "markdown", "id": "md", "metadata": {}, "source": "é"}
    nb = {"cells": [text, figure], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    before = apply_alt_text.dumps(nb)
    once = apply_alt_text.dumps(apply_alt_text.apply(json.loads(before), {}, "x"))
    assert once == before  # nothing named: byte for byte
    named = {"fig": " A line rising. "}
    once = apply_alt_text.dumps(apply_alt_text.apply(json.loads(before), named, "x"))
    twice = apply_alt_text.dumps(apply_alt_text.apply(json.loads(once), named, "x"))
    assert once == twice and '"é"' in once
    cell = json.loads(once)["cells"][1]
    assert cell["metadata"] == {
        "mystnb": {"image": {"alt": "A line rising."}},
        "tags": ["hide-input"],
    }


def test_apply_rejects_unknown_and_non_figure_cells():
    nb = {"cells": [{"cell_type": "markdown", "id": "md", "metadata": {}}]}
    with pytest.raises(ValueError, match="no cell with id 'gone'"):
        apply_alt_text.apply(nb, {"gone": "x"}, "a.ipynb")
    with pytest.raises(ValueError, match="shows no figure"):
        apply_alt_text.apply(nb, {"md": "x"}, "a.ipynb")


def test_slider_figures_count_as_figures():
    html = '<div class="lengthgen-slider" data-lengthgen-slider="ch2"></div>'
    cell = {"outputs": [{"data": {"text/html": [html]}}]}
    assert apply_alt_text.is_figure(cell)
    assert not apply_alt_text.is_figure({"outputs": [{"text": "printed"}]})
