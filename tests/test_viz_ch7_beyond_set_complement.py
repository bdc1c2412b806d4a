import numpy as np
import pytest

from lengthgen_lite.viz.ch7_beyond_set_complement import (
    plot_curves,
    prediction_draw,
    prediction_static_slider,
    verdict_table,
)


def fake_rows():
    rows = []
    for norm in ("none", "attn_out"):
        for variant in ("raw", "ema"):
            for seed in (0, 1, 2):
                rows.append(
                    {
                        "task": "anbn",
                        "targets": "soft",
                        "norm": norm,
                        "variant": variant,
                        "seed": seed,
                        "tv_beyond": 0.1 * (seed + 1),
                    }
                )
    return rows


def test_verdict_table_puts_raw_and_ema_side_by_side():
    table = verdict_table(fake_rows())
    assert list(table.columns) == ["tv_beyond, raw", "tv_beyond, ema", "seeds"]
    assert (
        table.loc[("anbn", "soft", "none"), "tv_beyond, raw"] == "0.200 [0.100, 0.300]"
    )
    assert table["seeds"].tolist() == [3, 3]
    with pytest.raises(ValueError, match="rows must hold"):
        verdict_table([])
    with pytest.raises(ValueError, match=r"rows lack the columns \['tv_set'\]"):
        verdict_table(fake_rows(), column="tv_set")


def test_prediction_slider_has_one_step_per_placement_and_length():
    rng = np.random.default_rng(0)
    probs = {norm: rng.dirichlet(np.ones(5), size=4) for norm in ("none", "post")}
    tv = {norm: rng.uniform(size=(3, 4)) for norm in probs}
    draw = prediction_draw(
        probs,
        np.full((4, 5), 0.2),
        tv,
        output_labels=list("abcde"),
        train_length=2,
        title="t",
    )
    assert len(draw("none", 1).data) == len(draw("post", 4).data) == 4
    slider = prediction_static_slider(
        draw, ["none", "post"], [1, 2, 3, 4], name="ch7-test"
    )
    assert slider.labels[0] == "norm=none, s=1" and len(slider.labels) == 8
    with pytest.raises(ValueError, match="same, non-empty set of placements"):
        prediction_draw(
            probs,
            np.zeros((4, 5)),
            {"none": tv["none"]},
            output_labels=list("abcde"),
            train_length=2,
            title="t",
        )


def test_plot_curves_labels_the_length_axis():
    ax = plot_curves(
        np.arange(1, 49),
        {"none": np.zeros((3, 48))},
        ylabel="TV",
        title="t",
        train_length=16,
    )
    assert ax.get_xlabel().startswith("length s") and ax.get_title() == "t"


def test_chapter_figures_from_a_tiny_run():
    import matplotlib.pyplot as plt

    from lengthgen_lite.chapters import ch7_beyond_set_complement as ch7
    from lengthgen_lite.runs import run
    from lengthgen_lite.viz import ch7_beyond_set_complement as figures

    spec = ch7.SPECS["ch7/placements"].with_overrides(seeds=[0, 1], steps=5, n_test=50)
    results = run(spec, progress=False)
    share = results.curves(
        "share_single", task="tictactoe", targets="soft", norm="none"
    )[0]
    drawn = [
        figures.plot_game_placements(results, title=""),
        figures.plot_running_and_finished(results, share, title=""),
        figures.plot_game_diagnostics(results, title=""),
        figures.plot_languages(results, title=""),
    ]
    assert [len(fig.axes) for fig in drawn] == [4, 2, 2, 4]
    assert drawn[3].axes[2].get_title() == "unlock, soft targets"
    for fig in drawn:
        plt.close(fig)
