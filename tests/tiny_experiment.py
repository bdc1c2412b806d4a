"""The tiny experiment every CLI and experiment test runs: v = 6, 30 steps, 2 seeds, two placements,
EMA riding along (seconds, not minutes)."""

TINY = {
    "name": "tiny",
    "seeds": [0, 1],
    "task": {"name": "set_complement", "v": 6, "train_length": 3},
    "model": {"placements": ["none", "attn_out"], "d_model": 16},
    "train": {"steps": 30, "warmup": 5, "targets": ["sampled"], "ema_beta": 0.9},
    "evaluation": {"n_sequences": 200},
}
