"""The command line: rerun a chapter's experiment from its config, bigger (``lengthgen-lite run``).

    lengthgen-lite run configs/ch5_post_norm.json --seeds 20 --steps 3000 --out ch5_big.json
    python -m lengthgen_lite run configs/ch6_ema.json --backend ray --ray-address auto

Overrides are applied to the config and the result is validated as a whole; any bad value ends
the command before training with argparse's usage error (exit code 2) naming the field. On
success the command writes the results file (:class:`~lengthgen_lite.experiments.Results`) and
nothing else; the progress is the training loop's own bar, one per configuration.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any, Sequence

from .experiments import BACKENDS, OVERRIDE_KEYS, ExperimentConfig, check_run_options, run_experiment



def parse_seeds(text: str) -> list[int]:
    """``"5"``: seeds 0..4; ``"0,3,7"``: exactly those seeds."""
    try:
        if "," in text:
            return [int(part) for part in text.split(",")]
        count = int(text)
    except ValueError:
        raise ValueError(f"--seeds={text!r} is invalid; allowed: a count N (seeds 0..N-1) or a comma list like 0,3,7") from None
    if count < 1:
        raise ValueError(f"--seeds={text!r} is invalid; allowed: a count N >= 1 (seeds 0..N-1) or a comma list")
    return list(range(count))


def parse_lengths(text: str) -> list[int]:
    """``"5-15"``: prefix lengths 5..15 (inclusive); ``"1,4,15"``: exactly those."""
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-"))
            if low > high:
                raise ValueError
            return list(range(low, high + 1))
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--lengths={text!r} is invalid; allowed: a range a-b with a <= b (inclusive) or a comma list like 1,4,15") from None


def parse_set(text: str) -> tuple[str, Any]:
    """``train.lr=0.01``: the value is read as JSON (numbers, true/false, null, lists), else as a string."""
    key, sep, raw = text.partition("=")
    if not sep or key not in OVERRIDE_KEYS:
        raise ValueError(f"--set {text!r} is invalid; allowed: KEY=VALUE with KEY one of {OVERRIDE_KEYS}")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lengthgen-lite", description="Rerun the book's experiments from a config file.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="train and score every configuration of CONFIG; write a results JSON file")
    run.add_argument("config", metavar="CONFIG", help="a JSON config file, e.g. configs/ch5_post_norm.json")
    run.add_argument("--seeds", help="N (seeds 0..N-1) or a comma list of seeds, e.g. 0,3,7")
    run.add_argument("--steps", type=int, help="training steps (also caps the warm-up at this many steps)")
    run.add_argument("--lengths", help="evaluation prefix lengths: a range a-b or a comma list (each in 1..v-1)")
    run.add_argument("--placements", nargs="+", metavar="NORM", help="norm placements, e.g. none attn_out")
    run.add_argument("--targets", nargs="+", metavar="KIND", help="target kinds: soft and/or sampled")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="updates",
                     help="any other config field, e.g. task.v=24 or train.ema_beta=0.999 (repeatable)")
    run.add_argument("--backend", choices=BACKENDS, default="local", help="in-process (default) or Ray tasks")
    run.add_argument("--ray-address", help="an existing Ray cluster (e.g. auto); default: start a local one")
    run.add_argument("--ray-cpus", type=int, help="CPUs of the local Ray cluster (default: all of this machine's)")
    run.add_argument("--seeds-per-task", type=int, help="with --backend ray: split each configuration's seeds into groups this size")
    run.add_argument("--out", default="results.json", help="results file (default: results.json)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def configure(args: argparse.Namespace) -> ExperimentConfig:
    """The config file with the command line's overrides applied, validated (ValueError naming the field)."""
    config = ExperimentConfig.load(args.config)
    updates: dict[str, Any] = dict(parse_set(text) for text in args.updates)
    if args.seeds is not None:
        updates["seeds"] = parse_seeds(args.seeds)
    if args.steps is not None:
        updates["train.steps"] = args.steps
        warmup = updates.get("train.warmup", config.train.warmup)
        if isinstance(warmup, int) and args.steps >= 1:
            updates["train.warmup"] = min(warmup, args.steps)
    if args.lengths is not None:
        updates["evaluation.lengths"] = parse_lengths(args.lengths)
    if args.placements is not None:
        updates["model.placements"] = args.placements
    if args.targets is not None:
        updates["train.targets"] = args.targets
    return config.with_overrides(updates)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    ray_options = {"seeds_per_task": args.seeds_per_task, "ray_address": args.ray_address, "ray_num_cpus": args.ray_cpus}
    try:  # every check before any training
        config = configure(args)
        check_run_options(args.backend, **ray_options)
        if args.backend == "ray":
            import ray  # noqa: F401  (only to fail now, with a clear message, if it is missing)
        out = pathlib.Path(args.out)
        if out.is_dir():
            raise ValueError(f"--out={args.out!r} is a directory; allowed: a file path such as results.json")
        out.parent.mkdir(parents=True, exist_ok=True)
    except ValueError as err:
        parser.error(str(err))  # exit code 2
    except ImportError:
        parser.error("--backend ray needs Ray, an optional extra: pip install 'lengthgen_lite[ray]'")
    results = run_experiment(config, backend=args.backend, progress=not args.no_progress, **ray_options)
    results.save(out)
    return 0
