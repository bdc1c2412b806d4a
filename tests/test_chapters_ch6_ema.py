import numpy as np
import pytest
import torch

from lengthgen_lite.chapters import ch6_ema as ch6
from lengthgen_lite.chapters import ch6_noise as ch6n
from lengthgen_lite.chapters import ch6_runs as ch6r
from lengthgen_lite.chapters import ch6_search as ch6s
from lengthgen_lite.chapters.ch6_ema import scaling_matches, tv_by_logit_scale
from lengthgen_lite.chapters.ch6_noise import (
    flat_gradient,
    gradient_noise,
    minibatch_gradients,
    resampled_target_gradients,
)
from lengthgen_lite.chapters.ch6_search import SearchSpace, sample_specs, score_rows
from lengthgen_lite.core.evaluation import evaluate_set_complement
from lengthgen_lite.core.model import ModelConfig, Transformer, init_model
from lengthgen_lite.core.seeding import make_generator, seed_everything
from lengthgen_lite.core.tasks import SetComplement, sample_next_tokens
from lengthgen_lite.core.training import TrainConfig, train, training_loss
from lengthgen_lite.runs import Spec
from lengthgen_lite.runs import run as run_spec_data
from lengthgen_lite.runs.claims import VERDICTS
from lengthgen_lite.runs.stats import factor_importance
from lengthgen_lite.viz import ch6_numbers as numbers6

TINY = Spec(
    name="tiny/ch6",
    base={
        **ch6.BASELINE,
        "norm": "attn_out",
        "lr": 1e-2,
        "batch": 16,
        "targets": "sampled",
        "steps": 30,
    },
    seeds=(0, 1),
    averagers={"ema": {"beta": 0.9}},
    scales=(0.5, 1.0, 2.0),
    n_test=100,
)


@pytest.fixture(scope="module")
def run():
    return ch6r.runs_of(run_spec_data(TINY, progress=False))[0]


def test_run_scores_every_variant_at_every_scale(run):
    assert set(run.tv) == {"raw", "ema"}
    assert run.tv["raw"].shape == (2, 3, 15)  # K, scales, v - 1 (the baseline's v = 16)
    np.testing.assert_array_equal(run.curve("raw"), run.tv["raw"][:, 1])
    np.testing.assert_allclose(
        run.mean_tv("ema", "train"), run.tv["ema"][:, 1, :4].mean(-1)
    )
    np.testing.assert_allclose(
        run.mean_tv("ema", "beyond", 2.0), run.tv["ema"][:, 2, 4:].mean(-1)
    )
    assert run.scale_curve("raw", "beyond").shape == (2, 3)
    assert run.result.models[0].cfg.resid_dropout == 0.0


def test_specs_are_chapter_one_baseline_with_one_change(run):
    grid = ch6.SPECS["ch6/grid"]
    assert (
        len(grid.configurations()) == 8
        and grid.scales == ch6.SCALES
        and set(grid.averagers) == {"ema", "bema"}
    )
    assert ch6r.by_config(run.results, keys=("norm",)).keys() == {"attn_out"}
    search = ch6.SPECS["ch6/search"].configurations()
    assert [(c.norm, c.lr, c.batch, c.resid_dropout) for c in search] == [
        (c.norm, c.lr, c.batch, c.resid_dropout) for c in sample_specs(16, 6)
    ]


def test_score_rows_flatten_runs(run):
    rows = score_rows([run])
    assert len(rows) == 2 * 2  # variants x seeds
    assert {r["variant"] for r in rows} == {"raw", "ema"}
    assert {
        "norm",
        "lr",
        "batch",
        "dropout",
        "targets",
        "run",
        "seed",
        "ema",
        "tv_train",
        "tv_beyond",
    } <= set(rows[0])
    assert {r["run"] for r in rows} == {0} and {r["ema"] for r in rows} == {True, False}
    raw0 = next(r for r in rows if r["variant"] == "raw" and r["seed"] == 0)
    assert raw0["tv_train"] == pytest.approx(float(run.mean_tv("raw", "train")[0]))


def test_run_rejects_bad_arguments(run):
    with pytest.raises(ValueError, match="variant"):
        run.curve("bema")
    with pytest.raises(ValueError, match="variant"):
        run.scale_curve("bema", "train")
    with pytest.raises(ValueError, match="scale"):
        run.curve("raw", 3.0)
    with pytest.raises(ValueError, match="lengths"):
        run.mean_tv("raw", "long")  # type: ignore[arg-type]


def test_sample_specs_is_reproducible_balanced_and_in_range():
    space = SearchSpace()
    a, b = sample_specs(12, 3), sample_specs(12, 3)
    assert a == b and a != sample_specs(12, 4)
    norms = [s.norm for s in a]
    assert all(norms.count(n) in (2, 3) for n in space.norm)
    assert all(
        1e-3 <= s.lr <= 3e-2 + 1e-12
        and s.batch in space.batch
        and 0 <= s.resid_dropout <= 0.3
        for s in a
    )
    assert all(s.targets == "sampled" for s in a)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lr": (1e-2, 1e-3)},
        {"lr": (0.0, 1e-2)},
        {"dropout": (0.2, 0.1)},
        {"dropout": (0.0, 1.0)},
        {"batch": ()},
        {"norm": ()},
    ],
)
def test_search_space_rejects_bad_ranges(kwargs):
    with pytest.raises(ValueError):
        SearchSpace(**kwargs)


def test_sample_specs_rejects_bad_n():
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="n must be an integer >= 1"):
            sample_specs(bad, 0)  # type: ignore[arg-type]


def test_factor_importance_finds_the_factor_that_matters():
    rng = np.random.default_rng(0)
    rows = [
        {
            "a": str(rng.choice(["x", "y", "z"])),
            "b": float(rng.uniform(1, 10)),
            "c": float(rng.normal()),
        }
        for _ in range(200)
    ]
    for r in rows:
        r["y"] = (
            {"x": 0.0, "y": 1.0, "z": 2.0}[r["a"]]
            + 0.5 * np.log10(r["b"])
            + 0.01 * rng.normal()
        )
    fit = factor_importance(rows, "y", {"a": "categorical", "b": "log", "c": "numeric"})
    imp = fit.importance
    assert imp["a"] > imp["b"] > 0.01 > imp["c"]
    assert fit.r_squared > 0.99
    # relative to level "x"
    assert fit.effects["a"] == pytest.approx({"y": 1.0, "z": 2.0}, abs=0.01)
    assert fit.effects["b"]["slope"] == pytest.approx(0.5, abs=0.01)
    with pytest.raises(ValueError, match="kind"):
        factor_importance(rows, "y", {"a": "ordinal"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="missing"):
        factor_importance(rows, "y", {"d": "numeric"})
    with pytest.raises(ValueError, match="at least one row"):
        factor_importance([], "y", {"a": "categorical"})


def test_dropout_effect_is_minus_the_rate_times_the_fitted_slope():
    rows, noise = [], (0.004, -0.003, 0.002, -0.004, 0.001, 0.0)
    for run, dropout in enumerate((0.0, 0.05, 0.1, 0.2, 0.25, 0.3)):
        norm = ("none", "attn_out")[run % 2]
        tv = 0.5 + 0.1 * dropout - 0.2 * (norm == "attn_out") + noise[run]
        for seed in (0, 1):
            for ema in (False, True):
                row = {"run": run, "seed": seed, "ema": ema, "norm": norm}
                rows.append(row | {"dropout": dropout, "tv_beyond": tv - 0.5 * ema})
    factors = {"norm": "categorical", "dropout": "numeric", "ema": "categorical"}
    effect = ch6s.dropout_effect(rows, 400, factors)
    assert effect.cell == {"remedy": "resid_dropout 0.3"} and effect.step == 400
    # the raw rows' run means on norm and dropout: 6 runs, 3 coefficients
    assert effect.interval.n == 6 and effect.interval.df == 3
    assert effect.interval.mean == pytest.approx(-0.3 * 0.1, abs=0.01)
    assert effect.interval.low < effect.interval.mean < effect.interval.high
    with pytest.raises(ValueError, match="cannot fit"):
        ch6s.dropout_effect(rows[:8], 400, factors)


TASK = SetComplement(v=8, train_length=3)


MODEL = ModelConfig(vocab_size=8, d_model=16)


def fresh_model(seed=0):
    return init_model(MODEL, seed)  # the start train uses for seed `seed`


def test_training_loss_is_the_loss_train_reports():
    """Reproduce train's first step: same init, same data stream, same sampled
    targets."""
    cfg = TrainConfig(steps=1, warmup=0, batch=16, targets="sampled")
    reported = train(MODEL, TASK, cfg, seeds=[3], progress=False).loss[0, 0]
    model, stream = fresh_model(3), make_generator(2 * 3 + 1)
    batch = TASK.sample_train_batch(16, 3, stream)
    targets = torch.nn.functional.one_hot(
        sample_next_tokens(batch.targets, stream), 8
    ).float()
    with torch.no_grad():
        loss = training_loss(model(batch.inputs), targets, batch.loss_mask)
    assert float(loss) == pytest.approx(float(reported), rel=1e-5)


def test_expected_sampled_gradient_is_the_soft_gradient():
    model = fresh_model()
    batch = TASK.sample_train_batch(32, 3, make_generator(1))
    soft = flat_gradient(model, batch.inputs, batch.targets, batch.loss_mask)
    draws = resampled_target_gradients(model, batch, 400, seed=2)
    error = lambda n: float((draws[:n].mean(0) - soft).norm() / soft.norm())  # noqa: E731
    # shrinks like 1/sqrt(n): by 4x from 25 to 400 draws
    assert error(400) < 0.5 * error(25)
    assert error(400) < 0.1


def test_sampled_targets_are_noisier_with_the_same_signal():
    model = fresh_model()
    soft = gradient_noise(minibatch_gradients(model, TASK, 32, 40, "soft", seed=0))
    sampled = gradient_noise(
        minibatch_gradients(model, TASK, 32, 40, "sampled", seed=0)
    )
    assert sampled.trace_cov > 2 * soft.trace_cov
    assert sampled.mean_sq_norm == pytest.approx(soft.mean_sq_norm, rel=0.3)
    assert sampled.snr < soft.snr


def test_gradient_noise_on_known_samples():
    grads = torch.tensor([[1.0, 0.0], [3.0, 0.0], [2.0, 3.0], [2.0, -3.0]])
    noise = gradient_noise(grads)
    assert noise.trace_cov == pytest.approx((1 + 1 + 0 + 0 + 9 + 9) / 3)
    # ||mean||^2 = 4, minus the noise share tr(Cov)/n of the squared norm of a mean of n
    # samples
    assert noise.mean_sq_norm == pytest.approx(4.0 - (20 / 3) / 4)
    assert noise.snr == pytest.approx(noise.mean_sq_norm / noise.trace_cov)


def test_flat_gradient_has_one_entry_per_parameter_and_keeps_the_mode():
    model = fresh_model().train()
    batch = TASK.sample_train_batch(4, 3, make_generator(0))
    g = flat_gradient(model, batch.inputs, batch.targets, batch.loss_mask)
    assert g.shape == (sum(p.numel() for p in model.parameters()),)
    assert model.training


def test_bad_inputs_are_rejected():
    model = fresh_model()
    batch = TASK.sample_train_batch(4, 3, make_generator(0))
    with pytest.raises(ValueError, match="must match"):
        training_loss(torch.zeros(4, 3, 8), torch.zeros(4, 3, 7), batch.loss_mask)
    with pytest.raises(ValueError, match="must match"):
        training_loss(
            torch.zeros(4, 3, 8),
            torch.zeros(4, 3, 8),
            torch.ones(4, 2, dtype=torch.bool),
        )
    with pytest.raises(ValueError, match="n_batches must be an integer >= 2, got 1"):
        minibatch_gradients(model, TASK, 4, 1, "soft")
    with pytest.raises(ValueError, match="targets"):
        minibatch_gradients(model, TASK, 4, 2, "onehot")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_draws must be an integer >= 1, got 0"):
        resampled_target_gradients(model, batch, 0)
    with pytest.raises(ValueError, match="grads"):
        gradient_noise(torch.zeros(1, 5))
    with pytest.raises(ValueError, match="grads"):
        gradient_noise(torch.zeros(5))


def model(v=8):
    seed_everything(0)
    return Transformer(ModelConfig(vocab_size=v, d_model=16)).eval()


def test_rows_equal_evaluate_set_complement_at_each_scale():
    m = model()
    scales = [0.5, 1.0, 3.0]
    rows = tv_by_logit_scale(m, 8, scales, n_sequences=200, seed=4)
    assert rows.shape == (3, 7)
    for row, c in zip(rows, scales):
        expected = evaluate_set_complement(
            m, 8, n_sequences=200, seed=4, logit_scale=c
        ).tv
        np.testing.assert_allclose(row, expected, rtol=1e-5, atol=1e-6)


def test_scale_zero_limit_is_uniform_and_tv_changes_with_scale():
    rows = tv_by_logit_scale(model(), 8, [1e-6, 1.0], n_sequences=100)
    s = np.arange(1, 8)
    np.testing.assert_allclose(rows[0], s / 8, atol=1e-4)  # uniform over v: TV = s / v
    assert not np.allclose(rows[0], rows[1])


def test_scaling_matches():
    assert scaling_matches(
        np.array([0.1, 0.2]), np.array([0.5, 0.3]), train=0.2, beyond=0.3
    )
    assert not scaling_matches(
        np.array([0.1, 0.2]), np.array([0.5, 0.3]), train=0.15, beyond=0.3
    )


def test_bad_logit_scale_inputs_are_rejected():
    with pytest.raises(ValueError, match="scales"):
        tv_by_logit_scale(model(), 8, [])
    with pytest.raises(ValueError, match="scales"):
        tv_by_logit_scale(model(), 8, [1.0, -2.0])
    with pytest.raises(ValueError, match="matching 1-D"):
        scaling_matches(np.zeros(2), np.zeros(3), 0.1, 0.1)


def test_gain_is_raw_minus_averaged_tv_per_seed(run):
    gain = run.gain("beyond")
    assert gain.shape == (2,)
    np.testing.assert_allclose(
        gain, run.mean_tv("raw", "beyond") - run.mean_tv("ema", "beyond")
    )
    np.testing.assert_allclose(run.gain("train", "raw"), 0.0)  # raw against itself
    np.testing.assert_allclose(
        run.gain("train", scale=2.0),
        run.mean_tv("raw", "train", 2.0) - run.mean_tv("ema", "train", 2.0),
    )
    with pytest.raises(ValueError, match="variant 'bema' is unknown"):
        run.gain("train", "bema")
    with pytest.raises(ValueError, match="unknown lengths 'all'"):
        run.gain("all")


def test_scorecard_claims_from_a_tiny_grid():
    spec = ch6.SPECS["ch6/grid"].with_overrides(
        grid={"norm": ("none", "attn_out")},
        seeds=[0, 1],
        steps=20,
        scales=(0.5, 1.0),
        n_test=100,
    )
    grid = ch6r.by_config(run_spec_data(spec, progress=False))
    ema, bema = ch6.ema_claim(grid), ch6.bema_claim(grid)
    temperature = ch6.temperature_claim(grid)
    for decision, claim in (
        (ema, ch6.EMA_CLAIM),
        (bema, ch6.BEMA_CLAIM),
        (temperature, ch6.TEMPERATURE_CLAIM),
    ):
        assert decision.claim is claim and decision.tier == "live"
        assert decision.word in VERDICTS and len(decision.final) == 2
        assert "2 cells x 2 seeds, 20 steps" in decision.number
    assert ema.final[0].cell == {
        "averager": "ema",
        "norm": "none",
        "batch": 128,
        "lr": 3e-3,
    }
    run = grid["attn_out", 128, 3e-3]
    np.testing.assert_allclose(
        ema.final[1].interval.mean, run.gain("beyond").mean(), atol=1e-12
    )
    np.testing.assert_allclose(
        temperature.final[1].interval.mean, ch6.best_scale_gap(run).mean(), atol=1e-12
    )
    assert "at s <= 4 EMA helps in" in ema.number
    assert "/4 models" in temperature.number


def test_search_claim_from_a_tiny_search():
    configs = [
        {"norm": norm, "lr": lr, "batch": 16, "resid_dropout": p, "targets": "sampled"}
        for norm, lr, p in (
            ("none", 1e-3, 0.0),
            ("attn_out", 3e-3, 0.1),
            ("none", 1e-2, 0.2),
            ("attn_out", 1e-3, 0.3),
            ("none", 3e-3, 0.3),
        )
    ]
    spec = ch6.SPECS["ch6/search"].with_overrides(
        configs=configs, steps=10, n_test=50, seeds=[0, 1]
    )
    search = ch6r.runs_of(run_spec_data(spec, progress=False))
    rows = ch6s.score_rows(search)
    factors = {"norm": "categorical", "lr": "log", "dropout": "numeric"}
    decision = ch6s.search_claim(search, rows, factors)
    assert decision.claim is ch6s.SEARCH_CLAIM and len(decision.final) == 6
    assert [e.cell["remedy"] for e in decision.final] == ["ema"] * 5 + [
        "resid_dropout 0.3"
    ]
    assert decision.final[0].cell["run"] == 0 and decision.word in VERDICTS
    np.testing.assert_allclose(
        decision.final[2].interval.mean, search[2].gain("beyond").mean(), atol=1e-12
    )
    assert "5 random runs x EMA off/on" in decision.number
    pooled = ch6s.ema_pooled(ch6s.search_ema_effects(search, "train"))
    assert pooled.low < pooled.mean < pooled.high and pooled.n == 10


def test_numbers_and_controls_from_a_tiny_grid():
    spec = ch6.SPECS["ch6/grid"].with_overrides(
        seeds=[0, 1], steps=20, scales=(0.5, 1.0), n_test=100
    )
    grid = ch6r.by_config(run_spec_data(spec, progress=False))
    beyond = numbers6.beyond_gains(grid)
    assert set(beyond) == {"none", "attn_out"} and beyond["none"].shape == (4,)
    numbers = numbers6.ema_numbers(grid)
    assert numbers["n_models"] == 16 and numbers["n_configs"] == 8
    assert isinstance(numbers["n_seeds_norm"], int)
    assert numbers6.bema_minus_ema(grid).shape == (8,)
    lr_effects = ch6.bema_lr_effects(grid)
    assert [e.cell for e in lr_effects][1] == {"norm": "none", "batch": 128}
    assert len(ch6.bema_versus_ema(grid)) == 8
    assert set(numbers6.bema_numbers(grid)) == {
        "bema_train_gap_min",
        "bema_helps_beyond",
        "bema_lr_effect_attn_min",
        "bema_lr_effect_none_max",
        "bema_worst_beyond",
    }
    control = ch6.temperature_control(grid)
    assert len(control.matched) == len(control.raw_best_c_train) == 16
    assert control.best_gap["attn_out"].shape == (8,)
    assert all(c in (0.5, 1.0) for c in control.ema_best_c_train)
    reference = grid["attn_out", 128, 3e-3]
    assert numbers6.temperature_numbers(control, reference)["n_models_control"] == 16
    sampled = {norm: grid[norm, 128, 3e-3] for norm in ("none", "attn_out")}
    gains = ch6r.mean_gains(sampled)
    assert gains["none"]["train"] == sampled["none"].gain("train").mean()
    assert "soft_gain_train_max" in numbers6.soft_numbers(sampled, sampled)


def test_noise_table_and_its_numbers():
    model = fresh_model()
    models = {"at init": model, "after training": model}
    rows = ch6n.noise_table(models, TASK, batches=(8, 128), n_batches=4)
    assert len(rows) == 8 and set(rows[0]) == {
        "where",
        "batch",
        "targets",
        "trace_cov",
        "signal",
        "snr",
    }
    numbers = numbers6.noise_numbers(rows)
    # the same model twice: nothing drops with training
    assert numbers["soft_noise_drop"] == 1 and numbers["sampled_noise_drop"] == 1.0
    assert numbers["noise_ratio_trained"] == round(
        rows[-1]["trace_cov"] / rows[-2]["trace_cov"]
    )


def test_resampling_error_falls_with_more_draws():
    model = fresh_model()
    batch = TASK.sample_train_batch(16, 3, make_generator(0))
    error = ch6n.resampling_error(model, batch, 64, seed=1)
    assert error.shape == (64,) and error[-1] < error[0]
