import numpy as np
import pytest
import torch

from lengthgen_lite.model import ModelConfig
from lengthgen_lite.tasks import SetComplement
from lengthgen_lite.training import TrainConfig, _param_groups, train

TASK = SetComplement(v=8, train_length=3)
MODEL = ModelConfig(vocab_size=8, d_model=16)
SHORT = TrainConfig(steps=60, warmup=5, batch=32, lr=1e-2)


def entropy_floor(v=8, length=3):
    return float(np.mean([np.log(v - s) for s in range(1, length + 1)]))


def test_loss_falls_towards_the_entropy_floor():
    result = train(MODEL, TASK, SHORT, seeds=[0, 1], progress=False)
    assert result.loss.shape == (60, 2)
    assert (result.loss[-5:].mean(0) < result.loss[:5].mean(0)).all()
    assert (result.loss[-5:].mean(0) > entropy_floor() - 1e-4).all()  # cross-entropy >= H(p*)
    assert len(result.models) == 2 and not result.models[0].training


def test_runs_are_deterministic_and_seeds_differ():
    a = train(MODEL, TASK, SHORT, seeds=[0, 1], progress=False)
    b = train(MODEL, TASK, SHORT, seeds=[0, 1], progress=False)
    np.testing.assert_array_equal(a.loss, b.loss)
    assert not np.array_equal(a.loss[:, 0], a.loss[:, 1])


def test_sampled_targets_give_noisier_loss():
    soft = train(MODEL, TASK, SHORT, seeds=[0], progress=False).loss[:, 0]
    sampled = train(MODEL, TASK, TrainConfig(**{**SHORT.__dict__, "targets": "sampled"}), seeds=[0], progress=False).loss[:, 0]
    assert np.diff(sampled).std() > np.diff(soft).std()


class CountingAverager:
    """Records how it is called; keeps the latest parameters as its 'average'."""

    def __init__(self, params):
        self.steps, self.latest = [], {n: p.detach().clone() for n, p in params.items()}

    def update(self, params, step):
        self.steps.append(step)
        self.latest = {n: p.detach().clone() for n, p in params.items()}

    def averaged(self):
        return self.latest


def test_averagers_see_every_step_and_do_not_change_training():
    watched = train(MODEL, TASK, SHORT, seeds=[0], averagers={"last": CountingAverager}, progress=False)
    plain = train(MODEL, TASK, SHORT, seeds=[0], progress=False)
    np.testing.assert_array_equal(watched.loss, plain.loss)
    for (name, p), q in zip(watched.averaged["last"][0].state_dict().items(), plain.models[0].state_dict().values()):
        torch.testing.assert_close(p, q, msg=name)


def test_weight_decay_rule_matrices_only():
    from lengthgen_lite.model import Transformer
    from torch.func import stack_module_state

    template = Transformer(ModelConfig(vocab_size=8, d_model=16, norm="post", d_mlp=8))
    params, _ = stack_module_state([template])
    decay, no_decay = _param_groups(template, params, 0.1)
    shapes = {n: p.dim() for n, p in template.named_parameters()}
    assert len(decay["params"]) == sum(d >= 2 for d in shapes.values()) and decay["weight_decay"] == 0.1
    assert len(no_decay["params"]) == sum(d < 2 for d in shapes.values()) and no_decay["weight_decay"] == 0.0


def test_lr_schedule():
    cfg = TrainConfig(steps=110, warmup=10, schedule="cosine")
    assert cfg.lr_factor(0) == pytest.approx(0.1)
    assert cfg.lr_factor(10) == pytest.approx(1.0)
    assert cfg.lr_factor(109) < 0.01
    assert TrainConfig(steps=10, warmup=0).lr_factor(5) == 1.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(steps=0), "steps"),
        (dict(batch=-1), "batch"),
        (dict(steps=10, warmup=20), "warmup"),
        (dict(lr=0.0), "lr"),
        (dict(weight_decay=-1.0), "weight_decay"),
        (dict(targets="hard"), "targets='hard' is unknown"),
        (dict(schedule="linear"), "schedule='linear' is unknown"),
    ],
)
def test_bad_train_configs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


def test_seeds_must_be_distinct():
    with pytest.raises(ValueError, match="distinct"):
        train(MODEL, TASK, SHORT, seeds=[1, 1], progress=False)
