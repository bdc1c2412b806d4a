import os

import numpy as np
import pytest
import torch

from lengthgen_lite.chapters import ch4_pretrained as pretrained
from lengthgen_lite.core.seeding import make_generator


@pytest.fixture(scope="module")
def tiny():
    """A tiny randomly initialised BERT: shapes and errors without the real weights."""
    pretrained._offline()
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=2100,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    return BertModel(cfg, add_pooling_layer=False).eval()


def test_random_token_sequences_have_special_ends_and_word_pieces():
    tokens = pretrained.random_token_sequences(
        6, 4, make_generator(0), vocab_size=2100, cls_id=101, sep_id=102
    )
    assert (
        tokens.shape == (4, 6)
        and (tokens[:, 0] == 101).all()
        and (tokens[:, -1] == 102).all()
    )
    assert (
        (tokens[:, 1:-1] >= pretrained.FIRST_WORD_PIECE) & (tokens[:, 1:-1] < 2100)
    ).all()


def test_layer0_outputs_shapes_and_w_o(tiny):
    tokens = pretrained.random_token_sequences(10, 3, make_generator(1), 2100, 101, 102)
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
    tokens = pretrained.random_token_sequences(12, 3, make_generator(2), 2100, 101, 102)
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
    pretrained._offline()
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=2100,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        attn_implementation="sdpa",
    )
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        pretrained.layer0_attention_outputs(
            BertModel(cfg).eval(), torch.zeros(1, 8, dtype=torch.long) + 2000, [1]
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
            lambda m: pretrained.random_token_sequences(
                2, 1, make_generator(0), 2100, 101, 102
            ),
            "N must be an int >= 3",
        ),
        (
            lambda m: pretrained.random_token_sequences(
                5, 0, make_generator(0), 2100, 101, 102
            ),
            "n_sequences must be",
        ),
        (
            lambda m: pretrained.random_token_sequences(
                5, 1, make_generator(0), 1000, 101, 102
            ),
            "first_id must be",
        ),
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
    model = pretrained.load_minilm()
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
    fresh = pretrained.random_init_like(model, seed=0)
    # near-uniform
    assert (
        pretrained.attention_output_std(fresh, [8], [1], n_sequences=4).n_eff[0, 0]
        > 7.5
    )
    assert not torch.equal(
        fresh.embeddings.word_embeddings.weight, model.embeddings.word_embeddings.weight
    )
