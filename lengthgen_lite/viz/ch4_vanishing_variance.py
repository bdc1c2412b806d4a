"""Chapter 4's figures: quantities against the set size N, and the slider of one output
component.

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

from ..chapters import ch4_llama as llama
from ..chapters import ch4_vanishing_variance as ch4
from ..core.evaluation import loglog_slope
from ..runs import Results
from .common import as_seed_array, ensure_axes, panels, plot_curves
from .style import PALETTE

N_LABEL = "set size N (keys attended)"


def plot_loglog_std(
    N: Sequence[int],
    curves: Mapping[str, np.ndarray],
    *,
    title: str,
    ylabel: str,
    linestyles: Mapping[str, str] | None = None,
    colors: Mapping[str, str] | None = None,
    reference: bool = True,
    legend: bool = True,
    xlabel: str = N_LABEL,
    ax: Axes | None = None,
) -> Axes:
    """Std (or any positive quantity) against N on log-log axes; each legend entry shows
    its fitted slope.

    ``reference`` adds the law N^(-1/2), anchored at the first curve's first point.
    """
    N = np.asarray(N, dtype=float)
    if not curves:
        raise ValueError("curves must hold at least one labelled curve")
    ax = ensure_axes(ax)
    for i, (label, values) in enumerate(curves.items()):
        y = as_seed_array(values, len(N), label, "N").mean(0)
        color = (colors or {}).get(label, PALETTE[i % len(PALETTE)])
        style = (linestyles or {}).get(label, "-")
        slope = loglog_slope(N, y)
        ax.plot(
            N,
            y,
            marker="o",
            markersize=4,
            linestyle=style,
            color=color,
            label=f"{label} (slope {slope:.2f})",
        )
    if reference:
        first = as_seed_array(next(iter(curves.values())), len(N), "first", "N").mean(
            0
        )[0]
        ax.plot(
            N,
            first * (N / N[0]) ** -0.5,
            linestyle=":",
            color="0.2",
            linewidth=1.2,
            label=r"law $\propto N^{-1/2}$",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if legend:
        ax.legend(fontsize="small")
    return ax


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


def llama_layer0_figure(
    sizes: Sequence[int], records: Mapping[str, Any], n_sequences: int
) -> Figure:
    """SmolLM2's first layer: per-feature and global std after W_O, per input kind
    (``records``: ch4_llama.LastPositionRecord)."""
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
