import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import myst_nb
import numpy as np
import pytest
from matplotlib.colors import to_hex

from lengthgen_lite.core.evaluation import METRICS, LengthTable
from lengthgen_lite.viz.common import (
    N_LABEL,
    as_seed_array,
    glue_round,
    panels,
    plain_log_ticks,
    plot_curves,
    plot_length_curves,
    plot_loglog_std,
    plot_metric,
    plot_seed_bands,
    plot_tv_and_invalid_mass,
    rows_frame,
    shade_training_range,
)
from lengthgen_lite.viz.style import PALETTE

S = np.arange(1, 6)
# [K=3, len(s)]: seed 0 lowest, seed 1 highest everywhere
SEEDS = np.array([S * 0.1, S * 0.3, S * 0.2])


def line(ax, label):
    """The drawn curve with this legend label (whatever order the artists were added
    in)."""
    (match,) = [ln for ln in ax.get_lines() if ln.get_label() == label]
    return match


def band_of(ax, color):
    """(lower, upper) edge of the band drawn in ``color``, at each x of the band."""
    (band,) = [
        c for c in ax.collections if to_hex(c.get_facecolor()[0]) == to_hex(color)
    ]
    vertices = band.get_paths()[0].vertices
    xs = np.unique(vertices[:, 0])
    lower = np.array([vertices[vertices[:, 0] == x, 1].min() for x in xs])
    upper = np.array([vertices[vertices[:, 0] == x, 1].max() for x in xs])
    return xs, lower, upper


def test_seed_band_is_the_seed_mean_inside_the_min_max_range():
    ax = plt.subplots()[1]
    k = plot_seed_bands(
        ax, S, {"tv": SEEDS}, colors={"tv": "#123456"}, labels={"tv": "TV (3 seeds)"}
    )
    assert k == 3
    mean = line(ax, "TV (3 seeds)")
    np.testing.assert_allclose(mean.get_ydata(), SEEDS.mean(0))
    assert to_hex(mean.get_color()) == "#123456"
    xs, lower, upper = band_of(ax, "#123456")
    np.testing.assert_allclose(xs, S)
    np.testing.assert_allclose(lower, SEEDS.min(0))  # seed 0 at every s
    np.testing.assert_allclose(upper, SEEDS.max(0))  # seed 1 at every s


def test_a_single_run_gets_a_line_but_no_band_and_the_palette_by_position():
    ax = plt.subplots()[1]
    k = plot_seed_bands(ax, S, {"first": SEEDS, "second": S * 1.0})
    assert k == 3 and len(ax.collections) == 1  # only the three-seed curve has a band
    assert to_hex(line(ax, "second").get_color()) == to_hex(PALETTE[1])
    with pytest.raises(ValueError, match="at least one"):
        plot_seed_bands(ax, S, {})


def test_as_seed_array_names_the_axis_in_its_error():
    assert as_seed_array(S, 5, "one").shape == (1, 5)
    assert as_seed_array(SEEDS, 5, "three").shape == (3, 5)
    with pytest.raises(ValueError, match=r"curve 'short' must be \[len\(N\)\]"):
        as_seed_array(np.ones(3), 5, "short", "N")
    with pytest.raises(ValueError, match="len\\(s\\)=5"):
        as_seed_array(np.ones((2, 2, 5)), 5, "cube")


def test_length_curves_shade_the_training_lengths_and_count_the_seeds():
    ax = plot_length_curves(
        S,
        {"no norm": SEEDS},
        ylabel="TV",
        title="t",
        train_length=2,
        references={"1/s": 1 / S},
    )
    (span,) = ax.patches
    # s = 1..2 and nothing more
    assert (span.get_x(), span.get_x() + span.get_width()) == (0.5, 2.5)
    np.testing.assert_allclose(line(ax, "1/s").get_ydata(), 1 / S)
    assert line(ax, "1/s").get_linestyle() == "--"
    assert "mean of 3 seeds" in ax.get_legend().get_title().get_text()
    np.testing.assert_array_equal(ax.get_xticks(), S)
    quiet = plot_length_curves(S, {"one": S * 1.0}, ylabel="y", title="t", legend=False)
    assert quiet.get_legend() is None


def test_length_curves_draw_into_the_panel_they_are_given():
    fig, axes = panels(2, title="two")
    plot_length_curves(
        S,
        {"right": SEEDS},
        ylabel="y",
        title="t",
        ax=axes[1],
        ylim=(0.0, 2.0),
        logy=False,
    )
    assert not axes[0].get_lines() and len(axes[1].get_lines()) == 1
    assert axes[1].get_ylim() == pytest.approx((0.0, 2.0))
    assert len(fig.axes) == 2  # no stray figure content


def test_length_curves_reject_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        plot_length_curves(S, {}, ylabel="y", title="t")
    with pytest.raises(ValueError, match="len"):
        plot_length_curves(S, {"short": np.ones(3)}, ylabel="y", title="t")
    with pytest.raises(ValueError, match="train_length"):
        plot_length_curves(S, {"a": S}, ylabel="y", title="t", train_length=0)
    with pytest.raises(ValueError, match="train_length"):
        shade_training_range(plt.subplots()[1], 1.5)


def test_curves_on_a_log2_axis_with_the_legend_outside():
    N = np.array([4, 16, 64])
    ax = plot_curves(
        N,
        {"acc": np.ones((2, 3))},
        xlabel="N",
        ylabel="y",
        title="t",
        log2_x=True,
        legend="outside",
    )
    assert ax.get_xscale() == "log"
    assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1


def tick_labels(axis, minor=False):
    axis.figure.canvas.draw()
    return [t.get_text() for t in axis.get_ticklabels(minor=minor) if t.get_text()]


def test_log_axes_are_labelled_with_plain_numbers():
    ax = plot_curves(
        np.array([4, 16, 64]),
        {"gap": np.array([15.0, 40.0, 150.0])},
        xlabel="N",
        ylabel="y",
        title="t",
        log2_x=True,
        logy=True,
    )
    assert tick_labels(ax.xaxis) == ["2", "4", "8", "16", "32", "64", "128"]
    assert "20" in tick_labels(ax.yaxis, minor=True)  # not 2×10¹
    assert not any("times" in label for label in tick_labels(ax.yaxis, minor=True))
    # an axis reaching beyond 0.001..100000 keeps powers of ten
    _, wide = plt.subplots()
    wide.plot([1, 2], [1e-6, 1.0])
    wide.set_yscale("log")
    assert plain_log_ticks(wide) is wide
    assert "10^{-6}" in "".join(tick_labels(wide.yaxis))
    plt.close("all")


@matplotlib.rc_context({"figure.constrained_layout.use": True})  # the book's style
def test_a_legend_below_gathers_every_panel_drawn_so_far():
    fig, axes = panels(2)
    common = {"xlabel": "s", "ylabel": "y", "title": "t"}
    plot_curves(
        S, {"a": SEEDS}, **common, references={"law": S}, legend=False, ax=axes[0]
    )
    plot_curves(S, {"a": SEEDS, "b": S}, **common, legend="below", ax=axes[1])
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["a", "law", "b"]
    assert legend.get_title().get_text() == "lines: mean of 3 seeds, bands: min to max"
    assert axes[0].get_legend() is None and axes[1].get_legend() is None
    fig.canvas.draw()  # below the panels
    assert legend.get_window_extent().y1 <= axes[1].get_tightbbox().y0 + 1
    plt.close(fig)


def test_plot_metric_averages_the_seeds_tables():
    tables = [LengthTable(s=S, **{m: S * (k + 1.0) for m in METRICS}) for k in range(2)]
    ax = plot_metric(
        {"soft": tables}, "logit_gap", ylabel="gap", title="t", train_length=3
    )
    np.testing.assert_allclose(line(ax, "soft").get_ydata(), S * 1.5)
    _, lower, upper = band_of(ax, PALETTE[0])
    np.testing.assert_allclose(lower, S * 1.0)
    np.testing.assert_allclose(upper, S * 2.0)
    with pytest.raises(ValueError, match="at least one"):
        plot_metric({}, "tv", ylabel="y", title="t")


def test_panels_sizes_each_panel_and_can_share_y():
    fig, axes = panels(3, 2, width=2.0, height=1.5, title="six")
    assert axes.shape == (6,) and fig.get_suptitle() == "six"
    assert tuple(fig.get_size_inches()) == pytest.approx((6.0, 3.0))
    _, shared = panels(2, sharey=True)
    shared[0].set_ylim(0, 7)
    assert shared[1].get_ylim() == pytest.approx((0, 7))
    with pytest.raises(ValueError, match="ncols"):
        panels(0)
    with pytest.raises(ValueError, match="nrows"):
        panels(1, True)
    with pytest.raises(ValueError, match="width and height"):
        panels(1, height=0)


def test_rows_frame_checks_rows_and_columns():
    frame = rows_frame([{"a": 1, "b": 2}], ["a"], source="x.rows")
    assert list(frame.columns) == ["a", "b"]
    with pytest.raises(ValueError, match=r"at least one row \(see x.rows\)"):
        rows_frame([], ["a"], source="x.rows")
    with pytest.raises(ValueError, match=r"lack the columns \['c'\]"):
        rows_frame([{"a": 1}], ["a", "c"], source="x.rows")


def test_glue_round_glues_rounded_values_without_display(monkeypatch):
    glued = []
    monkeypatch.setattr(
        myst_nb,
        "glue",
        lambda name, value, display: glued.append((name, value, display)),
    )
    glue_round("tv", 0.123456)
    glue_round("n", 11.7, 0)
    glue_round("gap", 2.0, 1)
    assert glued == [("tv", 0.123, False), ("n", 12, False), ("gap", 2.0, False)]
    assert isinstance(glued[1][1], int)
    with pytest.raises(ValueError, match="digits"):
        glue_round("x", 1.0, -1)


def test_tv_and_invalid_mass_grid_has_a_row_per_metric_and_a_column_per_kind():
    s = np.arange(1, 6)
    calls = []

    def curves(targets, metric):
        calls.append((targets, metric))
        return {"a": np.full((2, 5), 0.5)}

    fig = plot_tv_and_invalid_mass(
        s, curves, ("soft", "sampled"), tv_label="TV", train_length=2, title="t"
    )
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "TV, soft targets",
        "TV, sampled targets",
        "Invalid mass, soft targets",
        "Invalid mass, sampled targets",
    ]
    assert fig.axes[0].get_legend() is not None and fig.axes[1].get_legend() is None
    assert ("sampled", "invalid_mass") in calls
    plt.close(fig)
    with pytest.raises(ValueError, match="targets must name"):
        plot_tv_and_invalid_mass(s, curves, (), tv_label="TV", train_length=2, title="")


def test_glue_claims_glues_the_decision_and_the_declaration(monkeypatch):
    import myst_nb

    from lengthgen_lite.runs.claims import Claim, Effect
    from lengthgen_lite.viz.common import glue_claims

    claim = Claim(
        "ch9-score-x",
        "a remedy helps",
        "[ours]",
        "TV",
        "TV",
        "without minus with",
        0.01,
    )
    decision = claim.decide([Effect.of([0.05, 0.06, 0.07], 1000)])
    glued = {}
    monkeypatch.setattr(
        myst_nb, "glue", lambda name, value, display: glued.setdefault(name, value)
    )
    glue_claims([decision], suffix="-ref")
    assert glued == {
        "ch9-score-x-ref-verdict": "reproduced",
        "ch9-score-x-ref-number": decision.number,
        "ch9-score-x-ref-statement": "a remedy helps",
        "ch9-score-x-ref-source": "[ours]",
    }


def test_loglog_std_shows_fitted_slopes_and_the_reference_law():
    N = np.array([4, 16, 64, 256])
    ax = plot_loglog_std(
        N, {"uniform": 2.0 * N**-0.5, "sharp": N**-0.1}, title="t", ylabel="std of o_0"
    )
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [
        "uniform (slope -0.50)",
        "sharp (slope -0.10)",
        r"law $\propto N^{-1/2}$",
    ]
    (law,) = [ln for ln in ax.get_lines() if ln.get_label().startswith("law")]
    # anchored at the first curve's first point
    np.testing.assert_allclose(law.get_ydata(), 2.0 * N**-0.5)
    assert (
        ax.get_xscale() == "log"
        and ax.get_yscale() == "log"
        and ax.get_xlabel() == N_LABEL
    )
    with pytest.raises(ValueError, match="at least one"):
        plot_loglog_std(N, {}, title="t", ylabel="y")
