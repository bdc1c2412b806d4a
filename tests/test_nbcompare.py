"""The notebook comparison: exact words and integers, decimals within their printed
precision."""

import pytest

from nbcompare import (
    DEFAULT,
    Report,
    Tolerance,
    compare_cell,
    compare_notebooks,
    compare_text,
)


def text_report(stored: str, fresh: str, tol: Tolerance = DEFAULT) -> Report:
    report = Report()
    compare_text(stored, fresh, tol, "cell", report)
    return report


def cell(*outputs, metadata=None, source="x"):
    return {
        "cell_type": "code",
        "source": source,
        "metadata": metadata or {},
        "outputs": list(outputs),
    }


def stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def glued(value, mime="application/papermill.record/text/plain"):
    return {"output_type": "display_data", "data": {mime: value}, "metadata": {}}


@pytest.mark.parametrize(
    ("stored", "fresh"),
    [
        ("<td>0.410</td>", "<td>0.411</td>"),  # one unit of the last digit
        # round() dropped a trailing zero: the coarser precision counts
        ("0.98", "0.982"),
        ("TV 6.103 at s=15", "TV 6.104 at s=15"),
        ("gap 1.00e-03", "gap 1.01e-03"),  # 1 % relative
        ("-0.004", "-0.005"),
    ],
)
def test_rounding_of_another_cpu_passes(stored, fresh):
    report = text_report(stored, fresh)
    assert report.ok, report.describe()
    assert report.moved == 1


@pytest.mark.parametrize(
    ("stored", "fresh", "why"),
    [
        ("<td>0.410</td>", "<td>0.430</td>", "20 units of the last digit and 5 %"),
        ("TV 0.723 at s=15", "TV 0.10 at s=15", "a real change"),
        ("fits 4/8", "fits 5/8", "integers are exact"),
        ("assert True", "assert False", "words are exact"),
        ("norm=none", "norm=post", "words are exact"),
        ("0.5 0.6", "0.5", "a number went missing"),
    ],
)
def test_real_changes_fail(stored, fresh, why):
    assert not text_report(stored, fresh).ok, why


def test_identifiers_with_digits_are_words():
    assert not text_report("ch5-gap", "ch6-gap").ok
    assert text_report("ch5-gap", "ch5-gap").ok


def test_progress_bars_are_masked():
    stored = "soft targets: 100%|##########| 1000/1000 [00:07<00:00, 140.1it/s]"
    fresh = "soft targets: 100%|##########| 1000/1000 [00:09<00:00, 111.3it/s]"
    assert text_report(stored, fresh).ok


def test_a_cell_can_widen_its_tolerance_with_a_reason():
    meta = {"nbcompare": {"rtol": 0.2, "why": "histogram bars"}}
    stored, fresh = cell(glued("0.1505"), metadata=meta), cell(glued("0.1379"))
    report = Report()
    compare_cell(stored, fresh, "c", report)
    assert report.ok
    report = Report()
    compare_cell(cell(glued("0.1505")), fresh, "c", report)
    assert not report.ok  # the default would not allow it


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"rtol": 0.2}, "must say why"),
        ({"rtoll": 0.2, "why": "typo"}, "unknown nbcompare keys"),
    ],
)
def test_bad_overrides_raise(override, message):
    with pytest.raises(ValueError, match=message):
        compare_cell(cell(metadata={"nbcompare": override}), cell(), "c", Report())


def test_streams_split_differently_compare_equal():
    report = Report()
    compare_cell(
        cell(stream("a 1.0\n"), stream("b 2.0\n")),
        cell(stream("a 1.0\nb 2.0\n")),
        "c",
        report,
    )
    assert report.ok, report.describe()


def test_images_and_widget_ids_are_not_compared_but_must_exist():
    png = {"output_type": "display_data", "data": {"image/png": "AAAA"}, "metadata": {}}
    other_png = {
        "output_type": "display_data",
        "data": {"image/png": "BBBB"},
        "metadata": {},
    }
    report = Report()
    compare_cell(cell(png), cell(other_png), "c", report)
    assert report.ok
    report = Report()
    compare_cell(cell(png), cell(), "c", report)
    assert not report.ok


def test_ignored_cell_and_changed_source():
    report = Report()
    compare_cell(
        cell(glued("1"), metadata={"tags": ["nbval-ignore-output"]}),
        cell(glued("2")),
        "c",
        report,
    )
    assert report.ok
    nb = lambda source: {"cells": [cell(source=source)]}  # noqa: E731
    assert not compare_notebooks(nb("a = 1"), nb("a = 2")).ok
