"""Randomly initialised BERT and Llama models small enough to build in a test: the
pretrained-model code paths without a download (the hub is switched off)."""

from __future__ import annotations

from typing import Any

import numpy as np

from lengthgen_lite.chapters import ch8_smollm2 as p6
from lengthgen_lite.core import pretrained


def tiny_bert(vocab_size: int = 300, pooling: bool = True, **config: Any) -> Any:
    """A one-layer BERT, 16 wide (with its pooling layer unless ``pooling`` is False);
    ``config`` adds ``BertConfig`` fields."""
    pretrained.offline()
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        **config,
    )
    return BertModel(cfg, add_pooling_layer=pooling)


def tiny_llama(**config: Any) -> Any:
    """A two-layer Llama, 32 wide, vocabulary 300; ``config`` adds ``LlamaConfig``
    fields."""
    pretrained.offline()
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        **config,
    )
    return LlamaForCausalLM(cfg)


def llama_tokens(n: int = 5, length: int = 24, seed: int = 0) -> Any:
    """[n, length] long: BOS (id 1), then random ids in 3..299, :func:`tiny_llama`'s
    inputs."""
    return pretrained.random_token_sequences(
        n, length, vocab_size=300, first_id=3, seed=seed, start_id=1
    )


def causal_test_by_hand(windows: int = p6.N_WINDOWS) -> p6.CausalTest:
    """Chapter 8's P6 test without a model, ``windows`` windows per input: log-N
    scaling raises every window's loss by 0.01, the restoration changes nothing."""
    shift = {"none": 0.0, "logn": 0.01, "std": 0.0}
    base = np.linspace(2.0, 3.0, windows)
    return p6.CausalTest(
        {(k, c): base + shift[c] for k in p6.INPUTS for c in p6.CONDITIONS},
        {k: np.array([0.0, 0.01, 0.02, 0.3]) for k in p6.INPUTS},
        (0, 1, 2),
        (64, 128, 256, 512),
        {k: np.array([1.0, 1.1, 1.1, 1.2]) for k in p6.INPUTS},
        {k: np.zeros(4) for k in p6.INPUTS},
    )
