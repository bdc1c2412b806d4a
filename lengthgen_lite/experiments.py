"""Rerun a chapter's experiment from a config file, bigger: validated configs, one runner, a results file.

An :class:`ExperimentConfig` holds everything a chapter's set-complement experiment varies (task,
model and its norm placements, training and target kinds, seeds, EMA/BEMA, evaluation lengths).
Every field is validated when the config is built, so a typo fails in a second, not after an hour
of training; where :class:`~lengthgen_lite.core.model.ModelConfig`, :class:`~lengthgen_lite.core.training.TrainConfig`, the task or an averager already
check a value, their own error is raised with the config path in front.

:func:`run_experiment` trains each configuration (norm placement x target kind) once, all seeds in
one batched :func:`~lengthgen_lite.core.training.train` call with the averagers riding along, and scores raw and averaged
weights at every evaluation length. The default backend runs in-process; ``backend="ray"`` sends
each configuration (or seed group) to a Ray task, with identical results for the same seeds. Ray
is an optional extra (``pip install 'lengthgen_lite[ray]'``), imported only when asked for.

:class:`Results` is the tidy table (one row per configuration, variant, seed and length) with the
config and the package version, saved as JSON; :meth:`Results.array` gives the [seed, length]
arrays the chapters' plotting helpers draw.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, get_args

import numpy as np

from . import __version__
from .core.averaging import make_bema, make_ema
from .core.evaluation import evaluate_seeds
from .core.model import PLACEMENTS, ModelConfig
from .core.tasks import SetComplement
from .core.training import AveragerFactory, TargetKind, TrainConfig, train

TASKS: dict[str, type] = {"set_complement": SetComplement}  # evaluation scores set complement only
METRICS = ("tv", "invalid_mass", "logit_gap", "entropy_ratio")  # per-length metrics in the rows
KEY_COLUMNS = ("norm", "targets", "variant", "seed", "s")  # what identifies one row
BACKENDS = ("local", "ray")
RAY_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # one torch thread in every Ray worker
_PLACEMENTS: tuple[str, ...] = PLACEMENTS
_TARGETS: tuple[str, ...] = get_args(TargetKind)


def _fail(path: str, value: object, allowed: str) -> None:
    raise ValueError(f"{path}={value!r} is invalid; allowed: {allowed}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_names(path: str, values: object, allowed: Sequence[str]) -> tuple[str, ...]:
    """A non-empty list of distinct strings out of ``allowed`` (as a tuple)."""
    if isinstance(values, str) or not isinstance(values, Sequence) or not values:
        _fail(path, values, f"a non-empty list drawn from {tuple(allowed)}")
    for i, value in enumerate(values):
        if value not in allowed:
            _fail(f"{path}[{i}]", value, f"one of {tuple(allowed)}")
    if len(set(values)) != len(values):
        _fail(path, values, "distinct values (no duplicates)")
    return tuple(values)


def _check_numbers(section: str, spec: object, names: Sequence[str]) -> None:
    """Only the type (a finite number); the ranges are checked by the class the value goes to."""
    for name in names:
        if not _is_number(getattr(spec, name)):
            _fail(f"{section}.{name}", getattr(spec, name), "a finite number")


def _built(path: str, factory: Callable[..., Any], **kwargs: Any) -> Any:
    """``factory(**kwargs)``; its own ValueError (or a TypeError from a wrong type) gets the config path in front."""
    try:
        return factory(**kwargs)
    except (ValueError, TypeError) as err:
        given = ", ".join(f"{key}={value!r}" for key, value in kwargs.items())
        raise ValueError(f"{path}: {err} (checked as {getattr(factory, '__name__', 'factory')}({given}))") from None


def _distinct_ints(name: str, values: object, minimum: int, meaning: str) -> tuple[int, ...]:
    """``values`` as a tuple if it is a non-empty list of distinct ints >= ``minimum``; otherwise a
    ValueError naming the field (and the index of a bad entry)."""
    if isinstance(values, str) or not isinstance(values, Sequence) or not values:
        _fail(name, values, f"a non-empty list of distinct ints >= {minimum} ({meaning})")
    for i, value in enumerate(values):
        if not _is_int(value) or value < minimum:
            _fail(f"{name}[{i}]", value, f"an int >= {minimum} ({meaning})")
    if len(set(values)) != len(values):
        _fail(name, values, "distinct ints (no duplicates)")
    return tuple(values)


@dataclass(frozen=True)
class TaskSpec:
    """The task: its name in ``TASKS`` and its parameters."""

    name: str = "set_complement"
    v: int = 16
    train_length: int = 4  # trains prefix lengths s = 1..train_length

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name not in TASKS:
            _fail("task.name", self.name, f"one of {tuple(TASKS)}")
        self.build()  # the task's own checks: v >= 2, 1 <= train_length <= v - 1

    def build(self) -> SetComplement:
        return _built("task", TASKS[self.name], v=self.v, train_length=self.train_length)


@dataclass(frozen=True)
class ModelSpec:
    """The model; one configuration per entry of ``placements`` (the norm placement)."""

    placements: tuple[str, ...] = ("none",)
    d_model: int = 64
    n_heads: int = 1
    n_layers: int = 1
    d_head: int | None = None
    d_mlp: int = 0
    norm_kind: str = "layernorm"
    attn_dropout: float = 0.0
    resid_dropout: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "placements", _check_names("model.placements", self.placements, _PLACEMENTS))
        _check_numbers("model", self, ("attn_dropout", "resid_dropout"))
        # The rest (d_model % n_heads, ...) is ModelConfig's own check, run by ExperimentConfig with task.v.

    def build(self, vocab_size: int, norm: str) -> ModelConfig:
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "placements"}
        return _built("model", ModelConfig, vocab_size=vocab_size, norm=norm, **kwargs)


@dataclass(frozen=True)
class TrainSpec:
    """Training; one configuration per entry of ``targets``. ``ema_beta`` None: no EMA."""

    steps: int = 1000
    batch: int = 128
    lr: float = 3e-3
    warmup: int = 100
    schedule: str = "constant"
    weight_decay: float = 0.0
    targets: tuple[str, ...] = ("soft",)
    ema_beta: float | None = None
    bema: bool = False  # BEMA with the package's defaults (averaging.make_bema)

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", _check_names("train.targets", self.targets, _TARGETS))
        _check_numbers("train", self, ("lr", "weight_decay"))
        self.build(self.targets[0])  # TrainConfig's own checks (steps, batch, lr > 0, warmup <= steps, ...)
        if self.ema_beta is not None:
            if not _is_number(self.ema_beta):
                _fail("train.ema_beta", self.ema_beta, "null (no EMA) or a number in (0, 1)")
            _built("train.ema_beta", make_ema, beta=self.ema_beta)
        if not isinstance(self.bema, bool):
            _fail("train.bema", self.bema, "true or false")

    def build(self, targets: str) -> TrainConfig:
        kwargs = {name: getattr(self, name) for name in ("steps", "batch", "lr", "warmup", "schedule", "weight_decay")}
        return _built("train", TrainConfig, targets=targets, **kwargs)

    def averagers(self) -> dict[str, AveragerFactory]:
        chosen = {"ema": make_ema(self.ema_beta)} if self.ema_beta is not None else {}
        return chosen | ({"bema": make_bema()} if self.bema else {})


@dataclass(frozen=True)
class EvalSpec:
    """Evaluation: prefix lengths ``s`` to report (None: all of 1..v-1) on ``n_sequences`` test sequences."""

    lengths: tuple[int, ...] | None = None
    n_sequences: int = 2000
    seed: int = 0  # the test sequences' generator, shared by every model

    def __post_init__(self) -> None:
        if self.lengths is not None:
            lengths = _distinct_ints("evaluation.lengths", self.lengths, 1, "prefix lengths s; or null for all of 1..v-1")
            object.__setattr__(self, "lengths", tuple(sorted(lengths)))
        if not _is_int(self.n_sequences) or self.n_sequences < 1:
            _fail("evaluation.n_sequences", self.n_sequences, "an int >= 1")
        if not _is_int(self.seed) or self.seed < 0:
            _fail("evaluation.seed", self.seed, "an int >= 0")


SECTIONS: dict[str, type] = {"task": TaskSpec, "model": ModelSpec, "train": TrainSpec, "evaluation": EvalSpec}


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: build it with :meth:`from_dict` / :meth:`load` (JSON), or directly."""

    name: str
    seeds: tuple[int, ...] = (0, 1, 2)
    task: TaskSpec = field(default_factory=TaskSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    evaluation: EvalSpec = field(default_factory=EvalSpec)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            _fail("name", self.name, "a non-empty string")
        object.__setattr__(self, "seeds", _distinct_ints("seeds", self.seeds, 0, "seeds"))
        for section, kind in SECTIONS.items():
            if not isinstance(getattr(self, section), kind):
                _fail(section, getattr(self, section), f"a {kind.__name__}")
        v = self.task.v
        for norm in self.model.placements:  # ModelConfig's own checks, with the real vocabulary
            self.model.build(vocab_size=v, norm=norm)
        for i, s in enumerate(self.evaluation.lengths or ()):
            if s > v - 1:
                _fail(f"evaluation.lengths[{i}]", s, f"a prefix length s in 1..v-1 = 1..{v - 1} (task.v={v})")

    # --- reading and writing -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExperimentConfig:
        """Build from plain data (parsed JSON); unknown keys anywhere are an error."""
        if not isinstance(data, Mapping):
            _fail("config", data, "a JSON object with keys " + str(_allowed(cls)))
        _check_keys("config", data, _allowed(cls))
        kwargs: dict[str, Any] = {key: value for key, value in data.items() if key not in SECTIONS}
        if "name" not in data:
            raise ValueError("config.name is missing; allowed: a non-empty string naming the experiment")
        for section, kind in SECTIONS.items():
            if section in data:
                values = data[section]
                if not isinstance(values, Mapping):
                    _fail(section, values, f"a JSON object with keys {_allowed(kind)}")
                _check_keys(section, values, _allowed(kind))
                kwargs[section] = kind(**values)
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; ``from_dict(to_dict())`` gives the same config."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, path: str | pathlib.Path) -> ExperimentConfig:
        """Read a JSON config file (errors name the file)."""
        path = pathlib.Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"config file {str(path)!r} does not exist") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"config file {str(path)!r} is not valid JSON: {err}") from None
        return cls.from_dict(data)

    def with_overrides(self, updates: Mapping[str, Any]) -> ExperimentConfig:
        """A copy with dotted keys replaced (``{"train.steps": 30, "seeds": [0, 1]}``), validated again."""
        data = self.to_dict()
        for key, value in updates.items():
            if key not in OVERRIDE_KEYS:
                _fail("override key", key, f"one of {OVERRIDE_KEYS}")
            section, _, leaf = key.rpartition(".")
            (data[section] if section else data)[leaf] = value
        return type(self).from_dict(data)

    # --- what the runner needs -------------------------------------------------------------------
    @property
    def lengths(self) -> tuple[int, ...]:
        """The evaluated prefix lengths ``s``."""
        return self.evaluation.lengths or tuple(range(1, self.task.v))

    def configurations(self) -> list[tuple[str, str]]:
        """Every (norm placement, target kind), in config order: one batched ``train`` call each."""
        return [(norm, targets) for norm in self.model.placements for targets in self.train.targets]


def _allowed(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind))


OVERRIDE_KEYS: tuple[str, ...] = ("name", "seeds") + tuple(
    f"{section}.{key}" for section, kind in SECTIONS.items() for key in _allowed(kind)
)


def _check_keys(path: str, data: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for key in data:
        if key not in allowed:
            raise ValueError(f"{path} has unknown key {key!r}; allowed keys: {tuple(allowed)}")


# --- running ---------------------------------------------------------------------------------------


def run_configuration(
    config: ExperimentConfig, norm: str, targets: str, seeds: Sequence[int], progress: bool = True
) -> list[dict[str, Any]]:
    """Train one configuration for ``seeds`` in one batched call; rows for raw and averaged weights."""
    task = config.task.build()
    model_cfg = config.model.build(vocab_size=task.v, norm=norm)
    train_cfg = config.train.build(targets)
    desc = f"{config.name}: norm={norm}, {targets} targets, {len(seeds)} seeds"
    result = train(model_cfg, task, train_cfg, seeds, averagers=config.train.averagers(), progress=progress, desc=desc)
    evaluation = config.evaluation
    wanted = [s - 1 for s in config.lengths]  # tables hold s = 1..v-1
    rows = []
    for variant, models in {"raw": result.models, **result.averaged}.items():
        tables = evaluate_seeds(models, task.v, n_sequences=evaluation.n_sequences, seed=evaluation.seed)
        for seed, table in zip(result.seeds, tables):
            for i in wanted:
                row: dict[str, Any] = {"norm": norm, "targets": targets, "variant": variant, "seed": seed, "s": int(table.s[i])}
                rows.append(row | {metric: float(getattr(table, metric)[i]) for metric in METRICS})
    return rows


def _run_unit(config_data: dict[str, Any], norm: str, targets: str, seeds: list[int], progress: bool) -> list[dict[str, Any]]:
    """What one Ray task runs: plain data in and out."""
    return run_configuration(ExperimentConfig.from_dict(config_data), norm, targets, seeds, progress)


def check_run_options(
    backend: str, seeds_per_task: int | None = None, ray_address: str | None = None, ray_num_cpus: int | None = None
) -> None:
    """Validate :func:`run_experiment`'s options (before any training starts)."""
    if backend not in BACKENDS:
        _fail("backend", backend, f"one of {BACKENDS}")
    ray_options = {"seeds_per_task": seeds_per_task, "ray_address": ray_address, "ray_num_cpus": ray_num_cpus}
    if backend == "local":
        for name, value in ray_options.items():
            if value is not None:
                _fail(name, value, "None with backend='local' (all seeds train in one batched call, in this process)")
    for name in ("seeds_per_task", "ray_num_cpus"):
        value = ray_options[name]
        if value is not None and (not _is_int(value) or value < 1):
            _fail(name, value, "None (the default) or an int >= 1")
    if ray_address is not None and ray_num_cpus is not None:
        _fail("ray_num_cpus", ray_num_cpus, "None when ray_address is given (the cluster has its own CPUs)")
    if ray_address is not None and (not isinstance(ray_address, str) or not ray_address):
        _fail("ray_address", ray_address, "None (start a local cluster) or an address such as 'auto'")


def _units(config: ExperimentConfig, seeds_per_task: int | None) -> list[tuple[str, str, list[int]]]:
    seeds = list(config.seeds)
    size = len(seeds) if seeds_per_task is None else seeds_per_task
    groups = [seeds[i : i + size] for i in range(0, len(seeds), size)]
    return [(norm, targets, group) for norm, targets in config.configurations() for group in groups]


def _ray_rows(
    config: ExperimentConfig, units: list[tuple[str, str, list[int]]], progress: bool, address: str | None, num_cpus: int | None
) -> list[list[dict[str, Any]]]:
    try:
        import ray
    except ImportError:
        raise ImportError("backend='ray' needs Ray, an optional extra: pip install 'lengthgen_lite[ray]'") from None
    started = not ray.is_initialized()
    if started:
        if address is None:  # a local cluster on this machine
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=progress)
        else:
            ray.init(address=address, log_to_driver=progress)
    try:
        task = ray.remote(_run_unit).options(num_cpus=1, runtime_env={"env_vars": RAY_ENV})
        data = config.to_dict()
        return ray.get([task.remote(data, norm, targets, seeds, progress) for norm, targets, seeds in units])
    finally:
        if started:
            ray.shutdown()


def run_experiment(
    config: ExperimentConfig,
    backend: str = "local",
    progress: bool = True,
    *,
    seeds_per_task: int | None = None,
    ray_address: str | None = None,
    ray_num_cpus: int | None = None,
) -> Results:
    """Train and score every configuration of ``config``; rows in config order, then seed, then ``s``.

    ``backend="local"`` trains in this process, each configuration's seeds in one batched call.
    ``backend="ray"`` runs each configuration as a Ray task (split into groups of
    ``seeds_per_task`` seeds if given), on the cluster at ``ray_address`` or, if None, on a local
    cluster of ``ray_num_cpus`` CPUs started here (and stopped afterwards). A Ray session that is
    already running is used as it is. Each seed's result does not depend on the backend.
    """
    if not isinstance(config, ExperimentConfig):
        _fail("config", config, "an ExperimentConfig (see ExperimentConfig.load)")
    check_run_options(backend, seeds_per_task, ray_address, ray_num_cpus)
    if backend == "local":
        parts = [run_configuration(config, norm, targets, config.seeds, progress) for norm, targets in config.configurations()]
    else:
        parts = _ray_rows(config, _units(config, seeds_per_task), progress, ray_address, ray_num_cpus)
    rows = [row for part in parts for row in part]
    order = {key: i for i, key in enumerate(config.configurations())}
    rows.sort(key=lambda r: (order[r["norm"], r["targets"]], ["raw", "ema", "bema"].index(r["variant"]), r["seed"], r["s"]))
    return Results(config=config, rows=rows, version=package_version())


def package_version() -> str:
    """The installed package's version (``lengthgen_lite.__version__``), written into every results file."""
    return __version__


# --- results -----------------------------------------------------------------------------------------


@dataclass
class Results:
    """Tidy rows (``KEY_COLUMNS`` + ``METRICS``), the config that produced them and the package version."""

    config: ExperimentConfig
    rows: list[dict[str, Any]]
    version: str

    def save(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write ``{"config", "rows", "version"}`` as JSON (floats round-trip exactly)."""
        path = pathlib.Path(path)
        path.write_text(json.dumps({"version": self.version, "config": self.config.to_dict(), "rows": self.rows}, indent=1))
        return path

    @classmethod
    def load(cls, path: str | pathlib.Path) -> Results:
        """Read a file written by :meth:`save`; the config is validated again."""
        data = json.loads(pathlib.Path(path).read_text())
        if not isinstance(data, dict) or set(data) != {"version", "config", "rows"}:
            raise ValueError(f"results file {str(path)!r} must hold exactly the keys ('version', 'config', 'rows')")
        columns = set(KEY_COLUMNS + METRICS)
        for i, row in enumerate(data["rows"]):
            if not isinstance(row, dict) or set(row) != columns:
                raise ValueError(f"results file {str(path)!r}: row {i} must have the columns {sorted(columns)}")
        return cls(config=ExperimentConfig.from_dict(data["config"]), rows=data["rows"], version=data["version"])

    def select(self, **where: Any) -> list[dict[str, Any]]:
        """Rows matching every ``column=value`` in ``where``."""
        if unknown := set(where) - set(KEY_COLUMNS):
            raise ValueError(f"cannot select on {sorted(unknown)}; allowed columns: {KEY_COLUMNS}")
        return [row for row in self.rows if all(row[key] == value for key, value in where.items())]

    def array(self, metric: str, **where: Any) -> np.ndarray:
        """``metric`` as [seed, length] for one (norm, targets, variant): the [K, len(s)] curves that
        ``viz.plots.plot_length_curves`` and the chapters' plotting helpers draw against :attr:`lengths`.

        ``where`` must pin down one configuration; ``targets`` and ``variant`` may be left out when
        the experiment has only one (variant defaults to "raw").
        """
        if metric not in METRICS:
            _fail("metric", metric, f"one of {METRICS}")
        where = {"variant": "raw"} | where
        if len(self.config.train.targets) == 1:
            where.setdefault("targets", self.config.train.targets[0])
        if len(self.config.model.placements) == 1:
            where.setdefault("norm", self.config.model.placements[0])
        rows = self.select(**where)
        if not rows:
            raise ValueError(f"no rows match {where!r}")
        seeds, lengths = sorted({r["seed"] for r in rows}), sorted({r["s"] for r in rows})
        if len(rows) != len(seeds) * len(lengths) or len({(r["seed"], r["s"]) for r in rows}) != len(rows):
            raise ValueError(f"{where!r} matches several configurations; also give norm, targets and variant")
        out = np.full((len(seeds), len(lengths)), np.nan)
        for r in rows:
            out[seeds.index(r["seed"]), lengths.index(r["s"])] = r[metric]
        return out

    @property
    def lengths(self) -> np.ndarray:
        """The evaluated prefix lengths ``s``: the columns of :meth:`array`."""
        return np.array(sorted({row["s"] for row in self.rows}))

    @property
    def seeds(self) -> list[int]:
        """The seeds: the rows of :meth:`array`."""
        return sorted({row["seed"] for row in self.rows})


__all__ = [
    "BACKENDS",
    "METRICS",
    "EvalSpec",
    "ExperimentConfig",
    "ModelSpec",
    "Results",
    "TaskSpec",
    "TrainSpec",
    "check_run_options",
    "package_version",
    "run_configuration",
    "run_experiment",
]
