import numpy as np
import pytest

from lengthgen_lite.viz.ch2_attention_dispersion import (
    DispersionGrid,
    dispersion_draw,
    plot_attention_pattern,
)
from lengthgen_lite.viz.sliders import static_slider_figure


def grid(n=2, length=3, v=5):
    pattern = np.broadcast_to(
        np.tril(np.ones((length, length))) / np.arange(1, length + 1)[:, None],
        (n, length, length),
    )
    probs = np.full((n, length, v), 1.0 / v)
    tokens = np.array([[0, 3, 1], [4, 2, 0]])[:n, :length]
    entropy = np.broadcast_to(np.log(np.arange(1, length + 1)), (n, length))
    return DispersionGrid(
        tokens=tokens, pattern=pattern, probs=probs, targets=probs, entropy=entropy
    )


def test_frames_show_the_chosen_length_and_example():
    draw = dispersion_draw(grid())
    fig = draw(s=2, example=1)
    attention, uniform, target, predicted, seen, entropy, log_s, here = fig.data
    # the third key is not seen yet at s = 2
    assert list(attention.y) == [0.5, 0.5, None]
    assert list(attention.text) == ["4", "2", ""]  # bars labelled with their token ids
    assert uniform.y == (0.5, 0.5)
    assert list(seen.x) == [2, 4]
    assert here.x == (2,) and here.text == ("H/log s = 1.000",)
    # past the middle: label to the left
    assert draw(s=3, example=1).data[-1].textposition == "bottom left"
    assert fig.layout.yaxis.range == (0, 1.05)


def test_every_frame_has_the_same_traces_so_the_static_slider_accepts_it():
    figure = static_slider_figure(
        dispersion_draw(grid()), {"s": [1, 2, 3], "example": [0, 1]}, name="ch2-test"
    )
    assert len(figure.labels) == 6 and figure.labels[1] == "s=1, example=1"


def test_bad_shapes_and_slider_values_raise():
    good = grid()
    with pytest.raises(ValueError, match="entropy must have shape"):
        DispersionGrid(
            tokens=good.tokens,
            pattern=good.pattern,
            probs=good.probs,
            targets=good.targets,
            entropy=good.entropy[:, :2],
        )
    draw = dispersion_draw(good)
    with pytest.raises(ValueError, match="1 <= s <= 3"):
        draw(s=4, example=0)
    with pytest.raises(ValueError, match="example"):
        draw(s=1, example=2)


def test_attention_pattern_masks_future_keys():
    pattern = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
    ax = plot_attention_pattern(pattern, tokens=[7, 2, 5], title="pattern")
    values = ax.collections[0].get_array()
    assert np.ma.count(values) == 6  # lower triangle only
    np.testing.assert_allclose(np.ma.compressed(values), pattern[np.tril_indices(3)])
    assert ax.get_xticklabels()[0].get_text() == "1\n(7)"
    assert ax.get_ylabel().startswith("query")


def test_attention_pattern_rejects_bad_input():
    with pytest.raises(ValueError, match="square"):
        plot_attention_pattern(np.ones((2, 3)), title="t")
    with pytest.raises(ValueError, match="tokens"):
        plot_attention_pattern(np.eye(3), tokens=[1], title="t")


def test_relative_attention_pattern_is_centred_on_uniform():
    pattern = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
    pattern[2] = [0.5, 0.25, 0.25]  # row s = 3: s * a = 1.5, 0.75, 0.75
    ax = plot_attention_pattern(pattern, title="relative", relative=True)
    values = np.ma.compressed(ax.collections[0].get_array())
    np.testing.assert_allclose(values, [1, 1, 1, 1.5, 0.75, 0.75])
    # symmetric around 1
    assert ax.collections[0].get_clim() == pytest.approx((0.5, 1.5))


def test_dispersion_draw_draws_each_figure_once():
    draw = dispersion_draw(grid())
    assert draw(s=2, example=1) is draw(s=2, example=1)
    assert draw(s=2, example=1) is not draw(s=3, example=1)


def test_multi_panel_figures_of_the_chapter():
    import matplotlib

    matplotlib.use("Agg")
    from lengthgen_lite.core.evaluation import METRICS, LengthTable
    from lengthgen_lite.viz.ch2_attention_dispersion import (
        plot_gap_decay,
        plot_implied_invalid_mass,
        plot_spread_measures,
    )

    s = np.arange(1, 6)
    tables = [LengthTable(s=s, **{m: 1.0 / s for m in METRICS}) for _ in range(2)]
    runs = {"soft targets": tables, "sampled targets": tables}
    curves = {name: np.stack([1.0 / s] * 2) for name in runs}
    axes = plot_spread_measures(runs, curves, train_length=2)
    assert [ax.get_title() for ax in axes] == [
        "Entropy",
        "Effective number of tokens",
        "Largest weight",
    ]
    axes = plot_gap_decay(s, curves, gap_s2=0.5, train_length=2)
    assert axes[0].get_yscale() == "log" and axes[1].get_title().startswith("s x gap")
    axes = plot_implied_invalid_mass(s, curves, curves, train_length=2)
    assert [ax.get_title() for ax in axes] == list(runs)
