"""book/extending.md, run as written: its code blocks, in order, in one namespace, on a
tiny configuration; the task and the placement it adds are removed afterwards."""

import pathlib
import re

import pytest
import torch

from lengthgen_lite.core import model as core_model
from lengthgen_lite.core.model import NORM_SITES, PLACEMENTS
from lengthgen_lite.core.seeding import make_generator
from lengthgen_lite.core.task_registry import TASKS
from lengthgen_lite.runs import Config

PAGE = pathlib.Path(__file__).resolve().parents[1] / "book" / "extending.md"
STEPS = (
    "1. Add a task to the core and register it",
    "2. Declare it in a chapter's `SPECS` and run it",
    "3. Add a norm placement and train with it",
)


def blocks(section: str) -> list[str]:
    """The ```python blocks of one section of the page (between its heading and the
    next)."""
    text = PAGE.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)


def run_blocks(codes: list[str], namespace: dict) -> None:
    for code in codes:
        exec(compile(code, str(PAGE), "exec"), namespace)


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


@pytest.fixture
def clean(monkeypatch):
    """The registry as it was before the test, restored in place (runs.Config reads
    the same dict); the placement table through monkeypatch."""
    saved = dict(TASKS)
    yield monkeypatch
    TASKS.clear()
    TASKS.update(saved)


def test_the_page_is_in_the_books_back_matter():
    toc = (PAGE.parents[1] / "_toc.yml").read_text()
    assert toc.index("file: book/extending") > toc.index("caption: Back matter")


def test_the_three_steps_run_end_to_end(clean):
    assert [len(blocks(step)) for step in STEPS] == [2, 1, 1]
    ns: dict = {}
    # step 1: the task, then its registration, makes it a valid Config task
    with pytest.raises(ValueError, match="unknown task 'set_recall'"):
        Config(task="set_recall")
    run_blocks(blocks(STEPS[0]), ns)
    setup = Config(task="set_recall", v=6).setup()
    assert (setup.train_length, setup.test_length, setup.sizes) == (
        4,
        6,
        (1, 2, 3, 4, 5, 6),
    )
    batch = setup.task.sample_train_batch(4, 5, make_generator(0))
    seen = torch.nn.functional.one_hot(batch.inputs, 6).cumsum(1) > 0  # by brute force
    torch.testing.assert_close(batch.targets, seen.float() / seen.sum(-1, keepdim=True))
    stacked = setup.task.sample_train_batches(
        4, 5, [make_generator(1), make_generator(2)]
    )
    torch.testing.assert_close(
        stacked.targets[1],
        setup.task.sample_train_batch(4, 5, make_generator(2)).targets,
    )
    with pytest.raises(ValueError, match="test_length must be an integer between 1"):
        Config(task="set_recall", v=6, test_length=7)

    # step 2: a chapter's SPECS, run
    run_blocks(blocks(STEPS[1]), ns)
    results = ns["results"]
    assert {c.task for c in results.configs} == {"set_recall"}
    assert len(results.rows) == 2 * 2  # configurations x seeds

    # step 3: the row added to NORM_SITES (as the page's edit of core/model.py would)
    rows = new_rows()
    assert list(rows) == ["pre_attn_out"] and "pre_attn_out" not in NORM_SITES
    with pytest.raises(ValueError, match="unknown norm 'pre_attn_out'"):
        Config(norm="pre_attn_out")
    for name, sites in rows.items():
        clean.setitem(NORM_SITES, name, sites)
    run_blocks(blocks(STEPS[2]), ns)
    assert ns["logits"].shape == (1, 4, 8)
    # the names are read when model.py is imported
    assert "pre_attn_out" not in PLACEMENTS


def test_the_page_leaves_no_task_or_placement_behind():
    """Runs after the end-to-end test (file order): its fixture cleaned up."""
    assert "set_recall" not in TASKS and "pre_attn_out" not in NORM_SITES


@pytest.mark.parametrize(
    "kwargs, size",
    [
        (dict(v=1, train_length=1), None),
        (dict(v=4, train_length=5), None),
        (dict(v=4, train_length=2), 5),
        (dict(v=4, train_length=True), None),
    ],
)
def test_the_new_task_rejects_bad_input(kwargs, size):
    ns: dict = {}
    run_blocks(blocks(STEPS[0])[:1], ns)  # the class only: nothing registered
    with pytest.raises(ValueError, match="must be an integer"):
        ns["SetRecall"](**kwargs).sample_train_batch(2, size or 2, make_generator(0))
    assert "set_recall" not in TASKS
