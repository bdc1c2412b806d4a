"""Task samplers. Chapter 1 introduces set complement.

Set complement: the input is a sequence of distinct tokens from ``{0, ..., v-1}``; after
a prefix of ``s`` tokens the ideal next-token distribution p* is uniform over the ``v -
s`` tokens not yet seen. A causal model predicts at every position at once, so one
sequence of length ``L`` trains (and evaluates) every prefix length ``s = 1..L``.

Every task returns :class:`Batch` objects, the one format the training loop reads.
Chapter 4's retrieval tasks live in :mod:`lengthgen_lite.core.retrieval`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from .validation import require_int


@dataclass(frozen=True)
class Batch:
    """One training batch, in the format :func:`lengthgen_lite.core.training.train`
    reads."""

    inputs: Tensor  # [batch, pos] token ids (long) or task-specific features
    targets: Tensor  # [batch, pos, n_outputs] target distributions (rows sum to 1)
    loss_mask: Tensor  # [batch, pos] bool: which positions count in the loss


@dataclass(frozen=True)
class DrawnBatch:
    """A batch before its targets: the draws made, the targets not yet computed.

    The compiled training step takes this and builds the targets inside its graph
    (:func:`complete_batch`), where they fuse with the loss instead of being written
    out and read back (``PathPlan.targets_in_graph``).
    """

    inputs: Tensor  # [..., pos] as Batch.inputs
    loss_mask: Tensor  # [..., pos] as Batch.loss_mask
    # what the task's batch_targets reads besides inputs and mask (set complement:
    # each token's place in its permutation; by default the targets themselves)
    target_state: Tensor | None = None
    # sampled targets: the Exp(1) noise that picks each position's target token
    # (token_noise), [..., pos, n_outputs]; None for target distributions
    token_noise: Tensor | None = None


class Task(Protocol):
    """What the training loop needs from a task."""

    n_outputs: int

    def train_sizes(self) -> Sequence[int]:
        """Input sizes the loop draws from, one per step, shared by all seeds trained
        together."""
        ...

    def sample_train_batch(
        self, batch: int, size: int, generator: torch.Generator
    ) -> Batch:
        """A batch of ``batch`` training examples of input size ``size``."""
        ...

    # Optional: ``sample_train_batches(batch, size, generators) -> Batch`` with a
    # leading [K] axis, equal to stacking ``sample_train_batch`` per generator.
    # ``train`` uses it when present (faster).


def _check_vocab_and_length(v: int, length: int, name: str = "length") -> None:
    require_int("v", v, minimum=2)  # the vocabulary size
    # distinct tokens, at least one left to predict
    require_int(name, length, minimum=1, maximum=v - 1)


def sample_sequences(
    v: int, length: int, batch: int, generator: torch.Generator
) -> Tensor:
    """``batch`` sequences of ``length`` distinct tokens in ``0..v-1``: [batch, pos]
    long.

    Each row is the start of a uniformly random permutation of the vocabulary.
    """
    _check_vocab_and_length(v, length)
    require_int("batch", batch, minimum=1)
    return torch.rand(batch, v, generator=generator).argsort(dim=-1)[:, :length]


def enumerate_sequences(v: int, length: int) -> Tensor:
    """Every sequence of ``length`` distinct tokens, in lexicographic order:
    [v!/(v-length)!, pos]."""
    _check_vocab_and_length(v, length)
    return torch.tensor(
        list(itertools.permutations(range(v), length)), dtype=torch.long
    )


def seen_mask(tokens: Tensor, v: int) -> Tensor:
    """[batch, pos, v] bool: token i has appeared at or before each position."""
    if tokens.dim() != 2 or tokens.dtype != torch.long:
        raise ValueError(
            "tokens must be a [batch, pos] long tensor, got "
            f"{tuple(tokens.shape)} {tokens.dtype}"
        )
    one_hot = torch.nn.functional.one_hot(tokens, v)  # [batch, pos, v]
    return one_hot.cumsum(dim=1) > 0


def target_distribution(tokens: Tensor, v: int) -> Tensor:
    """p* at every prefix: [batch, pos, v], zero on seen tokens, ``1/(v-s)`` on the
    rest."""
    seen = seen_mask(tokens, v)
    if (seen.sum(-1) != torch.arange(1, tokens.shape[1] + 1)).any():
        raise ValueError("tokens must be distinct within each sequence")
    unseen = (~seen).float()
    return unseen / unseen.sum(dim=-1, keepdim=True)


def sample_next_tokens(targets: Tensor, generator: torch.Generator) -> Tensor:
    """One legal next token per position, drawn from ``targets`` [..., n_outputs]: [...]
    long.

    This is the noisy training signal: one of the many legal continuations. The same
    draw as ``torch.multinomial(targets, 1)`` (its CPU kernel's exponential trick,
    checked by the tests), split in two so that a training loop can draw the noise of
    many steps before their targets exist.
    """
    return pick_next_tokens(targets, token_noise(targets.shape, generator))


def token_noise(shape: Sequence[int], generator: torch.Generator) -> Tensor:
    """The random draw behind :func:`sample_next_tokens` for targets of ``shape``:
    Exp(1) noise, ``-log1p(-u)`` of a float64 uniform ``u`` rounded to float32, which
    is how ``Tensor.exponential_`` computes it on the CPU, from the same draws of
    ``generator`` (tested). Its per-element kernel took half of a training's batch
    drawing with sampled targets; this is vectorised."""
    u = torch.rand(tuple(shape), dtype=torch.float64, generator=generator)
    return torch.log1p(-u).neg_().float()


def pick_next_tokens(targets: Tensor, noise: Tensor) -> Tensor:
    """argmax of ``targets / noise`` over the outputs: a draw from ``targets`` given
    Exp(1) ``noise``."""
    if noise.shape != targets.shape:
        raise ValueError(
            f"noise {tuple(noise.shape)} must have the shape of targets "
            f"{tuple(targets.shape)}"
        )
    return (targets / noise).argmax(dim=-1)


def one_hot_targets(tokens: Tensor, n_outputs: int) -> Tensor:
    """Sampled next tokens [...] as target distributions [..., n_outputs] float: all
    mass on the drawn token."""
    return torch.nn.functional.one_hot(tokens, n_outputs).float()


def complete_batch(
    task: NoiseSampler, drawn: DrawnBatch, sampled: Tensor | None = None
) -> Batch:
    """The batch a :class:`DrawnBatch` stands for: the task's targets, or with
    ``token_noise`` the one-hot targets of the tokens it picks from them.

    ``sampled`` (a bool tensor, with ``token_noise``): the picked targets where it is
    true, the task's own where it is false (the noise then only needs to be positive).
    The compiled step takes the target kind so, as data: one graph for both kinds.
    """
    targets = task.batch_targets(drawn)
    if drawn.token_noise is not None:
        picked = one_hot_targets(
            pick_next_tokens(targets, drawn.token_noise), task.n_outputs
        )
        targets = picked if sampled is None else torch.where(sampled, picked, targets)
    return Batch(drawn.inputs, targets, drawn.loss_mask)


class PerSeedSampler:
    """Shared base of the samplers: the random draws are made per seed (generator),
    everything else runs once for all ``K`` seeds, on a leading [K] axis.

    A subclass says which sizes are valid (``_check_size``) and how to draw (``_draw``,
    with at least one generator); ``sample_train_batch`` is then the one-generator case
    of ``sample_train_batches``, so the two agree by construction.
    """

    def train_sizes(self) -> Sequence[int]:
        """One training size, ``self.train_length``, unless a task trains on several."""
        return (self.train_length,)

    def _check_size(self, size: int) -> None:
        raise NotImplementedError

    def _draw(
        self, batch: int, size: int, generators: Sequence[torch.Generator]
    ) -> Batch:
        raise NotImplementedError

    def sample_train_batch(
        self, batch: int, size: int, generator: torch.Generator
    ) -> Batch:
        """A batch of ``batch`` examples of input size ``size`` (any valid size: test
        sizes use this too)."""
        stacked = self.sample_train_batches(batch, size, [generator])
        return Batch(stacked.inputs[0], stacked.targets[0], stacked.loss_mask[0])

    def sample_train_batches(
        self, batch: int, size: int, generators: Sequence[torch.Generator]
    ) -> Batch:
        """One batch per generator on a leading [K] axis; row k equals
        ``sample_train_batch(..., generators[k])``."""
        self.check_draw(batch, size, generators)
        return self._draw(batch, size, generators)

    def check_draw(
        self, batch: int, size: int, generators: Sequence[torch.Generator]
    ) -> None:
        """ValueError unless ``size`` is valid, ``batch`` >= 1 and there is a
        generator."""
        self._check_size(size)
        require_int("batch", batch, minimum=1)
        if not generators:
            raise ValueError(
                "generators must hold at least one torch.Generator (one per seed)"
            )


class NoiseSampler(PerSeedSampler):
    """A sampler whose one random draw per seed is a noise tensor with the batch as its
    leading axis (``draw_noise``); everything else is a function of that noise
    (``from_noise``): the draws (``drawn_batch``), then the targets
    (``batch_targets``, which a compiled step runs inside its graph).

    So a training loop can draw many steps' noise first, from each seed's generator in
    the order the steps would, and turn it all into batches in one vectorised call (the
    fast path of :func:`lengthgen_lite.core.training.train`): the same data, without
    per-step Python work.
    """

    def draw_noise(self, batch: int, size: int, generator: torch.Generator) -> Tensor:
        """One seed's random draw for a batch: [batch, ...], one ``torch.rand`` with
        the batch leading, so a draw of ``n * batch`` is ``n`` draws of ``batch`` in
        a row (the fast path draws a chunk of steps at once; tested per task)."""
        raise NotImplementedError

    def from_noise(self, noise: Tensor, size: int) -> Batch:
        """Batches from stacked noise [K, batch, ...]: inputs, targets and mask on the
        same [K, batch] axes."""
        return complete_batch(self, self.drawn_batch(noise, size))

    def drawn_batch(self, noise: Tensor, size: int) -> DrawnBatch:
        """``from_noise`` up to its targets, which :meth:`batch_targets` computes."""
        raise NotImplementedError

    def batch_targets(self, drawn: DrawnBatch) -> Tensor:
        """The targets of a :meth:`drawn_batch` (traceable: the compiled step runs it
        inside its graph). By default the draw computed them (``target_state``)."""
        if drawn.target_state is None:
            raise ValueError(f"{type(self).__name__}'s drawn batches carry no targets")
        return drawn.target_state

    def _draw(
        self, batch: int, size: int, generators: Sequence[torch.Generator]
    ) -> Batch:
        return self.from_noise(
            torch.stack([self.draw_noise(batch, size, g) for g in generators]), size
        )


@dataclass(frozen=True)
class SetComplement(NoiseSampler):
    """Set complement over ``v`` tokens, trained on every prefix length
    ``1..train_length``.

    Only the random draws are made per seed; the sorting and the targets run once for
    all ``K`` seeds (chapter 5: the per-seed small ops were a large share of a batched
    training step).
    """

    v: int
    train_length: int

    def __post_init__(self) -> None:
        _check_vocab_and_length(self.v, self.train_length, "train_length")

    @property
    def vocab_size(self) -> int:
        return self.v

    @property
    def n_outputs(self) -> int:
        return self.v

    def _check_size(self, size: int) -> None:
        _check_vocab_and_length(self.v, size, "size")

    def draw_noise(self, batch: int, size: int, generator: torch.Generator) -> Tensor:
        return torch.rand(batch, self.v, generator=generator)  # [batch, v]

    def drawn_batch(self, noise: Tensor, size: int) -> DrawnBatch:
        """The tokens, and each token's place in its row's permutation (the state)."""
        # [K, batch, v]: a random permutation per row, as in sample_sequences
        order = noise.argsort(dim=-1)
        tokens = order[..., :size]  # [K, batch, pos]
        place = torch.empty_like(order).scatter_(
            -1, order, torch.arange(self.v).expand_as(order)
        )
        return DrawnBatch(tokens, torch.ones(tokens.shape, dtype=torch.bool), place)

    def batch_targets(self, drawn: DrawnBatch) -> Tensor:
        if drawn.target_state is None:
            raise ValueError("set complement's targets need the tokens' places")
        """target_distribution without its one-hot cumsum (a third of a fast training
        step): token i is unseen after position t iff its place in the permutation is
        beyond t. Equal bit for bit. [..., pos, v]"""
        size = drawn.inputs.shape[-1]
        unseen = (
            drawn.target_state.unsqueeze(-2) > torch.arange(size).unsqueeze(-1)
        ).float()
        return unseen / (self.v - 1 - torch.arange(size)).float().unsqueeze(-1)
