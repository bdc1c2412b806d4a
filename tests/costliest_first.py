"""Notebooks ordered by their last measured cost (`make bench`), costliest first.

Two workers that each take the next notebook as they free up (`make execute`, and the
notebook tests under `pytest --dist loadfile`) then start the long chapters at once and
finish together. Unmeasured notebooks keep their order, after the measured ones.

    python tests/costliest_first.py notebooks/*.ipynb book/*.ipynb

prints the paths in that order.
"""

from __future__ import annotations

import json
import pathlib
import sys

RESULTS = (
    pathlib.Path(__file__).resolve().parents[1]
    / "benchmarks"
    / "results"
    / "speed.json"
)


def costliest_first(paths: list[pathlib.Path]) -> list[pathlib.Path]:
    seconds = {}
    if RESULTS.exists():
        seconds = {
            row["chapter"]: row["wall_seconds"]
            for row in json.loads(RESULTS.read_text())["chapters"]
        }
    # stable: unmeasured keep their order
    return sorted(paths, key=lambda path: -seconds.get(path.stem, 0.0))


if __name__ == "__main__":
    print(
        "\n".join(
            str(path)
            for path in costliest_first([pathlib.Path(arg) for arg in sys.argv[1:]])
        )
    )
