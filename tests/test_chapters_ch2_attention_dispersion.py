import numpy as np
import pytest

from lengthgen_lite.chapters.ch2_attention_dispersion import (
    MISS_TOLERANCE,
    accounts_for_leak,
    exponent_slack,
    power_law_exponent,
    scaled_min_weight,
    worst_miss,
)


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
    # the bound is attained
    extreme = np.where(np.log(s) > np.log(s).mean(), spread, 1.0) / s
    assert abs(power_law_exponent(s, extreme) + 1) == pytest.approx(slack)
    assert exponent_slack(s, 1.0) == 0.0


def test_scaled_min_weight_is_one_when_uniform_and_sees_the_least_attended_token():
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


# --- the chapter's measurements and scorecard rows ------------------------------------

import dataclasses  # noqa: E402

import torch  # noqa: E402

from lengthgen_lite.chapters.ch2_attention_dispersion import (  # noqa: E402
    DISPERSION_CLAIM,
    GAP_CLAIM,
    departure_from_uniform,
    dispersion_claim,
    dispersion_margins,
    gap_claim,
    gap_exponents,
    gap_numbers,
    implied_invalid_mass,
    spread,
    spread_numbers,
)
from lengthgen_lite.core.evaluation import METRICS, LengthTable  # noqa: E402
from lengthgen_lite.core.model import ModelConfig, Transformer  # noqa: E402
from lengthgen_lite.core.tasks import sample_sequences  # noqa: E402


def uniform_model(v=6):
    model = Transformer(ModelConfig(vocab_size=v, d_model=8))
    with torch.no_grad():
        model.blocks[0].attn.W_Q.weight.zero_()  # all scores 0: uniform attention
    return model


def uniform_tables(v=6, k=2):
    s = np.arange(1, v)
    values = {m: np.ones(v - 1) for m in METRICS}
    values |= {"n_eff": s * 1.0, "max_attention": 1.0 / s}
    return [LengthTable(s=s, **values) for _ in range(k)]


def test_uniform_attention_departs_nowhere():
    tokens = sample_sequences(6, 5, 20, torch.Generator().manual_seed(0))
    departure, min_weight = departure_from_uniform(
        [uniform_model(), uniform_model()], tokens
    )
    assert departure.shape == (2, 2) and min_weight.shape == (2, 4)
    np.testing.assert_allclose(departure, 0.0, atol=1e-6)
    np.testing.assert_allclose(min_weight, 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="at least one model"):
        departure_from_uniform([], tokens)


def test_spread_of_uniform_attention_and_its_numbers():
    sp = spread(uniform_tables())
    np.testing.assert_allclose(sp.entropy, np.log(np.arange(1, 6))[None].repeat(2, 0))
    assert sp.ratio.shape == sp.n_eff.shape == sp.peak.shape == (2, 4)
    np.testing.assert_allclose(sp.n_eff_ratio, 1.0)
    np.testing.assert_allclose(sp.peak, 1.0)
    numbers = spread_numbers({"soft targets": sp, "sampled targets": sp}, v=6)
    assert numbers["ratio_min_soft"] == 1.0 and numbers["peak_max_sampled"] == 1.0
    assert numbers["log_long"] == round(float(np.log(5)), 3)
    runs = {"soft targets": sp, "sampled targets": sp}
    for margin in dispersion_margins(runs).values():
        np.testing.assert_allclose(margin, 1.0)  # 2 - s max a
    wobble = dataclasses.replace(sp, peak=sp.peak * np.array([[1.0], [1.1]]))
    settled = np.linspace(2.0, 0.1, 200)[:, None].repeat(2, axis=1)  # [steps, K]
    losses = {"soft targets": settled, "sampled targets": settled}
    claim = dispersion_claim({**runs, "sampled targets": wobble}, 1000, losses)
    assert claim.claim is DISPERSION_CLAIM and claim.word == "reproduced"
    assert [e.cell["targets"] for e in claim.final] == ["soft", "sampled"]
    assert claim.final[0].step == 1000 and claim.final[0].cell["lr"] == 3e-3
    assert (
        "1.000 (soft targets)" in claim.number and "2 cells x 2 seeds" in claim.number
    )


def test_gap_exponent_of_an_exact_power_law_and_the_gap_claim():
    s = np.arange(1, 9)
    gap = np.stack([3.0 / s, 2.0 / s])  # [K, v-1]: exactly 1/s
    slopes, slack = gap_exponents(gap, np.ones((2, 7)), s)
    np.testing.assert_allclose(slopes, -1.0)
    np.testing.assert_allclose(slack, 0.0)  # s min a is flat: no allowance
    faster = np.stack([3.0 / s**1.5, 2.0 / s**1.5])
    runs = {"soft targets": slopes, "sampled targets": np.array([-1.5, -1.5])}
    near = {**runs, "soft targets": np.array([-1.0, -1.01, -0.99])}
    settled = np.linspace(2.0, 0.1, 200)[:, None].repeat(3, axis=1)  # [steps, K]
    claim = gap_claim(near, v=9, step=1000, loss=settled)
    assert claim.claim is GAP_CLAIM and claim.word == "reproduced"
    assert "s = 2..8, soft targets: -1.00" in claim.number
    assert "sampled targets faster: -1.50 to -1.50" in claim.number
    # one seed outside the tolerance: the interval reaches below 0
    assert gap_claim(
        {**runs, "soft targets": np.array([-1.0, -1.3])}, 9, 1000, settled[:, :2]
    ).word in (
        "inconclusive",
        "mixed",
    )
    far = {**runs, "soft targets": np.array([-1.3, -1.31, -1.29])}
    assert gap_claim(far, 9, 1000, settled).word == "reversed"
    climbed = settled.copy()
    climbed[150:, 0] = 1.5  # a collapsed seed: the cell cannot be judged
    assert gap_claim(near, 9, 1000, climbed).word == "inconclusive"
    numbers = gap_numbers(
        {"soft targets": gap, "sampled targets": faster},
        runs,
        {"soft targets": slack, "sampled targets": slack},
        train_length=4,
    )
    # mean gap at s = 2: 2.5 / 2
    assert numbers["gap_s2"] == 1.2 and numbers["flat_dev"] == 0.0
    assert numbers["decay_sampled"] == round(float(np.sqrt(2 / 7)), 2)  # (2/7)^(1/2)
    assert numbers["gap_soft_train"] == round(2.5 / 4, 2)


def test_implied_invalid_mass():
    gap = np.zeros((1, 5))  # no gap: every token equally likely, s of v seen
    np.testing.assert_allclose(implied_invalid_mass(gap, 6), np.arange(1, 6)[None] / 6)
    assert implied_invalid_mass(np.full(5, 50.0), 6).max() < 1e-20


def test_the_gap_accounts_for_the_leak_only_within_the_declared_tolerance():
    measured = np.full((4, 5), 0.3)
    close = measured + np.array([[0.02], [0.03], [0.04], [0.03]])
    assert worst_miss(close, measured) == pytest.approx([0.02, 0.03, 0.04, 0.03])
    assert accounts_for_leak(worst_miss(close, measured))
    far = measured + MISS_TOLERANCE * np.array([[0.9], [1.0], [1.1], [1.0]])
    assert not accounts_for_leak(worst_miss(far, measured))
    with pytest.raises(ValueError, match="seeds, lengths"):
        worst_miss(close[0], measured[0])
