import numpy as np
import pytest
import torch

from lengthgen_lite.chapters.ch7_beyond_set_complement import (
    CURVE_FIELDS,
    PLACEMENTS,
    TASKS,
    RunSpec,
    evaluate_lengths,
    full_length_example,
    make_test_batch,
    predictions,
    run_spec,
    seed_values,
    summary_rows,
    task_setup,
)
from lengthgen_lite.core.model import ModelConfig, Transformer
from lengthgen_lite.core.seeding import seed_everything


@pytest.fixture(scope="module")
def tiny_runs():
    return [run_spec(RunSpec(task, "attn_out", "sampled"), seeds=[0, 1], steps=3, n_test=40, progress=False) for task in ("tictactoe", "anbn")]


def test_every_task_has_a_setup_with_test_lengths_past_training():
    for task in TASKS:
        setup = task_setup(task)
        assert setup.test_length >= 2 * setup.train_length
        assert setup.task.train_sizes() == (setup.train_length,)


def test_run_shapes_on_a_tiny_config(tiny_runs):
    game, language = tiny_runs
    assert game.result.loss.shape == (3, 2) and set(game.curves) == {"raw", "ema"}
    curves = game.curves["ema"]
    assert list(curves.s) == list(range(1, 17)) and curves.share_single.shape == (16,)
    for field in CURVE_FIELDS:
        assert getattr(curves, field).shape == (2, 16)
    assert language.curves["raw"].tv.shape == (2, 48)
    assert game.mean("tv", "ema", "train").shape == (2,)
    assert curves.share_single[0] == 0 and curves.share_single[-1] == 1  # board full: END only


def test_summary_rows_and_seed_values(tiny_runs):
    rows = summary_rows(tiny_runs)
    assert len(rows) == 2 * 2 * 2  # runs x variants x seeds
    got = seed_values(rows, "tv_beyond", task="anbn", variant="ema")
    np.testing.assert_allclose(got, tiny_runs[1].mean("tv", "ema", "beyond"))
    with pytest.raises(ValueError, match="no row matches"):
        seed_values(rows, "tv_beyond", task="unlock")
    with pytest.raises(ValueError, match="column 'tv' is unknown"):
        seed_values(rows, "tv", task="anbn")


def test_evaluation_of_a_perfect_predictor_is_zero():
    """Logits that are 0 on legal and -inf-like on illegal outputs give TV 0 and invalid mass 0."""
    setup = task_setup("norepeat")
    batch = make_test_batch(setup, n_sequences=20)

    class Oracle(Transformer):  # a Transformer whose output is replaced by the exact target
        def forward(self, tokens):
            super().forward(tokens)  # records the attention pattern
            return torch.where(batch.targets > 0, 0.0, -1e4)

    seed_everything(0)
    oracle = Oracle(ModelConfig(vocab_size=setup.task.vocab_size, d_model=8))
    curves = evaluate_lengths([oracle], batch)
    assert np.nanmax(curves.tv) < 1e-6 and np.nanmax(curves.invalid_mass) < 1e-6
    assert np.nanmin(curves.logit_gap) > 1e3


def test_predictions_and_full_length_example():
    setup = task_setup("tictactoe")
    batch = make_test_batch(setup, n_sequences=200)
    index = full_length_example(batch)
    assert batch.loss_mask[index].all()
    seed_everything(0)
    model = Transformer(ModelConfig(vocab_size=setup.task.vocab_size, n_outputs=setup.task.n_outputs, d_model=8))
    probs = predictions([model, model], batch.inputs[index])
    assert probs.shape == (2, 16, 17)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="one sequence"):
        predictions([model], batch.inputs)
    with pytest.raises(ValueError, match="no sequence in the batch runs"):
        full_length_example(make_test_batch(task_setup("anbn"), n_sequences=1))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(task="othello"), "task='othello' is unknown"),
        (dict(norm="pre_final"), "not one of this chapter's placements"),
        (dict(targets="hard"), "targets='hard' is unknown"),
    ],
)
def test_bad_specs_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RunSpec(**kwargs)


def test_bad_runner_input_raises(tiny_runs):
    with pytest.raises(ValueError, match="task name='chess' is unknown"):
        task_setup("chess")
    with pytest.raises(ValueError, match="steps must be a positive int"):
        run_spec(RunSpec(), seeds=[0], steps=0, progress=False)
    with pytest.raises(ValueError, match="variant 'bema' is unknown"):
        tiny_runs[0].mean("tv", "bema")
    with pytest.raises(ValueError, match="field 'kl' is unknown"):
        tiny_runs[0].mean("kl")
    with pytest.raises(ValueError, match="lengths='all' is unknown"):
        tiny_runs[0].mean("tv", lengths="all")
    with pytest.raises(ValueError, match="models must hold"):
        evaluate_lengths([], make_test_batch(task_setup("anbn"), n_sequences=2))
    with pytest.raises(ValueError, match="runs must hold"):
        summary_rows([])
    assert PLACEMENTS == ("none", "pre", "post", "attn_out")
