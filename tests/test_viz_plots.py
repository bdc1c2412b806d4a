import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lengthgen_lite.evaluation import METRICS, LengthTable  # noqa: E402
from lengthgen_lite.viz import plots  # noqa: E402

S = np.arange(1, 6)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_length_curves_draw_mean_band_reference_and_training_range():
    seeds = np.array([S * 0.1, S * 0.2, S * 0.3])  # [K=3, len(s)]
    ax = plots.plot_length_curves(
        S, {"no norm": seeds}, ylabel="TV", title="t", train_length=2, references={"1/s": 1 / S}
    )
    mean_line, reference = ax.get_lines()
    np.testing.assert_allclose(mean_line.get_ydata(), S * 0.2)
    np.testing.assert_allclose(reference.get_ydata(), 1 / S)
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.1) and band.max() == pytest.approx(1.5)  # min of seed 0, max of seed 2
    assert ax.patches[0].get_label() == "training lengths"  # the shaded span
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["training lengths", "no norm", "1/s"]
    assert ax.get_legend().get_title().get_text() == "lines: mean of 3 seeds, bands: min to max"
    assert ax.get_xlabel().startswith("prefix length s") and ax.get_title() == "t"


def test_length_curves_accept_a_single_curve_and_an_existing_axes():
    _, ax = plt.subplots()
    assert plots.plot_length_curves(S, {"one": S * 1.0}, ylabel="y", title="t", logy=True, ax=ax) is ax
    assert not ax.collections and ax.get_yscale() == "log"  # one curve: no band
    assert ax.get_legend().get_title().get_text() == ""  # and no note about seeds
    quiet = plots.plot_length_curves(S, {"one": S * 1.0}, ylabel="y", title="t", legend=False)
    assert quiet.get_legend() is None


def test_length_curves_reject_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        plots.plot_length_curves(S, {}, ylabel="y", title="t")
    with pytest.raises(ValueError, match="len"):
        plots.plot_length_curves(S, {"short": np.ones(3)}, ylabel="y", title="t")
    with pytest.raises(ValueError, match="train_length"):
        plots.shade_training_range(plt.subplots()[1], 0)


def test_plot_metric_stacks_tables_by_run():
    tables = [LengthTable(s=S, **{m: S * (k + 1.0) for m in METRICS}) for k in range(2)]
    ax = plots.plot_metric({"soft": tables}, "logit_gap", ylabel="gap", title="t", train_length=3)
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), S * 1.5)
    with pytest.raises(ValueError, match="at least one"):
        plots.plot_metric({}, "tv", ylabel="y", title="t")


def test_distribution_bars_show_target_prediction_and_seen_tokens():
    target = np.array([0.0, 0.5, 0.0, 0.5])
    predicted = np.array([0.1, 0.4, 0.1, 0.4])
    seen = np.array([True, False, True, False])
    ax = plots.plot_distribution_bars(target, predicted, seen=seen, title="s = 2")
    heights = [bar.get_height() for bar in ax.patches]
    np.testing.assert_allclose(heights, np.concatenate([target, predicted]))
    np.testing.assert_array_equal(ax.get_lines()[0].get_xdata(), [0, 2])  # the x marks
    only_target = plots.plot_distribution_bars(target, title="p*")
    assert len(only_target.patches) == 4


def test_distribution_bars_reject_bad_shapes():
    with pytest.raises(ValueError, match="target"):
        plots.plot_distribution_bars(np.ones((2, 2)), title="t")
    with pytest.raises(ValueError, match="predicted"):
        plots.plot_distribution_bars(np.ones(4) / 4, np.ones(3) / 3, title="t")
    with pytest.raises(ValueError, match="seen"):
        plots.plot_distribution_bars(np.ones(4) / 4, seen=np.ones(2, dtype=bool), title="t")


def test_attention_pattern_masks_future_keys():
    pattern = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
    ax = plots.plot_attention_pattern(pattern, tokens=[7, 2, 5], title="pattern")
    values = ax.collections[0].get_array()
    assert np.ma.count(values) == 6  # lower triangle only
    np.testing.assert_allclose(np.ma.compressed(values), pattern[np.tril_indices(3)])
    assert ax.get_xticklabels()[0].get_text() == "1\n(7)"
    assert ax.get_ylabel().startswith("query")


def test_attention_pattern_rejects_bad_input():
    with pytest.raises(ValueError, match="square"):
        plots.plot_attention_pattern(np.ones((2, 3)), title="t")
    with pytest.raises(ValueError, match="tokens"):
        plots.plot_attention_pattern(np.eye(3), tokens=[1], title="t")


def test_training_loss_one_line_per_seed_and_floor():
    loss = np.array([[3.0, 3.1], [2.7, 2.8], [2.6, 2.65]])
    ax = plots.plot_training_loss(loss, seeds=[4, 9], floor=2.5, title="loss")
    lines = ax.get_lines()
    assert len(lines) == 3 and lines[0].get_label() == "seed 4"
    np.testing.assert_allclose(lines[1].get_ydata(), loss[:, 1])
    assert lines[2].get_ydata()[0] == 2.5
    with pytest.raises(ValueError, match=r"\[steps, K\]"):
        plots.plot_training_loss(np.ones(3), title="t")
    with pytest.raises(ValueError, match="seeds"):
        plots.plot_training_loss(loss, seeds=[1], title="t")


def test_panels_gives_a_flat_array_of_axes_and_a_title():
    fig, axes = plots.panels(3, 2, width=2.0, height=1.5, title="six")
    assert axes.shape == (6,) and fig._suptitle.get_text() == "six"
    assert tuple(fig.get_size_inches()) == pytest.approx((6.0, 3.0))
    with pytest.raises(ValueError, match="ncols"):
        plots.panels(0)
    with pytest.raises(ValueError, match="width and height"):
        plots.panels(1, height=0)


def test_ylim_and_bar_headroom():
    ax = plots.plot_length_curves(S, {"acc": np.ones(5)}, ylabel="y", title="t", ylim=(0.0, 1.05))
    assert ax.get_ylim() == pytest.approx((0.0, 1.05))
    bars = plots.plot_distribution_bars(np.array([0.0, 0.5, 0.5]), title="t")
    assert bars.get_ylim() == pytest.approx((0.0, 0.7))  # 40% above the tallest bar, for the legend


def test_relative_attention_pattern_is_centred_on_uniform():
    pattern = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
    pattern[2] = [0.5, 0.25, 0.25]  # row s = 3: s * a = 1.5, 0.75, 0.75
    ax = plots.plot_attention_pattern(pattern, title="relative", relative=True)
    values = np.ma.compressed(ax.collections[0].get_array())
    np.testing.assert_allclose(values, [1, 1, 1, 1.5, 0.75, 0.75])
    assert ax.collections[0].get_clim() == pytest.approx((0.5, 1.5))  # symmetric around 1
