"""Beyond set complement: norm placements and EMA on a board game and a formal-language suite. Chapter 7.

Runs are declared as data (:class:`RunSpec`: task, norm placement, target kind). :func:`run_spec`
trains one spec for all seeds in one batched :func:`~lengthgen_lite.core.training.train` call with an EMA riding along, and
scores the raw and the averaged weights at every length on one fixed test batch per task
(:func:`evaluate_lengths`). Length is the number of tokens seen: moves played in the game, symbols
read in a language. Every task trains on lengths ``1..train_length`` and is tested up to
``test_length`` (two to three times longer).

The settings are the book's choice; neither paper's game or language set-up is published in what
we have. The model is the package's one-layer attention-only :class:`~lengthgen_lite.core.model.Transformer` without
positional encoding, as in chapters 1-6.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Sequence, get_args

import numpy as np
import torch
from torch import nn

from ..core.averaging import make_ema
from ..core.evaluation import PATTERN, length_metrics, seed_values
from ..core.games import TicTacToe
from ..core.languages import LANGUAGES, Language, make_language
from ..core.model import PLACEMENTS as ALL_PLACEMENTS
from ..core.model import ModelConfig, NormPlacement, run_with_cache
from ..core.seeding import make_generator
from ..core.tasks import Batch
from ..core.training import TargetKind, TrainConfig, TrainResult, train


TaskName = Literal["tictactoe", "dyck1", "anbn", "unlock", "norepeat"]
TASKS: tuple[str, ...] = get_args(TaskName)
PLACEMENTS: tuple[str, ...] = tuple(p for p in ALL_PLACEMENTS if p != "pre_final")  # ch. 5's, no pre_final
VARIANTS = ("raw", "ema")
SEEDS = (0, 1, 2)
EMA_BETA = 0.99


@dataclass(frozen=True)
class TaskSetup:
    """A task with its length split and model width (the book's choice)."""

    task: TicTacToe | Language
    train_length: int
    test_length: int
    d_model: int
    steps: int


def task_setup(name: str) -> TaskSetup:
    """The chapter's configuration of task ``name`` (one of ``TASKS``)."""
    if name == "tictactoe":  # 4 x 4, four in a row: wins need 7 moves; train on 8 moves, test all 16
        game = TicTacToe(n=4, k=4, train_length=8)
        return TaskSetup(game, 8, game.max_length, d_model=64, steps=500)
    if name in LANGUAGES:  # train on 16 symbols, test on 48
        return TaskSetup(make_language(name, train_length=16), 16, 48, d_model=32, steps=300)
    raise ValueError(f"task name={name!r} is unknown; allowed: {TASKS}")


@dataclass(frozen=True)
class RunSpec:
    """One configuration: a task, a norm placement and a target kind."""

    task: TaskName = "tictactoe"
    norm: NormPlacement = "none"
    targets: TargetKind = "soft"

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r} is unknown; allowed: {TASKS}")
        if self.norm not in PLACEMENTS:
            raise ValueError(f"norm={self.norm!r} is not one of this chapter's placements {PLACEMENTS}")
        if self.targets not in get_args(TargetKind):
            raise ValueError(f"targets={self.targets!r} is unknown; allowed: {get_args(TargetKind)}")

    def label(self) -> str:
        return f"{self.task}, norm={self.norm}, {self.targets}"


@dataclass(frozen=True)
class LengthCurves:
    """Per-length metrics of several models (one row per seed): every field but ``s`` is [K, len(s)].

    Means over the test positions that exist at each length (a game can end early). ``nan`` where
    a metric has no position (e.g. no set-valued target at that length).
    """

    s: np.ndarray  # lengths 1..test_length
    tv: np.ndarray  # TV to the uniform target over the legal set
    invalid_mass: np.ndarray  # probability on illegal outputs
    logit_gap: np.ndarray  # smallest legal minus largest illegal logit
    entropy_ratio: np.ndarray  # attention entropy / log s, layer 0, mean over heads (1 = uniform)
    tv_set: np.ndarray  # TV at positions with two or more legal outputs
    tv_single: np.ndarray  # TV at positions with exactly one legal output (e.g. END after a game)
    share_single: np.ndarray  # [len(s)] fraction of positions whose target is a single output


CURVE_FIELDS = ("tv", "invalid_mass", "logit_gap", "entropy_ratio", "tv_set", "tv_single")


def make_test_batch(setup: TaskSetup, n_sequences: int = 1000, seed: int = 0) -> Batch:
    """The fixed test sequences of a task: ``n_sequences`` of ``test_length`` tokens (shared by all models)."""
    return setup.task.sample_train_batch(n_sequences, setup.test_length, make_generator(seed))


@torch.no_grad()
def evaluate_lengths(models: Sequence[nn.Module], batch: Batch) -> LengthCurves:
    """Score every model at every length of ``batch`` (one forward pass per model)."""
    if not models:
        raise ValueError("models must hold at least one model (e.g. TrainResult.models)")
    tables = []
    for model in models:
        logits, cache = run_with_cache(model, batch.inputs, names=[PATTERN])
        tables += length_metrics(
            logits, batch.targets, positions=batch.loss_mask, pattern=cache[PATTERN]
        )
    curves = {f: np.stack([getattr(t, f) for t in tables]) for f in CURVE_FIELDS}
    return LengthCurves(s=tables[0].s, **curves, share_single=tables[0].share_single)


@dataclass
class Run:
    """A trained :class:`RunSpec`: the models and their per-length curves, raw and EMA."""

    spec: RunSpec
    setup: TaskSetup
    result: TrainResult
    curves: dict[str, LengthCurves]  # variant ("raw", "ema") -> curves

    def mean(self, field: str, variant: str = "raw", lengths: str = "beyond") -> np.ndarray:
        """Per-seed mean of ``field`` over the training lengths or the lengths beyond: [K]."""
        if variant not in self.curves:
            raise ValueError(f"variant {variant!r} is unknown; this run has {sorted(self.curves)}")
        if field not in CURVE_FIELDS:
            raise ValueError(f"field {field!r} is unknown; allowed: {CURVE_FIELDS}")
        if lengths not in ("train", "beyond"):
            raise ValueError(f"lengths={lengths!r} is unknown; allowed: ('train', 'beyond')")
        values = getattr(self.curves[variant], field)
        L = self.setup.train_length
        part = values[:, :L] if lengths == "train" else values[:, L:]
        return np.nanmean(part, axis=1)


def run_spec(
    spec: RunSpec,
    seeds: Sequence[int] = SEEDS,
    *,
    steps: int | None = None,
    n_test: int = 1000,
    progress: bool = True,
) -> Run:
    """Train ``spec`` for every seed at once (EMA alongside) and score raw and EMA weights per length.

    ``steps`` overrides the task's number of training steps (None: the chapter's).
    """
    setup = task_setup(spec.task)
    steps = setup.steps if steps is None else steps
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive int or None (the chapter's), got {steps!r}")
    task = setup.task
    model_cfg = ModelConfig(vocab_size=task.vocab_size, n_outputs=task.n_outputs, d_model=setup.d_model, norm=spec.norm)
    train_cfg = TrainConfig(steps=steps, batch=64, warmup=min(50, steps // 2), targets=spec.targets)
    result = train(model_cfg, task, train_cfg, seeds, averagers={"ema": make_ema(EMA_BETA)}, progress=progress, desc=spec.label())
    batch = make_test_batch(setup, n_test)
    curves = {"raw": evaluate_lengths(result.models, batch), "ema": evaluate_lengths(result.averaged["ema"], batch)}
    return Run(spec=spec, setup=setup, result=result, curves=curves)


def summary_rows(runs: Sequence[Run]) -> list[dict[str, object]]:
    """One tidy row per (run, variant, seed): mean TV at the training lengths and beyond, invalid
    mass beyond, and TV beyond at set-valued and at single-output positions."""
    if not runs:
        raise ValueError("runs must hold at least one Run")
    rows = []
    for run in runs:
        for variant in run.curves:
            columns = {
                "tv_train": run.mean("tv", variant, "train"),
                "tv_beyond": run.mean("tv", variant, "beyond"),
                "invalid_beyond": run.mean("invalid_mass", variant, "beyond"),
                "tv_set_beyond": run.mean("tv_set", variant, "beyond"),
                "gap_beyond": run.mean("logit_gap", variant, "beyond"),
            }
            for k, seed in enumerate(run.result.seeds):
                row = {**dataclasses.asdict(run.spec), "variant": variant, "seed": seed}
                rows.append(row | {name: float(values[k]) for name, values in columns.items()})
    return rows


def full_length_example(batch: Batch) -> int:
    """Index of the first test sequence that runs to the last position (a game played to the end)."""
    full = batch.loss_mask.all(-1).nonzero().flatten()
    if len(full) == 0:
        raise ValueError("no sequence in the batch runs to the last position; use more test sequences")
    return int(full[0])


@torch.no_grad()
def predictions(models: Sequence[nn.Module], tokens: torch.Tensor) -> np.ndarray:
    """Next-token distributions of every model on one sequence of tokens [pos]: [K, pos, n_outputs]."""
    if tokens.dim() != 1:
        raise ValueError(f"tokens must be one sequence [pos], got shape {tuple(tokens.shape)}")
    return np.stack([run_with_cache(model, tokens[None], names=[])[0][0].softmax(-1).numpy() for model in models])
