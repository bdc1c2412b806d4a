"""lengthgen_lite: tasks, a small inspectable transformer, one training loop, metrics
and theory for the book *lengthgen-lite* (length generalisation on set complement and
retrieval tasks).

Layout: ``core`` is the shared library, ``runs`` the experiment floor (specs, the one
runner, ``Results``), ``chapters.chN_*`` one chapter's experiments (built on ``core``
and ``runs``), ``viz`` draws (``viz.common`` plus ``viz.chN_*`` mirroring the chapters).
"""

from importlib import metadata as _metadata

from .core.evaluation import LengthTable, evaluate_set_complement
from .core.hooks import hook_names, run_with_cache, run_with_hooks
from .core.model import (
    PLACEMENTS,
    ModelConfig,
    Transformer,
    init_model,
)
from .core.seeding import make_generator, seed_everything
from .core.tasks import (
    Batch,
    SetComplement,
    enumerate_sequences,
    sample_next_tokens,
    sample_sequences,
    seen_mask,
    target_distribution,
)
from .core.training import TrainConfig, TrainResult, train

try:  # the installed distribution's version (pyproject.toml), never typed here
    __version__ = _metadata.version("lengthgen_lite")
# imported from a source tree that was never installed
except _metadata.PackageNotFoundError:
    __version__ = "unknown"

__all__ = [
    "PLACEMENTS",
    "Batch",
    "LengthTable",
    "ModelConfig",
    "SetComplement",
    "TrainConfig",
    "TrainResult",
    "Transformer",
    "enumerate_sequences",
    "evaluate_set_complement",
    "hook_names",
    "init_model",
    "make_generator",
    "run_with_cache",
    "run_with_hooks",
    "sample_next_tokens",
    "sample_sequences",
    "seed_everything",
    "seen_mask",
    "target_distribution",
    "train",
]
