"""Chapter 8's figures and its slider: two kinds of dispersion.

Plotting only: the numbers come from :mod:`lengthgen_lite.chapters.ch8_two_kinds`
(part A, B and C's curves, the test-time factor),
:mod:`lengthgen_lite.chapters.ch8_mechanism` (the proof's margins, the slider's
profiles) and :mod:`lengthgen_lite.chapters.ch8_smollm2` (part D's losses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import plotly.graph_objects as go
from matplotlib.figure import Figure
from plotly.subplots import make_subplots

from ..chapters.ch8_mechanism import OUTPUT_NORMS, SCALINGS, GapProfile, MarginTable
from ..chapters.ch8_smollm2 import (
    CONDITIONS,
    INPUTS,
    LOSS_SESOI,
    CausalTest,
    loss_effect,
)
from ..chapters.ch8_two_kinds import (
    DEPTH_VARIANTS,
    POSITIONS,
    RETRIEVAL_TASKS,
    SET_VARIANTS,
    TARGETS,
    Results,
    depth_curves,
    retrieval_curves,
    set_curves,
)
from .common import panels, plain_log_ticks, plot_curves, plot_length_curves
from .sliders import SliderFigure, static_slider_figure, training_band
from .style import PALETTE

N_LABEL = "set size N (log scale)"
# one colour per variant, the same in every figure
COLORS = {
    name: PALETTE[i]
    for i, name in enumerate([*SET_VARIANTS, "LN", "ssmax+LN", "none x log N"])
}
COLORS["LN"], COLORS["ssmax+LN"] = COLORS["attn_out"], COLORS["ssmax+attn_out"]
DASHED = {name: "--" for name in ("ssmax", "logn", "none x log N")}
# part C: pre_final is the two-layer block without an output norm
COLORS["pre_final"] = COLORS["none"]
POSITION_NAMES = {"none": "no positions (NoPE)", "rope": "rotary positions (RoPE)"}


def plot_set_variants(results: Results, *, train_length: int, title: str) -> Figure:
    """Part A: TV by prefix length for every variant, soft (left) and sampled (right)
    targets (mean over seeds, min-max band)."""
    fig, axes = panels(2, width=5.6, height=3.9, title=title, sharey=True)
    s = results.lengths(targets="soft", **SET_VARIANTS["none"])
    for i, (ax, targets) in enumerate(zip(axes, TARGETS)):
        plot_length_curves(
            s,
            set_curves(results, "tv", targets, tuple(SET_VARIANTS)),
            train_length=train_length,
            ylabel="TV to p* (0 = perfect)",
            title=f"{targets} targets",
            colors=COLORS,
            linestyles=DASHED,
            ylim=(0, 1),
            legend="below" if i == 1 else False,
            ax=ax,
        )
    return fig


def plot_retrieval(
    results: Results, factored: Mapping[str, np.ndarray], *, title: str
) -> Figure:
    """Part B: accuracy against N for every variant and, dashed, the no-norm models
    with the test-time factor log N / log 16 (``factored``: task -> [K, len(N)])."""
    fig, axes = panels(2, width=5.6, height=3.9, title=title, sharey=True)
    for i, (ax, task) in enumerate(zip(axes, RETRIEVAL_TASKS)):
        N = results.lengths(task=task, norm="none", logit_scale="none")
        curves = {**retrieval_curves(results, task), "none x log N": factored[task]}
        plot_curves(
            N,
            curves,
            xlabel=N_LABEL,
            ylabel="accuracy",
            title=task.replace("_", " "),
            shade=(N[0] / 1.3, 16 * 1.3, "trained N <= 16"),
            colors=COLORS,
            linestyles=DASHED,
            log2_x=True,
            ylim=(0, 1.02),
            xticks=N,
            legend="below" if i == 1 else False,
            axis="N",
            ax=ax,
        )
    return fig


def plot_depth(results: Results, *, train_length: int, title: str) -> Figure:
    """Part C: TV by prefix length of each two-layer placement ``results`` has,
    without positions (left) and with RoPE (right); mean over seeds, min-max band."""
    fig, axes = panels(2, width=5.6, height=3.9, title=title, sharey=True)
    for i, (ax, positional) in enumerate(zip(axes, POSITIONS)):
        s = results.lengths(positional=positional, **DEPTH_VARIANTS["post"])
        plot_length_curves(
            s,
            depth_curves(results, "tv", positional),
            train_length=train_length,
            ylabel="TV to p* (0 = perfect)",
            title=POSITION_NAMES[positional],
            colors=COLORS,
            linestyles=DASHED,
            ylim=(0, 1),
            legend="below" if i == 1 else False,  # both panels' entries, once
            ax=ax,
        )
        ax.set_xticks([1, train_length, *range(2 * train_length, s[-1] + 1, 8)])
    return fig


def plot_margins(table: MarginTable, *, title: str) -> Figure:
    """The proof, checked: chapter 3's construction's margin against s (log scale),
    averaged (2C/s), with the logits x ``table.factor`` (unchanged), and summed (C);
    markers measured, lines predicted."""
    fig, axes = panels(1, width=6.4, height=3.9, title=title)
    ax = axes[0]
    for i, (label, measured, law) in enumerate(
        (
            ("average (2C/s)", table.average, table.average_law),
            (f"average, logits x {table.factor:g}", table.sharpened, table.average_law),
            ("sum over present tokens (C)", table.summed, table.summed_law),
        )
    ):
        marker = ("o", "x", "s")[i]
        ax.plot(table.s, law, color=PALETTE[i], lw=1, alpha=0.7)
        ax.plot(table.s, measured, marker, color=PALETTE[i], label=label, ms=6)
    ax.set_yscale("log")
    plain_log_ticks(ax)
    ax.set(xlabel="prefix length s", ylabel="logit margin", xticks=table.s)
    ax.legend(fontsize="small", title="markers: measured, lines: predicted")
    return fig


def slider_draw(
    profiles: Mapping[tuple[str, str], GapProfile], train_length: int
) -> Callable[..., go.Figure]:
    """``draw(s, scaling, norm)`` for the slider: the chosen model's attention entropy
    / log s (left) and logit gap (right) at every length, with the length ``s``
    marked."""
    any_profile = next(iter(profiles.values()))
    lengths = any_profile.s
    gaps = np.stack([p.gap for p in profiles.values()])
    gap_range = [min(0.0, float(gaps.min())) - 0.5, float(gaps.max()) + 0.5]

    def draw(s: int, scaling: str, norm: str) -> go.Figure:
        profile = profiles[(scaling, norm)]
        fig = make_subplots(
            rows=1,
            cols=2,
            subplot_titles=("attention entropy / log s", "logit gap (legal - illegal)"),
        )
        for col, values in ((1, profile.entropy_ratio), (2, profile.gap)):
            fig.add_trace(
                go.Scatter(x=lengths, y=values, mode="lines", showlegend=False),
                row=1,
                col=col,
            )
            fig.add_trace(
                go.Scatter(
                    x=[s],
                    y=[values[s - 1]],
                    mode="markers",
                    marker={"size": 11},
                    showlegend=False,
                ),
                row=1,
                col=col,
            )
        fig.update_yaxes(range=[0, 1.05], row=1, col=1)
        fig.update_yaxes(range=gap_range, row=1, col=2)
        fig.update_xaxes(title_text="prefix length s")
        fig.update_layout(
            height=360,
            margin={"t": 40, "b": 40},
            shapes=[training_band(x, train_length) for x in ("x", "x2")],
        )
        return fig

    return draw


def slider_grid(profiles: Mapping[tuple[str, str], GapProfile]) -> dict[str, list]:
    """The slider's axes: the length s, the logit scaling and the output norm."""
    s = next(iter(profiles.values())).s
    return {
        "s": [int(x) for x in s],
        "scaling": list(SCALINGS),
        "norm": list(OUTPUT_NORMS),
    }


def slider_figure(
    profiles: Mapping[tuple[str, str], GapProfile], train_length: int, *, name: str
) -> SliderFigure:
    """The book's static slider over :func:`slider_grid` of :func:`slider_draw`."""
    draw = slider_draw(profiles, train_length)
    return static_slider_figure(draw, slider_grid(profiles), name=name)


CONDITION_LABELS = {"none": "no change", "logn": "log-N scaling", "std": "std restored"}
SHORT = {
    "logn": "log N",
    "std": "std",
    "natural text": "text",
    "random tokens": "random",
}


def plot_causal_test(test: CausalTest, *, title: str) -> Figure:
    """Part D: each window's loss under the three conditions (grey lines, one per
    window; the mean in colour), text and random tokens, and the paired changes (plain
    minus intervened, one dot per window, the mean with its 95 % interval) against the
    SESOI band."""
    fig, axes = panels(3, width=4.2, height=3.9, title=title)
    x = np.arange(len(CONDITIONS))
    labels = [CONDITION_LABELS[c] for c in CONDITIONS]
    for i, (ax, kind) in enumerate(zip(axes, INPUTS)):
        losses = np.stack([test.loss(kind, c) for c in CONDITIONS], axis=1)
        ax.plot(x, losses.T, color="0.6", lw=0.8, alpha=0.5)
        ax.plot(x, losses.mean(0), "o-", color=PALETTE[i], lw=2, label="mean")
        ax.set(title=kind, xticks=x, ylabel="next-token loss (nats per token)")
        ax.set_xticklabels(labels, rotation=15)
    ax = axes[2]
    ax.axhspan(-LOSS_SESOI, LOSS_SESOI, color="0.9", label=f"±SESOI ({LOSS_SESOI})")
    ax.axhline(0, color="0.4", lw=0.8)
    ticks = []
    for j, (kind, condition) in enumerate(
        (k, c) for k in INPUTS for c in CONDITIONS[1:]
    ):
        change = test.change(kind, condition)
        interval = loss_effect(test, kind, condition).interval
        color = PALETTE[INPUTS.index(kind)]
        ax.plot(j + np.linspace(-0.2, 0.2, change.size), change, ".", color=color)
        ax.errorbar(
            j + 0.3,
            interval.mean,
            yerr=[[interval.mean - interval.low], [interval.high - interval.mean]],
            fmt="D",
            color=color,
            capsize=3,
        )
        ticks.append(f"{SHORT[condition]}\n{SHORT[kind]}")
    ax.set(
        title="paired change per window",
        xticks=range(len(ticks)),
        ylabel="plain minus intervened loss (nats)",
    )
    ax.set_xticklabels(ticks, fontsize="small")
    ax.legend(fontsize="small", loc="best")
    return fig
