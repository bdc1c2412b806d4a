"""Chapter 5's numbers for the prose: each function turns the chapter's results into
``{glue name: value}`` for the notebook's ``glue`` (rounded here where the prose quotes
a fixed number of digits)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np

from ..chapters.ch5_mechanism import OUTPUT_NORM, GapProfile
from ..chapters.ch5_post_norm import (
    DROPOUT,
    DROPOUT_KINDS,
    TARGETS,
    attn_out_lead,
    deeper_effects,
    divisor_laws,
    dropout_values,
    frozen_tolerance,
    peak_at_longest,
    per_seed,
    post_and_pre_final,
    ratio,
    relative,
    sharpness,
)
from ..core.model import PLACEMENTS
from ..runs import Results
from ..runs.claims import TV_SESOI, at_step


def placement_numbers(results: Results) -> dict[str, float]:
    """The numbers the prose quotes about the placements (glue name -> rounded value):
    mean TV beyond the training lengths per target kind and placement, attn_out's TV at
    the longest length, and the worst placement's mean TV at the training lengths."""
    numbers = {
        f"tv_beyond_{targets}_{norm}": round(
            float(per_seed(results, "tv_beyond", targets, norm).mean()), 3
        )
        for targets in TARGETS
        for norm in PLACEMENTS
    }
    longest = per_seed(results, "tv_longest", "soft", "attn_out")
    numbers["tv_longest_soft_attn_out"] = round(float(longest.mean()), 3)
    tv_train = max(
        per_seed(results, "tv_train", "soft", norm).mean() for norm in PLACEMENTS
    )
    numbers["tv_train_soft_max"] = round(float(tv_train), 3)
    return numbers


def growth_numbers(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]],
) -> dict[str, float]:
    """s x gap at the longest s over s = 1, mean over seeds, per target kind and
    placement (glue name ``growth_<targets>_<norm>`` -> value rounded to 2 digits)."""
    return {
        f"growth_{targets}_{norm}": round(
            float(ratio(profiles, targets, norm).mean()), 2
        )
        for targets in TARGETS
        for norm in PLACEMENTS
    }


def mechanism_numbers(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]],
) -> dict[str, float]:
    """The numbers the prose quotes about the mechanism (glue name -> rounded value):
    the growth with the divisor frozen, the tolerance it is held to, and how near
    uniform the attention stays."""
    numbers: dict[str, float] = {
        f"frozen_growth_{norm}": round(
            float(ratio(profiles, "soft", norm, "frozen_gap").mean()), 2
        )
        for norm in OUTPUT_NORM
    }
    none_growth = ratio(profiles, "soft", "none")
    numbers["none_growth_soft"] = round(float(none_growth.mean()), 2)
    numbers["frozen_tolerance"] = round(float(frozen_tolerance(profiles)), 2)
    numbers["n_models"] = sum(len(p) for p in profiles.values())
    values = sharpness(profiles).values()
    numbers["entropy_min"] = round(float(min(e for e, _ in values)), 3)
    numbers["peak_max"] = round(float(max(p for _, p in values)), 2)
    for norm in ("none", "attn_out"):
        peak = peak_at_longest(profiles, "soft", norm)
        numbers[f"peak_soft_{norm}"] = round(float(peak), 2)
    return numbers


def divisor_numbers(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]],
) -> dict[str, float]:
    """The numbers the prose quotes about the output norm's divisor (glue name ->
    rounded value): attn_out's distance from chapter 3's law (percent), each divisor
    and attn_out's gap at the longest s, and where that gap is lowest."""
    s = profiles[("soft", "attn_out")][0].s
    gap_law, spread_law = divisor_laws(int(s[-1]) + 1)

    def law_error(targets: str) -> float:
        divisor = relative(profiles, targets, "attn_out", "divisor")
        return np.abs(divisor / spread_law - 1).max()

    attn_out_gap = relative(profiles, "soft", "attn_out", "gap").mean(0)
    numbers: dict[str, float] = {
        "law_error": round(float(100 * law_error("soft")), 1),
        "sampled_law_error": round(float(100 * law_error("sampled")), 0),
        "law_s15": round(float(spread_law[-1]), 3),
    }
    for norm in OUTPUT_NORM:
        divisor = relative(profiles, "soft", norm, "divisor")[:, -1]
        numbers[f"divisor_s15_{norm}"] = round(float(divisor.mean()), 3)
    shortfall = attn_out_gap[-1] / (gap_law[-1] / gap_law[0])
    numbers["gap_min_s"] = int(s[attn_out_gap.argmin()])
    numbers["shortfall"] = round(float(shortfall), 2)
    numbers["gap_s15_attn_out"] = round(float(attn_out_gap[-1]), 2)
    numbers["gap_s8_attn_out"] = round(float(attn_out_gap[7]), 2)
    numbers["ln_gap_s8"] = round(float(gap_law[7] / gap_law[0]), 2)
    return numbers


def deeper_numbers(placements: Results, deeper: Results) -> dict[str, float]:
    """The numbers the prose quotes about post against pre_final (glue name -> rounded
    value): their mean TV beyond with the MLP, and post minus pre_final with its 95%
    and 90% paired t-intervals, with the MLP (``mlp_difference``, ``_low``, ``_high``)
    and in the one-layer model (``one_layer_difference``, ``_low90``, ``_high90``)."""
    _, with_mlp = post_and_pre_final(placements, deeper)
    numbers = {
        f"mlp_tv_beyond_{norm}": round(float(values.mean()), 3)
        for norm, values in with_mlp.items()
    }
    effects = deeper_effects(placements, deeper)
    for name, model in (("mlp", "with MLP"), ("one_layer", "one layer")):
        interval = effects[model].interval
        narrow = interval.at_level(0.9)
        numbers[f"{name}_difference"] = round(interval.mean, 3)
        numbers[f"{name}_difference_low"] = round(interval.low, 3)
        numbers[f"{name}_difference_high"] = round(interval.high, 3)
        numbers[f"{name}_difference_low90"] = round(narrow.low, 3)
        numbers[f"{name}_difference_high90"] = round(narrow.high, 3)
    numbers["tv_sesoi"] = TV_SESOI
    return numbers


def dropout_numbers(placements: Results, dropout: Results) -> dict[str, float]:
    """The numbers the prose quotes about dropout (glue name -> rounded value): mean TV
    beyond per setting and without dropout, and TV at the training lengths with and
    without it."""
    values = partial(dropout_values, placements, dropout)
    numbers = {
        f"dropout_{targets}_{kind}_{p}": round(
            float(values("tv_beyond", targets, kind, p).mean()), 3
        )
        for targets, kind, p in DROPOUT
    }
    for targets in sorted({t for t, _, _ in DROPOUT}):
        base = values("tv_beyond", targets, "attn_dropout", 0.0)
        numbers[f"dropout_base_{targets}"] = round(float(base.mean()), 3)
    train = [values("tv_train", t, k, p) for t, k, p in DROPOUT if t == "soft"]
    numbers["dropout_train_soft_min"] = round(float(min(v.min() for v in train)), 3)
    base = values("tv_train", "soft", "attn_dropout", 0.0)
    numbers["dropout_train_soft_base"] = round(float(base.max()), 3)
    sampled = [values("tv_train", "sampled", kind, 0.1) for kind in DROPOUT_KINDS]
    numbers["dropout_train_sampled"] = round(
        float(np.mean([v.mean() for v in sampled])), 3
    )
    base = values("tv_train", "sampled", "attn_dropout", 0.0)
    numbers["dropout_train_sampled_base"] = round(float(base.mean()), 3)
    return numbers


def attn_out_lead_numbers(placements: Results) -> dict[str, float]:
    """The numbers the prose quotes about
    :func:`~lengthgen_lite.chapters.ch5_post_norm.attn_out_lead` on the reference sweep
    (glue name -> value rounded to 3 digits), at the first and the last budget: the
    smallest and largest cell mean with soft targets (``lead-soft-min-<step>``,
    ``lead-soft-max-<step>``), and with sampled targets at the sweep's larger learning
    rate, per init, the cell mean and its 95% interval's upper end
    (``lead-sampled-fast-<init>-<step>``, ``...-high``)."""
    effects = attn_out_lead(placements)
    if any("lr" not in e.cell or "init" not in e.cell for e in effects):
        raise ValueError(
            f"{placements.spec.name} does not vary init and lr; allowed: the reference "
            "sweep (reference.load('ch5/placements'))"
        )
    steps = sorted({e.step for e in effects})
    fast = max(e.cell["lr"] for e in effects)
    out: dict[str, float] = {}
    for step in (steps[0], steps[-1]):
        here = at_step(effects, step)
        soft = [e.interval.mean for e in here if e.cell["targets"] == "soft"]
        out[f"lead-soft-min-{step}"] = round(float(min(soft)), 3)
        out[f"lead-soft-max-{step}"] = round(float(max(soft)), 3)
        for e in here:
            if e.cell["targets"] == "sampled" and e.cell["lr"] == fast:
                key = f"lead-sampled-fast-{e.cell['init']}-{step}"
                out[key] = round(float(e.interval.mean), 3)
                out[f"{key}-high"] = round(float(e.interval.high), 3)
    return out
