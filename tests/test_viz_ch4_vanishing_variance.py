import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from lengthgen_lite.viz.ch4_vanishing_variance import (
    histogram_draw,
    plot_against_N,
    plot_paired,
)
from lengthgen_lite.viz.sliders import static_slider_figure

N = np.array([4, 16, 64, 256])


def test_against_N_draws_mean_band_and_training_range():
    seeds = np.array([[0.9, 0.5, 0.2, 0.1], [1.0, 0.7, 0.4, 0.3]])
    ax = plot_against_N(
        N,
        {"acc": seeds, "ref": np.ones(4)},
        title="t",
        ylabel="accuracy",
        train_range=(2, 16),
    )
    (acc,) = [ln for ln in ax.get_lines() if ln.get_label() == "acc"]
    np.testing.assert_allclose(acc.get_ydata(), seeds.mean(0))
    # the one band: only "acc" has seeds
    vertices = ax.collections[0].get_paths()[0].vertices
    for n, low, high in zip(N, seeds.min(0), seeds.max(0)):
        at_n = vertices[vertices[:, 0] == n, 1]
        assert (at_n.min(), at_n.max()) == pytest.approx((low, high))
    (span,) = ax.patches
    assert (span.get_x(), span.get_x() + span.get_width()) == (
        2,
        16,
    ) and span.get_label() == "training sizes 2..16"
    assert (
        ax.get_legend().get_title().get_text()
        == "lines: mean of 2 seeds, bands: min to max"
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: plot_against_N(N, {}, title="t", ylabel="y"), "at least one"),
        (
            lambda: plot_against_N(N, {"a": np.ones(3)}, title="t", ylabel="y"),
            "must be",
        ),
        (
            lambda: plot_against_N(
                N, {"a": np.ones(4)}, title="t", ylabel="y", train_range=(5, 2)
            ),
            "train_range",
        ),
        (
            lambda: histogram_draw({}, title="t", panel_titles=["a"], xlabels=["x"]),
            "at least one",
        ),
        (
            lambda: histogram_draw(
                {(1,): [np.ones(3)]},
                title="t",
                panel_titles=["a", "b"],
                xlabels=["x", "y"],
            ),
            "one sample per panel",
        ),
    ],
)
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_histogram_draw_keeps_bins_fixed_and_works_in_a_static_slider():
    rng = np.random.default_rng(0)
    grid = {(n,): [rng.normal(0, n**-0.5, 300), rng.normal(0, 1, 300)] for n in (4, 64)}
    draw = histogram_draw(
        grid, title="t", panel_titles=["raw", "normed"], xlabels=["o_0", "LN(o)_0"]
    )
    wide, narrow = draw(N=4), draw(N=64)
    assert wide.layout.xaxis.range == narrow.layout.xaxis.range  # same bins at every N
    assert wide.data[0].name.startswith("raw: std 0.") and len(wide.data) == 2
    spread = lambda fig: np.average(np.abs(fig.data[0].x), weights=fig.data[0].y)  # noqa: E731
    assert spread(narrow) < 0.5 * spread(wide)
    with pytest.raises(ValueError, match="no precomputed samples"):
        draw(N=5)
    figure = static_slider_figure(draw, {"N": [4, 64]}, name="ch4-test")
    assert figure.labels == ["4", "64"]


def test_paired_plot_joins_the_means_and_labels_N():
    x, y = (
        np.array([[0.9, 0.5, 0.2, 0.1], [0.7, 0.3, 0.2, 0.1]]),
        np.array([1.0, 0.8, 0.5, 0.3]),
    )
    ax = plot_paired(
        N,
        {"baseline": (x, y)},
        title="t",
        xlabel="attention",
        ylabel="accuracy",
        logx=True,
    )
    (baseline,) = [ln for ln in ax.get_lines() if ln.get_label() == "baseline"]
    np.testing.assert_allclose(baseline.get_xdata(), x.mean(0))
    np.testing.assert_allclose(baseline.get_ydata(), y)
    assert [t.get_text() for t in ax.texts] == ["N=4", "N=16", "N=64", "N=256"]
    with pytest.raises(ValueError, match="at least one"):
        plot_paired(N, {}, title="t", xlabel="x", ylabel="y")


def test_against_N_draws_references_dashed():
    ax = plot_against_N(
        N,
        {"acc": np.ones(4)},
        title="t",
        ylabel="y",
        references={"chance": np.full(4, 0.1)},
    )
    (chance,) = [ln for ln in ax.get_lines() if ln.get_label() == "chance"]
    assert chance.get_linestyle() == "--"
    np.testing.assert_allclose(chance.get_ydata(), 0.1)


def test_against_N_legend_outside_sits_right_of_the_panel():
    ax = plot_against_N(N, {"acc": np.ones(4)}, title="t", ylabel="y", legend="outside")
    assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1


# --- the notebook's whole figures -----------------------------------------------------

from lengthgen_lite.chapters import ch4_vanishing_variance as ch4  # noqa: E402
from lengthgen_lite.runs import Results  # noqa: E402
from lengthgen_lite.viz import ch4_vanishing_variance as vp  # noqa: E402


def fake_results() -> Results:
    """Chapter 4's experiment with made-up per-size rows (2 seeds), nothing trained."""
    spec = ch4.SPECS["ch4/retrieval"].with_overrides(seeds=2)
    rng = np.random.default_rng(0)
    sizes = list(ch4.TEST_SIZES)
    metrics = [
        "accuracy",
        "target_attention",
        "n_eff",
        "median_feature_var",
        "global_mean",
        "global_var",
        "normed_median_feature_var",
        "normed_global_mean",
        "normed_global_var",
    ]
    rows = [
        {"config": i, "variant": "raw", "seed": k, "scale": 1.0, "step": 1000}
        | {"s": sizes}
        | {m: rng.uniform(0.1, 1.0, len(sizes)).tolist() for m in metrics}
        for i in range(6)
        for k in range(2)
    ]
    return Results(spec, rows)


def test_the_retrieval_figures_draw_every_task_and_variant():
    results, N = fake_results(), np.array(ch4.TEST_SIZES)
    accuracy = ch4.fields(results, "accuracy")
    fig = vp.accuracy_figure(N, accuracy)
    assert [ax.get_title() for ax in fig.axes] == list(ch4.TASK_IDS)
    fig = vp.statistics_figure(N, results)
    assert (
        len(fig.axes) == 6 and fig.axes[0].get_title() == "argmax: per-feature variance"
    )
    # baseline before; layernorm and standardize before and after
    assert len(fig.axes[2].get_legend().get_texts()) >= 5
    fig = vp.attention_figure(N, results)
    assert fig.axes[3].get_title() == (
        "dictionary lookup: effective number of attended items"
    )
    rescaled = {t: accuracy[t]["baseline"] for t in ch4.TASK_IDS}
    fig = vp.rescaled_figure(N, results, accuracy, rescaled)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[-1] == "no norm, rescaled at test time"


def test_the_random_head_figure():
    sizes = [4, 16, 64]
    curves = {"uniform": np.array([1.0, 0.5, 0.25])}
    fig = vp.random_head_figure(sizes, curves, {"uniform": np.array([4.0, 16, 64])})
    assert len(fig.axes) == 2 and fig.axes[1].get_yscale() == "log"
