import numpy as np
import pytest
import torch

from lengthgen_lite.seeding import make_generator
from lengthgen_lite.variance import loglog_slope, random_head, random_head_outputs, shift_statistics, standardize


def test_uniform_attention_gives_exactly_n_eff_equal_n_and_the_one_over_n_law():
    head = random_head(d_model=16, seed=0)
    stds = []
    for N in (4, 64):
        sample = random_head_outputs(head, N, 4000, logit_scale=0.0, generator=make_generator(N))
        torch.testing.assert_close(sample.n_eff, torch.full((4000,), float(N)))
        stds.append(sample.outputs[:, 0].std().item())
    assert stds[0] / stds[1] == pytest.approx(4.0, rel=0.08)  # sqrt(64 / 4)
    assert stds[0] == pytest.approx(head.value_std[0] / 2, rel=0.05)  # sigma / sqrt(4)


def test_sharper_attention_means_fewer_effective_items_and_a_slower_decay():
    head = random_head(d_model=16, seed=1)
    n_eff = [random_head_outputs(head, 256, 200, s, make_generator(0)).n_eff.mean().item() for s in (0.0, 1.0, 3.0)]
    assert n_eff[0] > n_eff[1] > n_eff[2] >= 1.0
    slopes = []
    for scale in (0.0, 3.0):
        stds = [random_head_outputs(head, N, 1000, scale, make_generator(N)).outputs[:, 0].std().item() for N in (8, 64, 512)]
        slopes.append(loglog_slope([8, 64, 512], stds))
    assert slopes[0] == pytest.approx(-0.5, abs=0.05) and slopes[1] > slopes[0] + 0.1


def test_chunking_does_not_change_the_draws():
    head = random_head(d_model=8, seed=0)
    a = random_head_outputs(head, 10, 50, 1.0, make_generator(3), chunk=7)
    b = random_head_outputs(head, 10, 50, 1.0, make_generator(3), chunk=50)
    torch.testing.assert_close(a.outputs, b.outputs)  # chunks draw the same numbers in order


def test_loglog_slope_recovers_a_power():
    N = np.array([4, 16, 64, 256])
    assert loglog_slope(N, 3.0 * N**-0.5) == pytest.approx(-0.5)


def test_shift_statistics_and_standardize():
    x = torch.tensor([[1.0, 3.0], [3.0, 5.0], [5.0, 7.0]])
    stats = shift_statistics(x)
    np.testing.assert_allclose(stats.feature_var, [4.0, 4.0])  # unbiased variance over samples
    assert stats.global_mean == pytest.approx(4.0) and stats.global_var == pytest.approx(1.0)
    assert stats.median_feature_var == pytest.approx(4.0)
    z = shift_statistics(standardize(torch.randn(100, 32, generator=make_generator(0)) * 5 + 2))
    assert z.global_mean == pytest.approx(0.0, abs=1e-6) and z.global_var == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: random_head(d_model=0), "d_model must be"),
        (lambda: random_head_outputs(random_head(4), 0, 2, 1.0, make_generator(0)), "N must be"),
        (lambda: random_head_outputs(random_head(4), 3, 0, 1.0, make_generator(0)), "n_sequences must be"),
        (lambda: random_head_outputs(random_head(4), 3, 2, 1.0, make_generator(0), chunk=0), "chunk must be"),
        (lambda: random_head_outputs(random_head(4), 3, 2, -1.0, make_generator(0)), "logit_scale must be"),
        (lambda: random_head_outputs(random_head(4), 3, 2, float("inf"), make_generator(0)), "logit_scale must be"),
        (lambda: loglog_slope([1, 2], [1.0]), "same length"),
        (lambda: loglog_slope([1], [1.0]), "same length >= 2"),
        (lambda: loglog_slope([1, 2], [1.0, 0.0]), "positive and finite"),
        (lambda: shift_statistics(torch.zeros(1, 4)), "samples >= 2"),
        (lambda: shift_statistics(torch.zeros(4)), "samples >= 2"),
    ],
)
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_logit_std_matches_the_sampled_logits():
    head = random_head(d_model=16, seed=2)
    sample = random_head_outputs(head, 1, 1, 0.0, make_generator(0))  # (only to exercise the API)
    x = torch.randn(20000, 16, generator=make_generator(1))
    logits = 2.0 * x @ (head.w_k.T @ (head.w_q @ head.query)) / 4.0
    assert head.logit_std(2.0) == pytest.approx(logits.std().item(), rel=0.03)
    assert sample.n_eff.item() == pytest.approx(1.0)
