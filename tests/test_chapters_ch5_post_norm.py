import dataclasses

import numpy as np
import pytest
import torch

from lengthgen_lite.chapters.ch5_post_norm import (
    OUTPUT_NORM,
    PLACEMENTS,
    dropout_seed_values,
    frozen_divisor,
    frozen_divisor_hooks,
    gap_profile,
    growth,
    per_seed,
    run_placement,
    seed_values,
    summary_rows,
)
from lengthgen_lite.core.model import ModelConfig, Transformer, run_with_hooks
from lengthgen_lite.core.seeding import seed_everything


@pytest.fixture(scope="module")
def short_runs():
    return [run_placement(norm, "soft", seeds=[0, 1], steps=30, progress=False) for norm in ("none", "attn_out")]


def test_placements_and_output_norms_match_the_model():
    assert PLACEMENTS == ("none", "pre", "pre_final", "post", "attn_out")
    for norm, name in OUTPUT_NORM.items():
        model = Transformer(ModelConfig(vocab_size=8, d_model=16, norm=norm))
        assert isinstance(model.get_submodule(name).layer_norm, torch.nn.LayerNorm)


def test_run_placement_trains_every_seed_and_scores_every_length(short_runs):
    run = short_runs[1]
    assert run.norm == "attn_out" and run.result.seeds == [0, 1] and run.result.loss.shape == (30, 2)
    assert len(run.tables) == 2 and list(run.tables[0].s) == list(range(1, 16))
    assert run.label == "norm=attn_out"
    dropout = run_placement("none", "sampled", seeds=[0], steps=5, attn_dropout=0.1, progress=False)
    assert dropout.label == "norm=none, attn_dropout=0.1"
    assert dropout.result.models[0].cfg.attn_dropout == 0.1


def test_summary_rows_are_tidy(short_runs):
    rows = summary_rows(short_runs)
    assert len(rows) == 4 and {row["norm"] for row in rows} == {"none", "attn_out"}
    table = short_runs[0].tables[1]
    assert rows[1]["tv_train"] == pytest.approx(table.tv[:4].mean())
    assert rows[1]["tv_beyond"] == pytest.approx(table.tv[4:].mean())
    assert rows[1]["gap_longest"] == pytest.approx(table.logit_gap[-1])
    np.testing.assert_allclose(seed_values(rows, "tv_longest", norm="none"), [t.tv[-1] for t in short_runs[0].tables])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(norm="rms", targets="soft"), "norm='rms' is unknown"),
        (dict(norm="none", targets="hard"), "targets='hard' is unknown"),
        (dict(norm="none", targets="soft", attn_dropout=1.0), "attn_dropout must be in"),
        (dict(norm="none", targets="soft", steps=0), "steps must be a positive int"),
    ],
)
def test_run_placement_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_placement(progress=False, **kwargs)


def test_summary_and_seed_values_reject_bad_input(short_runs):
    with pytest.raises(ValueError, match="at least one PlacementRun"):
        summary_rows([])
    with pytest.raises(ValueError, match="train_length must be an int in 1..14"):
        summary_rows(short_runs, train_length=15)
    rows = summary_rows(short_runs)
    with pytest.raises(ValueError, match="no row matches"):
        seed_values(rows, "tv_train", norm="post")
    with pytest.raises(ValueError, match="column 'accuracy' is unknown"):
        seed_values(rows, "accuracy", norm="none")


def test_frozen_divisor_is_a_layernorm_with_a_constant_std():
    seed_everything(0)
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, norm="attn_out")).eval()
    with torch.no_grad():
        model.blocks[0].ln_attn_out.layer_norm.weight.uniform_(0.5, 1.5)
        model.blocks[0].ln_attn_out.layer_norm.bias.normal_()
    tokens = torch.tensor([[0, 1, 2, 3]])
    reference = model(tokens)
    norm, ln = model.blocks[0].ln_attn_out, model.blocks[0].ln_attn_out.layer_norm
    with frozen_divisor(model, "blocks.0.ln_attn_out", 2.0):
        frozen = model(tokens)
        x = torch.randn(3, 16)
        expected = (x - x.mean(-1, keepdim=True)) / 2.0 * ln.weight + ln.bias
        torch.testing.assert_close(norm(x), expected)
    assert not torch.allclose(frozen, reference)
    torch.testing.assert_close(model(tokens), reference)  # the hook is gone afterwards
    hooks = frozen_divisor_hooks("blocks.0.ln_attn_out", 2.0)
    assert torch.equal(run_with_hooks(model, tokens, hooks), frozen)
    with pytest.raises(ValueError, match="divisor must be"):
        with frozen_divisor(model, "blocks.0.ln_attn_out", 0.0):
            pass


def test_gap_profile_without_a_norm_has_no_divisor():
    seed_everything(1)
    model = Transformer(ModelConfig(vocab_size=8, d_model=16)).eval()
    profile = gap_profile(model, n_sequences=50)
    assert profile.s.tolist() == list(range(1, 8))
    assert np.isnan(profile.divisor).all()
    np.testing.assert_array_equal(profile.frozen_gap, profile.gap)
    assert profile.entropy_ratio[0] == 1.0 and (profile.entropy_ratio <= 1 + 1e-6).all()
    assert profile.max_attention_ratio[0] == pytest.approx(1.0)
    assert (profile.max_attention_ratio >= 1 - 1e-6).all()


def test_gap_profile_frozen_gap_matches_at_the_reference_and_divisor_is_the_input_std():
    seed_everything(2)
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, norm="attn_out")).eval()
    profile = gap_profile(model, n_sequences=200, train_length=3)
    # the frozen divisor is the mean divisor at s = 1..3, so the frozen and real gaps cross there
    ratio = profile.divisor[:3] / profile.divisor[:3].mean()
    assert ratio.min() <= 1.0 <= ratio.max()
    assert np.isfinite(profile.divisor).all() and (profile.divisor > 0).all()
    # attn_out: the norm's input is the attention output itself
    np.testing.assert_allclose(profile.divisor, np.sqrt(profile.attn_out_std**2 + 1e-5), rtol=0.05)
    with pytest.raises(ValueError, match="train_length must be an int"):
        gap_profile(model, n_sequences=10, train_length=0)


def test_stack_profile():
    from lengthgen_lite.chapters.ch5_post_norm import stack_profile

    seed_everything(3)
    profiles = [gap_profile(Transformer(ModelConfig(vocab_size=8, d_model=16)).eval(), n_sequences=20) for _ in range(2)]
    stacked = stack_profile(profiles, "gap")
    assert stacked.shape == (2, 7)
    np.testing.assert_array_equal(stacked[1], profiles[1].gap)
    with pytest.raises(ValueError, match="at least one GapProfile"):
        stack_profile([], "gap")
    with pytest.raises(ValueError, match="field 'tv' is unknown"):
        stack_profile(profiles, "tv")


def test_per_seed_reads_one_placement_without_dropout(short_runs):
    dropout = run_placement("none", "soft", seeds=[0, 1], steps=5, resid_dropout=0.1, progress=False)
    rows = summary_rows([*short_runs, dropout])
    values = per_seed(rows, "tv_beyond", "soft", "none")
    np.testing.assert_allclose(values, [t.tv[4:].mean() for t in short_runs[0].tables])  # not the dropout rows
    assert rows[0]["n_layers"] == 1 and rows[0]["d_mlp"] == 0
    with pytest.raises(ValueError, match="no row matches"):
        per_seed(rows, "tv_beyond", "sampled", "none")


def test_dropout_seed_values_pairs_each_rate_with_its_baseline(short_runs):
    dropout = run_placement("none", "soft", seeds=[0, 1], steps=5, attn_dropout=0.3, progress=False)
    rows = summary_rows([*short_runs, dropout])
    np.testing.assert_allclose(
        dropout_seed_values(rows, "tv_train", "soft", "attn_dropout", 0.3), [t.tv[:4].mean() for t in dropout.tables]
    )
    np.testing.assert_allclose(
        dropout_seed_values(rows, "tv_train", "soft", "resid_dropout", 0.0), [t.tv[:4].mean() for t in short_runs[0].tables]
    )
    with pytest.raises(ValueError, match="kind='mlp_dropout' is unknown"):
        dropout_seed_values(rows, "tv_train", "soft", "mlp_dropout", 0.1)
    with pytest.raises(ValueError, match="no row matches"):
        dropout_seed_values(rows, "tv_train", "soft", "attn_dropout", 0.1)


def test_growth_is_one_for_the_one_over_s_law():
    seed_everything(4)
    profile = gap_profile(Transformer(ModelConfig(vocab_size=8, d_model=16)).eval(), n_sequences=20)
    law = dataclasses.replace(profile, gap=3.0 / profile.s)  # gap = c / s exactly: s * gap is flat
    rising = dataclasses.replace(profile, gap=np.ones(7))  # gap constant: s * gap grows 7-fold
    np.testing.assert_allclose(growth([law, rising]), [1.0, 7.0])
    np.testing.assert_allclose(growth([dataclasses.replace(profile, frozen_gap=2.0 / profile.s)], "frozen_gap"), [1.0])
    with pytest.raises(ValueError, match="at least one GapProfile"):
        growth([])
    with pytest.raises(ValueError, match="field 'tv' is unknown"):
        growth([law], "tv")


def test_run_placement_builds_a_deeper_model():
    run = run_placement("post", "sampled", seeds=[0], steps=3, d_mlp=32, progress=False)
    assert run.label == "norm=post, d_mlp=32" and run.result.models[0].cfg.d_mlp == 32
    assert summary_rows([run])[0]["d_mlp"] == 32
    assert run_placement("pre", "soft", seeds=[0], steps=2, n_layers=2, progress=False).label == "norm=pre, layers=2"
    with pytest.raises(ValueError, match="d_mlp must be an int(eger)? >= 0"):
        run_placement("post", "soft", seeds=[0], steps=2, d_mlp=-1, progress=False)
