"""Figures and tables of the reference tier (``book/reference.ipynb``): a claim's
effect in every cell of its sensitivity grid at every budget, with 95% intervals, and
the training losses that say whether each configuration had converged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from ..runs import Results
from ..runs.claims import Decision, cell_word
from ..runs.compare import training_state
from ..runs.stats import PLATEAU_TOLERANCE, UNSTABLE_RISE
from .common import ensure_axes, glue_claims, plain_log_ticks
from .style import PALETTE


def cell_label(cell: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in cell.items())


def plot_effects(claim: Decision, ylabel: str, ax: Axes | None = None) -> Axes:
    """A forest plot: one row per cell, the effect's mean and 95% interval at each
    budget (one colour per step); the dashed line is zero, the dotted one the claim's
    SESOI (a difference helps right of zero with its mean past the SESOI; an "at most"
    claim holds where the interval ends left of the SESOI)."""
    effects = claim.effects
    cells = list(dict.fromkeys(cell_label(e.cell) for e in effects))
    steps = sorted({e.step for e in effects})
    ax = ensure_axes(ax, figsize=(7.5, 1.4 + 0.3 * len(cells)))
    offsets = np.linspace(-0.25, 0.25, len(steps)) if len(steps) > 1 else [0.0]
    for colour, step, offset in zip(PALETTE, steps, offsets):
        rows = [e for e in effects if e.step == step]
        y = np.array([cells.index(cell_label(e.cell)) for e in rows]) + offset
        mean = np.array([e.interval.mean for e in rows])
        low = mean - np.array([e.interval.low for e in rows])
        high = np.array([e.interval.high for e in rows]) - mean
        filled = [e.converged for e in rows]
        ax.errorbar(
            mean, y, xerr=[low, high], fmt="none", ecolor=colour, elinewidth=1.2
        )
        ax.scatter(
            mean,
            y,
            color=[colour if f else "white" for f in filled],
            edgecolors=colour,
            zorder=3,
            label=f"{step} steps",
        )
    ax.axvline(0, color="0.3", linestyle="--", linewidth=1)
    sesoi = claim.claim.sesoi
    ax.axvline(sesoi, color="0.3", linestyle=":", linewidth=1, label=f"SESOI {sesoi:g}")
    ax.set_yticks(range(len(cells)), cells, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(ylabel)
    ax.set_title(
        f"{claim.claim.key}: {claim.word} at {steps[-1]} steps (hollow: not converged)"
    )
    ax.legend(loc="best", fontsize=8)
    return ax


def effects_frame(claim: Decision, digits: int = 3) -> pd.DataFrame:
    """Cells x budgets: ``mean [low, high]``, the cell's word under the protocol, and
    the seeds whose training collapsed."""
    sesoi = claim.claim.sesoi
    rows = []
    for e in claim.effects:
        rows.append(
            {"cell": cell_label(e.cell), "step": e.step}
            | {
                "effect [95% CI]": e.interval.text(digits),
                "word": cell_word(e, sesoi, claim.claim.test),
                "unstable seeds": e.unstable,
            }
        )
    return pd.DataFrame(rows).pivot(
        index="cell",
        columns="step",
        values=["effect [95% CI]", "word", "unstable seeds"],
    )


def plot_losses(
    results: Results, configs: Sequence[int], ax: Axes | None = None
) -> Axes:
    """The seeds' mean training loss of ``configs`` (window means), against steps,
    with the checkpoints marked: where the curve is flat, the run has converged."""
    ax = ensure_axes(ax)
    for colour, index in zip(PALETTE, configs):
        summary = results.stored_training[index]
        loss = np.array(summary["loss_windows"]).mean(axis=0)
        label = results.configs[index].label(results.spec.varying())
        ax.plot(summary["window_ends"], loss, color=colour, label=label)
    for step in sorted({r["step"] for r in results.rows}):
        ax.axvline(step, color="0.6", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    plain_log_ticks(ax)
    ax.set_xlabel("training step (log scale)")
    ax.set_ylabel("training loss (nats), mean over seeds")
    ax.set_title(
        f"{results.spec.name}: converged = the last 10% of steps moved the loss "
        f"by <= {PLATEAU_TOLERANCE:.0%} of its fall"
    )
    ax.legend(fontsize=7)
    return ax


def convergence_frame(results: Results) -> pd.DataFrame:
    """Per scored step: how many configurations had converged (their seeds' mean loss
    flat, neither falling nor rising again), and how many seeds had collapsed (their
    loss ended above their own best by more than ``UNSTABLE_RISE`` of their fall)."""
    steps = sorted({r["step"] for r in results.rows})
    rows = []
    for step in steps:
        states = [training_state(results, i, step) for i in results.stored_training]
        flat = sum(state[0] for state in states)
        collapsed = sum(int(state[1].sum()) for state in states)
        rows.append(
            {
                "step": step,
                "converged": f"{flat} of {len(states)}",
                f"unstable seeds (> {UNSTABLE_RISE:.0%} back up)": collapsed,
            }
        )
    return pd.DataFrame(rows).set_index("step")


def provenance_frame(sweeps: Mapping[str, Results]) -> pd.DataFrame:
    """Per stored sweep: its size, budget, the one-core hours it took, and where it ran
    (CPU, commit, whether tracked files were clean)."""
    rows = []
    for name, results in sweeps.items():
        parts = results.provenance["parts"]
        steps = sorted({r["step"] for r in results.rows})
        rows.append(
            {
                "sweep": name,
                # stored of the grid's (a sweep in progress has fewer)
                "configurations": (
                    f"{len(results.stored_training)} of {len(results.configs)}"
                ),
                "seeds": len(results.seeds),
                "scored at steps": ", ".join(map(str, steps)),
                "one-core hours": round(results.provenance["wall_seconds"] / 3600, 2),
                "CPU": ", ".join(sorted({p["cpu"] for p in parts})),
                "torch threads": ", ".join(sorted({str(p["threads"]) for p in parts})),
                "commit": ", ".join(sorted({p["git_commit"][:7] for p in parts})),
                "clean": all(p["git_clean"] for p in parts),
            }
        )
    return pd.DataFrame(rows).set_index("sweep")


def glue_sweeps(sweeps: Mapping[str, Results]) -> None:
    """The numbers the page's prose quotes about the sweeps (``ref-*``)."""
    from myst_nb import glue

    steps = sorted({r["step"] for s in sweeps.values() for r in s.rows})
    hours = sum(s.provenance["wall_seconds"] for s in sweeps.values()) / 3600
    glue("ref-seeds", min(len(s.seeds) for s in sweeps.values()), display=False)
    glue("ref-steps", steps[-1], display=False)
    glue("ref-checkpoints", ", ".join(map(str, steps)), display=False)
    glue(
        "ref-configs",
        sum(len(s.stored_training) for s in sweeps.values()),
        display=False,
    )
    glue("ref-hours", round(hours, 2), display=False)


def glue_reference(decisions: Sequence[Decision]) -> None:
    """Glue each row under ``<key>-ref-verdict``, ``<key>-ref-number`` and
    ``<key>-ref-budget`` (the reference table of ``book/scorecard.md``)."""
    from myst_nb import glue

    glue_claims(decisions, suffix="-ref")
    for decision in decisions:
        glue(f"{decision.claim.key}-ref-budget", decision.budget, display=False)


__all__ = [
    "cell_label",
    "convergence_frame",
    "effects_frame",
    "glue_reference",
    "glue_sweeps",
    "provenance_frame",
    "plot_effects",
    "plot_losses",
]
