import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from lengthgen_lite.viz.ch1_set_complement import (
    plot_distribution_bars,
    plot_training_loss,
)


def test_distribution_bars_show_target_prediction_and_seen_tokens():
    target = np.array([0.0, 0.5, 0.0, 0.5])
    predicted = np.array([0.1, 0.4, 0.1, 0.4])
    seen = np.array([True, False, True, False])
    ax = plot_distribution_bars(target, predicted, seen=seen, title="s = 2")
    heights = [bar.get_height() for bar in ax.patches]
    np.testing.assert_allclose(heights, np.concatenate([target, predicted]))
    (marks,) = [ln for ln in ax.get_lines() if ln.get_label() == "seen (illegal)"]
    np.testing.assert_array_equal(marks.get_xdata(), [0, 2])  # an x on each seen token
    only_target = plot_distribution_bars(target, title="p*")
    assert len(only_target.patches) == 4


def test_distribution_bars_reject_bad_shapes():
    with pytest.raises(ValueError, match="target"):
        plot_distribution_bars(np.ones((2, 2)), title="t")
    with pytest.raises(ValueError, match="predicted"):
        plot_distribution_bars(np.ones(4) / 4, np.ones(3) / 3, title="t")
    with pytest.raises(ValueError, match="seen"):
        plot_distribution_bars(np.ones(4) / 4, seen=np.ones(2, dtype=bool), title="t")


def test_training_loss_one_line_per_seed_and_floor():
    loss = np.array([[3.0, 3.1], [2.7, 2.8], [2.6, 2.65]])
    ax = plot_training_loss(loss, seeds=[4, 9], floor=2.5, title="loss")
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"seed 4", "seed 9", "floor: mean entropy of p*"}
    # column k is seed k's curve
    np.testing.assert_allclose(lines["seed 9"].get_ydata(), loss[:, 1])
    # steps count from 1
    np.testing.assert_allclose(lines["seed 4"].get_xdata(), [1, 2, 3])
    assert set(lines["floor: mean entropy of p*"].get_ydata()) == {2.5}
    with pytest.raises(ValueError, match=r"\[steps, K\]"):
        plot_training_loss(np.ones(3), title="t")
    with pytest.raises(ValueError, match="seeds"):
        plot_training_loss(loss, seeds=[1], title="t")


def test_distribution_bars_leave_headroom_for_the_legend():
    bars = plot_distribution_bars(np.array([0.0, 0.5, 0.5]), title="t")
    assert bars.get_ylim() == pytest.approx((0.0, 0.7))  # 40% above the tallest bar


def test_length_panels_draw_one_panel_per_metric():
    from lengthgen_lite.core.evaluation import METRICS, LengthTable
    from lengthgen_lite.viz.ch1_set_complement import LENGTH_PANELS, plot_length_panels

    s = np.arange(1, 6)
    tables = [
        LengthTable(s=s, **{m: s / 10 * (k + 1) for m in METRICS}) for k in range(2)
    ]
    axes = plot_length_panels({"soft targets": tables}, train_length=2, title="t")
    assert [ax.get_title() for ax in axes] == [title for _, _, title in LENGTH_PANELS]
    assert axes[3].get_ylim() == (0.0, 1.05)  # top-1 accuracy on a fixed range
