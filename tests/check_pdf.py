"""`make pdf`'s output holds the whole book: every page's title, the scorecard, every
static figure.

    python tests/check_pdf.py <book.pdf> <html book dir (make book's _build/html)>

Run by `make test` (tests/run_all.sh) after `make book` and `make pdf`; exits 1 with the
reasons when the PDF lacks any of them. The HTML book is the reference: the titles of
the pages in _toc.yml (each page's <h1>), the scorecard's summary line, and the number
of <img> in its articles (the matplotlib figures).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import yaml
from pypdf import PdfReader
from pypdf.generic import DictionaryObject

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class HtmlBook:
    """What the HTML book shows: page titles, the scorecard's summary line, static
    images."""

    titles: list[str] = field(default_factory=list)
    summary: str = ""
    images: int = 0


class _Page(HTMLParser):
    """One built page: its <h1> (without the '#' permalink), images in the article, the
    summary line."""

    def __init__(self) -> None:
        super().__init__()
        self.h1: list[str] = []
        self.summary: list[str] = []
        self.images = 0
        # open tags we collect text for: "h1", "summary", "headerlink", "article"
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "article" and "bd-article" in classes:
            self._in.append("article")
        elif "article" in self._in and tag == "img":
            self.images += 1
        elif tag == "h1" and not self.h1:
            self._in.append("h1")
        elif tag == "p" and "verdict-summary" in classes:
            self._in.append("summary")
        elif tag == "a" and "headerlink" in classes:
            self._in.append("headerlink")

    def handle_endtag(self, tag: str) -> None:
        closes = {
            "article": "article",
            "h1": "h1",
            "p": "summary",
            "a": "headerlink",
        }.get(tag)
        if closes in self._in:
            self._in.remove(closes)

    def handle_data(self, data: str) -> None:
        if "headerlink" in self._in:
            return
        if "h1" in self._in:
            self.h1.append(data)
        if "summary" in self._in:
            self.summary.append(data)


def normalise(text: str) -> str:
    """Text as compared: ligatures unfolded, whitespace collapsed, none before
    punctuation (the PDF has a space where a badge's padding ends)."""
    return re.sub(
        r" ([,.;:])", r"\1", " ".join(unicodedata.normalize("NFKC", text).split())
    )


def toc_pages(root: Path) -> list[str]:
    """The book's pages in _toc.yml order, as paths of the source files without their
    suffix."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return [toc["root"]] + [
        entry["file"] for part in toc["parts"] for entry in part["chapters"]
    ]


def read_html_book(html: Path, pages: list[str]) -> HtmlBook:
    """Titles, the scorecard summary and the article images of the built HTML book's
    ``pages``."""
    book = HtmlBook()
    for name in pages:
        path = html / f"{name}.html"
        if not path.exists():
            raise ValueError(f"{path} does not exist (run make book first)")
        page = _Page()
        page.feed(path.read_text())
        if not page.h1:
            raise ValueError(f"{path} has no <h1> title")
        book.titles.append(normalise("".join(page.h1)))
        if page.summary:
            book.summary = normalise("".join(page.summary))
        book.images += page.images
    return book


def image_count(resources: DictionaryObject | None) -> int:
    """Images drawn through ``resources``' XObjects, counting those inside form XObjects
    too."""
    xobjects = (resources or {}).get("/XObject")
    count = 0
    for ref in (xobjects.get_object() if xobjects else {}).values():
        xobject = ref.get_object()
        if xobject.get("/Subtype") == "/Image":
            count += 1
        elif xobject.get("/Subtype") == "/Form":
            count += image_count(xobject.get("/Resources"))
    return count


def problems(pdf: Path, html: Path) -> list[str]:
    """What the PDF lacks compared with the HTML book (empty when it holds
    everything)."""
    book = read_html_book(html, toc_pages(ROOT))
    reader = PdfReader(pdf)
    text = normalise(" ".join(page.extract_text() for page in reader.pages))
    found = []
    found += [
        f"page title missing: {title!r}" for title in book.titles if title not in text
    ]
    if not book.summary:
        found.append("the HTML scorecard has no verdict-summary line")
    elif book.summary not in text:
        found.append(f"scorecard summary missing: {book.summary!r}")
    images = sum(image_count(page.get("/Resources")) for page in reader.pages)
    if images < book.images:
        found.append(
            f"{images} images in the PDF, fewer than the HTML book's "
            f"{book.images} static figures"
        )
    print(
        f"{pdf}: {len(reader.pages)} pages, {pdf.stat().st_size / 1e6:.1f} "
        f"MB, {images} images "
        f"(HTML book: {book.images}), {len(book.titles)} page titles"
    )
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].endswith(".pdf"):
        print(
            "usage: python tests/check_pdf.py <book.pdf> <html book dir>",
            file=sys.stderr,
        )
        return 2
    found = problems(Path(argv[0]), Path(argv[1]))
    for problem in found:
        print(f"PDF check FAILED: {problem}")
    if not found:
        print("PDF check passed")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
