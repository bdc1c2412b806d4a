"""Chapter 6: noisy gradients, weight averaging, the temperature control and the random
search.

Three parts, in the chapter's order:

- **Gradient noise.** The training loss is linear in the targets, and a sampled one-hot
  target has mean p*, so for the same inputs the *expected* sampled-target gradient is
  exactly the soft-target gradient. What differs is the spread around that mean.
  :func:`minibatch_gradients` and :func:`gradient_noise` measure it (the same loss as
  :func:`lengthgen_lite.core.training.train`).
- **The temperature control.** Multiplying every logit by ``c > 1`` sharpens the
  prediction without changing which tokens rank first, and long-length TV is very
  sensitive to that scale: :func:`tv_by_logit_scale` scores one model at many scales
  from one forward pass, on the same sequences as
  :func:`lengthgen_lite.core.evaluation.evaluate_set_complement`.
- **Runs and the search.** The chapter's experiments are ``SPECS`` (chapter 1's baseline
  with norm placement, learning rate, batch size, dropout or target kind changed),
  trained by :func:`lengthgen_lite.runs.runner.run` with the averagers of
  :mod:`lengthgen_lite.core.averaging` riding along and scored at every prefix length
  and logit scale; a :class:`Run` reads one configuration of the ``Results``,
  :func:`score_rows` flattens them for the search's factors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import torch
from torch import Tensor, nn

from ..core.evaluation import length_metrics
from ..core.hooks import run_with_cache
from ..core.model import PLACEMENTS, NormPlacement
from ..core.seeding import make_generator, numpy_generator
from ..core.tasks import (
    Batch,
    Task,
    sample_next_tokens,
    sample_sequences,
    target_distribution,
)
from ..core.training import TargetKind, TrainResult, training_loss
from ..core.validation import require_choice
from ..runs import Results, Spec
from ..runs.claims import TV_SESOI, Claim, Decision, Effect, cell_word
from ..runs.compare import training_state
from ..runs.spec import Config
from ..runs.stats import Interval, pooled
from .ch1_set_complement import BASELINE


def flat_gradient(
    model: nn.Module, inputs: Tensor, targets: Tensor, mask: Tensor
) -> Tensor:
    """Gradient of :func:`~lengthgen_lite.core.training.training_loss` w.r.t. all
    parameters of ``model``, flattened: [n_params].

    Runs in eval mode (no dropout), so the only randomness is the batch and its targets.
    """
    was_training = model.training
    model.eval()
    try:
        params = [p for p in model.parameters() if p.requires_grad]
        loss = training_loss(model(inputs), targets, mask)
        grads = torch.autograd.grad(loss, params)
    finally:
        model.train(was_training)
    return torch.cat([g.reshape(-1) for g in grads])


def _targets(batch: Batch, kind: TargetKind, generator: torch.Generator) -> Tensor:
    if kind == "soft":
        return batch.targets
    if kind == "sampled":
        n_out = batch.targets.shape[-1]
        return nn.functional.one_hot(
            sample_next_tokens(batch.targets, generator), n_out
        ).float()
    raise ValueError(f"targets={kind!r} is unknown; allowed: ('soft', 'sampled')")


def minibatch_gradients(
    model: nn.Module,
    task: Task,
    batch: int,
    n_batches: int,
    targets: TargetKind,
    seed: int = 0,
) -> Tensor:
    """Gradients on ``n_batches`` fresh training batches of ``batch`` examples:
    [n_batches, n_params].

    Each batch is drawn as ``train`` draws it (input size from ``task.train_sizes()``,
    cycling).
    """
    if not isinstance(n_batches, int) or n_batches < 2:
        raise ValueError(
            "n_batches must be an int >= 2 (a spread needs two samples), got "
            f"{n_batches!r}"
        )
    generator = make_generator(seed)
    sizes = list(task.train_sizes())
    rows = []
    for i in range(n_batches):
        b = task.sample_train_batch(batch, sizes[i % len(sizes)], generator)
        rows.append(
            flat_gradient(model, b.inputs, _targets(b, targets, generator), b.loss_mask)
        )
    return torch.stack(rows)


def resampled_target_gradients(
    model: nn.Module, batch: Batch, n_draws: int, seed: int = 0
) -> Tensor:
    """Gradients for ``n_draws`` independent draws of sampled targets on the *same*
    inputs: [n_draws, n_params].

    Their mean tends to the soft-target gradient on those inputs (the loss is linear in
    the targets).
    """
    if not isinstance(n_draws, int) or n_draws < 1:
        raise ValueError(f"n_draws must be a positive int, got {n_draws!r}")
    generator = make_generator(seed)
    return torch.stack(
        [
            flat_gradient(
                model,
                batch.inputs,
                _targets(batch, "sampled", generator),
                batch.loss_mask,
            )
            for _ in range(n_draws)
        ]
    )


@dataclass(frozen=True)
class GradientNoise:
    """Summary of gradient samples g_1..g_n (rows): signal, noise and their ratio."""

    # ||E g||^2, estimated without bias (||mean||^2 - trace_cov / n): the signal
    mean_sq_norm: float
    trace_cov: float  # E||g - E g||^2 (unbiased): the noise, summed over parameters
    snr: float  # mean_sq_norm / trace_cov: below 1, a single step is mostly noise


def gradient_noise(grads: Tensor) -> GradientNoise:
    """Signal ``||E g||^2``, noise ``tr Cov`` and their ratio for gradient samples [n,
    n_params].

    ``||mean||^2`` alone overstates the signal by ``tr Cov / n`` (the noise left in a
    mean of n samples), which matters when the noise dominates; that share is
    subtracted.
    """
    if grads.dim() != 2 or grads.shape[0] < 2:
        raise ValueError(f"grads must be [n >= 2, n_params], got {tuple(grads.shape)}")
    grads = grads.double()
    mean = grads.mean(dim=0)
    trace_cov = float(((grads - mean) ** 2).sum(dim=1).sum() / (grads.shape[0] - 1))
    signal = float(mean.square().sum()) - trace_cov / grads.shape[0]
    return GradientNoise(
        mean_sq_norm=signal, trace_cov=trace_cov, snr=signal / trace_cov
    )


def noise_table(
    models: Mapping[str, nn.Module],
    task: Task,
    batches: Sequence[int] = (32, 128),
    targets: Sequence[TargetKind] = ("soft", "sampled"),
    n_batches: int = 64,
    seed: int = 1,
) -> list[dict[str, object]]:
    """:func:`gradient_noise` of every model (keyed by where in training it is) at
    every batch size and target kind, ``n_batches`` fresh batches each: rows with
    where, batch, targets, trace_cov (the noise), signal (``||E g||^2``) and snr."""
    rows = []
    for where, model in models.items():
        for batch in batches:
            for kind in targets:
                grads = minibatch_gradients(model, task, batch, n_batches, kind, seed)
                noise = gradient_noise(grads)
                rows.append(
                    {
                        "where": where,
                        "batch": batch,
                        "targets": kind,
                        "trace_cov": noise.trace_cov,
                        "signal": noise.mean_sq_norm,
                        "snr": noise.snr,
                    }
                )
    return rows


def _rounded(value: float, digits: int) -> float:
    # as viz.common.glue_round rounds a glued number (digits 0: an int)
    return int(round(value)) if digits == 0 else round(float(value), digits)


def noise_numbers(rows: Sequence[Mapping[str, object]]) -> dict[str, float]:
    """The numbers the prose quotes from :func:`noise_table` (batch 128; glue name ->
    rounded value): how much noisier sampled targets are, before and after training,
    the signal-to-noise ratios, and how far each kind's noise drops with training."""
    noise = {(r["where"], r["batch"], r["targets"]): r for r in rows}
    late_soft = noise["after training", 128, "soft"]
    late_sampled = noise["after training", 128, "sampled"]
    init_soft = noise["at init", 128, "soft"]
    init_sampled = noise["at init", 128, "sampled"]
    return {
        "noise_ratio_trained": _rounded(
            late_sampled["trace_cov"] / late_soft["trace_cov"], 0
        ),
        "noise_ratio_init": _rounded(
            init_sampled["trace_cov"] / init_soft["trace_cov"], 1
        ),
        "snr_soft_trained": _rounded(late_soft["snr"], 2),
        "snr_sampled_trained": _rounded(late_sampled["snr"], 3),
        "soft_noise_drop": _rounded(init_soft["trace_cov"] / late_soft["trace_cov"], 0),
        "sampled_noise_drop": _rounded(
            init_sampled["trace_cov"] / late_sampled["trace_cov"], 1
        ),
        "signal_ratio_init": _rounded(init_sampled["signal"] / init_soft["signal"], 2),
    }


def resampling_error(
    model: nn.Module, batch: Batch, n_draws: int, seed: int = 0
) -> np.ndarray:
    """How far the mean of the first n sampled-target gradients is from the soft-target
    gradient on the same ``batch``, relative to its length, for n = 1..``n_draws``:
    [n_draws] (unbiased: it falls like 1/sqrt(n))."""
    soft = flat_gradient(model, batch.inputs, batch.targets, batch.loss_mask)
    draws = resampled_target_gradients(model, batch, n_draws, seed=seed)
    running_mean = draws.cumsum(0) / torch.arange(1, n_draws + 1)[:, None]
    return ((running_mean - soft).norm(dim=1) / soft.norm()).numpy()


@torch.no_grad()
def tv_by_logit_scale(
    model: nn.Module,
    v: int,
    scales: Sequence[float],
    n_sequences: int = 2000,
    seed: int = 0,
) -> np.ndarray:
    """TV to p* at every prefix length for the logits times each scale: [len(scales),
    v-1].

    Row ``i`` equals ``evaluate_set_complement(model, v, n_sequences, seed,
    logit_scale=scales[i]).tv``.
    """
    scales = [float(c) for c in scales]
    if not scales or not all(c > 0 for c in scales):
        raise ValueError(
            f"scales must be a non-empty list of positive floats, got {scales!r}"
        )
    # [batch, v-1]
    tokens = sample_sequences(v, v - 1, n_sequences, make_generator(seed))
    logits, _ = run_with_cache(model, tokens, names=[])  # [batch, s, v], eval mode
    tables = length_metrics(logits, target_distribution(tokens, v), logit_scales=scales)
    return np.stack([table.tv for table in tables])


def matched_scale(
    tv_curve: np.ndarray, scales: Sequence[float], target: float
) -> float:
    """The scale whose TV in ``tv_curve`` [len(scales)] is closest to ``target`` (the
    first one on ties).

    Used to ask: how much must the raw logits be sharpened to match an averaged model's
    TV?
    """
    tv_curve = np.asarray(tv_curve, dtype=float)
    if tv_curve.shape != (len(scales),):
        raise ValueError(
            f"tv_curve must have one entry per scale ({len(scales)}), got "
            f"shape {tv_curve.shape}"
        )
    return float(scales[int(np.argmin(np.abs(tv_curve - target)))])


def scaling_matches(
    raw_train: np.ndarray, raw_beyond: np.ndarray, train: float, beyond: float
) -> bool:
    """Does some logit scale of the raw model reach TV <= ``train`` at the training
    lengths *and* <= ``beyond`` beyond them? ``raw_train``, ``raw_beyond``: mean TV per
    scale, [len(scales)].

    If not, a model reaching (``train``, ``beyond``) is better in a way no temperature
    explains.
    """
    raw_train, raw_beyond = (
        np.asarray(raw_train, dtype=float),
        np.asarray(raw_beyond, dtype=float),
    )
    if raw_train.ndim != 1 or raw_train.shape != raw_beyond.shape:
        raise ValueError(
            "raw_train and raw_beyond must be matching 1-D arrays, got "
            f"{raw_train.shape}, {raw_beyond.shape}"
        )
    return bool(((raw_train <= train) & (raw_beyond <= beyond)).any())


LengthRange = Literal["train", "beyond"]


@dataclass(frozen=True)
class Run:
    """One configuration of a ``Results`` read the chapter's way: TV by length, scale
    and variant.

    ``tv[variant]`` is [K, len(scales), v-1]; ``result`` holds the trained models.
    """

    results: Results
    index: int  # the configuration's position in results.configs

    @property
    def config(self) -> Config:
        return self.results.configs[self.index]

    @property
    def scales(self) -> tuple[float, ...]:
        return tuple(self.results.spec.scales)

    @property
    def train_length(self) -> int:
        return self.config.setup().train_length

    @property
    def result(self) -> TrainResult:
        return self.results.live_training[self.index]

    @property
    def unstable(self) -> int:
        """How many of the configuration's seeds collapsed in training
        (:func:`~lengthgen_lite.runs.compare.training_state`): a cell with one is
        inconclusive."""
        steps = self.config.steps
        return int(training_state(self.results, self.index, steps)[1].sum())

    @property
    def tv(self) -> dict[str, np.ndarray]:
        return {
            v: np.stack([self.curve(v, c) for c in self.scales], axis=1)
            for v in self.results.variants
        }

    def _check(self, variant: str) -> None:
        if variant not in self.results.variants:
            raise ValueError(
                f"variant {variant!r} is unknown; this run has "
                f"{sorted(self.results.variants)}"
            )

    def curve(self, variant: str, scale: float = 1.0) -> np.ndarray:
        """TV by prefix length at one logit scale: [K, v-1]."""
        self._check(variant)
        if scale not in self.scales:
            raise ValueError(
                f"scale {scale!r} was not evaluated; available: {self.scales}"
            )
        return self.results.curves(
            "tv", config=self.index, variant=variant, scale=scale
        )

    def mean_tv(
        self, variant: str, lengths: LengthRange, scale: float = 1.0
    ) -> np.ndarray:
        """Mean TV over the training lengths ``s <= L`` or the lengths beyond them, per
        seed: [K]."""
        require_choice("lengths", lengths, get_args(LengthRange))
        self._check(variant)
        return self.results.values(
            f"tv_{lengths}", config=self.index, variant=variant, scale=scale
        )

    def gain(
        self, lengths: LengthRange, variant: str = "ema", scale: float = 1.0
    ) -> np.ndarray:
        """Raw TV minus ``variant``'s TV over a length range, per seed: [K] (> 0:
        averaging helps)."""
        return self.mean_tv("raw", lengths, scale) - self.mean_tv(
            variant, lengths, scale
        )

    def scale_curve(self, variant: str, lengths: LengthRange) -> np.ndarray:
        """Mean TV over a length range at every evaluated scale, per seed: [K,
        len(scales)]."""
        return np.stack(
            [self.mean_tv(variant, lengths, c) for c in self.scales], axis=1
        )


def _cell(run: Run, *fields: str) -> dict[str, object]:
    """The fields of ``run``'s configuration that name its cell of a claim."""
    return {f: getattr(run.config, f) for f in fields}


def by_config(
    results: Results, keys: Sequence[str] = ("norm", "batch", "lr")
) -> dict[object, Run]:
    """Every configuration of ``results`` as a :class:`Run`, keyed by the ``keys``
    fields (a tuple of them; one key: its value)."""
    out: dict[object, Run] = {}
    for i, c in enumerate(results.configs):
        key = tuple(getattr(c, k) for k in keys)
        out[key[0] if len(keys) == 1 else key] = Run(results, i)
    return out


def runs_of(results: Results) -> list[Run]:
    """Every configuration of ``results`` as a :class:`Run`, in order."""
    return [Run(results, i) for i in range(len(results.configs))]


def score_rows(runs: Sequence[Run], scale: float = 1.0) -> list[dict[str, object]]:
    """One row per (run, variant, seed): norm, lr, batch, dropout (residual), targets,
    ``run`` (index in ``runs``), ``seed``, ``variant``, ``ema`` (variant is "ema"),
    ``tv_train``, ``tv_beyond``. The flat table the plots and the factor analysis read.
    """
    rows = []
    for index, run in enumerate(runs):
        c = run.config
        fields = {
            "norm": c.norm,
            "lr": c.lr,
            "batch": c.batch,
            "dropout": c.resid_dropout,
            "targets": c.targets,
        }
        for variant in run.results.variants:
            train_tv, beyond_tv = (
                run.mean_tv(variant, "train", scale),
                run.mean_tv(variant, "beyond", scale),
            )
            for k, seed in enumerate(
                run.results.seeds_of(config=run.index, variant=variant, scale=scale)
            ):
                row = {
                    "run": index,
                    "seed": seed,
                    "variant": variant,
                    "ema": variant == "ema",
                }
                rows.append(
                    fields
                    | row
                    | {"tv_train": float(train_tv[k]), "tv_beyond": float(beyond_tv[k])}
                )
    return rows


def beyond_gains(grid: Mapping[object, Run]) -> dict[str, np.ndarray]:
    """EMA's gain beyond the training lengths (raw minus EMA TV), the seed mean of each
    configuration, by norm: norm -> [configurations]."""
    runs = list(grid.values())
    norms = dict.fromkeys(run.config.norm for run in runs)
    return {
        n: np.array([r.gain("beyond").mean() for r in runs if r.config.norm == n])
        for n in norms
    }


def ema_numbers(grid: Mapping[object, Run]) -> dict[str, float]:
    """The numbers the prose quotes about EMA on the grid (glue name -> rounded value):
    counts, the training-length gain relative to the raw TV (percent), and the gain
    beyond by norm."""
    runs = list(grid.values())
    train_gain = np.concatenate([run.gain("train") for run in runs])
    relative = np.concatenate(
        [run.gain("train") / run.mean_tv("raw", "train") for run in runs]
    )
    beyond = beyond_gains(grid)
    attn_out_seeds = np.concatenate(
        [run.gain("beyond") for run in runs if run.config.norm == "attn_out"]
    )
    return {
        "n_models": _rounded(len(train_gain), 0),
        "n_configs": _rounded(len(runs), 0),
        "train_gain_min_pct": _rounded(100 * relative.min(), 0),
        "train_gain_max_pct": _rounded(100 * relative.max(), 0),
        "beyond_gain_attn": _rounded(beyond["attn_out"].mean(), 3),
        "beyond_gain_attn_min": _rounded(beyond["attn_out"].min(), 3),
        "beyond_gain_none": _rounded(beyond["none"].mean(), 3),
        "beyond_gain_none_max": _rounded(np.abs(beyond["none"]).max(), 3),
        "beyond_seeds_attn": _rounded((attn_out_seeds > 0).sum(), 0),
        "n_seeds_norm": _rounded(len(attn_out_seeds), 0),
    }


def bema_minus_ema(grid: Mapping[object, Run]) -> np.ndarray:
    """BEMA's mean TV at the training lengths minus EMA's, seed means per
    configuration: [configurations] (> 0: BEMA worse)."""
    return np.array(
        [
            r.mean_tv("bema", "train").mean() - r.mean_tv("ema", "train").mean()
            for r in grid.values()
        ]
    )


def bema_beyond(grid: Mapping[object, Run]) -> dict[object, float]:
    """BEMA's mean TV beyond the training lengths minus the raw weights', seed mean per
    configuration (> 0: BEMA worse), keyed as ``grid``."""
    return {key: -run.gain("beyond", "bema").mean() for key, run in grid.items()}


def bema_lr_effect(grid: Mapping[tuple[str, int, float], Run]) -> np.ndarray:
    """Per (norm, batch) of the chapter's grid: :func:`bema_beyond` at lr 1e-2 minus at
    3e-3 (> 0: the higher learning rate makes BEMA worse)."""
    beyond = bema_beyond(grid)
    return np.array(
        [
            beyond[n, b, 1e-2] - beyond[n, b, 3e-3]
            for n in ("none", "attn_out")
            for b in (32, 128)
        ]
    )


def bema_versus_ema(grid: Mapping[object, Run]) -> list[Effect]:
    """BEMA's mean TV at the training lengths minus EMA's, per seed, one cell per
    configuration (> 0: BEMA worse)."""
    return [
        Effect.of(
            run.mean_tv("bema", "train") - run.mean_tv("ema", "train"),
            run.config.steps,
            unstable=run.unstable,
            **_cell(run, "norm", "batch", "lr"),
        )
        for run in grid.values()
    ]


def bema_lr_effects(grid: Mapping[tuple[str, int, float], Run]) -> list[Effect]:
    """Per (norm, batch) of the chapter's grid, per seed (the same seeds): BEMA minus
    raw TV beyond L at lr 1e-2 minus the same at 3e-3 (> 0: the higher learning rate
    makes BEMA worse), one cell each."""
    return [
        Effect.of(
            grid[n, b, 3e-3].gain("beyond", "bema")
            - grid[n, b, 1e-2].gain("beyond", "bema"),
            grid[n, b, 1e-2].config.steps,
            norm=n,
            batch=b,
        )
        for n in ("none", "attn_out")
        for b in (32, 128)
    ]


def bema_numbers(grid: Mapping[tuple[str, int, float], Run]) -> dict[str, float]:
    """The numbers the prose quotes about BEMA on the grid (glue name -> rounded
    value): its smallest loss to EMA at the training lengths, in how many
    configurations it helps beyond them (:func:`bema_claim`), the learning rate's
    effect (:func:`bema_lr_effects`, seed means) with and without the norm, and its
    worst loss to the raw weights beyond."""
    beyond = bema_beyond(grid)
    by_norm = {
        norm: [e.interval.mean for e in bema_lr_effects(grid) if e.cell["norm"] == norm]
        for norm in ("none", "attn_out")
    }
    return {
        "bema_train_gap_min": _rounded(bema_minus_ema(grid).min(), 3),
        "bema_helps_beyond": _rounded(len(bema_claim(grid).cells_with("helps")), 0),
        "bema_lr_effect_attn_min": _rounded(min(by_norm["attn_out"]), 3),
        "bema_lr_effect_none_max": _rounded(max(by_norm["none"]), 3),
        "bema_worst_beyond": _rounded(max(beyond.values()), 3),
    }


def mean_gains(runs: Mapping[str, Run]) -> dict[str, dict[str, float]]:
    """EMA's gain (raw minus EMA TV), mean over seeds, on each length range: key ->
    {"train": ..., "beyond": ...}."""
    ranges = get_args(LengthRange)
    return {key: {r: run.gain(r).mean() for r in ranges} for key, run in runs.items()}


def soft_numbers(
    soft: Mapping[str, Run], sampled: Mapping[str, Run]
) -> dict[str, float]:
    """The numbers the prose quotes about soft against sampled targets, both keyed by
    norm (glue name -> rounded value)."""
    soft_gain, sampled_gain = mean_gains(soft), mean_gains(sampled)
    soft_max = max(abs(g["train"]) for g in soft_gain.values())
    return {
        "soft_gain_train_max": _rounded(soft_max, 4),
        "sampled_gain_train_min": _rounded(
            min(g["train"] for g in sampled_gain.values()), 3
        ),
        "soft_gain_beyond_none": _rounded(soft_gain["none"]["beyond"], 3),
        "soft_gain_beyond_attn": _rounded(soft_gain["attn_out"]["beyond"], 4),
        "sampled_gain_beyond_attn": _rounded(sampled_gain["attn_out"]["beyond"], 3),
        "soft_beyond_attn": _rounded(
            soft["attn_out"].mean_tv("raw", "beyond").mean(), 3
        ),
        "sampled_beyond_attn": _rounded(
            sampled["attn_out"].mean_tv("raw", "beyond").mean(), 3
        ),
    }


@dataclass(frozen=True)
class TemperatureControl:
    """The temperature control, one entry per model (configuration and seed)."""

    # some logit factor c gives the raw weights EMA's TV on both length ranges
    matched: list[bool]
    raw_best_c_train: list[float]  # the raw weights' best c at the training lengths
    ema_best_c_train: list[float]  # EMA's best c there
    # norm -> raw minus EMA TV beyond, each at its own best c: [models of that norm]
    best_gap: dict[str, np.ndarray]


def temperature_control(grid: Mapping[object, Run]) -> TemperatureControl:
    """Ask, model by model, whether a logit temperature explains EMA's gain: can some
    scale of the raw logits reach EMA's TV (at c = 1) on both length ranges, and how do
    the two compare, each at its best scale?"""
    matched, best, raw_best, ema_best = [], [], [], []
    for run in grid.values():
        k1 = run.scales.index(1.0)
        # [K, len(scales)]: mean TV per seed at every logit factor
        raw_train = run.scale_curve("raw", "train")
        raw_beyond = run.scale_curve("raw", "beyond")
        ema_train = run.scale_curve("ema", "train")
        ema_beyond = run.scale_curve("ema", "beyond")
        for k in range(len(raw_train)):  # seeds
            ema_point = (ema_train[k, k1], ema_beyond[k, k1])
            matched.append(scaling_matches(raw_train[k], raw_beyond[k], *ema_point))
            best.append((run.config.norm, raw_beyond[k].min(), ema_beyond[k].min()))
            raw_best.append(run.scales[int(raw_train[k].argmin())])
            ema_best.append(run.scales[int(ema_train[k].argmin())])
    norms = dict.fromkeys(norm for norm, _, _ in best)
    best_gap = {n: np.array([r - e for m, r, e in best if m == n]) for n in norms}
    return TemperatureControl(matched, raw_best, ema_best, best_gap)


def temperature_numbers(
    control: TemperatureControl, reference: Run
) -> dict[str, float]:
    """The numbers the prose quotes about the temperature control and the reference
    configuration (glue name -> rounded value)."""
    raw_beyond = reference.scale_curve("raw", "beyond").mean(0)
    raw_train = reference.scale_curve("raw", "train").mean(0)
    k_best = int(raw_beyond.argmin())
    return {
        "n_matched": _rounded(sum(control.matched), 0),
        "n_models_control": _rounded(len(control.matched), 0),
        "raw_best_c_train_max": _rounded(max(control.raw_best_c_train), 2),
        "ref_best_c": _rounded(reference.scales[k_best], 2),
        "ref_raw_best_beyond": _rounded(raw_beyond[k_best], 3),
        "ref_raw_best_train": _rounded(raw_train[k_best], 3),
        "ref_ema_beyond": _rounded(reference.mean_tv("ema", "beyond").mean(), 3),
        "ref_ema_train": _rounded(reference.mean_tv("ema", "train").mean(), 3),
        "best_gap_none_min": _rounded(control.best_gap["none"].min(), 3),
        "best_gap_attn_min": _rounded(control.best_gap["attn_out"].min(), 3),
    }


@dataclass(frozen=True)
class SearchSpace:
    """Where the random search draws from (the book's choice; the paper's ranges are
    unknown)."""

    lr: tuple[float, float] = (1e-3, 3e-2)  # log-uniform
    batch: tuple[int, ...] = (32, 64, 128)
    norm: tuple[NormPlacement, ...] = PLACEMENTS
    dropout: tuple[float, float] = (0.0, 0.3)  # uniform

    def __post_init__(self) -> None:
        low, high = self.lr
        if not 0 < low < high:
            raise ValueError(
                f"lr must be a range (low, high) with 0 < low < high, got {self.lr!r}"
            )
        low, high = self.dropout
        if not 0.0 <= low <= high < 1.0:
            raise ValueError(
                "dropout must be a range (low, high) inside [0, 1), got "
                f"{self.dropout!r}"
            )
        if not self.batch or not self.norm:
            raise ValueError("batch and norm must each offer at least one value")


def sample_specs(n: int, seed: int, space: SearchSpace = SearchSpace()) -> list[Config]:
    """``n`` random configurations, drawn independently; values rounded so that they
    print cleanly.

    Every norm placement appears ``n // len(space.norm)`` or one more times (a shuffled,
    balanced assignment), so no placement is missed by chance in a small search.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    rng = numpy_generator(seed)
    norms = [space.norm[i % len(space.norm)] for i in range(n)]
    norms = [norms[i] for i in rng.permutation(n)]
    log_lr = rng.uniform(np.log10(space.lr[0]), np.log10(space.lr[1]), size=n)
    batches = rng.choice(len(space.batch), size=n)
    dropouts = rng.uniform(*space.dropout, size=n)
    return [
        Config(
            norm=norms[i],
            lr=float(f"{10 ** log_lr[i]:.2g}"),
            batch=int(space.batch[batches[i]]),
            resid_dropout=round(float(dropouts[i]), 2),
            targets="sampled",
        )
        for i in range(n)
    ]


FactorKind = Literal["categorical", "numeric", "log"]


@dataclass(frozen=True)
class FactorFit:
    """A main-effects least-squares fit of one response on the factors of a search."""

    r_squared: float  # of the full fit
    importance: dict[str, float]  # factor -> drop in R^2 when it is left out
    # factor -> {level: effect vs the first level} or {"slope": per unit / per decade}
    effects: dict[str, dict[str, float]]


def factor_importance(
    rows: Sequence[Mapping[str, object]],
    response: str,
    factors: Mapping[str, FactorKind],
) -> FactorFit:
    """How much each factor explains: the drop in R^2 of a main-effects least-squares
    fit without it.

    Categorical factors enter as one-hot columns (levels sorted as strings; effects
    relative to the first), ``numeric`` as they are, ``log`` as log10 (slope per
    decade). The drops need not add up to the full R^2 (factors can share explained
    variance).
    """
    if not rows:
        raise ValueError("rows must hold at least one row")
    for name, kind in factors.items():
        if kind not in get_args(FactorKind):
            raise ValueError(
                f"factor {name!r} has kind {kind!r}; allowed: {get_args(FactorKind)}"
            )
        if any(name not in row for row in rows):
            raise ValueError(f"factor {name!r} is missing from some rows")
    y = np.array([float(row[response]) for row in rows])  # type: ignore[arg-type]
    columns = {name: _columns(rows, name, kind) for name, kind in factors.items()}
    full, coef = _fit(y, [block for block, _ in columns.values()])
    importance = {
        name: full
        - _fit(y, [block for other, (block, _) in columns.items() if other != name])[0]
        for name in factors
    }
    effects, start = {}, 1
    for name, (block, labels) in columns.items():
        effects[name] = {
            label: float(c)
            for label, c in zip(labels, coef[start : start + block.shape[1]])
        }
        start += block.shape[1]
    return FactorFit(r_squared=full, importance=importance, effects=effects)


def _columns(
    rows: Sequence[Mapping[str, object]], name: str, kind: FactorKind
) -> tuple[np.ndarray, list[str]]:
    values = [row[name] for row in rows]
    if kind == "categorical":
        levels = sorted({str(v) for v in values})
        block = np.array(
            [[float(str(v) == level) for level in levels[1:]] for v in values]
        ).reshape(len(rows), -1)
        return block, levels[1:]
    numbers = np.array([float(v) for v in values])  # type: ignore[arg-type]
    return (np.log10(numbers) if kind == "log" else numbers)[:, None], ["slope"]


def _fit(y: np.ndarray, blocks: Sequence[np.ndarray]) -> tuple[float, np.ndarray]:
    X = np.concatenate([np.ones((len(y), 1)), *blocks], axis=1)
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    residual = y - X @ coef
    total = ((y - y.mean()) ** 2).sum()
    return (float(1.0 - (residual**2).sum() / total) if total > 0 else 0.0), coef


def paired_changes(
    rows: Sequence[Mapping[str, object]], responses: Sequence[str]
) -> dict[str, np.ndarray]:
    """EMA minus raw, same run and seed, per response: response -> [paired runs]
    (:func:`score_rows` lists a run's raw rows, then its EMA rows, seed by seed)."""
    return {
        r: np.array([row[r] for row in rows if row["ema"]])
        - np.array([row[r] for row in rows if not row["ema"]])
        for r in responses
    }


def search_numbers(
    fits: Mapping[str, FactorFit],
    ema_beyond: Interval,
    ema_train: Interval,
    n_runs: int,
    n_seeds: int,
    steps: int,
) -> dict[str, float]:
    """The numbers the prose quotes about the random search (glue name -> rounded
    value): its size, each fit's R^2 and factor importances, EMA's gain on each length
    range (raw minus EMA TV, pooled over the runs, with its 95% t-interval:
    :func:`ema_pooled`) and dropout's slope."""
    numbers = {
        "search_n_runs": _rounded(n_runs, 0),
        "search_n_configs": _rounded(2 * n_runs, 0),
        "search_n_seeds": _rounded(n_seeds, 0),
        "search_steps": _rounded(steps, 0),
    }
    for r, short_name in (("tv_train", "train"), ("tv_beyond", "beyond")):
        numbers[f"r2_{short_name}"] = _rounded(fits[r].r_squared, 2)
        for factor, value in fits[r].importance.items():
            numbers[f"imp_{short_name}_{factor}"] = _rounded(value, 2)
    for short_name, interval in (("beyond", ema_beyond), ("train", ema_train)):
        for name, value in zip(
            ("mean", "low", "high"), (interval.mean, interval.low, interval.high)
        ):
            numbers[f"ema_{short_name}_{name}"] = _rounded(value, 3)
    for r, short_name in (("tv_beyond", "beyond"), ("tv_train", "train")):
        slope = fits[r].effects["dropout"]["slope"]
        numbers[f"dropout_slope_{short_name}"] = _rounded(slope, 2)
    return numbers


SEEDS = (0, 1, 2)
# logit factors c
SCALES = (
    0.25,
    0.35,
    0.5,
    0.7,
    0.85,
    1.0,
    1.2,
    1.5,
    2.0,
    2.5,
    3.0,
    4.0,
    6.0,
    8.0,
    12.0,
    16.0,
)
AVERAGERS = {
    "ema": {"beta": 0.99},
    "bema": {"kappa": 0.5, "eta": 0.2, "rho": 10.0, "gamma": 1.0, "tau": 0, "phi": 1},
}
SEARCH_STEPS, SEARCH_SEEDS, SEARCH_RUNS, SEARCH_SEED = 400, (0, 1), 16, 6


def search_configs(
    n: int = SEARCH_RUNS, seed: int = SEARCH_SEED
) -> list[dict[str, object]]:
    """The random search's configurations (:func:`sample_specs`) as spec fields."""
    return [
        {
            "norm": c.norm,
            "lr": c.lr,
            "batch": c.batch,
            "resid_dropout": c.resid_dropout,
            "targets": c.targets,
        }
        for c in sample_specs(n, seed)
    ]


# The reference scale (issue 19, "decide the nulls"). Constant learning rate after the
# warm-up (a checkpoint of a 6000-step run is the end of the shorter run: the steps
# axis is 1000, 3000, 6000), sampled targets, ten seeds, batch 128 (the batch axis of
# the live grid gives way to the init axis). Every stored row is one (variant, logit
# scale, seed, step) of 11 metrics over 15 lengths, about 1.7 kB: the store keeps only
# the variants and the scales a claim reads. Cost, measured on one core of the book's
# 2-core machine under load (10 seeds, 900 and 2700 steps of one configuration: the
# slope per step plus a fixed cost; 1 and 2 seeds x 300 steps took 3.5-4.5 s, almost
# all of it fixed cost, and train on the uncompiled path, so they say little about
# 6000 steps). The stored ch5 sweeps took 29-189 s a configuration under varying load.
#
# ch6/grid, for "EMA helps" and the temperature control: norm (none, attn_out) x init
# (book, torch) x lr (3e-3, 1e-2) = 8 configurations; the live EMA (window 100) and a
# longer one (beta 0.999: a converged run's noise floor may need a longer memory; with
# the warm-up rule min(beta, (1 + t) / (10 + t)) its window is about t / 9 steps until
# step 8990: 110, 330 and 670 at the checkpoints, against 100 for beta 0.99); logit
# scales 1 and 1.5 (the live run's best factor beyond L). Rows: 8 x 3 variants x 2
# scales x 10 seeds x 3 steps = 1440 (measured 1.6 kB a row: about 2.3 MB). Cost: 6.8
# ms a step at 10 seeds, about 50 s a configuration, 8 configurations about 7 min of
# one core (0.1 h; 0.4 h at the slowest stored rate).
REFERENCE_EMA = {"ema": AVERAGERS["ema"], "ema_long": {"beta": 0.999}}
REFERENCE_SCALES = (1.0, 1.5)
REFERENCE_GRID = {
    "norm": ("none", "attn_out"),
    "batch": (128,),
    "init": ("book", "torch"),
    "lr": (3e-3, 1e-2),
}
# ch6/search, for "the random search finds dropout and EMA help" (and BEMA): the search
# as a design, EMA and residual dropout crossed with the norm: norm (none, attn_out) x
# resid_dropout (0, 0.3) x init (book, torch) = 8 configurations, lr 3e-3, raw, EMA
# and BEMA at scale 1. Rows: 8 x 3 x 10 x 3 = 720 (about 1.2 MB). Cost: 4.6 ms a step
# (with and without dropout), about 32 s a configuration, 8 configurations about 4
# min of one core (0.1 h; 0.4 h at the slowest stored rate).
REFERENCE_SEARCH = {
    "norm": ("none", "attn_out"),
    "resid_dropout": (0.0, 0.3),
    "init": ("book", "torch"),
}

SPECS: dict[str, Spec] = {
    "ch6/grid": Spec(
        name="ch6/grid",
        description="sampled targets: norm x batch x lr, raw weights against EMA and "
        "BEMA, many logit scales",
        grid={"norm": ("none", "attn_out"), "batch": (32, 128), "lr": (3e-3, 1e-2)},
        base={**BASELINE, "targets": "sampled"},
        seeds=SEEDS,
        averagers=AVERAGERS,
        scales=SCALES,
        reference={
            "grid": REFERENCE_GRID,
            "base": {"schedule": "constant"},
            "averagers": REFERENCE_EMA,
            "scales": REFERENCE_SCALES,
        },
    ),
    "ch6/soft": Spec(
        name="ch6/soft",
        description="soft targets (no target noise), raw against EMA",
        grid={"norm": ("none", "attn_out")},
        base={**BASELINE, "targets": "soft"},
        seeds=SEEDS,
        averagers={"ema": AVERAGERS["ema"]},
    ),
    "ch6/search": Spec(
        name="ch6/search",
        description=(
            "the random search: norm, lr, batch and dropout drawn at random, EMA off/on"
        ),
        configs=search_configs(),
        base={**BASELINE, "steps": SEARCH_STEPS},
        seeds=SEARCH_SEEDS,
        averagers={"ema": AVERAGERS["ema"]},
        n_test=1000,
        reference={
            "configs": [],
            "grid": REFERENCE_SEARCH,
            "base": {"targets": "sampled", "schedule": "constant"},
            "averagers": {"ema": AVERAGERS["ema"], "bema": AVERAGERS["bema"]},
        },
    ),
}


# Every live row is its declared claim (below) decided by the protocol of
# lengthgen_lite.runs.claims: one cell per configuration, the per-seed effect with its
# 95% t-interval over the seeds, judged against the claim's SESOI.


def cell_words(decision: Decision, **where: object) -> list[str]:
    """The words of ``decision``'s cells at its last budget whose cell matches
    ``where`` (cell fields, e.g. ``norm="attn_out"``)."""
    return [
        word
        for effect, word in zip(decision.final, decision.words)
        if all(effect.cell.get(k) == v for k, v in where.items())
    ]


def ema_effects(
    grid: Mapping[object, Run], lengths: LengthRange = "beyond"
) -> list[Effect]:
    """EMA's gain (raw minus EMA TV over ``lengths``, per seed) in every configuration
    of the grid: one cell each (norm, batch, lr)."""
    return [
        Effect.of(
            run.gain(lengths),
            run.config.steps,
            unstable=run.unstable,
            averager="ema",
            **_cell(run, "norm", "batch", "lr"),
        )
        for run in grid.values()
    ]


def ema_words(
    runs: Mapping[object, Run], lengths: LengthRange = "beyond"
) -> dict[object, str]:
    """The protocol's word for EMA's gain over ``lengths`` in each run (keyed as
    ``runs``), against EMA_CLAIM's SESOI."""
    effects = ema_effects(runs, lengths)
    return {key: cell_word(e, EMA_CLAIM.sesoi) for key, e in zip(runs, effects)}


def ema_claim(grid: Mapping[object, Run]) -> Decision:
    """EMA_CLAIM on the grid: raw minus EMA TV beyond the training lengths, sampled
    targets, logit scale 1, one cell per configuration; the detail says how EMA does
    at the training lengths, judged the same way."""
    train_words = list(ema_words(grid, "train").values())
    runs = list(grid.values())
    detail = (
        f"sampled targets; at s <= {runs[0].train_length} EMA helps in "
        f"{train_words.count('helps')}/{len(train_words)} configurations"
    )
    return EMA_CLAIM.decide(ema_effects(grid), "live", detail)


def best_scale_gap(run: Run) -> np.ndarray:
    """Per seed: the raw weights' mean TV beyond L at their best logit scale minus
    EMA's at theirs: [K] (> 0: EMA better at any temperature)."""
    return run.scale_curve("raw", "beyond").min(1) - run.scale_curve(
        "ema", "beyond"
    ).min(1)


def temperature_claim(grid: Mapping[object, Run]) -> Decision:
    """TEMPERATURE_CLAIM on the grid: each at its best logit scale, raw minus EMA TV
    beyond L per seed, one cell per configuration; the detail counts the models whose
    raw logits some scale brings to EMA's TV on both length ranges."""
    runs = list(grid.values())
    effects = [
        Effect.of(
            best_scale_gap(run),
            run.config.steps,
            unstable=run.unstable,
            **_cell(run, "norm", "batch", "lr"),
        )
        for run in runs
    ]
    matched = temperature_control(grid).matched
    scales = runs[0].scales
    detail = (
        f"logit factors c {scales[0]:g}-{scales[-1]:g}: some c gives the raw weights "
        f"EMA's TV on both length ranges in {sum(matched)}/{len(matched)} models"
    )
    return TEMPERATURE_CLAIM.decide(effects, "live", detail)


def bema_claim(grid: Mapping[object, Run]) -> Decision:
    """BEMA_CLAIM on the grid: raw minus BEMA TV beyond L per seed, one cell per
    configuration (norm, batch, lr)."""
    effects = [
        Effect.of(
            run.gain("beyond", "bema"),
            run.config.steps,
            unstable=run.unstable,
            **_cell(run, "norm", "batch", "lr"),
        )
        for run in grid.values()
    ]
    return BEMA_CLAIM.decide(effects, "live", "the grid: norm x batch x lr")


# the dropout rate the search's effect is read at: its range's top, the reference's
DROPOUT_RATE = 0.3
SEARCH_FACTORS: dict[str, FactorKind] = {
    "norm": "categorical",
    "lr": "log",
    "batch": "log",
    "dropout": "numeric",
    "ema": "categorical",
}


def search_ema_effects(
    search: Sequence[Run], lengths: LengthRange = "beyond"
) -> list[Effect]:
    """EMA's gain (raw minus EMA TV over ``lengths``, per seed) in every run of the
    search: one cell each."""
    return [
        Effect.of(
            run.gain(lengths),
            run.config.steps,
            unstable=run.unstable,
            remedy="ema",
            run=i,
            **_cell(run, "norm", "lr", "batch", "resid_dropout"),
        )
        for i, run in enumerate(search)
    ]


def dropout_effect(
    rows: Sequence[Mapping[str, object]],
    steps: int,
    factors: Mapping[str, FactorKind] = SEARCH_FACTORS,
) -> Effect:
    """Dropout's effect in the search: the main-effects least-squares fit of the raw
    weights' TV beyond L (one value per run, the mean over its seeds) on the other
    factors and dropout, its dropout slope times ``-DROPOUT_RATE`` (TV without minus
    with dropout at that rate), with the fit's t-interval (residual degrees of
    freedom: the runs, the configuration draw and the seeds, are the replication)."""
    raw = [row for row in rows if not row["ema"]]
    names = [name for name in factors if name not in ("ema", "dropout")]
    by_run: dict[object, list[Mapping[str, object]]] = {}
    for row in raw:
        by_run.setdefault(row["run"], []).append(row)
    runs = [
        dict(group[0]) | {"tv_beyond": float(np.mean([r["tv_beyond"] for r in group]))}
        for group in by_run.values()
    ]
    blocks = [_columns(runs, name, factors[name])[0] for name in names]
    dropout = np.array([float(run["dropout"]) for run in runs])[:, None]
    X = np.concatenate([np.ones((len(runs), 1)), *blocks, dropout], axis=1)
    y = np.array([run["tv_beyond"] for run in runs])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    df = len(y) - np.linalg.matrix_rank(X)
    if df < 1:
        raise ValueError(
            f"{len(y)} runs cannot fit {X.shape[1]} coefficients with a residual; "
            "allowed: more runs than coefficients"
        )
    sigma2 = float(((y - X @ coef) ** 2).sum() / df)
    se = float(np.sqrt(sigma2 * np.linalg.pinv(X.T @ X)[-1, -1]))
    effect, se = -DROPOUT_RATE * float(coef[-1]), DROPOUT_RATE * se
    interval = Interval(effect, effect, effect, len(y), se, float(df)).at_level(0.95)
    return Effect({"remedy": f"resid_dropout {DROPOUT_RATE:g}"}, steps, interval)


def ema_pooled(effects: Sequence[Effect]) -> Interval:
    """The pooled estimate (stratified over the cells) of EMA's gain, with its
    t-interval."""
    return pooled([e.interval for e in effects])


def search_claim(
    search: Sequence[Run],
    rows: Sequence[Mapping[str, object]],
    factors: Mapping[str, FactorKind] = SEARCH_FACTORS,
) -> Decision:
    """SEARCH_CLAIM on the random search (``rows``: its :func:`score_rows`): EMA's gain
    beyond L in every run (a cell each) and dropout's (:func:`dropout_effect`), TV
    without minus with the remedy."""
    steps = search[0].config.steps
    effects = [*search_ema_effects(search), dropout_effect(rows, steps, factors)]
    detail = (
        f"{len(search)} random runs x EMA off/on; dropout 0 -> {DROPOUT_RATE:g} from "
        "a main-effects fit over the runs"
    )
    return SEARCH_CLAIM.decide(effects, "live", detail)


# The chapter's scorecard claims, declared once (book/scorecard.md).
# SESOI: 0.01 of TV beyond the training lengths, for every remedy.
#: The scorecard claim ch6-score-ema, declared once.
EMA_CLAIM = Claim(
    "ch6-score-ema",
    "EMA of the weights tames the noise of many legal next tokens and helps length "
    "generalisation",
    "2510.08341 [paper]",
    metric="TV beyond L",
    unit="TV",
    effect="raw minus EMA weights",
    sesoi=TV_SESOI,
    cells=("averager", "norm", "init", "lr"),
)
#: The scorecard claim ch6-score-temperature, declared once.
TEMPERATURE_CLAIM = Claim(
    "ch6-score-temperature",
    "EMA's gain is more than a change of logit temperature (the book's control)",
    "[ours]",
    metric="TV beyond L, each at its best logit scale",
    unit="TV",
    effect="raw minus EMA weights",
    sesoi=TV_SESOI,
    cells=("norm", "init", "lr"),
)
#: The scorecard claim ch6-score-bema, declared once.
BEMA_CLAIM = Claim(
    "ch6-score-bema",
    "Bias-corrected EMA (BEMA) helps",
    "2510.08341 [secondary]",
    metric="TV beyond L",
    unit="TV",
    effect="raw minus BEMA weights",
    sesoi=TV_SESOI,
    cells=("norm", "resid_dropout", "init"),
)
#: The scorecard claim ch6-score-search, declared once.
SEARCH_CLAIM = Claim(
    "ch6-score-search",
    "A random hyperparameter search finds dropout and (B)EMA improve length "
    "generalisation",
    "2510.08341 v1 [paper]",
    metric="TV beyond L",
    unit="TV",
    effect="without minus with the remedy",
    sesoi=TV_SESOI,
    cells=("remedy", "norm", "resid_dropout", "init"),
    replicates="seeds (EMA, in each run) or runs (dropout's fit)",
)
