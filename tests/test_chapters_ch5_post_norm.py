import numpy as np
import pytest

from lengthgen_lite.chapters import ch1_set_complement as ch1
from lengthgen_lite.chapters import ch5_post_norm as ch5
from lengthgen_lite.chapters.ch5_post_norm import PLACEMENTS
from lengthgen_lite.runs import run
from lengthgen_lite.runs.claims import CELL_WORDS, VERDICTS, Decision
from lengthgen_lite.runs.compare import collapsed


def _tiny(name, **changes):
    return ch5.SPECS[name].with_overrides(seeds=[0, 1], steps=20, n_test=200, **changes)


@pytest.fixture(scope="module")
def placements():
    return run(_tiny("ch5/placements"), progress=False)


@pytest.fixture(scope="module")
def dropout():
    return run(_tiny("ch5/dropout"), progress=False)


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
    assert all(d.tier == "live" and d.final[0].step == 20 for d in decisions)
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


def test_dropout_curves_are_the_no_norm_model_and_each_setting(placements, dropout):
    curves = ch5.dropout_curves(placements, dropout, "sampled")
    assert list(curves) == ["no dropout", "attn_dropout=0.1", "resid_dropout=0.1"]
    assert all(c.shape == (2, 15) for c in curves.values())


def test_attn_out_lead_reads_the_reference_sweep_and_the_live_run(placements):
    from lengthgen_lite.chapters import reference

    lead = ch5.attn_out_lead(reference.load("ch5/placements"))
    assert {e.step for e in lead} == {1000, 3000, 6000} and len(lead) == 24
    assert {e.cell["targets"] for e in ch5.attn_out_lead(placements)} == {
        "soft",
        "sampled",
    }
