import dataclasses

import pytest

from lengthgen_lite.core.games import TicTacToe
from lengthgen_lite.core.languages import LANGUAGES
from lengthgen_lite.core.model import Transformer
from lengthgen_lite.core.retrieval import DictionaryLookup, RetrievalTransformer
from lengthgen_lite.core.task_registry import (
    TASKS,
    TaskEntry,
    register_task,
    score_lengths,
    task_entry,
)
from lengthgen_lite.core.tasks import SetComplement


@dataclasses.dataclass(frozen=True)
class Fields:
    """What a configuration gives a task (runs.Config has these and more)."""

    v: int = 16
    board: int = 4
    in_a_row: int = 4
    train_length: int | None = None
    test_length: int | None = None


def test_every_task_of_the_book_is_registered_in_order():
    assert list(TASKS) == [
        "set_complement",
        "tictactoe",
        *LANGUAGES,
        "argmax_retrieval",
        "dictionary_lookup",
    ]
    assert all(isinstance(entry, TaskEntry) for entry in TASKS.values())


def test_defaults_build_each_task_with_its_lengths():
    setup = task_entry("set_complement").setup(Fields())
    assert setup.task == SetComplement(v=16, train_length=4)
    assert (setup.train_length, setup.test_length) == (4, 15)
    assert setup.sizes == tuple(range(1, 16))
    game = task_entry("tictactoe").setup(Fields(board=3, in_a_row=3))
    assert game.task == TicTacToe(n=3, k=3, train_length=8)
    assert game.test_length == 9
    lookup = task_entry("dictionary_lookup").setup(Fields(test_length=64))
    assert lookup.task == DictionaryLookup(max_train_size=16)
    assert lookup.sizes == (8, 16, 32, 64)
    anbn = task_entry("anbn").setup(Fields(train_length=6))
    assert (anbn.train_length, anbn.test_length) == (6, 48)


def test_models_and_output_sizes():
    assert task_entry("set_complement").n_outputs(SetComplement(8, 4)) is None
    game = TicTacToe(n=3, k=3, train_length=4)
    assert task_entry("tictactoe").n_outputs(game) == game.n_outputs
    retrieval = task_entry("argmax_retrieval")
    assert retrieval.model is RetrievalTransformer and retrieval.item_mlp
    assert retrieval.model_fields == {"causal": False, "queries": "last"}
    assert task_entry("anbn").model is Transformer and not task_entry("anbn").item_mlp
    assert [n for n, e in TASKS.items() if e.logit_scales] == ["set_complement"]


@pytest.mark.parametrize(
    "name, fields, message",
    [
        ("set_complement", Fields(test_length=16), "a prefix length <= v - 1 = 15"),
        ("tictactoe", Fields(board=3, in_a_row=3, test_length=10), "at most 9 moves"),
        ("argmax_retrieval", Fields(test_length=100), "a power of two >= 8"),
        ("dictionary_lookup", Fields(test_length=2048), "at most n_keys=1024"),
        ("argmax_retrieval", Fields(train_length=1), "2..the task's largest set"),
    ],
)
def test_lengths_a_task_cannot_draw_are_refused(name, fields, message):
    with pytest.raises(ValueError, match=message):
        task_entry(name).setup(fields)


@pytest.fixture
def registry():
    """The live registry, restored in place afterwards (runs.Config reads it too)."""
    saved = dict(TASKS)
    yield TASKS
    TASKS.clear()
    TASKS.update(saved)


def test_register_task_adds_a_live_entry_and_refuses_bad_ones(registry):
    entry = dataclasses.replace(task_entry("norepeat"), train_length=4)
    register_task("short_norepeat", entry)
    assert task_entry("short_norepeat") is entry and "short_norepeat" in registry
    with pytest.raises(ValueError, match="name='short_norepeat' is invalid"):
        register_task("short_norepeat", entry)
    with pytest.raises(ValueError, match="name='a b' is invalid"):
        register_task("a b", entry)
    with pytest.raises(ValueError, match="entry=.* is invalid; allowed: a TaskEntry"):
        register_task("other", score_lengths)
    with pytest.raises(ValueError, match="unknown task 'chess'; allowed: 'set_c"):
        task_entry("chess")
    with pytest.raises(ValueError, match="train_length must be an integer >= 1"):
        dataclasses.replace(entry, train_length=0)
    with pytest.raises(ValueError, match="evaluate=None is invalid"):
        dataclasses.replace(entry, evaluate=None)


def test_the_registry_is_restored_after_registering():
    assert "short_norepeat" not in TASKS  # (the test above, run first, cleaned up)
