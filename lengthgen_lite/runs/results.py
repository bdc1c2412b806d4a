"""The one results table: a row per (configuration, variant, seed, logit scale, step),
metrics per length.

Every experiment, whatever its task, returns a :class:`Results`: the spec, its
configurations, and rows ``{"config": i, "variant": "raw" | "ema" | ..., "seed": k,
"scale": c, "step": n, "s": [...], metric: [...]}`` whose metric lists run over the
evaluated lengths ``s``; ``step`` is the training step whose weights were scored (the
last, or a checkpoint of a reference run). One selector reads it:

- :meth:`Results.curves` -> per-length values, ``[seeds, lengths]`` (``[configs, seeds,
  lengths]`` when several configurations match);
- :meth:`Results.values` -> one number per seed, ``[seeds]`` (or ``[configs, seeds]``):
  a metric averaged over the training lengths (``"tv_train"``), the lengths beyond
  (``"tv_beyond"``), or read at the first or longest length (``"logit_gap_first"``,
  ``"tv_longest"``).

``where`` matches any :class:`~lengthgen_lite.runs.spec.Config` field (``norm="post"``)
and the row keys ``variant`` (default "raw"), ``seed``, ``scale`` (default 1.0) and
``step`` (default: each configuration's last). Rows
are saved as JSON with their provenance (git commit and whether the tree was clean,
versions, CPU, threads, wall time, command); the trained models stay in memory only
(:meth:`Results.result`).
"""

from __future__ import annotations

import json
import pathlib
import platform
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np

from ..core.training import TrainResult
from .spec import CONFIG_FIELDS, Config, Spec

ROW_KEYS = ("config", "variant", "seed", "scale", "step")
RANGES = {
    "train": "mean over 1..L",
    "beyond": "mean beyond L",
    "first": "s = 1",
    "longest": "last s",
}
# The metric a run's summary quotes, the first of these that a table has: TV (set
# complement, the game, the languages), else accuracy (chapter 4's retrieval), else the
# table's first metric; always its mean beyond the training lengths (Results.key_metric)
KEY_METRICS = ("tv", "accuracy")
PROVENANCE_KEYS = (
    "git_commit",
    "git_clean",
    "package",
    "torch",
    "numpy",
    "python",
    "cpu",
    "threads",
    "wall_seconds",
    "command",
)


def _git(*args: str) -> str | None:
    root = pathlib.Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _cpu() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _package_version() -> str:
    try:  # the installed distribution's version, as lengthgen_lite.__version__ reads it
        return metadata.version("lengthgen_lite")
    except metadata.PackageNotFoundError:
        return "unknown"


def provenance(wall_seconds: float, command: str | None = None) -> dict[str, Any]:
    """Where a results file came from: code, library versions, machine and the
    command."""
    import torch

    # clean: no tracked file changed (a sweep's own new result files do not count)
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": _git("rev-parse", "HEAD"),
        "git_clean": None if status is None else status == "",
        "package": _package_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu": _cpu(),
        "threads": torch.get_num_threads(),
        "wall_seconds": round(float(wall_seconds), 3),
        "command": command if command is not None else " ".join(sys.argv),
    }


@dataclass
class Results:
    """Rows of one experiment, its spec and provenance, and per configuration how it
    trained: ``live_training`` (a run in this process: the models and loss curves, in
    memory only) or ``stored_training`` (a stored reference sweep's loss summary,
    :func:`~lengthgen_lite.runs.store.training_summary`)."""

    spec: Spec
    rows: list[dict[str, Any]]
    provenance: dict[str, Any] = field(default_factory=dict)
    live_training: dict[int, TrainResult] = field(default_factory=dict, repr=False)
    stored_training: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.configs: list[Config] = self.spec.configurations()
        self.train_length = {
            i: c.setup().train_length for i, c in enumerate(self.configs)
        }

    def select(self, **where: Any) -> list[dict[str, Any]]:
        """The rows matching ``where`` (config fields and row keys; no defaults
        applied)."""
        config_where = {k: v for k, v in where.items() if k in CONFIG_FIELDS}
        row_where = {k: v for k, v in where.items() if k in ROW_KEYS}
        if unknown := set(where) - set(config_where) - set(row_where):
            allowed = ROW_KEYS + CONFIG_FIELDS
            raise ValueError(f"cannot select on {sorted(unknown)}; allowed: {allowed}")
        chosen = {
            i
            for i, c in enumerate(self.configs)
            if all(getattr(c, k) == v for k, v in config_where.items())
        }
        return [
            r
            for r in self.rows
            if r["config"] in chosen and all(r[k] == v for k, v in row_where.items())
        ]

    def _grouped(self, **where: Any) -> list[list[dict[str, Any]]]:
        where = {"variant": "raw", "scale": 1.0} | where
        rows = self.select(**where)
        if "step" not in where:  # the trained weights, not a checkpoint
            rows = [r for r in rows if r["step"] == self.configs[r["config"]].steps]
        if not rows:
            raise ValueError(f"no rows match {where!r}; variants: {self.variants}")
        groups: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            groups.setdefault(row["config"], []).append(row)
        out = []
        for group in groups.values():
            seeds = [r["seed"] for r in group]
            if len(set(seeds)) != len(seeds):
                raise ValueError(
                    f"{where!r} matches a configuration twice per seed; pin "
                    "variant and scale"
                )
            out.append(sorted(group, key=lambda r: r["seed"]))
        if len({len(g) for g in out}) != 1:
            raise ValueError(f"{where!r} matches configurations with different seeds")
        return out

    def curves(self, metric: str, **where: Any) -> np.ndarray:
        """``metric`` at every evaluated length: [seeds, lengths], or [configs, seeds,
        lengths]."""
        groups = self._grouped(**where)
        self._check_metric(metric)
        out = np.array([[r[metric] for r in g] for g in groups], dtype=float)
        return out[0] if len(groups) == 1 else out

    def values(self, metric: str, **where: Any) -> np.ndarray:
        """One number per seed: [seeds], or [configs, seeds] when several configurations
        match.

        ``metric`` is a per-length metric with a suffix: ``_train`` (mean over the
        training lengths), ``_beyond`` (mean over the longer ones), ``_first`` or
        ``_longest`` (one length). Means skip nan (a length where a metric has no
        position).
        """
        base, _, part = metric.rpartition("_")
        if part not in RANGES or not base:
            raise ValueError(
                f"metric {metric!r} needs a suffix; allowed: "
                f"{tuple('_' + r for r in RANGES)}"
            )
        groups = self._grouped(**where)
        self._check_metric(base)
        out = []
        for group in groups:
            L = self.train_length[group[0]["config"]]
            values = np.array([r[base] for r in group], dtype=float)  # [seeds, lengths]
            s = np.asarray(group[0]["s"])
            if part == "first":
                out.append(values[:, 0])
            elif part == "longest":
                out.append(values[:, -1])
            else:
                inside = s <= L if part == "train" else s > L
                out.append(np.nanmean(values[:, inside], axis=1))
        array = np.array(out)
        return array[0] if len(groups) == 1 else array

    def lengths(self, **where: Any) -> np.ndarray:
        """The evaluated lengths ``s`` of the matching rows."""
        return np.asarray(self._grouped(**where)[0][0]["s"])

    def result(self, **where: Any) -> TrainResult:
        """The trained models of the one configuration matching ``where`` (in memory
        only)."""
        configs = sorted({r["config"] for r in self.select(**where)})
        if len(configs) != 1:
            raise ValueError(
                f"{where!r} matches {len(configs)} configurations; one is needed"
            )
        if configs[0] not in self.live_training:
            raise ValueError("the trained models are not kept in a loaded results file")
        return self.live_training[configs[0]]

    def summary(
        self, metrics: Sequence[str], keys: Sequence[str] | None = None, **where: Any
    ) -> list[dict[str, Any]]:
        """Tidy rows, one per (configuration, variant, seed) in table order: config
        fields (``keys``; default task, norm, targets and the varying ones),
        ``variant``, ``seed`` and one number per metric (see :meth:`values`)."""
        if keys is None:
            keys = tuple(
                dict.fromkeys(("task", "norm", "targets", *self.spec.varying()))
            )
        variants = [where.pop("variant")] if "variant" in where else list(self.variants)
        rows = []
        for index, config in enumerate(self.configs):
            if not self.select(config=index, **where):
                continue
            for variant in variants:
                pinned = {"config": index, "variant": variant, **where}
                columns = {m: self.values(m, **pinned) for m in metrics}
                base = {key: getattr(config, key) for key in keys} | {
                    "variant": variant
                }
                for k, seed in enumerate(self.seeds_of(**pinned)):
                    rows.append(
                        base
                        | {"seed": seed}
                        | {m: float(v[k]) for m, v in columns.items()}
                    )
        return rows

    def seeds_of(self, **where: Any) -> list[int]:
        """The seeds of the one configuration matching ``where``, in the order of
        :meth:`values`."""
        return [r["seed"] for r in self._grouped(**where)[0]]

    def _check_metric(self, metric: str) -> None:
        if metric not in self.metrics:
            raise ValueError(
                f"metric {metric!r} is unknown; this table has {self.metrics}"
            )

    def key_metric(self) -> str:
        """The one number per seed a summary quotes (``KEY_METRICS``): length
        generalisation is the book's question, so the mean beyond the training
        lengths, e.g. ``"tv_beyond"``."""
        if not self.metrics:
            raise ValueError("an empty results table has no key metric")
        base = next((m for m in KEY_METRICS if m in self.metrics), self.metrics[0])
        return f"{base}_beyond"

    @property
    def metrics(self) -> tuple[str, ...]:
        return (
            tuple(k for k in self.rows[0] if k not in ROW_KEYS and k != "s")
            if self.rows
            else ()
        )

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r["variant"] for r in self.rows))

    @property
    def seeds(self) -> list[int]:
        return sorted({r["seed"] for r in self.rows})

    def save(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write ``{"spec", "provenance", "rows"}`` as JSON (floats round-trip
        exactly)."""
        path = pathlib.Path(path)
        data = {
            "spec": self.spec.to_dict(),
            "provenance": self.provenance,
            "rows": self.rows,
        }
        path.write_text(json.dumps(data, indent=1))
        return path

    @classmethod
    def load(cls, path: str | pathlib.Path) -> Results:
        """Read a file written by :meth:`save`; the spec and the provenance fields are
        checked."""
        data = json.loads(pathlib.Path(path).read_text())
        if not isinstance(data, dict) or set(data) != {"spec", "provenance", "rows"}:
            raise ValueError(
                f"results file {str(path)!r} must hold exactly 'spec', "
                "'provenance', 'rows'"
            )
        if missing := set(PROVENANCE_KEYS) - set(data["provenance"]):
            raise ValueError(
                f"results file {str(path)!r}: provenance lacks {sorted(missing)}"
            )
        for i, row in enumerate(data["rows"]):
            if not isinstance(row, dict) or not set(ROW_KEYS) | {"s"} <= set(row):
                raise ValueError(
                    f"results file {str(path)!r}: row {i} lacks {ROW_KEYS + ('s',)}"
                )
        return cls(
            spec=Spec.from_dict(data["spec"]),
            rows=data["rows"],
            provenance=data["provenance"],
        )


__all__ = [
    "KEY_METRICS",
    "PROVENANCE_KEYS",
    "RANGES",
    "ROW_KEYS",
    "Results",
    "provenance",
]
