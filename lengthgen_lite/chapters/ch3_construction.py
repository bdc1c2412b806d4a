"""The theorem of chapter 3, in code: hand-built weights, the quantities the proofs predict, and
the LN-gap formula. Training and trained models are in :mod:`.ch3_analysis`.

Everything here is the book's reading of a result whose full text we do not have (see chapter 3).
Logit conventions, for the package's one-layer, one-head, attention-only ``Transformer`` with
``norm="none"`` and no positions (``nn.Linear`` stores ``W.T``)::

    f(t) = B[t_s] + sum_i a_i D[t_i],   B = E U,   D = E W_V W_O U
    E = embed.weight [v, d_model]   W_V = W_V.weight.T [d_model, d_head]
    W_O = W_O.weight.T [d_head, d_model]   U = unembed.weight.T [d_model, v]

The hand-built models are float64 so that the identities hold to ~1e-12, not just float32's 1e-6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

from ..core import metrics
from ..core.evaluation import PrefixProfile, prefix_profile
from ..core.model import ModelConfig, Transformer
from ..core.tasks import enumerate_sequences, seen_mask
from ..core.validation import is_int, is_number

TokenSpaceNorm = Literal["none", "attn_out"]


def _is_int(value: object) -> bool:
    return is_int(value)


def _check_v(v: int, minimum: int = 2) -> None:
    if not _is_int(v) or v < minimum:
        raise ValueError(f"vocabulary size v must be an int >= {minimum}, got {v!r}")


def _check_positive(name: str, value: float) -> None:
    if not is_number(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def _check_s(v: int, s: int) -> None:
    if not _is_int(s) or not 1 <= s <= v - 1:
        raise ValueError(f"prefix length s must be an int in 1..v-1 = 1..{v - 1}, got {s!r}")


# --- the minimal construction (theorem part a) ---------------------------------------------------


def complement_basis(v: int) -> Tensor:
    """[v, v-1] float64 with orthonormal columns spanning the complement of the all-ones vector.

    Softmax ignores the all-ones direction of the logits, so v-1 directions are all a model needs.
    A Helmert basis: explicit, hence identical on every machine (a QR would depend on LAPACK).
    """
    _check_v(v)
    P = torch.zeros(v, v - 1, dtype=torch.float64)
    for k in range(1, v):  # column k-1: (1, ..., 1, -k, 0, ..., 0) / sqrt(k (k + 1))
        P[:k, k - 1] = 1.0
        P[k, k - 1] = -float(k)
        P[:, k - 1] /= math.sqrt(k * (k + 1))
    return P


def construction_displacement(C: float, delta: float = 1.0) -> float:
    """The displacement c that gives the construction precision exactly C at lengths 1 and 2.

    Length 2 binds: its margin is c/2 + min(delta, 0), so c = 2 (C - min(delta, 0)).
    """
    _check_positive("precision C", C)
    _check_delta(delta)
    return 2.0 * (C - min(delta, 0.0))


def _check_delta(delta: float) -> None:
    if not is_number(delta) or delta == 0:
        raise ValueError(
            f"delta must be a nonzero finite number (at d = v-1 the bias B = EU cannot vanish while D has "
            f"rank v-1), got {delta!r}"
        )


def construction(v: int, C: float, delta: float = 1.0) -> Transformer:
    """The theorem's construction at d_model = d_head = v-1, loaded into the package's model (float64).

    E = P (``complement_basis``), W_Q = W_K = 0 (uniform attention), W_V W_O = (c/delta) I,
    U = -delta P^T, so B = -delta (I - J/v) and D = -c (I - J/v) with c from
    ``construction_displacement``. delta > 0 makes B lower the query token's own logit (the
    theorem's setting); delta < 0 makes B raise it (chapter 3's counterexample).
    """
    _check_v(v)
    v, c = int(v), construction_displacement(C, delta)
    model = Transformer(ModelConfig(vocab_size=v, d_model=v - 1, n_heads=1, d_head=v - 1, norm="none")).double()
    P, eye = complement_basis(v), torch.eye(v - 1, dtype=torch.float64)
    attn = model.blocks[0].attn
    with torch.no_grad():
        model.embed.weight.copy_(P)  # [v, d_model]
        attn.W_Q.weight.zero_()
        attn.W_K.weight.zero_()
        attn.W_V.weight.copy_(eye)
        attn.W_O.weight.copy_((c / delta) * eye)
        model.unembed.weight.copy_(-delta * P)  # stores U^T = (-delta P^T)^T
    return model.eval()


def logit_matrices(model: Transformer) -> tuple[Tensor, Tensor]:
    """(B, D), each [v, v]: the logit bias E U and the logit displacement E W_V W_O U of ``model``.

    Defined only where the logits are exactly B[t_s] + sum_i a_i D[t_i]: one layer, one head, no MLP,
    no norm, no positions.
    """
    cfg = model.cfg
    if (cfg.n_layers, cfg.n_heads, cfg.d_mlp, cfg.norm, cfg.positional) != (1, 1, 0, "none", "none"):
        raise ValueError(
            "logit_matrices needs n_layers=1, n_heads=1, d_mlp=0, norm='none', positional='none'; got "
            f"n_layers={cfg.n_layers}, n_heads={cfg.n_heads}, d_mlp={cfg.d_mlp}, norm={cfg.norm!r}, "
            f"positional={cfg.positional!r}"
        )
    attn = model.blocks[0].attn
    with torch.no_grad():
        E, U = model.embed.weight, model.unembed.weight.T  # [v, d_model], [d_model, v]
        B = E @ U
        D = E @ attn.W_V.weight.T @ attn.W_O.weight.T @ U
    return B.clone(), D.clone()


def construction_margin(v: int, C: float, s: int, delta: float = 1.0) -> float:
    """The construction's logit margin (smallest absent minus largest present logit) at length s.

    Absent logits are equal; present ones sit c/s lower, the query token a further delta lower.
    Hence c + delta at s = 1 and c/s + min(delta, 0) for s >= 2: exactly 2C/s when delta > 0.
    """
    _check_v(v)
    _check_s(v, s)
    c = construction_displacement(C, delta)
    return c + delta if s == 1 else c / s + min(delta, 0.0)


def construction_tv(v: int, C: float, s: int, delta: float = 1.0) -> float:
    """TV(softmax f, p*) of the construction at length s, in closed form.

    The absent logits are equal, so the model is uniform on the absent tokens like p*; the TV is then
    exactly the probability left on present tokens (s - 1 at -c/s, the query at -c/s - delta).
    """
    _check_v(v)
    _check_s(v, s)
    c = construction_displacement(C, delta)
    present = (s - 1) * math.exp(-c / s) + math.exp(-c / s - delta)
    return present / (present + (v - s))


# --- the norm: token-space models (the LN gap) ---------------------------------------------------


def ln_gap(v: int, s: int, scale: float = 1.0, eps: float = 0.0) -> float:
    """Present-minus-absent gap after standardising h = (scale/s) * (indicator of the s seen tokens).

    h has variance scale^2 (v - s) / (s v^2) over its v features; the gap scale/s is divided by its
    std, giving v / sqrt(s (v - s)) when eps = 0. ``eps`` is the constant LayerNorm adds to the
    variance (torch: 1e-5), so the formula can be checked against a real LayerNorm exactly.
    """
    _check_v(v)
    _check_s(v, s)
    _check_positive("scale", scale)
    if not is_number(eps) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    variance = scale**2 * (v - s) / (s * v**2)
    return (scale / s) / math.sqrt(variance + eps)


LN_EPS = 1e-5  # torch.nn.LayerNorm's default, used by the package's Norm
VALUE_SCALE = 1e4  # token-space value size: makes LN_EPS shift the LN gap by < 1e-9


def token_space_construction(v: int, C: float, norm: TokenSpaceNorm = "none", value_scale: float = VALUE_SCALE) -> Transformer:
    """The construction with features = token coordinates (d_model = d_head = v), optionally with a norm.

    E = I, W_Q = W_K = 0, W_V = I, U = -g I. With ``norm="none"``: W_O = 2C I, g = 1, so B = -I and
    D = -2C I (balanced; precision C at lengths 1-2). With ``norm="attn_out"`` (standardize, no
    affine): W_O = value_scale I and g = C / ln_gap(v, 2), again precision C at lengths 1-2.
    One dimension more than the minimum, so that LayerNorm's statistics over features are exactly
    the statistics over the v logit coordinates that the LN-gap formula uses (float64).
    """
    _check_v(v, minimum=3)
    _check_positive("precision C", C)
    _check_positive("value_scale", value_scale)
    if norm not in ("none", "attn_out"):
        raise ValueError(f"norm={norm!r} is unknown here; allowed: ('none', 'attn_out')")
    v = int(v)
    cfg = ModelConfig(vocab_size=v, d_model=v, n_heads=1, d_head=v, norm=norm, norm_kind="standardize")
    model = Transformer(cfg).double()
    eye = torch.eye(v, dtype=torch.float64)
    if norm == "none":
        value, gain = 2.0 * C, 1.0
    else:
        value, gain = float(value_scale), C / ln_gap(v, 2, scale=value_scale, eps=LN_EPS)
    attn = model.blocks[0].attn
    with torch.no_grad():
        model.embed.weight.copy_(eye)
        attn.W_Q.weight.zero_()
        attn.W_K.weight.zero_()
        attn.W_V.weight.copy_(eye)
        attn.W_O.weight.copy_(value * eye)
        model.unembed.weight.copy_(-gain * eye)
    return model.eval()


def token_space_margin(v: int, C: float, s: int, norm: TokenSpaceNorm = "none", value_scale: float = VALUE_SCALE) -> float:
    """The predicted logit margin of ``token_space_construction(v, C, norm)`` at length s.

    No norm: 2C + 1 at s = 1, 2C/s after. attn_out: g (1 + gap(1)) at s = 1, g gap(s) after, with
    g = C / gap(2) and gap the eps-exact ``ln_gap``: the margin no longer falls like 1/s.
    """
    _check_v(v, minimum=3)
    _check_s(v, s)
    _check_positive("precision C", C)
    if norm == "none":
        return 2.0 * C + 1.0 if s == 1 else 2.0 * C / s
    if norm != "attn_out":
        raise ValueError(f"norm={norm!r} is unknown here; allowed: ('none', 'attn_out')")
    gain = C / ln_gap(v, 2, scale=value_scale, eps=LN_EPS)
    gap = ln_gap(v, s, scale=value_scale, eps=LN_EPS)
    return gain * (1.0 + gap) if s == 1 else gain * gap


# --- the two token-space models side by side, and margins on every input ------------------------


@dataclass(frozen=True)
class NormComparison:
    """The two token-space constructions (no norm, LN on the attention output) at one (v, C)."""

    v: int
    C: float
    none: PrefixProfile
    attn_out: PrefixProfile
    law: np.ndarray  # [v-1] the margin law 2C/s


def norm_comparison(v: int, C: float) -> NormComparison:
    """Both token-space constructions on the input 0, 1, ..., v-2 (every input is alike by symmetry)."""
    tokens = list(range(v - 1))
    profiles = {norm: prefix_profile(token_space_construction(v, C, norm), tokens) for norm in ("none", "attn_out")}
    return NormComparison(v=v, C=C, law=2.0 * C / np.arange(1, v), **profiles)


@torch.no_grad()
def prefix_margins(model: nn.Module, tokens: Tensor) -> Tensor:
    """The logit margin after every prefix of every sequence: [batch, pos] (causal: one pass)."""
    logits = model(tokens)  # [batch, pos, v]
    return metrics.logit_gap(logits, seen_mask(tokens, logits.shape[-1]))


def margins_all_inputs(model: nn.Module, v: int, s: int) -> Tensor:
    """The logit margin on every input of length s (all v!/(v-s)! of them): [n_inputs] float."""
    return prefix_margins(model, enumerate_sequences(v, s))[:, -1]
