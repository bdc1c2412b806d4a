"""The one runner: ``run(spec)`` trains every configuration of a spec and scores it per
length.

Each configuration's seeds train as one batched
:func:`~lengthgen_lite.core.training.train` call, with the spec's averagers (EMA, BEMA)
riding along; the raw and the averaged weights are then scored at every length on one
fixed test set per task, so seeds differ only in their weights.

What a task trains (its model class) and how it is scored are its entry in the core's
task registry (:data:`~lengthgen_lite.core.task_registry.TASKS`), not a separate runner:
set complement at every logit scale of the spec, the game and the languages per length
(:func:`~lengthgen_lite.core.evaluation.evaluate_lengths`), chapter 4's retrieval tasks
per set size N (:func:`~lengthgen_lite.core.retrieval.evaluate_sizes`; ``s`` is then
N). Every registered task runs without any chapter being imported.

``backend="ray"`` sends each configuration (or group of seeds) to a Ray task with one
torch thread (``RAY_ENV``); a seed's result does not depend on the backend. Ray is an
optional extra, imported only when asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from torch import nn

from ..core.task_registry import Setup, TaskEntry, task_entry
from ..core.training import TrainResult, train
from ..core.validation import require_choice, require_int
from .results import Results, provenance
from .spec import Spec

BACKENDS = ("local", "ray")
RAY_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}  # one torch thread per Ray worker


def _score(
    variants: dict[str, list[nn.Module]], setup: Setup, entry: TaskEntry, spec: Spec
) -> dict[tuple[str, float], tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Every variant's models scored by the task's registered evaluation, and the raw
    models with each of the spec's test-time factors (variant ``test_<name>``, scale
    1.0): (variant, logit scale) -> (s, metric -> [K, len(s)])."""
    scored = {
        (variant, scale): curves
        for variant, models in variants.items()
        for scale, curves in entry.evaluate(
            models, setup, spec.n_test, spec.eval_seed, spec.scales
        ).items()
    }
    for name in spec.test_time:
        evaluate = entry.evaluate_test_time[name]
        curves = evaluate(variants["raw"], setup, spec.n_test, spec.eval_seed)
        scored[f"test_{name}", 1.0] = curves
    out = {}
    for key, curves in scored.items():
        s = np.asarray(curves["s"])
        shape = (len(variants["raw"]), len(s))
        metrics = {
            name: np.broadcast_to(np.asarray(value, dtype=float), shape)
            for name, value in curves.items()
            if name != "s"
        }
        out[key] = (s, metrics)
    return out


def run_configuration(
    spec: Spec, index: int, seeds: Sequence[int] | None = None, progress: bool = True
) -> tuple[list[dict[str, Any]], TrainResult]:
    """Train configuration ``index`` of ``spec`` on ``seeds`` (default: the spec's) and
    score it."""
    config = spec.configurations()[index]
    entry = task_entry(config.task)
    seeds = list(spec.seeds if seeds is None else seeds)
    setup = config.setup()
    desc = f"{spec.name}: {config.label(spec.varying())}"
    result = train(
        config.model_config(),
        setup.task,
        config.train_config(),
        seeds,
        model_class=entry.model,
        averagers=spec.averager_factories(),
        progress=progress,
        desc=desc,
        checkpoints=spec.checkpoints,
    )
    rows = []
    weights = result.checkpoints | {
        config.steps: {"raw": result.models, **result.averaged}
    }
    for step, variants in weights.items():
        for (variant, scale), (s, metrics) in _score(
            variants, setup, entry, spec
        ).items():
            for k, seed in enumerate(result.seeds):
                row = {
                    "config": index,
                    "variant": variant,
                    "seed": int(seed),
                    "scale": scale,
                    "step": step,
                    "s": [int(x) for x in s],
                }
                rows.append(
                    row | {m: [float(x) for x in v[k]] for m, v in metrics.items()}
                )
    return rows, result


def _run_unit(
    data: dict, index: int, seeds: list[int], progress: bool
) -> tuple[list, np.ndarray, float]:
    """What one Ray task runs: plain data in and out: the rows, the training losses
    [steps, seeds] and the wall time."""
    start = time.perf_counter()
    rows, result = run_configuration(Spec.from_dict(data), index, seeds, progress)
    return rows, result.loss, time.perf_counter() - start


def check_run_options(
    backend: str,
    seeds_per_task: int | None = None,
    ray_address: str | None = None,
    ray_num_cpus: int | None = None,
    names: Mapping[str, str] | None = None,
) -> None:
    """Validate :func:`run`'s options before any training starts. ``names`` spells an
    option as the caller's user typed it (the command line's ``--ray-cpus``), so an
    error names what the user can change."""
    options = {
        "seeds_per_task": seeds_per_task,
        "ray_address": ray_address,
        "ray_num_cpus": ray_num_cpus,
    }
    name = {key: key for key in ("backend", *options)} | dict(names or {})
    require_choice(name["backend"], backend, BACKENDS)
    if backend == "local":
        for key, value in options.items():
            if value is not None:
                raise ValueError(
                    f"{name[key]}={value!r} is invalid; allowed: only with "
                    f"{name['backend']}='ray'"
                )
    for key in ("seeds_per_task", "ray_num_cpus"):
        if options[key] is not None:
            require_int(name[key], options[key], 1)
    if ray_address is not None and ray_num_cpus is not None:
        raise ValueError(
            f"{name['ray_num_cpus']} must be unset when {name['ray_address']} is "
            "given (the cluster has its own CPUs)"
        )
    if ray_address is not None and (
        not isinstance(ray_address, str) or not ray_address
    ):
        raise ValueError(
            f"{name['ray_address']}={ray_address!r} is invalid; allowed: an address "
            "such as 'auto'"
        )


def sort_rows(spec: Spec, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table order: configuration, step, variant
    (:meth:`~lengthgen_lite.runs.spec.Spec.variants`), logit
    scale, seed."""
    variants = list(spec.variants())
    return sorted(
        rows,
        key=lambda r: (
            r["config"],
            r["step"],
            variants.index(r["variant"]),
            r["scale"],
            r["seed"],
        ),
    )


def ray_units(
    spec: Spec,
    units: list,
    progress: bool,
    address: str | None,
    num_cpus: int | None,
    on_done: Callable[[int, tuple], None] | None = None,
) -> list[tuple[list, np.ndarray, float]]:
    """Run ``units`` (configuration index, seeds) as Ray tasks: each one's rows, losses
    and wall time, in the units' order. ``on_done(unit, output)`` is called as each
    finishes (a sweep saves it at once)."""
    try:
        import ray
    except ImportError:
        raise ImportError(
            "backend='ray' needs Ray, an optional extra: pip install "
            "'lengthgen_lite[ray]'"
        ) from None
    started = not ray.is_initialized()
    if started:
        if address is None:  # a local cluster on this machine
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=progress)
        else:
            ray.init(address=address, log_to_driver=progress)
    try:
        remote = ray.remote(_run_unit).options(
            num_cpus=1, runtime_env={"env_vars": RAY_ENV}
        )
        data = spec.to_dict()
        pending = {
            remote.remote(data, i, seeds, progress): n
            for n, (i, seeds) in enumerate(units)
        }
        outputs: dict[int, tuple] = {}
        while pending:
            [ready], _ = ray.wait(list(pending), num_returns=1)
            n = pending.pop(ready)
            outputs[n] = ray.get(ready)
            if on_done is not None:
                on_done(n, outputs[n])
        return [outputs[n] for n in range(len(units))]
    finally:
        if started:
            ray.shutdown()


def run(
    spec: Spec,
    backend: str = "local",
    progress: bool = True,
    *,
    seeds_per_task: int | None = None,
    ray_address: str | None = None,
    ray_num_cpus: int | None = None,
    command: str | None = None,
) -> Results:
    """Train and score every configuration of ``spec``; rows in configuration order.

    ``backend="local"`` trains in this process and keeps the trained models
    (``Results.result(...)``). ``backend="ray"`` runs each configuration as a Ray task
    (split into groups of ``seeds_per_task`` seeds if given) on the cluster at
    ``ray_address`` or on a local one of ``ray_num_cpus`` CPUs started here; only the
    rows come back.
    """
    if not isinstance(spec, Spec):
        raise ValueError(
            f"spec={spec!r} is invalid; allowed: a Spec (e.g. a chapter's SPECS[name])"
        )
    check_run_options(backend, seeds_per_task, ray_address, ray_num_cpus)
    start = time.perf_counter()
    n_configs = len(spec.configurations())
    trained: dict[int, TrainResult] = {}
    if backend == "local":
        parts = []
        for i in range(n_configs):
            rows, trained[i] = run_configuration(spec, i, progress=progress)
            parts.append(rows)
    else:
        size = len(spec.seeds) if seeds_per_task is None else seeds_per_task
        groups = [
            list(spec.seeds[i : i + size]) for i in range(0, len(spec.seeds), size)
        ]
        units = [(i, group) for i in range(n_configs) for group in groups]
        outputs = ray_units(spec, units, progress, ray_address, ray_num_cpus)
        parts = [rows for rows, _, _ in outputs]
    rows = sort_rows(spec, [row for part in parts for row in part])
    wall = time.perf_counter() - start
    return Results(spec, rows, provenance(wall, command), trained)


__all__ = [
    "BACKENDS",
    "RAY_ENV",
    "check_run_options",
    "ray_units",
    "run",
    "run_configuration",
    "sort_rows",
]
