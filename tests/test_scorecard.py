"""The replication scorecard (book/scorecard.md) and the intro's findings
(book/intro.md) agree with the stored outputs.

Their verdicts and numbers are glued from the chapters and the reference page, so they
cannot be typed in by hand; this checks that every glued key exists in its notebook's
stored outputs, that verdicts use the words that have a badge
(book/_ext/lengthgen_book.py), that the final word is left to the extension, that every
link target exists, that every claim a chapter computes has its row, and that the page
reads at a glance.
"""

import ast
import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import lengthgen_book as ext  # noqa: E402  (the words with a badge, the final word)

PAGE = (ROOT / "book" / "scorecard.md").read_text()
INTRO = (ROOT / "book" / "intro.md").read_text()
REFERENCE = "book/reference.ipynb"
# {glue:text}`/<notebook>::<key>` with an optional format (":s", ":.3f")
GLUE = re.compile(
    r"\{glue:text\}`/((?:notebooks|book)/[\w.]+\.ipynb)::([\w.-]+)(?::[^`]*)?`"
)
REF = re.compile(r"\{ref\}`[^`<]*<([\w-]+)>`")
ROWS = [line for line in PAGE.splitlines() if line.startswith("| {glue:text}")]
# The reasons a claim has no reference sweep, each explained under the table.
NO_REFERENCE = ("construction", "a Monte Carlo", "a fixed model")


def stored_glue(notebook: str) -> dict[str, str]:
    """Every glued value in a stored notebook (path from the repository root): key ->
    its text/plain value (a Python literal)."""
    nb = json.loads((ROOT / notebook).read_text())
    values = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None:
                values[name] = out["data"]["application/papermill.record/text/plain"]
    return values


def labels(notebook: str) -> set[str]:
    nb = json.loads((ROOT / notebook).read_text())
    text = "\n".join(
        "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"
    )
    return set(re.findall(r"^\(([\w-]+)\)=", text, re.M))


def cells(row: str) -> list[str]:
    """A markdown table row's cells, stripped."""
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def keys(text: str) -> list[str]:
    return [key for _, key in GLUE.findall(text)]


ENTRIES = sorted(set(GLUE.findall(PAGE)) | set(GLUE.findall(INTRO)))
NOTEBOOKS = sorted({nb for nb, _ in ENTRIES})
HEADER = (
    "| claim | source | live verdict | reference verdict | final word | "
    "key number: effect [95% interval] | where |"
)


def test_one_table_with_one_row_per_claim():
    # the papers' claims, then "Beyond the papers" (chapter 8): the same columns
    assert PAGE.count("```{table}") == 2 and PAGE.count(HEADER) == 2
    assert PAGE.index("## Beyond the papers") < PAGE.rindex(HEADER)
    assert len(ROWS) >= 20
    claims = [keys(row)[0].removesuffix("-statement") for row in ROWS]
    assert len(set(claims)) == len(claims), "one row per claim"
    header = [cell.strip() for cell in HEADER.strip("|").split("|")]
    assert {ext.LIVE, ext.REFERENCE, ext.FINAL} <= set(header)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: keys(row)[0])
def test_each_row_glues_its_claim_and_leaves_the_final_word_to_the_extension(row):
    claim, source, live, reference, final, number, where = cells(row)
    name = keys(claim)[0].removesuffix("-statement")
    chapter = GLUE.findall(claim)[0][0]
    assert GLUE.findall(claim + source + live) == [
        (chapter, f"{name}-{part}") for part in ("statement", "source", "verdict")
    ]
    assert final == "", "the final word is filled in by the book's extension"
    if reference.startswith(ext.NO_REFERENCE):
        assert reference.removeprefix("none: ") in NO_REFERENCE
        assert GLUE.findall(number) == [(chapter, f"{name}-number")]
        assert REF.findall(where) == [name]
    else:
        assert GLUE.findall(reference) == [(REFERENCE, f"{name}-ref-verdict")]
        assert keys(number) == [f"{name}-ref-number", f"{name}-ref-budget"]
        assert {nb for nb, _ in GLUE.findall(number)} == {REFERENCE}
        chapter_label, reference_label = REF.findall(where)
        assert chapter_label == name and reference_label in labels(REFERENCE)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_entries_exist_in_the_stored_outputs_and_verdicts_are_words(notebook):
    glued = stored_glue(notebook)
    for nb, key in ENTRIES:
        if nb != notebook:
            continue
        assert key in glued, f"{key} is not glued in {notebook}'s stored outputs"
        value = ast.literal_eval(glued[key])
        assert value == 0 or value, f"{key} is empty"
        if key.endswith("-verdict"):
            assert value in ext.VERDICTS, f"{key} = {value!r}"


@pytest.mark.parametrize("notebook", [nb for nb in NOTEBOOKS if nb != REFERENCE])
def test_links_point_at_chapter_labels(notebook):
    targets = {
        key.removesuffix("-verdict")
        for nb, key in GLUE.findall(PAGE)
        if nb == notebook and key.endswith("-verdict")
    }
    assert targets <= labels(notebook), (
        f"missing labels in {notebook}: {sorted(targets - labels(notebook))}"
    )


def test_every_claim_a_chapter_or_the_reference_computes_has_its_row():
    on_page = {key for _, key in GLUE.findall(PAGE)}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        computed = {
            key
            for key in stored_glue(f"notebooks/{path.name}")
            if re.fullmatch(r"ch\d-score-[\w-]+-(statement|source|verdict)", key)
        }
        assert computed <= on_page, (
            f"{path.name} computes scorecard entries the page leaves out: "
            f"{sorted(computed - on_page)}"
        )
    reference = {
        key
        for key in stored_glue(REFERENCE)
        if re.fullmatch(r"ch\d-score-[\w-]+-ref-(verdict|number|budget)", key)
    }
    assert reference <= on_page, sorted(reference - on_page)


def test_the_final_words_can_be_computed_from_the_stored_verdicts():
    """What the extension will do at build time: no row can make it warn."""
    finals = []
    for row in ROWS:
        _, _, live, reference, *_ = cells(row)
        (nb, key), *_ = GLUE.findall(live)
        live_word = ast.literal_eval(stored_glue(nb)[key])
        if GLUE.findall(reference):
            ((ref_nb, ref_key),) = GLUE.findall(reference)
            reference = ast.literal_eval(stored_glue(ref_nb)[ref_key])
        finals.append(ext.final_word(live_word, reference))
    assert sum(count for _, count in ext.verdict_counts(finals)) == len(ROWS)


def test_the_page_reads_at_a_glance():
    title = PAGE.index("# Replication scorecard")
    summary = PAGE.index("```{verdict-summary}\n```")
    assert summary > title and not PAGE[title:summary].count("\n\n") > 1, (
        "the counts come right under the title"
    )
    assert "**What to trust first: the final word.**" in PAGE[summary : summary + 200]
    legend = re.findall(r"\{verdict\}`([^`]+)`", PAGE)
    assert legend == list(ext.VERDICTS), (
        "the legend shows every verdict's badge, in the summary's order"
    )
    glossary = PAGE.index("## The words of the table")
    table = PAGE.index("```{table}\n:class: scorecard\n")
    assert (
        summary
        < glossary
        < table
        < PAGE.index(HEADER)
        < PAGE.index("\n```", table + 10)
    )
    for term in ("**TV**", "**$s$**", "**placements**", "**$s \\times$ gap**"):
        assert term in PAGE[glossary:table], term
    for term in ("**$N_\\text{eff}$**", "**EMA / BEMA**", "**SESOI**", "**live run"):
        assert term in PAGE[glossary:table], term
    for reason in NO_REFERENCE:
        assert f"- **{reason}**" in PAGE[table:], f"no note on {reason!r}"
    prose = re.sub(r"^\|.*\n", "", PAGE, flags=re.M)
    assert len(prose.split()) < 900, "the test machinery belongs in the appendix"
    assert "{ref}`the appendix <appendix-verdicts>`" in PAGE
    appendix = (ROOT / "book" / "appendix.md").read_text()
    assert "(appendix-verdicts)=" in appendix and "tests/test_scorecard.py" in appendix


def test_the_pretrained_model_row_measures_a_llama_family_decoder():
    """Figure 1 is about Llama; the row is computed from the Llama-family model, not the
    MiniLM encoder."""
    from lengthgen_lite.chapters.ch4_llama import LLAMA_CLAIM

    (row,) = [line for line in ROWS if "ch4-score-llama-statement" in line]
    assert keys(row)[2:] == ["ch4-score-llama-verdict", "ch4-score-llama-number"]
    assert "Llama-family" in LLAMA_CLAIM.statement


def test_the_intro_opens_with_the_findings_read_from_the_scorecard():
    findings = INTRO.index("## What the book finds")
    assert findings < INTRO.index("## The two papers")
    assert INTRO[:findings].count("\n\n") <= 2, "one short paragraph before it"
    box = INTRO[
        INTRO.index("```{container} findings\n") : INTRO.index("\n```\n", findings)
    ]
    bullets = re.findall(r"^- \*\*", box, re.M)
    assert 5 <= len(bullets) <= 6
    reference = stored_glue(REFERENCE)
    for bullet in re.split(r"^- ", box, flags=re.M)[1:]:
        verdicts = [key for key in keys(bullet) if key.endswith("-verdict")]
        assert verdicts, f"a finding without its glued verdict: {bullet[:60]!r}"
        for key in verdicts:
            # a live verdict stands for the final word only where no reference exists,
            # or beside the reference verdict it is contrasted with
            final = key.removesuffix("-verdict") + "-ref-verdict"
            assert key == final or final not in reference or final in keys(bullet), (
                f"{key} is not its claim's final word"
            )
    sources = "not their full texts"
    assert sources in INTRO[findings : INTRO.index("## The two papers")]
    honest = INTRO[INTRO.index("## How the book is honest") :]
    assert "abstracts" in honest and "not from their\n  full texts" in honest


@pytest.mark.parametrize("page", sorted((ROOT / "book").glob("*.md")), ids=str)
def test_glue_from_another_page_has_a_format(page):
    """myst-nb splits `path::key:format` at its last colon: without a format, the key
    reads as the path and the build fails with "No key ... found"."""
    bare = re.findall(r"\{glue:text\}`(/[^`]*::[\w-]+)`", page.read_text())
    assert not bare, f"cross-page glue without a format (add :s, :d or :.3f): {bare}"
