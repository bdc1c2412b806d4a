"""Chapter 6's numbers for the prose: each function turns the chapter's results into
``{glue name: rounded value}``, which the notebook glues (rounded by
:func:`~lengthgen_lite.viz.common.rounded`, as
:func:`~lengthgen_lite.viz.common.glue_round` rounds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..chapters.ch6_ema import TemperatureControl, bema_claim, bema_lr_effects
from ..chapters.ch6_runs import Run, mean_gains
from ..runs.stats import FactorFit, Interval
from .common import rounded


def noise_numbers(rows: Sequence[Mapping[str, object]]) -> dict[str, float]:
    """The numbers the prose quotes from
    :func:`~lengthgen_lite.chapters.ch6_noise.noise_table` (batch 128; glue name ->
    rounded value): how much noisier sampled targets are, before and after training,
    the signal-to-noise ratios, and how far each kind's noise drops with training."""
    noise = {(r["where"], r["batch"], r["targets"]): r for r in rows}
    late_soft = noise["after training", 128, "soft"]
    late_sampled = noise["after training", 128, "sampled"]
    init_soft = noise["at init", 128, "soft"]
    init_sampled = noise["at init", 128, "sampled"]
    return {
        "noise_ratio_trained": rounded(
            late_sampled["trace_cov"] / late_soft["trace_cov"], 0
        ),
        "noise_ratio_init": rounded(
            init_sampled["trace_cov"] / init_soft["trace_cov"], 1
        ),
        "snr_soft_trained": rounded(late_soft["snr"], 2),
        "snr_sampled_trained": rounded(late_sampled["snr"], 3),
        "soft_noise_drop": rounded(init_soft["trace_cov"] / late_soft["trace_cov"], 0),
        "sampled_noise_drop": rounded(
            init_sampled["trace_cov"] / late_sampled["trace_cov"], 1
        ),
        "signal_ratio_init": rounded(init_sampled["signal"] / init_soft["signal"], 2),
    }


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
        "n_models": rounded(len(train_gain), 0),
        "n_configs": rounded(len(runs), 0),
        "train_gain_min_pct": rounded(100 * relative.min(), 0),
        "train_gain_max_pct": rounded(100 * relative.max(), 0),
        "beyond_gain_attn": rounded(beyond["attn_out"].mean(), 3),
        "beyond_gain_attn_min": rounded(beyond["attn_out"].min(), 3),
        "beyond_gain_none": rounded(beyond["none"].mean(), 3),
        "beyond_gain_none_max": rounded(np.abs(beyond["none"]).max(), 3),
        "beyond_seeds_attn": rounded((attn_out_seeds > 0).sum(), 0),
        "n_seeds_norm": rounded(len(attn_out_seeds), 0),
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


def bema_numbers(grid: Mapping[tuple[str, int, float], Run]) -> dict[str, float]:
    """The numbers the prose quotes about BEMA on the grid (glue name -> rounded
    value): its smallest loss to EMA at the training lengths, in how many
    configurations it helps beyond them
    (:func:`~lengthgen_lite.chapters.ch6_ema.bema_claim`), the learning rate's effect
    (:func:`~lengthgen_lite.chapters.ch6_ema.bema_lr_effects`, seed means) with and
    without the norm, and its worst loss to the raw weights beyond."""
    beyond = bema_beyond(grid)
    by_norm = {
        norm: [e.interval.mean for e in bema_lr_effects(grid) if e.cell["norm"] == norm]
        for norm in ("none", "attn_out")
    }
    return {
        "bema_train_gap_min": rounded(bema_minus_ema(grid).min(), 3),
        "bema_helps_beyond": rounded(len(bema_claim(grid).cells_with("helps")), 0),
        "bema_lr_effect_attn_min": rounded(min(by_norm["attn_out"]), 3),
        "bema_lr_effect_none_max": rounded(max(by_norm["none"]), 3),
        "bema_worst_beyond": rounded(max(beyond.values()), 3),
    }


def soft_numbers(
    soft: Mapping[str, Run], sampled: Mapping[str, Run]
) -> dict[str, float]:
    """The numbers the prose quotes about soft against sampled targets, both keyed by
    norm (glue name -> rounded value)."""
    soft_gain, sampled_gain = mean_gains(soft), mean_gains(sampled)
    soft_max = max(abs(g["train"]) for g in soft_gain.values())
    return {
        "soft_gain_train_max": rounded(soft_max, 4),
        "sampled_gain_train_min": rounded(
            min(g["train"] for g in sampled_gain.values()), 3
        ),
        "soft_gain_beyond_none": rounded(soft_gain["none"]["beyond"], 3),
        "soft_gain_beyond_attn": rounded(soft_gain["attn_out"]["beyond"], 4),
        "sampled_gain_beyond_attn": rounded(sampled_gain["attn_out"]["beyond"], 3),
        "soft_beyond_attn": rounded(
            soft["attn_out"].mean_tv("raw", "beyond").mean(), 3
        ),
        "sampled_beyond_attn": rounded(
            sampled["attn_out"].mean_tv("raw", "beyond").mean(), 3
        ),
    }


def temperature_numbers(
    control: TemperatureControl, reference: Run
) -> dict[str, float]:
    """The numbers the prose quotes about the temperature control and the reference
    configuration (glue name -> rounded value)."""
    raw_beyond = reference.scale_curve("raw", "beyond").mean(0)
    raw_train = reference.scale_curve("raw", "train").mean(0)
    k_best = int(raw_beyond.argmin())
    return {
        "n_matched": rounded(sum(control.matched), 0),
        "n_models_control": rounded(len(control.matched), 0),
        "raw_best_c_train_max": rounded(max(control.raw_best_c_train), 2),
        "ref_best_c": rounded(reference.scales[k_best], 2),
        "ref_raw_best_beyond": rounded(raw_beyond[k_best], 3),
        "ref_raw_best_train": rounded(raw_train[k_best], 3),
        "ref_ema_beyond": rounded(reference.mean_tv("ema", "beyond").mean(), 3),
        "ref_ema_train": rounded(reference.mean_tv("ema", "train").mean(), 3),
        "best_gap_none_min": rounded(control.best_gap["none"].min(), 3),
        "best_gap_attn_min": rounded(control.best_gap["attn_out"].min(), 3),
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
    :func:`~lengthgen_lite.chapters.ch6_search.ema_pooled`) and dropout's slope."""
    numbers = {
        "search_n_runs": rounded(n_runs, 0),
        "search_n_configs": rounded(2 * n_runs, 0),
        "search_n_seeds": rounded(n_seeds, 0),
        "search_steps": rounded(steps, 0),
    }
    for r, short_name in (("tv_train", "train"), ("tv_beyond", "beyond")):
        numbers[f"r2_{short_name}"] = rounded(fits[r].r_squared, 2)
        for factor, value in fits[r].importance.items():
            numbers[f"imp_{short_name}_{factor}"] = rounded(value, 2)
    for short_name, interval in (("beyond", ema_beyond), ("train", ema_train)):
        for name, value in zip(
            ("mean", "low", "high"), (interval.mean, interval.low, interval.high)
        ):
            numbers[f"ema_{short_name}_{name}"] = rounded(value, 3)
    for r, short_name in (("tv_beyond", "beyond"), ("tv_train", "train")):
        slope = fits[r].effects["dropout"]["slope"]
        numbers[f"dropout_slope_{short_name}"] = rounded(slope, 2)
    return numbers
