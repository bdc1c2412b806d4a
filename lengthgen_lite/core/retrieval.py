"""Chapter 4's set retrieval: two tasks (argmax retrieval, dictionary lookup) and the
model that reads them (``RetrievalTransformer``, ``retrieval_config``).

Both formats are the book's reconstruction (the paper gives no formats). An example is a
set of N items plus one query slot, packed into one float tensor [batch, N + 1, 3] so
that ``Batch.inputs`` stays a single tensor (stackable for vmap). Rows 0..N-1 are the
items, in random order; the last row is the query. Columns: ``RETRIEVAL_COLUMNS``. Token
ids index one shared embedding table of size ``vocab_size``; -1 (``NO_TOKEN``) means "no
token". The answer is one of ``n_outputs`` classes, read out at the query: targets
[batch, 1, n_outputs] (one-hot), loss_mask [batch, 1].

The model is :class:`~lengthgen_lite.core.model.Transformer` with an input layer for the
packed items; it keeps the blocks, norm placements and hook names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch import Tensor, nn

from .hooks import HookPoint
from .model import MLP, ModelConfig, Transformer
from .tasks import Batch, PerSeedSampler
from .validation import is_int, require_int

RetrievalVariant = Literal["baseline", "layernorm", "standardize"]

RETRIEVAL_COLUMNS = ("priority", "first token", "second token")
NO_TOKEN = -1


def _check_train_sizes(
    min_train_size: int, max_train_size: int, largest: int | None = None
) -> None:
    require_int("min_train_size", min_train_size, minimum=1)
    require_int("max_train_size", max_train_size, minimum=1)
    if min_train_size > max_train_size:
        raise ValueError(
            f"min_train_size={min_train_size} exceeds max_train_size={max_train_size}"
        )
    if largest is not None and max_train_size > largest:
        raise ValueError(
            f"max_train_size={max_train_size} exceeds the {largest} distinct "
            "keys available"
        )


def _check_classes(name: str, value: int) -> None:
    if not is_int(value) or value < 2:
        raise ValueError(
            f"{name} must be an int >= 2 (chance accuracy 1/{name}), got {value!r}"
        )


def _pack(priority: Tensor, first: Tensor, second: Tensor) -> Tensor:
    """Stack the three columns into [..., slots, 3] float (ids up to 2**24 are exact in
    float32)."""
    return torch.stack([priority, first.float(), second.float()], dim=-1)


def _retrieval_batch(
    items: Tensor, query: Tensor, answer: Tensor, n_outputs: int
) -> Batch:
    """items [..., N, 3], query [..., 1, 3], answer [...] long -> a Batch read out at
    the query."""
    # [..., 1, n_outputs]
    targets = nn.functional.one_hot(answer.unsqueeze(-1), n_outputs).float()
    return Batch(
        torch.cat([items, query], dim=-2),
        targets,
        torch.ones(answer.shape + (1,), dtype=torch.bool),
    )


class RetrievalTask(Protocol):
    """What the retrieval model, its evaluation and runner need from a set-retrieval
    task."""

    n_outputs: int

    @property
    def vocab_size(self) -> int: ...

    def sample_train_batch(
        self, batch: int, size: int, generator: torch.Generator
    ) -> Batch: ...

    def target_item(self, inputs: Tensor) -> Tensor: ...


class _SetRetrieval(PerSeedSampler):
    """Shared by the two retrieval tasks: training sizes
    ``min_train_size..max_train_size``."""

    min_train_size: int
    max_train_size: int

    def train_sizes(self) -> Sequence[int]:
        return tuple(range(self.min_train_size, self.max_train_size + 1))


@dataclass(frozen=True)
class ArgmaxRetrieval(_SetRetrieval):
    """N items, each a continuous priority p ~ U(0, 1) and a label in 0..n_classes-1;
    the answer is the label of the highest-priority item (ties have probability 0).
    Chapter 4.

    Item row: (p, label, -1); query row: (0, query token, -1), the query token being
    ``n_classes``. Continuous priorities because distinct priority tokens make the
    argmax trivially easy.
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
        require_int("size", size, minimum=1)

    def _draw(
        self, batch: int, size: int, generators: Sequence[torch.Generator]
    ) -> Batch:
        # [K, batch, N]
        priority = torch.stack(
            [torch.rand(batch, size, generator=g) for g in generators]
        )
        labels = torch.stack(
            [
                torch.randint(self.n_classes, (batch, size), generator=g)
                for g in generators
            ]
        )
        # [K, batch, N, 3]
        items = _pack(priority, labels, torch.full_like(labels, NO_TOKEN))
        slot = priority.shape[:2] + (1,)
        # [K, batch, 1, 3]
        query = _pack(
            torch.zeros(slot),
            torch.full(slot, self.n_classes),
            torch.full(slot, NO_TOKEN),
        )
        # [K, batch]
        answer = labels.gather(-1, priority.argmax(-1, keepdim=True)).squeeze(-1)
        return _retrieval_batch(items, query, answer, self.n_classes)

    def target_item(self, inputs: Tensor) -> Tensor:
        """Index of the correct item (highest priority) in each packed input: [..., N +
        1, 3] -> [...] long."""
        _check_packed(inputs)
        return inputs[..., :-1, 0].argmax(dim=-1)


@dataclass(frozen=True)
class DictionaryLookup(_SetRetrieval):
    """N key-value items with N distinct keys out of ``n_keys`` and values in
    0..n_values-1 (drawn independently); the query names one of the N keys and the
    answer is its value. Chapter 4.

    One token per pair, so that keys and values are bound without positions: item row
    (0, key, n_keys + value); query row (0, query token, key*), the query token being
    n_keys + n_values.
    """

    n_keys: int = 1024
    n_values: int = 10
    min_train_size: int = 2
    max_train_size: int = 16

    def __post_init__(self) -> None:
        require_int("n_keys", self.n_keys, minimum=1)
        _check_classes("n_values", self.n_values)
        _check_train_sizes(
            self.min_train_size, self.max_train_size, largest=self.n_keys
        )

    @property
    def n_outputs(self) -> int:
        return self.n_values

    @property
    def vocab_size(self) -> int:
        return self.n_keys + self.n_values + 1  # keys, values, then the query token

    def _check_size(self, size: int) -> None:
        if not is_int(size) or not 1 <= size <= self.n_keys:
            raise ValueError(
                f"size N must be an int in 1..n_keys={self.n_keys} (distinct "
                f"keys), got {size!r}"
            )

    def _draw(
        self, batch: int, size: int, generators: Sequence[torch.Generator]
    ) -> Batch:
        # [K, batch, n_keys]
        noise = torch.stack(
            [torch.rand(batch, self.n_keys, generator=g) for g in generators]
        )
        values = torch.stack(
            [
                torch.randint(self.n_values, (batch, size), generator=g)
                for g in generators
            ]
        )
        # [K, batch, 1]
        which = torch.stack(
            [torch.randint(size, (batch, 1), generator=g) for g in generators]
        )
        # [K, batch, N]: a uniformly random subset, random order
        keys = noise.topk(size, dim=-1).indices
        # [K, batch, N, 3]
        items = _pack(torch.zeros(keys.shape), keys, self.n_keys + values)
        query = _pack(
            torch.zeros(which.shape),
            torch.full(which.shape, self.n_keys + self.n_values),
            keys.gather(-1, which),
        )
        return _retrieval_batch(
            items, query, values.gather(-1, which).squeeze(-1), self.n_values
        )

    def target_item(self, inputs: Tensor) -> Tensor:
        """Index of the item whose key is the queried key: [..., N + 1, 3] -> [...]
        long."""
        _check_packed(inputs)
        return (inputs[..., :-1, 1] == inputs[..., -1:, 2]).float().argmax(dim=-1)


def _check_packed(inputs: Tensor) -> None:
    if (
        inputs.dim() < 2
        or inputs.shape[-1] != len(RETRIEVAL_COLUMNS)
        or inputs.shape[-2] < 2
        or not inputs.is_floating_point()
    ):
        raise ValueError(
            "packed retrieval inputs must be float [..., N + 1, "
            f"{len(RETRIEVAL_COLUMNS)}] with N >= 1, "
            f"got {tuple(inputs.shape)} {inputs.dtype}"
        )


RETRIEVAL_VARIANTS: dict[str, dict[str, str]] = {  # variant name -> ModelConfig fields
    "baseline": {"norm": "none"},
    "layernorm": {"norm": "attn_out", "norm_kind": "layernorm"},
    "standardize": {"norm": "attn_out", "norm_kind": "standardize"},
}


class RetrievalTransformer(Transformer):
    """Transformer over packed items [batch, N + 1, 3] float -> logits at the query
    [batch, 1, n_outputs].

    A slot's vector is E[first token] + E[second token] (absent tokens add nothing) +
    p * w_priority. No positions: the model sees a set. With ``queries="last"`` only the
    query slot attends, which keeps N = 1024 cheap. ``norm="attn_out"`` is "LN (or
    standardization) right after the attention output": ``blocks.0.hook_attn_out`` is
    recorded before the norm, ``blocks.0.ln_attn_out.hook_normalized`` after.

    ``cfg.item_mlp`` > 0 adds an item MLP (width ``item_mlp``, ReLU, biases) on each
    slot's vector before attention, as a residual: ``x + mlp(x)``, so every slot is
    still a function of its own item alone (the model still sees a set) and the linear
    path stays. ``hook_embed`` records the vectors before it, ``hook_item_mlp_out`` its
    output (both before ``blocks.0.hook_resid_pre``, their sum).
    """

    reads_items = True

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, draw_attention_biases=False)
        # a continuous priority, linearly
        self.priority_embed = nn.Linear(1, cfg.d_model, bias=False)
        # as unit-variance as the token embeddings
        nn.init.normal_(self.priority_embed.weight, std=1.0)
        # The reviewers' components draw last, attention biases first: with or without
        # them every other weight of a seed starts the same (paired comparisons).
        self._draw_attention_biases()
        if cfg.item_mlp:
            self.item_mlp = MLP(cfg, width=cfg.item_mlp)
            self.hook_item_mlp_out = HookPoint()
            if cfg.init == "book":
                self.item_mlp.apply(self._init_weights)

    def forward(self, inputs: Tensor) -> Tensor:
        """Packed items [batch, N + 1, 3] float -> logits at the query [batch, 1,
        n_outputs]."""
        if (
            inputs.dim() != 3
            or inputs.shape[-1] != len(RETRIEVAL_COLUMNS)
            or not inputs.is_floating_point()
        ):
            raise ValueError(
                "inputs must be packed items [batch, N + 1, "
                f"{len(RETRIEVAL_COLUMNS)}] float, "
                f"got {tuple(inputs.shape)} {inputs.dtype}"
            )
        priority, first, second = inputs.unbind(dim=-1)  # [batch, N + 1] each
        x = self.priority_embed(priority.unsqueeze(-1))  # [batch, N + 1, d_model]
        for ids in (first.long(), second.long()):
            x = x + self.embed(ids.clamp_min(0)) * (ids != NO_TOKEN).unsqueeze(-1)
        x = self.hook_embed(x)
        if self.cfg.item_mlp:
            x = x + self.hook_item_mlp_out(self.item_mlp(x))
        # [batch, 1, n_outputs]
        return self.forward_embeddings(x)[:, -1:]


def retrieval_config(
    task: RetrievalTask, variant: RetrievalVariant, **overrides: object
) -> ModelConfig:
    """The book's retrieval model for ``task``: one layer, 4 heads, d_model 64, ReLU MLP
    of width 256, no positions, only the query attends; ``variant`` sets the norm after
    the attention output."""
    if variant not in RETRIEVAL_VARIANTS:
        raise ValueError(
            f"variant={variant!r} is unknown; allowed: {tuple(RETRIEVAL_VARIANTS)}"
        )
    fields = dict(
        vocab_size=task.vocab_size,
        n_outputs=task.n_outputs,
        d_model=64,
        n_heads=4,
        d_mlp=256,
        causal=False,
        queries="last",
        **RETRIEVAL_VARIANTS[variant],
    )
    return ModelConfig(**{**fields, **overrides})
