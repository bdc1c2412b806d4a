import numpy as np
import pytest

from lengthgen_lite.chapters.ch2_attention_dispersion import exponent_slack, power_law_exponent, scaled_min_weight


def test_power_law_exponent_recovers_the_power():
    s = np.arange(2, 16)
    assert power_law_exponent(s, 3.0 / s) == pytest.approx(-1.0)
    assert power_law_exponent(s, 0.5 * s**-1.5) == pytest.approx(-1.5)


def test_exponent_slack_bounds_every_factor_in_the_band():
    s = np.arange(2, 16)
    spread = 1.3
    slack = exponent_slack(s, spread)
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(2000):
        factor = np.exp(rng.uniform(0, np.log(spread), len(s)))  # in [1, spread]
        worst = max(worst, abs(power_law_exponent(s, factor / s) + 1))
    assert worst <= slack + 1e-12
    extreme = np.where(np.log(s) > np.log(s).mean(), spread, 1.0) / s  # the bound is attained
    assert abs(power_law_exponent(s, extreme) + 1) == pytest.approx(slack)
    assert exponent_slack(s, 1.0) == 0.0


def test_scaled_min_weight_is_one_for_uniform_attention_and_sees_the_least_attended_token():
    length = 5
    uniform = np.tril(np.ones((length, length))) / np.arange(1, length + 1)[:, None]
    np.testing.assert_allclose(scaled_min_weight(uniform[None]), np.ones(length - 1))
    skewed = uniform.copy()
    skewed[2, :3] = [0.1, 0.3, 0.6]  # s = 3: the least attended earlier token has 0.1
    assert scaled_min_weight(skewed[None])[1] == pytest.approx(0.3)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="s must"):
        power_law_exponent([2], [1.0])
    with pytest.raises(ValueError, match="y must"):
        power_law_exponent([2, 3], [1.0, -1.0])
    with pytest.raises(ValueError, match="spread"):
        exponent_slack([2, 3], 0.5)
    with pytest.raises(ValueError, match="pattern"):
        scaled_min_weight(np.zeros((2, 3)))
