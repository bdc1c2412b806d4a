"""Chapter 8: the specs at both tiers, the claims as declared, the test-time factor,
the proof's margins and the readers on a tiny run."""

import numpy as np
import pytest

from lengthgen_lite.chapters import ch8_claims
from lengthgen_lite.chapters import ch8_mechanism as mech
from lengthgen_lite.chapters import ch8_two_kinds as ch8
from lengthgen_lite.runs import run
from lengthgen_lite.runs.claims import VERDICTS


def test_specs_at_both_tiers():
    live = ch8.SPECS["ch8/set_complement"]
    assert len(live.configurations()) == 2 * len(ch8.SET_VARIANTS) + 1
    reference = live.at_tier("reference")
    assert len(reference.seeds) == 10 and reference.configurations()[0].steps == 6000
    assert {(c.v, c.train_length) for c in reference.configurations()} == {
        (16, 4),
        (32, 8),
    }
    retrieval = ch8.SPECS["ch8/retrieval"]
    assert {c.lr for c in retrieval.configurations()} == {3e-3}
    ref = retrieval.at_tier("reference").configurations()
    assert {c.lr for c in ref} == set(ch8.REFERENCE_LRS)
    assert {c.schedule for c in ref} == {"constant"}
    assert len(ref) == 2 * 2 * len(ch8.RETRIEVAL_VARIANTS)


def test_claims_declare_the_pre_stated_sesois():
    sesoi = {c.key: (c.sesoi, c.test) for c in ch8_claims.CLAIMS}
    assert sesoi == {
        "ch8-score-sharpen-set": (0.01, "at most"),
        "ch8-score-renorm-set": (0.1, "difference"),
        "ch8-score-ssmax-retrieval": (0.25, "difference"),
        "ch8-score-ln-retrieval": (0.05, "at most"),
        "ch8-score-combined-set": (0.01, "at most"),
        "ch8-score-combined-retrieval": (0.03, "at most"),
        "ch8-score-factor-set": (0.01, "at most"),
        "ch8-score-factor-retrieval": (0.05, "difference"),
    }


def test_variant_fields_name_what_is_allowed():
    assert ch8.variant_fields("ssmax+LN", "retrieval") == {
        "norm": "attn_out",
        "logit_scale": "ssmax",
    }
    with pytest.raises(ValueError, match="variant"):
        ch8.variant_fields("LN")  # part A calls it attn_out


def test_the_sum_removes_the_one_over_s_law():
    table = mech.margin_table(8, 2.0)
    np.testing.assert_allclose(table.average, table.average_law, atol=1e-9)
    np.testing.assert_allclose(table.sharpened, table.average_law, atol=1e-9)
    np.testing.assert_allclose(table.summed, table.summed_law, atol=1e-9)
    assert (table.summed[1:] == pytest.approx(2.0)) and table.average[-1] < 1


def test_a_tiny_run_gives_every_claim_a_word():
    tiny = {"steps": 20, "seeds": 2}
    set_results = run(
        ch8.SPECS["ch8/set_complement"].with_overrides(**tiny), progress=False
    )
    retrieval = run(
        ch8.SPECS["ch8/retrieval"].with_overrides(**tiny, n_test=10), progress=False
    )
    factored = ch8.factor_retrieval(retrieval)
    assert factored["argmax_retrieval"].shape == (2, 8)
    decisions = ch8_claims.scorecard(set_results, retrieval, factored)
    assert [d.claim for d in decisions] == list(ch8_claims.CLAIMS)
    profiles = mech.slider_profiles(set_results, n_sequences=20)
    assert set(profiles) == set(mech.SLIDER_VARIANTS)


def test_depth_spec_and_its_claims():
    live = ch8.SPECS["ch8/depth"]
    assert [(c.positional, c.norm) for c in live.configurations()] == [
        ("none", "pre_final"),
        ("none", "post"),
        ("rope", "post"),
    ]
    assert {(c.steps, c.train_path) for c in live.configurations()} == {(500, "fast")}
    reference = live.at_tier("reference").configurations()
    assert {c.positional for c in reference} == {"none", "rope"} and len(reference) == 8
    assert {(c.n_layers, c.v, c.targets) for c in reference} == {(2, 32, "sampled")}
    assert {(c.steps, c.train_path) for c in reference} == {(6000, "auto")}
    depth = run(live.with_overrides(steps=20, seeds=2), progress=False)
    (effect,) = ch8_claims.depth_effects(depth)
    assert effect.cell == {"variant": "post"} and effect.interval.n == 2
    assert ch8_claims.DEPTH_CLAIM.decide([effect]).word in VERDICTS
    # the live slice has RoPE post only: one cell of the second half, and NoPE's
    # degradation (context, not a claim) from the same function
    decided = ch8_claims.depth_scorecard(depth)
    assert list(decided) == ["ch8-score-depth", "ch8-score-rope"]
    (rope_cell,) = ch8_claims.rope_effects(depth)
    (nope_cell,) = ch8_claims.degradation_effects(depth, "none")
    assert rope_cell.cell == nope_cell.cell == {"variant": "post"}
    assert set(ch8.depth_curves(depth, "tv", "none")) == {"pre_final", "post"}
    assert ch8.depth_curves(depth, "tv", "rope")["post"].shape[0] == 2
    with pytest.raises(ValueError, match="positional"):
        ch8.depth_curves(depth, "tv", "alibi")
    rope = [
        {"positional": "rope", **ch8.DEPTH_VARIANTS[n]} for n in ("post", "attn_out")
    ]
    rope_run = run(live.with_overrides(configs=rope, steps=20, seeds=2), progress=False)
    effects = ch8_claims.rope_effects(rope_run)
    assert [e.cell["variant"] for e in effects] == ["post", "attn_out"]
    assert list(ch8_claims.depth_scorecard(rope_run)) == ["ch8-score-rope"]
