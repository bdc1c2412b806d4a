import numpy as np
import pytest

from lengthgen_lite.core.evaluation import prefix_profile
from lengthgen_lite.core.model import ModelConfig, Transformer
from lengthgen_lite.core.seeding import seed_everything
from lengthgen_lite.viz.ch5_post_norm import (
    PLACEMENT_COLORS,
    placement_draw,
    placement_live_slider,
    placement_static_slider,
    placement_table,
    plot_placement_curves,
)

ROWS = [
    {
        "targets": "soft",
        "norm": norm,
        "seed": seed,
        "tv_train": 0.1 * seed,
        "tv_beyond": base + 0.01 * seed,
    }
    for norm, base in (("none", 0.5), ("post", 0.2))
    for seed in range(3)
]


def test_placement_table_mean_and_range_per_configuration():
    table = placement_table(ROWS, columns=("tv_beyond",))
    assert list(table.index) == [("soft", "none"), ("soft", "post")]
    assert table.loc[("soft", "post"), "TV, s = 5..15"] == "0.210 [0.200, 0.220]"
    assert table["seeds"].tolist() == [3, 3]
    with pytest.raises(ValueError, match="at least one row"):
        placement_table([])
    with pytest.raises(ValueError, match=r"lack the columns \['invalid_beyond'\]"):
        placement_table(ROWS, columns=("invalid_beyond",))


@pytest.fixture(scope="module")
def profiles():
    seed_everything(0)
    models = {
        norm: Transformer(ModelConfig(vocab_size=6, d_model=8, norm=norm)).eval()
        for norm in ("none", "post")
    }
    return {
        norm: prefix_profile(model, [3, 1, 0, 5, 2]) for norm, model in models.items()
    }


def test_draw_has_the_same_traces_for_every_frame_and_bolds_the_choice(profiles):
    draw = placement_draw(profiles, train_length=2)
    figures = [draw(norm, s) for norm in profiles for s in range(1, 6)]
    assert len({tuple(trace.type for trace in fig.data) for fig in figures}) == 1
    fig = draw("post", 3)
    # the model's bars
    np.testing.assert_allclose(fig.data[1].y, profiles["post"].probs[2])
    assert sorted(fig.data[2].x.tolist()) == [0, 1, 3]  # seen tokens after s = 3
    widths = [trace.line.width for trace in fig.data[3:5]]
    assert widths[1] > widths[0]  # the chosen placement's gap curve is bold
    assert fig.data[5].y[0] == pytest.approx(profiles["post"].margin[2])
    with pytest.raises(ValueError, match="need norm in"):
        draw("pre", 3)
    with pytest.raises(ValueError, match="need norm in"):
        draw("post", 6)
    with pytest.raises(ValueError, match="at least one placement"):
        placement_draw({}, train_length=2)


def test_sliders(profiles):
    static = placement_static_slider(profiles, train_length=2, name="ch5-test")
    assert static.grid == {"norm": ["none", "post"], "s": [1, 2, 3, 4, 5]}
    assert static.control_kinds() == {"norm": "select", "s": "range"}
    assert len(static.steps) == 10 and static.labels[0] == "norm=none, s=1"
    widget, callback = placement_live_slider(profiles, train_length=2)
    callback(norm="post", s=2)
    assert len(widget.children) == 3  # two sliders and the figure


def test_placement_curves_keep_each_placement_colour():
    s = np.arange(1, 6)
    ax = plot_placement_curves(
        s,
        {"post": np.ones((3, 5)), "attn_out": np.arange(5.0)},
        ylabel="y",
        title="t",
        train_length=2,
        references={"law": 1 / s},
        suffix=", frozen",
    )
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["post, frozen"].get_color() == PLACEMENT_COLORS["post"]
    assert lines["attn_out, frozen"].get_color() == PLACEMENT_COLORS["attn_out"]
    assert lines["law"].get_linestyle() == "--"
    assert len(ax.collections) == 1  # one band: only post has several seeds
    assert (
        ax.get_legend().get_title().get_text()
        == "lines: mean of 3 seeds, bands: min to max"
    )
    with pytest.raises(ValueError, match="keyed by placement"):
        plot_placement_curves(s, {"rms": np.ones(5)}, ylabel="y", title="t")
    with pytest.raises(ValueError, match="at least one placement"):
        plot_placement_curves(s, {}, ylabel="y", title="t")
    with pytest.raises(ValueError, match="must be \\[len\\(s\\)\\]"):
        plot_placement_curves(s, {"none": np.ones(4)}, ylabel="y", title="t")


# five training steps leave the logit gap negative: nothing to draw on a log axis
@pytest.mark.filterwarnings("ignore:Data has no positive values")
def test_chapter_figures_from_tiny_runs():
    import matplotlib.pyplot as plt

    from lengthgen_lite.chapters import ch5_post_norm as ch5
    from lengthgen_lite.runs import run
    from lengthgen_lite.viz import ch5_post_norm as figures

    def tiny(name):
        spec = ch5.SPECS[name].with_overrides(seeds=[0, 1], steps=5, n_test=50)
        return run(spec, progress=False)

    placements, dropout = tiny("ch5/placements"), tiny("ch5/dropout")
    profiles = ch5.profiles(placements, n_sequences=20)
    drawn = {
        "metrics": figures.plot_placement_metrics(placements, train_length=4, title=""),
        "gap": figures.plot_gap_growth(profiles, train_length=4, title=""),
        "mechanism": figures.plot_soft_mechanism(profiles, train_length=4, title=""),
        "divisor": figures.plot_divisor_law(profiles, train_length=4, title=""),
        "dropout": figures.plot_dropout(placements, dropout, train_length=4, title=""),
    }
    assert {name: len(fig.axes) for name, fig in drawn.items()} == {
        "metrics": 4,
        "gap": 2,
        "mechanism": 3,
        "divisor": 2,
        "dropout": 2,
    }
    assert drawn["divisor"].axes[0].get_ylabel() == "divisor(s) / divisor(1)"
    for fig in drawn.values():
        # one legend, under the panels, off the curves
        assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    entries = [t.get_text() for t in drawn["divisor"].legends[0].get_texts()]
    assert {"none", "post", "chapter 3: sqrt((v-s)/(s(v-1)))", "1/s"} <= set(entries)
    metrics_lines = {line.get_label(): line for line in drawn["metrics"].axes[0].lines}
    assert metrics_lines["post"].get_color() == PLACEMENT_COLORS["post"]
    for fig in drawn.values():
        plt.close(fig)


def test_every_placement_has_its_own_colour_and_pre_and_post_differ():
    from matplotlib.colors import to_rgb

    from lengthgen_lite.core.model import PLACEMENTS

    assert list(PLACEMENT_COLORS) == list(PLACEMENTS)
    assert len(set(PLACEMENT_COLORS.values())) == len(PLACEMENTS)
    pre, post = (np.array(to_rgb(PLACEMENT_COLORS[n])) for n in ("pre", "post"))
    assert np.abs(pre - post).max() > 0.5  # not two oranges
