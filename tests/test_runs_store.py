import gzip
import re
import shutil

import numpy as np
import pytest

from lengthgen_lite.runs import runner, store
from lengthgen_lite.runs.results import PROVENANCE_KEYS
from lengthgen_lite.runs.store import Store, sweep
from tiny_experiment import tiny_spec

REFERENCE = {"seeds": 3, "steps": 60, "checkpoints": (20, 40)}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    spec = tiny_spec(reference=REFERENCE)
    saved = []
    results = sweep(
        spec, Store(folder), progress=False, command="pytest", on_saved=saved.append
    )
    return spec, folder, saved, results


def test_a_sweep_saves_one_file_per_configuration_with_provenance(swept):
    spec, folder, saved, results = swept
    assert len(saved) == 2 and all(p.parent.parent == folder for p in saved)
    assert all(p.name.endswith(store.SUFFIX) for p in saved)
    data = store.read_file(saved[0])
    assert set(PROVENANCE_KEYS) <= set(data["provenance"])
    assert data["provenance"]["command"] == "pytest"
    assert sorted(data["training"]["converged"]) == ["20", "40", "60"]
    assert np.array(data["training"]["loss_windows"]).shape == (3, store.LOSS_WINDOWS)
    assert results.spec.tier == "reference" and results.seeds == [0, 1, 2]
    assert results.key_metric() == "tv_beyond"
    assert results.stored_training.keys() == {0, 1}


def test_rows_carry_their_checkpoint_and_default_to_the_last_step(swept):
    _, _, _, results = swept
    assert {r["step"] for r in results.rows} == {20, 40, 60}
    last = results.values("tv_beyond", norm="none")
    np.testing.assert_array_equal(
        last, results.values("tv_beyond", norm="none", step=60)
    )
    early = results.values("tv_beyond", norm="none", step=20)
    assert early.shape == (3,) and not np.array_equal(early, last)


def test_a_second_sweep_resumes_without_training(swept, monkeypatch):
    spec, folder, _, results = swept

    def no_training(*args, **kwargs):
        raise AssertionError("a stored configuration was trained again")

    monkeypatch.setattr(store, "run_configuration", no_training)
    again = sweep(spec, Store(folder), progress=False)
    assert again.rows == results.rows


def _damage(path, how):
    """Cut a store file short, flip a byte of it, or gzip text that is not JSON."""
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "flipped":
        data[len(data) // 2] ^= 0xFF
    else:
        data = gzip.compress(b'{"spec": {"name": ')
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "how, error",
    [
        ("truncated", "Compressed file ended before the end-of-stream marker"),
        ("flipped", ""),
        ("not json", "Expecting value"),
    ],
)
def test_a_damaged_file_is_named_with_the_command_that_remakes_it(
    swept, tmp_path, how, error
):
    spec, folder, _, _ = swept
    shutil.copytree(folder, tmp_path / "store")
    path = Store(tmp_path / "store").path(spec.at_tier("reference"), 0)
    _damage(path, how)
    with pytest.raises(ValueError) as info:
        Store(tmp_path / "store").load(spec)
    message = str(info.value)
    assert re.fullmatch(
        rf"{re.escape(str(path))} is damaged \({error}.*\); re-make it: lengthgen-lite "
        r"run tiny/placements --tier reference \(sets the file aside, trains "
        r"configuration 0 again\)",
        message,
    ), message
    assert "\n" not in message


def test_a_resumed_sweep_sets_damaged_files_aside_and_trains_them_again(
    swept, tmp_path
):
    spec, folder, _, results = swept
    shutil.copytree(folder, tmp_path / "store")
    paths = [
        Store(tmp_path / "store").path(spec.at_tier("reference"), i) for i in (0, 1)
    ]
    _damage(paths[0], "truncated")
    _damage(paths[1], "flipped")
    lines, saved = [], []
    again = sweep(
        spec,
        Store(tmp_path / "store"),
        progress=False,
        on_damaged=lines.append,
        on_saved=saved.append,
    )
    assert len(lines) == 2 and saved == paths
    for i, (line, path) in enumerate(zip(lines, paths)):
        assert line.startswith(f"{path} is damaged (") and "\n" not in line
        assert line.endswith(
            f": moved to {path.name}{store.DAMAGED}; configuration {i} is trained again"
        )
        assert path.with_name(path.name + store.DAMAGED).exists()
    assert again.rows == results.rows  # the same seeds trained again: the same rows


def test_a_changed_spec_or_a_missing_file_is_a_clear_error(swept, tmp_path):
    spec, folder, saved, _ = swept
    more_seeds = tiny_spec(reference=REFERENCE | {"seeds": 4})
    with pytest.raises(
        ValueError,
        match=r"lacks configurations \[0, 1\]; run: lengthgen-lite run "
        "tiny/placements --tier reference",
    ):
        Store(folder).load(more_seeds)
    nothing = Store(folder).load(more_seeds, partial=True)
    assert len(nothing.rows) == 0
    with pytest.raises(ValueError, match="an empty results table has no key metric"):
        nothing.key_metric()
    assert Store(folder).stale(more_seeds) == sorted(saved)
    assert Store(folder).stale(spec) == []
    broken = store.read_file(saved[1])
    del broken["provenance"]["cpu"]
    store.write_file(saved[1], broken)
    with pytest.raises(ValueError, match=r"provenance lacks \['cpu'\]"):
        Store(folder).load(spec)


def test_a_file_written_twice_has_the_same_bytes(swept, tmp_path):
    # no timestamp in the gzip header: a re-run of the same sweep changes no byte
    _, _, saved, _ = swept
    data = store.read_file(saved[0])
    copies = [tmp_path / f"{name}{store.SUFFIX}" for name in ("a", "b")]
    for copy in copies:
        store.write_file(copy, data)
    assert copies[0].read_bytes() == copies[1].read_bytes()
    assert store.read_file(copies[0]) == data


def test_stored_metrics_match_a_rerun_of_one_seed(swept):
    # a configuration's seed trains the same alone as in its batch (up to rounding)
    spec, folder, _, results = swept
    ref = spec.at_tier("reference").with_overrides(
        seeds=[1], checkpoints=[20], steps=40
    )
    rows, _ = runner.run_configuration(ref, 1, progress=False)
    stored = results.curves("tv", config=1, step=20)[1]
    rerun = next(
        r
        for r in rows
        if r["step"] == 20 and r["variant"] == "raw" and r["scale"] == 1.0
    )
    np.testing.assert_allclose(rerun["tv"], stored, rtol=1e-4, atol=1e-5)


def test_a_later_config_field_at_its_default_keeps_the_stored_file_names():
    # the keys of the files swept before attn_bias and item_mlp existed
    from lengthgen_lite.chapters import ch1_set_complement as ch1
    from lengthgen_lite.chapters import ch5_post_norm as ch5

    baseline = ch1.SPECS["ch1/baseline"].at_tier("reference")
    dropout = ch5.SPECS["ch5/dropout"].at_tier("reference")
    assert [store.config_key(baseline, i) for i in range(2)] == [
        "abf542149f26",
        "957398929e72",
    ]
    assert store.config_key(dropout, 1) == "893bc70dc8cd"
    for field, value in (("attn_bias", True), ("precision", "bfloat16")):
        changed = baseline.with_overrides(base={**baseline.base, field: value})
        assert store.config_key(changed, 0) != store.config_key(baseline, 0)
    factored = baseline.with_overrides(test_time=("logn",))
    assert store.config_key(factored, 0) != store.config_key(baseline, 0)


def test_a_sweep_of_only_some_configurations_runs_those_in_order(tmp_path):
    spec = tiny_spec(reference=REFERENCE)
    saved = []
    partial = sweep(
        spec, Store(tmp_path), progress=False, only=[1], on_saved=saved.append
    )
    assert partial is None and len(saved) == 1
    assert Store(tmp_path).missing(spec) == [0]
    with pytest.raises(ValueError, match=r"configurations \[2\] do not exist; allowed"):
        sweep(spec, Store(tmp_path), progress=False, only=[0, 2])
    assert sweep(spec, Store(tmp_path), progress=False, only=[0, 1]) is not None
