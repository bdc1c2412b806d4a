"""Chapters 6 and 7 at the reference tier: the declared grids (sizes, axes, constant
rate, the live specs and their store keys untouched) and the claim functions, each on
a Results fabricated on the real reference grid (no training: the sweeps take hours)."""

import numpy as np
import pytest

from lengthgen_lite.chapters import ch6_ema as ch6
from lengthgen_lite.chapters import ch7_beyond_set_complement as ch7
from lengthgen_lite.chapters import reference
from lengthgen_lite.runs import Results, Spec
from lengthgen_lite.runs.store import config_key

# the live specs' store keys before the reference grids were declared (issue 19): a
# live configuration's key depends on its fields, seeds, averagers and scales only
LIVE_KEYS = {
    "ch6/grid": "9c3271934637",
    "ch6/soft": "6e28837ba841",
    "ch6/search": "ace0632db9a9",
    "ch7/placements": "cf8b15ba92c0",
}


def keys_digest(spec: Spec) -> str:
    """One short hash of every live configuration's store key, in order."""
    import hashlib

    keys = [config_key(spec, i) for i in range(len(spec.configurations()))]
    return hashlib.sha256(",".join(keys).encode()).hexdigest()[:12]


@pytest.mark.parametrize("name", sorted(LIVE_KEYS))
def test_the_live_specs_keep_their_store_keys(name):
    spec = {**ch6.SPECS, **ch7.SPECS}[name]
    assert spec.tier == "live"
    assert keys_digest(spec) == LIVE_KEYS[name]


def test_chapter_six_grid_crosses_ema_windows_with_norm_init_and_lr():
    spec = ch6.SPECS["ch6/grid"].at_tier("reference")
    configs = spec.configurations()
    assert len(spec.seeds) == 10 and spec.checkpoints == (1000, 3000)
    assert {c.steps for c in configs} == {6000}
    assert {c.schedule for c in configs} == {"constant"}
    assert {(c.targets, c.batch) for c in configs} == {("sampled", 128)}
    assert spec.varying() == ("norm", "init", "lr")
    assert len(configs) == 2 * 2 * 2 == 8
    assert spec.averagers == {"ema": {"beta": 0.99}, "ema_long": {"beta": 0.999}}
    assert spec.scales == (1.0, 1.5)  # the live run evaluates 16
    assert set(spec.averager_factories()) == {"ema", "ema_long"}


def test_chapter_six_search_is_a_design_of_dropout_ema_and_norm():
    spec = ch6.SPECS["ch6/search"].at_tier("reference")
    configs = spec.configurations()
    assert len(spec.seeds) == 10 and {c.steps for c in configs} == {6000}
    assert {c.schedule for c in configs} == {"constant"}
    assert spec.varying() == ("norm", "init", "resid_dropout")
    assert len(configs) == 2 * 2 * 2 == 8
    assert {(c.targets, c.batch, c.lr) for c in configs} == {("sampled", 128, 3e-3)}
    assert set(spec.averagers) == {"ema", "bema"} and spec.scales == (1.0,)


def test_chapter_seven_reference_is_the_claims_tasks_64_wide():
    spec = ch7.SPECS["ch7/placements"].at_tier("reference")
    configs = spec.configurations()
    assert len(configs) == 2 * 3 * 2 == 12
    assert {(c.task, c.targets) for c in configs} == {
        ("tictactoe", "sampled"),
        ("anbn", "soft"),
    }
    assert {c.norm for c in configs} == {"none", "post", "attn_out"}
    assert {c.init for c in configs} == {"book", "torch"}
    assert {(c.task, c.d_model, c.steps, c.lr, c.schedule) for c in configs} == {
        ("tictactoe", 64, 6000, 3e-3, "constant"),
        ("anbn", 64, 6000, 1e-3, "cosine"),  # ch7.STABLE_ANBN: no seed collapses
    }
    assert set(spec.averagers) == {"ema"}
    # the live languages stay 32 wide
    live = ch7.SPECS["ch7/placements"].configurations()
    assert {c.d_model for c in live if c.task == "anbn"} == {32}


def test_averager_names_pick_their_kind_and_reject_others():
    spec = Spec(name="t/x", averagers={"ema": {}, "ema_long": {"beta": 0.999}})
    assert set(spec.averager_factories()) == {"ema", "ema_long"}
    for bad in ("raw", "swa", "ema_", "long_ema"):
        with pytest.raises(ValueError, match="averagers="):
            Spec(name="t/x", averagers={bad: {}})


def fabricated(spec: Spec, tv) -> Results:
    """Rows of ``spec``'s reference grid at every step, variant, scale and seed; TV the
    same at every length: ``tv(config, variant, scale, seed)``."""
    spec = spec.at_tier("reference")
    variants = ["raw", *spec.averagers]
    rows = []
    for index, config in enumerate(spec.configurations()):
        s = list(range(1, config.setup().test_length + 1))
        for step in (*spec.checkpoints, config.steps):
            for variant in variants:
                for scale in spec.scales:
                    for seed in spec.seeds:
                        value = tv(config, variant, scale, seed)
                        rows.append(
                            {
                                "config": index,
                                "variant": variant,
                                "seed": seed,
                                "scale": scale,
                                "step": step,
                                "s": s,
                                "tv": [value] * len(s),
                            }
                        )
    return Results(spec, rows)


NOISE = np.random.default_rng(0).normal(0, 0.02, 10)  # per seed, shared by all sides


def ch6_tv(config, variant, scale, seed):
    """EMA lowers TV by 0.04 (the long window by 0.02), BEMA raises it by 0.01;
    sharpening by 1.5 helps the raw weights by 0.01 and hurts the averaged ones;
    dropout 0.3 lowers TV by 0.03 without a norm only."""
    gain = {"raw": 0.0, "ema": 0.04, "ema_long": 0.02, "bema": -0.01}[variant]
    sharpen = 0.01 if variant == "raw" else -0.01
    drop = 0.03 * (config.resid_dropout > 0) * (config.norm == "none")
    return 0.3 + NOISE[seed] - gain - sharpen * (scale != 1.0) - drop


def test_chapter_six_claims_read_every_cell_and_averager():
    grid = fabricated(ch6.SPECS["ch6/grid"], ch6_tv)
    ema = reference.ema_helps(grid)
    assert ema.claim.key == "ch6-score-ema" and ema.word == "reproduced"
    last = [e for e in ema.effects if e.step == 6000]
    assert len(last) == 8 * 2  # cells x windows
    assert {e.cell["averager"] for e in last} == {"ema", "ema_long"}
    assert {round(e.interval.mean, 6) for e in last} == {0.04, 0.02}
    assert set(last[0].cell) == {"norm", "init", "lr", "averager"}
    temperature = reference.temperature(grid)
    # raw at 1.5 (0.29) minus EMA at 1 (0.26): paired, the noise cancels
    assert {round(e.interval.mean, 6) for e in temperature.effects} == {0.03}
    assert temperature.word == "reproduced"
    assert "1, 1.5" in temperature.number


def test_chapter_six_search_and_bema_claims():
    search = fabricated(ch6.SPECS["ch6/search"], ch6_tv)
    found = reference.search_finds(search)
    assert found.claim.key == "ch6-score-search"
    last = [e for e in found.effects if e.step == 6000]
    dropout = [e for e in last if e.cell["remedy"] == "resid_dropout 0.3"]
    ema = [e for e in last if e.cell["remedy"] == "ema"]
    assert len(dropout) == 2 * 2 and len(ema) == 8  # norm x init; x dropout
    # dropout helps only without a norm: helps there, equivalent elsewhere, EMA helps
    assert found.word == "mixed"
    assert found.counts == {"helps": 10, "equivalent": 2}
    bema = reference.bema_helps(search)
    assert bema.claim.key == "ch6-score-bema"
    assert bema.word == "reversed"  # BEMA worse by 0.01 everywhere
    with pytest.raises(ValueError, match="no 'ema_long'|no residual dropout"):
        reference.search_finds(fabricated(ch6.SPECS["ch6/grid"], ch6_tv))
    with pytest.raises(ValueError, match="at least two logit scales"):
        reference.temperature(search)
    with pytest.raises(ValueError, match="no 'bema' variant"):
        reference.bema_helps(fabricated(ch6.SPECS["ch6/grid"], ch6_tv))


def ch7_tv(config, variant, scale, seed):
    """The game: none 0.5, post 0.4, attn_out 0.3, EMA 0.02 lower; a^n b^n: 0.6 for
    every placement (post-norm no help)."""
    if config.task == "anbn":
        return 0.6 + NOISE[seed]
    level = {"none": 0.5, "post": 0.4, "attn_out": 0.3}[config.norm]
    return level + NOISE[seed] - 0.02 * (variant == "ema")


def test_chapter_seven_claims():
    sweep = fabricated(ch7.SPECS["ch7/placements"], ch7_tv)
    game = reference.game_order(sweep)
    assert game.claim.key == "ch7-score-game" and game.word == "reproduced"
    last = [e for e in game.effects if e.step == 6000]
    assert {e.cell["pair"] for e in last} == {"post - attn_out", "none - post"}
    assert len(last) == 2 * 2  # pairs x init
    ema = reference.game_ema(sweep)
    assert ema.word == "reproduced"
    assert len([e for e in ema.effects if e.step == 6000]) == 3 * 2
    assert {tuple(e.cell) for e in ema.effects} == {("norm", "init")}  # game pinned
    languages = reference.languages(sweep)
    assert languages.claim.key == "ch7-score-languages"
    assert languages.word == "no effect"  # identical sides: zero everywhere
    # one cell per init: a^n b^n's target kind and learning rate are one value each
    assert {tuple(e.cell.items()) for e in languages.effects} == {
        (("init", "book"),),
        (("init", "torch"),),
    }
