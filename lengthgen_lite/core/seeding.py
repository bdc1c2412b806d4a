"""The one place where seeds and the torch thread count are set.

Bit-identical results on CPU need a fixed seed *and* a fixed thread count (1 vs 2
threads changes low bits), so both are pinned together.

Every seed the book uses passes through this module, so one environment variable,
``LENGTHGEN_SEED_OFFSET``, moves all of them at once: ``make test`` executes every
chapter a second time with an offset no stored output used, and every claim a chapter
asserts must hold there too. A claim that holds only for the seeds the stored outputs
happened to use is not a claim.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from .validation import is_int

THREADS = 1
SEED_OFFSET_VARIABLE = "LENGTHGEN_SEED_OFFSET"


def seed_offset() -> int:
    """The offset added to every seed: 0 unless ``LENGTHGEN_SEED_OFFSET`` names
    another."""
    text = os.environ.get(SEED_OFFSET_VARIABLE, "0").strip() or "0"
    if not text.isdigit():
        raise ValueError(
            f"{SEED_OFFSET_VARIABLE} must be a non-negative integer, got {text!r}"
        )
    return int(text)


def _offset(seed: int) -> int:
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return int(seed) + seed_offset()


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch, pin torch to one thread; return a torch generator
    seeded alike."""
    actual = _offset(seed)
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    torch.set_num_threads(THREADS)
    random.seed(actual)
    np.random.seed(actual)
    torch.manual_seed(actual)
    return make_generator(seed)


@contextmanager
def forked_torch_stream(seed: int) -> Iterator[None]:
    """Inside: torch's global generator, seeded with ``seed``; on exit it is back where
    the caller left it, and NumPy's and Python's streams are never touched.

    For code that draws only from the global generator: ``nn.Module`` constructors take
    no generator, so a model built in here gets the weights ``seed_everything(seed)``
    would give it without resetting a notebook's random streams.
    """
    actual = _offset(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(actual)
        yield


def make_generator(seed: int) -> torch.Generator:
    """A torch CPU generator with its own stream, so data sampling never depends on
    model init."""
    generator = torch.Generator()
    generator.manual_seed(_offset(seed))
    return generator


def numpy_generator(seed: int) -> np.random.Generator:
    """A NumPy generator (random search, bootstrap resampling), moved by the same
    offset."""
    return np.random.default_rng(_offset(seed))
