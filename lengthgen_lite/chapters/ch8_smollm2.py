"""Chapter 8, part D (P6): a causal test in SmolLM2-135M, which the variance paper
lacks. Chapter 4 saw layer 0's attention output shrink with N in a real model; does
that shrinkage, or the softmax's dispersion, cost the model anything?

The model reads windows of ``WINDOW`` (512) tokens, BOS first: natural text (chapter
4's) and, as a control, uniformly random tokens. The loss is the mean next-token loss
over each window's last ``LOSS_POSITIONS`` (64) predicted tokens: the predictions made
after seeing 448..511 tokens, the book's choice of "the loss at N = 512". Three
conditions, each a forward-time change that leaves the weights untouched (hooks,
removed on exit):

- ``none``: the model as loaded;
- ``logn``: test-time log-N scaling (:func:`logn_scaling`): in the early sink-free
  layers (:func:`early_sink_free`: from layer 0 up to the first layer whose sink
  mass at N = 512 reaches chapter 4's ``SINK_FREE``, 0.05, on either input), the
  attention logits of the query that sees n keys are multiplied by log n / log 64
  beyond n = 64 (by 1 up to it);
- ``std``: layer 0's attention output (after ``o_proj``, chapter 4's quantity)
  restored to its N = 64 spread (:func:`std_restored`): per feature, its deviation
  from the band mean is multiplied by std at N = 64 over std at the query's length
  (bands of lengths, :class:`Layer0Spread`), the mean kept.

Prediction, stated before any run: the variance paper's account (the shrinking
spread is a distribution shift that hurts) predicts that restoring layer 0's spread
lowers the loss at N = 512; the two-kinds account predicts that neither intervention
matters much (within 0.05 nats) for a pretrained model with RoPE and attention sinks.
Windows are the unit of replication: each effect is a paired difference per window
with its t-interval over the 20 windows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..core.pretrained import SINK_FREE, record_last_positions, sink_mass
from ..core.validation import is_int, require_choice, require_int
from ..runs.claims import Claim, Decision, Effect, cell_word

WINDOW = 512  # tokens a window holds: the tested N
REFERENCE = 64  # the length whose level the interventions keep (log N's n_train)
LOSS_POSITIONS = 64  # the last predicted tokens of a window the loss averages
N_WINDOWS = 20  # windows per input kind
CONDITIONS = ("none", "logn", "std")
INPUTS = ("natural text", "random tokens")
# 0.05 nats per token: a 5 % change in perplexity (e^0.05 = 1.05), small next to the
# losses compared but well beyond float rounding and what a reader would call no change
LOSS_SESOI = 0.05


def logn_factors(length: int, reference: int = REFERENCE) -> torch.Tensor:
    """[length]: the logit factor of the query at 0-based position p, which sees n =
    p + 1 keys: log n / log reference beyond the reference, 1 up to it (so the first
    ``reference`` positions are the plain model's)."""
    require_int("reference", reference, minimum=2)
    require_int("length", length, minimum=1)
    n = torch.arange(1, length + 1, dtype=torch.float32)
    return (n.log() / math.log(reference)).clamp_min(1.0)


def _layer_index(model: Any, layer: object) -> int:
    count = len(model.model.layers)
    if not is_int(layer) or not 0 <= layer < count:
        raise ValueError(f"layers must be ints in 0..{count - 1}, got {layer!r}")
    return int(layer)


@contextmanager
def logn_scaling(
    model: Any, layers: Sequence[int], reference: int = REFERENCE
) -> Iterator[Any]:
    """Inside, ``layers`` multiply their attention logits by :func:`logn_factors`.

    A hook scales each query row of ``q_proj``'s output: RoPE rotates a query, so a
    factor on it before RoPE is the same factor on every logit of its row, whatever
    attention implementation runs. Positions count from the window's first token (no
    cache, no padding)."""
    if not layers:
        raise ValueError("layers is empty; allowed: one or more layer indices")
    chosen = [_layer_index(model, layer) for layer in layers]
    require_int("reference", reference, minimum=2)

    def scale(_module: Any, _args: Any, out: torch.Tensor) -> torch.Tensor:
        # out: [batch, pos, heads * d_head]
        return out * logn_factors(out.shape[1], reference).to(out.dtype)[:, None]

    handles = [
        model.model.layers[i].self_attn.q_proj.register_forward_hook(scale)
        for i in chosen
    ]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def length_bands(length: int, reference: int = REFERENCE) -> tuple[int, ...]:
    """The upper ends N_b of the length bands: reference, 2 reference, 4 reference,
    ... and ``length`` last. Band b holds the queries that see n in (N_{b-1}, N_b]
    keys; the first, (reference / 2, reference], is the reference level."""
    require_int("reference", reference, minimum=2)
    require_int("length", length, minimum=reference + 1)
    ends = [reference]
    while 2 * ends[-1] < length:
        ends.append(2 * ends[-1])
    return (*ends, length)


def _band_slices(ends: Sequence[int]) -> list[slice]:
    """0-based positions of each band (the query at position p sees p + 1 keys)."""
    starts = [ends[0] // 2, *ends[:-1]]
    return [slice(lo, hi) for lo, hi in zip(starts, ends)]


@dataclass(frozen=True)
class Layer0Spread:
    """Per feature, the mean and std of layer 0's attention output (after ``o_proj``)
    in each length band (:func:`length_bands`), over every window and every position
    of the band: what :func:`std_restored` rescales to."""

    ends: tuple[int, ...]  # [bands]: the bands' upper lengths N_b
    mean: torch.Tensor  # [bands, d_model]
    std: torch.Tensor  # [bands, d_model]

    @property
    def ratio(self) -> torch.Tensor:
        """[bands, d_model]: std at the reference over std in each band (1 in the
        first)."""
        return self.std[0] / self.std


def layer0_spread(outputs: torch.Tensor, reference: int = REFERENCE) -> Layer0Spread:
    """The spread of ``outputs`` [windows, length, d_model] (layer 0's attention
    output of the plain model, every position) per length band."""
    if outputs.dim() != 3 or outputs.shape[0] < 2:
        raise ValueError(
            "outputs must be [windows, length, d_model] with at least 2 windows, got "
            f"{tuple(outputs.shape)}"
        )
    ends = length_bands(outputs.shape[1], reference)
    bands = [outputs[:, s].double().flatten(0, 1) for s in _band_slices(ends)]
    return Layer0Spread(
        ends,
        torch.stack([b.mean(0) for b in bands]),
        torch.stack([b.std(0) for b in bands]),
    )


@contextmanager
def std_restored(model: Any, spread: Layer0Spread) -> Iterator[Any]:
    """Inside, layer 0's attention output (after ``o_proj``) is brought back to its
    reference spread beyond the reference length: in each later band, per feature,
    ``mean + (out - mean) * std_ref / std_band`` with the band's own mean and std.
    Positions up to the reference are untouched; a window longer than the spread's
    last band raises."""
    slices = _band_slices(spread.ends)[1:]
    mean = spread.mean[1:].float()
    ratio = spread.ratio[1:].float()

    def restore(_module: Any, _args: Any, out: torch.Tensor) -> torch.Tensor:
        # out: [batch, pos, d_model]
        if out.shape[1] > spread.ends[-1]:
            raise ValueError(
                f"windows of {out.shape[1]} tokens; allowed: at most "
                f"{spread.ends[-1]}, the length the spread was measured at"
            )
        out = out.clone()
        for s, m, r in zip(slices, mean, ratio):
            out[:, s] = m + (out[:, s] - m) * r
        return out

    handle = model.model.layers[0].self_attn.o_proj.register_forward_hook(restore)
    try:
        yield model
    finally:
        handle.remove()


@dataclass(frozen=True)
class LossRun:
    """One condition on one set of windows: the loss, the sinks and layer 0's
    output."""

    loss: np.ndarray  # [windows]: mean next-token loss over the last predictions
    sink: np.ndarray  # [layers]: the last query's weight on BOS (chapter 4's sink)
    layer0: torch.Tensor  # [windows, length, d_model]: layer 0's attention output


def _check_windows(windows: torch.Tensor, loss_positions: int, reference: int) -> None:
    if windows.dim() != 2 or windows.dtype != torch.long:
        raise ValueError(
            f"windows must be [windows, length] long, got {tuple(windows.shape)} "
            f"{windows.dtype}"
        )
    length = windows.shape[1]
    if length <= reference or length <= loss_positions:
        raise ValueError(
            f"windows of {length} tokens; allowed: longer than the reference "
            f"({reference}) and than the loss positions ({loss_positions})"
        )


@torch.no_grad()
def next_token_loss(
    model: Any,
    windows: torch.Tensor,
    condition: str,
    layers: Sequence[int] = (),
    spread: Layer0Spread | None = None,
    loss_positions: int = LOSS_POSITIONS,
    reference: int = REFERENCE,
) -> LossRun:
    """Each window's mean next-token loss over its last ``loss_positions`` tokens
    under ``condition`` (``logn`` needs ``layers``, ``std`` a ``spread``), with the
    sinks and layer 0's output recorded on the way (one forward per chunk:
    :func:`~lengthgen_lite.core.pretrained.record_last_positions`, whose fused
    attention every condition shares)."""
    require_choice("condition", condition, CONDITIONS)
    require_int("loss_positions", loss_positions, minimum=1)
    _check_windows(windows, loss_positions, reference)
    if condition == "std" and spread is None:
        raise ValueError("condition 'std' needs a spread (layer0_spread of 'none')")
    hidden: list[torch.Tensor] = []
    layer0: list[torch.Tensor] = []
    base = model.model
    # the intervention's hooks first: layer 0's recording sees what layer 1 reads
    with _condition(model, condition, layers, spread, reference):
        handles = [
            # the final norm's states that predict the last loss_positions tokens
            base.norm.register_forward_hook(
                lambda m, a, out: hidden.append(out[:, -loss_positions - 1 : -1])
            ),
            base.layers[0].self_attn.o_proj.register_forward_hook(
                lambda m, a, out: layer0.append(out)
            ),
        ]
        try:
            record = record_last_positions(model, windows, [windows.shape[1]])
        finally:
            for handle in handles:
                handle.remove()
    targets = windows[:, -loss_positions:]
    # one window at a time: the logits of all of them would take 250 MB
    loss = [
        F.cross_entropy(model.lm_head(h), t).item()
        for h, t in zip(torch.cat(hidden), targets)
    ]
    return LossRun(np.array(loss), sink_mass(record)[:, 0], torch.cat(layer0))


@contextmanager
def _condition(
    model: Any,
    condition: str,
    layers: Sequence[int],
    spread: Layer0Spread | None,
    reference: int,
) -> Iterator[Any]:
    if condition == "logn":
        with logn_scaling(model, layers, reference):
            yield model
    elif condition == "std" and spread is not None:
        with std_restored(model, spread):
            yield model
    else:
        yield model


def early_sink_free(
    sinks: Mapping[str, np.ndarray], cutoff: float = SINK_FREE
) -> tuple[int, ...]:
    """The early sink-free layers: from layer 0 up to the first layer whose sink mass
    (``sinks[input]`` [layers], at N = 512) reaches ``cutoff`` on any input. Later
    sink-free layers (chapter 4 found some in the middle) are left alone: the
    question is the early, i.i.d.-like layers."""
    if not sinks:
        raise ValueError("sinks is empty; allowed: one [layers] array per input")
    worst = np.max(np.stack([np.asarray(s) for s in sinks.values()]), axis=0)
    first_sink = int(np.argmax(worst >= cutoff)) if (worst >= cutoff).any() else None
    return tuple(range(len(worst) if first_sink is None else first_sink))


@dataclass(frozen=True)
class CausalTest:
    """P6's runs: every input kind under every condition, and the settings the
    interventions took from the plain run."""

    runs: dict[tuple[str, str], LossRun]  # (input, condition) -> run
    layers: tuple[int, ...]  # the layers log-N scaling acted on
    spread: dict[str, Layer0Spread]  # per input: what ``std`` restored to

    def loss(self, kind: str, condition: str) -> np.ndarray:
        """[windows]: the per-window loss of one input under one condition."""
        require_choice("input", kind, sorted({k for k, _ in self.runs}))
        require_choice("condition", condition, CONDITIONS)
        return self.runs[(kind, condition)].loss

    def change(self, kind: str, condition: str) -> np.ndarray:
        """[windows]: the plain loss minus the intervened one (> 0: lower loss)."""
        return self.loss(kind, "none") - self.loss(kind, condition)


def causal_test(model: Any, inputs: Mapping[str, torch.Tensor]) -> CausalTest:
    """Every condition on every input kind (``inputs[kind]`` [windows, length]): the
    plain run first, whose sinks choose the layers (:func:`early_sink_free`) and whose
    layer 0 output gives each kind's spread (:func:`layer0_spread`)."""
    if not inputs:
        raise ValueError("inputs is empty; allowed: input kind -> [windows, length]")
    runs = {(k, "none"): next_token_loss(model, w, "none") for k, w in inputs.items()}
    layers = early_sink_free({k: runs[(k, "none")].sink for k in inputs})
    if not layers:
        raise ValueError("layer 0 has a sink: no early sink-free layer to scale")
    spread = {k: layer0_spread(runs[(k, "none")].layer0) for k in inputs}
    for kind, windows in inputs.items():
        runs[(kind, "logn")] = next_token_loss(model, windows, "logn", layers=layers)
        runs[(kind, "std")] = next_token_loss(
            model, windows, "std", spread=spread[kind]
        )
    return CausalTest(runs, layers, spread)


def loss_effect(test: CausalTest, kind: str, condition: str) -> Effect:
    """One input's cell of a P6 claim: the plain loss minus ``condition``'s, paired
    per window, with its t-interval (no training: step 0)."""
    return Effect.of(test.change(kind, condition), 0, input=kind)


def p6_decisions(test: CausalTest) -> dict[str, Decision]:
    """The two P6 rows, decided on natural text: claim key -> decision. The random
    windows are the control (:func:`control_words`), not a cell: with nothing to
    predict, a change there shows what the intervention does apart from the text."""
    windows = test.runs[("natural text", "none")].loss.size
    base = (
        f"SmolLM2-135M, {windows} text windows of {WINDOW} tokens, loss over the "
        f"last {LOSS_POSITIONS}"
    )
    done = {
        "logn": f"log n / log {REFERENCE} on layers {', '.join(map(str, test.layers))}",
        "std": f"layer 0's spread restored beyond {REFERENCE} tokens",
    }
    return {
        claim.key: claim.decide(
            [loss_effect(test, "natural text", condition)],
            detail=f"{base}; {done[condition]}",
        )
        for claim, condition in ((LOGN_LOSS_CLAIM, "logn"), (STD_LOSS_CLAIM, "std"))
    }


def control_words(test: CausalTest) -> dict[str, str]:
    """Per intervention, its cell word on the random-token windows under the claims'
    protocol and SESOI."""
    return {
        condition: cell_word(loss_effect(test, "random tokens", condition), LOSS_SESOI)
        for condition in ("logn", "std")
    }


# P6, declared once before any run. Both claims state the intervention's promise (a
# lower loss, by at least the SESOI); the two-kinds account predicts "no effect" for
# both (the 90 % interval inside +-0.05 nats), the variance paper "reproduced" for std.
#: P6: test-time log-N scaling of the early sink-free layers lowers the text loss.
LOGN_LOSS_CLAIM = Claim(
    "ch8-score-logn-smollm2",
    "P6: In SmolLM2-135M, test-time log-N scaling (log n / log 64) of the early "
    "sink-free layers lowers the next-token loss on text at N = 512 by at least "
    "0.05 nats",
    "[ours]; log n: 2202.12172 [paper]",
    metric="next-token loss over the last 64 tokens of 512",
    unit="nats per token",
    effect="plain loss minus the scaled model's",
    sesoi=LOSS_SESOI,
    cells=("input",),
    replicates="windows",
)
#: P6: restoring layer 0's per-feature std to its N = 64 level lowers the text loss.
STD_LOSS_CLAIM = Claim(
    "ch8-score-std-smollm2",
    "P6: In SmolLM2-135M, restoring layer 0's per-feature attention-output std to "
    "its N = 64 level lowers the next-token loss on text at N = 512 by at least "
    "0.05 nats",
    "[ours]; vanishing variance: 2504.02827 [paper]",
    metric="next-token loss over the last 64 tokens of 512",
    unit="nats per token",
    effect="plain loss minus the restored model's",
    sesoi=LOSS_SESOI,
    cells=("input",),
    replicates="windows",
)
P6_CLAIMS = (LOGN_LOSS_CLAIM, STD_LOSS_CLAIM)
