"""The book's Sphinx extension (book/_ext/lengthgen_book.py): what it computes, and a
tiny real build.

The numbers it shows are read from the repository (pyproject.toml, speed.json,
CITATION.cff) and the scorecard's counts from the built doctree; a missing CPU model is
said to be missing.
"""

import json
import pathlib
import re
import subprocess
import sys

import pytest
import yaml
from sphinx.cmd.build import build_main

import lengthgen_lite
from lengthgen_lite.runs.claims import VERDICTS as PACKAGE_VERDICTS
from lengthgen_lite.runs.results import provenance

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import lengthgen_book as ext  # noqa: E402

SPEED = json.loads((ROOT / "benchmarks" / "results" / "speed.json").read_text())


def test_one_version_everywhere():
    version = ext.project_version(ROOT)
    # from the installed metadata
    assert lengthgen_lite.__version__ == provenance(0.0)["package"] == version
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["version"] == version
    changelog = (ROOT / "CHANGELOG.md").read_text()
    # (an "Unreleased" heading above it gathers what the next version will carry)
    assert (
        re.search(r"^## (?!Unreleased$)(\S+)", changelog, re.M).group(1) == version
    ), "CHANGELOG's newest entry is this version"


def test_citation_cff_is_complete():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors", "version", "date-released"):
        assert cff[key], key
    line, bibtex = ext.citation(cff)
    assert cff["title"] in line and f"version {cff['version']}" in line
    assert (
        bibtex.startswith("@software{lengthgen_lite,")
        and f"version = {{{cff['version']}}}" in bibtex
    )
    assert "{{The lengthgen-lite authors}}" in bibtex  # an entity stays one BibTeX name
    with pytest.raises(ValueError, match="lacks"):
        ext.citation({**cff, "version": ""})


def test_duration_reads_like_a_reader_would_say_it():
    assert ext.duration(34.4) == "about 34 s"
    assert ext.duration(211.2) == "about 3.5 min"
    with pytest.raises(ValueError, match="positive"):
        ext.duration(0)


def test_cost_sentence_from_the_last_bench():
    row = SPEED["chapters"][0]
    sentence = ext.cost_sentence(SPEED, row["chapter"])
    assert ext.duration(row["wall_seconds"]) in sentence
    assert f"a {SPEED['machine']['cores']}-core CPU with one torch thread" in sentence
    assert f"CPU: {SPEED['machine']['cpu']}" in sentence


@pytest.mark.parametrize("cpu", [None, "", "unknown", "missing"])
def test_cost_sentence_never_invents_a_cpu_model(cpu):
    machine = {key: value for key, value in SPEED["machine"].items() if key != "cpu"}
    if cpu != "missing":
        machine["cpu"] = cpu
    sentence = ext.cost_sentence(
        {**SPEED, "machine": machine}, SPEED["chapters"][0]["chapter"]
    )
    assert "the CPU model was not recorded" in sentence and "CPU:" not in sentence


def test_cost_sentence_without_a_measurement():
    assert "not measured yet" in ext.cost_sentence(None, "01_set_complement")
    assert "not measured yet" in ext.cost_sentence(SPEED, "99_new_chapter")


def test_lab_url_and_make_lab_use_one_port():
    port = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"][
        "lengthgen_lab_port"
    ]
    assert (
        ext.lab_url(port, "notebooks/02_x.ipynb")
        == f"http://127.0.0.1:{port}/lab/tree/notebooks/02_x.ipynb"
    )
    make = subprocess.run(
        ["make", "-n", "--no-print-directory", "lab", "ENV="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"--ip 127.0.0.1 --port {port} --ServerApp.port_retries=0" in make.stdout
    for bad in (0, 70000, "8888"):
        with pytest.raises(ValueError, match="TCP port"):
            ext.lab_url(bad, "notebooks/02_x.ipynb")


def test_every_verdict_has_a_badge():
    assert set(PACKAGE_VERDICTS) <= set(ext.VERDICTS), (
        "a verdict the chapters can compute has no badge"
    )
    css = (ROOT / "book" / "_static" / "lengthgen.css").read_text()
    for word in ext.VERDICTS:
        assert re.search(
            rf"\.verdict-{word.replace(' ', '-')} \{{ background: #[0-9a-f]{{6}}; \}}",
            css,
        ), word


def test_verdict_counts():
    assert ext.verdict_counts(
        ["reversed", "reproduced", "reproduced", "no effect"]
    ) == [
        ("reproduced", 2),
        ("no effect", 1),
        ("reversed", 1),
    ]
    with pytest.raises(ValueError, match="unknown verdict"):
        ext.verdict_counts(["reproduced", "mostly"])


def test_final_word_is_the_reference_verdict_where_it_exists():
    assert ext.final_word("reproduced", "mixed") == "mixed"
    assert ext.final_word("reversed", "reversed") == "reversed"
    assert ext.final_word("mixed", "none: a fixed model") == "mixed"
    with pytest.raises(ValueError, match="neither a verdict"):
        ext.final_word("mixed", "mostly")
    with pytest.raises(ValueError, match="live verdict 'mostly'"):
        ext.final_word("mostly", "mixed")


def test_badge_boxes_are_found_by_class_or_dropdown_container_class():
    from docutils import nodes

    word = nodes.inline("mixed", "mixed", classes=["pasted-text"])
    claim = nodes.admonition("", nodes.paragraph("", "", word), classes=["claim"])
    assert ext.in_badge_box(word)
    claim["classes"] = ["note"]
    assert not ext.in_badge_box(word)
    nodes.container("", claim, container_classes=["sd-mb-3", "survives"])
    assert ext.in_badge_box(word)


# A tiny book page in MyST, as book/scorecard.md and the chapters write it; {glued}
# stands for myst-nb's {glue:text} (an inline of class pasted-text), defined in conf.py.
SCORECARD = """\
# Scorecard

```{verdict-summary}
```

```{table}
:class: scorecard

| claim | live verdict | reference verdict | final word | number |
|---|---|---|---|---|
| a | {glued}`reproduced` | {glued}`mixed` | | 1.0 |
| b | {glued}`no effect` | none: a fixed model | | 2.0 |
| c | {glued}`reproduced` | {glued}`reproduced` | | 3.0 |
```

```{admonition} Claim
:class: claim
A claim. Live run: {glued}`reversed`. Reference sweep: {glued}`inconclusive`.
```

```{dropdown} Does this survive longer training?
:class-container: survives

| claim | live run | reference sweep |
|---|---|---|
| a | {glued}`reproduced` | {glued}`demonstration` |
```

```{container} findings
- A finding of the intro: {glued}`not testable here`.
```

Outside the boxes a glued word stays text: {glued}`reversed`.
"""

GLUED_ROLE = """
from docutils import nodes


def glued(name, rawtext, text, lineno, inliner, options=None, content=None):
    return [nodes.inline(text, text, classes=["pasted-text"])], []


def setup(app):
    app.add_role("glued", glued)
"""


def build(tmp_path: pathlib.Path, scorecard: str) -> tuple[int, pathlib.Path]:
    """A tiny Sphinx project with the extension: a scorecard page (MyST) and one
    chapter; (exit code, html dir)."""
    src = tmp_path / "src"
    (src / "notebooks").mkdir(parents=True)
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        "extensions = ['myst_parser', 'sphinx_design', 'lengthgen_book']\n"
        "html_theme = 'sphinx_book_theme'\nlengthgen_lab_port = 9999\n" + GLUED_ROLE
    )
    (src / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "9.8.7"\n')
    speed = {
        "machine": {"cores": 2, "torch_threads": 1},
        "chapters": [{"chapter": "01_x", "wall_seconds": 12.3}],
    }
    (src / "benchmarks" / "results").mkdir(parents=True)
    (src / "benchmarks" / "results" / "speed.json").write_text(json.dumps(speed))
    (src / "index.md").write_text(scorecard + "\n```{toctree}\n\nnotebooks/01_x\n```\n")
    (src / "notebooks" / "01_x.md").write_text("# A chapter\n\nText.\n")
    out = tmp_path / "html"
    status = build_main(["-b", "html", "-W", "-q", "-E", str(src), str(out)])
    return status, out


def badge_html(word: str) -> str:
    return f'<span class="verdict verdict-{word.replace(" ", "-")}">{word}</span>'


def test_a_real_build_badges_final_words_counts_and_chapter_line(tmp_path):
    status, out = build(tmp_path, SCORECARD)
    assert status == 0
    index = (out / "index.html").read_text()
    # the tally counts the final words: a's reference, b's live verdict, c's reference
    assert re.search(
        r'<p class="verdict-summary"><strong>3 claims, by their final word: '
        rf"</strong>1 {badge_html('reproduced')}, 1 {badge_html('mixed')}, 1 "
        rf"{badge_html('no effect')}</p>",
        index,
    )
    body = index[index.index("<tbody>") : index.index("</tbody>")]
    rows = re.findall(r"<tr class=\"row-(?:odd|even)\">(.*?)</tr>", body, re.S)
    cells = [re.findall(r"<td>(.*?)</td>", row, re.S) for row in rows]
    assert [[cell.strip() for cell in row[1:4]] for row in cells] == [
        [f"<p>{badge_html(w)}</p>" for w in ("reproduced", "mixed", "mixed")],
        [
            f"<p>{badge_html('no effect')}</p>",
            "<p>none: a fixed model</p>",
            f"<p>{badge_html('no effect')}</p>",
        ],
        [f"<p>{badge_html('reproduced')}</p>"] * 3,
    ]
    # glued words in the claim box, the dropdown, the findings are badges; else text
    for word in ("reversed", "inconclusive", "demonstration", "not testable here"):
        assert badge_html(word) in index, word
    assert index.count(badge_html("reversed")) == 1
    assert '<span class="pasted-text">reversed</span>' in index
    chapter = (out / "notebooks" / "01_x.html").read_text()
    assert (
        "Execution time: about 12 s for the whole chapter on a 2-core CPU "
        "with one torch thread" in chapter
    )
    assert "the CPU model was not recorded" in chapter
    # the link under the title and the header button
    assert chapter.count('href="http://127.0.0.1:9999/lab/tree/notebooks/01_x.md"') == 2
    # the whole book as one PDF, a header button relative to each page
    assert f'href="../{ext.BOOK_PDF}"' in chapter and f'href="{ext.BOOK_PDF}"' in index
    # the footer
    assert (
        "lengthgen-lite version 9.8.7" in chapter
        and "lengthgen-lite version 9.8.7" in index
    )


@pytest.mark.parametrize(
    "old, new",
    [
        ("{glued}`no effect`", "{glued}`mostly true`"),  # not a verdict
        ("none: a fixed model", "unknown"),  # neither a verdict nor "none"
        ("| 2.0 |", "reproduced | 2.0 |"),  # a final word typed by hand
        ("| live verdict |", "| verdict |"),  # a column the final word needs
    ],
)
def test_a_real_build_fails_on_a_bad_scorecard(tmp_path, old, new):
    page = SCORECARD.replace(old, new, 1)
    assert page != SCORECARD
    if old == "| 2.0 |":
        page = SCORECARD.replace(
            "none: a fixed model | | 2.0 |", "none: x | mixed | 2.0 |"
        )
    status, _ = build(tmp_path, page)
    assert status != 0


def test_slider_figures_take_their_cells_alt_text():
    from lengthgen_lite.viz.sliders import SliderFigure

    figure = SliderFigure("ch0-demo", {"s": [1]}, {"data": [], "layout": {}}, [{}], [0])
    shown = figure._repr_mimebundle_()["text/html"]
    labelled = ext.slider_alt(shown, ' Curves "fall" & rise. ')
    assert labelled.startswith(
        '<div id="lengthgen-slider-ch0-demo" class="lengthgen-slider" role="figure" '
        'aria-label="Curves &quot;fall&quot; &amp; rise." data-lengthgen-slider='
    )
    with pytest.raises(ValueError, match="not a slider figure"):
        ext.slider_alt("<div></div>", "x")


def test_a_slider_figure_cell_prints_its_caption_under_it_and_takes_numref(tmp_path):
    """myst-nb wraps every display output of a cell with ``mystnb.figure`` in a figure
    (glue records aside): a slider figure gets its caption and label as an image does,
    and the extension still names it by the cell's alt text."""
    import nbformat
    import plotly.graph_objects as go

    from lengthgen_lite.viz import static_slider_figure

    figure = static_slider_figure(
        lambda s: go.Figure(go.Scatter(y=[s])), {"s": [1, 2]}, name="ch0-demo"
    )
    glue = nbformat.v4.new_output(
        "display_data",
        data={"application/papermill.record/text/plain": "0.1"},
        metadata={"scrapbook": {"name": "x", "mime_prefix": "application/papermill."}},
    )
    cell = nbformat.v4.new_code_cell("figure")
    cell.outputs = [
        glue,
        nbformat.v4.new_output(
            "execute_result", data=figure._repr_mimebundle_(), execution_count=1
        ),
    ]
    cell.metadata["mystnb"] = {
        "figure": {"caption": "Curves *fall* & rise.", "name": "ch0-fig-demo"},
        "image": {"alt": "Two curves."},
    }
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# Demo\n\nSee {numref}`ch0-fig-demo`."),
            cell,
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3"},
            "language_info": {"name": "python"},
        },
    )
    src = tmp_path / "src"
    src.mkdir()
    nbformat.write(notebook, src / "index.ipynb")
    (src / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1.0"\n')
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        "extensions = ['myst_nb', 'lengthgen_book']\n"
        "html_theme = 'sphinx_book_theme'\nnb_execution_mode = 'off'\nnumfig = True\n"
        "nb_mime_priority_overrides = [('html', 'application/vnd.plotly.v1+json', "
        "None)]\nsuppress_warnings = ['mystnb.unknown_mime_type']\n"
    )
    out = tmp_path / "html"
    assert build_main(["-b", "html", "-W", "-q", "-E", str(src), str(out)]) == 0
    page = (out / "index.html").read_text()
    shown = re.search(
        r'<figure class="[^"]*" id="ch0-fig-demo">(.*?)</figure>', page, re.S
    )
    assert shown and page.count("<figure") == 1
    inside = shown.group(1)
    assert (
        '<div id="lengthgen-slider-ch0-demo" class="lengthgen-slider" role="figure" '
        'aria-label="Two curves."' in inside
    )
    # the caption under the figure, its markup rendered
    assert inside.index("</script>") < inside.index("<figcaption>")
    assert (
        '<span class="caption-text">Curves <em>fall</em> &amp; rise.</span>' in inside
    )
    assert re.search(r'href="#ch0-fig-demo"><span class="std std-numref">Fig. 1', page)


def test_accessible_body_names_toggles_by_their_text_and_lists_the_bibliography():
    body = (
        '<summary aria-label="Toggle hidden content">\n<p>Show code cell source</p>'
        '</summary><div role="list" class="citation-list">'
        '<div class="citation" id="id1" role="doc-biblioentry">A.</div></div>'
    )
    assert ext.accessible_body(body) == (
        "<summary>\n<p>Show code cell source</p></summary>"
        '<div role="list" class="citation-list">'
        '<div class="citation" role="listitem" id="id1">A.</div></div>'
    )
    assert ext.accessible_body(ext.accessible_body(body)) == ext.accessible_body(body)
