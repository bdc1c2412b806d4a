"""Chapter 4's figures of the law and the retrieval models: quantities against the set
size N, and the slider of one output component (the pretrained models' figures are
:mod:`~lengthgen_lite.viz.ch4_pretrained`).

Every function takes precomputed arrays (or a ``Results``) and draws; none trains or
measures. Curves are [len(N)] or [K, len(N)] (one row per seed: the mean is drawn with a
min-max band). The ``*_figure`` functions draw one whole figure of the notebook.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from plotly.subplots import make_subplots

from ..chapters import ch4_vanishing_variance as ch4
from ..runs import Results
from .common import (
    N_LABEL,
    as_seed_array,
    ensure_axes,
    panels,
    plain_log_ticks,
    plot_curves,
    plot_loglog_std,
)
from .style import PALETTE


def plot_against_N(
    N: Sequence[int],
    curves: Mapping[str, np.ndarray],
    *,
    train_range: tuple[int, int] | None = None,
    **kwargs: Any,
) -> Axes:
    """Curves against N (log2 axis): the mean over seeds with markers, and the min-max
    band over seeds.

    ``train_range = (lo, hi)`` shades the set sizes the models were trained on.
    ``kwargs`` (``title``, ``ylabel``, ``references``, ``linestyles``, ``colors``,
    ``logy``, ``ylim``, ``legend`` (a location, or "outside": right of the panel),
    ``ax``) go to :func:`~lengthgen_lite.viz.common.plot_curves`.
    """
    shade = None
    if train_range is not None:
        lo, hi = train_range
        if not 0 < lo <= hi:
            raise ValueError(
                f"train_range must be (lo, hi) with 0 < lo <= hi, got {train_range!r}"
            )
        shade = (lo, hi, f"training sizes {lo}..{hi}")
    N = np.asarray(N, dtype=float)
    return plot_curves(
        N,
        curves,
        xlabel=N_LABEL,
        shade=shade,
        band_alpha=0.2,
        log2_x=True,
        axis="N",
        **kwargs,
    )


def plot_paired(
    N: Sequence[int],
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    annotate: Sequence[int] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """One quantity against another, one point per N (mean over seeds), joined in order
    of N.

    ``curves[label] = (x, y)``, each [len(N)] or [K, len(N)]; ``annotate`` lists the N
    written beside the points of the first curve (None: all).
    """
    if not curves:
        raise ValueError("curves must hold at least one labelled (x, y) pair")
    ax = ensure_axes(ax)
    for i, (label, (x, y)) in enumerate(curves.items()):
        xm, ym = (
            as_seed_array(x, len(N), label, "N").mean(0),
            as_seed_array(y, len(N), label, "N").mean(0),
        )
        ax.plot(
            xm,
            ym,
            marker="o",
            markersize=4,
            color=PALETTE[i % len(PALETTE)],
            label=label,
        )
        if i == 0:
            for n, xv, yv in zip(N, xm, ym):
                if annotate is None or n in annotate:
                    ax.annotate(
                        f"N={n}",
                        (xv, yv),
                        textcoords="offset points",
                        xytext=(4, -10),
                        fontsize="x-small",
                    )
    if logx:
        ax.set_xscale("log")
        plain_log_ticks(ax)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize="small")
    return ax


def histogram_draw(
    grid: Mapping[tuple, Sequence[np.ndarray]],
    *,
    title: str,
    panel_titles: Sequence[str],
    xlabels: Sequence[str],
    bins: int = 40,
    legend_prefix: Sequence[str] | None = None,
) -> Callable[..., go.Figure]:
    """``draw(**values)`` for a slider: one histogram panel per entry of
    ``grid[values]``.

    ``grid`` maps a tuple of slider values (in slider order) to one 1-D sample per
    panel. Bins and x ranges are fixed per panel over the whole grid, so a shrinking
    spread is visible as a narrowing histogram (the density axis rescales at each step);
    each trace's legend name carries its std.
    """
    if not grid:
        raise ValueError("grid must hold at least one slider combination")
    n_panels = {len(samples) for samples in grid.values()}
    if (
        len(n_panels) != 1
        or n_panels != {len(panel_titles)}
        or len(xlabels) != len(panel_titles)
    ):
        raise ValueError(
            "every grid entry needs one sample per panel "
            f"({len(panel_titles)} titles, {len(xlabels)} labels)"
        )
    prefix = list(legend_prefix) if legend_prefix is not None else list(panel_titles)
    edges = []
    for p in range(len(panel_titles)):
        values = np.concatenate(
            [np.asarray(samples[p], dtype=float) for samples in grid.values()]
        )
        half = float(np.quantile(np.abs(values - np.median(values)), 0.995)) or 1.0
        centre = float(np.median(values))
        edges.append(np.linspace(centre - half, centre + half, bins + 1))
    keys = list(grid)

    def draw(**values: object) -> go.Figure:
        key = tuple(values.values())
        if key not in grid:
            raise ValueError(
                f"no precomputed samples for {values!r}; the grid has {keys[:3]}..."
            )
        fig = make_subplots(
            rows=1, cols=len(panel_titles), subplot_titles=list(panel_titles)
        )
        for p, sample in enumerate(grid[key]):
            sample = np.asarray(sample, dtype=float)
            density, _ = np.histogram(sample, edges[p], density=True)
            centres = 0.5 * (edges[p][1:] + edges[p][:-1])
            fig.add_trace(
                go.Bar(
                    x=centres,
                    y=density,
                    width=float(edges[p][1] - edges[p][0]),
                    marker_color=PALETTE[p],
                    name=f"{prefix[p]}: std {sample.std():.3f}",
                ),
                row=1,
                col=p + 1,
            )
            fig.update_xaxes(
                title_text=xlabels[p],
                range=[float(edges[p][0]), float(edges[p][-1])],
                row=1,
                col=p + 1,
            )
            fig.update_yaxes(
                title_text="density (per unit of the component)", row=1, col=p + 1
            )
        # the legend (with the stds) sits above the panels, clear of the slider below
        fig.update_layout(
            title={"text": title, "y": 0.97, "yanchor": "top"},
            bargap=0,
            height=460,
            margin={"t": 120},
            legend={
                "orientation": "h",
                "x": 0.5,
                "xanchor": "center",
                "y": 1.1,
                "yanchor": "bottom",
            },
        )
        return fig

    return draw


def random_head_figure(
    N: Sequence[int], std: Mapping[str, np.ndarray], n_eff: Mapping[str, np.ndarray]
) -> Figure:
    """Section 1: the random head's std of o_0 and its N_eff against N, per
    sharpness."""
    fig, axes = panels(
        2, width=5.6, height=4.2, title="A random head: the output's spread against N"
    )
    plot_loglog_std(
        N,
        std,
        title="std of the fixed component o_0 over 1000 input sets",
        ylabel="std of o_0 across input sets",
        ax=axes[0],
    )
    plot_against_N(
        N,
        n_eff,
        title="effective number of attended items",
        ylabel="mean N_eff (items)",
        references={"N (uniform)": np.array(N, dtype=float)},
        logy=True,
        ax=axes[1],
    )
    return fig


VARIANT_LABELS = {
    "baseline": "no norm",
    "layernorm": "LayerNorm after attention",
    "standardize": "standardization after attention",
}
TRAIN_RANGE = (2, 16)  # the set sizes the retrieval models train on


def accuracy_figure(N: np.ndarray, accuracy: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Accuracy against N, per task (``accuracy[task][variant]``: [K, len(N)])."""
    fig, axes = panels(
        2, width=5.8, height=4.2, title="Accuracy against N (3 seeds per variant)"
    )
    for ax, (task_name, curves) in zip(axes, accuracy.items()):
        plot_against_N(
            N,
            {VARIANT_LABELS[v]: acc for v, acc in curves.items()},
            title=task_name,
            ylabel="accuracy",
            train_range=TRAIN_RANGE,
            references={"chance (1/10)": np.full(len(N), 0.1)},
            ylim=(0, 1.02),
            ax=ax,
        )
    return fig


STATS = {
    "median_feature_var": ("per-feature variance", True),
    "global_mean": ("global mean", False),
    "global_var": ("global variance", True),
}  # field -> (label, log axis)
SHORT = {"argmax retrieval": "argmax", "dictionary lookup": "dictionary"}


def statistics_figure(N: np.ndarray, results: Results) -> Figure:
    """The shift statistics against N, per task and variant, before (solid) and after
    (dashed) the norm."""
    fig, axes = panels(
        3,
        nrows=2,
        width=4.9,
        height=3.8,
        title="Statistics of the attention output at the query: solid before the "
        "norm, dashed after",
    )
    for row, task_name in enumerate(ch4.TASK_IDS):
        for col, (name, (label, logy)) in enumerate(STATS.items()):
            curves, styles, colors = {}, {}, {}
            for i, v in enumerate(ch4.RETRIEVAL_VARIANTS):
                curves[f"{v}, before"] = ch4.field(results, name, task_name, v)
                styles[f"{v}, before"], colors[f"{v}, before"] = "-", PALETTE[i]
                if v != "baseline":
                    normed = ch4.field(results, f"normed_{name}", task_name, v)
                    curves[f"{v}, after"] = normed
                    styles[f"{v}, after"], colors[f"{v}, after"] = "--", PALETTE[i]
            ylabel = label + (
                " (median over j)" if name == "median_feature_var" else ""
            )
            plot_against_N(
                N,
                curves,
                title=f"{SHORT[task_name]}: {label}",
                ylabel=ylabel,
                train_range=TRAIN_RANGE,
                logy=logy,
                linestyles=styles,
                colors=colors,
                legend="outside" if (row, col) == (0, 2) else False,
                ax=axes[3 * row + col],
            )
    return fig


def attention_figure(N: np.ndarray, results: Results) -> Figure:
    """The mass on the correct item and N_eff against N, per task and variant."""
    fig, axes = panels(
        2,
        nrows=2,
        width=5.6,
        height=3.8,
        title="Attention at the query (best head on the correct item; N_eff mean "
        "over heads)",
    )
    mass, n_eff = (ch4.fields(results, k) for k in ("target_attention", "n_eff"))
    for row, task_name in enumerate(ch4.TASK_IDS):
        plot_against_N(
            N,
            {VARIANT_LABELS[v]: m for v, m in mass[task_name].items()},
            title=f"{task_name}: mass on the correct item",
            ylabel="attention weight",
            train_range=TRAIN_RANGE,
            logy=True,
            legend=(row == 0),
            ax=axes[2 * row],
        )
        plot_against_N(
            N,
            {VARIANT_LABELS[v]: n for v, n in n_eff[task_name].items()},
            title=f"{task_name}: effective number of attended items",
            ylabel="N_eff (items)",
            train_range=TRAIN_RANGE,
            logy=True,
            references={"N + 1 (uniform)": N + 1.0},
            legend=False,
            ax=axes[2 * row + 1],
        )
    return fig


def rescaled_figure(
    N: np.ndarray,
    results: Results,
    accuracy: Mapping[str, Mapping[str, np.ndarray]],
    rescaled: Mapping[str, np.ndarray],
) -> Figure:
    """Accuracy against the attention on the correct item: baseline, LayerNorm, and the
    baseline rescaled at test time (``rescaled[task]``: [K, len(N)])."""
    fig, axes = panels(
        2,
        width=5.8,
        height=4.2,
        title="Accuracy against attention on the correct item (one point per N, "
        "mean of 3 seeds)",
    )
    mass = ch4.fields(results, "target_attention")
    for ax, t in zip(axes, ch4.TASK_IDS):
        pairs = {
            VARIANT_LABELS[v]: (mass[t][v], accuracy[t][v])
            for v in ("baseline", "layernorm")
        }
        pairs["no norm, rescaled at test time"] = (mass[t]["baseline"], rescaled[t])
        plot_paired(
            N,
            pairs,
            title=t,
            xlabel="attention weight on the correct item (best head)",
            ylabel="accuracy",
            logx=True,
            annotate=[16, 64, 256, 512, 1024],
            ax=ax,
        )
    return fig
