import numpy as np
import pytest

from lengthgen_lite.evaluation import evaluate_set_complement
from lengthgen_lite.model import ModelConfig, Transformer
from lengthgen_lite.seeding import seed_everything
from lengthgen_lite.temperature import matched_scale, scaling_matches, tv_by_logit_scale


def model(v=8):
    seed_everything(0)
    return Transformer(ModelConfig(vocab_size=v, d_model=16)).eval()


def test_rows_equal_evaluate_set_complement_at_each_scale():
    m = model()
    scales = [0.5, 1.0, 3.0]
    rows = tv_by_logit_scale(m, 8, scales, n_sequences=200, seed=4)
    assert rows.shape == (3, 7)
    for row, c in zip(rows, scales):
        expected = evaluate_set_complement(m, 8, n_sequences=200, seed=4, logit_scale=c).tv
        np.testing.assert_allclose(row, expected, rtol=1e-5, atol=1e-6)


def test_scale_zero_limit_is_uniform_and_tv_changes_with_scale():
    rows = tv_by_logit_scale(model(), 8, [1e-6, 1.0], n_sequences=100)
    s = np.arange(1, 8)
    np.testing.assert_allclose(rows[0], s / 8, atol=1e-4)  # uniform over v: TV = s / v
    assert not np.allclose(rows[0], rows[1])


def test_matched_scale_and_scaling_matches():
    scales = [0.5, 1.0, 2.0]
    assert matched_scale(np.array([0.3, 0.2, 0.25]), scales, 0.24) == 2.0
    assert matched_scale(np.array([0.3, 0.2, 0.2]), scales, 0.2) == 1.0  # first on ties
    assert scaling_matches(np.array([0.1, 0.2]), np.array([0.5, 0.3]), train=0.2, beyond=0.3)
    assert not scaling_matches(np.array([0.1, 0.2]), np.array([0.5, 0.3]), train=0.15, beyond=0.3)


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="scales"):
        tv_by_logit_scale(model(), 8, [])
    with pytest.raises(ValueError, match="scales"):
        tv_by_logit_scale(model(), 8, [1.0, -2.0])
    with pytest.raises(ValueError, match="one entry per scale"):
        matched_scale(np.zeros(2), [1.0, 2.0, 3.0], 0.1)
    with pytest.raises(ValueError, match="matching 1-D"):
        scaling_matches(np.zeros(2), np.zeros(3), 0.1, 0.1)
