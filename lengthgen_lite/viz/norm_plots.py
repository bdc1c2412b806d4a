"""Chapter 5's table and slider: norm placements on set complement.

Plotting only: the numbers come from :mod:`lengthgen_lite.placements` (tidy rows, gap profiles)
and :func:`lengthgen_lite.theory.prefix_profile` (one model on one sequence at every length).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from matplotlib.axes import Axes
from plotly.subplots import make_subplots

from ..placements import PLACEMENTS
from ..theory import PrefixProfile
from .plots import S_LABEL, shade_training_range
from .sliders import SliderFigure, live_slider, static_slider_figure
from .style import PALETTE

PLACEMENT_COLORS = {norm: PALETTE[i] for i, norm in enumerate(PLACEMENTS)}  # one colour per placement, every figure

COLUMN_LABELS = {
    "tv_train": "TV, s = 1..4",
    "tv_beyond": "TV, s = 5..15",
    "invalid_beyond": "invalid mass, s = 5..15",
    "tv_longest": "TV, s = 15",
    "gap_first": "gap, s = 1",
    "gap_longest": "gap, s = 15",
}


def placement_table(
    rows: Sequence[Mapping[str, object]],
    *,
    columns: Sequence[str] = ("tv_train", "tv_beyond", "invalid_beyond"),
    by: Sequence[str] = ("targets", "norm"),
    digits: int = 3,
) -> pd.DataFrame:
    """Mean over seeds with the [min, max] range, one row per configuration, as rounded strings.

    ``rows`` are :func:`lengthgen_lite.placements.summary_rows`; the configuration order is kept.
    """
    if not rows:
        raise ValueError("rows must hold at least one row (see placements.summary_rows)")
    frame = pd.DataFrame(list(rows))
    missing = [name for name in [*by, *columns] if name not in frame]
    if missing:
        raise ValueError(f"rows lack the columns {missing}; they have {list(frame.columns)}")
    grouped = frame.groupby(list(by), sort=False)[list(columns)]
    mean, low, high = grouped.mean(), grouped.min(), grouped.max()
    table = pd.DataFrame(index=mean.index)
    for column in columns:
        table[COLUMN_LABELS.get(column, column)] = [
            f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
            for m, lo, hi in zip(mean[column], low[column], high[column])
        ]
    table["seeds"] = grouped.size().to_numpy()
    return table


def plot_placement_curves(
    s: np.ndarray,
    curves: Mapping[str, np.ndarray],
    *,
    ylabel: str,
    title: str,
    train_length: int | None = None,
    references: Mapping[str, np.ndarray] | None = None,
    logy: bool = False,
    ylim: tuple[float, float] | None = None,
    legend: str | None = "best",
    suffix: str = "",
    ax: Axes | None = None,
) -> Axes:
    """Per-length curves keyed by placement ([K, len(s)] per placement: mean line, min-max band),
    each in its placement's colour whichever placements are drawn; ``suffix`` is added to the labels.

    ``references`` are dashed comparison curves; ``legend`` is a matplotlib location or None.
    """
    s = np.asarray(s)
    if not curves:
        raise ValueError("curves must hold at least one placement")
    if unknown := set(curves) - set(PLACEMENT_COLORS):
        raise ValueError(f"curves must be keyed by placement {PLACEMENTS}, got {sorted(unknown)}")
    ax = plt.subplots()[1] if ax is None else ax
    if train_length is not None:
        shade_training_range(ax, train_length)
    for norm, values in curves.items():
        array = np.atleast_2d(np.asarray(values, dtype=float))
        if array.shape[1] != len(s):
            raise ValueError(f"curve {norm!r} must be [len(s)] or [K, len(s)] with len(s)={len(s)}, got {array.shape}")
        color = PLACEMENT_COLORS[norm]
        ax.plot(s, array.mean(0), marker="o", markersize=4, color=color, label=f"{norm}{suffix}")
        if array.shape[0] > 1:
            ax.fill_between(s, array.min(0), array.max(0), color=color, alpha=0.25, linewidth=0)
    for j, (label, values) in enumerate((references or {}).items()):
        ax.plot(s, np.asarray(values, dtype=float), linestyle=("--", ":", "-.")[j % 3], color="0.2", linewidth=1.2,
                label=label)
    if logy:
        ax.set_yscale("log")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set(xlabel=S_LABEL, ylabel=ylabel, title=title, xticks=s)
    if legend is not None:
        k = max(np.atleast_2d(np.asarray(v)).shape[0] for v in curves.values())
        note = f"lines: mean of {k} seeds, bands: min to max" if k > 1 else None
        ax.legend(fontsize="small", title=note, title_fontsize="small", loc=legend)
    return ax


def placement_draw(profiles: Mapping[str, PrefixProfile], *, train_length: int) -> Callable[..., go.Figure]:
    """``draw(norm, s)``: one sequence's prediction against p* after ``s`` tokens, and the logit gap
    of every placement on that sequence against ``s`` (the chosen one drawn bold).

    ``profiles`` maps a placement name to :func:`~lengthgen_lite.theory.prefix_profile` of one
    trained model on one shared sequence. Every frame has the same traces, so a static slider
    only swaps data; the gap axis is fixed, the probability axis rescales.
    """
    if not profiles:
        raise ValueError("profiles must hold at least one placement")
    first = next(iter(profiles.values()))
    lengths, v = first.s, first.probs.shape[-1]
    if any(not np.array_equal(p.s, lengths) for p in profiles.values()):
        raise ValueError("profiles must share the same prefix lengths s")
    colors = {norm: PLACEMENT_COLORS.get(norm, PALETTE[i % len(PALETTE)]) for i, norm in enumerate(profiles)}
    gaps = np.stack([p.margin for p in profiles.values()])
    pad = 0.08 * float(gaps.max() - min(gaps.min(), 0.0))
    gap_range = [min(float(gaps.min()), 0.0) - pad, float(gaps.max()) + pad]

    def draw(norm: str, s: int) -> go.Figure:
        if norm not in profiles or not 1 <= s <= len(lengths):
            raise ValueError(f"need norm in {list(profiles)} and 1 <= s <= {len(lengths)}, got {norm!r}, {s!r}")
        profile = profiles[norm]
        seen = profile.targets[s - 1] == 0
        fig = make_subplots(
            rows=1,
            cols=2,
            column_widths=[0.55, 0.45],
            subplot_titles=("next-token distribution on one sequence", "logit gap on that sequence"),
        )
        tokens = np.arange(v)
        fig.add_trace(go.Bar(x=tokens, y=profile.targets[s - 1], marker_color="#999", name="target p*"), row=1, col=1)
        fig.add_trace(
            go.Bar(x=tokens, y=profile.probs[s - 1], marker_color=colors[norm], name="model prediction"), row=1, col=1
        )
        fig.add_trace(
            go.Scatter(x=tokens[seen], y=np.zeros(int(seen.sum())), mode="markers", name="seen (illegal)",
                       marker={"symbol": "x", "color": "#222", "size": 8}),
            row=1,
            col=1,
        )
        for name, other in profiles.items():
            chosen = name == norm
            fig.add_trace(
                go.Scatter(x=lengths, y=other.margin, mode="lines+markers", name=f"gap, norm={name}",
                           line={"color": colors[name], "width": 4 if chosen else 1.5},
                           marker={"size": 7 if chosen else 4}, opacity=1.0 if chosen else 0.45),
                row=1,
                col=2,
            )
        note = f"norm={norm}, s={s}: gap {profile.margin[s - 1]:.2f}, TV {profile.tv[s - 1]:.3f}"
        fig.add_trace(
            go.Scatter(x=[s], y=[profile.margin[s - 1]], mode="markers+text", text=[note],
                       textposition="top center" if s < len(lengths) - 3 else "top left",
                       marker={"size": 13, "color": colors[norm], "symbol": "circle-open", "line": {"width": 3}},
                       name="this s", textfont={"size": 12}),
            row=1,
            col=2,
        )
        fig.update_layout(
            barmode="group",
            height=520,
            margin={"t": 140},
            title={"text": "Prediction and logit gap by norm placement", "y": 0.98},
            legend={"orientation": "h", "x": 0, "y": 1.14, "yanchor": "bottom", "font": {"size": 11}},
            shapes=[{"type": "rect", "xref": "x2", "yref": "y2 domain", "x0": 0.5, "x1": train_length + 0.5,
                     "y0": 0, "y1": 1, "fillcolor": "#ccc", "opacity": 0.4, "line": {"width": 0}, "layer": "below"}],
        )
        fig.update_xaxes(title_text="next token", range=[-0.6, v - 0.4], dtick=1, row=1, col=1)
        fig.update_yaxes(title_text="probability", rangemode="tozero", row=1, col=1)
        fig.update_xaxes(title_text=f"prefix length s (grey: trained, 1-{train_length})",
                         range=[0.5, len(lengths) + 0.5], dtick=1, row=1, col=2)
        fig.update_yaxes(title_text="logit gap (min legal - max illegal)", range=gap_range, row=1, col=2)
        return fig

    return draw


def placement_static_slider(profiles: Mapping[str, PrefixProfile], *, train_length: int, name: str) -> SliderFigure:
    """The static (no-kernel) slider over every (norm, s), labelled ``norm=post, s=3``."""
    draw = placement_draw(profiles, train_length=train_length)
    return static_slider_figure(draw, {"norm": list(profiles), "s": [int(s) for s in next(iter(profiles.values())).s]},
                                name=name)


def placement_live_slider(profiles: Mapping[str, PrefixProfile], *, train_length: int):
    """The live (ipywidgets) version: one slider for the placement, one for s."""
    draw = placement_draw(profiles, train_length=train_length)
    return live_slider(draw, {"norm": list(profiles), "s": [int(s) for s in next(iter(profiles.values())).s]})
