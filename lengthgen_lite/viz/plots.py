"""The book's matplotlib/seaborn figures. Chapters 1 and 2 introduce them; any chapter may use them.

Every function takes precomputed results (arrays, :class:`~lengthgen_lite.evaluation.LengthTable`
lists), draws on ``ax`` (a new figure when ``ax`` is None) and returns the axes. None of them
trains a model or computes a metric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..evaluation import LengthTable, stack_metric
from .style import PALETTE

S_LABEL = "prefix length s (tokens seen)"


def _axes(ax: Axes | None) -> Axes:
    return plt.subplots()[1] if ax is None else ax


def panels(
    ncols: int, nrows: int = 1, *, width: float = 4.8, height: float = 3.6, title: str | None = None
) -> tuple[Figure, np.ndarray]:
    """A figure of ``nrows x ncols`` panels, ``width x height`` inches each; the axes as a flat array.

    So that notebooks can put plots side by side without importing matplotlib themselves.
    """
    for name, value in (("ncols", ncols), ("nrows", nrows)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not (width > 0 and height > 0):
        raise ValueError(f"width and height must be positive inches, got {width!r} and {height!r}")
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    if title is not None:
        fig.suptitle(title)
    return fig, axes.ravel()


def _as_seed_array(values: np.ndarray, n: int, label: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    array = array[None] if array.ndim == 1 else array
    if array.ndim != 2 or array.shape[1] != n:
        raise ValueError(f"curve {label!r} must be [len(s)] or [K, len(s)] with len(s)={n}, got {array.shape}")
    return array


def shade_training_range(ax: Axes, train_length: int, label: str = "training lengths") -> Axes:
    """Shade the prefix lengths ``s = 1..train_length`` the model was trained on."""
    if not isinstance(train_length, int) or train_length < 1:
        raise ValueError(f"train_length must be a positive int, got {train_length!r}")
    ax.axvspan(0.5, train_length + 0.5, color="0.85", alpha=0.6, zorder=0, label=label)
    return ax


def plot_length_curves(
    s: np.ndarray,
    curves: Mapping[str, np.ndarray],
    *,
    ylabel: str,
    title: str,
    train_length: int | None = None,
    references: Mapping[str, np.ndarray] | None = None,
    logy: bool = False,
    ylim: tuple[float, float] | None = None,
    legend: bool = True,
    ax: Axes | None = None,
) -> Axes:
    """Per-length curves: each ``curves[label]`` is [K, len(s)] (one row per seed) or [len(s)].

    Draws the mean over seeds with markers and the min-max band over seeds; ``references`` are
    dashed comparison curves (e.g. ``log s``), ``train_length`` shades the training range.
    ``legend=False`` leaves the legend to a neighbouring panel.
    """
    s = np.asarray(s)
    if not curves:
        raise ValueError("curves must hold at least one labelled curve")
    ax = _axes(ax)
    if train_length is not None:
        shade_training_range(ax, train_length)
    seed_counts = set()  # K of each curve, for the legend's note
    for i, (label, values) in enumerate(curves.items()):
        array = _as_seed_array(values, len(s), label)
        color = PALETTE[i % len(PALETTE)]
        seed_counts.add(array.shape[0])
        ax.plot(s, array.mean(0), marker="o", markersize=4, color=color, label=label)
        if array.shape[0] > 1:
            ax.fill_between(s, array.min(0), array.max(0), color=color, alpha=0.25, linewidth=0)
    for j, (label, values) in enumerate((references or {}).items()):
        reference = _as_seed_array(values, len(s), label)[0]
        ax.plot(s, reference, linestyle=("--", ":", "-.")[j % 3], color="0.2", linewidth=1.2, label=label)
    if logy:
        ax.set_yscale("log")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set(xlabel=S_LABEL, ylabel=ylabel, title=title, xticks=s)
    if legend:
        k = max(seed_counts)
        note = f"lines: mean of {k} seeds, bands: min to max" if k > 1 else None
        ax.legend(fontsize="small", title=note, title_fontsize="small")
    return ax


def plot_metric(
    runs: Mapping[str, Sequence[LengthTable]],
    metric: str,
    *,
    ylabel: str,
    title: str,
    train_length: int | None = None,
    references: Mapping[str, np.ndarray] | None = None,
    logy: bool = False,
    ylim: tuple[float, float] | None = None,
    legend: bool = True,
    ax: Axes | None = None,
) -> Axes:
    """One :class:`LengthTable` field against ``s`` for each run (label -> one table per seed)."""
    if not runs:
        raise ValueError("runs must hold at least one labelled list of LengthTables")
    s = next(iter(runs.values()))[0].s
    curves = {label: stack_metric(tables, metric) for label, tables in runs.items()}
    return plot_length_curves(
        s,
        curves,
        ylabel=ylabel,
        title=title,
        train_length=train_length,
        references=references,
        logy=logy,
        ylim=ylim,
        legend=legend,
        ax=ax,
    )


def plot_distribution_bars(
    target: np.ndarray,
    predicted: np.ndarray | None = None,
    *,
    seen: np.ndarray | None = None,
    title: str,
    ax: Axes | None = None,
) -> Axes:
    """Next-token distributions over the ``v`` tokens: the target p* and, if given, a prediction.

    ``seen`` (bool [v]) marks the tokens already in the prefix (illegal next tokens) with an x.
    """
    target = np.asarray(target, dtype=float)
    if target.ndim != 1:
        raise ValueError(f"target must be a [v] distribution, got shape {target.shape}")
    for name, other in (("predicted", predicted), ("seen", seen)):
        if other is not None and np.shape(other) != target.shape:
            raise ValueError(f"{name} must have the target's shape {target.shape}, got {np.shape(other)}")
    ax = _axes(ax)
    tokens = np.arange(len(target))
    width = 0.8 if predicted is None else 0.4
    offset = 0.0 if predicted is None else -0.2
    ax.bar(tokens + offset, target, width=width, color=PALETTE[0], label="target p*")
    if predicted is not None:
        ax.bar(tokens + 0.2, predicted, width=width, color=PALETTE[1], label="model prediction")
    if seen is not None:
        marked = tokens[np.asarray(seen, dtype=bool)]
        ax.plot(marked, np.zeros(len(marked)), "x", color="0.1", markersize=7, label="seen (illegal)", clip_on=False)
    ax.set(xlabel="next token", ylabel="probability", title=title, xticks=tokens)
    top = max(target.max(), 0.0 if predicted is None else float(np.max(predicted)))
    ax.set_ylim(0, 1.4 * top if top > 0 else 1.0)  # headroom: the legend sits above the bars
    ax.legend(fontsize="small", loc="upper center", ncols=3)
    return ax


def plot_attention_pattern(
    pattern: np.ndarray,
    *,
    tokens: Sequence[int] | None = None,
    title: str,
    relative: bool = False,
    ax: Axes | None = None,
) -> Axes:
    """A causal attention pattern [query_pos, key_pos] as a heatmap; future keys are left blank.

    Row ``s`` (counting from 1) is the attention of the prediction made after ``s`` tokens.
    ``relative=True`` shows ``s * a`` instead, on a scale centred at 1 (= uniform over the ``s``
    seen keys), which makes small departures from uniform visible at every ``s``.
    """
    pattern = np.asarray(pattern, dtype=float)
    if pattern.ndim != 2 or pattern.shape[0] != pattern.shape[1]:
        raise ValueError(f"pattern must be a square [query_pos, key_pos] array, got shape {pattern.shape}")
    if tokens is not None and len(tokens) != pattern.shape[1]:
        raise ValueError(f"tokens must have one id per key position ({pattern.shape[1]}), got {len(tokens)}")
    ax = _axes(ax)
    n = pattern.shape[0]
    future = np.triu(np.ones((n, n), dtype=bool), k=1)
    positions = np.arange(1, n + 1)
    keys = positions if tokens is None else [f"{p}\n({t})" for p, t in zip(positions, tokens)]
    if relative:
        values, label = pattern * positions[:, None], "s x attention weight (1 = uniform)"
        spread = max(0.05, float(np.abs(values[~future] - 1).max()))
        scale = {"vmin": 1 - spread, "vmax": 1 + spread, "cmap": "RdBu_r"}  # symmetric: white = uniform
    else:
        values, label = pattern, "attention weight"
        scale = {"vmin": 0.0, "vmax": 1.0, "cmap": "viridis"}
    sns.heatmap(
        values,
        mask=future,
        square=True,
        xticklabels=keys,
        yticklabels=positions,
        cbar_kws={"label": label, "shrink": 0.8},
        ax=ax,
        **scale,
    )
    xlabel = "key position" if tokens is None else "key position (token id)"
    ax.grid(False)
    ax.set(xlabel=xlabel, ylabel="query = prefix length s", title=title)
    ax.tick_params(axis="x", labelsize="x-small", rotation=0)
    ax.tick_params(axis="y", labelsize="small", rotation=0)
    return ax


def plot_training_loss(
    loss: np.ndarray,
    *,
    seeds: Sequence[int] | None = None,
    floor: float | None = None,
    title: str,
    ax: Axes | None = None,
) -> Axes:
    """Training loss per step, one line per seed ([steps, K], as in ``TrainResult.loss``).

    ``floor`` draws the lowest reachable loss (the mean entropy of the targets) as a dashed line.
    """
    loss = np.asarray(loss, dtype=float)
    if loss.ndim != 2:
        raise ValueError(f"loss must be [steps, K], got shape {loss.shape}")
    seeds = list(range(loss.shape[1])) if seeds is None else list(seeds)
    if len(seeds) != loss.shape[1]:
        raise ValueError(f"seeds must name the {loss.shape[1]} columns of loss, got {seeds!r}")
    ax = _axes(ax)
    steps = np.arange(1, loss.shape[0] + 1)
    for k, seed in enumerate(seeds):
        ax.plot(steps, loss[:, k], linewidth=0.8, color=PALETTE[k % len(PALETTE)], label=f"seed {seed}")
    if floor is not None:
        ax.axhline(floor, linestyle="--", color="0.2", linewidth=1.2, label="floor: mean entropy of p*")
    ax.set(xlabel="training step", ylabel="cross-entropy (nats)", title=title)
    ax.legend(fontsize="small", ncols=2)
    return ax
