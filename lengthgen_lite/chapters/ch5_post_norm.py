"""Norm placements on set complement: the chapter's specs, its readers and its
scorecard. Chapter 5.

Every run is the chapter-1 baseline (:mod:`~lengthgen_lite.chapters.ch1_set_complement`)
with only the norm placement (and, for the first paper version's remedy, dropout or an
MLP) changed, declared in ``SPECS`` and trained by
:func:`~lengthgen_lite.runs.runner.run` (a configuration's seeds in one batched call);
the readers below take its ``Results``. What the output norm does, measured on one
model (the gap profile, the frozen divisor), is
:mod:`~lengthgen_lite.chapters.ch5_mechanism`; :func:`profiles` measures every trained
model with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from ..core.model import PLACEMENTS, ModelConfig
from ..core.tasks import SetComplement
from ..core.training import TrainConfig
from ..core.validation import require_choice
from ..runs import Config, Results, Spec
from ..runs.claims import TV_SESOI, Claim, Decision, Effect, cell_word
from ..runs.compare import collapsed, paired_effects
from .ch1_set_complement import BASELINE, REFERENCE_AXES, SEEDS, TRAIN_LENGTH
from .ch1_set_complement import book_choices as ch1_choices
from .ch3_construction import ln_gap
from .ch5_mechanism import OUTPUT_NORM, GapProfile, gap_profile, growth, stack_profile

TARGETS = ("soft", "sampled")
#: the live run's one cell of the reference grid's init x learning rate
LIVE_CELL = {"init": Config(**BASELINE).init, "lr": Config(**BASELINE).lr}
DROPOUT_KINDS = ("attn_dropout", "resid_dropout")
# (target kind, dropout kind, rate) on the model without a norm: the first paper
# version's remedy
DROPOUT = (
    ("soft", "attn_dropout", 0.1),
    ("soft", "attn_dropout", 0.3),
    ("soft", "resid_dropout", 0.1),
    ("soft", "resid_dropout", 0.3),
    ("sampled", "attn_dropout", 0.1),
    ("sampled", "resid_dropout", 0.1),
)

SPECS: dict[str, Spec] = {
    "ch5/placements": Spec(
        name="ch5/placements",
        description="every norm placement on chapter 1's baseline, soft and sampled "
        "targets",
        grid={"targets": TARGETS, "norm": PLACEMENTS},
        base=BASELINE,
        seeds=SEEDS,
        # the reference sweep keeps the placements the scorecard's claims compare
        reference={"grid": {"norm": ("none", "post", "attn_out"), **REFERENCE_AXES}},
    ),
    "ch5/deeper": Spec(
        name="ch5/deeper",
        description="post against pre_final with an MLP (d_mlp = 128), sampled targets",
        grid={"norm": ("post", "pre_final")},
        base={**BASELINE, "targets": "sampled", "d_mlp": 128},
        seeds=SEEDS,
    ),
    "ch5/dropout": Spec(
        name="ch5/dropout",
        description="dropout on the model without a norm (the v1 remedy)",
        configs=[{"targets": targets, kind: p} for targets, kind, p in DROPOUT],
        base={**BASELINE, "norm": "none"},
        seeds=SEEDS,
        # the reference tier crosses both kinds at every rate (0: the baseline, in
        # the same sweep) with the init axis
        reference={
            "configs": [],
            "grid": {
                "targets": TARGETS,
                "attn_dropout": (0.0, 0.1, 0.3),
                "resid_dropout": (0.0, 0.1, 0.3),
                "init": REFERENCE_AXES["init"],
            },
        },
    ),
}


def curves(
    results: Results, targets: str, metric: str, norms: Sequence[str] = PLACEMENTS
) -> dict[str, np.ndarray]:
    """Per-length ``metric`` of each placement: norm -> [K, len(s)]."""
    return {norm: results.curves(metric, targets=targets, norm=norm) for norm in norms}


def per_seed(results: Results, column: str, targets: str, norm: str) -> np.ndarray:
    """``column`` (e.g. "tv_beyond") of one placement and target kind, one value per
    seed: [K]."""
    return results.values(column, targets=targets, norm=norm)


def _seed_rows(
    results: Results, column: str, seeds: Sequence[int], **where: object
) -> np.ndarray:
    values = results.values(column, **where)
    order = results.seeds_of(**where)
    return np.array([values[order.index(seed)] for seed in seeds])


def dropout_values(
    placements: Results,
    dropout: Results,
    column: str,
    targets: str,
    kind: str,
    p: float,
) -> np.ndarray:
    """``column`` of the no-norm model with dropout ``kind`` at rate ``p``, per seed of
    ``dropout``.

    ``p = 0`` reads the no-dropout baseline from ``placements`` on the same seeds, so a
    comparison reads both sides on the same seeds.
    """
    require_choice("kind", kind, DROPOUT_KINDS)
    if p == 0:
        return _seed_rows(
            placements, column, dropout.seeds, targets=targets, norm="none"
        )
    return dropout.values(column, targets=targets, **{kind: float(p)})


def dropout_rows(
    placements: Results, dropout: Results, columns: Sequence[str]
) -> list[dict]:
    """The dropout table's rows: per target kind, the no-dropout baseline (same seeds),
    then each dropout setting; columns targets, attn_dropout, resid_dropout, seed and
    ``columns``."""
    keys = ("targets", "norm", *DROPOUT_KINDS)
    base = [
        r
        for r in placements.summary(columns, keys, norm="none")
        if r["seed"] in dropout.seeds
    ]
    rows = dropout.summary(columns, keys)
    return [
        row for targets in TARGETS for row in base + rows if row["targets"] == targets
    ]


def profiles(
    results: Results, n_sequences: int = 2000
) -> dict[tuple[str, str], list[GapProfile]]:
    """:func:`~lengthgen_lite.chapters.ch5_mechanism.gap_profile` of every trained
    model: (targets, norm) -> one profile per seed."""
    return {
        (targets, norm): [
            gap_profile(m, n_sequences)
            for m in results.result(targets=targets, norm=norm).models
        ]
        for targets in TARGETS
        for norm in PLACEMENTS
    }


def ratio(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]],
    targets: str,
    norm: str,
    field: str = "gap",
) -> np.ndarray:
    """s x ``field`` at the longest s over s = 1, per seed (1: the 1/s law): see
    :func:`~lengthgen_lite.chapters.ch5_mechanism.growth`."""
    return growth(profiles[(targets, norm)], field)


def relative(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]],
    targets: str,
    norm: str,
    field: str,
) -> np.ndarray:
    """``field`` of each seed divided by its value at s = 1: [K, len(s)]."""
    values = stack_profile(profiles[(targets, norm)], field)
    return values / values[:, :1]


def book_choices(
    task: SetComplement, model_cfg: ModelConfig, train_cfg: TrainConfig
) -> dict[str, object]:
    """The setup table's rows: chapter 1's baseline (its
    :func:`~lengthgen_lite.chapters.ch1_set_complement.book_choices`) with the rows this
    chapter varies or keeps fixed (all the book's choice)."""
    base = ch1_choices(task, model_cfg, train_cfg)
    model = ("v", "training lengths s", "d_model", "layers", "heads")
    return {
        **{key: base[key] for key in model},
        "MLP": "none",
        "norm kind": f"{model_cfg.norm_kind} (gain and bias)",
        **{key: base[key] for key in ("steps", "lr", "batch")},
        "seeds": len(SEEDS),
    }


def entropy_floor(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]],
) -> np.ndarray:
    """Each model's smallest attention entropy / log s over s >= 2 (at s = 1 there is no
    choice): [configurations, seeds]."""
    return np.stack(
        [
            stack_profile(p, "entropy_ratio")[:, 1:].min(axis=1)
            for p in profiles.values()
        ]
    )


def sharpness(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]],
) -> dict[tuple[str, str], tuple[float, float]]:
    """(targets, norm) -> (smallest H/log s at s >= 2, largest s x attention weight),
    over that configuration's seeds and lengths: how far the pattern is from uniform."""
    return {
        key: (
            stack_profile(p, "entropy_ratio")[:, 1:].min(),
            stack_profile(p, "max_attention_ratio").max(),
        )
        for key, p in profiles.items()
    }


def peak_at_longest(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]], targets: str, norm: str
) -> float:
    """s x the largest attention weight at the longest s, mean over seeds (1:
    uniform)."""
    return stack_profile(profiles[(targets, norm)], "max_attention_ratio")[:, -1].mean()


def frozen_tolerance(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]],
) -> float:
    """What "back to the no-norm behaviour" allows: a tenth of the smallest mean growth
    an output norm adds over the model without a norm (soft targets)."""
    none = ratio(profiles, "soft", "none").mean()
    return 0.1 * min(
        ratio(profiles, "soft", norm).mean() - none for norm in OUTPUT_NORM
    )


def divisor_laws(v: int) -> tuple[np.ndarray, np.ndarray]:
    """Chapter 3's laws at every s = 1..v-1: the LN gap ``v / sqrt(s (v - s))``, and
    the ratio of the attention output's spread to its value at s = 1,
    ``sigma_h(s) / sigma_h(1) = sqrt((v - s) / (s (v - 1)))`` (what the output norm
    divides by, relative to s = 1)."""
    s = np.arange(1, v)
    gap = np.array([ln_gap(v, int(k)) for k in s])
    return gap, (1 / s) / gap / ((1 / s[0]) / gap[0])


def post_and_pre_final(
    placements: Results, deeper: Results
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """TV beyond the training lengths of post and pre_final (sampled targets), per seed
    of ``deeper``: (one layer, with the MLP), each norm -> [K], on the same seeds."""
    norms = ("post", "pre_final")
    one_layer = {
        norm: _seed_rows(
            placements, "tv_beyond", deeper.seeds, targets="sampled", norm=norm
        )
        for norm in norms
    }
    with_mlp = {norm: deeper.values("tv_beyond", norm=norm) for norm in norms}
    return one_layer, with_mlp


def deeper_effects(placements: Results, deeper: Results) -> dict[str, Effect]:
    """Post minus pre_final TV beyond the training lengths (sampled targets), paired
    over the seeds of ``deeper`` (> 0: pre_final better): "one layer" (the placements
    run) and "with MLP"."""
    one_layer, with_mlp = post_and_pre_final(placements, deeper)
    step = deeper.configs[0].steps
    return {
        model: Effect.of(values["post"] - values["pre_final"], step, model=model)
        for model, values in (("one layer", one_layer), ("with MLP", with_mlp))
    }


def deeper_words(placements: Results, deeper: Results) -> dict[str, str]:
    """The protocol's word for each of :func:`deeper_effects` at
    :data:`~lengthgen_lite.runs.claims.TV_SESOI`: "helps" (pre_final ahead, its 95%
    interval above 0 and the estimate at least the SESOI), "equivalent" (TOST: the 90%
    interval inside ±SESOI), "hurts" (post ahead) or "inconclusive"."""
    return {
        model: cell_word(effect, TV_SESOI)
        for model, effect in deeper_effects(placements, deeper).items()
    }


def dropout_curves(
    placements: Results, dropout: Results, targets: str
) -> dict[str, np.ndarray]:
    """Per-length TV of the no-norm model without dropout (the seeds of ``dropout``)
    and with each dropout setting for ``targets``: label -> [K, len(s)]."""
    require_choice("targets", targets, TARGETS)
    none = placements.curves("tv", targets=targets, norm="none")
    curves = {"no dropout": none[: len(dropout.seeds)]}
    curves |= {
        f"{kind}={p:g}": dropout.curves("tv", targets=targets, **{kind: p})
        for t, kind, p in DROPOUT
        if t == targets
    }
    return curves


def _means(results: Results, targets: str, norms: Sequence[str]) -> str:
    return ", ".join(
        f"{per_seed(results, 'tv_beyond', targets, n).mean():.3f} {n}" for n in norms
    )


def postnorm_claim(results: Results) -> Decision:
    """Scorecard: post-norm length-generalises better than no norm, decided by
    :data:`POSTNORM_CLAIM` on the live run: no norm minus post-norm TV beyond the
    training lengths, paired over seeds, one cell per target kind (at the book's init
    and learning rate, :data:`LIVE_CELL`)."""
    effects = paired_effects(
        results, "tv_beyond", treated={"norm": "post"}, control={"norm": "none"}
    )
    effects = [dataclasses.replace(e, cell=e.cell | LIVE_CELL) for e in effects]
    L, longest = TRAIN_LENGTH, int(results.lengths()[-1])
    detail = f"mean TV at s = {L + 1}..{longest}: " + "; ".join(
        f"{t} targets {_means(results, t, ('none', 'post', 'attn_out'))}"
        for t in TARGETS
    )
    return POSTNORM_CLAIM.decide(effects, "live", detail=detail)


#: H/log s above this at every s >= 2: near-uniform (the book's threshold)
NEAR_UNIFORM = 0.85
#: the bar for a restored gap: s x gap at the longest s over s = 1 (the 1/s law gives 1)
GAP_RESTORED = 1.5


def resharpen_effects(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]], placements: Results
) -> list[Effect]:
    """The two parts of "Post-Norm resharpens attention" on the post-norm models of
    ``placements`` (``profiles``: theirs), per seed, one cell per target kind, as the
    reference reads them: "gap restored" (s x gap at the longest s over s = 1, minus
    :data:`GAP_RESTORED`) and "attention sharpened" (:data:`NEAR_UNIFORM` minus the
    smallest entropy / log s at s >= 2); each > 0 where that part holds."""
    effects = []
    for targets in TARGETS:
        post = profiles[(targets, "post")]
        entropy = stack_profile(post, "entropy_ratio")[:, 1:].min(axis=1)
        parts = {
            "gap restored": growth(post) - GAP_RESTORED,
            "attention sharpened": NEAR_UNIFORM - entropy,
        }
        where = {"targets": targets, "norm": "post"}
        step = placements.configs[placements.select(**where)[0]["config"]].steps
        unstable = int(collapsed(placements, **where).sum())
        cell = {"targets": targets, **LIVE_CELL}
        effects += [
            dataclasses.replace(
                Effect.of(values, step, **cell, part=part), unstable=unstable
            )
            for part, values in parts.items()
        ]
    return effects


def resharpen_claim(
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]], placements: Results
) -> Decision:
    """Scorecard: "Post-Norm resharpens attention", decided by :data:`RESHARPEN_CLAIM`
    on the live run's post-norm models (:func:`resharpen_effects`: the gap restored,
    the attention sharpened). The detail adds this chapter's intervention: the growth
    with the norm's divisor frozen."""
    post, frozen = (ratio(profiles, "soft", "post", f) for f in ("gap", "frozen_gap"))
    none = ratio(profiles, "soft", "none")
    entropy = min(
        stack_profile(profiles[(t, "post")], "entropy_ratio")[:, 1:].min()
        for t in TARGETS
    )
    s = profiles[("soft", "post")][0].s
    detail = (
        f"post, soft targets: s x gap at s = {s[-1]} / s = 1 = {post.mean():.2f} "
        f"(no norm {none.mean():.2f}; divisor frozen {frozen.mean():.2f}); "
        f"post's attention entropy >= {entropy:.2f} of log s"
    )
    effects = resharpen_effects(profiles, placements)
    return RESHARPEN_CLAIM.decide(effects, "live", detail)


def dropout_changes(placements: Results, dropout: Results) -> np.ndarray:
    """TV beyond with dropout minus without, per setting of ``DROPOUT`` and seed:
    [settings, seeds]."""
    return np.stack(
        [
            dropout_values(placements, dropout, "tv_beyond", t, k, p)
            - dropout_values(placements, dropout, "tv_beyond", t, k, 0.0)
            for t, k, p in DROPOUT
        ]
    )


def dropout_train_effects(
    placements: Results, dropout: Results
) -> dict[str, list[Effect]]:
    """At the training lengths: dropout minus no dropout TV (``tv_train``), paired over
    the seeds of ``dropout`` (> 0: worse with dropout), one cell per setting of
    ``DROPOUT``: target kind -> its settings' effects."""
    out: dict[str, list[Effect]] = {}
    for targets, kind, p in DROPOUT:
        with_p, base = (
            dropout_values(placements, dropout, "tv_train", targets, kind, q)
            for q in (p, 0.0)
        )
        step = dropout.configs[0].steps
        effect = Effect.of(with_p - base, step, targets=targets, **{kind: p})
        out.setdefault(targets, []).append(effect)
    return out


def dropout_claim(placements: Results, dropout: Results) -> Decision:
    """Scorecard: v1's "more dropout counteracts dispersion", on the no-norm model,
    decided by :data:`DROPOUT_CLAIM` on the live run: no dropout minus dropout TV
    beyond the training lengths, paired over seeds, one cell per setting of
    ``DROPOUT`` (target kind, dropout kind and rate)."""
    changes = dropout_changes(placements, dropout)  # > 0: worse with dropout
    effects = []
    for (targets, kind, p), change in zip(DROPOUT, changes):
        rates = {k: (p if k == kind else 0.0) for k in DROPOUT_KINDS}
        where = {"targets": targets, kind: p}
        step = dropout.configs[dropout.select(**where)[0]["config"]].steps
        seeds = dropout.seeds_of(**where)
        unstable = collapsed(dropout, **where) | collapsed(
            placements, seeds, targets=targets, norm="none"
        )
        cell = {"targets": targets, **rates, "init": LIVE_CELL["init"]}
        effect = Effect.of(-change, step, **cell)
        effects.append(dataclasses.replace(effect, unstable=int(unstable.sum())))
    base = dropout_values(placements, dropout, "tv_beyond", "soft", "attn_dropout", 0)
    soft = [
        dropout_values(placements, dropout, "tv_beyond", t, k, p).mean()
        for t, k, p in DROPOUT
        if t == "soft"
    ]
    L, longest = TRAIN_LENGTH, int(placements.lengths()[-1])
    detail = (
        f"no norm, mean TV at s = {L + 1}..{longest}, soft targets: "
        f"{base.mean():.3f} without dropout, {min(soft):.3f}-{max(soft):.3f} with"
    )
    return DROPOUT_CLAIM.decide(effects, "live", detail=detail)


def scorecard(
    placements: Results,
    profiles: Mapping[tuple[str, str], Sequence[GapProfile]],
    dropout: Results,
) -> list[Decision]:
    """The chapter's three scorecard rows, decided on the live run."""
    return [
        postnorm_claim(placements),
        resharpen_claim(profiles, placements),
        dropout_claim(placements, dropout),
    ]


def words_by(decision: Decision, field: str) -> dict[object, list[str]]:
    """The cells' words at the last budget, grouped by one cell field (``"part"`` of
    :func:`resharpen_claim`): value -> words, in the cells' order."""
    if not any(field in e.cell for e in decision.final):
        fields = sorted({k for e in decision.final for k in e.cell})
        raise ValueError(
            f"no cell of {decision.claim.key} has {field!r}; allowed: {fields}"
        )
    out: dict[object, list[str]] = {}
    for effect, word in zip(decision.final, decision.words):
        out.setdefault(effect.cell.get(field), []).append(word)
    return out


def attn_out_lead(placements: Results) -> list[Effect]:
    """How far LN on the attention output is ahead of post-norm: post minus attn_out
    TV beyond the training lengths, paired over seeds, per cell and budget (> 0:
    attn_out better). For the reference sweep (``reference.load("ch5/placements")``,
    cells target kind x init x learning rate, checkpoints 1000, 3000, 6000) or a live
    run."""
    return paired_effects(
        placements, "tv_beyond", treated={"norm": "attn_out"}, control={"norm": "post"}
    )


# The chapter's scorecard claims, declared once (book/scorecard.md).
# SESOI: 0.01 of TV beyond the training lengths; 0.05 of a dimensionless ratio (the
# gap's growth against its bar, the attention entropy over log s against its line).
#: The scorecard claim ch5-score-postnorm, declared once.
POSTNORM_CLAIM = Claim(
    "ch5-score-postnorm",
    "Post-Norm length-generalises better on set complement",
    "2510.08341 v2 [paper]",
    metric="TV beyond L",
    unit="TV",
    effect="no norm minus post-norm",
    sesoi=TV_SESOI,
    cells=("targets", "init", "lr"),
)
#: The scorecard claim ch5-score-resharpen, declared once.
RESHARPEN_CLAIM = Claim(
    "ch5-score-resharpen",
    "Post-Norm resharpens attention",
    "2510.08341 v2 [paper]",
    metric="s x gap growth; attention entropy / log s",
    unit="ratio",
    effect=f"growth minus {GAP_RESTORED}, and {NEAR_UNIFORM} minus the entropy ratio",
    sesoi=0.05,
    cells=("part", "targets", "init", "lr"),
)
#: The scorecard claim ch5-score-dropout, declared once.
DROPOUT_CLAIM = Claim(
    "ch5-score-dropout",
    "Dropout counteracts dispersion",
    "2510.08341 v1 [paper]",
    metric="TV beyond L",
    unit="TV",
    effect="no dropout minus dropout",
    sesoi=TV_SESOI,
    cells=("attn_dropout", "resid_dropout", "targets", "init"),
)
