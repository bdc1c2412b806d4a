"""What the book costs to run, measured side by side in one run: `make bench` (not run
by the tests).

    OMP_NUM_THREADS=1 python benchmarks/speed.py \
        [--out benchmarks/results/speed.json] \
        [--chapters | --fast-path | --retrieval | --depth]

1. Every chapter notebook, executed top to bottom in a fresh kernel with one torch
   thread, as `make execute` does: wall seconds, the kernel's CPU seconds, and every
   call of the training loop (`train` is wrapped before the notebook imports the
   package): how many trainings, their seed-steps (steps x seeds) and seed-steps per
   second of training time.
2. The batched trainer against a Python loop over the same seeds (`train(seeds=[s])` per
   seed), at K = 4, 8, 16 seeds and batch 32 and 128, on chapter 5's model: CPU
   milliseconds per step of all K seeds, and the ratio. Timed as the minimum CPU time of
   this thread over repeats.
3. For the widest setting, the time the batched step spends inside matmuls
   (`batched_training.py` profiles every aten op): the loop's step over that is the most
   any batching could gain.
4. The whole book as `make execute` runs it: every chapter through `jupyter
   nbconvert --execute`, two at a time, costliest first (by step 1), into a scratch
   folder: the wall seconds of each and of all. Steps 1 and 4 share one scratch
   inductor cache, empty at the start of step 1: alone, each chapter compiles what no
   earlier one did (a reader's first executions); two at a time, every graph is cached,
   while the two share the machine. Steps 1 and 4 alone, merged into the existing
   results file with the machine they ran on: `python benchmarks/speed.py --chapters`
   (about half an hour).
5. The training loop's reference path against its fast path (eager and compiled) on each
   chapter's main training, with the arithmetic limit and the compile cost a fresh
   process pays, cold and warm inductor cache (`compile_cost.py`; `auto`'s
   break-even, `COMPILE_TOKEN_STEPS`, rests on the warm figure), and what a later
   training of the same shapes pays in-process (`fast_path.py`). Only this section,
   merged into the existing results file: `python benchmarks/speed.py --fast-path`
   (about twenty minutes).
6. Chapter 4's retrieval trainings before and after issue 36 (`retrieval.py`): CPU ms
   per seed-step of every configuration of its reference sweep that costs differently,
   on the reference path and on each part of the retrieval fast path (query-only
   projection, token tables, compiled) and ``auto``'s choice, with the compile cost in
   a fresh process (cold and warm inductor cache), and the evaluation's seconds before
   (a forward per model) and after (one stacked forward). Only this section, merged:
   `python benchmarks/speed.py --retrieval` (about half an hour).
7. The two-layer step (chapter 8's part C: its live configurations and issue 36's
   d_model 128, MLP 512 case), eager and compiled, float32 and bfloat16 (CPU
   autocast, `TrainConfig.precision`), each against its dtype's arithmetic limit, with
   each dtype's compile cost in a fresh process, and torch's CPU capability and
   whether the CPU has native bf16 (AVX512_BF16, AMX): without it bf16 is emulated and
   its speed says nothing of another machine (`fast_path.py`). Only this section,
   merged: `python benchmarks/speed.py --depth` (about twenty minutes).

The results file is what the appendix's speed page (`book/speed.ipynb`) plots;
re-execute that page after a new measurement (`make bench` does both). Timings depend on
the machine and its load: the file records the CPU model and the load average before and
after.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import nbformat
from batched_training import cpu_time, op_seconds_per_step
from fast_path import bf16_support, depth, fast_path
from nbclient import NotebookClient
from retrieval import retrieval

from lengthgen_lite import (
    ModelConfig,
    SetComplement,
    TrainConfig,
    seed_everything,
    train,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# as `make execute` runs them
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# Run in the kernel before the notebook: wrap the one training loop wherever it is
# bound, and count.
COUNT_TRAININGS = """\
import sys, time
import lengthgen_lite.core.training as _training
_original = _training.train
_TRAININGS = []
def _counted(model_cfg, task, cfg, seeds, *args, **kwargs):
    start = time.perf_counter()
    result = _original(model_cfg, task, cfg, seeds, *args, **kwargs)
    _TRAININGS.append((cfg.steps * len(list(seeds)), time.perf_counter() - start))
    return result
for _module in list(sys.modules.values()):
    ours = getattr(_module, "__name__", "").startswith("lengthgen_lite")
    if ours and getattr(_module, "train", None) is _original:
        _module.train = _counted
"""
REPORT = """\
import json, time
print(json.dumps({"cpu_seconds": time.process_time(), "trainings": _TRAININGS}))
"""


def chapter_cost(path: pathlib.Path) -> dict[str, object]:
    """Execute one chapter as `make execute` does and report its cost."""
    nb = nbformat.read(path, as_version=4)
    # The counting prelude and the report are cells of the notebook: nbclient stores
    # each executed cell back at the index it is given, so a cell run under another's
    # index would replace it.
    nb.cells = [
        nbformat.v4.new_code_cell(COUNT_TRAININGS),
        *nb.cells,
        nbformat.v4.new_code_cell(REPORT),
    ]
    client = NotebookClient(
        nb,
        timeout=7200,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    with client.setup_kernel(env={**os.environ, **ONE_THREAD}):
        start = time.perf_counter()
        for index, cell in enumerate(nb.cells[:-1]):
            if cell.cell_type == "code":
                client.execute_cell(cell, index)
        wall = time.perf_counter() - start
        report = client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
    counts = json.loads(report.outputs[0]["text"])
    seed_steps = sum(n for n, _ in counts["trainings"])
    train_seconds = sum(s for _, s in counts["trainings"])
    return {
        "chapter": path.stem,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(counts["cpu_seconds"], 1),
        "trainings": len(counts["trainings"]),
        "seed_steps": seed_steps,
        "training_seconds": round(train_seconds, 1),
        "seed_steps_per_second": round(seed_steps / train_seconds, 1)
        if train_seconds
        else None,
    }


def two_at_a_time(paths: list[pathlib.Path], workers: int = 2) -> dict[str, object]:
    """Execute every notebook as `make execute` does (``workers`` at a time, in the
    given order), writing the executed copies to a scratch folder; wall seconds per
    notebook and in all."""

    def execute(path: pathlib.Path, out: str) -> dict[str, object]:
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter",
                "nbconvert",
                "--to",
                "notebook",
                "--execute",
                "--output-dir",
                out,
                "--log-level=WARN",
                "--ExecutePreprocessor.timeout=7200",
                str(path),
            ],
            check=True,
            env={**os.environ, **ONE_THREAD},
            cwd=path.parent,
        )
        return {
            "chapter": path.stem,
            "wall_seconds": round(time.perf_counter() - start, 1),
        }

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        # threads only wait on the processes
        with ThreadPoolExecutor(max_workers=workers) as pool:
            rows = list(pool.map(lambda path: execute(path, out), paths))
        total = time.perf_counter() - start
    return {"workers": workers, "wall_seconds": round(total, 1), "chapters": rows}


def batching(
    seed_counts: list[int], batches: list[int], steps: int, repeats: int
) -> list[dict[str, object]]:
    """CPU ms per step of K seeds: a loop of single-seed trainings against one batched
    training."""
    seed_everything(0)
    task = SetComplement(v=16, train_length=4)
    model_cfg = ModelConfig(vocab_size=16, d_model=64)
    rows = []
    for batch in batches:
        cfg = TrainConfig(steps=steps, warmup=10, batch=batch, targets="sampled")
        for k in seed_counts:
            seeds = list(range(k))
            loop = cpu_time(
                lambda: [
                    train(model_cfg, task, cfg, seeds=[s], progress=False)
                    for s in seeds
                ],
                repeats,
            )
            batched = cpu_time(
                lambda: train(model_cfg, task, cfg, seeds=seeds, progress=False),
                repeats,
            )
            rows.append(
                {
                    "batch": batch,
                    "seeds": k,
                    "loop_ms_per_step": round(1e3 * loop / steps, 2),
                    "batched_ms_per_step": round(1e3 * batched / steps, 2),
                    "speedup": round(loop / batched, 2),
                }
            )
    return rows


def matmul_bound(seeds: int, batch: int, loop_ms_per_step: float) -> dict[str, float]:
    """How far batching could go: the loop's step time over the batched step's time
    inside matmuls.

    A matmul costs the same per seed batched or not (it runs at the core's matmul speed
    either way), so even if batching removed every other cost, the speed-up could not
    exceed this ratio.
    """
    seed_everything(0)
    ops = op_seconds_per_step(
        ModelConfig(vocab_size=16, d_model=64),
        SetComplement(v=16, train_length=4),
        TrainConfig(steps=20, warmup=5, batch=batch, targets="sampled"),
        list(range(seeds)),
    )
    matmul_ms = 1e3 * (
        ops.get("linear matmuls", 0.0) + ops.get("attention matmuls", 0.0)
    )
    other_ms = 1e3 * ops.get("other ops", 0.0)
    return {
        "seeds": seeds,
        "batch": batch,
        "batched_matmul_ms_per_step": round(matmul_ms, 2),
        "batched_other_ops_ms_per_step": round(other_ms, 2),
        "speedup_bound": round(loop_ms_per_step / matmul_ms, 2),
    }


def load_stamps(before: tuple[float, float, float]) -> dict[str, list[float]]:
    """The machine's load average before a measurement and now, rounded: every
    section records both, since its timings depend on them."""
    return {
        "load_before": [round(x, 2) for x in before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def measure_fast_path(steps: int, repeats: int) -> dict[str, object]:
    """Section 5, with the machine's load around it (compile times are wall seconds)."""
    load_before = os.getloadavg()
    rows = fast_path(steps, repeats)
    for row in rows:
        print(
            f"{row['chapter']:<15} reference {row['reference_ms']} fast "
            f"{row['fast_ms']} compiled {row['compiled_ms']} ms "
            f"per seed-step (x{row['fast_speedup']}, "
            f"x{row['compiled_speedup']} side by side); compile "
            f"{row['compile_cold_s']} s cold, {row['compile_warm_s']} s warm, "
            f"{row['compile_reused_s']} s reused; break-even "
            f"{row['break_even_seed_steps']} seed-steps; limit {row['limit_ms']} ms"
        )
    return {
        "steps": steps,
        "repeats": repeats,
        # ms: median over repeats; speed-ups: median of each repeat's ratio
        "statistic": "median",
        **load_stamps(load_before),
        "rows": rows,
    }


def measure_retrieval(steps: int, repeats: int) -> dict[str, object]:
    """Section 6, with the machine's load around it."""
    load_before = os.getloadavg()
    result = retrieval(steps, repeats, n_test=100, eval_repeats=1, compiled=True)
    print(
        f"retrieval, mean over configurations: reference "
        f"{result['mean_reference_ms']} ms, auto {result['mean_auto_ms']} ms per "
        "seed-step"
    )
    return {
        **result,
        **load_stamps(load_before),
    }


def measure_depth(steps: int, repeats: int) -> dict[str, object]:
    """Section 7, with the machine's load and bf16 support around it."""
    load_before = os.getloadavg()
    support = bf16_support()
    print(
        f"CPU capability {support['cpu_capability']}, native bf16 "
        f"{support['native_bf16']} ({support['bf16_flags']})"
    )
    rows = depth(steps, repeats, compile_costs=True)
    for row in rows:
        print(
            f"{row['model']:<24} fp32: eager {row['fast_float32_ms']} compiled "
            f"{row['compiled_float32_ms']} ms per seed-step, limit "
            f"{row['limit_float32_ms']} ms; bf16: eager {row['fast_bfloat16_ms']} "
            f"compiled {row['compiled_bfloat16_ms']} ms, limit "
            f"{row['limit_bfloat16_ms']} ms (x{row['compiled_bf16_speedup']} "
            f"compiled); compile {row['compile_cold_s_float32']} s cold, "
            f"{row['compile_warm_s_float32']} s warm (fp32), "
            f"{row['compile_cold_s_bfloat16']} s, {row['compile_warm_s_bfloat16']} s "
            "(bf16)"
        )
    return {
        "steps": steps,
        "repeats": repeats,
        "statistic": "median",
        **support,
        **load_stamps(load_before),
        "rows": rows,
    }


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo, else lscpu), or None: the book then says it
    was not recorded."""
    sources = [
        pathlib.Path("/proc/cpuinfo").read_text,
        lambda: (
            subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        ),
    ]
    # /proc/cpuinfo has no model name on some ARM kernels; lscpu then has one
    for read in sources:
        try:
            text = read()
        except (OSError, subprocess.CalledProcessError):
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip().lower() == "model name" and value.strip():
                return value.strip()
    return None


def measure_chapters() -> dict[str, object]:
    """Sections 1 and 4, with the machine they ran on and its load around them. Both
    use one scratch inductor cache, empty at the start: alone, each chapter compiles
    what no earlier chapter compiled (a reader's first executions, in file order); two
    at a time, every graph is cached (a re-execution)."""
    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory() as cache,
        # the kernels inherit it
        mock.patch.dict(os.environ, {"TORCHINDUCTOR_CACHE_DIR": cache}),
    ):
        chapters = [chapter_cost(path) for path in CHAPTERS]
        for row in chapters:
            print(
                f"{row['chapter']:<32} {row['wall_seconds']:>7} s wall "
                f"{row['cpu_seconds']:>7} s CPU  {row['trainings']} trainings"
            )
        seconds = {row["chapter"]: row["wall_seconds"] for row in chapters}
        costliest = sorted(CHAPTERS, key=lambda path: -seconds[path.stem])
        parallel = two_at_a_time(costliest)
    print(
        "all chapters two at a time, costliest first: "
        f"{parallel['wall_seconds']} s wall"
    )
    return {
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "torch_threads": 1,
            **load_stamps(load_before),
        },
        "chapters": chapters,
        "two_at_a_time": parallel,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=ROOT / "benchmarks" / "results" / "speed.json",
    )
    parser.add_argument(
        "--steps", type=int, default=200, help="training steps per batching measurement"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--chapters",
        action="store_true",
        help="measure only sections 1 and 4 and merge them into --out",
    )
    parser.add_argument(
        "--fast-path",
        action="store_true",
        help="measure only section 5 and merge it into --out",
    )
    parser.add_argument(
        "--fast-path-repeats",
        type=int,
        default=5,
        help="interleaved repeats per fast-path measurement (the first compiles)",
    )
    parser.add_argument(
        "--fast-path-steps",
        type=int,
        default=1000,
        help="training steps per fast-path measurement",
    )
    parser.add_argument(
        "--retrieval",
        action="store_true",
        help="measure only section 6 and merge it into --out",
    )
    parser.add_argument(
        "--retrieval-steps",
        type=int,
        default=200,
        help="training steps per retrieval measurement",
    )
    parser.add_argument(
        "--depth",
        action="store_true",
        help="measure only section 7 and merge it into --out",
    )
    parser.add_argument(
        "--depth-steps",
        type=int,
        default=200,
        help="training steps per two-layer measurement",
    )
    args = parser.parse_args()
    # one section alone, merged into the existing results file
    sections = {
        "chapters": measure_chapters,
        "fast_path": lambda: {
            "fast_path": measure_fast_path(args.fast_path_steps, args.fast_path_repeats)
        },
        "retrieval": lambda: {
            "retrieval": measure_retrieval(args.retrieval_steps, args.fast_path_repeats)
        },
        "depth": lambda: {
            "depth": measure_depth(args.depth_steps, args.fast_path_repeats)
        },
    }
    chosen = [name for name in sections if getattr(args, name)]
    if len(chosen) > 1:
        parser.error(f"measure one section per run, got {chosen}")
    if chosen:
        result = json.loads(args.out.read_text())
        result.update(sections[chosen[0]]())
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
        return
    # the chapters first, on a quiet machine; the batching after them
    result = sections.pop("chapters")()
    rows = batching([4, 8, 16], [32, 128], args.steps, args.repeats)
    for row in rows:
        print(
            f"batch {row['batch']:>3}, K={row['seeds']:>2}: loop "
            f"{row['loop_ms_per_step']} ms, batched "
            f"{row['batched_ms_per_step']} ms, x{row['speedup']}"
        )
    widest = max(rows, key=lambda r: (r["seeds"], r["batch"]))
    bound = matmul_bound(widest["seeds"], widest["batch"], widest["loop_ms_per_step"])
    print(
        f"batch {bound['batch']}, K={bound['seeds']}: speed-up bound from the "
        f"matmuls alone x{bound['speedup_bound']}"
    )
    result.update(batching=rows, batching_steps=args.steps, matmul_bound=bound)
    for measure in sections.values():
        result.update(measure())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
