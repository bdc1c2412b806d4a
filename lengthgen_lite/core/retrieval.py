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
:func:`evaluate_retrieval` scores a trained model at every set size N (accuracy,
attention, the paper's distribution-shift statistics of the attention output);
:func:`evaluate_sizes` is the tasks' evaluation in ``core.task_registry``: the same
numbers up to float rounding, for all of a configuration's models in one stacked
forward of :meth:`RetrievalTransformer.query_forward` (the query's projection only,
token tables), which training's fast path uses too (``core.fast_path``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn import functional as F

from . import metrics
from .evaluation import ATTN_OUT, PATTERN
from .hooks import HookFn, HookPoint, hook_names, run_with_cache
from .model import MLP, Attention, ModelConfig, Transformer, attention_logit_factor
from .seeding import make_generator
from .tasks import Batch, PerSeedSampler
from .validation import is_int, require_int, require_ints

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
        # [K, batch, N]: a uniformly random subset, random order
        return self._from_keys(noise.topk(size, dim=-1).indices, generators)

    def sample_fast_batches(
        self, batch: int, size: int, generators: Sequence[torch.Generator]
    ) -> Batch:
        """Batches from the distribution of ``sample_train_batches``, with other
        draws: training's fast path (``core.fast_path``).

        The N distinct keys are N uniform draws from ``n_keys``, a row drawn again
        while it repeats a key (rejection: uniform over ordered distinct keys; at N =
        16 of 1024 keys about one row in nine is redrawn), instead of ``n_keys``
        uniforms and a sort per example (1024 of them for sets of at most 16, most
        of a training step's draws). Sizes with N(N - 1) > n_keys, where rejection
        would redraw most rows, draw as ``sample_train_batches`` does.
        """
        self.check_draw(batch, size, generators)
        if size * (size - 1) > self.n_keys:
            return self.sample_train_batches(batch, size, generators)
        keys = []
        for g in generators:
            drawn = torch.randint(self.n_keys, (batch, size), generator=g)
            while True:
                ordered = drawn.sort(dim=-1).values
                repeats = (ordered[:, 1:] == ordered[:, :-1]).any(dim=-1)
                n = int(repeats.sum())
                if not n:
                    break
                drawn[repeats] = torch.randint(self.n_keys, (n, size), generator=g)
            keys.append(drawn)
        return self._from_keys(torch.stack(keys), generators)

    def _from_keys(self, keys: Tensor, generators: Sequence[torch.Generator]) -> Batch:
        """The batch with distinct keys [K, batch, N]: its values and the queried
        item drawn from each seed's generator."""
        batch, size = keys.shape[1:]
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
        # [batch, 1, n_outputs]
        return self.forward_embeddings(self.embed_items(_check_items(inputs)))[:, -1:]

    def embed_items(self, inputs: Tensor) -> Tensor:
        """Packed items [batch, slots, 3] -> each slot's vector [batch, slots, d_model]
        (``hook_embed``, then the item MLP's residual, if any)."""
        priority, first, second = inputs.unbind(dim=-1)  # [batch, slots] each
        x = self.priority_embed(priority.unsqueeze(-1))  # [batch, slots, d_model]
        for ids in (first.long(), second.long()):
            x = x + self.embed(ids.clamp_min(0)) * (ids != NO_TOKEN).unsqueeze(-1)
        x = self.hook_embed(x)
        if self.cfg.item_mlp:
            x = x + self.hook_item_mlp_out(self.item_mlp(x))
        return x

    def query_forward(
        self, inputs: Tensor, tables: bool = False, padded: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``self(inputs)`` up to float rounding, in fewer FLOPs, with the first layer's
        readings at the query: (logits [batch, 1, n_outputs], the query's attention
        pattern [batch, head, N + 1], the attention output before any norm [batch,
        d_model]). Training's and the evaluation's forward (``core.fast_path``,
        :func:`evaluate_sizes`); recordings and interventions use the plain forward.

        W_Q projects the query slot only (the plain forward projects every slot and
        keeps one row), and no slot is projected by W_K or W_V: the query is read back
        through W_K (q . W_K x = (W_K^T q) . x), the slots are mixed by their attention
        first and W_V projects the mixture once, so a slot costs two dot products per
        head instead of two d_model x d_model products (dictionary lookup's compiled
        step 1.6x faster). ``tables`` (needs :func:`tables_apply`): a slot's vector is
        p * w_priority + E[first] + E[second], so its key and value are the same sum
        of projected rows. W_K and W_V project the v vocabulary rows and w_priority
        once; the query scores those v + 1 keys, each slot adds up its two rows'
        scores (scalars, not vectors), and the attention output mixes the value rows
        by the attention each row gets. No projection per slot: at N = 1024 the
        evaluation runs about 20x faster. An item MLP's fc_in is linear too, so its
        hidden units come from rows the same way (``_item_hidden``); its fc_out
        is, like W_K and W_V, read back by the query and applied once to the mixed
        hidden units: a slot costs two dot products of item_mlp per head.
        ``padded``: slots without a first token (NO_TOKEN; no task makes one) are
        padding, which no query attends to: sets of several sizes padded to one shape
        give each set's own numbers (the compiled training step, whose per-slot
        products are broadcast sums: inductor fuses them, where batched products of
        [head, slots] blocks cost more). The first layer's hooks up to the pattern see
        what they see in the plain forward (hook_embed and hook_item_mlp_out only the
        query slot's vector with ``tables``); ``hook_resid_pre`` and the keys' and
        values' inputs are not recorded.
        """
        _check_items(inputs)
        if self.cfg.queries != "last":
            raise ValueError(
                f"query_forward needs queries='last', got {self.cfg.queries!r}"
            )
        if tables and not tables_apply(self.cfg):
            raise ValueError(
                "tables need slot vectors that are sums of the items' rows "
                "(positional='none', no norm before attention), got "
                f"positional={self.cfg.positional!r}, norm={self.cfg.norm!r}"
            )
        if self.cfg.positional == "rope":
            raise ValueError(
                "query_forward has no positions (the model sees a set): positional "
                "must be 'none' or 'learned', got 'rope'; use the plain forward"
            )
        if padded and self.cfg.logit_scale != "none":
            raise ValueError(
                "padded sets change n, the number of keys a query sees: logit_scale "
                f"{self.cfg.logit_scale!r} needs padded=False"
            )
        block = self.blocks[0]
        attn = block.attn
        B, T = inputs.shape[:2]
        H, dh = attn.n_heads, attn.d_head
        if tables:
            # [batch, 1, d_model]: the query (embedded as [batch, 3] rows, which vmap
            # runs as one product per seed)
            x = self.embed_items(inputs[:, -1])[:, None]
        else:
            x = self.with_positions(self.embed_items(inputs))
            # [batch, T, d_model]: what W_K and W_V would project, slot by slot
            keys_in = block.ln1(x) if block.sites.pre else x
            x = x[:, -1:]  # the query slot's residual stream
        # [batch, head, 1, d_head]; W_Q on [batch, d_model] rows (a [batch, 1, d_model]
        # slice of the slots made vmap multiply one weight copy per example)
        q = attn.W_Q((block.ln1(x) if block.sites.pre else x).reshape(B, -1))
        q = q.view(B, H, 1, dh)
        if tables:
            # [head, v + 2, d_head] each: the vocabulary's, NO_TOKEN's, w_priority's
            k_rows, v_rows = self._token_rows(attn)
            if self.cfg.item_mlp:
                # [head, d_head, item_mlp] each: W_K and W_V after the MLP's fc_out
                k_hidden, v_hidden = (
                    _per_head(W, H) @ self.item_mlp.fc_out.weight
                    for W in (attn.W_K, attn.W_V)
                )
            priority, first, second = inputs.unbind(dim=-1)  # [batch, T] each
            # [batch, head, T] each: rows 0..v (NO_TOKEN, -1, is row v)
            ids = [
                _row_ids(t, len(self.embed.weight))[:, None].expand(B, H, T)
                for t in (first, second)
            ]
            # [batch, head, v + 2]: the query's score of each row
            row_scores = torch.einsum("bhe,hte->bht", q[:, :, 0], k_rows)
            scores = priority[:, None] * row_scores[..., -1:]
            for index in ids:
                scores = scores + row_scores.gather(-1, index)
            if self.cfg.item_mlp:
                # the item MLP's residual: fc_out and W_K are linear, so the query
                # reads each slot's hidden units through both at once ([batch, head,
                # item_mlp]; fc_out's bias adds the same to every slot's score,
                # which the softmax ignores, as W_K's bias)
                hidden = self._item_hidden(inputs)  # [batch, T, item_mlp]
                q_hidden = torch.einsum("bhe,hem->bhm", q[:, :, 0], k_hidden)
                scores = scores + attn.product(q_hidden, hidden.transpose(1, 2), padded)
            scores = scores[:, :, None]  # [batch, head, 1, T]
        else:
            # q . (W_K x + b) = (W_K^T q) . x + q . b: the query read back through W_K
            # once, then one dot product per slot ([batch, head, d_model])
            q_in = torch.einsum("bhe,hed->bhd", q[:, :, 0], _per_head(attn.W_K, H))
            # [batch, head, 1, T]
            scores = attn.product(q_in, keys_in.transpose(-1, -2), padded)[:, :, None]
            if attn.W_K.bias is not None:
                bias = attn.W_K.bias.view(H, dh)
                scores = scores + (q[:, :, 0] * bias).sum(-1)[:, :, None, None]
        # / sqrt(d_head), length scaling, test-time factor: as the plain forward
        scores = attn.logits(scores)
        if padded:
            empty = inputs[:, None, None, :, 1] == NO_TOKEN  # [batch, 1, 1, T]
            scores = scores.masked_fill(empty, float("-inf"))
        pattern = attn.hook_pattern(attn.hook_attn_scores(scores).softmax(dim=-1))
        weights = attn.dropout(pattern)
        if tables:
            a = weights[:, :, 0]  # [batch, head, T]
            # [batch, head, v + 2]: the attention each row gets
            mass = torch.zeros(B, H, len(self.embed.weight) + 1, dtype=a.dtype)
            for index in ids:
                mass = mass.scatter_add(-1, index, a)
            mass = torch.cat([mass, (a * priority[:, None]).sum(-1, keepdim=True)], -1)
            # [batch, head, 1, d_head]
            z = torch.einsum("bht,hte->bhe", mass, v_rows)[:, :, None]
            if self.cfg.item_mlp:
                # the slots' hidden units mixed first, then through fc_out and W_V
                # once; fc_out's bias rides on the attention each slot gets
                mixed = attn.product(a, hidden, padded)  # [batch, head, item_mlp]
                z = z + torch.einsum("bhm,hem->bhe", mixed, v_hidden)[:, :, None]
                out_bias = _per_head(attn.W_V, H) @ self.item_mlp.fc_out.bias
                z = z + weights.sum(-1, keepdim=True) * out_bias.view(H, 1, dh)
        else:
            # sum_t a_t (W_V x_t + b) = W_V (sum_t a_t x_t) + b sum_t a_t: the slots
            # mixed first, then projected once ([batch, head, 1, d_head])
            mixed = attn.product(weights[:, :, 0], keys_in, padded)
            z = torch.einsum("bhd,hed->bhe", mixed, _per_head(attn.W_V, H))[:, :, None]
        if attn.W_V.bias is not None:
            z = z + weights.sum(-1, keepdim=True) * attn.W_V.bias.view(H, 1, dh)
        # [batch, 1, head, d_head]
        z = attn.hook_z(z.transpose(1, 2))
        attn_out = attn.W_O(z.reshape(B, 1, H * dh))  # [batch, 1, d_model]
        x = block.after_attention(x, attn_out)
        for later in self.blocks[1:]:
            x = later(x)
        return self.read_out(x), pattern[:, :, 0], attn_out[:, 0]

    def _item_hidden(self, inputs: Tensor) -> Tensor:
        """The item MLP's hidden units of every slot, relu(fc_in(x)) [batch, slots,
        item_mlp], from tables: fc_in is linear in the slot's vector, which is linear
        in its items, so fc_in projects the v vocabulary rows and w_priority once and
        each slot adds up its rows (no d_model x item_mlp product per slot)."""
        fc_in = self.item_mlp.fc_in
        # [v + 2, item_mlp]: the vocabulary's rows, NO_TOKEN's (zeros), w_priority's
        rows = F.linear(self._item_rows(), fc_in.weight)
        priority, first, second = inputs.unbind(dim=-1)  # [batch, slots] each
        hidden = priority[..., None] * rows[-1] + fc_in.bias
        for ids in (first, second):
            hidden = hidden + F.embedding(_row_ids(ids, len(self.embed.weight)), rows)
        return F.relu(hidden)

    def _item_rows(self) -> Tensor:
        """What a slot's vector is a sum of: the vocabulary's embeddings, NO_TOKEN's
        (zeros) and w_priority, [v + 2, d_model]."""
        d_model = self.embed.weight.shape[1]
        return torch.cat(
            [
                self.embed.weight,
                self.embed.weight.new_zeros(1, d_model),
                self.priority_embed.weight.T,
            ]
        )

    def _token_rows(self, attn: Attention) -> tuple[Tensor, Tensor]:
        """The first layer's keys and values (without W_V's bias) of every vocabulary
        row, of NO_TOKEN (zeros) and of w_priority: [head, v + 2, d_head] each."""
        rows = self._item_rows()
        return tuple(
            F.linear(rows, W.weight).view(len(rows), attn.n_heads, -1).transpose(0, 1)
            for W in (attn.W_K, attn.W_V)
        )


def _row_ids(ids: Tensor, v: int) -> Tensor:
    """Item token ids as rows of a token table [v + 2, ...]: the vocabulary's ``v``
    rows, then NO_TOKEN's (-1 is row v), then w_priority's."""
    return ids.long().remainder(v + 1)


def _per_head(W: nn.Linear, n_heads: int) -> Tensor:
    """A key or value projection's weight [d_model, d_model] as [head, d_head,
    d_model]."""
    return W.weight.view(n_heads, -1, W.weight.shape[1])


def _check_items(inputs: Tensor) -> Tensor:
    """``inputs`` if they are packed items [batch, N + 1, 3] float; ValueError
    otherwise."""
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
    return inputs


def tables_apply(cfg: ModelConfig) -> bool:
    """Whether tables of projected rows give the first layer's keys and values
    (:meth:`RetrievalTransformer.query_forward`): a slot's vector, and so the item
    MLP's input, is a sum of its items' rows (no positions), and nothing nonlinear
    stands between the item MLP and the attention (no norm before it)."""
    return cfg.positional == "none" and not cfg.norm_sites.pre


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


@dataclass(frozen=True)
class ShiftStatistics:
    """The paper's distribution-shift statistics of a set of output vectors [samples,
    d]."""

    feature_var: np.ndarray  # [d]: Var over samples of each fixed component o_j
    global_mean: float  # E over samples of (1/d) sum_j o_j
    global_var: float  # E over samples of (1/d) sum_j (o_j - mean_j o)^2

    @property
    def median_feature_var(self) -> float:
        return float(np.median(self.feature_var))


def shift_statistics(outputs: Tensor) -> ShiftStatistics:
    """Per-feature variance across samples, and the per-vector (global) mean and
    variance, averaged."""
    if outputs.dim() != 2 or outputs.shape[0] < 2:
        raise ValueError(
            f"outputs must be [samples >= 2, d], got {tuple(outputs.shape)}"
        )
    x = outputs.double()
    return ShiftStatistics(
        feature_var=x.var(dim=0).numpy(),
        global_mean=float(x.mean(dim=1).mean()),
        global_var=float(x.var(dim=1, unbiased=False).mean()),
    )


NORMED = "blocks.0.ln_attn_out.hook_normalized"

N_COMPONENTS = 3  # fixed components whose variance a table keeps


def scaled_attention_output(scale: float | Tensor) -> dict[str, HookFn]:
    """Hooks (for ``run_with_hooks``/``run_with_cache``) multiplying layer 0's attention
    output (before any norm) by ``scale``.

    An intervention, not a recording: it tests whether restoring the output's scale
    alone restores accuracy. ``scale`` is a number or a tensor broadcasting against
    [batch, pos, d_model].
    """
    return {ATTN_OUT: lambda out, _name: out * scale}


# test sets per forward: at N = 1024 one forward over all 500 costs as much again in
# fresh memory pages
EVAL_CHUNK = 100


def forward_chunked(
    model: nn.Module,
    inputs: Tensor,
    names: Sequence[str],
    chunk: int,
    hooks: dict[str, HookFn] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """``run_with_cache`` (with ``hooks``, if any) on ``chunk`` sets at a time,
    concatenated: the same numbers as one forward (every set is processed on its own),
    at a fraction of the memory traffic for large N."""
    parts = [
        run_with_cache(model, x, names=names, hooks=hooks) for x in inputs.split(chunk)
    ]
    return torch.cat([p[0] for p in parts]), {
        name: torch.cat([p[1][name] for p in parts]) for name in names
    }


@dataclass(frozen=True)
class RetrievalTable:
    """Per-N evaluation of one model: each field is a [len(N)] array (means over
    samples)."""

    N: np.ndarray
    n_samples: int  # test sets per N
    seed: int  # evaluation seed: the same seed means the same test sets
    accuracy: np.ndarray
    # attention mass on the correct item, best head (see evaluate_retrieval)
    target_attention: np.ndarray
    n_eff: np.ndarray  # 1 / sum_i a_i^2 over the N + 1 keys, mean over heads
    # sqrt(mean_j o_j^2) of the attention output at the query, before the norm
    attn_out_rms: np.ndarray
    # [len(N), n_components]: Var over samples of components 0..n_components-1
    feature_var: np.ndarray
    median_feature_var: np.ndarray  # median over all d_model components
    global_mean: np.ndarray
    global_var: np.ndarray
    # the same after the norm (None for the baseline)
    normed_feature_var: np.ndarray | None
    normed_median_feature_var: np.ndarray | None
    normed_global_mean: np.ndarray | None
    normed_global_var: np.ndarray | None


TABLE_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(RetrievalTable)
    if f.name not in ("N", "n_samples", "seed")
)


@torch.no_grad()
def evaluate_retrieval(
    model: nn.Module,
    task: RetrievalTask,
    sizes: Sequence[int],
    n_samples: int = 500,
    seed: int = 0,
    n_components: int = N_COMPONENTS,
    scale: Sequence[float] | None = None,
    chunk: int = EVAL_CHUNK,
) -> RetrievalTable:
    """Accuracy, attention and the shift statistics of ``model`` at every N in
    ``sizes``.

    The same ``seed`` gives every model the same test sets. ``target_attention`` is the
    mass the best head (largest mean mass) puts on the correct item. ``scale[i]``, if
    given, multiplies the attention output at ``sizes[i]`` (see
    :func:`scaled_attention_output`). ``chunk`` test sets run per forward; it changes
    the cost, not the numbers.
    """
    require_ints("sizes", sizes, 1)
    require_int("chunk", chunk, minimum=1)  # test sets per forward
    if scale is not None and len(scale) != len(sizes):
        raise ValueError(
            f"scale must have one entry per size ({len(sizes)}), got {len(scale)}"
        )
    normed = NORMED in hook_names(model)
    names = [PATTERN, ATTN_OUT] + ([NORMED] if normed else [])
    rows: dict[str, list] = {}
    for i, N in enumerate(sizes):
        batch = task.sample_train_batch(
            n_samples, N, make_generator(seed * 100_003 + N)
        )
        hooks = scaled_attention_output(1.0 if scale is None else float(scale[i]))
        logits, cache = forward_chunked(model, batch.inputs, names, chunk, hooks)
        row = _size_row(
            task,
            batch,
            logits,
            cache[PATTERN][:, :, -1],  # [samples, head, N + 1] (the query's row)
            cache[ATTN_OUT][:, -1],  # [samples, d_model] at the query
            cache[NORMED][:, -1] if normed else None,
            n_components,
        )
        for key, value in row.items():
            rows.setdefault(key, []).append(value)
    return _table(rows, sizes, n_samples, seed)


def _size_row(
    task: RetrievalTask,
    batch: Batch,
    logits: Tensor,
    pattern: Tensor,
    attn_out: Tensor,
    normed: Tensor | None,
    n_components: int,
) -> dict[str, object]:
    """One N's entries of a :class:`RetrievalTable` from one model's readings on the
    test sets ``batch``: logits [samples, 1, n_outputs], the query's pattern [samples,
    head, N + 1], the attention output at the query before and after the norm
    [samples, d_model] (``normed`` None: no norm)."""
    target = task.target_item(batch.inputs)  # [samples]
    on_target = pattern.gather(
        -1, target.view(-1, 1, 1).expand(-1, pattern.shape[1], 1)
    ).squeeze(-1)
    row = {
        "accuracy": (logits[:, -1].argmax(-1) == batch.targets[:, -1].argmax(-1))
        .float()
        .mean()
        .item(),
        "target_attention": on_target.mean(0).max().item(),
        "n_eff": metrics.effective_tokens(pattern).mean().item(),
        "attn_out_rms": attn_out.square().mean(-1).sqrt().mean().item(),
    }
    for prefix, out in (("", attn_out), ("normed_", normed)):
        if out is not None:
            stats = shift_statistics(out)
            row |= {
                f"{prefix}feature_var": stats.feature_var[:n_components],
                f"{prefix}median_feature_var": stats.median_feature_var,
                f"{prefix}global_mean": stats.global_mean,
                f"{prefix}global_var": stats.global_var,
            }
    return row


def _table(
    rows: dict[str, list], sizes: Sequence[int], n_samples: int, seed: int
) -> RetrievalTable:
    """The table of per-N rows (:func:`_size_row`, appended field by field)."""
    arrays = {key: np.asarray(value) for key, value in rows.items()}
    missing = {
        f"normed_{k}": None
        for k in ("feature_var", "median_feature_var", "global_mean", "global_var")
    }
    return RetrievalTable(
        N=np.asarray(sizes), n_samples=n_samples, seed=seed, **{**missing, **arrays}
    )


class _Readings(nn.Module):
    """``model.query_forward`` with the norm's output at the query (for
    ``functional_call``: its parameters are the model's, under ``model.``)."""

    def __init__(self, model: RetrievalTransformer):
        super().__init__()
        self.model = model

    def forward(self, inputs: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        logits, pattern, attn_out = self.model.query_forward(
            inputs, tables_apply(self.model.cfg)
        )
        block = self.model.blocks[0]
        normed = block.ln_attn_out(attn_out) if block.sites.attn_out else attn_out
        return logits, pattern, attn_out, normed


# slots per stacked forward (all models): with their vectors, about what stays in cache
# (about 4 MB at d_model 64; larger sets ran 2x slower at N = 1024); token tables keep
# a few numbers per slot and head, so many more
STACKED_SLOTS = 2**14
STACKED_TABLE_SLOTS = 2**20


@torch.no_grad()
def stacked_readings(
    models: Sequence[RetrievalTransformer], inputs: Tensor
) -> tuple[Tensor, ...]:
    """Every model's readings of :meth:`RetrievalTransformer.query_forward` on the same
    test sets [samples, N + 1, 3], in one forward for all models (their weights
    stacked, ``torch.func.vmap``), with token tables where :func:`tables_apply`
    allows (a forward's slots far outnumber the vocabulary's rows): (logits,
    pattern, attention output, normed output), each [K, samples, ...]; the normed
    output is the attention output when there is no norm. The test sets run in
    chunks of about ``STACKED_SLOTS`` slots (``STACKED_TABLE_SLOTS`` with tables) for
    all models together."""
    template = copy.deepcopy(models[0]).to("meta").eval()
    params, buffers = stack_module_state(list(models))
    module = _Readings(template)

    def one(p: dict[str, Tensor], b: dict[str, Tensor], x: Tensor) -> tuple:
        named = tuple({"model." + k: t for k, t in d.items()} for d in (p, b))
        return functional_call(module, named, (x,))

    read = vmap(one, in_dims=(0, 0, None))
    # an item MLP's hidden units are a vector per slot
    cfg = template.cfg
    tables = tables_apply(cfg) and not cfg.item_mlp
    budget = STACKED_TABLE_SLOTS if tables else STACKED_SLOTS
    chunk = max(1, budget // (len(models) * inputs.shape[1]))
    parts = [read(params, buffers, x) for x in inputs.split(chunk)]
    return tuple(torch.cat(p, dim=1) for p in zip(*parts))


def evaluate_sizes(
    models: Sequence[nn.Module],
    task: RetrievalTask,
    sizes: Sequence[int],
    n_samples: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """The retrieval tasks' evaluation (``core.task_registry``):
    :func:`evaluate_retrieval` of every model, as per-size fields [K, len(N)] (``s`` is
    N). Components 0..2 of ``feature_var``
    become ``feature_var_0``..``_2``; a model without a norm has ``normed_*`` nan.

    The same tables as :func:`evaluate_retrieval` of each model, up to float rounding
    (``tests/test_core_retrieval.py``), in one stacked forward per chunk of test sets
    (:func:`stacked_readings`): the models must be one configuration's
    :class:`RetrievalTransformer` with ``queries="last"``."""
    if not models or not all(
        type(m) is RetrievalTransformer and m.cfg == models[0].cfg for m in models
    ):
        raise ValueError(
            "models must be RetrievalTransformers of one ModelConfig, got "
            f"{sorted({type(m).__name__ for m in models})}"
        )
    normed = models[0].blocks[0].sites.attn_out
    rows: list[dict[str, list]] = [{} for _ in models]
    for N in sizes:
        batch = task.sample_train_batch(
            n_samples, N, make_generator(seed * 100_003 + N)
        )
        logits, pattern, attn_out, after = stacked_readings(models, batch.inputs)
        for k, row in enumerate(rows):
            entries = _size_row(
                task,
                batch,
                logits[k],
                pattern[k],
                attn_out[k],
                after[k] if normed else None,
                N_COMPONENTS,
            )
            for key, value in entries.items():
                row.setdefault(key, []).append(value)
    tables = [_table(row, sizes, n_samples, seed) for row in rows]
    nan = np.full((len(models), len(sizes)), np.nan)
    out = {"s": np.asarray(sizes)}
    for name in TABLE_FIELDS:
        base = name.removeprefix("normed_")
        if base == "feature_var":
            for j in range(N_COMPONENTS):
                values = [getattr(t, name) for t in tables]
                out[f"{name}_{j}"] = (
                    nan if values[0] is None else np.stack([v[:, j] for v in values])
                )
        else:
            values = [getattr(t, name) for t in tables]
            out[name] = nan if values[0] is None else np.stack(values)
    return out


def evaluate_sizes_logn(
    models: Sequence[nn.Module],
    task: RetrievalTask,
    sizes: Sequence[int],
    n_samples: int,
    seed: int,
    n_train: int,
) -> dict[str, np.ndarray]:
    """:func:`evaluate_sizes` with the test-time factor log N / log ``n_train`` on every
    attention's logits at set size N (chapter 8's P4: a model trained without a logit
    scale, sharpened only when tested), on the same test sets."""
    require_int("n_train", n_train, minimum=2)
    per_size = []
    for N in sizes:
        factor = math.log(N) / math.log(n_train)
        with ExitStack() as stack:
            for model in models:
                stack.enter_context(attention_logit_factor(model, factor))
            per_size.append(evaluate_sizes(models, task, (N,), n_samples, seed))
    return {
        name: np.concatenate([table[name] for table in per_size], axis=-1)
        for name in per_size[0]
    }
