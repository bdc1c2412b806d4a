import pytest
import torch

from lengthgen_lite.seeding import make_generator
from lengthgen_lite.tasks import NO_TOKEN, ArgmaxRetrieval, DictionaryLookup


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
