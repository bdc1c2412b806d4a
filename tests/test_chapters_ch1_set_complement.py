import dataclasses

import pytest
import torch

from lengthgen_lite.chapters import ch1_set_complement as ch1
from lengthgen_lite.core.training import train


def test_norm_and_targets_change_only_their_own_field():
    task, model_cfg, train_cfg = ch1.baseline_setup()
    post_task, post_model, sampled_train = ch1.baseline_setup("sampled", "post")
    assert post_task == task  # the same task whatever the placement or targets
    assert post_model == dataclasses.replace(model_cfg, norm="post")
    assert sampled_train == dataclasses.replace(train_cfg, targets="sampled")
    assert model_cfg.vocab_size == task.v == task.n_outputs  # the model predicts the task's next token


def test_setup_rejects_unknown_choices():
    with pytest.raises(ValueError, match="targets"):
        ch1.baseline_setup("hard")
    with pytest.raises(ValueError, match="norm"):
        ch1.baseline_setup("soft", "rms")


def test_train_baseline_is_train_on_the_setup(monkeypatch):
    monkeypatch.setattr(ch1, "STEPS", 100)  # the shortest run its 100 warm-up steps allow
    result = ch1.train_baseline("sampled", "attn_out", seeds=[0, 1], progress=False)
    assert result.seeds == [0, 1] and len(result.models) == 2 and result.loss.shape == (100, 2)
    task, model_cfg, train_cfg = ch1.baseline_setup("sampled", "attn_out")
    direct = train(model_cfg, task, train_cfg, [1], progress=False)  # seed 1 alone
    for a, b in zip(result.models[1].state_dict().values(), direct.models[0].state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # batched with seed 0 or alone: the same training
