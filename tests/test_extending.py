"""book/extending.md, run as written: its code blocks, in order, in one namespace."""

import pathlib
import re

import pytest
import torch

from lengthgen_lite.core import model as core_model
from lengthgen_lite.core.model import NORM_SITES, PLACEMENTS, ModelConfig
from lengthgen_lite.core.seeding import make_generator

PAGE = pathlib.Path(__file__).resolve().parents[1] / "book" / "extending.md"


def blocks(section: str) -> list[str]:
    """The ```python blocks of one section of the page (between its heading and the
    next)."""
    text = PAGE.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)


def new_rows() -> dict:
    """The NORM_SITES row the page adds (its {code-block} for core/model.py), as a
    dict."""
    block = re.search(
        r"^```\{code-block\} python\n:caption: "
        r"lengthgen_lite/core/model.py.*?\n\n(.*?)^```$",
        PAGE.read_text(),
        re.S | re.M,
    ).group(1)
    # (our own page)
    return eval("{" + block + "}", {"NormSites": core_model.NormSites})


def test_the_page_is_in_the_books_back_matter():
    toc = (PAGE.parents[1] / "_toc.yml").read_text()
    assert toc.index("file: book/extending") > toc.index("caption: Back matter")


@pytest.fixture(scope="module")
def task_namespace():
    namespace: dict = {}
    for code in blocks("How to add a task"):
        exec(compile(code, str(PAGE), "exec"), namespace)
    return namespace


def test_how_to_add_a_task_runs_as_written(task_namespace):
    ns = task_namespace
    assert ns["result"].loss.shape == (60, 2) and len(ns["test_loss"]) == 2
    task = ns["SetRecall"](v=6, train_length=3)
    batch = task.sample_train_batch(4, 5, make_generator(0))
    # the rule, by brute force
    seen = torch.nn.functional.one_hot(batch.inputs, 6).cumsum(1) > 0
    torch.testing.assert_close(batch.targets, seen.float() / seen.sum(-1, keepdim=True))
    stacked = task.sample_train_batches(4, 5, [make_generator(1), make_generator(2)])
    torch.testing.assert_close(
        stacked.targets[1], task.sample_train_batch(4, 5, make_generator(2)).targets
    )


@pytest.mark.parametrize(
    "kwargs, size",
    [
        (dict(v=1, train_length=1), None),
        (dict(v=4, train_length=5), None),
        (dict(v=4, train_length=2), 5),
        (dict(v=4, train_length=True), None),
    ],
)
def test_the_new_task_rejects_bad_input(task_namespace, kwargs, size):
    with pytest.raises(ValueError, match="must be an integer"):
        task_namespace["SetRecall"](**kwargs).sample_train_batch(
            2, size or 2, make_generator(0)
        )


def test_how_to_add_a_norm_placement_runs_as_written(task_namespace, monkeypatch):
    rows = new_rows()
    assert list(rows) == ["pre_attn_out"] and "pre_attn_out" not in NORM_SITES
    with pytest.raises(ValueError, match="norm='pre_attn_out' is unknown"):
        ModelConfig(vocab_size=8, norm="pre_attn_out")
    for name, sites in rows.items():  # what adding the row to core/model.py does
        monkeypatch.setitem(NORM_SITES, name, sites)
    namespace = dict(task_namespace)
    (code,) = blocks("How to add a norm placement")
    exec(compile(code, str(PAGE), "exec"), namespace)
    assert namespace["logits"].shape == (1, 4, 8)
    # the names are read when model.py is imported
    assert "pre_attn_out" not in PLACEMENTS
