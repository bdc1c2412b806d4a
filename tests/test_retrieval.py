import numpy as np
import pytest
import torch

from lengthgen_lite.model import ModelConfig, hook_names, run_with_cache
from lengthgen_lite.retrieval import (
    ATTN_OUT,
    NORMED,
    RetrievalTransformer,
    argmax_near_misses,
    attention_output_samples,
    evaluate_rescaled,
    evaluate_retrieval,
    retrieval_config,
    run_variants,
    scaled_attention_output,
    stack_field,
)
from lengthgen_lite.seeding import make_generator, seed_everything
from lengthgen_lite.tasks import ArgmaxRetrieval, DictionaryLookup
from lengthgen_lite.training import TrainConfig, train

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


def test_bad_inputs_raise():
    model = RetrievalTransformer(small(ARGMAX, "baseline"))
    with pytest.raises(ValueError, match="packed items"):
        model(torch.zeros(2, 3, 2))
    with pytest.raises(ValueError, match="packed items"):
        model(torch.zeros(2, 3, 3, dtype=torch.long))


def test_training_learns_dictionary_lookup_and_evaluation_reports_it():
    cfg = TrainConfig(steps=300, batch=64, warmup=20, lr=1e-2)
    result = train(small(DICT, "layernorm"), DICT, cfg, seeds=[0, 1], model_class=RetrievalTransformer, progress=False)
    assert (result.loss[-20:].mean(0) < 0.5 * np.log(4)).all()
    table = evaluate_retrieval(result.models[0], DICT, [4, 32], n_samples=200)
    assert table.accuracy[0] > 0.8 and table.target_attention[0] > 0.3
    assert table.normed_global_var is not None and table.feature_var.shape == (2, 3)
    assert table.n_eff[1] > table.n_eff[0]
    before, after = attention_output_samples(result.models[0], DICT, 4, n_samples=200)
    assert before.shape == after.shape == (200, 16)
    np.testing.assert_allclose(table.global_var[0], before.double().var(1, unbiased=False).mean().item(), rtol=1e-6)


def test_baseline_tables_have_no_normed_statistics_and_scaling_changes_outputs():
    seed_everything(4)
    model = RetrievalTransformer(small(DICT, "baseline")).eval()
    table = evaluate_retrieval(model, DICT, [8], n_samples=50)
    assert table.normed_global_var is None
    scaled = evaluate_retrieval(model, DICT, [8], n_samples=50, scale=[2.0])
    assert scaled.global_var[0] == pytest.approx(4 * table.global_var[0], rel=1e-5)  # the hook scales attn_out
    inputs = DICT.sample_train_batch(3, 8, make_generator(0)).inputs
    with scaled_attention_output(model, 0.0):
        zeroed = model(inputs)
    assert not torch.allclose(zeroed, model(inputs))  # and the hook is gone afterwards
    assert not any(m._forward_hooks for m in model.modules())


@pytest.mark.parametrize(
    "kwargs, message",
    [(dict(sizes=[]), "non-empty list"), (dict(sizes=[0]), "positive ints"), (dict(sizes=[4, 8], scale=[1.0]), "one entry per size")],
)
def test_evaluate_rejects_bad_arguments(kwargs, message):
    model = RetrievalTransformer(small(DICT, "baseline"))
    with pytest.raises(ValueError, match=message):
        evaluate_retrieval(model, DICT, **kwargs)


def test_run_variants_trains_each_variant_once_and_pairs_the_seeds():
    cfg = TrainConfig(steps=5, batch=8, warmup=1)
    runs = run_variants(ARGMAX, seeds=[0, 1], train_cfg=cfg, sizes=[4, 8], n_samples=20, progress=False,
                        d_model=16, n_heads=2, d_mlp=32)
    assert list(runs) == ["baseline", "layernorm", "standardize"]
    assert runs["layernorm"].field("accuracy").shape == (2, 2) and runs["baseline"].result.loss.shape == (5, 2)
    assert not np.array_equal(runs["baseline"].result.loss, runs["standardize"].result.loss)


def test_the_norms_add_no_random_parameters_so_a_seed_starts_every_variant_alike():
    models = {}
    for variant in ("baseline", "layernorm", "standardize"):
        seed_everything(2)  # what train does for seed 1
        models[variant] = RetrievalTransformer(small(ARGMAX, variant)).state_dict()
    for name, weight in models["baseline"].items():
        torch.testing.assert_close(models["layernorm"][name], weight)
        torch.testing.assert_close(models["standardize"][name], weight)


def test_stack_field_errors():
    seed_everything(0)
    table = evaluate_retrieval(RetrievalTransformer(small(ARGMAX, "baseline")), ARGMAX, [4], n_samples=10)
    assert stack_field([table, table], "accuracy").shape == (2, 1)
    with pytest.raises(ValueError, match="missing"):
        stack_field([table], "normed_global_var")
    with pytest.raises(ValueError, match="at least one"):
        stack_field([], "accuracy")


def test_evaluate_rescaled_restores_the_reference_scale():
    seed_everything(5)
    model = RetrievalTransformer(small(DICT, "baseline")).eval()
    table = evaluate_retrieval(model, DICT, [4, 16], n_samples=100)
    rescaled = evaluate_rescaled(model, DICT, table, reference_size=4)
    np.testing.assert_allclose(rescaled.attn_out_rms, table.attn_out_rms[0], rtol=1e-5)
    with pytest.raises(ValueError, match="reference_size=8 is not among"):
        evaluate_rescaled(model, DICT, table, reference_size=8)


def test_argmax_near_misses_counts_runner_up_labels():
    seed_everything(6)
    model = RetrievalTransformer(small(ARGMAX, "baseline")).eval()  # untrained: errors are arbitrary
    result = argmax_near_misses(model, ARGMAX, N=8, n_samples=400, runners_up=2)
    assert result.chance == pytest.approx(1 - 0.75**2)
    assert 0.5 < result.error_rate < 1.0
    assert abs(result.near_miss - result.chance) < 0.15  # an untrained model names runner-ups by chance
    with pytest.raises(ValueError, match="runners_up must be"):
        argmax_near_misses(model, ARGMAX, N=3, runners_up=3)
