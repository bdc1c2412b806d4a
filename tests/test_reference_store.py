"""The committed reference store (results/reference): every file the book reads loads
with its provenance, and each spec's stored numbers are re-made here: one seed of one
configuration, retrained up to the first checkpoint, must give the stored row (within
the notebook comparison's default tolerance: 2% relative or 0.002 absolute; another
CPU rounds differently)."""

import numpy as np
import pytest

from lengthgen_lite.chapters import reference
from lengthgen_lite.runs.runner import run_configuration
from lengthgen_lite.runs.store import Store

NAMES = list(reference.SPECS)


@pytest.mark.parametrize("name", NAMES)
def test_the_store_holds_every_configuration_with_provenance(name):
    results = reference.load(name)  # raises if a file is missing, stale or unchecked
    spec = results.spec
    assert spec.scale == "reference" and len(spec.seeds) >= 10
    assert len(results.training) == len(spec.configurations())
    for part in results.provenance["parts"]:
        assert part["git_commit"] and part["cpu"] and part["wall_seconds"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_one_seed_retrained_to_the_first_checkpoint_gives_the_stored_row(name):
    spec = reference.SPECS[name].at_scale("reference")
    first = spec.checkpoints[0]
    config = spec.configurations()[0]
    assert config.schedule == "constant", "a shorter run is the same run's prefix"
    stored = Store().load(spec).curves("tv", config=0, step=first)[0]  # seed 0
    short = spec.with_overrides(seeds=[spec.seeds[0]], steps=first, checkpoints=())
    rows, _ = run_configuration(short, 0, progress=False)
    (row,) = [r for r in rows if r["variant"] == "raw" and r["scale"] == 1.0]
    np.testing.assert_allclose(row["tv"], stored, rtol=0.02, atol=2e-3)
