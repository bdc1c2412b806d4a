import pytest
import torch

from lengthgen_lite.chapters.ch4_vanishing_variance import ATTN_OUT, NORMED
from lengthgen_lite.core.model import (
    ModelConfig,
    RetrievalTransformer,
    Transformer,
    hook_names,
    retrieval_config,
    run_with_cache,
)
from lengthgen_lite.core.seeding import make_generator, seed_everything
from lengthgen_lite.core.tasks import ArgmaxRetrieval, DictionaryLookup


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
EXTRA = {
    "none": set(),
    "pre": {"blocks.0.ln1.hook_normalized"},
    "pre_final": {"blocks.0.ln1.hook_normalized", "ln_final.hook_normalized"},
    "post": {"blocks.0.ln1.hook_normalized"},
    "attn_out": {"blocks.0.ln_attn_out.hook_normalized"},
}


def tokens(batch=3, length=5, v=8):
    return torch.stack([torch.randperm(v)[:length] for _ in range(batch)])


@pytest.mark.parametrize("norm", list(EXTRA))
def test_hook_names_per_placement(norm):
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, norm=norm))
    assert set(hook_names(model)) == ALWAYS | EXTRA[norm]


def test_hook_names_with_mlp_positions_and_two_layers():
    cfg = ModelConfig(vocab_size=8, d_model=16, n_layers=2, d_mlp=32, norm="post", positional="learned")
    names = set(hook_names(Transformer(cfg)))
    assert {"hook_pos_embed", "blocks.1.hook_mlp_out", "blocks.1.ln2.hook_normalized"} <= names


def test_shapes_of_logits_and_cache():
    cfg = ModelConfig(vocab_size=8, d_model=16, n_heads=2, d_head=4, norm="attn_out")
    logits, cache = run_with_cache(Transformer(cfg), tokens())
    assert logits.shape == (3, 5, 8)
    assert cache["blocks.0.attn.hook_pattern"].shape == (3, 2, 5, 5)
    assert cache["blocks.0.attn.hook_z"].shape == (3, 5, 2, 4)
    assert cache["blocks.0.hook_attn_out"].shape == (3, 5, 16)
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"].sum(-1), torch.ones(3, 2, 5))


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
    resid = cache["blocks.0.hook_resid_post"]  # LN with gain 1, bias 0 at init: zero mean, unit variance
    torch.testing.assert_close(resid.mean(-1), torch.zeros(3, 5), atol=1e-5, rtol=0)
    attn_ln = Transformer(ModelConfig(vocab_size=8, d_model=16, norm="attn_out", norm_kind="standardize"))
    _, cache = run_with_cache(attn_ln, x)
    normalized = cache["blocks.0.ln_attn_out.hook_normalized"]
    torch.testing.assert_close(normalized.var(-1, unbiased=False), torch.ones(3, 5), atol=1e-3, rtol=0)
    torch.testing.assert_close(
        cache["blocks.0.hook_resid_mid"], cache["blocks.0.hook_resid_pre"] + normalized
    )
    assert not any("ln_attn_out" in name for name, _ in attn_ln.named_parameters())  # no affine


def test_run_with_cache_removes_hooks_even_on_error():
    model = Transformer(ModelConfig(vocab_size=8, d_model=16))
    with pytest.raises(ValueError, match="tokens must be"):
        run_with_cache(model, torch.zeros(2, 3))  # float, not token ids
    assert all(not m._forward_hooks for m in model.modules())
    run_with_cache(model, tokens())
    assert all(not m._forward_hooks for m in model.modules())


def test_run_with_cache_unknown_name():
    with pytest.raises(ValueError, match="unknown activation"):
        run_with_cache(Transformer(ModelConfig(vocab_size=8, d_model=16)), tokens(), names=["blocks.0.attn.hook_nope"])


def test_forward_embeddings_checks_width_and_max_len():
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, positional="learned", max_len=4))
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
    # queries="last" (chapter 4): only the last position attends and goes on; same numbers there.
    torch.manual_seed(0)
    for causal in (True, False):
        cfg = ModelConfig(vocab_size=8, d_model=16, n_heads=2, d_mlp=32, norm="attn_out", causal=causal)
        full = Transformer(cfg).eval()
        last = Transformer(ModelConfig(**{**cfg.__dict__, "queries": "last"})).eval()
        last.load_state_dict(full.state_dict())
        x = tokens()
        torch.testing.assert_close(last(x), full(x)[:, -1:])
        _, cache = run_with_cache(last, x, names=["blocks.0.attn.hook_pattern", "blocks.0.hook_resid_post"])
        assert cache["blocks.0.attn.hook_pattern"].shape == (3, 2, 1, 5)
        assert cache["blocks.0.hook_resid_post"].shape == (3, 1, 16)


def test_unknown_queries_value_raises():
    with pytest.raises(ValueError, match="queries='first' is unknown"):
        ModelConfig(vocab_size=8, queries="first")


ARGMAX = ArgmaxRetrieval(n_classes=4, max_train_size=6)


DICT = DictionaryLookup(n_keys=32, n_values=4, max_train_size=6)


def small(task, variant):
    return retrieval_config(task, variant, d_model=16, n_heads=2, d_mlp=32)


def test_config_per_variant():
    assert retrieval_config(ARGMAX, "baseline").norm == "none"
    cfg = retrieval_config(DICT, "standardize")
    assert (cfg.norm, cfg.norm_kind, cfg.queries, cfg.causal, cfg.positional) == ("attn_out", "standardize", "last", False, "none")
    assert cfg.vocab_size == DICT.vocab_size and cfg.n_outputs == 4
    with pytest.raises(ValueError, match="variant='rmsnorm' is unknown"):
        retrieval_config(DICT, "rmsnorm")


@pytest.mark.parametrize("variant", ["baseline", "layernorm"])
def test_logits_at_the_query_and_transformerlens_names(variant):
    seed_everything(0)
    model = RetrievalTransformer(small(DICT, variant))
    batch = DICT.sample_train_batch(5, 6, make_generator(0))
    logits, cache = run_with_cache(model, batch.inputs)
    assert logits.shape == (5, 1, 4)
    assert cache["blocks.0.attn.hook_pattern"].shape == (5, 2, 1, 7)  # the query row over N + 1 keys
    assert cache[ATTN_OUT].shape == (5, 1, 16)
    assert (NORMED in hook_names(model)) == (variant == "layernorm")


def test_the_model_sees_a_set_order_does_not_matter():
    seed_everything(1)
    model = RetrievalTransformer(small(ARGMAX, "layernorm")).eval()
    inputs = ARGMAX.sample_train_batch(4, 6, make_generator(1)).inputs
    shuffled = torch.cat([inputs[:, torch.tensor([5, 3, 1, 0, 2, 4])], inputs[:, -1:]], dim=1)
    torch.testing.assert_close(model(inputs), model(shuffled))


def test_query_only_attention_matches_full_attention_at_the_query():
    seed_everything(2)
    last = RetrievalTransformer(small(DICT, "layernorm")).eval()
    full = RetrievalTransformer(ModelConfig(**{**small(DICT, "layernorm").__dict__, "queries": "all"})).eval()
    full.load_state_dict(last.state_dict())
    inputs = DICT.sample_train_batch(4, 6, make_generator(2)).inputs
    torch.testing.assert_close(last(inputs), full(inputs))


def test_absent_tokens_add_nothing():
    seed_everything(3)
    model = RetrievalTransformer(small(ARGMAX, "baseline"))
    inputs = torch.tensor([[[0.5, 2.0, -1.0], [0.0, 4.0, -1.0]]])
    with torch.no_grad():
        _, cache = run_with_cache(model, inputs, names=["hook_embed"])
        expected = model.embed.weight[2] + 0.5 * model.priority_embed.weight[:, 0]
    torch.testing.assert_close(cache["hook_embed"][0, 0], expected)


def test_retrieval_model_rejects_unpacked_inputs():
    model = RetrievalTransformer(small(ARGMAX, "baseline"))
    with pytest.raises(ValueError, match="packed items"):
        model(torch.zeros(2, 3, 2))
    with pytest.raises(ValueError, match="packed items"):
        model(torch.zeros(2, 3, 3, dtype=torch.long))


def test_the_norms_add_no_random_parameters_so_a_seed_starts_every_variant_alike():
    models = {}
    for variant in ("baseline", "layernorm", "standardize"):
        seed_everything(2)  # what train does for seed 1
        models[variant] = RetrievalTransformer(small(ARGMAX, variant)).state_dict()
    for name, weight in models["baseline"].items():
        torch.testing.assert_close(models["layernorm"][name], weight)
        torch.testing.assert_close(models["standardize"][name], weight)
