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
with its t-interval over the windows.

Two scales, as the trained chapters have: the full test (``N_WINDOWS``, 20 windows
per input, 216 s on a loaded core when the shipped file was made) is run once by
``lengthgen-lite smollm2`` (:func:`store_reference`) and shipped as package data beside
the reference sweeps (``REFERENCE_FILE``, read by :func:`load_reference`); the notebook
runs a live slice, its first ``LIVE_WINDOWS`` windows, to show the interventions at
work.
"""

from __future__ import annotations

import math
import pathlib
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..core.pretrained import (
    SINK_FREE,
    load_smollm2,
    load_tokenizer,
    random_token_sequences,
    record_last_positions,
    sink_mass,
    text_token_ids,
    text_windows,
)
from ..core.validation import is_int, is_number, require_choice, require_int
from ..runs.claims import Claim, Decision, Effect, Tier, cell_word
from ..runs.results import PROVENANCE_KEYS, provenance
from ..runs.store import STORE, read_file, write_file

WINDOW = 512  # tokens a window holds: the tested N
REFERENCE = 64  # the length whose level the interventions keep (log N's n_train)
LOSS_POSITIONS = 64  # the last predicted tokens of a window the loss averages
N_WINDOWS = 20  # windows per input kind: the stored test
LIVE_WINDOWS = 3  # the notebook's slice: the first 3 of them (about 40 s, loaded)
CONDITIONS = ("none", "logn", "std")
INPUTS = ("natural text", "random tokens")
# 0.05 nats per token: a 5 % change in perplexity (e^0.05 = 1.05), small next to the
# losses compared but well beyond float rounding and what a reader would call no change
LOSS_SESOI = 0.05
# the stored test, package data beside the reference sweeps, and what makes it
REFERENCE_FILE = pathlib.Path("ch8__smollm2", "causal_test.json.gz")  # under STORE
COMMAND = "lengthgen-lite smollm2"


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
    """P6's measurement: every input kind's per-window losses under every condition,
    and what the interventions took from the plain run and did, in numbers small
    enough to store (:meth:`to_dict`; the full test is stored once,
    :func:`load_reference`)."""

    losses: dict[tuple[str, str], np.ndarray]  # (input, condition) -> [windows]
    sinks: dict[str, np.ndarray]  # input -> [layers]: the plain model's sink at N
    layers: tuple[int, ...]  # the layers log-N scaling acted on
    ends: tuple[int, ...]  # [bands]: the length bands' upper ends (length_bands)
    # input -> [bands]: the median over features of std at the reference over std in
    # the band, the plain run's (what ``std`` multiplied the deviations by)
    ratio: dict[str, np.ndarray]
    # input -> [bands]: the largest relative gap over features between the restored
    # run's std in the band and the reference std (0 when the hook did its job)
    restored_gap: dict[str, np.ndarray]

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for k, _ in self.losses))

    def windows(self, kind: str) -> int:
        """How many windows of ``kind`` the test read."""
        return self.loss(kind, "none").size

    def loss(self, kind: str, condition: str) -> np.ndarray:
        """[windows]: the per-window loss of one input under one condition."""
        require_choice("input", kind, self.inputs)
        require_choice("condition", condition, CONDITIONS)
        return self.losses[(kind, condition)]

    def change(self, kind: str, condition: str) -> np.ndarray:
        """[windows]: the plain loss minus the intervened one (> 0: lower loss)."""
        return self.loss(kind, "none") - self.loss(kind, condition)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types, floats unrounded (a stored file gives the same
        decisions)."""
        return {
            "inputs": list(self.inputs),
            "losses": {
                kind: {c: self.loss(kind, c).tolist() for c in CONDITIONS}
                for kind in self.inputs
            },
            "sinks": {kind: self.sinks[kind].tolist() for kind in self.inputs},
            "layers": list(self.layers),
            "ends": list(self.ends),
            "ratio": {kind: self.ratio[kind].tolist() for kind in self.inputs},
            "restored_gap": {
                kind: self.restored_gap[kind].tolist() for kind in self.inputs
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CausalTest:
        """The test :meth:`to_dict` gave, checked: a missing or ill-shaped field is a
        ``ValueError`` naming it."""
        if not isinstance(data, Mapping) or set(data) != set(TEST_KEYS):
            got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"a causal test has fields {list(TEST_KEYS)}, got {got}")
        inputs = data["inputs"]
        if not isinstance(inputs, list) or not inputs or len(set(inputs)) < len(inputs):
            raise ValueError(f"inputs must be a list of distinct names, got {inputs!r}")
        layers = _int_list("layers", data["layers"])
        ends = _int_list("ends", data["ends"])
        losses = {}
        for kind in inputs:
            by_condition = _per_input("losses", data["losses"], kind)
            if not isinstance(by_condition, Mapping) or set(by_condition) != set(
                CONDITIONS
            ):
                raise ValueError(
                    f"losses[{kind!r}] must hold the conditions {list(CONDITIONS)}"
                )
            for c in CONDITIONS:
                losses[(kind, c)] = _floats(f"losses[{kind!r}][{c!r}]", by_condition[c])
            sizes = {losses[(kind, c)].size for c in CONDITIONS}
            if len(sizes) > 1 or min(sizes) < 2:
                raise ValueError(
                    f"losses[{kind!r}] must hold the same windows (at least 2) under "
                    f"every condition, got {sorted(sizes)}"
                )

        def arrays(field: str, size: int | None = None) -> dict[str, np.ndarray]:
            out = {
                k: _floats(f"{field}[{k!r}]", _per_input(field, data[field], k))
                for k in inputs
            }
            if size is not None and any(a.size != size for a in out.values()):
                raise ValueError(f"{field} must hold {size} values per input")
            return out

        return cls(
            losses,
            arrays("sinks"),
            layers,
            ends,
            arrays("ratio", len(ends)),
            arrays("restored_gap", len(ends)),
        )


TEST_KEYS = ("inputs", "losses", "sinks", "layers", "ends", "ratio", "restored_gap")


def _per_input(field: str, table: object, kind: str) -> Any:
    if not isinstance(table, Mapping) or kind not in table:
        raise ValueError(f"{field} lacks the input {kind!r}")
    return table[kind]


def _floats(field: str, values: object) -> np.ndarray:
    if not isinstance(values, list) or not all(map(is_number, values)):
        raise ValueError(f"{field} must be a list of finite numbers")
    return np.array(values, dtype=float)


def _int_list(field: str, values: object) -> tuple[int, ...]:
    if not isinstance(values, list) or not values or not all(map(is_int, values)):
        raise ValueError(f"{field} must be a non-empty list of ints, got {values!r}")
    return tuple(values)


def causal_test(model: Any, inputs: Mapping[str, torch.Tensor]) -> CausalTest:
    """Every condition on every input kind (``inputs[kind]`` [windows, length]): the
    plain run first, whose sinks choose the layers (:func:`early_sink_free`) and whose
    layer 0 output gives each kind's spread (:func:`layer0_spread`)."""
    if not inputs:
        raise ValueError("inputs is empty; allowed: input kind -> [windows, length]")
    plain = {k: next_token_loss(model, w, "none") for k, w in inputs.items()}
    sinks = {k: run.sink for k, run in plain.items()}
    layers = early_sink_free(sinks)
    if not layers:
        raise ValueError("layer 0 has a sink: no early sink-free layer to scale")
    losses, ratio, gap = {}, {}, {}
    for kind, windows in inputs.items():
        spread = layer0_spread(plain[kind].layer0)
        restored = next_token_loss(model, windows, "std", spread=spread)
        after = layer0_spread(restored.layer0).std
        losses[(kind, "none")] = plain[kind].loss
        losses[(kind, "logn")] = next_token_loss(
            model, windows, "logn", layers=layers
        ).loss
        losses[(kind, "std")] = restored.loss
        ratio[kind] = spread.ratio.median(dim=1).values.numpy()
        gap[kind] = (after / spread.std[0] - 1).abs().amax(dim=1).numpy()
    # every kind's windows have one length: one set of bands
    ends = length_bands(next(iter(inputs.values())).shape[1])
    return CausalTest(losses, sinks, layers, ends, ratio, gap)


def smollm2_windows(
    model: Any, tokenizer: Any, n_windows: int = N_WINDOWS
) -> dict[str, torch.Tensor]:
    """The chapter's inputs, ``[n_windows, WINDOW]`` each, BOS first: the first
    ``n_windows`` of its ``N_WINDOWS`` windows of chapter 4's text (seed 80) and of
    random tokens (seed 81), so a live slice reads the stored test's first windows."""
    n_windows = require_int("n_windows", n_windows, minimum=2, maximum=N_WINDOWS)
    size = {
        "n_sequences": N_WINDOWS,
        "length": WINDOW,
        "start_id": model.config.bos_token_id,
    }
    text = text_windows(text_token_ids(tokenizer), **size, seed=80)
    random = random_token_sequences(
        **size,
        vocab_size=model.config.vocab_size,
        first_id=max(tokenizer.all_special_ids) + 1,  # no special token drawn
        seed=81,
    )
    return {"natural text": text[:n_windows], "random tokens": random[:n_windows]}


def smollm2_causal_test(n_windows: int = N_WINDOWS) -> CausalTest:
    """P6 on SmolLM2-135M (cached, offline): :func:`causal_test` on
    :func:`smollm2_windows`. ``N_WINDOWS`` is the stored test, ``LIVE_WINDOWS`` the
    notebook's slice."""
    n_windows = require_int("n_windows", n_windows, minimum=2, maximum=N_WINDOWS)
    model = load_smollm2()
    return causal_test(model, smollm2_windows(model, load_tokenizer(), n_windows))


def _settings() -> dict[str, Any]:
    """What decides the stored numbers besides the model: a file made with other
    settings is stale."""
    return {
        "model": "SmolLM2-135M",
        "window": WINDOW,
        "reference": REFERENCE,
        "loss_positions": LOSS_POSITIONS,
        "windows_per_input": N_WINDOWS,
        "seeds": {"natural text": 80, "random tokens": 81},
        "conditions": list(CONDITIONS),
    }


def store_reference(
    root: str | pathlib.Path = STORE, command: str | None = None
) -> pathlib.Path:
    """Run P6 on all ``N_WINDOWS`` windows and store it under ``root``
    (``REFERENCE_FILE``'s place in it), with its provenance: versions, CPU,
    date, wall and CPU seconds, the command and the settings."""
    wall, cpu = time.perf_counter(), time.process_time()
    test = smollm2_causal_test(N_WINDOWS)
    origin = provenance(time.perf_counter() - wall, command) | {
        "cpu_seconds": round(time.process_time() - cpu, 3),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    path = pathlib.Path(root) / REFERENCE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"provenance": origin, "settings": _settings(), "test": test.to_dict()}
    write_file(path, data)
    return path


def load_reference(root: str | pathlib.Path = STORE) -> CausalTest:
    """The stored P6 test (all ``N_WINDOWS`` windows), checked: its provenance, its
    settings (the module's own) and its fields."""
    path = pathlib.Path(root) / REFERENCE_FILE
    if not path.exists():
        raise ValueError(f"P6's stored test is missing ({path}); run: {COMMAND}")
    try:
        data = read_file(path)
    except ValueError as err:  # not whole gzipped JSON
        raise ValueError(f"{err}; re-make it: {COMMAND}") from None
    if set(data) != {"provenance", "settings", "test"}:
        raise ValueError(
            f"{path}: fields {sorted(data)}; expected provenance, settings, test"
        )
    if missing := {*PROVENANCE_KEYS, "cpu_seconds", "date"} - set(data["provenance"]):
        raise ValueError(f"{path}: provenance lacks {sorted(missing)}")
    if data["settings"] != _settings():
        raise ValueError(
            f"{path} was made with other settings ({data['settings']}); re-make it: "
            f"{COMMAND}"
        )
    try:
        test = CausalTest.from_dict(data["test"])
    except ValueError as err:
        raise ValueError(f"{path}: {err}; re-make it: {COMMAND}") from None
    if test.inputs != INPUTS or any(test.windows(k) != N_WINDOWS for k in INPUTS):
        raise ValueError(
            f"{path}: expected {N_WINDOWS} windows of each of {list(INPUTS)}"
        )
    return test


def loss_effect(test: CausalTest, kind: str, condition: str) -> Effect:
    """One input's cell of a P6 claim: the plain loss minus ``condition``'s, paired
    per window, with its t-interval (no training: step 0)."""
    return Effect.of(test.change(kind, condition), 0, input=kind)


def p6_decisions(test: CausalTest, tier: Tier = "live") -> dict[str, Decision]:
    """The two P6 rows, decided on natural text: claim key -> decision (``tier``
    "reference" for the stored test, the scorecard's reference column). The random
    windows are the control (:func:`control_words`), not a cell: with nothing to
    predict, a change there shows what the intervention does apart from the text."""
    windows = test.windows("natural text")
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
            tier,
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
