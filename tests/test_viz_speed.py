import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from lengthgen_lite.viz.speed import plot_batching, plot_chapter_costs, plot_fast_path

CHAPTERS = [
    {"chapter": "01_set_complement", "wall_seconds": 35.0, "cpu_seconds": 33.0},
    {"chapter": "02_attention_dispersion", "wall_seconds": 43.0, "cpu_seconds": 41.0},
]
BATCHING = [
    {
        "batch": b,
        "seeds": k,
        "loop_ms_per_step": 2.0 * k,
        "batched_ms_per_step": 1.0 + k / 4,
        "speedup": 2.0 * k / (1.0 + k / 4),
    }
    for b in (32, 128)
    for k in (4, 8, 16)
]


def test_chapter_costs_draw_one_bar_per_chapter_and_measure():
    fig = plot_chapter_costs(CHAPTERS, budget=150, title="costs")
    ax = fig.axes[0]
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == sorted([35.0, 33.0, 43.0, 41.0])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["01", "02"]
    assert ax.get_ylabel() and ax.get_xlabel()
    plt.close(fig)


def test_batching_plots_the_speedup_per_batch():
    fig = plot_batching(BATCHING, title="batching")
    right = fig.axes[1]
    speedups = {
        line.get_label(): line.get_ydata()
        for line in right.get_lines()
        if line.get_label().startswith("batch")
    }
    expected = [row["speedup"] for row in BATCHING if row["batch"] == 32]
    np.testing.assert_allclose(speedups["batch 32"], expected)
    plt.close(fig)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plot_chapter_costs([], title="t"), "no chapter rows"),
        (lambda: plot_chapter_costs([{"chapter": "01"}], title="t"), "lack"),
        (lambda: plot_batching([{"batch": 32}], title="t"), "lack"),
    ],
)
def test_bad_rows_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()


FAST_PATH = [
    {
        "chapter": "ch1 baseline",
        "reference_ms": 2.5,
        "fast_ms": 1.2,
        "compiled_ms": 0.4,
        "limit_ms": 0.1,
    },
    {
        "chapter": "ch5 post-norm",
        "reference_ms": 2.7,
        "fast_ms": 1.3,
        "compiled_ms": 0.5,
        "limit_ms": 0.1,
    },
]


def test_fast_path_draws_three_bars_per_chapter_and_the_limit():
    fig = plot_fast_path(FAST_PATH, title="paths")
    ax = fig.axes[0]
    assert sorted(p.get_height() for p in ax.patches) == sorted(
        r[k] for r in FAST_PATH for k in ("reference_ms", "fast_ms", "compiled_ms")
    )
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "ch1 baseline",
        "ch5 post-norm",
    ]
    np.testing.assert_allclose(ax.collections[0].get_offsets()[:, 1], [0.1, 0.1])
    plt.close(fig)


def test_fast_path_rows_need_every_column():
    with pytest.raises(ValueError, match="fast-path rows lack \\['limit_ms'\\]"):
        plot_fast_path(
            [{k: v for k, v in FAST_PATH[0].items() if k != "limit_ms"}], title="paths"
        )


def test_machine_summary_load_text_and_load_results(tmp_path):
    import json

    from lengthgen_lite.viz import speed

    machine = {
        "cpu": "x",
        "cores": 2,
        "torch_threads": 1,
        "load_before": [0.51, 1.0, 2.25],
        "load_after": [1, 1, 1],
    }
    assert list(speed.machine_summary(machine)) == [
        "CPU",
        "cores",
        "torch threads",
        "load average before (1, 5, 15 min)",
        "after",
    ]
    assert speed.load_text(machine["load_before"]) == "0.5, 1.0, 2.2"
    path = tmp_path / "speed.json"
    path.write_text(json.dumps({"machine": machine}))
    assert speed.load_results(path)["machine"] == machine


def test_batching_and_fast_path_numbers():
    from lengthgen_lite.viz import speed

    results = {
        "batching": BATCHING,
        "matmul_bound": {
            "seeds": 8,
            "batch": 128,
            "speedup_bound": 5.04,
            "batched_matmul_ms_per_step": 1.26,
            "batched_other_ops_ms_per_step": 2.0,
        },
    }
    numbers = speed.batching_numbers(results)
    assert numbers["speed-k"] == 8 and numbers["speed-small-batch"] == 32
    expected = [
        r["speedup"] for r in BATCHING if r["batch"] == 128 and r["seeds"] == 8
    ][0]
    assert numbers["speed-x"] == round(expected, 1) and numbers["speed-bound"] == 5.0
    row = {"chapter": "ch5 post-norm", "fast_speedup": 1.14, "compiled_speedup": 1.5}
    row |= {"compiled_speedup_range": [1.26, 1.74]}
    row |= {"repeats_ms": {"reference": [3.0, 2.5, 2.61], "compiled": [2.0, 1.75, 1.9]}}
    row |= {
        "compile_cold_s": 20.4,
        "compile_warm_s": 3.6,
        "compile_reused_s": 0.012,
        "break_even_seed_steps": 1249.0,
    }
    row |= {"compiled_ms": 2.0, "limit_ms": 1.0, "batch": 128, "positions": 4}
    fast = speed.fast_path_numbers(
        {"rows": [row], "load_before": [0.25, 1.0, 1.0], "repeats": 5}
    )
    assert (fast["speed-compiled-x-low"], fast["speed-compiled-x-high"]) == (1.3, 1.7)
    assert fast["speed-repeats"] == 5
    assert (fast["speed-reference-ms-low"], fast["speed-reference-ms-high"]) == (
        2.5,
        3.0,
    )
    assert (fast["speed-compiled-ms-low"], fast["speed-compiled-ms-high"]) == (
        1.75,
        2.0,
    )
    assert fast["speed-compile-cold"] == 20 and fast["speed-break-even"] == 1200
    assert fast["speed-limit-x"] == 2.0 and fast["speed-fast-load"] == "0.2, 1.0, 1.0"
    # 1249 seed-steps x 128 sequences x 4 positions
    assert fast["speed-break-even-m"] == 0.6 and fast["speed-compile-reused"] == 0.01
    assert len(speed.FAST_PATH_COLUMNS) == 14
