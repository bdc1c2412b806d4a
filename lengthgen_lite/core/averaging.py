"""Weight averagers for the one training loop. Chapter 6 introduces them.

Sampled targets make every step's gradient noisy, so the raw weights jitter around where
the expected gradient would take them. An average of the recent weights cancels much of
that jitter. Both averagers follow the ``Averager`` protocol of
:mod:`lengthgen_lite.core.training`: ``train`` calls the factory once with the initial
stacked parameters (name -> ``[K, *shape]``), then ``update(params, step)`` after every
optimiser step (``step = 1, 2, ...``) under ``no_grad``. They only read the parameters
and keep their own copies, so training is the same with or without them.

EMA (the book's choice of warm-up, as in the common ``min(beta, (1+t)/(10+t))`` rule)::

    decay_t = min(beta, (1 + t) / (10 + t))
    EMA_t   = decay_t * EMA_{t-1} + (1 - decay_t) * theta_t,        EMA_0 = theta_0

BEMA (Block & Zhang, 2025, arXiv 2508.00180; the parametrisation of their reference code
and of
TRL's ``BEMACallback``), with ``t`` counted from the snapshot step ``tau``::

    beta_t  = (rho + gamma * t) ** -kappa                # weight of the *new* iterate
    alpha_t = (rho + gamma * t) ** -eta
    EMA_t   = (1 - beta_t) * EMA_{t-1} + beta_t * theta_t,      EMA_0 = theta_tau
    BEMA_t  = alpha_t * (theta_t - theta_tau) + EMA_t

updated every ``phi`` steps; before ``tau`` it reports the raw weights.
"""

from __future__ import annotations

import inspect

import torch

from .training import AveragerFactory, StackedParams
from .validation import is_int


def _copy(params: StackedParams) -> StackedParams:
    return {name: p.detach().clone() for name, p in params.items()}


def ema_decay(step: int, beta: float) -> float:
    """``min(beta, (1 + step) / (10 + step))``: a short memory early on, ``beta`` later.

    Without the warm-up the average would remember the random initial weights for
    ~1/(1-beta) steps.
    """
    if not is_int(step) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    return min(beta, (1 + step) / (10 + step))


class EMA:
    """Exponential moving average of the stacked parameters (see the module
    docstring)."""

    def __init__(self, params: StackedParams, beta: float = 0.99):
        if not 0.0 < beta < 1.0:
            raise ValueError(f"beta must be in (0, 1), got {beta!r}")
        self.beta = beta
        self.average = _copy(params)

    def update(self, params: StackedParams, step: int) -> None:
        decay = ema_decay(step, self.beta)
        for name, p in params.items():
            self.average[name].mul_(decay).add_(p.detach(), alpha=1.0 - decay)

    def averaged(self) -> StackedParams:
        return _copy(self.average)


def bema_coefficients(
    t: int, kappa: float, eta: float, rho: float, gamma: float
) -> tuple[float, float]:
    """``(beta_t, alpha_t) = ((rho + gamma t)^-kappa, (rho + gamma t)^-eta)`` for ``t``
    steps after the snapshot."""
    if not is_int(t) or t < 0:
        raise ValueError(f"t must be an int >= 0, got {t!r}")
    base = rho + gamma * t
    return base**-kappa, base**-eta


class BEMA:
    """Bias-corrected EMA (Block & Zhang, 2025): EMA plus ``alpha_t (theta_t -
    theta_tau)``.

    The extra term moves the average back towards the current weights along the
    direction training has travelled since the snapshot, undoing the lag of a plain EMA
    when the weights drift.
    """

    def __init__(
        self,
        params: StackedParams,
        kappa: float = 0.5,
        eta: float = 0.2,
        rho: float = 10.0,
        gamma: float = 1.0,
        tau: int = 0,
        phi: int = 1,
    ):
        for name, value in (("kappa", kappa), ("eta", eta)):
            if not value >= 0.0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if not rho >= 1.0:
            raise ValueError(
                f"rho must be >= 1 (so that beta_t, alpha_t <= 1), got {rho!r}"
            )
        if not gamma > 0.0:
            raise ValueError(f"gamma must be > 0, got {gamma!r}")
        if not is_int(tau) or tau < 0:
            raise ValueError(f"tau (burn-in steps) must be an int >= 0, got {tau!r}")
        if not is_int(phi) or phi < 1:
            raise ValueError(
                f"phi (update every phi steps) must be an int >= 1, got {phi!r}"
            )
        self.kappa, self.eta, self.rho, self.gamma, self.tau, self.phi = (
            kappa,
            eta,
            rho,
            gamma,
            tau,
            phi,
        )
        self.snapshot: StackedParams | None = _copy(params) if tau == 0 else None
        self.ema: StackedParams | None = _copy(params) if tau == 0 else None
        self.current = _copy(params)  # what averaged() reports

    def update(self, params: StackedParams, step: int) -> None:
        if step < self.tau:
            self.current = _copy(params)
            return
        if step == self.tau:  # tau > 0: take the snapshot now
            self.snapshot, self.ema, self.current = (
                _copy(params),
                _copy(params),
                _copy(params),
            )
            return
        t = step - self.tau
        if t % self.phi:
            return
        assert self.snapshot is not None and self.ema is not None
        beta, alpha = bema_coefficients(t, self.kappa, self.eta, self.rho, self.gamma)
        for name, p in params.items():
            self.ema[name].mul_(1.0 - beta).add_(p.detach(), alpha=beta)
            self.current[name] = self.ema[name] + alpha * (
                p.detach() - self.snapshot[name]
            )

    def averaged(self) -> StackedParams:
        return _copy(self.current)


def make_ema(beta: float = 0.99) -> AveragerFactory:
    """A factory for ``train(..., averagers={"ema": make_ema(0.99)})``."""
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta!r}")
    return lambda params: EMA(params, beta=beta)


def make_bema(**hyperparameters: float) -> AveragerFactory:
    """A factory for ``train(..., averagers={"bema": make_bema()})``, passing any of
    :class:`BEMA`'s hyperparameters (kappa, eta, rho, gamma, tau, phi) on; its defaults
    are TRL's except ``phi=1``.

    TRL updates every 400 steps (``update_freq``); runs here are ~1000 steps, so every
    step.
    """
    allowed = [n for n in inspect.signature(BEMA).parameters if n != "params"]
    if unknown := sorted(set(hyperparameters) - set(allowed)):
        raise ValueError(f"unknown BEMA hyperparameters {unknown}; allowed: {allowed}")
    BEMA({"x": torch.zeros(1)}, **hyperparameters)  # validate now, not inside train
    return lambda params: BEMA(params, **hyperparameters)


def average_trajectory(
    factory: AveragerFactory, trajectory: torch.Tensor
) -> torch.Tensor:
    """Run an averager along a given sequence of weights: ``[T + 1, *shape] -> [T + 1,
    *shape]``.

    Row 0 is the initial value (what ``train`` passes to the factory), row ``t`` the
    average after step ``t``: the averager sees exactly what it would see in training,
    for toy sequences and tests.
    """
    if trajectory.dim() < 1 or trajectory.shape[0] < 1:
        raise ValueError(
            "trajectory must be [T + 1, *shape] with T >= 0, got "
            f"{tuple(trajectory.shape)}"
        )
    averager = factory({"w": trajectory[0]})
    rows = [averager.averaged()["w"]]
    for step in range(1, trajectory.shape[0]):
        averager.update({"w": trajectory[step]}, step)
        rows.append(averager.averaged()["w"])
    return torch.stack(rows)


def effective_window(beta: float) -> float:
    """``1 / (1 - beta)``: roughly how many recent steps an EMA with decay ``beta``
    averages over."""
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta!r}")
    return 1.0 / (1.0 - beta)


__all__ = [
    "BEMA",
    "EMA",
    "average_trajectory",
    "bema_coefficients",
    "effective_window",
    "ema_decay",
    "make_bema",
    "make_ema",
]
