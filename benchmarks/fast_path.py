"""The training loop's two paths side by side, per chapter (`python benchmarks/speed.py
--fast-path`).

For each chapter's main training, CPU ms per seed-step (one optimiser step of one seed)
on the reference path, the eager fast path and the compiled fast path, interleaved and
repeated in one process: the medians over repeats, and the speed-ups as the medians of
each repeat's ratio (the machine may be shared: only ratios measured side by side mean
much). The compile cost is the first compiled step's wall seconds less a steady step:
with an empty inductor cache (cold), with a warm cache but a fresh trace (warm: a new
process, e.g. a notebook re-executed), and in a later training of the same shapes, which
reuses the compiled step (reused). Per-step times come from an averager that only reads
the clock (``train`` calls it after every step), so the first step (data chunk, compile)
is timed apart from the rest. The arithmetic limit of a step is its matmul FLOPs (fast
path: token tables for Q/K/V and W_O) divided by the measured throughput of a
[K, batch * pos, d] x [K, d, d] batched matmul.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
from batched_training import matmul_seconds

from lengthgen_lite.chapters import ch1_set_complement as ch1
from lengthgen_lite.chapters import ch7_beyond_set_complement as ch7
from lengthgen_lite.core import fast_path as core_fast_path
from lengthgen_lite.core.averaging import make_bema, make_ema
from lengthgen_lite.core.fast_path import plan_path
from lengthgen_lite.core.model import ModelConfig
from lengthgen_lite.core.tasks import Task
from lengthgen_lite.core.training import (
    AveragerFactory,
    StackedParams,
    TrainConfig,
    train,
)

PATHS = ("reference", "fast", "compiled")


@dataclass(frozen=True)
class Run:
    """A chapter's main training: what the chapter's own runner passes to ``train``."""

    chapter: str
    model_cfg: ModelConfig
    task: Task
    train_cfg: TrainConfig
    seeds: int
    averagers: dict[str, AveragerFactory]


def chapter_runs(steps: int) -> list[Run]:
    """Chapters 1, 5, 6 and 7 (game and a language), each with ``steps`` steps."""

    def setup(targets: str, norm: str) -> tuple[Task, ModelConfig, TrainConfig]:
        task, model_cfg, cfg = ch1.baseline_setup(targets, norm)
        return task, model_cfg, replace(cfg, steps=steps)

    runs = []
    for chapter, targets, norm, averagers in (
        ("ch1 baseline", "soft", "none", {}),
        ("ch5 post-norm", "soft", "post", {}),
        (
            "ch6 EMA/BEMA",
            "sampled",
            "attn_out",
            {"ema": make_ema(0.99), "bema": make_bema()},
        ),
    ):
        task, model_cfg, cfg = setup(targets, norm)
        runs.append(
            Run(
                chapter,
                model_cfg,
                task,
                cfg,
                3 if chapter.startswith("ch6") else 5,
                averagers,
            )
        )
    for name in ("tictactoe", "dyck1"):
        s = ch7.task_setup(name)
        model_cfg = ModelConfig(
            vocab_size=s.task.vocab_size,
            n_outputs=s.task.n_outputs,
            d_model=s.d_model,
            norm="none",
        )
        cfg = TrainConfig(steps=steps, batch=64, warmup=50, targets="sampled")
        runs.append(
            Run(
                f"ch7 {name}",
                model_cfg,
                s.task,
                cfg,
                len(ch7.SEEDS),
                {"ema": make_ema(ch7.EMA_BETA)},
            )
        )
    return runs


class StepClock:
    """An 'averager' that only records the clocks after each step (and reports the
    weights as they are)."""

    def __init__(self, params: StackedParams):
        self.params, self.cpu, self.wall = (
            params,
            [time.thread_time()],
            [time.perf_counter()],
        )

    def update(self, params: StackedParams, step: int) -> None:
        self.cpu.append(time.thread_time())
        self.wall.append(time.perf_counter())

    def averaged(self) -> StackedParams:
        return self.params


def timed(run: Run, path: str) -> tuple[float, float, float]:
    """(steady CPU ms per seed-step, steady wall s per step, first step's wall s) of one
    training."""
    clocks: list[StepClock] = []

    def clock(params: StackedParams) -> StepClock:
        clocks.append(StepClock(params))
        return clocks[-1]

    cfg = replace(run.train_cfg, path=path)
    train(
        run.model_cfg,
        run.task,
        cfg,
        list(range(run.seeds)),
        averagers={**run.averagers, "clock": clock},
        progress=False,
    )
    cpu, wall = np.diff(clocks[0].cpu), np.diff(clocks[0].wall)
    return 1e3 * cpu[1:].mean() / run.seeds, float(np.median(wall[1:])), float(wall[0])


def matmul_flops(run: Run, tables: bool) -> float:
    """Matmul FLOPs of one seed-step (forward, input and weight gradients: 3 x 2mnk
    each), one layer."""
    m, batch = run.model_cfg, run.train_cfg.batch
    (T,) = run.task.train_sizes()
    inner, rows = m.n_heads * m.head_dim, batch * T
    # tables: Q, K, V and W_O on v rows, pattern @ (V W_O) at d_model per head
    table_rows = m.vocab_size if tables else rows
    forward = (
        3 * table_rows * m.d_model * inner
        + table_rows * inner * m.d_model
        + rows * m.d_model * m.output_size
    )
    value_width = m.d_model if tables else m.head_dim
    # scores, then pattern @ v
    forward += batch * m.n_heads * T * T * (m.head_dim + value_width)
    return 3 * 2 * forward


def fast_path(steps: int, repeats: int) -> list[dict[str, object]]:
    """One row per chapter: ms per seed-step per path (median over interleaved
    repeats), speed-ups (median of the repeats' ratios), compile cost cold, warm and
    reused, break-even seed-steps, the arithmetic limit. Needs ``repeats >= 3`` (cold,
    warm, reused)."""
    if repeats < 3:
        raise ValueError(f"repeats must be >= 3 (cold, warm, reused), got {repeats}")
    rows = []
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    for run in chapter_runs(steps):
        ms: dict[str, list[float]] = {path: [] for path in PATHS}
        compile_s: list[float] = []
        with tempfile.TemporaryDirectory() as cold:
            # the first compiled training compiles from scratch
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cold
            for repeat in range(repeats):
                # each repeat starts with another path, so none always runs first
                # or last (a machine whose speed drifts would favour one)
                first = repeat % len(PATHS)
                for path in PATHS[first:] + PATHS[:first]:
                    if path == "compiled" and repeat < 2:
                        # trace again (cold, then warm: as a new process would);
                        # later repeats reuse the step
                        core_fast_path._COMPILED.clear()
                        torch._dynamo.reset()
                    cpu_ms, step_wall, first_wall = timed(run, path)
                    ms[path].append(cpu_ms)
                    if path == "compiled":
                        compile_s.append(first_wall - step_wall)
        best = {path: float(np.median(values)) for path, values in ms.items()}
        ratios = {path: np.divide(ms["reference"], ms[path]) for path in PATHS}
        ratio = {path: float(np.median(values)) for path, values in ratios.items()}
        K = run.seeds
        (T,) = run.task.train_sizes()
        gflops = (
            2
            * K
            * run.train_cfg.batch
            * T
            * run.model_cfg.d_model**2
            / matmul_seconds(
                K, run.train_cfg.batch * T, run.model_cfg.d_model, run.model_cfg.d_model
            )
            / 1e9
        )
        warm, reused = compile_s[1], float(np.median(compile_s[2:]))
        saving_ms = best["fast"] - best["compiled"]
        rows.append(
            {
                "chapter": run.chapter,
                "seeds": K,
                "batch": run.train_cfg.batch,
                "positions": T,
                "d_model": run.model_cfg.d_model,
                "targets": run.train_cfg.targets,
                "plan": plan_path(
                    run.model_cfg, run.task, replace(run.train_cfg, path="compiled"), K
                ).label,
                **{f"{path}_ms": round(value, 3) for path, value in best.items()},
                "fast_speedup": round(ratio["fast"], 2),
                "compiled_speedup": round(ratio["compiled"], 2),
                # the lowest and highest of the repeats' own ratios
                "compiled_speedup_range": [
                    round(float(ratios["compiled"].min()), 2),
                    round(float(ratios["compiled"].max()), 2),
                ],
                # every repeat, in order: ms per seed-step per path
                "repeats_ms": {
                    path: [round(v, 3) for v in values] for path, values in ms.items()
                },
                "compile_cold_s": round(compile_s[0], 1),
                "compile_warm_s": round(warm, 1),
                "compile_reused_s": round(reused, 2),
                "break_even_seed_steps": round(1e3 * warm / saving_ms)
                if saving_ms > 0
                else None,
                "matmul_gflops": round(gflops, 1),
                "limit_ms": round(matmul_flops(run, tables=True) / gflops / 1e6, 3),
                "reference_limit_ms": round(
                    matmul_flops(run, tables=False) / gflops / 1e6, 3
                ),
            }
        )
    if cache is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR")
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    return rows
