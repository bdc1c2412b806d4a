import numpy as np
import pytest
import torch

from lengthgen_lite.evaluation import METRICS, LengthTable, aggregate_seeds, evaluate_seeds, stack_metric
from lengthgen_lite.model import ModelConfig, Transformer


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
