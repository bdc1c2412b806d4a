"""Chapter 8's scorecard: issue 37's predictions P1-P5, declared once before any run
(each a :class:`~lengthgen_lite.runs.claims.Claim` with its SESOI), and the effects
that decide them on the runs of :mod:`~lengthgen_lite.chapters.ch8_two_kinds` (P6,
on SmolLM2, is :mod:`~lengthgen_lite.chapters.ch8_smollm2`'s).

"At most" claims (sharpening gains nothing on set complement; LN recovers nothing on
retrieval; the combination is no worse than the better remedy) are judged one-sided
(``Claim(test="at most")``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from ..runs import Config, Results
from ..runs.claims import TV_SESOI, Claim, Decision, Effect, Tier
from ..runs.compare import level_effects, paired_effects, training_state
from ..runs.stats import t_interval
from .ch8_two_kinds import (
    DEPTH_VARIANTS,
    N_TRAIN,
    RENORMALISERS,
    RETRIEVAL_TASKS,
    RETRIEVAL_VARIANTS,
    SET_VARIANTS,
    SHARPENERS,
    TARGETS,
    at_size,
    factor_set_values,
    set_values,
    variant_fields,
)


def _named(effects: list[Effect], **cell: object) -> list[Effect]:
    return [dataclasses.replace(e, cell=e.cell | cell) for e in effects]


def gain_effects(results: Results, variants: Sequence[str]) -> list[Effect]:
    """No-norm minus ``variant`` TV beyond L (> 0: the variant gains), paired over
    seeds, per cell (target kind, and at the reference v and init) and budget."""
    control = SET_VARIANTS["none"]
    return [
        effect
        for name in variants
        for effect in _named(
            paired_effects(results, "tv_beyond", SET_VARIANTS[name], control),
            variant=name,
        )
    ]


def _steps(results: Results) -> list[int]:
    return sorted({r["step"] for r in results.rows})


def _state(results: Results, sides: Sequence[Mapping[str, object]]) -> tuple[bool, int]:
    """Whether every configuration a ``sides`` entry selects (with its ``step``) had
    converged by then, and how many of their seeds had collapsed (the plateau and
    collapse tests of :func:`~lengthgen_lite.runs.compare.training_state`)."""
    states = [
        training_state(results, results.select(**w)[0]["config"], int(w["step"]))
        for w in sides
    ]
    return all(flat for flat, _ in states), sum(int(c.sum()) for _, c in states)


def combined_set_effects(results: Results) -> list[Effect]:
    """P3 on set complement: ssmax + attn_out's TV beyond L minus the better single
    remedy's (attn_out or ssmax, the lower mean), per seed (> 0: the combination is
    worse), per target kind, v and budget."""
    effects = []
    sizes = sorted({c.v for c in results.configs})
    for targets in TARGETS:
        for v in sizes:
            for step in _steps(results):
                where = {"targets": targets, "v": v, "step": step}
                tv = {
                    name: results.values("tv_beyond", **where, **SET_VARIANTS[name])
                    for name in ("attn_out", "ssmax", "ssmax+attn_out")
                }
                best = min(("attn_out", "ssmax"), key=lambda name: tv[name].mean())
                converged, unstable = _state(
                    results,
                    [{**where, **SET_VARIANTS[n]} for n in (best, "ssmax+attn_out")],
                )
                cell = {"targets": targets, "v": v, "better": best}
                effects.append(
                    Effect(
                        cell,
                        step,
                        t_interval(tv["ssmax+attn_out"] - tv[best]),
                        converged,
                        unstable,
                    )
                )
    return effects


def lost_accuracy(results: Results, task: str, **where: object) -> float:
    """The no-norm models' accuracy at N = 16 minus at the largest N, mean over seeds:
    what P2's recovered fraction divides by."""
    none = results.curves("accuracy", task=task, **RETRIEVAL_VARIANTS["none"], **where)
    sel = {"task": task, **RETRIEVAL_VARIANTS["none"], **where}
    return float((at_size(results, none, N_TRAIN, **sel) - none[:, -1]).mean())


def recovered(
    results: Results, task: str, treated: np.ndarray, **where: object
) -> np.ndarray:
    """Per seed, the share of the lost accuracy that ``treated`` (accuracies at the
    largest N, [K], the same seeds) wins back over the no-norm model: (treated - none)
    / :func:`lost_accuracy`. 1: all of it; 0: none."""
    none = results.values(
        "accuracy_longest", task=task, **RETRIEVAL_VARIANTS["none"], **where
    )
    return (treated - none) / lost_accuracy(results, task, **where)


def recovery_effects(results: Results, variant: str) -> list[Effect]:
    """P2: the share of the accuracy lost between N = 16 and the largest N that
    ``variant`` recovers, per seed, one cell per task and learning rate (and budget)."""
    fields = variant_fields(variant, "retrieval")
    effects = []
    for task in RETRIEVAL_TASKS:
        for lr in sorted({c.lr for c in results.configs if c.task == task}):
            for step in _steps(results):
                where = {"lr": lr, "step": step}
                treated = results.values(
                    "accuracy_longest", task=task, **fields, **where
                )
                converged, unstable = _state(
                    results,
                    [
                        {"task": task, **f, **where}
                        for f in (fields, RETRIEVAL_VARIANTS["none"])
                    ],
                )
                values = recovered(results, task, treated, **where)
                cell = {"task": task, "lr": lr, "variant": variant}
                effects.append(
                    Effect(cell, step, t_interval(values), converged, unstable)
                )
    return effects


def combined_retrieval_effects(results: Results) -> list[Effect]:
    """P3 on retrieval: the better single remedy's accuracy at the largest N (ssmax or
    LN, the higher mean) minus ssmax + LN's, per seed (> 0: the combination is worse),
    per task, learning rate and budget."""
    effects = []
    for task in RETRIEVAL_TASKS:
        for lr in sorted({c.lr for c in results.configs if c.task == task}):
            for step in _steps(results):
                where = {"task": task, "lr": lr, "step": step}
                acc = {
                    name: results.values(
                        "accuracy_longest", **RETRIEVAL_VARIANTS[name], **where
                    )
                    for name in ("ssmax", "LN", "ssmax+LN")
                }
                best = max(("ssmax", "LN"), key=lambda name: acc[name].mean())
                converged, unstable = _state(
                    results,
                    [{**where, **RETRIEVAL_VARIANTS[n]} for n in (best, "ssmax+LN")],
                )
                cell = {"task": task, "lr": lr, "better": best}
                values = acc[best] - acc["ssmax+LN"]
                effects.append(
                    Effect(cell, step, t_interval(values), converged, unstable)
                )
    return effects


def factor_set_effects(results: Results) -> list[Effect]:
    """P4 on set complement (live run): no-norm TV beyond L minus the same models'
    with the test-time factor, per seed (> 0: the factor gains), per target kind."""
    step = results.configs[0].steps
    return [
        Effect.of(
            set_values(results, "tv_beyond", t, "none") - factor_set_values(results, t),
            step,
            targets=t,
        )
        for t in TARGETS
    ]


def factor_retrieval_effects(
    results: Results, factored: Mapping[str, np.ndarray]
) -> list[Effect]:
    """P4 on retrieval (live run): the share of the lost accuracy the test-time factor
    recovers on the no-norm models (``factored``:
    :func:`~lengthgen_lite.chapters.ch8_two_kinds.factor_retrieval`), per seed, one
    cell per task."""
    out = []
    for task in RETRIEVAL_TASKS:
        lr = results.configs[results.select(task=task)[0]["config"]].lr
        values = recovered(results, task, factored[task][:, -1])
        step = results.configs[0].steps
        out.append(Effect.of(values, step, task=task, lr=lr, variant="test-time"))
    return out


def _stored(results: Results) -> list[Config]:
    """The configurations with rows (a partial sweep's stored ones), in order."""
    stored = {r["config"] for r in results.rows}
    return [c for i, c in enumerate(results.configs) if i in stored]


def test_time_set_effects(results: Results) -> list[Effect]:
    """P4 on set complement (``ch8/test_time_set``'s sweep): the no-norm models' TV
    beyond L minus the same models' with the test-time factor (variant "test_logn"),
    per seed (> 0: the factor gains), per target kind, v and budget."""
    effects = []
    for config in _stored(results):
        where = {"targets": config.targets, "v": config.v}
        for step in _steps(results):
            raw, factored = (
                results.values("tv_beyond", **where, step=step, variant=variant)
                for variant in ("raw", "test_logn")
            )
            converged, unstable = _state(results, [{**where, "step": step}])
            interval = t_interval(raw - factored)
            effects.append(Effect(where, step, interval, converged, unstable))
    return effects


def test_time_retrieval_effects(results: Results) -> list[Effect]:
    """P4 on retrieval (``ch8/test_time_retrieval``'s sweep): the share of the lost
    accuracy the test-time factor recovers on the no-norm models, per seed, per task,
    learning rate and budget."""
    effects = []
    for config in _stored(results):
        for step in _steps(results):
            where = {"lr": config.lr, "step": step}
            factored = results.values(
                "accuracy_longest", task=config.task, variant="test_logn", **where
            )
            values = recovered(results, config.task, factored, **where)
            converged, unstable = _state(results, [{"task": config.task, **where}])
            cell = {"task": config.task, "lr": config.lr, "variant": "test-time"}
            effects.append(Effect(cell, step, t_interval(values), converged, unstable))
    return effects


def _mean_text(values: Mapping[str, np.ndarray], digits: int = 3) -> str:
    return ", ".join(f"{name} {v.mean():.{digits}f}" for name, v in values.items())


def set_scorecard(set_results: Results) -> dict[str, Decision]:
    """Part A's rows (P1 both halves, P3 and P4 on set complement), decided on the live
    run: claim key -> decision."""
    tv = {
        n: set_values(set_results, "tv_beyond", "soft", n)
        for n in ("none", *SHARPENERS, *RENORMALISERS)
    }
    detail = "soft targets, mean TV beyond L: " + _mean_text(tv)
    decisions = [
        SHARPEN_CLAIM.decide(gain_effects(set_results, SHARPENERS), detail=detail),
        RENORM_CLAIM.decide(gain_effects(set_results, RENORMALISERS), detail=detail),
        COMBINED_SET_CLAIM.decide(combined_set_effects(set_results)),
        FACTOR_SET_CLAIM.decide(factor_set_effects(set_results)),
    ]
    return {d.claim.key: d for d in decisions}


def retrieval_scorecard(
    retrieval: Results, factored: Mapping[str, np.ndarray]
) -> dict[str, Decision]:
    """Part B's rows (P2 both halves, P3 and P4 on retrieval), decided on the live run;
    ``factored`` is :func:`~lengthgen_lite.chapters.ch8_two_kinds.factor_retrieval` of
    ``retrieval``: claim key -> decision."""
    lost = {t: lost_accuracy(retrieval, t) for t in RETRIEVAL_TASKS}
    detail = "accuracy lost from N = 16 to 1024 without a norm: " + ", ".join(
        f"{t.replace('_', ' ')} {x:.2f}" for t, x in lost.items()
    )
    decisions = [
        SSMAX_RETRIEVAL_CLAIM.decide(
            recovery_effects(retrieval, "ssmax"), detail=detail
        ),
        LN_RETRIEVAL_CLAIM.decide(recovery_effects(retrieval, "LN"), detail=detail),
        COMBINED_RETRIEVAL_CLAIM.decide(combined_retrieval_effects(retrieval)),
        FACTOR_RETRIEVAL_CLAIM.decide(
            factor_retrieval_effects(retrieval, factored), detail=detail
        ),
    ]
    return {d.claim.key: d for d in decisions}


def scorecard(
    set_results: Results, retrieval: Results, factored: Mapping[str, np.ndarray]
) -> list[Decision]:
    """The chapter's eight scorecard rows (P1-P4), in ``CLAIMS`` order."""
    decided = set_scorecard(set_results) | retrieval_scorecard(retrieval, factored)
    return [decided[claim.key] for claim in CLAIMS]


def depth_effects(depth: Results) -> list[Effect]:
    """P5, first half: pre_final minus post TV beyond L with two layers and no
    positions (> 0: post-norm ahead), paired over seeds, per budget."""
    return _named(
        paired_effects(
            depth,
            "tv_beyond",
            treated=DEPTH_VARIANTS["post"],
            control=DEPTH_VARIANTS["pre_final"],
            positional="none",
        ),
        variant="post",
    )


def degradation_effects(depth: Results, positional: str) -> list[Effect]:
    """TV beyond L minus TV at the training lengths of the two-layer models with an
    output norm (post, attn_out) under ``positional``, per seed (> 0: worse beyond L),
    one cell per placement and budget the run has (the live slice: post only)."""

    def degradation(results: Results, **where: object) -> np.ndarray:
        return results.values("tv_beyond", **where) - results.values(
            "tv_train", **where
        )

    return [
        effect
        for name in ("post", "attn_out")
        for effect in _named(
            level_effects(
                depth, degradation, positional=positional, **DEPTH_VARIANTS[name]
            ),
            variant=name,
        )
    ]


def rope_effects(depth: Results) -> list[Effect]:
    """P5, second half: :func:`degradation_effects` under RoPE."""
    return degradation_effects(depth, "rope")


def depth_scorecard(
    depth: Results, tier: Tier = "live", detail: str = ""
) -> dict[str, Decision]:
    """P5's rows (``DEPTH_CLAIMS``) decided on a run of ``ch8/depth``: each half the run
    has configurations for (a sweep in progress may have neither yet)."""
    effects = {DEPTH_CLAIM: depth_effects(depth), ROPE_CLAIM: rope_effects(depth)}
    return {
        claim.key: claim.decide(found, tier, detail=detail)
        for claim, found in effects.items()
        if found
    }


# The chapter's scorecard claims, declared once, before any run (issue 37's P1-P4).
# SESOIs as pre-stated there: 0.01 of TV (TV_SESOI) for "nothing" on set complement,
# 0.1 of TV for a real gain; 25% of the lost accuracy for "recovers", 5% for
# "recovers nothing"; 0.03 of accuracy (chapter 4's) for "at least as good".
SOURCES = "[ours]; SSMax: 2501.19399 [paper]; log n: 2202.12172 [paper]"
#: P1, first half: sharpening the softmax gains at most 0.01 TV on set complement.
SHARPEN_CLAIM = Claim(
    "ch8-score-sharpen-set",
    "P1: On set complement, sharpening the softmax with the length (SSMax, or the "
    "fixed log n factor) gains at most 0.01 of TV beyond L over no norm",
    SOURCES,
    metric="TV beyond L",
    unit="TV",
    effect="no norm minus the sharpened softmax",
    sesoi=TV_SESOI,
    cells=("variant", "targets", "v", "init"),
    test="at most",
)
#: P1, second half: renormalising the output gains at least 0.1 TV.
RENORM_CLAIM = Claim(
    "ch8-score-renorm-set",
    "P1: On set complement, renormalising the output (attn_out or post) gains at "
    "least 0.1 of TV beyond L over no norm",
    "[ours]; post-norm: 2510.08341 v2 [paper]",
    metric="TV beyond L",
    unit="TV",
    effect="no norm minus the output norm",
    sesoi=0.1,
    cells=("variant", "targets", "v", "init"),
)
#: P2, first half: SSMax recovers at least a quarter of the lost accuracy.
SSMAX_RETRIEVAL_CLAIM = Claim(
    "ch8-score-ssmax-retrieval",
    "P2: On argmax retrieval and dictionary lookup, SSMax recovers at least 25% of "
    "the accuracy lost between N = 16 and N = 1024",
    "[ours]; SSMax: 2501.19399 [paper]",
    metric="accuracy at N = 1024",
    unit="share of the lost accuracy",
    effect="SSMax minus no norm, over the no-norm model's loss",
    sesoi=0.25,
    cells=("task", "lr"),
)
#: P2, second half: LN after the attention output recovers at most 5%.
LN_RETRIEVAL_CLAIM = Claim(
    "ch8-score-ln-retrieval",
    "P2: On argmax retrieval and dictionary lookup, LN after the attention output "
    "recovers at most 5% of the accuracy lost between N = 16 and N = 1024",
    "[ours]; LN: 2504.02827 [paper]",
    metric="accuracy at N = 1024",
    unit="share of the lost accuracy",
    effect="LN minus no norm, over the no-norm model's loss",
    sesoi=0.05,
    cells=("task", "lr"),
    test="at most",
)
#: P3 on set complement: the combination is at least as good as the better remedy.
COMBINED_SET_CLAIM = Claim(
    "ch8-score-combined-set",
    "P3: On set complement, SSMax + attn_out is at least as good as the better single "
    "remedy (within 0.01 of TV beyond L)",
    "[ours]",
    metric="TV beyond L",
    unit="TV",
    effect="SSMax + attn_out minus the better single remedy",
    sesoi=TV_SESOI,
    cells=("targets", "v", "init"),
    test="at most",
)
#: P3 on retrieval: the combination is at least as good as the better remedy.
COMBINED_RETRIEVAL_CLAIM = Claim(
    "ch8-score-combined-retrieval",
    "P3: On argmax retrieval and dictionary lookup, SSMax + LN is at least as good as "
    "the better single remedy (within 0.03 of accuracy at N = 1024)",
    "[ours]",
    metric="accuracy at N = 1024",
    unit="accuracy",
    effect="the better single remedy minus SSMax + LN",
    sesoi=0.03,
    cells=("task", "lr"),
    test="at most",
)
#: P4 on set complement: a test-time factor gains nothing.
FACTOR_SET_CLAIM = Claim(
    "ch8-score-factor-set",
    "P4: On set complement, a test-time logit factor log n / log n_train on the model "
    "without a norm gains at most 0.01 of TV beyond L",
    "[ours]; log n: 2202.12172 [paper]",
    metric="TV beyond L",
    unit="TV",
    effect="no factor minus the test-time factor",
    sesoi=TV_SESOI,
    cells=("targets", "v"),
    test="at most",
)
#: P4 on retrieval: a test-time factor gives part of SSMax's gain.
FACTOR_RETRIEVAL_CLAIM = Claim(
    "ch8-score-factor-retrieval",
    "P4: On argmax retrieval and dictionary lookup, a test-time logit factor log N / "
    "log N_train on the model without a norm recovers part (at least 5%) of the lost "
    "accuracy",
    "[ours]; log n: 2202.12172 [paper]",
    metric="accuracy at N = 1024",
    unit="share of the lost accuracy",
    effect="the test-time factor minus no factor, over the no-norm model's loss",
    sesoi=0.05,
    cells=("task", "lr"),
)
CLAIMS = (
    SHARPEN_CLAIM,
    RENORM_CLAIM,
    SSMAX_RETRIEVAL_CLAIM,
    LN_RETRIEVAL_CLAIM,
    COMBINED_SET_CLAIM,
    COMBINED_RETRIEVAL_CLAIM,
    FACTOR_SET_CLAIM,
    FACTOR_RETRIEVAL_CLAIM,
)
# P5 (part C), declared with the others; decided where ch8/depth has run (chapter 8's
# second page: its live slice, and the reference sweep). Not in CLAIMS, the first
# page's rows.
#: P5, first half: post-norm's advantage survives two layers under NoPE.
DEPTH_CLAIM = Claim(
    "ch8-score-depth",
    "P5: With two layers and no positions, post-norm still length-generalises better "
    "than pre-norm with a final LN on set complement",
    "[ours]; post-norm: 2510.08341 v2 [paper]",
    metric="TV beyond L",
    unit="TV",
    effect="pre_final minus post",
    sesoi=TV_SESOI,
    cells=("variant", "init", "lr"),
)
#: P5, second half: under RoPE set complement degrades beyond L even with a norm.
ROPE_CLAIM = Claim(
    "ch8-score-rope",
    "P5: Under RoPE, set complement degrades beyond L even with an output norm",
    "[ours]; RoPE: 2104.09864 [paper]",
    metric="TV beyond L minus TV at the training lengths",
    unit="TV",
    effect="TV beyond L minus TV at 1..L",
    sesoi=TV_SESOI,
    cells=("variant", "init", "lr"),
)
DEPTH_CLAIMS = (DEPTH_CLAIM, ROPE_CLAIM)
