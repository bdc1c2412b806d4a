"""A first measurement of issue 37's prediction P1 (chapter 8, set complement).

P1: on set complement, sharpening the softmax with the length (SSMax, or the fixed
log n / log n_train factor) gains <= 0.01 TV beyond the training length over no norm,
while a norm on the attention output gains >= 0.1. The book's results suggest why: the
attention is *correctly* uniform there, so a sharper softmax has nothing to sharpen,
and only renormalising the output undoes the 1/s dilution.

Four variants of one layer (v = 16, training length L = 4, d_model = 64), each over
the same seeds and data: ``none`` (no norm, no scaling), ``attn_out`` (a norm on the
attention output), ``ssmax`` and ``logn`` (no norm; ``core.model.LOGIT_SCALES``, n_train
= L). Prints the TV beyond L per variant (mean and per seed), the gain of each over
``none`` and the wall time of each training (a rough cost on a shared machine, not a
result). Nothing imports it; no claim is decided here (the chapter declares them).

Run from the repository root, one torch thread::

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python benchmarks/ch8_pilot.py \\
        [--seeds 3] [--steps 1000] [--targets soft] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from lengthgen_lite.runs import Spec, run

VARIANTS = {  # name -> Config fields over the base
    "none": {"norm": "none"},
    "attn_out": {"norm": "attn_out"},
    "ssmax": {"norm": "none", "logit_scale": "ssmax"},
    "logn": {"norm": "none", "logit_scale": "logn"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--targets", choices=("soft", "sampled"), default="soft")
    parser.add_argument("--v", type=int, default=16)
    parser.add_argument("--train-length", type=int, default=4)
    parser.add_argument("--out", default=None, help="write the numbers as JSON")
    args = parser.parse_args()
    base = {
        "task": "set_complement",
        "v": args.v,
        "train_length": args.train_length,
        "d_model": 64,
        "steps": args.steps,
        "targets": args.targets,
    }
    table: dict[str, dict[str, object]] = {}
    for name, fields in VARIANTS.items():
        spec = Spec(
            name=f"ch8/pilot_{name}",
            base={**base, **fields},
            seeds=tuple(range(args.seeds)),
        )
        start = time.perf_counter()
        results = run(spec, progress=False)
        seconds = time.perf_counter() - start
        tv = results.values("tv_beyond")
        table[name] = {"tv_beyond": [float(x) for x in tv], "seconds": seconds}
        print(
            f"{name:9s} TV beyond L: mean {tv.mean():.4f}, per seed "
            f"{np.round(tv, 4).tolist()}  ({seconds:.1f} s)",
            flush=True,
        )
        if fields.get("logit_scale") == "ssmax":  # where s went from 1 / log L
            s = [
                float(m.blocks[0].attn.ssmax_s.detach().mean())
                for m in results.result().models
            ]
            table[name]["s"] = s
            print(
                f"          learned s per seed {np.round(s, 3).tolist()} "
                f"(init 1/log L = {1 / np.log(args.train_length):.3f})"
            )
    base_tv = np.array(table["none"]["tv_beyond"])
    print("gain over none (mean, per seed; positive = lower TV):")
    for name in VARIANTS:
        if name == "none":
            continue
        gain = base_tv - np.array(table[name]["tv_beyond"])
        table[name]["gain_over_none"] = [float(x) for x in gain]
        print(f"  {name:9s} {gain.mean():+.4f}  {np.round(gain, 4).tolist()}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "variants": table}, f, indent=1)


if __name__ == "__main__":
    main()
