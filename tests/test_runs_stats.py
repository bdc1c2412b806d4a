import numpy as np
import pytest
from scipy import stats as scipy_stats

from lengthgen_lite.runs.stats import (
    converged,
    equivalent,
    loss_plateau,
    paired_interval,
    pooled,
    rising,
    t_interval,
    unstable_seeds,
)


def test_t_interval_is_students_and_narrows_with_seeds():
    rng = np.random.default_rng(1)
    few, many = rng.normal(1.0, 0.5, 5), rng.normal(1.0, 0.5, 80)
    a, b = t_interval(few), t_interval(many)
    assert a.low < a.mean < a.high and b.low < b.mean < b.high
    assert b.high - b.low < a.high - a.low
    expected = scipy_stats.t.ppf(0.975, 4) * few.std(ddof=1) / np.sqrt(5)
    assert a.half_width == pytest.approx(expected)
    assert b.excludes_zero and not t_interval([-1.0, 1.0, -0.5, 0.5]).excludes_zero
    assert a.text(2).count("[") == 1 and t_interval([1.0, 2.0]).text(1) == (
        "1.5 [-4.9, 7.9]"
    )
    assert a.at_level(0.9).half_width < a.half_width


def test_paired_interval_keeps_pairs_together():
    rng = np.random.default_rng(2)
    shared = rng.normal(0, 10, 12)  # seed-to-seed spread much larger than the effect
    a, b = shared + 0.1 + rng.normal(0, 0.01, 12), shared
    paired = paired_interval(a, b)
    assert paired.mean == pytest.approx(0.1, abs=0.01) and paired.excludes_zero
    assert not t_interval(a).excludes_zero or t_interval(a).low < 0.1
    with pytest.raises(ValueError, match="same seeds"):
        paired_interval(a, b[:-1])
    with pytest.raises(ValueError, match="at least 2 finite"):
        t_interval(np.array([1.0]))


def test_equivalence_is_the_ninety_percent_interval_inside_the_bounds():
    tight = t_interval(0.002 + 0.001 * np.array([-1.0, 1.0, 0.0, 0.5, -0.5]))
    assert equivalent(tight, 0.01) and not equivalent(tight, 0.0025)
    wide = t_interval([-0.05, 0.05, 0.0, 0.02, -0.02])
    assert not equivalent(wide, 0.01)
    with pytest.raises(ValueError, match="sesoi"):
        equivalent(tight, 0.0)


def test_pooled_estimate_is_stratified_by_cell():
    a = t_interval([0.0, 0.2, 0.1, 0.1])
    b = t_interval([1.0, 1.2, 1.1, 1.1, 1.0, 1.2, 1.1, 1.1])  # more seeds, same weight
    both = pooled([a, b])
    assert both.mean == pytest.approx(0.6)
    assert both.se == pytest.approx(np.sqrt(a.se**2 + b.se**2) / 2)
    assert 3 < both.df < 3 + 7  # Welch-Satterthwaite, between the cells' own
    with pytest.raises(ValueError, match="at least one cell"):
        pooled([])


def test_plateau_tells_a_flat_curve_from_a_falling_and_a_rising_one():
    steps = np.arange(1000)[:, None]
    flat = 1 + 4 * np.exp(-steps / 50.0)  # converged long before step 1000
    falling = 5 - 4 * steps / 1000.0  # still falling linearly
    rising = np.where(steps < 800, flat, 1 + (steps - 800) / 400.0)  # rises at the end
    assert loss_plateau(flat, 1000)[0] < 1e-6 and converged(flat, 1000)
    assert loss_plateau(falling, 1000)[0] == pytest.approx(0.1 / 0.945, rel=0.02)
    assert not converged(falling, 1000) and not converged(flat, 100)
    assert loss_plateau(rising, 1000)[0] < -0.01 and not converged(rising, 1000)
    with pytest.raises(ValueError, match="allowed: 20..1000"):
        loss_plateau(flat, 2000)
    with pytest.raises(ValueError, match=r"\[steps, seeds\]"):
        loss_plateau(flat[:, 0], 100)


def test_stored_windows_show_a_rise():
    ends = list(range(100, 6001, 100))
    flat = np.array([[1 + 4 * np.exp(-e / 500.0) for e in ends]])
    jump = flat.copy()
    jump[0, 40:] += 0.3  # a jump at step 4100 that stays
    assert not rising(flat, ends, 6000) and not rising(jump, ends, 6000)
    assert rising(jump, ends, 4200)  # the jump inside the last tenth
    assert not rising(flat, ends, 1000)  # still falling is not rising
    with pytest.raises(ValueError, match="not a window end"):
        rising(flat, ends, 1050)


def test_a_seed_that_jumps_and_stays_up_is_unstable():
    healthy = [1.0, 0.6, 0.4, 0.35, 0.34, 0.34]
    noisy = [1.0, 0.6, 0.4, 0.35, 0.33, 0.36]  # 0.03 above its best: 4% of the fall
    collapsed = [1.0, 0.5, 0.349, 1.357, 0.613, 0.613]
    assert unstable_seeds(np.array([healthy, noisy, collapsed])).tolist() == [
        False,
        False,
        True,
    ]
    with pytest.raises(ValueError, match="windows >= 2"):
        unstable_seeds(np.array([1.0, 0.5]))
