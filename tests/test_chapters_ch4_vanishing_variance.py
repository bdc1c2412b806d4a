import dataclasses

import numpy as np
import pytest
import torch

from lengthgen_lite.chapters.ch4_law import (
    random_head,
    random_head_outputs,
    standardize,
)
from lengthgen_lite.chapters.ch4_vanishing_variance import (
    argmax_near_misses,
    attention_output_samples,
    evaluate_rescaled,
)
from lengthgen_lite.core.evaluation import loglog_slope
from lengthgen_lite.core.hooks import run_with_hooks
from lengthgen_lite.core.retrieval import (
    RETRIEVAL_VARIANTS,
    ArgmaxRetrieval,
    DictionaryLookup,
    RetrievalTransformer,
    evaluate_retrieval,
    evaluate_sizes,
    retrieval_config,
    scaled_attention_output,
    shift_statistics,
)
from lengthgen_lite.core.seeding import make_generator, seed_everything
from lengthgen_lite.core.training import TrainConfig, train
from lengthgen_lite.runs import run


def test_uniform_attention_gives_exactly_n_eff_equal_n_and_the_one_over_n_law():
    head = random_head(d_model=16, seed=0)
    stds = []
    for N in (4, 64):
        sample = random_head_outputs(
            head, N, 4000, logit_scale=0.0, generator=make_generator(N)
        )
        torch.testing.assert_close(sample.n_eff, torch.full((4000,), float(N)))
        stds.append(sample.outputs[:, 0].std().item())
    assert stds[0] / stds[1] == pytest.approx(4.0, rel=0.08)  # sqrt(64 / 4)
    assert stds[0] == pytest.approx(head.value_std[0] / 2, rel=0.05)  # sigma / sqrt(4)


def test_sharper_attention_means_fewer_effective_items_and_a_slower_decay():
    head = random_head(d_model=16, seed=1)
    n_eff = [
        random_head_outputs(head, 256, 200, s, make_generator(0)).n_eff.mean().item()
        for s in (0.0, 1.0, 3.0)
    ]
    assert n_eff[0] > n_eff[1] > n_eff[2] >= 1.0
    slopes = []
    for scale in (0.0, 3.0):
        stds = [
            random_head_outputs(head, N, 1000, scale, make_generator(N))
            .outputs[:, 0]
            .std()
            .item()
            for N in (8, 64, 512)
        ]
        slopes.append(loglog_slope([8, 64, 512], stds))
    assert slopes[0] == pytest.approx(-0.5, abs=0.05) and slopes[1] > slopes[0] + 0.1


def test_chunking_does_not_change_the_draws():
    head = random_head(d_model=8, seed=0)
    a = random_head_outputs(head, 10, 50, 1.0, make_generator(3), chunk=7)
    b = random_head_outputs(head, 10, 50, 1.0, make_generator(3), chunk=50)
    # chunks draw the same numbers in order
    torch.testing.assert_close(a.outputs, b.outputs)


def test_a_common_item_mean_shifts_the_output_and_keeps_its_spread():
    """Sum_i a_i = 1: shifting every item by mu shifts o by W_V mu; the logits move by
    one constant, so the weights, N_eff and the spread do not change (the law needs no
    zero-mean values)."""
    head = random_head(d_model=8, seed=0)
    plain = random_head_outputs(head, 16, 200, 1.0, make_generator(3))
    shifted = random_head_outputs(head, 16, 200, 1.0, make_generator(3), item_mean=2.0)
    torch.testing.assert_close(shifted.n_eff, plain.n_eff)
    offset = head.w_v @ torch.full((8,), 2.0)
    torch.testing.assert_close(
        shifted.outputs, plain.outputs + offset, atol=1e-4, rtol=1e-4
    )
    assert offset.abs().max() > 0.5  # the shift is not trivially small


def test_loglog_slope_recovers_a_power():
    N = np.array([4, 16, 64, 256])
    assert loglog_slope(N, 3.0 * N**-0.5) == pytest.approx(-0.5)


def test_shift_statistics_and_standardize():
    x = torch.tensor([[1.0, 3.0], [3.0, 5.0], [5.0, 7.0]])
    stats = shift_statistics(x)
    # unbiased variance over samples
    np.testing.assert_allclose(stats.feature_var, [4.0, 4.0])
    assert stats.global_mean == pytest.approx(
        4.0
    ) and stats.global_var == pytest.approx(1.0)
    assert stats.median_feature_var == pytest.approx(4.0)
    z = shift_statistics(
        standardize(torch.randn(100, 32, generator=make_generator(0)) * 5 + 2)
    )
    assert z.global_mean == pytest.approx(
        0.0, abs=1e-6
    ) and z.global_var == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: random_head(d_model=0), "d_model must be"),
        (
            lambda: random_head_outputs(random_head(4), 0, 2, 1.0, make_generator(0)),
            "N must be",
        ),
        (
            lambda: random_head_outputs(random_head(4), 3, 0, 1.0, make_generator(0)),
            "n_sequences must be",
        ),
        (
            lambda: random_head_outputs(
                random_head(4), 3, 2, 1.0, make_generator(0), chunk=0
            ),
            "chunk must be",
        ),
        (
            lambda: random_head_outputs(random_head(4), 3, 2, -1.0, make_generator(0)),
            "logit_scale must be",
        ),
        (
            lambda: random_head_outputs(
                random_head(4), 3, 2, float("inf"), make_generator(0)
            ),
            "logit_scale must be",
        ),
        (
            lambda: random_head_outputs(
                random_head(4), 3, 2, 1.0, make_generator(0), item_mean=float("nan")
            ),
            "item_mean must be",
        ),
        (
            lambda: random_head_outputs(
                random_head(4), 3, 2, 1.0, make_generator(0), chunk=0
            ),
            "chunk must be",
        ),
        (lambda: loglog_slope([1, 2], [1.0]), "same length"),
        (lambda: loglog_slope([1], [1.0]), "same length >= 2"),
        (lambda: loglog_slope([1, 2], [1.0, 0.0]), "positive and finite"),
        (lambda: shift_statistics(torch.zeros(1, 4)), "samples >= 2"),
        (lambda: shift_statistics(torch.zeros(4)), "samples >= 2"),
    ],
)
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_logit_std_matches_the_sampled_logits():
    head = random_head(d_model=16, seed=2)
    # (only to exercise the API)
    sample = random_head_outputs(head, 1, 1, 0.0, make_generator(0))
    x = torch.randn(20000, 16, generator=make_generator(1))
    logits = 2.0 * x @ (head.w_k.T @ (head.w_q @ head.query)) / 4.0
    assert head.logit_std(2.0) == pytest.approx(logits.std().item(), rel=0.03)
    assert sample.n_eff.item() == pytest.approx(1.0)


ARGMAX = ArgmaxRetrieval(n_classes=4, max_train_size=6)


DICT = DictionaryLookup(n_keys=32, n_values=4, max_train_size=6)


def small(task, variant):
    return retrieval_config(task, variant, d_model=16, n_heads=2, d_mlp=32)


def test_training_learns_dictionary_lookup_and_evaluation_reports_it():
    cfg = TrainConfig(steps=300, batch=64, warmup=20, lr=1e-2)
    result = train(
        small(DICT, "layernorm"),
        DICT,
        cfg,
        seeds=[0, 1],
        model_class=RetrievalTransformer,
        progress=False,
    )
    assert (result.loss[-20:].mean(0) < 0.5 * np.log(4)).all()
    table = evaluate_retrieval(result.models[0], DICT, [4, 32], n_samples=200)
    assert table.accuracy[0] > 0.8 and table.target_attention[0] > 0.3
    assert table.normed_global_var is not None and table.feature_var.shape == (2, 3)
    assert table.n_eff[1] > table.n_eff[0]
    before, after = attention_output_samples(result.models[0], DICT, 4, n_samples=200)
    assert before.shape == after.shape == (200, 16)
    np.testing.assert_allclose(
        table.global_var[0],
        before.double().var(1, unbiased=False).mean().item(),
        rtol=1e-6,
    )


def test_baseline_tables_have_no_normed_statistics_and_scaling_changes_outputs():
    seed_everything(4)
    model = RetrievalTransformer(small(DICT, "baseline")).eval()
    table = evaluate_retrieval(model, DICT, [8], n_samples=50)
    assert table.normed_global_var is None
    scaled = evaluate_retrieval(model, DICT, [8], n_samples=50, scale=[2.0])
    # the hook scales attn_out
    assert scaled.global_var[0] == pytest.approx(4 * table.global_var[0], rel=1e-5)
    inputs = DICT.sample_train_batch(3, 8, make_generator(0)).inputs
    zeroed = run_with_hooks(model, inputs, scaled_attention_output(0.0))
    assert not torch.allclose(zeroed, model(inputs))  # and the hook is gone afterwards
    assert not any(m._forward_hooks for m in model.modules())


def test_chunked_evaluation_gives_the_numbers_of_one_forward():
    seed_everything(7)
    model = RetrievalTransformer(small(DICT, "layernorm")).eval()
    one, chunked = (
        evaluate_retrieval(model, DICT, [4, 16], n_samples=60, chunk=c) for c in (60, 7)
    )
    for name in (
        "accuracy",
        "target_attention",
        "n_eff",
        "feature_var",
        "global_var",
        "normed_median_feature_var",
    ):
        np.testing.assert_allclose(
            getattr(chunked, name), getattr(one, name), rtol=1e-5, atol=1e-7
        )
    before = [
        attention_output_samples(model, DICT, 16, n_samples=60, chunk=c)[0]
        for c in (60, 7)
    ]
    torch.testing.assert_close(before[0], before[1])
    argmax_model = RetrievalTransformer(small(ARGMAX, "baseline")).eval()
    misses = [
        argmax_near_misses(argmax_model, ARGMAX, 8, n_samples=60, chunk=c)
        for c in (60, 7)
    ]
    assert misses[0] == misses[1]
    with pytest.raises(ValueError, match="chunk must be"):
        attention_output_samples(model, DICT, 16, chunk=0)
    with pytest.raises(ValueError, match="chunk must be"):
        argmax_near_misses(argmax_model, ARGMAX, 8, chunk=-1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(sizes=[]), "sizes must be a non-empty sequence of integers >= 1"),
        (dict(sizes=[0]), "sizes must be a non-empty sequence of integers >= 1"),
        (dict(sizes=[4, 8], scale=[1.0]), "one entry per size"),
        (dict(sizes=[4], chunk=0), "chunk must be"),
    ],
)
def test_evaluate_rejects_bad_arguments(kwargs, message):
    model = RetrievalTransformer(small(DICT, "baseline"))
    with pytest.raises(ValueError, match=message):
        evaluate_retrieval(model, DICT, **kwargs)


def tiny_spec(**base):
    """Chapter 4's spec, small: 2 seeds, 5 steps, tested at N = 8 and 16 on 20 sets."""
    spec = ch4.SPECS["ch4/retrieval"]
    small_model = {"d_model": 16, "n_heads": 2, "d_mlp": 32, "batch": 8}
    return spec.with_overrides(
        seeds=2,
        steps=5,
        n_test=20,
        base={**spec.base, **small_model, "test_length": 16, **base},
    )


def test_the_runner_trains_each_variant_once_and_pairs_the_seeds():
    results = run(tiny_spec(), progress=False)
    assert [c.task for c in results.configs] == ["argmax_retrieval"] * 3 + [
        "dictionary_lookup"
    ] * 3
    np.testing.assert_array_equal(results.lengths(), [8, 16])
    accuracy = ch4.fields(results, "accuracy")
    assert list(accuracy["argmax retrieval"]) == list(RETRIEVAL_VARIANTS)
    assert accuracy["dictionary lookup"]["layernorm"].shape == (2, 2)
    assert ch4.field(results, "feature_var", "argmax retrieval", "baseline").shape == (
        2,
        2,
        3,
    )
    baseline = ch4.trained(results, "argmax retrieval", "baseline")
    standardize = ch4.trained(results, "argmax retrieval", "standardize")
    assert baseline.loss.shape == (5, 2)
    assert not np.array_equal(baseline.loss, standardize.loss)
    # the numbers of evaluate_retrieval on the same test sets (evaluation seed 0), up
    # to float rounding (the stacked evaluation's token tables)
    task = results.configs[0].setup().task  # ArgmaxRetrieval(), 10 classes
    table = evaluate_retrieval(baseline.models[1], task, [8, 16], n_samples=20)
    for name in ("accuracy", "n_eff", "global_var"):
        np.testing.assert_allclose(
            ch4.field(results, name, "argmax retrieval", "baseline")[1],
            getattr(table, name),
            rtol=1e-5,
        )
    assert np.isnan(
        ch4.field(results, "normed_global_var", "argmax retrieval", "baseline")
    ).all()
    losses = ch4.final_losses(results)
    assert len(losses) == 6 and losses["dictionary lookup", "baseline"].shape == (2,)
    rescaled = ch4.rescaled_accuracy(results, "dictionary lookup")
    assert rescaled.shape == (2, 2)


def test_reading_results_rejects_unknown_names():
    results = run(tiny_spec(steps=2), progress=False)
    with pytest.raises(ValueError, match="allowed: tasks"):
        ch4.field(results, "accuracy", "argmax", "baseline")
    with pytest.raises(ValueError, match="variants"):
        ch4.trained(results, "argmax retrieval", "rmsnorm")


def test_evaluate_sizes_stacks_the_tables_and_marks_missing_statistics():
    seed_everything(0)
    models = [RetrievalTransformer(small(ARGMAX, "baseline")).eval() for _ in range(2)]
    curves = evaluate_sizes(models, ARGMAX, [4, 8], n_samples=10, seed=0)
    np.testing.assert_array_equal(curves["s"], [4, 8])
    assert curves["accuracy"].shape == curves["feature_var_2"].shape == (2, 2)
    assert np.isnan(curves["normed_feature_var_0"]).all()
    table = evaluate_retrieval(models[1], ARGMAX, [4, 8], n_samples=10)
    np.testing.assert_allclose(
        curves["feature_var_1"][1], table.feature_var[:, 1], rtol=1e-5
    )


def test_evaluate_rescaled_restores_the_reference_scale():
    seed_everything(5)
    model = RetrievalTransformer(small(DICT, "baseline")).eval()
    table = evaluate_retrieval(model, DICT, [4, 16], n_samples=100)
    rescaled = evaluate_rescaled(
        model, DICT, [4, 16], table.attn_out_rms, n_samples=100, reference_size=4
    )
    np.testing.assert_allclose(rescaled.attn_out_rms, table.attn_out_rms[0], rtol=1e-5)
    with pytest.raises(ValueError, match="reference_size=8 is not among"):
        evaluate_rescaled(model, DICT, [4, 16], table.attn_out_rms, reference_size=8)


def test_argmax_near_misses_counts_runner_up_labels():
    seed_everything(6)
    # untrained: errors are arbitrary
    model = RetrievalTransformer(small(ARGMAX, "baseline")).eval()
    result = argmax_near_misses(model, ARGMAX, N=8, n_samples=400, runners_up=2)
    assert result.chance == pytest.approx(1 - 0.75**2)
    assert 0.5 < result.error_rate < 1.0
    # an untrained model names runner-ups by chance
    assert abs(result.near_miss - result.chance) < 0.15
    with pytest.raises(ValueError, match="runners_up must be"):
        argmax_near_misses(model, ARGMAX, N=3, runners_up=3)


# --- the numbers and scorecard rows the notebook asserts and glues --------------------

from lengthgen_lite.chapters import ch4_law as ch4law  # noqa: E402
from lengthgen_lite.chapters import ch4_vanishing_variance as ch4  # noqa: E402
from lengthgen_lite.runs.claims import Decision  # noqa: E402
from lengthgen_lite.viz import ch4_numbers  # noqa: E402


def test_end_ratio_and_seed_se():
    x = np.array([[1.0, 2.0, 4.0], [2.0, 1.0, 1.0]])
    np.testing.assert_allclose(ch4.end_ratio(x), [4.0, 0.5])
    assert ch4.seed_se(np.array([1.0, 3.0])) == pytest.approx(1.0)


def test_law_check_on_the_exact_law():
    head, N = random_head(d_model=8, seed=0), [4, 16, 64]
    sharpness = {ch4law.UNIFORM: 0.0, ch4law.DIFFUSE: 1.0, ch4law.SHARP: 3.0}
    law = {k: 1 / np.sqrt(N) for k in sharpness}
    std = {
        ch4law.UNIFORM: law[ch4law.UNIFORM],
        ch4law.DIFFUSE: 1.1 * law[ch4law.DIFFUSE],
        ch4law.SHARP: 0.95 * law[ch4law.SHARP],
    }
    all_std = {ch4law.UNIFORM: np.tile(law[ch4law.UNIFORM][:, None], (1, 8))}
    n_eff = {k: np.array(N, dtype=float) for k in sharpness}
    check = ch4law.law_check(head, N, sharpness, std, law, all_std, n_eff, n_sets=1000)
    assert check.slopes[ch4law.UNIFORM] == pytest.approx(-0.5) and np.allclose(
        check.all_slopes, -0.5
    )
    assert check.law_err[ch4law.UNIFORM] == pytest.approx(
        0.0, abs=1e-12
    ) and check.law_dev == pytest.approx(0.1)
    assert check.rel_se == pytest.approx(1 / np.sqrt(1998))
    assert list(ch4_numbers.law_glue(check, n_eff))[:3] == [
        "slope_uniform",
        "slope_diffuse",
        "slope_sharp",
    ]
    margins, detail = ch4law.law_margins(check, n_sets=1000)
    # in standard errors: 5 - 0 for the slope, (0.15 - 0.1) / rel_se for the law
    assert margins[0] == pytest.approx(5.0)
    assert margins[1] == pytest.approx(0.05 / check.rel_se)
    assert margins[2] == pytest.approx(0.5 * 0.95 / check.slope_se, rel=0.2)
    row = ch4law.LAW_CLAIM.demonstrate(margins, detail, spread=1.0)
    assert isinstance(row, Decision) and row.word == "demonstration"
    assert row.claim.key == "ch4-score-law" and "1000 input sets per N" in row.number


def test_paired_gains_sampling_bounds_and_the_layernorm_row():
    base = np.array([[0.9, 0.5, 0.2], [0.9, 0.5, 0.3]])
    accuracy = {
        "dictionary lookup": {
            "baseline": base,
            "layernorm": base + 0.3,
            "standardize": base + 0.2,
        },
        "argmax retrieval": {
            "baseline": base,
            "layernorm": base,
            "standardize": base - 0.01,
        },
    }
    gain = ch4.paired_gains(accuracy)
    np.testing.assert_allclose(gain["dictionary lookup"]["layernorm"], 0.3)
    pair_se, long_se = ch4.sampling_bounds(400, 2, 2)
    assert pair_se == pytest.approx(0.05) and long_se == pytest.approx(0.025)
    glued = ch4_numbers.gain_glue(
        accuracy, gain, np.array([False, True, True]), long_se
    )
    assert (
        glued["gain_dict_layernorm_1024"] == 0.3
        and glued["gain_argmax_layernorm_1024"] == 0.0
    )
    assert str(glued["gainmax_argmax"]) == "0.0"  # no "-0.0"
    assert ch4.layernorm_share(base + 0.3, base, 0) == pytest.approx(0.3 / 0.65)


class _Config:
    steps, init, lr, item_mlp = 1000, "book", 3e-3, 0


class _Live:
    """Stands in for a live Results: one configuration's fields, the sizes and
    ``spec.n_test``."""

    configs = [_Config()]
    spec = type("Spec", (), {"n_test": 400})()

    def lengths(self):
        return np.array([8, 16, 1024])


def test_layernorm_decisions_follow_the_protocol():
    base = np.array([[0.9, 0.9, 0.2], [0.9, 0.9, 0.3], [0.9, 0.9, 0.25]])
    accuracy = {
        "dictionary lookup": {
            "baseline": base,
            "layernorm": base + [[0, 0, 0.30], [0, 0, 0.31], [0, 0, 0.29]],
        },
        "argmax retrieval": {
            "baseline": base,
            "layernorm": base + [[0, 0, 0.001], [0, 0, -0.001], [0, 0, 0.0]],
        },
    }
    rows = ch4.layernorm_decisions(_Live(), accuracy)
    d, a = rows["dictionary lookup"], rows["argmax retrieval"]
    assert d.claim is ch4.LN_DICT_CLAIM and d.word == "reproduced"
    assert a.claim is ch4.LN_ARGMAX_CLAIM and a.word == "no effect"
    assert d.final[0].cell == {"item_mlp": 0, "init": "book", "lr": 3e-3}
    assert d.final[0].step == 1000 and "400 test sets per N" in d.number
    assert f"{0.3 / 0.65:.2f} of the accuracy" in d.number


class _Results:
    """Stands in for a Results: ``curves`` per (task, norm, norm_kind), and
    ``spec.n_test``."""

    def __init__(self, runs, n_test=500):
        self.runs, self.spec = runs, type("Spec", (), {"n_test": n_test})()

    def curves(self, name, task, norm, norm_kind="layernorm"):
        names = {v: k for k, v in ch4.TASK_IDS.items()}
        variant = {
            ("none", "layernorm"): "baseline",
            ("attn_out", "layernorm"): "layernorm",
            ("attn_out", "standardize"): "standardize",
        }[norm, norm_kind]
        fields = self.runs[names[task]][variant]
        if name.startswith(("feature_var_", "normed_feature_var_")):
            stem, _, j = name.rpartition("_")
            return fields[stem][..., int(j)]
        return fields[name]


def test_shift_ratios_glue_and_rows():
    K, n = 2, 3
    flat, falling = np.ones((K, n)), np.array([[1.0, 0.5, 0.25]] * K)

    def run(normed):
        fields = {
            "median_feature_var": falling,
            "global_var": falling,
            "global_mean": np.zeros((K, n)),
            "feature_var": np.stack([falling] * 3, -1),
        }
        if normed:
            fields |= {
                "normed_median_feature_var": 0.6 * np.ones((K, n)) * [[1, 1, 0.6]],
                "normed_global_var": flat,
            }
        return fields

    runs = {
        t: {"baseline": run(False), "layernorm": run(True), "standardize": run(True)}
        for t in ("argmax retrieval", "dictionary lookup")
    }
    shift = ch4.shift_ratios(_Results(runs))
    np.testing.assert_allclose(shift.before["argmax retrieval", "baseline"], 0.25)
    np.testing.assert_allclose(shift.after["dictionary lookup", "layernorm"], 0.6)
    np.testing.assert_allclose(shift.pinned_change("argmax retrieval"), 0.0)
    assert set(shift.drift) == {
        (t, v) for t in runs for v in ("baseline", "layernorm", "standardize")
    }
    assert (
        ch4_numbers.shift_glue(shift)["after_dict"] == 0.6
        and ch4_numbers.shift_glue(shift)["shrink_argmax"] == 0.25
    )
    shift = dataclasses.replace(
        shift,
        after={k: v + [0.01, -0.01] for k, v in shift.after.items()},
    )
    effects = ch4.shift_effects(shift, _Live())
    assert len(effects) == 8 and {e.cell["part"] for e in effects} == {
        "raised",
        "still below 1",
    }
    assert {e.cell["norm_kind"] for e in effects} == {"layernorm", "standardize"}
    row = ch4.SHIFT_CLAIM.decide(effects, "live")
    # raised: 0.6 - 1.5 x 0.25 = 0.225; still below 1: 0.4; both in every cell
    assert row.word == "reproduced"
    assert row.final[0].interval.mean == pytest.approx(0.225)


def test_attention_collapse():
    def run(mass, neff):
        return {"target_attention": np.array(mass), "n_eff": np.array(neff)}

    variants = {
        "baseline": run([[0.8, 0.1], [0.6, 0.1]], [[2.0, 50.0], [2.0, 50.0]]),
        "layernorm": run([[0.8, 0.12], [0.6, 0.12]], [[2.0, 60.0], [2.0, 60.0]]),
        "standardize": run([[0.8, 0.1], [0.6, 0.1]], [[2.0, 55.0], [2.0, 55.0]]),
    }
    collapse = ch4.attention_collapse(
        _Results({"argmax retrieval": variants, "dictionary lookup": variants})
    )
    np.testing.assert_allclose(
        collapse.normed_gap["argmax retrieval", "layernorm"], [0.0, 0.2]
    )
    np.testing.assert_allclose(
        collapse.seed_spread["argmax retrieval", "standardize"], [0.4 / 0.7, 0.0]
    )
    assert collapse.neff_ratio_argmax == pytest.approx(1.1)
    assert collapse.target_at_largest["dictionary lookup"] == pytest.approx(0.32 / 3)
    assert collapse.neff_at_largest["argmax retrieval"] == pytest.approx(55.0)


def test_head_monte_carlo_and_the_glue_builders():
    head, N = random_head(d_model=8, seed=0), [4, 16]
    std, law, n_eff, all_std = ch4law.head_monte_carlo(
        head, N, {ch4law.UNIFORM: 0.0, ch4law.SHARP: 3.0}, n_sets=50
    )
    assert all_std[ch4law.SHARP].shape == (2, 8) and std[ch4law.UNIFORM].shape == (2,)
    np.testing.assert_allclose(n_eff[ch4law.UNIFORM], N, rtol=1e-5)
    np.testing.assert_allclose(law[ch4law.UNIFORM], head.value_std[0] / np.sqrt(N))
    acc = [np.array([[0.9, 0.97, 0.2]]), np.array([[1.0, 0.99, 0.5]])]
    losses = {("a", "b"): np.array([0.01, 0.052])}
    assert ch4_numbers.fit_glue(losses, acc, 1) == {"loss_max": 0.05, "acc16_min": 0.97}
    collapse = ch4.AttentionCollapse(
        normed_gap={("x", "y"): np.array([0.1, 0.234])},
        seed_spread={},
        target_at_largest={"argmax retrieval": 0.111, "dictionary lookup": 0.2},
        neff_at_largest={"argmax retrieval": 512.5, "dictionary lookup": 1025.0},
        neff_ratio_argmax=1.26,
    )
    glued = ch4_numbers.collapse_glue(collapse, 1024)
    assert list(glued)[0] == "neff_ratio_argmax" and glued["neff_dict_share"] == 1.0
    assert glued["target_gap_max"] == 0.23 and glued["target_argmax_1024"] == 0.11
    misses = [ch4.NearMisses(0.5, 0.6, 0.3439), ch4.NearMisses(0.7, 0.8, 0.3439)]
    bolt = {
        "dictionary lookup": np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]]),
        "argmax retrieval": np.array([[0.0, -0.02, 0.01], [0.0, 0.0, 0.01]]),
    }
    glued = ch4_numbers.rescaling_glue(bolt, np.array([False, True, True]), misses)
    assert glued["bolt_dict_long"] == 0.2 and glued["bolt_argmax_max"] == 0.01
    assert glued["near_chance"] == 0.344 and glued["argmax_error_1024"] == 0.6
