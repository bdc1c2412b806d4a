"""Sphinx extension for the lengthgen-lite book: what each page learns at build time.

Everything here is computed from files in the repository, so nothing is typed twice:

- the package version (``pyproject.toml``) in every page's footer;
- at the top of each chapter, how long it takes to execute
  (``benchmarks/results/speed.json``, written by ``make bench``) and a link that opens
  the same notebook in a local ``make lab`` (also a header button);
- on every page, a header button that opens the whole book as one PDF;
- on each slider figure (plotly, drawn in the browser), its cell's alt text
  (``mystnb.image.alt``, written by tools/apply_alt_text.py) as the figure's accessible
  name, as myst-nb gives it to the cell's image outputs;
- ``{cite-this}``: the citation and its BibTeX, from ``CITATION.cff``;
- the scorecard's verdicts as coloured badges, its *final word* (the reference sweep's
  verdict where it has one, else the live run's), ``{verdict-summary}``: the final
  words' counts, and ``{verdict}`word```: one badge in prose; glued verdict words in
  the chapters' claim boxes and "Does this survive longer training?" dropdowns become
  badges too. The verdicts are glued from the notebooks, so this runs after myst-nb
  pastes them (a post-transform); it works on the doctree, so the PDF and readers
  without JavaScript see it too.
"""

from __future__ import annotations

import html
import json
import pathlib
import re
import tomllib
from collections import Counter
from typing import Any

import yaml
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from lengthgen_lite.runs import claims

LOGGER = logging.getLogger(__name__)
STATIC = pathlib.Path(__file__).resolve().parents[1] / "_static"
CHAPTERS = "notebooks/"  # docnames of the chapters start with this
# The whole book as one PDF, at the root of the HTML book: `make pdf` copies it there
# (BOOK_PDF in the Makefile), so the release archive and GitHub Pages carry it.
BOOK_PDF = "lengthgen-lite.pdf"
# Every verdict word a chapter may glue, in the order the summary lists them: the
# package's own tuple (one definition); each has a badge colour in
# _static/lengthgen.css.
VERDICTS = claims.VERDICTS
# The scorecard table's columns the extension reads (the two verdicts) and fills (the
# final word), in book/scorecard.md.
LIVE, REFERENCE, FINAL = "live verdict", "reference verdict", "final word"
# How a reference-verdict cell starts when no reference sweep can decide the claim.
NO_REFERENCE = "none"
# Boxes whose glued verdict words become badges: the chapters' claim admonitions
# (``:class: claim``), their "Does this survive longer training?" dropdowns
# (``:class-container: survives``) and the intro's findings (``{container} findings``).
BADGE_BOXES = frozenset({"claim", "survives", "findings"})
# The opening of a slider figure's div (viz.sliders._HTML): where its label goes.
SLIDER_DIV = 'class="lengthgen-slider"'


def project_version(root: pathlib.Path) -> str:
    """The version in ``pyproject.toml``: the one place it is written."""
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"].get(
        "version"
    )
    if not isinstance(version, str) or not version:
        raise ValueError(f"{root / 'pyproject.toml'} has no [project] version")
    return version


def duration(seconds: float) -> str:
    """A reader's rounding of a measured time: seconds below 90 s, minutes above."""
    if not seconds > 0:
        raise ValueError(f"a measured time must be positive, got {seconds!r}")
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.1f} min"


def cost_sentence(speed: dict[str, Any] | None, chapter: str) -> str:
    """How long ``chapter`` (a notebook stem) took to execute in the last ``make
    bench``.

    ``speed`` is ``speed.json`` (None if it does not exist). A CPU model that is missing
    or unknown (``speed.py`` records none when it cannot read one) is said to be
    missing, never guessed.
    """
    rows = {row["chapter"]: row for row in (speed or {}).get("chapters", [])}
    if chapter not in rows:
        return "Execution time: not measured yet (make bench measures every chapter)."
    machine = speed.get("machine", {})
    cpu = machine.get("cpu")
    cpu_text = (
        f"CPU: {cpu}" if cpu and cpu != "unknown" else "the CPU model was not recorded"
    )
    cores = machine.get("cores")
    where = f"a {cores}-core CPU" if cores else "a CPU"
    threads = machine.get("torch_threads", 1)
    thread_text = "one torch thread" if threads == 1 else f"{threads} torch threads"
    return (
        f"Execution time: {duration(rows[chapter]['wall_seconds'])} for the "
        f"whole chapter on {where} "
        f"with {thread_text} ({cpu_text}), as measured by the last make bench."
    )


def lab_url(port: int, source: str) -> str:
    """The notebook ``source`` (path from the repository root) in JupyterLab started by
    ``make lab``."""
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(
            f"lengthgen_lab_port must be a TCP port (1-65535), got {port!r}"
        )
    return f"http://127.0.0.1:{port}/lab/tree/{source}"


def verdict_counts(verdicts: list[str]) -> list[tuple[str, int]]:
    """(verdict, count) for every verdict that occurs, in ``VERDICTS`` order; unknown
    words are an error."""
    if unknown := sorted(set(verdicts) - set(VERDICTS)):
        raise ValueError(
            f"unknown verdict(s) {unknown}; a verdict is one of {list(VERDICTS)}"
        )
    counts = Counter(verdicts)
    return [(word, counts[word]) for word in VERDICTS if counts[word]]


def badge(word: str) -> nodes.inline:
    """A verdict as an inline node that _static/lengthgen.css colours by its class."""
    return nodes.inline(
        word, word, classes=["verdict", "verdict-" + word.replace(" ", "-")]
    )


def final_word(live: str, reference: str) -> str:
    """The scorecard's final word on a claim: its reference verdict where the claim has
    one, else its live verdict.

    ``reference`` is a verdict, or text starting with ``NO_REFERENCE`` for a claim no
    reference sweep can decide (the reason follows it).
    """
    if live not in VERDICTS:
        raise ValueError(
            f"live verdict {live!r} is not a verdict; a verdict is one of "
            f"{list(VERDICTS)}"
        )
    if reference in VERDICTS:
        return reference
    if reference.startswith(NO_REFERENCE):
        return live
    raise ValueError(
        f"reference verdict {reference!r} is neither a verdict (one of "
        f"{list(VERDICTS)}) nor starts with {NO_REFERENCE!r} (no reference sweep)"
    )


def in_badge_box(node: nodes.Node) -> bool:
    """Whether ``node`` sits in a claim box, a "survives" dropdown or the findings.

    sphinx-design keeps a dropdown's ``:class-container:`` in ``container_classes``
    until it renders the dropdown (after this extension's post-transform).
    """
    parent = node.parent
    while parent is not None:
        names = {*parent.get("classes", []), *parent.get("container_classes", [])}
        if names & BADGE_BOXES:
            return True
        parent = parent.parent
    return False


def citation(cff: dict[str, Any]) -> tuple[str, str]:
    """(one-line citation, BibTeX) for the book, from the fields of ``CITATION.cff``."""
    missing = [
        key
        for key in ("title", "version", "authors", "date-released")
        if not cff.get(key)
    ]
    if missing:
        raise ValueError(f"CITATION.cff lacks {missing}")
    # An entity (name) stays one BibTeX name in braces; a person is "family, given".
    names = [
        (a["name"], f"{{{a['name']}}}")
        if "name" in a
        else (
            f"{a['given-names']} {a['family-names']}",
            f"{a['family-names']}, {a['given-names']}",
        )
        for a in cff["authors"]
    ]
    year = str(cff["date-released"])[:4]
    line = (
        f"{', '.join(text for text, _ in names)} ({year}). {cff['title']} "
        f"(version {cff['version']})."
    )
    fields = {
        "author": " and ".join(bib for _, bib in names),
        "title": f"{{{cff['title']}}}",
        "year": year,
        "version": cff["version"],
        "url": cff.get("url"),
    }
    body = ",\n".join(
        f"  {key:<7} = {{{value}}}" for key, value in fields.items() if value
    )
    return line, f"@software{{lengthgen_lite,\n{body}\n}}"


def read_speed(path: pathlib.Path) -> dict[str, Any] | None:
    """``speed.json``, or None when ``make bench`` has not written it."""
    return json.loads(path.read_text()) if path.exists() else None


# --- Sphinx plumbing ------------------------------------------------------------------


def set_version(app: Sphinx, config: Config) -> None:
    """The pyproject version as Sphinx's release and in the footer of every page."""
    version = project_version(pathlib.Path(app.srcdir))
    config.version = config.release = version
    footer = (
        config.html_theme_options.get("extra_footer", "")
        + f'<p class="lengthgen-version">lengthgen-lite version {version}</p>'
    )
    config.html_theme_options = {**config.html_theme_options, "extra_footer": footer}


def add_static(app: Sphinx) -> None:
    """book/_static/lengthgen.css on every page (badges, the scorecard's width, the
    chapter line, print)."""
    app.config.html_static_path.append(str(STATIC))
    app.add_css_file("lengthgen.css")


def html_handlers_for_singlehtml(app: Sphinx) -> None:
    """Give the singlehtml builder (make pdf) every node handler registered for html.

    Sphinx uses a builder's own handlers when an extension registered any
    (sphinx-exercise does for singlehtml) and the format's (html) only otherwise, so
    sphinx-proof's html-only nodes would have none in singlehtml and the build would
    fail.
    """
    if app.builder.name == "singlehtml":
        handlers = app.registry.translation_handlers
        handlers["singlehtml"] = {
            **handlers.get("html", {}),
            **handlers.get("singlehtml", {}),
        }


def single_page_at_root(app: Sphinx, exception: Exception | None) -> None:
    """Make the singlehtml build (make pdf) one self-consistent page: ``index.html``.

    Sphinx writes the root document at its own path (``book/intro.html``) but with every
    URL relative to the output folder, so opened where it lies it finds no styles,
    scripts or images. At the root, its links to itself become plain anchors.
    """
    if exception is not None or app.builder.name != "singlehtml":
        return
    out = pathlib.Path(app.outdir)
    page = out / f"{app.config.root_doc}{app.builder.out_suffix}"
    if page.parent != out:
        self_link = re.compile(
            rf'href="{re.escape(page.relative_to(out).as_posix())}(?=[#"])'
        )
        (out / "index.html").write_text(
            self_link.sub('href="', page.read_text()).replace('href=""', 'href="#"')
        )
        page.unlink()
        if not any(page.parent.iterdir()):
            page.parent.rmdir()


def chapter_source(app: Sphinx, docname: str) -> str | None:
    """The chapter's notebook, relative to the repository root (None for pages that are
    not chapters)."""
    if not docname.startswith(CHAPTERS):
        return None
    return pathlib.Path(app.env.doc2path(docname)).relative_to(app.srcdir).as_posix()


def add_chapter_line(app: Sphinx, doctree: nodes.document) -> None:
    """Under each chapter's title: its execution time and hardware, and how to run it
    live."""
    source = chapter_source(app, app.env.docname)
    if source is None:
        return
    speed_file = pathlib.Path(app.srcdir) / app.config.lengthgen_speed_file
    app.env.note_dependency(str(speed_file))
    time_line = nodes.paragraph(
        "", cost_sentence(read_speed(speed_file), pathlib.Path(source).stem)
    )
    url = lab_url(app.config.lengthgen_lab_port, source)
    live = nodes.paragraph()
    live += nodes.Text("Run it live: start ")
    live += nodes.literal("", "make lab")
    live += nodes.Text(" in the repository, then ")
    live += nodes.reference("", "open this chapter in JupyterLab", refuri=url)
    live += nodes.Text(f" ({url}).")
    box = nodes.container("", time_line, live, classes=["chapter-meta"])
    section = doctree.next_node(nodes.section)
    section.insert(1, box)  # after the title


def slider_alt(html_text: str, alt: str) -> str:
    """A slider figure's HTML (viz.sliders) with ``alt`` as its accessible name.

    The plotly div becomes a labelled figure (``role="figure"``, not ``img``: its
    slider stays reachable inside it).
    """
    if SLIDER_DIV not in html_text:
        raise ValueError(f"not a slider figure's HTML: no {SLIDER_DIV!r} in it")
    label = f'{SLIDER_DIV} role="figure" aria-label="{html.escape(alt.strip())}"'
    return html_text.replace(SLIDER_DIV, label, 1)


def label_slider_figures(app: Sphinx, doctree: nodes.document) -> None:
    """Every slider figure of a notebook cell named by its cell's alt text.

    Its caption and label (``mystnb.figure``) need nothing here: myst-nb wraps every
    display output of such a cell in a figure, a slider figure as an image.
    """
    for cell in doctree.findall(nodes.container):
        if cell.get("nb_element") != "cell_code":
            continue
        meta = cell.get("cell_metadata", {}).get("mystnb", {})
        alt = meta.get("image", {}).get("alt")
        for raw in cell.findall(nodes.raw):
            if alt and SLIDER_DIV in raw.astext():
                raw.children = [nodes.Text(slider_alt(raw.astext(), alt))]


# Markup of other packages that misleads assistive technology, and its repair (checked
# by axe-core in the browser test): myst-nb names every hide-input toggle "Toggle hidden
# content" whatever its visible text ("Show code cell source"), and docutils makes the
# bibliography a list whose entries are not list items (doc-biblioentry, deprecated).
ACCESSIBLE_MARKUP = (
    ('<summary aria-label="Toggle hidden content">', "<summary>"),
    ('class="citation" id=', 'class="citation" role="listitem" id='),
    (' role="doc-biblioentry"', ""),
)


def accessible_body(body: str) -> str:
    """A page's HTML body with ``ACCESSIBLE_MARKUP`` repaired."""
    for old, new in ACCESSIBLE_MARKUP:
        body = body.replace(old, new)
    return body


def repair_markup(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Every page's body through ``accessible_body`` (html and singlehtml)."""
    if "body" in context:
        context["body"] = accessible_body(context["body"])


def add_lab_button(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """A header button (beside download/fullscreen) that opens the chapter in the local
    JupyterLab."""
    source = chapter_source(app, pagename)
    if source is None or "header_buttons" not in context:
        return
    context["header_buttons"].append(
        {
            "type": "link",
            "url": lab_url(app.config.lengthgen_lab_port, source),
            "icon": "fas fa-rocket",
            "tooltip": "Open in JupyterLab (make lab)",
            "label": "open-in-jupyterlab-button",
        }
    )


def add_pdf_button(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """A header button on every page of the HTML book: the whole book as one PDF.

    The link is relative (``pathto``), so it works wherever the book is unpacked. The
    singlehtml build is the PDF itself: no button there.
    """
    if app.builder.name != "html" or "header_buttons" not in context:
        return
    context["header_buttons"].append(
        {
            "type": "link",
            "url": context["pathto"](BOOK_PDF, resource=True),
            "icon": "fas fa-file-pdf",
            "tooltip": "The whole book as one PDF",
            "label": "book-pdf-button",
        }
    )


def verdict_role(
    name: str,
    rawtext: str,
    text: str,
    lineno: int,
    inliner: Any,
    options: Any = None,
    content: Any = None,
):
    """``{verdict}`word```: a verdict badge in prose (the scorecard's legend)."""
    if text not in VERDICTS:
        message = inliner.reporter.error(
            f"unknown verdict {text!r}; a verdict is one of {list(VERDICTS)}",
            line=lineno,
        )
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [badge(text)], []


class CiteThis(SphinxDirective):
    """``{cite-this}``: the book's citation and BibTeX, read from CITATION.cff at the
    repository root."""

    def run(self) -> list[nodes.Node]:
        path = pathlib.Path(self.env.srcdir) / "CITATION.cff"
        self.env.note_dependency(str(path))
        line, bibtex = citation(yaml.safe_load(path.read_text()))
        block = nodes.literal_block(bibtex, bibtex, language="bibtex")
        return [nodes.paragraph(line, line), block]


class VerdictSummary(SphinxDirective):
    """``{verdict-summary}``: where the counts of the scorecard's final words go (filled
    later)."""

    def run(self) -> list[nodes.Node]:
        return [nodes.paragraph("", "", classes=["verdict-summary"])]


class ScorecardBadges(SphinxPostTransform):
    """The scorecard table (class ``scorecard``): its two verdict columns as badges, its
    final-word column filled in from them, and the final words' counts in the
    ``{verdict-summary}``; glued verdict words in ``BADGE_BOXES`` as badges.

    Runs after myst-nb's glue post-transform (priority 5) has pasted the verdicts.
    """

    default_priority = 10

    def apply(self, **kwargs: Any) -> None:
        finals = []
        for table in self.document.findall(nodes.table):
            if "scorecard" in table["classes"]:
                finals += self.fill_table(table)
        for pasted in list(self.document.findall(nodes.inline)):
            word = pasted.astext().strip()
            glued = "pasted-text" in pasted["classes"]
            if glued and word in VERDICTS and in_badge_box(pasted):
                pasted.parent.replace(pasted, badge(word))
        for summary in list(self.document.findall(nodes.paragraph)):
            if "verdict-summary" not in summary["classes"]:
                continue
            if not finals:
                LOGGER.warning(
                    "verdict-summary: no scorecard table on this page", location=summary
                )
                continue
            summary += nodes.strong("", f"{len(finals)} claims, by their final word: ")
            for i, (word, count) in enumerate(verdict_counts(finals)):
                summary += nodes.Text(f"{', ' if i else ''}{count} ")
                summary += badge(word)

    def fill_table(self, table: nodes.table) -> list[str]:
        """Badge each row's verdicts and fill in its final word; return the final
        words, or [] after a warning."""
        header = [
            entry.astext().strip()
            for entry in next(table.findall(nodes.thead)).findall(nodes.entry)
        ]
        if missing := [name for name in (LIVE, REFERENCE, FINAL) if name not in header]:
            LOGGER.warning(f"scorecard table has no {missing} column", location=table)
            return []
        finals = []
        for row in next(table.findall(nodes.tbody)).findall(nodes.row):
            live, reference, final = (
                row[header.index(n)] for n in (LIVE, REFERENCE, FINAL)
            )
            if final.astext().strip():
                LOGGER.warning(
                    f"scorecard: the {FINAL!r} cell is filled in from the two verdicts;"
                    f" leave it empty, not {final.astext().strip()!r}",
                    location=final,
                )
                continue
            try:
                word = final_word(live.astext().strip(), reference.astext().strip())
            except ValueError as error:
                LOGGER.warning(f"scorecard: {error}", location=row)
                continue
            for cell in (live, reference):
                if (text := cell.astext().strip()) in VERDICTS:
                    cell.children = [nodes.paragraph("", "", badge(text))]
            final.children = [nodes.paragraph("", "", badge(word))]
            finals.append(word)
        return finals


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("lengthgen_lab_port", 8888, "env", types=[int])
    app.add_config_value(
        "lengthgen_speed_file", "benchmarks/results/speed.json", "env", types=[str]
    )
    app.connect("config-inited", set_version)
    app.connect("builder-inited", add_static)
    app.connect("builder-inited", html_handlers_for_singlehtml)
    # after sphinx-external-toc's redirect
    app.connect("build-finished", single_page_at_root, priority=900)
    app.connect("doctree-read", add_chapter_line)
    app.connect("doctree-read", label_slider_figures)
    # after the theme makes the list
    app.connect("html-page-context", add_lab_button, priority=502)
    app.connect("html-page-context", add_pdf_button, priority=502)
    app.connect("html-page-context", repair_markup)
    app.add_role("verdict", verdict_role)
    app.add_directive("cite-this", CiteThis)
    app.add_directive("verdict-summary", VerdictSummary)
    app.add_post_transform(ScorecardBadges)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
