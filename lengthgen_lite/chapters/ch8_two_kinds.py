"""Two kinds of dispersion: renormalise the output, or sharpen the softmax? Chapter 8.

Both papers fix length generalisation by normalising the attention *output*; the wider
literature sharpens the *softmax* with the length (Scalable-Softmax, Nakanishi 2025:
logits x s log n with s learned per head; Chiang & Cholak 2022: x log n / log
n_train). The chapter puts the two families side by side, as data:

- part A (``SPECS["ch8/set_complement"]``): set complement, where the attention is
  *correctly* uniform and the output is diluted like 1/s;
- part B (``SPECS["ch8/retrieval"]``): chapter 4's argmax retrieval and dictionary
  lookup, where the weight on the one right item fades toward 1/N;
- part C (``SPECS["ch8/depth"]``, the chapter's second page): two layers, without
  positions (NoPE) and with RoPE (:func:`depth_curves`).

The prediction, a double dissociation, is declared before any run as the claims of
:mod:`~lengthgen_lite.chapters.ch8_claims` (issue 37's P1-P4, each with its
SESOI). P4, a test-time factor log N / log N_train on the model trained without
scaling, is an evaluation axis: nothing trains for it (:func:`factor_set_values`,
:func:`factor_retrieval`; at the reference tier, the sweeps ``ch8/test_time_set``
and ``ch8/test_time_retrieval`` score the no-norm models with it). The hand-made
constructions of the proof and the slider's profiles are
:mod:`~lengthgen_lite.chapters.ch8_mechanism`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..core.task_registry import Curves, task_entry
from ..core.validation import require_choice
from ..runs import Results, Spec
from .ch1_set_complement import BASELINE
from .ch4_vanishing_variance import SPECS as CH4_SPECS

SEEDS = (0, 1, 2)
TARGETS = ("soft", "sampled")
# Part A's variants: name -> Config fields (a norm placement, a logit scale or both)
SET_VARIANTS: dict[str, dict[str, str]] = {
    "none": {"norm": "none", "logit_scale": "none"},
    "post": {"norm": "post", "logit_scale": "none"},
    "attn_out": {"norm": "attn_out", "logit_scale": "none"},
    "ssmax": {"norm": "none", "logit_scale": "ssmax"},
    "logn": {"norm": "none", "logit_scale": "logn"},
    "ssmax+attn_out": {"norm": "attn_out", "logit_scale": "ssmax"},
}
SHARPENERS = ("ssmax", "logn")  # sharpen the softmax with the length
RENORMALISERS = ("attn_out", "post")  # renormalise the output
# trained for the slider only (soft targets): the fixed factor with the output norm
SLIDER_EXTRA = {"logn+attn_out": {"norm": "attn_out", "logit_scale": "logn"}}
# the live run trains the first size; the reference sweep both (v, L)
SET_SIZES = ({"v": 16, "train_length": 4}, {"v": 32, "train_length": 8})

# Part B's variants, chapter 4's model and training (LN: a LayerNorm after the
# attention output, chapter 4's "layernorm" variant)
RETRIEVAL_VARIANTS: dict[str, dict[str, str]] = {
    "none": {"norm": "none", "logit_scale": "none"},
    "LN": {"norm": "attn_out", "logit_scale": "none"},
    "ssmax": {"norm": "none", "logit_scale": "ssmax"},
    "ssmax+LN": {"norm": "attn_out", "logit_scale": "ssmax"},
}
RETRIEVAL_TASKS = ("argmax_retrieval", "dictionary_lookup")
# chapter 4's base, 1000 steps (the reference tier trains 6000): with retrieval on the
# fast path (query-only forward, token tables, one stacked evaluation) it fits the
# chapter's time budget; before it, the live run had to stop at 500
RETRIEVAL_BASE = CH4_SPECS["ch4/retrieval"].base
N_TRAIN = 16  # the largest training set: where the lost accuracy is measured from
REFERENCE_LRS = (1e-3, 3e-3)  # chapter 1's two learning rates; live: chapter 4's 3e-3
# test sets per N: chapter 4 scores 500; 200 keep the live run in its budget (an
# accuracy's sampling error at most 0.035 per model and N)
RETRIEVAL_N_TEST = 200


def _set_configs(sizes: Sequence[Mapping[str, int]]) -> list[dict[str, object]]:
    return [
        {**size, "targets": targets, **fields}
        for size in sizes
        for targets in TARGETS
        for fields in SET_VARIANTS.values()
    ]


def _retrieval_configs(lrs: Sequence[float]) -> list[dict[str, object]]:
    return [
        {"task": task, "lr": lr, **fields}
        for task in RETRIEVAL_TASKS
        for lr in lrs
        for fields in RETRIEVAL_VARIANTS.values()
    ]


SPECS: dict[str, Spec] = {
    "ch8/set_complement": Spec(
        name="ch8/set_complement",
        description="set complement: sharpen the softmax (ssmax, logn) or renormalise "
        "the output (post, attn_out), soft and sampled targets",
        configs=_set_configs(SET_SIZES[:1])
        + [{"targets": "soft", **f} for f in SLIDER_EXTRA.values()],
        base={**BASELINE, "task": "set_complement"},
        seeds=SEEDS,
        # both sizes, the claims' variants only (10 seeds, 6000 steps, 1000 and 3000)
        reference={"configs": _set_configs(SET_SIZES)},
    ),
    "ch8/retrieval": Spec(
        name="ch8/retrieval",
        description="argmax retrieval and dictionary lookup: no norm, LN after the "
        "attention output, ssmax, ssmax + LN",
        configs=_retrieval_configs(REFERENCE_LRS[1:]),
        base=RETRIEVAL_BASE,
        seeds=SEEDS,
        n_test=RETRIEVAL_N_TEST,
        # both learning rates, a constant rate after the warm-up (chapter 4's reason:
        # a checkpoint is then the shorter run's end)
        reference={
            "configs": _retrieval_configs(REFERENCE_LRS),
            "base": {"schedule": "constant"},
        },
    ),
}


def _test_time_sweep(name: str, of: Spec) -> Spec:
    """P4's sweep: ``of``'s no-norm configurations, live and reference, the raw
    weights also scored with the test-time factor log n / log n_train (rows of variant
    "test_logn"). The same trainings as ``of``'s (same configurations and seeds): a
    factor applied after training needs the models, and the store keeps scores."""

    def no_norm(configs: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
        none = SET_VARIANTS["none"]
        return [dict(c) for c in configs if all(c[k] == v for k, v in none.items())]

    return of.with_overrides(
        name=name,
        description=f"P4: {of.name}'s no-norm models, also scored with the test-time "
        "factor log n / log n_train",
        configs=no_norm(of.configs),
        test_time=("logn",),
        reference={**of.reference, "configs": no_norm(of.reference["configs"])},
    )


SPECS["ch8/test_time_set"] = _test_time_sweep(
    "ch8/test_time_set", SPECS["ch8/set_complement"]
)
SPECS["ch8/test_time_retrieval"] = _test_time_sweep(
    "ch8/test_time_retrieval", SPECS["ch8/retrieval"]
)

# Part C: depth and positions (set complement, v = 32, L = 8, sampled targets; two
# layers, 4 heads, d_model 64, MLP 256). "ssmax" here is SSMax's factor on the pre-norm
# block with a final LN, the block most current models use (the book's choice).
DEPTH_VARIANTS: dict[str, dict[str, str]] = {
    "pre_final": {"norm": "pre_final", "logit_scale": "none"},
    "post": {"norm": "post", "logit_scale": "none"},
    "attn_out": {"norm": "attn_out", "logit_scale": "none"},
    "ssmax": {"norm": "pre_final", "logit_scale": "ssmax"},
}
POSITIONS = ("none", "rope")  # NoPE, RoPE
DEPTH_BASE = {
    "task": "set_complement",
    **SET_SIZES[1],
    "targets": "sampled",
    "n_layers": 2,
    "n_heads": 4,
    "d_mlp": 256,
}
# the live slice: post-norm against pre_final under NoPE (P5's first half), post-norm
# under RoPE (its second); the reference sweep trains the whole grid
DEPTH_LIVE = (("none", "pre_final"), ("none", "post"), ("rope", "post"))

SPECS["ch8/depth"] = Spec(
    name="ch8/depth",
    description="two layers on set complement (v = 32, L = 8, sampled targets): NoPE "
    "and RoPE x pre_final, post, attn_out, ssmax",
    configs=[{"positional": p, **DEPTH_VARIANTS[n]} for p, n in DEPTH_LIVE],
    # live: 500 steps, eagerly. `make bench`'s depth section: 17 ms per seed-step
    # eagerly, 11 compiled, and 68-83 s to compile in a fresh process with a cold
    # inductor cache, so compiling would save about 9 s of 3 seeds x 500 steps and
    # cost far more; the reference tier trains 6000 steps and its "auto" compiles
    base={**DEPTH_BASE, "train_path": "fast"},
    steps=500,
    seeds=SEEDS,
    reference={
        "configs": [
            {"positional": positional, **fields}
            for positional in POSITIONS
            for fields in DEPTH_VARIANTS.values()
        ]
    },
)


def variant_fields(variant: str, part: str = "set") -> dict[str, str]:
    """The Config fields of a variant of part "set" (A) or "retrieval" (B)."""
    table = {"set": {**SET_VARIANTS, **SLIDER_EXTRA}, "retrieval": RETRIEVAL_VARIANTS}
    require_choice("part", part, tuple(table))
    return table[part][require_choice("variant", variant, tuple(table[part]))]


def set_values(
    results: Results, column: str, targets: str, variant: str, **where: object
) -> np.ndarray:
    """``column`` ("tv_beyond") of one part-A variant, one value per seed: [K]."""
    fields = variant_fields(variant)
    return results.values(column, targets=targets, **fields, **where)


def set_curves(
    results: Results, metric: str, targets: str, variants: Sequence[str]
) -> dict[str, np.ndarray]:
    """Per-length ``metric`` of each part-A variant: name -> [K, len(s)]."""
    return {
        name: results.curves(metric, targets=targets, **variant_fields(name))
        for name in variants
    }


def depth_curves(
    results: Results, metric: str, positional: str
) -> dict[str, np.ndarray]:
    """Per-length ``metric`` of each part-C placement ``results`` trained under
    ``positional`` ("none" or "rope"): name -> [K, len(s)]. Only the placements it has
    (the live slice: three of the reference sweep's eight)."""
    require_choice("positional", positional, POSITIONS)
    return {
        name: results.curves(metric, positional=positional, **fields)
        for name, fields in DEPTH_VARIANTS.items()
        if results.select(positional=positional, **fields)
    }


def retrieval_curves(
    results: Results, task: str, metric: str = "accuracy", **where: object
) -> dict[str, np.ndarray]:
    """Per-N ``metric`` of each part-B variant of ``task``: name -> [K, len(N)]."""
    require_choice("task", task, RETRIEVAL_TASKS)
    return {
        name: results.curves(metric, task=task, **fields, **where)
        for name, fields in RETRIEVAL_VARIANTS.items()
    }


def at_size(
    results: Results, curves: np.ndarray, N: int, **where: object
) -> np.ndarray:
    """The column of ``curves`` [K, len(N)] at set size ``N``: [K]."""
    sizes = [int(n) for n in results.lengths(**where)]
    if N not in sizes:
        raise ValueError(f"N={N!r} was not evaluated; allowed: {sizes}")
    return curves[:, sizes.index(N)]


def _test_time_logn(results: Results, **where: object) -> Curves:
    """The models ``where`` selects (one configuration of a live run) scored with the
    test-time factor log n / log n_train, as a spec's ``test_time`` scores them."""
    config = results.configs[results.select(**where)[0]["config"]]
    evaluate = task_entry(config.task).evaluate_test_time["logn"]
    models = results.result(**where).models
    spec = results.spec
    return evaluate(models, config.setup(), spec.n_test, spec.eval_seed)


def factor_set_values(results: Results, targets: str) -> np.ndarray:
    """P4 on set complement (live run): TV beyond L of the no-norm models with the
    test-time factor: [K]."""
    where = {"targets": targets, **SET_VARIANTS["none"]}
    curves = _test_time_logn(results, **where)
    L = results.train_length[results.select(**where)[0]["config"]]
    beyond = np.asarray(curves["s"]) > L
    return np.asarray(curves["tv"])[:, beyond].mean(axis=1)


def factor_retrieval(results: Results) -> dict[str, np.ndarray]:
    """P4 on retrieval (live run): every task's no-norm models' accuracy at every N
    with the test-time factor log N / log N_train: task -> [K, len(N)]."""
    out = {}
    for task in RETRIEVAL_TASKS:
        curves = _test_time_logn(results, task=task, **RETRIEVAL_VARIANTS["none"])
        out[task] = np.asarray(curves["accuracy"])
    return out
