"""Distribution-level metrics. Chapter 1 introduces them; chapter 2 adds the attention
ones.

Many next tokens are legal, so top-1 accuracy says little: these compare whole
distributions. Every function keeps the leading dims and reduces only the last one (the
output or key axis).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _check_same_shape(a: Tensor, b: Tensor, names: str) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"{names} must have the same shape, got {tuple(a.shape)} and "
            f"{tuple(b.shape)}"
        )


def _check_seen(values: Tensor, seen: Tensor, names: str) -> None:
    """``seen`` is a bool mask of ``values``' shape: a float mask would weight the
    tokens instead of choosing them."""
    _check_same_shape(values, seen, names)
    if seen.dtype != torch.bool:
        raise ValueError(
            f"seen must be a bool mask (True: a token already seen), got {seen.dtype}"
        )


def total_variation(probs: Tensor, targets: Tensor) -> Tensor:
    """``TV(p, p*) = 1/2 sum_i |p_i - p*_i|``, in [0, 1]: [..., v] -> [...]."""
    _check_same_shape(probs, targets, "probs and targets")
    return 0.5 * (probs - targets).abs().sum(dim=-1)


def invalid_mass(probs: Tensor, seen: Tensor) -> Tensor:
    """Probability put on tokens already seen (illegal next tokens): [..., v] ->
    [...]."""
    _check_seen(probs, seen, "probs and seen")
    return (probs * seen).sum(dim=-1)


def log_targets(targets: Tensor) -> Tensor:
    """log p*, with 0 where p*_i = 0 (those terms contribute 0 to the KL).

    Depends on the targets alone: computed once, it serves every logit scale of an
    evaluation (:func:`kl_divergence`'s ``log_p``). The log of 1, not of 0, at the
    zeros: the same values, and log(0) is several times slower on a CPU.
    """
    return torch.where(targets > 0, targets, 1.0).log()


def kl_divergence(
    targets: Tensor, logits: Tensor, log_p: Tensor | None = None
) -> Tensor:
    """KL(p* || softmax(logits)) in nats: [..., v] -> [...]. Terms with p*_i = 0
    contribute 0. ``log_p``: :func:`log_targets` of ``targets``, if already computed."""
    _check_same_shape(targets, logits, "targets and logits")
    log_q = logits.log_softmax(dim=-1)
    log_p = log_targets(targets) if log_p is None else log_p
    return (targets * (log_p - log_q)).sum(dim=-1)


def logit_extremes(logits: Tensor, seen: Tensor) -> tuple[Tensor, Tensor]:
    """(smallest legal logit, largest illegal logit): [..., v] -> two [...] (+inf /
    -inf where there is none).

    Multiplying the logits by c > 0 multiplies both by c exactly (rounding is
    monotone), so an evaluation at many logit scales finds them once.
    """
    _check_seen(logits, seen, "logits and seen")
    smallest_legal = logits.masked_fill(seen, float("inf")).amin(dim=-1)
    largest_illegal = logits.masked_fill(~seen, float("-inf")).amax(dim=-1)
    return smallest_legal, largest_illegal


def logit_gap(logits: Tensor, seen: Tensor) -> Tensor:
    """Smallest legal (unseen) logit minus largest illegal (seen) logit: [..., v] ->
    [...].

    Positive means every legal token outranks every illegal one; softmax makes the
    separation sharper the larger the gap.
    """
    smallest_legal, largest_illegal = logit_extremes(logits, seen)
    return smallest_legal - largest_illegal


def attention_entropy(pattern: Tensor) -> Tensor:
    """Entropy in nats of each attention row: [..., key_pos] -> [...]. Uniform over s
    keys gives log s."""
    return -(pattern * pattern.clamp_min(1e-30).log()).sum(dim=-1)


def max_attention(pattern: Tensor) -> Tensor:
    """Largest attention weight of each row: [..., key_pos] -> [...]."""
    return pattern.amax(dim=-1)


def effective_tokens(pattern: Tensor) -> Tensor:
    """N_eff = 1 / sum_i a_i^2, in [1, s]: how many keys a row effectively averages
    over."""
    return 1.0 / pattern.square().sum(dim=-1)


def top1_legal(logits: Tensor, seen: Tensor) -> Tensor:
    """1.0 where the argmax token is legal (unseen), else 0.0: [..., v] -> [...] float.

    Top-1 accuracy for a task with many right answers. Chapter 1 shows it stays at 1
    while the distribution drifts far from p*, which is why the book reports TV, invalid
    mass and KL instead.
    """
    _check_seen(logits, seen, "logits and seen")
    return (~seen.gather(-1, logits.argmax(dim=-1, keepdim=True)).squeeze(-1)).float()
