"""Grids and random searches over training configurations, scored raw and averaged. Chapter 6.

A :class:`RunSpec` is one point of the search (norm placement, learning rate, batch size, dropout,
target kind). :func:`run_spec` trains it once for all seeds (one batched :func:`train` call, with
any weight averagers riding along) and scores every variant (raw weights and each averager) by TV
at every prefix length and several logit scales, from one forward pass per model.

Configurations that differ in the learning rate, batch size, norm or dropout cannot share a
batched call: ``train`` vmaps over seeds of *one* model and optimiser. What does come for free is
every averager (EMA on/off is two evaluations of the same run, a paired comparison) and the seeds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence, get_args

import numpy as np

from .baseline import baseline_setup
from .model import NormPlacement
from .temperature import tv_by_logit_scale
from .training import AveragerFactory, TargetKind, TrainResult, train

LengthRange = Literal["train", "beyond"]


@dataclass(frozen=True)
class RunSpec:
    """One training configuration on the book's baseline task and model (see :mod:`baseline`)."""

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
    norm: tuple[NormPlacement, ...] = ("none", "pre", "pre_final", "post", "attn_out")
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
    rng = np.random.default_rng(seed)
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
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n_resamples, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))

