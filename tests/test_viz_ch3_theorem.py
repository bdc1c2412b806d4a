import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib.collections import QuadMesh

from lengthgen_lite.chapters.ch3_analysis import DimensionSweep
from lengthgen_lite.chapters.ch3_construction import norm_comparison
from lengthgen_lite.viz.ch3_theorem import (
    FLOOR,
    NO_NORM,
    WITH_NORM,
    plot_dimension_sweep,
    plot_excess_curves,
    plot_input_kl,
    plot_kl_tables,
    plot_sweep_curves,
    theorem_draw,
    theorem_live_slider,
    theorem_static_slider,
)


def fake_sweep(v=5, dims=(3, 4, 6), k=2, steps=4):
    best = np.array([[0.1, 0.09], [0.05, 1e-4], [1e-7, 2e-4]])[: len(dims), :k]
    curves = np.broadcast_to(best[:, None, :], (len(dims), steps, k)).copy()
    kl_two = np.zeros((len(dims), k, v, v))
    kl_two[..., np.arange(v), np.arange(v)] = np.nan
    return DimensionSweep(
        v=v,
        dims=np.array(dims),
        seeds=np.arange(k),
        best_excess=best,
        final_excess=best,
        final_margin=np.zeros_like(best),
        curves=curves,
        kl_length_one=np.zeros((len(dims), k, v)),
        kl_length_two=kl_two,
    )


def test_dimension_sweep_plot_puts_one_dot_per_run_at_its_offset():
    sweep = fake_sweep()
    ax = plot_dimension_sweep([sweep], threshold=0.01, title="t")
    dots = [c for c in ax.collections if c.get_offsets().shape[0] == 2]
    assert len(dots) == 3  # one scatter per width, one dot per seed
    xs = np.concatenate([d.get_offsets()[:, 0] for d in dots])
    # d - (v - 1), jitter < 0.5
    np.testing.assert_allclose(np.round(xs), np.repeat([-1, 0, 2], 2))
    ys = np.concatenate([d.get_offsets()[:, 1] for d in dots])
    assert ys.min() == pytest.approx(FLOOR)  # 1e-7 is drawn at the log floor
    assert ax.get_yscale() == "log" and list(ax.get_xticks()) == [-1, 0, 2]


def test_sweep_curves_one_panel_per_width_and_one_line_per_seed():
    fig = plot_sweep_curves(fake_sweep(), [3, 6], threshold=0.01, title="t")
    left, right = fig.axes
    assert left.get_title() == "d = 3 = v - 2" and right.get_title() == "d = 6 = v + 1"
    assert len(left.get_lines()) == 3  # two seeds plus the threshold
    with pytest.raises(ValueError, match="subset"):
        plot_sweep_curves(fake_sweep(), [5], threshold=0.01, title="t")


def test_kl_tables_share_one_colour_scale():
    a = np.full((4, 4), 0.2)
    b = np.full((4, 4), 0.05)
    for t in (a, b):
        np.fill_diagonal(t, np.nan)
    fig = plot_kl_tables({"a": a, "b": b}, title="t")
    # not the colour bars
    heatmaps = [ax for ax in fig.axes if ax.get_title() in ("a", "b")]
    meshes = [c for ax in heatmaps for c in ax.collections if isinstance(c, QuadMesh)]
    assert len(meshes) == 2 and {m.get_clim() for m in meshes} == {(0.0, 0.2)}
    with pytest.raises(ValueError, match="tables"):
        plot_kl_tables({}, title="t")
    with pytest.raises(ValueError, match="square"):
        plot_input_kl(np.zeros((2, 3)), title="t")


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="sweeps"):
        plot_dimension_sweep([], threshold=0.01, title="t")
    with pytest.raises(ValueError, match="steps, K"):
        plot_excess_curves(np.zeros(3), threshold=0.01, title="t")


@pytest.fixture(scope="module")
def comparisons():
    return {(v, C): norm_comparison(v, C) for v in (4, 6) for C in (1.0, 2.0)}


def test_theorem_draw_shows_the_chosen_case(comparisons):
    draw = theorem_draw(comparisons)
    fig = draw(v=6, C=2.0, s=3)
    names = [trace.name for trace in fig.data]
    assert names.count(NO_NORM) == 3 and names.count(WITH_NORM) == 3
    logits_none = fig.data[0].y
    # present tokens sit 2C/s lower
    assert logits_none[-1] == 0.0 and logits_none[0] == pytest.approx(-4.0 / 3)
    law = next(t for t in fig.data if t.name.startswith("the law"))
    np.testing.assert_allclose(law.y, 2.0 / np.arange(1, 6))
    here = next(t for t in fig.data if t.name == "this s")
    assert here.x == (3, 3)
    assert fig.layout.xaxis.range == (-0.6, 5.6)  # fixed to the largest v of the grid
    clamped = draw(v=4, C=1.0, s=5)
    assert next(t for t in clamped.data if t.name == "this s").x == (3, 3)
    with pytest.raises(ValueError, match="not in the grid"):
        draw(v=8, C=1.0, s=2)
    with pytest.raises(ValueError, match="at least one"):
        theorem_draw({})


def test_theorem_sliders(comparisons):
    static = theorem_static_slider(comparisons, name="ch3-test")
    assert static.grid == {"v": [4, 6], "C": [1.0, 2.0], "s": [1, 2, 3, 4, 5]}
    assert static.control_kinds() == {"v": "select", "C": "select", "s": "range"}
    # s beyond v-1 shows v-1: one stored update per distinct figure
    assert len(static.updates) == 2 * (3 + 5) and static.labels[0] == "v=4, C=1.0, s=1"
    widget, callback = theorem_live_slider(comparisons)
    assert [child.description for child in widget.children[:3]] == ["v", "C", "s"]
    callback(v=6, C=1.0, s=5)
    with pytest.raises(ValueError, match="every"):
        theorem_live_slider({key: comparisons[key] for key in list(comparisons)[:3]})


def test_theorem_draw_draws_each_figure_once_and_sliders_share_it(comparisons):
    draw = theorem_draw(comparisons)
    # s beyond v-1 is the v-1 figure
    assert draw(v=4, C=1.0, s=3) is draw(v=4, C=1.0, s=5)
    assert draw(v=6, C=2.0, s=2) is not draw(v=6, C=2.0, s=3)
    static = theorem_static_slider(comparisons, name="ch3-test", draw=draw)
    assert static.labels == theorem_static_slider(comparisons, name="ch3-test").labels
    widget, callback = theorem_live_slider(comparisons, draw=draw)
    callback(v=4, C=2.0, s=5)
