"""Chapter 3's figures: the dimension sweep, per-input fit, and the theorem slider.

Plotting only: every function takes results computed by
:mod:`lengthgen_lite.chapters.ch3_analysis` (the sweep) and
:mod:`lengthgen_lite.chapters.ch3_construction` (the hand-built models).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache

import numpy as np
import plotly.graph_objects as go
import seaborn as sns
from matplotlib.axes import Axes
from plotly.subplots import make_subplots

from ..chapters.ch3_analysis import DimensionSweep
from ..chapters.ch3_construction import NormComparison
from .common import ensure_axes, panels, plain_log_ticks, plot_length_curves
from .sliders import (
    SliderFigure,
    SliderValue,
    live_slider,
    static_slider_figure,
    training_band,
)
from .style import PALETTE

FLOOR = 1e-6  # excess losses below this are drawn at it (log axes)


def plot_dimension_sweep(
    sweeps: Sequence[DimensionSweep],
    *,
    threshold: float,
    title: str,
    ax: Axes | None = None,
) -> Axes:
    """Best excess loss of every run against d - (v - 1): one dot per seed, one colour
    per v.

    x = 0 is the theorem's minimum width; the dashed line is the "fits" threshold.
    """
    if not sweeps:
        raise ValueError("sweeps must hold at least one DimensionSweep")
    ax = ensure_axes(ax, figsize=(8.4, 3.8))  # wide: the legend sits on the right
    n = len(sweeps)
    for i, sweep in enumerate(sweeps):
        k = len(sweep.seeds)
        column = (i - (n - 1) / 2) * 0.6 / n  # one column per v beside each tick
        jitter = column + (np.arange(k) - (k - 1) / 2) * (0.4 / n / max(k, 1))
        for j, d in enumerate(sweep.dims):
            x = d - (sweep.v - 1) + jitter
            label = f"v = {sweep.v} (one dot per seed)" if j == 0 else None
            ax.scatter(
                x,
                np.maximum(sweep.best_excess[j], FLOOR),
                s=16,
                color=PALETTE[i % len(PALETTE)],
                label=label,
            )
    ax.axhline(
        threshold,
        linestyle="--",
        color="0.2",
        linewidth=1.2,
        label=f"fits: below {threshold:g} nats",
    )
    ax.axvspan(
        -0.5, 0.5, color="0.9", zorder=0, label="d = v - 1, the theorem's minimum"
    )
    offsets = sorted({int(d - (s.v - 1)) for s in sweeps for d in s.dims})
    ax.set_yscale("log")
    plain_log_ticks(ax)
    ax.set(
        xlabel="d - (v - 1)   (width d = d_model = d_head)",
        ylabel="best excess loss (nats)",
        title=title,
        xticks=offsets,
    )
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax


def plot_excess_curves(
    curves: np.ndarray, *, threshold: float, title: str, ax: Axes | None = None
) -> Axes:
    """Training loss minus the entropy floor per step, one line per seed ([steps, K]),
    log scale."""
    curves = np.asarray(curves, dtype=float)
    if curves.ndim != 2:
        raise ValueError(f"curves must be [steps, K], got shape {curves.shape}")
    ax = ensure_axes(ax)
    steps = np.arange(1, curves.shape[0] + 1)
    for k in range(curves.shape[1]):
        ax.plot(
            steps,
            np.maximum(curves[:, k], FLOOR),
            linewidth=0.9,
            color=PALETTE[k % len(PALETTE)],
        )
    ax.axhline(
        threshold,
        linestyle="--",
        color="0.2",
        linewidth=1.2,
        label=f"fits: {threshold:g} nats",
    )
    ax.set_yscale("log")
    plain_log_ticks(ax)
    ax.set(xlabel="training step", ylabel="excess loss (nats)", title=title)
    ax.legend(fontsize="small")
    return ax


def plot_sweep_curves(
    sweep: DimensionSweep, dims: Sequence[int], *, threshold: float, title: str
):
    """One panel of excess-loss curves (every seed) per width in ``dims``; returns the
    figure."""
    missing = [d for d in dims if d not in set(sweep.dims.tolist())]
    if not dims or missing:
        raise ValueError(
            "dims must be a non-empty subset of the sweep's "
            f"{sweep.dims.tolist()}, missing {missing}"
        )
    fig, axes = panels(len(dims), width=3.6, height=3.4, title=title, sharey=True)
    for ax, d in zip(axes, dims):
        i = sweep.dims.tolist().index(d)
        offset = int(d - sweep.v)
        relative = (
            "v" if offset == 0 else f"v {'+' if offset > 0 else '-'} {abs(offset)}"
        )
        plot_excess_curves(
            sweep.curves[i], threshold=threshold, title=f"d = {d} = {relative}", ax=ax
        )
    for ax in axes[1:]:
        ax.set_ylabel("")
    return fig


def plot_kl_tables(tables: Mapping[str, np.ndarray], *, title: str):
    """Side-by-side ``plot_input_kl`` heatmaps on one colour scale; returns the
    figure."""
    if not tables:
        raise ValueError("tables must hold at least one labelled [v, v] KL table")
    vmax = max(float(np.nanmax(t)) for t in tables.values())
    fig, axes = panels(len(tables), width=4.4, height=3.9, title=title)
    for ax, (label, table) in zip(axes, tables.items()):
        plot_input_kl(table, title=label, vmax=vmax, ax=ax)
    return fig


def plot_input_kl(
    kl_two: np.ndarray, *, title: str, vmax: float | None = None, ax: Axes | None = None
) -> Axes:
    """KL per length-2 input as a [first token, query token] heatmap; the diagonal is
    not an input."""
    kl_two = np.asarray(kl_two, dtype=float)
    if kl_two.ndim != 2 or kl_two.shape[0] != kl_two.shape[1]:
        raise ValueError(
            f"kl_two must be a square [v, v] array, got shape {kl_two.shape}"
        )
    ax = ensure_axes(ax)
    sns.heatmap(
        kl_two,
        mask=np.isnan(kl_two),
        vmin=0.0,
        vmax=vmax,
        cmap="rocket_r",
        square=True,
        cbar_kws={"label": "KL(p* || model) (nats)"},
        ax=ax,
    )
    ax.grid(False)
    ax.set(xlabel="query token t_2 (second)", ylabel="first token t_1", title=title)
    ax.tick_params(axis="both", labelsize="small", rotation=0)
    return ax


NO_NORM, WITH_NORM = "no norm", "LN on the attention output"


def theorem_draw(
    comparisons: Mapping[tuple[int, float], NormComparison],
) -> Callable[..., go.Figure]:
    """``draw(v, C, s)``: logits, softmax against p*, and margin/C against 2/s, with and
    without LN.

    ``comparisons`` maps (v, C) to
    :func:`lengthgen_lite.chapters.ch3_construction.norm_comparison`. Axis ranges are
    fixed across the whole grid so that a static slider only swaps data; s > v-1 is
    clamped. Each figure is drawn once: pass the same ``draw`` to both sliders and they
    share it.
    """
    if not comparisons:
        raise ValueError("comparisons must hold at least one (v, C) entry")
    v_max = max(v for v, _ in comparisons)

    def relative(profile_logits: np.ndarray) -> np.ndarray:
        # token v-1 is never seen: logit of an absent token
        return profile_logits - profile_logits[:, -1:]

    low = min(
        float(relative(getattr(c, n).logits).min())
        for c in comparisons.values()
        for n in ("none", "attn_out")
    )
    high = max(
        float((getattr(c, n).margin / c.C).max())
        for c in comparisons.values()
        for n in ("none", "attn_out")
    )

    def draw(v: int, C: float, s: int) -> go.Figure:
        if (v, C) not in comparisons:
            raise ValueError(
                f"(v, C) = {(v, C)!r} is not in the grid; available: "
                f"{sorted(comparisons)}"
            )
        # s beyond v-1 shows v-1: the same figure
        return drawn(v, C, min(int(s), v - 1))

    # The layout is the same for every (v, C, s): build it once, then each figure only
    # adds traces.
    layout = make_subplots(
        rows=1,
        cols=3,
        column_widths=[0.34, 0.34, 0.32],
        subplot_titles=(
            "logit minus an absent token's",
            "next-token distribution",
            "margin in units of C",
        ),
    )
    layout.update_layout(
        barmode="group",
        height=540,
        margin={"t": 135},
        legend={"orientation": "h", "x": 0, "y": 1.17, "yanchor": "bottom"},
        title={
            "text": "Same precision C at lengths 1-2, then length s (hand-built, d = "
            "v)",
            "y": 0.97,
        },
        shapes=[training_band("x3", 2)],
    )
    layout.update_xaxes(title_text="token", range=[-0.6, v_max - 0.4], row=1, col=1)
    layout.update_yaxes(
        title_text="logit difference", range=[1.05 * low, 0.45 * abs(low)], row=1, col=1
    )
    layout.update_xaxes(
        title_text="next token", range=[-0.6, v_max - 0.4], row=1, col=2
    )
    layout.update_yaxes(title_text="probability", range=[0, 1.05], row=1, col=2)
    layout.update_xaxes(
        title_text="prefix length s (grey: 1-2)", range=[0.5, v_max - 0.5], row=1, col=3
    )
    layout.update_yaxes(title_text="margin / C", range=[0, 1.05 * high], row=1, col=3)
    panel = {
        col: {
            "xaxis": f"x{'' if col == 1 else col}",
            "yaxis": f"y{'' if col == 1 else col}",
        }
        for col in (1, 2, 3)
    }

    @cache
    def drawn(v: int, C: float, s: int) -> go.Figure:
        comparison = comparisons[(v, C)]
        tokens, lengths = np.arange(v), np.arange(1, v)
        profiles = {NO_NORM: comparison.none, WITH_NORM: comparison.attn_out}
        colors = {NO_NORM: PALETTE[1], WITH_NORM: PALETTE[2]}
        traces = [
            go.Bar(
                x=tokens,
                y=relative(profile.logits)[s - 1],
                marker_color=colors[name],
                name=name,
                legendgroup=name,
                **panel[1],
            )
            for name, profile in profiles.items()
        ]
        traces.append(
            go.Bar(
                x=tokens,
                y=comparison.none.targets[s - 1],
                marker_color=PALETTE[0],
                name="target p*",
                **panel[2],
            )
        )
        traces += [
            go.Bar(
                x=tokens,
                y=profile.probs[s - 1],
                marker_color=colors[name],
                name=name,
                legendgroup=name,
                showlegend=False,
                **panel[2],
            )
            for name, profile in profiles.items()
        ]
        traces.append(
            go.Scatter(
                x=np.arange(s),
                y=np.zeros(s),
                mode="markers",
                name="seen (illegal)",
                marker={"symbol": "x", "color": "#222", "size": 8},
                **panel[2],
            )
        )
        traces += [
            go.Scatter(
                x=lengths,
                y=profile.margin / C,
                mode="lines+markers",
                name=name,
                line={"color": colors[name]},
                legendgroup=name,
                showlegend=False,
                **panel[3],
            )
            for name, profile in profiles.items()
        ]
        traces.append(
            go.Scatter(
                x=lengths,
                y=comparison.law / C,
                mode="lines",
                name="the law 2C/s, in units of C",
                line={"dash": "dash", "color": "#333"},
                **panel[3],
            )
        )
        here = [profile.margin[s - 1] / C for profile in profiles.values()]
        traces.append(
            go.Scatter(
                x=[s, s],
                y=here,
                mode="markers",
                name="this s",
                marker={
                    "size": 12,
                    "color": PALETTE[3],
                    "symbol": "circle-open",
                    "line": {"width": 2},
                },
                **panel[3],
            )
        )
        note = (
            f"v={v}, C={C:g}, s={s}<br>margin: "
            f"{comparison.none.margin[s - 1]:.3f} no norm, "
            f"{comparison.attn_out.margin[s - 1]:.3f} LN<br>TV: "
            f"{comparison.none.tv[s - 1]:.3f} no norm, "
            f"{comparison.attn_out.tv[s - 1]:.3f} LN"
        )
        traces.append(
            go.Scatter(
                x=[v_max - 0.5],
                y=[0.04 * abs(low)],
                mode="text",
                text=[note],
                textposition="top left",
                showlegend=False,
                textfont={"size": 11},
                **panel[1],
            )
        )
        return go.Figure(data=traces, layout=layout.layout)

    return draw


def theorem_static_slider(
    comparisons: Mapping[tuple[int, float], NormComparison],
    *,
    name: str,
    draw: Callable[..., go.Figure] | None = None,
) -> SliderFigure:
    """The static (no-kernel) slider: a control each for v, C and s (s beyond v-1 shows
    v-1, as in the live slider).

    ``draw`` is ``theorem_draw(comparisons)`` if given (to share its figures with the
    live slider).
    """
    draw = theorem_draw(comparisons) if draw is None else draw
    return static_slider_figure(draw, _theorem_grid(comparisons), name=name)


def theorem_live_slider(
    comparisons: Mapping[tuple[int, float], NormComparison],
    *,
    draw: Callable[..., go.Figure] | None = None,
):
    """ipywidgets sliders for v, C and s (s beyond v-1 is clamped); needs a kernel.

    ``draw`` is ``theorem_draw(comparisons)`` if given (to reuse the static slider's
    figures).
    """
    draw = theorem_draw(comparisons) if draw is None else draw
    return live_slider(draw, _theorem_grid(comparisons))


def _theorem_grid(
    comparisons: Mapping[tuple[int, float], NormComparison],
) -> dict[str, list[SliderValue]]:
    """The sliders' grid: every v and C of ``comparisons``, and s up to the largest
    v - 1."""
    vs = sorted({v for v, _ in comparisons})
    Cs = sorted({C for _, C in comparisons})
    if len(comparisons) != len(vs) * len(Cs):
        raise ValueError(
            "comparisons must cover every (v, C) pair of its v and C values"
        )
    return {"v": vs, "C": Cs, "s": list(range(1, max(vs)))}


def plot_ln_gap(
    s: np.ndarray, raw_gap: np.ndarray, ln_gap_measured: np.ndarray, v: int
) -> Axes:
    """The present-minus-absent gap of the LN construction before the norm (1/s) and
    read off the logits after it (v / sqrt(s (v - s))), against ``s``."""
    curves = {
        "measured before the norm (divided by k)": raw_gap,
        "measured from the logits, with the norm": ln_gap_measured,
    }
    references = {"1/s": 1.0 / s, "v / sqrt(s (v - s))": v / np.sqrt(s * (v - s))}
    return plot_length_curves(
        s,
        curves,
        references=references,
        ylabel="present minus absent (logit units / g)",
        title=f"The LN gap in the real model (v = {v}, uniform attention)",
    )


def plot_margins(
    s: np.ndarray,
    margins: Mapping[str, np.ndarray],
    law: np.ndarray,
    *,
    title: str,
    zero: bool = False,
) -> Axes:
    """Margins (smallest absent minus largest present logit) against ``s`` beside the
    law 2C/s (and the zero margin if ``zero``), lengths 1-2 shaded as the fitted
    ones."""
    references = {"the law 2C/s": law}
    if zero:
        references["zero margin"] = np.zeros_like(law)
    return plot_length_curves(
        s,
        margins,
        references=references,
        ylabel="margin: min absent - max present logit",
        title=title,
        train_length=2,
    )
