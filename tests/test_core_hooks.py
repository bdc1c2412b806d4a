"""Named hook points: recording (run_with_cache) and interventions (run_with_hooks) on
the book's model, and their clean-up."""

import pytest
import torch

from lengthgen_lite.core.hooks import (
    HookPoint,
    hooks_installed,
    run_with_cache,
    run_with_hooks,
)
from lengthgen_lite.core.model import ModelConfig, Transformer
from lengthgen_lite.core.seeding import seed_everything


def tokens(batch=3, length=5, v=8):
    return torch.stack([torch.randperm(v)[:length] for _ in range(batch)])


def trained_like(norm, seed=0):
    """A model whose norms have non-trivial gains and biases (as after training)."""
    seed_everything(seed)
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, norm=norm)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def test_a_hook_point_is_the_identity_and_knows_when_it_is_hooked():
    point = HookPoint()
    x = torch.randn(2, 3)
    assert point(x) is x and not point.hooked
    handle = point.register_forward_hook(lambda _m, _i, out: None)
    assert point.hooked
    handle.remove()
    assert not point.hooked


def test_run_with_cache_removes_hooks_even_on_error():
    model = Transformer(ModelConfig(vocab_size=8, d_model=16))
    with pytest.raises(ValueError, match="tokens must be"):
        run_with_cache(model, torch.zeros(2, 3))  # float, not token ids
    assert all(not m._forward_hooks for m in model.modules())
    run_with_cache(model, tokens())
    assert all(not m._forward_hooks for m in model.modules())


def test_run_with_cache_unknown_name():
    with pytest.raises(ValueError, match="unknown activation"):
        run_with_cache(
            Transformer(ModelConfig(vocab_size=8, d_model=16)),
            tokens(),
            names=["blocks.0.attn.hook_nope"],
        )


# --- run_with_hooks -------------------------------------------------------------------


def test_run_with_hooks_passes_activation_and_name_and_replaces():
    model = trained_like("none")
    x = tokens()
    seen = []

    def zero_attention(out, name):
        seen.append((name, tuple(out.shape)))
        return torch.zeros_like(out)

    logits = run_with_hooks(model, x, {"blocks.0.hook_attn_out": zero_attention})
    assert seen == [("blocks.0.hook_attn_out", (3, 5, 16))]
    # no attention: the logits are the unembedded token embeddings
    torch.testing.assert_close(logits, model.unembed(model.embed(x)))
    assert not any(m._forward_hooks for m in model.modules())


def test_run_with_hooks_none_keeps_the_activation_and_restores_training_mode():
    model = trained_like("post")
    model.train()
    x = tokens()
    logits = run_with_hooks(
        model, x, {"blocks.0.hook_attn_out": lambda out, name: None}
    )
    assert model.training
    assert torch.equal(logits, model.eval()(x))


def test_run_with_hooks_and_cache_together_record_the_replacement():
    model = trained_like("none")
    hooks = {"blocks.0.hook_attn_out": lambda out, _name: 3 * out}
    _, plain = run_with_cache(model, tokens(), names=["blocks.0.hook_attn_out"])
    _, scaled = run_with_cache(
        model, tokens(), names=["blocks.0.hook_attn_out"], hooks=hooks
    )
    assert (
        scaled["blocks.0.hook_attn_out"].shape == plain["blocks.0.hook_attn_out"].shape
    )


def test_run_with_hooks_removes_hooks_even_on_error():
    model = trained_like("none")

    def broken(out, name):
        raise RuntimeError("inside a hook")

    with pytest.raises(RuntimeError, match="inside a hook"):
        run_with_hooks(model, tokens(), {"blocks.0.hook_attn_out": broken})
    assert not any(m._forward_hooks for m in model.modules())
    with hooks_installed(model, {"hook_embed": lambda out, _name: out}):
        assert model.hook_embed.hooked
    assert not model.hook_embed.hooked


@pytest.mark.parametrize(
    "hooks, message",
    [
        (
            {"blocks.0.attn.hook_nope": lambda out, name: None},
            "unknown activation names.*hook_embed",
        ),
        ({"hook_embed": "not a function"}, "must be callable"),
        ({"hook_embed": lambda out, name: 2.0}, "return a Tensor or None"),
    ],
)
def test_run_with_hooks_bad_input_raises(hooks, message):
    model = trained_like("none")
    with pytest.raises(ValueError, match=message):
        run_with_hooks(model, tokens(), hooks)
    assert not any(m._forward_hooks for m in model.modules())
