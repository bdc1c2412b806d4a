import dataclasses

import numpy as np
import pytest
import torch

from lengthgen_lite.chapters import ch1_set_complement as ch1
from lengthgen_lite.chapters import ch5_post_norm as ch5
from lengthgen_lite.chapters.ch5_post_norm import (
    OUTPUT_NORM,
    PLACEMENTS,
    frozen_divisor,
    frozen_divisor_hooks,
    gap_profile,
    growth,
)
from lengthgen_lite.core.hooks import run_with_hooks
from lengthgen_lite.core.model import ModelConfig, Transformer
from lengthgen_lite.core.seeding import seed_everything
from lengthgen_lite.runs import run
from lengthgen_lite.runs.claims import CELL_WORDS, TV_SESOI, VERDICTS, Decision
from lengthgen_lite.runs.compare import collapsed


def _tiny(name, **changes):
    return ch5.SPECS[name].with_overrides(seeds=[0, 1], steps=20, n_test=200, **changes)


@pytest.fixture(scope="module")
def placements():
    return run(_tiny("ch5/placements"), progress=False)


@pytest.fixture(scope="module")
def dropout():
    return run(_tiny("ch5/dropout"), progress=False)


def test_placements_and_output_norms_match_the_model():
    assert PLACEMENTS == ("none", "pre", "pre_final", "post", "attn_out")
    for norm, name in OUTPUT_NORM.items():
        model = Transformer(ModelConfig(vocab_size=8, d_model=16, norm=norm))
        assert isinstance(model.get_submodule(name).layer_norm, torch.nn.LayerNorm)


def test_specs_are_chapter_one_baseline_with_one_change():
    placements = ch5.SPECS["ch5/placements"]
    assert len(placements.configurations()) == 10 and placements.seeds == (
        0,
        1,
        2,
        3,
        4,
    )
    deeper = ch5.SPECS["ch5/deeper"].configurations()
    assert [(c.norm, c.d_mlp, c.targets) for c in deeper] == [
        ("post", 128, "sampled"),
        ("pre_final", 128, "sampled"),
    ]
    dropout = ch5.SPECS["ch5/dropout"].configurations()
    assert [(c.targets, c.attn_dropout, c.resid_dropout) for c in dropout][:2] == [
        ("soft", 0.1, 0.0),
        ("soft", 0.3, 0.0),
    ]
    assert all(c.norm == "none" and c.steps == 1000 for c in dropout)


def test_readers_and_the_selector_agree(placements):
    tv = placements.curves("tv", targets="soft", norm="attn_out")
    np.testing.assert_allclose(
        ch5.per_seed(placements, "tv_beyond", "soft", "attn_out"), tv[:, 4:].mean(1)
    )
    assert set(ch5.curves(placements, "soft", "tv")) == set(PLACEMENTS)
    rows = placements.summary(["tv_train", "tv_beyond"])
    assert (
        len(rows) == 20 and rows[0]["targets"] == "soft" and rows[0]["norm"] == "none"
    )


def test_dropout_values_pair_each_rate_with_its_baseline(placements, dropout):
    base = ch5.dropout_values(
        placements, dropout, "tv_train", "soft", "attn_dropout", 0.0
    )
    np.testing.assert_allclose(
        base, placements.values("tv_train", targets="soft", norm="none")
    )
    with_p = ch5.dropout_values(
        placements, dropout, "tv_train", "soft", "attn_dropout", 0.3
    )
    np.testing.assert_allclose(
        with_p, dropout.values("tv_train", targets="soft", attn_dropout=0.3)
    )
    assert ch5.dropout_changes(placements, dropout).shape == (len(ch5.DROPOUT), 2)
    rows = ch5.dropout_rows(placements, dropout, ["tv_beyond"])
    assert [r["targets"] for r in rows] == ["soft"] * 10 + ["sampled"] * 6
    with pytest.raises(ValueError, match="unknown kind 'mlp_dropout'"):
        ch5.dropout_values(placements, dropout, "tv_train", "soft", "mlp_dropout", 0.1)


def test_scorecard_rows_are_decisions_of_the_declared_claims(placements, dropout):
    profiles = ch5.profiles(placements, n_sequences=50)
    decisions = ch5.scorecard(placements, profiles, dropout)
    assert [d.claim for d in decisions] == [
        ch5.POSTNORM_CLAIM,
        ch5.RESHARPEN_CLAIM,
        ch5.DROPOUT_CLAIM,
    ]
    assert all(isinstance(d, Decision) and d.word in VERDICTS for d in decisions)
    assert all(d.scale == "live" and d.final[0].step == 20 for d in decisions)
    postnorm, resharpen, dropout_row = decisions
    # one cell per target kind, labelled with the live run's init and learning rate
    assert [e.cell for e in postnorm.final] == [
        {"targets": t, **ch5.LIVE_CELL} for t in ("sampled", "soft")
    ]
    assert "pooled over 2 cells x 2 seeds, 20 steps" in postnorm.number
    assert postnorm.number.startswith("mean TV at s = 5..15: soft targets ")
    # two parts per target kind
    assert [(e.cell["targets"], e.cell["part"]) for e in resharpen.final] == [
        (t, part)
        for t in ch5.TARGETS
        for part in ("gap restored", "attention sharpened")
    ]
    assert resharpen.final[0].interval.mean == pytest.approx(
        (ch5.ratio(profiles, "soft", "post") - ch5.GAP_RESTORED).mean()
    )
    # one cell per dropout setting: no dropout minus dropout
    assert len(dropout_row.final) == len(ch5.DROPOUT)
    assert dropout_row.final[0].cell == {
        "targets": "soft",
        "attn_dropout": 0.1,
        "resid_dropout": 0.0,
        "init": ch5.LIVE_CELL["init"],
    }
    train = ch5.dropout_train_effects(placements, dropout)
    assert [len(train[t]) for t in ("soft", "sampled")] == [4, 2]
    assert train["sampled"][1].cell == {"targets": "sampled", "resid_dropout": 0.1}
    changes = ch5.dropout_changes(placements, dropout)
    assert dropout_row.final[0].interval.mean == pytest.approx(-changes[0].mean())
    assert ch5.relative(profiles, "soft", "post", "gap")[:, 0].tolist() == [1.0, 1.0]


def test_collapsed_reads_each_seeds_loss_curve(placements, dropout):
    flags = collapsed(placements, targets="soft", norm="post")
    assert flags.dtype == bool and flags.shape == (2,)
    # another seed order, another configuration of another run
    assert collapsed(placements, [1, 0], targets="soft", norm="post").tolist() == (
        flags[::-1].tolist()
    )
    assert collapsed(dropout, targets="soft", attn_dropout=0.3).shape == (2,)


def test_words_by_groups_the_cells_words(placements):
    profiles = ch5.profiles(placements, n_sequences=50)
    decision = ch5.resharpen_claim(profiles, placements)
    words = ch5.words_by(decision, "part")
    assert list(words) == ["gap restored", "attention sharpened"]
    assert all(len(w) == 2 for w in words.values())
    with pytest.raises(ValueError, match="no cell of ch5-score-postnorm has 'part'"):
        ch5.words_by(ch5.postnorm_claim(placements), "part")


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
    with (
        pytest.raises(ValueError, match="divisor must be"),
        frozen_divisor(model, "blocks.0.ln_attn_out", 0.0),
    ):
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
    # the frozen divisor is the mean divisor at s = 1..3, so the frozen and real gaps
    # cross there
    ratio = profile.divisor[:3] / profile.divisor[:3].mean()
    assert ratio.min() <= 1.0 <= ratio.max()
    assert np.isfinite(profile.divisor).all() and (profile.divisor > 0).all()
    # attn_out: the norm's input is the attention output itself
    np.testing.assert_allclose(
        profile.divisor, np.sqrt(profile.attn_out_std**2 + 1e-5), rtol=0.05
    )
    with pytest.raises(ValueError, match="train_length must be an int"):
        gap_profile(model, n_sequences=10, train_length=0)


def test_stack_profile():
    from lengthgen_lite.chapters.ch5_post_norm import stack_profile

    seed_everything(3)
    profiles = [
        gap_profile(
            Transformer(ModelConfig(vocab_size=8, d_model=16)).eval(), n_sequences=20
        )
        for _ in range(2)
    ]
    stacked = stack_profile(profiles, "gap")
    assert stacked.shape == (2, 7)
    np.testing.assert_array_equal(stacked[1], profiles[1].gap)
    with pytest.raises(ValueError, match="at least one GapProfile"):
        stack_profile([], "gap")
    with pytest.raises(ValueError, match="field 'tv' is unknown"):
        stack_profile(profiles, "tv")


def test_growth_is_one_for_the_one_over_s_law():
    seed_everything(4)
    profile = gap_profile(
        Transformer(ModelConfig(vocab_size=8, d_model=16)).eval(), n_sequences=20
    )
    # gap = c / s exactly: s * gap is flat
    law = dataclasses.replace(profile, gap=3.0 / profile.s)
    # gap constant: s * gap grows 7-fold
    rising = dataclasses.replace(profile, gap=np.ones(7))
    np.testing.assert_allclose(growth([law, rising]), [1.0, 7.0])
    np.testing.assert_allclose(
        growth(
            [dataclasses.replace(profile, frozen_gap=2.0 / profile.s)], "frozen_gap"
        ),
        [1.0],
    )
    with pytest.raises(ValueError, match="at least one GapProfile"):
        growth([])
    with pytest.raises(ValueError, match="field 'tv' is unknown"):
        growth([law], "tv")


def test_numbers_for_the_prose_are_rounded_and_named(placements, dropout):
    numbers = ch5.placement_numbers(placements)
    assert set(numbers) == {
        *(f"tv_beyond_{t}_{n}" for t in ch5.TARGETS for n in PLACEMENTS),
        "tv_longest_soft_attn_out",
        "tv_train_soft_max",
    }
    mean = ch5.per_seed(placements, "tv_beyond", "soft", "post").mean()
    assert numbers["tv_beyond_soft_post"] == round(float(mean), 3)
    profiles = ch5.profiles(placements, n_sequences=50)
    assert set(ch5.growth_numbers(profiles)) == {
        f"growth_{t}_{n}" for t in ch5.TARGETS for n in PLACEMENTS
    }
    mechanism = ch5.mechanism_numbers(profiles)
    assert mechanism["n_models"] == 20 and ch5.entropy_floor(profiles).shape == (10, 2)
    assert mechanism["entropy_min"] == round(
        float(ch5.entropy_floor(profiles).min()), 3
    )
    divisor = ch5.divisor_numbers(profiles)
    assert 1 <= divisor["gap_min_s"] <= 15 and "divisor_s15_attn_out" in divisor
    dropout_numbers = ch5.dropout_numbers(placements, dropout)
    assert "dropout_soft_attn_dropout_0.1" in dropout_numbers
    assert {"dropout_base_soft", "dropout_base_sampled"} <= set(dropout_numbers)
    curves = ch5.dropout_curves(placements, dropout, "sampled")
    assert list(curves) == ["no dropout", "attn_dropout=0.1", "resid_dropout=0.1"]
    assert all(c.shape == (2, 15) for c in curves.values())


def test_divisor_laws_are_chapter_three_relative_to_s_one():
    gap, spread = ch5.divisor_laws(16)
    assert gap.shape == spread.shape == (15,) and spread[0] == 1.0
    s = np.arange(1, 16)
    np.testing.assert_allclose(spread, np.sqrt((16 - s) / (s * 15)))


def test_post_and_pre_final_read_the_same_seeds(placements):
    deeper = run(
        ch5.SPECS["ch5/deeper"].with_overrides(seeds=[0, 1], steps=20, n_test=200),
        progress=False,
    )
    one_layer, with_mlp = ch5.post_and_pre_final(placements, deeper)
    expected = placements.values("tv_beyond", targets="sampled", norm="post")
    np.testing.assert_array_equal(one_layer["post"], expected)
    assert with_mlp["pre_final"].shape == (2,)
    effects = ch5.deeper_effects(placements, deeper)
    assert list(effects) == ["one layer", "with MLP"]
    np.testing.assert_allclose(
        effects["with MLP"].interval.mean,
        (with_mlp["post"] - with_mlp["pre_final"]).mean(),
    )
    words = ch5.deeper_words(placements, deeper)
    assert set(words) == set(effects) and set(words.values()) <= set(CELL_WORDS)
    numbers = ch5.deeper_numbers(placements, deeper)
    assert numbers["tv_sesoi"] == TV_SESOI == 0.01
    assert (
        numbers["mlp_difference_low"]
        <= numbers["mlp_difference_low90"]
        <= numbers["mlp_difference"]
        <= numbers["mlp_difference_high90"]
        <= numbers["mlp_difference_high"]
    )
    assert numbers["one_layer_difference"] == round(
        float((one_layer["post"] - one_layer["pre_final"]).mean()), 3
    )


def test_attn_out_lead_reads_the_reference_sweep():
    from lengthgen_lite.chapters import reference

    stored = reference.load("ch5/placements")
    lead = ch5.attn_out_lead(stored)
    assert {e.step for e in lead} == {1000, 3000, 6000} and len(lead) == 24
    numbers = ch5.attn_out_lead_numbers(stored)
    assert set(numbers) == {
        f"lead-{name}-{step}{end}"
        for step in (1000, 6000)
        for name, ends in (
            ("soft-min", [""]),
            ("soft-max", [""]),
            ("sampled-fast-book", ["", "-high"]),
            ("sampled-fast-torch", ["", "-high"]),
        )
        for end in ends
    }
    # soft targets: the lead closes with training, every cell
    assert 0 < numbers["lead-soft-min-6000"] <= numbers["lead-soft-max-6000"]
    assert numbers["lead-soft-max-6000"] < numbers["lead-soft-min-1000"]
    assert numbers["lead-sampled-fast-torch-6000-high"] < 0  # post-norm better there


def test_attn_out_lead_numbers_need_the_reference_grid(placements):
    assert {e.cell["targets"] for e in ch5.attn_out_lead(placements)} == {
        "soft",
        "sampled",
    }
    with pytest.raises(ValueError, match="does not vary init and lr"):
        ch5.attn_out_lead_numbers(placements)


def test_book_choices_extend_chapter_one():
    task, model_cfg, train_cfg = ch1.baseline_setup("soft")
    choices = ch5.book_choices(task, model_cfg, train_cfg)
    assert list(choices)[:5] == [
        "v",
        "training lengths s",
        "d_model",
        "layers",
        "heads",
    ]
    assert choices["MLP"] == "none" and choices["seeds"] == 5
