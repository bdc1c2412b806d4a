import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from lengthgen_lite.chapters import ch4_pretrained as pretrained
from lengthgen_lite.viz.ch4_pretrained import (
    LAYER_LABEL,
    minilm_figure,
    plot_layer_heatmap,
    plot_layer_slopes,
    plot_slope_against_sink,
)


def test_layer_slopes_heatmap_and_sink_scatter():
    slope = np.array([-0.3, -0.1, 0.0])
    ax = plot_layer_slopes(
        [8, 512],
        {"a": (slope, slope - 0.1, slope + 0.1), "b": (slope, slope, slope)},
        title="t",
    )
    assert ax.get_xlabel() == LAYER_LABEL and "N = 8..512" in ax.get_title()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "law: -0.5",
        "a",
        "b",
    ]
    ax = plot_layer_heatmap(
        [8, 16], np.array([[0.1, 0.2], [0.0, 0.5]]), title="sink", colorbar="mass"
    )
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "16"]
    ax = plot_slope_against_sink(
        {"x": np.array([0.1, 0.5, 0.2])},
        {"x": slope},
        title="t",
        xlabel="sink",
        ylabel="slope",
    )
    assert len(ax.texts) == 3
    with pytest.raises(ValueError, match="values must be"):
        plot_layer_heatmap([8], np.zeros((2, 2)), title="t", colorbar="c")
    with pytest.raises(ValueError, match="same non-empty labels"):
        plot_slope_against_sink(
            {"x": slope}, {"y": slope}, title="t", xlabel="a", ylabel="b"
        )
    with pytest.raises(ValueError, match="at least one"):
        plot_layer_slopes([8, 16], {}, title="t")


def test_the_minilm_figure():
    sizes = [4, 16, 64]

    class Table:
        after_wo = np.abs(np.random.default_rng(1).normal(size=(3, 2, 5))) + 0.1

    tables = {"MiniLM": Table(), "random init": Table()}
    bert_curves = pretrained.minilm_curves(tables, [1, "middle"])
    assert list(bert_curves[1]) == [
        "MiniLM, median",
        "MiniLM, o_0",
        "random init, median",
        "random init, o_0",
    ]
    np.testing.assert_allclose(
        bert_curves["middle"]["MiniLM, o_0"], Table.after_wo[:, 1, 0]
    )
    fig = minilm_figure(sizes, bert_curves)
    assert fig.axes[1].get_title() == "middle position N/2"
