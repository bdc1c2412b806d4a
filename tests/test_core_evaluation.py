import numpy as np
import pytest
import torch

from lengthgen_lite.core.evaluation import (
    LengthTable,
    METRICS,
    aggregate_seeds,
    evaluate_seeds,
    evaluate_set_complement,
    prefix_profile,
    stack_metric,
)
from lengthgen_lite.core.model import ModelConfig, Transformer


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


def table(offset, s=np.arange(1, 4)):
    return LengthTable(s=s, **{metric: s * 1.0 + offset for metric in METRICS})


def test_metrics_name_every_table_field_but_s():
    assert "s" not in METRICS and {"tv", "invalid_mass", "logit_gap", "top1_legal"} <= set(METRICS)


def test_stack_and_aggregate_over_seeds():
    tables = [table(0.0), table(1.0), table(5.0)]
    np.testing.assert_array_equal(stack_metric(tables, "tv"), np.array([[1, 2, 3], [2, 3, 4], [6, 7, 8]]))
    spread = aggregate_seeds(tables)
    assert spread.n_seeds == 3
    np.testing.assert_array_equal(spread.mean.s, [1, 2, 3])
    np.testing.assert_allclose(spread.mean.logit_gap, [3.0, 4.0, 5.0])
    np.testing.assert_array_equal(spread.low.kl, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(spread.high.n_eff, [6.0, 7.0, 8.0])


def test_stack_metric_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        stack_metric([], "tv")
    with pytest.raises(ValueError, match="unknown"):
        stack_metric([table(0.0)], "accuracy")
    with pytest.raises(ValueError, match="same prefix lengths"):
        stack_metric([table(0.0), table(0.0, s=np.arange(2, 5))], "tv")
    with pytest.raises(ValueError, match="at least one"):
        aggregate_seeds([])


def test_evaluate_seeds_uses_the_same_sequences_for_every_model():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=6, d_model=8))
    a, b = evaluate_seeds([model, model], v=6, n_sequences=40, seed=3)
    np.testing.assert_array_equal(a.tv, b.tv)
    assert a.top1_legal.shape == (5,) and ((a.top1_legal >= 0) & (a.top1_legal <= 1)).all()
    with pytest.raises(ValueError, match="at least one model"):
        evaluate_seeds([], v=6)


def test_prefix_profile_reads_every_prefix_of_one_sequence():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=5, d_model=8)).eval()
    profile = prefix_profile(model, [3, 1, 0, 4])
    np.testing.assert_array_equal(profile.s, [1, 2, 3, 4])
    assert profile.logits.shape == profile.probs.shape == profile.targets.shape == (4, 5)
    np.testing.assert_allclose(profile.targets[2], [0, 0, 0.5, 0, 0.5])  # after 3, 1, 0: tokens 2 and 4 are legal
    np.testing.assert_allclose(profile.targets[3], [0, 0, 1, 0, 0])  # after 3, 1, 0, 4: only token 2
    np.testing.assert_allclose(profile.probs.sum(-1), 1.0, rtol=1e-6)
    assert profile.margin[2] == pytest.approx(profile.logits[2, [2, 4]].min() - profile.logits[2, [0, 1, 3]].max())
    assert profile.tv[3] == pytest.approx(1 - profile.probs[3, 2], abs=1e-6)  # TV to a point mass


def test_prefix_profile_rejects_bad_tokens():
    model = Transformer(ModelConfig(vocab_size=4, d_model=8))
    for tokens in ([0, 1], [0, 1, 1], [0, 1, 4]):
        with pytest.raises(ValueError, match="distinct ids"):
            prefix_profile(model, tokens)


def test_seed_values_filters_and_orders_by_seed():
    from lengthgen_lite.core.evaluation import seed_values

    rows = [{"norm": n, "seed": s, "tv": 10 * s + i} for i, n in enumerate(("none", "post")) for s in (2, 0, 1)]
    np.testing.assert_array_equal(seed_values(rows, "tv", norm="post"), [1.0, 11.0, 21.0])
    with pytest.raises(ValueError, match="no row matches"):
        seed_values(rows, "tv", norm="pre")
    with pytest.raises(ValueError, match="column 'gap' is unknown"):
        seed_values(rows, "gap", norm="post")

