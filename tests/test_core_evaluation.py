import numpy as np
import pytest
import torch

from lengthgen_lite.core.evaluation import (
    METRICS,
    LengthTable,
    aggregate_seeds,
    entropy_ratio,
    evaluate_at_scales,
    evaluate_lengths,
    evaluate_seeds,
    evaluate_set_complement,
    length_metrics,
    prefix_profile,
    stack_metric,
)
from lengthgen_lite.core.languages import make_language
from lengthgen_lite.core.model import ModelConfig, Transformer
from lengthgen_lite.core.seeding import make_generator, seed_everything


def uniform_attention_model(v=8):
    model = Transformer(ModelConfig(vocab_size=v, d_model=16))
    with torch.no_grad():
        # all scores 0: uniform attention over the prefix
        model.blocks[0].attn.W_Q.weight.zero_()
    return model


def test_table_shapes_and_ranges():
    table = evaluate_set_complement(uniform_attention_model(), v=8, n_sequences=50)
    np.testing.assert_array_equal(table.s, np.arange(1, 8))
    for field in ("tv", "invalid_mass", "max_attention"):
        values = getattr(table, field)
        assert (
            values.shape == (7,) and (values >= 0).all() and (values <= 1 + 1e-6).all()
        )
    assert (table.kl >= -1e-6).all()


def test_uniform_attention_statistics_are_exact():
    table = evaluate_set_complement(uniform_attention_model(), v=8, n_sequences=20)
    np.testing.assert_allclose(table.entropy_ratio, 1.0, atol=1e-5)
    np.testing.assert_allclose(table.n_eff, np.arange(1, 8), rtol=1e-5)
    np.testing.assert_allclose(table.max_attention, 1.0 / np.arange(1, 8), rtol=1e-5)


def test_logit_scale_zero_gives_uniform_prediction():
    # softmax of all-equal logits: mass s/v on the s seen tokens
    table = evaluate_set_complement(
        uniform_attention_model(), v=8, n_sequences=20, logit_scale=0.0
    )
    np.testing.assert_allclose(table.invalid_mass, np.arange(1, 8) / 8, rtol=1e-5)


def test_same_seed_same_table():
    model = uniform_attention_model()
    a = evaluate_set_complement(model, v=8, n_sequences=30, seed=4)
    b = evaluate_set_complement(model, v=8, n_sequences=30, seed=4)
    np.testing.assert_array_equal(a.tv, b.tv)
    with pytest.raises(ValueError):
        evaluate_set_complement(model, v=1)


def table(offset, s=None):
    s = np.arange(1, 4) if s is None else s
    return LengthTable(s=s, **{metric: s * 1.0 + offset for metric in METRICS})


def test_metrics_name_every_table_field_but_s():
    assert "s" not in METRICS and {
        "tv",
        "invalid_mass",
        "logit_gap",
        "top1_legal",
    } <= set(METRICS)


def test_stack_and_aggregate_over_seeds():
    tables = [table(0.0), table(1.0), table(5.0)]
    np.testing.assert_array_equal(
        stack_metric(tables, "tv"), np.array([[1, 2, 3], [2, 3, 4], [6, 7, 8]])
    )
    spread = aggregate_seeds(tables)
    assert spread.n_seeds == 3
    np.testing.assert_array_equal(spread.mean.s, [1, 2, 3])
    np.testing.assert_allclose(spread.mean.logit_gap, [3.0, 4.0, 5.0])
    np.testing.assert_array_equal(spread.low.kl, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(spread.high.n_eff, [6.0, 7.0, 8.0])


def test_stack_metric_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        stack_metric([], "tv")
    with pytest.raises(ValueError, match="unknown"):
        stack_metric([table(0.0)], "accuracy")
    with pytest.raises(ValueError, match="same prefix lengths"):
        stack_metric([table(0.0), table(0.0, s=np.arange(2, 5))], "tv")
    with pytest.raises(ValueError, match="at least one"):
        aggregate_seeds([])


def test_evaluate_seeds_uses_the_same_sequences_for_every_model():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=6, d_model=8))
    a, b = evaluate_seeds([model, model], v=6, n_sequences=40, seed=3)
    np.testing.assert_array_equal(a.tv, b.tv)
    assert (
        a.top1_legal.shape == (5,) and ((a.top1_legal >= 0) & (a.top1_legal <= 1)).all()
    )
    with pytest.raises(ValueError, match="at least one model"):
        evaluate_seeds([], v=6)


def test_every_scale_from_one_forward_pass_equals_one_pass_per_scale():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=6, d_model=8))
    scales = (1.0, 0.5, 2.0)
    together = evaluate_at_scales(model, 6, scales, n_sequences=40, seed=3)
    for table, c in zip(together, scales, strict=True):
        alone = evaluate_set_complement(model, 6, n_sequences=40, seed=3, logit_scale=c)
        for field in METRICS:
            np.testing.assert_array_equal(getattr(table, field), getattr(alone, field))
    with pytest.raises(ValueError, match="logit_scales must hold at least one"):
        evaluate_at_scales(model, 6, ())


def test_prefix_profile_reads_every_prefix_of_one_sequence():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=5, d_model=8)).eval()
    profile = prefix_profile(model, [3, 1, 0, 4])
    np.testing.assert_array_equal(profile.s, [1, 2, 3, 4])
    assert (
        profile.logits.shape == profile.probs.shape == profile.targets.shape == (4, 5)
    )
    # after 3, 1, 0: tokens 2 and 4 are legal
    np.testing.assert_allclose(profile.targets[2], [0, 0, 0.5, 0, 0.5])
    # after 3, 1, 0, 4: only token 2
    np.testing.assert_allclose(profile.targets[3], [0, 0, 1, 0, 0])
    np.testing.assert_allclose(profile.probs.sum(-1), 1.0, rtol=1e-6)
    assert profile.margin[2] == pytest.approx(
        profile.logits[2, [2, 4]].min() - profile.logits[2, [0, 1, 3]].max()
    )
    # TV to a point mass
    assert profile.tv[3] == pytest.approx(1 - profile.probs[3, 2], abs=1e-6)


def test_prefix_profile_rejects_bad_tokens():
    model = Transformer(ModelConfig(vocab_size=4, d_model=8))
    for tokens in ([0, 1], [0, 1, 1], [0, 1, 4]):
        with pytest.raises(ValueError, match="distinct ids"):
            prefix_profile(model, tokens)


# --- length_metrics: the one per-length evaluation ------------------------------------


def two_prefixes():
    """One sequence, two prefixes, three outputs: legal {1, 2}, then legal {2}; flat
    logits."""
    targets = torch.tensor([[[0.0, 0.5, 0.5], [0.0, 0.0, 1.0]]])
    return torch.zeros(1, 2, 3), targets


def test_length_metrics_by_hand():
    logits, targets = two_prefixes()
    [table] = length_metrics(logits, targets)  # uniform prediction: 1/3 on every output
    np.testing.assert_array_equal(table.s, [1, 2])
    np.testing.assert_allclose(table.tv, [1 / 3, 2 / 3], rtol=1e-6)
    np.testing.assert_allclose(table.invalid_mass, [1 / 3, 2 / 3], rtol=1e-6)
    np.testing.assert_allclose(table.kl, [np.log(1.5), np.log(3.0)], rtol=1e-6)
    np.testing.assert_allclose(table.logit_gap, [0.0, 0.0])
    # argmax of ties: output 0
    np.testing.assert_array_equal(table.top1_legal, [0.0, 0.0])
    np.testing.assert_allclose(table.tv_set, [1 / 3, np.nan], rtol=1e-6)
    np.testing.assert_allclose(table.tv_single, [np.nan, 2 / 3], rtol=1e-6)
    np.testing.assert_array_equal(table.share_single, [0.0, 1.0])
    # no pattern
    assert np.isnan(table.entropy_ratio).all() and np.isnan(table.n_eff).all()


def test_length_metrics_averages_only_the_counted_positions():
    logits = torch.tensor(
        [[[0.0, 2.0, 1.0], [0.0, 0.0, 3.0]], [[5.0, 0.0, 0.0], [9.0, 9.0, 9.0]]]
    )
    targets = torch.tensor([[[0.0, 0.5, 0.5], [0.0, 0.0, 1.0]]] * 2)
    # the second sequence ends early
    positions = torch.tensor([[True, True], [True, False]])
    [table] = length_metrics(logits, targets, positions=positions)
    np.testing.assert_allclose(table.logit_gap, [(1.0 - 5.0) / 2, 3.0])
    np.testing.assert_allclose(table.top1_legal, [0.5, 1.0])
    all_legal = torch.full((1, 2, 3), 1 / 3)
    [table] = length_metrics(
        torch.zeros(1, 2, 3), all_legal, positions=torch.tensor([[True, False]])
    )
    # every output legal: no gap; a length with no position
    assert np.isnan(table.logit_gap).all()
    assert table.tv[0] == pytest.approx(0.0, abs=1e-7) and np.isnan(table.tv[1])


def test_entropy_ratio_is_one_at_s_1_and_per_head_mean():
    uniform = torch.tril(torch.ones(3, 3)) / torch.arange(1, 4)[:, None]  # [query, key]
    pattern = uniform.expand(2, 4, 3, 3).clone()  # [batch, head, query, key]
    np.testing.assert_allclose(entropy_ratio(pattern).numpy(), 1.0, rtol=1e-6)
    sharp = torch.zeros(2, 4, 3, 3)
    # all weight on the first token: entropy 0, so ratio 0 for s > 1 ...
    sharp[..., 0] = 1.0
    # ... 1 at s = 1
    np.testing.assert_array_equal(entropy_ratio(sharp).numpy(), [[1.0, 0.0, 0.0]] * 2)
    logits = torch.zeros(2, 3, 4)
    targets = torch.tensor(
        [[0.0, 1 / 3, 1 / 3, 1 / 3], [0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.0, 1.0]]
    )
    [table] = length_metrics(logits, targets.expand(2, 3, 4), pattern=sharp)
    np.testing.assert_array_equal(table.entropy_ratio, [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(table.max_attention, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(table.n_eff, [1.0, 1.0, 1.0])


def test_logit_scales_give_one_table_per_scale_in_order():
    torch.manual_seed(0)
    logits, targets = torch.randn(5, 2, 3), two_prefixes()[1].expand(5, 2, 3)
    tables = length_metrics(logits, targets, logit_scales=(0.0, 1.0, 2.5))
    assert len(tables) == 3
    # scale 0: uniform
    np.testing.assert_allclose(tables[0].tv, [1 / 3, 2 / 3], rtol=1e-6)
    [plain] = length_metrics(logits, targets)
    [doubled] = length_metrics(logits * 2.5, targets)
    for field in ("tv", "invalid_mass", "kl", "logit_gap", "top1_legal"):
        np.testing.assert_array_equal(getattr(tables[1], field), getattr(plain, field))
        np.testing.assert_array_equal(
            getattr(tables[2], field), getattr(doubled, field)
        )
    np.testing.assert_allclose(tables[2].logit_gap, 2.5 * plain.logit_gap, rtol=1e-6)
    # legal outputs one logit above the illegal one: TV = invalid mass = 1 / (1 + 2 e^c)
    ranked = torch.tensor([[[0.0, 1.0, 1.0]]])
    scaled = length_metrics(ranked, targets[:1, :1], logit_scales=(1.0, 3.0))
    for table, c in zip(scaled, (1.0, 3.0)):
        np.testing.assert_allclose(table.tv, [1 / (1 + 2 * np.exp(c))], rtol=1e-6)
        np.testing.assert_allclose(table.invalid_mass, table.tv, rtol=1e-6)


def test_length_metrics_with_every_position_counted_is_a_plain_mean_to_the_bit():
    # evaluate_set_complement's tables were .mean(0) over the batch; the masked mean
    # must not move them
    torch.manual_seed(1)
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, norm="post")).eval()
    from lengthgen_lite.core.hooks import run_with_cache
    from lengthgen_lite.core.tasks import sample_sequences, target_distribution

    tokens = sample_sequences(8, 7, 300, torch.Generator().manual_seed(0))
    logits, cache = run_with_cache(model, tokens, names=["blocks.0.attn.hook_pattern"])
    pattern, targets = (
        cache["blocks.0.attn.hook_pattern"],
        target_distribution(tokens, 8),
    )
    [table] = length_metrics(logits, targets, pattern=pattern)
    probs = logits.softmax(-1)
    from lengthgen_lite.core import metrics

    np.testing.assert_array_equal(
        table.tv, metrics.total_variation(probs, targets).mean(0).numpy()
    )
    np.testing.assert_array_equal(
        table.n_eff, metrics.effective_tokens(pattern).mean(1).mean(0).numpy()
    )
    # gap_profile took the mean over sequences before dividing by log s: equal to float
    # rounding
    entropy = metrics.attention_entropy(pattern).mean(1).mean(0)
    mean_first = entropy / torch.arange(1, 8).log().clamp_min(1e-30)
    np.testing.assert_allclose(
        table.entropy_ratio[1:], mean_first[1:].numpy(), rtol=1e-6
    )


def test_every_scale_is_the_metrics_of_the_scaled_logits_to_the_bit():
    # length_metrics finds the scale-free parts (log p*, the logit extremes) once; each
    # scale's KL and gap must still be the plain functions of c * logits, bit for bit
    from lengthgen_lite.core import metrics
    from lengthgen_lite.core.tasks import sample_sequences, target_distribution

    tokens = sample_sequences(8, 7, 300, torch.Generator().manual_seed(0))
    targets = target_distribution(tokens, 8)
    logits = 3 * torch.randn(targets.shape, generator=torch.Generator().manual_seed(1))
    scales = (0.0, 1 / 3, 0.7, 1.0, 2.5, 10.0)
    illegal = targets == 0
    for scale, table in zip(
        scales, length_metrics(logits, targets, logit_scales=scales)
    ):
        scaled = logits * scale
        kl = metrics.kl_divergence(targets, scaled)
        np.testing.assert_array_equal(table.kl, kl.mean(0).numpy())
        gap = metrics.logit_gap(scaled, illegal)
        has_gap = illegal.any(-1)
        expected = torch.where(has_gap, gap, 0.0).sum(0) / has_gap.sum(0)
        np.testing.assert_array_equal(table.logit_gap, expected.numpy())


def test_length_metrics_rejects_bad_shapes_and_masks():
    logits, targets = two_prefixes()
    with pytest.raises(ValueError, match="logits must be"):
        length_metrics(logits[0], targets[0])
    with pytest.raises(ValueError, match="targets must match"):
        length_metrics(logits, targets[:, :1])
    with pytest.raises(ValueError, match="positions must be"):
        length_metrics(logits, targets, positions=torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="positions must be"):
        length_metrics(logits, targets, positions=torch.ones(1, 2))  # not bool
    with pytest.raises(ValueError, match="pattern must be"):
        length_metrics(logits, targets, pattern=torch.ones(1, 1, 3, 3))
    with pytest.raises(ValueError, match="logit_scale"):
        length_metrics(logits, targets, logit_scales=(1.0, -2.0))
    with pytest.raises(ValueError, match="at least one scale"):
        length_metrics(logits, targets, logit_scales=())


def test_evaluate_lengths_of_a_perfect_predictor_is_zero():
    """Logits that are 0 on legal and -inf-like on illegal outputs give TV 0 and invalid
    mass 0 (a language of chapter 7, tested beyond its training length)."""
    task = make_language("norepeat", train_length=16)
    batch = task.sample_train_batch(20, 48, make_generator(0))

    # a Transformer whose output is replaced by the exact target
    class Oracle(Transformer):
        def forward(self, tokens):
            super().forward(tokens)  # records the attention pattern
            return torch.where(batch.targets > 0, 0.0, -1e4)

    seed_everything(0)
    oracle = Oracle(ModelConfig(vocab_size=task.vocab_size, d_model=8))
    curves = evaluate_lengths([oracle, oracle], batch)
    assert curves.tv.shape == (2, 48) and curves.share_single.shape == (48,)
    assert np.nanmax(curves.tv) < 1e-6 and np.nanmax(curves.invalid_mass) < 1e-6
    assert np.nanmin(curves.logit_gap) > 1e3
    with pytest.raises(ValueError, match="models must hold"):
        evaluate_lengths([], batch)
