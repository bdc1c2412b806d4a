"""The book's baseline run on set complement: chapter 1 trains it, chapter 2 opens it
up.

One place for the configuration, so that every chapter that says "the chapter-1 model"
trains exactly the same thing. The numbers are the book's choice (the papers do not give
theirs): ``v = 16`` tokens, training prefixes ``s = 1..4``, one attention-only layer of
width 64 with no positional encoding, 1000 AdamW steps (the pilot saw the same picture
at 1000 and 3000 steps), five seeds trained as one batched computation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ..core import metrics
from ..core.evaluation import LengthTable, SeedSpread, stack_metric
from ..core.model import ModelConfig, NormPlacement
from ..core.tasks import SetComplement
from ..core.training import TargetKind, TrainConfig, TrainResult, train
from ..core.validation import require_int
from ..runs import Config, Spec
from ..runs.claims import TV_SESOI, Claim, Decision, Effect
from ..runs.compare import collapsed_in

V = 16
TRAIN_LENGTH = 4
D_MODEL = 64
STEPS = 1000
SEEDS = (0, 1, 2, 3, 4)
# the baseline as spec fields: every later chapter's spec starts from it
BASELINE = {"v": V, "train_length": TRAIN_LENGTH, "d_model": D_MODEL, "steps": STEPS}
# The reference tier's sensitivity axes for set complement (issue 19): the book's
# init (std 1/sqrt(fan_in)) against PyTorch's own nn.Linear init, and two learning
# rates; the steps axis comes from the checkpoints (1000, 3000, 6000).
REFERENCE_AXES = {"init": ("book", "torch"), "lr": (1e-3, 3e-3)}
#: the live run's one cell of that grid: the book's init and the baseline's lr
LIVE_CELL = {"init": Config(**BASELINE).init, "lr": Config(**BASELINE).lr}

SPECS: dict[str, Spec] = {
    "ch1/baseline": Spec(
        name="ch1/baseline",
        description="the baseline on set complement, soft and sampled targets, no norm",
        grid={"targets": ("soft", "sampled")},
        base=BASELINE,
        seeds=SEEDS,
        reference={"grid": REFERENCE_AXES},
    )
}


def baseline_setup(
    targets: TargetKind = "soft", norm: NormPlacement = "none"
) -> tuple[SetComplement, ModelConfig, TrainConfig]:
    """The baseline's (task, model config, training config); ``norm`` swaps only the
    placement."""
    task = SetComplement(v=V, train_length=TRAIN_LENGTH)
    # validates ``norm``
    model_cfg = ModelConfig(vocab_size=V, d_model=D_MODEL, norm=norm)
    # validates ``targets``
    return task, model_cfg, TrainConfig(steps=STEPS, targets=targets)


def train_baseline(
    targets: TargetKind = "soft",
    norm: NormPlacement = "none",
    seeds: Sequence[int] = SEEDS,
    *,
    progress: bool = True,
) -> TrainResult:
    """Train the baseline once per seed, all seeds in one batched
    :func:`~lengthgen_lite.core.training.train` call."""
    task, model_cfg, train_cfg = baseline_setup(targets, norm)
    return train(
        model_cfg,
        task,
        train_cfg,
        seeds,
        progress=progress,
        desc=f"{targets} targets, norm={norm}",
    )


def greedy_prediction(seen: Tensor) -> Tensor:
    """All probability on the smallest legal (unseen) token: [..., v] bool -> float.

    The model that top-1 accuracy calls perfect and TV calls far from p*."""
    return torch.nn.functional.one_hot(
        (~seen).int().argmax(dim=-1), seen.shape[-1]
    ).float()


def prediction_columns(
    probs: Tensor, targets: Tensor, seen: Tensor
) -> dict[str, np.ndarray]:
    """Top-1 accuracy, TV and invalid mass of predictions ``probs`` [batch, s, v], means
    over the batch: the columns of chapter 1's first table, [s] each."""
    return {
        "top-1 accuracy": metrics.top1_legal(probs, seen).mean(0).numpy(),
        "TV": metrics.total_variation(probs, targets).mean(0).numpy(),
        "invalid mass": metrics.invalid_mass(probs, seen).mean(0).numpy(),
    }


def book_choices(
    task: SetComplement, model_cfg: ModelConfig, train_cfg: TrainConfig
) -> dict[str, object]:
    """The baseline's settings as the chapter lists them (all the book's choice)."""
    return {
        "v": task.v,
        "training lengths s": f"1..{task.train_length}",
        "d_model": model_cfg.d_model,
        "layers": model_cfg.n_layers,
        "heads": model_cfg.n_heads,
        "MLP width": model_cfg.d_mlp,
        "positional encoding": model_cfg.positional,
        "norm": model_cfg.norm,
        "steps": train_cfg.steps,
        "lr": train_cfg.lr,
        "warm-up steps": train_cfg.warmup,
        "batch": train_cfg.batch,
        "targets": train_cfg.targets,
    }


def length_numbers(
    tables: Sequence[LengthTable], train_length: int
) -> dict[str, float]:
    """The numbers the prose quotes about the soft-target model by length (glue name ->
    rounded value); ``last_perfect`` is the last length up to which every seed's argmax
    is always legal."""
    train_length = require_int("train_length", train_length, 1)
    tv, invalid = stack_metric(tables, "tv"), stack_metric(tables, "invalid_mass")
    top1, s = stack_metric(tables, "top1_legal"), tables[0].s
    imperfect = s[(top1 < 1).any(axis=0)]  # some seed's argmax sometimes illegal here
    last_perfect = int(imperfect.min()) - 1 if len(imperfect) else int(s[-1])
    beyond_gap = np.abs(tv - invalid)[:, train_length:].max()
    return {
        "tv_train_max": round(float(tv[:, :train_length].max()), 4),
        "tv_minus_invalid": round(float(beyond_gap), 4),
        "last_perfect": last_perfect,
        "tv_last_perfect": round(float(tv[:, last_perfect - 1].mean()), 3),
        "top1_min": round(float(top1.min()), 3),
        "s_tv_tenth": int(s[tv.mean(0) > 0.1].min()),
    }


def spread_numbers(spread: SeedSpread) -> dict[str, float]:
    """TV at the longest length: mean, lowest and highest seed (glue name -> value)."""
    return {
        "tv_long": round(float(spread.mean.tv[-1]), 3),
        "tv_long_min": round(float(spread.low.tv[-1]), 3),
        "tv_long_max": round(float(spread.high.tv[-1]), 3),
    }


def summary_columns(spread: SeedSpread) -> dict[str, np.ndarray]:
    """Chapter 1's per-length summary over seeds: the columns of its table, [s] each."""
    return {
        "TV mean": spread.mean.tv,
        "TV min": spread.low.tv,
        "TV max": spread.high.tv,
        "invalid mass mean": spread.mean.invalid_mass,
        "KL mean (nats)": spread.mean.kl,
        "top-1 mean": spread.mean.top1_legal,
    }


def fails_long_margin(tables: Sequence[LengthTable]) -> np.ndarray:
    """TV at the longest length minus 0.5, per seed: [K], > 0 where a seed fails
    there."""
    return stack_metric(tables, "tv")[:, -1] - 0.5


def fails_claim(
    tables: Sequence[LengthTable], train_length: int, loss: np.ndarray
) -> Decision:
    """Chapter 1's scorecard row, the premise of both papers, decided by
    :data:`FAILS_CLAIM` on the live run: the soft-target model's TV at the longest
    length minus 0.5, per seed, one cell (:data:`LIVE_CELL`).
    ``tables``: the soft-target model, one per seed; ``loss``: its training loss
    [steps, K], whose collapsed seeds make the cell inconclusive. The detail says how
    well the same seeds fit the training lengths."""
    train_length = require_int("train_length", train_length, 1)
    inside = stack_metric(tables, "tv")[:, :train_length]
    unstable = int(collapsed_in(loss).sum())
    effect = Effect.of(fails_long_margin(tables), STEPS, unstable=unstable, **LIVE_CELL)
    detail = (
        f"soft targets, TV at s = {int(tables[0].s[-1])} against at most "
        f"{inside.max():.4f} at the training lengths s ≤ {train_length}"
    )
    return FAILS_CLAIM.decide([effect], "live", detail=detail)


def sampled_numbers(
    tables: Sequence[LengthTable], excess: np.ndarray, train_length: int
) -> dict[str, float]:
    """The numbers the prose quotes about the sampled-target model (glue name -> value);
    ``excess``: each seed's final loss above the floor H(p*), [K]."""
    train_length = require_int("train_length", train_length, 1)
    tv, kl = stack_metric(tables, "tv"), stack_metric(tables, "kl")
    invalid = stack_metric(tables, "invalid_mass")
    return {
        "tv_sampled_train_max": round(float(tv[:, :train_length].max()), 3),
        "tv_sampled_train_min": round(float(tv[:, :train_length].min()), 3),
        "tv_sampled_s1": round(float(tv[:, 0].mean()), 3),
        "invalid_sampled_s1": round(float(invalid[:, 0].mean()), 4),
        "tv_sampled_long": round(float(tv[:, -1].mean()), 3),
        "kl_sampled_train": round(float(kl[:, :train_length].mean()), 3),
        "sampled_excess_min": round(float(excess.min()), 3),
        "sampled_excess_mean": round(float(excess.mean()), 3),
    }


# The chapter's scorecard claims, declared once (book/scorecard.md). The live row and
# the reference row both judge the soft-target model, one cell per (init, lr).
# SESOI: 0.01 of TV, the book's smallest difference of interest in a distribution (one
# hundredth of the probability mass).
#: The scorecard claim ch1-score-fails, declared once.
FAILS_CLAIM = Claim(
    "ch1-score-fails",
    "Trained on short inputs, a transformer fails on longer ones (the premise of both "
    "papers)",
    "both papers [paper]",
    metric="TV at s = v - 1, soft targets",
    unit="TV",
    effect="TV at s = v - 1 minus 0.5",
    sesoi=TV_SESOI,
    cells=("init", "lr"),
)
