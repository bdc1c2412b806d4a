"""Why do chapter 7's a^n b^n trainings collapse at the reference tier?

Issue: ``SPECS["ch7/placements"].at_tier("reference")``, a^n b^n with soft targets
(width 64, 10 seeds x 6000 steps, norms none/post/attn_out, inits book/torch): seeds
reach the loss floor, then jump (to 1-4 nats for a window) and settle on a plateau at
0.613 for good. This script measures it; nothing imports it.

Sub-commands (each prints plain numbers; none prints a time as a result):

- ``stored``: the unstable-seed counts of the stored sweep
  (``lengthgen_lite/data/reference/ch7__placements``; since issue 33 trained with
  ``ch7.STABLE_ANBN``, lr 1e-3 and a cosine decay: 0 of 60; the collapsed sweep at lr
  3e-3, 19 of 60, is in the history at 7a893e8) under the book's divergence rule (final
  window above the minimum window by more than 5 % of the fall, fall = first window -
  minimum window), split into seeds that collapsed (reached the floor, then left it)
  and seeds stuck on the plateau from the start. Instant.
- ``plateau``: the loss of simple predictors on the task's own training batches (n
  uniform in 1..8, soft targets, the loss averaged over the masked positions of a
  batch), to name the 0.613 plateau. A few seconds.
- ``trace --norm none --init torch``: retrains one configuration with this file's own
  eager loop (the package's init, data streams, loss and per-seed vmapped gradients;
  AdamW written out as ``torch.optim.AdamW``'s single-tensor update, the formula of
  ``fast_path.compiled_step``), checks its loss windows against the stored ones, and
  records per step and seed: the global gradient norm, the Adam update norm and its
  ratio to the weight norm, the per-parameter norms, the largest |attention score|
  (pre-softmax), the attention entropy and the cosine between successive W_Q/W_K
  gradients. Prints where each quantity's excursion into the jump starts, the state
  after it, and the steps around each seed's jump. ``--out`` saves the trace (.npz),
  ``--load`` reports a saved one without training. About 130 s of one idle core (10
  seeds x 6000 steps, eager; the stored sweep's compiled step takes ~50 s).
- ``remedy --norm none --init torch [--lr 1e-3] [--warmup 1000] [--clip 1.0]
  [--eps 1e-5] [--weight-decay 0.1] [--schedule cosine]``: the same loop with a changed
  recipe; prints the unstable-seed count (5 % rule), collapsed/stuck seeds, the steps
  of the jumps, the final loss and the mean TV beyond the training lengths (the
  chapter's ``evaluate_lengths`` on its 1000 test words of 48 symbols). ``--clip``
  (global norm, per seed, before Adam) and ``--eps`` (Adam's) are prototyped here:
  ``TrainConfig`` has neither. About 125 s of one idle core per configuration;
  ``--all``: the six a^n b^n configurations (about 13 min); ``--live``: the live
  scale's eight a^n b^n configurations instead (300 steps, width 32, 3 seeds; seconds).

The numbers printed do not depend on timing; the loop is deterministic at one thread
(seeds, data streams and init as ``core.training.train``), but the step at which a seed
blows up is chaotic: it moves by a few hundred steps between this eager step and the
compiled step of the stored sweep (float rounding), so compare counts, not steps.

Run from the repository root, one torch thread::

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1 \\
        .venv/bin/python benchmarks/anbn_collapse.py stored
    ... benchmarks/anbn_collapse.py plateau
    ... benchmarks/anbn_collapse.py trace --norm none --init torch --out /tmp/trace.npz
    ... benchmarks/anbn_collapse.py remedy --norm none --init torch --clip 1.0

It uses ``core.fast_path.chunked_batches`` and ``core.training``'s private pieces
(``_gradients`` with its ``traced`` flag, ``_param_groups``, ``_unstack``) as of commit
2d7fb59 (moved since, issue 34); run on a
shared machine, report CPU seconds (``/usr/bin/time``), not wall time.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gzip
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.func import stack_module_state

from lengthgen_lite.chapters.ch7_beyond_set_complement import SPECS
from lengthgen_lite.core.evaluation import evaluate_lengths
from lengthgen_lite.core.fast_path import chunked_batches
from lengthgen_lite.core.languages import AnBn
from lengthgen_lite.core.model import init_model
from lengthgen_lite.core.seeding import make_generator
from lengthgen_lite.core.training import (
    TrainConfig,
    _gradients,
    _param_groups,
    _unstack,
    training_loss,
)
from lengthgen_lite.runs.spec import Config
from lengthgen_lite.runs.store import STORE

STORED = STORE / "ch7__placements"
LIVE = SPECS["ch7/placements"]
SPEC = LIVE.at_tier("reference")
FLOOR = math.log(2) / 2  # the optimum: log 2 at each of the n a-phase positions of 2n
WINDOWS = 60
BETAS = (0.9, 0.999)  # torch.optim.AdamW's defaults, as train() uses them


# --- 1. the stored sweep -----------------------------------------------------------
def unstable(windows: np.ndarray, tolerance: float = 0.05) -> np.ndarray:
    """The book's divergence rule on loss windows [seeds, windows]: the final window
    sits above the minimum window by more than ``tolerance`` of the fall (first window
    - minimum window). -> [seeds] bool."""
    low = windows.min(1)
    return windows[:, -1] - low > tolerance * (windows[:, 0] - low)


def collapsed(windows: np.ndarray) -> np.ndarray:
    """Seeds that reached the floor (a window below 0.36) and end on the plateau
    (last window above 0.5)."""
    return (windows.min(1) < 0.36) & (windows[:, -1] > 0.5)


def stuck(windows: np.ndarray) -> np.ndarray:
    """Seeds that never reached the floor (no window below 0.5 after the first)."""
    return windows[:, 1:].min(1) > 0.5


def stored_sweep() -> dict[tuple[str, str], dict]:
    """(norm, init) -> the stored file of that a^n b^n configuration."""
    out = {}
    for path in sorted(STORED.glob("*.json.gz")):
        data = json.loads(gzip.decompress(path.read_bytes()))
        config = data["spec"]["configs"][data["config"]]
        if config["task"] == "anbn":
            out[config["norm"], config["init"]] = data
    return out


def stored_tv_beyond(data: dict) -> float:
    """Mean over seeds of the raw final weights' TV beyond length 16."""
    steps = max(row["step"] for row in data["rows"])
    values = [
        np.nanmean(np.array(row["tv"], dtype=float)[np.array(row["s"]) > 16])
        for row in data["rows"]
        if row["variant"] == "raw" and row["step"] == steps
    ]
    return float(np.mean(values))


def report_stored() -> None:
    print("stored sweep, a^n b^n soft, 10 seeds x 6000 steps")
    print("norm      init   unstable(5% rule)  collapsed  stuck  final-mean  tv_beyond")
    for (norm, init), data in sorted(stored_sweep().items()):
        w = np.array(data["training"]["loss_windows"])
        print(
            f"{norm:9s} {init:6s} {unstable(w).sum():17d}  {collapsed(w).sum():9d}"
            f"  {stuck(w).sum():5d}  {w[:, -1].mean():10.3f}  "
            f"{stored_tv_beyond(data):9.3f}"
        )
        print(
            f"    unstable seeds {np.flatnonzero(unstable(w)).tolist()}, "
            f"collapsed {np.flatnonzero(collapsed(w)).tolist()}, "
            f"stuck {np.flatnonzero(stuck(w)).tolist()}"
        )


# --- 2. the plateau ------------------------------------------------------------------
def predictor_losses(n_batches: int = 2000, batch: int = 64, size: int = 16) -> dict:
    """Loss of simple predictors on the training distribution, by Monte Carlo over the
    task's own batches (the loss of a batch is its masked positions' mean, as
    ``training_loss``), and in closed form (ratio of expectations)."""
    task = AnBn(train_length=size)
    g = make_generator(12345)
    data = task.sample_train_batches(batch * n_batches, size, [g])
    inputs, targets, mask = data.inputs[0], data.targets[0], data.loss_mask[0]
    inputs = inputs.view(n_batches, batch, size)
    targets = targets.view(n_batches, batch, size, -1)
    mask = mask.view(n_batches, batch, size)
    b = 1  # the token b
    seen_b = (inputs == b).long().cumsum(-1) > 0  # the phase: has a b been read?
    n_max = size // 2
    e_n = (n_max + 1) / 2  # E[n], n uniform in 1..n_max
    q = 1 / e_n  # share of EOS among the b-phase positions

    def loss_of(probs: Tensor) -> float:
        per_batch = torch.stack(
            [
                training_loss(probs[i].clamp_min(1e-12).log(), targets[i], mask[i])
                for i in range(n_batches)
            ]
        )
        return float(per_batch.mean())

    def table(p_a_phase: Sequence[float], p_b_phase: Sequence[float]) -> Tensor:
        pa, pb = torch.tensor(p_a_phase), torch.tensor(p_b_phase)
        return torch.where(seen_b[..., None], pb, pa)

    marg_b = (e_n / 2 + (e_n - 1)) / (2 * e_n)
    marginal = [0.25, marg_b, 1 - 0.25 - marg_b]  # every legal-next target, pooled
    closed = {
        "floor (exact counter)": FLOOR,
        "phase known, EOS prob 1/E[n] in b-phase": (
            e_n * math.log(2) - (e_n - 1) * math.log(1 - q) - math.log(q)
        )
        / (2 * e_n),
        "phase known, uniform {b, EOS} in b-phase": math.log(2),
        "marginal legal-next distribution": -(
            e_n * (0.5 * math.log(marginal[0]) + 0.5 * math.log(marginal[1]))
            + (e_n - 1) * math.log(marginal[1])
            + math.log(marginal[2])
        )
        / (2 * e_n),
    }
    sampled = {
        "phase known, EOS prob 1/E[n] in b-phase": loss_of(
            table([0.5, 0.5, 0.0], [0.0, 1 - q, q])
        ),
        "phase known, uniform {b, EOS} in b-phase": loss_of(
            table([0.5, 0.5, 0.0], [0.0, 0.5, 0.5])
        ),
        "marginal legal-next distribution": loss_of(table(marginal, marginal)),
    }
    # the floor: the targets themselves
    sampled["floor (exact counter)"] = loss_of(targets)
    # the best EOS probability in the b-phase for the per-batch loss, by a grid
    grid = np.linspace(0.15, 0.30, 31)
    best = min(
        (loss_of(table([0.5, 0.5, 0.0], [0.0, 1 - r, r])), float(r)) for r in grid
    )
    return {"closed": closed, "sampled": sampled, "best_q": best}


def report_plateau() -> None:
    res = predictor_losses()
    print("loss of simple predictors on a^n b^n (train size 16, n uniform 1..8):")
    print(f"{'predictor':45s} {'closed form':>11s} {'sampled':>8s}")
    for name, value in res["closed"].items():
        print(f"{name:45s} {value:11.4f} {res['sampled'][name]:8.4f}")
    loss, r = res["best_q"]
    print(f"best constant EOS prob in b-phase (grid): {r:.3f} -> {loss:.4f}")


# --- 3. the training loop ------------------------------------------------------------
@dataclass(frozen=True)
class Recipe:
    """What a training changes over the stored sweep's (lr 3e-3, warm-up 50, constant,
    no decay, eps 1e-8, no clipping)."""

    lr: float = 3e-3
    warmup: int = 50
    weight_decay: float = 0.0
    eps: float = 1e-8
    clip: float | None = None  # global gradient norm, per seed
    schedule: str = "constant"  # after the warm-up; "cosine": to zero at the last step

    def label(self) -> str:
        parts = [
            f"{f.name}={getattr(self, f.name)}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default
        ]
        return ", ".join(parts) or "baseline"


def anbn_config(norm: str, init: str) -> Config:
    """The reference sweep's a^n b^n configuration for (norm, init)."""
    (config,) = [
        c
        for c in SPEC.configurations()
        if c.task == "anbn" and c.norm == norm and c.init == init
    ]
    return config


@dataclass
class Trace:
    """Per step and seed: [steps, K] (``param_*``: [steps, K, n_params])."""

    loss: np.ndarray
    grad_norm: np.ndarray  # before clipping
    update_norm: np.ndarray  # ||p_new - p_old|| over all parameters
    weight_norm: np.ndarray
    max_score: np.ndarray  # largest |attention score| over token pairs used
    entropy: np.ndarray  # mean attention entropy over the batch's masked positions
    # cosine between this step's and the previous step's (W_Q, W_K) gradient: near -1
    # is a period-two oscillation (a step past the stability limit)
    qk_cos: np.ndarray
    param_grad: np.ndarray
    param_weight: np.ndarray
    param_update: np.ndarray
    names: list[str]


def _scores_table(params: dict[str, Tensor], d_head: int) -> Tensor:
    """The attention scores by token pair, [K, v, v] (query token, key token): the
    attention input is the embedding alone (no positions, no pre-norm), so a score
    depends on the two tokens only."""
    E = params["embed.weight"]  # [K, v, d]
    q = E @ params["blocks.0.attn.W_Q.weight"].transpose(1, 2)
    k = E @ params["blocks.0.attn.W_K.weight"].transpose(1, 2)
    return q @ k.transpose(1, 2) / math.sqrt(d_head)


def _attention_stats(
    params: dict[str, Tensor], inputs: Tensor, mask: Tensor, d_head: int
) -> tuple[Tensor, Tensor]:
    """Largest |score| over the pairs (a, b) x (a, b) and the mean entropy of the
    causal attention over the masked positions of the batch: ([K], [K])."""
    table = _scores_table(params, d_head)  # [K, v, v]
    K, B, T = inputs.shape
    max_score = table[:, :2, :2].abs().amax((1, 2))
    # scores[k, b, i, j] = table[k, tok_i, tok_j]
    rows = torch.gather(
        table[:, None].expand(K, B, *table.shape[1:]),
        2,
        inputs[..., None].expand(K, B, T, table.shape[-1]),
    )  # [K, B, T, v]
    scores = torch.gather(rows, 3, inputs[:, :, None, :].expand(K, B, T, T))
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    logp = scores.masked_fill(future, float("-inf")).log_softmax(-1)
    ent = -(logp.exp() * logp.masked_fill(future, 0.0)).sum(-1)  # [K, B, T]
    m = mask.float()
    return max_score, (ent * m).sum((1, 2)) / m.sum((1, 2))


def train_loop(
    config: Config, recipe: Recipe, seeds: Sequence[int], record: bool = True
) -> tuple[Trace, list[torch.nn.Module]]:
    """Train ``config``'s model on its task with ``recipe``, all seeds batched as
    ``core.training.train`` does (same init, same data streams, same per-seed
    gradients), eagerly, with AdamW written out (torch's single-tensor update, the same
    formula as ``fast_path.compiled_step``), plus ``recipe.clip`` and ``recipe.eps``.
    """
    model_cfg = config.model_config()
    task = config.setup().task
    cfg = TrainConfig(
        steps=config.steps,
        lr=recipe.lr,
        batch=config.batch,
        warmup=min(recipe.warmup, config.steps // 2),
        weight_decay=recipe.weight_decay,
        schedule=recipe.schedule,  # type: ignore[arg-type]
        targets=config.targets,  # type: ignore[arg-type]
        path="fast",
    )
    models = [init_model(model_cfg, seed) for seed in seeds]
    streams = [make_generator(2 * seed + 1) for seed in seeds]
    params, buffers = stack_module_state(models)
    params = {name: p.detach().clone() for name, p in params.items()}
    template = copy.deepcopy(models[0])
    grads_of = _gradients(template, {"tables": True, "broadcast": False}, traced=False)
    groups = _param_groups(template, params, cfg.weight_decay)
    decays = {id(p): g["weight_decay"] > 0 for g in groups for p in g["params"]}
    names = list(params)
    K, steps = len(seeds), cfg.steps
    m = {n: torch.zeros_like(p) for n, p in params.items()}
    v = {n: torch.zeros_like(p) for n, p in params.items()}
    shape = (steps, K)
    out = {
        key: np.zeros(shape, dtype=np.float64)
        for key in (
            "loss",
            "grad_norm",
            "update_norm",
            "weight_norm",
            "max_score",
            "entropy",
            "qk_cos",
        )
    }
    per = {
        key: np.zeros((*shape, len(names)), dtype=np.float64)
        for key in ("param_grad", "param_weight", "param_update")
    }
    beta1, beta2 = BETAS
    d_head = model_cfg.head_dim

    def norms(tensors: dict[str, Tensor]) -> Tensor:  # [K, n_params]
        return torch.stack([t.flatten(1).norm(dim=1) for t in tensors.values()], 1)

    qk = [n for n in names if n.endswith(("W_Q.weight", "W_K.weight"))]
    previous_qk: Tensor | None = None

    for t, data in enumerate(chunked_batches(task, cfg, streams)):
        for p in params.values():
            p.requires_grad_(True)
        grads, (_, loss) = grads_of(params, buffers, data)
        for p in params.values():
            p.requires_grad_(False)
        with torch.no_grad():
            g_per = norms(grads)
            g_norm = g_per.pow(2).sum(1).sqrt()  # [K]
            if recipe.clip is not None:
                factor = (recipe.clip / (g_norm + 1e-6)).clamp_max(1.0)
                grads = {
                    n: g * factor.view(-1, *[1] * (g.dim() - 1))
                    for n, g in grads.items()
                }
            if record:
                g_qk = torch.cat([grads[n].flatten(1) for n in qk], 1)  # [K, n]
                if previous_qk is not None:
                    out["qk_cos"][t] = torch.nn.functional.cosine_similarity(
                        g_qk, previous_qk, dim=1
                    ).numpy()
                previous_qk = g_qk
                max_score, entropy = _attention_stats(
                    params, data.inputs, data.loss_mask, d_head
                )
                out["max_score"][t] = max_score.numpy()
                out["entropy"][t] = entropy.numpy()
            lr = cfg.lr * cfg.lr_factor(t)
            s = t + 1
            step_size = lr / (1 - beta1**s)
            bias2 = (1 - beta2**s) ** 0.5
            old = {n: p.clone() for n, p in params.items()} if record else {}
            for n, p in params.items():
                g = grads[n]
                if decays[id(p)]:
                    p.mul_(1 - lr * cfg.weight_decay)
                m[n].lerp_(g, 1 - beta1)
                v[n].mul_(beta2).addcmul_(g, g, value=1 - beta2)
                p.addcdiv_(
                    m[n], (v[n].sqrt() / bias2).add_(recipe.eps), value=-step_size
                )
            out["loss"][t] = loss.numpy()
            out["grad_norm"][t] = g_norm.numpy()
            if record:
                delta = {n: params[n] - old[n] for n in params}
                u_per, w_per = norms(delta), norms(params)
                out["update_norm"][t] = u_per.pow(2).sum(1).sqrt().numpy()
                out["weight_norm"][t] = w_per.pow(2).sum(1).sqrt().numpy()
                per["param_grad"][t] = g_per.numpy()
                per["param_weight"][t] = w_per.numpy()
                per["param_update"][t] = u_per.numpy()
    trained = [_unstack(template, params, buffers, k) for k in range(K)]
    return Trace(**out, **per, names=names), trained


def loss_windows(loss: np.ndarray) -> np.ndarray:
    """[steps, K] -> [K, 60] window means, as ``runs.store.training_summary``."""
    edges = np.linspace(0, len(loss), WINDOWS + 1).astype(int)
    return np.stack([loss[a:b].mean(0) for a, b in zip(edges[:-1], edges[1:])], 1)


def jump_step(loss: np.ndarray, floor: float = 0.36, high: float = 0.5) -> int | None:
    """First step at which a seed's loss (its 50-step running mean) exceeds ``high``
    after its running mean had been below ``floor``; None if it never does."""
    run = np.convolve(loss, np.ones(50) / 50, mode="valid")
    below = np.flatnonzero(run < floor)
    if not len(below):
        return None
    after = np.flatnonzero(loss[below[0] :] > high)
    return None if not len(after) else int(below[0] + after[0])


def stored_jump_window(windows: np.ndarray) -> int | None:
    """The first window above 0.5 after a window below 0.36 (None: no jump)."""
    below = np.flatnonzero(windows < 0.36)
    if not len(below):
        return None
    after = np.flatnonzero(windows[below[0] :] > 0.5)
    return None if not len(after) else int(below[0] + after[0])


def tv_beyond(config: Config, models: Sequence[torch.nn.Module]) -> np.ndarray:
    """Per seed: mean TV beyond the training length, as the chapter scores it (1000
    test words of 48 symbols, eval seed 0)."""
    setup = config.setup()
    batch = setup.task.sample_train_batch(
        SPEC.n_test, setup.test_length, make_generator(SPEC.eval_seed)
    )
    curves = evaluate_lengths(models, batch)
    return np.nanmean(curves.tv[:, curves.s > setup.train_length], axis=1)


# --- 4. reports ----------------------------------------------------------------------
def load_trace(path: str) -> Trace:
    data = np.load(path)
    fields = {f.name for f in dataclasses.fields(Trace)} - {"names"}
    values = {
        f: data[f] if f in data.files else np.full(data["loss"].shape, np.nan)
        for f in fields
    }  # traces saved before a field existed get nan there
    return Trace(**values, names=[str(n) for n in data["names"]])


def report_trace(
    norm: str, init: str, out: str | None, window: int, load: str | None = None
) -> None:
    config = anbn_config(norm, init)
    trace = load_trace(load) if load else train_loop(config, Recipe(), SPEC.seeds)[0]
    if out and not load:
        np.savez_compressed(
            out,
            **{k: v for k, v in dataclasses.asdict(trace).items() if k != "names"},
            names=np.array(trace.names),
        )
    mine = loss_windows(trace.loss)
    print(f"trace: a^n b^n, norm={norm}, init={init}, baseline recipe, eager loop")
    data = stored_sweep()[norm, init]
    recipe = {
        k: data["spec"]["configs"][data["config"]].get(k) for k in ("lr", "schedule")
    }
    if recipe != {"lr": Recipe.lr, "schedule": Recipe.schedule}:
        # the store holds ch7.STABLE_ANBN since issue 33; the collapsed sweep this loop
        # reproduces is in the history (git show 7a893e8:results/reference/...)
        print(f"the stored sweep trains with {recipe}: no window comparison")
        report_onsets(trace)
        return
    stored = np.array(data["training"]["loss_windows"])
    print("stored vs this loop, loss windows (100 steps):")
    for k in range(len(SPEC.seeds)):
        j = jump_step(trace.loss[:, k])
        sj = stored_jump_window(stored[k])
        # the windows before both runs' jumps (steps run apart after a jump)
        upto = min(WINDOWS if j is None else j // 100, WINDOWS if sj is None else sj)
        diff = np.abs(mine[k, :upto] - stored[k, :upto]).max() if upto else np.nan
        print(
            f"  seed {k}: max |diff| over windows before the jump {diff:.2e} "
            f"(windows 0..{upto - 1}); jump step here {j}, stored jump window "
            f"{sj}; final window here {mine[k, -1]:.3f}, stored {stored[k, -1]:.3f}"
        )
    print(
        f"unstable (5% rule) here: {unstable(mine).sum()}, stored: "
        f"{unstable(stored).sum()}"
    )
    report_onsets(trace)
    names = [n.replace("blocks.0.", "").replace(".weight", "") for n in trace.names]
    for k in range(len(SPEC.seeds)):
        j = jump_step(trace.loss[:, k])
        if j is None:
            continue
        print(f"\nseed {k}: jump at step {j}")
        print(
            "  step    loss   |grad|  |update| upd/|w|   |w|   max|score| entropy "
            "cos(g_QK) " + " ".join(f"|g_{n}|" for n in names)
        )
        marks = sorted(
            set(range(j - window, j + window))
            | {j - 1000, j - 500, j - 200, j - 100, j - 50}
        )
        for t in marks:
            if not 0 <= t < len(trace.loss):
                continue
            print(
                f"  {t:5d} {trace.loss[t, k]:7.3f} {trace.grad_norm[t, k]:8.3f} "
                f"{trace.update_norm[t, k]:8.4f} "
                f"{trace.update_norm[t, k] / trace.weight_norm[t, k]:7.4f} "
                f"{trace.weight_norm[t, k]:7.2f} {trace.max_score[t, k]:9.2f} "
                f"{trace.entropy[t, k]:7.3f} {trace.qk_cos[t, k]:7.2f}  "
                + " ".join(f"{x:8.3f}" for x in trace.param_grad[t, k])
            )
        print(
            "  weight norms at j-500, j-1, j+20: "
            + "; ".join(
                f"{n} "
                + "/".join(
                    f"{trace.param_weight[t, k, i]:.2f}"
                    for t in (j - 500, j - 1, min(j + 20, len(trace.loss) - 1))
                )
                for i, n in enumerate(names)
            )
        )


def onsets(trace: Trace, k: int, j: int, factor: float = 3.0) -> dict[str, int | None]:
    """For seed ``k`` jumping at step ``j``: where the unbroken excursion that ends in
    the jump starts, for each quantity, as an offset from ``j`` (None: not out of range
    at ``j``). Out of range: above ``factor`` x the quantity's median over
    ``j-600..j-100`` (the entropy: 0.1 below its 1st percentile there). Steps on the
    floor are bursty, so only the last excursion, the one that does not come back, is
    read."""
    a, b = max(0, j - 600), max(1, j - 100)
    qk = [
        i for i, n in enumerate(trace.names) if n.endswith(("W_Q.weight", "W_K.weight"))
    ]
    unembed = trace.names.index("unembed.weight")
    series = {
        "|g_QK|": np.sqrt((trace.param_grad[:, k, qk] ** 2).sum(1)),
        "|g_unembed|": trace.param_grad[:, k, unembed],
        "|grad|": trace.grad_norm[:, k],
        "|update|": trace.update_norm[:, k],
        "loss - floor": trace.loss[:, k] - FLOOR,
        "max|score|": trace.max_score[:, k],
        "-entropy": -trace.entropy[:, k],
    }
    out: dict[str, int | None] = {}
    for name, x in series.items():
        if name == "-entropy":
            out_of_range = x[b : j + 1] > -(np.percentile(-x[a:b], 1) - 0.1)
        else:
            out_of_range = x[b : j + 1] > factor * np.median(x[a:b])
        if not out_of_range[-1]:
            out[name] = None
            continue
        inside = np.flatnonzero(~out_of_range)
        start = b if not len(inside) else b + inside[-1] + 1
        out[name] = int(start - j)
    return out


def report_onsets(trace: Trace) -> None:
    print(
        "\nwhere each quantity's last excursion before the jump starts (offset from "
        "the jump step j; out of range: 3 x its median over j-600..j-100; '-': in "
        "range at j):"
    )
    header = None
    for k in range(trace.loss.shape[1]):
        j = jump_step(trace.loss[:, k])
        if j is None:
            continue
        o = onsets(trace, k, j)
        if header is None:
            header = "  seed  jump " + " ".join(f"{n:>12s}" for n in o)
            print(header)
        print(
            f"  {k:4d} {j:5d} "
            + " ".join(f"{'-' if v is None else v:>12}" for v in o.values())
        )
    print("\nstate at the end (median over the last 1000 steps) vs at step 600:")
    print(
        "  seed  loss  max|score|@600 max|score|@end  entropy@600 entropy@end  "
        "|g_QK|@600 |g_QK|@end"
    )
    qk = [
        i for i, n in enumerate(trace.names) if n.endswith(("W_Q.weight", "W_K.weight"))
    ]
    g_qk = np.sqrt((trace.param_grad[:, :, qk] ** 2).sum(2))
    for k in range(trace.loss.shape[1]):
        print(
            f"  {k:4d} {np.median(trace.loss[-1000:, k]):.3f} "
            f"{trace.max_score[600, k]:14.2f} "
            f"{np.median(trace.max_score[-1000:, k]):14.2f}"
            f" {np.median(trace.entropy[500:700, k]):12.3f} "
            f"{np.median(trace.entropy[-1000:, k]):11.3f} "
            f"{np.median(g_qk[500:700, k]):11.4f} {np.median(g_qk[-1000:, k]):10.4f}"
        )


def live_configs() -> list[Config]:
    """The live tier's a^n b^n configurations (300 steps, width 32, 3 seeds)."""
    return [c for c in LIVE.configurations() if c.task == "anbn"]


def report_remedy(
    configs: list[tuple[str, str]], recipe: Recipe, live: bool = False
) -> None:
    print(f"remedy: {recipe.label()}" + (" (live tier)" if live else ""))
    print("norm      init   unstable  collapsed  stuck  final-mean  tv_beyond  jumps")
    spec = LIVE if live else SPEC
    chosen = live_configs() if live else [anbn_config(n, i) for n, i in configs]
    for config in chosen:
        norm = config.norm
        init = config.init if not live else config.targets
        trace, models = train_loop(config, recipe, spec.seeds, record=False)
        w = loss_windows(trace.loss)
        tv = tv_beyond(config, models)
        jumps = [jump_step(trace.loss[:, k]) for k in range(len(spec.seeds))]
        print(
            f"{norm:9s} {init:7s}{unstable(w).sum():8d}  {collapsed(w).sum():9d}"
            f"  {stuck(w).sum():5d}  {w[:, -1].mean():10.3f}  {tv.mean():9.3f}  "
            f"{[j for j in jumps if j is not None]}",
            flush=True,
        )
        print(
            f"    final windows {np.round(w[:, -1], 3).tolist()}; "
            f"unstable seeds {np.flatnonzero(unstable(w)).tolist()}; "
            f"tv_beyond {[round(float(x), 3) for x in tv]}",
            flush=True,
        )


ALL = [(n, i) for n in ("none", "post", "attn_out") for i in ("book", "torch")]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("stored")
    sub.add_parser("plateau")
    for name in ("trace", "remedy"):
        p = sub.add_parser(name)
        p.add_argument("--norm", default="none", choices=("none", "post", "attn_out"))
        p.add_argument("--init", default="torch", choices=("book", "torch"))
    t = sub.choices["trace"]
    t.add_argument("--out", default=None, help="save the whole trace (.npz)")
    t.add_argument("--window", type=int, default=6, help="steps each side of a jump")
    t.add_argument("--load", default=None, help="report a trace saved by --out")
    r = sub.choices["remedy"]
    r.add_argument("--all", action="store_true", help="the six a^n b^n configs")
    r.add_argument(
        "--live", action="store_true", help="the live tier's a^n b^n configs instead"
    )
    r.add_argument("--lr", type=float, default=3e-3)
    r.add_argument("--warmup", type=int, default=50)
    r.add_argument("--weight-decay", type=float, default=0.0)
    r.add_argument("--eps", type=float, default=1e-8)
    r.add_argument("--clip", type=float, default=None)
    r.add_argument("--schedule", default="constant", choices=("constant", "cosine"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.command == "stored":
        report_stored()
    elif args.command == "plateau":
        report_plateau()
    elif args.command == "trace":
        report_trace(args.norm, args.init, args.out, args.window, args.load)
    else:
        recipe = Recipe(
            args.lr, args.warmup, args.weight_decay, args.eps, args.clip, args.schedule
        )
        report_remedy(ALL if args.all else [(args.norm, args.init)], recipe, args.live)


if __name__ == "__main__":
    main(sys.argv[1:])
