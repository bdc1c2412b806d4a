"""The speed page's figures, tables and quoted numbers (book/speed.ipynb): what each
chapter costs, what batching seeds buys, the training loop's fast path, chapter 4's
retrieval training and the two-layer step in float32 and bfloat16.

All read the results file that `make bench` writes (`benchmarks/speed.py`); nothing
here measures.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..core.fast_path import COMPILE_RETRIEVAL_SEED_STEPS, COMPILE_TOKEN_STEPS
from .common import panels, plain_log_ticks


def _check_rows(
    rows: Sequence[Mapping[str, Any]], needed: Sequence[str], what: str
) -> None:
    if not rows:
        raise ValueError(f"no {what} rows")
    missing = sorted({key for row in rows for key in needed if key not in row})
    if missing:
        raise ValueError(f"{what} rows lack {missing}; each row needs {list(needed)}")


def _check_section(
    section: Mapping[str, Any], needed: Sequence[str], what: str
) -> None:
    missing = [key for key in needed if key not in section]
    if missing:
        raise ValueError(
            f"the {what} section lacks {missing}; it needs {list(needed)} "
            "(benchmarks/speed.py writes them)"
        )


def _column(rows: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    """Every row's ``key``, as floats."""
    return [float(row[key]) for row in rows]


def _span(values: Sequence[float], name: str, digits: int = 0) -> dict[str, float]:
    """The lowest and highest of ``values`` as glue ``name``-low and -high, rounded to
    ``digits`` (0: whole numbers, as ints)."""
    low, high = float(min(values)), float(max(values))
    # round(x, None) is an int
    return {
        f"{name}-low": round(low, digits or None),
        f"{name}-high": round(high, digits or None),
    }


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
    fig, (ax,) = panels(1, width=8.0, height=4.4, title=title)
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
    # below the panel, as the retrieval figure's: inside, it covered the right-hand bars
    fig.legend(fontsize="small", loc="outside lower center", ncols=2)
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


# what fast_path_numbers reads of each chapter's row
FAST_PATH_NUMBERS = (
    "chapter",
    "batch",
    "positions",
    "fast_speedup",
    "compiled_speedup",
    "compiled_speedup_range",
    "repeats_ms",
    "compiled_ms",
    "limit_ms",
    "compile_cold_s",
    "compile_warm_s",
    "compile_reused_s",
    "break_even_seed_steps",
)


def fast_path_numbers(
    fast: Mapping[str, Any], chapter: str = "ch5 post-norm"
) -> dict[str, Any]:
    """The fast-path numbers the speed page quotes for ``chapter`` (glue name ->
    value), and the range of the fresh-process compile costs over every chapter."""
    _check_section(fast, ("rows", "repeats", "load_before"), "fast-path")
    _check_rows(fast["rows"], FAST_PATH_NUMBERS, "fast-path")
    chapters = [row["chapter"] for row in fast["rows"]]
    if chapter not in chapters:
        raise ValueError(f"no fast-path row for chapter {chapter!r}; rows: {chapters}")
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
        # a fresh process's compile: an empty inductor cache (cold), a filled one
        "speed-compile-cold": round(float(row["compile_cold_s"])),
        "speed-compile-warm": round(float(row["compile_warm_s"])),
        **_span(_column(fast["rows"], "compile_cold_s"), "speed-compile-cold"),
        **_span(_column(fast["rows"], "compile_warm_s"), "speed-compile-warm"),
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


# issue 36's target for chapter 4's retrieval training: CPU ms per seed-step, the mean
# over the reference sweep's configurations
RETRIEVAL_TARGET_MS = 0.8
# what every retrieval row holds (``benchmarks/retrieval.py``)
RETRIEVAL_KEYS = (
    "config",
    "auto_plan",
    "reference_ms",
    "query_only_ms",
    "tables_ms",
    "compiled_ms",
    "auto_ms",
    "auto_speedup",
    "layout_off_ms",
    "eval_before_s",
    "eval_after_s",
    "compile_cold_s",
    "compile_warm_s",
)
# the columns of the retrieval table, in the page's order
RETRIEVAL_COLUMNS = (
    "auto_plan",
    "reference_ms",
    "query_only_ms",
    "tables_ms",
    "compiled_ms",
    "auto_ms",
    "auto_speedup",
    "layout_off_ms",
    "eval_before_s",
    "eval_after_s",
    "compile_cold_s",
    "compile_warm_s",
)
RETRIEVAL_BARS = (
    ("reference_ms", "reference path"),
    ("query_only_ms", "query only"),
    ("tables_ms", "query only + token tables"),
    ("auto_ms", "auto (what train picks for the sweep)"),
)


def retrieval_numbers(section: Mapping[str, Any]) -> dict[str, Any]:
    """The retrieval numbers the speed page quotes (glue name -> value): the means
    over configurations before and after, against issue 36's target (and how many
    configurations are above it), the evaluation's seconds and the fresh-process compile
    costs' range."""
    _check_section(
        section,
        ("rows", "seeds", "mean_reference_ms", "mean_auto_ms", "load_before"),
        "retrieval",
    )
    rows = section["rows"]
    _check_rows(rows, RETRIEVAL_KEYS, "retrieval")
    auto_ms = float(section["mean_auto_ms"])
    over = auto_ms - RETRIEVAL_TARGET_MS
    return {
        "speed-retrieval-configs": len(rows),
        "speed-retrieval-seeds": int(section["seeds"]),
        "speed-retrieval-reference-ms": round(float(section["mean_reference_ms"]), 2),
        "speed-retrieval-auto-ms": round(auto_ms, 2),
        # the mean of each configuration's side-by-side ratio
        "speed-retrieval-x": round(float(np.mean(_column(rows, "auto_speedup"))), 1),
        # what the gradient layout buys: auto without it over auto, mean over rows
        "speed-retrieval-layout-x": round(
            float(
                np.mean(
                    np.divide(_column(rows, "layout_off_ms"), _column(rows, "auto_ms"))
                )
            ),
            2,
        ),
        "speed-retrieval-target-ms": RETRIEVAL_TARGET_MS,
        "speed-retrieval-target": "met"
        if over <= 0
        else f"missed, by {over:.2g} ms per seed-step",
        # how many configurations' steps are above the target in this run
        "speed-retrieval-over": sum(r["auto_ms"] > RETRIEVAL_TARGET_MS for r in rows),
        "speed-retrieval-eval-before": round(
            float(np.mean(_column(rows, "eval_before_s"))), 1
        ),
        "speed-retrieval-eval-after": round(
            float(np.mean(_column(rows, "eval_after_s"))), 2
        ),
        **_span(_column(rows, "compile_cold_s"), "speed-retrieval-cold"),
        **_span(_column(rows, "compile_warm_s"), "speed-retrieval-warm"),
        "speed-retrieval-threshold": COMPILE_RETRIEVAL_SEED_STEPS,
        "speed-retrieval-load": load_text(section["load_before"]),
    }


def plot_retrieval(rows: Sequence[Mapping[str, Any]], *, title: str) -> Figure:
    """CPU ms per seed-step of each retrieval configuration on the reference path and
    each part of the fast path (horizontal bars, log scale), with issue 36's target
    as a dashed line."""
    _check_rows(rows, ("config", *(key for key, _ in RETRIEVAL_BARS)), "retrieval")
    fig, (ax,) = panels(1, width=8.0, height=0.45 * len(rows) + 2.0, title=title)
    y = np.arange(len(rows))
    height = 0.8 / len(RETRIEVAL_BARS)
    for i, (key, label) in enumerate(RETRIEVAL_BARS):
        ax.barh(
            y + (i - (len(RETRIEVAL_BARS) - 1) / 2) * height,
            [r[key] for r in rows],
            height=height,
            label=label,
        )
    ax.axvline(
        RETRIEVAL_TARGET_MS,
        color="0.2",
        linestyle="--",
        linewidth=1,
        label=f"target {RETRIEVAL_TARGET_MS:g} ms (the mean)",
    )
    ax.set_xscale("log")
    # bars start at the decade below the fastest, so their lengths compare
    fastest = min(r[key] for r in rows for key, _ in RETRIEVAL_BARS)
    ax.set_xlim(left=10 ** np.floor(np.log10(fastest)))
    plain_log_ticks(ax)
    ax.set_yticks(y, [r["config"] for r in rows])
    ax.invert_yaxis()  # the first configuration on top
    ax.set_xlabel("CPU ms per seed-step, one thread")
    ax.set_ylabel("configuration")
    fig.legend(fontsize="small", loc="outside lower center", ncols=3)
    return fig


# the columns of the two-layer table, in the page's order
DEPTH_COLUMNS = (
    "d_model",
    "d_mlp",
    "fast_float32_ms",
    "compiled_float32_ms",
    "limit_float32_ms",
    "fast_bfloat16_ms",
    "compiled_bfloat16_ms",
    "limit_bfloat16_ms",
    "compiled_bf16_speedup",
    "compile_cold_s_float32",
    "compile_warm_s_float32",
    "compile_cold_s_bfloat16",
    "compile_warm_s_bfloat16",
)
# each dtype's short name in the glue names
DTYPES = {"float32": "fp32", "bfloat16": "bf16"}


def bf16_text(section: Mapping[str, Any]) -> str:
    """The CPU's bfloat16 support as the page states it (native, with its flags;
    emulated; or not known), and what that says of the bfloat16 timings."""
    if section["native_bf16"] is None:
        return (
            "not known (/proc/cpuinfo was not readable), so neither is what these "
            "bfloat16 timings say of another CPU"
        )
    if section["native_bf16"]:
        return (
            f"native ({', '.join(section['bf16_flags'])}): these bfloat16 timings say "
            "little about a CPU without these instructions"
        )
    return (
        "emulated (no AVX512_BF16, AMX or BF16 flag): these bfloat16 timings say "
        "nothing about a CPU that runs bfloat16 natively"
    )


def depth_numbers(section: Mapping[str, Any]) -> dict[str, Any]:
    """The two-layer numbers the speed page quotes (glue name -> value): the CPU's
    bf16 support, the widest model's compiled steps against each dtype's limit, the
    compiled steps' distance from their limits and the compile costs over every
    model."""
    _check_section(
        section,
        ("rows", "cpu_capability", "native_bf16", "bf16_flags", "load_before"),
        "two-layer",
    )
    rows = section["rows"]
    _check_rows(rows, ("model", *DEPTH_COLUMNS), "two-layer")
    wide = max(rows, key=lambda r: r["d_model"])
    numbers: dict[str, Any] = {
        "speed-depth-capability": section["cpu_capability"],
        "speed-depth-bf16": bf16_text(section),
        "speed-depth-load": load_text(section["load_before"]),
        "speed-depth-wide-d": int(wide["d_model"]),
        "speed-depth-wide-mlp": int(wide["d_mlp"]),
        "speed-depth-bf16-x": round(float(wide["compiled_bf16_speedup"]), 2),
    }
    for dtype, short in DTYPES.items():
        numbers[f"speed-depth-{short}-ms"] = round(
            float(wide[f"compiled_{dtype}_ms"]), 2
        )
        numbers[f"speed-depth-{short}-limit-ms"] = round(
            float(wide[f"limit_{dtype}_ms"]), 3
        )
        # how many times its limit each model's compiled step takes
        over = [r[f"compiled_{dtype}_ms"] / r[f"limit_{dtype}_ms"] for r in rows]
        numbers |= _span(over, f"speed-depth-{short}-limit-x", 1)
        for cost in ("cold", "warm"):
            numbers |= _span(
                _column(rows, f"compile_{cost}_s_{dtype}"),
                f"speed-depth-{short}-{cost}",
            )
    return numbers
