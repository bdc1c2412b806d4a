import math

import numpy as np
import pytest
import torch

from lengthgen_lite import TrainConfig, enumerate_sequences, target_distribution
from lengthgen_lite.chapters.ch3_analysis import (
    LengthOneTwo,
    TiedPair,
    dimension_sweep,
    input_kl,
    length_one_two_fit,
    tied_pair,
)
from lengthgen_lite.chapters.ch3_construction import construction
from lengthgen_lite.core.seeding import make_generator


@pytest.mark.parametrize("v", [3, 5])
def test_length_one_two_counts_every_input_once(v):
    task = LengthOneTwo(v)
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
    task = LengthOneTwo(v)
    batch = task.full_batch()
    t = batch.targets.double()
    entropy = -(t * t.clamp_min(1e-300).log()).sum(-1)
    assert task.entropy_floor() == pytest.approx(
        float(entropy[batch.loss_mask].mean()), abs=1e-6
    )


def test_length_one_two_fit_of_the_construction_vanishes_with_precision():
    v = 5
    weak = length_one_two_fit(construction(v, 1.0), v)
    strong = length_one_two_fit(construction(v, 12.0), v)
    assert weak[1] == pytest.approx(1.0, abs=1e-9) and strong[1] == pytest.approx(
        12.0, abs=1e-9
    )
    # a d = v-1 solution with arbitrarily small excess loss
    assert 0 < strong[0] < 1e-3 < weak[0]


def test_length_one_two_bad_arguments_raise():
    with pytest.raises(ValueError, match="vocabulary size v"):
        LengthOneTwo(2)
    task = LengthOneTwo(4)
    with pytest.raises(ValueError, match="full batch"):
        task.sample_train_batch(128, 2, make_generator(0))
    with pytest.raises(ValueError, match="full batch"):
        task.sample_train_batch(12, 3, make_generator(0))


def test_dimension_sweep_shapes_and_threshold():
    v = 4
    cfg = TrainConfig(steps=400, lr=3e-2, batch=12, warmup=20)
    sweep = dimension_sweep(v, [2, 5], [0, 1], cfg, progress=False)
    assert (
        sweep.best_excess.shape
        == sweep.final_excess.shape
        == sweep.final_margin.shape
        == (2, 2)
    )
    assert sweep.curves.shape == (2, 400, 2)
    assert np.all(sweep.best_excess <= sweep.curves[:, 0, :])
    # d = v-2: the lower bound; never a positive margin
    assert np.all(sweep.final_margin[0] <= 0)
    assert np.all(sweep.final_margin[1] > 0) and np.all(
        sweep.final_excess[1] < sweep.final_excess[0]
    )


def test_dimension_sweep_bad_arguments_raise():
    with pytest.raises(ValueError, match="batch=12"):
        dimension_sweep(4, [3], [0], TrainConfig(steps=2, warmup=0), progress=False)
    with pytest.raises(ValueError, match="targets='soft'"):
        dimension_sweep(
            4,
            [3],
            [0],
            TrainConfig(steps=2, warmup=0, batch=12, targets="sampled"),
            progress=False,
        )
    with pytest.raises(ValueError, match="dims"):
        dimension_sweep(
            4, [], [0], TrainConfig(steps=2, warmup=0, batch=12), progress=False
        )
    with pytest.raises(ValueError, match="dims"):
        dimension_sweep(
            4, [0], [0], TrainConfig(steps=2, warmup=0, batch=12), progress=False
        )


def test_tied_pair_finds_the_confused_tokens_and_their_split_cost():
    v = 6
    cost = TiedPair.split_cost(v)
    kl = np.full((v, v), 0.001)
    np.fill_diagonal(kl, np.nan)
    for j in range(v):
        for q in range(v):
            if j != q and ((j in (1, 4)) != (q in (1, 4))):
                kl[j, q] = cost
    pair = tied_pair(kl)
    assert pair.tokens == (1, 4)
    assert pair.kl_exactly_one == pytest.approx(cost)
    assert pair.kl_others == pytest.approx(0.001)
    assert cost == pytest.approx(math.log(2) / 4)


def test_tied_pair_bad_input_raises():
    with pytest.raises(ValueError, match="kl_two"):
        tied_pair(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="kl_two"):
        tied_pair(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="vocabulary size v"):
        TiedPair.split_cost(2)


def test_dimension_sweep_fits_threshold():
    v = 4
    cfg = TrainConfig(steps=50, lr=3e-2, batch=12, warmup=5)
    sweep = dimension_sweep(v, [3], [0], cfg, progress=False)
    assert sweep.fits(1e3).all() and not sweep.fits(1e-12).any()
    assert sweep.kl_length_one.shape == (1, 1, v) and sweep.kl_length_two.shape == (
        1,
        1,
        v,
        v,
    )
    assert np.isnan(np.diagonal(sweep.kl_length_two[0, 0])).all()
    with pytest.raises(ValueError, match="threshold"):
        sweep.fits(0.0)


def test_input_kl_tables_agree_with_the_excess_loss():
    v = 5
    model = construction(v, 1.0)
    one, two = input_kl(model, v)
    assert one.shape == (v,) and two.shape == (v, v)
    assert np.isnan(np.diagonal(two)).all()
    excess, _ = length_one_two_fit(model, v)
    mean = (one.sum() + np.nansum(two)) / (v + v * (v - 1))
    assert mean == pytest.approx(excess, rel=1e-6)
    # by symmetry the construction is equally good on every length-2 input
    assert np.nanmax(two) - np.nanmin(two) < 1e-9


# --- what the chapter reads off its sweeps (synthetic sweeps: no training) ------------

from lengthgen_lite.chapters import ch3_analysis as ch3a  # noqa: E402
from lengthgen_lite.chapters.ch3_analysis import DimensionSweep  # noqa: E402


def tied_table(v, pair=(0, 1)):
    inside = np.isin(np.arange(v), pair)
    kl = np.where(inside[:, None] ^ inside[None, :], TiedPair.split_cost(v), 0.0)
    np.fill_diagonal(kl, np.nan)
    return kl


def fake_sweep(v, dims, fits_at_v_minus_1, K=4):
    """Nothing fits below d = v-1, ``fits_at_v_minus_1`` seeds fit there, all fit
    above."""
    excess = np.full((len(dims), K), 0.05)
    at = dims.index(v - 1)
    excess[at, :fits_at_v_minus_1] = 0.001
    excess[at + 1 :] = 0.001
    kl_two = np.zeros((len(dims), K, v, v))
    kl_two[:] = tied_table(v)
    return DimensionSweep(
        v=v,
        dims=np.array(dims),
        seeds=np.arange(K),
        best_excess=excess,
        final_excess=excess,
        final_margin=np.where(excess < 0.01, 1.0, -0.1),
        curves=np.zeros((len(dims), 3, K)),
        kl_length_one=np.zeros((len(dims), K, v)),
        kl_length_two=kl_two,
    )


def sweeps():
    return {6: fake_sweep(6, [4, 5, 6, 7], 1), 8: fake_sweep(8, [5, 6, 7, 8, 9], 0)}


def test_sweep_counts_numbers_and_claims():
    s = sweeps()
    assert ch3a.fits_at(s, 0.01, -1) == {6: 1, 8: 0} and ch3a.fits_at(s, 0.01, 1) == {
        6: 4,
        8: 4,
    }
    numbers = ch3a.sweep_numbers(s, 0.01)
    assert list(numbers)[:3] == [
        "ch3_fit_at_v6",
        "ch3_fit_above_v6",
        "ch3_plateau_below_v6",
    ]
    assert numbers["ch3_plateau_below_v8"] == 0.05 and numbers["ch3_K"] == 4
    assert numbers["ch3_fit_at_total"] == 1 and numbers["ch3_runs_at_total"] == 8
    claim = ch3a.lower_bound_claim(s, 0.01)  # d = 4 (v = 6); 5, 6 (v = 8)
    assert claim.claim is ch3a.LOWER_BOUND_CLAIM and claim.word == "demonstration"
    assert (
        claim.number.startswith("0/12 trained runs fit")
        and "(v = 6: d = 4; v = 8: d = 5, 6;" in claim.number
        and claim.number.endswith("smallest excess 0.050 nats")
    )
    sufficient = ch3a.sufficient_claim(s, 0.01, [1e-6, 1e-6, 1e-6])
    assert sufficient.word == "demonstration"
    assert (
        "fits in 1/4 seeds (v = 6) and 0/4 (v = 8), at d = v+1 in 4/4 and 4/4"
        in sufficient.number
    )
    with pytest.raises(AssertionError, match="ch3-score-sufficient"):
        ch3a.sufficient_claim(s, 0.01, [1e-6, -1e-3, 1e-6])  # one model imprecise
    fitted = {6: fake_sweep(6, [4, 5, 6, 7], 1)} | {8: s[8]}
    fitted[6].best_excess[0, 0] = 0.001  # a run at d = v-2 that fit at some step
    with pytest.raises(AssertionError, match="ch3-score-lower-bound"):
        ch3a.lower_bound_claim(fitted, 0.01)


def test_tied_pair_survey_reads_every_stall():
    s = sweeps()
    survey = ch3a.tied_pair_survey(s, 0.01)
    assert survey.stalled_total == 3 + 4 and survey.one_pair_total == 7
    assert len(survey.lines) == 7 and survey.lines[0].endswith("<- one tied pair")
    assert survey.lines[0].startswith(" 6     1  (0, 1)")
    assert survey.stall_over_plateau == {6: 1.0, 8: 1.0}
    k, pair = survey.example
    assert k == 0 and pair.tokens == (0, 1)
    tables = ch3a.kl_examples(s[8], 0.01, survey.example)
    # no run fits at v = 8, d = 7
    assert list(tables) == ["seed 0: stalled, tokens (0, 1) tied"]
    tables = ch3a.kl_examples(s[6], 0.01, (1, pair))
    assert list(tables)[1] == "seed 0: fitted"
