"""tools/finish_pdf.py, make pdf's Python: the contents' parts, anchor pages and the
PDF's metadata."""

import pathlib
import sys
import tomllib

import pytest
from pypdf import PdfReader, PdfWriter

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import finish_pdf  # noqa: E402


def test_parts_are_the_toc_in_order():
    parts = finish_pdf.parts()
    assert [p["caption"] for p in parts] == ["Start here", "Chapters", "Back matter"]
    assert parts[1]["docs"][0] == "notebooks/01_set_complement"
    assert "book/api" in parts[2]["docs"]


def test_metadata_comes_from_citation_cff_and_pyproject():
    info = finish_pdf.metadata()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert info["/Version"] == pyproject["project"]["version"]
    assert info["/Author"] == "The lengthgen-lite authors"
    assert info["/Title"].startswith("lengthgen-lite")
    assert "length generalisation" in info["/Keywords"]
    assert "\n" not in info["/Subject"] and len(info["/Subject"]) > 100


def test_written_metadata_and_anchor_pages(tmp_path):
    writer = PdfWriter()
    for _ in range(3):
        writer.add_blank_page(width=100, height=100)
    writer.add_named_destination("chapter-two", 1)
    pdf = tmp_path / "book.pdf"
    with pdf.open("wb") as out:
        writer.write(out)
    finish_pdf.write_metadata(pdf, {"/Author": "A", "/Version": "9.9"})
    reader = PdfReader(pdf)
    assert reader.metadata["/Author"] == "A" and reader.metadata["/Version"] == "9.9"
    assert finish_pdf.anchor_pages(reader, ["chapter-two"]) == {"chapter-two": 2}
    with pytest.raises(ValueError, match="no named destination in the PDF for"):
        finish_pdf.anchor_pages(reader, ["gone"])
