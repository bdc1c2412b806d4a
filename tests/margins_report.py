"""The margin of every asserted claim, on the stored seeds and on new seeds (`make
margins`).

The notebook tests record each claim a chapter asserts through
`lengthgen_lite.runs.claims` (`Claim.require`, `Claim.holds`) in
`_build/margins/<run>/<notebook>.jsonl`, one run
on the seeds the stored outputs use and one on new seeds. This prints one row per claim:
its slack in units of its seed spread on each run, the smaller marked. A claim with less
than `MIN_SPREADS` on either run sits on a knife edge: the report then exits 1, so `make
test` fails.

    python tests/margins_report.py [_build/margins]
"""

from __future__ import annotations

import math
import pathlib
import sys

from lengthgen_lite.runs.claims import Margin, load_margins

RUNS = ("stored-outputs", "new-seeds")
MIN_SPREADS = 1.0


def collect(folder: pathlib.Path) -> dict[str, dict[str, Margin]]:
    """claim key -> run -> its margin (the last recorded, if a claim was recorded
    twice)."""
    table: dict[str, dict[str, Margin]] = {}
    for run in RUNS:
        for path in sorted((folder / run).glob("*.jsonl")):
            for margin in load_margins(path):
                table.setdefault(margin.key, {})[run] = margin
    return table


def _fmt(margin: Margin | None) -> str:
    if margin is None:
        return "-"
    spreads = "inf" if math.isinf(margin.in_spreads) else f"{margin.in_spreads:.1f}"
    return f"{spreads} ({margin.slack:.3g} / {margin.spread:.2g})"


def report(table: dict[str, dict[str, Margin]]) -> tuple[list[str], list[str]]:
    """The report's lines, and the keys of the claims below MIN_SPREADS on some run."""
    lines = [
        f"{'claim':34} {'rule':10} {'stored seeds':26} {'new seeds':26} statement",
        f"{'':34} {'':10} {'spreads (slack / spread)':26}",
    ]
    thin = []
    for key in sorted(table):
        runs = table[key]
        first = next(iter(runs.values()))
        smallest = min(m.in_spreads for m in runs.values())
        flag = "  <-- below 1 spread" if smallest < MIN_SPREADS else ""
        if flag or set(runs) != set(RUNS):
            thin.append(key)
        lines.append(
            f"{key:34} {first.rule:10} {_fmt(runs.get(RUNS[0])):26} "
            f"{_fmt(runs.get(RUNS[1])):26} "
            f"{first.statement}{flag}"
        )
    return lines, thin


def main(folder: str = "_build/margins") -> int:
    table = collect(pathlib.Path(folder))
    if not table:
        print(
            f"no margins recorded under {folder}: run the notebook tests "
            "first (make nbval)"
        )
        return 1
    lines, thin = report(table)
    print("\n".join(lines))
    smallest = min(min(m.in_spreads for m in runs.values()) for runs in table.values())
    print(f"{len(table)} claims; smallest slack {smallest:.2f} seed spreads")
    if thin:
        print(f"below {MIN_SPREADS} spread, or missing a run: {', '.join(thin)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
