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
``blocks.i.attn.hook_attn_scores``         [batch, head, query_pos, key_pos]     always (the logits the softmax sees)
``blocks.i.attn.hook_pattern``             [batch, head, query_pos, key_pos]     always
``blocks.i.attn.hook_z``                   [batch, pos, head, d_head]            always (before W_O)
``blocks.i.hook_attn_out``                 [batch, pos, d_model]                 always (after W_O, before any norm)
``blocks.i.ln_attn_out.hook_normalized``   [batch, pos, d_model]                 norm="attn_out"
``blocks.i.hook_resid_mid``                [batch, pos, d_model]                 always
``blocks.i.ln2.hook_normalized``           [batch, pos, d_model]                 d_mlp > 0 and norm in pre, pre_final, post
``blocks.i.hook_mlp_out``                  [batch, pos, d_model]                 d_mlp > 0
``blocks.i.hook_resid_post``               [batch, pos, d_model]                 always
``ln_final.hook_normalized``               [batch, pos, d_model]                 norm="pre_final"
``hook_item_mlp_out``                      [batch, pos, d_model]                 item_mlp > 0 (ch. 4's model)
=========================================  ====================================  ==================

Every norm also has ``<norm>.hook_scale`` [batch, pos, 1]: the divisor sqrt(var + eps)
of each vector (recorded, or replaced by
:func:`~lengthgen_lite.core.hooks.run_with_hooks`, e.g. frozen to a constant in
chapter 5). :mod:`lengthgen_lite.core.hooks` records and intervenes by these names.

Where the norms sit is ``NORM_SITES``, one table from placement name to
:class:`NormSites` (``PLACEMENTS`` is its names); adding a placement is adding a row
(``book/extending.md``).

With ``queries="last"`` (chapter 4) only the last position queries attention and goes
on: from ``hook_attn_scores`` on, ``query_pos`` and ``pos`` have size 1 and the logits
are [batch, 1, n_outputs].

Attention's logits are q.k / sqrt(d_head), times the length factor of
``logit_scale`` (``LOGIT_SCALES``, declared once: none, logn, ssmax; chapter 8), times
the test-time factor of :func:`attention_logit_factor`, with the future masked:
``hook_attn_scores`` records them and ``hook_pattern`` is their softmax. Under
``positional="rope"`` q and k are rotated by their positions first (nothing is added
to the residual stream). Each composes with every norm placement.

Chapter 4's retrieval model, a subclass with an input layer for packed set items, lives
in :mod:`lengthgen_lite.core.retrieval` with its tasks. Training's faster forward of the
same function (token tables, fused attention products) is
:mod:`lengthgen_lite.core.fast_path`; this module is the plain path it is tested against.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Literal, get_args

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .hooks import HookPoint
from .seeding import forked_torch_stream
from .validation import require_int, require_number

NormKind = Literal["layernorm", "standardize"]
# "rope": q and k rotated by position in every attention (Su et al.'s RoPE, halves
# paired as in GPT-NeoX and Llama), nothing added to the residual stream
Positional = Literal["none", "learned", "rope"]
ROPE_BASE = 10_000.0
Queries = Literal["all", "last"]
# "book": linear maps with std 1/sqrt(fan_in), biases zero; "torch": PyTorch's own
# nn.Linear init, weights and biases uniform in +-1/sqrt(fan_in) (std 1/sqrt(3 fan_in)).
# Embeddings are N(0, 1) in both.
Init = Literal["book", "torch"]


@dataclass(frozen=True)
class NormSites:
    """Where one norm placement puts norms in every block (and after the last one).

    ``pre``: on each sub-layer's input (``ln1`` before attention, ``ln2`` before the
    MLP); ``post``: on the residual stream after each sub-layer is added (the same
    ``ln1``, ``ln2``); ``attn_out``: on the attention output before it joins the
    residual (``ln_attn_out``; the MLP stays unnormed); ``final``: once more before the
    unembedding (``ln_final``).
    """

    pre: bool = False
    post: bool = False
    attn_out: bool = False
    final: bool = False

    def __post_init__(self) -> None:
        if self.pre and self.post:
            raise ValueError(
                "pre and post share the norms ln1/ln2: a placement may use one of them"
            )


# The norm placements, declared once: name -> where its norms sit, in the book's order.
# A new placement is one more row here (book/extending.md); nothing else in the model
# changes.
NORM_SITES: dict[str, NormSites] = {
    "none": NormSites(),
    "pre": NormSites(pre=True),
    "pre_final": NormSites(pre=True, final=True),
    "post": NormSites(post=True),
    "attn_out": NormSites(attn_out=True),
}
# the names: none, pre, pre_final, post, attn_out
PLACEMENTS: tuple[str, ...] = tuple(NORM_SITES)
NormPlacement = str  # one of PLACEMENTS (a key of NORM_SITES, checked by ModelConfig)

# How attention logits scale with n, the number of keys a query sees (causal: its
# position + 1), declared once (chapter 8): "none" x 1; "logn" x log n / log n_train
# (fixed, Chiang & Cholak 2022); "ssmax" x s log n with s learned per head
# (Scalable-Softmax, Nakanishi 2025). n_train is ``ModelConfig.scale_length``.
LogitScale = Literal["none", "logn", "ssmax"]
LOGIT_SCALES: tuple[str, ...] = get_args(LogitScale)


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int  # v: number of input tokens
    # output classes; None: vocab_size (next-token prediction)
    n_outputs: int | None = None
    n_layers: int = 1
    d_model: int = 64
    n_heads: int = 1
    # per-head query/key/value width; None: d_model // n_heads
    d_head: int | None = None
    d_mlp: int = 0  # 0: attention-only blocks
    # set complement is order-invariant: no positions needed
    positional: Positional = "none"
    max_len: int = 64  # longest input with learned positions
    norm: NormPlacement = "none"
    norm_kind: NormKind = "layernorm"  # "standardize": LayerNorm without its affine
    attn_dropout: float = 0.0  # on the attention pattern
    # on each sub-layer's output before it joins the residual
    resid_dropout: float = 0.0
    causal: bool = True
    # "last": only the last position queries attention (a pooling read-out; ch. 4)
    queries: Queries = "all"
    # the initial weights' scale: an axis of the reference sweeps (issue 19)
    init: Init = "book"
    # biases on W_V and W_O (a reviewer's component, issue 19: with them the attention
    # output's mean need not stay zero); zero at the book's init
    attn_bias: bool = False
    # hidden width of an MLP applied to each input item before the first block (0:
    # none); only chapter 4's RetrievalTransformer has one (core.retrieval)
    item_mlp: int = 0
    # the attention logits' length factor (LOGIT_SCALES; chapter 8) and n_train, the
    # number of keys at which it is 1 (needed by "logn" and "ssmax", None otherwise)
    logit_scale: LogitScale = "none"
    scale_length: int | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layers", "d_model", "n_heads", "max_len"):
            require_int(name, getattr(self, name), minimum=1)
        require_int("d_mlp", self.d_mlp, minimum=0)
        require_int("item_mlp", self.item_mlp, minimum=0)
        if not isinstance(self.attn_bias, bool):
            raise ValueError(
                f"attn_bias={self.attn_bias!r} is invalid; allowed: False, True"
            )
        if self.n_outputs is not None:
            require_int("n_outputs", self.n_outputs, minimum=1)
        if self.d_head is None and self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by "
                f"n_heads={self.n_heads}; set d_head explicitly"
            )
        if self.d_head is not None:
            require_int("d_head", self.d_head, minimum=1)
        choices = {
            "norm": tuple(NORM_SITES),  # PLACEMENTS, and any row added since
            "norm_kind": get_args(NormKind),
            "positional": get_args(Positional),
            "queries": get_args(Queries),
            "init": get_args(Init),
            "logit_scale": LOGIT_SCALES,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is unknown; allowed: {allowed}"
                )
        for name in ("attn_dropout", "resid_dropout"):
            value = getattr(self, name)
            if not 0.0 <= require_number(name, value) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        if self.logit_scale == "none" and self.scale_length is not None:
            raise ValueError(
                f"scale_length={self.scale_length!r} is invalid with "
                "logit_scale='none'; allowed: None (only logn and ssmax read it)"
            )
        if self.logit_scale != "none" and self.scale_length is None:
            raise ValueError(
                f"logit_scale={self.logit_scale!r} needs scale_length (n_train, the "
                "number of keys at which its factor is 1); allowed: an int >= 2"
            )
        if self.logit_scale != "none":
            # log 1 = 0: n_train must be at least 2 keys
            require_int("scale_length", self.scale_length, minimum=2)
        if self.positional == "rope" and self.head_dim % 2:
            raise ValueError(
                f"positional='rope' rotates pairs of features: d_head={self.head_dim} "
                "is invalid; allowed: an even d_head"
            )

    @property
    def norm_sites(self) -> NormSites:
        """Where this placement puts norms (``NORM_SITES[norm]``)."""
        return NORM_SITES[self.norm]

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def output_size(self) -> int:
        return self.n_outputs if self.n_outputs is not None else self.vocab_size


class Norm(nn.Module):
    """LayerNorm over features, with affine gain/bias, or plain standardisation (no
    affine).

    ``hook_scale`` is the divisor, sqrt(var + eps) per vector [..., 1]. Without a hook
    on it the norm is PyTorch's fused ``layer_norm`` (what every stored output used).
    With one, the scale is computed and passed through the hook; if the hook only
    records it, the output is still the fused one (bit for bit); if it returns a
    replacement, the output is ``(x - mean) / replacement`` with the same gain and bias.
    """

    def __init__(self, d_model: int, kind: NormKind):
        super().__init__()
        self.layer_norm = nn.LayerNorm(
            d_model, elementwise_affine=(kind == "layernorm")
        )
        self.hook_scale = HookPoint()  # [..., 1]
        self.hook_normalized = HookPoint()

    def forward(self, x: Tensor) -> Tensor:
        if not self.hook_scale.hooked:
            return self.hook_normalized(self.layer_norm(x))
        ln = self.layer_norm
        scale = (x.var(dim=-1, unbiased=False, keepdim=True) + ln.eps).sqrt()
        replaced = self.hook_scale(scale)
        if replaced is scale:  # recorded, not replaced: the fused norm
            return self.hook_normalized(ln(x))
        y = (x - x.mean(dim=-1, keepdim=True)) / replaced
        if ln.weight is not None:
            y = y * ln.weight + ln.bias
        return self.hook_normalized(y)


class Attention(nn.Module):
    """Multi-head attention, computed explicitly; :meth:`rotate` (RoPE),
    :meth:`logits` (the scaling and the mask) and :meth:`product` are shared with the
    fast path and the retrieval model's query-only forward."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.d_head, self.causal = cfg.n_heads, cfg.head_dim, cfg.causal
        self.last_query = cfg.queries == "last"
        self.rope = cfg.positional == "rope"
        self.logit_scale = cfg.logit_scale
        if cfg.logit_scale != "none":
            self.log_scale_length = math.log(cfg.scale_length)  # log n_train
        if cfg.logit_scale == "ssmax":
            # s = 1 / log n_train, so s log n is 1 at n = n_train: a query that sees
            # n_train keys starts with the unscaled logits, and the model starts as
            # the fixed "logn" one of the same seed, everywhere (a paired
            # comparison: the only difference is that s learns). Constant, drawing
            # no random number: every other weight starts as without it.
            self.ssmax_s = nn.Parameter(
                torch.full((cfg.n_heads,), 1.0 / self.log_scale_length)
            )
        # the test-time factor (P4): 1 except inside attention_logit_factor(...)
        self.logit_factor = 1.0
        inner = cfg.n_heads * cfg.head_dim
        self.W_Q = nn.Linear(cfg.d_model, inner, bias=False)
        self.W_K = nn.Linear(cfg.d_model, inner, bias=False)
        self.W_V = nn.Linear(cfg.d_model, inner, bias=False)
        self.W_O = nn.Linear(inner, cfg.d_model, bias=False)
        if cfg.attn_bias:
            # zero here, drawing nothing: every weight starts as without them;
            # Transformer._draw_attention_biases gives them PyTorch's init
            for W in (self.W_V, self.W_O):
                W.bias = nn.Parameter(torch.zeros(W.out_features))
        self.dropout = nn.Dropout(cfg.attn_dropout)
        self.hook_attn_scores = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_pattern = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]

    def forward(self, x: Tensor) -> Tensor:
        """x [batch, pos, d_model] -> [batch, pos (1 if queries="last"), d_model]."""
        B, T, _ = x.shape
        q, k = (
            W(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)
            for W in (self.W_Q, self.W_K)
        )  # [batch, head, pos, d_head]
        q, k = self.rotate(q, k)
        # one query row: O(T) rather than O(T^2), so N = 1024 stays cheap (ch. 4)
        if self.last_query:
            q = q[:, :, -1:]
        # [batch, head, T or 1, T]
        scores = self.logits(q @ k.transpose(-1, -2))
        pattern = self.hook_pattern(self.hook_attn_scores(scores).softmax(dim=-1))
        pattern = self.dropout(pattern)
        v = self.W_V(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)
        # [batch, T or 1, head, d_head]
        z = self.hook_z((pattern @ v).transpose(1, 2))
        # [batch, T or 1, d_model]
        return self.W_O(z.reshape(B, z.shape[1], self.n_heads * self.d_head))

    @staticmethod
    def product(a: Tensor, b: Tensor, broadcast: bool = False) -> Tensor:
        """``a @ b``; ``broadcast``: as a broadcast product summed over the shared
        axis. The attention's products are one tiny matrix per (seed, sequence, head)
        at a handful of positions, which a batched matmul runs at a few GFLOP/s;
        under torch.compile the broadcast form is one fused kernel. Eagerly it
        materialises the product and is slower from ~16 positions, so only compiled
        training steps use it. Equal up to rounding."""
        return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2) if broadcast else a @ b

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """q, k [batch, head, pos, d_head] rotated by their positions 0..pos-1 under
        RoPE (unchanged otherwise): features i and i + d_head/2 turn by the angle
        position x ROPE_BASE^(-2i/d_head), so q.k depends on positions only through
        their difference."""
        if not self.rope:
            return q, k
        half = self.d_head // 2
        exponents = torch.arange(half, dtype=q.dtype, device=q.device) / half
        positions = torch.arange(q.shape[-2], dtype=q.dtype, device=q.device)
        angles = positions[:, None] * ROPE_BASE**-exponents  # [pos, d_head / 2]
        cos, sin = angles.cos(), angles.sin()

        def turn(x: Tensor) -> Tensor:
            a, b = x[..., :half], x[..., half:]
            return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

        return turn(q), turn(k)

    def logits(self, qk: Tensor) -> Tensor:
        """q.k [batch, head, query_pos, key_pos] -> the logits the softmax sees:
        divided by sqrt(d_head), times the length factor of ``logit_scale`` and the
        test-time ``logit_factor``, the future masked (what ``hook_attn_scores``
        records)."""
        scores = qk / math.sqrt(self.d_head)
        if self.logit_scale != "none":
            factor = self.length_factor(*scores.shape[-2:], device=scores.device)
            scores = scores * factor.to(scores.dtype)
        if self.logit_factor != 1.0:
            scores = scores * self.logit_factor
        return self.mask_future(scores)

    def length_factor(
        self, n_queries: int, T: int, device: torch.device | None = None
    ) -> Tensor:
        """The logits' factor per query, [query_pos, 1] ("logn") or [head, query_pos,
        1] ("ssmax"): log n / log n_train or s log n, with n the number of keys the
        query sees (causal: its position + 1; else all T). n = 1 gives 0: one key
        takes all the weight whatever its logit."""
        if self.causal:  # the queries are the last n_queries positions
            n = torch.arange(T - n_queries + 1, T + 1, device=device)
        else:
            n = torch.full((n_queries,), T, device=device)
        log_n = n.float().log()[:, None]  # [query_pos, 1]
        if self.logit_scale == "logn":
            return log_n / self.log_scale_length
        return self.ssmax_s[:, None, None] * log_n

    def mask_future(self, scores: Tensor) -> Tensor:
        """scores [..., query_pos, key_pos] with -inf where a query would see a later
        key (causal models; the queries are the last ``query_pos`` positions)."""
        if not self.causal:
            return scores
        n_queries, T = scores.shape[-2:]
        future = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu(1)
        return scores.masked_fill(future[-n_queries:], float("-inf"))


class MLP(nn.Module):
    """d_model -> ``width`` (default ``cfg.d_mlp``) -> ReLU -> d_model, with biases."""

    def __init__(self, cfg: ModelConfig, width: int | None = None):
        super().__init__()
        width = cfg.d_mlp if width is None else width
        self.fc_in = nn.Linear(cfg.d_model, width)
        self.fc_out = nn.Linear(width, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc_out(F.relu(self.fc_in(x)))


class Block(nn.Module):
    """One layer. ``cfg.norm`` decides where the norms sit (``NORM_SITES``,
    :class:`NormSites`):

    none ``x + attn(x)``; pre/pre_final ``x + attn(LN x)``; post ``LN(x + attn x)``;
    attn_out ``x + LN(attn x)`` (the MLP, if any, follows the same placement; unnormed
    for attn_out).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.sites = sites = cfg.norm_sites
        self.hook_resid_pre = HookPoint()
        if sites.pre or sites.post:
            self.ln1 = Norm(cfg.d_model, cfg.norm_kind)
        self.attn = Attention(cfg)
        self.hook_attn_out = HookPoint()
        if sites.attn_out:
            self.ln_attn_out = Norm(cfg.d_model, cfg.norm_kind)
        self.hook_resid_mid = HookPoint()
        self.mlp = MLP(cfg) if cfg.d_mlp else None
        if self.mlp is not None:
            self.hook_mlp_out = HookPoint()
            if sites.pre or sites.post:
                self.ln2 = Norm(cfg.d_model, cfg.norm_kind)
        # one module per call site (the compiled step gives each its own mask)
        self.dropout = nn.Dropout(cfg.resid_dropout)
        if self.mlp is not None:
            self.mlp_dropout = nn.Dropout(cfg.resid_dropout)
        self.hook_resid_post = HookPoint()

    def forward(self, x: Tensor) -> Tensor:
        """x [batch, pos, d_model] -> [batch, pos (1 if queries="last"), d_model]."""
        x = self.hook_resid_pre(x)
        return self.after_attention(x, self.attn(self.ln1(x) if self.sites.pre else x))

    def after_attention(self, x: Tensor, h: Tensor) -> Tensor:
        """The rest of the block, from its input ``x`` and the attention output ``h``:
        the attention's norm (attn_out), the residual add, post-norm and the MLP."""
        pre, post = self.sites.pre, self.sites.post
        h = self.hook_attn_out(h)
        if self.sites.attn_out:
            h = self.ln_attn_out(h)
        # queries="last": only the last position goes on
        x = x[:, -h.shape[1] :] + self.dropout(h)
        x = self.hook_resid_mid(self.ln1(x) if post else x)
        if self.mlp is not None:
            mlp_out = self.hook_mlp_out(self.mlp(self.ln2(x) if pre else x))
            x = x + self.mlp_dropout(mlp_out)
            x = self.ln2(x) if post else x
        return self.hook_resid_post(x)


class Transformer(nn.Module):
    """Decoder (causal by default): tokens [batch, pos] -> logits [batch, pos,
    n_outputs] at every position."""

    # whether this class builds ``cfg.item_mlp`` (a subclass with an input layer does)
    reads_items = False

    def __init__(self, cfg: ModelConfig, draw_attention_biases: bool = True):
        """``draw_attention_biases=False``: a subclass calls
        :meth:`_draw_attention_biases` itself, after its own weights."""
        super().__init__()
        if cfg.item_mlp and not self.reads_items:
            raise ValueError(
                f"item_mlp={cfg.item_mlp} is invalid for {type(self).__name__}; "
                "allowed: 0 (an item MLP is chapter 4's RetrievalTransformer's)"
            )
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.hook_embed = HookPoint()
        if cfg.positional == "learned":
            self.pos_embed = nn.Embedding(cfg.max_len, cfg.d_model)
            self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        if cfg.norm_sites.final:
            self.ln_final = Norm(cfg.d_model, cfg.norm_kind)
        self.unembed = nn.Linear(cfg.d_model, cfg.output_size, bias=False)
        if cfg.init == "book":
            self.apply(self._init_weights)
        if draw_attention_biases:
            self._draw_attention_biases()

    def _draw_attention_biases(self) -> None:
        """W_V/W_O's biases (``attn_bias``) under the "torch" init: PyTorch's nn.Linear
        rule, uniform in +-1/sqrt(fan_in); drawn after every other weight so that the
        rest start as they do without biases (the book's init keeps them zero)."""
        if not (self.cfg.attn_bias and self.cfg.init == "torch"):
            return
        for block in self.blocks:
            for W in (block.attn.W_V, block.attn.W_O):
                bound = W.in_features**-0.5
                nn.init.uniform_(W.bias, -bound, bound)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # Unit-variance embeddings; linear maps preserve the scale of their input (std
        # 1/sqrt(fan_in)). LayerNorm keeps PyTorch's gain 1, bias 0.
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=1.0)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=module.in_features**-0.5)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens [batch, pos] long -> logits [batch, pos, n_outputs]."""
        return self.forward_embeddings(
            self.hook_embed(self.embed(check_tokens(tokens)))
        )

    def forward_embeddings(self, x: Tensor) -> Tensor:
        """Run the body on input vectors [batch, pos, d_model] (for tasks whose items
        are not tokens)."""
        x = self.with_positions(x)
        for block in self.blocks:
            x = block(x)
        return self.read_out(x)

    def with_positions(self, x: Tensor) -> Tensor:
        """x [batch, pos, d_model] plus the learned position embeddings, if any."""
        if x.dim() != 3 or x.shape[-1] != self.cfg.d_model:
            raise ValueError(
                "embeddings must be [batch, pos, "
                f"d_model={self.cfg.d_model}], got {tuple(x.shape)}"
            )
        if self.cfg.positional != "learned":
            return x
        if x.shape[1] > self.cfg.max_len:
            raise ValueError(
                f"input length {x.shape[1]} exceeds max_len={self.cfg.max_len}"
            )
        positions = torch.arange(x.shape[1], device=x.device)
        return x + self.hook_pos_embed(self.pos_embed(positions))

    def read_out(self, x: Tensor) -> Tensor:
        """The last block's output [batch, pos, d_model] -> logits [batch, pos,
        n_outputs] (through ln_final under pre_final)."""
        if self.cfg.norm_sites.final:
            x = self.ln_final(x)
        return self.unembed(x)


def check_tokens(tokens: Tensor) -> Tensor:
    """``tokens`` if it is [batch, pos] long; ValueError otherwise."""
    if tokens.dim() != 2 or tokens.dtype != torch.long:
        raise ValueError(
            "tokens must be [batch, pos] long, got shape "
            f"{tuple(tokens.shape)} {tokens.dtype}"
        )
    return tokens


@contextmanager
def attention_logit_factor(model: nn.Module, factor: float) -> Iterator[nn.Module]:
    """Inside the block, every attention of ``model`` multiplies its logits by
    ``factor`` (after any ``logit_scale``); back to 1 on exit.

    A test-time temperature (chapter 8's P4, e.g. log N / log N_train on a model
    trained without scaling): an evaluation axis, never trained with (``train`` builds
    its models afresh, at factor 1). Both forward paths read it.
    """
    factor = require_number("factor", factor, 0.0, strict=True)
    attentions = [m for m in model.modules() if isinstance(m, Attention)]
    if not attentions:
        raise ValueError(f"{type(model).__name__} has no Attention to scale")
    before = [a.logit_factor for a in attentions]
    try:
        for a in attentions:
            a.logit_factor = factor
        yield model
    finally:
        for a, f in zip(attentions, before):
            a.logit_factor = f


def logn_twin(model: nn.Module, train_length: int) -> Transformer:
    """``model`` (a set-complement Transformer trained without a logit scale) with the
    test-time factor log n / log ``train_length`` on every query's logits, n the keys
    it sees: the same weights in the "logn" model (which adds none). P4 on set
    complement, where each position sees its own n (one number per forward, as
    :func:`attention_logit_factor` sets, cannot do it)."""
    require_int("train_length", train_length, minimum=2)
    cfg = model.cfg
    if cfg.logit_scale != "none" or type(model) is not Transformer:
        raise ValueError(
            f"model must be a Transformer with logit_scale='none', got "
            f"{type(model).__name__} with {cfg.logit_scale!r}"
        )
    twin_cfg = replace(cfg, logit_scale="logn", scale_length=train_length)
    twin = Transformer(twin_cfg)
    twin.load_state_dict(model.state_dict())
    return twin.eval()


def init_model(
    cfg: ModelConfig,
    seed: int,
    model_class: Callable[[ModelConfig], nn.Module] = Transformer,
) -> nn.Module:
    """The initial weights of seed ``seed``: the one place they come from.

    :func:`~lengthgen_lite.core.training.train` starts seed k from ``init_model(cfg,
    k)``, so this rebuilds any trained model's starting point. It builds
    ``model_class(cfg)`` from torch's stream seeded with ``2 * seed`` (the data stream
    uses ``2 * seed + 1``; the two never coincide), forked: the caller's random streams
    are left where they were.
    """
    seed = require_int("seed", seed, minimum=0)
    with forked_torch_stream(2 * seed):
        return model_class(cfg)
