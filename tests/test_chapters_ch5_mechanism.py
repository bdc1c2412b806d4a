import dataclasses

import numpy as np
import pytest
import torch

from lengthgen_lite.chapters.ch5_mechanism import (
    OUTPUT_NORM,
    frozen_divisor,
    frozen_divisor_hooks,
    gap_profile,
    growth,
    stack_profile,
)
from lengthgen_lite.core.hooks import run_with_hooks
from lengthgen_lite.core.model import PLACEMENTS, ModelConfig, Transformer
from lengthgen_lite.core.seeding import seed_everything


def test_placements_and_output_norms_match_the_model():
    assert PLACEMENTS == ("none", "pre", "pre_final", "post", "attn_out")
    for norm, name in OUTPUT_NORM.items():
        model = Transformer(ModelConfig(vocab_size=8, d_model=16, norm=norm))
        assert isinstance(model.get_submodule(name).layer_norm, torch.nn.LayerNorm)


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
