import math

import numpy as np
import pytest
import torch

from lengthgen_lite import TrainConfig, enumerate_sequences, run_with_cache, target_distribution, theory
from lengthgen_lite.model import ModelConfig, Transformer
from lengthgen_lite.seeding import make_generator


def rank(matrix: torch.Tensor) -> int:
    return int(torch.linalg.matrix_rank(matrix))


# --- the minimal construction --------------------------------------------------------------------


@pytest.mark.parametrize("v", [2, 3, 5, 16])
def test_complement_basis_is_orthonormal_and_orthogonal_to_ones(v):
    P = theory.complement_basis(v)
    assert P.shape == (v, v - 1) and P.dtype == torch.float64
    torch.testing.assert_close(P.T @ P, torch.eye(v - 1, dtype=torch.float64))
    torch.testing.assert_close(P.T @ torch.ones(v, dtype=torch.float64), torch.zeros(v - 1, dtype=torch.float64))
    torch.testing.assert_close(P @ P.T, torch.eye(v, dtype=torch.float64) - 1.0 / v)


@pytest.mark.parametrize("v", [4, 8, 16])
@pytest.mark.parametrize("C", [0.5, 2.0])
def test_construction_matrices_ranks_and_shapes(v, C):
    model = theory.construction(v, C, delta=1.0)
    assert (model.cfg.d_model, model.cfg.head_dim, model.cfg.norm) == (v - 1, v - 1, "none")
    B, D = theory.logit_matrices(model)
    centering = torch.eye(v, dtype=torch.float64) - 1.0 / v
    torch.testing.assert_close(B, -1.0 * centering)
    torch.testing.assert_close(D, -2.0 * C * centering)
    assert rank(B) == rank(D) == v - 1


@pytest.mark.parametrize("v", [4, 8, 16])
@pytest.mark.parametrize("C", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("delta", [0.25, 1.0])
def test_construction_margin_is_2C_over_s_on_the_real_model(v, C, delta):
    model = theory.construction(v, C, delta)
    profile = theory.prefix_profile(model, list(range(v - 1)))
    for s in range(2, v):
        assert profile.margin[s - 1] == pytest.approx(2 * C / s, abs=1e-9)
        assert theory.construction_margin(v, C, s, delta) == pytest.approx(2 * C / s, abs=1e-12)
    assert profile.margin[0] == pytest.approx(2 * C + delta, abs=1e-9)
    # precision exactly C at lengths 1-2: the smaller of the two margins
    assert min(profile.margin[:2]) == pytest.approx(C, abs=1e-9)


@pytest.mark.parametrize("v", [4, 6])
def test_construction_margin_is_the_same_on_every_input(v):
    model = theory.construction(v, 1.0)
    for s in range(1, v):
        margins = theory.margins_all_inputs(model, v, s)
        assert len(margins) == math.perm(v, s)
        torch.testing.assert_close(margins, torch.full_like(margins, theory.construction_margin(v, 1.0, s)))


@pytest.mark.parametrize("v", [5, 8])
def test_construction_absent_logits_are_equal(v):
    profile = theory.prefix_profile(theory.construction(v, 1.5), list(range(v - 1)))
    for s in range(1, v - 1):
        absent = profile.logits[s - 1, s:]
        assert np.ptp(absent) < 1e-12


@pytest.mark.parametrize("v", [4, 8])
def test_construction_tv_formula_matches_the_model_and_rises(v):
    profile = theory.prefix_profile(theory.construction(v, 1.0), list(range(v - 1)))
    predicted = np.array([theory.construction_tv(v, 1.0, s) for s in range(1, v)])
    np.testing.assert_allclose(profile.tv, predicted, atol=1e-12)
    assert np.all(np.diff(predicted[1:]) > 0)  # the price of dispersion: TV grows with s >= 2


def test_negative_delta_breaks_the_law():
    v, C, delta = 8, 1.0, -1.0
    model = theory.construction(v, C, delta)
    profile = theory.prefix_profile(model, list(range(v - 1)))
    assert min(profile.margin[:2]) == pytest.approx(C, abs=1e-9)  # same precision at lengths 1-2
    for s in range(3, v):
        assert profile.margin[s - 1] < 2 * C / s - 1e-6
        assert profile.margin[s - 1] == pytest.approx(theory.construction_margin(v, C, s, delta), abs=1e-9)
    assert profile.margin[-1] < 0  # at s = v-1 an illegal token (the query) has the largest logit
    B, _ = theory.logit_matrices(model)
    assert torch.all(torch.diagonal(B) > B[0, 1])  # B favours the query token


def test_logits_are_bias_plus_mean_displacement():
    # the decomposition f(t) = B[t_s] + (1/s) sum_i D[t_i] for uniform attention
    v = 6
    model = theory.construction(v, 1.0)
    B, D = theory.logit_matrices(model)
    tokens = torch.tensor([[3, 0, 5, 1]])
    logits = model(tokens)[0]
    for s in range(1, 5):
        expected = B[tokens[0, s - 1]] + D[tokens[0, :s]].mean(0)
        torch.testing.assert_close(logits[s - 1], expected)


def test_logit_matrices_of_a_random_model_predict_its_logits_with_its_own_attention():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=5, d_model=7, n_heads=1, d_head=3)).double().eval()
    B, D = theory.logit_matrices(model)
    tokens = torch.tensor([[4, 2, 0]])
    logits, cache = run_with_cache(model, tokens, names=["blocks.0.attn.hook_pattern"])
    pattern = cache["blocks.0.attn.hook_pattern"][0, 0]  # [query, key]
    expected = B[tokens[0, 2]] + pattern[2, :3] @ D[tokens[0]]
    torch.testing.assert_close(logits[0, 2], expected)


@pytest.mark.parametrize(
    "cfg",
    [
        ModelConfig(vocab_size=4, d_model=4, norm="post"),
        ModelConfig(vocab_size=4, d_model=4, n_layers=2),
        ModelConfig(vocab_size=4, d_model=4, n_heads=2),
        ModelConfig(vocab_size=4, d_model=4, d_mlp=8),
        ModelConfig(vocab_size=4, d_model=4, positional="learned"),
    ],
)
def test_logit_matrices_rejects_models_without_the_decomposition(cfg):
    with pytest.raises(ValueError, match="logit_matrices needs"):
        theory.logit_matrices(Transformer(cfg))


# --- the LN gap ----------------------------------------------------------------------------------


@pytest.mark.parametrize("v", [4, 7, 16])
def test_ln_gap_formula_properties(v):
    gaps = np.array([theory.ln_gap(v, s) for s in range(1, v)])
    np.testing.assert_allclose(gaps, [v / math.sqrt(s * (v - s)) for s in range(1, v)])
    np.testing.assert_allclose(gaps, gaps[::-1])  # symmetric under s <-> v - s
    assert gaps.min() >= 2.0 - 1e-12
    if v % 2 == 0:
        assert theory.ln_gap(v, v // 2) == pytest.approx(2.0)
    # versus the raw gap 1/s, always larger
    assert np.all(gaps > 1.0 / np.arange(1, v))


def test_ln_gap_eps_matches_a_real_layer_norm():
    v, s, scale = 8, 3, 0.01  # small values: eps matters
    h = torch.zeros(1, v, dtype=torch.float64)
    h[0, :s] = scale / s
    out = torch.nn.functional.layer_norm(h, (v,), eps=1e-5)
    assert float(out[0, 0] - out[0, -1]) == pytest.approx(theory.ln_gap(v, s, scale=scale, eps=1e-5), abs=1e-12)
    assert theory.ln_gap(v, s, scale=scale, eps=1e-5) < theory.ln_gap(v, s)


@pytest.mark.parametrize("v", [4, 8, 16])
@pytest.mark.parametrize("norm", ["none", "attn_out"])
def test_token_space_construction_margin_matches_prediction(v, norm):
    C = 1.5
    model = theory.token_space_construction(v, C, norm)
    profile = theory.prefix_profile(model, list(range(v - 1)))
    predicted = [theory.token_space_margin(v, C, s, norm) for s in range(1, v)]
    np.testing.assert_allclose(profile.margin, predicted, atol=1e-9)
    assert min(profile.margin[:2]) == pytest.approx(C, abs=1e-9)  # same precision at lengths 1-2


@pytest.mark.parametrize("v", [4, 8, 16])
def test_token_space_ln_output_gap_is_the_formula(v):
    model = theory.token_space_construction(v, 1.0, "attn_out")
    tokens = torch.arange(v - 1)[None]
    _, cache = run_with_cache(model, tokens, names=["blocks.0.ln_attn_out.hook_normalized"])
    normalized = cache["blocks.0.ln_attn_out.hook_normalized"][0]  # [pos, v]: features = tokens
    for s in range(1, v):
        gap = float(normalized[s - 1, 0] - normalized[s - 1, v - 1])  # present token 0, absent token v-1
        assert gap == pytest.approx(theory.ln_gap(v, s), abs=1e-6)


def test_normed_margin_beats_no_norm_at_long_lengths():
    v, C = 16, 1.0
    for s in range(3, v):
        assert theory.token_space_margin(v, C, s, "attn_out") > theory.token_space_margin(v, C, s, "none")


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("v", [1, 0, 2.5, True, "8"])
def test_bad_v_raises(v):
    with pytest.raises(ValueError, match="vocabulary size v"):
        theory.complement_basis(v)
    with pytest.raises(ValueError, match="vocabulary size v"):
        theory.construction(v, 1.0)


@pytest.mark.parametrize("C", [0, -1.0, float("inf"), float("nan"), True])
def test_bad_precision_raises(C):
    with pytest.raises(ValueError, match="precision C"):
        theory.construction(4, C)
    with pytest.raises(ValueError, match="precision C"):
        theory.construction_margin(4, C, 2)
    with pytest.raises(ValueError, match="precision C"):
        theory.token_space_construction(4, C)
    with pytest.raises(ValueError, match="precision C"):
        theory.token_space_margin(4, C, 2)


@pytest.mark.parametrize("delta", [0, 0.0, float("inf"), True])
def test_bad_delta_raises(delta):
    with pytest.raises(ValueError, match="delta must be a nonzero"):
        theory.construction(4, 1.0, delta)
    with pytest.raises(ValueError, match="delta must be a nonzero"):
        theory.construction_displacement(1.0, delta)


@pytest.mark.parametrize("s", [0, 4, 1.0, -1])
def test_bad_s_raises(s):
    for fn in (
        lambda: theory.construction_margin(4, 1.0, s),
        lambda: theory.construction_tv(4, 1.0, s),
        lambda: theory.ln_gap(4, s),
        lambda: theory.token_space_margin(4, 1.0, s),
    ):
        with pytest.raises(ValueError, match="prefix length s"):
            fn()


def test_bad_ln_gap_arguments_raise():
    with pytest.raises(ValueError, match="scale"):
        theory.ln_gap(4, 2, scale=0.0)
    with pytest.raises(ValueError, match="eps"):
        theory.ln_gap(4, 2, eps=-1e-5)


def test_bad_token_space_arguments_raise():
    with pytest.raises(ValueError, match="norm="):
        theory.token_space_construction(4, 1.0, "post")
    with pytest.raises(ValueError, match="norm="):
        theory.token_space_margin(4, 1.0, 2, "pre")
    with pytest.raises(ValueError, match="value_scale"):
        theory.token_space_construction(4, 1.0, "attn_out", value_scale=-1.0)
    with pytest.raises(ValueError, match="vocabulary size v"):
        theory.token_space_construction(2, 1.0)


def test_prefix_profile_rejects_bad_tokens():
    model = theory.construction(4, 1.0)
    for tokens in ([0, 1], [0, 1, 1], [0, 1, 4]):
        with pytest.raises(ValueError, match="distinct ids"):
            theory.prefix_profile(model, tokens)


# --- the full-batch task and the sweep -----------------------------------------------------------


@pytest.mark.parametrize("v", [3, 5])
def test_length_one_two_counts_every_input_once(v):
    task = theory.LengthOneTwo(v)
    batch = task.sample_train_batch(task.n_sequences, 2, make_generator(0))
    assert batch.inputs.shape == (v * (v - 1), 2)
    assert int(batch.loss_mask.sum()) == v + v * (v - 1)
    first = batch.inputs[batch.loss_mask[:, 0], 0]
    assert sorted(first.tolist()) == list(range(v))  # each length-1 input exactly once
    pairs = {tuple(row) for row in batch.inputs.tolist()}
    assert pairs == {tuple(row) for row in enumerate_sequences(v, 2).tolist()}
    torch.testing.assert_close(batch.targets, target_distribution(batch.inputs, v))
    assert task.n_outputs == v and list(task.train_sizes()) == [2]


def test_entropy_floor_is_the_mean_target_entropy():
    v = 6
    task = theory.LengthOneTwo(v)
    batch = task.full_batch()
    t = batch.targets.double()
    entropy = -(t * t.clamp_min(1e-300).log()).sum(-1)
    assert task.entropy_floor() == pytest.approx(float(entropy[batch.loss_mask].mean()), abs=1e-6)


def test_length_one_two_fit_of_the_construction_vanishes_with_precision():
    v = 5
    weak = theory.length_one_two_fit(theory.construction(v, 1.0), v)
    strong = theory.length_one_two_fit(theory.construction(v, 12.0), v)
    assert weak[1] == pytest.approx(1.0, abs=1e-9) and strong[1] == pytest.approx(12.0, abs=1e-9)
    assert 0 < strong[0] < 1e-3 < weak[0]  # a d = v-1 solution with arbitrarily small excess loss


def test_length_one_two_bad_arguments_raise():
    with pytest.raises(ValueError, match="vocabulary size v"):
        theory.LengthOneTwo(2)
    task = theory.LengthOneTwo(4)
    with pytest.raises(ValueError, match="full batch"):
        task.sample_train_batch(128, 2, make_generator(0))
    with pytest.raises(ValueError, match="full batch"):
        task.sample_train_batch(12, 3, make_generator(0))


def test_dimension_sweep_shapes_and_threshold():
    v = 4
    cfg = TrainConfig(steps=400, lr=3e-2, batch=12, warmup=20)
    sweep = theory.dimension_sweep(v, [2, 5], [0, 1], cfg, progress=False)
    assert sweep.best_excess.shape == sweep.final_excess.shape == sweep.final_margin.shape == (2, 2)
    assert sweep.curves.shape == (2, 400, 2)
    assert np.all(sweep.best_excess <= sweep.curves[:, 0, :])
    assert np.all(sweep.final_margin[0] <= 0)  # d = v-2: the lower bound; never a positive margin
    assert np.all(sweep.final_margin[1] > 0) and np.all(sweep.final_excess[1] < sweep.final_excess[0])


def test_dimension_sweep_bad_arguments_raise():
    with pytest.raises(ValueError, match="batch=12"):
        theory.dimension_sweep(4, [3], [0], TrainConfig(steps=2, warmup=0), progress=False)
    with pytest.raises(ValueError, match="targets='soft'"):
        theory.dimension_sweep(4, [3], [0], TrainConfig(steps=2, warmup=0, batch=12, targets="sampled"), progress=False)
    with pytest.raises(ValueError, match="dims"):
        theory.dimension_sweep(4, [], [0], TrainConfig(steps=2, warmup=0, batch=12), progress=False)
    with pytest.raises(ValueError, match="dims"):
        theory.dimension_sweep(4, [0], [0], TrainConfig(steps=2, warmup=0, batch=12), progress=False)


def test_tied_pair_finds_the_confused_tokens_and_their_split_cost():
    v = 6
    cost = theory.TiedPair.split_cost(v)
    kl = np.full((v, v), 0.001)
    np.fill_diagonal(kl, np.nan)
    for j in range(v):
        for q in range(v):
            if j != q and ((j in (1, 4)) != (q in (1, 4))):
                kl[j, q] = cost
    pair = theory.tied_pair(kl)
    assert pair.tokens == (1, 4)
    assert pair.kl_exactly_one == pytest.approx(cost)
    assert pair.kl_others == pytest.approx(0.001)
    assert cost == pytest.approx(math.log(2) / 4)


def test_tied_pair_bad_input_raises():
    with pytest.raises(ValueError, match="kl_two"):
        theory.tied_pair(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="kl_two"):
        theory.tied_pair(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="vocabulary size v"):
        theory.TiedPair.split_cost(2)


def test_dimension_sweep_fits_threshold():
    v = 4
    cfg = TrainConfig(steps=50, lr=3e-2, batch=12, warmup=5)
    sweep = theory.dimension_sweep(v, [3], [0], cfg, progress=False)
    assert sweep.fits(1e3).all() and not sweep.fits(1e-12).any()
    assert sweep.kl_length_one.shape == (1, 1, v) and sweep.kl_length_two.shape == (1, 1, v, v)
    assert np.isnan(np.diagonal(sweep.kl_length_two[0, 0])).all()
    with pytest.raises(ValueError, match="threshold"):
        sweep.fits(0.0)


def test_norm_comparison_holds_both_models_at_equal_precision():
    comparison = theory.norm_comparison(8, 2.0)
    np.testing.assert_allclose(comparison.law, 4.0 / np.arange(1, 8))
    for profile in (comparison.none, comparison.attn_out):
        assert min(profile.margin[:2]) == pytest.approx(2.0, abs=1e-9)
        np.testing.assert_allclose(profile.probs.sum(-1), 1.0)
    np.testing.assert_allclose(comparison.none.margin[1:], comparison.law[1:], atol=1e-9)


def test_prefix_margins_match_margins_all_inputs():
    v = 5
    model = theory.construction(v, 1.0)
    tokens = enumerate_sequences(v, 3)
    np.testing.assert_allclose(theory.prefix_margins(model, tokens)[:, -1], theory.margins_all_inputs(model, v, 3))
    assert theory.prefix_margins(model, tokens).shape == (len(tokens), 3)


def test_input_kl_tables_agree_with_the_excess_loss():
    v = 5
    model = theory.construction(v, 1.0)
    one, two = theory.input_kl(model, v)
    assert one.shape == (v,) and two.shape == (v, v)
    assert np.isnan(np.diagonal(two)).all()
    excess, _ = theory.length_one_two_fit(model, v)
    mean = (one.sum() + np.nansum(two)) / (v + v * (v - 1))
    assert mean == pytest.approx(excess, rel=1e-6)
    # by symmetry the construction is equally good on every length-2 input
    assert np.nanmax(two) - np.nanmin(two) < 1e-9
