"""The theorem of chapter 3, in code: hand-built weights, the quantities the proofs
predict, and the LN-gap formula. Training and trained models are in
:mod:`.ch3_analysis`.

Everything here is the book's reading of a result whose full text we do not have (see
chapter 3). Logit conventions, for the package's one-layer, one-head, attention-only
``Transformer`` with
``norm="none"`` and no positions (``nn.Linear`` stores ``W.T``)::

    f(t) = B[t_s] + sum_i a_i D[t_i],   B = E U,   D = E W_V W_O U
    E = embed.weight [v, d_model]   W_V = W_V.weight.T [d_model, d_head]
    W_O = W_O.weight.T [d_head, d_model]   U = unembed.weight.T [d_model, v]

The hand-built models are float64 so that the identities hold to ~1e-12, not just
float32's 1e-6.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

from ..core import metrics
from ..core.evaluation import ATTN_OUT, PATTERN, PrefixProfile, prefix_profile
from ..core.hooks import run_with_cache
from ..core.model import ModelConfig, Transformer
from ..core.seeding import make_generator
from ..core.tasks import enumerate_sequences, sample_sequences, seen_mask
from ..core.validation import is_int, is_number
from ..runs.claims import Claim, Decision

# why `lengthgen-lite list` shows no experiment of chapter 3's own
NO_SPECS = (
    "hand-built weights for the theorem and their analysis; its one training, the "
    "width sweep on every input of lengths 1-2, runs in its notebook"
)

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
        raise ValueError(
            f"prefix length s must be an int in 1..v-1 = 1..{v - 1}, got {s!r}"
        )


def complement_basis(v: int) -> Tensor:
    """[v, v-1] float64 with orthonormal columns spanning the complement of the all-ones
    vector.

    Softmax ignores the all-ones direction of the logits, so v-1 directions are all a
    model needs. A Helmert basis: explicit, hence identical on every machine (a QR would
    depend on LAPACK).
    """
    _check_v(v)
    P = torch.zeros(v, v - 1, dtype=torch.float64)
    for k in range(1, v):  # column k-1: (1, ..., 1, -k, 0, ..., 0) / sqrt(k (k + 1))
        P[:k, k - 1] = 1.0
        P[k, k - 1] = -float(k)
        P[:, k - 1] /= math.sqrt(k * (k + 1))
    return P


def construction_displacement(C: float, delta: float = 1.0) -> float:
    """The displacement kappa that gives the construction precision exactly C at lengths
    1 and 2.

    Length 2 binds: its margin is kappa/2 + min(delta, 0), so kappa = 2 (C - min(delta,
    0)).
    """
    _check_positive("precision C", C)
    _check_delta(delta)
    return 2.0 * (C - min(delta, 0.0))


def _check_delta(delta: float) -> None:
    if not is_number(delta) or delta == 0:
        raise ValueError(
            "delta must be a nonzero finite number (at d = v-1 the bias B = "
            "EU cannot vanish while D has "
            f"rank v-1), got {delta!r}"
        )


def construction(v: int, C: float, delta: float = 1.0) -> Transformer:
    """The theorem's construction at d_model = d_head = v-1, loaded into the package's
    model (float64).

    E = P (``complement_basis``), W_Q = W_K = 0 (uniform attention), W_V W_O =
    (kappa/delta) I, U = -delta P^T, so B = -delta (I - J/v) and D = -kappa (I - J/v)
    with kappa from ``construction_displacement``. delta > 0 makes B lower the query
    token's own logit (the theorem's setting); delta < 0 makes B raise it (chapter 3's
    counterexample).
    """
    _check_v(v)
    v, kappa = int(v), construction_displacement(C, delta)
    model = Transformer(
        ModelConfig(vocab_size=v, d_model=v - 1, n_heads=1, d_head=v - 1, norm="none")
    ).double()
    P, eye = complement_basis(v), torch.eye(v - 1, dtype=torch.float64)
    attn = model.blocks[0].attn
    with torch.no_grad():
        model.embed.weight.copy_(P)  # [v, d_model]
        attn.W_Q.weight.zero_()
        attn.W_K.weight.zero_()
        attn.W_V.weight.copy_(eye)
        attn.W_O.weight.copy_((kappa / delta) * eye)
        model.unembed.weight.copy_(-delta * P)  # stores U^T = (-delta P^T)^T
    return model.eval()


def logit_matrices(model: Transformer) -> tuple[Tensor, Tensor]:
    """(B, D), each [v, v]: the logit bias E U and the logit displacement E W_V W_O U of
    ``model``.

    Defined only where the logits are exactly B[t_s] + sum_i a_i D[t_i]: one layer, one
    head, no MLP, no norm, no positions.
    """
    cfg = model.cfg
    if (cfg.n_layers, cfg.n_heads, cfg.d_mlp, cfg.norm, cfg.positional) != (
        1,
        1,
        0,
        "none",
        "none",
    ):
        raise ValueError(
            "logit_matrices needs n_layers=1, n_heads=1, d_mlp=0, "
            "norm='none', positional='none'; got "
            f"n_layers={cfg.n_layers}, n_heads={cfg.n_heads}, "
            f"d_mlp={cfg.d_mlp}, norm={cfg.norm!r}, "
            f"positional={cfg.positional!r}"
        )
    attn = model.blocks[0].attn
    with torch.no_grad():
        E, U = model.embed.weight, model.unembed.weight.T  # [v, d_model], [d_model, v]
        B = E @ U
        D = E @ attn.W_V.weight.T @ attn.W_O.weight.T @ U
    return B.clone(), D.clone()


def construction_margin(v: int, C: float, s: int, delta: float = 1.0) -> float:
    """The construction's logit margin (smallest absent minus largest present logit) at
    length s.

    Absent logits are equal; present ones sit kappa/s lower, the query token a further
    delta lower. Hence kappa + delta at s = 1 and kappa/s + min(delta, 0) for s >= 2:
    exactly 2C/s when delta > 0.
    """
    _check_v(v)
    _check_s(v, s)
    kappa = construction_displacement(C, delta)
    return kappa + delta if s == 1 else kappa / s + min(delta, 0.0)


def construction_tv(v: int, C: float, s: int, delta: float = 1.0) -> float:
    """TV(softmax f, p*) of the construction at length s, in closed form.

    The absent logits are equal, so the model is uniform on the absent tokens like p*;
    the TV is then exactly the probability left on present tokens (s - 1 at -kappa/s,
    the query at -kappa/s - delta).
    """
    _check_v(v)
    _check_s(v, s)
    kappa = construction_displacement(C, delta)
    present = (s - 1) * math.exp(-kappa / s) + math.exp(-kappa / s - delta)
    return present / (present + (v - s))


def ln_gap(v: int, s: int, scale: float = 1.0, eps: float = 0.0) -> float:
    """Present-minus-absent gap after standardising h = (scale/s) * (indicator of the s
    seen tokens).

    h has variance scale^2 (v - s) / (s v^2) over its v features; the gap scale/s is
    divided by its std, giving v / sqrt(s (v - s)) when eps = 0. ``eps`` is the constant
    LayerNorm adds to the variance (torch: 1e-5), so the formula can be checked against
    a real LayerNorm exactly.
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


def token_space_construction(
    v: int, C: float, norm: TokenSpaceNorm = "none", value_scale: float = VALUE_SCALE
) -> Transformer:
    """The construction with features = token coordinates (d_model = d_head = v),
    optionally with a norm.

    E = I, W_Q = W_K = 0, W_V = I, U = -g I. With ``norm="none"``: W_O = 2C I, g = 1, so
    B = -I and D = -2C I (balanced; precision C at lengths 1-2). With
    ``norm="attn_out"`` (standardize, no affine): W_O = value_scale I and g = C /
    ln_gap(v, 2), again precision C at lengths 1-2. One dimension more than the minimum,
    so that LayerNorm's statistics over features are exactly the statistics over the v
    logit coordinates that the LN-gap formula uses (float64).
    """
    _check_v(v, minimum=3)
    _check_positive("precision C", C)
    _check_positive("value_scale", value_scale)
    if norm not in ("none", "attn_out"):
        raise ValueError(
            f"norm={norm!r} is unknown here; allowed: ('none', 'attn_out')"
        )
    v = int(v)
    cfg = ModelConfig(
        vocab_size=v, d_model=v, n_heads=1, d_head=v, norm=norm, norm_kind="standardize"
    )
    model = Transformer(cfg).double()
    eye = torch.eye(v, dtype=torch.float64)
    if norm == "none":
        value, gain = 2.0 * C, 1.0
    else:
        value, gain = (
            float(value_scale),
            C / ln_gap(v, 2, scale=value_scale, eps=LN_EPS),
        )
    attn = model.blocks[0].attn
    with torch.no_grad():
        model.embed.weight.copy_(eye)
        attn.W_Q.weight.zero_()
        attn.W_K.weight.zero_()
        attn.W_V.weight.copy_(eye)
        attn.W_O.weight.copy_(value * eye)
        model.unembed.weight.copy_(-gain * eye)
    return model.eval()


def token_space_margin(
    v: int,
    C: float,
    s: int,
    norm: TokenSpaceNorm = "none",
    value_scale: float = VALUE_SCALE,
) -> float:
    """The predicted logit margin of ``token_space_construction(v, C, norm)`` at
    length s.

    No norm: 2C + 1 at s = 1, 2C/s after. attn_out: g (1 + gap(1)) at s = 1, g gap(s)
    after, with g = C / gap(2) and gap the eps-exact ``ln_gap``: the margin no longer
    falls like 1/s.
    """
    _check_v(v, minimum=3)
    _check_s(v, s)
    _check_positive("precision C", C)
    if norm == "none":
        return 2.0 * C + 1.0 if s == 1 else 2.0 * C / s
    if norm != "attn_out":
        raise ValueError(
            f"norm={norm!r} is unknown here; allowed: ('none', 'attn_out')"
        )
    gain = C / ln_gap(v, 2, scale=value_scale, eps=LN_EPS)
    gap = ln_gap(v, s, scale=value_scale, eps=LN_EPS)
    return gain * (1.0 + gap) if s == 1 else gain * gap


@dataclass(frozen=True)
class NormComparison:
    """The two token-space constructions (no norm, LN on the attention output) at one
    (v, C)."""

    v: int
    C: float
    none: PrefixProfile
    attn_out: PrefixProfile
    law: np.ndarray  # [v-1] the margin law 2C/s


def norm_comparison(v: int, C: float) -> NormComparison:
    """Both token-space constructions on the input 0, 1, ..., v-2 (every input is alike
    by symmetry)."""
    tokens = list(range(v - 1))
    profiles = {
        norm: prefix_profile(token_space_construction(v, C, norm), tokens)
        for norm in ("none", "attn_out")
    }
    return NormComparison(v=v, C=C, law=2.0 * C / np.arange(1, v), **profiles)


@torch.no_grad()
def prefix_margins(model: nn.Module, tokens: Tensor) -> Tensor:
    """The logit margin after every prefix of every sequence: [batch, pos] (causal: one
    pass)."""
    logits = model(tokens)  # [batch, pos, v]
    return metrics.logit_gap(logits, seen_mask(tokens, logits.shape[-1]))


def margins_all_inputs(model: nn.Module, v: int, s: int) -> Tensor:
    """The logit margin on every input of length s (all v!/(v-s)! of them): [n_inputs]
    float."""
    return prefix_margins(model, enumerate_sequences(v, s))[:, -1]


@dataclass(frozen=True)
class ConstructionCheck:
    """What chapter 3 checks on the construction at one (v, C)."""

    v: int
    d_model: int
    d_head: int
    centred: bool  # B = -(I - 1/v) and D = -2C (I - 1/v), to 1e-12
    ranks: tuple[int, int, int]  # ranks of B, D and B + D
    precision: float  # smallest margin over every input of lengths 1-2
    # largest spread of the absent logits, prefixes of 0, 1, ..., v-2
    absent_spread: float

    def row(self) -> str:
        """One row of the chapter's table: v, d_model, d_head, the ranks, the
        precision."""
        b, d, both = self.ranks
        return (
            f"{self.v:2d}  {self.d_model:7d}  {self.d_head:6d}  {b:6d}  "
            f"{d:6d}  {both:9d}"
            f"  {self.precision:.3f}"
        )


def check_construction(v: int, C: float) -> ConstructionCheck:
    """Build the construction at (v, C) and measure what the theorem says about it."""
    model = construction(v, C)
    B, D = logit_matrices(model)
    centering = torch.eye(v, dtype=torch.float64) - 1.0 / v
    centred = torch.allclose(B, -centering, atol=1e-12) and torch.allclose(
        D, -2 * C * centering, atol=1e-12
    )
    ranks = tuple(int(torch.linalg.matrix_rank(M)) for M in (B, D, B + D))
    margins = torch.cat([margins_all_inputs(model, v, s) for s in (1, 2)])
    profile = prefix_profile(model, list(range(v - 1)))
    # precision needs equal absent logits (after tokens 0..s-1, tokens s..v-1 are
    # absent)
    spreads = [np.ptp(profile.logits[s - 1, s:]) for s in range(1, v - 1)]
    return ConstructionCheck(
        v=v,
        d_model=model.cfg.d_model,
        d_head=model.cfg.d_head,
        centred=centred,
        ranks=ranks,  # type: ignore[arg-type]
        precision=float(margins.min()),
        absent_spread=float(max(spreads, default=0.0)),
    )


@dataclass(frozen=True)
class MarginCheck:
    """Every margin of the construction against the law: 2C/s, and kappa + delta at
    s = 1."""

    n_checked: int  # margins compared
    max_deviation: float  # largest |margin - law| over them
    formula_error: float  # largest |construction_margin - law|: the closed form itself


def check_margins(
    vs: Sequence[int] = (4, 8, 16),
    Cs: Sequence[float] = (0.5, 1.0, 2.0),
    exhaustive_up_to: int = 8,
    n_random: int = 2000,
) -> MarginCheck:
    """Compare the construction's margins with the law: every input of every length for
    ``v <= exhaustive_up_to``, else every prefix of ``n_random`` random permutations
    (generator seed v). Float64 throughout, so "equal" means about 1e-15."""
    n_checked, max_deviation, formula_error = 0, 0.0, 0.0
    for v in vs:
        for C in Cs:
            model = construction(v, C)
            if v <= exhaustive_up_to:  # every input of every length
                by_length = {s: margins_all_inputs(model, v, s) for s in range(1, v)}
            else:  # every prefix of n_random random permutations
                tokens = sample_sequences(v, v - 1, n_random, make_generator(v))
                margins = prefix_margins(model, tokens)
                by_length = {s: margins[:, s - 1] for s in range(1, v)}
            for s, margins in by_length.items():
                # s = 1: kappa + delta, delta = 1
                expected = 2 * C / s if s >= 2 else 2 * C + 1.0
                formula_error = max(
                    formula_error, abs(construction_margin(v, C, s) - expected)
                )
                max_deviation = max(
                    max_deviation, float((margins - expected).abs().max())
                )
                n_checked += len(margins)
    return MarginCheck(n_checked, max_deviation, formula_error)


def precision_claim(check: MarginCheck, exact: float) -> Decision:
    """Scorecard: precision 2C/s at length s, exactly, on the construction. The book
    built the model to have it, so the row is a demonstration, not a replication:
    :data:`PRECISION_CLAIM` asserts that every margin is within ``exact`` of the law
    (float64 rounding: no seed spread)."""
    number = (
        f"{check.n_checked} margins of the hand-built model (every input for "
        "v = 4, 8; every prefix of 2000 permutations for v = 16; C = 0.5, 1, 2): all "
        f"equal 2C/s (s ≥ 2) to within {exact:g}"
    )
    return PRECISION_CLAIM.demonstrate(
        [exact - check.max_deviation], number, spread=0.0
    )


@dataclass(frozen=True)
class LnGapCheck:
    """The token-space construction with LN on the attention output, on 0, ..., v-2."""

    measured: np.ndarray  # [v-1] the gap off the logits (margin / g, minus 1 at s = 1)
    relative: np.ndarray  # [v-1] |measured / (v / sqrt(s (v - s))) - 1|
    bound: float  # LayerNorm's eps, relative, at its worst (s = v-1)
    raw_gap: np.ndarray  # [v-1] present minus absent feature, before the norm, / k
    uniform: bool  # attention exactly 1/s on the s seen tokens, every s
    # largest spread within the present and within the absent features
    two_values: float
    step_error: float  # largest |raw_gap - 1/s|


def ln_gap_check(v: int, C: float) -> LnGapCheck:
    """Read the LN gap off the hand-built model's logits and its attention output."""
    model = token_space_construction(v, C, "attn_out")
    names = [PATTERN, ATTN_OUT]
    _, cache = run_with_cache(model, torch.arange(v - 1)[None], names=names)
    pattern, raw = (cache[name][0] for name in names)  # features = token coordinates
    g = -float(model.unembed.weight[0, 0].detach())  # the model's own gain: U = -g I
    margin = prefix_margins(model, torch.arange(v - 1)[None])[0].numpy()
    lengths = np.arange(1, v)
    # margin = g * gap for s >= 2; at s = 1 the query is the only present token, + g
    measured = margin / g - (lengths == 1)
    formula = v / np.sqrt(lengths * (v - lengths))  # the proposition, written out
    uniform, two_values, step_error = True, 0.0, 0.0
    for s in lengths:
        flat = torch.full((s,), 1.0 / s, dtype=torch.float64)
        uniform = uniform and torch.allclose(pattern[0, s - 1, :s], flat)
        # tokens 0..s-1 present, s..v-1 absent: two values, 1/s apart (x k)
        h = raw[s - 1]
        spreads = (float(h[:s].max() - h[:s].min()), float(h[s:].max() - h[s:].min()))
        two_values = max(two_values, *spreads)
        step_error = max(
            step_error, abs(float(h[0] - h[v - 1]) / VALUE_SCALE - 1.0 / s)
        )
    raw_gap = np.array(
        [float(raw[s - 1, 0] - raw[s - 1, v - 1]) / VALUE_SCALE for s in lengths]
    )
    return LnGapCheck(
        measured=measured,
        relative=np.abs(measured / formula - 1),
        bound=LN_EPS * (v - 1) * v**2 / (2 * VALUE_SCALE**2),
        raw_gap=raw_gap,
        uniform=bool(uniform),
        two_values=two_values,
        step_error=step_error,
    )


def ln_gap_claim(max_relative: float, bound: float, ln_gap_v16: np.ndarray) -> Decision:
    """Scorecard: the LN gap v / sqrt(s (v - s)), read off the hand-built model's logits
    (a demonstration): :data:`LN_GAP_CLAIM` asserts that the largest relative error
    ``max_relative`` is within ``bound`` (LayerNorm's eps; float64 rounding besides).
    ``ln_gap_v16``: the measured gap at v = 16, [15]."""
    number = (
        "hand-built model with LN on the attention output, v = 4, 8, 16, every s: the "
        f"logit gap equals v/√(s(v-s)) to a relative {bound:.0e} (LayerNorm's ε); "
        f"smallest {ln_gap_v16.min():.3f} at s = v/2"
    )
    slack = bound + 1e-12 - max_relative
    return LN_GAP_CLAIM.demonstrate([slack], number, spread=0.0)


def comparison_numbers(comparison: NormComparison) -> dict[str, float]:
    """The numbers the prose quotes from :func:`norm_comparison` (glue name ->
    value)."""
    none, normed = comparison.none, comparison.attn_out
    return {
        "ch3_margin_none_last": round(float(none.margin[-1]), 3),
        "ch3_margin_ln_last": round(float(normed.margin[-1]), 3),
        "ch3_margin_ln_min": round(float(normed.margin.min()), 3),
        "ch3_tv_none_last": round(float(none.tv[-1]), 3),
        "ch3_tv_ln_last": round(float(normed.tv[-1]), 3),
    }


def ln_gap_numbers(
    raw_gap: np.ndarray, ln_gap_measured: np.ndarray, bound: float
) -> dict[str, float]:
    """The LN-gap numbers the prose quotes (glue name -> value): ``raw_gap`` and
    ``ln_gap_measured`` are :class:`LnGapCheck`'s ``raw_gap`` and ``measured``, [v-1];
    the middle one is at s = v/2."""
    return {
        "ch3_ln_bound": float(f"{bound:.0e}"),
        "ch3_ln_gap_s1": round(float(ln_gap_measured[0]), 3),
        "ch3_ln_gap_mid": round(float(ln_gap_measured[len(ln_gap_measured) // 2]), 3),
        "ch3_raw_gap_last": round(float(raw_gap[-1]), 3),
    }


def counterexample_numbers(margin: np.ndarray, law: np.ndarray) -> dict[str, float]:
    """The counterexample's numbers the prose quotes (glue name -> value): where its
    margin [v-1] first turns negative, its last margin, and the law 2C/s there."""
    negative = np.flatnonzero(margin < 0) + 1  # lengths s with a negative margin
    return {
        "ch3_counter_first_negative": int(negative[0]),
        "ch3_counter_margin_last": round(float(margin[-1]), 3),
        "ch3_law_last": round(float(law[-1]), 3),
    }


# The chapter's scorecard claims, declared once (book/scorecard.md).
#: The scorecard claim ch3-score-precision, declared once.
PRECISION_CLAIM = Claim(
    "ch3-score-precision",
    "Theorem, generalisation: precision C at lengths 1-2 (balanced displacement) gives "
    "precision 2C/s at length s",
    "2510.08341: the theorem [paper], its statement [secondary]",
    metric="the hand-built model's logit margin at every s",
    unit="logit",
    effect="the margin minus 2C/s",
    sesoi=None,
    kind="demonstration",
)
#: The scorecard claim ch3-score-ln-gap, declared once.
LN_GAP_CLAIM = Claim(
    "ch3-score-ln-gap",
    "A norm on the attention output undoes the 1/s compression: the gap becomes "
    "v/sqrt(s(v - s)) >= 2",
    "2510.08341 [paper]; the formula [ours]",
    metric="the normed gap against the formula",
    unit="relative error",
    effect="the bound minus the largest relative error",
    sesoi=None,
    kind="demonstration",
)
