"""The shared library: seeding, tasks, models, the one training loop, averagers, metrics
and evaluation. Every chapter builds on it; it knows nothing of chapters or of drawing.

Importing it registers every task of the book (:mod:`.task_registry`). The names
imported below are the core's public API (``from lengthgen_lite.core import
train``).
"""

from .averaging import BEMA, EMA, make_bema, make_ema
from .evaluation import (
    LengthTable,
    PrefixProfile,
    evaluate_at_scales,
    evaluate_seeds,
    evaluate_set_complement,
    prefix_profile,
)
from .hooks import hook_names, run_with_cache, run_with_hooks
from .model import (
    LOGIT_SCALES,
    NORM_SITES,
    PLACEMENTS,
    ModelConfig,
    NormSites,
    Transformer,
    attention_logit_factor,
    init_model,
    logn_twin,
)
from .retrieval import (
    ArgmaxRetrieval,
    DictionaryLookup,
    RetrievalTransformer,
    retrieval_config,
)
from .seeding import make_generator, seed_everything
from .task_registry import TASKS, TaskEntry, register_task, task_entry
from .tasks import (
    Batch,
    SetComplement,
    Task,
    enumerate_sequences,
    sample_next_tokens,
    sample_sequences,
    seen_mask,
    target_distribution,
)
from .training import TrainConfig, TrainResult, train

__all__ = [
    "BEMA",
    "EMA",
    "make_bema",
    "make_ema",
    "LengthTable",
    "PrefixProfile",
    "evaluate_at_scales",
    "evaluate_seeds",
    "evaluate_set_complement",
    "prefix_profile",
    "LOGIT_SCALES",
    "NORM_SITES",
    "PLACEMENTS",
    "ModelConfig",
    "NormSites",
    "Transformer",
    "attention_logit_factor",
    "hook_names",
    "init_model",
    "logn_twin",
    "run_with_cache",
    "run_with_hooks",
    "ArgmaxRetrieval",
    "DictionaryLookup",
    "RetrievalTransformer",
    "retrieval_config",
    "make_generator",
    "seed_everything",
    "TASKS",
    "TaskEntry",
    "register_task",
    "task_entry",
    "Batch",
    "SetComplement",
    "Task",
    "enumerate_sequences",
    "sample_next_tokens",
    "sample_sequences",
    "seen_mask",
    "target_distribution",
    "TrainConfig",
    "TrainResult",
    "train",
]
