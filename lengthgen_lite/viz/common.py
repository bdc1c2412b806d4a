"""What every chapter's figures share: axes and panels, the one seed-band curve
primitive, the log-log plot against N (chapter 4: its law, its pretrained models), axis
labels, tidy-row tables and the rounded glue.

Every plotting function takes precomputed results, draws on ``ax`` (a new figure when
``ax`` is None) and returns the axes; none trains a model or computes a metric. A curve
is [len(x)] (one run) or [K, len(x)] (one row per seed): its mean over seeds is drawn as
a line with markers and its min-max range over seeds as a band
(:func:`plot_seed_bands`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatterSciNotation

from ..core.evaluation import LengthTable, loglog_slope, stack_metric
from ..core.validation import is_int
from ..runs.claims import Decision
from .style import PALETTE

S_LABEL = "prefix length s (tokens seen)"
TV_LABEL = "TV to p* (0 = perfect, 1 = disjoint)"
N_LABEL = "set size N (keys attended)"
REFERENCE_STYLES = ("--", ":", "-.")  # dashed comparison curves, in order
LEGEND_COLUMNS = 4  # entries per row of a legend under a figure


def ensure_axes(ax: Axes | None, figsize: tuple[float, float] | None = None) -> Axes:
    """``ax``, or the axes of a new figure (``figsize`` inches; None: the book's
    default)."""
    return plt.subplots(figsize=figsize)[1] if ax is None else ax


class PlainLogFormatter(LogFormatterSciNotation):
    """Matplotlib's choice of labelled log ticks, each written as a plain number
    (20, 0.05, 1024) instead of 2×10¹ or 2¹⁰; an axis reaching beyond 0.001..100000
    keeps powers of ten."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        label = super().__call__(x, pos)
        low, high = sorted(abs(v) for v in self.axis.get_view_interval())
        return f"{x:g}" if label and low >= 5e-4 and high < 2e5 else label


def plain_log_ticks(ax: Axes) -> Axes:
    """Label the log-scale axes of ``ax`` with plain numbers
    (:class:`PlainLogFormatter`); call it after setting the scales, which reset the
    labels."""
    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log":
            base = axis.get_transform().base
            axis.set_major_formatter(PlainLogFormatter(base))
            axis.set_minor_formatter(PlainLogFormatter(base, labelOnlyBase=False))
    return ax


def panels(
    ncols: int,
    nrows: int = 1,
    *,
    width: float = 4.8,
    height: float = 3.6,
    title: str | None = None,
    sharey: bool = False,
) -> tuple[Figure, np.ndarray]:
    """A figure of ``nrows x ncols`` panels, ``width x height`` inches each; the axes as
    a flat array.

    So that notebooks can put plots side by side (the ``ax=`` of every plot) without
    matplotlib.
    """
    for name, value in (("ncols", ncols), ("nrows", nrows)):
        if not is_int(value) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not (width > 0 and height > 0):
        raise ValueError(
            f"width and height must be positive inches, got {width!r} and {height!r}"
        )
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(width * ncols, height * nrows),
        sharey=sharey,
        squeeze=False,
    )
    if title is not None:
        fig.suptitle(title)
    return fig, axes.ravel()


def as_seed_array(
    values: np.ndarray, n: int, label: str, axis: str = "s"
) -> np.ndarray:
    """A curve as [K, n] float (a [n] curve is one seed); ``axis`` names x in the error
    message."""
    array = np.asarray(values, dtype=float)
    array = array[None] if array.ndim == 1 else array
    if array.ndim != 2 or array.shape[1] != n:
        raise ValueError(
            f"curve {label!r} must be [len({axis})] or [K, len({axis})] with "
            f"len({axis})={n}, got {array.shape}"
        )
    return array


def shade_range(ax: Axes, low: float, high: float, label: str) -> Axes:
    """Shade the x range ``low..high`` (what the models were trained on) behind the
    data."""
    ax.axvspan(low, high, color="0.85", alpha=0.6, zorder=0, label=label)
    return ax


def training_lengths(
    train_length: int, label: str = "training lengths"
) -> tuple[float, float, str]:
    """The shaded x range ``(low, high, label)`` of the prefix lengths ``s =
    1..train_length``."""
    if not is_int(train_length) or train_length < 1:
        raise ValueError(f"train_length must be a positive int, got {train_length!r}")
    return 0.5, train_length + 0.5, label


def shade_training_range(
    ax: Axes, train_length: int, label: str = "training lengths"
) -> Axes:
    """Shade the prefix lengths ``s = 1..train_length`` the model was trained on."""
    return shade_range(ax, *training_lengths(train_length, label))


def plot_seed_bands(
    ax: Axes,
    x: np.ndarray,
    curves: Mapping[str, np.ndarray],
    *,
    colors: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    linestyles: Mapping[str, str] | None = None,
    alpha: float = 0.25,
    axis: str = "s",
) -> int:
    """The seed-band primitive: for each curve, the mean over seeds (line with markers)
    and the min..max band over seeds (only when K > 1). Returns the largest K, for a
    legend note.

    ``colors``, ``labels`` and ``linestyles`` are keyed like ``curves``; a missing
    colour is the palette's colour for the curve's position, a missing label the key.
    """
    if not curves:
        raise ValueError("curves must hold at least one labelled curve")
    x = np.asarray(x)
    largest = 0
    for i, (key, values) in enumerate(curves.items()):
        array = as_seed_array(values, len(x), key, axis)
        color = (colors or {}).get(key, PALETTE[i % len(PALETTE)])
        ax.plot(
            x,
            array.mean(0),
            marker="o",
            markersize=4,
            color=color,
            label=(labels or {}).get(key, key),
            linestyle=(linestyles or {}).get(key, "-"),
        )
        if array.shape[0] > 1:
            ax.fill_between(
                x, array.min(0), array.max(0), color=color, alpha=alpha, linewidth=0
            )
        largest = max(largest, array.shape[0])
    return largest


def plot_references(
    ax: Axes,
    x: np.ndarray,
    references: Mapping[str, np.ndarray] | None,
    axis: str = "s",
) -> Axes:
    """Thin dark comparison curves (e.g. a law, chance level), dashed, dotted,
    dash-dotted in turn."""
    x = np.asarray(x)
    for j, (label, values) in enumerate((references or {}).items()):
        ax.plot(
            x,
            as_seed_array(values, len(x), label, axis)[0],
            linestyle=REFERENCE_STYLES[j % 3],
            color="0.2",
            linewidth=1.2,
            label=label,
        )
    return ax


def plot_curves(
    x: np.ndarray,
    curves: Mapping[str, np.ndarray],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    shade: tuple[float, float, str] | None = None,
    references: Mapping[str, np.ndarray] | None = None,
    colors: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    linestyles: Mapping[str, str] | None = None,
    band_alpha: float = 0.25,
    log2_x: bool = False,
    logy: bool = False,
    ylim: tuple[float | None, float | None] | None = None,
    xticks: np.ndarray | None = None,
    legend: bool | str = True,
    axis: str = "s",
    ax: Axes | None = None,
) -> Axes:
    """Seed-band curves against ``x`` with an optional shaded range ``shade = (low,
    high, label)`` and dashed ``references``. ``legend``: True, False, a matplotlib
    location, "outside" (right of the panel) or "below" (under the whole figure, in
    rows, with the entries of every panel drawn so far: give it to the last panel that
    adds entries; the book's constrained layout makes room for it); its title says how
    many seeds the lines average."""
    if not curves:
        raise ValueError("curves must hold at least one labelled curve")
    ax = ensure_axes(ax)
    if shade is not None:
        shade_range(ax, *shade)
    k = plot_seed_bands(
        ax,
        x,
        curves,
        colors=colors,
        labels=labels,
        linestyles=linestyles,
        alpha=band_alpha,
        axis=axis,
    )
    plot_references(ax, x, references, axis)
    if log2_x:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    plain_log_ticks(ax)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if xticks is not None:
        ax.set_xticks(xticks)
    if legend:
        note = f"lines: mean of {k} seeds, bands: min to max" if k > 1 else None
        style = {"fontsize": "small", "title": note, "title_fontsize": "small"}
        if legend == "outside":
            ax.legend(**style, loc="upper left", bbox_to_anchor=(1.02, 1))
        elif legend == "below":
            # every entry of the panels drawn so far, once
            entries = {}
            for panel in ax.figure.axes:
                for handle, name in zip(*panel.get_legend_handles_labels()):
                    entries.setdefault(name, handle)
            ax.figure.legend(
                list(entries.values()),
                list(entries),
                **style,
                loc="outside lower center",
                ncols=LEGEND_COLUMNS,
            )
        else:
            ax.legend(**style, loc=legend if isinstance(legend, str) else "best")
    return ax


def plot_length_curves(
    s: np.ndarray,
    curves: Mapping[str, np.ndarray],
    *,
    train_length: int | None = None,
    **kwargs: Any,
) -> Axes:
    """Per-length seed-band curves against the prefix length ``s``; ``train_length``
    shades the training range. ``kwargs`` (``ylabel``, ``title``, ``references``,
    ``colors``, ``logy``, ``ylim``, ``legend``, ``ax``, ...) go to
    :func:`plot_curves`."""
    s = np.asarray(s)
    shade = None if train_length is None else training_lengths(train_length)
    return plot_curves(s, curves, xlabel=S_LABEL, xticks=s, shade=shade, **kwargs)


def plot_tv_and_invalid_mass(
    s: np.ndarray,
    curves: Callable[[str, str], Mapping[str, np.ndarray]],
    targets: Sequence[str],
    *,
    tv_label: str,
    train_length: int,
    title: str,
    plot: Callable[..., Axes] = plot_length_curves,
    legend: bool | str = True,
) -> Figure:
    """TV (top row) and invalid mass (bottom row) against ``s``, one column per target
    kind, the first panel's legend placed by ``legend`` (see :func:`plot_curves`): the
    placements figure of chapters 5 and 7.

    ``curves(targets, metric)`` gives label -> [K, len(s)] for one panel; ``plot``
    draws a panel (:func:`plot_length_curves` or a chapter's variant with its
    arguments).
    """
    if not targets:
        raise ValueError("targets must name at least one target kind")
    fig, axes = panels(len(targets), nrows=2, width=5.8, height=3.9, title=title)
    rows = (
        ("tv", tv_label, "TV"),
        ("invalid_mass", "invalid mass (probability)", "Invalid mass"),
    )
    for row, (metric, ylabel, name) in enumerate(rows):
        for col, kind in enumerate(targets):
            plot(
                s,
                curves(kind, metric),
                ylabel=ylabel,
                title=f"{name}, {kind} targets",
                train_length=train_length,
                ylim=(0, 1),
                ax=axes[row * len(targets) + col],
                legend=legend if row == 0 and col == 0 else False,
            )
    return fig


def plot_metric(
    runs: Mapping[str, Sequence[LengthTable]], metric: str, **kwargs: Any
) -> Axes:
    """One :class:`~lengthgen_lite.core.evaluation.LengthTable` field against ``s`` for
    each run (label -> one table per seed); ``kwargs`` go to
    :func:`plot_length_curves`."""
    if not runs:
        raise ValueError("runs must hold at least one labelled list of LengthTables")
    s = next(iter(runs.values()))[0].s
    return plot_length_curves(
        s,
        {label: stack_metric(tables, metric) for label, tables in runs.items()},
        **kwargs,
    )


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
    plain_log_ticks(ax)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if legend:
        ax.legend(fontsize="small")
    return ax


def rows_frame(
    rows: Sequence[Mapping[str, object]], needed: Sequence[str], *, source: str
) -> pd.DataFrame:
    """Tidy rows (one dict per run and seed, made by ``source``) as a DataFrame holding
    ``needed``."""
    if not rows:
        raise ValueError(f"rows must hold at least one row (see {source})")
    frame = pd.DataFrame(list(rows))
    missing = [name for name in needed if name not in frame]
    if missing:
        raise ValueError(
            f"rows lack the columns {missing}; they have {list(frame.columns)}"
        )
    return frame


def rounded(value: float, digits: int) -> float:
    """``value`` as the prose shows it: rounded to ``digits`` (0: an int)."""
    if not is_int(digits) or digits < 0:
        raise ValueError(f"digits must be an int >= 0, got {digits!r}")
    return int(round(value)) if digits == 0 else round(float(value), digits)


def glue_round(name: str, value: float, digits: int = 3) -> None:
    """Glue ``value`` for the prose under ``name``, rounded (``digits=0``: an int), not
    displayed.

    Rounded so that re-runs store the same text (strict nbval); myst_nb is imported
    here, not at the top, because only a notebook kernel needs it.
    """
    from myst_nb import glue

    glue(name, rounded(value, digits), display=False)


def glue_claims(decisions: Sequence[Decision], suffix: str = "") -> None:
    """Glue each decided claim's word and number under ``<key><suffix>-verdict`` and
    ``<key><suffix>-number``, the names ``book/scorecard.md`` reads (the reference page
    passes ``suffix="-ref"``), and the declared statement and source tag beside them
    (``-statement``, ``-source``)."""
    # the book's glue; imported here so the package runs without it
    from myst_nb import glue

    for decision in decisions:
        key = decision.claim.key + suffix
        glue(f"{key}-verdict", decision.word, display=False)
        glue(f"{key}-number", decision.number, display=False)
        # the claim as declared, for the scorecard's first columns
        glue(f"{key}-statement", decision.claim.statement, display=False)
        glue(f"{key}-source", decision.claim.source, display=False)
