"""How long a live slider move takes (not run by the tests: it measures the machine's
load too).

    OMP_NUM_THREADS=1 python benchmarks/slider_latency.py [--points 2000] [--repeats 5]

Chapters 2, 4 and 5 show live sliders whose callback looks a precomputed figure up in a
grid and hands it to an Output widget; nothing is recomputed on a move. This times that
callback for grids of the chapters' shapes (same number of slider values and traces,
random data of the same size), and reports the median and worst move in milliseconds. A
move should feel instant: well under 100 ms. The chapters used to assert this inside the
notebook; a wall-clock bound depends on the machine's load, so it lives here, measured
and reported, not asserted.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import numpy as np
import plotly.graph_objects as go

from lengthgen_lite.viz import live_slider

# (chapter, slider axes, traces per figure): the shapes of the live sliders in the book
SHAPES = {
    "ch2 dispersion (s x example)": (
        {"s": list(range(1, 16)), "example": [0, 1, 2]},
        4,
    ),
    "ch4 random head (N x logit scale)": (
        {"N": [4, 16, 64, 256, 1024], "logit_scale": [1.0, 3.0]},
        4,
    ),
    "ch5 placements (norm x s)": (
        {
            "norm": ["none", "pre", "pre_final", "post", "attn_out"],
            "s": list(range(1, 16)),
        },
        6,
    ),
}


def synthetic_draw(n_traces: int, points: int):
    """A draw(**values) with `n_traces` line traces of `points` points each, seeded by
    the values."""

    def draw(**values: object) -> go.Figure:
        rng = np.random.default_rng(abs(hash(tuple(values.items()))) % 2**32)
        fig = go.Figure()
        for i in range(n_traces):
            fig.add_scatter(
                x=np.arange(points), y=rng.normal(size=points), name=f"trace {i}"
            )
        return fig

    return draw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=2000, help="points per trace")
    parser.add_argument("--repeats", type=int, default=5, help="moves per grid point")
    args = parser.parse_args()
    print(f"{'slider':<36} {'moves':>6} {'median ms':>10} {'max ms':>8}")
    for name, (sliders, n_traces) in SHAPES.items():
        _, callback = live_slider(synthetic_draw(n_traces, args.points), sliders)
        timings = []
        for values in itertools.product(*sliders.values()):
            for _ in range(args.repeats):
                start = time.perf_counter()
                callback(**dict(zip(sliders, values)))
                timings.append(1000 * (time.perf_counter() - start))
        print(
            f"{name:<36} {len(timings):>6} "
            f"{statistics.median(timings):>10.3f} {max(timings):>8.3f}"
        )


if __name__ == "__main__":
    main()
