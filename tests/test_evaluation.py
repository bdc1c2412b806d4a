import numpy as np
import pytest
import torch

from lengthgen_lite.evaluation import evaluate_set_complement
from lengthgen_lite.model import ModelConfig, Transformer


def uniform_attention_model(v=8):
    model = Transformer(ModelConfig(vocab_size=v, d_model=16))
    with torch.no_grad():
        model.blocks[0].attn.W_Q.weight.zero_()  # all scores 0: uniform attention over the prefix
    return model


def test_table_shapes_and_ranges():
    table = evaluate_set_complement(uniform_attention_model(), v=8, n_sequences=50)
    np.testing.assert_array_equal(table.s, np.arange(1, 8))
    for field in ("tv", "invalid_mass", "max_attention"):
        values = getattr(table, field)
        assert values.shape == (7,) and (values >= 0).all() and (values <= 1 + 1e-6).all()
    assert (table.kl >= -1e-6).all()


def test_uniform_attention_statistics_are_exact():
    table = evaluate_set_complement(uniform_attention_model(), v=8, n_sequences=20)
    np.testing.assert_allclose(table.entropy_ratio, 1.0, atol=1e-5)
    np.testing.assert_allclose(table.n_eff, np.arange(1, 8), rtol=1e-5)
    np.testing.assert_allclose(table.max_attention, 1.0 / np.arange(1, 8), rtol=1e-5)


def test_logit_scale_zero_gives_uniform_prediction():
    # softmax of all-equal logits: mass s/v on the s seen tokens
    table = evaluate_set_complement(uniform_attention_model(), v=8, n_sequences=20, logit_scale=0.0)
    np.testing.assert_allclose(table.invalid_mass, np.arange(1, 8) / 8, rtol=1e-5)


def test_same_seed_same_table():
    model = uniform_attention_model()
    a = evaluate_set_complement(model, v=8, n_sequences=30, seed=4)
    b = evaluate_set_complement(model, v=8, n_sequences=30, seed=4)
    np.testing.assert_array_equal(a.tv, b.tv)
    with pytest.raises(ValueError):
        evaluate_set_complement(model, v=1)
