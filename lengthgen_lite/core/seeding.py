"""The one place where seeds and the torch thread count are set.

Bit-identical results on CPU need a fixed seed *and* a fixed thread count (1 vs 2 threads changes
low bits), so both are pinned together.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

THREADS = 1


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch, pin torch to one thread; return a torch generator seeded alike."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    torch.set_num_threads(THREADS)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return make_generator(seed)


def make_generator(seed: int) -> torch.Generator:
    """A torch CPU generator with its own stream, so data sampling never depends on model init."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator
