import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lengthgen_lite.chapters import ch8_smollm2 as p6
from lengthgen_lite.runs.store import STORE, read_file, write_file
from tiny_models import causal_test_by_hand as hand_made
from tiny_models import llama_tokens as tokens
from tiny_models import tiny_llama

REF = 8  # the tiny tests' reference length (the chapter's is 64)
# the tiny tests' loss positions and reference
SMALL = dict(loss_positions=4, reference=REF)


@pytest.fixture(scope="module")
def tiny():
    """A tiny randomly initialised Llama (2 layers): the interventions without the
    real weights."""
    torch.manual_seed(0)
    return tiny_llama(attn_implementation="eager").eval()


def no_hooks_left(model):
    """None of the modules the interventions and recordings hook keeps a hook
    (transformers installs hooks of its own elsewhere, to capture attentions)."""
    hooked = [model.model.norm]
    for layer in model.model.layers:
        hooked += [layer.self_attn.q_proj, layer.self_attn.o_proj]
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in hooked)


def test_logn_factors_are_one_up_to_the_reference_then_log_n_over_log_ref():
    f = p6.logn_factors(512, 64)
    assert f.shape == (512,)
    assert (f[:64] == 1).all()  # n = 1..64: the plain model
    assert f[63] == 1  # n = 64: identity
    assert f[-1].item() == pytest.approx(math.log(512) / math.log(64))  # 1.5
    assert f[127].item() == pytest.approx(7 / 6)  # n = 128


def plain_logits(model, t):
    with torch.no_grad():
        return model(input_ids=t).logits


def test_logn_scaling_is_the_identity_up_to_the_reference(tiny):
    t = tokens(length=REF)
    with p6.logn_scaling(tiny, [0, 1], reference=REF):
        scaled = plain_logits(tiny, t)
    torch.testing.assert_close(scaled, plain_logits(tiny, t))
    assert no_hooks_left(tiny)


def test_logn_scaling_multiplies_the_chosen_layers_logits(tiny):
    """Eager attention's weights are softmax(logits): log-weights centred over the
    visible keys are the centred logits, so they scale by the factor exactly."""
    t = tokens(n=2, length=24)
    with torch.no_grad():
        plain = tiny(input_ids=t, output_attentions=True).attentions
        with p6.logn_scaling(tiny, [1], reference=REF):
            scaled = tiny(input_ids=t, output_attentions=True).attentions
    factors = p6.logn_factors(24, REF)
    torch.testing.assert_close(scaled[0], plain[0])  # layer 0 untouched
    for p in (5, REF - 1, 15, 23):  # queries seeing p + 1 keys
        a, b = plain[1][..., p, : p + 1].log(), scaled[1][..., p, : p + 1].log()
        a, b = a - a.mean(-1, keepdim=True), b - b.mean(-1, keepdim=True)
        torch.testing.assert_close(b, factors[p] * a, rtol=1e-4, atol=1e-5)
    assert no_hooks_left(tiny)


def test_condition_none_is_the_plain_models_loss(tiny):
    t = tokens(length=24)
    run = p6.next_token_loss(tiny, t, "none", loss_positions=5, reference=REF)
    logits = plain_logits(tiny, t)[:, -6:-1]
    expected = F.cross_entropy(
        logits.transpose(1, 2), t[:, -5:], reduction="none"
    ).mean(1)
    np.testing.assert_allclose(run.loss, expected.numpy(), rtol=1e-5)
    assert run.sink.shape == (2,) and run.layer0.shape == (5, 24, 32)
    assert no_hooks_left(tiny)


def test_length_bands_double_from_the_reference_to_the_length():
    assert p6.length_bands(512, 64) == (64, 128, 256, 512)
    assert p6.length_bands(24, 8) == (8, 16, 24)
    assert p6.length_bands(9, 8) == (8, 9)


def test_std_restoration_gives_every_band_the_reference_std(tiny):
    t = tokens(n=6, length=24)
    plain = p6.next_token_loss(tiny, t, "none", loss_positions=4, reference=REF)
    spread = p6.layer0_spread(plain.layer0, reference=REF)
    assert spread.ends == (8, 16, 24) and spread.std.shape == (3, 32)
    assert (spread.ratio[0] == 1).all()
    restored = p6.next_token_loss(
        tiny, t, "std", spread=spread, loss_positions=4, reference=REF
    )
    after = p6.layer0_spread(restored.layer0, reference=REF)
    for band in range(3):
        torch.testing.assert_close(after.std[band], spread.std[0], rtol=1e-4, atol=0)
        torch.testing.assert_close(after.mean[band], spread.mean[band])
    # up to the reference length, layer 0's output is the plain model's
    torch.testing.assert_close(restored.layer0[:, :REF], plain.layer0[:, :REF])
    assert not np.allclose(restored.loss, plain.loss)
    assert no_hooks_left(tiny)


def test_early_sink_free_stops_at_the_first_sink_on_any_input():
    sinks = {
        "text": np.array([0.01, 0.02, 0.3, 0.01]),
        "random": np.array([0.0, 0.01, 0.0, 0.0]),
    }
    assert p6.early_sink_free(sinks) == (0, 1)  # layer 3 is sink-free but late
    sinks["random"][1] = 0.06
    assert p6.early_sink_free(sinks) == (0,)
    assert p6.early_sink_free({"a": np.zeros(3)}) == (0, 1, 2)
    assert p6.early_sink_free({"a": np.array([0.5, 0.0])}) == ()


def test_causal_test_and_its_decisions_on_a_tiny_model(tiny):
    """The chapter's defaults (windows of more than 64 tokens) on a tiny model:
    random weights spread attention, so no layer has a sink."""
    inputs = {kind: tokens(n=3, length=80, seed=i) for i, kind in enumerate(p6.INPUTS)}
    test = p6.causal_test(tiny, inputs)
    assert test.layers == (0, 1) and test.ends == (64, 80)
    assert set(test.losses) == {(k, c) for k in p6.INPUTS for c in p6.CONDITIONS}
    assert test.inputs == p6.INPUTS and test.windows("random tokens") == 3
    assert test.change("natural text", "none") == pytest.approx(np.zeros(3))
    for kind in p6.INPUTS:
        assert test.ratio[kind][0] == 1 and test.ratio[kind].shape == (2,)
        assert (
            test.restored_gap[kind].max() < 1e-4
        )  # the restored std is the reference's
    decisions = p6.p6_decisions(test)
    assert list(decisions) == [c.key for c in p6.P6_CLAIMS]
    for claim in p6.P6_CLAIMS:
        assert decisions[claim.key].final[0].cell == {"input": "natural text"}
    assert set(p6.control_words(test)) == {"logn", "std"}
    # stored and read back: the same numbers, the same decisions
    back = p6.CausalTest.from_dict(json.loads(json.dumps(test.to_dict())))
    for key, loss in test.losses.items():
        np.testing.assert_array_equal(back.losses[key], loss)
    assert (back.layers, back.ends, back.inputs) == (
        test.layers,
        test.ends,
        test.inputs,
    )
    for kind in p6.INPUTS:
        np.testing.assert_array_equal(back.sinks[kind], test.sinks[kind])
        np.testing.assert_array_equal(back.ratio[kind], test.ratio[kind])
    again = p6.p6_decisions(back)
    assert [d.number for d in again.values()] == [d.number for d in decisions.values()]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.pop("ratio"), "a causal test has fields"),
        (lambda d: d.update(inputs=[]), "inputs must be a list of distinct names"),
        (lambda d: d["losses"].pop("random tokens"), "losses lacks the input"),
        (lambda d: d["losses"]["natural text"].pop("std"), "must hold the conditions"),
        (
            lambda d: d["losses"]["natural text"]["logn"].pop(),
            "the same windows \\(at least 2\\) under every condition",
        ),
        (
            lambda d: d["losses"]["natural text"]["none"].__setitem__(0, "2.4"),
            "losses\\['natural text'\\]\\['none'\\] must be a list of finite",
        ),
        (
            lambda d: d.update(layers=[0, 1.5]),
            "layers must be a non-empty list of ints",
        ),
        (lambda d: d["ratio"]["random tokens"].pop(), "ratio must hold 4 values"),
        (lambda d: d["sinks"].pop("natural text"), "sinks lacks the input"),
    ],
)
def test_a_malformed_stored_test_raises_naming_what_is_wrong(change, message):
    data = hand_made(4).to_dict()
    change(data)
    with pytest.raises(ValueError, match=message):
        p6.CausalTest.from_dict(data)


def test_the_stored_test_round_trips_through_its_file(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="run: lengthgen-lite smollm2"):
        p6.load_reference(tmp_path)
    monkeypatch.setattr(p6, "smollm2_causal_test", lambda n: hand_made(n))
    path = p6.store_reference(tmp_path, command="test")
    assert path == tmp_path / "ch8__smollm2" / "causal_test.json.gz"
    back, made = p6.load_reference(tmp_path), hand_made()
    for key, loss in made.losses.items():
        np.testing.assert_array_equal(back.losses[key], loss)  # bit for bit
    # a file made with other settings is stale: named, with the command that re-makes it
    data = read_file(path)
    data["settings"]["window"] = 256
    write_file(path, data)
    with pytest.raises(ValueError, match="other settings.*lengthgen-lite smollm2"):
        p6.load_reference(tmp_path)
    path.write_bytes(path.read_bytes()[:100])  # cut short
    with pytest.raises(ValueError, match="is damaged.*re-make it: lengthgen-lite"):
        p6.load_reference(tmp_path)


def test_the_stored_test_decides_no_effect_on_text():
    """The committed file (lengthgen-lite smollm2): P6's verdicts as the chapter
    states them, read from the file alone."""
    test = p6.load_reference()
    assert test.inputs == p6.INPUTS and test.windows("natural text") == p6.N_WINDOWS
    assert test.layers == (0, 1, 2)
    assert max(test.restored_gap[k].max() for k in p6.INPUTS) < 1e-3
    decisions = p6.p6_decisions(test)
    assert [d.word for d in decisions.values()] == ["no effect", "no effect"]
    assert p6.control_words(test)["std"] == "equivalent"
    stored = read_file(STORE / p6.REFERENCE_FILE)["provenance"]
    assert stored["cpu_seconds"] > 0 and stored["command"] == "lengthgen-lite smollm2"


@pytest.mark.parametrize("n", [1, 21, 2.0, True])
def test_the_window_count_is_checked_before_loading_anything(n):
    with pytest.raises(ValueError, match="n_windows must be an integer between 2 and"):
        p6.smollm2_windows(None, None, n)
    with pytest.raises(ValueError, match="n_windows must be an integer between 2 and"):
        p6.smollm2_causal_test(n)


def test_claims_are_declared_with_their_sesoi():
    for claim in p6.P6_CLAIMS:
        assert claim.key.startswith("ch8-score-") and claim.sesoi == 0.05
        assert claim.test == "difference" and claim.replicates == "windows"


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda m: p6.next_token_loss(m, tokens(), "sharpen", **SMALL),
            "allowed: 'none', 'logn', 'std'",
        ),
        (
            lambda m: p6.next_token_loss(m, tokens(length=8), "none", **SMALL),
            "longer than the reference",
        ),
        (
            lambda m: p6.next_token_loss(
                m, tokens(length=12), "none", loss_positions=12, reference=REF
            ),
            "than the loss positions",
        ),
        (
            lambda m: p6.next_token_loss(m, tokens().float(), "none", **SMALL),
            "long",
        ),
        (
            lambda m: p6.next_token_loss(m, tokens(), "std", **SMALL),
            "needs a spread",
        ),
        (
            lambda m: p6.next_token_loss(m, tokens(), "logn", **SMALL),
            "layers is empty",
        ),
        (
            lambda m: p6.next_token_loss(m, tokens(), "logn", layers=[2], **SMALL),
            "ints in 0..1",
        ),
        (lambda m: p6.logn_factors(10, reference=1), "reference"),
        (lambda m: p6.length_bands(8, 8), "length must be an integer >= 9"),
        (lambda m: p6.layer0_spread(torch.zeros(1, 24, 4), REF), "at least 2"),
        (lambda m: p6.early_sink_free({}), "sinks is empty"),
        (lambda m: p6.causal_test(m, {}), "inputs is empty"),
        (
            lambda m: p6.causal_test(m, {"text": tokens(n=2, length=24)}),
            "longer than the reference",
        ),
    ],
)
def test_bad_input_raises_saying_what_is_allowed(tiny, call, message):
    with pytest.raises(ValueError, match=message):
        call(tiny)
    assert no_hooks_left(tiny)


def test_a_window_longer_than_the_spread_raises(tiny):
    spread = p6.layer0_spread(torch.randn(3, 16, 32), reference=REF)
    with pytest.raises(ValueError, match="at most 16"):
        p6.next_token_loss(tiny, tokens(length=24), "std", spread=spread, **SMALL)
    assert no_hooks_left(tiny)
