"""Compare a freshly executed notebook with its stored outputs, tolerating what another
CPU changes.

Why not strict nbval: at a fixed seed and one thread torch is bit-identical only on the
same CPU and kernels. Another instruction set changes the lowest bits, training
amplifies them, and a printed `0.410` becomes `0.411`. So this comparison splits every
text output into words and numbers:

- words (and the order of everything) must match exactly: labels, table structure,
  True/False;
- integers must match exactly (counts, lengths, seeds, sizes), unless a cell allows
  slack;
- decimals match within `atol` units of the coarser printed last digit, or `rtol`
  relative;
- images are never compared (only that they exist); widget views by their kind, not
  their id.

Cell metadata `{"nbcompare": {"rtol": 0.2, "atol": 0.03, "atol_digits": 3, "int_atol":
1, "why": "..."}}` widens one cell's tolerance, with the reason next to it (`why` is
required); the tag `nbval-ignore-output` skips a cell. Defaults are `DEFAULT` below.
Plotly and HTML payloads are compared the same way (as text with numbers), never byte
for byte.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# tqdm meters (percentage, bar, counts, times, rates) vary between runs; also the
# text/plain repr of a tqdm widget.
PROGRESS = re.compile(r"\s*\d+%\|[^|\n]*\|\s*[\d.]+[kMG]?/[\d.]+[kMG]?\s*\[[^\]\n]*\]")
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w])")
IGNORED_MIME = {
    "image/png",
    "image/jpeg",
    "image/svg+xml",
    "application/vnd.jupyter.widget-view+json",
}
IGNORE_TAG = "nbval-ignore-output"


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 0.0
    atol: float = 0.0  # absolute, in the quantity's own units
    atol_digits: float = 2.0  # this many units of the coarser printed last digit
    int_atol: int = 0

    @classmethod
    def for_cell(cls, cell: dict[str, Any], default: Tolerance) -> Tolerance:
        override = cell.get("metadata", {}).get("nbcompare", {})
        unknown = set(override) - {*FIELDS, "why"}
        if unknown:
            raise ValueError(
                f"unknown nbcompare keys {sorted(unknown)}; allowed: "
                f"{', '.join(FIELDS)}, why"
            )
        if override and not override.get("why"):
            raise ValueError("an nbcompare override must say why (key 'why')")
        values = {k: override.get(k, getattr(default, k)) for k in FIELDS}
        return cls(**values)


FIELDS = ("rtol", "atol", "atol_digits", "int_atol")
DEFAULT = Tolerance(rtol=0.02, atol=0.0, atol_digits=2.0, int_atol=0)


@dataclass
class Report:
    """What differed (problems) and how many numbers were compared and moved within
    tolerance."""

    problems: list[str] = field(default_factory=list)
    numbers: int = 0
    moved: int = 0
    largest_relative_move: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self, limit: int = 20) -> str:
        head = (
            f"{len(self.problems)} differences; {self.numbers} numbers compared, "
            f"{self.moved} moved within tolerance"
        )
        return "\n".join([head, *self.problems[:limit]])


def _decimals(token: str) -> int:
    """Decimal places the token was printed with, counting an exponent: '1.25e-03' ->
    5."""
    mantissa, _, exponent = token.lower().partition("e")
    places = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return places - int(exponent or 0)


def _is_int(token: str) -> bool:
    return not re.search(r"[.eE]", token)


def compare_text(
    stored: str, fresh: str, tol: Tolerance, where: str, report: Report
) -> None:
    """Words must match exactly; numbers within tolerance (see module docstring)."""
    stored, fresh = (
        PROGRESS.sub("PROGRESS-BAR", stored),
        PROGRESS.sub("PROGRESS-BAR", fresh),
    )
    words_a, words_b = NUMBER.split(stored), NUMBER.split(fresh)
    nums_a, nums_b = NUMBER.findall(stored), NUMBER.findall(fresh)
    if words_a != words_b or len(nums_a) != len(nums_b):
        report.problems.append(
            f"{where}: text differs\n  stored: {_excerpt(stored, fresh)}\n  "
            f"fresh:  {_excerpt(fresh, stored)}"
        )
        return
    for a, b in zip(nums_a, nums_b):
        report.numbers += 1
        if a == b:
            continue
        x, y = float(a), float(b)
        if _is_int(a) and _is_int(b):
            allowed = tol.int_atol
        else:
            unit = 10.0 ** -min(_decimals(a), _decimals(b))
            allowed = max(
                tol.atol, tol.atol_digits * unit, tol.rtol * max(abs(x), abs(y))
            )
        if abs(x - y) > allowed + 1e-12 * max(abs(x), abs(y), 1.0):
            report.problems.append(
                f"{where}: {a} (stored) vs {b} (fresh), allowed difference "
                f"{allowed:.3g}"
            )
        else:
            report.moved += 1
            scale = max(abs(x), abs(y))
            if scale > 0 and math.isfinite(scale):
                report.largest_relative_move = max(
                    report.largest_relative_move, abs(x - y) / scale
                )


def _excerpt(text: str, other: str, width: int = 60) -> str:
    """The stretch of `text` around the first character where it departs from
    `other`."""
    first = next(
        (i for i, (p, q) in enumerate(zip(text, other)) if p != q),
        min(len(text), len(other)),
    )
    start = max(0, first - width // 2)
    return repr(text[start : start + width])


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return json.dumps(value, sort_keys=True)


def _normalised(outputs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge consecutive stream outputs of one name (flushes split them arbitrarily)."""
    merged: list[dict[str, Any]] = []
    for out in outputs:
        if (
            out["output_type"] == "stream"
            and merged
            and merged[-1]["output_type"] == "stream"
            and merged[-1]["name"] == out["name"]
        ):
            merged[-1] = {
                **merged[-1],
                "text": _as_text(merged[-1]["text"]) + _as_text(out["text"]),
            }
        else:
            merged.append(out)
    return merged


def compare_cell(
    stored: dict[str, Any],
    fresh: dict[str, Any],
    where: str,
    report: Report,
    default: Tolerance = DEFAULT,
) -> None:
    """Compare one code cell's outputs (stored against fresh) into `report`."""
    if IGNORE_TAG in stored.get("metadata", {}).get("tags", []):
        return
    tol = Tolerance.for_cell(stored, default)
    a, b = _normalised(stored.get("outputs", [])), _normalised(fresh.get("outputs", []))
    kinds_a = [(o["output_type"], o.get("name"), sorted(o.get("data", {}))) for o in a]
    kinds_b = [(o["output_type"], o.get("name"), sorted(o.get("data", {}))) for o in b]
    if kinds_a != kinds_b:
        report.problems.append(
            f"{where}: output kinds differ: stored {kinds_a} vs fresh {kinds_b}"
        )
        return
    for i, (out_a, out_b) in enumerate(zip(a, b)):
        if out_a["output_type"] == "error":
            report.problems.append(
                f"{where}: the stored notebook holds an error output"
            )
        elif out_a["output_type"] == "stream":
            compare_text(
                _as_text(out_a["text"]),
                _as_text(out_b["text"]),
                tol,
                f"{where} output {i} ({out_a['name']})",
                report,
            )
        else:
            for mime, value in out_a.get("data", {}).items():
                if mime not in IGNORED_MIME:
                    compare_text(
                        _as_text(value),
                        _as_text(out_b["data"][mime]),
                        tol,
                        f"{where} output {i} [{mime}]",
                        report,
                    )


def compare_notebooks(
    stored: dict[str, Any], fresh: dict[str, Any], default: Tolerance = DEFAULT
) -> Report:
    """Compare every code cell of two versions of one notebook (same cells, same
    order)."""
    report = Report()
    code_a = [c for c in stored["cells"] if c["cell_type"] == "code"]
    code_b = [c for c in fresh["cells"] if c["cell_type"] == "code"]
    if [_as_text(c["source"]) for c in code_a] != [
        _as_text(c["source"]) for c in code_b
    ]:
        report.problems.append(
            "the notebooks' code cells differ: compare outputs of the same source only"
        )
        return report
    for n, (cell_a, cell_b) in enumerate(zip(code_a, code_b), start=1):
        compare_cell(cell_a, cell_b, f"code cell {n}", report, default)
    return report
