"""Everything that draws. Nothing outside `viz` imports it.

`common` (axes, panels, the seed-band curve primitive, labels, tables, rounded glue),
`sliders` (static plotly and live ipywidgets slider figures) and `style` serve every
chapter; `chN_*` holds chapter N's figures, built only on those and on `core` and
`chapters.chN_*`.
"""

from .sliders import SliderFigure, live_slider, static_slider_figure
from .style import PALETTE, use_book_style

__all__ = [
    "PALETTE",
    "SliderFigure",
    "live_slider",
    "static_slider_figure",
    "use_book_style",
]
