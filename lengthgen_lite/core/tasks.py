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
    """One training batch, in the format :func:`lengthgen_lite.core.training.train` reads."""

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

    # Optional: ``sample_train_batches(batch, size, generators) -> Batch`` with a leading [K] axis,
    # equal to stacking ``sample_train_batch`` per generator. ``train`` uses it when present (faster).


def check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int in ``minimum..maximum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum or (maximum is not None and value > maximum):
        allowed = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise ValueError(f"{name} must be an int {allowed}, got {value!r}")


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

    This is the noisy training signal: one of the many legal continuations. The same draw as
    ``torch.multinomial(targets, 1)`` (its CPU kernel's exponential trick, checked by the tests),
    split in two so that a training loop can draw the noise of many steps before their targets exist.
    """
    return pick_next_tokens(targets, token_noise(targets.shape, generator))


def token_noise(shape: Sequence[int], generator: torch.Generator) -> Tensor:
    """The random draw behind :func:`sample_next_tokens` for targets of ``shape``: Exp(1) noise."""
    return torch.empty(tuple(shape)).exponential_(generator=generator)


def pick_next_tokens(targets: Tensor, noise: Tensor) -> Tensor:
    """argmax of ``targets / noise`` over the outputs: a draw from ``targets`` given Exp(1) ``noise``."""
    if noise.shape != targets.shape:
        raise ValueError(f"noise {tuple(noise.shape)} must have the shape of targets {tuple(targets.shape)}")
    return (targets / noise).argmax(dim=-1)


class PerSeedSampler:
    """Shared base of the samplers: the random draws are made per seed (generator), everything
    else runs once for all ``K`` seeds, on a leading [K] axis.

    A subclass says which sizes are valid (``_check_size``) and how to draw (``_draw``, with at
    least one generator); ``sample_train_batch`` is then the one-generator case of
    ``sample_train_batches``, so the two agree by construction.
    """

    def train_sizes(self) -> Sequence[int]:
        """One training size, ``self.train_length``, unless a task trains on several."""
        return (self.train_length,)

    def _check_size(self, size: int) -> None:
        raise NotImplementedError

    def _draw(self, batch: int, size: int, generators: Sequence[torch.Generator]) -> Batch:
        raise NotImplementedError

    def sample_train_batch(self, batch: int, size: int, generator: torch.Generator) -> Batch:
        """A batch of ``batch`` examples of input size ``size`` (any valid size: test sizes use this too)."""
        stacked = self.sample_train_batches(batch, size, [generator])
        return Batch(stacked.inputs[0], stacked.targets[0], stacked.loss_mask[0])

    def sample_train_batches(self, batch: int, size: int, generators: Sequence[torch.Generator]) -> Batch:
        """One batch per generator on a leading [K] axis; row k equals ``sample_train_batch(..., generators[k])``."""
        self._check_size(size)
        _check_positive_int("batch", batch)
        if not generators:
            raise ValueError("generators must hold at least one torch.Generator (one per seed)")
        return self._draw(batch, size, generators)


class NoiseSampler(PerSeedSampler):
    """A sampler whose one random draw per seed is a noise tensor with the batch as its leading axis
    (``draw_noise``); everything else is a function of that noise (``from_noise``).

    So a training loop can draw many steps' noise first, from each seed's generator in the order
    the steps would, and turn it all into batches in one vectorised call (the fast path of
    :func:`lengthgen_lite.core.training.train`): the same data, without per-step Python work.
    """

    def draw_noise(self, batch: int, size: int, generator: torch.Generator) -> Tensor:
        """One seed's random draw for a batch: [batch, ...]."""
        raise NotImplementedError

    def from_noise(self, noise: Tensor, size: int) -> Batch:
        """Batches from stacked noise [K, batch, ...]: inputs, targets and mask on the same [K, batch] axes."""
        raise NotImplementedError

    def _draw(self, batch: int, size: int, generators: Sequence[torch.Generator]) -> Batch:
        return self.from_noise(torch.stack([self.draw_noise(batch, size, g) for g in generators]), size)


@dataclass(frozen=True)
class SetComplement(NoiseSampler):
    """Set complement over ``v`` tokens, trained on every prefix length ``1..train_length``.

    Only the random draws are made per seed; the sorting and the targets run once for all ``K``
    seeds (chapter 5: the per-seed small ops were a large share of a batched training step).
    """

    v: int
    train_length: int

    def __post_init__(self) -> None:
        _check_vocab_and_length(self.v, self.train_length)

    @property
    def n_outputs(self) -> int:
        return self.v

    def _check_size(self, size: int) -> None:
        _check_vocab_and_length(self.v, size)

    def draw_noise(self, batch: int, size: int, generator: torch.Generator) -> Tensor:
        return torch.rand(batch, self.v, generator=generator)  # [batch, v]

    def from_noise(self, noise: Tensor, size: int) -> Batch:
        order = noise.argsort(dim=-1)  # [K, batch, v]: a random permutation per row, as in sample_sequences
        tokens = order[..., :size]  # [K, batch, pos]
        # target_distribution without its one-hot cumsum (a third of a fast training step): token i
        # is unseen after position t iff its place in the permutation is beyond t. Equal bit for bit.
        place = torch.empty_like(order).scatter_(-1, order, torch.arange(self.v).expand_as(order))
        unseen = (place.unsqueeze(-2) > torch.arange(size).unsqueeze(-1)).float()  # [K, batch, pos, v]
        targets = unseen / (self.v - 1 - torch.arange(size)).float().unsqueeze(-1)
        return Batch(tokens, targets, torch.ones(tokens.shape, dtype=torch.bool))


# --- Chapter 4: set retrieval (argmax retrieval, dictionary lookup) --------------------------------
# Both formats are the book's reconstruction (the paper gives no formats). An example is a set of
# N items plus one query slot, packed into one float tensor [batch, N + 1, 3] so that Batch.inputs
# stays a single tensor (stackable for vmap). Rows 0..N-1 are the items, in random order; the last
# row is the query. Columns: RETRIEVAL_COLUMNS. Token ids index one shared embedding table of size
# ``vocab_size``; -1 means "no token". The answer is one of ``n_outputs`` classes, read out at the
# query: targets [batch, 1, n_outputs] (one-hot), loss_mask [batch, 1].

RETRIEVAL_COLUMNS = ("priority", "first token", "second token")
NO_TOKEN = -1


def _check_train_sizes(min_train_size: int, max_train_size: int, largest: int | None = None) -> None:
    _check_positive_int("min_train_size", min_train_size)
    _check_positive_int("max_train_size", max_train_size)
    if min_train_size > max_train_size:
        raise ValueError(f"min_train_size={min_train_size} exceeds max_train_size={max_train_size}")
    if largest is not None and max_train_size > largest:
        raise ValueError(f"max_train_size={max_train_size} exceeds the {largest} distinct keys available")


def _check_classes(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 2:
        raise ValueError(f"{name} must be an int >= 2 (chance accuracy 1/{name}), got {value!r}")


def _pack(priority: Tensor, first: Tensor, second: Tensor) -> Tensor:
    """Stack the three columns into [..., slots, 3] float (ids up to 2**24 are exact in float32)."""
    return torch.stack([priority, first.float(), second.float()], dim=-1)


def _retrieval_batch(items: Tensor, query: Tensor, answer: Tensor, n_outputs: int) -> Batch:
    """items [..., N, 3], query [..., 1, 3], answer [...] long -> a Batch read out at the query."""
    targets = torch.nn.functional.one_hot(answer.unsqueeze(-1), n_outputs).float()  # [..., 1, n_outputs]
    return Batch(torch.cat([items, query], dim=-2), targets, torch.ones(answer.shape + (1,), dtype=torch.bool))


class RetrievalTask(Protocol):
    """What the retrieval model, its evaluation and runner need from a set-retrieval task."""

    n_outputs: int

    @property
    def vocab_size(self) -> int: ...

    def sample_train_batch(self, batch: int, size: int, generator: torch.Generator) -> Batch: ...

    def target_item(self, inputs: Tensor) -> Tensor: ...


class _SetRetrieval(PerSeedSampler):
    """Shared by the two retrieval tasks: training sizes ``min_train_size..max_train_size``."""

    min_train_size: int
    max_train_size: int

    def train_sizes(self) -> Sequence[int]:
        return tuple(range(self.min_train_size, self.max_train_size + 1))


@dataclass(frozen=True)
class ArgmaxRetrieval(_SetRetrieval):
    """N items, each a continuous priority p ~ U(0, 1) and a label in 0..n_classes-1; the answer is
    the label of the highest-priority item (ties have probability 0). Chapter 4.

    Item row: (p, label, -1); query row: (0, query token, -1), the query token being ``n_classes``.
    Continuous priorities because distinct priority tokens make the argmax trivially easy.
    """

    n_classes: int = 10
    min_train_size: int = 2
    max_train_size: int = 16

    def __post_init__(self) -> None:
        _check_classes("n_classes", self.n_classes)
        _check_train_sizes(self.min_train_size, self.max_train_size)

    @property
    def n_outputs(self) -> int:
        return self.n_classes

    @property
    def vocab_size(self) -> int:
        return self.n_classes + 1  # labels, then the query token

    def _check_size(self, size: int) -> None:
        _check_positive_int("size", size)

    def _draw(self, batch: int, size: int, generators: Sequence[torch.Generator]) -> Batch:
        priority = torch.stack([torch.rand(batch, size, generator=g) for g in generators])  # [K, batch, N]
        labels = torch.stack([torch.randint(self.n_classes, (batch, size), generator=g) for g in generators])
        items = _pack(priority, labels, torch.full_like(labels, NO_TOKEN))  # [K, batch, N, 3]
        slot = priority.shape[:2] + (1,)
        query = _pack(torch.zeros(slot), torch.full(slot, self.n_classes), torch.full(slot, NO_TOKEN))  # [K, batch, 1, 3]
        answer = labels.gather(-1, priority.argmax(-1, keepdim=True)).squeeze(-1)  # [K, batch]
        return _retrieval_batch(items, query, answer, self.n_classes)

    def target_item(self, inputs: Tensor) -> Tensor:
        """Index of the correct item (highest priority) in each packed input: [..., N + 1, 3] -> [...] long."""
        _check_packed(inputs)
        return inputs[..., :-1, 0].argmax(dim=-1)


@dataclass(frozen=True)
class DictionaryLookup(_SetRetrieval):
    """N key-value items with N distinct keys out of ``n_keys`` and values in 0..n_values-1 (drawn
    independently); the query names one of the N keys and the answer is its value. Chapter 4.

    One token per pair, so that keys and values are bound without positions: item row
    (0, key, n_keys + value); query row (0, query token, key*), the query token being n_keys + n_values.
    """

    n_keys: int = 1024
    n_values: int = 10
    min_train_size: int = 2
    max_train_size: int = 16

    def __post_init__(self) -> None:
        _check_positive_int("n_keys", self.n_keys)
        _check_classes("n_values", self.n_values)
        _check_train_sizes(self.min_train_size, self.max_train_size, largest=self.n_keys)

    @property
    def n_outputs(self) -> int:
        return self.n_values

    @property
    def vocab_size(self) -> int:
        return self.n_keys + self.n_values + 1  # keys, values, then the query token

    def _check_size(self, size: int) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= self.n_keys:
            raise ValueError(f"size N must be an int in 1..n_keys={self.n_keys} (distinct keys), got {size!r}")

    def _draw(self, batch: int, size: int, generators: Sequence[torch.Generator]) -> Batch:
        noise = torch.stack([torch.rand(batch, self.n_keys, generator=g) for g in generators])  # [K, batch, n_keys]
        values = torch.stack([torch.randint(self.n_values, (batch, size), generator=g) for g in generators])
        which = torch.stack([torch.randint(size, (batch, 1), generator=g) for g in generators])  # [K, batch, 1]
        keys = noise.topk(size, dim=-1).indices  # [K, batch, N]: a uniformly random subset, random order
        items = _pack(torch.zeros(keys.shape), keys, self.n_keys + values)  # [K, batch, N, 3]
        query = _pack(torch.zeros(which.shape), torch.full(which.shape, self.n_keys + self.n_values), keys.gather(-1, which))
        return _retrieval_batch(items, query, values.gather(-1, which).squeeze(-1), self.n_values)

    def target_item(self, inputs: Tensor) -> Tensor:
        """Index of the item whose key is the queried key: [..., N + 1, 3] -> [...] long."""
        _check_packed(inputs)
        return (inputs[..., :-1, 1] == inputs[..., -1:, 2]).float().argmax(dim=-1)


def _check_packed(inputs: Tensor) -> None:
    if inputs.dim() < 2 or inputs.shape[-1] != len(RETRIEVAL_COLUMNS) or inputs.shape[-2] < 2 or not inputs.is_floating_point():
        raise ValueError(
            f"packed retrieval inputs must be float [..., N + 1, {len(RETRIEVAL_COLUMNS)}] with N >= 1, "
            f"got {tuple(inputs.shape)} {inputs.dtype}"
        )
