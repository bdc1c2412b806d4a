"""Chapter 4's figures of the pretrained models: SmolLM2's layers (per-layer slopes, the
heatmap, the sink scatter) and MiniLM's layer 0, each against the set size N.

Every function takes precomputed arrays and draws; none loads a model or measures (that
is :mod:`~lengthgen_lite.chapters.ch4_llama` and
:mod:`~lengthgen_lite.chapters.ch4_pretrained`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..chapters import ch4_llama as llama
from .common import ensure_axes, panels, plot_loglog_std
from .style import PALETTE

LAYER_LABEL = "layer (0 = first)"


def plot_layer_slopes(
    N: Sequence[int],
    bands: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    *,
    title: str,
    ylabel: str = "log-log slope of std against N",
    reference: float | None = -0.5,
    ax: Axes | None = None,
) -> Axes:
    """One point per layer with its band, one series per label: ``bands[label] = (slope,
    low, high)``, each [layers]. Series sit side by side within a layer; ``reference``
    draws the law's slope."""
    if not bands:
        raise ValueError(
            "bands must hold at least one labelled (slope, low, high) triple"
        )
    ax = ensure_axes(ax)
    width = 0.6 / len(bands)
    for i, (label, (slope, low, high)) in enumerate(bands.items()):
        layers = np.arange(len(slope)) + (i - (len(bands) - 1) / 2) * width
        ax.errorbar(
            layers,
            slope,
            yerr=[slope - low, high - slope],
            fmt="o",
            markersize=3,
            capsize=0,
            color=PALETTE[i % len(PALETTE)],
            label=label,
        )
    ax.axhline(0.0, color="0.4", linewidth=0.8)
    if reference is not None:
        ax.axhline(
            reference,
            color="0.2",
            linestyle=":",
            linewidth=1.2,
            label=f"law: {reference:g}",
        )
    ax.set(xlabel=LAYER_LABEL, ylabel=ylabel, title=f"{title} (N = {N[0]}..{N[-1]})")
    ax.legend(fontsize="small")
    return ax


def plot_layer_heatmap(
    N: Sequence[int],
    values: np.ndarray,
    *,
    title: str,
    colorbar: str,
    ax: Axes | None = None,
) -> Axes:
    """``values`` [layers, len(N)] as an image: layers down, N across (one column per
    N)."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.shape[1] != len(N):
        raise ValueError(
            f"values must be [layers, len(N) = {len(N)}], got {values.shape}"
        )
    ax = ensure_axes(ax)
    image = ax.imshow(
        values,
        aspect="auto",
        cmap="viridis",
        vmin=0.0,
        vmax=max(float(values.max()), 1e-9),
    )
    ax.figure.colorbar(image, ax=ax, label=colorbar)
    ax.set_xticks(range(len(N)), [str(n) for n in N])
    ax.set(xlabel="sequence length N (tokens)", ylabel=LAYER_LABEL, title=title)
    return ax


def plot_slope_against_sink(
    sink: Mapping[str, np.ndarray],
    slopes: Mapping[str, np.ndarray],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    ax: Axes | None = None,
) -> Axes:
    """One point per layer (its index written beside it): attention-sink mass against
    the layer's slope."""
    if set(sink) != set(slopes) or not sink:
        raise ValueError(
            "sink and slopes need the same non-empty labels, got "
            f"{sorted(sink)} and {sorted(slopes)}"
        )
    ax = ensure_axes(ax)
    for i, label in enumerate(sink):
        ax.scatter(
            sink[label],
            slopes[label],
            s=14,
            color=PALETTE[i % len(PALETTE)],
            label=label,
        )
        for layer, (x, y) in enumerate(zip(sink[label], slopes[label])):
            ax.annotate(
                str(layer),
                (x, y),
                textcoords="offset points",
                xytext=(3, 2),
                fontsize="xx-small",
            )
    ax.axhline(0.0, color="0.4", linewidth=0.8)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize="small")
    return ax


def llama_layer0_figure(
    sizes: Sequence[int], records: Mapping[str, Any], n_sequences: int
) -> Figure:
    """SmolLM2's first layer: per-feature and global std after W_O, per input kind
    (``records``: core.pretrained.LastPositionRecord)."""
    fig, axes = panels(
        2,
        width=5.6,
        height=4.2,
        title="SmolLM2-135M, first layer (layer 0): attention output at the last "
        "position",
    )
    for ax, (kind, record) in zip(axes, records.items()):
        curves = llama.spread_curves(record.after_o_proj)
        plot_loglog_std(
            sizes,
            {
                "per feature: o_0": curves["feature o_0"][0],
                "per feature: median of 576": curves["feature (median)"][0],
                "global (across components)": curves["global"][0],
            },
            title=f"{kind} ({n_sequences} sequences)",
            ylabel="std after W_O (output units)",
            xlabel="sequence length N (tokens attended)",
            ax=ax,
        )
    return fig


def llama_slopes_figure(
    sizes: Sequence[int], bands: Mapping[tuple[str, str], Any], kinds: Sequence[str]
) -> Figure:
    """Every layer's log-log slope with its bootstrap band, after and before W_O, per
    input kind (``bands[kind, where]``: ch4_llama.SlopeBands)."""
    fig, axes = panels(
        2,
        nrows=2,
        width=6.4,
        height=3.6,
        title="SmolLM2-135M: log-log slope of the attention output's spread, every "
        "layer (95 % bootstrap bands)",
    )
    for row, where in enumerate(("after_o_proj", "before_o_proj")):
        for col, kind in enumerate(kinds):
            band = bands[(kind, where)]
            plot_layer_slopes(
                sizes,
                {
                    label: (band.point[k], band.low[k], band.high[k])
                    for label, k in (
                        ("per feature (median)", "feature (median)"),
                        ("global", "global"),
                    )
                },
                title=f"{kind}, {'after' if where == 'after_o_proj' else 'before'} W_O",
                ax=axes[2 * row + col],
            )
    return fig


def sink_figure(
    sizes: Sequence[int],
    sinks: Mapping[str, np.ndarray],
    bands: Mapping[tuple[str, str], Any],
) -> Figure:
    """The attention sink per layer and N for each input kind, and each layer's sink
    against its slope."""
    fig, axes = panels(
        3,
        width=4.9,
        height=4.4,
        title="Attention sink: the last query's weight on position 0 (BOS), mean over "
        "heads and sequences",
    )
    for ax, (kind, sink) in zip(axes, sinks.items()):
        plot_layer_heatmap(
            sizes, sink, title=kind, colorbar="attention on position 0", ax=ax
        )
    plot_slope_against_sink(
        {kind: sink[:, -1] for kind, sink in sinks.items()},
        {
            kind: bands[(kind, "after_o_proj")].point["feature (median)"]
            for kind in sinks
        },
        title="Each layer: sink at N = 512 vs its slope",
        xlabel="attention on position 0 at N = 512",
        ylabel="slope of per-feature std (after W_O)",
        ax=axes[2],
    )
    return fig


MINILM_TITLES = {
    1: "position 1 (an ordinary token)",
    0: "position 0 ([CLS])",
    "middle": "middle position N/2",
}


def minilm_figure(
    sizes: Sequence[int], curves: Mapping[Any, Mapping[str, np.ndarray]]
) -> Figure:
    """MiniLM against its random-init copy: the median and o_0 std per position
    (``curves[position]``, ch4_pretrained.minilm_curves)."""
    fig, axes = panels(
        3,
        width=4.8,
        height=4.2,
        title="MiniLM (BERT, Post-LN, absolute positions), random-token inputs: "
        "layer-0 attention output",
    )
    labels = [f"{n}, {c}" for n in ("MiniLM", "random init") for c in ("median", "o_0")]
    styles = {label: "-" if label.endswith("median") else "--" for label in labels}
    colors = {
        label: PALETTE[0 if label.startswith("MiniLM") else 1] for label in labels
    }
    for ax, (position, lines) in zip(axes, curves.items()):
        plot_loglog_std(
            sizes,
            lines,
            title=MINILM_TITLES[position],
            ylabel="std across 128 sequences (after W_O)",
            xlabel="sequence length N (tokens attended)",
            linestyles=styles,
            colors=colors,
            reference=False,
            ax=ax,
        )
    return fig
