import math
from dataclasses import replace

import pytest
import torch

from lengthgen_lite.core.hooks import hook_names, run_with_cache, run_with_hooks
from lengthgen_lite.core.model import (
    LOGIT_SCALES,
    NORM_SITES,
    PLACEMENTS,
    ModelConfig,
    NormSites,
    Transformer,
    attention_logit_factor,
    init_model,
    logn_twin,
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
        (dict(positional="alibi"), "positional='alibi' is unknown"),
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


# --- chapter 8: the logits' length factor, the test-time factor, RoPE -----------------


def attention_input(model, cache):
    """What layer 0's attention reads: the normed stream under pre-norm."""
    if model.cfg.norm_sites.pre:
        return cache["blocks.0.ln1.hook_normalized"]
    return cache["blocks.0.hook_resid_pre"]


def hand_logits(model, h):
    """Layer 0's q.k / sqrt(d_head) [batch, head, T, T] from the weights and its input
    h [batch, T, d_model], and its v [batch, head, T, d_head]."""
    attn = model.blocks[0].attn
    B, T, _ = h.shape
    q, k, v = (
        (h @ W.weight.double().T).view(B, T, attn.n_heads, attn.d_head).transpose(1, 2)
        for W in (attn.W_Q, attn.W_K, attn.W_V)
    )
    return q @ k.transpose(-1, -2) / attn.d_head**0.5, v


def keys_seen(T, causal=True):
    """n per query [T]: position + 1 (causal), or T."""
    return torch.arange(1, T + 1).double() if causal else torch.full((T,), float(T))


def masked_softmax(scores, causal=True):
    T = scores.shape[-1]
    if causal:
        scores = scores.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
    return scores, scores.softmax(-1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("norm", PLACEMENTS)
def test_logn_scales_each_querys_logits_by_log_n_over_log_n_train(causal, norm):
    cfg = ModelConfig(
        vocab_size=8,
        d_model=16,
        n_heads=2,
        norm=norm,
        causal=causal,
        logit_scale="logn",
        scale_length=3,
    )
    model = init_model(cfg, 1).double()
    x = tokens(batch=2, length=6)
    _, cache = run_with_cache(model, x)
    raw, _ = hand_logits(model, attention_input(model, cache))
    factor = keys_seen(6, causal).log() / math.log(3)  # [query]
    scores, pattern = masked_softmax(raw * factor[:, None], causal)
    torch.testing.assert_close(cache["blocks.0.attn.hook_attn_scores"], scores)
    # the pattern is the softmax of the scaled logits
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"], pattern)
    if causal:  # the first query sees one key: log 1 = 0, all its weight on it
        assert (cache["blocks.0.attn.hook_attn_scores"][:, :, 0, 0] == 0).all()


@pytest.mark.parametrize("queries", ["all", "last"])
def test_ssmax_multiplies_the_logits_by_a_learned_s_per_head_times_log_n(queries):
    causal = queries == "all"
    cfg = ModelConfig(
        vocab_size=8,
        d_model=16,
        n_heads=2,
        d_mlp=8,
        causal=causal,
        queries=queries,
        logit_scale="ssmax",
        scale_length=4,
    )
    model = init_model(cfg, 2).double()
    attn = model.blocks[0].attn
    # initialised at 1 / log n_train in every head; then two different heads
    torch.testing.assert_close(
        attn.ssmax_s, torch.full((2,), 1 / math.log(4), dtype=torch.float64)
    )
    with torch.no_grad():
        attn.ssmax_s.copy_(torch.tensor([0.5, 2.0]))
    x = tokens(batch=3, length=5)
    _, cache = run_with_cache(model, x)
    raw, v = hand_logits(model, attention_input(model, cache))
    s = torch.tensor([0.5, 2.0], dtype=torch.float64)[:, None, None]
    scores, pattern = masked_softmax(
        raw * s * keys_seen(5, causal).log()[:, None], causal
    )
    if queries == "last":  # one query, which sees all 5 keys
        scores, pattern = scores[:, :, -1:], pattern[:, :, -1:]
    torch.testing.assert_close(cache["blocks.0.attn.hook_attn_scores"], scores)
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"], pattern)
    torch.testing.assert_close(
        cache["blocks.0.attn.hook_z"], (pattern @ v).transpose(1, 2)
    )
    # s is a parameter that learns, without weight decay (a vector)
    model(x).square().sum().backward()
    assert attn.ssmax_s.grad is not None and attn.ssmax_s.grad.abs().sum() > 0


@pytest.mark.parametrize("norm", PLACEMENTS)
def test_ssmax_starts_as_logn_and_every_other_weight_as_without_scaling(norm):
    common = dict(vocab_size=8, d_model=16, n_heads=2, d_mlp=8, norm=norm)
    models = {
        scale: init_model(
            ModelConfig(
                **common,
                logit_scale=scale,
                scale_length=None if scale == "none" else 4,
            ),
            3,
        )
        for scale in LOGIT_SCALES
    }
    plain = models["none"].state_dict()
    for scale, model in models.items():
        state = model.state_dict()
        extra = {"blocks.0.attn.ssmax_s"} if scale == "ssmax" else set()
        assert set(state) == set(plain) | extra
        for name, p in plain.items():
            assert torch.equal(state[name], p), (scale, name)
        # no new hook: the scaling is inside hook_attn_scores
        assert hook_names(model) == hook_names(models["none"])
    x = tokens(length=6)
    torch.testing.assert_close(models["ssmax"](x), models["logn"](x))
    # the unscaled model at n_train: the query at position 4 (4 keys) is unchanged
    _, a = run_with_cache(models["none"], x, ["blocks.0.attn.hook_pattern"])
    _, b = run_with_cache(models["ssmax"], x, ["blocks.0.attn.hook_pattern"])
    pattern = "blocks.0.attn.hook_pattern"
    torch.testing.assert_close(a[pattern][:, :, 3], b[pattern][:, :, 3])


def test_the_test_time_factor_multiplies_the_logits_and_is_undone_on_exit():
    model = init_model(
        ModelConfig(
            vocab_size=8, d_model=16, n_heads=2, logit_scale="ssmax", scale_length=4
        ),
        4,
    )
    x = tokens()
    name = "blocks.0.attn.hook_attn_scores"
    before, cache = run_with_cache(model, x, [name])
    with attention_logit_factor(model, 1.7) as same:
        assert same is model
        _, scaled = run_with_cache(model, x, [name])
    torch.testing.assert_close(scaled[name], 1.7 * cache[name])
    # exactly as before afterwards, also after an error inside the block
    with pytest.raises(RuntimeError), attention_logit_factor(model, 3.0):
        raise RuntimeError
    assert torch.equal(model(x), before)
    for bad in (0, -1.0, float("inf"), True, "2"):
        with (
            pytest.raises(ValueError, match="factor must be a finite number > 0"),
            attention_logit_factor(model, bad),
        ):
            pass
    with (
        pytest.raises(ValueError, match="Linear has no Attention"),
        attention_logit_factor(torch.nn.Linear(2, 2), 2.0),
    ):
        pass


def rope_by_hand(x, base=10_000.0):
    """x [batch, head, pos, d] rotated pair by pair (i, i + d/2), one position at a
    time, in float64."""
    out = torch.empty_like(x, dtype=torch.float64)
    d = x.shape[-1]
    for t in range(x.shape[-2]):
        for i in range(d // 2):
            angle = t * base ** (-2 * i / d)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[..., t, i].double(), x[..., t, i + d // 2].double()
            out[..., t, i] = a * c - b * s
            out[..., t, i + d // 2] = a * s + b * c
    return out


@pytest.mark.parametrize("norm", PLACEMENTS)
def test_rope_rotates_q_and_k_by_position_and_adds_nothing_to_the_residual(norm):
    cfg = ModelConfig(vocab_size=8, d_model=16, n_heads=2, norm=norm, positional="rope")
    model = init_model(cfg, 5).double()
    nope = init_model(replace(cfg, positional="none"), 5).double()
    # the same weights (RoPE has none) and hooks: no position embedding
    assert torch.equal(
        torch.cat([p.flatten() for p in model.parameters()]),
        torch.cat([p.flatten() for p in nope.parameters()]),
    )
    assert hook_names(model) == hook_names(nope)
    x = tokens(batch=2, length=6)
    _, cache = run_with_cache(model, x)
    attn = model.blocks[0].attn
    h = attention_input(model, cache)
    q, k = (
        (h @ W.weight.T).view(2, 6, 2, 8).transpose(1, 2) for W in (attn.W_Q, attn.W_K)
    )
    scores, pattern = masked_softmax(
        rope_by_hand(q) @ rope_by_hand(k).transpose(-1, -2) / 8**0.5
    )
    torch.testing.assert_close(cache["blocks.0.attn.hook_attn_scores"], scores)
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"], pattern)


def test_rope_logits_depend_on_positions_only_through_their_difference():
    attn = (
        init_model(
            ModelConfig(vocab_size=8, d_model=16, n_heads=2, positional="rope"), 6
        )
        .blocks[0]
        .attn.double()
    )
    q, k = torch.randn(2, 1, 1, 8, dtype=torch.float64).unbind(0)
    # the same q and k at positions (i, j) of a longer sequence: 7 positions
    q7, k7 = (u.expand(1, 2, 7, 8) for u in (q, k))
    qr, kr = attn.rotate(q7, k7)
    scores = qr @ kr.transpose(-1, -2)  # [1, 2, 7, 7]
    for shift in range(1, 4):
        torch.testing.assert_close(
            scores[..., shift:, shift:], scores[..., : 7 - shift, : 7 - shift]
        )
    assert not torch.allclose(scores[..., 0, 0], scores[..., 3, 0])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(logit_scale="temperature"), "logit_scale='temperature' is unknown"),
        (dict(logit_scale="logn"), "logit_scale='logn' needs scale_length"),
        (
            dict(logit_scale="ssmax", scale_length=1),
            "scale_length must be an integer >= 2",
        ),
        (dict(scale_length=4), "scale_length=4 is invalid with logit_scale='none'"),
        (dict(positional="rope", d_model=12, n_heads=4), "d_head=3 is invalid"),
    ],
)
def test_bad_scaling_options_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{"vocab_size": 8, **kwargs})


def test_logit_scales_are_declared_once_in_order():
    assert LOGIT_SCALES == ("none", "logn", "ssmax")


def test_logn_twin_is_the_per_query_factor():
    cfg = ModelConfig(vocab_size=8, d_model=16)
    model = init_model(cfg, 0).eval()
    twin = logn_twin(model, 4)
    tokens = torch.tensor([[0, 1, 2, 3, 4, 5]])
    # the last query sees 6 keys: its logits x log 6 / log 4, everything else equal
    with torch.no_grad():
        last = twin(tokens)[0, -1]
    with attention_logit_factor(model, math.log(6) / math.log(4)), torch.no_grad():
        expected = model(tokens)[0, -1]
    torch.testing.assert_close(last, expected)
    with pytest.raises(ValueError, match="logit_scale"):
        logn_twin(Transformer(ModelConfig(8, logit_scale="logn", scale_length=4)), 4)
