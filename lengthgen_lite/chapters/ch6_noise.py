"""Chapter 6's first part: the gradient noise of sampled targets.

The training loss is linear in the targets, and a sampled one-hot target has mean p*, so
for the same inputs the *expected* sampled-target gradient is exactly the soft-target
gradient. What differs is the spread around that mean. :func:`minibatch_gradients` and
:func:`gradient_noise` measure it (the same loss as
:func:`lengthgen_lite.core.training.train`); :func:`resampling_error` shows the mean
converging to the soft-target gradient.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ..core.seeding import make_generator
from ..core.tasks import Batch, Task, sample_next_tokens
from ..core.training import TargetKind, training_loss
from ..core.validation import require_int


def flat_gradient(
    model: nn.Module, inputs: Tensor, targets: Tensor, mask: Tensor
) -> Tensor:
    """Gradient of :func:`~lengthgen_lite.core.training.training_loss` w.r.t. all
    parameters of ``model``, flattened: [n_params].

    Runs in eval mode (no dropout), so the only randomness is the batch and its targets.
    """
    was_training = model.training
    model.eval()
    try:
        params = [p for p in model.parameters() if p.requires_grad]
        loss = training_loss(model(inputs), targets, mask)
        grads = torch.autograd.grad(loss, params)
    finally:
        model.train(was_training)
    return torch.cat([g.reshape(-1) for g in grads])


def _targets(batch: Batch, kind: TargetKind, generator: torch.Generator) -> Tensor:
    if kind == "soft":
        return batch.targets
    if kind == "sampled":
        n_out = batch.targets.shape[-1]
        return nn.functional.one_hot(
            sample_next_tokens(batch.targets, generator), n_out
        ).float()
    raise ValueError(f"targets={kind!r} is unknown; allowed: ('soft', 'sampled')")


def minibatch_gradients(
    model: nn.Module,
    task: Task,
    batch: int,
    n_batches: int,
    targets: TargetKind,
    seed: int = 0,
) -> Tensor:
    """Gradients on ``n_batches`` fresh training batches of ``batch`` examples:
    [n_batches, n_params].

    Each batch is drawn as ``train`` draws it (input size from ``task.train_sizes()``,
    cycling).
    """
    n_batches = require_int("n_batches", n_batches, 2)  # a spread needs two samples
    generator = make_generator(seed)
    sizes = list(task.train_sizes())
    rows = []
    for i in range(n_batches):
        b = task.sample_train_batch(batch, sizes[i % len(sizes)], generator)
        rows.append(
            flat_gradient(model, b.inputs, _targets(b, targets, generator), b.loss_mask)
        )
    return torch.stack(rows)


def resampled_target_gradients(
    model: nn.Module, batch: Batch, n_draws: int, seed: int = 0
) -> Tensor:
    """Gradients for ``n_draws`` independent draws of sampled targets on the *same*
    inputs: [n_draws, n_params].

    Their mean tends to the soft-target gradient on those inputs (the loss is linear in
    the targets).
    """
    n_draws = require_int("n_draws", n_draws, 1)
    generator = make_generator(seed)
    return torch.stack(
        [
            flat_gradient(
                model,
                batch.inputs,
                _targets(batch, "sampled", generator),
                batch.loss_mask,
            )
            for _ in range(n_draws)
        ]
    )


@dataclass(frozen=True)
class GradientNoise:
    """Summary of gradient samples g_1..g_n (rows): signal, noise and their ratio."""

    # ||E g||^2, estimated without bias (||mean||^2 - trace_cov / n): the signal
    mean_sq_norm: float
    trace_cov: float  # E||g - E g||^2 (unbiased): the noise, summed over parameters
    snr: float  # mean_sq_norm / trace_cov: below 1, a single step is mostly noise


def gradient_noise(grads: Tensor) -> GradientNoise:
    """Signal ``||E g||^2``, noise ``tr Cov`` and their ratio for gradient samples [n,
    n_params].

    ``||mean||^2`` alone overstates the signal by ``tr Cov / n`` (the noise left in a
    mean of n samples), which matters when the noise dominates; that share is
    subtracted.
    """
    if grads.dim() != 2 or grads.shape[0] < 2:
        raise ValueError(f"grads must be [n >= 2, n_params], got {tuple(grads.shape)}")
    grads = grads.double()
    mean = grads.mean(dim=0)
    trace_cov = float(((grads - mean) ** 2).sum(dim=1).sum() / (grads.shape[0] - 1))
    signal = float(mean.square().sum()) - trace_cov / grads.shape[0]
    return GradientNoise(
        mean_sq_norm=signal, trace_cov=trace_cov, snr=signal / trace_cov
    )


def noise_table(
    models: Mapping[str, nn.Module],
    task: Task,
    batches: Sequence[int] = (32, 128),
    targets: Sequence[TargetKind] = ("soft", "sampled"),
    n_batches: int = 64,
    seed: int = 1,
) -> list[dict[str, object]]:
    """:func:`gradient_noise` of every model (keyed by where in training it is) at
    every batch size and target kind, ``n_batches`` fresh batches each: rows with
    where, batch, targets, trace_cov (the noise), signal (``||E g||^2``) and snr."""
    rows = []
    for where, model in models.items():
        for batch in batches:
            for kind in targets:
                grads = minibatch_gradients(model, task, batch, n_batches, kind, seed)
                noise = gradient_noise(grads)
                rows.append(
                    {
                        "where": where,
                        "batch": batch,
                        "targets": kind,
                        "trace_cov": noise.trace_cov,
                        "signal": noise.mean_sq_norm,
                        "snr": noise.snr,
                    }
                )
    return rows


def resampling_error(
    model: nn.Module, batch: Batch, n_draws: int, seed: int = 0
) -> np.ndarray:
    """How far the mean of the first n sampled-target gradients is from the soft-target
    gradient on the same ``batch``, relative to its length, for n = 1..``n_draws``:
    [n_draws] (unbiased: it falls like 1/sqrt(n))."""
    soft = flat_gradient(model, batch.inputs, batch.targets, batch.loss_mask)
    draws = resampled_target_gradients(model, batch, n_draws, seed=seed)
    running_mean = draws.cumsum(0) / torch.arange(1, n_draws + 1)[:, None]
    return ((running_mean - soft).norm(dim=1) / soft.norm()).numpy()
