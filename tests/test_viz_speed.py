import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lengthgen_lite.viz.speed import plot_batching, plot_chapter_costs  # noqa: E402

CHAPTERS = [
    {"chapter": "01_set_complement", "wall_seconds": 35.0, "cpu_seconds": 33.0},
    {"chapter": "02_attention_dispersion", "wall_seconds": 43.0, "cpu_seconds": 41.0},
]
BATCHING = [
    {"batch": b, "seeds": k, "loop_ms_per_step": 2.0 * k, "batched_ms_per_step": 1.0 + k / 4, "speedup": 2.0 * k / (1.0 + k / 4)}
    for b in (32, 128)
    for k in (4, 8, 16)
]


def test_chapter_costs_draw_one_bar_per_chapter_and_measure():
    fig = plot_chapter_costs(CHAPTERS, budget=150, title="costs")
    ax = fig.axes[0]
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == sorted([35.0, 33.0, 43.0, 41.0])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["01", "02"]
    assert ax.get_ylabel() and ax.get_xlabel()
    plt.close(fig)


def test_batching_plots_the_speedup_per_batch():
    fig = plot_batching(BATCHING, title="batching")
    right = fig.axes[1]
    speedups = {line.get_label(): line.get_ydata() for line in right.get_lines() if line.get_label().startswith("batch")}
    expected = [row["speedup"] for row in BATCHING if row["batch"] == 32]
    np.testing.assert_allclose(speedups["batch 32"], expected)
    plt.close(fig)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plot_chapter_costs([], title="t"), "no chapter rows"),
        (lambda: plot_chapter_costs([{"chapter": "01"}], title="t"), "lack"),
        (lambda: plot_batching([{"batch": 32}], title="t"), "lack"),
    ],
)
def test_bad_rows_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()
