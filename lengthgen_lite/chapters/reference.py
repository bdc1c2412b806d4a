"""The reference tier's scorecard rows (``book/reference.ipynb``): each claim a chapter
declares, decided again on the long sweep in ``lengthgen_lite/data/reference``
(:mod:`lengthgen_lite.runs.store`), cell by cell of its sensitivity grid, with 95%
t-intervals over ten seeds, by the one protocol of :mod:`lengthgen_lite.runs.claims`.

Each function takes the stored :class:`~lengthgen_lite.runs.results.Results` of one
chapter spec at the reference tier and returns the chapter's declared claim's
:class:`~lengthgen_lite.runs.claims.Decision` at the reference tier.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import numpy as np

from ..runs import Results
from ..runs.claims import Decision, Effect, at_step
from ..runs.compare import level_effects, paired_effects
from ..runs.spec import Config, Spec, averager_kind
from ..runs.store import Store
from . import ch1_set_complement as ch1
from . import ch2_attention_dispersion as ch2
from . import ch4_vanishing_variance as ch4
from . import ch5_post_norm as ch5
from . import ch6_ema as ch6
from . import ch6_search as ch6s
from . import ch7_beyond_set_complement as ch7
from . import ch8_claims as ch8c
from . import ch8_two_kinds as ch8

# the live specs whose reference sweeps this page reads, in the book's order
SPECS = {
    "ch1/baseline": ch1.SPECS["ch1/baseline"],
    "ch5/placements": ch5.SPECS["ch5/placements"],
    "ch5/dropout": ch5.SPECS["ch5/dropout"],
    "ch4/retrieval": ch4.SPECS["ch4/retrieval"],
    "ch6/grid": ch6.SPECS["ch6/grid"],
    "ch6/search": ch6.SPECS["ch6/search"],
    "ch7/placements": ch7.SPECS["ch7/placements"],
    "ch8/set_complement": ch8.SPECS["ch8/set_complement"],
    "ch8/retrieval": ch8.SPECS["ch8/retrieval"],
    "ch8/test_time_set": ch8.SPECS["ch8/test_time_set"],
    "ch8/test_time_retrieval": ch8.SPECS["ch8/test_time_retrieval"],
    "ch8/depth": ch8.SPECS["ch8/depth"],
}
# sweeps still running: the page shows the cells stored so far, and says how many
# (a long sweep's configurations are committed as they land; none runs now)
IN_PROGRESS: dict[str, Spec] = {}


def load(name: str, store: Store | None = None) -> Results:
    """The stored reference sweep of ``SPECS[name]`` (every configuration, or a
    ValueError saying which command makes the missing ones), or the configurations
    stored so far of a sweep in ``IN_PROGRESS`` (``provenance["missing"]`` lists the
    rest)."""
    store = Store() if store is None else store
    if name in IN_PROGRESS:
        return store.load(IN_PROGRESS[name], partial=True)
    if name not in SPECS:
        raise ValueError(
            f"no reference sweep named {name!r}; allowed: {[*SPECS, *IN_PROGRESS]}"
        )
    return store.load(SPECS[name])


def configs_where(results: Results, **where: object) -> list[int]:
    """The indices of the configurations matching ``where`` (config fields)."""
    return sorted({r["config"] for r in results.select(**where)})


def _labelled(effects: list[Effect], **label: object) -> list[Effect]:
    """The effects with ``label`` added to their cells (which averager, which
    comparison)."""
    return [dataclasses.replace(e, cell=e.cell | label) for e in effects]


def loss_examples(placements: Results) -> list[int]:
    """The loss curves the page draws: no norm and post-norm, both target kinds, the
    book's init and learning rate."""
    return configs_where(placements, norm="none", init="book", lr=3e-3) + configs_where(
        placements, norm="post", init="book", lr=3e-3
    )


def budget_numbers(placements: Results) -> dict[str, float]:
    """The numbers the page quotes about post-norm and budget (glue name -> rounded
    value): mean TV beyond L of no norm and post-norm, soft targets, at the book's init
    and learning rate (the live run's cell), at every checkpoint."""
    out: dict[str, float] = {}
    steps = sorted({r["step"] for r in placements.rows})
    live = Config(**ch1.BASELINE)  # the live run's init and learning rate
    cell = {"targets": "soft", "init": live.init, "lr": live.lr}
    for norm in ("none", "post"):
        for step in steps:
            tv = placements.values("tv_beyond", norm=norm, step=step, **cell).mean()
            out[f"ref-tv-{norm}-{step}"] = round(float(tv), 3)
    first, last = steps[0], steps[-1]
    for step in (first, last):
        ratio = out[f"ref-tv-none-{step}"] / out[f"ref-tv-post-{step}"]
        out[f"ref-ratio-{step}"] = round(ratio, 1)
    return out


def fails(baseline: Results) -> Decision:
    """Chapter 1's premise: the soft-target model's TV at the longest length stays above
    0.5 (the live row's threshold) in every cell."""
    effects = level_effects(baseline, "tv_longest", minus=0.5, targets="soft")
    return ch1.FAILS_CLAIM.decide(effects, "reference")


def postnorm(placements: Results) -> Decision:
    """Chapter 5's headline: post-norm lowers the TV beyond the training lengths
    against no norm, in every cell (target kind x init x learning rate)."""
    effects = paired_effects(
        placements, "tv_beyond", treated={"norm": "post"}, control={"norm": "none"}
    )
    return ch5.POSTNORM_CLAIM.decide(effects, "reference")


def _gap_growth_margin(results: Results, **where: object) -> np.ndarray:
    s = results.lengths(**where)
    gaps = results.curves("logit_gap", **where)
    return s[-1] * gaps[:, -1] / gaps[:, 0] - ch5.GAP_RESTORED


def _sharpness_margin(results: Results, **where: object) -> np.ndarray:
    entropy = results.curves("entropy_ratio", **where)[:, 1:]  # s >= 2
    return ch5.NEAR_UNIFORM - entropy.min(axis=1)


def resharpen(placements: Results) -> Decision:
    """Chapter 5's title claim, "Post-Norm resharpens attention", read as the live row
    reads it: the post-norm model's logit gap is restored (s x gap at the longest s
    over s = 1 above the live row's 1.5: the 1/s law would give 1), and its attention
    pattern is sharp (the entropy falls below chapter 5's near-uniform line, 0.85 of
    log s, at some s >= 2); each per seed, in every cell (target kind x init x learning
    rate). Both hold: reproduced; the gap only: partly. The live row's third test,
    the gap with the norm's divisor frozen, needs the model, and the store keeps
    metrics, not weights: the reference decides what the claim says, chapter 5 shows
    why."""
    post = {"norm": "post"}
    gap = level_effects(placements, _gap_growth_margin, **post)
    sharp = level_effects(placements, _sharpness_margin, **post)
    effects = _labelled(gap, part="gap restored") + _labelled(
        sharp, part="attention sharpened"
    )
    return ch5.RESHARPEN_CLAIM.decide(effects, "reference")


DROPOUT_RATES = (0.0, 0.1, 0.3)


def dropout(sweep: Results) -> Decision:
    """The first paper version's remedy: dropout (on the attention pattern, the
    residual, or both, at 0.1 or 0.3) lowers the no-norm model's TV beyond the training
    lengths; each setting against none, in every cell (target kind x init)."""
    control = {"attn_dropout": 0.0, "resid_dropout": 0.0}
    effects: list[Effect] = []
    for attn, resid in itertools.product(DROPOUT_RATES, DROPOUT_RATES):
        if attn == resid == 0.0:
            continue
        treated = {"attn_dropout": attn, "resid_dropout": resid}
        for effect in paired_effects(sweep, "tv_beyond", treated, control):
            effects.append(dataclasses.replace(effect, cell=effect.cell | treated))
    return ch5.DROPOUT_CLAIM.decide(effects, "reference")


def dropout_numbers(sweep: Results) -> dict[str, float]:
    """The numbers the page quotes about dropout and budget (glue name -> rounded
    value): mean TV beyond L with no dropout, residual dropout 0.3 and attention
    dropout 0.3, soft targets, the book's init, at every checkpoint."""
    settings = {"none": (0.0, 0.0), "resid": (0.0, 0.3), "attn": (0.3, 0.0)}
    out: dict[str, float] = {}
    for name, (attn, resid) in settings.items():
        for step in sorted({r["step"] for r in sweep.rows}):
            tv = sweep.values(
                "tv_beyond",
                targets="soft",
                init="book",
                attn_dropout=attn,
                resid_dropout=resid,
                step=step,
            ).mean()
            out[f"ref-drop-{name}-{step}"] = round(float(tv), 3)
    return out


def _peak_margin(results: Results, **where: object) -> np.ndarray:
    s = results.lengths(**where)[1:]
    largest = results.curves("max_attention", **where)[:, 1:]
    return 2 - (s * largest).max(axis=1)


def dispersion(baseline: Results) -> Decision:
    """Chapter 2: attention disperses. The test a sharp head fails: no token gets
    twice its uniform share 1/s at any s >= 2; the effect is 2 - max_s s x largest
    weight per seed, in every cell (target kind x init x learning rate)."""
    effects = level_effects(baseline, _peak_margin)
    return ch2.DISPERSION_CLAIM.decide(effects, "reference")


def _exponent_margin(results: Results, **where: object) -> np.ndarray:
    s = results.lengths(**where)
    gaps = results.curves("logit_gap", **where)
    slopes = np.array([ch2.power_law_exponent(s[1:], gap[1:]) for gap in gaps])
    return ch2.EXPONENT_TOL - np.abs(slopes + 1)


def gap_exponent(baseline: Results) -> Decision:
    """Chapter 2: with soft targets the logit gap shrinks like 1/s: its fitted
    exponent over s >= 2 is -1 within chapter 2's tolerance, per seed, in every cell
    (init x learning rate)."""
    effects = level_effects(baseline, _exponent_margin, targets="soft")
    return ch2.GAP_CLAIM.decide(effects, "reference")


# chapter 4's variants as the sweep's fields (control and treated set the same ones)
NO_NORM = {"norm": "none", "norm_kind": "layernorm"}
LAYERNORM = {"norm": "attn_out", "norm_kind": "layernorm"}
RETRIEVAL_KEYS = {"dictionary_lookup": "dict", "argmax_retrieval": "argmax"}
LN_CLAIMS = {
    "dictionary_lookup": ch4.LN_DICT_CLAIM,
    "argmax_retrieval": ch4.LN_ARGMAX_CLAIM,
}


def layernorm_gain(sweep: Results, task: str) -> Decision:
    """Chapter 4: LayerNorm after the attention output raises the accuracy at the
    largest N against no norm, on the same seeds, in every stored cell (components x
    init x learning rate), judged like the live row against the claim's SESOI (0.03
    of accuracy)."""
    if task not in RETRIEVAL_KEYS:
        raise ValueError(f"task={task!r} is unknown; allowed: {tuple(RETRIEVAL_KEYS)}")
    # biased W_V/W_O are trained without a norm only, and no claim reads them: they
    # cannot make the mean drift they were meant to test (weights sum to 1)
    effects = paired_effects(
        sweep,
        "accuracy_longest",
        LAYERNORM,
        NO_NORM,
        sign=-1,
        task=task,
        attn_bias=False,
    )
    return LN_CLAIMS[task].decide(effects, "reference", detail=partial_note(sweep))


def _ratios(results: Results, **where: object) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, the median per-feature variance at the largest N over the smallest,
    before the norm and after it."""
    return tuple(
        ch4.end_ratio(results.curves(name, **where))
        for name in ("median_feature_var", "normed_median_feature_var")
    )


def _raised_margin(results: Results, **where: object) -> np.ndarray:
    before, after = _ratios(results, **where)
    return after - ch4.SHIFT_RAISED * before


def _left_margin(results: Results, **where: object) -> np.ndarray:
    _, after = _ratios(results, **where)
    return 1 - after


def shift(sweep: Results) -> Decision:
    """Chapter 4: a norm after the attention output reduces the variance shift, but
    only partly. Per normed model (LayerNorm or standardization), the median
    per-feature variance ratio (largest N over smallest) after the norm is raised above
    1.5 x the ratio before it, and stays below 1; each per seed, in every cell (task x
    norm kind x item MLP x init x learning rate), against the claim's SESOI (0.05 of
    the ratio), as the live row is judged."""
    normed = {"norm": "attn_out"}
    raised = level_effects(sweep, _raised_margin, **normed)
    left = level_effects(sweep, _left_margin, **normed)
    effects = _labelled(raised, part="raised") + _labelled(left, part="still below 1")
    return ch4.SHIFT_CLAIM.decide(effects, "reference", detail=partial_note(sweep))


def shift_numbers(sweep: Results, step: int | None = None) -> dict[str, float]:
    """The numbers chapter 4 quotes about the variance shift at the reference tier
    (glue name -> value) at checkpoint ``step`` (default: the last), per task ("dict",
    "argmax") over its normed cells (norm kind x item MLP x init x learning rate): the
    lowest and highest cell mean (over seeds) of the median per-feature variance ratio,
    largest N over smallest, before the norm and after it (rounded to 2 decimals); in
    how many cells the norm raises the ratio by half (:func:`shift`'s first part, its
    interval above zero); and the cell count."""
    raised = [e for e in shift(sweep).effects if e.cell["part"] == "raised"]
    steps = sorted({e.step for e in raised})
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ValueError(f"step={step} is not stored; allowed: {steps}")
    out: dict[str, float] = {}
    for task, key in RETRIEVAL_KEYS.items():
        cells = configs_where(sweep, task=task, norm="attn_out")
        ratios = [_ratios(sweep, config=i, step=step) for i in cells]
        for side, name in enumerate(("before", "after")):
            means = [float(r[side].mean()) for r in ratios]
            out[f"ref-shift-{key}-{name}-min-{step}"] = round(min(means), 2)
            out[f"ref-shift-{key}-{name}-max-{step}"] = round(max(means), 2)
        here = [e for e in at_step(raised, step) if e.cell["task"] == task]
        out[f"ref-shift-{key}-raised-{step}"] = sum(e.interval.low > 0 for e in here)
        out[f"ref-shift-{key}-cells"] = len(cells)
    return out


def final_cells(claim: Decision, **where: object) -> list[Effect]:
    """The effects of ``claim`` at its last budget whose cell matches ``where`` (cell
    fields, e.g. ``norm="attn_out"``), for the numbers a chapter quotes; a
    ValueError if none matches."""
    cells = [
        e
        for e in at_step(claim.effects)
        if all(e.cell.get(k) == v for k, v in where.items())
    ]
    if not cells:
        fields = sorted({k for e in claim.effects for k in e.cell})
        raise ValueError(
            f"{claim.claim.key} has no cell with {where}; allowed: values of {fields}"
        )
    return cells


# Chapters 6 and 7: each effect is a difference on the same seeds (an averaged
# model against the raw weights of the same training, or one configuration against
# another), > 0 when the claim holds.


def _raw_minus(variant: str, metric: str = "tv_beyond") -> Callable[..., np.ndarray]:
    """Per seed, ``metric`` of the raw weights minus that of ``variant`` (an averager
    riding along the same training): a paired difference, as a level."""

    def gain(results: Results, **where: object) -> np.ndarray:
        raw = results.values(metric, variant="raw", **where)
        return raw - results.values(metric, variant=variant, **where)

    return gain


def _averagers(results: Results, kind: str) -> list[str]:
    """The sweep's variants of averager ``kind`` ("ema": "ema" and "ema_long")."""
    names = [v for v in results.variants if v != "raw" and averager_kind(v) == kind]
    if not names:
        raise ValueError(
            f"{results.spec.name} has no {kind!r} variant; allowed: a sweep with "
            f"variants {results.variants} that include one"
        )
    return names


def ema_helps(grid: Results) -> Decision:
    """Chapter 6: EMA helps length generalisation. Raw minus EMA TV beyond L, per
    seed, for every EMA window of the sweep (ch6/grid: beta 0.99 as live, and 0.999),
    in every cell (norm x init x learning rate), sampled targets, logit scale 1. The
    live row also looks at the training lengths; the reference decides the half in
    doubt (beyond L), against the claim's SESOI (0.01 of TV)."""
    effects: list[Effect] = []
    for variant in _averagers(grid, "ema"):
        gain = level_effects(grid, _raw_minus(variant))
        effects += _labelled(gain, averager=variant)
    return ch6.EMA_CLAIM.decide(effects, "reference")


def _best_scale_gap(results: Results, **where: object) -> np.ndarray:
    """Per seed: the raw weights' TV beyond L at their best logit scale minus the EMA
    weights' at theirs (the scales of the sweep)."""

    def best(variant: str) -> np.ndarray:
        tv = [
            results.values("tv_beyond", variant=variant, scale=c, **where)
            for c in results.spec.scales
        ]
        return np.min(tv, axis=0)

    return best("raw") - best("ema")


def temperature(grid: Results) -> Decision:
    """Chapter 6's control: EMA's gain is more than a logit temperature. Each at its
    best logit scale (ch6/grid: 1 and 1.5, the live run's best factor beyond L), raw
    minus EMA (beta 0.99) TV beyond L, per seed, in every cell (norm x init x learning
    rate); the live row searches 16 scales."""
    if len(grid.spec.scales) < 2:
        raise ValueError(
            f"{grid.spec.name} is scored at scales {grid.spec.scales}; allowed: a "
            "sweep with at least two logit scales"
        )
    effects = level_effects(grid, _best_scale_gap)
    scales = ", ".join(f"{c:g}" for c in grid.spec.scales)
    detail = f"each at its best logit scale of {scales}"
    return ch6.TEMPERATURE_CLAIM.decide(effects, "reference", detail=detail)


def bema_helps(search: Results) -> Decision:
    """Chapter 6: BEMA helps. Raw minus BEMA TV beyond L, per seed, in every cell of
    ch6/search's design (norm x residual dropout x init), sampled targets."""
    effects = level_effects(search, _raw_minus(_averagers(search, "bema")[0]))
    return ch6.BEMA_CLAIM.decide(effects, "reference")


def search_finds(search: Results) -> Decision:
    """v1's random search: dropout and EMA improve length generalisation, decided on
    the search as a design (ch6/search: norm x residual dropout x init). Two effects,
    each in every cell: no dropout minus each residual dropout rate, raw weights (cells
    norm x init); raw minus EMA (beta 0.99) weights (cells norm x dropout x init); TV
    beyond L, against the claim's SESOI (0.01 of TV)."""
    rates = sorted({c.resid_dropout for c in search.configs} - {0.0})
    if not rates:
        raise ValueError(
            f"{search.spec.name} has no residual dropout rate above 0; allowed: a "
            "sweep with resid_dropout 0 and a positive rate"
        )
    effects: list[Effect] = []
    for rate in rates:
        drop = paired_effects(
            search, "tv_beyond", {"resid_dropout": rate}, {"resid_dropout": 0.0}
        )
        effects += _labelled(drop, remedy=f"resid_dropout {rate:g}")
    ema = level_effects(search, _raw_minus(_averagers(search, "ema")[0]))
    effects += _labelled(ema, remedy="ema")
    return ch6s.SEARCH_CLAIM.decide(effects, "reference")


GAME = {"task": "tictactoe", "targets": "sampled"}


def game_order(sweep: Results) -> Decision:
    """Chapter 7: on the game (sampled targets) the placements order as on set
    complement, attn_out < post < none in TV beyond the training lengths: post minus
    attn_out and none minus post, raw weights, on the same seeds, in every cell
    (init)."""
    pairs = (("attn_out", "post"), ("post", "none"))
    effects: list[Effect] = []
    for treated, control in pairs:
        gain = paired_effects(
            sweep, "tv_beyond", {"norm": treated}, {"norm": control}, **GAME
        )
        effects += _labelled(gain, pair=f"{control} - {treated}")
    return ch7.GAME_CLAIM.decide(effects, "reference")


def game_ema(sweep: Results) -> Decision:
    """Chapter 7: EMA helps on the game. Raw minus EMA TV beyond the training lengths,
    per seed, sampled targets, in every cell (placement x init)."""
    effects = level_effects(sweep, _raw_minus("ema"), **GAME)
    return ch7.GAME_EMA_CLAIM.decide(effects, "reference")


def languages(sweep: Results) -> Decision:
    """Chapter 7: post-norm helps on the formal languages, decided on a^n b^n (soft
    targets; unlock and no-repeat need no remedy): no norm minus post-norm TV beyond
    the training lengths, raw weights, on the same seeds, in every cell (init). It
    trains at lr 1e-3 with a cosine decay (``ch7.STABLE_ANBN``): at lr 3e-3 its
    trainings collapsed (``benchmarks/anbn_collapse.py`` traces why)."""
    effects = paired_effects(
        sweep, "tv_beyond", {"norm": "post"}, {"norm": "none"}, task="anbn"
    )
    return ch7.LANGUAGES_CLAIM.decide(effects, "reference")


# Chapter 8 (beyond both papers): its claims P1-P4, decided by the chapter's own effect
# builders on the stored sweeps, per cell (set complement: target kind x v; retrieval:
# task x learning rate) and budget.


def two_kinds(
    set_sweep: Results,
    retrieval_sweep: Results,
    test_time_set: Results,
    test_time_retrieval: Results,
) -> list[Decision]:
    """Chapter 8's P1 (sharpening gains at most 0.01 TV, renormalising at least 0.1),
    P2 (SSMax recovers at least 25% of the lost accuracy, LN at most 5%), P3 (the
    combination is no worse than the better single remedy, on both tasks) and P4 (a
    test-time factor: nothing on set complement, part of the lost accuracy on
    retrieval; the sweeps ``ch8/test_time_set`` and ``ch8/test_time_retrieval``), in
    the chapter's order."""
    detail = partial_note(set_sweep)
    set_effects = {
        ch8c.SHARPEN_CLAIM: ch8c.gain_effects(set_sweep, ch8.SHARPENERS),
        ch8c.RENORM_CLAIM: ch8c.gain_effects(set_sweep, ch8.RENORMALISERS),
        ch8c.COMBINED_SET_CLAIM: ch8c.combined_set_effects(set_sweep),
    }
    decisions = [
        claim.decide(effects, "reference", detail=detail)
        for claim, effects in set_effects.items()
    ]
    decisions.append(
        ch8c.FACTOR_SET_CLAIM.decide(
            ch8c.test_time_set_effects(test_time_set),
            "reference",
            detail=partial_note(test_time_set),
        )
    )
    detail = partial_note(retrieval_sweep)
    retrieval_effects = {
        ch8c.SSMAX_RETRIEVAL_CLAIM: ch8c.recovery_effects(retrieval_sweep, "ssmax"),
        ch8c.LN_RETRIEVAL_CLAIM: ch8c.recovery_effects(retrieval_sweep, "LN"),
        ch8c.COMBINED_RETRIEVAL_CLAIM: ch8c.combined_retrieval_effects(retrieval_sweep),
    }
    decisions.append(
        ch8c.FACTOR_RETRIEVAL_CLAIM.decide(
            ch8c.test_time_retrieval_effects(test_time_retrieval),
            "reference",
            detail=partial_note(test_time_retrieval),
        )
    )
    decisions += [
        claim.decide(effects, "reference", detail=detail)
        for claim, effects in retrieval_effects.items()
    ]
    order = [claim.key for claim in ch8c.CLAIMS]
    return sorted(decisions, key=lambda d: order.index(d.claim.key))


def depth(depth_sweep: Results) -> list[Decision]:
    """Chapter 8's P5 on its depth sweep (each half once its configurations are
    stored): post-norm against pre_final under NoPE, and the output norms'
    degradation beyond L under RoPE."""
    decided = ch8c.depth_scorecard(depth_sweep, "reference", partial_note(depth_sweep))
    return list(decided.values())


def partial_note(sweep: Results) -> str:
    """ ", partial grid: 20 of 44 configurations stored" while a sweep runs."""
    missing = sweep.provenance.get("missing") or []
    if not missing:
        return ""
    total = len(sweep.configs)
    return f"partial grid: {total - len(missing)} of {total} configurations stored"


__all__ = [
    "IN_PROGRESS",
    "bema_helps",
    "ema_helps",
    "game_ema",
    "game_order",
    "languages",
    "search_finds",
    "temperature",
    "two_kinds",
    "depth",
    "dispersion",
    "gap_exponent",
    "layernorm_gain",
    "partial_note",
    "DROPOUT_RATES",
    "budget_numbers",
    "SPECS",
    "configs_where",
    "dropout",
    "dropout_numbers",
    "fails",
    "load",
    "loss_examples",
    "postnorm",
    "resharpen",
    "shift",
    "shift_numbers",
    "final_cells",
]
