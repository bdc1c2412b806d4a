import math

import pytest
import torch

from lengthgen_lite.core.seeding import make_generator
from lengthgen_lite.core.tasks import (
    SetComplement,
    enumerate_sequences,
    sample_next_tokens,
    sample_sequences,
    seen_mask,
    target_distribution,
)


def test_sequences_are_distinct_tokens_in_range():
    tokens = sample_sequences(v=10, length=7, batch=50, generator=make_generator(0))
    assert tokens.shape == (50, 7) and tokens.dtype == torch.long
    assert tokens.min() >= 0 and tokens.max() < 10
    assert all(len(set(row.tolist())) == 7 for row in tokens)


def test_target_is_uniform_on_unseen_tokens():
    # the book's worked example, 0-based: v = 5, t = (0, 2, 4) leaves 1 and 3
    targets = target_distribution(torch.tensor([[0, 2, 4]]), v=5)
    assert targets.shape == (1, 3, 5)
    torch.testing.assert_close(targets[0, 2], torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0]))
    torch.testing.assert_close(
        targets[0, 0], torch.tensor([0.0, 0.25, 0.25, 0.25, 0.25])
    )


def test_target_properties_on_random_batch():
    tokens = sample_sequences(v=16, length=15, batch=64, generator=make_generator(1))
    targets, seen = target_distribution(tokens, 16), seen_mask(tokens, 16)
    torch.testing.assert_close(targets.sum(-1), torch.ones(64, 15))
    assert (targets[seen] == 0).all()
    s = torch.arange(1, 16)
    torch.testing.assert_close(
        targets.amax(-1), (1.0 / (16 - s)).expand(64, 15).float()
    )


def test_repeated_tokens_are_rejected():
    with pytest.raises(ValueError, match="distinct"):
        target_distribution(torch.tensor([[1, 1]]), v=4)


def test_sampled_next_tokens_are_legal_and_follow_the_target():
    tokens = sample_sequences(v=8, length=3, batch=4000, generator=make_generator(2))
    targets = target_distribution(tokens, 8)
    nxt = sample_next_tokens(targets, make_generator(3))
    assert nxt.shape == (4000, 3)
    assert not seen_mask(tokens, 8).gather(-1, nxt.unsqueeze(-1)).any()
    # at s = 1 each of the 7 legal tokens is equally likely
    counts = torch.bincount((nxt[:, 0] - tokens[:, 0]) % 8, minlength=8)[1:]
    assert counts.min() > 4000 / 7 * 0.8


def test_enumerate_sequences_counts():
    assert enumerate_sequences(5, 1).shape == (5, 1)
    assert enumerate_sequences(5, 2).shape == (20, 2)
    assert enumerate_sequences(5, 3).shape == (math.perm(5, 3), 3)


def test_set_complement_batch_format():
    task = SetComplement(v=16, train_length=4)
    assert task.n_outputs == 16 and tuple(task.train_sizes()) == (4,)
    batch = task.sample_train_batch(8, 4, make_generator(0))
    assert batch.inputs.shape == (8, 4)
    assert batch.targets.shape == (8, 4, 16)
    assert batch.loss_mask.all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(v=1, length=1, batch=1), "v must be"),
        (dict(v=8, length=8, batch=1), "length must be"),
        (dict(v=8, length=0, batch=1), "length must be"),
        (dict(v=8, length=3, batch=0), "batch must be"),
    ],
)
def test_impossible_configurations_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sample_sequences(generator=make_generator(0), **kwargs)


def test_set_complement_rejects_train_length_beyond_vocab():
    with pytest.raises(
        ValueError, match="train_length must be an integer between 1 and 3"
    ):
        SetComplement(v=4, train_length=4)


def test_seen_mask_rejects_wrong_shape():
    with pytest.raises(ValueError, match=r"\[batch, pos\]"):
        seen_mask(torch.tensor([1, 2]), v=4)
