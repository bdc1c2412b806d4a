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


def test_fast_path_numbers_span_every_chapter_and_check_their_rows():
    from lengthgen_lite.viz import speed

    row = {
        "chapter": "ch5 post-norm",
        "batch": 128,
        "positions": 4,
        "fast_speedup": 1.5,
        "compiled_speedup": 5.0,
        "compiled_speedup_range": [4.0, 6.0],
        "repeats_ms": {"reference": [2.0, 2.5], "compiled": [0.4, 0.5]},
        "compiled_ms": 0.5,
        "limit_ms": 0.1,
        "compile_cold_s": 17.6,
        "compile_warm_s": 4.2,
        "compile_reused_s": 0.02,
        "break_even_seed_steps": 3500.0,
    }
    other = row | {"chapter": "ch1 baseline", "compile_cold_s": 23.4}
    fast = {"rows": [other, row], "repeats": 5, "load_before": [1.0, 1.0, 1.0]}
    numbers = speed.fast_path_numbers(fast)
    assert (numbers["speed-compile-cold"], numbers["speed-compile-warm"]) == (18, 4)
    assert (numbers["speed-compile-cold-low"], numbers["speed-compile-cold-high"]) == (
        18,
        23,
    )
    with pytest.raises(ValueError, match="no fast-path row for chapter 'ch9'"):
        speed.fast_path_numbers(fast, chapter="ch9")
    # a missing key in any chapter's row, not only the quoted one's
    without = {k: v for k, v in other.items() if k != "compile_warm_s"}
    with pytest.raises(ValueError, match="fast-path rows lack \\['compile_warm_s'\\]"):
        speed.fast_path_numbers(fast | {"rows": [row, without]})
    with pytest.raises(ValueError, match="fast-path section lacks \\['repeats'\\]"):
        speed.fast_path_numbers({k: v for k, v in fast.items() if k != "repeats"})


# a retrieval section as benchmarks/retrieval.py writes it (its every key), with made-up
# numbers
RETRIEVAL_ROWS = [
    {
        "config": "argmax_retrieval none",
        "auto_plan": "query_only + token_tables + compiled",
        "reference_ms": 2.0,
        "query_only_ms": 1.5,
        "tables_ms": 1.0,
        "compiled_ms": 0.6,
        "auto_ms": 0.6,
        "query_only_speedup": 1.3,
        "tables_speedup": 2.0,
        "compiled_speedup": 3.3,
        "auto_speedup": 3.0,
        "layout_off_ms": 0.75,
        "eval_before_s": 3.0,
        "eval_after_s": 0.2,
        "compile_cold_s": 26.3,
        "compile_warm_s": 4.7,
    },
    {
        "config": "argmax_retrieval none item_mlp 64",
        "auto_plan": "query_only + token_tables + compiled",
        "reference_ms": 3.0,
        "query_only_ms": 2.0,
        "tables_ms": 1.6,
        "compiled_ms": 1.2,
        "auto_ms": 1.2,
        "query_only_speedup": 1.5,
        "tables_speedup": 1.9,
        "compiled_speedup": 2.5,
        "auto_speedup": 2.0,
        "layout_off_ms": 1.32,
        "eval_before_s": 2.0,
        "eval_after_s": 0.4,
        "compile_cold_s": 56.8,
        "compile_warm_s": 11.5,
    },
]
RETRIEVAL = {
    "steps": 200,
    "repeats": 5,
    "seeds": 10,
    "n_test": 100,
    "statistic": "median",
    "rows": RETRIEVAL_ROWS,
    "mean_reference_ms": 2.5,
    "mean_auto_ms": 0.9,
    "load_before": [1.5, 2.0, 2.5],
    "load_after": [2.0, 2.0, 2.0],
}


def test_retrieval_numbers_against_the_target():
    from lengthgen_lite.viz import speed

    numbers = speed.retrieval_numbers(RETRIEVAL)
    assert numbers["speed-retrieval-configs"] == 2
    assert numbers["speed-retrieval-seeds"] == 10
    assert numbers["speed-retrieval-reference-ms"] == 2.5
    assert numbers["speed-retrieval-auto-ms"] == 0.9
    assert numbers["speed-retrieval-x"] == 2.5  # the mean of 3.0 and 2.0
    # the layout's gain: the mean of 0.75 / 0.6 and 1.32 / 1.2
    assert numbers["speed-retrieval-layout-x"] == 1.18
    assert numbers["speed-retrieval-target-ms"] == 0.8
    assert numbers["speed-retrieval-target"] == "missed, by 0.1 ms per seed-step"
    assert numbers["speed-retrieval-over"] == 1  # the item MLP's 1.2 ms
    fast = [r | {"auto_ms": 0.5} for r in RETRIEVAL_ROWS]
    met = speed.retrieval_numbers(RETRIEVAL | {"mean_auto_ms": 0.8, "rows": fast})
    assert (met["speed-retrieval-target"], met["speed-retrieval-over"]) == ("met", 0)
    assert numbers["speed-retrieval-eval-before"] == 2.5
    assert numbers["speed-retrieval-eval-after"] == 0.3
    assert (
        numbers["speed-retrieval-cold-low"],
        numbers["speed-retrieval-cold-high"],
    ) == (
        26,
        57,
    )
    assert (
        numbers["speed-retrieval-warm-low"],
        numbers["speed-retrieval-warm-high"],
    ) == (
        5,
        12,
    )
    assert numbers["speed-retrieval-load"] == "1.5, 2.0, 2.5"


def test_retrieval_numbers_need_every_key():
    from lengthgen_lite.viz import speed

    section = {k: v for k, v in RETRIEVAL.items() if k != "mean_auto_ms"}
    with pytest.raises(
        ValueError, match="retrieval section lacks \\['mean_auto_ms'\\]"
    ):
        speed.retrieval_numbers(section)
    rows = [{k: v for k, v in r.items() if k != "eval_after_s"} for r in RETRIEVAL_ROWS]
    with pytest.raises(ValueError, match="retrieval rows lack \\['eval_after_s'\\]"):
        speed.retrieval_numbers(RETRIEVAL | {"rows": rows})
    with pytest.raises(ValueError, match="no retrieval rows"):
        speed.retrieval_numbers(RETRIEVAL | {"rows": []})


def test_retrieval_plot_draws_each_measured_part_and_the_target():
    from lengthgen_lite.viz import speed

    fig = speed.plot_retrieval(RETRIEVAL_ROWS, title="retrieval")
    ax = fig.axes[0]
    widths = sorted(p.get_width() for p in ax.patches)
    # four parts per row
    assert widths == sorted([2.0, 1.5, 1.0, 0.6, 3.0, 2.0, 1.6, 1.2])
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        r["config"] for r in RETRIEVAL_ROWS
    ]
    (target,) = [line for line in ax.get_lines() if "target" in line.get_label()]
    np.testing.assert_allclose(target.get_xdata(), [0.8, 0.8])
    assert ax.get_xscale() == "log" and ax.get_xlabel() and ax.get_ylabel()
    plt.close(fig)
    with pytest.raises(ValueError, match="retrieval rows lack \\['auto_ms'\\]"):
        speed.plot_retrieval(
            [{"config": "x", "reference_ms": 1.0, "query_only_ms": 1, "tables_ms": 1}],
            title="t",
        )


DEPTH_ROW = {
    "model": "ch8 depth pre_final d=64",
    "seeds": 3,
    "batch": 128,
    "positions": 8,
    "d_model": 64,
    "d_mlp": 256,
    "n_layers": 2,
    "fast_float32_ms": 3.0,
    "fast_bfloat16_ms": 4.0,
    "compiled_float32_ms": 1.0,
    "compiled_bfloat16_ms": 2.0,
    "fast_bf16_speedup": 0.75,
    "compiled_bf16_speedup": 0.5,
    "repeats_ms": {"compiled float32": [1.0, 1.1]},
    "matmul_gflops_float32": 80.0,
    "limit_float32_ms": 0.25,
    "matmul_gflops_bfloat16": 20.0,
    "limit_bfloat16_ms": 1.0,
    "compile_cold_s_float32": 20.2,
    "compile_warm_s_float32": 4.4,
    "compile_cold_s_bfloat16": 30.6,
    "compile_warm_s_bfloat16": 6.0,
}
DEPTH = {
    "steps": 200,
    "repeats": 5,
    "statistic": "median",
    "cpu_capability": "AVX2",
    "bf16_flags": [],
    "native_bf16": False,
    "load_before": [1.0, 1.5, 2.0],
    "load_after": [1.0, 1.0, 1.0],
    "rows": [
        DEPTH_ROW,
        DEPTH_ROW
        | {
            "model": "ch8 depth pre_final d=128",
            "d_model": 128,
            "d_mlp": 512,
            "compiled_float32_ms": 2.0,
            "limit_float32_ms": 0.5,
            "compiled_bfloat16_ms": 3.0,
            "limit_bfloat16_ms": 0.5,
            "compiled_bf16_speedup": 0.67,
            "compile_cold_s_float32": 25.0,
        },
    ],
}


def test_depth_numbers_state_bf16_support_and_the_limits():
    from lengthgen_lite.viz import speed

    numbers = speed.depth_numbers(DEPTH)
    assert numbers["speed-depth-capability"] == "AVX2"
    assert numbers["speed-depth-bf16"].startswith("emulated")
    assert numbers["speed-depth-load"] == "1.0, 1.5, 2.0"
    # the widest model's compiled steps against each dtype's limit
    assert (numbers["speed-depth-wide-d"], numbers["speed-depth-wide-mlp"]) == (
        128,
        512,
    )
    assert (numbers["speed-depth-fp32-ms"], numbers["speed-depth-fp32-limit-ms"]) == (
        2.0,
        0.5,
    )
    assert (numbers["speed-depth-bf16-ms"], numbers["speed-depth-bf16-limit-ms"]) == (
        3.0,
        0.5,
    )
    assert numbers["speed-depth-bf16-x"] == 0.67
    # every model: the compiled step over its limit, and the compile costs
    assert numbers["speed-depth-fp32-limit-x-low"] == 4.0
    assert numbers["speed-depth-bf16-limit-x-low"] == 2.0
    assert numbers["speed-depth-bf16-limit-x-high"] == 6.0
    assert (
        numbers["speed-depth-fp32-cold-low"],
        numbers["speed-depth-fp32-cold-high"],
    ) == (
        20,
        25,
    )
    assert numbers["speed-depth-bf16-warm-high"] == 6
    native = speed.depth_numbers(
        DEPTH | {"native_bf16": True, "bf16_flags": ["amx_bf16"]}
    )
    assert native["speed-depth-bf16"].startswith("native (amx_bf16): ")
    unknown = speed.depth_numbers(DEPTH | {"native_bf16": None, "bf16_flags": None})
    assert unknown["speed-depth-bf16"].startswith("not known")


def test_depth_numbers_need_every_key():
    from lengthgen_lite.viz import speed

    with pytest.raises(ValueError, match="two-layer section lacks \\['native_bf16'\\]"):
        speed.depth_numbers({k: v for k, v in DEPTH.items() if k != "native_bf16"})
    row = {k: v for k, v in DEPTH_ROW.items() if k != "limit_bfloat16_ms"}
    with pytest.raises(
        ValueError, match="two-layer rows lack \\['limit_bfloat16_ms'\\]"
    ):
        speed.depth_numbers(DEPTH | {"rows": [row]})
    assert set(speed.DEPTH_COLUMNS) <= set(DEPTH_ROW)
    assert set(speed.RETRIEVAL_COLUMNS) <= set(RETRIEVAL_ROWS[0])
