"""The command line: list, show and rerun any chapter's experiment by name
(``lengthgen-lite``).

    lengthgen-lite list
    lengthgen-lite show ch5/dropout > spec.json   # the spec as JSON
    lengthgen-lite run --spec spec.json           # ... edited or not, run as it is
    lengthgen-lite run ch7 --seeds 2 --steps 50   # a chapter name runs its first spec
    lengthgen-lite run ch5/placements --seeds 20 --steps 5000 --backend ray \
        --out ch5.json
    lengthgen-lite run ch5 --tier reference      # the converged sweep, into the store
    lengthgen-lite smollm2                       # chapter 8's stored SmolLM2 test
    lengthgen-lite --version

``--tier reference`` runs the experiment's reference sweep (``Spec.at_tier``) into the
results store (``lengthgen_lite/data/reference/``, or ``--store``), one file per
configuration as it lands; configurations already stored are skipped, so the same
command resumes, and a damaged stored file is set aside and its configuration trained
again (one line says so). ``run`` ends with a summary: where the results went, the seeds
and steps, the wall time and the key metric per configuration (``Results.key_metric``).

``smollm2`` makes chapter 8's other stored computation, which trains nothing: P6's
causal test on all its windows in SmolLM2-135M (``ch8_smollm2.store_reference``; 216 s
on a loaded core when the shipped file was made, as its provenance records), written to
the store (or ``--store``) and summed up in a few lines.

Layering: the command line sits on the chapters (``cli -> chapters -> runs -> core``,
checked by ``tests/test_package_rules.py``) and imports each chapter's front module
plainly (:data:`CHAPTERS`): its ``SPECS`` are the experiments (:func:`discover`), or its
``NO_SPECS`` line says why it has none (:func:`without_specs`), which ``list`` shows.
Chapter modules without either (chapter 4's pretrained models, which import
transformers) are not loaded. A new chapter is one more line in :data:`CHAPTERS` (a
test checks that every chapter is there). Any bad name or value ends the command before
training with argparse's usage error (exit code 2) naming the flag as typed and saying
what is allowed.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import time
from collections.abc import Sequence
from types import ModuleType

from . import __version__
from .chapters import (
    ch1_set_complement,
    ch2_attention_dispersion,
    ch3_construction,
    ch4_vanishing_variance,
    ch5_post_norm,
    ch6_ema,
    ch7_beyond_set_complement,
    ch8_smollm2,
    ch8_two_kinds,
)
from .runs import Results, Spec, run
from .runs.results import KEY_METRICS
from .runs.runner import BACKENDS, check_run_options
from .runs.spec import TIERS
from .runs.store import STORE, Store, sweep

#: each chapter's front module, in order: its SPECS, or a NO_SPECS line saying why none
CHAPTERS: tuple[ModuleType, ...] = (
    ch1_set_complement,
    ch2_attention_dispersion,
    ch3_construction,
    ch4_vanishing_variance,
    ch5_post_norm,
    ch6_ema,
    ch7_beyond_set_complement,
    ch8_two_kinds,
)
# run's options as the user types them, for the runner's checks to name
FLAGS = {
    "backend": "--backend",
    "seeds_per_task": "--seeds-per-task",
    "ray_address": "--ray-address",
    "ray_num_cpus": "--ray-cpus",
}


def chapter_name(module: ModuleType) -> str:
    """``"ch5"`` for ``lengthgen_lite.chapters.ch5_post_norm``."""
    return module.__name__.rsplit(".", 1)[-1].split("_")[0]


def discover() -> dict[str, Spec]:
    """Every chapter's specs by name, in chapter order."""
    return {
        name: spec
        for module in CHAPTERS
        for name, spec in getattr(module, "SPECS", {}).items()
    }


def without_specs() -> dict[str, str]:
    """Why a chapter has no experiment of its own, by chapter (``"ch2"``): its
    ``NO_SPECS`` line, so ``list`` never leaves a chapter out without a word."""
    return {
        chapter_name(module): module.NO_SPECS
        for module in CHAPTERS
        if hasattr(module, "NO_SPECS")
    }


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
        numbers = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(
            f"--seeds={text!r} is invalid; allowed: a count N (seeds 0..N-1) "
            "or a comma list like 0,3,7"
        ) from None
    if "," in text:
        if min(numbers) < 0 or len(set(numbers)) != len(numbers):
            raise ValueError(
                f"--seeds={text!r} is invalid; allowed: distinct seeds >= 0, e.g. 0,3,7"
            )
        return numbers
    if numbers[0] < 1:
        raise ValueError(
            f"--seeds={text!r} is invalid; allowed: a count N >= 1 (seeds "
            "0..N-1) or a comma list"
        )
    return list(range(numbers[0]))


def parse_count(text: str) -> int:
    """An argparse type: an integer >= 1 (steps, test sets, CPUs); argparse's error
    then names the flag as the user typed it."""
    try:
        if (value := int(text)) >= 1:
            return value
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r} is invalid; allowed: an integer >= 1")


def read_spec(path: str) -> Spec:
    """The spec in a JSON file as ``show`` prints it (``run --spec FILE``)."""
    allowed = "a JSON file as `lengthgen-lite show NAME` prints it"
    try:
        return Spec.from_dict(json.loads(pathlib.Path(path).read_text()))
    except OSError as err:
        raise ValueError(
            f"--spec={path!r} cannot be read ({err.strerror}); allowed: {allowed}"
        ) from None
    except (TypeError, ValueError) as err:  # not JSON, or not a spec
        raise ValueError(
            f"--spec={path!r} is invalid: {err}; allowed: {allowed}"
        ) from None


def parse_indices(text: str) -> list[int]:
    """``"36-47,24"``: configurations 36..47, then 24, in that order. A range runs low
    to high, and no configuration is named twice (either would run other
    configurations than the ones meant, or none)."""
    allowed = "allowed: indices and ranges low-high like 36-47,24, each index once"
    indices: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part)
        if match is None:
            raise ValueError(f"--configs={text!r} is invalid; {allowed}")
        low, high = int(match[1]), int(match[2] or match[1])
        if high < low:
            raise ValueError(
                f"--configs={text!r} is invalid: the range {part} is empty; {allowed}"
            )
        indices.extend(range(low, high + 1))
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise ValueError(
            f"--configs={text!r} is invalid: configurations {repeated} are named "
            f"more than once; {allowed}"
        )
    return indices


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lengthgen-lite", description="Rerun the book's experiments by name."
    )
    parser.add_argument(
        "--version", action="version", version=f"lengthgen-lite {__version__}"
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
        nargs="?",
        help="a chapter (ch7: its first experiment) or an experiment (ch5/dropout)",
    )
    go.add_argument(
        "--spec",
        metavar="FILE",
        help="instead of NAME: a spec as JSON, as `show` prints it",
    )
    go.add_argument(
        "--seeds", help="N (seeds 0..N-1) or a comma list of seeds, e.g. 0,3,7"
    )
    go.add_argument(
        "--steps",
        type=parse_count,
        help="training steps of every configuration (warm-up capped at half)",
    )
    go.add_argument(
        "--test-sets",
        type=parse_count,
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
        type=parse_count,
        help="CPUs of the local Ray cluster (default: all of this machine's)",
    )
    go.add_argument(
        "--seeds-per-task",
        type=parse_count,
        help="with --backend ray: split each configuration's seeds",
    )
    go.add_argument(
        "--tier",
        choices=TIERS,
        default="live",
        help="live: the notebook's budget (default); reference: the converged sweep, "
        "into the store, resuming",
    )
    go.add_argument(
        "--store",
        default=str(STORE),
        help="with --tier reference: the store folder (default: the store shipped in "
        "the package, lengthgen_lite/data/reference)",
    )
    go.add_argument(
        "--configs",
        help="with --tier reference: only these configurations, in this order "
        "(indices and ranges, e.g. 36-47,24), to split a sweep or run its most "
        "telling part first",
    )
    go.add_argument(
        "--out", default="results.json", help="results file (default: results.json)"
    )
    go.add_argument("--no-progress", action="store_true", help="no progress bars")
    smol = commands.add_parser(
        "smollm2",
        help="chapter 8's P6: the causal test in SmolLM2-135M on all its windows, "
        "into the store (a few minutes on one core)",
    )
    smol.add_argument(
        "--store",
        default=str(STORE),
        help="the store folder (default: the store shipped in the package, "
        "lengthgen_lite/data/reference)",
    )
    return parser


def _smollm2(store: str, command: str) -> str:
    """Run and store P6's test; what it found, in a few lines."""
    path = ch8_smollm2.store_reference(store, command)
    test = ch8_smollm2.load_reference(store)
    lines = [f"stored {path}"]
    for kind in test.inputs:
        means = ", ".join(
            f"{c} {test.loss(kind, c).mean():.3f}" for c in ch8_smollm2.CONDITIONS
        )
        lines.append(f"{kind} ({test.windows(kind)} windows): mean loss {means}")
    for key, decision in ch8_smollm2.p6_decisions(test).items():
        lines.append(f"{key}: {decision.word} ({decision.number})")
    return "\n".join(lines)


def _size(spec: Spec) -> str:
    steps = sorted({c.steps for c in spec.configurations()})
    return (
        f"{len(spec.configurations()):3d} configurations x {len(spec.seeds):2d} "
        f"seeds x {'/'.join(map(str, steps))} steps"
    )


def _list(specs: dict[str, Spec], reasons: dict[str, str]) -> str:
    lines = []
    for name, spec in specs.items():
        lines.append(f"{name:16} {spec.description}")
        lines.append(f"{'':18}live      {_size(spec)}")
        lines.append(f"{'':18}reference {_size(spec.at_tier('reference'))}")
    for chapter, reason in reasons.items():
        lines.append(f"{chapter:16} no experiment of its own: {reason}")
    return "\n".join(lines)


def _chosen(args: argparse.Namespace, specs: dict[str, Spec]) -> Spec:
    """``show NAME``; ``run`` NAME or ``--spec FILE``, exactly one of them."""
    if args.command == "run" and (args.name is None) == (args.spec is None):
        raise ValueError(
            f"run got {'both NAME and' if args.spec else 'neither NAME nor'} --spec; "
            "allowed: exactly one, a chapter (ch5), an experiment (ch5/dropout) or "
            "--spec FILE"
        )
    if args.command == "run" and args.spec is not None:
        return read_spec(args.spec)
    return resolve(args.name, specs)


def _at_tier(spec: Spec, args: argparse.Namespace) -> Spec:
    """The spec at ``--tier``, with ``--seeds``, ``--steps`` (a reference sweep cut
    short keeps the checkpoints below its steps) and ``--test-sets``."""
    spec = spec.at_tier(args.tier)
    changes: dict[str, object] = {}
    if args.seeds is not None:
        changes["seeds"] = parse_seeds(args.seeds)
    if args.steps is not None:
        changes["steps"] = args.steps
        changes["checkpoints"] = [c for c in spec.checkpoints if c < args.steps]
    if args.test_sets is not None:
        changes["n_test"] = args.test_sets
    return spec.with_overrides(**changes)


def _seeds_text(seeds: Sequence[int]) -> str:
    """As ``--seeds`` takes them: ``0..9`` for a run of seeds, else ``0,3,7``."""
    seeds = list(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}..{seeds[-1]}"
    return ",".join(map(str, seeds))


def _summary(results: Results, where: str, wall: float) -> str:
    """What ``run`` says at the end: where the results went, what was trained, the
    wall time, and the key metric of every configuration the results hold."""
    spec = results.spec
    steps = "/".join(map(str, sorted({c.steps for c in results.configs})))
    if spec.checkpoints:
        steps += f" (scored also at {', '.join(map(str, spec.checkpoints))})"
    metric = results.key_metric()
    base = metric.removesuffix("_beyond")
    labels = {
        i: results.configs[i].label(spec.varying())
        for i in sorted({row["config"] for row in results.rows})
    }
    width = max(map(len, labels.values()))
    lines = [
        f"{spec.name}: {len(results.configs)} configurations, seeds "
        f"{_seeds_text(spec.seeds)}, {steps} steps, wall time {wall:.1f} s",
        f"results: {where}",
        f"key metric {metric}: {base} averaged over the lengths beyond training (the "
        f"first of {', '.join(KEY_METRICS)} the results hold, else their first)",
        "per configuration, raw weights at the last step: mean over seeds [min, max]",
    ]
    for i, label in labels.items():
        values = results.values(metric, config=i)
        lines.append(
            f"{i:4d}  {label:{width}}  {values.mean():.4g}  "
            f"[{values.min():.4g}, {values.max():.4g}]"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    specs = discover()
    if args.command == "list":
        print(_list(specs, without_specs()))
        return 0
    command = " ".join(["lengthgen-lite", *(sys.argv[1:] if argv is None else argv)])
    if args.command == "smollm2":
        print(_smollm2(args.store, command))
        return 0
    try:  # every check before any training
        spec = _chosen(args, specs)
        if args.command == "show":
            print(json.dumps(spec.to_dict(), indent=1))
            return 0
        spec = _at_tier(spec, args)
        if args.tier == "reference" and args.seeds_per_task is not None:
            raise ValueError(
                "--seeds-per-task is invalid with --tier reference; allowed: one Ray "
                "task per configuration (a stored file holds all its seeds)"
            )
        ray_options = {
            "seeds_per_task": args.seeds_per_task,
            "ray_address": args.ray_address,
            "ray_num_cpus": args.ray_cpus,
        }
        check_run_options(args.backend, **ray_options, names=FLAGS)
        if args.backend == "ray":
            # (only to fail now, with a clear message, if it is missing)
            import ray  # noqa: F401
        only = None if args.configs is None else parse_indices(args.configs)
        if only is not None and args.tier != "reference":
            raise ValueError(
                "--configs is invalid with --tier live; allowed: with --tier "
                "reference (a live run is one results file of every configuration)"
            )
        if only is not None:
            try:  # (only to fail now on a bad index)
                Store(args.store).todo(spec, only)
            except ValueError as err:
                raise ValueError(
                    f"--configs={args.configs!r} is invalid: {err}"
                ) from None
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
    start = time.perf_counter()
    if args.tier == "reference":
        store = Store(args.store)
        for line in store.set_aside_damaged(spec):  # before counting what to run
            print(line, flush=True)
        todo = store.todo(spec, only)
        n = len(spec.configurations())
        print(
            f"{spec.name}: {n - len(store.missing(spec))} of {n} stored, "
            f"{len(todo)} to run"
        )
        results = sweep(
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
        if results is None:  # --configs, and the rest of the sweep not stored yet
            results = store.load(spec, partial=True)
        stored = n - len(results.provenance["missing"])
        where = f"store folder {store.folder(spec)} ({stored} of {n} configurations)"
    else:
        results = run(
            spec,
            backend=args.backend,
            progress=not args.no_progress,
            command=command,
            **ray_options,
        )
        where = str(results.save(out))
    print(_summary(results, where, time.perf_counter() - start))
    return 0
