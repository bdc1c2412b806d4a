"""Chapter 4's retrieval trainings and their evaluation, before and after issue 36
(`python benchmarks/speed.py --retrieval`; alone: `python benchmarks/retrieval.py`).

For every configuration of chapter 4's reference sweep that costs differently (task,
norm, component; the init and learning rate change no cost), CPU ms per seed-step
(one optimiser step of one seed, ten seeds batched, the reference tier's batch) on:

- ``reference``: the plain eager loop (what the sweep ran before);
- ``query_only``: the retrieval model's ``query_forward`` (W_Q at the query only);
- ``tables``: ... with the keys and values (and an item MLP's hidden units) through
  token tables;
- ``compiled``: ... as one compiled step, the sets padded to one shape (with
  ``--compiled``);
- ``auto``: what ``train`` now picks for the reference sweep
  (``core.fast_path.plan_path``); for dictionary lookup this adds its own draws
  (``DictionaryLookup.sample_fast_batches``);
- ``layout_off``: ``auto`` with each linear weight in its usual memory order, not
  its gradient's (``core.fast_path.in_gradient_layout``): what ``auto`` was before.

The variants run interleaved and repeated in one process: ms are medians over repeats,
speed-ups medians of each repeat's ratio. Then the evaluation of one scoring (ten
models, every N from 8 to 1024, ``n_test`` test sets per N): per-model
``evaluate_retrieval`` (before) against the stacked ``evaluate_sizes`` (after), wall
seconds, medians. With ``--compiled``, the compile cost of each configuration's step
in a fresh process, cold and warm inductor cache (``compile_cost.py``).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
from compile_cost import compile_cost

from lengthgen_lite.chapters.ch4_vanishing_variance import SPECS
from lengthgen_lite.core import training
from lengthgen_lite.core.fast_path import PathPlan, plan_path
from lengthgen_lite.core.model import init_model
from lengthgen_lite.core.retrieval import (
    evaluate_retrieval,
    evaluate_sizes,
)
from lengthgen_lite.core.task_registry import task_entry
from lengthgen_lite.runs.spec import Config

SEEDS = list(range(10))  # the reference tier's
REFERENCE = PathPlan(False, False, False, False)


def cost_configs() -> list[Config]:
    """The reference sweep's configurations with distinct costs: one init and lr."""
    spec = SPECS["ch4/retrieval"].at_tier("reference")
    first = spec.configurations()[0]
    return [
        c for c in spec.configurations() if (c.init, c.lr) == (first.init, first.lr)
    ]


def plans(config: Config, compiled: bool) -> dict[str, PathPlan]:
    """The variants measured on ``config``: name -> the plan ``train`` is given."""
    query_only = replace(REFERENCE, query_only=True)
    out = {
        "reference": REFERENCE,
        "query_only": query_only,
        "tables": replace(query_only, token_tables=True),
    }
    auto = auto_plan(config)
    if compiled:
        out["compiled"] = replace(auto, compiled=True)
    out["auto"] = auto
    out["layout_off"] = replace(auto, gradient_layout=False)
    return out


def auto_plan(config: Config) -> PathPlan:
    """What ``train`` picks for ``config`` in the reference sweep."""
    return plan_path(
        config.model_config(),
        config.setup().task,
        config.train_config(),
        len(SEEDS),
        task_entry(config.task).model,
    )


def train_ms(config: Config, plan: PathPlan, steps: int) -> float:
    """CPU ms per seed-step of ``config`` trained ``steps`` steps under ``plan``."""
    entry = task_entry(config.task)
    cfg = replace(config.train_config(), steps=steps, warmup=min(steps, 100))
    original = training.plan_path
    training.plan_path = lambda *args, **kwargs: plan
    try:
        start = time.thread_time()
        training.train(
            config.model_config(),
            config.setup().task,
            cfg,
            SEEDS,
            model_class=entry.model,
            progress=False,
        )
        seconds = time.thread_time() - start
    finally:
        training.plan_path = original
    return 1e3 * seconds / (steps * len(SEEDS))


def eval_seconds(config: Config, n_test: int, stacked: bool) -> float:
    """Wall seconds of scoring ten models of ``config`` at every N."""
    setup = config.setup()
    model_cfg = config.model_config()
    models = [init_model(model_cfg, s, task_entry(config.task).model) for s in SEEDS]
    for m in models:
        m.eval()
    start = time.perf_counter()
    if stacked:
        evaluate_sizes(models, setup.task, setup.sizes, n_test, 0)
    else:
        for m in models:
            evaluate_retrieval(m, setup.task, setup.sizes, n_test, 0)
    return time.perf_counter() - start


def label(config: Config) -> str:
    norm = config.norm_kind if config.norm == "attn_out" else "none"
    parts = [config.task, norm]
    parts += ["attn_bias"] if config.attn_bias else []
    parts += [f"item_mlp {config.item_mlp}"] if config.item_mlp else []
    return " ".join(parts)


def fresh_compile_cost(index: int) -> dict[str, float]:
    """:func:`compile_cost.compile_cost` of the reference sweep's configuration
    ``index``, 20 steps, ten seeds."""
    return compile_cost(
        f"""
from dataclasses import replace
from lengthgen_lite.chapters.ch4_vanishing_variance import SPECS
from lengthgen_lite.core.task_registry import task_entry
config = SPECS["ch4/retrieval"].at_tier("reference").configurations()[{index}]
cfg = replace(config.train_config(), steps=20, warmup=10, path="compiled")
args = (config.model_config(), config.setup().task, cfg, list(range(10)))
kwargs = {{"model_class": task_entry(config.task).model}}
"""
    )


def retrieval(
    steps: int, repeats: int, n_test: int, eval_repeats: int, compiled: bool = False
) -> dict[str, object]:
    """Section 6 of ``speed.py``: one row per configuration, and the means."""
    rows = []
    for config in cost_configs():
        variants = plans(config, compiled)
        train_ms(config, auto_plan(config), 2)  # warm-up: imports, allocations
        if compiled:
            train_ms(config, variants["compiled"], 2)  # the compilation
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(repeats):
            for name, plan in variants.items():
                times[name].append(train_ms(config, plan, steps))
        evals: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(eval_repeats):
            for stacked in (False, True):
                evals[stacked].append(eval_seconds(config, n_test, stacked))
        ref = np.asarray(times["reference"])
        row = {
            "config": label(config),
            "auto_plan": variants["auto"].label,
            **{f"{n}_ms": round(float(np.median(t)), 3) for n, t in times.items()},
            **{
                f"{n}_speedup": round(float(np.median(ref / np.asarray(t))), 2)
                for n, t in times.items()
                if n != "reference"
            },
            "eval_before_s": round(float(np.median(evals[False])), 2),
            "eval_after_s": round(float(np.median(evals[True])), 2),
        }
        if compiled:
            index = SPECS["ch4/retrieval"].at_tier("reference").configurations()
            row |= fresh_compile_cost(index.index(config))
        print(row, flush=True)
        rows.append(row)
    return {
        "steps": steps,
        "repeats": repeats,
        "seeds": len(SEEDS),
        "n_test": n_test,
        "statistic": "median",
        "rows": rows,
        "mean_reference_ms": round(
            float(np.mean([r["reference_ms"] for r in rows])), 3
        ),
        "mean_auto_ms": round(float(np.mean([r["auto_ms"] for r in rows])), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-test", type=int, default=100)
    parser.add_argument("--eval-repeats", type=int, default=1)
    parser.add_argument(
        "--compiled", action="store_true", help="also the compiled step and its cost"
    )
    args = parser.parse_args()
    result = retrieval(
        args.steps, args.repeats, args.n_test, args.eval_repeats, args.compiled
    )
    print(
        f"mean over configurations: reference {result['mean_reference_ms']} ms, "
        f"auto {result['mean_auto_ms']} ms per seed-step"
    )


if __name__ == "__main__":
    main()
