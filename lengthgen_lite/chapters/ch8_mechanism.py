"""Chapter 8's proof in code, and what its slider shows.

The proof: chapter 3's token-space construction averages the s present tokens, so its
margin is 2C/s. Replace the average by a *sum* over the present tokens (non-normalised
attention: every weight 1 instead of 1/s, :func:`summed_attention_hooks`) and give it
the displacement C instead of 2C: the margin is C at every s >= 2 (C + 1 at s = 1),
:func:`summed_margin`. A factor on the logits, however large, leaves the construction's
uniform attention uniform: its margin stays 2C/s (:func:`margin_table`).

The slider's profiles (:func:`slider_profiles`) are chapter 5's
:func:`~lengthgen_lite.chapters.ch5_mechanism.gap_profile` of part A's trained models:
the attention's entropy over log s and the legal/illegal logit gap at every s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..core.evaluation import PATTERN
from ..core.hooks import HookFn, hooks_installed
from ..core.model import attention_logit_factor
from ..core.validation import require_number
from ..runs import Results
from .ch3_construction import (
    prefix_margins,
    token_space_construction,
    token_space_margin,
)
from .ch5_mechanism import GapProfile, gap_profile
from .ch8_two_kinds import variant_fields

# The slider's choices: the logits' length factor and the output norm (trained models,
# soft targets): (scaling, norm) -> part A's variant
SCALINGS = ("none", "log n", "learned s")
OUTPUT_NORMS = ("none", "attn_out")
SLIDER_VARIANTS: dict[tuple[str, str], str] = {
    ("none", "none"): "none",
    ("log n", "none"): "logn",
    ("learned s", "none"): "ssmax",
    ("none", "attn_out"): "attn_out",
    ("log n", "attn_out"): "logn+attn_out",
    ("learned s", "attn_out"): "ssmax+attn_out",
}


def summed_attention_hooks() -> dict[str, HookFn]:
    """Hooks that turn layer 0's attention weights into a sum over the keys each query
    sees: the pattern times n, the number of keys (causal: position + 1). On uniform
    attention every weight becomes 1."""

    def to_sum(pattern: Tensor, _name: str) -> Tensor:
        n = torch.arange(1, pattern.shape[-1] + 1, dtype=pattern.dtype)
        return pattern * n[-pattern.shape[-2] :, None]

    return {PATTERN: to_sum}


def summed_margin(C: float, s: int) -> float:
    """The summed construction's margin (displacement C): C + 1 at s = 1 (the query's
    own bias), C after, whatever s."""
    require_number("C", C, 0.0, strict=True)
    return C + 1.0 if s == 1 else C


@dataclass(frozen=True)
class MarginTable:
    """Chapter 3's construction at every s = 1..v-1: margins measured and predicted."""

    s: np.ndarray
    average: np.ndarray  # the averaging construction (displacement 2C)
    average_law: np.ndarray  # 2C/s (2C + 1 at s = 1)
    summed: np.ndarray  # the same attention summed (displacement C)
    summed_law: np.ndarray  # C (C + 1 at s = 1)
    sharpened: np.ndarray  # the averaging construction, logits x ``factor``
    factor: float


@torch.no_grad()
def margin_table(v: int, C: float, factor: float = 10.0) -> MarginTable:
    """The three margins on the input 0, 1, ..., v-2 (every input is alike by
    symmetry), float64."""
    factor = require_number("factor", factor, 0.0, strict=True)
    tokens = torch.arange(v - 1)[None]
    s = np.arange(1, v)
    average = token_space_construction(v, C)
    measured = prefix_margins(average, tokens)[0].numpy()
    with attention_logit_factor(average, factor):
        sharpened = prefix_margins(average, tokens)[0].numpy()
    # displacement C: the construction of precision C / 2 has D = -C (I - J/v)
    summed_model = token_space_construction(v, C / 2)
    with hooks_installed(summed_model, summed_attention_hooks()):
        summed = prefix_margins(summed_model, tokens)[0].numpy()
    return MarginTable(
        s=s,
        average=measured,
        average_law=np.array([token_space_margin(v, C, int(k)) for k in s]),
        summed=summed,
        summed_law=np.array([summed_margin(C, int(k)) for k in s]),
        sharpened=sharpened,
        factor=factor,
    )


def slider_profiles(
    results: Results, seed_index: int = 0, n_sequences: int = 500
) -> dict[tuple[str, str], GapProfile]:
    """(scaling, norm) -> the gap profile of one trained model (soft targets, seed
    number ``seed_index``) of part A's live run: the slider's data."""
    L = results.configs[0].train_length
    return {
        key: gap_profile(
            results.result(targets="soft", **variant_fields(name)).models[seed_index],
            n_sequences,
            train_length=L,
        )
        for key, name in SLIDER_VARIANTS.items()
    }
