"""The tiny experiment every runs/CLI test trains: v = 6, 30 steps, 2 seeds, two
placements, EMA riding along, two logit scales (seconds, not minutes)."""

from lengthgen_lite.runs import Spec

TINY = dict(
    name="tiny/placements",
    grid={"norm": ("none", "attn_out")},
    base={
        "v": 6,
        "train_length": 3,
        "d_model": 16,
        "steps": 30,
        "warmup": 5,
        "targets": "sampled",
    },
    seeds=(0, 1),
    averagers={"ema": {"beta": 0.9}},
    scales=(1.0, 2.0),
    n_test=200,
)


def tiny_spec(**changes) -> Spec:
    return Spec(**(TINY | changes))
