import pytest
import torch

from lengthgen_lite.gradient_noise import (
    flat_gradient,
    gradient_noise,
    minibatch_gradients,
    resampled_target_gradients,
    training_loss,
)
from lengthgen_lite.model import ModelConfig, Transformer
from lengthgen_lite.seeding import make_generator, seed_everything
from lengthgen_lite.tasks import SetComplement, sample_next_tokens
from lengthgen_lite.training import TrainConfig, train

TASK = SetComplement(v=8, train_length=3)
MODEL = ModelConfig(vocab_size=8, d_model=16)


def fresh_model(seed=0):
    seed_everything(2 * seed)  # as train does for seed `seed`
    return Transformer(MODEL)


def test_training_loss_is_the_loss_train_reports():
    """Reproduce train's first step: same init, same data stream, same sampled targets."""
    cfg = TrainConfig(steps=1, warmup=0, batch=16, targets="sampled")
    reported = train(MODEL, TASK, cfg, seeds=[3], progress=False).loss[0, 0]
    model, stream = fresh_model(3), make_generator(2 * 3 + 1)
    batch = TASK.sample_train_batch(16, 3, stream)
    targets = torch.nn.functional.one_hot(sample_next_tokens(batch.targets, stream), 8).float()
    with torch.no_grad():
        loss = training_loss(model(batch.inputs), targets, batch.loss_mask)
    assert float(loss) == pytest.approx(float(reported), rel=1e-5)


def test_expected_sampled_gradient_is_the_soft_gradient():
    model = fresh_model()
    batch = TASK.sample_train_batch(32, 3, make_generator(1))
    soft = flat_gradient(model, batch.inputs, batch.targets, batch.loss_mask)
    draws = resampled_target_gradients(model, batch, 400, seed=2)
    error = lambda n: float((draws[:n].mean(0) - soft).norm() / soft.norm())  # noqa: E731
    assert error(400) < 0.5 * error(25)  # shrinks like 1/sqrt(n): by 4x from 25 to 400 draws
    assert error(400) < 0.1


def test_sampled_targets_are_noisier_with_the_same_signal():
    model = fresh_model()
    soft = gradient_noise(minibatch_gradients(model, TASK, 32, 40, "soft", seed=0))
    sampled = gradient_noise(minibatch_gradients(model, TASK, 32, 40, "sampled", seed=0))
    assert sampled.trace_cov > 2 * soft.trace_cov
    assert sampled.mean_sq_norm == pytest.approx(soft.mean_sq_norm, rel=0.3)
    assert sampled.snr < soft.snr


def test_gradient_noise_on_known_samples():
    grads = torch.tensor([[1.0, 0.0], [3.0, 0.0], [2.0, 3.0], [2.0, -3.0]])
    noise = gradient_noise(grads)
    assert noise.trace_cov == pytest.approx((1 + 1 + 0 + 0 + 9 + 9) / 3)
    # ||mean||^2 = 4, minus the noise share tr(Cov)/n of the squared norm of a mean of n samples
    assert noise.mean_sq_norm == pytest.approx(4.0 - (20 / 3) / 4)
    assert noise.snr == pytest.approx(noise.mean_sq_norm / noise.trace_cov)


def test_flat_gradient_has_one_entry_per_parameter_and_keeps_the_mode():
    model = fresh_model().train()
    batch = TASK.sample_train_batch(4, 3, make_generator(0))
    g = flat_gradient(model, batch.inputs, batch.targets, batch.loss_mask)
    assert g.shape == (sum(p.numel() for p in model.parameters()),)
    assert model.training


def test_bad_inputs_are_rejected():
    model = fresh_model()
    batch = TASK.sample_train_batch(4, 3, make_generator(0))
    with pytest.raises(ValueError, match="must match"):
        training_loss(torch.zeros(4, 3, 8), torch.zeros(4, 3, 7), batch.loss_mask)
    with pytest.raises(ValueError, match="must match"):
        training_loss(torch.zeros(4, 3, 8), torch.zeros(4, 3, 8), torch.ones(4, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="n_batches"):
        minibatch_gradients(model, TASK, 4, 1, "soft")
    with pytest.raises(ValueError, match="targets"):
        minibatch_gradients(model, TASK, 4, 2, "onehot")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_draws"):
        resampled_target_gradients(model, batch, 0)
    with pytest.raises(ValueError, match="grads"):
        gradient_noise(torch.zeros(1, 5))
    with pytest.raises(ValueError, match="grads"):
        gradient_noise(torch.zeros(5))
