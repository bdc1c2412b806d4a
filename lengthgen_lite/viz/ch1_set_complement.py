"""Chapter 1's figures: next-token distributions against p*, and training-loss curves.

Per-length curves (:func:`~lengthgen_lite.viz.common.plot_metric`) are shared by every
chapter and live in :mod:`.common`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes

from ..core.evaluation import LengthTable
from .common import ensure_axes, panels, plot_metric
from .style import PALETTE


def plot_distribution_bars(
    target: np.ndarray,
    predicted: np.ndarray | None = None,
    *,
    seen: np.ndarray | None = None,
    title: str,
    ax: Axes | None = None,
) -> Axes:
    """Next-token distributions over the ``v`` tokens: the target p* and, if given, a
    prediction.

    ``seen`` (bool [v]) marks the tokens already in the prefix (illegal next tokens)
    with an x.
    """
    target = np.asarray(target, dtype=float)
    if target.ndim != 1:
        raise ValueError(f"target must be a [v] distribution, got shape {target.shape}")
    for name, other in (("predicted", predicted), ("seen", seen)):
        if other is not None and np.shape(other) != target.shape:
            raise ValueError(
                f"{name} must have the target's shape {target.shape}, got "
                f"{np.shape(other)}"
            )
    ax = ensure_axes(ax)
    tokens = np.arange(len(target))
    width = 0.8 if predicted is None else 0.4
    offset = 0.0 if predicted is None else -0.2
    ax.bar(tokens + offset, target, width=width, color=PALETTE[0], label="target p*")
    if predicted is not None:
        ax.bar(
            tokens + 0.2,
            predicted,
            width=width,
            color=PALETTE[1],
            label="model prediction",
        )
    if seen is not None:
        marked = tokens[np.asarray(seen, dtype=bool)]
        ax.plot(
            marked,
            np.zeros(len(marked)),
            "x",
            color="0.1",
            markersize=7,
            label="seen (illegal)",
            clip_on=False,
        )
    ax.set(xlabel="next token", ylabel="probability", title=title, xticks=tokens)
    top = max(target.max(), 0.0 if predicted is None else float(np.max(predicted)))
    # headroom: the legend sits above the bars
    ax.set_ylim(0, 1.4 * top if top > 0 else 1.0)
    ax.legend(fontsize="small", loc="upper center", ncols=3)
    return ax


def plot_training_loss(
    loss: np.ndarray,
    *,
    seeds: Sequence[int] | None = None,
    floor: float | None = None,
    title: str,
    ax: Axes | None = None,
) -> Axes:
    """Training loss per step, one line per seed ([steps, K], as in
    ``TrainResult.loss``).

    ``floor`` draws the lowest reachable loss (the mean entropy of the targets) as a
    dashed line.
    """
    loss = np.asarray(loss, dtype=float)
    if loss.ndim != 2:
        raise ValueError(f"loss must be [steps, K], got shape {loss.shape}")
    seeds = list(range(loss.shape[1])) if seeds is None else list(seeds)
    if len(seeds) != loss.shape[1]:
        raise ValueError(
            f"seeds must name the {loss.shape[1]} columns of loss, got {seeds!r}"
        )
    ax = ensure_axes(ax)
    steps = np.arange(1, loss.shape[0] + 1)
    for k, seed in enumerate(seeds):
        ax.plot(
            steps,
            loss[:, k],
            linewidth=0.8,
            color=PALETTE[k % len(PALETTE)],
            label=f"seed {seed}",
        )
    if floor is not None:
        ax.axhline(
            floor,
            linestyle="--",
            color="0.2",
            linewidth=1.2,
            label="floor: mean entropy of p*",
        )
    ax.set(xlabel="training step", ylabel="cross-entropy (nats)", title=title)
    ax.legend(fontsize="small", ncols=2)
    return ax


# metric, y label, panel title: the four panels of chapter 1's first per-length figure
LENGTH_PANELS = (
    ("tv", "TV to p*", "Total variation"),
    ("invalid_mass", "probability of seen tokens", "Invalid mass"),
    ("kl", "KL(p* || p) (nats)", "KL divergence"),
    ("top1_legal", "fraction of sequences", "Top-1 accuracy (argmax legal)"),
)


def plot_length_panels(
    runs: Mapping[str, Sequence[LengthTable]], train_length: int, title: str
) -> list[Axes]:
    """TV, invalid mass, KL and top-1 accuracy against ``s`` (2 x 2 panels), one seed
    band per run (label -> one table per seed)."""
    _, axes = panels(2, 2, width=5.2, height=3.6, title=title)
    for ax, (metric, ylabel, panel_title) in zip(axes, LENGTH_PANELS):
        ylim = (0.0, 1.05) if metric == "top1_legal" else None
        plot_metric(
            runs,
            metric,
            ylabel=ylabel,
            title=panel_title,
            train_length=train_length,
            ylim=ylim,
            ax=ax,
        )
    return list(axes)
