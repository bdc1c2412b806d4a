"""Vanishing variance (chapter 4): the retrieval experiments (spec, per-N evaluation,
interventions), the distribution-shift statistics, and the claims they decide. The
Monte-Carlo law is :mod:`~lengthgen_lite.chapters.ch4_law`'s.

The retrieval model itself (``RetrievalTransformer``, ``retrieval_config``), the two
tasks and their per-N evaluation live in :mod:`lengthgen_lite.core.retrieval`. The
experiment is declared as data (``SPECS["ch4/retrieval"]``: two tasks x three variants,
no norm, LayerNorm or standardization after the attention output);
:func:`~lengthgen_lite.runs.runner.run` trains each configuration's seeds in one
batched call and reads every model at every set size N with the tasks' registered
evaluation (``core.retrieval.evaluate_sizes``): accuracy, attention, and the shift
statistics before (``blocks.0.hook_attn_out``) and after
(``blocks.0.ln_attn_out.hook_normalized``) the norm. :func:`field` and :func:`fields`
read them back from the ``Results``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ..core.evaluation import ATTN_OUT
from ..core.hooks import hook_names
from ..core.retrieval import (
    EVAL_CHUNK,
    N_COMPONENTS,
    NORMED,
    RETRIEVAL_VARIANTS,
    ArgmaxRetrieval,
    RetrievalTable,
    RetrievalTask,
    evaluate_retrieval,
    forward_chunked,
)
from ..core.seeding import make_generator
from ..core.training import TrainResult
from ..core.validation import is_int, require_int
from ..runs import Results, Spec
from ..runs.claims import Claim, Decision, Effect
from .ch1_set_complement import REFERENCE_AXES

TEST_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


@torch.no_grad()
def attention_output_samples(
    model: nn.Module,
    task: RetrievalTask,
    N: int,
    n_samples: int = 500,
    seed: int = 0,
    chunk: int = EVAL_CHUNK,
) -> tuple[Tensor, Tensor | None]:
    """The query's attention output on ``n_samples`` test sets of size N, before and
    after the norm: ([samples, d_model], [samples, d_model] or None without a norm).
    Same test sets as evaluate_retrieval."""
    require_int("chunk", chunk, minimum=1)  # test sets per forward
    normed = NORMED in hook_names(model)
    batch = task.sample_train_batch(n_samples, N, make_generator(seed * 100_003 + N))
    _, cache = forward_chunked(
        model, batch.inputs, [ATTN_OUT] + ([NORMED] if normed else []), chunk
    )
    return cache[ATTN_OUT][:, -1], cache[NORMED][:, -1] if normed else None


# the notebook's task names -> the registry's (core.task_registry.TASKS)
TASK_IDS = {
    "argmax retrieval": "argmax_retrieval",
    "dictionary lookup": "dictionary_lookup",
}


SEEDS = (0, 1, 2)


# The reviewers' components, each against its absence in every cell, and the variants
# each is trained with: an item MLP (hidden width) for argmax retrieval, with every
# variant (LayerNorm's claim must hold with it); biases on W_V/W_O for the mean drift,
# without a norm only (the drift is read before the norm, and only without one does it
# reach what comes after).
ITEM_MLP = 64


ALL_VARIANTS = tuple(RETRIEVAL_VARIANTS)


REFERENCE_COMPONENTS: dict[
    str, tuple[tuple[dict[str, object], tuple[str, ...]], ...]
] = {
    "argmax_retrieval": (
        ({}, ALL_VARIANTS),
        ({"attn_bias": True}, ("baseline",)),
        ({"item_mlp": ITEM_MLP}, ALL_VARIANTS),
    ),
    "dictionary_lookup": (({}, ALL_VARIANTS), ({"attn_bias": True}, ("baseline",))),
}


def reference_configs() -> list[dict[str, object]]:
    """The reference sweep's configurations: per task, its components x their variants
    x init x lr (chapter 1's ``REFERENCE_AXES``; a list, not a grid: a variant is two
    fields, and the item MLP is argmax retrieval's only).

    Constant learning rate after the warm-up, not the live run's cosine: a checkpoint
    of a constant-rate run is the shorter run's end, so the checkpoints are honest
    budgets (the steps axis) and the store's re-run check can retrain one seed to the
    first checkpoint; the two learning rates stand in for the annealed one."""
    return [
        {
            "task": task,
            **component,
            **RETRIEVAL_VARIANTS[variant],
            "init": init,
            "lr": lr,
        }
        for task, components in REFERENCE_COMPONENTS.items()
        for component, variants in components
        for variant in variants
        for init, lr in itertools.product(*REFERENCE_AXES.values())
    ]


SPECS: dict[str, Spec] = {
    "ch4/retrieval": Spec(
        name="ch4/retrieval",
        description=(
            "argmax retrieval and dictionary lookup: no norm, LayerNorm or "
            "standardization after the attention output"
        ),
        configs=[
            {"task": task, **fields}
            for task in TASK_IDS.values()
            for fields in RETRIEVAL_VARIANTS.values()
        ],
        # core.retrieval.retrieval_config's model (d_model 64, 4 heads, MLP 256); the
        # book's training (the paper gives none): N ~ U{2..16}, AdamW, cosine schedule
        base={
            "n_heads": 4,
            "d_mlp": 256,
            "steps": 1000,
            "batch": 64,
            "lr": 3e-3,
            "warmup": 100,
            "schedule": "cosine",
            "weight_decay": 0.01,
            "test_length": TEST_SIZES[-1],
        },
        seeds=SEEDS,
        n_test=500,  # test sets per N, the same for every model
        reference={"configs": reference_configs(), "base": {"schedule": "constant"}},
    )
}


def field(results: Results, name: str, task: str, variant: str) -> np.ndarray:
    """One per-size field of one trained variant: [K, len(N)] (``feature_var``: [K,
    len(N), 3]). ``task`` is the notebook's name ("dictionary lookup"), ``variant`` one
    of ``RETRIEVAL_VARIANTS``."""
    if task not in TASK_IDS or variant not in RETRIEVAL_VARIANTS:
        raise ValueError(
            f"task={task!r}, variant={variant!r} is unknown; allowed: tasks "
            f"{tuple(TASK_IDS)}, variants {tuple(RETRIEVAL_VARIANTS)}"
        )
    where = {"task": TASK_IDS[task], **RETRIEVAL_VARIANTS[variant]}
    if name.removeprefix("normed_") == "feature_var":
        return np.stack(
            [results.curves(f"{name}_{j}", **where) for j in range(N_COMPONENTS)], -1
        )
    return results.curves(name, **where)


def fields(results: Results, name: str) -> dict[str, dict[str, np.ndarray]]:
    """``name`` of every task and variant: task -> variant -> [K, len(N)]."""
    return {
        t: {v: field(results, name, t, v) for v in RETRIEVAL_VARIANTS} for t in TASK_IDS
    }


def trained(results: Results, task: str, variant: str) -> TrainResult:
    """The trained models and losses of one task and variant (in memory only)."""
    field(results, "accuracy", task, variant)  # the names' check
    return results.result(task=TASK_IDS[task], **RETRIEVAL_VARIANTS[variant])


def final_losses(results: Results, last: int = 50) -> dict[tuple[str, str], np.ndarray]:
    """Each model's training loss averaged over the ``last`` steps: (task, variant) ->
    [K]."""
    return {
        (t, v): trained(results, t, v).loss[-last:].mean(0)
        for t in TASK_IDS
        for v in RETRIEVAL_VARIANTS
    }


def evaluate_rescaled(
    model: nn.Module,
    task: RetrievalTask,
    sizes: Sequence[int],
    attn_out_rms: np.ndarray,
    n_samples: int = 500,
    seed: int = 0,
    reference_size: int = 16,
) -> RetrievalTable:
    """Re-evaluate on the same test sets with the attention output rescaled, at every
    N, to the mean RMS it had at ``reference_size`` (a training size): a norm bolted on
    at test time. ``attn_out_rms`` [len(sizes)] is the model's own (its table's)."""
    sizes = [int(n) for n in sizes]
    if reference_size not in sizes:
        raise ValueError(
            f"reference_size={reference_size} is not among the sizes {sizes}"
        )
    scale = attn_out_rms[sizes.index(reference_size)] / np.asarray(attn_out_rms)
    return evaluate_retrieval(
        model, task, sizes, n_samples=n_samples, seed=seed, scale=list(scale)
    )


def rescaled_accuracy(results: Results, task: str) -> np.ndarray:
    """The baseline of ``task`` with its attention output rescaled at test time
    (:func:`evaluate_rescaled`), on the runner's test sets: accuracy [K, len(N)]."""
    spec, sizes = results.spec, results.lengths(task=TASK_IDS[task])
    rms = field(results, "attn_out_rms", task, "baseline")
    setup = next(c for c in results.configs if c.task == TASK_IDS[task]).setup()
    return np.stack(
        [
            evaluate_rescaled(
                m, setup.task, sizes, rms[k], spec.n_test, spec.eval_seed
            ).accuracy
            for k, m in enumerate(trained(results, task, "baseline").models)
        ]
    )


@dataclass(frozen=True)
class NearMisses:
    """How argmax retrieval goes wrong at one N."""

    error_rate: float
    # among errors: the predicted label is held by one of the runner-up items
    near_miss: float
    # the same for a uniformly random wrong label: 1 - (1 - 1/n_classes)^runners_up
    chance: float


@torch.no_grad()
def argmax_near_misses(
    model: nn.Module,
    task: ArgmaxRetrieval,
    N: int,
    n_samples: int = 500,
    seed: int = 0,
    runners_up: int = 4,
    chunk: int = EVAL_CHUNK,
) -> NearMisses:
    """Are the errors confusions with the next-highest priorities (near-ties), or
    arbitrary?"""
    if not is_int(runners_up) or not 1 <= runners_up < N:
        raise ValueError(
            f"runners_up must be an int in 1..N-1 = 1..{N - 1}, got {runners_up!r}"
        )
    require_int("chunk", chunk, minimum=1)  # test sets per forward
    batch = task.sample_train_batch(n_samples, N, make_generator(seed * 100_003 + N))
    # [samples]
    predicted = forward_chunked(model, batch.inputs, [], chunk)[0][:, -1].argmax(-1)
    # items by priority
    order = batch.inputs[:, :-1, 0].argsort(dim=-1, descending=True)
    # [samples, runners_up]
    labels = batch.inputs[:, :-1, 1].long().gather(1, order[:, 1 : 1 + runners_up])
    wrong = predicted != batch.targets[:, -1].argmax(-1)
    held = (labels == predicted.unsqueeze(-1)).any(-1)
    return NearMisses(
        error_rate=wrong.float().mean().item(),
        near_miss=held[wrong].float().mean().item() if wrong.any() else float("nan"),
        chance=1 - (1 - 1 / task.n_classes) ** runners_up,
    )


def end_ratio(x: np.ndarray) -> np.ndarray:
    """Value at the largest N over value at the smallest, per seed: [K, len(N), ...] ->
    [K, ...]."""
    return x[:, -1] / x[:, 0]


def seed_se(x: np.ndarray) -> float:
    """Standard error of the mean over seeds of ``x`` [K]."""
    return float(np.std(x, ddof=1) / np.sqrt(len(x)))


def paired_gains(
    accuracy: dict[str, dict[str, np.ndarray]],
) -> dict[str, dict[str, np.ndarray]]:
    """Per task, each normed variant's accuracy minus the baseline's on the same test
    sets: [K, len(N)]."""
    return {
        t: {v: acc[v] - acc["baseline"] for v in ("layernorm", "standardize")}
        for t, acc in accuracy.items()
    }


def sampling_bounds(n_sets: int, K: int, n_long: int) -> tuple[float, float]:
    """Standard errors of a paired accuracy difference on ``n_sets`` shared sets (at
    most sqrt(1 / n_sets), every set discordant), and of its mean over K seeds and
    ``n_long`` sizes."""
    pair_se = np.sqrt(1 / n_sets)
    return pair_se, pair_se / np.sqrt(K * n_long)


def live_cell(results: Results, axes: Sequence[str]) -> dict[str, object]:
    """The live run's one cell of a claim's grid: its configuration's value of every
    axis in ``axes`` (the same in every configuration of the live spec)."""
    config = results.configs[0]
    return {a: getattr(config, a) for a in axes}


def layernorm_share(accuracy: np.ndarray, baseline: np.ndarray, at16: int) -> float:
    """The share of the accuracy the baseline loses between N = 16 (index ``at16``) and
    the largest N that LayerNorm's paired gain at the largest N brings back (means over
    seeds). ``accuracy``, ``baseline``: [K, len(N)]."""
    lost = (baseline[:, at16] - baseline[:, -1]).mean()
    return float((accuracy[:, -1] - baseline[:, -1]).mean() / lost)


def layernorm_decisions(
    results: Results, accuracy: dict[str, dict[str, np.ndarray]]
) -> dict[str, Decision]:
    """:data:`LN_DICT_CLAIM` and :data:`LN_ARGMAX_CLAIM` decided on the live run, per
    task: LayerNorm's paired accuracy gain at the largest N over the seeds, in the live
    run's one cell (item MLP x init x learning rate), at its one budget."""
    step, at16 = results.configs[0].steps, list(results.lengths()).index(16)
    out = {}
    claims = {"dictionary lookup": LN_DICT_CLAIM, "argmax retrieval": LN_ARGMAX_CLAIM}
    for task, claim in claims.items():
        acc = accuracy[task]
        gain = acc["layernorm"][:, -1] - acc["baseline"][:, -1]
        effect = Effect.of(gain, step, **live_cell(results, claim.cells))
        share = layernorm_share(acc["layernorm"], acc["baseline"], at16)
        detail = (
            f"{share:.2f} of the accuracy the baseline loses from N = 16 recovered; "
            f"{results.spec.n_test} test sets per N"
        )
        out[task] = claim.decide([effect], "live", detail=detail)
    return out


# the bar for the norm's effect on the shift: the variance ratio after it over the ratio
# before it (the reference's shift claim uses the same bar)
SHIFT_RAISED = 1.5


def shift_effects(shift: ShiftRatios, results: Results) -> list[Effect]:
    """:data:`SHIFT_CLAIM`'s live cells, as the reference reads them: per task and norm
    kind, two parts, each per seed: the norm *reduces* the shift (the median per-feature
    variance ratio after the norm minus ``SHIFT_RAISED`` times the ratio before it) and
    only *partly* (1 minus the ratio after it)."""
    step = results.configs[0].steps
    cell = live_cell(results, ("item_mlp", "init", "lr"))
    effects = []
    for part in ("raised", "still below 1"):
        for (task, variant), after in shift.after.items():
            before = shift.before[task, variant]
            values = after - SHIFT_RAISED * before if part == "raised" else 1 - after
            where = {
                "task": TASK_IDS[task],
                "norm_kind": RETRIEVAL_VARIANTS[variant]["norm_kind"],
            }
            effects.append(Effect.of(values, step, **where, **cell, part=part))
    return effects


@dataclass(frozen=True)
class ShiftRatios:
    """The shift statistics of every trained model, N = 1024 over N = 8
    (:func:`end_ratio`), keyed by (task, variant); each value has the seeds on its first
    axis."""

    median_ratio_se: float  # standard error of a median per-feature variance ratio
    # median per-feature variance ratio before the norm [K]
    before: dict[tuple[str, str], np.ndarray]
    after: dict[tuple[str, str], np.ndarray]  # ... after it (normed variants only) [K]
    # global variance ratio before the norm [K]
    global_ratio: dict[tuple[str, str], np.ndarray]
    fixed: dict[str, np.ndarray]  # per task, baseline: components 0..2 [K, len(N), 3]
    # global variance after the norm [K, len(N)]
    pinned: dict[tuple[str, str], np.ndarray]
    # |global mean change| / its spread at N = 8, every variant [K]
    drift: dict[tuple[str, str], np.ndarray]

    def pinned_change(self, task: str) -> np.ndarray:
        """LayerNorm: the largest log-change of the normed global variance over N, per
        seed [K]."""
        pinned = self.pinned[task, "layernorm"]
        return np.abs(np.log(pinned / pinned[:, :1])).max(1)


def mean_drift(global_mean: np.ndarray, global_var: np.ndarray) -> np.ndarray:
    """How far the attention output's global mean moves from the smallest N to the
    largest, in units of its spread at the smallest: [K] from [K, len(N)] each."""
    return np.abs(global_mean[:, -1] - global_mean[:, 0]) / np.sqrt(global_var[:, 0])


def shift_ratios(results: Results, d_model: int = 64) -> ShiftRatios:
    """:class:`ShiftRatios` of every task and variant of ``results``, tested on
    ``spec.n_test`` sets per N. A variance over n sets has relative standard error
    sqrt(2 / (n - 1)); a ratio of two, sqrt(4 / (n - 1)) (9 % at 500); the median over
    d_model components about 1.25 / sqrt(d_model) of that, if they were independent."""
    before, after, global_ratio, fixed, pinned, drift = {}, {}, {}, {}, {}, {}
    for t in TASK_IDS:
        fixed[t] = field(results, "feature_var", t, "baseline")
        for v in RETRIEVAL_VARIANTS:
            before[t, v] = end_ratio(field(results, "median_feature_var", t, v))
            mean, var = (field(results, k, t, v) for k in ("global_mean", "global_var"))
            global_ratio[t, v] = end_ratio(var)
            drift[t, v] = mean_drift(mean, var)
            if v != "baseline":
                after[t, v] = end_ratio(
                    field(results, "normed_median_feature_var", t, v)
                )
                pinned[t, v] = field(results, "normed_global_var", t, v)
    n_sets = results.spec.n_test
    se = 1.25 * np.sqrt(4 / (n_sets - 1)) / np.sqrt(d_model)
    return ShiftRatios(se, before, after, global_ratio, fixed, pinned, drift)


@dataclass(frozen=True)
class AttentionCollapse:
    """How attention on the correct item and N_eff change with N, per task (every
    variant)."""

    # |normed - baseline| / baseline of the seed means [len(N)]
    normed_gap: dict[tuple[str, str], np.ndarray]
    # (range over seeds, normed + baseline) / baseline [len(N)]
    seed_spread: dict[tuple[str, str], np.ndarray]
    # mean over variants and seeds of the mass at the largest N
    target_at_largest: dict[str, float]
    neff_at_largest: dict[str, float]  # ... of N_eff
    # argmax: the normed variants' N_eff at the largest N over the baseline's (min)
    neff_ratio_argmax: float


def attention_collapse(results: Results) -> AttentionCollapse:
    """:class:`AttentionCollapse` of every task and variant of ``results`` (fields
    ``target_attention``, ``n_eff``)."""
    mass, neff = fields(results, "target_attention"), fields(results, "n_eff")
    normed_gap, seed_spread, target, neff_end = {}, {}, {}, {}
    for t in TASK_IDS:
        base_runs = mass[t]["baseline"]
        base = base_runs.mean(0)
        for v in ("layernorm", "standardize"):
            runs_v = mass[t][v]
            normed_gap[t, v] = np.abs(runs_v.mean(0) - base) / base
            seed_spread[t, v] = (
                np.ptp(runs_v, axis=0) + np.ptp(base_runs, axis=0)
            ) / base
        target[t] = float(np.mean([m[:, -1].mean() for m in mass[t].values()]))
        neff_end[t] = float(np.mean([n[:, -1].mean() for n in neff[t].values()]))
    a = neff["argmax retrieval"]
    ratio = min(
        a[v][:, -1].mean() / a["baseline"][:, -1].mean()
        for v in ("layernorm", "standardize")
    )
    return AttentionCollapse(normed_gap, seed_spread, target, neff_end, float(ratio))


# The chapter's scorecard claims, declared once (book/scorecard.md).
# SESOI: 0.03 of accuracy (three queries in a hundred) for the retrieval tasks; 0.05 for
# a dimensionless ratio of variances or a drift in units of the feature spread.
#: The scorecard claim ch4-score-ln-dict, declared once.
LN_DICT_CLAIM = Claim(
    "ch4-score-ln-dict",
    "LayerNorm after attention improves length generalisation: dictionary lookup",
    "2504.02827 [paper]",
    metric="accuracy at the largest N",
    unit="accuracy",
    effect="LayerNorm minus no norm",
    sesoi=0.03,
    cells=("item_mlp", "init", "lr"),
)


#: The scorecard claim ch4-score-ln-argmax, declared once.
LN_ARGMAX_CLAIM = Claim(
    "ch4-score-ln-argmax",
    "LayerNorm after attention improves length generalisation: argmax retrieval",
    "2504.02827 [paper]",
    metric="accuracy at the largest N",
    unit="accuracy",
    effect="LayerNorm minus no norm",
    sesoi=0.03,
    cells=("item_mlp", "init", "lr"),
)


#: The scorecard claim ch4-score-shift, declared once.
SHIFT_CLAIM = Claim(
    "ch4-score-shift",
    "LayerNorm reduces the distribution shift only partially",
    "2504.02827 [paper]",
    metric="median per-feature variance ratio, largest N over smallest",
    unit="ratio",
    effect=f"after the norm minus {SHIFT_RAISED} x before, and 1 minus after",
    sesoi=0.05,
    cells=("task", "norm_kind", "item_mlp", "init", "lr", "part"),
)


#: The scorecard claim ch4-score-mean-drift, declared once.
MEAN_DRIFT_CLAIM = Claim(
    "ch4-score-mean-drift",
    "The global mean of the attention output drifts with N",
    "2504.02827 [secondary]",
    # Measured in SmolLM2 (ch4_llama.mean_drift_effects), not in the retrieval toys:
    # there biases on W_V/W_O cannot make a drift (the attention weights sum to 1, so
    # they add the same constant at every N).
    metric="SmolLM2-135M's attention output after W_O at the last position: its "
    "global mean (over the 576 components), N = 512 against N = 8, per sequence",
    unit="global spreads at N = 8",
    # the signed drift's t-interval over sequences, reflected to the side its estimate
    # fell on (ch4_llama.drift_interval): a drift can go either way
    effect="size of the drift",
    sesoi=0.05,
    cells=("input", "layer"),
    replicates="sequences",
)
