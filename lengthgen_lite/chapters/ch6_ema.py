"""Chapter 6: weight averaging against the noise of sampled targets, the temperature
control, and the chapter's experiments and claims.

The chapter's parts, in its order, and where each lives:

- **Gradient noise** (:mod:`~lengthgen_lite.chapters.ch6_noise`): sampled targets give
  the soft-target gradient on average, with much more spread.
- **The temperature control** (here). Multiplying every logit by ``c > 1`` sharpens the
  prediction without changing which tokens rank first, and long-length TV is very
  sensitive to that scale: :func:`tv_by_logit_scale` scores one model at many scales
  from one forward pass, on the same sequences as
  :func:`lengthgen_lite.core.evaluation.evaluate_set_complement`;
  :func:`temperature_control` asks whether some scale of the raw logits explains EMA's
  gain.
- **The experiments** (here): ``SPECS`` (chapter 1's baseline with norm placement,
  learning rate, batch size, dropout or target kind changed), trained by
  :func:`lengthgen_lite.runs.runner.run` with the averagers of
  :mod:`lengthgen_lite.core.averaging` riding along and scored at every prefix length
  and logit scale, read through :class:`~lengthgen_lite.chapters.ch6_runs.Run`; the
  claims on EMA, the temperature and BEMA, and the functions that decide them.
- **The random search** (:mod:`~lengthgen_lite.chapters.ch6_search`): its design, its
  table, and the claim it decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..core.evaluation import length_metrics
from ..core.hooks import run_with_cache
from ..core.seeding import make_generator
from ..core.tasks import sample_sequences, target_distribution
from ..runs import Spec
from ..runs.claims import TV_SESOI, Claim, Decision, Effect, cell_word
from .ch1_set_complement import BASELINE
from .ch6_runs import LengthRange, Run, cell_of, ema_gain
from .ch6_search import SEARCH_SEEDS, SEARCH_STEPS, search_configs


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


def bema_versus_ema(grid: Mapping[object, Run]) -> list[Effect]:
    """BEMA's mean TV at the training lengths minus EMA's, per seed, one cell per
    configuration (> 0: BEMA worse)."""
    return [
        Effect.of(
            run.mean_tv("bema", "train") - run.mean_tv("ema", "train"),
            run.config.steps,
            unstable=run.unstable,
            **cell_of(run, "norm", "batch", "lr"),
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


# The reference tier (issue 19, "decide the nulls"). Constant learning rate after the
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
        ema_gain(run, lengths, averager="ema", **cell_of(run, "norm", "batch", "lr"))
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
            **cell_of(run, "norm", "batch", "lr"),
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
            **cell_of(run, "norm", "batch", "lr"),
        )
        for run in grid.values()
    ]
    return BEMA_CLAIM.decide(effects, "live", "the grid: norm x batch x lr")


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
