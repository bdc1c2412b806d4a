"""The replication scorecard (book/scorecard.md) agrees with the chapters' stored
outputs.

Its verdicts and numbers are glued from the chapters, so they cannot be typed in by
hand; this checks that every entry exists in its chapter, that verdicts use the
words that have a badge (book/_ext/lengthgen_book.py), that every link target exists,
that no chapter computes an entry the scorecard leaves out, and that the page has its
summary of counts, its badge legend and the table the badges are put in.
"""

import ast
import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from lengthgen_book import VERDICTS  # noqa: E402  (the words with a badge)

PAGE = (ROOT / "book" / "scorecard.md").read_text()
GLUE = re.compile(r"\{glue:text\}`/notebooks/([\w.]+\.ipynb)::([\w-]+):s`")
REF = re.compile(r"\{ref\}`[^`<]*<([\w-]+)>`")


def stored_glue(notebook: str) -> dict[str, str]:
    """Every glued value in a stored notebook: key -> its text/plain value (a Python
    literal)."""
    nb = json.loads((ROOT / "notebooks" / notebook).read_text())
    values = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None:
                values[name] = out["data"]["application/papermill.record/text/plain"]
    return values


def labels(notebook: str) -> set[str]:
    nb = json.loads((ROOT / "notebooks" / notebook).read_text())
    text = "\n".join(
        "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"
    )
    return set(re.findall(r"^\(([\w-]+)\)=", text, re.M))


ENTRIES = GLUE.findall(PAGE)
NOTEBOOKS = sorted({nb for nb, _ in ENTRIES})


REFERENCE_GLUE = re.compile(r"\{glue:text\}`/book/reference\.ipynb::([\w-]+):s`")
REFERENCE_ROWS = [
    line
    for line in PAGE.splitlines()
    if line.startswith("| ") and "/book/reference.ipynb::" in line
]


def test_every_row_has_a_verdict_a_number_and_a_link():
    rows = [
        line
        for line in PAGE.splitlines()
        if line.startswith("| ") and "glue:text}`/notebooks/" in line
    ]
    assert len(rows) >= 20
    for row in rows:
        keys = [key for _, key in GLUE.findall(row)]
        claim = keys[0].removesuffix("-statement")
        assert keys == [
            f"{claim}-{part}" for part in ("statement", "source", "verdict", "number")
        ], "the declared claim, its source, verdict and number, glued"
        assert REF.findall(row) == [claim], (
            "the row links to the chapter's evidence for the same claim"
        )


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_entries_exist_in_the_chapter_and_verdicts_are_words(notebook):
    glued = stored_glue(notebook)
    for nb, key in ENTRIES:
        if nb != notebook:
            continue
        assert key in glued, f"{key} is not glued in {notebook}'s stored outputs"
        value = ast.literal_eval(glued[key])
        assert isinstance(value, str) and value.strip()
        if key.endswith("-verdict"):
            assert value in VERDICTS, f"{key} = {value!r}"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_links_point_at_chapter_labels(notebook):
    targets = {
        key.removesuffix("-verdict")
        for nb, key in ENTRIES
        if nb == notebook and key.endswith("-verdict")
    }
    assert targets <= labels(notebook), (
        f"missing labels in {notebook}: {sorted(targets - labels(notebook))}"
    )


def test_no_chapter_entry_is_left_off_the_page():
    on_page = {key for _, key in ENTRIES}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        computed = {
            key
            for key in stored_glue(path.name)
            if re.fullmatch(r"ch\d-score-[\w-]+-(statement|source|verdict|number)", key)
        }
        assert computed <= on_page, (
            f"{path.name} computes scorecard entries the page leaves out: "
            f"{sorted(computed - on_page)}"
        )


def test_the_page_reads_at_a_glance():
    title = PAGE.index("# Replication scorecard")
    summary = PAGE.index("```{verdict-summary}\n```")
    assert summary > title and not PAGE[title:summary].count("\n\n") > 1, (
        "the counts come right under the title"
    )
    legend = re.findall(r"\{verdict\}`([^`]+)`", PAGE)
    assert legend == list(VERDICTS), (
        "the legend shows every verdict's badge, in the summary's order"
    )
    table = PAGE.index("```{table}\n:class: scorecard\n")
    assert (
        table
        < PAGE.index("| claim | source | verdict |")
        < PAGE.index("\n```", table + 10)
    )


def test_the_pretrained_model_row_measures_a_llama_family_decoder():
    """Figure 1 is about Llama; the row is computed from the Llama-family model, not the
    MiniLM encoder."""
    from lengthgen_lite.chapters.ch4_llama import LLAMA_CLAIM

    (row,) = [line for line in PAGE.splitlines() if "ch4-score-llama-statement" in line]
    assert [key for _, key in GLUE.findall(row)][2:] == [
        "ch4-score-llama-verdict",
        "ch4-score-llama-number",
    ]
    assert "Llama-family" in LLAMA_CLAIM.statement


def test_reference_rows_come_from_the_reference_page_and_have_a_live_row():
    glued = {}
    nb = json.loads((ROOT / "book" / "reference.ipynb").read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None:
                glued[name] = out["data"]["application/papermill.record/text/plain"]
    live = {key.removesuffix("-verdict") for _, key in ENTRIES}
    labels = set(
        re.findall(
            r"\(([\w-]+)\)=",
            "\n".join(
                "".join(c["source"])
                for c in nb["cells"]
                if c["cell_type"] == "markdown"
            ),
        )
    )
    assert REFERENCE_ROWS
    for row in REFERENCE_ROWS:
        keys = REFERENCE_GLUE.findall(row)
        claim = keys[0].removesuffix("-ref-statement")
        assert keys == [
            f"{claim}-ref-{part}"
            for part in ("statement", "verdict", "number", "budget")
        ]
        assert claim in live, f"{claim} has no live row"
        assert ast.literal_eval(glued[keys[1]]) in VERDICTS
        assert all(ast.literal_eval(glued[k]).strip() for k in keys)
        assert REF.findall(row)[0] in labels
