import numpy as np
import pytest

from lengthgen_lite.runs.stats import (
    bootstrap,
    converged,
    loss_plateau,
    paired_bootstrap,
)


def test_bootstrap_interval_covers_the_mean_and_narrows_with_seeds():
    rng = np.random.default_rng(1)
    few, many = rng.normal(1.0, 0.5, 5), rng.normal(1.0, 0.5, 80)
    a, b = bootstrap(few), bootstrap(many)
    assert a.low < a.mean < a.high and b.low < b.mean < b.high
    assert b.high - b.low < a.high - a.low
    assert bootstrap(few) == a  # a fixed generator: the same bounds on a re-run
    assert (
        b.excludes_zero
        and not bootstrap(np.array([-1.0, 1.0, -0.5, 0.5])).excludes_zero
    )
    assert a.text(2).count("[") == 1


def test_paired_bootstrap_keeps_pairs_together():
    rng = np.random.default_rng(2)
    shared = rng.normal(0, 10, 12)  # seed-to-seed spread much larger than the effect
    a, b = shared + 0.1, shared
    paired = paired_bootstrap(a, b)
    assert paired.mean == pytest.approx(0.1) and paired.excludes_zero
    assert not bootstrap(a).excludes_zero or bootstrap(a).low < 0.1 < bootstrap(a).high
    with pytest.raises(ValueError, match="same seeds"):
        paired_bootstrap(a, b[:-1])
    with pytest.raises(ValueError, match="at least 2 finite"):
        bootstrap(np.array([1.0]))


def test_plateau_tells_a_flat_curve_from_a_falling_one():
    steps = np.arange(1000)[:, None]
    flat = 1 + 4 * np.exp(-steps / 50.0)  # converged long before step 1000
    falling = 5 - 4 * steps / 1000.0  # still falling linearly
    assert loss_plateau(flat, 1000)[0] < 1e-6 and converged(flat, 1000)
    assert loss_plateau(falling, 1000)[0] == pytest.approx(0.1 / 0.945, rel=0.02)
    assert not converged(falling, 1000) and not converged(flat, 100)
    with pytest.raises(ValueError, match="allowed: 20..1000"):
        loss_plateau(flat, 2000)
    with pytest.raises(ValueError, match=r"\[steps, seeds\]"):
        loss_plateau(flat[:, 0], 100)
