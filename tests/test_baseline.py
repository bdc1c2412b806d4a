import pytest

from lengthgen_lite import baseline
from lengthgen_lite.training import TrainResult


def test_setup_is_the_books_chapter_1_choice():
    task, model_cfg, train_cfg = baseline.baseline_setup()
    assert (task.v, task.train_length) == (16, 4)
    assert (model_cfg.vocab_size, model_cfg.d_model, model_cfg.n_layers, model_cfg.d_mlp) == (16, 64, 1, 0)
    assert (model_cfg.norm, model_cfg.positional) == ("none", "none")
    assert (train_cfg.steps, train_cfg.targets) == (baseline.STEPS, "soft")
    assert baseline.baseline_setup("sampled", "post")[1].norm == "post"
    assert baseline.baseline_setup("sampled")[2].targets == "sampled"


def test_setup_rejects_unknown_choices():
    with pytest.raises(ValueError, match="targets"):
        baseline.baseline_setup("hard")
    with pytest.raises(ValueError, match="norm"):
        baseline.baseline_setup("soft", "rms")


def test_train_baseline_trains_one_model_per_seed(monkeypatch):
    monkeypatch.setattr(baseline, "STEPS", 100)  # the shortest run its 100 warm-up steps allow
    result = baseline.train_baseline("sampled", seeds=[0, 1], progress=False)
    assert isinstance(result, TrainResult) and len(result.models) == 2 and result.loss.shape == (100, 2)
    assert result.seeds == [0, 1]
