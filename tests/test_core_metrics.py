import math

import pytest
import torch

from lengthgen_lite.core import metrics


def test_total_variation_bounds():
    p = torch.tensor([0.5, 0.5, 0.0])
    assert metrics.total_variation(p, p).item() == 0.0
    assert metrics.total_variation(
        p, torch.tensor([0.0, 0.0, 1.0])
    ).item() == pytest.approx(1.0)


def test_invalid_mass_and_gap():
    logits = torch.tensor([[2.0, 0.0, 1.0, 3.0]])
    seen = torch.tensor([[False, True, True, False]])
    probs = logits.softmax(-1)
    assert metrics.invalid_mass(probs, seen).item() == pytest.approx(
        probs[0, 1:3].sum().item()
    )
    assert metrics.logit_gap(logits, seen).item() == pytest.approx(2.0 - 1.0)


def test_kl_zero_at_target_and_ignores_zero_mass():
    target = torch.tensor([0.0, 0.5, 0.5])
    logits = torch.tensor([-1e4, 0.0, 0.0])
    assert metrics.kl_divergence(target, logits).item() == pytest.approx(0.0, abs=1e-6)
    assert metrics.kl_divergence(target, torch.zeros(3)).item() == pytest.approx(
        math.log(3 / 2)
    )


def test_log_targets_is_zero_where_the_target_is():
    target = torch.tensor([0.0, 0.25, 0.75])
    log_p = metrics.log_targets(target)
    assert log_p[0].item() == 0.0
    assert torch.equal(log_p[1:], target[1:].log())
    logits = torch.tensor([0.3, -1.0, 2.0])
    assert torch.equal(
        metrics.kl_divergence(target, logits, log_p),
        metrics.kl_divergence(target, logits),
    )


def test_logit_extremes_are_infinite_where_a_side_is_empty():
    logits = torch.tensor([[2.0, 0.0, 1.0], [1.0, 4.0, -2.0]])
    seen = torch.tensor([[False, True, True], [False, False, False]])
    smallest_legal, largest_illegal = metrics.logit_extremes(logits, seen)
    assert smallest_legal.tolist() == [2.0, -2.0]
    assert largest_illegal.tolist() == [1.0, -math.inf]


def test_attention_statistics_on_uniform_and_one_hot_rows():
    uniform = torch.full((1, 5), 0.2)
    one_hot = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0]])
    assert metrics.attention_entropy(uniform).item() == pytest.approx(math.log(5))
    assert metrics.attention_entropy(one_hot).item() == pytest.approx(0.0)
    assert metrics.effective_tokens(uniform).item() == pytest.approx(5.0)
    assert metrics.effective_tokens(one_hot).item() == pytest.approx(1.0)
    assert metrics.max_attention(uniform).item() == pytest.approx(0.2)


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="same shape"):
        metrics.total_variation(torch.zeros(3), torch.zeros(4))


@pytest.mark.parametrize("metric", ["invalid_mass", "logit_gap", "top1_legal"])
def test_a_seen_mask_that_is_not_bool_raises(metric):
    """A float mask would weight the probabilities (invalid_mass gave a number) or fail
    deep in torch: refused, naming the dtype."""
    values = torch.softmax(torch.randn(2, 4), dim=-1)
    seen = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match="seen must be a bool mask.*torch.float32"):
        getattr(metrics, metric)(values, seen)


def test_top1_legal_counts_only_the_argmax():
    logits = torch.tensor([[3.0, 0.0, 1.0, 2.0], [0.0, 5.0, 1.0, 2.0]])
    seen = torch.tensor([[False, True, True, False], [False, True, True, False]])
    # row 0: argmax token 0 is unseen (legal); row 1: argmax token 1 is seen (illegal)
    torch.testing.assert_close(
        metrics.top1_legal(logits, seen), torch.tensor([1.0, 0.0])
    )
    with pytest.raises(ValueError, match="same shape"):
        metrics.top1_legal(logits, seen[:, :3])
