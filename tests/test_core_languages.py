import pytest
import torch

from lengthgen_lite.core.languages import (
    LANGUAGES,
    AnBn,
    Dyck1,
    NoRepeat,
    Unlock,
    make_language,
)
from lengthgen_lite.core.seeding import make_generator


def legal_of(language, row):
    return {
        "EOS" if j == language.eos else language.alphabet[j]
        for j in torch.nonzero(row).flatten().tolist()
    }


@pytest.mark.parametrize("name", list(LANGUAGES))
def test_generated_words_are_prefixes_and_targets_match_the_recogniser(name):
    language = make_language(name, train_length=8)
    batch = language.sample_train_batch(100, 12, make_generator(0))
    assert batch.inputs.shape == (100, 12) and batch.targets.shape == (
        100,
        12,
        language.n_outputs,
    )
    torch.testing.assert_close(batch.targets.sum(-1), torch.ones(100, 12))
    for tokens, targets, mask in zip(batch.inputs, batch.targets, batch.loss_mask):
        word = language.to_string(tokens[mask])
        assert language.is_prefix(word)
        assert (tokens[~mask] == language.pad).all()
        for t in range(len(word)):
            assert legal_of(language, targets[t]) == language.legal_next(word[: t + 1])


@pytest.mark.parametrize(
    "language, accepted, rejected",
    [
        (Dyck1(), ["()", "(())()", "((()))"], ["(", ")(", "())", "(()"]),
        (AnBn(), ["ab", "aabb", "aaabbb"], ["", "a", "abab", "aab", "abb", "ba"]),
        (Unlock(), ["", "aaa", "ab", "abcac", "b"], ["c", "abb", "acb", "bcb"]),
        (NoRepeat(), ["", "a", "abab", "abcd", "dcba"], ["aa", "abb", "abcdd"]),
    ],
)
def test_recognisers_on_hand_written_words(language, accepted, rejected):
    assert all(language.accepts(w) for w in accepted)
    assert not any(language.accepts(w) for w in rejected)


@pytest.mark.parametrize(
    "language, prefix, legal",
    [
        (Dyck1(), "(", {"(", ")"}),
        (Dyck1(), "()", {"(", "EOS"}),
        (Dyck1(), "(()", {"(", ")"}),
        (AnBn(), "aa", {"a", "b"}),
        (AnBn(), "aab", {"b"}),
        (AnBn(), "aabb", {"EOS"}),
        (Unlock(), "aa", {"a", "b", "EOS"}),
        (Unlock(), "ab", {"a", "c", "EOS"}),
        (NoRepeat(), "abc", {"a", "b", "d", "EOS"}),
    ],
)
def test_legal_next_on_hand_written_prefixes(language, prefix, legal):
    assert language.legal_next(prefix) == legal


def test_anbn_words_end_with_eos_and_are_padded():
    language = AnBn()
    batch = language.sample_train_batch(50, 10, make_generator(3))
    for tokens, targets, mask in zip(batch.inputs, batch.targets, batch.loss_mask):
        word = language.to_string(tokens[mask])
        assert language.accepts(word) and 2 <= len(word) <= 10
        assert targets[len(word) - 1, language.eos] == 1.0


def test_dyck1_walk_returns_to_depth_zero_sometimes():
    batch = Dyck1().sample_train_batch(200, 16, make_generator(0))
    eos_legal = batch.targets[..., Dyck1().eos] > 0
    # balanced prefixes occur, but not at most positions
    assert 0.05 < eos_legal.float().mean() < 0.5


def test_batched_sampling_equals_one_generator_at_a_time():
    language = Unlock()
    both = language.sample_train_batches(8, 6, [make_generator(1), make_generator(2)])
    one = language.sample_train_batch(8, 6, make_generator(2))
    assert torch.equal(both.inputs[1], one.inputs) and torch.equal(
        both.targets[1], one.targets
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: make_language("dyck2"), "language name='dyck2' is unknown"),
        (lambda: Dyck1(train_length=0), "train_length must be an integer >= 1"),
        (lambda: AnBn(train_length=1), "train_length must be an integer >= 2"),
        (
            lambda: AnBn().sample_train_batch(4, 1, make_generator(0)),
            "size must be an integer >= 2",
        ),
        (
            lambda: Dyck1().sample_train_batch(0, 4, make_generator(0)),
            "batch must be an integer >= 1",
        ),
        (lambda: Dyck1().sample_train_batches(4, 4, []), "generators must hold"),
        (lambda: Dyck1().legal_next(")"), "is not a prefix"),
        (lambda: Dyck1().is_prefix("(x"), "word must be a str over the alphabet"),
    ],
)
def test_bad_parameters_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()
