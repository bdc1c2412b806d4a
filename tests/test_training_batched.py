"""Batched (vmapped) training of K seeds equals training each seed alone; the vectorised sampler
draws exactly what the per-seed sampler draws. Chapter 5 explains the batching."""

import numpy as np
import pytest
import torch

from lengthgen_lite.model import ModelConfig
from lengthgen_lite.seeding import make_generator
from lengthgen_lite.tasks import Batch, SetComplement
from lengthgen_lite.training import TrainConfig, _sample_batches, train

TASK = SetComplement(v=8, train_length=3)
SEEDS = [0, 1, 2]


@pytest.mark.parametrize(
    "model_kwargs, targets",
    [
        (dict(norm="none"), "soft"),
        (dict(norm="post"), "sampled"),
        (dict(norm="attn_out"), "sampled"),
        (dict(norm="pre_final", d_mlp=16, n_heads=2), "soft"),
    ],
)
def test_batched_equals_sequential(model_kwargs, targets):
    """Each seed trained inside a batch of K follows the trajectory it follows alone.

    Only float rounding may differ (a [K, ...] batched matmul can block its sums differently from a
    single one). Dropout is left out: under ``vmap(randomness="different")`` the K masks are drawn
    in one call from the global generator, whose state also depends on which other seeds were
    initialised, so a seed's masks in a batch are not the masks it would draw alone.
    """
    model_cfg = ModelConfig(vocab_size=8, d_model=16, **model_kwargs)
    cfg = TrainConfig(steps=40, warmup=5, batch=32, lr=1e-2, targets=targets)
    batched = train(model_cfg, TASK, cfg, seeds=SEEDS, progress=False)
    for k, seed in enumerate(SEEDS):
        alone = train(model_cfg, TASK, cfg, seeds=[seed], progress=False)
        np.testing.assert_allclose(batched.loss[:, k], alone.loss[:, 0], rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(batched.models[k].state_dict().items(), alone.models[0].state_dict().values()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    assert not np.allclose(batched.loss[:, 0], batched.loss[:, 1])  # the seeds really differ


def test_dropout_runs_are_reproducible():
    """Not equal to the per-seed runs (see above), but the same call gives the same result."""
    model_cfg = ModelConfig(vocab_size=8, d_model=16, attn_dropout=0.2, resid_dropout=0.2)
    cfg = TrainConfig(steps=20, warmup=5, batch=32)
    a = train(model_cfg, TASK, cfg, seeds=SEEDS, progress=False)
    b = train(model_cfg, TASK, cfg, seeds=SEEDS, progress=False)
    np.testing.assert_array_equal(a.loss, b.loss)
    no_dropout = train(ModelConfig(vocab_size=8, d_model=16), TASK, cfg, seeds=SEEDS, progress=False)
    assert not np.allclose(a.loss, no_dropout.loss)  # dropout is active during training


@pytest.mark.parametrize("size", [1, 3, 7])
def test_vectorised_sampler_draws_what_each_seed_draws(size):
    task = SetComplement(v=8, train_length=3)
    stacked = task.sample_train_batches(64, size, [make_generator(s) for s in (5, 6, 7)])
    assert stacked.inputs.shape == (3, 64, size) and stacked.targets.shape == (3, 64, size, 8)
    for k, seed in enumerate((5, 6, 7)):
        alone = task.sample_train_batch(64, size, make_generator(seed))
        torch.testing.assert_close(stacked.inputs[k], alone.inputs, rtol=0, atol=0)
        torch.testing.assert_close(stacked.targets[k], alone.targets, rtol=0, atol=0)
        assert torch.equal(stacked.loss_mask[k], alone.loss_mask)


class PerSeedOnly:
    """A task with only the required per-seed sampler: the loop must fall back to stacking."""

    n_outputs = 8

    def __init__(self):
        self.inner = SetComplement(v=8, train_length=3)

    def train_sizes(self):
        return self.inner.train_sizes()

    def sample_train_batch(self, batch, size, generator):
        return self.inner.sample_train_batch(batch, size, generator)


def test_fallback_stacking_matches_vectorised_path():
    fallback = _sample_batches(PerSeedOnly(), 16, 3, [make_generator(s) for s in (0, 1)])
    vectorised = _sample_batches(TASK, 16, 3, [make_generator(s) for s in (0, 1)])
    assert isinstance(fallback, Batch)
    for name in ("inputs", "targets", "loss_mask"):
        assert torch.equal(getattr(fallback, name), getattr(vectorised, name)), name
    cfg = TrainConfig(steps=10, warmup=2, batch=16)
    model_cfg = ModelConfig(vocab_size=8, d_model=16)
    np.testing.assert_array_equal(
        train(model_cfg, PerSeedOnly(), cfg, seeds=[0, 1], progress=False).loss,
        train(model_cfg, TASK, cfg, seeds=[0, 1], progress=False).loss,
    )


@pytest.mark.parametrize(
    "batch, size, generators, message",
    [
        (16, 3, [], "at least one torch.Generator"),
        (0, 3, None, "batch must be a positive int"),
        (16, 0, None, "length must be an int in 1..v-1"),
        (16, 8, None, "length must be an int in 1..v-1"),
    ],
)
def test_vectorised_sampler_rejects_bad_input(batch, size, generators, message):
    generators = [make_generator(0)] if generators is None else generators
    with pytest.raises(ValueError, match=message):
        TASK.sample_train_batches(batch, size, generators)
