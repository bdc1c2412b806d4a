"""The reference results store: one gzipped JSON file per configuration of a reference
sweep, committed under ``lengthgen_lite/data/reference/`` (package data: an installed
wheel carries it), so a long sweep survives interruptions and the book reads converged
numbers without training.

A file is named by its spec and a key: a hash of everything that decides its numbers
(the configuration's fields, the seeds, the checkpoints, the averagers, the logit
scales and the test set). :func:`sweep` skips a configuration whose file is there, so
re-running the same command resumes; change the spec and its files change name, so
nothing stale is read. Each file holds:

- ``provenance``: git commit (and whether the tree was clean), package, torch, numpy and
  Python versions, CPU model, threads, wall time and the command;
- ``rows``: the runner's rows (one per variant, seed, logit scale and checkpoint step,
  metrics per length), floats rounded to 6 significant digits;
- ``training``: the loss curve per seed in 60 window means, and at every scored step
  the plateau share of :func:`~lengthgen_lite.runs.stats.loss_plateau` per seed and
  whether the seeds' mean has converged.

Files are gzipped (``zcat`` reads one): every metric the runner computes is kept, for
claims not written yet, and the store stays a few MB (11 MB as plain JSON, 3 MB
gzipped). The bytes are deterministic (no timestamp in the gzip header).

A damaged file (not whole gzipped JSON: cut short, a flipped byte) is a ``ValueError``
naming it and the command that re-makes it; that command's sweep sets such a file
aside (``<name>.damaged``, never read again) and trains its configuration again, so one
damaged file cannot end every later run. A readable file that fails a check (fields,
provenance, key) is only named: it may be a whole sweep's worth of older files, not
retrained unasked.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
import pathlib
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.validation import is_int, require_choice
from .results import PROVENANCE_KEYS, ROW_KEYS, Results, provenance
from .runner import check_run_options, ray_units, run_configuration, sort_rows
from .spec import Spec
from .stats import converged, loss_plateau, loss_windows

# The committed reference store: package data, so an installed wheel reads it too.
STORE = pathlib.Path(__file__).resolve().parents[1] / "data" / "reference"
LOSS_WINDOWS = 60  # window means kept of each seed's loss curve
DIGITS = 6  # significant digits kept of every stored metric
FILE_KEYS = ("spec", "config", "key", "provenance", "training", "rows")
SUFFIX = ".json.gz"
DAMAGED = ".damaged"  # appended to a damaged file's name when a sweep sets it aside
# Config fields added after files were stored: left out of the key at their default
# (which is what the older files trained with), so those files keep their names.
LATER_FIELDS = {
    "attn_bias": False,
    "item_mlp": 0,
    "positional": "none",
    "logit_scale": "none",
    "scale_length": None,
    "precision": "float32",
}


def _round(x: float) -> float:
    return x if not math.isfinite(x) else float(f"{x:.{DIGITS}g}")


def write_file(path: pathlib.Path, data: dict[str, Any]) -> None:
    """Write ``data`` as gzipped JSON, whole or not at all (a ``.part`` file renamed),
    with no timestamp in the header: the same data gives the same bytes."""
    text = json.dumps(data, indent=None, separators=(",", ":"))
    partial = path.with_suffix(".part")
    partial.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    partial.replace(path)


def read_file(path: pathlib.Path) -> dict[str, Any]:
    """A store file's contents, unchecked (:meth:`Store.read` checks them); a file that
    is not whole gzipped JSON (cut short, a flipped byte) is a ``ValueError`` naming
    it, not a decompressor's traceback."""
    data = path.read_bytes()
    try:
        return json.loads(gzip.decompress(data))
    except (EOFError, OSError, zlib.error, ValueError) as err:
        raise ValueError(f"{path} is damaged ({err})") from None


def config_key(spec: Spec, index: int) -> str:
    """A short hash of what decides configuration ``index``'s numbers."""
    config = dataclasses.asdict(spec.configurations()[index])
    for name, default in LATER_FIELDS.items():
        if config[name] == default:
            del config[name]
    identity = {
        "config": config,
        "seeds": list(spec.seeds),
        "checkpoints": list(spec.checkpoints),
        "averagers": spec.averagers,
        "scales": list(spec.scales),
        "n_test": spec.n_test,
        "eval_seed": spec.eval_seed,
    }
    if spec.test_time:  # added later: files stored without it keep their names
        identity["test_time"] = list(spec.test_time)
    text = json.dumps(identity, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def training_summary(loss: np.ndarray, steps: list[int]) -> dict[str, Any]:
    """The loss curve in window means [seeds, windows] and, per scored step, the
    plateau share per seed and whether the seeds' mean has converged."""
    loss = np.asarray(loss, dtype=float)
    ends, windows = loss_windows(loss, LOSS_WINDOWS)
    return {
        "window_ends": [int(b) for b in ends],
        "loss_windows": [[_round(float(x)) for x in w] for w in windows],
        "plateau": {
            str(step): [_round(float(x)) for x in loss_plateau(loss, step)]
            for step in steps
        },
        "converged": {str(step): converged(loss, step) for step in steps},
    }


class Store:
    """The files of reference sweeps under ``root`` (default: ``STORE``, the package's
    ``data/reference``)."""

    def __init__(self, root: str | pathlib.Path = STORE) -> None:
        self.root = pathlib.Path(root)

    def folder(self, spec: Spec) -> pathlib.Path:
        return self.root / spec.name.replace("/", "__")

    def path(self, spec: Spec, index: int) -> pathlib.Path:
        """Named by content, not position: a grid that gains or loses a value keeps
        the files of the configurations it still has."""
        return self.folder(spec) / f"{config_key(spec, index)}{SUFFIX}"

    def has(self, spec: Spec, index: int) -> bool:
        return self.path(spec, index).exists()

    def missing(self, spec: Spec) -> list[int]:
        """The configurations of ``spec`` (at the reference tier) with no file yet."""
        spec = spec.at_tier("reference")
        return [i for i in range(len(spec.configurations())) if not self.has(spec, i)]

    def todo(self, spec: Spec, only: Sequence[int] | None = None) -> list[int]:
        """What a sweep of ``spec`` trains: the missing configurations, or those of
        ``only`` (indices, in their order) that are missing."""
        missing = self.missing(spec)
        if only is None:
            return missing
        n = len(spec.configurations())
        bad = [i for i in only if not (is_int(i) and 0 <= i < n)]
        if bad:
            raise ValueError(
                f"configurations {bad} do not exist; allowed: indices 0..{n - 1} "
                f"of {spec.name}'s reference configurations"
            )
        return [i for i in dict.fromkeys(only) if i in missing]

    def stale(self, spec: Spec) -> list[pathlib.Path]:
        """Files in ``spec``'s folder that no configuration of it reads any more (left
        by an earlier version of the spec: delete them with the change)."""
        spec = spec.at_tier("reference")
        keys = {config_key(spec, i) for i in range(len(spec.configurations()))}
        return sorted(
            p
            for p in self.folder(spec).glob(f"*{SUFFIX}")
            if p.name.removesuffix(SUFFIX) not in keys
        )

    def save(
        self,
        spec: Spec,
        index: int,
        rows: list[dict[str, Any]],
        loss: np.ndarray,
        origin: dict[str, Any],
    ) -> pathlib.Path:
        """Write configuration ``index``'s rows, training summary and provenance."""
        steps = sorted({r["step"] for r in rows})
        rounded = [
            {
                k: [_round(x) for x in v] if k not in ROW_KEYS and k != "s" else v
                for k, v in row.items()
            }
            for row in rows
        ]
        data = {
            "spec": spec.to_dict(),
            "config": index,
            "key": config_key(spec, index),
            "provenance": origin,
            "training": training_summary(loss, steps),
            "rows": rounded,
        }
        path = self.path(spec, index)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, data)
        return path

    def read(self, spec: Spec, index: int) -> dict[str, Any]:
        """One configuration's file, checked: its fields, key and provenance."""
        path = self.path(spec, index)
        if not path.exists():
            raise ValueError(
                f"{spec.name} configuration {index} is not in the store ({path}); "
                f"run: lengthgen-lite run {spec.name} --tier reference"
            )
        try:
            data = read_file(path)
        except ValueError as err:
            raise ValueError(
                f"{err}; re-make it: lengthgen-lite run {spec.name} --tier "
                f"reference (sets the file aside, trains configuration {index} again)"
            ) from None
        if set(data) != set(FILE_KEYS):
            raise ValueError(f"{path}: fields {sorted(data)}; expected {FILE_KEYS}")
        if missing := set(PROVENANCE_KEYS) - set(data["provenance"]):
            raise ValueError(f"{path}: provenance lacks {sorted(missing)}")
        if data["key"] != config_key(spec, index):
            raise ValueError(f"{path}: written for another configuration or spec")
        data["rows"] = [row | {"config": index} for row in data["rows"]]
        data["config"] = index  # its place in this spec's grid
        return data

    def set_aside_damaged(self, spec: Spec) -> list[str]:
        """Rename each damaged file of ``spec`` (:func:`read_file` fails) to
        ``<name>.damaged``, so that its configuration is missing and a sweep trains
        it again; one line per file saying so."""
        spec = spec.at_tier("reference")
        lines = []
        for index in range(len(spec.configurations())):
            path = self.path(spec, index)
            if not path.exists():
                continue
            try:
                read_file(path)
            except ValueError as err:
                aside = path.replace(path.with_name(path.name + DAMAGED))
                lines.append(
                    f"{err}: moved to {aside.name}; configuration {index} is trained "
                    "again"
                )
        return lines

    def load(self, spec: Spec, partial: bool = False) -> Results:
        """Every stored configuration of ``spec`` as one
        :class:`~lengthgen_lite.runs.results.Results` (at the reference tier);
        ``partial=False`` insists that none is missing; ``partial=True`` loads what is
        stored and lists the rest in ``provenance["missing"]``."""
        spec = spec.at_tier("reference")
        if (missing := self.missing(spec)) and not partial:
            raise ValueError(
                f"{spec.name} at the reference tier lacks configurations {missing}; "
                f"run: lengthgen-lite run {spec.name} --tier reference"
            )
        files = [
            self.read(spec, i)
            for i in range(len(spec.configurations()))
            if i not in missing
        ]
        rows = sort_rows(spec, [row for data in files for row in data["rows"]])
        origin = {
            "parts": [data["provenance"] for data in files],
            "wall_seconds": sum(d["provenance"]["wall_seconds"] for d in files),
            "missing": missing,  # configurations not stored yet (partial=True)
        }
        training = {data["config"]: data["training"] for data in files}
        return Results(spec, rows, origin, stored_training=training)


def sweep(
    spec: Spec,
    store: Store | None = None,
    backend: str = "local",
    progress: bool = True,
    *,
    ray_address: str | None = None,
    ray_num_cpus: int | None = None,
    command: str | None = None,
    on_saved: Callable[[pathlib.Path], None] | None = None,
    only: Sequence[int] | None = None,
    on_damaged: Callable[[str], None] | None = None,
) -> Results | None:
    """Train every configuration of ``spec`` at the reference tier that the store
    lacks, saving each as it lands (Ray: one task per configuration); load them all.

    A damaged file (:meth:`Store.set_aside_damaged`) counts as lacking: it is set
    aside first, and ``on_damaged`` gets the line saying so.

    ``only``: just these configuration indices, in this order (a long sweep split
    between machines, or its most telling configurations first); then nothing is
    loaded unless the store is complete, and ``None`` is returned."""
    store = Store() if store is None else store
    spec = spec.at_tier("reference")
    check_run_options(backend, None, ray_address, ray_num_cpus)
    require_choice("backend", backend, ("local", "ray"))
    for line in store.set_aside_damaged(spec):
        if on_damaged is not None:
            on_damaged(line)
    todo = store.todo(spec, only)

    def save(index: int, rows: list, loss: np.ndarray, wall: float) -> None:
        path = store.save(spec, index, rows, loss, provenance(wall, command))
        if on_saved is not None:
            on_saved(path)

    if backend == "local":
        for index in todo:
            start = time.perf_counter()
            rows, result = run_configuration(spec, index, progress=progress)
            save(index, rows, result.loss, time.perf_counter() - start)
    elif todo:
        units = [(i, list(spec.seeds)) for i in todo]
        ray_units(
            spec,
            units,
            progress,
            ray_address,
            ray_num_cpus,
            on_done=lambda n, out: save(todo[n], *out),
        )
    if only is not None and store.missing(spec):
        return None
    return store.load(spec)


__all__ = [
    "DAMAGED",
    "STORE",
    "SUFFIX",
    "Store",
    "config_key",
    "read_file",
    "sweep",
    "training_summary",
    "write_file",
]
