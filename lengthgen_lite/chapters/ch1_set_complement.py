"""The book's baseline run on set complement: chapter 1 trains it, chapter 2 opens it up.

One place for the configuration, so that every chapter that says "the chapter-1 model" trains
exactly the same thing. The numbers are the book's choice (the papers do not give theirs):
``v = 16`` tokens, training prefixes ``s = 1..4``, one attention-only layer of width 64 with no
positional encoding, 1000 AdamW steps (the pilot saw the same picture at 1000 and 3000 steps),
five seeds trained as one batched computation.
"""

from __future__ import annotations

from typing import Sequence

from ..core.model import ModelConfig, NormPlacement
from ..core.tasks import SetComplement
from ..core.training import TargetKind, TrainConfig, TrainResult, train
from ..runs import Spec

V = 16
TRAIN_LENGTH = 4
D_MODEL = 64
STEPS = 1000
SEEDS = (0, 1, 2, 3, 4)
# the baseline as spec fields: every later chapter's spec starts from it
BASELINE = {"v": V, "train_length": TRAIN_LENGTH, "d_model": D_MODEL, "steps": STEPS}

SPECS: dict[str, Spec] = {
    "ch1/baseline": Spec(
        name="ch1/baseline",
        description="the baseline on set complement, soft and sampled targets, no norm",
        grid={"targets": ("soft", "sampled")},
        base=BASELINE,
        seeds=SEEDS,
    )
}


def baseline_setup(
    targets: TargetKind = "soft", norm: NormPlacement = "none"
) -> tuple[SetComplement, ModelConfig, TrainConfig]:
    """The baseline's (task, model config, training config); ``norm`` swaps only the placement."""
    task = SetComplement(v=V, train_length=TRAIN_LENGTH)
    model_cfg = ModelConfig(vocab_size=V, d_model=D_MODEL, norm=norm)  # validates ``norm``
    return task, model_cfg, TrainConfig(steps=STEPS, targets=targets)  # validates ``targets``


def train_baseline(
    targets: TargetKind = "soft",
    norm: NormPlacement = "none",
    seeds: Sequence[int] = SEEDS,
    *,
    progress: bool = True,
) -> TrainResult:
    """Train the baseline once per seed, all seeds in one batched :func:`~lengthgen_lite.core.training.train` call."""
    task, model_cfg, train_cfg = baseline_setup(targets, norm)
    return train(model_cfg, task, train_cfg, seeds, progress=progress, desc=f"{targets} targets, norm={norm}")
