import json
import math

import ipywidgets as widgets
import matplotlib as mpl
import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from plotly.subplots import make_subplots

from lengthgen_lite.viz import (
    PALETTE,
    SliderFigure,
    live_slider,
    static_slider_figure,
    use_book_style,
)
from lengthgen_lite.viz.sliders import PLOTLY_MIME, PLOTLYJS_PATH


def three_panels(s):
    """Three subplots that all depend on the prefix length s."""
    fig = make_subplots(rows=1, cols=3)
    fig.add_trace(go.Bar(x=np.arange(s), y=np.full(s, 1 / s)), row=1, col=1)
    fig.add_trace(go.Scatter(y=np.arange(4) * s / 3), row=1, col=2)
    fig.add_trace(go.Heatmap(z=np.eye(s) / 7), row=1, col=3)
    return fig


def line(s, example=0):
    return go.Figure(go.Scatter(y=[s, example, math.nan]))


def steps(figure: SliderFigure) -> list[dict]:
    """The steps of the flattened plotly slider (JupyterLab's rendering)."""
    return figure.plotly_json()["layout"]["sliders"][0]["steps"]


def test_one_slider_restyles_every_panel():
    fig = static_slider_figure(three_panels, {"s": [1, 2, 3]}, name="ch2-test")
    assert fig.labels == ["1", "2", "3"]
    update, traces = steps(fig)[2]["args"]
    assert traces == [0, 1, 2]
    assert update["y"][0] == [0.3333] * 3  # rounded to 4 significant digits
    assert update["y"][1] == [0.0, 1.0, 2.0, 3.0]
    assert np.array(update["z"][2]) == pytest.approx(np.eye(3) / 7, abs=1e-4)
    assert update["z"][:2] == [None, None]  # unset for traces without z
    assert [t["xaxis"] for t in fig.figure["data"]] == ["x", "x2", "x3"]
    assert fig.figure["data"][0]["y"] == [1.0]  # the figure opens at the first value
    assert "sliders" not in fig.figure["layout"]  # the book's figure has HTML controls


def test_several_grid_axes_get_one_control_each_and_flatten_for_jupyterlab():
    fig = static_slider_figure(
        line, {"s": [1, 2, 3, 4, 5], "example": [0, 1, 2]}, name="ch2-two"
    )
    assert fig.grid == {"s": [1, 2, 3, 4, 5], "example": [0, 1, 2]}
    assert fig.control_kinds() == {"s": "range", "example": "select"}
    assert len(fig.steps) == 15 and fig.labels[:4] == [
        "s=1, example=0",
        "s=1, example=1",
        "s=1, example=2",
        "s=2, example=0",
    ]
    # s=2, example=1: NaN is stored as null
    assert fig.updates[fig.steps[4]]["y"] == [[2, 1, None]]
    assert steps(fig)[4]["args"][0]["y"] == [[2, 1, None]]
    assert steps(fig)[4]["label"] == "s=2, example=1"
    assert fig.plotly_json()["layout"]["sliders"][0]["currentvalue"]["prefix"] == ""
    html = fig.html()
    assert (
        '<label for="lengthgen-slider-ch2-two-s">s</label> <input type="range" '
        'id="lengthgen-slider-ch2-two-s" data-axis="0" min="0" max="4" step="1" '
        'value="0" autocomplete="off" aria-valuetext="1">' in html
    )
    assert (
        '<output id="lengthgen-slider-ch2-two-s-value" '
        'for="lengthgen-slider-ch2-two-s" aria-hidden="true">1</output>' in html
    )
    assert (
        '<label for="lengthgen-slider-ch2-two-example">example</label> <select '
        'id="lengthgen-slider-ch2-two-example" data-axis="1" autocomplete="off">'
        '<option value="0" selected>0</option><option value="1">1</option>' in html
    )


def test_combinations_that_draw_the_same_data_share_one_update():
    def clamped(v, s):
        return go.Figure(go.Scatter(y=[v, min(s, v - 1)]))

    fig = static_slider_figure(clamped, {"v": [2, 3], "s": [1, 2, 3]}, name="ch3-x")
    assert fig.steps == [0, 0, 0, 1, 2, 2]
    assert [u["y"] for u in fig.updates] == [[[2, 1]], [[3, 1]], [[3, 2]]]
    # JupyterLab's one slider: each distinct figure once, at its first combination
    assert [step["label"] for step in steps(fig)] == [
        "v=2, s=1",
        "v=3, s=1",
        "v=3, s=2",
    ]
    assert steps(fig)[2]["args"][0]["y"] == [[3, 2]]


def test_categorical_and_short_axes_get_drop_downs_with_escaped_values():
    def named(kind, n):
        return go.Figure(go.Scatter(y=[n], name=kind))

    fig = static_slider_figure(
        named, {"kind": ["a<b", "c", "d", "e", "f"], "n": [1, 2]}, name="ch5-x"
    )
    assert fig.control_kinds() == {"kind": "select", "n": "select"}
    assert '<option value="0" selected>a&lt;b</option>' in fig.html()
    assert "a<b" not in fig.html().split("<script>")[0]


def test_mimebundle_is_deterministic_and_loads_local_plotlyjs():
    bundle = static_slider_figure(
        three_panels, {"s": [1, 2]}, name="ch2-test"
    )._repr_mimebundle_()
    again = static_slider_figure(
        three_panels, {"s": [1, 2]}, name="ch2-test"
    )._repr_mimebundle_()
    assert bundle == again
    html = bundle["text/html"]
    assert html.startswith(
        '<div id="lengthgen-slider-ch2-test" class="lengthgen-slider" '
        'data-lengthgen-slider="ch2-test">'
    )
    assert f'"{PLOTLYJS_PATH}"' in html and "content_root" in html
    assert "http" not in html  # nothing from the network
    # plain JSON, with the plotly slider JupyterLab shows
    assert json.loads(json.dumps(bundle[PLOTLY_MIME])) == bundle[PLOTLY_MIME]
    assert len(bundle[PLOTLY_MIME]["layout"]["sliders"][0]["steps"]) == 2
    assert (
        bundle["text/plain"]
        == "SliderFigure(name='ch2-test', values per control: s: 2)"
    )


def test_html_escapes_closing_script_tags():
    def titled(s):
        return go.Figure(go.Scatter(y=[s], name="</script><b>"))

    html = static_slider_figure(titled, {"s": [1]}, name="ch1-x")._repr_mimebundle_()[
        "text/html"
    ]
    assert html.count("</script>") == 1


def test_numpy_grid_values_are_stored_as_python_numbers():
    fig = static_slider_figure(line, {"s": np.arange(1, 3)}, name="ch2-x")
    assert fig.grid == {"s": [1, 2]} and type(fig.grid["s"][0]) is int
    json.dumps(fig.plotly_json())


@pytest.mark.parametrize("name", ["", "Ch2", "ch2 dispersion", "-ch2", "ch2_x"])
def test_bad_names_raise(name):
    with pytest.raises(ValueError, match="name must match"):
        static_slider_figure(line, {"s": [1]}, name=name)


@pytest.mark.parametrize(
    ("sliders", "match"),
    [
        ({}, "at least one grid axis"),
        ({"s": []}, "distinct values"),
        ({"s": [1, 1]}, "distinct values"),
        ({"prefix length": [1]}, "Python identifiers"),
    ],
)
def test_bad_sliders_raise(sliders, match):
    with pytest.raises(ValueError, match=match):
        static_slider_figure(line, sliders, name="ch2-x")


def test_draw_must_keep_its_traces():
    def changing(s):
        return go.Figure([go.Scatter(y=[1])] * s)

    with pytest.raises(ValueError, match="same traces"):
        static_slider_figure(changing, {"s": [1, 2]}, name="ch2-x")


def test_live_slider_swaps_precomputed_figures():
    widget, callback = live_slider(line, {"s": [1, 2, 3], "example": [0, 5]})
    s_slider, example_slider, out = widget.children
    assert isinstance(s_slider, widgets.SelectionSlider) and s_slider.description == "s"
    assert out.outputs[0]["data"][PLOTLY_MIME]["data"][0]["y"] == [1, 0, None]
    s_slider.value, example_slider.value = 3, 5
    assert out.outputs[0]["data"][PLOTLY_MIME]["data"][0]["y"] == [3, 5, None]
    assert out.outputs[0]["data"]["text/plain"] == "figure at s=3, example=5"
    callback(s=2, example=0)
    assert out.outputs[0]["data"][PLOTLY_MIME]["data"][0]["y"] == [2, 0, None]


def test_book_style_sets_palette_for_matplotlib_and_plotly(monkeypatch):
    # restored afterwards
    monkeypatch.setattr(pio.templates, "default", pio.templates.default)
    with mpl.rc_context():
        use_book_style()
        assert (
            mpl.colors.to_hex(mpl.rcParams["axes.prop_cycle"].by_key()["color"][0])
            == PALETTE[0]
        )
    assert pio.templates.default == "plotly_white+lengthgen"
    assert go.Figure().layout.template.layout.colorway == tuple(PALETTE)


def test_training_band_shades_lengths_one_to_train_length_on_its_subplot():
    from lengthgen_lite.viz.sliders import training_band

    band = training_band("x2", 4)
    assert (band["xref"], band["yref"]) == ("x2", "y2 domain")
    assert (band["x0"], band["x1"]) == (0.5, 4.5) and band["layer"] == "below"
    assert training_band("x", 2)["yref"] == "y domain"
