"""The speed page's figures: what each chapter costs, and what batching seeds buys
(book/speed.ipynb).

Both read the results file that `make bench` writes (`benchmarks/speed.py`); nothing
here measures.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..core.fast_path import COMPILE_TOKEN_STEPS
from .common import panels, plain_log_ticks


def _check_rows(
    rows: Sequence[Mapping[str, Any]], needed: Sequence[str], what: str
) -> None:
    if not rows:
        raise ValueError(f"no {what} rows to plot")
    missing = sorted({key for row in rows for key in needed if key not in row})
    if missing:
        raise ValueError(f"{what} rows lack {missing}; each row needs {list(needed)}")


def plot_chapter_costs(
    rows: Sequence[Mapping[str, Any]], *, budget: float | None = None, title: str
) -> Figure:
    """Wall and CPU seconds per chapter (bars), with an optional per-chapter budget
    line."""
    _check_rows(rows, ("chapter", "wall_seconds", "cpu_seconds"), "chapter")
    fig, (ax,) = panels(1, width=8.0, height=3.6, title=title)
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["wall_seconds"] for r in rows], width=0.4, label="wall")
    ax.bar(x + 0.2, [r["cpu_seconds"] for r in rows], width=0.4, label="CPU (kernel)")
    if budget is not None:
        ax.axhline(
            budget,
            color="0.3",
            linestyle="--",
            linewidth=1,
            label=f"budget {budget:g} s",
        )
    ax.set_xticks(x, [r["chapter"].split("_", 1)[0] for r in rows])
    ax.set_xlabel("chapter")
    ax.set_ylabel("seconds, one torch thread")
    ax.legend(fontsize="small")
    return fig


def plot_batching(rows: Sequence[Mapping[str, Any]], *, title: str) -> Figure:
    """Left: CPU ms per step of all K seeds, loop against batched; right: the speed-up,
    per batch size."""
    _check_rows(
        rows,
        ("batch", "seeds", "loop_ms_per_step", "batched_ms_per_step", "speedup"),
        "batching",
    )
    fig, (left, right) = panels(2, width=5.0, height=3.6, title=title)
    for batch in sorted({r["batch"] for r in rows}):
        mine = sorted(
            (r for r in rows if r["batch"] == batch), key=lambda r: r["seeds"]
        )
        k = [r["seeds"] for r in mine]
        (line,) = left.plot(
            k,
            [r["loop_ms_per_step"] for r in mine],
            marker="o",
            label=f"loop, batch {batch}",
        )
        left.plot(
            k,
            [r["batched_ms_per_step"] for r in mine],
            marker="s",
            linestyle="--",
            color=line.get_color(),
            label=f"batched, batch {batch}",
        )
        right.plot(
            k,
            [r["speedup"] for r in mine],
            marker="o",
            color=line.get_color(),
            label=f"batch {batch}",
        )
    for ax in (left, right):
        ax.set_xlabel("seeds K trained together")
        ax.set_xticks(sorted({r["seeds"] for r in rows}))
        ax.legend(fontsize="small")
    left.set_ylabel("CPU ms per step of all K seeds")
    left.set_title("Loop over seeds against one batched training")
    right.set_ylabel("speed-up (loop time / batched time)")
    right.set_title("What batching buys")
    right.axhline(1.0, color="0.5", linewidth=0.8)
    return fig


FAST_PATH_BARS = (
    ("reference_ms", "reference path"),
    ("fast_ms", "fast path, eager"),
    ("compiled_ms", "fast path, compiled"),
)


def plot_fast_path(rows: Sequence[Mapping[str, Any]], *, title: str) -> Figure:
    """CPU ms per seed-step of each chapter's main training on each path (bars, log
    scale), with the arithmetic limit of a fast-path step (matmul FLOPs over measured
    matmul throughput) as a tick."""
    _check_rows(
        rows, ("chapter", "limit_ms", *(key for key, _ in FAST_PATH_BARS)), "fast-path"
    )
    fig, (ax,) = panels(1, width=8.0, height=3.8, title=title)
    x = np.arange(len(rows))
    width = 0.8 / len(FAST_PATH_BARS)
    for i, (key, label) in enumerate(FAST_PATH_BARS):
        ax.bar(x + (i - 1) * width, [r[key] for r in rows], width=width, label=label)
    ax.scatter(
        x + width,
        [r["limit_ms"] for r in rows],
        marker="_",
        s=400,
        color="0.2",
        zorder=3,
        label="arithmetic limit (matmul FLOPs / measured GFLOP/s)",
    )
    ax.set_yscale("log")
    plain_log_ticks(ax)
    ax.set_xticks(x, [r["chapter"] for r in rows])
    ax.set_xlabel("chapter's main training")
    ax.set_ylabel("CPU ms per seed-step, one thread")
    ax.legend(fontsize="small")
    return fig


def load_results(path: str | pathlib.Path) -> dict[str, Any]:
    """The results file that `make bench` writes (``benchmarks/results/speed.json``)."""
    return json.loads(pathlib.Path(path).read_text())


def machine_summary(machine: Mapping[str, Any]) -> dict[str, Any]:
    """The machine the benchmarks ran on, as the speed page lists it (label ->
    value)."""
    return {
        "CPU": machine["cpu"],
        "cores": machine["cores"],
        "torch threads": machine["torch_threads"],
        "load average before (1, 5, 15 min)": machine["load_before"],
        "after": machine["load_after"],
    }


def load_text(load: Sequence[float]) -> str:
    """Load averages as the prose quotes them: ``"0.5, 0.7, 0.9"``."""
    return ", ".join(f"{x:.1f}" for x in load)


def batching_numbers(results: Mapping[str, Any]) -> dict[str, Any]:
    """The batching numbers the speed page quotes (glue name -> value)."""
    import pandas as pd

    batching = pd.DataFrame(results["batching"])
    wide = batching.set_index(["batch", "seeds"])
    best = results["matmul_bound"]
    small = batching["batch"].min()
    at_k = batching[batching["seeds"] == best["seeds"]]
    return {
        "speed-k": best["seeds"],
        "speed-batch": best["batch"],
        "speed-x": round(float(wide.loc[(best["batch"], best["seeds"]), "speedup"]), 1),
        "speed-x-small": round(float(wide.loc[(small, best["seeds"]), "speedup"]), 1),
        "speed-small-batch": int(small),
        "speed-bound": round(float(best["speedup_bound"]), 1),
        "speed-matmul-ms": round(float(best["batched_matmul_ms_per_step"]), 1),
        "speed-other-ms": round(float(best["batched_other_ops_ms_per_step"]), 1),
        "speed-pays-most": int(at_k.loc[at_k["speedup"].idxmax(), "batch"]),
    }


# the columns of the fast-path table, in the page's order
FAST_PATH_COLUMNS = (
    "seeds",
    "batch",
    "positions",
    "targets",
    "reference_ms",
    "fast_ms",
    "compiled_ms",
    "fast_speedup",
    "compiled_speedup",
    "compile_cold_s",
    "compile_warm_s",
    "compile_reused_s",
    "break_even_seed_steps",
    "limit_ms",
)


def fast_path_numbers(
    fast: Mapping[str, Any], chapter: str = "ch5 post-norm"
) -> dict[str, Any]:
    """The fast-path numbers the speed page quotes for ``chapter`` (glue name ->
    value)."""
    (row,) = [row for row in fast["rows"] if row["chapter"] == chapter]
    return {
        "speed-fast-x": round(float(row["fast_speedup"]), 1),
        "speed-compiled-x": round(float(row["compiled_speedup"]), 1),
        # the lowest and the highest of the repeats' own ratios
        "speed-compiled-x-low": round(float(row["compiled_speedup_range"][0]), 1),
        "speed-compiled-x-high": round(float(row["compiled_speedup_range"][1]), 1),
        "speed-repeats": int(fast["repeats"]),
        # each path's fastest and slowest repeat, ms per seed-step
        **{
            f"speed-{path}-ms-{end}": round(float(pick(row["repeats_ms"][path])), 2)
            for path in ("reference", "compiled")
            for end, pick in (("low", min), ("high", max))
        },
        "speed-compile-cold": round(float(row["compile_cold_s"])),
        "speed-compile-warm": round(float(row["compile_warm_s"])),
        "speed-break-even": int(round(float(row["break_even_seed_steps"]), -2)),
        # the same break-even in positions trained, the unit of train()'s own rule
        "speed-break-even-m": round(
            float(row["break_even_seed_steps"]) * row["batch"] * row["positions"] / 1e6,
            1,
        ),
        "speed-compile-threshold-m": round(COMPILE_TOKEN_STEPS / 1e6, 1),
        "speed-compile-reused": round(float(row["compile_reused_s"]), 2),
        "speed-limit-x": round(float(row["compiled_ms"] / row["limit_ms"]), 1),
        "speed-fast-load": load_text(fast["load_before"]),
    }
