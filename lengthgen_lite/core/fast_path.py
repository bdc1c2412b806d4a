"""Training's fast path: the same loop and the same function, in less time. Chapter 5
explains the batching it builds on.

:func:`~lengthgen_lite.core.training.train` runs the plain loop and the plain model
(the *reference* path) unless :func:`plan_path` says parts of this module apply:

- **chunked data** (:func:`chunked_batches`): the batches drawn ``CHUNK`` steps at a
  time. Each seed's generator makes exactly the draws the reference path makes, in the
  same order (a step's noise, then its target tokens; one call per seed and chunk for
  target distributions); the rest is one vectorised call per chunk (tasks that are a
  :class:`~lengthgen_lite.core.tasks.NoiseSampler` with one training size), so every
  seed sees the same data. A compiled step builds the targets itself (**targets in
  the graph**): it takes each step's
  :class:`~lengthgen_lite.core.tasks.DrawnBatch` (set complement: the tokens and their
  places in the permutation; sampled targets: the pick noise too), so the targets fuse
  with the loss instead of being written out per chunk and read back. Their kind is
  data, not structure: target distributions come with ones for noise and a flag
  discards the pick, so a model's soft and sampled trainings share one graph;
- **token tables** (:func:`fast_forward` with ``tables``): without positions a
  position's input to the first layer depends on its token alone, so its Q/K/V, and V
  through W_O, are computed once per vocabulary row and gathered;
- **compiled** (:func:`compiled_step`): the whole step, AdamW and the learning rate
  schedule included, as one ``torch.compile`` graph, where it pays back: at least
  ``COMPILE_TOKEN_STEPS`` positions trained (``benchmarks/speed.py --fast-path``
  measures the break-even) and fixed shapes (one training size). The attention's tiny
  products are then broadcast sums (:func:`fast_forward` with ``broadcast``), which it
  fuses. Later trainings of the same model and shapes reuse the graph (seven kept).
  Dropout is drawn outside the graph (:func:`dropout_sites`, :func:`draw_masks`): each
  step's masks are drawn eagerly, as the eager step's ``nn.Dropout`` draws them, and
  passed in, so the same masks (compiled dropout would draw others) and one graph for
  every rate (a site whose rate is 0 gets ones). The first compilation points
  inductor's cache at ``_build/inductor`` (``TORCHINDUCTOR_CACHE_DIR``, unless the user
  set another), so re-executions of the book compile once.

Chapter 4's retrieval model (``core.retrieval.RetrievalTransformer``, only the query
attends) has its own forward, so it gets its own parts:

- **query only** (``RetrievalTransformer.query_forward``): W_Q at the query slot
  alone, and no slot projected by W_K or W_V (the query read back through W_K, the
  slots mixed by their attention before W_V; broadcast sums when compiled);
- **token tables** (``query_forward`` with ``tables``, where the slot vectors are
  sums of the items' rows): the query's score of every vocabulary row and the values
  those rows carry (an item MLP's hidden units too), gathered per slot, where a
  step's slots outnumber the vocabulary's rows (argmax retrieval, 11 rows; not
  dictionary lookup's 1035 at batch 64, which measured 2.5x slower);
- **own draws** (tasks with ``sample_fast_batches``: dictionary lookup): the batches
  from the same distribution with other draws (its N distinct keys by rejection
  instead of a sort of all 1024);
- **compiled**: the sets of every size padded to the largest (:func:`padded_items`,
  masked), so one graph; ``auto`` compiles from ``COMPILE_RETRIEVAL_SEED_STEPS``;
- **gradient layout** (:func:`in_gradient_layout`, compiled only): each linear
  layer's weight stored in the memory order its gradient comes out of the graph in,
  so AdamW's fused update reads every tensor in order.

Every part gives the reference path's numbers up to float rounding, and the same data
and dropout masks (``tests/test_core_fast_path.py``), except own draws: other data
from the same distribution (``tests/test_core_retrieval.py``). The gradient layout
changes no value, only which products the matrix library is handed, and so their
rounding. The retrieval training amplifies rounding (a 1e-7 change of the initial
weights grows to percents over thousands of steps), so its fast path is tested on
outcome statistics: final losses and accuracies within the spread that such a
perturbation of the reference path produces, measured in the test.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .model import Attention, Block, ModelConfig, Transformer, check_tokens
from .retrieval import NO_TOKEN, RetrievalTransformer, tables_apply
from .tasks import (
    Batch,
    DrawnBatch,
    NoiseSampler,
    Task,
    complete_batch,
    token_noise,
)

if TYPE_CHECKING:
    from .training import Gradients, StackedParams, TrainConfig

CHUNK = 50  # steps whose batches the fast path draws at once
# auto compiles a training of at least this many token-steps (steps x K x batch x
# sequence length): compiling costs seconds whatever the size, and saves time per
# position trained. The break-even is a fresh process's compile with a warm inductor
# cache (a notebook re-executed) over the saving per seed-step against the eager fast
# path: 8.8-29 s wall and 1.1-1.5 ms CPU on chapters 1, 5, 6 and 7's main trainings,
# 3.3 to 13.5 million (`benchmarks/speed.py --fast-path`, 200 steps, 2 repeats, a
# 2-core machine at load 5-7, which inflates the wall seconds). Those seconds include
# what a kernel pays once (dynamo's and inductor's set-up), not per graph, and a
# chapter's second training of the same shapes reuses the compiled step (0.05-0.13 s),
# so the value stays below them: raising it above 3.1 million would turn every
# compiled training of the notebooks eager (2.6 and 3.1 million, chapters 1, 5, 8).
COMPILE_TOKEN_STEPS = 2_000_000
# ... and chapter 4's retrieval model from this many seed-steps (steps x K): compiling
# its step cost 13-24 s in a fresh process with a warm inductor cache and 57-81 s with
# a cold one (a loaded 2-core machine), and saves about 0.5 ms per seed-step against
# the eager fast path (`benchmarks/retrieval.py --compiled`): a break-even of 26,000
# to 160,000 seed-steps. The reference sweep (60,000 per configuration) compiles,
# and its graph serves the configuration's four init x lr cells; a notebook's 3,000
# do not.
COMPILE_RETRIEVAL_SEED_STEPS = 50_000
INDUCTOR_CACHE = pathlib.Path(__file__).resolve().parents[2] / "_build" / "inductor"
INDUCTOR_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"


def _attention(
    attn: Attention, x: Tensor, tokens: Tensor | None, broadcast: bool
) -> Tensor:
    """:meth:`Attention.forward`; with ``tokens`` [batch, pos], ``x`` is a [v, d_model]
    table of each token's input, and v rows are projected, not every position."""
    B, T = x.shape[:2] if tokens is None else tokens.shape
    q, k = (
        (W(x) if tokens is None else F.embedding(tokens, W(x)))
        .view(B, T, attn.n_heads, attn.d_head)
        .transpose(1, 2)
        for W in (attn.W_Q, attn.W_K)
    )
    q, k = attn.rotate(q, k)  # RoPE, after the tables' gather: per position
    if attn.last_query:
        q = q[:, :, -1:]
    # [batch, head, T or 1, T]: scaled (logit_scale, logit_factor) and masked
    scores = attn.hook_attn_scores(
        attn.logits(attn.product(q, k.transpose(-1, -2), broadcast))
    )
    pattern = attn.dropout(attn.hook_pattern(scores.softmax(dim=-1)))
    if tokens is None:
        v = attn.W_V(x).view(B, T, attn.n_heads, attn.d_head).transpose(1, 2)
        # [batch, T or 1, head, d_head]
        z = attn.hook_z(attn.product(pattern, v, broadcast).transpose(1, 2))
        return attn.W_O(z.reshape(B, z.shape[1], attn.n_heads * attn.d_head))
    # Token tables: W_O is linear, so pattern @ (V W_O) is (pattern @ V) W_O; it
    # projects v table rows instead of every position (most of a training step's
    # matmul FLOPs otherwise). z is never formed, so hook_z is not called.
    W_O = attn.W_O.weight.view(-1, attn.n_heads, attn.d_head)
    ov = torch.einsum("vhe,dhe->vhd", attn.W_V(x).view(x.shape[0], *W_O.shape[1:]), W_O)
    # [batch, head, T, d_model]
    ov = F.embedding(tokens, ov.flatten(1)).view(B, T, attn.n_heads, -1)
    out = attn.product(pattern, ov.transpose(1, 2), broadcast)
    # [batch, T or 1, d_model]
    out = out.squeeze(1) if attn.n_heads == 1 else out.sum(1)
    # W_O's bias (attn_bias) after the product, as the plain path adds it
    return out if attn.W_O.bias is None else out + attn.W_O.bias


def _block(block: Block, x: Tensor, tokens: Tensor | None, broadcast: bool) -> Tensor:
    """:meth:`Block.forward`; or a [v, d_model] token table with ``tokens``."""
    x = block.hook_resid_pre(x)
    # LN of a table row: per token too
    h = _attention(
        block.attn, block.ln1(x) if block.sites.pre else x, tokens, broadcast
    )
    if tokens is not None:
        x = F.embedding(tokens, x)  # the residual stream at every position
    return block.after_attention(x, h)


def fast_forward(
    model: Transformer, tokens: Tensor, tables: bool = False, broadcast: bool = False
) -> Tensor:
    """``model(tokens)``, equal up to float rounding. ``tables`` (needs
    ``positional`` "none" or "rope"): the first layer works on v-row token tables,
    whose hooks then see [v, d_model] tables (recordings use the plain forward).
    ``broadcast``: the attention's products as broadcast sums
    (:meth:`~lengthgen_lite.core.model.Attention.product`)."""
    check_tokens(tokens)
    if not tables:
        x = model.with_positions(model.hook_embed(model.embed(tokens)))
        for block in model.blocks:
            x = _block(block, x, None, broadcast)
        return model.read_out(x)
    if model.cfg.positional == "learned":
        raise ValueError(
            "tables needs positional='none' or 'rope' (a position's input must "
            f"depend on its token alone), got {model.cfg.positional!r}"
        )
    x = model.hook_embed(model.embed.weight)
    for i, block in enumerate(model.blocks):
        x = _block(block, x, tokens if i == 0 else None, broadcast)
    return model.read_out(x)


class MaskedDropout(nn.Module):
    """``nn.Dropout`` whose mask (already divided by the keep rate) comes in as the
    buffer ``mask``: the compiled step's dropout (:func:`draw_masks`)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.empty(0), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return x * self.mask


class FastForward(nn.Module):
    """``model`` whose forward is :func:`fast_forward`, or with ``query_only`` the
    retrieval model's ``query_forward`` (for ``functional_call``: its parameters are
    the model's, under ``model.``). ``masked_dropout``: ``model``'s dropouts become
    :class:`MaskedDropout` (``model`` is changed: pass a copy)."""

    def __init__(
        self,
        model: Transformer,
        tables: bool,
        broadcast: bool = False,
        query_only: bool = False,
        padded: bool = False,
        masked_dropout: bool = False,
    ):
        super().__init__()
        self.model, self.tables, self.broadcast = model, tables, broadcast
        self.query_only, self.padded = query_only, padded
        if masked_dropout:
            for name, module in list(model.named_modules()):
                if isinstance(module, nn.Dropout):
                    model.set_submodule(name, MaskedDropout())

    def forward(self, inputs: Tensor) -> Tensor:
        if self.query_only:
            return self.model.query_forward(inputs, self.tables, self.padded)[0]
        return fast_forward(self.model, inputs, self.tables, self.broadcast)


@dataclass(frozen=True)
class PathPlan:
    """Which parts of the fast path a training uses; every part off is the reference
    path."""

    # batches drawn CHUNK steps at a time (NoiseSampler, one training size)
    chunked_data: bool
    # Transformer's fast forward (broadcast attention products when compiled)
    fast_model: bool
    # ... with the first layer's Q/K/V from v-row tables (no positions)
    token_tables: bool
    compiled: bool  # the step compiled with torch.compile
    # the retrieval model's query_forward (W_Q at the query only; token_tables: keys
    # and values from tables)
    query_only: bool = False
    # batches from the task's sample_fast_batches: the same distribution as the
    # reference path's batches, other draws
    own_draws: bool = False
    # compiled with dropout: the masks drawn eagerly and passed in (draw_masks)
    masked_dropout: bool = False
    # compiled with chunked data: the step builds the targets (and picks sampled
    # ones) in its graph from each step's DrawnBatch
    targets_in_graph: bool = False
    # compiled retrieval model: linear weights stored as their gradients come out
    # (in_gradient_layout)
    gradient_layout: bool = False

    @property
    def label(self) -> str:
        names = ("chunked_data", "fast_model", "query_only", "token_tables")
        later = ("own_draws", "masked_dropout", "targets_in_graph", "gradient_layout")
        later += ("compiled",)
        parts = [name for name in names + later if getattr(self, name)]
        return " + ".join(parts) if parts else "reference"

    @property
    def forward_kwargs(self) -> dict[str, bool]:
        """:class:`FastForward`'s options; empty: the plain forward."""
        if self.query_only:
            # compiled: the sets padded to one shape (padded_items)
            return {
                "tables": self.token_tables,
                "query_only": True,
                "padded": self.compiled,
            }
        if not self.fast_model:
            return {}
        return {
            "tables": self.token_tables,
            "broadcast": self.compiled,
            "masked_dropout": self.masked_dropout,
        }


def plan_path(
    model_cfg: ModelConfig,
    task: Task,
    cfg: TrainConfig,
    n_seeds: int,
    model_class: Callable[[ModelConfig], nn.Module] = Transformer,
) -> PathPlan:
    """The parts of the fast path that apply to this training (see the module
    docstring)."""
    if cfg.path == "reference":
        return PathPlan(False, False, False, False)
    chunked = isinstance(task, NoiseSampler) and len(task.train_sizes()) == 1
    # a subclass may have its own forward (ch. 4's retrieval model: query_only)
    fast_model = model_class is Transformer
    # RoPE turns q and k after the tables' gather: positions stay out of the stream
    tables = fast_model and model_cfg.positional != "learned"
    # the retrieval model's sets have no order: its query-only forward has no RoPE
    query_only = (
        model_class is RetrievalTransformer
        and model_cfg.queries == "last"
        and model_cfg.positional != "rope"
    )
    if query_only:
        # tables pay when a step's slots outnumber the vocabulary's rows (argmax
        # retrieval: 11 rows; dictionary lookup: 1035 rows, ~640 slots at batch 64)
        sizes = task.train_sizes()
        slots = cfg.batch * (sum(sizes) / len(sizes) + 1)
        tables = tables_apply(model_cfg) and model_cfg.vocab_size < slots
    # the retrieval model's sets are padded to one shape (padded_items), unless its
    # logits scale with the number of keys a query sees, which padding would change
    padded = query_only and model_cfg.logit_scale == "none"
    fixed_shapes, dropout = (
        len(task.train_sizes()) == 1 or padded,
        model_cfg.attn_dropout > 0 or model_cfg.resid_dropout > 0,
    )
    # dropout compiles with its masks passed in, through the fast forward only
    compilable = fixed_shapes and not (dropout and not fast_model)
    if cfg.path == "compiled" and not compilable:
        raise ValueError(
            "path='compiled' needs one training size (or the retrieval model) and "
            "no dropout in the retrieval model, "
            f"got sizes {tuple(task.train_sizes())}, "
            f"attn_dropout={model_cfg.attn_dropout}, "
            f"resid_dropout={model_cfg.resid_dropout}; use path='fast' or 'auto'"
        )
    if query_only:
        # its eager step is already cheap: compiling pays from more seed-steps
        long = cfg.steps * n_seeds >= COMPILE_RETRIEVAL_SEED_STEPS
    else:
        positions = cfg.batch * max(task.train_sizes())
        long = cfg.steps * n_seeds * positions >= COMPILE_TOKEN_STEPS
    compiled = compilable and (cfg.path == "compiled" or (cfg.path == "auto" and long))
    return PathPlan(
        chunked,
        fast_model,
        tables,
        compiled,
        query_only,
        hasattr(task, "sample_fast_batches"),
        compiled and dropout,
        compiled and chunked,
        # set complement's compiled steps measured no gain from it (issue 36)
        compiled and query_only,
    )


def in_gradient_layout(template: nn.Module, params: StackedParams) -> StackedParams:
    """``params`` with each linear layer's stacked weight [K, out, in] stored in-major
    (a [K, in, out] tensor's memory, transposed back: the same shape and values).

    ``x @ W.T`` gives W the gradient ``(x.T @ dy).T``: in-major. AdamW's update in the
    compiled step combines every weight with its gradient and two moments
    (``zeros_like``: the weight's layout), and with one of them transposed it reads in
    16 x 16 tiles: in chapter 4's argmax retrieval step (ten seeds) that update took
    1.8 ms of the step's 10, and 0.45 ms on the same tensors in one order (profiled
    for issue 36; ``benchmarks/retrieval.py`` times the step both ways). The products
    then get their weight the other way round, which rounds differently: other
    numbers, as a chaotic training's are (``tests/test_core_fast_path.py``, outcome
    statistics).
    """
    linear = {
        f"{name}.weight"
        for name, module in template.named_modules()
        if isinstance(module, nn.Linear)
    }
    return {
        name: p.detach().mT.contiguous().mT if name in linear and p.dim() == 3 else p
        for name, p in params.items()
    }


def padded_items(batches: Iterator[Batch], slots: int) -> Iterator[Batch]:
    """Retrieval batches [K, batch, N + 1, 3] with empty slots (0, NO_TOKEN, NO_TOKEN)
    inserted before the query, up to ``slots``: one shape for every set size, so one
    compiled step (``query_forward(padded=True)`` masks them: the same numbers)."""
    for data in batches:
        inputs = data.inputs
        empty = inputs.new_tensor([0.0, NO_TOKEN, NO_TOKEN])
        pad = empty.expand(*inputs.shape[:2], slots - inputs.shape[2], 3)
        yield Batch(
            torch.cat([inputs[..., :-1, :], pad, inputs[..., -1:, :]], dim=-2),
            data.targets,
            data.loss_mask,
        )


def chunked_batches(
    task: NoiseSampler,
    cfg: TrainConfig,
    streams: Sequence[torch.Generator],
    in_graph: bool = False,
) -> Iterator[Batch | DrawnBatch]:
    """The same batches as the reference path's, ``CHUNK`` steps at a time: [K, batch,
    ...] per step; with ``in_graph``, each step's
    :class:`~lengthgen_lite.core.tasks.DrawnBatch`, whose targets the compiled step
    builds (``PathPlan.targets_in_graph``).

    Only the random draws run per seed, in the reference order: target distributions
    draw a chunk's noise in one call per seed (``draw_noise`` of ``n * batch`` rows is
    ``n`` draws in a row); sampled targets draw per step (noise, then the target
    tokens' noise). Sorting, rules, targets and token picks run once per chunk for all
    seeds, on the draws stacked step-major ([steps x K, batch, ...]), so each step's
    batch is a view, not a copy.
    """
    (size,) = task.train_sizes()
    K = len(streams)
    sampled = cfg.targets == "sampled"
    for start in range(0, cfg.steps, CHUNK):
        n = min(CHUNK, cfg.steps - start)
        picks: Tensor | None = None
        if sampled:
            # step t of seed k at t * K + k; each seed draws its steps in order
            steps: list[Tensor] = [torch.empty(0)] * (n * K)
            tokens: list[Tensor] = [torch.empty(0)] * (n * K)
            for k, g in enumerate(streams):
                for t in range(n):
                    steps[t * K + k] = task.draw_noise(cfg.batch, size, g)
                    shape = (cfg.batch, size, task.n_outputs)
                    tokens[t * K + k] = token_noise(shape, g)
            noise, picks = torch.stack(steps), torch.stack(tokens)
        else:
            # [n, K, batch, ...] -> step-major [n * K, batch, ...]
            noise = torch.stack(
                [
                    task.draw_noise(n * cfg.batch, size, g).unflatten(0, (n, -1))
                    for g in streams
                ],
                dim=1,
            ).flatten(0, 1)
        drawn = dataclasses.replace(task.drawn_batch(noise, size), token_noise=picks)
        chunk = drawn if in_graph else complete_batch(task, drawn)
        views = {
            f.name: None if t is None else t.view(n, K, *t.shape[1:])
            for f in dataclasses.fields(chunk)
            for t in [getattr(chunk, f.name)]
        }
        for t in range(n):
            yield type(chunk)(
                **{name: None if v is None else v[t] for name, v in views.items()}
            )


def _adamw_rows(cfg: TrainConfig, beta1: float, beta2: float) -> Tensor:
    """[steps, 4] float32: step t's (1 - lr_t * weight_decay, -lr_t / (1 - beta1^s),
    sqrt(1 - beta2^s), 0) with s = t + 1, each in double as ``torch.optim.AdamW``
    (single-tensor, float lr) and ``LambdaLR`` compute them on the reference path.

    Rows of four floats are 16-byte aligned, so each step's row is passed to the
    compiled step as a view without a copy.
    """
    rows = []
    for t in range(cfg.steps):
        lr, s = cfg.lr * cfg.lr_factor(t), t + 1
        rows.append(
            (1 - lr * cfg.weight_decay, -lr / (1 - beta1**s), (1 - beta2**s) ** 0.5, 0)
        )
    return torch.tensor(rows, dtype=torch.float64).float()


def compile_graph(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``torch.compile(fn)`` as the training step uses it, its cache in
    ``INDUCTOR_CACHE`` unless ``TORCHINDUCTOR_CACHE_DIR`` names another folder.

    Set here, not at import: importing lengthgen_lite leaves the environment alone.
    Importing ``torch._dynamo`` fills the variable in with torch's default folder, so
    that value counts as unset.
    """
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    if os.environ.get(INDUCTOR_VARIABLE) in (None, default_cache_dir()):
        os.environ[INDUCTOR_VARIABLE] = str(INDUCTOR_CACHE)
    # realize_reads_threshold=1: with the whole step in one graph, inductor's
    # default (4) inlined the attention backward into the token tables' scatter
    # and recomputed it per table row (ch. 7's models ran 3x slower than with the
    # optimizer apart, benchmarks/fast_path.py); 1 computes each buffer once.
    return torch.compile(
        fn, dynamic=False, fullgraph=True, options={"realize_reads_threshold": 1}
    )


DropoutSite = tuple[str, float, tuple[int, ...]]


def dropout_sites(model: nn.Module, batch: int, length: int) -> list[DropoutSite]:
    """(mask buffer name, rate, per-seed shape) of each dropout that one forward of
    ``model`` on [batch, length] tokens calls, in call order: the order in which the
    eager step draws their masks. Found by that forward (in eval mode: it draws
    nothing)."""
    sites: list[DropoutSite] = []
    hooks = [
        module.register_forward_pre_hook(
            lambda m, args, name=name: sites.append(
                (f"{name}.mask", m.p, tuple(args[0].shape))
            )
        )
        for name, module in model.named_modules()
        if isinstance(module, nn.Dropout)
    ]
    training = model.training
    try:
        with torch.no_grad():
            model.eval()(torch.zeros(batch, length, dtype=torch.long))
    finally:
        model.train(training)
        for hook in hooks:
            hook.remove()
    names = [name for name, _, _ in sites]
    if len(set(names)) != len(names):
        raise ValueError(f"a dropout module is called twice in one forward: {names}")
    return sites


def draw_masks(sites: Sequence[DropoutSite], K: int) -> dict[str, Tensor]:
    """Each site's ``[K, *shape]`` mask as ``nn.Dropout`` draws it under ``vmap`` with
    different randomness per seed: one ``bernoulli_`` of the keep rate per site, in
    call order, from torch's global stream, divided by the keep rate (so ``x * mask``
    is its output, bit for bit); ones at a rate of 0, which draws nothing."""
    return {
        name: torch.empty(K, *shape).bernoulli_(1 - p).div_(1 - p)
        if p > 0
        else torch.ones(K, *shape)
        for name, p, shape in sites
    }


# the compiled steps of the last compiled trainings, by what their graph depends on:
# a chapter's next configuration with the same model (e.g. the other target kind)
# reuses its graph instead of tracing it again (seconds each, even from a warm cache)
_COMPILED: dict[tuple, Callable[..., Tensor]] = {}


def compiled_step(
    template: nn.Module,
    model_cfg: ModelConfig,
    size: int,
    forward_kwargs: Mapping[str, bool],
    params: StackedParams,
    buffers: StackedParams,
    optimizer: torch.optim.AdamW,
    cfg: TrainConfig,
    traced_gradients: Callable[[], Gradients],
    targets_task: NoiseSampler | None = None,
) -> Callable[[Batch | DrawnBatch, int], Tensor]:
    """The whole training step as one compiled graph: forward, backward and AdamW.

    ``torch.optim.AdamW.step`` under ``LambdaLR`` breaks the graph (dynamo skips it),
    and the optimizer then ran as several small graphs and eager code per step, about
    half a step's time. Here AdamW is the reference's single-tensor update written out,
    its hyperparameters read from ``optimizer`` (which is not stepped), and the learning
    rate schedule and bias corrections are a precomputed per-step row
    (``_adamw_rows``), so no Python number changes between steps. Every tensor is an
    argument, so the next training with the same model, seeds count and optimizer
    (any lr, schedule, weight decay > 0 or steps) reuses the compiled graph instead of
    tracing it again, also after other trainings in between. ``traced_gradients``
    makes the step's gradient function (``torch.func``, which dynamo traces) when a
    graph is new. With ``masked_dropout`` in ``forward_kwargs``, each step's dropout
    masks are drawn before it (:func:`draw_masks`) and passed in with the buffers, so
    every dropout rate shares the graph. With ``targets_task`` (``targets_in_graph``),
    each step takes a :class:`~lengthgen_lite.core.tasks.DrawnBatch` and builds its
    batch in the graph (:func:`~lengthgen_lite.core.tasks.complete_batch`), where the
    targets fuse with the loss. Updates params in place; returns the [K] losses.
    """
    groups = optimizer.param_groups
    (beta1, beta2), eps = groups[0]["betas"], groups[0]["eps"]
    if any(
        (g["betas"], g["eps"], g["lr"], g["amsgrad"], g["maximize"])
        != ((beta1, beta2), eps, cfg.lr, False, False)
        for g in groups
    ) or {g["weight_decay"] for g in groups} - {0.0, cfg.weight_decay}:
        raise ValueError(f"the compiled step has no AdamW for groups {groups!r}")
    decayed = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    decays = tuple(id(p) in decayed for p in params.values())
    K = next(iter(params.values())).shape[0]
    # the init scale changes the weights, not the graph; dropout rates change only
    # the masks passed in
    graph_cfg = dataclasses.replace(
        model_cfg, init="book", attn_dropout=0.0, resid_dropout=0.0
    )
    key = (graph_cfg, type(template), tuple(forward_kwargs.items()), K, decays)
    key += (cfg.batch, size, cfg.precision, beta1, beta2, eps)
    # the task's targets are in the graph (their kind is data: soft and sampled share
    # it), and so is the parameters' memory layout (in_gradient_layout): another layout
    # under the same key would recompile the graph in place, toward dynamo's recompile
    # limit
    key += (targets_task,)
    key += (tuple(p.stride() for p in params.values()),)
    if key not in _COMPILED:
        gradients = traced_gradients()

        def step(
            params: StackedParams,
            buffers: StackedParams,
            exp_avg: StackedParams,
            exp_avg_sq: StackedParams,
            data: Batch | DrawnBatch,
            row: Tensor,
            sampled: Tensor,
        ) -> Tensor:
            if isinstance(data, DrawnBatch):
                data = complete_batch(targets_task, data, sampled)
            grads, (_, loss) = gradients(params, buffers, data)
            decay, step_size, bias_correction2_sqrt = row[0], row[1], row[2]
            for (name, p), decays_p in zip(params.items(), decays):
                g, m, v = grads[name], exp_avg[name], exp_avg_sq[name]
                if decays_p:
                    p.mul_(decay)
                m.lerp_(g, 1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                # the reference's addcdiv_: p + value * m / denom
                p.add_(step_size * m / ((v.sqrt() / bias_correction2_sqrt) + eps))
            return loss

        # Every key's graph is one compilation of `step`; dynamo allows
        # recompile_limit (8) per function and would silently run further ones
        # eagerly, so the cache is emptied before it is full.
        if len(_COMPILED) >= torch._dynamo.config.recompile_limit - 1:
            _COMPILED.clear()
            torch._dynamo.reset()
        _COMPILED[key] = compile_graph(step)
    compiled = _COMPILED[key]
    exp_avg = {name: torch.zeros_like(p) for name, p in params.items()}
    exp_avg_sq = {name: torch.zeros_like(p) for name, p in params.items()}
    rows = _adamw_rows(cfg, beta1, beta2).unbind(0)
    sampled = torch.tensor(cfg.targets == "sampled")
    feed = _fed_targets(targets_task, cfg)
    if not forward_kwargs.get("masked_dropout"):
        return lambda data, t: compiled(
            params, buffers, exp_avg, exp_avg_sq, feed(data), rows[t], sampled
        )
    sites = dropout_sites(template, cfg.batch, size)
    return lambda data, t: compiled(
        params,
        buffers | draw_masks(sites, K),
        exp_avg,
        exp_avg_sq,
        feed(data),
        rows[t],
        sampled,
    )


def _fed_targets(
    targets_task: NoiseSampler | None, cfg: TrainConfig
) -> Callable[[Batch | DrawnBatch], Batch | DrawnBatch]:
    """What the compiled step is fed per step: a batch as drawn, except that target
    distributions (no token noise) get ones as their noise, so that they take the
    sampled kind's graph, whose pick the ``sampled`` flag then discards
    (:func:`~lengthgen_lite.core.tasks.complete_batch`): a chapter's soft and sampled
    trainings of one model compile once (seconds from a warm inductor cache, 10 s
    and more from a cold one)."""
    if targets_task is None or cfg.targets == "sampled":
        return lambda data: data
    n_outputs = targets_task.n_outputs

    @functools.cache
    def ones(shape: tuple[int, ...]) -> Tensor:
        return torch.ones(shape)

    return lambda data: dataclasses.replace(
        data, token_noise=ones((*data.loss_mask.shape, n_outputs))
    )
