import math

import numpy as np
import pytest
import torch

from lengthgen_lite import enumerate_sequences, run_with_cache
from lengthgen_lite.chapters.ch3_construction import (
    complement_basis,
    construction,
    construction_displacement,
    construction_margin,
    construction_tv,
    ln_gap,
    logit_matrices,
    margins_all_inputs,
    norm_comparison,
    prefix_margins,
    token_space_construction,
    token_space_margin,
)
from lengthgen_lite.core.evaluation import prefix_profile
from lengthgen_lite.core.model import ModelConfig, Transformer


def rank(matrix: torch.Tensor) -> int:
    return int(torch.linalg.matrix_rank(matrix))


# --- the minimal construction ---------------------------------------------------------


@pytest.mark.parametrize("v", [2, 3, 5, 16])
def test_complement_basis_is_orthonormal_and_orthogonal_to_ones(v):
    P = complement_basis(v)
    assert P.shape == (v, v - 1) and P.dtype == torch.float64
    torch.testing.assert_close(P.T @ P, torch.eye(v - 1, dtype=torch.float64))
    torch.testing.assert_close(
        P.T @ torch.ones(v, dtype=torch.float64),
        torch.zeros(v - 1, dtype=torch.float64),
    )
    torch.testing.assert_close(P @ P.T, torch.eye(v, dtype=torch.float64) - 1.0 / v)


@pytest.mark.parametrize("v", [4, 8, 16])
@pytest.mark.parametrize("C", [0.5, 2.0])
def test_construction_matrices_ranks_and_shapes(v, C):
    model = construction(v, C, delta=1.0)
    assert (model.cfg.d_model, model.cfg.head_dim, model.cfg.norm) == (
        v - 1,
        v - 1,
        "none",
    )
    B, D = logit_matrices(model)
    centering = torch.eye(v, dtype=torch.float64) - 1.0 / v
    torch.testing.assert_close(B, -1.0 * centering)
    torch.testing.assert_close(D, -2.0 * C * centering)
    assert rank(B) == rank(D) == v - 1


@pytest.mark.parametrize("v", [4, 8, 16])
@pytest.mark.parametrize("C", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("delta", [0.25, 1.0])
def test_construction_margin_is_2C_over_s_on_the_real_model(v, C, delta):
    model = construction(v, C, delta)
    profile = prefix_profile(model, list(range(v - 1)))
    for s in range(2, v):
        assert profile.margin[s - 1] == pytest.approx(2 * C / s, abs=1e-9)
        assert construction_margin(v, C, s, delta) == pytest.approx(
            2 * C / s, abs=1e-12
        )
    assert profile.margin[0] == pytest.approx(2 * C + delta, abs=1e-9)
    # precision exactly C at lengths 1-2: the smaller of the two margins
    assert min(profile.margin[:2]) == pytest.approx(C, abs=1e-9)


@pytest.mark.parametrize("v", [4, 6])
def test_construction_margin_is_the_same_on_every_input(v):
    model = construction(v, 1.0)
    for s in range(1, v):
        margins = margins_all_inputs(model, v, s)
        assert len(margins) == math.perm(v, s)
        torch.testing.assert_close(
            margins, torch.full_like(margins, construction_margin(v, 1.0, s))
        )


@pytest.mark.parametrize("v", [5, 8])
def test_construction_absent_logits_are_equal(v):
    profile = prefix_profile(construction(v, 1.5), list(range(v - 1)))
    for s in range(1, v - 1):
        absent = profile.logits[s - 1, s:]
        assert np.ptp(absent) < 1e-12


@pytest.mark.parametrize("v", [4, 8])
def test_construction_tv_formula_matches_the_model_and_rises(v):
    profile = prefix_profile(construction(v, 1.0), list(range(v - 1)))
    predicted = np.array([construction_tv(v, 1.0, s) for s in range(1, v)])
    np.testing.assert_allclose(profile.tv, predicted, atol=1e-12)
    # the price of dispersion: TV grows with s >= 2
    assert np.all(np.diff(predicted[1:]) > 0)


def test_negative_delta_breaks_the_law():
    v, C, delta = 8, 1.0, -1.0
    model = construction(v, C, delta)
    profile = prefix_profile(model, list(range(v - 1)))
    # same precision at lengths 1-2
    assert min(profile.margin[:2]) == pytest.approx(C, abs=1e-9)
    for s in range(3, v):
        assert profile.margin[s - 1] < 2 * C / s - 1e-6
        assert profile.margin[s - 1] == pytest.approx(
            construction_margin(v, C, s, delta), abs=1e-9
        )
    # at s = v-1 an illegal token (the query) has the largest logit
    assert profile.margin[-1] < 0
    B, _ = logit_matrices(model)
    assert torch.all(torch.diagonal(B) > B[0, 1])  # B favours the query token


def test_logits_are_bias_plus_mean_displacement():
    # the decomposition f(t) = B[t_s] + (1/s) sum_i D[t_i] for uniform attention
    v = 6
    model = construction(v, 1.0)
    B, D = logit_matrices(model)
    tokens = torch.tensor([[3, 0, 5, 1]])
    logits = model(tokens)[0]
    for s in range(1, 5):
        expected = B[tokens[0, s - 1]] + D[tokens[0, :s]].mean(0)
        torch.testing.assert_close(logits[s - 1], expected)


def test_logit_matrices_of_a_random_model_predict_its_logits_with_its_own_attention():
    torch.manual_seed(0)
    model = (
        Transformer(ModelConfig(vocab_size=5, d_model=7, n_heads=1, d_head=3))
        .double()
        .eval()
    )
    B, D = logit_matrices(model)
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
        logit_matrices(Transformer(cfg))


# --- the LN gap -----------------------------------------------------------------------


@pytest.mark.parametrize("v", [4, 7, 16])
def test_ln_gap_formula_properties(v):
    gaps = np.array([ln_gap(v, s) for s in range(1, v)])
    np.testing.assert_allclose(gaps, [v / math.sqrt(s * (v - s)) for s in range(1, v)])
    np.testing.assert_allclose(gaps, gaps[::-1])  # symmetric under s <-> v - s
    assert gaps.min() >= 2.0 - 1e-12
    if v % 2 == 0:
        assert ln_gap(v, v // 2) == pytest.approx(2.0)
    # versus the raw gap 1/s, always larger
    assert np.all(gaps > 1.0 / np.arange(1, v))


def test_ln_gap_eps_matches_a_real_layer_norm():
    v, s, scale = 8, 3, 0.01  # small values: eps matters
    h = torch.zeros(1, v, dtype=torch.float64)
    h[0, :s] = scale / s
    out = torch.nn.functional.layer_norm(h, (v,), eps=1e-5)
    assert float(out[0, 0] - out[0, -1]) == pytest.approx(
        ln_gap(v, s, scale=scale, eps=1e-5), abs=1e-12
    )
    assert ln_gap(v, s, scale=scale, eps=1e-5) < ln_gap(v, s)


@pytest.mark.parametrize("v", [4, 8, 16])
@pytest.mark.parametrize("norm", ["none", "attn_out"])
def test_token_space_construction_margin_matches_prediction(v, norm):
    C = 1.5
    model = token_space_construction(v, C, norm)
    profile = prefix_profile(model, list(range(v - 1)))
    predicted = [token_space_margin(v, C, s, norm) for s in range(1, v)]
    np.testing.assert_allclose(profile.margin, predicted, atol=1e-9)
    # same precision at lengths 1-2
    assert min(profile.margin[:2]) == pytest.approx(C, abs=1e-9)


@pytest.mark.parametrize("v", [4, 8, 16])
def test_token_space_ln_output_gap_is_the_formula(v):
    model = token_space_construction(v, 1.0, "attn_out")
    tokens = torch.arange(v - 1)[None]
    _, cache = run_with_cache(
        model, tokens, names=["blocks.0.ln_attn_out.hook_normalized"]
    )
    # [pos, v]: features = tokens
    normalized = cache["blocks.0.ln_attn_out.hook_normalized"][0]
    for s in range(1, v):
        # present token 0, absent token v-1
        gap = float(normalized[s - 1, 0] - normalized[s - 1, v - 1])
        assert gap == pytest.approx(ln_gap(v, s), abs=1e-6)


def test_normed_margin_beats_no_norm_at_long_lengths():
    v, C = 16, 1.0
    for s in range(3, v):
        assert token_space_margin(v, C, s, "attn_out") > token_space_margin(
            v, C, s, "none"
        )


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("v", [1, 0, 2.5, True, "8"])
def test_bad_v_raises(v):
    with pytest.raises(ValueError, match="vocabulary size v"):
        complement_basis(v)
    with pytest.raises(ValueError, match="vocabulary size v"):
        construction(v, 1.0)


@pytest.mark.parametrize("C", [0, -1.0, float("inf"), float("nan"), True])
def test_bad_precision_raises(C):
    with pytest.raises(ValueError, match="precision C"):
        construction(4, C)
    with pytest.raises(ValueError, match="precision C"):
        construction_margin(4, C, 2)
    with pytest.raises(ValueError, match="precision C"):
        token_space_construction(4, C)
    with pytest.raises(ValueError, match="precision C"):
        token_space_margin(4, C, 2)


@pytest.mark.parametrize("delta", [0, 0.0, float("inf"), True])
def test_bad_delta_raises(delta):
    with pytest.raises(ValueError, match="delta must be a nonzero"):
        construction(4, 1.0, delta)
    with pytest.raises(ValueError, match="delta must be a nonzero"):
        construction_displacement(1.0, delta)


@pytest.mark.parametrize("s", [0, 4, 1.0, -1])
def test_bad_s_raises(s):
    for fn in (
        lambda: construction_margin(4, 1.0, s),
        lambda: construction_tv(4, 1.0, s),
        lambda: ln_gap(4, s),
        lambda: token_space_margin(4, 1.0, s),
    ):
        with pytest.raises(ValueError, match="prefix length s"):
            fn()


def test_bad_ln_gap_arguments_raise():
    with pytest.raises(ValueError, match="scale"):
        ln_gap(4, 2, scale=0.0)
    with pytest.raises(ValueError, match="eps"):
        ln_gap(4, 2, eps=-1e-5)


def test_bad_token_space_arguments_raise():
    with pytest.raises(ValueError, match="norm="):
        token_space_construction(4, 1.0, "post")
    with pytest.raises(ValueError, match="norm="):
        token_space_margin(4, 1.0, 2, "pre")
    with pytest.raises(ValueError, match="value_scale"):
        token_space_construction(4, 1.0, "attn_out", value_scale=-1.0)
    with pytest.raises(ValueError, match="vocabulary size v"):
        token_space_construction(2, 1.0)


def test_norm_comparison_holds_both_models_at_equal_precision():
    comparison = norm_comparison(8, 2.0)
    np.testing.assert_allclose(comparison.law, 4.0 / np.arange(1, 8))
    for profile in (comparison.none, comparison.attn_out):
        assert min(profile.margin[:2]) == pytest.approx(2.0, abs=1e-9)
        np.testing.assert_allclose(profile.probs.sum(-1), 1.0)
    np.testing.assert_allclose(
        comparison.none.margin[1:], comparison.law[1:], atol=1e-9
    )


def test_prefix_margins_match_margins_all_inputs():
    v = 5
    model = construction(v, 1.0)
    tokens = enumerate_sequences(v, 3)
    np.testing.assert_allclose(
        prefix_margins(model, tokens)[:, -1], margins_all_inputs(model, v, 3)
    )
    assert prefix_margins(model, tokens).shape == (len(tokens), 3)


# --- the chapter's checks of the construction, and its scorecard rows -----------------

from lengthgen_lite.chapters import ch3_construction as ch3c  # noqa: E402


def test_check_construction_at_v_4():
    check = ch3c.check_construction(4, 2.0)
    assert check.centred and check.ranks == (3, 3, 3) and check.d_model == 3
    assert (
        check.precision == pytest.approx(2.0, abs=1e-9) and check.absent_spread < 1e-12
    )
    assert check.row() == " 4        3       3       3       3          3  2.000"


def test_check_margins_and_the_precision_claim():
    check = ch3c.check_margins(vs=(4, 5), Cs=(1.0,), exhaustive_up_to=4, n_random=10)
    # every input of v = 4; 10 sequences of v = 5
    assert check.n_checked == (4 + 12 + 24) + 4 * 10
    assert check.max_deviation < 1e-12 and check.formula_error < 1e-12
    claim = ch3c.precision_claim(check, 1e-12)
    assert claim.claim is ch3c.PRECISION_CLAIM and claim.word == "demonstration"
    assert claim.number.startswith(
        f"{check.n_checked} margins"
    ) and claim.number.endswith("1e-12")
    worse = ch3c.MarginCheck(check.n_checked, 1e-9, 0.0)
    with pytest.raises(AssertionError, match="ch3-score-precision"):
        ch3c.precision_claim(worse, 1e-12)


def test_ln_gap_check_matches_the_formula():
    check = ch3c.ln_gap_check(8, 2.0)
    s = np.arange(1, 8)
    assert check.relative.max() < check.bound + 1e-12
    assert check.uniform and check.two_values < 1e-9 and check.step_error < 1e-12
    np.testing.assert_allclose(check.raw_gap, 1.0 / s, atol=1e-9)
    np.testing.assert_allclose(check.measured, 8 / np.sqrt(s * (8 - s)), rtol=1e-6)
    numbers = ch3c.ln_gap_numbers(check.raw_gap, check.measured, check.bound)
    assert numbers["ch3_raw_gap_last"] == round(1 / 7, 3)
    claim = ch3c.ln_gap_claim(float(check.relative.max()), check.bound, check.measured)
    assert claim.word == "demonstration" and "smallest 2.000 at s = v/2" in claim.number
    with pytest.raises(AssertionError, match="ch3-score-ln-gap"):
        ch3c.ln_gap_claim(2 * check.bound + 1e-6, check.bound, check.measured)


def test_comparison_numbers():
    numbers = ch3c.comparison_numbers(ch3c.norm_comparison(8, 2.0))
    assert list(numbers) == [
        "ch3_margin_none_last",
        "ch3_margin_ln_last",
        "ch3_margin_ln_min",
        "ch3_tv_none_last",
        "ch3_tv_ln_last",
    ]
    assert numbers["ch3_margin_none_last"] == round(4 / 7, 3)
    assert numbers["ch3_margin_ln_last"] > numbers["ch3_margin_none_last"]
