import copy
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from lengthgen_lite.core import training
from lengthgen_lite.core.model import PLACEMENTS, ModelConfig
from lengthgen_lite.core.seeding import make_generator
from lengthgen_lite.core.tasks import Batch, SetComplement
from lengthgen_lite.core.training import (
    TrainConfig,
    _param_groups,
    _sample_batches,
    train,
)

TASK = SetComplement(v=8, train_length=3)
MODEL = ModelConfig(vocab_size=8, d_model=16)
SHORT = TrainConfig(steps=60, warmup=5, batch=32, lr=1e-2)


def entropy_floor(v=8, length=3):
    return float(np.mean([np.log(v - s) for s in range(1, length + 1)]))


def test_loss_falls_towards_the_entropy_floor():
    result = train(MODEL, TASK, SHORT, seeds=[0, 1], progress=False)
    assert result.loss.shape == (60, 2)
    assert (result.loss[-5:].mean(0) < result.loss[:5].mean(0)).all()
    # cross-entropy >= H(p*)
    assert (result.loss[-5:].mean(0) > entropy_floor() - 1e-4).all()
    assert len(result.models) == 2 and not result.models[0].training


def test_runs_are_deterministic_and_seeds_differ():
    a = train(MODEL, TASK, SHORT, seeds=[0, 1], progress=False)
    b = train(MODEL, TASK, SHORT, seeds=[0, 1], progress=False)
    np.testing.assert_array_equal(a.loss, b.loss)
    assert not np.array_equal(a.loss[:, 0], a.loss[:, 1])


def test_sampled_targets_give_noisier_loss():
    soft = train(MODEL, TASK, SHORT, seeds=[0], progress=False).loss[:, 0]
    sampled = train(
        MODEL,
        TASK,
        TrainConfig(**{**SHORT.__dict__, "targets": "sampled"}),
        seeds=[0],
        progress=False,
    ).loss[:, 0]
    assert np.diff(sampled).std() > np.diff(soft).std()


class CountingAverager:
    """Records how it is called; keeps the latest parameters as its 'average'."""

    def __init__(self, params):
        self.steps, self.latest = [], {n: p.detach().clone() for n, p in params.items()}

    def update(self, params, step):
        self.steps.append(step)
        self.latest = {n: p.detach().clone() for n, p in params.items()}

    def averaged(self):
        return self.latest


def test_averagers_see_every_step_and_do_not_change_training():
    watched = train(
        MODEL,
        TASK,
        SHORT,
        seeds=[0],
        averagers={"last": CountingAverager},
        progress=False,
    )
    plain = train(MODEL, TASK, SHORT, seeds=[0], progress=False)
    np.testing.assert_array_equal(watched.loss, plain.loss)
    for (name, p), q in zip(
        watched.averaged["last"][0].state_dict().items(),
        plain.models[0].state_dict().values(),
    ):
        torch.testing.assert_close(p, q, msg=name)


def test_weight_decay_rule_matrices_only():
    from torch.func import stack_module_state

    from lengthgen_lite.core.model import Transformer

    template = Transformer(ModelConfig(vocab_size=8, d_model=16, norm="post", d_mlp=8))
    params, _ = stack_module_state([template])
    decay, no_decay = _param_groups(template, params, 0.1)
    shapes = {n: p.dim() for n, p in template.named_parameters()}
    assert (
        len(decay["params"]) == sum(d >= 2 for d in shapes.values())
        and decay["weight_decay"] == 0.1
    )
    assert (
        len(no_decay["params"]) == sum(d < 2 for d in shapes.values())
        and no_decay["weight_decay"] == 0.0
    )


def test_lr_schedule():
    cfg = TrainConfig(steps=110, warmup=10, schedule="cosine")
    assert cfg.lr_factor(0) == pytest.approx(0.1)
    assert cfg.lr_factor(10) == pytest.approx(1.0)
    assert cfg.lr_factor(109) < 0.01
    assert TrainConfig(steps=10, warmup=0).lr_factor(5) == 1.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(steps=0), "steps"),
        (dict(batch=-1), "batch"),
        (dict(steps=10, warmup=20), "warmup"),
        (dict(lr=0.0), "lr"),
        (dict(weight_decay=-1.0), "weight_decay"),
        (dict(targets="hard"), "targets='hard' is unknown"),
        (dict(schedule="linear"), "schedule='linear' is unknown"),
    ],
)
def test_bad_train_configs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


def test_seeds_must_be_distinct():
    with pytest.raises(ValueError, match="distinct"):
        train(MODEL, TASK, SHORT, seeds=[1, 1], progress=False)


SEEDS = [0, 1, 2]


@pytest.mark.parametrize(
    "model_kwargs, targets",
    [
        (dict(norm="none"), "soft"),
        (dict(norm="post"), "sampled"),
        (dict(norm="attn_out"), "sampled"),
        (dict(norm="pre_final", d_mlp=16, n_heads=2), "soft"),
    ],
)
def test_batched_equals_sequential(model_kwargs, targets):
    """Each seed trained inside a batch of K follows the trajectory it follows alone.

    Only float rounding may differ (a [K, ...] batched matmul can block its sums
    differently from a single one). Dropout is left out: under
    ``vmap(randomness="different")`` the K masks are drawn in one call from the global
    generator, whose state also depends on which other seeds were initialised, so a
    seed's masks in a batch are not the masks it would draw alone.
    """
    model_cfg = ModelConfig(vocab_size=8, d_model=16, **model_kwargs)
    cfg = TrainConfig(steps=40, warmup=5, batch=32, lr=1e-2, targets=targets)
    batched = train(model_cfg, TASK, cfg, seeds=SEEDS, progress=False)
    for k, seed in enumerate(SEEDS):
        alone = train(model_cfg, TASK, cfg, seeds=[seed], progress=False)
        np.testing.assert_allclose(
            batched.loss[:, k], alone.loss[:, 0], rtol=1e-4, atol=1e-5
        )
        for (name, p), q in zip(
            batched.models[k].state_dict().items(),
            alone.models[0].state_dict().values(),
        ):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    # the seeds really differ
    assert not np.allclose(batched.loss[:, 0], batched.loss[:, 1])


def test_dropout_runs_are_reproducible():
    """Not equal to the per-seed runs (see above), but the same call gives the same
    result."""
    model_cfg = ModelConfig(
        vocab_size=8, d_model=16, attn_dropout=0.2, resid_dropout=0.2
    )
    cfg = TrainConfig(steps=20, warmup=5, batch=32)
    a = train(model_cfg, TASK, cfg, seeds=SEEDS, progress=False)
    b = train(model_cfg, TASK, cfg, seeds=SEEDS, progress=False)
    np.testing.assert_array_equal(a.loss, b.loss)
    no_dropout = train(
        ModelConfig(vocab_size=8, d_model=16), TASK, cfg, seeds=SEEDS, progress=False
    )
    assert not np.allclose(a.loss, no_dropout.loss)  # dropout is active during training


@pytest.mark.parametrize("size", [1, 3, 7])
def test_vectorised_sampler_draws_what_each_seed_draws(size):
    task = SetComplement(v=8, train_length=3)
    stacked = task.sample_train_batches(
        64, size, [make_generator(s) for s in (5, 6, 7)]
    )
    assert stacked.inputs.shape == (3, 64, size) and stacked.targets.shape == (
        3,
        64,
        size,
        8,
    )
    for k, seed in enumerate((5, 6, 7)):
        alone = task.sample_train_batch(64, size, make_generator(seed))
        torch.testing.assert_close(stacked.inputs[k], alone.inputs, rtol=0, atol=0)
        torch.testing.assert_close(stacked.targets[k], alone.targets, rtol=0, atol=0)
        assert torch.equal(stacked.loss_mask[k], alone.loss_mask)


class PerSeedOnly:
    """A task with only the required per-seed sampler: the loop must fall back to
    stacking."""

    n_outputs = 8

    def __init__(self):
        self.inner = SetComplement(v=8, train_length=3)

    def train_sizes(self):
        return self.inner.train_sizes()

    def sample_train_batch(self, batch, size, generator):
        return self.inner.sample_train_batch(batch, size, generator)


def test_fallback_stacking_matches_vectorised_path():
    fallback = _sample_batches(
        PerSeedOnly(), 16, 3, [make_generator(s) for s in (0, 1)]
    )
    vectorised = _sample_batches(TASK, 16, 3, [make_generator(s) for s in (0, 1)])
    assert isinstance(fallback, Batch)
    for name in ("inputs", "targets", "loss_mask"):
        assert torch.equal(getattr(fallback, name), getattr(vectorised, name)), name
    cfg = TrainConfig(steps=10, warmup=2, batch=16)
    model_cfg = ModelConfig(vocab_size=8, d_model=16)
    np.testing.assert_array_equal(
        train(model_cfg, PerSeedOnly(), cfg, seeds=[0, 1], progress=False).loss,
        train(model_cfg, TASK, cfg, seeds=[0, 1], progress=False).loss,
    )


@pytest.mark.parametrize(
    "batch, size, generators, message",
    [
        (16, 3, [], "at least one torch.Generator"),
        (0, 3, None, "batch must be an integer >= 1"),
        (16, 0, None, "size must be an integer between 1 and 7"),
        (16, 8, None, "size must be an integer between 1 and 7"),
    ],
)
def test_vectorised_sampler_rejects_bad_input(batch, size, generators, message):
    generators = [make_generator(0)] if generators is None else generators
    with pytest.raises(ValueError, match=message):
        TASK.sample_train_batches(batch, size, generators)


# --- The fast path (chunked data, token tables, broadcast products, torch.compile) ---

from dataclasses import replace  # noqa: E402

from lengthgen_lite.core.averaging import make_ema  # noqa: E402
from lengthgen_lite.core.evaluation import evaluate_set_complement  # noqa: E402
from lengthgen_lite.core.games import TicTacToe  # noqa: E402
from lengthgen_lite.core.languages import make_language  # noqa: E402
from lengthgen_lite.core.model import Transformer  # noqa: E402
from lengthgen_lite.core.retrieval import (  # noqa: E402
    ArgmaxRetrieval,
    RetrievalTransformer,
    retrieval_config,
)
from lengthgen_lite.core.tasks import sample_next_tokens  # noqa: E402
from lengthgen_lite.core.training import (  # noqa: E402
    CHUNK,
    _chunked_batches,
    _reference_batches,
    plan_path,
)


def assert_same_training(a, b, v):
    """Equal losses to 1e-5 relative, equal TV per length (core.evaluation) and equal
    EMA weights."""
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-5, atol=0)
    for ma, mb in zip(a.models, b.models):
        np.testing.assert_allclose(
            evaluate_set_complement(ma, v).tv,
            evaluate_set_complement(mb, v).tv,
            rtol=1e-4,
            atol=1e-6,
        )
    for name in a.averaged:
        for ma, mb in zip(a.averaged[name], b.averaged[name]):
            for (key, p), q in zip(ma.state_dict().items(), mb.state_dict().values()):
                torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=key)


def train_paths(model_cfg, cfg, paths, **kwargs):
    """The same training (TASK, SEEDS) on each of ``paths``: path -> TrainResult."""
    return {
        path: train(
            model_cfg,
            TASK,
            replace(cfg, path=path),
            seeds=SEEDS,
            progress=False,
            **kwargs,
        )
        for path in paths
    }


@pytest.mark.parametrize(
    "model_kwargs, targets",
    [
        (dict(norm="none"), "soft"),
        (dict(norm="pre"), "sampled"),
        (dict(norm="pre_final", d_mlp=16, n_heads=2, n_layers=2), "soft"),
        (dict(norm="post"), "sampled"),
        (dict(norm="attn_out", norm_kind="standardize"), "sampled"),
        # same masks: same ops, same order
        (dict(norm="attn_out", attn_dropout=0.1, resid_dropout=0.1), "sampled"),
        # no token tables, the rest applies
        (dict(norm="none", positional="learned"), "soft"),
    ],
)
def test_fast_path_trains_what_the_reference_path_trains(model_kwargs, targets):
    model_cfg = ModelConfig(vocab_size=8, d_model=16, **model_kwargs)
    # a partial last chunk
    cfg = TrainConfig(steps=CHUNK + 7, warmup=5, batch=32, lr=1e-2, targets=targets)
    runs = train_paths(
        model_cfg, cfg, ("reference", "fast"), averagers={"ema": make_ema(0.9)}
    )
    assert_same_training(runs["reference"], runs["fast"], TASK.v)
    again = train(
        model_cfg,
        TASK,
        replace(cfg, path="fast"),
        seeds=SEEDS,
        averagers={"ema": make_ema(0.9)},
        progress=False,
    )
    # bit-identical across repeats
    np.testing.assert_array_equal(again.loss, runs["fast"].loss)


# torch's own warnings while compiling: inductor imports a TorchScript class, dynamo
# peeks at .grad
@pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)
@pytest.mark.filterwarnings(
    "ignore:The .grad attribute of a Tensor that is not a leaf Tensor:UserWarning"
)
def test_compiled_path_trains_what_the_reference_path_trains():
    model_cfg = ModelConfig(vocab_size=8, d_model=16, norm="post")
    first = TrainConfig(
        steps=30, warmup=5, batch=32, lr=1e-2, targets="sampled", schedule="cosine"
    )
    # the second compiled training (another lr, schedule and length) reuses the first
    # one's compiled step: no new graph; weight decay > 0 is another graph
    second = replace(first, lr=3e-3, steps=20, warmup=0, schedule="constant")
    decayed = replace(first, weight_decay=0.1)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for cfg in (first, second, decayed, replace(second, weight_decay=0.1)):
        runs = train_paths(model_cfg, cfg, ("reference", "compiled"))
        assert_same_training(runs["reference"], runs["compiled"], TASK.v)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= graphs + 2
    # ... and a graph is kept after another one was compiled: back to no decay, no
    # new graph
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    runs = train_paths(model_cfg, second, ("reference", "compiled"))
    assert_same_training(runs["reference"], runs["compiled"], TASK.v)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


@pytest.mark.parametrize(
    "task, targets",
    [
        (SetComplement(v=8, train_length=3), "soft"),
        (SetComplement(v=8, train_length=3), "sampled"),
        (TicTacToe(n=3, k=3, train_length=5), "sampled"),
        (make_language("dyck1", train_length=6), "soft"),
    ],
)
def test_chunked_batches_are_the_reference_batches(task, targets):
    cfg = TrainConfig(steps=2 * CHUNK + 3, warmup=0, batch=8, targets=targets)
    streams = lambda: [make_generator(s) for s in (3, 5)]  # noqa: E731
    for step, (a, b) in enumerate(
        zip(
            _reference_batches(task, cfg, streams()),
            _chunked_batches(task, cfg, streams()),
            strict=True,
        )
    ):
        for name in ("inputs", "targets", "loss_mask"):
            assert torch.equal(getattr(a, name), getattr(b, name)), (step, name)


def test_sample_next_tokens_is_torch_multinomial():
    targets = TASK.sample_train_batch(64, 3, make_generator(0)).targets
    for seed in range(5):
        a, b = make_generator(seed), make_generator(seed)
        expected = torch.multinomial(targets.reshape(-1, 8), 1, generator=a).reshape(
            targets.shape[:-1]
        )
        assert torch.equal(sample_next_tokens(targets, b), expected)
        # same draws consumed
        assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))


@pytest.mark.parametrize("norm", PLACEMENTS)
@pytest.mark.parametrize("biases", [{}, {"attn_bias": True, "init": "torch"}])
def test_fast_forward_is_the_same_function(norm, biases):
    model = Transformer(
        ModelConfig(
            vocab_size=8,
            d_model=16,
            n_heads=2,
            n_layers=2,
            d_mlp=8,
            norm=norm,
            **biases,
        )
    )
    tokens = TASK.sample_train_batch(16, 5, make_generator(0)).inputs
    # Equal up to rounding: each form is about as far from the exact (float64) function
    # as the plain float32 forward is (the tables reassociate products, e.g. W_O).
    exact = copy.deepcopy(model).double()(tokens)
    plain = (model(tokens).double() - exact).abs().max()
    for tables, broadcast in ((True, False), (False, True), (True, True)):
        error = (model(tokens, tables, broadcast).double() - exact).abs().max()
        assert error <= 4 * plain, (tables, broadcast, float(error), float(plain))


def test_tables_need_a_model_without_positions():
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, positional="learned"))
    with pytest.raises(ValueError, match="tables needs positional='none'"):
        model(torch.zeros(2, 3, dtype=torch.long), tables=True)


@pytest.mark.parametrize(
    "model_class, task, model_kwargs, path, expected",
    [
        (Transformer, TASK, {}, "auto", "chunked_data + fast_model + token_tables"),
        (
            Transformer,
            TASK,
            {},
            "compiled",
            "chunked_data + fast_model + token_tables + compiled",
        ),
        (
            Transformer,
            TASK,
            {"positional": "learned"},
            "fast",
            "chunked_data + fast_model",
        ),
        (
            Transformer,
            TASK,
            {"resid_dropout": 0.1},
            "auto",
            "chunked_data + fast_model + token_tables",
        ),
        (Transformer, PerSeedOnly(), {}, "fast", "fast_model + token_tables"),
        (RetrievalTransformer, ArgmaxRetrieval(), None, "auto", "reference"),
        (Transformer, TASK, {}, "reference", "reference"),
    ],
)
def test_plan_path_falls_back_where_a_part_cannot_apply(
    model_class, task, model_kwargs, path, expected
):
    model_cfg = (
        retrieval_config(task, "baseline")
        if model_kwargs is None
        else ModelConfig(vocab_size=8, d_model=16, **model_kwargs)
    )
    assert (
        plan_path(
            model_cfg, task, TrainConfig(steps=10, warmup=0, path=path), 3, model_class
        ).label
        == expected
    )


def test_auto_compiles_only_long_trainings():
    # the threshold counts positions trained: steps x seeds x batch x length
    long = TrainConfig(steps=10_000, warmup=0, path="auto")
    assert (
        plan_path(MODEL, TASK, long, 5).compiled
        and not plan_path(MODEL, TASK, replace(long, steps=100), 5).compiled
        and not plan_path(MODEL, TASK, replace(long, batch=2), 5).compiled
    )


def test_compiled_path_rejects_what_it_cannot_compile():
    with pytest.raises(
        ValueError, match="path='compiled' needs one training size and no dropout"
    ):
        plan_path(
            replace(MODEL, attn_dropout=0.1),
            TASK,
            TrainConfig(steps=10, warmup=0, path="compiled"),
            3,
        )
    with pytest.raises(ValueError, match="path='turbo' is unknown"):
        TrainConfig(path="turbo")


def test_checkpoints_keep_the_weights_the_shorter_training_ends_with():
    kept = train(MODEL, TASK, SHORT, seeds=[0, 1], progress=False, checkpoints=(5,))
    assert list(kept.checkpoints) == [5] and list(kept.checkpoints[5]) == ["raw"]
    short = train(MODEL, TASK, replace(SHORT, steps=5), seeds=[0, 1], progress=False)
    np.testing.assert_array_equal(kept.loss[:5], short.loss)
    for early, alone in zip(kept.checkpoints[5]["raw"], short.models):
        for (name, p), q in zip(
            early.state_dict().items(), alone.state_dict().values()
        ):
            torch.testing.assert_close(p, q, msg=name)
    with pytest.raises(ValueError, match="checkpoints=.*allowed: steps in 1..steps"):
        train(MODEL, TASK, SHORT, seeds=[0], progress=False, checkpoints=(10_000,))


@pytest.mark.parametrize("init", ["book", "torch"])
def test_fast_path_trains_what_the_reference_path_trains_with_attn_biases(init):
    # token tables project a table row through W_V with its bias: the same function
    model_cfg = ModelConfig(
        vocab_size=8, d_model=16, n_heads=2, d_mlp=16, attn_bias=True, init=init
    )
    cfg = TrainConfig(steps=CHUNK + 7, warmup=5, batch=32, lr=1e-2)
    assert plan_path(model_cfg, TASK, replace(cfg, path="fast"), 3).token_tables
    runs = train_paths(
        model_cfg, cfg, ("reference", "fast"), averagers={"ema": make_ema(0.9)}
    )
    assert_same_training(runs["reference"], runs["fast"], TASK.v)


@pytest.mark.parametrize(
    "options", [{"item_mlp": 8}, {"attn_bias": True}, {"item_mlp": 8, "init": "torch"}]
)
def test_the_retrieval_model_with_a_component_trains_alike_on_every_path(options):
    # its own forward: plan_path turns every fast part off, so "auto" is the reference
    task = ArgmaxRetrieval(n_classes=4, max_train_size=6)
    model_cfg = retrieval_config(
        task, "layernorm", d_model=16, n_heads=2, d_mlp=16, **options
    )
    cfg = TrainConfig(steps=12, warmup=2, batch=8, lr=1e-2)
    plan = plan_path(
        model_cfg, task, replace(cfg, path="auto"), 2, RetrievalTransformer
    )
    assert plan.label == "reference"
    losses = [
        train(
            model_cfg,
            task,
            replace(cfg, path=path),
            seeds=[0, 1],
            model_class=RetrievalTransformer,
            progress=False,
        ).loss
        for path in ("reference", "auto")
    ]
    np.testing.assert_array_equal(losses[0], losses[1])
    assert np.isfinite(losses[0]).all()


def test_compiled_steps_cache_in_the_build_folder():
    # importing torch._dynamo fixes inductor's cache folder (to /tmp unless set): the
    # package sets it first, so re-executions of the book reuse _build/inductor
    code = (
        "import lengthgen_lite, torch._dynamo\n"
        "from torch._inductor.runtime.cache_dir_utils import cache_dir\n"
        "print(cache_dir())"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(training.INDUCTOR_CACHE)


@pytest.mark.parametrize(
    "model_kwargs, forward_kwargs",
    [
        (dict(norm="post", d_mlp=16, n_heads=2), {}),
        (dict(norm="attn_out", attn_dropout=0.2, resid_dropout=0.2), {}),
        (dict(norm="none"), {"tables": True, "broadcast": False}),
    ],
)
def test_eager_gradients_are_torch_funcs_bit_for_bit(model_kwargs, forward_kwargs):
    """The eager step takes gradients with torch.autograd.grad, the compiled one with
    torch.func.grad_and_value: the same numbers, dropout masks included."""
    model_cfg = ModelConfig(vocab_size=8, d_model=16, **model_kwargs)
    models = [training.init_model(model_cfg, seed) for seed in SEEDS]
    params, buffers = torch.func.stack_module_state(models)
    data = _sample_batches(TASK, 32, 3, [make_generator(s) for s in SEEDS])
    results = []
    for traced in (True, False):
        torch.manual_seed(0)  # the dropout masks
        results.append(
            training._gradients(models[0], forward_kwargs, traced)(
                params, buffers, data
            )
        )
    (grads_func, (total_func, loss_func)), (grads, (total, loss)) = results
    assert torch.equal(total, total_func) and torch.equal(loss, loss_func)
    assert grads.keys() == grads_func.keys()
    for name, g in grads.items():
        assert torch.equal(g, grads_func[name]), name
    assert not any(g.requires_grad for g in grads.values())
