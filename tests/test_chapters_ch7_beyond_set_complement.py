import numpy as np
import pytest

from lengthgen_lite.chapters import ch7_beyond_set_complement as ch7
from lengthgen_lite.chapters.ch7_beyond_set_complement import (
    GAME_PLACEMENTS,
    TASKS,
    full_length_example,
    make_test_batch,
    predictions,
    task_setup,
)
from lengthgen_lite.core.evaluation import CURVE_FIELDS
from lengthgen_lite.core.model import ModelConfig, Transformer
from lengthgen_lite.core.seeding import seed_everything
from lengthgen_lite.runs import run
from lengthgen_lite.runs.claims import VERDICTS


@pytest.fixture(scope="module")
def tiny():
    """The chapter's spec on 2 seeds, 3 steps, 40 test sequences: every
    configuration."""
    return run(
        ch7.SPECS["ch7/placements"].with_overrides(seeds=[0, 1], steps=3, n_test=40),
        progress=False,
    )


def test_every_task_has_a_setup_with_test_lengths_past_training():
    for task in TASKS:
        setup = task_setup(task)
        assert setup.test_length >= 2 * setup.train_length
        assert setup.task.train_sizes() == (setup.train_length,)


def test_the_spec_is_the_chapters_table():
    configs = ch7.SPECS["ch7/placements"].configurations()
    assert len(configs) == 4 * (2 + 2 + 1 + 1)  # placements x (task, target kind)
    for config in configs:
        setup = task_setup(config.task)
        assert (config.d_model, config.steps, config.batch) == (
            setup.d_model,
            setup.steps,
            64,
        )
        got = config.setup()
        assert (got.train_length, got.test_length) == (
            setup.train_length,
            setup.test_length,
        )
        assert config.train_config().warmup == 50


def test_results_shapes_on_a_tiny_run(tiny):
    game = tiny.curves(
        "tv", task="tictactoe", targets="sampled", norm="attn_out", variant="ema"
    )
    assert game.shape == (2, 16) and tiny.curves(
        "tv", task="anbn", targets="soft", norm="none"
    ).shape == (2, 48)
    share = tiny.curves("share_single", task="tictactoe", targets="soft", norm="none")[
        0
    ]
    assert share[0] == 0 and share[-1] == 1  # board full: END only
    assert set(CURVE_FIELDS) <= set(tiny.metrics)
    assert tiny.result(task="tictactoe", targets="soft", norm="pre").loss.shape == (
        3,
        2,
    )


def test_readers_and_scorecard(tiny):
    values = ch7.per_seed(tiny, "tv_beyond", "anbn", "soft", "post", "ema")
    np.testing.assert_allclose(
        values,
        tiny.curves("tv", task="anbn", targets="soft", norm="post", variant="ema")[
            :, 16:
        ].mean(1),
    )
    assert set(ch7.curves(tiny, "tictactoe", "soft", "tv")) == set(GAME_PLACEMENTS)
    gains = ch7.ema_gains(tiny)
    assert len(gains) == 2 * 2 * 4 and gains["anbn", "sampled", "pre"].shape == (2,)
    decisions = ch7.scorecard(tiny)
    assert [d.claim for d in decisions] == [
        ch7.GAME_CLAIM,
        ch7.GAME_EMA_CLAIM,
        ch7.LANGUAGES_CLAIM,
    ]
    assert all(d.word in VERDICTS and d.tier == "live" for d in decisions)
    assert "2 cells x 2 seeds, 3 steps" in decisions[0].number
    game, ema, languages = (d.final for d in decisions)
    assert [e.cell["pair"] for e in game] == ["none - post", "post - attn_out"]
    np.testing.assert_allclose(
        game[0].interval.mean,
        (
            ch7.per_seed(tiny, "tv_beyond", "tictactoe", "sampled", "none")
            - ch7.per_seed(tiny, "tv_beyond", "tictactoe", "sampled", "post")
        ).mean(),
    )
    assert [e.cell["norm"] for e in ema] == list(GAME_PLACEMENTS)
    np.testing.assert_allclose(
        ema[3].interval.mean, gains["tictactoe", "sampled", "attn_out"].mean()
    )
    assert languages[0].cell == {
        "pair": "none - post",
        "targets": "soft",
        "init": "book",
    }
    assert ch7.steps_of(tiny, "anbn") == 3
    with pytest.raises(ValueError, match="task 'chess'"):
        ch7.steps_of(tiny, "chess")
    assert ch7.tv_text(tiny, "anbn", "soft").startswith("none ")


def test_predictions_and_full_length_example():
    setup = task_setup("tictactoe")
    batch = make_test_batch(setup, n_sequences=200)
    index = full_length_example(batch)
    assert batch.loss_mask[index].all()
    seed_everything(0)
    model = Transformer(
        ModelConfig(
            vocab_size=setup.task.vocab_size, n_outputs=setup.task.n_outputs, d_model=8
        )
    )
    probs = predictions([model, model], batch.inputs[index])
    assert probs.shape == (2, 16, 17)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="one sequence"):
        predictions([model], batch.inputs)
    with pytest.raises(ValueError, match="no sequence in the batch runs"):
        full_length_example(make_test_batch(task_setup("anbn"), n_sequences=1))


def test_bad_input_raises():
    with pytest.raises(ValueError, match="task name='chess' is unknown"):
        task_setup("chess")
    assert GAME_PLACEMENTS == ("none", "pre", "post", "attn_out")
