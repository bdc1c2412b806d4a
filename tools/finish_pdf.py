"""What `make pdf` (tools/print_pdf.mjs) asks of Python: the contents' parts, the pages
its entries land on, and the PDF's metadata.

    python tools/finish_pdf.py parts                 the parts of _toc.yml, as JSON
    python tools/finish_pdf.py pages <pdf> ID...     the page (from 1) of each anchor
    python tools/finish_pdf.py metadata <pdf>        title, author, subject, keywords
                                                      and version, written into the PDF

Chromium's page.pdf writes a named destination for every element id a link points to,
so an anchor's page is read off the PDF itself; and it sets no author, subject or
version, so they are added afterwards, from CITATION.cff and pyproject.toml (nothing
is typed twice). pypdf is in the venv (requirements.txt).
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml
from pypdf import PdfReader, PdfWriter

ROOT = Path(__file__).resolve().parents[1]


def parts(root: Path = ROOT) -> list[dict[str, Any]]:
    """_toc.yml's parts in order: each caption with its pages' source paths (no
    suffix)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return [
        {"caption": part["caption"], "docs": [c["file"] for c in part["chapters"]]}
        for part in toc["parts"]
    ]


def anchor_pages(reader: PdfReader, anchors: list[str]) -> dict[str, int]:
    """The page (counted from 1, as the footer does) of each anchor's named destination;
    an anchor with none is an error."""
    named = reader.named_destinations
    missing = [a for a in anchors if f"/{a}" not in named and a not in named]
    if missing:
        raise ValueError(f"no named destination in the PDF for {missing}")
    return {
        a: reader.get_destination_page_number(named.get(f"/{a}") or named[a]) + 1
        for a in anchors
    }


def metadata(root: Path = ROOT) -> dict[str, str]:
    """The PDF's document information: title, author and subject from CITATION.cff, the
    version from pyproject.toml (/Version: the Info dictionary takes custom keys)."""
    cff = yaml.safe_load((root / "CITATION.cff").read_text())
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    authors = [
        a.get("name") or f"{a['given-names']} {a['family-names']}"
        for a in cff["authors"]
    ]
    return {
        "/Title": cff["title"],
        "/Author": ", ".join(authors),
        "/Subject": " ".join(cff["abstract"].split()),
        "/Keywords": ", ".join(cff.get("keywords", [])),
        "/Version": version,
    }


def write_metadata(pdf: Path, info: dict[str, str]) -> None:
    """Rewrite ``pdf`` with ``info`` added to its Info dictionary; pages, outline, links
    and the tag tree are copied as they are."""
    writer = PdfWriter(clone_from=pdf)
    writer.add_metadata(info)
    with pdf.open("wb") as out:
        writer.write(out)


def main(argv: list[str]) -> int:
    if argv[:1] == ["parts"] and len(argv) == 1:
        print(json.dumps(parts()))
    elif argv[:1] == ["pages"] and len(argv) >= 2:
        print(json.dumps(anchor_pages(PdfReader(argv[1]), argv[2:])))
    elif argv[:1] == ["metadata"] and len(argv) == 2:
        write_metadata(Path(argv[1]), metadata())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
