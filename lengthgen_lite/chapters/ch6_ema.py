"""Chapter 6: noisy gradients, weight averaging, the temperature control and the random search.

Three parts, in the chapter's order:

- **Gradient noise.** The training loss is linear in the targets, and a sampled one-hot target has
  mean p*, so for the same inputs the *expected* sampled-target gradient is exactly the soft-target
  gradient. What differs is the spread around that mean. :func:`minibatch_gradients` and
  :func:`gradient_noise` measure it (the same loss as :func:`lengthgen_lite.core.training.train`).
- **The temperature control.** Multiplying every logit by ``c > 1`` sharpens the prediction
  without changing which tokens rank first, and long-length TV is very sensitive to that scale:
  :func:`tv_by_logit_scale` scores one model at many scales from one forward pass, on the same
  sequences as :func:`lengthgen_lite.core.evaluation.evaluate_set_complement`.
- **Runs and the search.** A :class:`RunSpec` is one configuration (norm placement, learning rate,
  batch size, dropout, target kind) of chapter 1's baseline; :func:`run_spec` trains it for all
  seeds in one batched ``train`` call, with the averagers of :mod:`lengthgen_lite.core.averaging`
  riding along, and scores raw and averaged weights by TV at every prefix length and scale.
  Configurations that differ in learning rate, batch, norm or dropout cannot share a batched
  call; every averager (a paired comparison) and the seeds come for free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence, get_args

import numpy as np
import torch
from torch import Tensor, nn

from ..core.evaluation import length_metrics
from ..core.model import PLACEMENTS, NormPlacement, run_with_cache
from ..core.seeding import make_generator, numpy_generator
from ..core.tasks import Batch, Task, sample_next_tokens, sample_sequences, target_distribution
from ..core.training import AveragerFactory, TargetKind, TrainResult, train, training_loss
from .ch1_set_complement import baseline_setup

# --- gradient noise ------------------------------------------------------------------------------


def flat_gradient(model: nn.Module, inputs: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Gradient of :func:`~lengthgen_lite.core.training.training_loss` w.r.t. all parameters of ``model``, flattened: [n_params].

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
        return nn.functional.one_hot(sample_next_tokens(batch.targets, generator), n_out).float()
    raise ValueError(f"targets={kind!r} is unknown; allowed: ('soft', 'sampled')")


def minibatch_gradients(
    model: nn.Module, task: Task, batch: int, n_batches: int, targets: TargetKind, seed: int = 0
) -> Tensor:
    """Gradients on ``n_batches`` fresh training batches of ``batch`` examples: [n_batches, n_params].

    Each batch is drawn as ``train`` draws it (input size from ``task.train_sizes()``, cycling).
    """
    if not isinstance(n_batches, int) or n_batches < 2:
        raise ValueError(f"n_batches must be an int >= 2 (a spread needs two samples), got {n_batches!r}")
    generator = make_generator(seed)
    sizes = list(task.train_sizes())
    rows = []
    for i in range(n_batches):
        b = task.sample_train_batch(batch, sizes[i % len(sizes)], generator)
        rows.append(flat_gradient(model, b.inputs, _targets(b, targets, generator), b.loss_mask))
    return torch.stack(rows)


def resampled_target_gradients(model: nn.Module, batch: Batch, n_draws: int, seed: int = 0) -> Tensor:
    """Gradients for ``n_draws`` independent draws of sampled targets on the *same* inputs: [n_draws, n_params].

    Their mean tends to the soft-target gradient on those inputs (the loss is linear in the targets).
    """
    if not isinstance(n_draws, int) or n_draws < 1:
        raise ValueError(f"n_draws must be a positive int, got {n_draws!r}")
    generator = make_generator(seed)
    return torch.stack(
        [flat_gradient(model, batch.inputs, _targets(batch, "sampled", generator), batch.loss_mask) for _ in range(n_draws)]
    )


@dataclass(frozen=True)
class GradientNoise:
    """Summary of gradient samples g_1..g_n (rows): signal, noise and their ratio."""

    mean_sq_norm: float  # ||E g||^2, estimated without bias (||mean||^2 - trace_cov / n): the signal
    trace_cov: float  # E||g - E g||^2 (unbiased): the noise, summed over parameters
    snr: float  # mean_sq_norm / trace_cov: below 1, a single step is mostly noise


def gradient_noise(grads: Tensor) -> GradientNoise:
    """Signal ``||E g||^2``, noise ``tr Cov`` and their ratio for gradient samples [n, n_params].

    ``||mean||^2`` alone overstates the signal by ``tr Cov / n`` (the noise left in a mean of n
    samples), which matters when the noise dominates; that share is subtracted.
    """
    if grads.dim() != 2 or grads.shape[0] < 2:
        raise ValueError(f"grads must be [n >= 2, n_params], got {tuple(grads.shape)}")
    grads = grads.double()
    mean = grads.mean(dim=0)
    trace_cov = float(((grads - mean) ** 2).sum(dim=1).sum() / (grads.shape[0] - 1))
    signal = float(mean.square().sum()) - trace_cov / grads.shape[0]
    return GradientNoise(mean_sq_norm=signal, trace_cov=trace_cov, snr=signal / trace_cov)


# --- the temperature control ---------------------------------------------------------------------


@torch.no_grad()
def tv_by_logit_scale(
    model: nn.Module, v: int, scales: Sequence[float], n_sequences: int = 2000, seed: int = 0
) -> np.ndarray:
    """TV to p* at every prefix length for the logits times each scale: [len(scales), v-1].

    Row ``i`` equals ``evaluate_set_complement(model, v, n_sequences, seed, logit_scale=scales[i]).tv``.
    """
    scales = [float(c) for c in scales]
    if not scales or not all(c > 0 for c in scales):
        raise ValueError(f"scales must be a non-empty list of positive floats, got {scales!r}")
    tokens = sample_sequences(v, v - 1, n_sequences, make_generator(seed))  # [batch, v-1]
    logits, _ = run_with_cache(model, tokens, names=[])  # [batch, s, v], eval mode
    tables = length_metrics(logits, target_distribution(tokens, v), logit_scales=scales)
    return np.stack([table.tv for table in tables])


def matched_scale(tv_curve: np.ndarray, scales: Sequence[float], target: float) -> float:
    """The scale whose TV in ``tv_curve`` [len(scales)] is closest to ``target`` (the first one on ties).

    Used to ask: how much must the raw logits be sharpened to match an averaged model's TV?
    """
    tv_curve = np.asarray(tv_curve, dtype=float)
    if tv_curve.shape != (len(scales),):
        raise ValueError(f"tv_curve must have one entry per scale ({len(scales)}), got shape {tv_curve.shape}")
    return float(scales[int(np.argmin(np.abs(tv_curve - target)))])


def scaling_matches(raw_train: np.ndarray, raw_beyond: np.ndarray, train: float, beyond: float) -> bool:
    """Does some logit scale of the raw model reach TV <= ``train`` at the training lengths *and*
    <= ``beyond`` beyond them? ``raw_train``, ``raw_beyond``: mean TV per scale, [len(scales)].

    If not, a model reaching (``train``, ``beyond``) is better in a way no temperature explains.
    """
    raw_train, raw_beyond = np.asarray(raw_train, dtype=float), np.asarray(raw_beyond, dtype=float)
    if raw_train.ndim != 1 or raw_train.shape != raw_beyond.shape:
        raise ValueError(f"raw_train and raw_beyond must be matching 1-D arrays, got {raw_train.shape}, {raw_beyond.shape}")
    return bool(((raw_train <= train) & (raw_beyond <= beyond)).any())


# --- runs and the search -------------------------------------------------------------------------

LengthRange = Literal["train", "beyond"]


@dataclass(frozen=True)
class RunSpec:
    """One training configuration on the book's baseline task and model (see :mod:`~lengthgen_lite.chapters.ch1_set_complement`)."""

    norm: NormPlacement = "none"
    lr: float = 3e-3
    batch: int = 128
    dropout: float = 0.0  # residual dropout on the attention output (the book's choice of placement)
    targets: TargetKind = "sampled"

    def label(self) -> str:
        return f"norm={self.norm}, lr={self.lr:.3g}, batch={self.batch}, dropout={self.dropout:.2g}, {self.targets}"


@dataclass
class Run:
    """A trained :class:`RunSpec`: the models and their TV, ``tv[variant]`` is [K, len(scales), v-1]."""

    spec: RunSpec
    result: TrainResult
    scales: tuple[float, ...]
    tv: dict[str, np.ndarray]
    train_length: int

    def curve(self, variant: str, scale: float = 1.0) -> np.ndarray:
        """TV by prefix length at one logit scale: [K, v-1]."""
        if variant not in self.tv:
            raise ValueError(f"variant {variant!r} is unknown; this run has {sorted(self.tv)}")
        if scale not in self.scales:
            raise ValueError(f"scale {scale!r} was not evaluated; available: {self.scales}")
        return self.tv[variant][:, self.scales.index(scale)]

    def mean_tv(self, variant: str, lengths: LengthRange, scale: float = 1.0) -> np.ndarray:
        """Mean TV over the training lengths ``s <= L`` or the lengths beyond them, per seed: [K]."""
        return _length_mean(self.curve(variant, scale), lengths, self.train_length)

    def gain(self, lengths: LengthRange, variant: str = "ema", scale: float = 1.0) -> np.ndarray:
        """Raw TV minus ``variant``'s TV over a length range, per seed: [K] (> 0: averaging helps)."""
        return self.mean_tv("raw", lengths, scale) - self.mean_tv(variant, lengths, scale)

    def scale_curve(self, variant: str, lengths: LengthRange) -> np.ndarray:
        """Mean TV over a length range at every evaluated scale, per seed: [K, len(scales)]."""
        if variant not in self.tv:
            raise ValueError(f"variant {variant!r} is unknown; this run has {sorted(self.tv)}")
        return _length_mean(self.tv[variant], lengths, self.train_length)


def _length_mean(tv: np.ndarray, lengths: LengthRange, train_length: int) -> np.ndarray:
    if lengths not in get_args(LengthRange):
        raise ValueError(f"lengths={lengths!r} is unknown; allowed: {get_args(LengthRange)}")
    part = tv[..., :train_length] if lengths == "train" else tv[..., train_length:]
    return part.mean(axis=-1)


def run_spec(
    spec: RunSpec,
    seeds: Sequence[int],
    steps: int,
    *,
    averagers: Mapping[str, AveragerFactory] | None = None,
    scales: Sequence[float] = (1.0,),
    n_sequences: int = 2000,
    progress: bool = True,
) -> Run:
    """Train ``spec`` for every seed in one batched call; score raw weights and every averager."""
    scales = tuple(float(c) for c in scales)
    if 1.0 not in scales:
        raise ValueError(f"scales must include 1.0 (the model as trained), got {scales}")
    if "raw" in (averagers or {}):
        raise ValueError("'raw' names the unaveraged weights; pick another averager name")
    task, model_cfg, train_cfg = baseline_setup(spec.targets, spec.norm)
    model_cfg = dataclasses.replace(model_cfg, resid_dropout=spec.dropout)
    warmup = min(train_cfg.warmup, steps // 2)  # the baseline's 100 steps, unless the run is very short
    train_cfg = dataclasses.replace(train_cfg, steps=steps, warmup=warmup, lr=spec.lr, batch=spec.batch)
    result = train(model_cfg, task, train_cfg, seeds, averagers=averagers, progress=progress, desc=spec.label())
    variants = {"raw": result.models, **result.averaged}
    tv = {
        name: np.stack([tv_by_logit_scale(m, task.v, scales, n_sequences=n_sequences) for m in models])
        for name, models in variants.items()
    }
    return Run(spec=spec, result=result, scales=scales, tv=tv, train_length=task.train_length)


def score_rows(runs: Sequence[Run], scale: float = 1.0) -> list[dict[str, object]]:
    """One row per (run, seed, variant): the spec's fields, ``run`` (index in ``runs``), ``seed``,
    ``variant``, ``ema`` (variant is "ema"), ``tv_train``, ``tv_beyond``. The flat table the plots
    and the factor analysis read.
    """
    rows = []
    for index, run in enumerate(runs):
        for variant in run.tv:
            train_tv, beyond_tv = run.mean_tv(variant, "train", scale), run.mean_tv(variant, "beyond", scale)
            for k, seed in enumerate(run.result.seeds):
                rows.append(
                    {
                        **dataclasses.asdict(run.spec),
                        "run": index,
                        "seed": seed,
                        "variant": variant,
                        "ema": variant == "ema",
                        "tv_train": float(train_tv[k]),
                        "tv_beyond": float(beyond_tv[k]),
                    }
                )
    return rows


@dataclass(frozen=True)
class SearchSpace:
    """Where the random search draws from (the book's choice; the paper's ranges are unknown)."""

    lr: tuple[float, float] = (1e-3, 3e-2)  # log-uniform
    batch: tuple[int, ...] = (32, 64, 128)
    norm: tuple[NormPlacement, ...] = PLACEMENTS
    dropout: tuple[float, float] = (0.0, 0.3)  # uniform

    def __post_init__(self) -> None:
        low, high = self.lr
        if not 0 < low < high:
            raise ValueError(f"lr must be a range (low, high) with 0 < low < high, got {self.lr!r}")
        low, high = self.dropout
        if not 0.0 <= low <= high < 1.0:
            raise ValueError(f"dropout must be a range (low, high) inside [0, 1), got {self.dropout!r}")
        if not self.batch or not self.norm:
            raise ValueError("batch and norm must each offer at least one value")


def sample_specs(n: int, seed: int, space: SearchSpace = SearchSpace()) -> list[RunSpec]:
    """``n`` random configurations, drawn independently; values rounded so that they print cleanly.

    Every norm placement appears ``n // len(space.norm)`` or one more times (a shuffled, balanced
    assignment), so no placement is missed by chance in a small search.
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
        RunSpec(
            norm=norms[i],
            lr=float(f"{10 ** log_lr[i]:.2g}"),
            batch=int(space.batch[batches[i]]),
            dropout=round(float(dropouts[i]), 2),
        )
        for i in range(n)
    ]


FactorKind = Literal["categorical", "numeric", "log"]


@dataclass(frozen=True)
class FactorFit:
    """A main-effects least-squares fit of one response on the factors of a search."""

    r_squared: float  # of the full fit
    importance: dict[str, float]  # factor -> drop in R^2 when it is left out
    effects: dict[str, dict[str, float]]  # factor -> {level: effect vs the first level} or {"slope": per unit / per decade}


def factor_importance(
    rows: Sequence[Mapping[str, object]], response: str, factors: Mapping[str, FactorKind]
) -> FactorFit:
    """How much each factor explains: the drop in R^2 of a main-effects least-squares fit without it.

    Categorical factors enter as one-hot columns (levels sorted as strings; effects relative to the
    first), ``numeric`` as they are, ``log`` as log10 (slope per decade). The drops need not add up
    to the full R^2 (factors can share explained variance).
    """
    if not rows:
        raise ValueError("rows must hold at least one row")
    for name, kind in factors.items():
        if kind not in get_args(FactorKind):
            raise ValueError(f"factor {name!r} has kind {kind!r}; allowed: {get_args(FactorKind)}")
        if any(name not in row for row in rows):
            raise ValueError(f"factor {name!r} is missing from some rows")
    y = np.array([float(row[response]) for row in rows])  # type: ignore[arg-type]
    columns = {name: _columns(rows, name, kind) for name, kind in factors.items()}
    full, coef = _fit(y, [block for block, _ in columns.values()])
    importance = {
        name: full - _fit(y, [block for other, (block, _) in columns.items() if other != name])[0] for name in factors
    }
    effects, start = {}, 1
    for name, (block, labels) in columns.items():
        effects[name] = {label: float(c) for label, c in zip(labels, coef[start : start + block.shape[1]])}
        start += block.shape[1]
    return FactorFit(r_squared=full, importance=importance, effects=effects)


def _columns(rows: Sequence[Mapping[str, object]], name: str, kind: FactorKind) -> tuple[np.ndarray, list[str]]:
    values = [row[name] for row in rows]
    if kind == "categorical":
        levels = sorted({str(v) for v in values})
        block = np.array([[float(str(v) == level) for level in levels[1:]] for v in values]).reshape(len(rows), -1)
        return block, levels[1:]
    numbers = np.array([float(v) for v in values])  # type: ignore[arg-type]
    return (np.log10(numbers) if kind == "log" else numbers)[:, None], ["slope"]


def _fit(y: np.ndarray, blocks: Sequence[np.ndarray]) -> tuple[float, np.ndarray]:
    X = np.concatenate([np.ones((len(y), 1)), *blocks], axis=1)
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    residual = y - X @ coef
    total = ((y - y.mean()) ** 2).sum()
    return (float(1.0 - (residual**2).sum() / total) if total > 0 else 0.0), coef


def bootstrap_mean_difference(
    differences: Sequence[float], n_resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of paired differences and a 95% percentile bootstrap interval: (mean, low, high)."""
    d = np.asarray(differences, dtype=float)
    if d.ndim != 1 or len(d) < 2:
        raise ValueError(f"differences must be a 1-D sequence of at least 2 values, got shape {d.shape}")
    rng = numpy_generator(seed)
    means = d[rng.integers(0, len(d), size=(n_resamples, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))

