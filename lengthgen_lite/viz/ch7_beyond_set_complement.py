"""Chapter 7's figures and tables: placements and EMA on the game and the language
suite.

Plotting only: the numbers come from
:mod:`lengthgen_lite.chapters.ch7_beyond_set_complement` (per-length curves, tidy rows,
per-example predictions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from plotly.subplots import make_subplots

from ..chapters.ch7_beyond_set_complement import Results, curves, task_setup
from .common import panels, plot_length_curves, plot_tv_and_invalid_mass
from .sliders import SliderFigure, static_slider_figure
from .style import PALETTE

LENGTH_LABEL = "length s (tokens seen: moves or symbols)"


def plot_curves(
    s: np.ndarray,
    curves: Mapping[str, np.ndarray],
    *,
    ylabel: str,
    title: str,
    train_length: int,
    ylim: tuple[float, float] | None = None,
    legend: bool = True,
    ax: Axes | None = None,
) -> Axes:
    """Per-length curves keyed by label ([K, len(s)]: mean line, min-max band over
    seeds)."""
    step = max(1, len(s) // 12)  # readable ticks at 48 lengths
    ax = plot_length_curves(
        s,
        curves,
        ylabel=ylabel,
        title=title,
        train_length=train_length,
        ylim=ylim,
        legend=legend,
        ax=ax,
    )
    ax.set_xticks(s[step - 1 :: step])
    ax.set_xlabel(LENGTH_LABEL)
    return ax


def plot_game_placements(results: Results, *, title: str) -> Figure:
    """Tic-Tac-Toe: TV (top row) and invalid mass (bottom row) by length, soft and
    sampled targets, every placement (mean over seeds, min-max band)."""
    return plot_tv_and_invalid_mass(
        results.lengths(task="tictactoe"),
        lambda targets, field: curves(results, "tictactoe", targets, field),
        ("soft", "sampled"),
        tv_label="TV to the target (0 = perfect)",
        train_length=task_setup("tictactoe").train_length,
        title=title,
        plot=plot_curves,
    )


def plot_running_and_finished(
    results: Results, share_single: np.ndarray, *, title: str
) -> Figure:
    """Tic-Tac-Toe, soft targets: TV at positions with a set of legal squares (a
    running game) and at END-only positions (a finished game), with the share of END
    positions by length (``share_single``, [len(s)]) dashed on the second panel."""
    s = results.lengths(task="tictactoe")
    fig, axes = panels(2, width=5.8, height=3.9, title=title)
    kinds = ("running game (two or more legal squares)", "finished game (END only)")
    for ax, field, label in zip(axes, ("tv_set", "tv_single"), kinds):
        plot_curves(
            s,
            curves(results, "tictactoe", "soft", field),
            ylabel="TV to the target",
            title=f"TV at positions with a {label}",
            train_length=task_setup("tictactoe").train_length,
            ylim=(0, 1),
            ax=ax,
            legend=field == "tv_set",
        )
    axes[1].plot(
        s, share_single, linestyle="--", color="0.2", label="share of END positions"
    )
    axes[1].legend(fontsize="small")
    return fig


def plot_game_diagnostics(results: Results, *, title: str) -> Figure:
    """Tic-Tac-Toe, soft targets: chapter 2's diagnostics by length, attention entropy
    over log s and the logit gap, every placement."""
    s = results.lengths(task="tictactoe")
    train_length = task_setup("tictactoe").train_length
    fig, axes = panels(2, width=5.8, height=3.9, title=title)
    plot_curves(
        s,
        curves(results, "tictactoe", "soft", "entropy_ratio"),
        ylabel="attention entropy / log s",
        title="Attention entropy (1 = uniform over the moves)",
        train_length=train_length,
        ylim=(0, 1.05),
        ax=axes[0],
    )
    plot_curves(
        s,
        curves(results, "tictactoe", "soft", "logit_gap"),
        ylabel="logit gap (nats)",
        title="Smallest legal minus largest illegal logit",
        train_length=train_length,
        ax=axes[1],
        legend=False,
    )
    return fig


# (language, target kind) per panel of the languages figure
LANGUAGE_PANELS = (
    ("anbn", "soft"),
    ("anbn", "sampled"),
    ("unlock", "soft"),
    ("norepeat", "soft"),
)


def plot_languages(
    results: Results,
    *,
    title: str,
    language_panels: Sequence[tuple[str, str]] = LANGUAGE_PANELS,
) -> Figure:
    """TV by length on each (language, target kind) of ``language_panels``, every
    placement, two panels a row."""
    nrows = (len(language_panels) + 1) // 2
    fig, axes = panels(2, nrows=nrows, width=5.8, height=3.9, title=title)
    for i, (task, targets) in enumerate(language_panels):
        setup = task_setup(task)
        plot_curves(
            results.lengths(task=task),
            curves(results, task, targets, "tv"),
            ylabel="TV to the target (0 = perfect)",
            title=f"{setup.task.name}, {targets} targets",
            train_length=setup.train_length,
            ylim=(0, 1),
            ax=axes[i],
            legend=i == 0,
        )
    return fig


def verdict_table(
    rows: Sequence[Mapping[str, object]],
    *,
    column: str = "tv_beyond",
    digits: int = 3,
) -> pd.DataFrame:
    """Mean over seeds with the [min, max] range of ``column``, one row per (task,
    targets, norm), raw and EMA side by side, as rounded strings. ``rows`` are a
    ``Results.summary([column])``."""
    if not rows:
        raise ValueError("rows must hold at least one row (see Results.summary)")
    frame = pd.DataFrame(list(rows))
    missing = [
        name
        for name in ("task", "targets", "norm", "variant", column)
        if name not in frame
    ]
    if missing:
        raise ValueError(
            f"rows lack the columns {missing}; they have {list(frame.columns)}"
        )
    grouped = frame.groupby(["task", "targets", "norm", "variant"], sort=False)[column]
    mean, low, high = grouped.mean(), grouped.min(), grouped.max()
    text = pd.Series(
        [
            f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
            for m, lo, hi in zip(mean, low, high)
        ],
        index=mean.index,
    )
    table = text.unstack("variant")
    table.columns = [f"{column}, {variant}" for variant in table.columns]
    table["seeds"] = grouped.size().unstack("variant").iloc[:, 0].to_numpy()
    return table


def prediction_draw(
    probs: Mapping[str, np.ndarray],
    targets: np.ndarray,
    tv: Mapping[str, np.ndarray],
    *,
    output_labels: Sequence[str],
    train_length: int,
    title: str,
) -> Callable[..., go.Figure]:
    """``draw(norm, s)`` for a slider: one example's predicted distribution after ``s``
    tokens (bars) against the legal-set target (markers), and the placement's TV curve
    with ``s`` marked.

    ``probs[norm]`` is [len(s), n_outputs] for the example, ``targets`` [len(s),
    n_outputs], ``tv[norm]`` is [K, len(s)] (mean over seeds drawn).
    """
    if not probs or set(probs) != set(tv):
        raise ValueError("probs and tv must name the same, non-empty set of placements")
    n = targets.shape[0]
    lengths = np.arange(1, n + 1)
    top = max(float(np.nanmax(np.nanmean(values, 0))) for values in tv.values())

    def draw(norm: str, s: int) -> go.Figure:
        fig = make_subplots(
            rows=1,
            cols=2,
            column_widths=[0.55, 0.45],
            subplot_titles=(
                "one example, after s tokens",
                "TV to the target, mean of seeds",
            ),
        )
        fig.add_trace(
            go.Bar(
                x=list(output_labels),
                y=probs[norm][s - 1],
                name="model",
                marker_color=PALETTE[0],
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=list(output_labels),
                y=targets[s - 1],
                mode="markers",
                name="target (uniform over legal)",
                marker={
                    "color": "black",
                    "symbol": "line-ew-open",
                    "size": 14,
                    "line": {"width": 3},
                },
            ),
            row=1,
            col=1,
        )
        curve = np.nanmean(tv[norm], 0)
        fig.add_trace(
            go.Scatter(
                x=lengths,
                y=curve,
                mode="lines+markers",
                name="TV",
                line={"color": PALETTE[1]},
            ),
            row=1,
            col=2,
        )
        fig.add_trace(
            go.Scatter(
                x=[s],
                y=[curve[s - 1]],
                mode="markers",
                name="this s",
                marker={"color": "red", "size": 12},
            ),
            row=1,
            col=2,
        )
        fig.add_vrect(
            x0=0.5,
            x1=train_length + 0.5,
            fillcolor="grey",
            opacity=0.15,
            line_width=0,
            row=1,
            col=2,
        )
        fig.update_yaxes(range=[0, 1], title_text="probability", row=1, col=1)
        fig.update_yaxes(
            range=[0, min(1.0, 1.1 * top)], title_text="TV (0 = perfect)", row=1, col=2
        )
        fig.update_xaxes(title_text="next output", row=1, col=1)
        fig.update_xaxes(title_text="length s (moves played)", row=1, col=2)
        fig.update_layout(
            title=title, height=430, legend={"orientation": "h", "y": -0.25}
        )
        return fig

    return draw


def prediction_static_slider(
    draw: Callable[..., go.Figure],
    norms: Sequence[str],
    lengths: Sequence[int],
    *,
    name: str,
) -> SliderFigure:
    """The book's offline slider over placement and length: a drop-down for the
    placement, a range for s."""
    return static_slider_figure(
        draw, {"norm": list(norms), "s": list(lengths)}, name=name
    )
