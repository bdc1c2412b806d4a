"""The book's one look, for matplotlib/seaborn figures and for plotly slider figures."""

from __future__ import annotations

import matplotlib as mpl
import plotly.graph_objects as go
import plotly.io as pio
import seaborn as sns

PALETTE = sns.color_palette("colorblind").as_hex()


def use_book_style() -> None:
    """Set the seaborn theme, matplotlib defaults and the default plotly template for
    the book.

    Called once in each chapter's import cell; every later figure (matplotlib or plotly)
    uses it.
    """
    sns.set_theme(context="notebook", style="whitegrid", palette=PALETTE)
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 100,
            "figure.constrained_layout.use": True,
            "axes.titlesize": "medium",
            "savefig.bbox": "tight",
        }
    )
    pio.templates["lengthgen"] = go.layout.Template(
        layout={
            "colorway": PALETTE,
            "font": {"size": 13},
            "margin": {"t": 50, "l": 60, "r": 20},
        }
    )
    pio.templates.default = "plotly_white+lengthgen"
