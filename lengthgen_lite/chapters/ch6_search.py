"""Chapter 6's random search: where it draws its configurations from (the spec
``ch6/search`` trains them), the flat table of its scores, EMA's effect in every run and
dropout's read off a main-effects fit over the runs, and the claim they decide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.model import PLACEMENTS, NormPlacement
from ..core.seeding import numpy_generator
from ..core.validation import require_int
from ..runs.claims import TV_SESOI, Claim, Decision, Effect
from ..runs.spec import Config
from ..runs.stats import FactorKind, Interval, factor_columns, pooled
from .ch6_runs import LengthRange, Run, cell_of, ema_gain


@dataclass(frozen=True)
class SearchSpace:
    """Where the random search draws from (the book's choice; the paper's ranges are
    unknown)."""

    lr: tuple[float, float] = (1e-3, 3e-2)  # log-uniform
    batch: tuple[int, ...] = (32, 64, 128)
    norm: tuple[NormPlacement, ...] = PLACEMENTS
    dropout: tuple[float, float] = (0.0, 0.3)  # uniform

    def __post_init__(self) -> None:
        low, high = self.lr
        if not 0 < low < high:
            raise ValueError(
                f"lr must be a range (low, high) with 0 < low < high, got {self.lr!r}"
            )
        low, high = self.dropout
        if not 0.0 <= low <= high < 1.0:
            raise ValueError(
                "dropout must be a range (low, high) inside [0, 1), got "
                f"{self.dropout!r}"
            )
        if not self.batch or not self.norm:
            raise ValueError("batch and norm must each offer at least one value")


def sample_specs(n: int, seed: int, space: SearchSpace = SearchSpace()) -> list[Config]:
    """``n`` random configurations, drawn independently; values rounded so that they
    print cleanly.

    Every norm placement appears ``n // len(space.norm)`` or one more times (a shuffled,
    balanced assignment), so no placement is missed by chance in a small search.
    """
    n = require_int("n", n, 1)
    rng = numpy_generator(seed)
    norms = [space.norm[i % len(space.norm)] for i in range(n)]
    norms = [norms[i] for i in rng.permutation(n)]
    log_lr = rng.uniform(np.log10(space.lr[0]), np.log10(space.lr[1]), size=n)
    batches = rng.choice(len(space.batch), size=n)
    dropouts = rng.uniform(*space.dropout, size=n)
    return [
        Config(
            norm=norms[i],
            lr=float(f"{10 ** log_lr[i]:.2g}"),
            batch=int(space.batch[batches[i]]),
            resid_dropout=round(float(dropouts[i]), 2),
            targets="sampled",
        )
        for i in range(n)
    ]


SEARCH_STEPS, SEARCH_SEEDS, SEARCH_RUNS, SEARCH_SEED = 400, (0, 1), 16, 6


def search_configs(
    n: int = SEARCH_RUNS, seed: int = SEARCH_SEED
) -> list[dict[str, object]]:
    """The random search's configurations (:func:`sample_specs`) as spec fields."""
    return [
        {
            "norm": c.norm,
            "lr": c.lr,
            "batch": c.batch,
            "resid_dropout": c.resid_dropout,
            "targets": c.targets,
        }
        for c in sample_specs(n, seed)
    ]


def score_rows(runs: Sequence[Run], scale: float = 1.0) -> list[dict[str, object]]:
    """One row per (run, variant, seed): norm, lr, batch, dropout (residual), targets,
    ``run`` (index in ``runs``), ``seed``, ``variant``, ``ema`` (variant is "ema"),
    ``tv_train``, ``tv_beyond``. The flat table the plots and the factor analysis read.
    """
    rows = []
    for index, run in enumerate(runs):
        c = run.config
        fields = {
            "norm": c.norm,
            "lr": c.lr,
            "batch": c.batch,
            "dropout": c.resid_dropout,
            "targets": c.targets,
        }
        for variant in run.results.variants:
            train_tv, beyond_tv = (
                run.mean_tv(variant, "train", scale),
                run.mean_tv(variant, "beyond", scale),
            )
            for k, seed in enumerate(
                run.results.seeds_of(config=run.index, variant=variant, scale=scale)
            ):
                row = {
                    "run": index,
                    "seed": seed,
                    "variant": variant,
                    "ema": variant == "ema",
                }
                rows.append(
                    fields
                    | row
                    | {"tv_train": float(train_tv[k]), "tv_beyond": float(beyond_tv[k])}
                )
    return rows


# the dropout rate the search's effect is read at: its range's top, the reference's
DROPOUT_RATE = 0.3


SEARCH_FACTORS: dict[str, FactorKind] = {
    "norm": "categorical",
    "lr": "log",
    "batch": "log",
    "dropout": "numeric",
    "ema": "categorical",
}


def search_ema_effects(
    search: Sequence[Run], lengths: LengthRange = "beyond"
) -> list[Effect]:
    """EMA's gain (raw minus EMA TV over ``lengths``, per seed) in every run of the
    search: one cell each."""
    fields = ("norm", "lr", "batch", "resid_dropout")
    return [
        ema_gain(run, lengths, remedy="ema", run=i, **cell_of(run, *fields))
        for i, run in enumerate(search)
    ]


def dropout_effect(
    rows: Sequence[Mapping[str, object]],
    steps: int,
    factors: Mapping[str, FactorKind] = SEARCH_FACTORS,
) -> Effect:
    """Dropout's effect in the search: the main-effects least-squares fit of the raw
    weights' TV beyond L (one value per run, the mean over its seeds) on the other
    factors and dropout, its dropout slope times ``-DROPOUT_RATE`` (TV without minus
    with dropout at that rate), with the fit's t-interval (residual degrees of
    freedom: the runs, the configuration draw and the seeds, are the replication)."""
    raw = [row for row in rows if not row["ema"]]
    names = [name for name in factors if name not in ("ema", "dropout")]
    by_run: dict[object, list[Mapping[str, object]]] = {}
    for row in raw:
        by_run.setdefault(row["run"], []).append(row)
    runs = [
        dict(group[0]) | {"tv_beyond": float(np.mean([r["tv_beyond"] for r in group]))}
        for group in by_run.values()
    ]
    blocks = [factor_columns(runs, name, factors[name])[0] for name in names]
    dropout = np.array([float(run["dropout"]) for run in runs])[:, None]
    X = np.concatenate([np.ones((len(runs), 1)), *blocks, dropout], axis=1)
    y = np.array([run["tv_beyond"] for run in runs])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    df = len(y) - np.linalg.matrix_rank(X)
    if df < 1:
        raise ValueError(
            f"{len(y)} runs cannot fit {X.shape[1]} coefficients with a residual; "
            "allowed: more runs than coefficients"
        )
    sigma2 = float(((y - X @ coef) ** 2).sum() / df)
    se = float(np.sqrt(sigma2 * np.linalg.pinv(X.T @ X)[-1, -1]))
    effect, se = -DROPOUT_RATE * float(coef[-1]), DROPOUT_RATE * se
    interval = Interval(effect, effect, effect, len(y), se, float(df)).at_level(0.95)
    return Effect({"remedy": f"resid_dropout {DROPOUT_RATE:g}"}, steps, interval)


def ema_pooled(effects: Sequence[Effect]) -> Interval:
    """The pooled estimate (stratified over the cells) of EMA's gain, with its
    t-interval."""
    return pooled([e.interval for e in effects])


def search_claim(
    search: Sequence[Run],
    rows: Sequence[Mapping[str, object]],
    factors: Mapping[str, FactorKind] = SEARCH_FACTORS,
) -> Decision:
    """SEARCH_CLAIM on the random search (``rows``: its :func:`score_rows`): EMA's gain
    beyond L in every run (a cell each) and dropout's (:func:`dropout_effect`), TV
    without minus with the remedy."""
    steps = search[0].config.steps
    effects = [*search_ema_effects(search), dropout_effect(rows, steps, factors)]
    detail = (
        f"{len(search)} random runs x EMA off/on; dropout 0 -> {DROPOUT_RATE:g} from "
        "a main-effects fit over the runs"
    )
    return SEARCH_CLAIM.decide(effects, "live", detail)


#: The scorecard claim ch6-score-search, declared once.
SEARCH_CLAIM = Claim(
    "ch6-score-search",
    "A random hyperparameter search finds dropout and (B)EMA improve length "
    "generalisation",
    "2510.08341 v1 [paper]",
    metric="TV beyond L",
    unit="TV",
    effect="without minus with the remedy",
    sesoi=TV_SESOI,
    cells=("remedy", "norm", "resid_dropout", "init"),
    replicates="seeds (EMA, in each run) or runs (dropout's fit)",
)
