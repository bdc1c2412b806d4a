"""Chapter 5's table and slider: norm placements on set complement.

Plotting only: the numbers come from :mod:`lengthgen_lite.chapters.ch5_post_norm` (tidy
rows, gap profiles) and :func:`lengthgen_lite.core.evaluation.prefix_profile` (one model
on one sequence at every length).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from plotly.subplots import make_subplots

from ..chapters.ch5_mechanism import OUTPUT_NORM, GapProfile, stack_profile
from ..chapters.ch5_post_norm import (
    PLACEMENTS,
    TARGETS,
    Results,
    curves,
    divisor_laws,
    dropout_curves,
    relative,
)
from ..core.evaluation import PrefixProfile
from .common import panels, plot_length_curves, plot_tv_and_invalid_mass, rows_frame
from .sliders import (
    SliderFigure,
    live_slider,
    static_slider_figure,
    training_band,
)
from .style import PALETTE

# One colour per placement, every figure. Post is near-black: the palette's vermillion
# and orange (pre) look alike, most of all to a red-green colour-blind reader.
PLACEMENT_COLORS = {
    "none": PALETTE[0],
    "pre": PALETTE[1],
    "pre_final": PALETTE[2],
    "post": "#222222",
    "attn_out": PALETTE[4],
}

COLUMN_LABELS = {
    "tv_train": "TV, s = 1..4",
    "tv_beyond": "TV, s = 5..15",
    "invalid_beyond": "invalid mass, s = 5..15",
    # the name in a runs.Results summary
    "invalid_mass_beyond": "invalid mass, s = 5..15",
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
    """Mean over seeds with the [min, max] range, one row per configuration, as rounded
    strings.

    ``rows`` are a ``Results.summary(...)`` (or ``ch5.dropout_rows``); the configuration
    order is kept.
    """
    frame = rows_frame(rows, [*by, *columns], source="Results.summary")
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
    legend: str | None = "best",
    suffix: str = "",
    **kwargs: Any,
) -> Axes:
    """Per-length curves keyed by placement ([K, len(s)] per placement: mean line,
    min-max band), each in its placement's colour whichever placements are drawn;
    ``suffix`` is added to the labels.

    ``legend`` is a matplotlib location, "below" (under the figure) or None;
    ``kwargs`` (``ylabel``, ``title``, ``train_length``, ``references``, ``logy``,
    ``ylim``, ``ax``) go to
    :func:`~lengthgen_lite.viz.common.plot_length_curves`.
    """
    if not curves:
        raise ValueError("curves must hold at least one placement")
    if unknown := set(curves) - set(PLACEMENT_COLORS):
        raise ValueError(
            f"curves must be keyed by placement {PLACEMENTS}, got {sorted(unknown)}"
        )
    labels = {norm: f"{norm}{suffix}" for norm in curves}
    return plot_length_curves(
        s,
        curves,
        colors=PLACEMENT_COLORS,
        labels=labels,
        legend=legend or False,
        **kwargs,
    )


Profiles = Mapping[tuple[str, str], Sequence[GapProfile]]


def plot_placement_metrics(
    results: Results, *, train_length: int, title: str
) -> Figure:
    """TV to p* (top row) and invalid mass (bottom row) by prefix length, one column
    per target kind, every placement: mean over seeds with the min-max band."""
    return plot_tv_and_invalid_mass(
        results.lengths(),
        partial(curves, results),
        TARGETS,
        tv_label="TV to p* (0 = perfect)",
        train_length=train_length,
        title=title,
        plot=plot_placement_curves,
        legend="below",
    )


def plot_gap_growth(profiles: Profiles, *, train_length: int, title: str) -> Figure:
    """s x logit gap by prefix length (log scale; flat = the 1/s law), one panel per
    target kind, every placement."""
    fig, axes = panels(2, width=5.8, height=4.2, title=title)
    for ax, targets in zip(axes, TARGETS):
        s = profiles[(targets, PLACEMENTS[0])][0].s
        plot_placement_curves(
            s,
            {n: s * stack_profile(profiles[(targets, n)], "gap") for n in PLACEMENTS},
            ylabel="s x logit gap (logit units, log scale)",
            title=f"{targets} targets",
            train_length=train_length,
            logy=True,
            ax=ax,
            legend="below" if targets == "soft" else None,
        )
    return fig


def plot_soft_mechanism(profiles: Profiles, *, train_length: int, title: str) -> Figure:
    """Soft targets, every placement: attention entropy / log s, s x the largest
    attention weight, and s x gap with the output norm's divisor frozen (none and pre
    have no output norm: their frozen gap is their gap)."""
    soft = {norm: profiles[("soft", norm)] for norm in PLACEMENTS}
    s = soft[PLACEMENTS[0]][0].s
    panel_specs = (
        (
            {n: stack_profile(p, "entropy_ratio") for n, p in soft.items()},
            "attention entropy / log s",
            "Attention entropy (1 = uniform)",
            (0.8, 1.02),
            "below",
        ),
        (
            {n: stack_profile(p, "max_attention_ratio") for n, p in soft.items()},
            "s x largest attention weight",
            "Largest weight (1 = uniform, s = one-hot)",
            (0.9, 2.0),
            None,
        ),
        (
            {n: s * stack_profile(p, "frozen_gap") for n, p in soft.items()},
            "s x logit gap (logit units)",
            "s x gap, the output norm's divisor frozen",
            (0, 40),
            None,
        ),
    )
    fig, axes = panels(3, width=4.6, height=4.0, title=title)
    for ax, (values, ylabel, panel_title, ylim, legend) in zip(axes, panel_specs):
        plot_placement_curves(
            s,
            values,
            ylabel=ylabel,
            title=panel_title,
            train_length=train_length,
            ylim=ylim,
            ax=ax,
            legend=legend,
        )
    return fig


def plot_divisor_law(profiles: Profiles, *, train_length: int, title: str) -> Figure:
    """Soft targets: each output norm's divisor relative to s = 1 against chapter 3's
    spread law, and the logit gap relative to s = 1 against chapter 3's LN gap and 1/s
    (log scale)."""
    s = profiles[("soft", "none")][0].s
    gap_law, spread_law = divisor_laws(int(s[-1]) + 1)
    fig, axes = panels(2, width=5.8, height=4.2, title=title)
    plot_placement_curves(
        s,
        {n: relative(profiles, "soft", n, "divisor") for n in OUTPUT_NORM},
        ylabel="divisor(s) / divisor(1)",
        title="The output norm's divisor",
        train_length=train_length,
        references={"chapter 3: sqrt((v-s)/(s(v-1)))": spread_law},
        legend=None,
        ax=axes[0],
    )
    plot_placement_curves(
        s,
        {n: relative(profiles, "soft", n, "gap") for n in ("none", *OUTPUT_NORM)},
        ylabel="gap(s) / gap(1) (log scale)",
        title="The logit gap",
        train_length=train_length,
        references={
            "chapter 3 with LN: v / sqrt(s(v-s))": gap_law / gap_law[0],
            "1/s": 1 / s,
        },
        logy=True,
        ylim=(0.04, 1.5),
        legend="below",  # with the first panel's entries
        ax=axes[1],
    )
    return fig


def plot_dropout(
    placements: Results, dropout: Results, *, train_length: int, title: str
) -> Figure:
    """TV to p* by prefix length of the model without a norm, without dropout and with
    each dropout setting, one panel per target kind."""
    s = placements.lengths()
    fig, axes = panels(2, width=5.8, height=4.0, title=title)
    for ax, targets in zip(axes, TARGETS):
        plot_length_curves(
            s,
            dropout_curves(placements, dropout, targets),
            ylabel="TV to p* (0 = perfect)",
            title=f"TV, {targets} targets",
            train_length=train_length,
            ylim=(0, 1),
            ax=ax,
            legend="below" if targets == TARGETS[0] else False,
        )
    return fig


def placement_draw(
    profiles: Mapping[str, PrefixProfile], *, train_length: int
) -> Callable[..., go.Figure]:
    """``draw(norm, s)``: one sequence's prediction against p* after ``s`` tokens, and
    the logit gap of every placement on that sequence against ``s`` (the chosen one
    drawn bold).

    ``profiles`` maps a placement name to
    :func:`~lengthgen_lite.core.evaluation.prefix_profile` of one trained model on one
    shared sequence. Every frame has the same traces, so a static slider only swaps
    data; the gap axis is fixed, the probability axis rescales.
    """
    if not profiles:
        raise ValueError("profiles must hold at least one placement")
    first = next(iter(profiles.values()))
    lengths, v = first.s, first.probs.shape[-1]
    if any(not np.array_equal(p.s, lengths) for p in profiles.values()):
        raise ValueError("profiles must share the same prefix lengths s")
    colors = {
        norm: PLACEMENT_COLORS.get(norm, PALETTE[i % len(PALETTE)])
        for i, norm in enumerate(profiles)
    }
    gaps = np.stack([p.margin for p in profiles.values()])
    pad = 0.08 * float(gaps.max() - min(gaps.min(), 0.0))
    gap_range = [min(float(gaps.min()), 0.0) - pad, float(gaps.max()) + pad]

    def draw(norm: str, s: int) -> go.Figure:
        if norm not in profiles or not 1 <= s <= len(lengths):
            raise ValueError(
                f"need norm in {list(profiles)} and 1 <= s <= {len(lengths)}, "
                f"got {norm!r}, {s!r}"
            )
        profile = profiles[norm]
        seen = profile.targets[s - 1] == 0
        fig = make_subplots(
            rows=1,
            cols=2,
            column_widths=[0.55, 0.45],
            subplot_titles=(
                "next-token distribution on one sequence",
                "logit gap on that sequence",
            ),
        )
        tokens = np.arange(v)
        fig.add_trace(
            go.Bar(
                x=tokens,
                y=profile.targets[s - 1],
                marker_color="#999",
                name="target p*",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Bar(
                x=tokens,
                y=profile.probs[s - 1],
                marker_color=colors[norm],
                name="model prediction",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=tokens[seen],
                y=np.zeros(int(seen.sum())),
                mode="markers",
                name="seen (illegal)",
                marker={"symbol": "x", "color": "#222", "size": 8},
            ),
            row=1,
            col=1,
        )
        for name, other in profiles.items():
            chosen = name == norm
            fig.add_trace(
                go.Scatter(
                    x=lengths,
                    y=other.margin,
                    mode="lines+markers",
                    name=f"gap, norm={name}",
                    line={"color": colors[name], "width": 4 if chosen else 1.5},
                    marker={"size": 7 if chosen else 4},
                    opacity=1.0 if chosen else 0.45,
                ),
                row=1,
                col=2,
            )
        note = (
            f"norm={norm}, s={s}: gap {profile.margin[s - 1]:.2f}, TV "
            f"{profile.tv[s - 1]:.3f}"
        )
        fig.add_trace(
            go.Scatter(
                x=[s],
                y=[profile.margin[s - 1]],
                mode="markers+text",
                text=[note],
                textposition="top center" if s < len(lengths) - 3 else "top left",
                marker={
                    "size": 13,
                    "color": colors[norm],
                    "symbol": "circle-open",
                    "line": {"width": 3},
                },
                name="this s",
                textfont={"size": 12},
            ),
            row=1,
            col=2,
        )
        fig.update_layout(
            barmode="group",
            height=520,
            margin={"t": 140},
            title={"text": "Prediction and logit gap by norm placement", "y": 0.98},
            legend={
                "orientation": "h",
                "x": 0,
                "y": 1.14,
                "yanchor": "bottom",
                "font": {"size": 11},
            },
            shapes=[training_band("x2", train_length)],
        )
        fig.update_xaxes(
            title_text="next token", range=[-0.6, v - 0.4], dtick=1, row=1, col=1
        )
        fig.update_yaxes(title_text="probability", rangemode="tozero", row=1, col=1)
        fig.update_xaxes(
            title_text=f"prefix length s (grey: trained, 1-{train_length})",
            range=[0.5, len(lengths) + 0.5],
            dtick=1,
            row=1,
            col=2,
        )
        fig.update_yaxes(
            title_text="logit gap (min legal - max illegal)",
            range=gap_range,
            row=1,
            col=2,
        )
        return fig

    return draw


def placement_static_slider(
    profiles: Mapping[str, PrefixProfile], *, train_length: int, name: str
) -> SliderFigure:
    """The static (no-kernel) slider over every (norm, s): a drop-down for the
    placement, a range for s."""
    draw = placement_draw(profiles, train_length=train_length)
    return static_slider_figure(
        draw,
        {
            "norm": list(profiles),
            "s": [int(s) for s in next(iter(profiles.values())).s],
        },
        name=name,
    )


def placement_live_slider(profiles: Mapping[str, PrefixProfile], *, train_length: int):
    """The live (ipywidgets) version: one slider for the placement, one for s."""
    draw = placement_draw(profiles, train_length=train_length)
    return live_slider(
        draw,
        {
            "norm": list(profiles),
            "s": [int(s) for s in next(iter(profiles.values())).s],
        },
    )
