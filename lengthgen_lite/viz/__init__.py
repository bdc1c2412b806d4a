"""Everything that draws. Nothing outside `viz` imports it."""

from .sliders import SliderFigure, live_slider, static_slider_figure
from .style import PALETTE, use_book_style

__all__ = ["PALETTE", "SliderFigure", "live_slider", "static_slider_figure", "use_book_style"]
