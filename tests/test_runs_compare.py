import numpy as np
import pytest

from lengthgen_lite.runs import Results
from lengthgen_lite.runs.claims import Claim
from lengthgen_lite.runs.compare import (
    collapsed_in,
    level_effects,
    paired_effects,
    unstable_counts,
)
from tiny_experiment import tiny_spec

CLAIM = Claim(
    "ch9-score-x",
    "attn_out lowers TV beyond L",
    "[ours]",
    metric="TV beyond L",
    unit="TV",
    effect="none minus attn_out",
    sesoi=0.01,
    cells=("init",),
)

SEEDS = range(10)


def fabricated(gain_book: float, gain_torch: float, early: float = 0.0) -> Results:
    """TV beyond L is 0.5 + seed noise; attn_out lowers it by the gain of its init
    (at step 60), or by ``early`` (at the checkpoint, step 20)."""
    spec = tiny_spec(
        grid={"norm": ("none", "attn_out"), "init": ("book", "torch")},
        seeds=tuple(SEEDS),
        steps=60,
        checkpoints=(20,),
    )
    noise = np.random.default_rng(0).normal(0, 0.05, len(SEEDS))
    # the treated side's own noise: small, and centred (its mean over these seeds
    # is 0.0011, inside its interval)
    jitter = np.random.default_rng(1).normal(0, 0.005, len(SEEDS))
    rows = []
    for index, config in enumerate(spec.configurations()):
        for step in (20, 60):
            gain = {"book": gain_book, "torch": gain_torch}[config.init]
            drop = (gain if step == 60 else early) * (config.norm == "attn_out")
            for seed in SEEDS:
                tv = 0.5 + noise[seed] - drop + jitter[seed] * (config.norm != "none")
                rows.append(
                    {
                        "config": index,
                        "variant": "raw",
                        "seed": seed,
                        "scale": 1.0,
                        "step": step,
                        "s": [1, 2, 3, 4, 5],
                        "tv": [0.0, 0.0, 0.0, tv, tv],
                    }
                )
    return Results(spec, rows)


def verdict_of(results: Results, step: int = 60) -> str:
    effects = paired_effects(
        results, "tv_beyond", {"norm": "attn_out"}, {"norm": "none"}
    )
    return CLAIM.decide([e for e in effects if e.step == step], "reference").word


def test_cells_span_the_other_axes_and_every_budget():
    effects = paired_effects(
        fabricated(0.1, 0.0), "tv_beyond", {"norm": "attn_out"}, {"norm": "none"}
    )
    assert [(e.cell, e.step) for e in effects] == [
        ({"init": "book"}, 20),
        ({"init": "book"}, 60),
        ({"init": "torch"}, 20),
        ({"init": "torch"}, 60),
    ]
    assert effects[1].interval.mean == pytest.approx(0.1, abs=0.002)
    assert not any(e.converged for e in effects)  # no training record: not converged


@pytest.mark.parametrize(
    "gains, word",
    [
        ((0.1, 0.1), "reproduced"),
        ((0.1, 0.0), "mixed"),
        ((0.0, 0.0), "no effect"),
        ((-0.1, -0.1), "reversed"),
    ],
)
def test_verdict_words(gains, word):
    assert verdict_of(fabricated(*gains)) == word


def test_a_verdict_that_changes_with_budget_says_so():
    effects = paired_effects(
        fabricated(0.1, 0.1), "tv_beyond", {"norm": "attn_out"}, {"norm": "none"}
    )
    assert CLAIM.decide(effects, "reference").budget == (
        "flips with budget: 20 steps: no effect; 60 steps: reproduced; still moving"
    )
    steady = paired_effects(
        fabricated(0.1, 0.1, early=0.1),
        "tv_beyond",
        {"norm": "attn_out"},
        {"norm": "none"},
    )
    assert CLAIM.decide(steady, "reference").budget == (
        "the same verdict at 20, 60 steps; stable"
    )


def test_bad_comparisons_are_clear_errors():
    results = fabricated(0.1, 0.1)
    with pytest.raises(ValueError, match=r"\['init'\] differ"):
        paired_effects(
            results, "tv_beyond", {"norm": "post", "init": "book"}, {"norm": "none"}
        )
    with pytest.raises(ValueError, match="ch9-score-x: no cell to decide it"):
        CLAIM.decide([], "reference")
    with pytest.raises(ValueError, match="sign=2"):
        paired_effects(
            results, "tv_beyond", {"norm": "attn_out"}, {"norm": "none"}, sign=2
        )


def test_a_partial_sweep_compares_only_the_cells_with_both_sides_stored():
    results = fabricated(0.1, 0.1)
    # the torch init's attn_out configuration is not stored yet
    torch_attn_out = [
        i
        for i, c in enumerate(results.configs)
        if c.init == "torch" and c.norm == "attn_out"
    ]
    rows = [r for r in results.rows if r["config"] not in torch_attn_out]
    complete = Results(results.spec, rows)
    with pytest.raises(ValueError, match="matches 0 configurations"):
        paired_effects(complete, "tv_beyond", {"norm": "attn_out"}, {"norm": "none"})
    partial = Results(results.spec, rows, {"missing": torch_attn_out})
    effects = paired_effects(
        partial, "tv_beyond", {"norm": "attn_out"}, {"norm": "none"}
    )
    assert {e.cell["init"] for e in effects} == {"book"}


def test_a_level_of_a_derived_quantity():
    results = fabricated(0.1, 0.1)

    def spread_beyond(r, **where):  # TV at s = 5 minus TV at s = 1, per seed
        tv = r.curves("tv", **where)
        return tv[:, -1] - tv[:, 0]

    derived = level_effects(results, spread_beyond, minus=0.5, norm="none")
    direct = level_effects(results, "tv_longest", minus=0.5, norm="none")
    assert [e.cell for e in derived] == [e.cell for e in direct]
    assert [e.interval.mean for e in derived] == pytest.approx(
        [e.interval.mean for e in direct]
    )


def test_stored_loss_windows_flag_a_collapsed_seed():
    results = fabricated(0.1, 0.1)
    ends = [10, 20, 30, 40, 50, 60]
    falling = [1.0, 0.6, 0.4, 0.35, 0.34, 0.34]
    collapsed = [1.0, 0.5, 0.35, 1.3, 0.62, 0.61]  # jumps up and stays above its best
    training = {}
    for index, config in enumerate(results.configs):
        windows = [falling] * len(SEEDS)
        if config.norm == "attn_out" and config.init == "torch":
            windows = [collapsed] * 3 + [falling] * (len(SEEDS) - 3)
        converged = {"20": True, "60": True}
        training[index] = {
            "window_ends": ends,
            "loss_windows": windows,
            "converged": converged,
        }
    stored = Results(results.spec, results.rows, stored_training=training)
    counts = unstable_counts(stored)
    assert sorted(counts.values()) == [0, 0, 0, 3]
    effects = paired_effects(
        stored, "tv_beyond", {"norm": "attn_out"}, {"norm": "none"}
    )
    final = {e.cell["init"]: e for e in effects if e.step == 60}
    assert final["torch"].unstable == 3 and final["book"].unstable == 0
    # the collapsed seeds sit on a new plateau: flat, so only the seed rule catches them
    assert final["book"].converged and final["torch"].converged
    decision = CLAIM.decide(effects, "reference")
    assert decision.word == "mixed" and decision.counts == {
        "helps": 1,
        "inconclusive": 1,
    }


def test_a_live_loss_curve_that_climbs_back_is_flagged():
    steps = np.arange(600, dtype=float)
    settled = 2.0 * np.exp(-steps / 50) + 0.3  # falls and stays down
    climbs = settled.copy()
    climbs[400:] = 1.2  # falls to 0.3, then jumps back most of the way up
    flags = collapsed_in(np.stack([settled, climbs], axis=1))
    assert flags.tolist() == [False, True]


def test_batch_noise_on_a_short_live_curve_is_not_a_collapse():
    rng = np.random.default_rng(0)
    steps = np.arange(400, dtype=float)[:, None]
    noisy = 2.0 * np.exp(-steps / 30) + 0.5 + rng.normal(0.0, 0.1, (400, 16))
    assert not collapsed_in(noisy).any()
