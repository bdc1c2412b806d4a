"""Every task the runner can train, by name: ``TASKS[name]`` says how to build it from a
configuration's fields, its default lengths, its model's input and output sizes and how
it is scored.

``runs.Config(task=name)`` accepts exactly the names in :data:`TASKS`, read when the
config is built, so a task registered here (or with :func:`register_task`) is at once a
task every spec, the runner and the command line know. Every task of the book is
registered below when the core is imported; nothing depends on a chapter being
imported. A chapter reads the metrics its task's :class:`TaskEntry` evaluation returns.

How a task is scored: ``evaluate(models, setup, n_test, eval_seed, scales)`` returns,
per logit scale, the curves ``{"s": [len(s)], metric: [K, len(s)] or [len(s)], ...}``
of the K models of one variant (raw or averaged weights), on test sequences fixed by
``eval_seed`` (so seeds differ only in their weights). Only a task whose entry has
``logit_scales=True`` (set complement) is scored at more than the model's own scale.

A test-time factor (``TEST_TIME``; chapter 8's P4): ``evaluate_test_time[name](models,
setup, n_test, eval_seed)`` returns the same curves for models trained without a logit
scale, sharpened only when tested: "logn" multiplies each query's logits by log n / log
n_train (n the keys it sees, n_train the training length). A task without an entry for
a factor has no such evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from torch import nn

from .evaluation import METRICS, evaluate_at_scales, evaluate_lengths, stack_metric
from .games import TicTacToe
from .languages import LANGUAGES, make_language
from .model import ModelConfig, Transformer, logn_twin
from .retrieval import (
    ArgmaxRetrieval,
    DictionaryLookup,
    RetrievalTransformer,
    evaluate_sizes,
    evaluate_sizes_logn,
)
from .seeding import make_generator
from .tasks import SetComplement, Task
from .validation import require_choice, require_int


class TaskFields(Protocol):
    """The fields of a configuration (``runs.Config``) a task is built from."""

    v: int  # set complement's vocabulary
    board: int  # the game's board side ...
    in_a_row: int  # ... and how many in a row win
    train_length: int | None  # None: the entry's default
    test_length: int | None  # None: the entry's default


@dataclass(frozen=True)
class Setup:
    """A configuration's task, built, with its length split and the lengths (or set
    sizes) its evaluation scores."""

    task: Task
    train_length: int  # trains on lengths 1..train_length
    test_length: int  # evaluated up to test_length
    sizes: tuple[int, ...]  # the lengths s (a retrieval task: the set sizes N) scored


Curves = Mapping[str, Any]  # "s": [len(s)]; each metric [K, len(s)] or [len(s)]
Evaluation = Callable[
    [Sequence[nn.Module], Setup, int, int, tuple[float, ...]], dict[float, Curves]
]
TestTimeEvaluation = Callable[[Sequence[nn.Module], Setup, int, int], Curves]
TEST_TIME = ("logn",)  # the test-time logit factors a spec may evaluate


def every_length(task: Task, test_length: int) -> tuple[int, ...]:
    """Lengths 1..test_length: any length a task can draw."""
    return tuple(range(1, test_length + 1))


def next_token(task: Task) -> int | None:
    """No output size of its own: the model predicts the next input token (its
    vocabulary), as on set complement."""
    return None


def own_outputs(task: Task) -> int | None:
    """The task's own ``n_outputs`` (the game's moves, a language's symbols)."""
    return task.n_outputs


@dataclass(frozen=True)
class TaskEntry:
    """How to build, size and score one task (``TASKS[name]``).

    ``make(fields, train_length)`` builds the task from a configuration's fields
    (:class:`TaskFields`); ``train_length`` and ``test_length(task)`` are the lengths a
    configuration that gives none takes. ``lengths(task, test_length)`` are the lengths
    scored, and raises ``ValueError`` for a test length the task cannot draw.
    ``n_outputs(task)`` is the model's output size (None: its vocabulary);
    ``model`` the class trained, with ``model_fields`` set on its ``ModelConfig``.
    ``evaluate_test_time`` maps a factor of ``TEST_TIME`` to its evaluation.
    """

    make: Callable[[TaskFields, int], Task]
    evaluate: Evaluation
    train_length: int
    test_length: Callable[[Task], int]
    lengths: Callable[[Task, int], tuple[int, ...]] = every_length
    n_outputs: Callable[[Task], int | None] = own_outputs
    model: Callable[[ModelConfig], nn.Module] = Transformer
    model_fields: Mapping[str, Any] = field(default_factory=dict)
    logit_scales: bool = False  # scored at every logit scale of a spec, or at 1.0 only
    evaluate_test_time: Mapping[str, TestTimeEvaluation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require_int("train_length", self.train_length, minimum=1)
        for name in ("make", "evaluate", "test_length", "lengths", "n_outputs"):
            if not callable(getattr(self, name)):
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is invalid; allowed: a function "
                    "(see TaskEntry's docstring)"
                )
        for name, evaluation in self.evaluate_test_time.items():
            require_choice("evaluate_test_time", name, TEST_TIME)
            if not callable(evaluation):
                _fail(f"evaluate_test_time[{name!r}]", evaluation, "a function")

    @property
    def item_mlp(self) -> bool:
        """Whether the model may have an item MLP (``ModelConfig.item_mlp``)."""
        return bool(getattr(self.model, "reads_items", False))

    def setup(self, config: TaskFields) -> Setup:
        """The task of a configuration's fields, with its lengths."""
        L = self.train_length if config.train_length is None else config.train_length
        task = self.make(config, L)
        test = config.test_length
        test = self.test_length(task) if test is None else test
        return Setup(task, L, test, tuple(self.lengths(task, test)))


def _fail(name: str, value: object, allowed: str) -> None:
    raise ValueError(f"{name}={value!r} is invalid; allowed: {allowed}")


def score_set_complement(
    models: Sequence[nn.Module],
    setup: Setup,
    n_test: int,
    eval_seed: int,
    scales: tuple[float, ...],
) -> dict[float, Curves]:
    """Set complement at every logit scale (one forward pass per model) on ``n_test``
    random permutations, cut at the test length."""
    v = setup.task.vocab_size
    per_model = [evaluate_at_scales(m, v, scales, n_test, eval_seed) for m in models]
    out = {}
    for j, c in enumerate(scales):
        tables = [scored[j] for scored in per_model]
        keep = tables[0].s <= setup.test_length
        out[c] = {"s": tables[0].s[keep]} | {
            m: stack_metric(tables, m)[:, keep] for m in METRICS
        }
    return out


def score_set_complement_logn(
    models: Sequence[nn.Module], setup: Setup, n_test: int, eval_seed: int
) -> Curves:
    """Set complement with the test-time factor log n / log L on each query's logits
    (:func:`~lengthgen_lite.core.model.logn_twin`), scored as trained models are."""
    twins = [logn_twin(m, setup.train_length) for m in models]
    return score_set_complement(twins, setup, n_test, eval_seed, (1.0,))[1.0]


def score_lengths(
    models: Sequence[nn.Module],
    setup: Setup,
    n_test: int,
    eval_seed: int,
    scales: tuple[float, ...],
) -> dict[float, Curves]:
    """Any task whose targets are distributions over its outputs (the game, the
    languages): :func:`~lengthgen_lite.core.evaluation.evaluate_lengths` on one batch
    of ``n_test`` sequences of the test length."""
    generator = make_generator(eval_seed)
    batch = setup.task.sample_train_batch(n_test, setup.test_length, generator)
    curves = evaluate_lengths(models, batch)
    return {1.0: {f.name: getattr(curves, f.name) for f in fields(curves)}}


def score_sizes(
    models: Sequence[nn.Module],
    setup: Setup,
    n_test: int,
    eval_seed: int,
    scales: tuple[float, ...],
) -> dict[float, Curves]:
    """The retrieval tasks at every set size N: ``n_test`` test sets per N
    (:func:`~lengthgen_lite.core.retrieval.evaluate_sizes`); ``s`` is N."""
    return {1.0: evaluate_sizes(models, setup.task, setup.sizes, n_test, eval_seed)}


def score_sizes_logn(
    models: Sequence[nn.Module], setup: Setup, n_test: int, eval_seed: int
) -> Curves:
    """The retrieval tasks with the test-time factor log N / log N_train at every N
    (:func:`~lengthgen_lite.core.retrieval.evaluate_sizes_logn`)."""
    return evaluate_sizes_logn(
        models, setup.task, setup.sizes, n_test, eval_seed, setup.train_length
    )


def _prefix_lengths(task: Task, test_length: int) -> tuple[int, ...]:
    if test_length > task.vocab_size - 1:
        v = task.vocab_size
        _fail("test_length", test_length, f"a prefix length <= v - 1 = {v - 1}")
    return every_length(task, test_length)


def _moves(task: Task, test_length: int) -> tuple[int, ...]:
    if test_length > task.max_length:
        _fail("test_length", test_length, f"at most {task.max_length} moves")
    return every_length(task, test_length)


SMALLEST_SET = 8  # a retrieval task is tested at N = 8, 16, ..., test_length


def _set_sizes(task: Task, test_length: int) -> tuple[int, ...]:
    """N = 8, 16, ..., test_length (a power of two; dictionary lookup: at most its
    distinct keys)."""
    sizes = [SMALLEST_SET]
    while sizes[-1] < test_length:
        sizes.append(2 * sizes[-1])
    if sizes[-1] != test_length:
        _fail("test_length", test_length, f"a power of two >= {SMALLEST_SET}")
    if test_length > getattr(task, "n_keys", test_length):
        _fail("test_length", test_length, f"at most n_keys={task.n_keys}")
    return tuple(sizes)


def _retrieval(kind: type) -> TaskEntry:
    """Chapter 4's set-retrieval task ``kind`` at its default sizes: sets of
    2..train_length items in training, tested at N = 8, 16, ..., 1024."""

    def make(fields: TaskFields, train_length: int) -> Task:
        try:
            return kind(max_train_size=train_length)
        except ValueError as err:
            _fail("train_length", train_length, f"2..the task's largest set ({err})")

    return TaskEntry(
        make=make,
        evaluate=score_sizes,
        train_length=16,
        test_length=lambda task: 1024,
        lengths=_set_sizes,
        model=RetrievalTransformer,
        # no causal mask, only the query attends (chapter 4's model)
        model_fields={"causal": False, "queries": "last"},
        evaluate_test_time={"logn": score_sizes_logn},
    )


def _language(name: str) -> TaskEntry:
    """A formal language of chapter 7: trained on 16 symbols, tested on 48."""
    return TaskEntry(
        make=lambda fields, L: make_language(name, train_length=L),
        evaluate=score_lengths,
        train_length=16,
        test_length=lambda task: 48,
    )


#: The live registry: task name -> how to build, size and score it.
TASKS: dict[str, TaskEntry] = {
    # chapter 1: trained on prefixes of 1..4 tokens, tested on every prefix (v - 1)
    "set_complement": TaskEntry(
        make=lambda fields, L: SetComplement(v=fields.v, train_length=L),
        evaluate=score_set_complement,
        train_length=4,
        test_length=lambda task: task.vocab_size - 1,
        lengths=_prefix_lengths,
        n_outputs=next_token,
        logit_scales=True,
        evaluate_test_time={"logn": score_set_complement_logn},
    ),
    # chapter 7: the game on a board x board grid, 8 moves in training, tested on all
    "tictactoe": TaskEntry(
        make=lambda fields, L: TicTacToe(
            n=fields.board, k=fields.in_a_row, train_length=L
        ),
        evaluate=score_lengths,
        train_length=8,
        test_length=lambda task: task.max_length,
        lengths=_moves,
    ),
    **{name: _language(name) for name in LANGUAGES},
    "argmax_retrieval": _retrieval(ArgmaxRetrieval),
    "dictionary_lookup": _retrieval(DictionaryLookup),
}


def task_entry(name: str) -> TaskEntry:
    """The registered task ``name``; ``ValueError`` naming every registered one."""
    return TASKS[require_choice("task", name, tuple(TASKS))]


def register_task(name: str, entry: TaskEntry) -> None:
    """Make task ``name`` known to every spec, the runner and the command line.

    A task of the book is a row of :data:`TASKS`; this adds one at run time (a
    notebook's or a test's own task; remove it with ``TASKS.pop(name)``). A Ray
    worker imports the core afresh: it knows the rows of :data:`TASKS` only."""
    if not isinstance(name, str) or not name.isidentifier():
        _fail("name", name, "a new task name such as 'set_recall'")
    if name in TASKS:
        _fail("name", name, f"a name not yet registered (not one of {tuple(TASKS)})")
    if not isinstance(entry, TaskEntry):
        _fail("entry", entry, "a TaskEntry")
    TASKS[name] = entry


__all__ = [
    "SMALLEST_SET",
    "TASKS",
    "TEST_TIME",
    "Curves",
    "Evaluation",
    "Setup",
    "TaskEntry",
    "TaskFields",
    "TestTimeEvaluation",
    "every_length",
    "next_token",
    "own_outputs",
    "register_task",
    "score_lengths",
    "score_set_complement",
    "score_set_complement_logn",
    "score_sizes",
    "score_sizes_logn",
    "task_entry",
]
