"""The command line: list, show and rerun any chapter's experiment by name
(``lengthgen-lite``).

    lengthgen-lite list
    lengthgen-lite show ch5/dropout               # the spec as JSON
    lengthgen-lite run ch7 --seeds 2 --steps 50   # a chapter name runs its first spec
    lengthgen-lite run ch5/placements --seeds 20 --steps 5000 --backend ray \
        --out ch5.json
    lengthgen-lite run ch5 --scale reference      # the converged sweep, into the store

``--scale reference`` runs the experiment's reference sweep (``Spec.at_scale``) into the
results store (``results/reference/``, or ``--store``), one file per configuration as
it lands; configurations already stored are skipped, so the same command resumes.

Layering: the command line imports :mod:`lengthgen_lite.runs` and nothing above it. The
chapters' experiments are found at run time, as data: every ``chapters/chN_*.py`` whose
source assigns a top-level ``SPECS`` is imported by name (:func:`discover`), and its
``SPECS`` read. So the static import graph stays ``cli -> runs -> core`` (checked by
``tests/test_package_rules.py``), a new chapter needs no registry edit, and modules
without specs (chapter 4's pretrained models, which import transformers) are never
loaded. Any bad name or value ends the command before training with argparse's usage
error (exit code 2) saying what is allowed.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import pathlib
import sys
from collections.abc import Sequence

from .runs import Spec, run
from .runs.runner import BACKENDS, check_run_options
from .runs.spec import SCALES
from .runs.store import STORE, Store, sweep

CHAPTERS = pathlib.Path(__file__).resolve().parent / "chapters"


def _declares_specs(path: pathlib.Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [getattr(node, "target", None)]
        )
        if any(isinstance(t, ast.Name) and t.id == "SPECS" for t in targets):
            return True
    return False


def discover() -> dict[str, Spec]:
    """Every chapter's specs by name, in chapter order (see the module docstring)."""
    specs: dict[str, Spec] = {}
    for path in sorted(
        CHAPTERS.glob("ch[0-9]*_*.py"), key=lambda p: int(p.stem[2:].split("_")[0])
    ):
        if _declares_specs(path):
            module = importlib.import_module(f"{__package__}.chapters.{path.stem}")
            specs |= module.SPECS
    return specs


def resolve(name: str, specs: dict[str, Spec]) -> Spec:
    """``ch5/dropout`` selects that spec; ``ch5`` the chapter's first (its default)."""
    if name in specs:
        return specs[name]
    for key, spec in specs.items():
        if key.split("/")[0] == name:
            return spec
    chapters = list(dict.fromkeys(key.split("/")[0] for key in specs))
    raise ValueError(
        f"no experiment named {name!r}; allowed: a chapter {chapters} or one "
        f"of {list(specs)}"
    )


def parse_seeds(text: str) -> list[int]:
    """``"5"``: seeds 0..4; ``"0,3,7"``: exactly those seeds."""
    try:
        if "," in text:
            return [int(part) for part in text.split(",")]
        count = int(text)
    except ValueError:
        raise ValueError(
            f"--seeds={text!r} is invalid; allowed: a count N (seeds 0..N-1) "
            "or a comma list like 0,3,7"
        ) from None
    if count < 1:
        raise ValueError(
            f"--seeds={text!r} is invalid; allowed: a count N >= 1 (seeds "
            "0..N-1) or a comma list"
        )
    return list(range(count))


def parse_indices(text: str) -> list[int]:
    """``"36-47,24"``: configurations 36..47, then 24, in that order."""
    indices: list[int] = []
    try:
        for part in text.split(","):
            first, _, last = part.partition("-")
            indices.extend(range(int(first), int(last or first) + 1))
    except ValueError:
        raise ValueError(
            f"--configs={text!r} is invalid; allowed: indices and ranges like 36-47,24"
        ) from None
    return indices


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lengthgen-lite", description="Rerun the book's experiments by name."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="every chapter's experiments, with their sizes")
    show = commands.add_parser("show", help="print an experiment's spec as JSON")
    show.add_argument(
        "name", metavar="NAME", help="a chapter (ch5) or an experiment (ch5/dropout)"
    )
    go = commands.add_parser(
        "run", help="train and score an experiment; write a results JSON file"
    )
    go.add_argument(
        "name",
        metavar="NAME",
        help="a chapter (ch7: its first experiment) or an experiment (ch5/dropout)",
    )
    go.add_argument(
        "--seeds", help="N (seeds 0..N-1) or a comma list of seeds, e.g. 0,3,7"
    )
    go.add_argument(
        "--steps",
        type=int,
        help="training steps of every configuration (warm-up capped at half)",
    )
    go.add_argument(
        "--test-sets",
        type=int,
        help="test sequences (or sets) per length of every evaluation, e.g. 50 for a "
        "quick smoke run (default: the experiment's own)",
    )
    go.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="in-process (default) or Ray tasks",
    )
    go.add_argument(
        "--ray-address",
        help="an existing Ray cluster (e.g. auto); default: start a local one",
    )
    go.add_argument(
        "--ray-cpus",
        type=int,
        help="CPUs of the local Ray cluster (default: all of this machine's)",
    )
    go.add_argument(
        "--seeds-per-task",
        type=int,
        help="with --backend ray: split each configuration's seeds",
    )
    go.add_argument(
        "--scale",
        choices=SCALES,
        default="live",
        help="live: the notebook's budget (default); reference: the converged sweep, "
        "into the store, resuming",
    )
    go.add_argument(
        "--store",
        default=str(STORE),
        help="with --scale reference: the store folder (default: results/reference)",
    )
    go.add_argument(
        "--configs",
        help="with --scale reference: only these configurations, in this order "
        "(indices and ranges, e.g. 36-47,24), to split a sweep or run its most "
        "telling part first",
    )
    go.add_argument(
        "--out", default="results.json", help="results file (default: results.json)"
    )
    go.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def _size(spec: Spec) -> str:
    steps = sorted({c.steps for c in spec.configurations()})
    return (
        f"{len(spec.configurations()):3d} configurations x {len(spec.seeds):2d} "
        f"seeds x {'/'.join(map(str, steps))} steps"
    )


def _list(specs: dict[str, Spec]) -> str:
    lines = []
    for name, spec in specs.items():
        lines.append(f"{name:16} {spec.description}")
        lines.append(f"{'':18}live      {_size(spec)}")
        lines.append(f"{'':18}reference {_size(spec.at_scale('reference'))}")
    return "\n".join(lines)


def _scaled(spec: Spec, args: argparse.Namespace) -> Spec:
    """The spec at ``--scale``, with ``--seeds``, ``--steps`` (a reference sweep cut
    short keeps the checkpoints below its steps) and ``--test-sets``."""
    spec = spec.at_scale(args.scale)
    changes: dict[str, object] = {}
    if args.seeds is not None:
        changes["seeds"] = parse_seeds(args.seeds)
    if args.steps is not None:
        changes["steps"] = args.steps
        changes["checkpoints"] = [c for c in spec.checkpoints if c < args.steps]
    if args.test_sets is not None:
        changes["n_test"] = args.test_sets
    return spec.with_overrides(**changes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    specs = discover()
    if args.command == "list":
        print(_list(specs))
        return 0
    try:  # every check before any training
        spec = resolve(args.name, specs)
        if args.command == "show":
            print(json.dumps(spec.to_dict(), indent=1))
            return 0
        spec = _scaled(spec, args)
        if args.scale == "reference" and args.seeds_per_task is not None:
            raise ValueError(
                "--seeds-per-task is invalid with --scale reference; allowed: one Ray "
                "task per configuration (a stored file holds all its seeds)"
            )
        ray_options = {
            "seeds_per_task": args.seeds_per_task,
            "ray_address": args.ray_address,
            "ray_num_cpus": args.ray_cpus,
        }
        check_run_options(args.backend, **ray_options)
        if args.backend == "ray":
            # (only to fail now, with a clear message, if it is missing)
            import ray  # noqa: F401
        only = None if args.configs is None else parse_indices(args.configs)
        if only is not None and args.scale != "reference":
            raise ValueError(
                "--configs is invalid with --scale live; allowed: with --scale "
                "reference (a live run is one results file of every configuration)"
            )
        if only is not None:
            Store(args.store).todo(spec, only)  # (only to fail now on a bad index)
        out = pathlib.Path(args.out)
        if out.is_dir():
            raise ValueError(
                f"--out={args.out!r} is a directory; allowed: a file path "
                "such as results.json"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
    except ValueError as err:
        parser.error(str(err))  # exit code 2
    except ImportError:
        parser.error(
            "--backend ray needs Ray, an optional extra: pip install "
            "'lengthgen_lite[ray]'"
        )
    command = " ".join(["lengthgen-lite", *(sys.argv[1:] if argv is None else argv)])
    if args.scale == "reference":
        store = Store(args.store)
        todo = store.todo(spec, only)
        n = len(spec.configurations())
        print(
            f"{spec.name}: {n - len(store.missing(spec))} of {n} stored, "
            f"{len(todo)} to run"
        )
        sweep(
            spec,
            store,
            backend=args.backend,
            progress=not args.no_progress,
            ray_address=args.ray_address,
            ray_num_cpus=args.ray_cpus,
            command=command,
            on_saved=lambda path: print(f"saved {path}", flush=True),
            only=only,
        )
        return 0
    results = run(
        spec,
        backend=args.backend,
        progress=not args.no_progress,
        command=command,
        **ray_options,
    )
    results.save(out)
    return 0
