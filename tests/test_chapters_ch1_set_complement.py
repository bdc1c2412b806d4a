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
    # the model predicts the task's next token
    assert model_cfg.vocab_size == task.v == task.n_outputs


def test_setup_rejects_unknown_choices():
    with pytest.raises(ValueError, match="targets"):
        ch1.baseline_setup("hard")
    with pytest.raises(ValueError, match="norm"):
        ch1.baseline_setup("soft", "rms")


def test_train_baseline_is_train_on_the_setup(monkeypatch):
    # the shortest run its 100 warm-up steps allow
    monkeypatch.setattr(ch1, "STEPS", 100)
    result = ch1.train_baseline("sampled", "attn_out", seeds=[0, 1], progress=False)
    assert (
        result.seeds == [0, 1]
        and len(result.models) == 2
        and result.loss.shape == (100, 2)
    )
    task, model_cfg, train_cfg = ch1.baseline_setup("sampled", "attn_out")
    direct = train(model_cfg, task, train_cfg, [1], progress=False)  # seed 1 alone
    for a, b in zip(
        result.models[1].state_dict().values(), direct.models[0].state_dict().values()
    ):
        # batched with seed 0 or alone: the same training
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# --- what chapter 1 reads off the baseline --------------------------------------------

import numpy as np  # noqa: E402

from lengthgen_lite.core.evaluation import METRICS, LengthTable, aggregate_seeds  # noqa: E402
from lengthgen_lite.core.tasks import seen_mask, target_distribution  # noqa: E402


def test_greedy_prediction_and_its_columns_by_hand():
    tokens = torch.tensor([[0, 2, 4]])  # v = 5
    seen, targets = seen_mask(tokens, 5), target_distribution(tokens, 5)
    greedy = ch1.greedy_prediction(seen)
    # smallest unseen token
    np.testing.assert_array_equal(greedy[0].argmax(-1), [1, 1, 1])
    columns = ch1.prediction_columns(greedy, targets, seen)
    assert list(columns) == ["top-1 accuracy", "TV", "invalid mass"]
    np.testing.assert_array_equal(columns["top-1 accuracy"], [1, 1, 1])
    np.testing.assert_allclose(columns["TV"], 1 - 1 / (5 - np.arange(1, 4)), rtol=1e-6)
    np.testing.assert_array_equal(columns["invalid mass"], [0, 0, 0])


def test_book_choices_lists_the_baseline():
    choices = ch1.book_choices(*ch1.baseline_setup("soft"))
    assert choices["v"] == ch1.V and choices["training lengths s"] == "1..4"
    assert choices["norm"] == "none" and choices["targets"] == "soft"


def tables(tv_rows, v=8, top1=1.0):
    s = np.arange(1, v)
    out = []
    for row in tv_rows:
        values = {m: np.zeros(v - 1) for m in METRICS}
        values |= {"tv": np.asarray(row, float), "invalid_mass": np.asarray(row, float)}
        values |= {"top1_legal": np.full(v - 1, top1), "kl": np.asarray(row, float) / 2}
        out.append(LengthTable(s=s, **values))
    return out


def test_fails_claim_and_numbers_of_a_model_that_fails_long():
    rising = [0.001, 0.002, 0.001, 0.005, 0.2, 0.4, 0.7]  # s = 1..7, trained on s <= 3
    soft = tables([rising, [x + 0.001 for x in rising]])
    settled = np.linspace(2.0, 0.1, 200)[:, None].repeat(2, axis=1)  # [steps, K]
    claim = ch1.fails_claim(soft, train_length=3, loss=settled)
    assert claim.claim is ch1.FAILS_CLAIM and claim.word == "reproduced"
    assert claim.final[0].cell == ch1.LIVE_CELL and claim.final[0].interval.n == 2
    assert claim.number.startswith("soft targets, TV at s = 7 against at most 0.0030")
    assert "at the training lengths s ≤ 3; TV at s = v - 1 minus 0.5" in claim.number
    assert "+0.200 [" in claim.number and "helps 1/1; SESOI 0.01" in claim.number
    np.testing.assert_allclose(ch1.fails_long_margin(soft), [0.2, 0.201])
    flat = tables([rising, [0.001] * 7])  # one seed never fails: no interval above 0
    assert ch1.fails_claim(flat, 3, settled).word == "inconclusive"
    below = tables([[0.001] * 6 + [0.3], [0.001] * 6 + [0.31]])  # both below 0.5
    assert ch1.fails_claim(below, 3, settled).word == "reversed"
    climbed = settled.copy()
    climbed[150:, 1] = 1.5  # seed 1 collapsed: its cell cannot be judged
    collapsed = ch1.fails_claim(soft, 3, climbed)
    assert collapsed.word == "inconclusive" and collapsed.final[0].unstable == 1
    numbers = ch1.length_numbers(soft, 3)
    assert numbers["last_perfect"] == 7 and numbers["s_tv_tenth"] == 5
    assert numbers["tv_train_max"] == 0.003 and numbers["tv_minus_invalid"] == 0.0
    spread = aggregate_seeds(soft)
    assert ch1.spread_numbers(spread) == {
        "tv_long": 0.7,
        "tv_long_min": 0.7,
        "tv_long_max": 0.701,
    }
    assert list(ch1.summary_columns(spread))[:3] == ["TV mean", "TV min", "TV max"]
    sampled = ch1.sampled_numbers(soft, np.array([0.02, 0.04]), 3)
    assert (
        sampled["sampled_excess_mean"] == 0.03 and sampled["kl_sampled_train"] == 0.001
    )


def test_length_numbers_finds_the_last_perfect_length():
    soft = tables([[0.001] * 6 + [0.5]])
    top1 = np.ones(7)
    top1[5] = 0.99  # s = 6: an argmax sometimes illegal
    soft = [LengthTable(**{**soft[0].__dict__, "top1_legal": top1})]
    numbers = ch1.length_numbers(soft, 3)
    assert numbers["last_perfect"] == 5 and numbers["top1_min"] == 0.99
