"""Task samplers. Chapter 1 introduces set complement.

Set complement: the input is a sequence of distinct tokens from ``{0, ..., v-1}``; after a prefix of
``s`` tokens the ideal next-token distribution p* is uniform over the ``v - s`` tokens not yet seen.
A causal model predicts at every position at once, so one sequence of length ``L`` trains (and
evaluates) every prefix length ``s = 1..L``.

Every task returns :class:`Batch` objects, the one format the training loop reads.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Protocol, Sequence

import torch
from torch import Tensor


@dataclass(frozen=True)
class Batch:
    """One training batch, in the format :func:`lengthgen_lite.training.train` reads."""

    inputs: Tensor  # [batch, pos] token ids (long) or task-specific features
    targets: Tensor  # [batch, pos, n_outputs] target distributions (rows sum to 1)
    loss_mask: Tensor  # [batch, pos] bool: which positions count in the loss


class Task(Protocol):
    """What the training loop needs from a task."""

    n_outputs: int

    def train_sizes(self) -> Sequence[int]:
        """Input sizes the loop draws from, one per step, shared by all seeds trained together."""
        ...

    def sample_train_batch(self, batch: int, size: int, generator: torch.Generator) -> Batch:
        """A batch of ``batch`` training examples of input size ``size``."""
        ...


def _check_positive_int(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_vocab_and_length(v: int, length: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < 2:
        raise ValueError(f"vocabulary size v must be an int >= 2, got {v!r}")
    if not isinstance(length, int) or isinstance(length, bool) or not 1 <= length <= v - 1:
        raise ValueError(
            f"length must be an int in 1..v-1 = 1..{v - 1} (distinct tokens, at least one left "
            f"to predict), got {length!r}"
        )


def sample_sequences(v: int, length: int, batch: int, generator: torch.Generator) -> Tensor:
    """``batch`` sequences of ``length`` distinct tokens in ``0..v-1``: [batch, pos] long.

    Each row is the start of a uniformly random permutation of the vocabulary.
    """
    _check_vocab_and_length(v, length)
    _check_positive_int("batch", batch)
    return torch.rand(batch, v, generator=generator).argsort(dim=-1)[:, :length]


def enumerate_sequences(v: int, length: int) -> Tensor:
    """Every sequence of ``length`` distinct tokens, in lexicographic order: [v!/(v-length)!, pos]."""
    _check_vocab_and_length(v, length)
    return torch.tensor(list(itertools.permutations(range(v), length)), dtype=torch.long)


def seen_mask(tokens: Tensor, v: int) -> Tensor:
    """[batch, pos, v] bool: token i has appeared at or before each position."""
    if tokens.dim() != 2 or tokens.dtype != torch.long:
        raise ValueError(f"tokens must be a [batch, pos] long tensor, got {tuple(tokens.shape)} {tokens.dtype}")
    one_hot = torch.nn.functional.one_hot(tokens, v)  # [batch, pos, v]
    return one_hot.cumsum(dim=1) > 0


def target_distribution(tokens: Tensor, v: int) -> Tensor:
    """p* at every prefix: [batch, pos, v], zero on seen tokens, ``1/(v-s)`` on the rest."""
    seen = seen_mask(tokens, v)
    if (seen.sum(-1) != torch.arange(1, tokens.shape[1] + 1)).any():
        raise ValueError("tokens must be distinct within each sequence")
    unseen = (~seen).float()
    return unseen / unseen.sum(dim=-1, keepdim=True)


def sample_next_tokens(targets: Tensor, generator: torch.Generator) -> Tensor:
    """One legal next token per position, drawn from ``targets`` [..., n_outputs]: [...] long.

    This is the noisy training signal: one of the many legal continuations.
    """
    flat = targets.reshape(-1, targets.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(targets.shape[:-1])


@dataclass(frozen=True)
class SetComplement:
    """Set complement over ``v`` tokens, trained on every prefix length ``1..train_length``."""

    v: int
    train_length: int

    def __post_init__(self) -> None:
        _check_vocab_and_length(self.v, self.train_length)

    @property
    def n_outputs(self) -> int:
        return self.v

    def train_sizes(self) -> Sequence[int]:
        return (self.train_length,)

    def sample_train_batch(self, batch: int, size: int, generator: torch.Generator) -> Batch:
        tokens = sample_sequences(self.v, size, batch, generator)
        targets = target_distribution(tokens, self.v)
        return Batch(tokens, targets, torch.ones(tokens.shape, dtype=torch.bool))
