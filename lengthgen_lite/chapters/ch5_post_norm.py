"""Norm placements on set complement: a runner, a tidy summary, and what the output norm does.
Chapter 5.

Every run is the chapter-1 baseline (:mod:`~lengthgen_lite.chapters.ch1_set_complement`) with only the norm placement
(and, for the first paper version's remedy, dropout) changed; a configuration's seeds train in one
batched :func:`~lengthgen_lite.core.training.train` call.

The mechanism measurements ask one question: is the gap kept by a sharper attention pattern, or
by the norm dividing a still-uniform average by its shrinking spread? :func:`gap_profile` records
both, and re-runs the model with the norm's divisor (its ``hook_scale``) frozen to a constant
(:func:`frozen_divisor_hooks`, through ``run_with_hooks``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor, nn

from ..core import metrics
from ..core.evaluation import LengthTable, evaluate_seeds, length_metrics, seed_values
from ..core.model import PLACEMENTS  # noqa: F401  (chapter 5 runs every placement; re-exported)
from ..core.model import hooks_installed, run_with_cache, run_with_hooks
from ..core.seeding import make_generator
from ..core.tasks import sample_sequences, seen_mask, target_distribution
from ..core.training import TargetKind, TrainResult, train
from ..core.validation import require_number
from .ch1_set_complement import SEEDS, TRAIN_LENGTH, baseline_setup

# The norm whose input contains the attention average, by placement. "pre" normalises only the
# token embeddings before attention, and "none" has no norm: neither can rescale the average.
OUTPUT_NORM: dict[str, str] = {"post": "blocks.0.ln1", "pre_final": "ln_final", "attn_out": "blocks.0.ln_attn_out"}


@dataclass
class PlacementRun:
    """One configuration trained over several seeds, scored at every prefix length."""

    norm: str
    targets: str
    attn_dropout: float
    resid_dropout: float
    result: TrainResult  # .models: one trained model per seed
    tables: list[LengthTable]  # one per seed, on the same test sequences
    n_layers: int = 1
    d_mlp: int = 0

    @property
    def label(self) -> str:
        """``norm=post``, plus the dropout rates and a deeper model's size when they differ from the baseline."""
        return _label(self.norm, self.attn_dropout, self.resid_dropout, self.n_layers, self.d_mlp)


def _label(norm: str, attn_dropout: float, resid_dropout: float, n_layers: int = 1, d_mlp: int = 0) -> str:
    extras = (("attn_dropout", attn_dropout), ("resid_dropout", resid_dropout))
    parts = [f"norm={norm}", *(f"{name}={p:g}" for name, p in extras if p)]
    if n_layers != 1:
        parts.append(f"layers={n_layers}")
    if d_mlp:
        parts.append(f"d_mlp={d_mlp}")
    return ", ".join(parts)


def run_placement(
    norm: str,
    targets: TargetKind,
    seeds: Sequence[int] = SEEDS,
    *,
    attn_dropout: float = 0.0,
    resid_dropout: float = 0.0,
    n_layers: int = 1,
    d_mlp: int = 0,
    steps: int | None = None,
    progress: bool = True,
) -> PlacementRun:
    """Train the chapter-1 baseline with this norm placement (and dropout) on every seed at once.

    ``n_layers`` and ``d_mlp`` make the model deeper (the baseline: one attention-only layer), to
    show where ``post`` and ``pre_final`` stop being nearly the same model. ``steps`` overrides the
    baseline's number of training steps (None: keep it).
    """
    task, model_cfg, train_cfg = baseline_setup(targets, norm)  # validates norm and targets
    model_cfg = replace(  # validates rates and sizes
        model_cfg, attn_dropout=attn_dropout, resid_dropout=resid_dropout, n_layers=n_layers, d_mlp=d_mlp
    )
    if steps is not None:
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError(f"steps must be a positive int or None (the baseline's), got {steps!r}")
        train_cfg = replace(train_cfg, steps=steps, warmup=min(train_cfg.warmup, steps))
    desc = f"{targets} targets, {_label(norm, attn_dropout, resid_dropout, n_layers, d_mlp)}"
    result = train(model_cfg, task, train_cfg, seeds, progress=progress, desc=desc)
    tables = evaluate_seeds(result.models, task.v)
    return PlacementRun(norm, targets, attn_dropout, resid_dropout, result, tables, n_layers, d_mlp)


def _length_ranges(s: np.ndarray, train_length: int) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(train_length, int) or not 1 <= train_length < int(s.max()):
        raise ValueError(f"train_length must be an int in 1..{int(s.max()) - 1} (some longer s must remain), got {train_length!r}")
    return s <= train_length, s > train_length


def summary_rows(runs: Sequence[PlacementRun], train_length: int = TRAIN_LENGTH) -> list[dict[str, object]]:
    """One tidy row per (run, seed): TV at the training lengths and beyond, invalid mass beyond,
    TV at the longest length, and the logit gap at s = 1 and at the longest s."""
    if not runs:
        raise ValueError("runs must hold at least one PlacementRun")
    rows = []
    for run in runs:
        for seed, table in zip(run.result.seeds, run.tables):
            inside, beyond = _length_ranges(table.s, train_length)
            rows.append(
                {
                    "norm": run.norm,
                    "targets": run.targets,
                    "attn_dropout": run.attn_dropout,
                    "resid_dropout": run.resid_dropout,
                    "n_layers": run.n_layers,
                    "d_mlp": run.d_mlp,
                    "seed": seed,
                    "tv_train": float(table.tv[inside].mean()),
                    "tv_beyond": float(table.tv[beyond].mean()),
                    "invalid_beyond": float(table.invalid_mass[beyond].mean()),
                    "tv_longest": float(table.tv[-1]),
                    "gap_first": float(table.logit_gap[0]),
                    "gap_longest": float(table.logit_gap[-1]),
                }
            )
    return rows


def per_seed(rows: Sequence[dict[str, object]], column: str, targets: str, norm: str) -> np.ndarray:
    """``column`` for one placement and target kind, without dropout, one value per seed (seed order)."""
    return seed_values(rows, column, targets=targets, norm=norm, attn_dropout=0.0, resid_dropout=0.0)


DROPOUT_KINDS = ("attn_dropout", "resid_dropout")


def dropout_seed_values(rows: Sequence[dict[str, object]], column: str, targets: str, kind: str, p: float) -> np.ndarray:
    """``column`` of the no-norm runs with dropout ``kind`` at rate ``p`` and the other kind off, per seed.

    ``p = 0`` selects the no-dropout baseline, so a comparison reads the same rows for both sides.
    """
    if kind not in DROPOUT_KINDS:
        raise ValueError(f"kind={kind!r} is unknown; allowed: {DROPOUT_KINDS}")
    rates = {"attn_dropout": 0.0, "resid_dropout": 0.0, kind: float(p)}
    return seed_values(rows, column, targets=targets, norm="none", **rates)


def frozen_divisor_hooks(name: str, divisor: float) -> dict[str, Callable[[Tensor, str], Tensor]]:
    """Hooks (for ``run_with_hooks``) that make the norm ``name`` divide by the constant
    ``divisor`` instead of each vector's own std (its ``hook_scale``); its centring, gain and bias
    are kept. Removes the rescaling and nothing else."""
    divisor = require_number("divisor", divisor, minimum=0.0, strict=True)
    frozen = torch.tensor(divisor)  # a 0-dim tensor: divides exactly as the float itself does
    return {f"{name}.hook_scale": lambda _scale, _name: frozen}


@contextmanager
def frozen_divisor(model: nn.Module, name: str, divisor: float) -> Iterator[None]:
    """Inside the block, the norm ``name`` divides by the constant ``divisor``
    (:func:`frozen_divisor_hooks`, installed on ``model`` until the block ends)."""
    with hooks_installed(model, frozen_divisor_hooks(name, divisor)):
        yield


@dataclass(frozen=True)
class GapProfile:
    """One trained model at every prefix length s = 1..v-1: means over the test sequences."""

    s: np.ndarray
    gap: np.ndarray  # logit gap: smallest legal minus largest illegal logit
    frozen_gap: np.ndarray  # the same with the output norm's divisor frozen (= gap without one)
    divisor: np.ndarray  # what the output norm divides by, sqrt(var + eps) over features (nan: none)
    attn_out_std: np.ndarray  # std over features of the attention output W_O z (hook_attn_out)
    entropy_ratio: np.ndarray  # attention entropy / log s (1: uniform over the s seen tokens)
    max_attention_ratio: np.ndarray  # s * largest attention weight (1: uniform; s: all on one token)


@torch.no_grad()
def gap_profile(model: nn.Module, n_sequences: int = 2000, seed: int = 0, train_length: int = TRAIN_LENGTH) -> GapProfile:
    """Measure the gap, the attention's sharpness and the output norm's divisor at every ``s``.

    The frozen divisor is the mean divisor over the training lengths ``s = 1..train_length``: at
    those lengths the frozen model is close to the real one, and beyond them it shows what the gap
    would be if the norm stopped rescaling.
    """
    v = model.cfg.vocab_size
    tokens = sample_sequences(v, v - 1, n_sequences, make_generator(seed))  # [batch, v-1]
    seen = seen_mask(tokens, v)
    s = np.arange(1, v)
    inside, _ = _length_ranges(s, train_length)
    names = ["blocks.0.attn.hook_pattern", "blocks.0.hook_attn_out"]
    norm_name = OUTPUT_NORM.get(model.cfg.norm)
    if norm_name is not None:  # what the output norm divides by (recorded: the norm is unchanged)
        names.append(f"{norm_name}.hook_scale")
    logits, cache = run_with_cache(model, tokens, names=names)
    pattern = cache["blocks.0.attn.hook_pattern"]  # [batch, head, query_pos, key_pos]
    table = length_metrics(logits, target_distribution(tokens, v), pattern=pattern)[0]
    gap, entropy_ratio = table.logit_gap, table.entropy_ratio  # [v-1]
    max_ratio = table.max_attention * s.astype(np.float32)  # s * largest weight
    attn_out_std = cache["blocks.0.hook_attn_out"].std(dim=-1, unbiased=False).mean(0).numpy()
    if norm_name is None:
        divisor = np.full(v - 1, np.nan)
        frozen_gap = gap
    else:
        divisor = cache[f"{norm_name}.hook_scale"].squeeze(-1).mean(0).numpy()  # [v-1]
        hooks = frozen_divisor_hooks(norm_name, float(divisor[inside].mean()))
        frozen_logits = run_with_hooks(model, tokens, hooks)
        frozen_gap = metrics.logit_gap(frozen_logits, seen).mean(0).numpy()
    return GapProfile(s, gap, frozen_gap, divisor, attn_out_std, entropy_ratio, max_ratio)


PROFILE_FIELDS = ("gap", "frozen_gap", "divisor", "attn_out_std", "entropy_ratio", "max_attention_ratio")


def stack_profile(profiles: Sequence[GapProfile], field: str) -> np.ndarray:
    """One field of several profiles (one per seed) as a [K, len(s)] array, for plots and asserts."""
    if not profiles:
        raise ValueError("profiles must hold at least one GapProfile")
    if field not in PROFILE_FIELDS:
        raise ValueError(f"field {field!r} is unknown; allowed: {PROFILE_FIELDS}")
    return np.stack([getattr(profile, field) for profile in profiles])


def growth(profiles: Sequence[GapProfile], field: str = "gap") -> np.ndarray:
    """``s * field`` at the longest ``s`` over its value at ``s = 1``, per profile (seed): [K].

    1 means the 1/s law holds exactly; above 1, something (a norm) keeps the gap from shrinking.
    """
    stacked = stack_profile(profiles, field)  # [K, len(s)]; validates profiles and field
    scaled = profiles[0].s * stacked
    return scaled[:, -1] / scaled[:, 0]
