"""Chapter 6's figures: gradient noise, weight averaging, the temperature control, the
search.

Every function takes precomputed numbers (arrays or flat row dicts as made by
:func:`lengthgen_lite.chapters.ch6_search.score_rows`), draws and returns the axes or
figure; none of them trains or evaluates a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..core.model import PLACEMENTS
from .common import (
    S_LABEL,
    TV_LABEL,
    ensure_axes,
    plain_log_ticks,
    plot_length_curves,
    rows_frame,
)
from .sliders import SliderFigure, static_slider_figure
from .style import PALETTE

RANGE_LABELS = {
    "tv_train": "mean TV, training lengths",
    "tv_beyond": "mean TV, beyond training lengths",
}
VARIANT_COLORS = {"raw": PALETTE[0], "ema": PALETTE[1], "bema": PALETTE[2]}


NORM_ORDER = PLACEMENTS  # the book's order


def _norm_rank(norm: object) -> int:
    return NORM_ORDER.index(norm) if norm in NORM_ORDER else len(NORM_ORDER)


def _frame(rows: Sequence[Mapping[str, object]], needed: Sequence[str]) -> pd.DataFrame:
    return rows_frame(rows, needed, source="ch6_search.score_rows")


def plot_gradient_noise(rows: Sequence[Mapping[str, object]], *, title: str) -> Figure:
    """Noise ``tr Cov`` and signal-to-noise ratio of minibatch gradients, soft vs
    sampled targets.

    ``rows``: one dict per measurement with ``where`` (e.g. "at init"), ``batch``,
    ``targets``, ``trace_cov`` and ``snr``.
    """
    frame = _frame(rows, ["where", "batch", "targets", "trace_cov", "snr"])
    frame["setting"] = (
        frame["where"].astype(str) + "\nbatch " + frame["batch"].astype(str)
    )
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, column, label in (
        (axes[0], "trace_cov", "gradient noise tr Cov (log scale)"),
        (axes[1], "snr", "signal-to-noise ||E g||² / tr Cov (log)"),
    ):
        targets = list(dict.fromkeys(frame["targets"]))
        palette = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(targets)}
        sns.barplot(frame, x="setting", y=column, hue="targets", palette=palette, ax=ax)
        ax.set_yscale("log")
        plain_log_ticks(ax)
        ax.set(xlabel="weights and batch size", ylabel=label)
        ax.tick_params(axis="x", labelsize="small")
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * 30)  # headroom for the legend above the bars
        ax.legend(title="targets", fontsize="small", ncols=2, loc="upper center")
    axes[1].axhline(1.0, color="0.2", linestyle="--", linewidth=1)
    fig.suptitle(title)
    return fig


def plot_unbiasedness(
    n_draws: np.ndarray,
    relative_error: Mapping[str, np.ndarray],
    *,
    title: str,
    ax: Axes | None = None,
) -> Axes:
    """``||mean of n sampled-target gradients - soft gradient|| / ||soft gradient||``
    against n, log-log.

    The dashed guide falls like ``1/sqrt(n)``: what an unbiased estimator's error does.
    """
    n_draws = np.asarray(n_draws, dtype=float)
    if not relative_error:
        raise ValueError("relative_error must hold at least one labelled curve")
    ax = ensure_axes(ax)
    for i, (label, error) in enumerate(relative_error.items()):
        error = np.asarray(error, dtype=float)
        if error.shape != n_draws.shape:
            raise ValueError(
                f"curve {label!r} has shape {error.shape}, n_draws has {n_draws.shape}"
            )
        ax.plot(n_draws, error, color=PALETTE[i % len(PALETTE)], label=label)
        ax.plot(
            n_draws,
            error[0] / np.sqrt(n_draws / n_draws[0]),
            "--",
            color=PALETTE[i % len(PALETTE)],
            linewidth=1,
            label=f"{label}: 1/√n guide",
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="number n of sampled-target draws (same inputs)",
        ylabel="relative error to the soft gradient",
        title=title,
    )
    plain_log_ticks(ax)
    ax.legend(fontsize="small")
    return ax


def plot_averaging_toy(
    steps: np.ndarray,
    truth: np.ndarray,
    estimates: Mapping[str, np.ndarray],
    rms_error: Mapping[str, np.ndarray],
    *,
    title: str,
) -> Figure:
    """Left: one noisy toy weight, its noise-free path and the averages. Right: RMS
    error over replicates."""
    steps = np.asarray(steps)
    for name, values in (*estimates.items(), *rms_error.items()):
        if np.shape(values) != steps.shape:
            raise ValueError(
                f"{name!r} must have one value per step ({steps.shape}), got "
                f"{np.shape(values)}"
            )
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (label, values) in enumerate(estimates.items()):
        width = 0.5 if label == "raw" else 1.6
        left.plot(
            steps, values, color=PALETTE[i % len(PALETTE)], linewidth=width, label=label
        )
    left.plot(steps, truth, "--", color="0.1", linewidth=1.2, label="noise-free path")
    left.set(
        xlabel="step t", ylabel="toy weight (arbitrary units)", title="one replicate"
    )
    left.legend(fontsize="small")
    for i, (label, values) in enumerate(rms_error.items()):
        # t = 0: no error yet
        right.plot(
            steps[1:],
            np.asarray(values)[1:],
            color=PALETTE[i % len(PALETTE)],
            label=label,
        )
    right.set(
        xlabel="step t",
        ylabel="RMS error to the noise-free path",
        yscale="log",
        title="error over replicates",
    )
    plain_log_ticks(right)
    right.legend(fontsize="small")
    fig.suptitle(title)
    return fig


def plot_variant_tv(
    s: np.ndarray, curves: Mapping[str, np.ndarray], *, train_length: int, **kwargs: Any
) -> Axes:
    """TV against prefix length for each variant (``curves[label]``: [K, len(s)]), seed
    mean and min-max band, in the variant's colour; ``kwargs`` (``title``, ``ax``) go to
    ``plot_length_curves``."""
    colors = {
        label: VARIANT_COLORS.get(label, PALETTE[(i + 3) % len(PALETTE)])
        for i, label in enumerate(curves)
    }
    return plot_length_curves(
        s,
        curves,
        train_length=train_length,
        colors=colors,
        ylabel=TV_LABEL,
        ylim=(0, None),
        **kwargs,
    )


def plot_variant_summary(rows: Sequence[Mapping[str, object]], *, title: str) -> Figure:
    """Mean TV at training lengths (top) and beyond (bottom) per configuration; columns:
    norm placement.

    Dots are seeds, bars their mean; colours are the variants (raw, ema, bema).
    """
    frame = _frame(rows, ["norm", "lr", "batch", "variant", "tv_train", "tv_beyond"])
    frame = frame.sort_values(["batch", "lr"], kind="stable")
    frame["config"] = (
        "batch "
        + frame["batch"].astype(str)
        + "\nlr "
        + frame["lr"].map(lambda x: f"{x:.0e}")
    )
    norms = sorted(dict.fromkeys(frame["norm"]), key=_norm_rank)
    variants = list(dict.fromkeys(frame["variant"]))
    palette = {v: VARIANT_COLORS.get(v, PALETTE[4]) for v in variants}
    fig, axes = plt.subplots(
        2, len(norms), figsize=(5.2 * len(norms), 7), sharey="row", squeeze=False
    )
    for j, norm in enumerate(norms):
        part = frame[frame["norm"] == norm]
        for i, column in enumerate(("tv_train", "tv_beyond")):
            ax = axes[i, j]
            data = {
                "data": part,
                "x": "config",
                "y": column,
                "hue": "variant",
                "hue_order": variants,
                "palette": palette,
                "ax": ax,
            }
            sns.barplot(**data, errorbar=None, alpha=0.5)
            sns.stripplot(
                **data,
                dodge=True,
                size=4,
                edgecolor="0.2",
                linewidth=0.5,
                legend=False,
            )
            ax.set(xlabel="", ylabel=RANGE_LABELS[column], title=f"norm = {norm}")
            ax.tick_params(axis="x", labelsize="small")
            handles, labels = ax.get_legend_handles_labels()
            ax.get_legend().remove()
    fig.legend(
        handles, labels, title="weights", fontsize="small", loc="outside right upper"
    )
    fig.suptitle(title)
    return fig


def plot_temperature_frontier(
    scales: Sequence[float],
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
    *,
    title: str,
    annotate: Sequence[float] = (2.0, 8.0),
    ax: Axes | None = None,
) -> Axes:
    """Each model's logits times c, for every c: mean TV at training lengths (x) vs
    beyond them (y).

    ``curves[label] = (tv_train [len(scales)], tv_beyond [len(scales)])``. A model whose
    point at c = 1 (large marker) lies below and left of another's whole curve is better
    in a way that no temperature of the other explains.
    """
    scales = [float(c) for c in scales]
    if not curves:
        raise ValueError("curves must hold at least one labelled (train, beyond) pair")
    ax = ensure_axes(ax)
    for i, (label, (train, beyond)) in enumerate(curves.items()):
        train, beyond = np.asarray(train, dtype=float), np.asarray(beyond, dtype=float)
        if train.shape != (len(scales),) or beyond.shape != (len(scales),):
            raise ValueError(
                f"curve {label!r} needs one train and one beyond value per "
                f"scale ({len(scales)})"
            )
        color = VARIANT_COLORS.get(label.split(" ")[0], PALETTE[i % len(PALETTE)])
        style = "-" if i % 2 == 0 else "--"
        ax.plot(
            train, beyond, style, marker=".", color=color, label=f"{label}: logits × c"
        )
        if 1.0 in scales:
            k = scales.index(1.0)
            ax.plot(
                train[k],
                beyond[k],
                "o",
                markersize=9,
                color=color,
                markeredgecolor="0.1",
                label=f"{label} as trained (c = 1)",
            )
        # label the first two curves only, to keep it readable
        for c in annotate if i < 2 else ():
            if c in scales:
                k = scales.index(c)
                ax.annotate(
                    f"c={c:g}",
                    (train[k], beyond[k]),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize="x-small",
                    color=color,
                )
    ax.set(
        xlabel=RANGE_LABELS["tv_train"], ylabel=RANGE_LABELS["tv_beyond"], title=title
    )
    ax.legend(fontsize="x-small")
    return ax


def temperature_slider_figure(
    s: np.ndarray,
    scales: Sequence[float],
    tv: Mapping[str, np.ndarray],
    c: float,
    *,
    train_length: int,
    title: str,
) -> go.Figure:
    """Plotly: TV against s for each model's logits times ``c`` (solid) and as trained
    (dotted).

    ``tv[label]`` is [len(scales), len(s)]; a slider over ``c`` is made with
    :func:`lengthgen_lite.viz.sliders.static_slider_figure`.
    """
    scales = [float(x) for x in scales]
    if float(c) not in scales or 1.0 not in scales:
        raise ValueError(f"c={c!r} and 1.0 must be among the evaluated scales {scales}")
    s = np.asarray(s)
    top = max(float(np.max(v)) for v in tv.values())
    fig = go.Figure()
    for i, (label, values) in enumerate(tv.items()):
        values = np.asarray(values, dtype=float)
        if values.shape != (len(scales), len(s)):
            raise ValueError(
                f"tv[{label!r}] must be [len(scales), len(s)] = "
                f"{(len(scales), len(s))}, got {values.shape}"
            )
        color = VARIANT_COLORS.get(label, PALETTE[i % len(PALETTE)])
        fig.add_trace(
            go.Scatter(
                x=s,
                y=values[scales.index(float(c))],
                mode="lines+markers",
                name=f"{label}, logits × c",
                line={"color": color},
            )
        )
        fig.add_trace(
            go.Scatter(
                x=s,
                y=values[scales.index(1.0)],
                mode="lines",
                name=f"{label} as trained (c = 1)",
                line={"color": color, "dash": "dot", "width": 1.5},
            )
        )
    fig.add_vrect(
        x0=0.5,
        x1=train_length + 0.5,
        fillcolor="lightgray",
        opacity=0.4,
        line_width=0,
        annotation_text="training lengths",
        annotation_position="top left",
    )
    fig.update_layout(
        title=title,
        xaxis_title=S_LABEL,
        yaxis_title="TV to p*",
        height=430,
        yaxis_range=[0, min(1.0, 1.05 * top)],
        legend={"font": {"size": 11}},
    )
    fig.update_xaxes(tickmode="array", tickvals=list(s))
    return fig


def temperature_slider(
    s: np.ndarray,
    scales: Sequence[float],
    tv: Mapping[str, np.ndarray],
    values: Sequence[float],
    *,
    train_length: int,
    title: str,
    name: str,
) -> SliderFigure:
    """The static slider over the logit factor ``c`` in ``values``:
    :func:`temperature_slider_figure` at each ``c``. ``title`` is shared by every
    position (the layout is the first step's)."""

    def draw(c: float) -> go.Figure:
        return temperature_slider_figure(
            s, scales, tv, c, train_length=train_length, title=title
        )

    return static_slider_figure(draw, {"c": list(values)}, name=name)


def plot_search_factors(
    rows: Sequence[Mapping[str, object]],
    *,
    factors: Sequence[str],
    responses: Sequence[str],
    title: str,
) -> Figure:
    """One panel per (response, factor): every configuration as a dot, coloured by EMA
    on/off.

    ``lr`` is drawn on a log axis, ``dropout`` as a number, other factors as categories;
    the ``ema`` factor joins each run's raw and EMA scores by a line (the paired
    comparison).
    """
    frame = _frame(rows, [*factors, *responses, "ema", "run"])
    frame["EMA"] = frame["ema"].map({True: "on", False: "off"})
    palette = {"off": PALETTE[0], "on": PALETTE[1]}
    fig, axes = plt.subplots(
        len(responses),
        len(factors),
        figsize=(2.9 * len(factors), 3.0 * len(responses)),
        sharey="row",
        squeeze=False,
    )
    for i, response in enumerate(responses):
        for j, factor in enumerate(factors):
            ax = axes[i, j]
            if factor == "ema":
                for _, pair in frame.groupby("run"):
                    pair = pair.sort_values("ema")
                    ax.plot(
                        pair["EMA"],
                        pair[response],
                        color="0.6",
                        linewidth=0.8,
                        zorder=1,
                    )
                sns.stripplot(
                    frame,
                    x="EMA",
                    y=response,
                    hue="EMA",
                    order=["off", "on"],
                    palette=palette,
                    jitter=False,
                    size=5,
                    legend=False,
                    ax=ax,
                )
            elif factor in ("lr", "dropout"):
                sns.scatterplot(
                    frame,
                    x=factor,
                    y=response,
                    hue="EMA",
                    palette=palette,
                    s=30,
                    legend=False,
                    ax=ax,
                )
                if factor == "lr":
                    ax.set_xscale("log")
                    plain_log_ticks(ax)
            else:
                levels = list(frame[factor].unique())
                order = (
                    sorted(levels, key=_norm_rank)
                    if factor == "norm"
                    else sorted(levels)
                )
                sns.stripplot(
                    frame,
                    x=factor,
                    y=response,
                    hue="EMA",
                    order=order,
                    palette=palette,
                    dodge=True,
                    size=5,
                    legend=False,
                    ax=ax,
                )
                ax.tick_params(
                    axis="x", labelsize="small", rotation=30 if factor == "norm" else 0
                )
            ax.set(
                xlabel={"lr": "learning rate (log)", "ema": "EMA (β = 0.99)"}.get(
                    factor, factor
                ),
                ylabel=RANGE_LABELS.get(response, response),
            )
    handles = [
        plt.Line2D([], [], marker="o", linestyle="", color=palette[k], label=f"EMA {k}")
        for k in ("off", "on")
    ]
    fig.legend(handles=handles, loc="upper right", fontsize="small")
    fig.suptitle(title)
    return fig


def plot_factor_importance(
    importance: Mapping[str, Mapping[str, float]], *, title: str, ax: Axes | None = None
) -> Axes:
    """Grouped bars: ``importance[response][factor]`` (e.g. the drop in R² without the
    factor)."""
    if not importance:
        raise ValueError("importance must hold at least one response")
    frame = pd.DataFrame(
        [
            {"response": RANGE_LABELS.get(r, r), "factor": f, "value": v}
            for r, by in importance.items()
            for f, v in by.items()
        ]
    )
    ax = ensure_axes(ax)
    responses = list(dict.fromkeys(frame["response"]))
    palette = {r: PALETTE[(2 + i) % len(PALETTE)] for i, r in enumerate(responses)}
    sns.barplot(frame, x="factor", y="value", hue="response", palette=palette, ax=ax)
    ax.set(
        xlabel="factor", ylabel="drop in R² when the factor is left out", title=title
    )
    ax.legend(fontsize="small")
    return ax


def summary_table(
    rows: Sequence[Mapping[str, object]], *, by: Sequence[str] = ("norm", "batch", "lr")
) -> pd.DataFrame:
    """Mean TV over seeds per configuration (rows, grouped ``by``) and variant
    (columns), to 3 decimals."""
    columns = list(RANGE_LABELS)
    frame = _frame(rows, [*by, "variant", *columns])
    table = (
        frame.groupby([*by, "variant"], sort=False)[columns].mean().unstack("variant")
    )
    table.columns = [
        f"{RANGE_LABELS[c].replace('mean TV, ', 'TV ')}: {v}" for c, v in table.columns
    ]
    return table.round(3)
