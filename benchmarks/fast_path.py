"""The training loop's two paths side by side, per chapter (`python benchmarks/speed.py
--fast-path`).

For each chapter's main training, CPU ms per seed-step (one optimiser step of one seed)
on the reference path, the eager fast path and the compiled fast path, interleaved and
repeated in one process: the medians over repeats, and the speed-ups as the medians of
each repeat's ratio (the machine may be shared: only ratios measured side by side mean
much). The compile cost is what a fresh process pays (``compile_cost.py``): with an
empty inductor cache (cold: a notebook's first execution) and with a warm one (every
re-execution); and, in-process, what a later training of the same shapes pays, which
reuses the compiled step (reused: the first step's wall seconds less a steady step).
Per-step times come from an averager that only reads the clock (``train`` calls it
after every step), so the first step (data chunk, compile) is timed apart from the
rest. The arithmetic limit of a step is its matmul FLOPs (fast path: token tables for
Q/K/V and W_O in the first layer) divided by the measured throughput of a
[K, batch * pos, d] x [K, d, d] batched matmul.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from batched_training import matmul_seconds
from compile_cost import compile_cost

from lengthgen_lite.chapters import ch1_set_complement as ch1
from lengthgen_lite.chapters import ch7_beyond_set_complement as ch7
from lengthgen_lite.chapters import ch8_two_kinds as ch8
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
    """Chapters 1, 5 (post-norm, and dropout: masks passed into the compiled step), 6
    and 7 (game and a language), each with ``steps`` steps."""

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
    # chapter 5's dropout (the first paper version's remedy), both sites at 0.1
    task, model_cfg, cfg = setup("soft", "none")
    dropout = replace(model_cfg, attn_dropout=0.1, resid_dropout=0.1)
    runs.append(Run("ch5 dropout", dropout, task, cfg, 5, {}))
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


def matmul_flops(model: ModelConfig, batch: int, T: int, tables: bool) -> float:
    """Matmul FLOPs of one seed-step (forward, input and weight gradients: 3 x 2mnk
    each), every layer: Q, K, V, W_O, the attention's two products, the MLP, the
    unembedding."""
    m = model
    inner, rows = m.n_heads * m.head_dim, batch * T
    forward = rows * m.d_model * m.output_size
    for layer in range(m.n_layers):
        # tables (first layer): Q, K, V and W_O on v rows, pattern @ (V W_O) at
        # d_model per head
        table = tables and layer == 0
        forward += 4 * (m.vocab_size if table else rows) * m.d_model * inner
        # scores, then pattern @ v
        value_width = m.d_model if table else m.head_dim
        forward += batch * m.n_heads * T * T * (m.head_dim + value_width)
        forward += 2 * rows * m.d_model * m.d_mlp
    return 3 * 2 * forward


def matmul_gflops(run: Run, dtype: torch.dtype = torch.float32) -> float:
    """Measured GFLOP/s of the [K, batch * pos, d] x [K, d, d] batched matmul of
    ``run``'s shapes in ``dtype``."""
    K, batch, d = run.seeds, run.train_cfg.batch, run.model_cfg.d_model
    (T,) = run.task.train_sizes()
    return (
        2 * K * batch * T * d**2 / matmul_seconds(K, batch * T, d, d, dtype=dtype) / 1e9
    )


def fresh_compile_cost(
    make_runs: Callable[[int], list[Run]],
    index: int,
    steps: int,
    precision: str = "float32",
) -> dict[str, float]:
    """:func:`compile_cost.compile_cost` of ``make_runs(steps)[index]`` (a function of
    this module), compiled in ``precision``."""
    return compile_cost(
        f"""
from dataclasses import replace
from fast_path import {make_runs.__name__}
run = {make_runs.__name__}({steps})[{index}]
cfg = replace(run.train_cfg, steps=20, warmup=10, path="compiled")
cfg = replace(cfg, precision={precision!r})
args = (run.model_cfg, run.task, cfg, list(range(run.seeds)))
kwargs = {{"averagers": run.averagers}}
"""
    )


def fast_path(steps: int, repeats: int) -> list[dict[str, object]]:
    """One row per chapter: ms per seed-step per path (median over interleaved
    repeats), speed-ups (median of the repeats' ratios), compile cost cold and warm
    (fresh processes) and reused (in-process), break-even seed-steps (from the warm
    cost), the arithmetic limit. Needs ``repeats >= 2`` (the first compiles, later
    ones reuse)."""
    if repeats < 2:
        raise ValueError(f"repeats must be >= 2 (compile, reuse), got {repeats}")
    rows = []
    for index, run in enumerate(chapter_runs(steps)):
        ms: dict[str, list[float]] = {path: [] for path in PATHS}
        reused_s: list[float] = []
        for repeat in range(repeats):
            # each repeat starts with another path, so none always runs first or last
            # (a machine whose speed drifts would favour one)
            first = repeat % len(PATHS)
            for path in PATHS[first:] + PATHS[:first]:
                cpu_ms, step_wall, first_wall = timed(run, path)
                ms[path].append(cpu_ms)
                if path == "compiled" and repeat > 0:
                    reused_s.append(first_wall - step_wall)
        best = {path: float(np.median(values)) for path, values in ms.items()}
        ratios = {path: np.divide(ms["reference"], ms[path]) for path in PATHS}
        ratio = {path: float(np.median(values)) for path, values in ratios.items()}
        K = run.seeds
        (T,) = run.task.train_sizes()
        gflops = matmul_gflops(run)
        compiled = fresh_compile_cost(chapter_runs, index, steps)
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
                **compiled,
                "compile_reused_s": round(float(np.median(reused_s)), 2),
                # seed-steps whose saving pays a fresh process's warm compile
                "break_even_seed_steps": round(
                    1e3 * compiled["compile_warm_s"] / saving_ms
                )
                if saving_ms > 0
                else None,
                "matmul_gflops": round(gflops, 1),
                "limit_ms": round(
                    matmul_flops(run.model_cfg, run.train_cfg.batch, T, True)
                    / gflops
                    / 1e6,
                    3,
                ),
                "reference_limit_ms": round(
                    matmul_flops(run.model_cfg, run.train_cfg.batch, T, False)
                    / gflops
                    / 1e6,
                    3,
                ),
            }
        )
    return rows


# the two-layer step's variants: (path, precision)
DEPTH_VARIANTS = tuple(
    (path, precision)
    for path in ("fast", "compiled")
    for precision in ("float32", "bfloat16")
)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# /proc/cpuinfo flags of native bf16 arithmetic (x86: AVX512_BF16, AMX; ARM: BF16)
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def bf16_support() -> dict[str, object]:
    """torch's CPU capability and the CPU's native bf16 flags (None: /proc/cpuinfo not
    readable). Without them bf16 runs emulated: its speed says nothing of another
    machine's."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = None
    else:
        words = {
            word
            for line in text.splitlines()
            if line.split(":")[0].strip() in ("flags", "Features")
            for word in line.partition(":")[2].split()
        }
        flags = [flag for flag in BF16_FLAGS if flag in words]
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "bf16_flags": flags,
        "native_bf16": None if flags is None else bool(flags),
    }


def depth_runs(steps: int) -> list[Run]:
    """Chapter 8's part C (``SPECS["ch8/depth"]``: two layers, 4 heads, v = 32,
    L = 8, batch 128, sampled targets): its live configurations (d_model 64, MLP 256),
    then issue 36's wider case (d_model 128, MLP 512, the first one's norm)."""
    spec = ch8.SPECS["ch8/depth"]
    configs = list(spec.configurations())
    configs.append(replace(configs[0], d_model=128, d_mlp=512))
    return [
        Run(
            f"ch8 depth {config.norm} d={config.d_model}",
            config.model_config(),
            config.setup().task,
            replace(config, steps=steps).train_config(),
            len(spec.seeds),
            {},
        )
        for config in configs
    ]


def depth(steps: int, repeats: int, compile_costs: bool) -> list[dict[str, object]]:
    """One row per two-layer model: CPU ms per seed-step of the eager and compiled
    fast path in float32 and bfloat16 (median over interleaved repeats; speed-ups of
    bf16 the median of each repeat's ratio), each dtype's arithmetic limit (the
    step's matmul FLOPs over that dtype's measured batched-matmul throughput), and
    with ``compile_costs`` each dtype's compile cost in a fresh process."""
    rows = []
    for index, run in enumerate(depth_runs(steps)):
        ms: dict[tuple[str, str], list[float]] = {v: [] for v in DEPTH_VARIANTS}
        for repeat in range(repeats):
            first = repeat % len(DEPTH_VARIANTS)
            for path, precision in DEPTH_VARIANTS[first:] + DEPTH_VARIANTS[:first]:
                cfg = replace(run.train_cfg, precision=precision)
                cpu_ms, _, _ = timed(replace(run, train_cfg=cfg), path)
                ms[path, precision].append(cpu_ms)
        (T,) = run.task.train_sizes()
        flops = matmul_flops(run.model_cfg, run.train_cfg.batch, T, tables=True)
        gflops = {name: matmul_gflops(run, dtype) for name, dtype in DTYPES.items()}
        row: dict[str, object] = {
            "model": run.chapter,
            "seeds": run.seeds,
            "batch": run.train_cfg.batch,
            "positions": T,
            "d_model": run.model_cfg.d_model,
            "d_mlp": run.model_cfg.d_mlp,
            "n_layers": run.model_cfg.n_layers,
            **{
                f"{path}_{precision}_ms": round(float(np.median(values)), 3)
                for (path, precision), values in ms.items()
            },
            **{
                f"{path}_bf16_speedup": round(
                    float(
                        np.median(np.divide(ms[path, "float32"], ms[path, "bfloat16"]))
                    ),
                    2,
                )
                for path in ("fast", "compiled")
            },
            "repeats_ms": {
                f"{path} {precision}": [round(v, 3) for v in values]
                for (path, precision), values in ms.items()
            },
        }
        for name in DTYPES:
            row[f"matmul_gflops_{name}"] = round(gflops[name], 1)
            row[f"limit_{name}_ms"] = round(flops / gflops[name] / 1e6, 3)
        if compile_costs:
            for name in DTYPES:
                cost = fresh_compile_cost(depth_runs, index, steps, name)
                row |= {f"{key}_{name}": value for key, value in cost.items()}
        rows.append(row)
    return rows
