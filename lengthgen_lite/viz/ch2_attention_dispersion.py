"""Chapter 2's figures: the attention pattern as a heatmap, and the slider of one
example's attention, prediction and attention entropy at length s.

:func:`dispersion_draw` turns precomputed arrays into a ``draw(s, example) ->
go.Figure`` for :func:`~lengthgen_lite.viz.sliders.static_slider_figure` and
:func:`~lengthgen_lite.viz.sliders.live_slider`. Every frame has the same traces in the
same order, and the axis ranges are fixed, so the static slider only swaps data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import plotly.graph_objects as go
import seaborn as sns
from matplotlib.axes import Axes
from plotly.subplots import make_subplots

from ..core.evaluation import LengthTable
from .common import ensure_axes, panels, plot_length_curves, plot_metric
from .style import PALETTE


@dataclass(frozen=True)
class DispersionGrid:
    """What the slider shows, for ``n`` example sequences of length ``L`` over ``v``
    tokens."""

    tokens: np.ndarray  # [n, L] token ids
    pattern: np.ndarray  # [n, L, L] attention [query_pos, key_pos] (layer 0, head 0)
    probs: np.ndarray  # [n, L, v] model's next-token distribution after each prefix
    targets: np.ndarray  # [n, L, v] p* after each prefix
    entropy: np.ndarray  # [n, L] attention entropy (nats) of each query row

    def __post_init__(self) -> None:
        n, length = np.shape(self.tokens)
        v = np.shape(self.probs)[-1]
        expected = {
            "pattern": (n, length, length),
            "probs": (n, length, v),
            "targets": (n, length, v),
            "entropy": (n, length),
        }
        for name, shape in expected.items():
            if np.shape(getattr(self, name)) != shape:
                got = np.shape(getattr(self, name))
                raise ValueError(
                    f"{name} must have shape {shape} (tokens are "
                    f"{(n, length)}), got {got}"
                )


def dispersion_draw(grid: DispersionGrid) -> Callable[..., go.Figure]:
    """``draw(s, example)``: three panels for prefix length ``s`` (1..L) of sequence
    ``example``.

    Each figure is drawn once and then reused: the static and the live slider share the
    same grid.
    """
    n, length = grid.tokens.shape
    v = grid.probs.shape[-1]
    lengths = np.arange(1, length + 1)
    top = 1.05 * max(1.0, float(np.max(grid.probs)))
    entropy_top = 1.1 * max(float(np.log(length)), float(np.max(grid.entropy)))

    @cache
    def draw(s: int, example: int) -> go.Figure:
        if not 1 <= s <= length or not 0 <= example < n:
            raise ValueError(
                f"need 1 <= s <= {length} and 0 <= example < {n}, got "
                f"s={s!r}, example={example!r}"
            )
        tokens = grid.tokens[example]
        row = grid.pattern[example, s - 1]
        seen = np.isin(np.arange(v), tokens[:s])
        entropy = grid.entropy[example]
        fig = make_subplots(
            rows=1,
            cols=3,
            column_widths=[0.36, 0.36, 0.28],
            subplot_titles=(
                "attention of the last query",
                "next-token distribution",
                "attention entropy",
            ),
        )
        dashed = {"dash": "dash", "color": "#333"}
        # keys after s do not exist yet
        weights = [float(a) if k < s else None for k, a in enumerate(row)]
        # each bar's token id
        labels = [str(t) if k < s else "" for k, t in enumerate(tokens)]
        ratio = (
            f"H/log s = {entropy[s - 1] / np.log(s):.3f}" if s > 1 else "s = 1: H = 0"
        )
        # keep the label inside the panel
        side = "bottom right" if s <= length // 2 else "bottom left"
        panels = [
            (
                go.Bar(
                    x=lengths,
                    y=weights,
                    text=labels,
                    textposition="outside",
                    marker_color=PALETTE[2],
                    name="attention weight (bar label: token id)",
                ),
                1,
            ),
            (
                go.Scatter(
                    x=[0.5, s + 0.5],
                    y=[1 / s, 1 / s],
                    mode="lines",
                    line=dashed,
                    name="uniform 1/s",
                ),
                1,
            ),
            (
                go.Bar(
                    x=np.arange(v),
                    y=grid.targets[example, s - 1],
                    marker_color=PALETTE[0],
                    name="target p*",
                ),
                2,
            ),
            (
                go.Bar(
                    x=np.arange(v),
                    y=grid.probs[example, s - 1],
                    marker_color=PALETTE[1],
                    name="model prediction",
                ),
                2,
            ),
            (
                go.Scatter(
                    x=np.flatnonzero(seen),
                    y=np.zeros(s),
                    mode="markers",
                    name="seen (illegal)",
                    marker={"symbol": "x", "color": "#222", "size": 8},
                ),
                2,
            ),
            (
                go.Scatter(
                    x=lengths,
                    y=entropy,
                    mode="lines+markers",
                    line={"color": PALETTE[2]},
                    name="entropy H",
                ),
                3,
            ),
            (
                go.Scatter(
                    x=lengths,
                    y=np.log(lengths),
                    mode="lines",
                    line=dashed,
                    name="uniform: log s",
                ),
                3,
            ),
            (
                go.Scatter(
                    x=[s],
                    y=[entropy[s - 1]],
                    mode="markers+text",
                    text=[ratio],
                    textposition=side,
                    marker={"size": 12, "color": PALETTE[3]},
                    name="this s",
                ),
                3,
            ),
        ]
        for trace, col in panels:
            fig.add_trace(trace, row=1, col=col)
        fig.update_layout(
            barmode="group",
            height=520,
            margin={"t": 130},
            legend={
                "orientation": "h",
                "x": 0,
                "y": 1.12,
                "yanchor": "bottom",
                "font": {"size": 11},
            },
        )
        fig.update_xaxes(
            title_text="key position", range=[0.5, length + 0.5], row=1, col=1
        )
        fig.update_yaxes(title_text="attention weight", range=[0, 1.05], row=1, col=1)
        fig.update_xaxes(title_text="next token", range=[-0.6, v - 0.4], row=1, col=2)
        fig.update_yaxes(title_text="probability", range=[0, top], row=1, col=2)
        fig.update_xaxes(
            title_text="prefix length s", range=[0.5, length + 0.5], row=1, col=3
        )
        fig.update_yaxes(
            title_text="entropy (nats)", range=[0, entropy_top], row=1, col=3
        )
        return fig

    return draw


def plot_attention_pattern(
    pattern: np.ndarray,
    *,
    tokens: Sequence[int] | None = None,
    title: str,
    relative: bool = False,
    ax: Axes | None = None,
) -> Axes:
    """A causal attention pattern [query_pos, key_pos] as a heatmap; future keys are
    left blank.

    Row ``s`` (counting from 1) is the attention of the prediction made after ``s``
    tokens. ``relative=True`` shows ``s * a`` instead, on a scale centred at 1 (=
    uniform over the ``s`` seen keys), which makes small departures from uniform visible
    at every ``s``.
    """
    pattern = np.asarray(pattern, dtype=float)
    if pattern.ndim != 2 or pattern.shape[0] != pattern.shape[1]:
        raise ValueError(
            "pattern must be a square [query_pos, key_pos] array, got shape "
            f"{pattern.shape}"
        )
    if tokens is not None and len(tokens) != pattern.shape[1]:
        raise ValueError(
            f"tokens must have one id per key position ({pattern.shape[1]}), "
            f"got {len(tokens)}"
        )
    ax = ensure_axes(ax)
    n = pattern.shape[0]
    future = np.triu(np.ones((n, n), dtype=bool), k=1)
    positions = np.arange(1, n + 1)
    keys = (
        positions
        if tokens is None
        else [f"{p}\n({t})" for p, t in zip(positions, tokens)]
    )
    if relative:
        values, label = (
            pattern * positions[:, None],
            "s x attention weight (1 = uniform)",
        )
        spread = max(0.05, float(np.abs(values[~future] - 1).max()))
        # symmetric: white = uniform
        scale = {"vmin": 1 - spread, "vmax": 1 + spread, "cmap": "RdBu_r"}
    else:
        values, label = pattern, "attention weight"
        scale = {"vmin": 0.0, "vmax": 1.0, "cmap": "viridis"}
    sns.heatmap(
        values,
        mask=future,
        square=True,
        xticklabels=keys,
        yticklabels=positions,
        cbar_kws={"label": label, "shrink": 0.8},
        ax=ax,
        **scale,
    )
    xlabel = "key position" if tokens is None else "key position (token id)"
    ax.grid(False)
    ax.set(xlabel=xlabel, ylabel="query = prefix length s", title=title)
    ax.tick_params(axis="x", labelsize="x-small", rotation=0)
    ax.tick_params(axis="y", labelsize="small", rotation=0)
    return ax


def plot_spread_measures(
    runs: Mapping[str, Sequence[LengthTable]],
    entropy: Mapping[str, np.ndarray],
    train_length: int,
) -> list[Axes]:
    """Three measures of attention spread against ``s`` (entropy in nats [K, v-1] per
    run, N_eff, the largest weight), each with its uniform value dashed."""
    s = next(iter(runs.values()))[0].s
    title = "Three measures of spread; dashed: the uniform value (log s, s, 1/s)"
    _, axes = panels(3, width=4.6, height=4.0, title=title)
    plot_length_curves(
        s,
        entropy,
        ylabel="attention entropy H (nats)",
        title="Entropy",
        train_length=train_length,
        references={"uniform: log s": np.log(s)},
        ax=axes[0],
    )
    common = {"train_length": train_length, "legend": False}
    plot_metric(
        runs,
        "n_eff",
        ylabel="N_eff (tokens)",
        title="Effective number of tokens",
        references={"uniform: s": s},
        ax=axes[1],
        **common,
    )
    plot_metric(
        runs,
        "max_attention",
        ylabel="largest attention weight",
        title="Largest weight",
        references={"uniform: 1/s": 1 / s},
        logy=True,
        ax=axes[2],
        **common,
    )
    return list(axes)


def plot_gap_decay(
    s: np.ndarray,
    gap: Mapping[str, np.ndarray],
    gap_s2: float,
    train_length: int,
) -> list[Axes]:
    """The logit gap against ``s`` on a log scale with ``2 g2 / s`` dashed, and ``s x
    gap`` with ``2 g2`` dashed (flat means exactly 1/s); ``gap_s2`` (g2) is the soft
    gap at s = 2, the proposition's c / 2. ``gap``: [K, v-1] per run."""
    title = "The logit gap shrinks with the prefix length"
    _, axes = panels(2, width=5.6, height=4.0, title=title)
    plot_length_curves(
        s,
        gap,
        ylabel="logit gap (logit units)",
        title="Gap, log scale",
        train_length=train_length,
        references={"2 g2/s (g2: soft gap at s = 2)": 2 * gap_s2 / s},
        logy=True,
        ax=axes[0],
    )
    plot_length_curves(
        s,
        {name: g * s for name, g in gap.items()},
        ylabel="s x gap (logit units)",
        title="s x gap: flat means exactly 1/s",
        train_length=train_length,
        references={"2 g2": np.full(len(s), 2 * gap_s2)},
        ax=axes[1],
    )
    return list(axes)


def plot_implied_invalid_mass(
    s: np.ndarray,
    invalid: Mapping[str, np.ndarray],
    implied: Mapping[str, np.ndarray],
    train_length: int,
) -> list[Axes]:
    """Per run, the measured invalid mass beside the one the mean gap alone implies."""
    title = "Invalid mass: measured, and implied by the gap alone"
    _, axes = panels(2, width=5.6, height=3.8, title=title)
    for ax, name in zip(axes, invalid):
        plot_length_curves(
            s,
            {"measured": invalid[name], "implied by the mean gap": implied[name]},
            ylabel="probability of seen tokens",
            title=name,
            train_length=train_length,
            ax=ax,
        )
    return list(axes)
