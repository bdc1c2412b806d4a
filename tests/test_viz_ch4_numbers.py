from lengthgen_lite.viz import ch4_numbers
from test_chapters_ch4_llama import hand_made_layers


def test_layer_glue_and_counts_from_hand_made_layers():
    slopes, sinks, summary = hand_made_layers()
    glued = ch4_numbers.layer_glue(summary, slopes, sinks)
    assert list(glued)[0] == "llama_l0_rand" and glued["llama_sink_max_512"] == 0.6
    assert ch4_numbers.layer_counts(summary, slopes) == {
        "llama_n_decay": 1,
        "llama_n_rise": 1,
        "llama_n_decay_text": 1,
        "llama_n_rise_text": 1,
        "llama_n_nosink": 1,
    }
