"""Chapter 4's retrieval tasks and model (core/retrieval.py)."""

import math

import numpy as np
import pytest
import torch

from lengthgen_lite.core.hooks import hook_names, run_with_cache
from lengthgen_lite.core.model import ModelConfig, attention_logit_factor, init_model
from lengthgen_lite.core.retrieval import (
    NO_TOKEN,
    RETRIEVAL_COLUMNS,
    TABLE_FIELDS,
    ArgmaxRetrieval,
    DictionaryLookup,
    RetrievalTransformer,
    evaluate_retrieval,
    evaluate_sizes,
    evaluate_sizes_logn,
    retrieval_config,
    tables_apply,
)
from lengthgen_lite.core.seeding import make_generator, seed_everything

ATTN_OUT = "blocks.0.hook_attn_out"
NORMED = "blocks.0.ln_attn_out.hook_normalized"


def test_columns():
    assert (
        RETRIEVAL_COLUMNS == ("priority", "first token", "second token")
        and NO_TOKEN == -1
    )


def test_argmax_format_and_answer():
    task = ArgmaxRetrieval(n_classes=5)
    batch = task.sample_train_batch(64, 7, make_generator(0))
    assert (
        batch.inputs.shape == (64, 8, 3)
        and batch.targets.shape == (64, 1, 5)
        and batch.loss_mask.shape == (64, 1)
    )
    items, query = batch.inputs[:, :-1], batch.inputs[:, -1]
    # continuous priorities in (0, 1)
    assert ((items[..., 0] > 0) & (items[..., 0] < 1)).all()
    assert (items[..., 2] == NO_TOKEN).all() and (
        query == torch.tensor([0.0, 5.0, NO_TOKEN])
    ).all()
    best = task.target_item(batch.inputs)
    labels = items[torch.arange(64), best, 1].long()
    assert (labels == batch.targets[:, 0].argmax(-1)).all()
    assert (items[torch.arange(64), best, 0] == items[..., 0].max(-1).values).all()
    assert task.vocab_size == 6 and tuple(task.train_sizes()) == tuple(range(2, 17))


def test_dictionary_format_answer_and_distinct_keys():
    task = DictionaryLookup(n_keys=40, n_values=3, max_train_size=10)
    # N = n_keys: every key present
    batch = task.sample_train_batch(32, 40, make_generator(1))
    items, query = batch.inputs[:, :-1], batch.inputs[:, -1]
    keys = items[..., 1].long()
    assert (keys.sort(-1).values == torch.arange(40)).all()  # distinct keys
    assert ((items[..., 2] >= 40) & (items[..., 2] < 43)).all() and (
        query[:, 1] == 43
    ).all()
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
        (
            lambda: ArgmaxRetrieval(min_train_size=0),
            "min_train_size must be an integer >= 1",
        ),
        (
            lambda: ArgmaxRetrieval(min_train_size=5, max_train_size=4),
            "exceeds max_train_size",
        ),
        (lambda: DictionaryLookup(n_values=0), "n_values must be an int >= 2"),
        (lambda: DictionaryLookup(n_keys=0), "n_keys must be an integer >= 1"),
        (
            lambda: DictionaryLookup(n_keys=8, max_train_size=16),
            "exceeds the 8 distinct keys",
        ),
    ],
)
def test_bad_configurations_raise(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: DictionaryLookup(n_keys=8, max_train_size=4).sample_train_batch(
                2, 9, make_generator(0)
            ),
            "1..n_keys=8",
        ),
        (
            lambda: DictionaryLookup(n_keys=8, max_train_size=4).sample_train_batch(
                2, 0, make_generator(0)
            ),
            "1..n_keys=8",
        ),
        (
            lambda: DictionaryLookup().sample_train_batch(0, 4, make_generator(0)),
            "batch must be",
        ),
        (
            lambda: DictionaryLookup().sample_train_batches(2, 4, []),
            "at least one torch.Generator",
        ),
        (
            lambda: ArgmaxRetrieval().sample_train_batch(2, 0, make_generator(0)),
            "size must be",
        ),
        (
            lambda: ArgmaxRetrieval().sample_train_batch(0, 3, make_generator(0)),
            "batch must be",
        ),
        (
            lambda: ArgmaxRetrieval().sample_train_batches(2, 3, []),
            "at least one torch.Generator",
        ),
        (
            lambda: ArgmaxRetrieval().target_item(torch.zeros(2, 4, 2)),
            "packed retrieval inputs",
        ),
        (
            lambda: DictionaryLookup().target_item(torch.zeros(2, 1, 3)),
            "packed retrieval inputs",
        ),
        (
            lambda: DictionaryLookup().target_item(
                torch.zeros(2, 4, 3, dtype=torch.long)
            ),
            "packed retrieval inputs",
        ),
    ],
)
def test_bad_calls_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()


ARGMAX = ArgmaxRetrieval(n_classes=4, max_train_size=6)


DICT = DictionaryLookup(n_keys=32, n_values=4, max_train_size=6)


def small(task, variant):
    return retrieval_config(task, variant, d_model=16, n_heads=2, d_mlp=32)


def test_config_per_variant():
    assert retrieval_config(ARGMAX, "baseline").norm == "none"
    cfg = retrieval_config(DICT, "standardize")
    assert (cfg.norm, cfg.norm_kind, cfg.queries, cfg.causal, cfg.positional) == (
        "attn_out",
        "standardize",
        "last",
        False,
        "none",
    )
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
    # the query row over N + 1 keys
    assert cache["blocks.0.attn.hook_pattern"].shape == (5, 2, 1, 7)
    assert cache[ATTN_OUT].shape == (5, 1, 16)
    assert (NORMED in hook_names(model)) == (variant == "layernorm")


def test_the_model_sees_a_set_order_does_not_matter():
    seed_everything(1)
    model = RetrievalTransformer(small(ARGMAX, "layernorm")).eval()
    inputs = ARGMAX.sample_train_batch(4, 6, make_generator(1)).inputs
    shuffled = torch.cat(
        [inputs[:, torch.tensor([5, 3, 1, 0, 2, 4])], inputs[:, -1:]], dim=1
    )
    torch.testing.assert_close(model(inputs), model(shuffled))


def test_query_only_attention_matches_full_attention_at_the_query():
    seed_everything(2)
    last = RetrievalTransformer(small(DICT, "layernorm")).eval()
    full = RetrievalTransformer(
        ModelConfig(**{**small(DICT, "layernorm").__dict__, "queries": "all"})
    ).eval()
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
        models[variant] = init_model(
            small(ARGMAX, variant), 1, RetrievalTransformer
        ).state_dict()
    for name, weight in models["baseline"].items():
        torch.testing.assert_close(models["layernorm"][name], weight)
        torch.testing.assert_close(models["standardize"][name], weight)


def test_init_model_builds_the_retrieval_model():
    model = init_model(small(DICT, "layernorm"), 0, RetrievalTransformer)
    assert isinstance(model, RetrievalTransformer) and hasattr(model, "priority_embed")
    assert "blocks.0.ln_attn_out.hook_scale" in hook_names(model)


def with_item_mlp(task, variant, width, **kwargs):
    return retrieval_config(
        task, variant, d_model=16, n_heads=2, d_mlp=32, item_mlp=width, **kwargs
    )


@pytest.mark.parametrize("init", ["book", "torch"])
def test_item_mlp_is_added_last_so_every_other_weight_starts_the_same(init):
    plain = init_model(
        with_item_mlp(ARGMAX, "layernorm", 0, init=init), 4, RetrievalTransformer
    )
    mlp = init_model(
        with_item_mlp(ARGMAX, "layernorm", 8, init=init), 4, RetrievalTransformer
    )
    extra = set(mlp.state_dict()) - set(plain.state_dict())
    assert extra == {
        f"item_mlp.fc_{s}.{p}" for s in ("in", "out") for p in ("weight", "bias")
    }
    for name, weight in plain.state_dict().items():
        torch.testing.assert_close(mlp.state_dict()[name], weight)
    assert set(hook_names(mlp)) - set(hook_names(plain)) == {"hook_item_mlp_out"}
    fc_in = mlp.item_mlp.fc_in
    if init == "book":  # std 1/sqrt(fan_in), zero biases
        assert (fc_in.bias == 0).all() and abs(fc_in.weight.std().item() * 4 - 1) < 0.2
    else:  # PyTorch's own: uniform in +-1/sqrt(fan_in)
        assert fc_in.bias.abs().min() > 0 and fc_in.weight.abs().max() <= 0.25


def test_the_item_mlp_acts_on_each_item_before_attention():
    model = init_model(with_item_mlp(DICT, "baseline", 8), 5, RetrievalTransformer)
    inputs = DICT.sample_train_batch(4, 6, make_generator(5)).inputs
    _, cache = run_with_cache(
        model, inputs, ["hook_embed", "hook_item_mlp_out", "blocks.0.hook_resid_pre"]
    )
    embed = cache["hook_embed"]
    torch.testing.assert_close(cache["hook_item_mlp_out"], model.item_mlp(embed))
    torch.testing.assert_close(
        cache["blocks.0.hook_resid_pre"], embed + cache["hook_item_mlp_out"]
    )
    # one item's vector depends on that item alone: still a set
    shuffled = torch.cat(
        [inputs[:, torch.tensor([5, 3, 1, 0, 2, 4])], inputs[:, -1:]], dim=1
    )
    torch.testing.assert_close(model.eval()(inputs), model(shuffled))


def test_attention_biases_draw_after_the_retrieval_models_own_weights():
    plain = init_model(
        with_item_mlp(DICT, "baseline", 0, init="torch"), 6, RetrievalTransformer
    )
    biased = init_model(
        with_item_mlp(DICT, "baseline", 0, init="torch", attn_bias=True),
        6,
        RetrievalTransformer,
    )
    assert set(biased.state_dict()) - set(plain.state_dict()) == {
        "blocks.0.attn.W_V.bias",
        "blocks.0.attn.W_O.bias",
    }
    for name, weight in plain.state_dict().items():
        torch.testing.assert_close(biased.state_dict()[name], weight)
    assert biased.blocks[0].attn.W_O.bias.abs().min() > 0


@pytest.mark.parametrize(
    "task, variant, options",
    [
        (ARGMAX, "layernorm", {}),
        (DICT, "baseline", {"attn_bias": True, "init": "torch"}),
        (ARGMAX, "standardize", {"item_mlp": 8}),
        # the item MLP through tables with every bias drawn (fc_out's, W_K's, W_V's)
        (DICT, "baseline", {"item_mlp": 8, "attn_bias": True, "init": "torch"}),
        (DICT, "layernorm", {"n_layers": 2}),
        (ARGMAX, "baseline", {"norm": "pre"}),
        # chapter 8's length scalings: n is every slot the query sees
        (ARGMAX, "layernorm", {"logit_scale": "ssmax", "scale_length": 16}),
        (DICT, "baseline", {"logit_scale": "logn", "scale_length": 16}),
    ],
)
def test_query_forward_is_the_forward_with_its_readings(task, variant, options):
    model = init_model(
        retrieval_config(task, variant, d_model=16, n_heads=2, d_mlp=32, **options),
        0,
        RetrievalTransformer,
    ).eval()
    inputs = task.sample_train_batch(16, 5, make_generator(0)).inputs
    logits, cache = run_with_cache(
        model, inputs, names=["blocks.0.attn.hook_pattern", ATTN_OUT]
    )
    for tables in (False, True) if tables_apply(model.cfg) else (False,):
        with torch.no_grad():
            out, pattern, attn_out = model.query_forward(inputs, tables)
        # the same function, its products in another order: without tables the query
        # read back through W_K and the slots mixed before W_V; tables sum the slots'
        # projected rows
        torch.testing.assert_close(out, logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(
            pattern, cache["blocks.0.attn.hook_pattern"][:, :, -1]
        )
        torch.testing.assert_close(attn_out, cache[ATTN_OUT][:, -1])


def test_query_forward_rejects_what_it_cannot_compute():
    inputs = ARGMAX.sample_train_batch(2, 3, make_generator(0)).inputs
    pre = RetrievalTransformer(
        retrieval_config(ARGMAX, "baseline", d_model=16, n_heads=2, norm="pre")
    )
    with pytest.raises(ValueError, match="tables need slot vectors that are sums"):
        pre.query_forward(inputs, tables=True)
    every = RetrievalTransformer(
        retrieval_config(ARGMAX, "baseline", d_model=16, queries="all")
    )
    with pytest.raises(ValueError, match="query_forward needs queries='last'"):
        every.query_forward(inputs)
    rope = RetrievalTransformer(
        retrieval_config(ARGMAX, "baseline", d_model=16, positional="rope")
    )
    with pytest.raises(ValueError, match="query_forward has no positions"):
        rope.query_forward(inputs)
    logn = RetrievalTransformer(
        retrieval_config(ARGMAX, "baseline", logit_scale="logn", scale_length=16)
    )
    with pytest.raises(ValueError, match="padded sets change n"):
        logn.query_forward(inputs, padded=True)


def test_query_forward_applies_the_test_time_logit_factor():
    model = init_model(
        retrieval_config(ARGMAX, "layernorm", d_model=16, n_heads=2),
        0,
        RetrievalTransformer,
    ).eval()
    inputs = ARGMAX.sample_train_batch(16, 5, make_generator(0)).inputs
    with torch.no_grad(), attention_logit_factor(model, 2.5):
        logits, cache = run_with_cache(
            model, inputs, names=["blocks.0.attn.hook_pattern"]
        )
        out, pattern, _ = model.query_forward(inputs, tables=True)
    torch.testing.assert_close(out, logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pattern, cache["blocks.0.attn.hook_pattern"][:, :, -1])


@pytest.mark.parametrize(
    "task, variant, options",
    [
        (ARGMAX, "layernorm", {}),
        (ARGMAX, "standardize", {"item_mlp": 8}),
        (DICT, "baseline", {"attn_bias": True, "init": "torch"}),
    ],
)
def test_evaluate_sizes_is_evaluate_retrieval_of_each_model(task, variant, options):
    cfg = retrieval_config(task, variant, d_model=16, n_heads=2, d_mlp=32, **options)
    models = [init_model(cfg, s, RetrievalTransformer).eval() for s in range(3)]
    sizes = [4, 16, 32]
    curves = evaluate_sizes(models, task, sizes, n_samples=60, seed=1)
    tables = [evaluate_retrieval(m, task, sizes, n_samples=60, seed=1) for m in models]
    for name in TABLE_FIELDS:
        values = [getattr(t, name) for t in tables]
        if name.removeprefix("normed_") == "feature_var":
            got = np.stack([curves[f"{name}_{j}"] for j in range(3)], -1)
        else:
            got = curves[name]
        if values[0] is None:  # no norm
            assert np.isnan(got).all(), name
        else:
            # absolutely too: the norm's output has mean 0 up to rounding
            np.testing.assert_allclose(
                got, np.stack(values), rtol=1e-4, atol=1e-6, err_msg=name
            )


def test_evaluate_sizes_needs_one_configurations_retrieval_models():
    models = [
        RetrievalTransformer(small(ARGMAX, variant))
        for variant in ("baseline", "layernorm")
    ]
    with pytest.raises(ValueError, match="RetrievalTransformers of one ModelConfig"):
        evaluate_sizes(models, ARGMAX, [4], n_samples=5, seed=0)


def test_fast_draws_are_distinct_keys_from_the_same_distribution():
    size, batch = 5, 4000  # 5 * 4 <= 32 keys: rejection
    fast = DICT.sample_fast_batches(batch, size, [make_generator(0)])
    plain = DICT.sample_train_batches(batch, size, [make_generator(0)])
    for data in (fast, plain):
        inputs = data.inputs[0]
        keys = inputs[:, :-1, 1].long()  # [batch, N]
        assert (keys.sort(-1).values.diff(dim=-1) > 0).all()  # distinct
        # the answer is the queried key's value, the query row as the format says
        target = DICT.target_item(inputs)
        value = inputs[torch.arange(batch), target, 2].long() - DICT.n_keys
        assert torch.equal(value, data.targets[0, :, 0].argmax(-1))
        assert (inputs[:, -1, 1] == DICT.n_keys + DICT.n_values).all()
        # every key equally likely at every slot, every slot equally likely queried
        counts = torch.bincount(keys.flatten(), minlength=DICT.n_keys).double()
        expected = batch * size / DICT.n_keys
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < 70, chi2  # 31 degrees of freedom: p < 1e-4
        slots = torch.bincount(target, minlength=size).double()
        assert (slots - batch / size).abs().max() < 5 * (batch / size) ** 0.5
    assert not torch.equal(fast.inputs, plain.inputs)  # other draws
    # where rejection would redraw most rows (7 * 6 > 32), the plain draws
    big = [DICT.sample_fast_batches, DICT.sample_train_batches]
    a, b = (draw(8, 7, [make_generator(1)]) for draw in big)
    assert torch.equal(a.inputs, b.inputs)
    with pytest.raises(ValueError, match="size N must be an int in 1..n_keys=32"):
        DICT.sample_fast_batches(8, 33, [make_generator(1)])


def test_evaluate_sizes_logn_sharpens_each_size_by_its_own_factor():
    cfg = retrieval_config(ARGMAX, "baseline", d_model=16, n_heads=2)
    models = [init_model(cfg, s, RetrievalTransformer).eval() for s in range(2)]
    sizes = [8, 32]
    curves = evaluate_sizes_logn(models, ARGMAX, sizes, n_samples=40, seed=3, n_train=4)
    for j, N in enumerate(sizes):
        for k, model in enumerate(models):
            with attention_logit_factor(model, math.log(N) / math.log(4)):
                one = evaluate_sizes([model], ARGMAX, (N,), n_samples=40, seed=3)
            np.testing.assert_allclose(
                curves["accuracy"][k, j], one["accuracy"][0, 0], atol=1e-6
            )
    plain = evaluate_sizes(models, ARGMAX, sizes, n_samples=40, seed=3)
    assert not np.allclose(curves["n_eff"], plain["n_eff"])
    assert all(m.blocks[0].attn.logit_factor == 1.0 for m in models)  # restored
    with pytest.raises(ValueError, match="n_train"):
        evaluate_sizes_logn(models, ARGMAX, sizes, n_samples=4, seed=3, n_train=1)
