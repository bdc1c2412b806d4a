"""Chapter 6's view of its results: a :class:`Run` reads one configuration of a
``Results`` the chapter's way (TV by length, logit scale and variant; EMA's gain over
a length range), shared by the grid, the soft-target runs and the search.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from ..core.training import TrainResult
from ..core.validation import require_choice
from ..runs import Results
from ..runs.claims import Effect
from ..runs.compare import training_state
from ..runs.spec import Config

LengthRange = Literal["train", "beyond"]


@dataclass(frozen=True)
class Run:
    """One configuration of a ``Results`` read the chapter's way: TV by length, scale
    and variant.

    ``tv[variant]`` is [K, len(scales), v-1]; ``result`` holds the trained models.
    """

    results: Results
    index: int  # the configuration's position in results.configs

    @property
    def config(self) -> Config:
        return self.results.configs[self.index]

    @property
    def scales(self) -> tuple[float, ...]:
        return tuple(self.results.spec.scales)

    @property
    def train_length(self) -> int:
        return self.config.setup().train_length

    @property
    def result(self) -> TrainResult:
        return self.results.live_training[self.index]

    @property
    def unstable(self) -> int:
        """How many of the configuration's seeds collapsed in training
        (:func:`~lengthgen_lite.runs.compare.training_state`): a cell with one is
        inconclusive."""
        steps = self.config.steps
        return int(training_state(self.results, self.index, steps)[1].sum())

    @property
    def tv(self) -> dict[str, np.ndarray]:
        return {
            v: np.stack([self.curve(v, c) for c in self.scales], axis=1)
            for v in self.results.variants
        }

    def _check(self, variant: str) -> None:
        if variant not in self.results.variants:
            raise ValueError(
                f"variant {variant!r} is unknown; this run has "
                f"{sorted(self.results.variants)}"
            )

    def curve(self, variant: str, scale: float = 1.0) -> np.ndarray:
        """TV by prefix length at one logit scale: [K, v-1]."""
        self._check(variant)
        if scale not in self.scales:
            raise ValueError(
                f"scale {scale!r} was not evaluated; available: {self.scales}"
            )
        return self.results.curves(
            "tv", config=self.index, variant=variant, scale=scale
        )

    def mean_tv(
        self, variant: str, lengths: LengthRange, scale: float = 1.0
    ) -> np.ndarray:
        """Mean TV over the training lengths ``s <= L`` or the lengths beyond them, per
        seed: [K]."""
        require_choice("lengths", lengths, get_args(LengthRange))
        self._check(variant)
        return self.results.values(
            f"tv_{lengths}", config=self.index, variant=variant, scale=scale
        )

    def gain(
        self, lengths: LengthRange, variant: str = "ema", scale: float = 1.0
    ) -> np.ndarray:
        """Raw TV minus ``variant``'s TV over a length range, per seed: [K] (> 0:
        averaging helps)."""
        return self.mean_tv("raw", lengths, scale) - self.mean_tv(
            variant, lengths, scale
        )

    def scale_curve(self, variant: str, lengths: LengthRange) -> np.ndarray:
        """Mean TV over a length range at every evaluated scale, per seed: [K,
        len(scales)]."""
        return np.stack(
            [self.mean_tv(variant, lengths, c) for c in self.scales], axis=1
        )


def cell_of(run: Run, *fields: str) -> dict[str, object]:
    """The fields of ``run``'s configuration that name its cell of a claim."""
    return {f: getattr(run.config, f) for f in fields}


def ema_gain(source: Run, lengths: LengthRange = "beyond", **cell: object) -> Effect:
    """EMA's gain in one run (raw minus EMA TV over ``lengths``, per seed) as the cell
    ``cell``, with the run's collapsed seeds: the grid's and the search's EMA claims
    read every run this way."""
    return Effect.of(
        source.gain(lengths), source.config.steps, unstable=source.unstable, **cell
    )


def by_config(
    results: Results, keys: Sequence[str] = ("norm", "batch", "lr")
) -> dict[object, Run]:
    """Every configuration of ``results`` as a :class:`Run`, keyed by the ``keys``
    fields (a tuple of them; one key: its value)."""
    out: dict[object, Run] = {}
    for i, c in enumerate(results.configs):
        key = tuple(getattr(c, k) for k in keys)
        out[key[0] if len(keys) == 1 else key] = Run(results, i)
    return out


def runs_of(results: Results) -> list[Run]:
    """Every configuration of ``results`` as a :class:`Run`, in order."""
    return [Run(results, i) for i in range(len(results.configs))]


def mean_gains(runs: Mapping[str, Run]) -> dict[str, dict[str, float]]:
    """EMA's gain (raw minus EMA TV), mean over seeds, on each length range: key ->
    {"train": ..., "beyond": ...}."""
    ranges = get_args(LengthRange)
    return {key: {r: run.gain(r).mean() for r in ranges} for key, run in runs.items()}
