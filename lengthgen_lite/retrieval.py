"""The retrieval model and its per-N evaluation. Chapter 4.

``RetrievalTransformer`` is the package's ``Transformer`` with an input layer for the packed
retrieval items of :mod:`lengthgen_lite.tasks` (a priority and up to two tokens per slot), read
out at the query slot. It keeps the Transformer's blocks, norm placements and TransformerLens hook
names, so ``norm="attn_out"`` is "LN (or standardization, ``norm_kind="standardize"``) right after
the attention output", and ``run_with_cache`` records ``blocks.0.hook_attn_out`` before the norm and
``blocks.0.ln_attn_out.hook_normalized`` after it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Literal, Protocol, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from . import metrics
from .model import ModelConfig, Transformer, run_with_cache
from .seeding import make_generator
from .tasks import NO_TOKEN, RETRIEVAL_COLUMNS, ArgmaxRetrieval, Batch
from .training import TrainConfig, TrainResult, train
from .variance import shift_statistics

Variant = Literal["baseline", "layernorm", "standardize"]
VARIANTS: dict[str, dict[str, str]] = {  # name -> ModelConfig fields
    "baseline": {"norm": "none"},
    "layernorm": {"norm": "attn_out", "norm_kind": "layernorm"},
    "standardize": {"norm": "attn_out", "norm_kind": "standardize"},
}
ATTN_OUT = "blocks.0.hook_attn_out"
NORMED = "blocks.0.ln_attn_out.hook_normalized"
PATTERN = "blocks.0.attn.hook_pattern"
# The book's choices (the paper gives none): N ~ U{2..16} in training, AdamW, cosine schedule.
RETRIEVAL_TRAIN = TrainConfig(steps=1000, batch=64, lr=3e-3, warmup=100, schedule="cosine", weight_decay=0.01)
TEST_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


class RetrievalTask(Protocol):
    n_outputs: int

    @property
    def vocab_size(self) -> int: ...

    def sample_train_batch(self, batch: int, size: int, generator: torch.Generator) -> Batch: ...

    def target_item(self, inputs: Tensor) -> Tensor: ...


class RetrievalTransformer(Transformer):
    """Transformer over packed items [batch, N + 1, 3] float -> logits at the query [batch, 1, n_outputs].

    A slot's vector is E[first token] + E[second token] (absent tokens add nothing) + p * w_priority.
    No positions: the model sees a set. With ``queries="last"`` only the query slot attends, which
    keeps N = 1024 cheap.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.priority_embed = nn.Linear(1, cfg.d_model, bias=False)  # a continuous priority, linearly
        nn.init.normal_(self.priority_embed.weight, std=1.0)  # as unit-variance as the token embeddings

    def forward(self, inputs: Tensor) -> Tensor:
        if inputs.dim() != 3 or inputs.shape[-1] != len(RETRIEVAL_COLUMNS) or not inputs.is_floating_point():
            raise ValueError(
                f"inputs must be packed items [batch, N + 1, {len(RETRIEVAL_COLUMNS)}] float, "
                f"got {tuple(inputs.shape)} {inputs.dtype}"
            )
        priority, first, second = inputs.unbind(dim=-1)  # [batch, N + 1] each
        x = self.priority_embed(priority.unsqueeze(-1))  # [batch, N + 1, d_model]
        for ids in (first.long(), second.long()):
            x = x + self.embed(ids.clamp_min(0)) * (ids != NO_TOKEN).unsqueeze(-1)
        return self.forward_embeddings(self.hook_embed(x))[:, -1:]  # [batch, 1, n_outputs]


def retrieval_config(task: RetrievalTask, variant: Variant, **overrides: object) -> ModelConfig:
    """The book's retrieval model for ``task``: one layer, 4 heads, d_model 64, ReLU MLP of width 256,
    no positions, only the query attends; ``variant`` sets the norm after the attention output."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r} is unknown; allowed: {tuple(VARIANTS)}")
    fields = dict(
        vocab_size=task.vocab_size, n_outputs=task.n_outputs, d_model=64, n_heads=4, d_mlp=256,
        causal=False, queries="last", **VARIANTS[variant],
    )
    return ModelConfig(**{**fields, **overrides})


@contextmanager
def scaled_attention_output(model: nn.Module, scale: float | Tensor) -> Iterator[None]:
    """Multiply layer 0's attention output (before any norm) by ``scale`` while the context is open.

    An intervention, not a recording: it tests whether restoring the output's scale alone restores
    accuracy. ``scale`` is a number or a tensor broadcasting against [batch, pos, d_model].
    """
    hook = dict(model.named_modules())[ATTN_OUT]
    handle = hook.register_forward_hook(lambda _m, _i, out: out * scale)
    try:
        yield
    finally:
        handle.remove()


@dataclass(frozen=True)
class RetrievalTable:
    """Per-N evaluation of one model: each field is a [len(N)] array (means over samples)."""

    N: np.ndarray
    n_samples: int  # test sets per N
    seed: int  # evaluation seed: the same seed means the same test sets
    accuracy: np.ndarray
    target_attention: np.ndarray  # attention mass on the correct item, best head (see evaluate_retrieval)
    n_eff: np.ndarray  # 1 / sum_i a_i^2 over the N + 1 keys, mean over heads
    attn_out_rms: np.ndarray  # sqrt(mean_j o_j^2) of the attention output at the query, before the norm
    feature_var: np.ndarray  # [len(N), n_components]: Var over samples of components 0..n_components-1
    median_feature_var: np.ndarray  # median over all d_model components
    global_mean: np.ndarray
    global_var: np.ndarray
    normed_feature_var: np.ndarray | None  # the same after the norm (None for the baseline)
    normed_median_feature_var: np.ndarray | None
    normed_global_mean: np.ndarray | None
    normed_global_var: np.ndarray | None


@torch.no_grad()
def evaluate_retrieval(
    model: nn.Module,
    task: RetrievalTask,
    sizes: Sequence[int],
    n_samples: int = 500,
    seed: int = 0,
    n_components: int = 3,
    scale: Sequence[float] | None = None,
) -> RetrievalTable:
    """Accuracy, attention and the shift statistics of ``model`` at every N in ``sizes``.

    The same ``seed`` gives every model the same test sets. ``target_attention`` is the mass the
    best head (largest mean mass) puts on the correct item. ``scale[i]``, if given, multiplies the
    attention output at ``sizes[i]`` (see :func:`scaled_attention_output`).
    """
    if not sizes or any(not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"sizes must be a non-empty list of positive ints, got {sizes!r}")
    if scale is not None and len(scale) != len(sizes):
        raise ValueError(f"scale must have one entry per size ({len(sizes)}), got {len(scale)}")
    normed = NORMED in dict(model.named_modules())
    names = [PATTERN, ATTN_OUT] + ([NORMED] if normed else [])
    rows: dict[str, list] = {}
    for i, N in enumerate(sizes):
        batch = task.sample_train_batch(n_samples, N, make_generator(seed * 100_003 + N))
        with scaled_attention_output(model, 1.0 if scale is None else float(scale[i])):
            logits, cache = run_with_cache(model, batch.inputs, names=names)
        pattern = cache[PATTERN][:, :, -1]  # [samples, head, N + 1] (the query's row)
        target = task.target_item(batch.inputs)  # [samples]
        on_target = pattern.gather(-1, target.view(-1, 1, 1).expand(-1, pattern.shape[1], 1)).squeeze(-1)
        row = {
            "accuracy": (logits[:, -1].argmax(-1) == batch.targets[:, -1].argmax(-1)).float().mean().item(),
            "target_attention": on_target.mean(0).max().item(),
            "n_eff": metrics.effective_tokens(pattern).mean().item(),
        }
        for prefix, name in (("", ATTN_OUT),) + ((("normed_", NORMED),) if normed else ()):
            out = cache[name][:, -1]  # [samples, d_model] at the query
            stats = shift_statistics(out)
            row |= {
                f"{prefix}feature_var": stats.feature_var[:n_components],
                f"{prefix}median_feature_var": stats.median_feature_var,
                f"{prefix}global_mean": stats.global_mean,
                f"{prefix}global_var": stats.global_var,
            }
            if not prefix:
                row["attn_out_rms"] = out.square().mean(-1).sqrt().mean().item()
        for key, value in row.items():
            rows.setdefault(key, []).append(value)
    arrays = {key: np.asarray(value) for key, value in rows.items()}
    missing = {f"normed_{k}": None for k in ("feature_var", "median_feature_var", "global_mean", "global_var")}
    return RetrievalTable(N=np.asarray(sizes), n_samples=n_samples, seed=seed, **{**missing, **arrays})


@torch.no_grad()
def attention_output_samples(
    model: nn.Module, task: RetrievalTask, N: int, n_samples: int = 500, seed: int = 0
) -> tuple[Tensor, Tensor | None]:
    """The query's attention output on ``n_samples`` test sets of size N, before and after the norm:
    ([samples, d_model], [samples, d_model] or None without a norm). Same test sets as evaluate_retrieval."""
    normed = NORMED in dict(model.named_modules())
    batch = task.sample_train_batch(n_samples, N, make_generator(seed * 100_003 + N))
    _, cache = run_with_cache(model, batch.inputs, names=[ATTN_OUT] + ([NORMED] if normed else []))
    return cache[ATTN_OUT][:, -1], cache[NORMED][:, -1] if normed else None


def stack_field(tables: Sequence[RetrievalTable], field: str) -> np.ndarray:
    """One RetrievalTable field across seeds: [K, len(N)] (or [K, len(N), ...])."""
    if not tables:
        raise ValueError("tables must hold at least one RetrievalTable")
    values = [getattr(table, field) for table in tables]
    if any(v is None for v in values):
        raise ValueError(f"field {field!r} is missing (None) in some tables: a model without a norm has no normed_*")
    return np.stack(values)


@dataclass
class VariantRun:
    """One variant trained over K seeds (one batched ``train`` call) and evaluated per seed."""

    result: TrainResult
    tables: list[RetrievalTable]

    def field(self, name: str) -> np.ndarray:
        return stack_field(self.tables, name)


def run_variants(
    task: RetrievalTask,
    variants: Sequence[str] = tuple(VARIANTS),
    seeds: Sequence[int] = (0, 1, 2),
    train_cfg: TrainConfig = RETRIEVAL_TRAIN,
    sizes: Sequence[int] = TEST_SIZES,
    n_samples: int = 500,
    progress: bool = True,
    **model_overrides: object,
) -> dict[str, VariantRun]:
    """Train every variant on ``task`` (all seeds in one ``train`` call each) and evaluate at ``sizes``.

    Every model is tested on the same sets (evaluation seed 0).
    """
    runs = {}
    for variant in variants:
        cfg = retrieval_config(task, variant, **model_overrides)
        result = train(cfg, task, train_cfg, seeds=list(seeds), model_class=RetrievalTransformer,
                       progress=progress, desc=f"{type(task).__name__}, {variant}")
        runs[variant] = VariantRun(result, [evaluate_retrieval(m, task, sizes, n_samples) for m in result.models])
    return runs


def evaluate_rescaled(model: nn.Module, task: RetrievalTask, table: RetrievalTable, reference_size: int = 16) -> RetrievalTable:
    """Re-evaluate on ``table``'s test sets with the attention output rescaled, at every N, to the
    mean RMS it had at ``reference_size`` (a training size): a norm bolted on at test time."""
    sizes = [int(n) for n in table.N]
    if reference_size not in sizes:
        raise ValueError(f"reference_size={reference_size} is not among the table's sizes {sizes}")
    scale = table.attn_out_rms[sizes.index(reference_size)] / table.attn_out_rms
    return evaluate_retrieval(model, task, sizes, n_samples=table.n_samples, seed=table.seed, scale=list(scale))


@dataclass(frozen=True)
class NearMisses:
    """How argmax retrieval goes wrong at one N."""

    error_rate: float
    near_miss: float  # among errors: the predicted label is held by one of the runner-up items
    chance: float  # the same for a uniformly random wrong label: 1 - (1 - 1/n_classes)^runners_up


@torch.no_grad()
def argmax_near_misses(
    model: nn.Module, task: ArgmaxRetrieval, N: int, n_samples: int = 500, seed: int = 0, runners_up: int = 4
) -> NearMisses:
    """Are the errors confusions with the next-highest priorities (near-ties), or arbitrary?"""
    if not isinstance(runners_up, int) or not 1 <= runners_up < N:
        raise ValueError(f"runners_up must be an int in 1..N-1 = 1..{N - 1}, got {runners_up!r}")
    batch = task.sample_train_batch(n_samples, N, make_generator(seed * 100_003 + N))
    predicted = model(batch.inputs)[:, -1].argmax(-1)  # [samples]
    order = batch.inputs[:, :-1, 0].argsort(dim=-1, descending=True)  # items by priority
    labels = batch.inputs[:, :-1, 1].long().gather(1, order[:, 1 : 1 + runners_up])  # [samples, runners_up]
    wrong = predicted != batch.targets[:, -1].argmax(-1)
    held = (labels == predicted.unsqueeze(-1)).any(-1)
    return NearMisses(
        error_rate=wrong.float().mean().item(),
        near_miss=held[wrong].float().mean().item() if wrong.any() else float("nan"),
        chance=1 - (1 - 1 / task.n_classes) ** runners_up,
    )
