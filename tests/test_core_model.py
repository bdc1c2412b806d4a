import pytest
import torch

from lengthgen_lite.core.hooks import hook_names, run_with_cache, run_with_hooks
from lengthgen_lite.core.model import (
    NORM_SITES,
    PLACEMENTS,
    ModelConfig,
    NormSites,
    Transformer,
    init_model,
)
from lengthgen_lite.core.seeding import seed_everything

ALWAYS = {
    "hook_embed",
    "blocks.0.hook_resid_pre",
    "blocks.0.attn.hook_attn_scores",
    "blocks.0.attn.hook_pattern",
    "blocks.0.attn.hook_z",
    "blocks.0.hook_attn_out",
    "blocks.0.hook_resid_mid",
    "blocks.0.hook_resid_post",
}
EXTRA = {  # every norm has hook_scale (its divisor) and hook_normalized
    "none": set(),
    "pre": {"blocks.0.ln1.hook_scale", "blocks.0.ln1.hook_normalized"},
    "pre_final": {
        "blocks.0.ln1.hook_scale",
        "blocks.0.ln1.hook_normalized",
        "ln_final.hook_scale",
        "ln_final.hook_normalized",
    },
    "post": {"blocks.0.ln1.hook_scale", "blocks.0.ln1.hook_normalized"},
    "attn_out": {
        "blocks.0.ln_attn_out.hook_scale",
        "blocks.0.ln_attn_out.hook_normalized",
    },
}


def tokens(batch=3, length=5, v=8):
    return torch.stack([torch.randperm(v)[:length] for _ in range(batch)])


@pytest.mark.parametrize("norm", list(EXTRA))
def test_hook_names_per_placement(norm):
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, norm=norm))
    assert set(hook_names(model)) == ALWAYS | EXTRA[norm]


def test_hook_names_with_mlp_positions_and_two_layers():
    cfg = ModelConfig(
        vocab_size=8,
        d_model=16,
        n_layers=2,
        d_mlp=32,
        norm="post",
        positional="learned",
    )
    names = set(hook_names(Transformer(cfg)))
    assert {
        "hook_pos_embed",
        "blocks.1.hook_mlp_out",
        "blocks.1.ln2.hook_normalized",
    } <= names


def test_shapes_of_logits_and_cache():
    cfg = ModelConfig(vocab_size=8, d_model=16, n_heads=2, d_head=4, norm="attn_out")
    logits, cache = run_with_cache(Transformer(cfg), tokens())
    assert logits.shape == (3, 5, 8)
    assert cache["blocks.0.attn.hook_pattern"].shape == (3, 2, 5, 5)
    assert cache["blocks.0.attn.hook_z"].shape == (3, 5, 2, 4)
    assert cache["blocks.0.hook_attn_out"].shape == (3, 5, 16)
    torch.testing.assert_close(
        cache["blocks.0.attn.hook_pattern"].sum(-1), torch.ones(3, 2, 5)
    )


def test_causal_mask_hides_the_future():
    model = Transformer(ModelConfig(vocab_size=8, d_model=16)).eval()
    a = torch.tensor([[0, 1, 2, 3]])
    b = torch.tensor([[0, 1, 2, 7]])
    torch.testing.assert_close(model(a)[:, :3], model(b)[:, :3])
    _, cache = run_with_cache(model, a)
    assert (cache["blocks.0.attn.hook_pattern"][0, 0].triu(1) == 0).all()


def test_norm_placements_do_what_they_say():
    x = tokens()
    post = Transformer(ModelConfig(vocab_size=8, d_model=16, norm="post"))
    _, cache = run_with_cache(post, x)
    # LN with gain 1, bias 0 at init: zero mean, unit variance
    resid = cache["blocks.0.hook_resid_post"]
    torch.testing.assert_close(resid.mean(-1), torch.zeros(3, 5), atol=1e-5, rtol=0)
    attn_ln = Transformer(
        ModelConfig(vocab_size=8, d_model=16, norm="attn_out", norm_kind="standardize")
    )
    _, cache = run_with_cache(attn_ln, x)
    normalized = cache["blocks.0.ln_attn_out.hook_normalized"]
    torch.testing.assert_close(
        normalized.var(-1, unbiased=False), torch.ones(3, 5), atol=1e-3, rtol=0
    )
    torch.testing.assert_close(
        cache["blocks.0.hook_resid_mid"], cache["blocks.0.hook_resid_pre"] + normalized
    )
    # no affine
    assert not any("ln_attn_out" in name for name, _ in attn_ln.named_parameters())


def test_forward_embeddings_checks_width_and_max_len():
    model = Transformer(
        ModelConfig(vocab_size=8, d_model=16, positional="learned", max_len=4)
    )
    with pytest.raises(ValueError, match="d_model=16"):
        model.forward_embeddings(torch.zeros(1, 3, 8))
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 5, dtype=torch.long))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(norm="sandwich"), "norm='sandwich' is unknown"),
        (dict(norm_kind="rms"), "norm_kind='rms' is unknown"),
        (dict(positional="rope"), "positional='rope' is unknown"),
        (dict(d_model=10, n_heads=3), "not divisible"),
        (dict(vocab_size=0), "vocab_size must be"),
        (dict(d_mlp=-1), "d_mlp must be"),
        (dict(attn_dropout=1.0), "attn_dropout must be"),
        (dict(d_head=0), "d_head must be"),
        (dict(n_outputs=0), "n_outputs must be"),
    ],
)
def test_bad_configs_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{"vocab_size": 8, **kwargs})


def test_last_query_attention_equals_the_last_row_of_full_attention():
    # queries="last" (chapter 4): only the last position attends and goes on; same
    # numbers there.
    torch.manual_seed(0)
    for causal in (True, False):
        cfg = ModelConfig(
            vocab_size=8,
            d_model=16,
            n_heads=2,
            d_mlp=32,
            norm="attn_out",
            causal=causal,
        )
        full = Transformer(cfg).eval()
        last = Transformer(ModelConfig(**{**cfg.__dict__, "queries": "last"})).eval()
        last.load_state_dict(full.state_dict())
        x = tokens()
        torch.testing.assert_close(last(x), full(x)[:, -1:])
        _, cache = run_with_cache(
            last, x, names=["blocks.0.attn.hook_pattern", "blocks.0.hook_resid_post"]
        )
        assert cache["blocks.0.attn.hook_pattern"].shape == (3, 2, 1, 5)
        assert cache["blocks.0.hook_resid_post"].shape == (3, 1, 16)


def test_unknown_queries_value_raises():
    with pytest.raises(ValueError, match="queries='first' is unknown"):
        ModelConfig(vocab_size=8, queries="first")


# --- the placements, declared once ----------------------------------------------------


def test_placements_are_the_book_vocabulary_in_order():
    assert PLACEMENTS == ("none", "pre", "pre_final", "post", "attn_out")
    assert tuple(NORM_SITES) == PLACEMENTS
    assert set(EXTRA) == set(PLACEMENTS)
    assert ModelConfig(vocab_size=8, norm="pre_final").norm_sites == NormSites(
        pre=True, final=True
    )


def test_norm_sites_reject_pre_and_post_together():
    with pytest.raises(ValueError, match="pre and post share"):
        NormSites(pre=True, post=True)


# --- hook_scale: the norm's divisor ---------------------------------------------------


def trained_like(norm, kind="layernorm", seed=0, **kwargs):
    """A model whose norms have non-trivial gains and biases (as after training)."""
    seed_everything(seed)
    model = Transformer(
        ModelConfig(vocab_size=8, d_model=16, norm=norm, norm_kind=kind, **kwargs)
    ).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("kind", ["layernorm", "standardize"])
@pytest.mark.parametrize("norm", ["pre", "pre_final", "post", "attn_out"])
def test_recording_hook_scale_leaves_every_output_bit_identical(norm, kind):
    model = trained_like(norm, kind, d_mlp=16)
    x = tokens()
    plain = model(x)
    scales = [name for name in hook_names(model) if name.endswith("hook_scale")]
    logits, cache = run_with_cache(model, x, names=scales)
    assert torch.equal(logits, plain)  # the fused layer_norm still ran
    for name in scales:  # the recorded divisor is sqrt(var + eps) of the norm's input
        norm_module = model.get_submodule(name.rsplit(".", 1)[0])
        assert cache[name].shape[-1] == 1 and norm_module.layer_norm.eps == 1e-5
    _, resid = run_with_cache(model, x, names=["blocks.0.hook_resid_pre"])
    if norm in ("pre", "pre_final"):
        x0 = resid["blocks.0.hook_resid_pre"]
        expected = (x0.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
        assert torch.equal(cache["blocks.0.ln1.hook_scale"], expected)


@pytest.mark.parametrize("kind", ["layernorm", "standardize"])
def test_returning_the_scale_itself_reproduces_the_norm(kind):
    # a replacement equal to the true divisor: the unfused path gives layer_norm up to
    # rounding
    model = trained_like("attn_out", kind)
    x = tokens()
    copy = {"blocks.0.ln_attn_out.hook_scale": lambda scale, _name: scale.clone()}
    torch.testing.assert_close(run_with_hooks(model, x, copy), model(x))


def test_a_frozen_scale_divides_by_the_constant_and_keeps_gain_and_bias():
    model = trained_like("attn_out")
    x = tokens()
    ln = model.blocks[0].ln_attn_out.layer_norm
    hooks = {"blocks.0.ln_attn_out.hook_scale": lambda scale, _name: torch.tensor(2.0)}
    _, cache = run_with_cache(model, x, names=["blocks.0.hook_attn_out"], hooks=hooks)
    logits, frozen = run_with_cache(
        model, x, names=["blocks.0.ln_attn_out.hook_normalized"], hooks=hooks
    )
    h = cache["blocks.0.hook_attn_out"]
    expected = (h - h.mean(-1, keepdim=True)) / 2.0 * ln.weight + ln.bias
    torch.testing.assert_close(frozen["blocks.0.ln_attn_out.hook_normalized"], expected)
    assert not torch.allclose(logits, model(x))


def test_training_never_sees_hook_scale_so_it_is_unchanged():
    from lengthgen_lite.core.tasks import SetComplement
    from lengthgen_lite.core.training import TrainConfig, train

    cfg = ModelConfig(vocab_size=8, d_model=16, norm="post")
    result = train(
        cfg,
        SetComplement(v=8, train_length=3),
        TrainConfig(steps=3, warmup=0, batch=4),
        [0],
        progress=False,
    )
    assert not any(m._forward_hooks for m in result.models[0].modules())


# --- init_model -----------------------------------------------------------------------


def test_init_model_is_the_start_train_uses():
    from lengthgen_lite.core.tasks import SetComplement
    from lengthgen_lite.core.training import TrainConfig, train

    cfg = ModelConfig(vocab_size=8, d_model=16, norm="attn_out")
    # what train did before init_model existed: seed_everything(2 * seed), then build
    seed_everything(2 * 3)
    replayed = Transformer(cfg).state_dict()
    for name, weight in init_model(cfg, 3).state_dict().items():
        assert torch.equal(weight, replayed[name])
    # one step at lr 0 leaves the weights at their start: train starts seed k from
    # init_model(cfg, k)
    result = train(
        cfg,
        SetComplement(v=8, train_length=3),
        TrainConfig(steps=1, warmup=1, lr=1e-30),
        [3, 5],
        progress=False,
    )
    start = init_model(cfg, 5).state_dict()
    for name, weight in result.models[1].state_dict().items():
        torch.testing.assert_close(weight, start[name], atol=1e-6, rtol=0)
    assert not torch.equal(
        init_model(cfg, 4).embed.weight, init_model(cfg, 5).embed.weight
    )


def old_init_model(cfg, seed, model_class=Transformer):
    """init_model before issue 34: it seeded every global stream, then built."""
    seed_everything(2 * seed)
    return model_class(cfg)


@pytest.mark.parametrize(
    "kwargs, checksums",
    [
        # sum, sum of |w|, sum of w^2 of every weight at seed 3, computed with the
        # implementation before issue 34 (the weights every stored output started from)
        ({}, (2.791232095565647, 340.990852652234, 224.4712120698887)),
        (
            dict(n_layers=2, d_mlp=8, norm="pre_final", n_heads=2),
            (102.81425046773074, 735.7766559281372, 368.653998219466),
        ),
        (
            dict(init="torch", attn_bias=True, d_mlp=8),
            (-3.2190187743399292, 293.0415203634184, 151.7190205577491),
        ),
    ],
)
def test_init_model_gives_the_weights_it_always_gave(kwargs, checksums):
    cfg = ModelConfig(vocab_size=8, d_model=16, **kwargs)
    weights = init_model(cfg, 3).state_dict()
    flat = torch.cat([w.flatten().double() for w in weights.values()])
    sums = (flat.sum(), flat.abs().sum(), flat.square().sum())
    assert [float(x) for x in sums] == pytest.approx(checksums, rel=1e-12)
    for name, weight in old_init_model(cfg, 3).state_dict().items():
        assert torch.equal(weight, weights[name]), name


def test_init_model_leaves_the_callers_random_streams_alone():
    import random

    seed_everything(11)
    expected = torch.rand(5), random.random()
    seed_everything(11)
    init_model(ModelConfig(vocab_size=8, d_model=16, d_mlp=8), 4)
    init_model(ModelConfig(vocab_size=8, d_model=16, init="torch"), 5)
    after = torch.rand(5), random.random()
    assert torch.equal(after[0], expected[0]) and after[1] == expected[1]


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0"])
def test_init_model_rejects_bad_seeds(seed):
    with pytest.raises(ValueError, match="seed must be"):
        init_model(ModelConfig(vocab_size=8), seed)


def test_torch_init_is_pytorchs_own_linear_init():
    book = init_model(ModelConfig(vocab_size=16, d_model=64), 0)
    torch_init = init_model(ModelConfig(vocab_size=16, d_model=64, init="torch"), 0)
    q_book = book.blocks[0].attn.W_Q.weight
    q_torch = torch_init.blocks[0].attn.W_Q.weight
    # std 1/sqrt(fan_in) against uniform in +-1/sqrt(fan_in) (std 1/sqrt(3 fan_in))
    assert abs(q_book.std().item() * 8 - 1) < 0.05
    assert abs(q_torch.std().item() * 8 * 3**0.5 - 1) < 0.05
    assert q_torch.abs().max().item() <= 1 / 8
    assert abs(torch_init.embed.weight.std().item() - 1) < 0.05
    with pytest.raises(ValueError, match="init='xavier' is unknown"):
        ModelConfig(vocab_size=16, init="xavier")


def test_attn_bias_puts_biases_on_w_v_and_w_o_zero_at_the_book_init():
    plain = init_model(ModelConfig(vocab_size=8, d_model=16), 3)
    book = init_model(ModelConfig(vocab_size=8, d_model=16, attn_bias=True), 3)
    torch_init = init_model(
        ModelConfig(vocab_size=8, d_model=16, attn_bias=True, init="torch"), 3
    )
    biases = ("blocks.0.attn.W_V.bias", "blocks.0.attn.W_O.bias")
    assert set(book.state_dict()) - set(plain.state_dict()) == set(biases)
    assert hook_names(book) == hook_names(plain)
    for name in biases:
        assert (book.state_dict()[name] == 0).all()
        bias = torch_init.state_dict()[name]  # PyTorch's: uniform in +-1/sqrt(16)
        assert bias.abs().max() <= 0.25 and bias.abs().min() > 0
    # drawn last: every other weight starts as without biases, at either init
    plain_torch = init_model(ModelConfig(vocab_size=8, d_model=16, init="torch"), 3)
    for name, weight in plain_torch.state_dict().items():
        torch.testing.assert_close(torch_init.state_dict()[name], weight)
    # zero biases: the same function as the model without them
    for name, weight in plain.state_dict().items():
        torch.testing.assert_close(book.state_dict()[name], weight)
    tokens = torch.randint(8, (3, 5))
    torch.testing.assert_close(book(tokens), plain(tokens))
    # and a bias moves the attention output's mean
    with torch.no_grad():
        book.blocks[0].attn.W_O.bias.fill_(1.0)
    _, cache = run_with_cache(book, tokens, ["blocks.0.hook_attn_out"])
    _, plain_cache = run_with_cache(plain, tokens, ["blocks.0.hook_attn_out"])
    torch.testing.assert_close(
        cache["blocks.0.hook_attn_out"], plain_cache["blocks.0.hook_attn_out"] + 1
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(attn_bias=1), "attn_bias=1 is invalid; allowed: False, True"),
        (dict(item_mlp=-1), "item_mlp"),
        (dict(item_mlp=2.5), "item_mlp"),
    ],
)
def test_bad_component_options_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(vocab_size=8, **kwargs)


def test_only_a_model_with_an_input_layer_takes_an_item_mlp():
    with pytest.raises(ValueError, match="item_mlp=8 is invalid for Transformer"):
        Transformer(ModelConfig(vocab_size=8, item_mlp=8))
