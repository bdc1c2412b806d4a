import numpy as np
import pytest
import torch

from lengthgen_lite.chapters import ch4_llama as llama
from lengthgen_lite.core import pretrained
from tiny_models import llama_tokens as tokens
from tiny_models import tiny_llama


@pytest.fixture(scope="module")
def tiny():
    """A tiny randomly initialised Llama: the hooks and the measurement without the real
    weights."""
    torch.manual_seed(0)
    return tiny_llama(attn_implementation="eager").eval()


def test_spread_definitions_differ_on_a_common_mean():
    """A shared offset across components leaves the per-feature std alone but not the
    global one."""
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(400, 1, 2, 64, generator=g) * torch.tensor([1.0, 0.5]).view(
        1, 1, 2, 1
    )
    offset = torch.linspace(-3, 3, 64)
    plain, shifted = llama.spread_curves(noise), llama.spread_curves(noise + offset)
    np.testing.assert_allclose(
        plain["feature (median)"], shifted["feature (median)"], rtol=1e-6
    )
    assert plain["global"][0, 1] < 0.6 * plain["global"][0, 0]  # the noise halves
    # the offset dominates
    assert shifted["global"][0, 1] > 0.9 * shifted["global"][0, 0]


def test_bootstrap_bands_bracket_the_slope(tiny):
    record = pretrained.record_last_positions(tiny, tokens(12, 32), [4, 8, 16, 32])
    bands = llama.bootstrap_slopes(record, n_boot=20)
    for key, point in bands.point.items():
        assert point.shape == (2,) and (bands.low[key] <= bands.high[key]).all()
    assert pretrained.sink_mass(record).shape == (2, 4)


def test_requantize_coarsens_2d_weights_only(tiny):
    coarse = llama.requantize(tiny, bits=2)
    w = coarse.model.layers[0].self_attn.q_proj.weight.view(32, -1, 32)
    assert max(len(torch.unique(block)) for block in w.reshape(-1, 32)) <= 4
    assert torch.equal(coarse.model.norm.weight, tiny.model.norm.weight)
    assert not torch.equal(
        coarse.model.layers[0].mlp.up_proj.weight,
        tiny.model.layers[0].mlp.up_proj.weight,
    )


def test_describe_names_a_causal_llama(tiny):
    facts = llama.describe(tiny)
    assert (
        facts["class"] == "LlamaForCausalLM"
        and facts["causal"]
        and facts["layers"] == 2
        and facts["kv_heads"] == 2
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: llama.requantize(m, bits=0), "bits must be an int in 1..8"),
        (lambda m: llama.requantize(m, bits=3, block=1), "block must be an int >= 2"),
        (lambda m: llama.feature_std(torch.zeros(1, 4)), "at least 2 sequences"),
        (
            lambda m: llama.bootstrap_slopes(
                pretrained.record_last_positions(m, tokens(), [4, 8]), n_boot=1
            ),
            "n_boot must be",
        ),
    ],
)
def test_bad_input_raises(tiny, call, message):
    with pytest.raises(ValueError, match=message):
        call(tiny)


@pytest.mark.skipif(
    not (pretrained.cache_dir() / pretrained.CONVERTED).exists(),
    reason="SmolLM2 not converted yet (make fetches it)",
)
def test_the_cached_smollm2_is_a_causal_llama():
    model = pretrained.load_smollm2()
    facts = llama.describe(model)
    assert (
        facts["class"],
        facts["causal"],
        facts["layers"],
        facts["d_model"],
        facts["heads"],
        facts["kv_heads"],
    ) == ("LlamaForCausalLM", True, 30, 576, 9, 3)


def hand_made_layers():
    """Hand-made slopes, sinks and controls of two layers (layer 0 falls, layer 1
    rises): (slopes, sinks, their layer_summary)."""
    F = llama.F

    def bands(point, low, high, glob):
        return llama.SlopeBands(
            {
                F: np.array(point),
                "global": np.array(glob),
                "feature o_0": np.array(point),
            },
            {F: np.array(low), "global": np.array(glob)},
            {F: np.array(high), "global": np.array(glob)},
            {F: (np.array(high) - np.array(low)) / 3.92},
        )

    kinds = ("random tokens", "natural text")
    slopes = {
        (k, "after_o_proj"): bands([-0.3, 0.2], [-0.4, 0.1], [-0.2, 0.3], [0.0, 0.1])
        for k in kinds
    }
    slopes |= {
        (k, "before_o_proj"): bands([-0.45, 0.0], [-0.5, -0.1], [-0.4, 0.1], [0.0, 0.0])
        for k in kinds
    }
    sinks = {k: np.array([[0.0, 0.01], [0.5, 0.6]]) for k in kinds}  # [layers, len(N)]
    controls = {
        "4-bit (as shipped)": bands([-0.3, 0.2], [-0.4, 0.1], [-0.2, 0.3], [0.0, 0.0]),
        "3-bit re-quantised": bands(
            [-0.28, 0.25], [-0.4, 0.1], [-0.2, 0.3], [0.0, 0.0]
        ),
        "random weights": bands([-0.5, 0.0], [-0.6, -0.1], [-0.4, 0.1], [0.0, 0.0]),
    }
    record = pretrained.LastPositionRecord(
        np.array([8, 512]),
        torch.randn(4, 2, 2, 8),
        torch.randn(4, 2, 2, 8),
        torch.rand(4, 2, 2, 4),
    )
    summary = llama.layer_summary(slopes, {k: record for k in kinds}, sinks, controls)
    return slopes, sinks, summary


def test_layer_summary_and_scorecard():
    """The chapter's Llama numbers from hand-made slopes: layer 0 falls, layer 1
    rises."""
    slopes, sinks, summary = hand_made_layers()
    assert summary.l0["random tokens"] == -0.3 and summary.l0_before == -0.45
    assert summary.decays.tolist() == [0] and summary.rises.tolist() == [1]
    assert summary.no_sink["random tokens"].tolist() == [True, False]
    assert summary.sink_gap["natural text"] == pytest.approx(0.5) and summary.rho[
        "random tokens"
    ] == pytest.approx(1.0)
    np.testing.assert_allclose(summary.quant_shift, [0.02, 0.05])
    row = llama.llama_decision(summary, slopes, 10, [8, 512])
    # both inputs: minus the slope 0.3 >= 0.05, se 0.2 / 3.92, interval above 0
    assert row.claim is llama.LLAMA_CLAIM and row.word == "reproduced"
    assert [e.cell for e in row.final] == [
        {"input": "random tokens"},
        {"input": "natural text"},
    ]
    assert row.final[0].interval.mean == pytest.approx(0.3)
    assert "band below 0 in 1 of 2 layers" in row.number
    assert "10 sequences per input, N = 8..512" in row.number


def test_bootstrap_interval_uses_t_over_the_sequences():
    i = llama.bootstrap_interval(0.2, 0.05, 10)
    assert i.df == 9 and i.n == 10 and i.se == 0.05
    assert i.high - i.mean == pytest.approx(2.2622 * 0.05, rel=1e-4)
    with pytest.raises(ValueError, match="n must be an int >= 2"):
        llama.bootstrap_interval(0.2, 0.05, 1)


def test_global_mean_drift_and_its_size():
    """A layer whose mean moves by one global spread from the first N to the last,
    and a layer that does not move: the drift in global spreads, per sequence."""
    g = torch.Generator().manual_seed(0)
    out = torch.randn(6, 2, 3, 16, generator=g)
    out[:, 0, -1] += 2.0  # layer 0, largest N: every component up by 2
    record = pretrained.LastPositionRecord(
        np.array([8, 64, 512]), out, out, torch.zeros(6, 2, 3, 4)
    )
    drift = llama.global_mean_drift(record)
    assert drift.shape == (6, 2)
    spread = llama.global_std(out[:, :, 0].double()).numpy()
    means = out.double().mean(-1).numpy()  # [sequences, layers, len(N)]
    expected = (means[:, :, -1] - means[:, :, 0]) / spread
    np.testing.assert_allclose(drift, expected)
    effects = llama.mean_drift_effects({"random tokens": record})
    assert [e.cell for e in effects] == [
        {"input": "random tokens", "layer": 0},
        {"input": "random tokens", "layer": 1},
    ]
    # a negative drift is reflected: the size, with the same width
    negative = llama.drift_interval(np.array([-1.0, -1.2, -0.8]))
    positive = llama.drift_interval(np.array([1.0, 1.2, 0.8]))
    assert negative == positive and negative.mean == pytest.approx(1.0)
