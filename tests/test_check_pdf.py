"""tests/check_pdf.py, the check `make test` runs on make pdf's output, on small
inputs."""

import pathlib
import sys

from pypdf.generic import DictionaryObject, NameObject

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import check_pdf  # noqa: E402


def test_normalise_unfolds_ligatures_and_badge_spacing():
    assert (
        check_pdf.normalise("ﬁts  a\nlong\tline , 5 reproduced ,")
        == "fits a long line, 5 reproduced,"
    )


def test_the_pages_are_the_toc_in_order():
    pages = check_pdf.toc_pages(ROOT)
    assert pages[0] == "book/intro" and pages[1] == "book/scorecard"
    assert "notebooks/02_attention_dispersion" in pages and len(pages) == len(
        set(pages)
    )


def test_read_html_book(tmp_path):
    page = (
        '<html><body><img src="logo.png"><article class="bd-article"><h1>A  '
        'title<a class="headerlink" '
        'href="#a">#</a></h1><p class="verdict-summary"><strong>2 claims: '
        "</strong>2 <span>reproduced</span></p>"
        '<img src="a.png"><div><img src="b.png"></div></article></body></html>'
    )
    (tmp_path / "p.html").write_text(page)
    (tmp_path / "q.html").write_text(
        '<article class="bd-article"><h1>Other</h1></article>'
    )
    book = check_pdf.read_html_book(tmp_path, ["p", "q"])
    assert book.titles == ["A title", "Other"]
    assert book.summary == "2 claims: 2 reproduced"
    assert book.images == 2  # the logo outside the article is not a figure


def test_image_count_looks_inside_forms():
    image = DictionaryObject({NameObject("/Subtype"): NameObject("/Image")})
    form = DictionaryObject(
        {
            NameObject("/Subtype"): NameObject("/Form"),
            NameObject("/Resources"): DictionaryObject(
                {NameObject("/XObject"): DictionaryObject({NameObject("/I"): image})}
            ),
        }
    )
    resources = DictionaryObject(
        {
            NameObject("/XObject"): DictionaryObject(
                {NameObject("/A"): image, NameObject("/F"): form}
            )
        }
    )
    assert check_pdf.image_count(resources) == 2
    assert check_pdf.image_count(None) == 0


def test_read_html_book_counts_slider_figures(tmp_path):
    (tmp_path / "p.html").write_text(
        '<article class="bd-article"><h1>T</h1><div class="output text_html">'
        '<div id="s" class="lengthgen-slider" data-lengthgen-slider="ch0"></div>'
        "</div></article>"
    )
    assert check_pdf.read_html_book(tmp_path, ["p"]).sliders == 1


def test_split_figures():
    figures = [("one page", {3}), ("two pages", {4, 5}), ("drawn nowhere", set())]
    assert check_pdf.split_figures(figures) == [
        "figure on pages [4, 5], not on one: 'two pages'",
        "figure on pages [], not on one: 'drawn nowhere'",
    ]


def test_contents_problems():
    pages = [
        "the book Contents Start here Scorecard 2 Chapters 1 Set complement 3",
        "Scorecard: the claims",
        "Set complement and more",
        "Other page",
    ]
    assert check_pdf.contents_problems(pages, ["Scorecard", "Set complement"]) == []
    assert check_pdf.contents_problems(pages, ["Other page", "Scorecard 2"]) == [
        "contents: no page number for 'Other page'",
        "contents: no page number for 'Scorecard 2'",
    ]
    moved = ["Contents Scorecard 4", "", "", "Other"]
    assert check_pdf.contents_problems(moved, ["Scorecard"]) == [
        "contents: 'Scorecard' is not on page 4"
    ]
    assert check_pdf.contents_problems(["no list"], ["x"]) == ["no contents page"]


def test_metadata_problems():
    info = {"/Author": "A", "/Subject": "S", "/Version": "1.0"}
    assert check_pdf.metadata_problems(info, "1.0") == []
    assert check_pdf.metadata_problems({"/Author": "A"}, "1.0") == [
        "metadata: no /Subject",
        "metadata: /Version is None, not '1.0'",
    ]
    assert check_pdf.metadata_problems(None, "1.0")[0] == "metadata: no /Author"


def test_raw_latex():
    assert check_pdf.raw_latex(r"titled \emph Learning, \textbf{x} \emphasis") == [
        r"\emph",
        r"\textbf",
    ]
    assert check_pdf.raw_latex("print('\\n'.join(lines))") == []
