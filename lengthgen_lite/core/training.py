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
step's batch in Python and runs the plain model's step eagerly. The *fast* path
(:mod:`lengthgen_lite.core.fast_path`: chunked data, token tables, the compiled step,
chapter 4's query-only retrieval forward;
:func:`~lengthgen_lite.core.fast_path.plan_path` says which parts apply) gives the same
losses up to float rounding
(``tests/test_core_fast_path.py``), except where a task draws its batches its own way
(dictionary lookup: the same distribution, other draws).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, get_args

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap
from tqdm.auto import tqdm

from .fast_path import (
    FastForward,
    chunked_batches,
    compiled_step,
    in_gradient_layout,
    padded_items,
    plan_path,
)
from .model import ModelConfig, Transformer, init_model
from .seeding import make_generator, seed_everything
from .tasks import Batch, Task, one_hot_targets, sample_next_tokens
from .validation import is_int, require_ints

TargetKind = Literal["soft", "sampled"]
Schedule = Literal["constant", "cosine"]
TrainPath = Literal["auto", "fast", "compiled", "reference"]
Precision = Literal["float32", "bfloat16"]
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt}"


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
    # "auto" (what the book's outputs use): the fast path (core.fast_path), compiled
    # from COMPILE_TOKEN_STEPS positions trained; "fast": chunked data and token tables
    # where they apply; "compiled": fast plus torch.compile wherever it can;
    # "reference": the plain eager loop, the yardstick the others are tested against
    # (same numbers up to float rounding).
    path: TrainPath = "auto"
    # "bfloat16" (opt-in, fast path only): the forward's matmuls in bfloat16 under CPU
    # autocast; parameters, AdamW and the update stay float32 (see _gradients)
    precision: Precision = "float32"

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
            ("precision", Precision),
        ):
            if getattr(self, name) not in get_args(literal):
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is unknown; allowed: "
                    f"{get_args(literal)}"
                )
        if self.path == "reference" and self.precision != "float32":
            raise ValueError(
                f"precision={self.precision!r} needs the fast path: path='reference' "
                "is the definition and trains in float32 only; allowed with "
                "'reference': ('float32',)"
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
    task: Task,
    batch: int,
    size: int,
    generators: Sequence[torch.Generator],
    own_draws: bool = False,
) -> Batch:
    """One batch per seed, stacked [K, batch, ...]; vectorised when the task offers it
    (same draws). ``own_draws``: the task's ``sample_fast_batches`` (the same
    distribution, other draws; ``PathPlan.own_draws``)."""
    if own_draws:
        return task.sample_fast_batches(batch, size, generators)
    if hasattr(task, "sample_train_batches"):
        return task.sample_train_batches(batch, size, generators)
    batches = [task.sample_train_batch(batch, size, g) for g in generators]
    return Batch(
        *(
            torch.stack([getattr(b, name) for b in batches])
            for name in ("inputs", "targets", "loss_mask")
        )
    )


def _reference_batches(
    task: Task,
    cfg: TrainConfig,
    streams: Sequence[torch.Generator],
    own_draws: bool = False,
) -> Iterator[Batch]:
    """Each step's batch drawn when the step comes: [K, batch, ...] (``own_draws``: see
    :func:`_sample_batches`)."""
    size_stream = make_generator(cfg.size_seed)
    sizes = list(task.train_sizes())
    for _ in range(cfg.steps):
        size = sizes[int(torch.randint(len(sizes), (1,), generator=size_stream))]
        data = _sample_batches(task, cfg.batch, size, streams, own_draws)
        # each seed draws from its own stream, then one one-hot for all
        if cfg.targets == "sampled":
            tokens = torch.stack(
                [sample_next_tokens(t, g) for t, g in zip(data.targets, streams)]
            )
            data = Batch(
                data.inputs,
                one_hot_targets(tokens, data.targets.shape[-1]),
                data.loss_mask,
            )
        yield data


Gradients = Callable[
    [StackedParams, StackedParams, Batch], tuple[StackedParams, tuple[Tensor, Tensor]]
]


def _gradients(
    template: nn.Module,
    forward_kwargs: Mapping[str, bool],
    traced: bool,
    precision: Precision = "float32",
) -> Gradients:
    """(params, buffers, batch) -> (per-seed gradients, (summed loss, [K] losses)).

    Only ``template``'s structure is used (a copy on the meta device);
    ``forward_kwargs`` (empty: the plain forward) run it as a
    :class:`~lengthgen_lite.core.fast_path.FastForward`. ``traced``:
    gradients by ``torch.func.grad_and_value``, which torch.compile traces with the
    forward as one graph (it stops at an autograd call). Eagerly, plain
    ``torch.autograd.grad`` on the same vmapped loss records the same batched
    operations, so it gives the same gradients bit for bit (tested) without torch.func's
    per-operation wrapping: about 10 % faster per step (chapter 4's retrieval models).
    ``precision`` "bfloat16": the forward under CPU autocast (its matmuls in bfloat16)
    and the loss from its logits cast back to float32, so gradients reach the float32
    parameters as float32.
    """
    base = copy.deepcopy(template).to("meta").train()
    module = FastForward(base, **forward_kwargs) if forward_kwargs else base
    prefix = "model." if forward_kwargs else ""  # FastForward's name for the model

    def loss_one(
        p: StackedParams,
        b: StackedParams,
        inputs: Tensor,
        targets: Tensor,
        mask: Tensor,
    ) -> Tensor:
        named = tuple({prefix + k: t for k, t in d.items()} for d in (p, b))
        if precision == "float32":
            logits = functional_call(module, named, (inputs,))
            return training_loss(logits, targets, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = functional_call(module, named, (inputs,))
            return training_loss(logits.float(), targets, mask)

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


def _check_untied(model: nn.Module) -> None:
    """Seeds are stacked and trained by parameter name (``stack_module_state``,
    ``functional_call``), which keeps one name of a parameter shared under two (tied
    embeddings, as GPT-2 has): the other is missing when the weights are unstacked."""
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    tied = [group for group in names.values() if len(group) > 1]
    if tied:
        raise ValueError(
            f"{type(model).__name__} shares parameters under several names: {tied}; "
            "allowed: a model whose every parameter has one name (untie them, e.g. "
            "a read-out of its own)"
        )


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

    Dropout masks come from torch's global stream: ``train`` seeds the global streams
    as the last seed's initial weights were drawn (``seed_everything(2 * seeds[-1])``
    and a model built from it, what every stored output trained with), and leaves them
    there.
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
    models = [init_model(model_cfg, seed, model_class) for seed in seeds]
    _check_untied(models[0])
    # the global streams of the dropout masks, as drawing the last seed's weights in
    # them would leave them (see the docstring)
    seed_everything(2 * seeds[-1])
    model_class(model_cfg)
    data_streams = [make_generator(2 * seed + 1) for seed in seeds]
    plan = plan_path(model_cfg, task, cfg, len(seeds), model_class)

    params, buffers = stack_module_state(models)  # name -> [K, *shape]
    if plan.gradient_layout:
        params = in_gradient_layout(models[0], params)
    if plan.compiled:
        # updated in place inside the compiled step, which takes gradients by torch.func
        for p in params.values():
            p.requires_grad_(False)
    template = copy.deepcopy(models[0])
    forward_kwargs = plan.forward_kwargs
    optimizer = torch.optim.AdamW(
        _param_groups(template, params, cfg.weight_decay), lr=cfg.lr
    )
    watchers = {name: make(params) for name, make in (averagers or {}).items()}
    if plan.compiled:
        # one training size, or the retrieval model's sets padded to the largest
        size = max(task.train_sizes())
        step_fn = compiled_step(
            template,
            model_cfg,
            size,
            forward_kwargs,
            params,
            buffers,
            optimizer,
            cfg,
            lambda: _gradients(template, forward_kwargs, True, cfg.precision),
            task if plan.targets_in_graph else None,
        )
    else:
        gradients = _gradients(template, forward_kwargs, False, cfg.precision)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cfg.lr_factor)

        def step_fn(data: Batch, step: int) -> Tensor:
            grads, (_, loss) = gradients(params, buffers, data)
            for name, p in params.items():
                p.grad = grads[name]
            optimizer.step()
            scheduler.step()
            return loss

    batches = (
        chunked_batches(task, cfg, data_streams, plan.targets_in_graph)
        if plan.chunked_data
        else _reference_batches(task, cfg, data_streams, plan.own_draws)
    )
    if plan.compiled and plan.query_only:
        batches = padded_items(batches, size + 1)

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
