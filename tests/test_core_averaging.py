import math

import numpy as np
import pytest
import torch

from lengthgen_lite.core.averaging import (
    BEMA,
    EMA,
    average_trajectory,
    bema_coefficients,
    effective_window,
    ema_decay,
    make_bema,
    make_ema,
)
from lengthgen_lite.core.model import ModelConfig
from lengthgen_lite.core.tasks import SetComplement
from lengthgen_lite.core.training import TrainConfig, train

TASK = SetComplement(v=8, train_length=3)
MODEL = ModelConfig(vocab_size=8, d_model=16, norm="attn_out")
SHORT = TrainConfig(steps=40, warmup=5, batch=16, lr=1e-2, targets="sampled")


def toy_trajectory(T=30, shape=(2, 3), seed=0):
    """A drifting, noisy sequence of stacked 'parameters': [T + 1, K=2, 3]."""
    g = torch.Generator().manual_seed(seed)
    drift = torch.linspace(0, 1, T + 1)[:, None, None]
    return drift + 0.3 * torch.randn(T + 1, *shape, generator=g, dtype=torch.float64)


def reference_ema(theta, beta):
    out = [theta[0]]
    for t in range(1, len(theta)):
        d = min(beta, (1 + t) / (10 + t))
        out.append(d * out[-1] + (1 - d) * theta[t])
    return torch.stack(out)


def reference_bema(theta, kappa=0.5, eta=0.2, rho=10.0, gamma=1.0, tau=0, phi=1):
    """BEMA written out from the formulas, step by step."""
    out, ema, theta0, current = [], None, None, theta[0]
    if tau == 0:
        ema, theta0 = theta[0].clone(), theta[0].clone()
    for step in range(len(theta)):
        if step < tau:
            current = theta[step]
        elif step == tau:
            ema, theta0, current = theta[step].clone(), theta[step].clone(), theta[step]
        elif (step - tau) % phi == 0:
            t = step - tau
            beta, alpha = (rho + gamma * t) ** -kappa, (rho + gamma * t) ** -eta
            ema = (1 - beta) * ema + beta * theta[step]
            current = alpha * (theta[step] - theta0) + ema
        out.append(current)
    return torch.stack(out)


def test_ema_decay_follows_its_warm_up_rule():
    assert ema_decay(0, 0.99) == pytest.approx(0.1)
    assert ema_decay(1, 0.99) == pytest.approx(2 / 11)
    assert ema_decay(10_000, 0.99) == 0.99
    # the warm-up still binds at 1000 steps
    assert ema_decay(1000, 0.999) == pytest.approx(1001 / 1010)


@pytest.mark.parametrize("beta", [0.9, 0.99])
def test_ema_matches_the_formula_on_a_toy_sequence(beta):
    theta = toy_trajectory()
    torch.testing.assert_close(
        average_trajectory(make_ema(beta), theta), reference_ema(theta, beta)
    )


@pytest.mark.parametrize("tau,phi", [(0, 1), (0, 3), (5, 1), (4, 2)])
def test_bema_matches_the_formula_on_a_toy_sequence(tau, phi):
    theta = toy_trajectory()
    got = average_trajectory(make_bema(tau=tau, phi=phi), theta)
    torch.testing.assert_close(got, reference_bema(theta, tau=tau, phi=phi))


def test_bema_first_step_and_special_cases():
    theta = toy_trajectory(T=3)
    beta1, alpha1 = bema_coefficients(1, 0.5, 0.2, 10.0, 1.0)
    assert (beta1, alpha1) == pytest.approx((11**-0.5, 11**-0.2))
    first = average_trajectory(make_bema(), theta)[1]
    expected = (
        (1 - beta1) * theta[0] + beta1 * theta[1] + alpha1 * (theta[1] - theta[0])
    )
    torch.testing.assert_close(first, expected)
    # kappa = 0 makes beta_t = 1 (no memory): BEMA = theta_t + alpha_t (theta_t -
    # theta_0)
    no_memory = average_trajectory(make_bema(kappa=0.0, eta=0.2), theta)
    torch.testing.assert_close(
        no_memory[2], theta[2] + 12**-0.2 * (theta[2] - theta[0])
    )


def test_averages_reduce_noise_around_a_constant():
    g = torch.Generator().manual_seed(1)
    theta = 2.0 + torch.randn(2001, 500, generator=g, dtype=torch.float64)
    ema = average_trajectory(make_ema(0.99), theta)[-200:]
    assert (ema - 2.0).std() < 0.15 * (theta[-200:] - 2.0).std()
    assert abs(float((ema - 2.0).mean())) < 0.02


def test_averagers_copy_and_never_modify_their_input():
    params = {"w": torch.ones(2, 3)}
    ema = EMA(params, beta=0.9)
    params["w"].add_(1.0)  # training changes the parameters in place
    torch.testing.assert_close(ema.averaged()["w"], torch.ones(2, 3))
    ema.update(params, 1)
    torch.testing.assert_close(params["w"], torch.full((2, 3), 2.0))
    out = ema.averaged()
    out["w"].zero_()  # a caller changing the result does not change the average
    assert float(ema.averaged()["w"].sum()) > 0


def test_training_with_averagers_gives_identical_raw_weights():
    averagers = {"ema": make_ema(0.9), "bema": make_bema(phi=2)}
    watched = train(
        MODEL, TASK, SHORT, seeds=[0, 1], averagers=averagers, progress=False
    )
    plain = train(MODEL, TASK, SHORT, seeds=[0, 1], progress=False)
    np.testing.assert_array_equal(watched.loss, plain.loss)
    for a, b in zip(watched.models, plain.models):
        for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
            assert torch.equal(p, q), name
    assert set(watched.averaged) == {"ema", "bema"}
    # and the averages differ from the raw weights (they did average something)
    ema_w = watched.averaged["ema"][0].state_dict()["unembed.weight"]
    assert not torch.equal(ema_w, plain.models[0].state_dict()["unembed.weight"])


def test_effective_window():
    assert effective_window(0.99) == pytest.approx(100.0)
    assert math.isclose(effective_window(0.5), 2.0)


@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5, 1.5])
def test_ema_rejects_bad_beta(beta):
    with pytest.raises(ValueError, match="beta"):
        make_ema(beta)
    with pytest.raises(ValueError, match="beta"):
        EMA({"w": torch.zeros(1)}, beta=beta)
    with pytest.raises(ValueError, match="beta"):
        effective_window(beta)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"kappa": -0.1}, "kappa"),
        ({"eta": -1.0}, "eta"),
        ({"rho": 0.5}, "rho"),
        ({"gamma": 0.0}, "gamma"),
        ({"tau": -1}, "tau"),
        ({"tau": 1.5}, "tau"),
        ({"phi": 0}, "phi"),
    ],
)
def test_bema_rejects_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_bema(**kwargs)
    with pytest.raises(ValueError, match=match):
        BEMA({"w": torch.zeros(1)}, **kwargs)


def test_bad_steps_and_trajectories_are_rejected():
    with pytest.raises(ValueError, match="step"):
        ema_decay(-1, 0.99)
    with pytest.raises(ValueError, match="t must"):
        bema_coefficients(-2, 0.5, 0.2, 10.0, 1.0)
    with pytest.raises(ValueError, match="trajectory"):
        average_trajectory(make_ema(), torch.zeros(0, 3))
    with pytest.raises(ValueError, match="trajectory"):
        average_trajectory(make_ema(), torch.tensor(1.0))


def test_make_bema_rejects_an_unknown_hyperparameter():
    with pytest.raises(ValueError, match=r"unknown BEMA hyperparameters \['beta'\]"):
        make_bema(beta=0.9)
