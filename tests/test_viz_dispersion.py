import numpy as np
import pytest

from lengthgen_lite.viz.dispersion import DispersionGrid, dispersion_draw
from lengthgen_lite.viz.sliders import static_slider_figure


def grid(n=2, length=3, v=5):
    pattern = np.broadcast_to(np.tril(np.ones((length, length))) / np.arange(1, length + 1)[:, None], (n, length, length))
    probs = np.full((n, length, v), 1.0 / v)
    tokens = np.array([[0, 3, 1], [4, 2, 0]])[:n, :length]
    entropy = np.broadcast_to(np.log(np.arange(1, length + 1)), (n, length))
    return DispersionGrid(tokens=tokens, pattern=pattern, probs=probs, targets=probs, entropy=entropy)


def test_frames_show_the_chosen_length_and_example():
    draw = dispersion_draw(grid())
    fig = draw(s=2, example=1)
    attention, uniform, target, predicted, seen, entropy, log_s, here = fig.data
    assert list(attention.y) == [0.5, 0.5, None]  # the third key is not seen yet at s = 2
    assert list(attention.text) == ["4", "2", ""]  # bars labelled with their token ids
    assert uniform.y == (0.5, 0.5)
    assert list(seen.x) == [2, 4]
    assert here.x == (2,) and here.text == ("H/log s = 1.000",)
    assert draw(s=3, example=1).data[-1].textposition == "bottom left"  # past the middle: label to the left
    assert fig.layout.yaxis.range == (0, 1.05)


def test_every_frame_has_the_same_traces_so_the_static_slider_accepts_it():
    figure = static_slider_figure(dispersion_draw(grid()), {"s": [1, 2, 3], "example": [0, 1]}, name="ch2-test")
    assert len(figure.labels) == 6 and figure.labels[1] == "s=1, example=1"


def test_bad_shapes_and_slider_values_raise():
    good = grid()
    with pytest.raises(ValueError, match="entropy must have shape"):
        DispersionGrid(tokens=good.tokens, pattern=good.pattern, probs=good.probs, targets=good.targets,
                       entropy=good.entropy[:, :2])
    draw = dispersion_draw(good)
    with pytest.raises(ValueError, match="1 <= s <= 3"):
        draw(s=4, example=0)
    with pytest.raises(ValueError, match="example"):
        draw(s=1, example=2)
