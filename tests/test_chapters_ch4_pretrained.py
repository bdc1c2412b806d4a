import os

import numpy as np
import pytest
import torch

from lengthgen_lite.chapters import ch4_pretrained as pretrained
from lengthgen_lite.core.pretrained import (
    load_minilm,
    random_init_like,
    random_token_sequences,
)
from tiny_models import tiny_bert


@pytest.fixture(scope="module")
def tiny():
    """A tiny randomly initialised BERT: shapes and errors without the real weights."""
    torch.manual_seed(0)
    return tiny_bert(2100, pooling=False, attn_implementation="eager").eval()


def test_layer0_outputs_shapes_and_w_o(tiny):
    tokens = random_token_sequences(
        3, 10, 2100, pretrained.FIRST_WORD_PIECE, 1, 101, 102
    )
    before, after, n_eff = pretrained.layer0_attention_outputs(
        tiny, tokens, [0, 1, "middle", -1]
    )
    assert before.shape == after.shape == (3, 4, 16) and n_eff.shape == (3, 2, 4)
    assert ((n_eff >= 1) & (n_eff <= 10 + 1e-4)).all()
    dense = tiny.encoder.layer[0].attention.output.dense
    torch.testing.assert_close(after, dense(before))


def test_rows_only_match_the_full_layer(tiny):
    """Computing only the read rows gives the numbers of the model's own full attention
    layer."""
    tokens = random_token_sequences(
        3, 12, 2100, pretrained.FIRST_WORD_PIECE, 2, 101, 102
    )
    before, after, n_eff = pretrained.layer0_attention_outputs(
        tiny, tokens, [1, 0, "middle"]
    )
    attention = tiny.encoder.layer[0].attention
    with torch.no_grad():
        context, weights = attention.self(tiny.embeddings(input_ids=tokens))
    rows = [1, 0, 6]
    torch.testing.assert_close(before, context[:, rows])
    torch.testing.assert_close(after, attention.output.dense(context[:, rows]))
    torch.testing.assert_close(n_eff, 1.0 / weights[:, :, rows].square().sum(-1))


def test_std_table_shapes_and_determinism(tiny):
    a = pretrained.attention_output_std(tiny, [8, 16], [1], n_sequences=20, chunk=7)
    b = pretrained.attention_output_std(tiny, [8, 16], [1], n_sequences=20, chunk=20)
    assert (
        a.before_wo.shape == a.after_wo.shape == (2, 1, 16)
        and a.positions == (1,)
        and a.n_eff.shape == (2, 1)
    )
    # chunking changes nothing
    np.testing.assert_allclose(a.after_wo, b.after_wo, rtol=1e-5)


def test_models_without_attention_weights_are_rejected():
    model = tiny_bert(2100, attn_implementation="sdpa").eval()
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        pretrained.layer0_attention_outputs(
            model, torch.zeros(1, 8, dtype=torch.long) + 2000, [1]
        )


def test_resolve_position():
    assert [pretrained.resolve_position(p, 10) for p in (0, 1, "middle", -1)] == [
        0,
        1,
        5,
        9,
    ]


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda m: pretrained.layer0_attention_outputs(
                m, torch.zeros(2, 70, dtype=torch.long), [1]
            ),
            "exceeds the model's 64",
        ),
        (
            lambda m: pretrained.layer0_attention_outputs(m, torch.zeros(2, 8), [1]),
            r"\[batch, N\] long",
        ),
        (
            lambda m: pretrained.layer0_attention_outputs(
                m, torch.zeros(2, 8, dtype=torch.long), []
            ),
            "at least one position",
        ),
        (
            lambda m: pretrained.layer0_attention_outputs(
                m, torch.zeros(2, 8, dtype=torch.long), [8]
            ),
            "position must be",
        ),
        (
            lambda m: pretrained.layer0_attention_outputs(
                m, torch.zeros(2, 8, dtype=torch.long), ["end"]
            ),
            "position must be",
        ),
        (lambda m: pretrained.attention_output_std(m, [], [1]), "at least one length"),
    ],
)
def test_bad_input_raises(tiny, call, message):
    with pytest.raises(ValueError, match=message):
        call(tiny)


def test_the_packaged_weights_load_offline_and_show_the_decay():
    model = load_minilm()
    assert (
        os.environ["HF_HUB_OFFLINE"] == "1"
        and os.environ["TRANSFORMERS_OFFLINE"] == "1"
    )
    cfg = model.config
    assert (
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.max_position_embeddings,
    ) == (6, 384, 12, 512)
    assert pretrained.special_ids() == (101, 102)
    table = pretrained.attention_output_std(model, [8, 128], [1], n_sequences=48)
    median = np.median(table.after_wo[:, 0], axis=1)
    assert median[1] < 0.8 * median[0]  # the std at an ordinary position falls with N
    fresh = random_init_like(model, seed=0, add_pooling_layer=False)
    # near-uniform
    assert (
        pretrained.attention_output_std(fresh, [8], [1], n_sequences=4).n_eff[0, 0]
        > 7.5
    )
    assert not torch.equal(
        fresh.embeddings.word_embeddings.weight, model.embeddings.word_embeddings.weight
    )
