"""The one training loop. Chapter 1 introduces it; chapter 5 explains the batching.

``train`` always trains ``K = len(seeds)`` independent models as one computation: their
parameters are stacked along a new leading axis and the forward pass is
``torch.func.vmap``-ed over it. The summed loss has per-model gradients equal to each
model's own (``torch.autograd.grad`` eagerly; ``torch.func.grad_and_value`` where the
step is compiled: the same numbers, see ``_gradients``), and AdamW acts
elementwise, so every seed gets the training it would get alone (up to float
rounding). Batching pays Python and dispatch overhead once per step
instead of K times; the arithmetic (mostly the d_model x d_model matmuls, already at
full single-core speed for one seed) still grows with K. For chapter 5's model that
gives about 2x over a Python loop at batch 128 and about 4-5x at batch 32
(``benchmarks/batched_training.py``). Data are drawn per seed from the seed's own
generator, then processed for all seeds at once (``Task.sample_train_batches`` when the
task has it).

Weight averagers (EMA, BEMA; chapter 6) watch the stacked parameters after every step
and never change the trajectory.

Two paths run the same loop (``TrainConfig.path``). The *reference* path draws each
step's batch in Python and runs the step eagerly. The *fast* path (:func:`plan_path`
says which parts apply):

- draws the batches ``CHUNK`` steps at a time: each seed's generator makes exactly the
  draws the reference path makes, in the same order (a step's noise, then its target
  tokens), and the rest is one vectorised call per chunk (tasks that are a
  :class:`~lengthgen_lite.core.tasks.NoiseSampler` with one training size), so every
  seed sees the same data;
- computes the first layer's Q/K/V, and V through W_O, from v-row token tables
  (``Transformer.forward(tables=True)``: no positions, so a position's input depends on
  its token alone);
- compiles the step (``torch.compile``, inductor) where it pays back: at least
  ``COMPILE_TOKEN_STEPS`` positions trained (``benchmarks/speed.py --fast-path``
  measures the break-even), fixed shapes (one training size) and no dropout (compiled
  dropout draws other masks), with the attention's tiny products as broadcast sums
  (``forward(broadcast=True)``) that it fuses. The whole step, AdamW and the learning
  rate schedule included, is one graph (``_compiled_step``), which later trainings
  of the same model and shapes reuse (seven graphs kept). Its cache goes to
  ``_build/inductor`` (``TORCHINDUCTOR_CACHE_DIR``), so re-executions compile once.

Both paths give the same losses up to float rounding (``tests/test_core_training.py``).
"""

from __future__ import annotations

import copy
import os
import pathlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, get_args

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap
from tqdm.auto import tqdm

from .model import ModelConfig, Transformer, init_model
from .seeding import make_generator
from .tasks import (
    Batch,
    NoiseSampler,
    Task,
    pick_next_tokens,
    sample_next_tokens,
    token_noise,
)
from .validation import is_int, require_ints

TargetKind = Literal["soft", "sampled"]
Schedule = Literal["constant", "cosine"]
TrainPath = Literal["auto", "fast", "compiled", "reference"]
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt}"
CHUNK = 50  # steps whose batches the fast path draws at once
# auto compiles a training of at least this many token-steps (steps x K x batch x
# sequence length): compiling costs seconds whatever the size, and saves time per
# position trained. `benchmarks/speed.py --fast-path` measures the break-even (1.5-3.1
# million); a chapter's second training of the same shapes reuses the compiled step.
COMPILE_TOKEN_STEPS = 2_000_000
INDUCTOR_CACHE = pathlib.Path(__file__).resolve().parents[2] / "_build" / "inductor"
# Here, at import: importing torch._dynamo (which compiling does) fixes the folder, to
# /tmp/torchinductor_<user> unless this variable is already set. A folder set by the
# user wins.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR_CACHE))


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000
    lr: float = 3e-3
    batch: int = 128
    warmup: int = 100  # linear warm-up steps
    schedule: Schedule = "constant"  # after warm-up
    weight_decay: float = 0.0  # AdamW, on matrices only (see _param_groups)
    # "soft": the full p*; "sampled": one legal token drawn from p*
    targets: TargetKind = "soft"
    size_seed: int = 0  # draws each step's input size, shared by all seeds
    # "auto" (what the book's outputs use): the fast path, compiled from
    # COMPILE_TOKEN_STEPS positions trained; "fast": chunked data and token tables
    # where they apply; "compiled": fast plus torch.compile wherever it can;
    # "reference": the plain eager loop, the yardstick the others are tested against
    # (same numbers up to float rounding).
    path: TrainPath = "auto"

    def __post_init__(self) -> None:
        for name in ("steps", "batch"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not is_int(self.warmup) or not 0 <= self.warmup <= self.steps:
            raise ValueError(
                f"warmup must be an int in 0..steps={self.steps}, got {self.warmup!r}"
            )
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        for name, literal in (
            ("targets", TargetKind),
            ("schedule", Schedule),
            ("path", TrainPath),
        ):
            if getattr(self, name) not in get_args(literal):
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is unknown; allowed: "
                    f"{get_args(literal)}"
                )

    def lr_factor(self, step: int) -> float:
        """Multiplier of ``lr`` at ``step``: linear warm-up, then constant or cosine to
        zero."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self.schedule == "constant":
            return 1.0
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return 0.5 * (1.0 + float(np.cos(np.pi * progress)))


StackedParams = dict[str, Tensor]  # name -> [K, *shape]


class Averager(Protocol):
    """Keeps an average of the stacked parameters; see
    :mod:`lengthgen_lite.core.averaging`."""

    def update(self, params: StackedParams, step: int) -> None: ...

    def averaged(self) -> StackedParams: ...


# called once with the initial parameters
AveragerFactory = Callable[[StackedParams], Averager]


@dataclass
class TrainResult:
    models: list[nn.Module]  # one per seed, final raw weights, in eval mode
    averaged: dict[str, list[nn.Module]]  # averager name -> one model per seed
    loss: np.ndarray  # [steps, K] training loss per step and seed
    seeds: list[int] = field(default_factory=list)
    # step -> {"raw" | averager name -> one model per seed}: the weights at each of
    # ``train``'s ``checkpoints`` before the last step (the last step's are above)
    checkpoints: dict[int, dict[str, list[nn.Module]]] = field(default_factory=dict)


def training_loss(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Cross-entropy against target distributions, averaged over the masked positions
    (the loss :func:`train` minimises).

    logits, targets: [batch, pos, n_outputs]; mask: [batch, pos] -> scalar.
    """
    if logits.shape != targets.shape or mask.shape != logits.shape[:-1]:
        raise ValueError(
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} "
            "must match, "
            f"and mask {tuple(mask.shape)} must be their leading [batch, pos]"
        )
    per_position = -(targets * logits.log_softmax(dim=-1)).sum(dim=-1)  # [batch, pos]
    mask = mask.float()
    return (per_position * mask).sum() / mask.sum()


def _param_groups(
    template: nn.Module, params: StackedParams, weight_decay: float
) -> list[dict]:
    # nanoGPT's rule, judged on the unstacked shapes: matrices (incl. embeddings) decay;
    # LN gains and biases don't, since shrinking them only changes scale, which a norm
    # undoes anyway.
    dims = {name: p.dim() for name, p in template.named_parameters()}
    decay = [p for name, p in params.items() if dims[name] >= 2]
    no_decay = [p for name, p in params.items() if dims[name] < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _unstack(
    template: nn.Module, params: StackedParams, buffers: StackedParams, k: int
) -> nn.Module:
    model = copy.deepcopy(template)
    model.load_state_dict(
        {name: t[k].detach().clone() for name, t in {**params, **buffers}.items()}
    )
    return model.eval()


def _sample_batches(
    task: Task, batch: int, size: int, generators: Sequence[torch.Generator]
) -> Batch:
    """One batch per seed, stacked [K, batch, ...]; vectorised when the task offers it
    (same draws)."""
    if hasattr(task, "sample_train_batches"):
        return task.sample_train_batches(batch, size, generators)
    batches = [task.sample_train_batch(batch, size, g) for g in generators]
    return Batch(
        *(
            torch.stack([getattr(b, name) for b in batches])
            for name in ("inputs", "targets", "loss_mask")
        )
    )


def _one_hot_targets(tokens: Tensor, n_outputs: int) -> Tensor:
    return nn.functional.one_hot(tokens, n_outputs).float()


def _reference_batches(
    task: Task, cfg: TrainConfig, streams: Sequence[torch.Generator]
) -> Iterator[Batch]:
    """Each step's batch drawn when the step comes: [K, batch, ...]."""
    size_stream = make_generator(cfg.size_seed)
    sizes = list(task.train_sizes())
    for _ in range(cfg.steps):
        size = sizes[int(torch.randint(len(sizes), (1,), generator=size_stream))]
        data = _sample_batches(task, cfg.batch, size, streams)
        # each seed draws from its own stream, then one one-hot for all
        if cfg.targets == "sampled":
            tokens = torch.stack(
                [sample_next_tokens(t, g) for t, g in zip(data.targets, streams)]
            )
            data = Batch(
                data.inputs,
                _one_hot_targets(tokens, data.targets.shape[-1]),
                data.loss_mask,
            )
        yield data


def _chunked_batches(
    task: NoiseSampler, cfg: TrainConfig, streams: Sequence[torch.Generator]
) -> Iterator[Batch]:
    """The same batches as :func:`_reference_batches`, ``CHUNK`` steps at a time.

    Only the random draws run per seed and step, in the reference order (noise, then the
    target tokens' noise); sorting, rules, targets and token picks run once per chunk
    for all seeds.
    """
    (size,) = task.train_sizes()
    K = len(streams)
    for start in range(0, cfg.steps, CHUNK):
        n = min(CHUNK, cfg.steps - start)
        noise, picks = [], []
        for g in streams:
            for _ in range(n):
                noise.append(task.draw_noise(cfg.batch, size, g))
                if cfg.targets == "sampled":
                    picks.append(token_noise((cfg.batch, size, task.n_outputs), g))
        data = task.from_noise(
            torch.stack(noise).view(K, n * cfg.batch, *noise[0].shape[1:]), size
        )
        targets = data.targets  # [K, n * batch, pos, n_outputs]
        if cfg.targets == "sampled":
            targets = _one_hot_targets(
                pick_next_tokens(targets, torch.stack(picks).view(targets.shape)),
                task.n_outputs,
            )

        # [K, n * batch, ...] -> [n, K, batch, ...]
        def steps_first(t: Tensor) -> Tensor:
            # called below, in this iteration: n is this chunk's
            return t.view(K, n, cfg.batch, *t.shape[2:]).transpose(0, 1).contiguous()  # noqa: B023

        yield from (
            Batch(*step)
            for step in zip(*map(steps_first, (data.inputs, targets, data.loss_mask)))
        )


def _adamw_rows(cfg: TrainConfig, beta1: float, beta2: float) -> Tensor:
    """[steps, 4] float32: step t's (1 - lr_t * weight_decay, -lr_t / (1 - beta1^s),
    sqrt(1 - beta2^s), 0) with s = t + 1, each in double as ``torch.optim.AdamW``
    (single-tensor, float lr) and ``LambdaLR`` compute them on the reference path.

    Rows of four floats are 16-byte aligned, so each step's row is passed to the
    compiled step as a view without a copy.
    """
    rows = []
    for t in range(cfg.steps):
        lr, s = cfg.lr * cfg.lr_factor(t), t + 1
        rows.append(
            (1 - lr * cfg.weight_decay, -lr / (1 - beta1**s), (1 - beta2**s) ** 0.5, 0)
        )
    return torch.tensor(rows, dtype=torch.float64).float()


Gradients = Callable[
    [StackedParams, StackedParams, Batch], tuple[StackedParams, tuple[Tensor, Tensor]]
]


def _gradients(
    template: nn.Module, forward_kwargs: Mapping[str, bool], traced: bool
) -> Gradients:
    """(params, buffers, batch) -> (per-seed gradients, (summed loss, [K] losses)).

    Only ``template``'s structure is used (a copy on the meta device). ``traced``:
    gradients by ``torch.func.grad_and_value``, which torch.compile traces with the
    forward as one graph (it stops at an autograd call). Eagerly, plain
    ``torch.autograd.grad`` on the same vmapped loss records the same batched
    operations, so it gives the same gradients bit for bit (tested) without torch.func's
    per-operation wrapping: about 10 % faster per step (chapter 4's retrieval models).
    """
    base = copy.deepcopy(template).to("meta").train()

    def loss_one(
        p: StackedParams,
        b: StackedParams,
        inputs: Tensor,
        targets: Tensor,
        mask: Tensor,
    ) -> Tensor:
        return training_loss(
            functional_call(base, (p, b), (inputs,), dict(forward_kwargs)),
            targets,
            mask,
        )

    batched_loss = vmap(loss_one, randomness="different")

    def summed_loss(
        p: StackedParams, b: StackedParams, data: Batch
    ) -> tuple[Tensor, Tensor]:
        # [K]
        loss = batched_loss(p, b, data.inputs, data.targets, data.loss_mask.float())
        return loss.sum(), loss.detach()

    if traced:
        return grad_and_value(summed_loss, has_aux=True)

    def gradients(
        p: StackedParams, b: StackedParams, data: Batch
    ) -> tuple[StackedParams, tuple[Tensor, Tensor]]:
        total, loss = summed_loss(p, b, data)
        grads = torch.autograd.grad(total, tuple(p.values()))
        return dict(zip(p, grads)), (total.detach(), loss)

    return gradients


# the compiled steps of the last compiled trainings, by what their graph depends on:
# a chapter's next configuration with the same model (e.g. the other target kind)
# reuses its graph instead of tracing it again (seconds each, even from a warm cache)
_COMPILED: dict[tuple, Callable[..., Tensor]] = {}


def _compiled_step(
    template: nn.Module,
    model_cfg: ModelConfig,
    size: int,
    forward_kwargs: Mapping[str, bool],
    params: StackedParams,
    buffers: StackedParams,
    optimizer: torch.optim.AdamW,
    cfg: TrainConfig,
) -> Callable[[Batch, int], Tensor]:
    """The whole training step as one compiled graph: forward, backward and AdamW.

    ``torch.optim.AdamW.step`` under ``LambdaLR`` breaks the graph (dynamo skips it),
    and the optimizer then ran as several small graphs and eager code per step, about
    half a step's time. Here AdamW is the reference's single-tensor update written out,
    its hyperparameters read from ``optimizer`` (which is not stepped), and the learning
    rate schedule and bias corrections are a precomputed per-step row
    (``_adamw_rows``), so no Python number changes between steps. Every tensor is an
    argument, so the next training with the same model, seeds count and optimizer
    (any lr, schedule, weight decay > 0 or steps) reuses the compiled graph instead of
    tracing it again, also after other trainings in between. Updates params in place;
    returns the [K] losses.
    """
    groups = optimizer.param_groups
    (beta1, beta2), eps = groups[0]["betas"], groups[0]["eps"]
    if any(
        (g["betas"], g["eps"], g["lr"], g["amsgrad"], g["maximize"])
        != ((beta1, beta2), eps, cfg.lr, False, False)
        for g in groups
    ) or {g["weight_decay"] for g in groups} - {0.0, cfg.weight_decay}:
        raise ValueError(f"the compiled step has no AdamW for groups {groups!r}")
    decayed = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    decays = tuple(id(p) in decayed for p in params.values())
    K = next(iter(params.values())).shape[0]
    key = (model_cfg, type(template), tuple(forward_kwargs.items()), K, decays)
    key += (cfg.batch, size, beta1, beta2, eps)
    if key not in _COMPILED:
        gradients = _gradients(template, forward_kwargs, traced=True)

        def step(
            params: StackedParams,
            buffers: StackedParams,
            exp_avg: StackedParams,
            exp_avg_sq: StackedParams,
            data: Batch,
            row: Tensor,
        ) -> Tensor:
            grads, (_, loss) = gradients(params, buffers, data)
            decay, step_size, bias_correction2_sqrt = row[0], row[1], row[2]
            for (name, p), decays_p in zip(params.items(), decays):
                g, m, v = grads[name], exp_avg[name], exp_avg_sq[name]
                if decays_p:
                    p.mul_(decay)
                m.lerp_(g, 1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                # the reference's addcdiv_: p + value * m / denom
                p.add_(step_size * m / ((v.sqrt() / bias_correction2_sqrt) + eps))
            return loss

        # Every key's graph is one compilation of `step`; dynamo allows
        # recompile_limit (8) per function and would silently run further ones
        # eagerly, so the cache is emptied before it is full.
        if len(_COMPILED) >= torch._dynamo.config.recompile_limit - 1:
            _COMPILED.clear()
            torch._dynamo.reset()
        # realize_reads_threshold=1: with the whole step in one graph, inductor's
        # default (4) inlined the attention backward into the token tables' scatter
        # and recomputed it per table row (ch. 7's models ran 3x slower than with the
        # optimizer apart, benchmarks/fast_path.py); 1 computes each buffer once.
        _COMPILED[key] = torch.compile(
            step,
            dynamic=False,
            fullgraph=True,
            options={"realize_reads_threshold": 1},
        )
    compiled = _COMPILED[key]
    exp_avg = {name: torch.zeros_like(p) for name, p in params.items()}
    exp_avg_sq = {name: torch.zeros_like(p) for name, p in params.items()}
    rows = _adamw_rows(cfg, beta1, beta2).unbind(0)
    return lambda data, t: compiled(params, buffers, exp_avg, exp_avg_sq, data, rows[t])


@dataclass(frozen=True)
class PathPlan:
    """Which parts of the fast path a training uses; every part off is the reference
    path."""

    # batches drawn CHUNK steps at a time (NoiseSampler, one training size)
    chunked_data: bool
    # Transformer's fast forward (broadcast attention products when compiled)
    fast_model: bool
    # ... with the first layer's Q/K/V from v-row tables (no positions)
    token_tables: bool
    compiled: bool  # the step compiled with torch.compile

    @property
    def label(self) -> str:
        parts = [
            name
            for name in ("chunked_data", "fast_model", "token_tables", "compiled")
            if getattr(self, name)
        ]
        return " + ".join(parts) if parts else "reference"


def plan_path(
    model_cfg: ModelConfig,
    task: Task,
    cfg: TrainConfig,
    n_seeds: int,
    model_class: Callable[[ModelConfig], nn.Module] = Transformer,
) -> PathPlan:
    """The parts of the fast path that apply to this training (see the module
    docstring)."""
    if cfg.path == "reference":
        return PathPlan(False, False, False, False)
    chunked = isinstance(task, NoiseSampler) and len(task.train_sizes()) == 1
    # a subclass may have its own forward (ch. 4's retrieval model)
    fast_model = model_class is Transformer
    tables = fast_model and model_cfg.positional == "none"
    fixed_shapes, dropout = (
        len(task.train_sizes()) == 1,
        model_cfg.attn_dropout > 0 or model_cfg.resid_dropout > 0,
    )
    if cfg.path == "compiled" and (dropout or not fixed_shapes):
        raise ValueError(
            "path='compiled' needs one training size and no dropout "
            "(compiled dropout draws other masks), "
            f"got sizes {tuple(task.train_sizes())}, "
            f"attn_dropout={model_cfg.attn_dropout}, "
            f"resid_dropout={model_cfg.resid_dropout}; use path='fast' or 'auto'"
        )
    positions = cfg.batch * max(task.train_sizes())
    pays = cfg.path == "compiled" or (
        cfg.path == "auto" and cfg.steps * n_seeds * positions >= COMPILE_TOKEN_STEPS
    )
    return PathPlan(chunked, fast_model, tables, pays and fixed_shapes and not dropout)


def train(
    model_cfg: ModelConfig,
    task: Task,
    cfg: TrainConfig,
    seeds: Sequence[int],
    *,
    model_class: Callable[[ModelConfig], nn.Module] = Transformer,
    averagers: Mapping[str, AveragerFactory] | None = None,
    progress: bool = True,
    desc: str = "training",
    checkpoints: Sequence[int] = (),
) -> TrainResult:
    """Train one ``model_class(model_cfg)`` per seed on ``task``, all seeds batched
    together.

    Seed ``k`` sets both the initial weights
    (:func:`~lengthgen_lite.core.model.init_model`) and that model's own stream of
    training data (``make_generator(2 * k + 1)``). ``checkpoints`` are step counts (at
    most ``cfg.steps``) at which the raw and averaged weights are also kept
    (``TrainResult.checkpoints``), so one training serves several budgets.
    """
    seeds = list(seeds)
    checkpoints = tuple(checkpoints)
    keep = sorted(
        set(require_ints("checkpoints", checkpoints, 1) if checkpoints else ())
        - {cfg.steps}
    )
    if keep and keep[-1] > cfg.steps:
        raise ValueError(
            f"checkpoints={tuple(checkpoints)!r} is invalid; allowed: steps in "
            f"1..steps={cfg.steps}"
        )
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(
            f"seeds must be a non-empty list of distinct ints, got {seeds!r}"
        )
    # seeds 2 * seed
    models = [init_model(model_cfg, seed, model_class) for seed in seeds]
    data_streams = [make_generator(2 * seed + 1) for seed in seeds]
    plan = plan_path(model_cfg, task, cfg, len(seeds), model_class)

    params, buffers = stack_module_state(models)  # name -> [K, *shape]
    if plan.compiled:
        # updated in place inside the compiled step, which takes gradients by torch.func
        for p in params.values():
            p.requires_grad_(False)
    template = copy.deepcopy(models[0])
    forward_kwargs = (
        {"tables": plan.token_tables, "broadcast": plan.compiled}
        if plan.fast_model
        else {}
    )
    optimizer = torch.optim.AdamW(
        _param_groups(template, params, cfg.weight_decay), lr=cfg.lr
    )
    watchers = {name: make(params) for name, make in (averagers or {}).items()}
    if plan.compiled:
        (size,) = task.train_sizes()
        step_fn = _compiled_step(
            template, model_cfg, size, forward_kwargs, params, buffers, optimizer, cfg
        )
    else:
        gradients = _gradients(template, forward_kwargs, traced=False)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cfg.lr_factor)

        def step_fn(data: Batch, step: int) -> Tensor:
            grads, (_, loss) = gradients(params, buffers, data)
            for name, p in params.items():
                p.grad = grads[name]
            optimizer.step()
            scheduler.step()
            return loss

    batches = (
        _chunked_batches(task, cfg, data_streams)
        if plan.chunked_data
        else _reference_batches(task, cfg, data_streams)
    )

    # No elapsed time or rate in the bar: stored notebook outputs must not change
    # between runs.
    bar = tqdm(
        range(cfg.steps),
        desc=desc,
        disable=not progress,
        mininterval=1.0,
        bar_format=BAR_FORMAT,
    )

    def weights() -> dict[str, list[nn.Module]]:
        """The raw and averaged weights now, one model per seed."""
        stacks = {"raw": params} | {n: w.averaged() for n, w in watchers.items()}
        return {
            name: [_unstack(template, stack, buffers, k) for k in range(len(seeds))]
            for name, stack in stacks.items()
        }

    snapshots: dict[int, dict[str, list[nn.Module]]] = {}
    # each step's [K] losses stay tensors until the end: no copy out per step
    losses: list[Tensor] = []
    for step, data in zip(bar, batches):
        losses.append(step_fn(data, step))
        with torch.no_grad():
            for watcher in watchers.values():
                watcher.update(params, step + 1)

        if step + 1 in keep:
            snapshots[step + 1] = weights()

    final = weights()
    raw = final.pop("raw")
    return TrainResult(raw, final, torch.stack(losses).numpy(), seeds, snapshots)
