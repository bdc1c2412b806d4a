import math

import pytest
import torch

from lengthgen_lite.core.seeding import make_generator
from lengthgen_lite.core.tasks import (
    ArgmaxRetrieval,
    DictionaryLookup,
    NO_TOKEN,
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
    torch.testing.assert_close(targets[0, 0], torch.tensor([0.0, 0.25, 0.25, 0.25, 0.25]))


def test_target_properties_on_random_batch():
    tokens = sample_sequences(v=16, length=15, batch=64, generator=make_generator(1))
    targets, seen = target_distribution(tokens, 16), seen_mask(tokens, 16)
    torch.testing.assert_close(targets.sum(-1), torch.ones(64, 15))
    assert (targets[seen] == 0).all()
    s = torch.arange(1, 16)
    torch.testing.assert_close(targets.amax(-1), (1.0 / (16 - s)).expand(64, 15).float())


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
    with pytest.raises(ValueError, match="1..v-1"):
        SetComplement(v=4, train_length=4)


def test_seen_mask_rejects_wrong_shape():
    with pytest.raises(ValueError, match=r"\[batch, pos\]"):
        seen_mask(torch.tensor([1, 2]), v=4)


def test_argmax_format_and_answer():
    task = ArgmaxRetrieval(n_classes=5)
    batch = task.sample_train_batch(64, 7, make_generator(0))
    assert batch.inputs.shape == (64, 8, 3) and batch.targets.shape == (64, 1, 5) and batch.loss_mask.shape == (64, 1)
    items, query = batch.inputs[:, :-1], batch.inputs[:, -1]
    assert ((items[..., 0] > 0) & (items[..., 0] < 1)).all()  # continuous priorities in (0, 1)
    assert (items[..., 2] == NO_TOKEN).all() and (query == torch.tensor([0.0, 5.0, NO_TOKEN])).all()
    best = task.target_item(batch.inputs)
    labels = items[torch.arange(64), best, 1].long()
    assert (labels == batch.targets[:, 0].argmax(-1)).all()
    assert (items[torch.arange(64), best, 0] == items[..., 0].max(-1).values).all()
    assert task.vocab_size == 6 and tuple(task.train_sizes()) == tuple(range(2, 17))


def test_dictionary_format_answer_and_distinct_keys():
    task = DictionaryLookup(n_keys=40, n_values=3, max_train_size=10)
    batch = task.sample_train_batch(32, 40, make_generator(1))  # N = n_keys: every key present
    items, query = batch.inputs[:, :-1], batch.inputs[:, -1]
    keys = items[..., 1].long()
    assert (keys.sort(-1).values == torch.arange(40)).all()  # distinct keys
    assert ((items[..., 2] >= 40) & (items[..., 2] < 43)).all() and (query[:, 1] == 43).all()
    which = task.target_item(batch.inputs)
    assert (keys[torch.arange(32), which] == query[:, 2].long()).all()
    value = items[torch.arange(32), which, 2].long() - 40
    assert (value == batch.targets[:, 0].argmax(-1)).all()
    assert task.vocab_size == 44


@pytest.mark.parametrize("task", [ArgmaxRetrieval(), DictionaryLookup(n_keys=64)])
def test_batched_sampling_equals_per_seed_sampling(task):
    stacked = task.sample_train_batches(8, 5, [make_generator(3), make_generator(4)])
    for k, seed in enumerate((3, 4)):
        alone = task.sample_train_batch(8, 5, make_generator(seed))
        torch.testing.assert_close(stacked.inputs[k], alone.inputs)
        torch.testing.assert_close(stacked.targets[k], alone.targets)


def test_tasks_are_order_invariant_in_their_answer():
    task = DictionaryLookup(n_keys=50)
    batch = task.sample_train_batch(16, 9, make_generator(2))
    perm = torch.randperm(9, generator=make_generator(5))
    shuffled = torch.cat([batch.inputs[:, perm], batch.inputs[:, -1:]], dim=1)
    items = shuffled[:, :-1]
    value = items[torch.arange(16), task.target_item(shuffled), 2].long() - 50
    assert (value == batch.targets[:, 0].argmax(-1)).all()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ArgmaxRetrieval(n_classes=0), "n_classes must be an int >= 2"),
        (lambda: ArgmaxRetrieval(n_classes=1), "n_classes must be an int >= 2"),
        (lambda: ArgmaxRetrieval(min_train_size=0), "min_train_size must be a positive int"),
        (lambda: ArgmaxRetrieval(min_train_size=5, max_train_size=4), "exceeds max_train_size"),
        (lambda: DictionaryLookup(n_values=0), "n_values must be an int >= 2"),
        (lambda: DictionaryLookup(n_keys=0), "n_keys must be a positive int"),
        (lambda: DictionaryLookup(n_keys=8, max_train_size=16), "exceeds the 8 distinct keys"),
    ],
)
def test_bad_configurations_raise(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: DictionaryLookup(n_keys=8, max_train_size=4).sample_train_batch(2, 9, make_generator(0)), "1..n_keys=8"),
        (lambda: DictionaryLookup(n_keys=8, max_train_size=4).sample_train_batch(2, 0, make_generator(0)), "1..n_keys=8"),
        (lambda: DictionaryLookup().sample_train_batch(0, 4, make_generator(0)), "batch must be"),
        (lambda: DictionaryLookup().sample_train_batches(2, 4, []), "at least one torch.Generator"),
        (lambda: ArgmaxRetrieval().sample_train_batch(2, 0, make_generator(0)), "size must be"),
        (lambda: ArgmaxRetrieval().sample_train_batch(0, 3, make_generator(0)), "batch must be"),
        (lambda: ArgmaxRetrieval().sample_train_batches(2, 3, []), "at least one torch.Generator"),
        (lambda: ArgmaxRetrieval().target_item(torch.zeros(2, 4, 2)), "packed retrieval inputs"),
        (lambda: DictionaryLookup().target_item(torch.zeros(2, 1, 3)), "packed retrieval inputs"),
        (lambda: DictionaryLookup().target_item(torch.zeros(2, 4, 3, dtype=torch.long)), "packed retrieval inputs"),
    ],
)
def test_bad_calls_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()
