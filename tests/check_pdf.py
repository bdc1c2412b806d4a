"""`make pdf`'s output holds the whole book, cleanly printed: every page's title, the
scorecard, every static figure, each figure whole on one page with its alt text, a table
of contents with page numbers, the document's metadata, and no raw LaTeX.

    python tests/check_pdf.py <book.pdf> <html book dir (make book's _build/html)>

Run by `make test` (tests/run_all.sh) after `make book` and `make pdf`; exits 1 with the
reasons when the PDF lacks any of them. The HTML book is the reference: the titles of
the pages in _toc.yml (each page's <h1>), the scorecard's summary line, the number of
<img> in its articles (the matplotlib figures) and of slider figures. A figure is found
in the PDF's tag tree (page.pdf writes one, `tagged: true`): a /Figure element with /Alt
(an image's alt, a slider figure's aria-label), on the pages its content is drawn on.
"""

from __future__ import annotations

import re
import sys
import tomllib
import unicodedata
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import yaml
from pypdf import PdfReader
from pypdf.generic import DictionaryObject, IndirectObject

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class HtmlBook:
    """What the HTML book shows: page titles, the scorecard's summary line, static
    images."""

    titles: list[str] = field(default_factory=list)
    summary: str = ""
    images: int = 0
    sliders: int = 0


class _Page(HTMLParser):
    """One built page: its <h1> (without the '#' permalink), images in the article, the
    summary line."""

    def __init__(self) -> None:
        super().__init__()
        self.h1: list[str] = []
        self.summary: list[str] = []
        self.images = 0
        self.sliders = 0
        # open tags we collect text for: "h1", "summary", "headerlink", "article"
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if "article" in self._in and "data-lengthgen-slider" in dict(attrs):
            self.sliders += 1
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
        book.sliders += page.sliders
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


def figure_pages(reader: PdfReader) -> list[tuple[str, set[int]]]:
    """(alt text, pages from 1) of every /Figure with /Alt in the PDF's tag tree: the
    pages of its marked content."""
    number = {
        page.indirect_reference.idnum: i + 1 for i, page in enumerate(reader.pages)
    }

    def pages(node: object, page: int | None) -> set[int]:
        node = node.get_object() if isinstance(node, IndirectObject) else node
        if not isinstance(node, dict):  # a marked-content id on the inherited page
            return {page} if page else set()
        if "/Pg" in node:
            page = number.get(node.raw_get("/Pg").idnum, page)
        kids = node.get("/K")
        if kids is None:
            return {page} if page else set()
        return set().union(*(pages(kid, page) for kid in _listed(kids)))

    found: list[tuple[str, set[int]]] = []

    def walk(node: object) -> None:
        node = node.get_object() if isinstance(node, IndirectObject) else node
        if not isinstance(node, dict):
            return
        if node.get("/S") == "/Figure" and "/Alt" in node:
            found.append((str(node["/Alt"]), pages(node, None)))
            return
        for kid in _listed(node.get("/K")):
            walk(kid)

    walk(reader.trailer["/Root"].get("/StructTreeRoot", {}))
    return found


def _listed(kids: object) -> list[object]:
    kids = kids.get_object() if isinstance(kids, IndirectObject) else kids
    return [] if kids is None else list(kids) if isinstance(kids, list) else [kids]


def split_figures(figures: list[tuple[str, set[int]]]) -> list[str]:
    """A problem for every figure drawn on more than one page, or on none."""
    return [
        f"figure on pages {sorted(pages)}, not on one: {alt[:70]!r}"
        for alt, pages in figures
        if len(pages) != 1
    ]


def contents_problems(pages: list[str], titles: list[str]) -> list[str]:
    """What the contents (the first page holding "Contents", and the next) lack: each
    title followed by the page it starts on. ``pages`` are normalised page texts."""
    start = next((i for i, text in enumerate(pages) if "Contents" in text), None)
    if start is None:
        return ["no contents page"]
    contents = " ".join(pages[start : start + 2])
    found = []
    for title in titles:
        match = re.search(re.escape(title) + r" (\d+)\b", contents)
        if not match:
            found.append(f"contents: no page number for {title!r}")
        elif (
            not 0 < int(match[1]) <= len(pages) or title not in pages[int(match[1]) - 1]
        ):
            found.append(f"contents: {title!r} is not on page {match[1]}")
    return found


def metadata_problems(info: dict[str, str] | None, version: str) -> list[str]:
    """What the document information lacks: an author, a subject, the version."""
    info = info or {}
    found = [
        f"metadata: no {key}" for key in ("/Author", "/Subject") if not info.get(key)
    ]
    if info.get("/Version") != version:
        found.append(f"metadata: /Version is {info.get('/Version')!r}, not {version!r}")
    return found


def raw_latex(text: str) -> list[str]:
    """LaTeX commands printed as text (a BibTeX field pybtex did not read)."""
    return sorted(set(re.findall(r"\\(?:emph|textit|textbf)\b", text)))


def problems(pdf: Path, html: Path) -> list[str]:
    """What the PDF lacks compared with the HTML book (empty when it holds
    everything)."""
    book = read_html_book(html, toc_pages(ROOT))
    reader = PdfReader(pdf)
    pages = [normalise(page.extract_text()) for page in reader.pages]
    text = " ".join(pages)
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
    figures = figure_pages(reader)
    if len(figures) < book.images + book.sliders:
        found.append(
            f"{len(figures)} figures with alt text in the PDF, fewer than the HTML "
            f"book's {book.images} images and {book.sliders} slider figures"
        )
    found += split_figures(figures)
    found += contents_problems(pages, book.titles[1:])  # [0]: the book's own title
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    found += metadata_problems(reader.metadata, version)
    found += [f"raw LaTeX in the text: {command}" for command in raw_latex(text)]
    print(
        f"{pdf}: {len(reader.pages)} pages, {pdf.stat().st_size / 1e6:.1f} "
        f"MB, {images} images "
        f"(HTML book: {book.images}), {len(figures)} figures with alt text (HTML "
        f"book: {book.images + book.sliders}), {len(book.titles)} page titles"
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
