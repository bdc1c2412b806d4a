import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lengthgen_lite.viz import ema_plots  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def grid_rows():
    rows = []
    for norm in ("none", "attn_out"):
        for batch in (32, 128):
            for variant, tv in (("raw", 0.3), ("ema", 0.2)):
                for seed in (0, 1):
                    rows.append({"norm": norm, "lr": 3e-3, "batch": batch, "variant": variant, "seed": seed,
                                 "tv_train": tv / 3, "tv_beyond": tv})
    return rows


def test_gradient_noise_plot_has_two_log_panels():
    rows = [{"where": w, "batch": b, "targets": t, "trace_cov": 1.0 + (t == "sampled"), "snr": 0.5}
            for w in ("at init", "after training") for b in (32, 128) for t in ("soft", "sampled")]
    fig = ema_plots.plot_gradient_noise(rows, title="noise")
    assert len(fig.axes) == 2 and all(ax.get_yscale() == "log" for ax in fig.axes)
    assert len(fig.axes[0].patches) >= 8  # one bar per setting and target kind
    with pytest.raises(ValueError, match="lack the columns"):
        ema_plots.plot_gradient_noise([{"where": "x"}], title="noise")
    with pytest.raises(ValueError, match="at least one row"):
        ema_plots.plot_gradient_noise([], title="noise")


def test_unbiasedness_plot_draws_curve_and_guide():
    n = np.arange(1, 9)
    ax = ema_plots.plot_unbiasedness(n, {"init": 1 / np.sqrt(n)}, title="t")
    assert len(ax.lines) == 2 and ax.get_xscale() == "log"
    np.testing.assert_allclose(ax.lines[1].get_ydata(), 1 / np.sqrt(n))
    with pytest.raises(ValueError, match="shape"):
        ema_plots.plot_unbiasedness(n, {"init": np.ones(3)}, title="t")
    with pytest.raises(ValueError, match="at least one"):
        ema_plots.plot_unbiasedness(n, {}, title="t")


def test_averaging_toy_plot():
    steps = np.arange(5)
    fig = ema_plots.plot_averaging_toy(steps, steps * 0.1, {"raw": steps * 1.0, "ema": steps * 0.5},
                                       {"raw": np.ones(5), "ema": np.ones(5) / 2}, title="toy")
    left, right = fig.axes
    assert len(left.lines) == 3 and len(right.lines) == 2 and right.get_yscale() == "log"
    with pytest.raises(ValueError, match="one value per step"):
        ema_plots.plot_averaging_toy(steps, steps, {"raw": np.ones(3)}, {}, title="toy")


def test_variant_tv_plot_shades_training_range():
    s = np.arange(1, 6)
    ax = ema_plots.plot_variant_tv(s, {"raw": np.ones((2, 5)), "ema": np.zeros((2, 5))}, train_length=2, title="t")
    assert len(ax.lines) == 2 and len(ax.patches) == 1  # the shaded training range
    assert "2 seeds" in ax.get_legend().get_texts()[1].get_text()
    with pytest.raises(ValueError, match="K, len"):
        ema_plots.plot_variant_tv(s, {"raw": np.ones(5)}, train_length=2, title="t")


def test_variant_summary_and_table():
    fig = ema_plots.plot_variant_summary(grid_rows(), title="grid")
    assert len(fig.axes) == 4
    assert fig.axes[0].get_title() == "norm = none"
    table = ema_plots.summary_table(grid_rows())
    assert table.shape == (4, 4)
    assert table.iloc[0].tolist() == pytest.approx([0.1, 0.2 / 3, 0.3, 0.2], abs=1e-3)


def test_temperature_frontier_and_slider_figure():
    scales = [0.5, 1.0, 2.0]
    curves = {"raw": (np.array([0.1, 0.2, 0.3]), np.array([0.5, 0.4, 0.3])), "ema": (np.zeros(3), np.zeros(3))}
    ax = ema_plots.plot_temperature_frontier(scales, curves, title="t")
    assert len(ax.lines) == 4  # a curve and a c = 1 marker per model
    assert {t.get_text() for t in ax.texts} == {"c=2"}  # c = 1 is the large marker; 8 is not in this grid
    with pytest.raises(ValueError, match="per scale"):
        ema_plots.plot_temperature_frontier(scales, {"raw": (np.zeros(2), np.zeros(2))}, title="t")
    with pytest.raises(ValueError, match="at least one"):
        ema_plots.plot_temperature_frontier(scales, {}, title="t")

    s = np.arange(1, 5)
    tv = {"raw": np.tile(np.array([[0.1], [0.2], [0.3]]), (1, 4)), "ema": np.zeros((3, 4))}
    fig = ema_plots.temperature_slider_figure(s, scales, tv, 2.0, train_length=2, title="t")
    assert len(fig.data) == 4
    np.testing.assert_allclose(fig.data[0].y, 0.3)  # raw at c = 2
    np.testing.assert_allclose(fig.data[1].y, 0.2)  # raw as trained
    with pytest.raises(ValueError, match="among the evaluated scales"):
        ema_plots.temperature_slider_figure(s, scales, tv, 3.0, train_length=2, title="t")
    with pytest.raises(ValueError, match="len\\(scales\\), len\\(s\\)"):
        ema_plots.temperature_slider_figure(s, scales, {"raw": np.zeros((2, 4))}, 2.0, train_length=2, title="t")


def test_search_factor_plots():
    rows = []
    for run, (norm, lr, batch, dropout) in enumerate([("none", 1e-3, 32, 0.1), ("post", 1e-2, 128, 0.2)]):
        for ema in (False, True):
            rows.append({"run": run, "norm": norm, "lr": lr, "batch": batch, "dropout": dropout, "ema": ema,
                         "tv_train": 0.1 + 0.1 * (not ema), "tv_beyond": 0.4})
    fig = ema_plots.plot_search_factors(rows, factors=["norm", "lr", "batch", "dropout", "ema"],
                                        responses=["tv_train", "tv_beyond"], title="search")
    assert len(fig.axes) == 10
    assert fig.axes[1].get_xscale() == "log"
    assert len(fig.axes[4].lines) == 2  # one paired line per run
    ax = ema_plots.plot_factor_importance({"tv_train": {"ema": 0.5, "norm": 0.1}}, title="imp")
    assert len(ax.patches) >= 2
    with pytest.raises(ValueError, match="at least one response"):
        ema_plots.plot_factor_importance({}, title="imp")


def test_panel_row():
    fig, axes = ema_plots.panel_row(3, title="row")
    assert len(axes) == 3 and fig.get_suptitle() == "row"
    with pytest.raises(ValueError, match="positive int"):
        ema_plots.panel_row(0, title="row")
