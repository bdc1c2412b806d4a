import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib.colors import to_hex

from lengthgen_lite.viz.ch6_ema import (
    VARIANT_COLORS,
    plot_averaging_toy,
    plot_factor_importance,
    plot_gradient_noise,
    plot_search_factors,
    plot_temperature_frontier,
    plot_unbiasedness,
    plot_variant_summary,
    plot_variant_tv,
    summary_table,
    temperature_slider,
    temperature_slider_figure,
)


def grid_rows():
    rows = []
    for norm in ("none", "attn_out"):
        for batch in (32, 128):
            for variant, tv in (("raw", 0.3), ("ema", 0.2)):
                for seed in (0, 1):
                    rows.append(
                        {
                            "norm": norm,
                            "lr": 3e-3,
                            "batch": batch,
                            "variant": variant,
                            "seed": seed,
                            "tv_train": tv / 3,
                            "tv_beyond": tv,
                        }
                    )
    return rows


def test_gradient_noise_plot_has_two_log_panels():
    rows = [
        {
            "where": w,
            "batch": b,
            "targets": t,
            "trace_cov": 1.0 + (t == "sampled"),
            "snr": 0.5,
        }
        for w in ("at init", "after training")
        for b in (32, 128)
        for t in ("soft", "sampled")
    ]
    fig = plot_gradient_noise(rows, title="noise")
    assert len(fig.axes) == 2 and all(ax.get_yscale() == "log" for ax in fig.axes)
    assert len(fig.axes[0].patches) >= 8  # one bar per setting and target kind
    with pytest.raises(ValueError, match="lack the columns"):
        plot_gradient_noise([{"where": "x"}], title="noise")
    with pytest.raises(ValueError, match="at least one row"):
        plot_gradient_noise([], title="noise")


def test_unbiasedness_plot_draws_curve_and_guide():
    n = np.arange(1, 9)
    ax = plot_unbiasedness(n, {"init": 1 / np.sqrt(n)}, title="t")
    assert len(ax.lines) == 2 and ax.get_xscale() == "log"
    np.testing.assert_allclose(ax.lines[1].get_ydata(), 1 / np.sqrt(n))
    with pytest.raises(ValueError, match="shape"):
        plot_unbiasedness(n, {"init": np.ones(3)}, title="t")
    with pytest.raises(ValueError, match="at least one"):
        plot_unbiasedness(n, {}, title="t")


def test_averaging_toy_plot():
    steps = np.arange(5)
    fig = plot_averaging_toy(
        steps,
        steps * 0.1,
        {"raw": steps * 1.0, "ema": steps * 0.5},
        {"raw": np.ones(5), "ema": np.ones(5) / 2},
        title="toy",
    )
    left, right = fig.axes
    assert (
        len(left.lines) == 3 and len(right.lines) == 2 and right.get_yscale() == "log"
    )
    with pytest.raises(ValueError, match="one value per step"):
        plot_averaging_toy(steps, steps, {"raw": np.ones(3)}, {}, title="toy")


def test_variant_tv_plot_shades_training_range():
    s = np.arange(1, 6)
    ax = plot_variant_tv(
        s, {"raw": np.ones((2, 5)), "ema": np.zeros((2, 5))}, train_length=2, title="t"
    )
    means = {ln.get_label(): ln.get_ydata() for ln in ax.get_lines()}
    np.testing.assert_allclose(means["raw"], 1.0) and np.testing.assert_allclose(
        means["ema"], 0.0
    )
    assert {to_hex(ln.get_color()) for ln in ax.get_lines()} == {
        to_hex(VARIANT_COLORS["raw"]),
        to_hex(VARIANT_COLORS["ema"]),
    }
    (span,) = ax.patches
    assert span.get_x() + span.get_width() == 2.5  # shaded up to the training length
    assert (
        "mean of 2 seeds" in ax.get_legend().get_title().get_text()
        and ax.get_ylim()[0] == 0
    )
    with pytest.raises(ValueError, match="len\\(s\\)=5"):
        plot_variant_tv(s, {"raw": np.ones(4)}, train_length=2, title="t")


def test_variant_summary_and_table():
    fig = plot_variant_summary(grid_rows(), title="grid")
    assert len(fig.axes) == 4
    assert fig.axes[0].get_title() == "norm = none"
    table = summary_table(grid_rows())
    assert table.shape == (4, 4)
    assert table.iloc[0].tolist() == pytest.approx([0.1, 0.2 / 3, 0.3, 0.2], abs=1e-3)


def test_temperature_frontier_and_slider_figure():
    scales = [0.5, 1.0, 2.0]
    curves = {
        "raw": (np.array([0.1, 0.2, 0.3]), np.array([0.5, 0.4, 0.3])),
        "ema": (np.zeros(3), np.zeros(3)),
    }
    ax = plot_temperature_frontier(scales, curves, title="t")
    assert len(ax.lines) == 4  # a curve and a c = 1 marker per model
    # c = 1 is the large marker; 8 is not in this grid
    assert {t.get_text() for t in ax.texts} == {"c=2"}
    with pytest.raises(ValueError, match="per scale"):
        plot_temperature_frontier(
            scales, {"raw": (np.zeros(2), np.zeros(2))}, title="t"
        )
    with pytest.raises(ValueError, match="at least one"):
        plot_temperature_frontier(scales, {}, title="t")

    s = np.arange(1, 5)
    tv = {
        "raw": np.tile(np.array([[0.1], [0.2], [0.3]]), (1, 4)),
        "ema": np.zeros((3, 4)),
    }
    fig = temperature_slider_figure(s, scales, tv, 2.0, train_length=2, title="t")
    assert len(fig.data) == 4
    np.testing.assert_allclose(fig.data[0].y, 0.3)  # raw at c = 2
    np.testing.assert_allclose(fig.data[1].y, 0.2)  # raw as trained
    with pytest.raises(ValueError, match="among the evaluated scales"):
        temperature_slider_figure(s, scales, tv, 3.0, train_length=2, title="t")
    with pytest.raises(ValueError, match="len\\(scales\\), len\\(s\\)"):
        temperature_slider_figure(
            s, scales, {"raw": np.zeros((2, 4))}, 2.0, train_length=2, title="t"
        )


def test_search_factor_plots():
    rows = []
    for run, (norm, lr, batch, dropout) in enumerate(
        [("none", 1e-3, 32, 0.1), ("post", 1e-2, 128, 0.2)]
    ):
        for ema in (False, True):
            rows.append(
                {
                    "run": run,
                    "norm": norm,
                    "lr": lr,
                    "batch": batch,
                    "dropout": dropout,
                    "ema": ema,
                    "tv_train": 0.1 + 0.1 * (not ema),
                    "tv_beyond": 0.4,
                }
            )
    fig = plot_search_factors(
        rows,
        factors=["norm", "lr", "batch", "dropout", "ema"],
        responses=["tv_train", "tv_beyond"],
        title="search",
    )
    assert len(fig.axes) == 10
    assert fig.axes[1].get_xscale() == "log"
    assert len(fig.axes[4].lines) == 2  # one paired line per run
    ax = plot_factor_importance({"tv_train": {"ema": 0.5, "norm": 0.1}}, title="imp")
    assert len(ax.patches) >= 2
    with pytest.raises(ValueError, match="at least one response"):
        plot_factor_importance({}, title="imp")


def test_temperature_slider_has_one_step_per_factor_and_draws_each():
    s, scales = np.arange(1, 5), [0.5, 1.0, 2.0]
    tv = {
        "raw": np.tile(np.array([[0.1], [0.2], [0.3]]), (1, 4)),
        "ema": np.zeros((3, 4)),
    }
    figure = temperature_slider(
        s, scales, tv, [0.5, 2.0], train_length=2, title="t", name="ch6-test"
    )
    assert figure.labels == ["0.5", "2.0"]
    assert figure.updates[figure.steps[1]]["y"][0] == [0.3] * 4  # raw at c = 2
    with pytest.raises(ValueError, match="among the evaluated scales"):
        temperature_slider(
            s, scales, tv, [3.0], train_length=2, title="t", name="ch6-test"
        )
