"""The committed reference store (lengthgen_lite/data/reference): every file the book
reads loads with its provenance, and each spec's stored numbers are re-made here: one
seed of one configuration, retrained up to the first checkpoint, must give the stored
row (within the notebook comparison's default tolerance: 2% relative or 0.002
absolute; another CPU rounds differently). A sweep still in progress is checked on
what it has stored."""

import numpy as np
import pytest

from lengthgen_lite.chapters import ch8_claims, reference
from lengthgen_lite.chapters import ch8_two_kinds as ch8
from lengthgen_lite.runs.claims import at_step
from lengthgen_lite.runs.runner import run_configuration

NAMES = [*reference.SPECS, *reference.IN_PROGRESS]
# the per-length metric each sweep's re-run compares
METRIC = {
    name: "target_attention"
    for name in ("ch4/retrieval", "ch8/retrieval", "ch8/test_time_retrieval")
}


@pytest.mark.parametrize("name", NAMES)
def test_the_store_holds_every_configuration_with_provenance(name):
    results = reference.load(name)  # raises if a file is missing, stale or unchecked
    spec = results.spec
    assert spec.tier == "reference" and len(spec.seeds) >= 10
    missing = results.provenance["missing"]
    assert (name in reference.IN_PROGRESS) or not missing
    assert len(results.stored_training) == len(spec.configurations()) - len(missing) > 0
    for part in results.provenance["parts"]:
        assert part["git_commit"] and part["cpu"] and part["wall_seconds"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_one_seed_retrained_to_the_first_checkpoint_gives_the_stored_row(name):
    results = reference.load(name)
    spec = results.spec
    index = min(results.stored_training)  # the first stored configuration
    first = spec.checkpoints[0]
    config = spec.configurations()[index]
    assert config.schedule == "constant", "a shorter run is the same run's prefix"
    metric = METRIC.get(name, "tv")
    short = spec.with_overrides(seeds=[spec.seeds[0]], steps=first, checkpoints=())
    rows, _ = run_configuration(short, index, progress=False)
    # the raw weights, and the same weights with each test-time factor
    for variant in ("raw", *(f"test_{factor}" for factor in spec.test_time)):
        where = {"variant": variant, "scale": 1.0}
        stored = results.curves(metric, config=index, step=first, **where)[0]  # seed 0
        (row,) = [r for r in rows if r["variant"] == variant and r["scale"] == 1.0]
        np.testing.assert_allclose(row[metric], stored, rtol=0.02, atol=2e-3)


def test_chapter_two_claims_read_every_cell_of_chapter_one_sweep():
    baseline = reference.load("ch1/baseline")
    dispersion = at_step(reference.dispersion(baseline).effects)  # the last budget
    gap = at_step(reference.gap_exponent(baseline).effects)
    assert len(dispersion) == len(baseline.configs)  # every configuration a cell
    soft = [c for c in baseline.configs if c.targets == "soft"]
    assert len(gap) == len(soft) and all(e.interval.n == 10 for e in gap)


def test_chapter_four_claims_name_their_task_and_the_partial_grid():
    retrieval = reference.load("ch4/retrieval")
    gain = reference.layernorm_gain(retrieval, "argmax_retrieval")
    assert gain.claim.key == "ch4-score-ln-argmax"
    # the task is pinned: the cells span the rest of the grid
    assert all("task" not in e.cell and "init" in e.cell for e in gain.effects)
    if retrieval.provenance["missing"]:
        assert "partial grid" in gain.number
    with pytest.raises(ValueError, match="task='lookup' is unknown"):
        reference.layernorm_gain(retrieval, "lookup")


def test_resharpen_reads_post_norm_models_in_two_parts():
    placements = reference.load("ch5/placements")
    claim = reference.resharpen(placements)
    post = [c for c in placements.configs if c.norm == "post"]
    final = at_step(claim.effects)
    parts = sorted({e.cell["part"] for e in final})
    assert parts == ["attention sharpened", "gap restored"]
    assert len(final) == 2 * len(post)  # one cell per post-norm configuration, twice
    assert all(e.interval.n == 10 for e in final)


def test_shift_reads_only_the_normed_models():
    retrieval = reference.load("ch4/retrieval")
    claim = reference.shift(retrieval)
    normed = [c for c in retrieval.configs if c.norm == "attn_out"]
    final = at_step(claim.effects)
    assert len(final) == 2 * len(normed)
    assert {e.cell["norm_kind"] for e in final} == {"layernorm", "standardize"}
    assert claim.claim.key == "ch4-score-shift"


def test_shift_numbers_count_the_raised_cells_of_each_task():
    retrieval = reference.load("ch4/retrieval")
    numbers = reference.shift_numbers(retrieval)  # the last checkpoint, 6000 steps
    final = at_step(reference.shift(retrieval).effects)
    for task, key in reference.RETRIEVAL_KEYS.items():
        raised = [
            e for e in final if e.cell["task"] == task and e.cell["part"] == "raised"
        ]
        assert numbers[f"ref-shift-{key}-cells"] == len(raised)
        assert numbers[f"ref-shift-{key}-raised-6000"] == sum(
            e.interval.low > 0 for e in raised
        )
        for side in ("before", "after"):
            low, high = (
                numbers[f"ref-shift-{key}-{side}-{m}-6000"] for m in ("min", "max")
            )
            assert 0 < low <= high
    # the norm raises the ratio: its lowest after the norm above its highest before
    assert (
        numbers["ref-shift-dict-after-min-6000"]
        > numbers["ref-shift-dict-before-max-6000"]
    )
    early = reference.shift_numbers(retrieval, step=1000)
    assert "ref-shift-argmax-raised-1000" in early
    with pytest.raises(ValueError, match="step=10 is not stored"):
        reference.shift_numbers(retrieval, step=10)


def test_final_cells_pick_the_last_budget_and_say_what_is_allowed():
    claim = reference.ema_helps(reference.load("ch6/grid"))
    normed = reference.final_cells(claim, norm="attn_out")
    assert normed and {e.cell["norm"] for e in normed} == {"attn_out"}
    assert {e.step for e in normed} == {max(e.step for e in claim.effects)}
    assert len(reference.final_cells(claim)) == len(at_step(claim.effects))
    with pytest.raises(ValueError, match="no cell with"):
        reference.final_cells(claim, norm="post")


def test_chapter_eight_claims_read_every_cell_of_its_four_sweeps():
    names = ("set_complement", "retrieval", "test_time_set", "test_time_retrieval")
    sweeps = [reference.load(f"ch8/{name}") for name in names]
    decisions = {d.claim.key: d for d in reference.two_kinds(*sweeps)}
    # P1-P4 in the chapter's order
    assert list(decisions) == [claim.key for claim in ch8_claims.CLAIMS]
    assert all(d.tier == "reference" for d in decisions.values())
    cells = {key: at_step(d.effects) for key, d in decisions.items()}
    # set complement: 2 variants x target kind x v; retrieval: task x learning rate
    assert (
        len(cells["ch8-score-sharpen-set"]) == len(cells["ch8-score-renorm-set"]) == 8
    )
    for key in ("combined-set", "factor-set"):  # target kind x v
        assert len(cells[f"ch8-score-{key}"]) == 4
    for key in ("ssmax", "ln", "combined", "factor"):  # task x learning rate
        assert len(cells[f"ch8-score-{key}-retrieval"]) == 4
    assert all(e.interval.n == 10 for c in cells.values() for e in c)
    assert {e.step for d in decisions.values() for e in d.effects} == {1000, 3000, 6000}
    # each effect carries its configurations' plateau test (every one passes it here)
    assert all(e.converged for d in decisions.values() for e in d.effects)


@pytest.mark.parametrize(
    "factored, trained, metric",
    [
        ("test_time_set", "set_complement", "tv_beyond"),
        ("test_time_retrieval", "retrieval", "accuracy_longest"),
    ],
)
def test_p4s_sweeps_score_the_very_models_p1_and_p2_read(factored, trained, metric):
    """The test-time sweeps train chapter 8's no-norm configurations again (the store
    keeps scores, not weights): their raw rows are the main sweeps' no-norm rows, so
    P4's control is the model P1-P3 compare against, not another draw of it."""
    sweep, main = (reference.load(f"ch8/{name}") for name in (factored, trained))
    for config in sweep.configs:
        fields = {k: getattr(config, k) for k in ("task", "targets", "v", "lr")}
        for step in (1000, 3000, 6000):
            np.testing.assert_allclose(
                sweep.values(metric, **fields, step=step),
                main.values(metric, **fields, **ch8.SET_VARIANTS["none"], step=step),
                rtol=1e-5,
            )


def test_p5_is_decided_on_what_the_depth_sweep_has_stored():
    """Each half of P5 is decided once its own configurations are stored, and says
    so while the grid is partial (the sweep was committed as it landed)."""
    sweep = reference.load("ch8/depth")
    missing = sweep.provenance["missing"]
    stored = [c for i, c in enumerate(sweep.configs) if i not in missing]
    fields = {(c.positional, c.norm, c.logit_scale) for c in stored}
    nope = {("none", "pre_final", "none"), ("none", "post", "none")} <= fields
    rope = bool({("rope", "post", "none"), ("rope", "attn_out", "none")} & fields)
    decided = {d.claim.key: d for d in reference.depth(sweep)}
    assert ("ch8-score-depth" in decided) == nope
    assert ("ch8-score-rope" in decided) == rope
    assert all(("partial grid" in d.number) == bool(missing) for d in decided.values())
