"""What the output norm does, measured on one model: chapter 5's mechanism.

The measurements ask one question: is the gap kept by a sharper attention pattern, or
by the norm dividing a still-uniform average by its shrinking spread?
:func:`gap_profile` records both, and re-runs the model with the norm's divisor (its
``hook_scale``) frozen to a constant (:func:`frozen_divisor_hooks`, through
``run_with_hooks``). The chapter's readers over every trained model are in
:mod:`~lengthgen_lite.chapters.ch5_post_norm`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ..core import metrics
from ..core.evaluation import ATTN_OUT, PATTERN, length_metrics
from ..core.hooks import hooks_installed, run_with_cache, run_with_hooks
from ..core.seeding import make_generator
from ..core.tasks import sample_sequences, seen_mask, target_distribution
from ..core.validation import require_number
from .ch1_set_complement import TRAIN_LENGTH

# The norm whose input contains the attention average, by placement. "pre" normalises
# only the token embeddings before attention, and "none" has no norm: neither can
# rescale the average.
OUTPUT_NORM: dict[str, str] = {
    "post": "blocks.0.ln1",
    "pre_final": "ln_final",
    "attn_out": "blocks.0.ln_attn_out",
}


def _length_ranges(s: np.ndarray, train_length: int) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(train_length, int) or not 1 <= train_length < int(s.max()):
        raise ValueError(
            f"train_length must be an int in 1..{int(s.max()) - 1} (some "
            f"longer s must remain), got {train_length!r}"
        )
    return s <= train_length, s > train_length


def frozen_divisor_hooks(
    name: str, divisor: float
) -> dict[str, Callable[[Tensor, str], Tensor]]:
    """Hooks (for ``run_with_hooks``) that make the norm ``name`` divide by the constant
    ``divisor`` instead of each vector's own std (its ``hook_scale``); its centring,
    gain and bias are kept. Removes the rescaling and nothing else."""
    divisor = require_number("divisor", divisor, minimum=0.0, strict=True)
    # a 0-dim tensor: divides exactly as the float itself does
    frozen = torch.tensor(divisor)
    return {f"{name}.hook_scale": lambda _scale, _name: frozen}


@contextmanager
def frozen_divisor(model: nn.Module, name: str, divisor: float) -> Iterator[None]:
    """Inside the block, the norm ``name`` divides by the constant ``divisor``
    (:func:`frozen_divisor_hooks`, installed on ``model`` until the block ends)."""
    with hooks_installed(model, frozen_divisor_hooks(name, divisor)):
        yield


@dataclass(frozen=True)
class GapProfile:
    """One trained model at every prefix length s = 1..v-1: means over the test
    sequences."""

    s: np.ndarray
    gap: np.ndarray  # logit gap: smallest legal minus largest illegal logit
    # the same with the output norm's divisor frozen (= gap without one)
    frozen_gap: np.ndarray
    # what the output norm divides by, sqrt(var + eps) over features (nan: none)
    divisor: np.ndarray
    # std over features of the attention output W_O z (hook_attn_out)
    attn_out_std: np.ndarray
    # attention entropy / log s (1: uniform over the s seen tokens)
    entropy_ratio: np.ndarray
    # s * largest attention weight (1: uniform; s: all on one token)
    max_attention_ratio: np.ndarray


@torch.no_grad()
def gap_profile(
    model: nn.Module,
    n_sequences: int = 2000,
    seed: int = 0,
    train_length: int = TRAIN_LENGTH,
) -> GapProfile:
    """Measure the gap, the attention's sharpness and the output norm's divisor at every
    ``s``.

    The frozen divisor is the mean divisor over the training lengths ``s =
    1..train_length``: at those lengths the frozen model is close to the real one, and
    beyond them it shows what the gap would be if the norm stopped rescaling.
    """
    v = model.cfg.vocab_size
    # [batch, v-1]
    tokens = sample_sequences(v, v - 1, n_sequences, make_generator(seed))
    seen = seen_mask(tokens, v)
    s = np.arange(1, v)
    inside, _ = _length_ranges(s, train_length)
    names = [PATTERN, ATTN_OUT]
    norm_name = OUTPUT_NORM.get(model.cfg.norm)
    # what the output norm divides by (recorded: the norm is unchanged)
    if norm_name is not None:
        names.append(f"{norm_name}.hook_scale")
    logits, cache = run_with_cache(model, tokens, names=names)
    pattern = cache[PATTERN]  # [batch, head, query_pos, key_pos]
    table = length_metrics(logits, target_distribution(tokens, v), pattern=pattern)[0]
    gap, entropy_ratio = table.logit_gap, table.entropy_ratio  # [v-1]
    max_ratio = table.max_attention * s.astype(np.float32)  # s * largest weight
    attn_out_std = cache[ATTN_OUT].std(dim=-1, unbiased=False).mean(0).numpy()
    if norm_name is None:
        divisor = np.full(v - 1, np.nan)
        frozen_gap = gap
    else:
        divisor = cache[f"{norm_name}.hook_scale"].squeeze(-1).mean(0).numpy()  # [v-1]
        hooks = frozen_divisor_hooks(norm_name, float(divisor[inside].mean()))
        frozen_logits = run_with_hooks(model, tokens, hooks)
        frozen_gap = metrics.logit_gap(frozen_logits, seen).mean(0).numpy()
    return GapProfile(
        s, gap, frozen_gap, divisor, attn_out_std, entropy_ratio, max_ratio
    )


PROFILE_FIELDS = (
    "gap",
    "frozen_gap",
    "divisor",
    "attn_out_std",
    "entropy_ratio",
    "max_attention_ratio",
)


def stack_profile(profiles: Sequence[GapProfile], field: str) -> np.ndarray:
    """One field of several profiles (one per seed) as a [K, len(s)] array, for plots
    and asserts."""
    if not profiles:
        raise ValueError("profiles must hold at least one GapProfile")
    if field not in PROFILE_FIELDS:
        raise ValueError(f"field {field!r} is unknown; allowed: {PROFILE_FIELDS}")
    return np.stack([getattr(profile, field) for profile in profiles])


def growth(profiles: Sequence[GapProfile], field: str = "gap") -> np.ndarray:
    """``s * field`` at the longest ``s`` over its value at ``s = 1``, per profile
    (seed): [K].

    1 means the 1/s law holds exactly; above 1, something (a norm) keeps the gap from
    shrinking.
    """
    # [K, len(s)]; validates profiles and field
    stacked = stack_profile(profiles, field)
    scaled = profiles[0].s * stacked
    return scaled[:, -1] / scaled[:, 0]
