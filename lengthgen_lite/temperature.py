"""The logit-temperature control of chapter 6: is a gain real, or only a change of logit scale?

Multiplying every logit by ``c > 1`` sharpens the predicted distribution without changing which
tokens it ranks first. Long-length TV on set complement is very sensitive to that scale, so any
method that happens to enlarge the logits can look better there. These functions score one model
at many scales from a single forward pass, on the same sequences as
:func:`lengthgen_lite.evaluation.evaluate_set_complement`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from .metrics import total_variation
from .seeding import make_generator
from .tasks import sample_sequences, target_distribution


@torch.no_grad()
def tv_by_logit_scale(
    model: nn.Module, v: int, scales: Sequence[float], n_sequences: int = 2000, seed: int = 0
) -> np.ndarray:
    """TV to p* at every prefix length for the logits times each scale: [len(scales), v-1].

    Row ``i`` equals ``evaluate_set_complement(model, v, n_sequences, seed, logit_scale=scales[i]).tv``.
    """
    scales = [float(c) for c in scales]
    if not scales or not all(c > 0 for c in scales):
        raise ValueError(f"scales must be a non-empty list of positive floats, got {scales!r}")
    tokens = sample_sequences(v, v - 1, n_sequences, make_generator(seed))  # [batch, v-1]
    was_training = model.training
    model.eval()
    try:
        logits = model(tokens)  # [batch, s, v]
    finally:
        model.train(was_training)
    targets = target_distribution(tokens, v)
    rows = [total_variation((logits * c).softmax(dim=-1), targets).mean(dim=0).numpy() for c in scales]
    return np.stack(rows)


def matched_scale(tv_curve: np.ndarray, scales: Sequence[float], target: float) -> float:
    """The scale whose TV in ``tv_curve`` [len(scales)] is closest to ``target`` (the first one on ties).

    Used to ask: how much must the raw logits be sharpened to match an averaged model's TV?
    """
    tv_curve = np.asarray(tv_curve, dtype=float)
    if tv_curve.shape != (len(scales),):
        raise ValueError(f"tv_curve must have one entry per scale ({len(scales)}), got shape {tv_curve.shape}")
    return float(scales[int(np.argmin(np.abs(tv_curve - target)))])


def scaling_matches(raw_train: np.ndarray, raw_beyond: np.ndarray, train: float, beyond: float) -> bool:
    """Does some logit scale of the raw model reach TV <= ``train`` at the training lengths *and*
    <= ``beyond`` beyond them? ``raw_train``, ``raw_beyond``: mean TV per scale, [len(scales)].

    If not, a model reaching (``train``, ``beyond``) is better in a way no temperature explains.
    """
    raw_train, raw_beyond = np.asarray(raw_train, dtype=float), np.asarray(raw_beyond, dtype=float)
    if raw_train.ndim != 1 or raw_train.shape != raw_beyond.shape:
        raise ValueError(f"raw_train and raw_beyond must be matching 1-D arrays, got {raw_train.shape}, {raw_beyond.shape}")
    return bool(((raw_train <= train) & (raw_beyond <= beyond)).any())
