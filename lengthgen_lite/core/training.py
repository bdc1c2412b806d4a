"""The one training loop. Chapter 1 introduces it; chapter 5 explains the batching.

``train`` always trains ``K = len(seeds)`` independent models as one computation: their parameters
are stacked along a new leading axis and the forward pass is ``torch.func.vmap``-ed over it. The
summed loss has per-model gradients equal to each model's own, and AdamW acts elementwise, so
every seed gets the training it would get alone (up to float rounding). Batching pays Python and
dispatch overhead once per step instead of K times; the arithmetic (mostly the d_model x d_model
matmuls, already at full single-core speed for one seed) still grows with K. For chapter 5's model
that gives about 2x over a Python loop at batch 128 and about 4-5x at batch 32
(``benchmarks/batched_training.py``). Data are drawn per seed from the seed's own generator, then
processed for all seeds at once (``Task.sample_train_batches`` when the task has it).

Weight averagers (EMA, BEMA; chapter 6) watch the stacked parameters after every step and never
change the trajectory.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping, Protocol, Sequence, get_args

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from tqdm.auto import tqdm

from .model import ModelConfig, Transformer
from .seeding import make_generator, seed_everything
from .tasks import Batch, Task, sample_next_tokens

TargetKind = Literal["soft", "sampled"]
Schedule = Literal["constant", "cosine"]
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt}"


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000
    lr: float = 3e-3
    batch: int = 128
    warmup: int = 100  # linear warm-up steps
    schedule: Schedule = "constant"  # after warm-up
    weight_decay: float = 0.0  # AdamW, on matrices only (see _param_groups)
    targets: TargetKind = "soft"  # "soft": the full p*; "sampled": one legal token drawn from p*
    size_seed: int = 0  # draws each step's input size, shared by all seeds

    def __post_init__(self) -> None:
        for name in ("steps", "batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.warmup, int) or not 0 <= self.warmup <= self.steps:
            raise ValueError(f"warmup must be an int in 0..steps={self.steps}, got {self.warmup!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        for name, literal in (("targets", TargetKind), ("schedule", Schedule)):
            if getattr(self, name) not in get_args(literal):
                raise ValueError(f"{name}={getattr(self, name)!r} is unknown; allowed: {get_args(literal)}")

    def lr_factor(self, step: int) -> float:
        """Multiplier of ``lr`` at ``step``: linear warm-up, then constant or cosine to zero."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self.schedule == "constant":
            return 1.0
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return 0.5 * (1.0 + float(np.cos(np.pi * progress)))


StackedParams = dict[str, Tensor]  # name -> [K, *shape]


class Averager(Protocol):
    """Keeps an average of the stacked parameters; see :mod:`lengthgen_lite.core.averaging`."""

    def update(self, params: StackedParams, step: int) -> None: ...

    def averaged(self) -> StackedParams: ...


AveragerFactory = Callable[[StackedParams], Averager]  # called once with the initial parameters


@dataclass
class TrainResult:
    models: list[nn.Module]  # one per seed, final raw weights, in eval mode
    averaged: dict[str, list[nn.Module]]  # averager name -> one model per seed
    loss: np.ndarray  # [steps, K] training loss per step and seed
    seeds: list[int] = field(default_factory=list)


def training_loss(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Cross-entropy against target distributions, averaged over the masked positions (the loss :func:`train` minimises).

    logits, targets: [batch, pos, n_outputs]; mask: [batch, pos] -> scalar.
    """
    if logits.shape != targets.shape or mask.shape != logits.shape[:-1]:
        raise ValueError(
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} must match, "
            f"and mask {tuple(mask.shape)} must be their leading [batch, pos]"
        )
    per_position = -(targets * logits.log_softmax(dim=-1)).sum(dim=-1)  # [batch, pos]
    mask = mask.float()
    return (per_position * mask).sum() / mask.sum()


def _param_groups(template: nn.Module, params: StackedParams, weight_decay: float) -> list[dict]:
    # nanoGPT's rule, judged on the unstacked shapes: matrices (incl. embeddings) decay; LN gains and
    # biases don't, since shrinking them only changes scale, which a norm undoes anyway.
    dims = {name: p.dim() for name, p in template.named_parameters()}
    decay = [p for name, p in params.items() if dims[name] >= 2]
    no_decay = [p for name, p in params.items() if dims[name] < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _unstack(template: nn.Module, params: StackedParams, buffers: StackedParams, k: int) -> nn.Module:
    model = copy.deepcopy(template)
    model.load_state_dict({name: t[k].detach().clone() for name, t in {**params, **buffers}.items()})
    return model.eval()


def _sample_batches(task: Task, batch: int, size: int, generators: Sequence[torch.Generator]) -> Batch:
    """One batch per seed, stacked [K, batch, ...]; vectorised when the task offers it (same draws)."""
    if hasattr(task, "sample_train_batches"):
        return task.sample_train_batches(batch, size, generators)
    batches = [task.sample_train_batch(batch, size, g) for g in generators]
    return Batch(*(torch.stack([getattr(b, name) for b in batches]) for name in ("inputs", "targets", "loss_mask")))


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
) -> TrainResult:
    """Train one ``model_class(model_cfg)`` per seed on ``task``, all seeds batched together.

    Seed ``k`` sets both the initial weights and that model's own stream of training data.
    """
    seeds = list(seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct ints, got {seeds!r}")
    models = []
    for seed in seeds:
        seed_everything(2 * seed)  # init stream; data uses 2 * seed + 1, so the two never coincide
        models.append(model_class(model_cfg))
    data_streams = [make_generator(2 * seed + 1) for seed in seeds]
    size_stream = make_generator(cfg.size_seed)
    sizes = list(task.train_sizes())

    params, buffers = stack_module_state(models)  # name -> [K, *shape]
    template = copy.deepcopy(models[0])
    base = copy.deepcopy(models[0]).to("meta").train()

    def loss_one(p: StackedParams, b: StackedParams, inputs: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
        return training_loss(functional_call(base, (p, b), (inputs,)), targets, mask)

    batched_loss = vmap(loss_one, randomness="different")
    optimizer = torch.optim.AdamW(_param_groups(template, params, cfg.weight_decay), lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cfg.lr_factor)
    watchers = {name: make(params) for name, make in (averagers or {}).items()}
    losses = np.zeros((cfg.steps, len(seeds)), dtype=np.float32)

    # No elapsed time or rate in the bar: stored notebook outputs must not change between runs.
    bar = tqdm(range(cfg.steps), desc=desc, disable=not progress, mininterval=1.0, bar_format=BAR_FORMAT)
    for step in bar:
        size = sizes[int(torch.randint(len(sizes), (1,), generator=size_stream))]
        data = _sample_batches(task, cfg.batch, size, data_streams)  # [K, batch, ...]
        targets = data.targets
        if cfg.targets == "sampled":  # each seed draws from its own stream, then one one-hot for all
            tokens = torch.stack([sample_next_tokens(t, g) for t, g in zip(targets, data_streams)])
            targets = nn.functional.one_hot(tokens, targets.shape[-1]).float()
        loss = batched_loss(params, buffers, data.inputs, targets, data.loss_mask.float())  # [K]
        optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        optimizer.step()
        scheduler.step()
        losses[step] = loss.detach().numpy()
        with torch.no_grad():
            for watcher in watchers.values():
                watcher.update(params, step + 1)

    final = [_unstack(template, params, buffers, k) for k in range(len(seeds))]
    averaged = {
        name: [_unstack(template, watcher.averaged(), buffers, k) for k in range(len(seeds))]
        for name, watcher in watchers.items()
    }
    return TrainResult(models=final, averaged=averaged, loss=losses, seeds=seeds)
