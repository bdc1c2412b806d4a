"""A small transformer whose internals can be looked at. Chapter 1 introduces it.

One ``ModelConfig``; the normalisation placement is one field, dispatched only in
``Block.forward``. Attention is computed explicitly (the book studies the pattern).

Recorded activations (TransformerLens names; ``i`` is the layer):

=========================================  ====================================  ==================
name                                       shape                                 exists when
=========================================  ====================================  ==================
``hook_embed``                             [batch, pos, d_model]                 always
``hook_pos_embed``                         [batch, pos, d_model]                 positional="learned"
``blocks.i.hook_resid_pre``                [batch, pos, d_model]                 always
``blocks.i.ln1.hook_normalized``           [batch, pos, d_model]                 norm in pre, pre_final, post
``blocks.i.attn.hook_attn_scores``         [batch, head, query_pos, key_pos]     always (pre-softmax)
``blocks.i.attn.hook_pattern``             [batch, head, query_pos, key_pos]     always
``blocks.i.attn.hook_z``                   [batch, pos, head, d_head]            always (before W_O)
``blocks.i.hook_attn_out``                 [batch, pos, d_model]                 always (after W_O, before any norm)
``blocks.i.ln_attn_out.hook_normalized``   [batch, pos, d_model]                 norm="attn_out"
``blocks.i.hook_resid_mid``                [batch, pos, d_model]                 always
``blocks.i.ln2.hook_normalized``           [batch, pos, d_model]                 d_mlp > 0 and norm in pre, pre_final, post
``blocks.i.hook_mlp_out``                  [batch, pos, d_model]                 d_mlp > 0
``blocks.i.hook_resid_post``               [batch, pos, d_model]                 always
``ln_final.hook_normalized``               [batch, pos, d_model]                 norm="pre_final"
=========================================  ====================================  ==================

With ``queries="last"`` (chapter 4) only the last position queries attention and goes on: from
``hook_attn_scores`` on, ``query_pos`` and ``pos`` have size 1 and the logits are [batch, 1, n_outputs].

``RetrievalTransformer`` (chapter 4) is the same model with an input layer for the packed set
items of the retrieval tasks; it keeps the blocks, norm placements and hook names.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Literal, get_args

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .tasks import NO_TOKEN, RETRIEVAL_COLUMNS, RetrievalTask, check_int

NormPlacement = Literal["none", "pre", "pre_final", "post", "attn_out"]
NormKind = Literal["layernorm", "standardize"]
Positional = Literal["none", "learned"]
Queries = Literal["all", "last"]
RetrievalVariant = Literal["baseline", "layernorm", "standardize"]


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int  # v: number of input tokens
    n_outputs: int | None = None  # output classes; None: vocab_size (next-token prediction)
    n_layers: int = 1
    d_model: int = 64
    n_heads: int = 1
    d_head: int | None = None  # per-head query/key/value width; None: d_model // n_heads
    d_mlp: int = 0  # 0: attention-only blocks
    positional: Positional = "none"  # set complement is order-invariant: no positions needed
    max_len: int = 64  # longest input with learned positions
    norm: NormPlacement = "none"
    norm_kind: NormKind = "layernorm"  # "standardize": LayerNorm without its affine
    attn_dropout: float = 0.0  # on the attention pattern
    resid_dropout: float = 0.0  # on each sub-layer's output before it joins the residual
    causal: bool = True
    queries: Queries = "all"  # "last": only the last position queries attention (a pooling read-out; ch. 4)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layers", "d_model", "n_heads", "max_len"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("d_mlp", self.d_mlp, minimum=0)
        if self.n_outputs is not None:
            check_int("n_outputs", self.n_outputs, minimum=1)
        if self.d_head is None and self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; set d_head explicitly"
            )
        if self.d_head is not None:
            check_int("d_head", self.d_head, minimum=1)
        for name, literal in (("norm", NormPlacement), ("norm_kind", NormKind), ("positional", Positional), ("queries", Queries)):
            if getattr(self, name) not in get_args(literal):
                raise ValueError(f"{name}={getattr(self, name)!r} is unknown; allowed: {get_args(literal)}")
        for name in ("attn_dropout", "resid_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def output_size(self) -> int:
        return self.n_outputs if self.n_outputs is not None else self.vocab_size


class HookPoint(nn.Module):
    """Identity: a named place where :func:`run_with_cache` can record a tensor."""

    def forward(self, x: Tensor) -> Tensor:
        return x


class Norm(nn.Module):
    """LayerNorm over features, with affine gain/bias, or plain standardisation (no affine)."""

    def __init__(self, d_model: int, kind: NormKind):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d_model, elementwise_affine=(kind == "layernorm"))
        self.hook_normalized = HookPoint()

    def forward(self, x: Tensor) -> Tensor:
        return self.hook_normalized(self.layer_norm(x))


def _matmul(a: Tensor, b: Tensor, broadcast: bool) -> Tensor:
    """``a @ b``; ``broadcast``: as a broadcast product summed over the shared axis. The attention's
    products are one tiny matrix per (seed, sequence, head) at a handful of positions, which a
    batched matmul runs at a few GFLOP/s; under torch.compile the broadcast form is one fused kernel.
    Eagerly it materialises the product and is slower from ~16 positions, so only the compiled
    training step uses it. Equal up to rounding."""
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2) if broadcast else a @ b


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.d_head, self.causal = cfg.n_heads, cfg.head_dim, cfg.causal
        self.last_query = cfg.queries == "last"
        inner = cfg.n_heads * cfg.head_dim
        self.W_Q = nn.Linear(cfg.d_model, inner, bias=False)
        self.W_K = nn.Linear(cfg.d_model, inner, bias=False)
        self.W_V = nn.Linear(cfg.d_model, inner, bias=False)
        self.W_O = nn.Linear(inner, cfg.d_model, bias=False)
        self.dropout = nn.Dropout(cfg.attn_dropout)
        self.hook_attn_scores = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_pattern = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]

    def forward(self, x: Tensor, tokens: Tensor | None = None, broadcast: bool = False) -> Tensor:
        """x [batch, pos, d_model]; or, with ``tokens`` [batch, pos], a [v, d_model] table of each
        token's input (see :meth:`Transformer.forward`): then v rows are projected, not every position."""
        B, T = x.shape[:2] if tokens is None else tokens.shape
        q, k, v = (
            (W(x) if tokens is None else F.embedding(tokens, W(x))).view(B, T, self.n_heads, self.d_head).transpose(1, 2)
            for W in (self.W_Q, self.W_K, self.W_V)
        )
        if self.last_query:  # one query row: O(T) rather than O(T^2), so N = 1024 stays cheap (ch. 4)
            q = q[:, :, -1:]
        scores = _matmul(q, k.transpose(-1, -2), broadcast) / math.sqrt(self.d_head)  # [batch, head, T or 1, T]
        if self.causal:
            future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)[-q.shape[2] :]
            scores = scores.masked_fill(future, float("-inf"))
        pattern = self.hook_pattern(self.hook_attn_scores(scores).softmax(dim=-1))
        z = self.hook_z(_matmul(self.dropout(pattern), v, broadcast).transpose(1, 2))  # [batch, T or 1, head, d_head]
        return self.W_O(z.reshape(B, z.shape[1], self.n_heads * self.d_head))  # [batch, T or 1, d_model]


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc_in = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.fc_out = nn.Linear(cfg.d_mlp, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc_out(F.relu(self.fc_in(x)))


class Block(nn.Module):
    """One layer. ``cfg.norm`` decides where the norms sit:

    none ``x + attn(x)``; pre/pre_final ``x + attn(LN x)``; post ``LN(x + attn x)``;
    attn_out ``x + LN(attn x)`` (the MLP, if any, follows the same placement; unnormed for attn_out).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm = cfg.norm
        self.hook_resid_pre = HookPoint()
        if cfg.norm in ("pre", "pre_final", "post"):
            self.ln1 = Norm(cfg.d_model, cfg.norm_kind)
        self.attn = Attention(cfg)
        self.hook_attn_out = HookPoint()
        if cfg.norm == "attn_out":
            self.ln_attn_out = Norm(cfg.d_model, cfg.norm_kind)
        self.hook_resid_mid = HookPoint()
        self.mlp = MLP(cfg) if cfg.d_mlp else None
        if self.mlp is not None:
            self.hook_mlp_out = HookPoint()
            if cfg.norm in ("pre", "pre_final", "post"):
                self.ln2 = Norm(cfg.d_model, cfg.norm_kind)
        self.dropout = nn.Dropout(cfg.resid_dropout)
        self.hook_resid_post = HookPoint()

    def forward(self, x: Tensor, tokens: Tensor | None = None, broadcast: bool = False) -> Tensor:
        """x [batch, pos, d_model]; or a [v, d_model] token table with ``tokens`` (first layer only)."""
        pre, post = self.norm in ("pre", "pre_final"), self.norm == "post"
        x = self.hook_resid_pre(x)
        h = self.hook_attn_out(self.attn(self.ln1(x) if pre else x, tokens, broadcast))  # LN of a table row: per token too
        if tokens is not None:
            x = F.embedding(tokens, x)  # the residual stream at every position
        if self.norm == "attn_out":
            h = self.ln_attn_out(h)
        x = x[:, -h.shape[1] :] + self.dropout(h)  # queries="last": only the last position goes on
        x = self.hook_resid_mid(self.ln1(x) if post else x)
        if self.mlp is not None:
            x = x + self.dropout(self.hook_mlp_out(self.mlp(self.ln2(x) if pre else x)))
            x = self.ln2(x) if post else x
        return self.hook_resid_post(x)


class Transformer(nn.Module):
    """Decoder (causal by default): tokens [batch, pos] -> logits [batch, pos, n_outputs] at every position."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.hook_embed = HookPoint()
        if cfg.positional == "learned":
            self.pos_embed = nn.Embedding(cfg.max_len, cfg.d_model)
            self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        if cfg.norm == "pre_final":
            self.ln_final = Norm(cfg.d_model, cfg.norm_kind)
        self.unembed = nn.Linear(cfg.d_model, cfg.output_size, bias=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # Unit-variance embeddings; linear maps preserve the scale of their input (std 1/sqrt(fan_in)).
        # LayerNorm keeps PyTorch's gain 1, bias 0.
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=1.0)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=module.in_features**-0.5)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens: Tensor, tables: bool = False, broadcast: bool = False) -> Tensor:
        """The two flags are training's fast path: the same function, equal up to float rounding.
        ``tables`` (needs ``positional="none"``): a position's input to the first layer depends on its
        token alone, so its Q/K/V (and pre-norm LN) are computed once per vocabulary row and gathered,
        instead of once per position. The first block's hooks then see [v, d_model] tables, so
        :func:`run_with_cache` always runs the plain path. ``broadcast``: see ``_matmul`` in this module.
        """
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be [batch, pos] long, got shape {tuple(tokens.shape)} {tokens.dtype}")
        if not tables:
            return self.forward_embeddings(self.hook_embed(self.embed(tokens)), broadcast)
        if self.cfg.positional != "none":
            raise ValueError(f"tables needs positional='none' (a position's input must depend on its token alone), got {self.cfg.positional!r}")
        return self._body(self.hook_embed(self.embed.weight), tokens, broadcast)

    def forward_embeddings(self, x: Tensor, broadcast: bool = False) -> Tensor:
        """Run the body on input vectors [batch, pos, d_model] (for tasks whose items are not tokens)."""
        if x.dim() != 3 or x.shape[-1] != self.cfg.d_model:
            raise ValueError(f"embeddings must be [batch, pos, d_model={self.cfg.d_model}], got {tuple(x.shape)}")
        if self.cfg.positional == "learned":
            if x.shape[1] > self.cfg.max_len:
                raise ValueError(f"input length {x.shape[1]} exceeds max_len={self.cfg.max_len}")
            x = x + self.hook_pos_embed(self.pos_embed(torch.arange(x.shape[1], device=x.device)))
        return self._body(x, None, broadcast)

    def _body(self, x: Tensor, tokens: Tensor | None, broadcast: bool) -> Tensor:
        """The blocks and the read-out; with ``tokens``, ``x`` is the first block's [v, d_model] token table."""
        for i, block in enumerate(self.blocks):
            x = block(x, tokens if i == 0 else None, broadcast)
        if self.cfg.norm == "pre_final":
            x = self.ln_final(x)
        return self.unembed(x)  # [batch, pos, n_outputs]


def hook_names(model: nn.Module) -> list[str]:
    """Every recordable activation of ``model``, by its module path."""
    return [name for name, module in model.named_modules() if isinstance(module, HookPoint)]


@contextmanager
def _recording(model: nn.Module, names: Iterable[str] | None) -> Iterator[dict[str, Tensor]]:
    available = hook_names(model)
    wanted = set(available) if names is None else set(names)
    if unknown := wanted - set(available):
        raise ValueError(f"unknown activation names {sorted(unknown)}; this model has {available}")
    cache: dict[str, Tensor] = {}
    handles = [
        module.register_forward_hook(lambda _m, _i, out, name=name: cache.__setitem__(name, out.detach()))
        for name, module in model.named_modules()
        if name in wanted
    ]
    try:
        yield cache
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def run_with_cache(model: nn.Module, inputs: Tensor, names: Iterable[str] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Run ``model`` once in eval mode; return (logits, {name: activation}) for ``names`` (None: all).

    Hooks are removed on exit, also when the forward pass raises.
    """
    was_training = model.training
    model.eval()
    try:
        with _recording(model, names) as cache:
            logits = model(inputs)
    finally:
        model.train(was_training)
    return logits, cache


# --- Chapter 4: the retrieval model -------------------------------------------------------------

RETRIEVAL_VARIANTS: dict[str, dict[str, str]] = {  # variant name -> ModelConfig fields
    "baseline": {"norm": "none"},
    "layernorm": {"norm": "attn_out", "norm_kind": "layernorm"},
    "standardize": {"norm": "attn_out", "norm_kind": "standardize"},
}


class RetrievalTransformer(Transformer):
    """Transformer over packed items [batch, N + 1, 3] float -> logits at the query [batch, 1, n_outputs].

    A slot's vector is E[first token] + E[second token] (absent tokens add nothing) + p * w_priority.
    No positions: the model sees a set. With ``queries="last"`` only the query slot attends, which
    keeps N = 1024 cheap. ``norm="attn_out"`` is "LN (or standardization) right after the attention
    output": ``blocks.0.hook_attn_out`` is recorded before the norm, ``blocks.0.ln_attn_out.hook_normalized`` after.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.priority_embed = nn.Linear(1, cfg.d_model, bias=False)  # a continuous priority, linearly
        nn.init.normal_(self.priority_embed.weight, std=1.0)  # as unit-variance as the token embeddings

    def forward(self, inputs: Tensor) -> Tensor:
        if inputs.dim() != 3 or inputs.shape[-1] != len(RETRIEVAL_COLUMNS) or not inputs.is_floating_point():
            raise ValueError(
                f"inputs must be packed items [batch, N + 1, {len(RETRIEVAL_COLUMNS)}] float, "
                f"got {tuple(inputs.shape)} {inputs.dtype}"
            )
        priority, first, second = inputs.unbind(dim=-1)  # [batch, N + 1] each
        x = self.priority_embed(priority.unsqueeze(-1))  # [batch, N + 1, d_model]
        for ids in (first.long(), second.long()):
            x = x + self.embed(ids.clamp_min(0)) * (ids != NO_TOKEN).unsqueeze(-1)
        return self.forward_embeddings(self.hook_embed(x))[:, -1:]  # [batch, 1, n_outputs]


def retrieval_config(task: RetrievalTask, variant: RetrievalVariant, **overrides: object) -> ModelConfig:
    """The book's retrieval model for ``task``: one layer, 4 heads, d_model 64, ReLU MLP of width 256,
    no positions, only the query attends; ``variant`` sets the norm after the attention output."""
    if variant not in RETRIEVAL_VARIANTS:
        raise ValueError(f"variant={variant!r} is unknown; allowed: {tuple(RETRIEVAL_VARIANTS)}")
    fields = dict(
        vocab_size=task.vocab_size, n_outputs=task.n_outputs, d_model=64, n_heads=4, d_mlp=256,
        causal=False, queries="last", **RETRIEVAL_VARIANTS[variant],
    )
    return ModelConfig(**{**fields, **overrides})
