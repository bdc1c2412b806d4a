"""Experiment specs as data: what a chapter trains, validated before any training
starts.

A :class:`Config` is one configuration: one batched
:func:`~lengthgen_lite.core.training.train` call (task, model, training). A
:class:`Spec` is a named experiment (``"ch5/placements"``): its configurations, given as
a grid (every combination of some fields over a base) and/or as a list, the seeds
trained together, the averagers riding along, and what is evaluated (the logit scales,
the test sequences). Every field is checked when the object is built; an unknown field
name or a bad value is a ``ValueError`` naming the field and what is allowed.

``Spec.with_overrides(seeds=..., steps=...)`` gives the bigger (or smaller) rerun of the
same experiment; ``Spec.to_dict``/``from_dict`` round-trip it through JSON
(``lengthgen-lite show``).

Every spec has two tiers. ``"live"`` is what a notebook trains, in minutes.
``Spec.at_tier("reference")`` is the same experiment at the reference tier: at least
ten seeds, trained long enough to measure convergence, with checkpoints (weights scored
at several step counts of the same training) and, where a claim may depend on them, more
axes (the init scale, the learning rate, a component a reviewer would add): the spec's
``reference`` field, over ``REFERENCE_DEFAULTS``. ``runs.store`` keeps its results.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, get_args

from ..core.averaging import make_bema, make_ema
from ..core.model import (
    LOGIT_SCALES,
    NORM_SITES,
    Init,
    ModelConfig,
    NormKind,
    Positional,
)
from ..core.task_registry import TASKS, TEST_TIME, Setup, task_entry
from ..core.training import (
    AveragerFactory,
    Precision,
    Schedule,
    TargetKind,
    TrainConfig,
    TrainPath,
)
from ..core.validation import (
    is_int,
    require_choice,
    require_int,
    require_ints,
    require_number,
)

TARGETS: tuple[str, ...] = get_args(TargetKind)
AVERAGERS = {
    "ema": make_ema,
    "bema": make_bema,
}  # kind -> factory of its keyword options; a spec names each "ema" or "ema_<label>"
TIERS = ("live", "reference")  # the notebook's budget, or the converged one
# What the reference tier changes when a spec's own ``reference`` does not say: ten
# seeds (0..9), 6000 steps scored also at 1000 and 3000, on the fast training path
# (equal to the reference path up to float rounding; core.training).
REFERENCE_DEFAULTS: dict[str, Any] = {
    "seeds": tuple(range(10)),
    "steps": 6000,
    "checkpoints": (1000, 3000),
    "base": {"train_path": "auto"},
}
# ``scales`` and ``averagers`` replace the live ones (a stored row per scale and
# variant: keep only what a claim reads)
REFERENCE_FIELDS = (
    "seeds",
    "steps",
    "checkpoints",
    "base",
    "grid",
    "configs",
    "scales",
    "averagers",
)


def _fail(path: str, value: object, allowed: str) -> None:
    raise ValueError(f"{path}={value!r} is invalid; allowed: {allowed}")


def _check_keys(path: str, data: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for key in data:
        if key not in allowed:
            raise ValueError(
                f"{path} has unknown field {key!r}; allowed: {tuple(allowed)}"
            )


def averager_kind(name: object) -> str:
    """The factory an averager's name picks: its kind ("ema"), alone or before an
    underscore and a label ("ema_long"), so one spec can carry two EMA windows."""
    parts = name.split("_", 1) if isinstance(name, str) else [name]
    if parts[0] not in AVERAGERS or "" in parts[1:]:
        _fail("averagers", name, f"{tuple(AVERAGERS)}, alone or as '<kind>_<label>'")
    return str(parts[0])


def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind))


@dataclass(frozen=True)
class Config:
    """One configuration: the task, the model and the training of one batched ``train``
    call.

    ``task`` is a name registered in ``core.task_registry.TASKS`` and ``norm`` a
    placement of ``core.model.NORM_SITES``, both read when the config is built. Task
    fields: ``v`` is set complement's vocabulary, ``board`` and ``in_a_row`` the game's;
    ``train_length`` and ``test_length`` None take the task's own (set complement: 4
    and v - 1; the game: 8 moves and the full board; a language: 16 and 48 symbols; a
    retrieval task: sets of 2..16 items, tested at N = 8, 16, ..., 1024). A retrieval
    task's model is chapter 4's ``RetrievalTransformer`` (no causal mask, only the query
    attends); its variants are ``norm`` "none" or "attn_out" with ``norm_kind``
    "layernorm" or "standardize"; ``item_mlp`` > 0 gives it an item MLP of that width.
    ``attn_bias`` puts biases on W_V and W_O (any task). ``positional`` is "none"
    (NoPE), "learned" or "rope"; ``logit_scale`` one of ``core.model.LOGIT_SCALES``
    (chapter 8), with ``scale_length`` (n_train, where the factor is 1) None taking the
    training length (a retrieval query sees N + 1 keys: its own slot too).
    """

    task: str = "set_complement"
    v: int = 16
    board: int = 4
    in_a_row: int = 4
    train_length: int | None = None
    test_length: int | None = None
    # the model (core.model.ModelConfig)
    norm: str = "none"
    d_model: int = 64
    n_heads: int = 1
    n_layers: int = 1
    d_mlp: int = 0
    norm_kind: str = "layernorm"
    init: str = "book"  # "torch": PyTorch's nn.Linear init (core.model.Init)
    # reviewers' components (issue 19): biases on W_V/W_O; a retrieval task's item MLP
    # width (0: none)
    attn_bias: bool = False
    item_mlp: int = 0
    attn_dropout: float = 0.0
    resid_dropout: float = 0.0
    # chapter 8: positions and the attention logits' length factor
    positional: str = "none"
    logit_scale: str = "none"
    scale_length: int | None = None
    # training (core.training.TrainConfig); the warm-up is capped at half the steps
    targets: str = "soft"
    steps: int = 1000
    batch: int = 128
    lr: float = 3e-3
    warmup: int = 100
    schedule: str = "constant"
    weight_decay: float = 0.0
    # how train() runs (core.training.TrainPath): the same numbers up to float rounding
    train_path: str = "auto"
    # "bfloat16": the fast path's forward under CPU autocast (core.training); no spec
    # adopts it before its claims' effects agree with float32's at the reference tier
    precision: str = "float32"

    def __post_init__(self) -> None:
        require_choice("task", self.task, tuple(TASKS))
        require_choice("init", self.init, get_args(Init))
        require_choice("train_path", self.train_path, get_args(TrainPath))
        require_choice("precision", self.precision, get_args(Precision))
        require_choice("norm", self.norm, tuple(NORM_SITES))
        require_choice("targets", self.targets, TARGETS)
        require_choice("norm_kind", self.norm_kind, get_args(NormKind))
        require_choice("schedule", self.schedule, get_args(Schedule))
        require_choice("positional", self.positional, get_args(Positional))
        require_choice("logit_scale", self.logit_scale, LOGIT_SCALES)
        if self.logit_scale == "none" and self.scale_length is not None:
            _fail("scale_length", self.scale_length, "None with logit_scale='none'")
        for name in (
            "v",
            "board",
            "in_a_row",
            "d_model",
            "n_heads",
            "n_layers",
            "steps",
            "batch",
        ):
            require_int(name, getattr(self, name), 1)
        if not isinstance(self.attn_bias, bool):
            _fail("attn_bias", self.attn_bias, "False, True")
        if not task_entry(self.task).item_mlp and self.item_mlp != 0:
            _fail("item_mlp", self.item_mlp, "0 (an item MLP is a retrieval task's)")
        for name in ("d_mlp", "warmup", "item_mlp"):
            require_int(name, getattr(self, name), 0)
        for name in ("train_length", "test_length", "scale_length"):
            if getattr(self, name) is not None:
                require_int(name, getattr(self, name), 1)
        for name in ("attn_dropout", "resid_dropout"):
            require_number(name, getattr(self, name), 0.0, 1.0)
        require_number("lr", self.lr, 0.0, strict=True)
        require_number("weight_decay", self.weight_decay, 0.0)
        setup = self.setup()  # the task's own checks (lengths in range)
        if setup.test_length < setup.train_length:
            _fail(
                "test_length", self.test_length, f">= train_length={setup.train_length}"
            )
        self.model_config()  # ModelConfig's own checks (d_model % n_heads, ...)
        self.train_config()  # TrainConfig's (bfloat16 needs the fast path)

    def setup(self) -> Setup:
        """Build the task with its length split (``core.task_registry``)."""
        return task_entry(self.task).setup(self)

    def model_config(self) -> ModelConfig:
        entry = task_entry(self.task)
        setup = self.setup()
        task = setup.task
        # n_train, where the logits' length factor is 1: None without a logit_scale
        scale_length = self.scale_length
        if self.logit_scale != "none" and scale_length is None:
            scale_length = setup.train_length
        return ModelConfig(
            vocab_size=task.vocab_size,
            n_outputs=entry.n_outputs(task),
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            d_mlp=self.d_mlp,
            norm=self.norm,  # type: ignore[arg-type]
            norm_kind=self.norm_kind,  # type: ignore[arg-type]
            init=self.init,  # type: ignore[arg-type]
            attn_bias=self.attn_bias,
            item_mlp=self.item_mlp,
            attn_dropout=self.attn_dropout,
            resid_dropout=self.resid_dropout,
            positional=self.positional,  # type: ignore[arg-type]
            logit_scale=self.logit_scale,  # type: ignore[arg-type]
            scale_length=scale_length,
            **entry.model_fields,
        )

    def train_config(self) -> TrainConfig:
        return TrainConfig(
            steps=self.steps,
            batch=self.batch,
            lr=self.lr,
            warmup=min(self.warmup, self.steps // 2),
            schedule=self.schedule,  # type: ignore[arg-type]
            weight_decay=self.weight_decay,
            targets=self.targets,  # type: ignore[arg-type]
            path=self.train_path,  # type: ignore[arg-type]
            precision=self.precision,  # type: ignore[arg-type]
        )

    def label(self, keys: Sequence[str] | None = None) -> str:
        """``task, norm=post, soft`` plus the fields in ``keys`` (a spec's varying
        ones)."""
        skip = ("task", "norm", "targets", "train_path")
        extra = [k for k in (keys or ()) if k not in skip]
        parts = [self.task, f"norm={self.norm}", self.targets]
        return ", ".join(parts + [f"{k}={getattr(self, k)!r}" for k in extra])


CONFIG_FIELDS = _field_names(Config)


def _config(path: str, values: Mapping[str, Any]) -> Config:
    if not isinstance(values, Mapping):
        _fail(path, values, f"a mapping with fields drawn from {CONFIG_FIELDS}")
    _check_keys(path, values, CONFIG_FIELDS)
    try:
        return Config(**values)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


@dataclass(frozen=True)
class Spec:
    """A named experiment: configurations (``grid`` over ``base``, then ``configs``),
    seeds, averagers.

    ``grid`` maps a :class:`Config` field to the values it takes; every combination (in
    the grid's order, the last field varying fastest) is one configuration. ``configs``
    lists more configurations (each a mapping of fields over ``base``). ``steps`` None
    keeps each configuration's own; an int overrides them all. ``averagers`` maps a
    variant name, "ema"/"bema" or one with a label ("ema_long"), to its factory's
    options (``{"ema": {"beta": 0.99}}``). ``scales`` are
    the logit scales evaluated (1.0 is the model as trained). ``n_test`` and
    ``eval_seed`` fix the test sequences. ``checkpoints`` are step counts below the
    last at which the weights are scored too (rows carry their ``step``). ``reference``
    overrides ``REFERENCE_DEFAULTS`` for :meth:`at_tier` ("reference"); its ``grid``
    adds axes to the spec's grid, its ``base`` adds fields to the spec's base, its
    ``scales`` and ``averagers`` replace the spec's (each a stored row per seed and
    step: the reference keeps those a claim reads).
    """

    name: str
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    configs: Sequence[Mapping[str, Any]] = ()
    base: Mapping[str, Any] = field(default_factory=dict)
    seeds: Sequence[int] = (0, 1, 2)
    steps: int | None = None
    averagers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    scales: Sequence[float] = (1.0,)
    n_test: int = 2000
    eval_seed: int = 0
    tier: str = "live"
    description: str = ""
    checkpoints: Sequence[int] = ()
    reference: Mapping[str, Any] = field(default_factory=dict)
    test_time: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            _fail("name", self.name, "a non-empty string such as 'ch5/placements'")
        grid = dict(self.grid)
        _check_keys("grid", grid, CONFIG_FIELDS)
        for key, values in grid.items():
            if (
                isinstance(values, str)
                or not isinstance(values, Sequence)
                or not values
            ):
                _fail(f"grid.{key}", values, "a non-empty list of values")
            grid[key] = tuple(values)
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "base", dict(self.base))
        object.__setattr__(self, "configs", tuple(dict(c) for c in self.configs))
        _check_keys("base", self.base, CONFIG_FIELDS)
        seeds = require_ints("seeds", self.seeds, 0)
        if len(set(seeds)) != len(seeds):
            _fail("seeds", self.seeds, "distinct seeds (no duplicates)")
        object.__setattr__(self, "seeds", seeds)
        if self.steps is not None:
            require_int("steps", self.steps, 1)
        averagers = {
            name: dict(options) for name, options in dict(self.averagers).items()
        }
        for name in averagers:
            averager_kind(name)
        object.__setattr__(self, "averagers", averagers)
        self.averager_factories()  # the averagers' own checks (beta in (0, 1), ...)
        scales = tuple(
            require_number("scales", c, 0.0, strict=True) for c in self.scales
        )
        if 1.0 not in scales or len(set(scales)) != len(scales):
            _fail("scales", self.scales, "distinct positive logit scales including 1.0")
        object.__setattr__(self, "scales", scales)
        if scales != (1.0,):
            for config in self.configurations():
                if not task_entry(config.task).logit_scales:
                    _fail(
                        "scales",
                        self.scales,
                        f"(1.0,) only: task {config.task!r} is scored at logit "
                        "scale 1.0 only",
                    )
        self._check_test_time()
        require_int("n_test", self.n_test, 1)
        require_int("eval_seed", self.eval_seed, 0)
        require_choice("tier", self.tier, TIERS)
        if self.checkpoints:
            steps = {c.steps for c in self.configurations()}
            checkpoints = tuple(
                sorted(set(require_ints("checkpoints", self.checkpoints, 1)))
            )
            if checkpoints[-1] >= min(steps):
                _fail("checkpoints", self.checkpoints, f"steps below {min(steps)}")
            object.__setattr__(self, "checkpoints", checkpoints)
        else:
            object.__setattr__(self, "checkpoints", ())
        reference = dict(self.reference)
        _check_keys("reference", reference, REFERENCE_FIELDS)
        object.__setattr__(self, "reference", reference)
        if not self.configurations():
            _fail(
                "configs", self.configs, "at least one configuration (a grid or a list)"
            )

    def _check_test_time(self) -> None:
        if isinstance(self.test_time, str) or not isinstance(self.test_time, Sequence):
            _fail("test_time", self.test_time, f"a list drawn from {TEST_TIME}")
        names = tuple(require_choice("test_time", n, TEST_TIME) for n in self.test_time)
        if len(set(names)) != len(names):
            _fail("test_time", self.test_time, "distinct factors (no duplicates)")
        object.__setattr__(self, "test_time", names)
        for config in self.configurations() if names else ():
            if config.logit_scale != "none":
                _fail(
                    "test_time",
                    self.test_time,
                    f"() only: configuration {config.label(('logit_scale',))} trains "
                    "its own logit scale (a test-time factor sharpens a model "
                    "trained without one)",
                )
            missing = set(names) - set(task_entry(config.task).evaluate_test_time)
            if missing:
                _fail(
                    "test_time",
                    self.test_time,
                    f"() only: task {config.task!r} has no test-time "
                    f"{sorted(missing)} evaluation",
                )

    def variants(self) -> tuple[str, ...]:
        """The rows' variants, in table order: the raw weights, each averager's, then
        the raw weights with each test-time factor."""
        return ("raw", *self.averagers, *(f"test_{n}" for n in self.test_time))

    def configurations(self) -> list[Config]:
        """Every configuration, in order: the grid's combinations, then the listed
        ones (built once per spec: a run reads them once per configuration)."""
        return list(self._configurations)

    @cached_property
    def _configurations(self) -> tuple[Config, ...]:
        listed = [dict(c) for c in self.configs]
        keys = list(self.grid)
        combos = [
            dict(zip(keys, values)) for values in itertools.product(*self.grid.values())
        ]
        if not keys and not listed:
            combos = [{}]
        elif not keys:
            combos = []
        steps = {} if self.steps is None else {"steps": self.steps}
        out = []
        for i, values in enumerate(combos + listed):
            path = f"configs[{i - len(combos)}]" if i >= len(combos) else f"grid[{i}]"
            out.append(_config(path, {**self.base, **values, **steps}))
        return tuple(out)

    def varying(self) -> tuple[str, ...]:
        """The config fields that differ between configurations (a results table's key
        columns)."""
        configs = self.configurations()
        return tuple(
            k for k in CONFIG_FIELDS if len({getattr(c, k) for c in configs}) > 1
        )

    def averager_factories(self) -> dict[str, AveragerFactory]:
        out = {}
        for name, options in self.averagers.items():
            factory = AVERAGERS[averager_kind(name)]
            # named before the call: a fixed signature's TypeError names no options
            known = inspect.signature(factory).parameters
            open_ended = any(p.kind is p.VAR_KEYWORD for p in known.values())
            unknown = [] if open_ended else sorted(set(options) - set(known))
            if unknown:
                raise ValueError(
                    f"averagers.{name}={options!r} is invalid: unknown options "
                    f"{unknown}; allowed: {list(known)}"
                )
            try:
                out[name] = factory(**options)
            except (TypeError, ValueError) as err:
                raise ValueError(
                    f"averagers.{name}={options!r} is invalid: {err}"
                ) from None
        return out

    def with_overrides(self, **changes: Any) -> Spec:
        """A copy with fields replaced (``seeds=range(20)``, ``steps=5000``), validated
        again.

        ``seeds`` may be a count (seeds 0..N-1) or a list.
        """
        _check_keys("override", changes, _field_names(Spec))
        if is_int(changes.get("seeds")):
            changes["seeds"] = tuple(range(require_int("seeds", changes["seeds"], 1)))
        return dataclasses.replace(self, **changes)

    def at_tier(self, tier: str) -> Spec:
        """This experiment at ``tier``: itself ("live"), or its reference sweep."""
        require_choice("tier", tier, TIERS)
        if tier == self.tier:
            return self
        if self.tier != "live":
            _fail(
                "tier", tier, f"'{self.tier}' only (this spec is the reference sweep)"
            )
        options = {**REFERENCE_DEFAULTS, **self.reference}
        base = {**self.base, **REFERENCE_DEFAULTS["base"], **options.pop("base")}
        grid = {**self.grid, **options.pop("grid", {})}
        return self.with_overrides(
            tier="reference",
            base=base,
            grid=grid,
            steps=options.pop("steps"),
            **options,
            reference={},
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; ``Spec.from_dict(spec.to_dict()) == spec``."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return json.loads(json.dumps(data))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Spec:
        """The spec of :meth:`to_dict`'s data; a file written before the live/reference
        field was named ``tier`` (``"scale": "reference"``) reads as the same spec."""
        if not isinstance(data, Mapping):
            _fail("spec", data, f"a mapping with fields drawn from {_field_names(cls)}")
        if "scale" in data and "tier" not in data:
            data = {("tier" if k == "scale" else k): v for k, v in data.items()}
        _check_keys("spec", data, _field_names(cls))
        if "name" not in data:
            raise ValueError(
                "spec.name is missing; allowed: a string such as 'ch5/placements'"
            )
        return cls(**data)


__all__ = [
    "CONFIG_FIELDS",
    "REFERENCE_DEFAULTS",
    "TIERS",
    "Config",
    "Spec",
]
