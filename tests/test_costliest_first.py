import json
import pathlib

import costliest_first as module


def test_measured_notebooks_come_costliest_first_and_the_rest_keep_their_order(
    tmp_path, monkeypatch
):
    results = tmp_path / "speed.json"
    results.write_text(
        json.dumps(
            {
                "chapters": [
                    {"chapter": "01_a", "wall_seconds": 10.0},
                    {"chapter": "02_b", "wall_seconds": 90.0},
                ]
            }
        )
    )
    monkeypatch.setattr(module, "RESULTS", results)
    paths = [
        pathlib.Path(name)
        for name in ("x/new_1.ipynb", "x/01_a.ipynb", "x/new_0.ipynb", "x/02_b.ipynb")
    ]
    assert [p.stem for p in module.costliest_first(paths)] == [
        "02_b",
        "01_a",
        "new_1",
        "new_0",
    ]


def test_without_measurements_the_order_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(module, "RESULTS", tmp_path / "missing.json")
    paths = [pathlib.Path("b.ipynb"), pathlib.Path("a.ipynb")]
    assert module.costliest_first(paths) == paths
