"""Batched multi-seed training versus a Python loop over the same seeds (not run by the
tests).

    OMP_NUM_THREADS=1 python benchmarks/batched_training.py \
        [--steps 300] [--repeats 3] [--batch 128 32]

The model is chapter 5's: v=16, d_model=64, one layer, one head, attention only,
train_length 4. "loop" calls ``train(..., seeds=[s])`` once per seed; "batched" calls
``train(..., seeds=seeds)`` once. Both run the same code, so the ratio is what batching
buys.

Timings are the CPU time of this thread (``time.thread_time``), minimum over repeats: on
a machine shared with other jobs, wall time mostly measures how long we waited for a
core. Shared caches and memory bandwidth still slow us down under load, so the numbers
vary by some 10-20 % between runs.

To see whether the ratio is limited by overhead or by arithmetic, the script then
- counts the FLOPs of the linear layers (W_Q, W_K, W_V, W_O, unembedding; forward, input
  and weight gradients) and times a [K, batch * pos, d] matmul of their shape: the
  arithmetic floor;
- times every aten op of a few real training steps (a TorchDispatchMode, CPU time per
  op; "other ops" includes the timer's own few microseconds per call, so only the matmul
  figures are exact). A matmul's cost per seed is the same whether it runs alone or in a
  [K, ...] batch (it runs at the machine's matmul speed either way), so the loop's step
  divided by the batched step's matmul time bounds what any removal of overhead could
  give.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lengthgen_lite import (
    ModelConfig,
    SetComplement,
    TrainConfig,
    seed_everything,
    train,
)

V, D_MODEL, TRAIN_LENGTH = 16, 64, 4


def cpu_time(fn, repeats: int) -> float:
    """Minimum CPU seconds of ``fn()`` over ``repeats`` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


def matmul_seconds(
    k: int,
    rows: int,
    d_in: int,
    d_out: int,
    repeats: int = 30,
    dtype: torch.dtype = torch.float32,
) -> float:
    """CPU seconds of one [k, rows, d_in] @ [k, d_in, d_out] batched matmul in
    ``dtype`` (minimum over repeats)."""
    a = torch.randn(k, rows, d_in).to(dtype)
    b = torch.randn(k, d_in, d_out).to(dtype)
    for _ in range(5):
        torch.bmm(a, b)
    return cpu_time(lambda: torch.bmm(a, b), repeats)


def linear_floor(k: int, batch: int) -> tuple[float, float]:
    """(GFLOP, CPU seconds) of the linear layers' matmuls in one training step of k
    seeds.

    Each linear costs three matmuls of equal size per step: forward, input gradient,
    weight gradient.
    """
    tokens = batch * TRAIN_LENGTH
    shapes = [(D_MODEL, D_MODEL)] * 4 + [(D_MODEL, V)]  # W_Q, W_K, W_V, W_O, unembed
    flop = sum(3 * 2 * k * tokens * d_in * d_out for d_in, d_out in shapes)
    seconds = sum(3 * matmul_seconds(k, tokens, d_in, d_out) for d_in, d_out in shapes)
    return flop / 1e9, seconds


class OpTimer(TorchDispatchMode):
    """CPU time of every aten op run under it, summed by category."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = defaultdict(float)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        start = time.thread_time()
        out = func(*args, **(kwargs or {}))
        self.seconds[self.category(func, args)] += time.thread_time() - start
        return out

    @staticmethod
    def category(func, args) -> str:
        if func is torch.ops.aten.bmm.default or func is torch.ops.aten.mm.default:
            attention = any(
                isinstance(a, torch.Tensor) and TRAIN_LENGTH in a.shape[-2:]
                for a in args
            )
            return "attention matmuls" if attention else "linear matmuls"
        return "other ops"


def op_seconds_per_step(model_cfg, task, cfg, seeds) -> dict[str, float]:
    """CPU seconds per training step spent inside aten ops, by category (overhead
    excluded)."""
    timer = OpTimer()
    with timer:
        train(model_cfg, task, cfg, seeds=seeds, progress=False)
    return {name: seconds / cfg.steps for name, seconds in timer.seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--batch", type=int, nargs="+", default=[128])
    args = parser.parse_args()
    seed_everything(0)
    task = SetComplement(v=V, train_length=TRAIN_LENGTH)
    model_cfg = ModelConfig(vocab_size=V, d_model=D_MODEL)
    seeds = list(range(args.seeds))
    k = len(seeds)
    print(
        f"K={k} seeds, {args.steps} steps, CPU ms per training step of all K "
        f"seeds (min of {args.repeats})"
    )
    for batch in args.batch:
        gflop, floor = linear_floor(k, batch)
        print(
            f"\nbatch {batch}: linear-layer matmuls {gflop:.2f} GFLOP per "
            f"step, {1e3 * floor:.1f} ms "
            f"at the measured matmul speed ({gflop / floor:.0f} GFLOP/s)"
        )
        for targets in ("soft", "sampled"):
            cfg = TrainConfig(steps=args.steps, warmup=10, batch=batch, targets=targets)
            loop = cpu_time(
                lambda: [
                    train(model_cfg, task, cfg, seeds=[s], progress=False)
                    for s in seeds
                ],
                args.repeats,
            )
            batched = cpu_time(
                lambda: train(model_cfg, task, cfg, seeds=seeds, progress=False),
                args.repeats,
            )
            loop_ms, batched_ms = 1e3 * loop / args.steps, 1e3 * batched / args.steps
            print(
                f"  {targets:7s} loop {loop_ms:6.1f}  batched "
                f"{batched_ms:6.1f}  speed-up {loop / batched:4.1f}x  "
                f"(linear matmuls: {100 * 1e3 * floor / batched_ms:3.0f}% of "
                "the batched step; "
                "speed-up if they were all that is left: "
                f"{loop_ms / (1e3 * floor):4.1f}x)"
            )
            short = TrainConfig(steps=20, warmup=5, batch=batch, targets=targets)
            for label, group in (("one seed", seeds[:1]), (f"{k} seeds", seeds)):
                ops = op_seconds_per_step(model_cfg, task, short, group)
                parts = ", ".join(
                    f"{name} {1e3 * sec:.2f}" for name, sec in sorted(ops.items())
                )
                print(f"    CPU ms inside aten ops, one step of {label}: {parts}")
            matmuls = ops["linear matmuls"] + ops["attention matmuls"]
            print(
                "    -> loop step / batched matmul time = speed-up bound if "
                "everything but the matmuls "
                f"vanished: {loop_ms / (1e3 * matmuls):4.1f}x"
            )


if __name__ == "__main__":
    main()
