"""Slider figures: a static plotly version for the book and a live ipywidgets version
for Jupyter.

Both take the same `draw(**values) -> go.Figure` and a grid of slider values, and draw
every combination up front, so moving a control only looks up a precomputed figure.

- `static_slider_figure` runs in the browser with no kernel: one native HTML control
  per grid axis (a range input for a long numeric axis, such as the length s, a
  drop-down for the others; both work from the keyboard) restyles the traces with the
  data stored for that combination. Its `text/html` loads the plotly.js that the book
  serves at `<site root>/vendor/plotly.min.js`. JupyterLab renders its plotly JSON
  instead, which cannot hold HTML controls: there one plotly slider steps through every
  combination.
- `live_slider` shows ipywidgets sliders (one per grid axis) and swaps the figure in an
  Output widget.
"""

from __future__ import annotations

import base64
import html
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
# A numeric grid axis with at least this many values gets a range input; others a
# drop-down.
RANGE_MIN_VALUES = 5

_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")

# One loader per page however many figures it holds; `data-content_root` is set by
# Sphinx on <html>. The controls are HTML, so they show (and print) their first values
# before plotly.js arrives; the script wires them once the plot is drawn. A control's
# `data-axis` is its grid axis; the combination's index runs with the last axis fastest.
_HTML = """<div id="{div_id}" class="lengthgen-slider" data-lengthgen-slider="{name}">
<div class="lengthgen-slider-controls">
{controls}
</div>
<div class="lengthgen-slider-plot"></div>
</div>
<script>
(function () {{
  window.lengthgenPlotly = window.lengthgenPlotly || new Promise(function (resolve, reject) {{
    var script = document.createElement("script");
    script.src = (document.documentElement.dataset.content_root || "") + "{plotlyjs}";
    script.onload = function () {{ resolve(window.Plotly); }};
    script.onerror = function () {{ reject(new Error("could not load " + script.src)); }};
    document.head.appendChild(script);
  }});
  var spec = {spec};
  var root = document.getElementById("{div_id}");
  var plot = root.querySelector(".lengthgen-slider-plot");
  var controls = Array.prototype.slice.call(root.querySelectorAll("[data-axis]"));
  controls.sort(function (a, b) {{ return a.dataset.axis - b.dataset.axis; }});
  window.lengthgenPlotly.then(function (Plotly) {{
    var shown = 0;
    function update() {{
      var index = 0;
      controls.forEach(function (control, axis) {{
        var values = spec.grid[axis], i = Number(control.value);
        index = index * values.length + i;
        if (control.type === "range") {{
          control.setAttribute("aria-valuetext", String(values[i]));
          document.getElementById(control.id + "-value").textContent = String(values[i]);
        }}
      }});
      if (spec.steps[index] !== shown) {{
        shown = spec.steps[index];
        Plotly.restyle(plot, spec.updates[shown], spec.traces);
      }}
    }}
    return Plotly.newPlot(plot, spec.figure).then(function () {{
      controls.forEach(function (control) {{ control.addEventListener("input", update); }});
      update();
    }});
  }});
}})();
</script>"""  # noqa: E501  (JavaScript, kept on whole lines)


@dataclass(frozen=True)
class SliderFigure:
    """A plotly figure with one control per grid axis; displays as HTML in the book and
    natively (one flattened plotly slider) in JupyterLab."""

    name: str
    # axis name -> its values, in draw's keyword order
    grid: dict[str, list[SliderValue]]
    # plain JSON: data (the first combination's), layout, config
    figure: dict[str, Any]
    # Plotly.restyle's update for every trace, one per distinct combination's data
    updates: list[dict[str, list[Any]]]
    # combination (last axis fastest) -> its index in `updates`
    steps: list[int]

    @property
    def labels(self) -> list[str]:
        """One label per combination of grid values, in order (last axis fastest)."""
        keys = list(self.grid)
        if len(keys) == 1:
            return [str(value) for value in self.grid[keys[0]]]
        return [
            ", ".join(f"{key}={value}" for key, value in zip(keys, combo))
            for combo in itertools.product(*self.grid.values())
        ]

    def control_kinds(self) -> dict[str, str]:
        """Each grid axis's HTML control: "range" for a numeric axis of at least
        `RANGE_MIN_VALUES` values (a sweep, such as s), "select" otherwise."""
        return {
            key: "range"
            if len(values) >= RANGE_MIN_VALUES
            and all(isinstance(v, int | float) for v in values)
            else "select"
            for key, values in self.grid.items()
        }

    def plotly_json(self) -> dict[str, Any]:
        """The figure with one plotly slider through every combination that draws a
        figure of its own (JupyterLab's rendering, where HTML controls cannot go),
        labelled ``s=3, example=1``."""
        traces = list(range(len(self.figure["data"])))
        first = {}  # each distinct figure once, at its first combination
        for label, i in zip(self.labels, self.steps):
            first.setdefault(i, label)
        steps = [
            {"label": label, "method": "restyle", "args": [self.updates[i], traces]}
            for i, label in first.items()
        ]
        prefix = f"{next(iter(self.grid))} = " if len(self.grid) == 1 else ""
        slider = {
            "active": 0,
            "steps": steps,
            "currentvalue": {"prefix": prefix},
            "pad": {"t": 50},
        }
        layout = self.figure["layout"]
        margin = {**layout.get("margin", {}), "b": 110}
        return {
            **self.figure,
            "layout": {**layout, "sliders": [slider], "margin": margin},
        }

    def html(self) -> str:
        """The book's rendering: the controls above the plot, and the script that draws
        it and restyles it from the controls."""
        div_id = f"lengthgen-slider-{self.name}"
        kinds = self.control_kinds()
        controls = "\n".join(
            _control(f"{div_id}-{key}", key, axis, values, kinds[key])
            for axis, (key, values) in enumerate(self.grid.items())
        )
        spec = {
            "figure": self.figure,
            "grid": list(self.grid.values()),
            "updates": self.updates,
            "steps": self.steps,
            "traces": list(range(len(self.figure["data"]))),
        }
        return _HTML.format(
            div_id=div_id,
            name=self.name,
            controls=controls,
            plotlyjs=PLOTLYJS_PATH,
            spec=json.dumps(spec, separators=(",", ":")).replace("</", "<\\/"),
        )

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return {
            "text/html": self.html(),
            PLOTLY_MIME: self.plotly_json(),
            "text/plain": repr(self),
        }

    def __repr__(self) -> str:
        sizes = ", ".join(f"{key}: {len(values)}" for key, values in self.grid.items())
        return f"SliderFigure(name={self.name!r}, values per control: {sizes})"


def _control(
    control_id: str, key: str, axis: int, values: Sequence[SliderValue], kind: str
) -> str:
    """One labelled HTML control for grid axis number ``axis``; its value is the index
    of the chosen value. ``autocomplete="off"``: a reloaded page opens at the first
    combination, as the plot does."""
    first = html.escape(str(values[0]))
    label = f'<label for="{control_id}">{key}</label>'
    if kind == "range":
        return (
            f'{label} <input type="range" id="{control_id}" data-axis="{axis}" '
            f'min="0" max="{len(values) - 1}" step="1" value="0" autocomplete="off" '
            f'aria-valuetext="{first}"> '
            f'<output id="{control_id}-value" for="{control_id}" aria-hidden="true">'
            f"{first}</output>"
        )
    options = "".join(
        f'<option value="{i}"{" selected" if i == 0 else ""}>'
        f"{html.escape(str(value))}</option>"
        for i, value in enumerate(values)
    )
    return (
        f'{label} <select id="{control_id}" data-axis="{axis}" autocomplete="off">'
        f"{options}</select>"
    )


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
    """A figure with one control per axis of `sliders` that switches between
    `draw(**values)` for every combination.

    `draw` must return figures with the same traces in the same order (subplots are
    fine: all panels change together). Each combination replaces the traces' data; the
    layout (titles, axes) is the first combination's, and axes without a fixed `range`
    rescale. Combinations that draw the same data share one stored update. `name`
    (lowercase, digits, hyphens; start it with the chapter prefix) fixes the element
    ids, so outputs are identical across runs. Numbers are rounded to `digits`
    significant digits.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"name must match {_NAME.pattern!r} (e.g. 'ch2-dispersion'), got {name!r}"
        )
    grid = _draw_grid(draw, sliders, digits)
    first = next(iter(grid.values()))
    updates: list[dict[str, list[Any]]] = []
    seen: dict[str, int] = {}
    steps = []
    for figure in grid.values():
        update = _restyle(figure["data"])
        key = json.dumps(update, sort_keys=True)
        if key not in seen:
            seen[key] = len(updates)
            updates.append(update)
        steps.append(seen[key])
    figure = {
        "data": first["data"],
        "layout": first["layout"],
        "config": {"displaylogo": False, "responsive": True},
    }
    return SliderFigure(
        name=name,
        grid={
            key: [v.item() if isinstance(v, np.generic) else v for v in values]
            for key, values in sliders.items()
        },
        figure=figure,
        updates=updates,
        steps=steps,
    )


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
