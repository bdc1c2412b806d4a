"""Writes every figure's alt text from book/alt_text.yml into its notebook cell's
metadata.

    python tools/apply_alt_text.py    (from the repository root)

The alt texts live in one data file (notebook path -> cell id -> one sentence saying
what the figure shows, for a reader who cannot see it), so they survive `make execute`
and are reviewed in one place. Each goes to the cell's ``mystnb.image.alt``, the key
myst-nb 1.x reads for its image outputs' alt attribute; for a slider figure (plotly,
drawn in the browser) book/_ext/lengthgen_book.py reads the same key and makes it the
figure's accessible name. Only that key changes: the rest of the file is written back
in nbformat's layout (indent 1, sorted keys, non-ASCII kept, a final newline), byte for
byte. Running it twice changes nothing. tests/test_alt_text.py checks that every figure
has its alt text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
ALT_TEXT = ROOT / "book" / "alt_text.yml"
SLIDER_MARK = "data-lengthgen-slider"  # in a slider figure's text/html (viz.sliders)


def dumps(nb: dict[str, Any]) -> str:
    """A notebook as nbformat (and this repository) writes it."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def is_figure(cell: dict[str, Any]) -> bool:
    """A code cell that shows a figure: a PNG image or a static slider figure."""
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        if "image/png" in data or SLIDER_MARK in "".join(data.get("text/html", "")):
            return True
    return False


def alt_text(cell: dict[str, Any]) -> str | None:
    """The alt text stored in a cell's metadata, if any."""
    return cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")


def read_alt_texts(path: Path = ALT_TEXT) -> dict[str, dict[str, str]]:
    """book/alt_text.yml: notebook path (from the repository root) -> cell id ->
    text."""
    table = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(table, dict):
        raise ValueError(f"{path} must map notebook paths to {{cell id: alt text}}")
    for notebook, cells in table.items():
        if not isinstance(cells, dict) or not all(
            isinstance(text, str) and text.strip() for text in cells.values()
        ):
            raise ValueError(
                f"{path}: {notebook} must map cell ids to non-empty alt texts"
            )
    return table


def apply(nb: dict[str, Any], texts: dict[str, str], name: str) -> dict[str, Any]:
    """``nb`` with each cell named in ``texts`` given its alt text (in place).

    A cell id that is not in the notebook, or names a cell without a figure, is an
    error: the data file must follow the notebooks.
    """
    cells = {cell.get("id"): cell for cell in nb["cells"]}
    for cell_id, text in texts.items():
        cell = cells.get(cell_id)
        if cell is None:
            raise ValueError(f"{name} has no cell with id {cell_id!r}")
        if not is_figure(cell):
            raise ValueError(
                f"{name}, cell {cell_id!r} shows no figure (a PNG image or a slider "
                "figure): only figures take alt text"
            )
        mystnb = cell.setdefault("metadata", {}).setdefault("mystnb", {})
        mystnb.setdefault("image", {})["alt"] = text.strip()
    return nb


def main() -> int:
    changed = 0
    for name, texts in read_alt_texts().items():
        path = ROOT / name
        if not path.is_file():
            raise ValueError(f"{ALT_TEXT} names {name}, which does not exist")
        before = path.read_text(encoding="utf-8")
        after = dumps(apply(json.loads(before), texts, name))
        if after != before:
            path.write_text(after, encoding="utf-8")
            changed += 1
            print(f"{name}: alt text written")
    print(f"{changed} notebook(s) changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
