"""Slider figures: a static plotly version for the book and a live ipywidgets version
for Jupyter.

Both take the same `draw(**values) -> go.Figure` and a grid of slider values, and draw
every combination up front, so moving a slider only looks up a precomputed figure.

- `static_slider_figure` runs in the browser with no kernel: plotly's own slider
  restyles the traces with the data stored for each step. Its `text/html` loads the
  plotly.js that the book serves at `<site root>/vendor/plotly.min.js`; JupyterLab
  renders its plotly JSON instead.
- `live_slider` shows ipywidgets sliders (one per grid axis) and swaps the figure in an
  Output widget.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

SliderValue = int | float | str
PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLYJS_PATH = "vendor/plotly.min.js"  # relative to the site root; see _config.yml

_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")

# One loader per page however many figures it holds; `data-content_root` is set by
# Sphinx on <html>.
_HTML = """<div id="{div_id}" class="lengthgen-slider" data-lengthgen-slider="{name}"></div>
<script>
(function () {{
  window.lengthgenPlotly = window.lengthgenPlotly || new Promise(function (resolve, reject) {{
    var script = document.createElement("script");
    script.src = (document.documentElement.dataset.content_root || "") + "{plotlyjs}";
    script.onload = function () {{ resolve(window.Plotly); }};
    script.onerror = function () {{ reject(new Error("could not load " + script.src)); }};
    document.head.appendChild(script);
  }});
  var figure = {figure};
  window.lengthgenPlotly.then(function (Plotly) {{ Plotly.newPlot("{div_id}", figure); }});
}})();
</script>"""  # noqa: E501  (JavaScript, kept on whole lines)


@dataclass(frozen=True)
class SliderFigure:
    """A plotly figure with a slider; displays as HTML in the book and natively in
    JupyterLab."""

    name: str
    # plain JSON: data, layout (with the slider and its steps' data), config
    figure: dict[str, Any]

    @property
    def labels(self) -> list[str]:
        """The slider's step labels, in order: one per combination of grid values."""
        return [step["label"] for step in self.figure["layout"]["sliders"][0]["steps"]]

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        figure = json.dumps(self.figure, separators=(",", ":")).replace("</", "<\\/")
        html = _HTML.format(
            div_id=f"lengthgen-slider-{self.name}",
            name=self.name,
            plotlyjs=PLOTLYJS_PATH,
            figure=figure,
        )
        return {"text/html": html, PLOTLY_MIME: self.figure, "text/plain": repr(self)}

    def __repr__(self) -> str:
        return f"SliderFigure(name={self.name!r}, steps={len(self.labels)})"


def training_band(xaxis: str, train_length: int) -> dict[str, Any]:
    """A plotly shape: the grey band over prefix lengths 1..``train_length`` on the
    subplot whose x axis is ``xaxis`` ("x", "x2", ...), as every length figure has."""
    return {
        "type": "rect",
        "xref": xaxis,
        "yref": f"y{xaxis[1:]} domain",
        "x0": 0.5,
        "x1": train_length + 0.5,
        "y0": 0,
        "y1": 1,
        "fillcolor": "#ccc",
        "opacity": 0.4,
        "line": {"width": 0},
        "layer": "below",
    }


def static_slider_figure(
    draw: Callable[..., go.Figure],
    sliders: Mapping[str, Sequence[SliderValue]],
    *,
    name: str,
    digits: int = 4,
) -> SliderFigure:
    """A figure whose slider switches between `draw(**values)` for every combination of
    `sliders`.

    `draw` must return figures with the same traces in the same order (subplots are
    fine: all panels change together). Each step replaces the traces' data; the layout
    (titles, axes) is the first combination's, and axes without a fixed `range` rescale
    at each step. One grid axis gives one slider; several are flattened into one slider
    whose steps read `s=3, example=1` (last axis fastest). `name` (lowercase, digits,
    hyphens; start it with the chapter prefix) fixes the div id, so outputs are
    identical across runs. Numbers are rounded to `digits` significant digits.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"name must match {_NAME.pattern!r} (e.g. 'ch2-dispersion'), got {name!r}"
        )
    grid = _draw_grid(draw, sliders, digits)
    keys = list(sliders)
    first = next(iter(grid.values()))
    steps = []
    for combo, figure in grid.items():
        label = (
            str(combo[0])
            if len(keys) == 1
            else ", ".join(f"{k}={v}" for k, v in zip(keys, combo))
        )
        traces = list(range(len(figure["data"])))
        steps.append(
            {
                "label": label,
                "method": "restyle",
                "args": [_restyle(figure["data"]), traces],
            }
        )
    prefix = f"{keys[0]} = " if len(keys) == 1 else ""
    slider = {
        "active": 0,
        "steps": steps,
        "currentvalue": {"prefix": prefix},
        "pad": {"t": 50},
    }
    margin = {**first["layout"].get("margin", {}), "b": 110}
    figure = {
        "data": first["data"],
        "layout": {**first["layout"], "sliders": [slider], "margin": margin},
        "config": {"displaylogo": False, "responsive": True},
    }
    return SliderFigure(name=name, figure=figure)


def live_slider(
    draw: Callable[..., go.Figure],
    sliders: Mapping[str, Sequence[SliderValue]],
    *,
    digits: int = 4,
) -> tuple[widgets.VBox, Callable[..., None]]:
    """ipywidgets sliders, one per grid axis, above the figure `draw(**values)` (needs a
    kernel).

    Returns `(widget, callback)`: `callback(**values)` is what a slider move runs (a
    lookup in the precomputed grid and an update of the Output widget), for a notebook
    to time.
    """
    grid = _draw_grid(draw, sliders, digits)
    controls = {
        key: widgets.SelectionSlider(
            options=list(values), description=key, continuous_update=True
        )
        for key, values in sliders.items()
    }
    out = widgets.Output()

    def callback(**values: SliderValue) -> None:
        figure = grid[tuple(values[key] for key in sliders)]
        text = ", ".join(f"{key}={value}" for key, value in values.items())
        data = {PLOTLY_MIME: figure, "text/plain": f"figure at {text}"}
        out.outputs = ({"output_type": "display_data", "data": data, "metadata": {}},)

    def on_change(_change: object) -> None:
        callback(**{key: control.value for key, control in controls.items()})

    for control in controls.values():
        control.observe(on_change, names="value")
    on_change(None)
    return widgets.VBox([*controls.values(), out]), callback


def _draw_grid(
    draw: Callable[..., go.Figure],
    sliders: Mapping[str, Sequence[SliderValue]],
    digits: int,
) -> dict[tuple[SliderValue, ...], dict[str, Any]]:
    """`draw(**values)` as plain, rounded plotly JSON for every combination of slider
    values."""
    if not sliders:
        raise ValueError("sliders must name at least one grid axis")
    for key, values in sliders.items():
        if not key.isidentifier():
            raise ValueError(
                "slider names must be Python identifiers (draw's keywords), "
                f"got {key!r}"
            )
        if len(values) == 0 or len(set(values)) != len(values):
            raise ValueError(
                f"slider {key!r} needs distinct values, got {list(values)!r}"
            )
    grid = {}
    for combo in itertools.product(*sliders.values()):
        figure = _plain(draw(**dict(zip(sliders, combo))).to_plotly_json(), digits)
        grid[combo] = {"data": figure["data"], "layout": figure["layout"]}
    traces = {
        tuple(trace.get("type") for trace in fig["data"]) for fig in grid.values()
    }
    if len(traces) != 1:
        raise ValueError(
            "draw must return the same traces for every slider value, got "
            f"{sorted(traces)}"
        )
    return grid


def _restyle(traces: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Plotly.restyle's update for all traces: dotted attribute -> one value per trace
    (null: unset)."""
    flat = [dict(_flatten(trace)) for trace in traces]
    attributes = sorted(set().union(*flat) - {"type"})
    return {
        attribute: [trace.get(attribute) for trace in flat] for attribute in attributes
    }


def _flatten(obj: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in obj.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _plain(obj: Any, digits: int) -> Any:
    """Plotly JSON with typed arrays decoded to lists, floats rounded and non-finite
    floats as null."""
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, dict):
        if "bdata" in obj:
            array = np.frombuffer(base64.b64decode(obj["bdata"]), dtype=obj["dtype"])
            if "shape" in obj:
                array = array.reshape([int(n) for n in obj["shape"].split(",")])
            return _plain(array.tolist(), digits)
        return {key: _plain(value, digits) for key, value in obj.items()}
    if isinstance(obj, list | tuple | np.ndarray):
        return [_plain(value, digits) for value in obj]
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else None
    return obj
