import numpy as np
import pytest

from lengthgen_lite.chapters import ch8_smollm2 as p6
from lengthgen_lite.viz import ch8_two_kinds as viz


def hand_made_test():
    """Five windows per input: log-N scaling adds 0.2 nats to every window, std
    restoration changes nothing."""
    base = {"natural text": np.linspace(2.0, 3.0, 5), "random tokens": np.full(5, 11.0)}
    shift = {"none": 0.0, "logn": 0.2, "std": 0.0}
    losses = {(k, c): base[k] + shift[c] for k in p6.INPUTS for c in p6.CONDITIONS}
    per_input = {k: np.zeros(2) for k in p6.INPUTS}
    return p6.CausalTest(losses, per_input, (0,), (64, 512), per_input, per_input)


def test_causal_test_figure_draws_losses_and_paired_changes():
    test = hand_made_test()
    fig = viz.plot_causal_test(test, title="P6")
    text, random, change = fig.axes
    assert text.get_title() == "natural text" and random.get_title() == "random tokens"
    # five window lines and the mean per input panel
    assert len(text.get_lines()) == 6
    np.testing.assert_allclose(text.get_lines()[-1].get_ydata(), [2.5, 2.7, 2.5])
    assert len(change.get_xticklabels()) == 4 and len(change.containers) == 4
    # log-N's interval on text: every window -0.2, so a zero-width interval
    assert change.containers[0].lines[0].get_ydata()[0] == pytest.approx(-0.2)


def test_depth_figure_draws_each_placement_it_has_per_position_kind():
    from lengthgen_lite.chapters import ch8_two_kinds as ch8
    from lengthgen_lite.runs import run

    spec = ch8.SPECS["ch8/depth"].with_overrides(steps=5, seeds=2)
    depth = run(spec, progress=False)
    fig = viz.plot_depth(depth, train_length=8, title="P5")
    nope, rope = fig.axes[:2]
    assert nope.get_title() == viz.POSITION_NAMES["none"]
    assert rope.get_title() == viz.POSITION_NAMES["rope"]
    labels = {
        ax: [line.get_label() for line in ax.get_lines() if line.get_label()[0] != "_"]
        for ax in (nope, rope)
    }
    assert labels[nope] == ["pre_final", "post"] and labels[rope] == ["post"]
    # the mean curve of NoPE post is the mean over seeds of its TV per length
    expected = ch8.depth_curves(depth, "tv", "none")["post"].mean(axis=0)
    means = [
        line.get_ydata() for line in nope.get_lines() if line.get_label() == "post"
    ]
    np.testing.assert_allclose(means[0], expected)
