"""The theorem of chapter 3, in code: hand-built weights, the quantities the proofs predict, and the
full-batch task that tests the dimension threshold by training.

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
from functools import cached_property
from typing import Literal, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from . import metrics
from .model import ModelConfig, Transformer
from .tasks import Batch, enumerate_sequences, seen_mask, target_distribution
from .training import TrainConfig, train

TokenSpaceNorm = Literal["none", "attn_out"]


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_v(v: int, minimum: int = 2) -> None:
    if not _is_int(v) or v < minimum:
        raise ValueError(f"vocabulary size v must be an int >= {minimum}, got {v!r}")


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
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
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not math.isfinite(delta) or delta == 0:
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
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
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


# --- reading a model at every length -------------------------------------------------------------


@dataclass(frozen=True)
class PrefixProfile:
    """One model on one input, at every prefix length s = 1..v-1 (arrays of length v-1)."""

    s: np.ndarray
    logits: np.ndarray  # [v-1, v] logits after each prefix
    probs: np.ndarray  # [v-1, v] softmax of the logits
    targets: np.ndarray  # [v-1, v] p*
    margin: np.ndarray  # smallest absent minus largest present logit
    tv: np.ndarray  # TV(probs, p*)


@torch.no_grad()
def prefix_profile(model: nn.Module, tokens: Sequence[int]) -> PrefixProfile:
    """Run ``model`` on one sequence of v-1 distinct tokens; read every prefix (causal mask)."""
    v = model.cfg.vocab_size
    if len(tokens) != v - 1 or sorted(set(tokens)) != sorted(tokens) or not all(0 <= t < v for t in tokens):
        raise ValueError(f"tokens must be v-1 = {v - 1} distinct ids in 0..{v - 1}, got {list(tokens)!r}")
    x = torch.tensor([list(tokens)], dtype=torch.long)  # [1, v-1]
    logits = model(x)[0]  # [v-1, v]
    targets = target_distribution(x, v)[0].to(logits.dtype)  # [v-1, v]
    targets = targets / targets.sum(-1, keepdim=True)  # equal nonzero entries: exactly 1/(v-s) in float64
    seen = seen_mask(x, v)[0]
    probs = logits.softmax(-1)
    return PrefixProfile(
        s=np.arange(1, v),
        logits=logits.numpy(),
        probs=probs.numpy(),
        targets=targets.numpy(),
        margin=metrics.logit_gap(logits, seen).numpy(),
        tv=metrics.total_variation(probs, targets).numpy(),
    )


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


# --- the dimension threshold, by training --------------------------------------------------------


@dataclass(frozen=True)
class LengthOneTwo:
    """Every input of length 1 and 2 over v tokens, each counted once, served as one full batch.

    The v(v-1) length-2 sequences give every length-2 input at position 1; position 0 repeats each
    length-1 input v-1 times, so the loss mask keeps it once (in its first sequence). With soft
    targets the loss is then the mean cross-entropy over the v + v(v-1) inputs of lengths 1-2.
    """

    v: int

    def __post_init__(self) -> None:
        _check_v(self.v, minimum=3)

    @property
    def n_outputs(self) -> int:
        return self.v

    @property
    def n_sequences(self) -> int:
        return self.v * (self.v - 1)

    def train_sizes(self) -> Sequence[int]:
        return (2,)

    def full_batch(self) -> Batch:
        return self._full_batch  # built once: the loop asks for it K times per step

    @cached_property
    def _full_batch(self) -> Batch:
        tokens = enumerate_sequences(self.v, 2)  # [v(v-1), 2], lexicographic: first token sorted
        mask = torch.ones(tokens.shape, dtype=torch.bool)
        mask[:, 0] = torch.arange(self.n_sequences) % (self.v - 1) == 0  # first sequence per first token
        return Batch(tokens, target_distribution(tokens, self.v), mask)

    def sample_train_batch(self, batch: int, size: int, generator: torch.Generator) -> Batch:
        if batch != self.n_sequences or size != 2:
            raise ValueError(
                f"LengthOneTwo serves the full batch of v(v-1) = {self.n_sequences} length-2 sequences; "
                f"use TrainConfig(batch={self.n_sequences}) (got batch={batch!r}, size={size!r})"
            )
        return self.full_batch()

    def entropy_floor(self) -> float:
        """The lowest reachable loss: the mean entropy of p* over the inputs, in nats."""
        v = self.v
        return (v * math.log(v - 1) + v * (v - 1) * math.log(v - 2)) / (v + v * (v - 1))


@torch.no_grad()
def input_kl(model: nn.Module, v: int) -> tuple[np.ndarray, np.ndarray]:
    """KL(p* || model) in nats on every input: ([v] by token at length 1, [v, v] by (t_1, t_2) at length 2).

    The diagonal of the length-2 table (repeated tokens: not an input) is NaN.
    """
    task = LengthOneTwo(v)
    batch = task.full_batch()
    logits = model(batch.inputs)  # [v(v-1), 2, v]
    kl = metrics.kl_divergence(batch.targets.to(logits.dtype), logits).double().numpy()  # [v(v-1), 2]
    first, second = batch.inputs[:, 0].numpy(), batch.inputs[:, 1].numpy()
    length_one = np.zeros(v)
    length_one[first[batch.loss_mask[:, 0].numpy()]] = kl[batch.loss_mask[:, 0].numpy(), 0]
    length_two = np.full((v, v), np.nan)
    length_two[first, second] = kl[:, 1]
    return length_one, length_two


@torch.no_grad()
def length_one_two_fit(model: nn.Module, v: int) -> tuple[float, float]:
    """(excess loss in nats, smallest margin) of ``model`` over all inputs of lengths 1-2.

    The excess loss is the mean KL(p* || model) over the v + v(v-1) inputs: 0 only at a perfect fit.
    """
    task = LengthOneTwo(v)
    batch = task.full_batch()
    logits = model(batch.inputs)  # [v(v-1), 2, v]
    kl = metrics.kl_divergence(batch.targets.to(logits.dtype), logits)  # [v(v-1), 2]
    gap = metrics.logit_gap(logits, seen_mask(batch.inputs, v))
    mask = batch.loss_mask
    return float(kl[mask].mean()), float(gap[mask].min())


@dataclass(frozen=True)
class TiedPair:
    """The two tokens a stalled run confuses most, and its KL where exactly one of them is present."""

    tokens: tuple[int, int]
    kl_exactly_one: float  # mean KL over the length-2 inputs holding exactly one of the pair (nats)
    kl_others: float  # mean KL over the remaining length-2 inputs (nats)

    @staticmethod
    def split_cost(v: int) -> float:
        """log 2 / (v - 2): the KL of splitting the absent one's mass 1/(v-2) evenly over the pair."""
        _check_v(v, minimum=3)
        return math.log(2.0) / (v - 2)


def tied_pair(kl_two: np.ndarray) -> TiedPair:
    """Find the pair of tokens with the largest mean KL over the length-2 inputs that contain them.

    A model that cannot tell two tokens apart as context loses ``TiedPair.split_cost(v)`` on every
    input holding exactly one of them, and nothing elsewhere.
    """
    kl_two = np.asarray(kl_two, dtype=float)
    v = kl_two.shape[0]
    if kl_two.ndim != 2 or kl_two.shape != (v, v) or v < 3:
        raise ValueError(f"kl_two must be a [v, v] table with v >= 3, got shape {kl_two.shape}")
    score = np.array([np.nanmean(np.concatenate([kl_two[x], kl_two[:, x]])) for x in range(v)])
    a, b = sorted(int(x) for x in np.argsort(-score, kind="stable")[:2])
    inside = np.isin(np.arange(v), [a, b])
    exactly_one = inside[:, None] ^ inside[None, :]  # [v, v]
    valid = ~np.isnan(kl_two)
    return TiedPair(
        tokens=(a, b),
        kl_exactly_one=float(kl_two[exactly_one & valid].mean()),
        kl_others=float(kl_two[~exactly_one & valid].mean()),
    )


@dataclass(frozen=True)
class DimensionSweep:
    """Training on all inputs of lengths 1-2 for each width d: arrays are [len(dims), len(seeds)]."""

    v: int
    dims: np.ndarray  # d_model = d_head = d
    seeds: np.ndarray
    best_excess: np.ndarray  # lowest training loss minus the entropy floor, over all steps (nats)
    final_excess: np.ndarray  # excess loss of the final weights (nats)
    final_margin: np.ndarray  # smallest logit margin of the final weights over all inputs
    curves: np.ndarray  # [len(dims), steps, len(seeds)] training loss minus the entropy floor
    kl_length_one: np.ndarray  # [len(dims), len(seeds), v] final KL per length-1 input (``input_kl``)
    kl_length_two: np.ndarray  # [len(dims), len(seeds), v, v] final KL per length-2 input, NaN diagonal

    def fits(self, threshold: float) -> np.ndarray:
        """[len(dims), len(seeds)] bool: the final excess loss is below ``threshold`` nats."""
        _check_positive("threshold", threshold)
        return self.final_excess < threshold


def dimension_sweep(
    v: int, dims: Sequence[int], seeds: Sequence[int], cfg: TrainConfig, progress: bool = True
) -> DimensionSweep:
    """Fit lengths 1-2 exactly (soft targets, full batch) at d_model = d_head = d for each d in ``dims``.

    The seeds of one d are trained together in one ``train`` call. Returns every run's loss curve,
    its best loss and the final weights' fit (chapter 3's "exists vs is found").
    """
    task = LengthOneTwo(v)
    if cfg.batch != task.n_sequences or cfg.targets != "soft":
        raise ValueError(
            f"dimension_sweep needs TrainConfig(batch={task.n_sequences}, targets='soft'), got "
            f"batch={cfg.batch}, targets={cfg.targets!r}"
        )
    dims = list(dims)
    if not dims or any(not _is_int(d) or d < 1 for d in dims):
        raise ValueError(f"dims must be a non-empty list of positive ints, got {dims!r}")
    dims = [int(d) for d in dims]
    floor = task.entropy_floor()
    curves, final_excess, final_margin, kl_one, kl_two = [], [], [], [], []
    for d in dims:
        model_cfg = ModelConfig(vocab_size=v, d_model=d, n_heads=1, d_head=d, norm="none")
        result = train(model_cfg, task, cfg, seeds, progress=progress, desc=f"v={v}, d={d}")
        curves.append(result.loss.astype(np.float64) - floor)
        fits = [length_one_two_fit(model, v) for model in result.models]
        final_excess.append([f[0] for f in fits])
        final_margin.append([f[1] for f in fits])
        kls = [input_kl(model, v) for model in result.models]
        kl_one.append([k[0] for k in kls])
        kl_two.append([k[1] for k in kls])
    curves_arr = np.stack(curves)  # [len(dims), steps, K]
    return DimensionSweep(
        v=v,
        dims=np.array(dims),
        seeds=np.array(list(seeds)),
        best_excess=curves_arr.min(axis=1),
        final_excess=np.array(final_excess),
        final_margin=np.array(final_margin),
        curves=curves_arr,
        kl_length_one=np.array(kl_one),
        kl_length_two=np.array(kl_two),
    )
