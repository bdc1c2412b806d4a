"""Argument checks that every module shares, so bad input fails the same way everywhere.

Each check raises ``ValueError`` naming the argument, what was given and what is
allowed, and returns the value, so a check reads as an assignment: ``steps =
require_int("steps", steps, 1)``. ``bool`` is never accepted as a number: ``True`` is an
``int`` to Python, not to a reader.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def is_int(value: object) -> bool:
    """True for Python and NumPy integers, False for bools and everything else."""
    return isinstance(value, (int, np.integer)) and not isinstance(
        value, (bool, np.bool_)
    )


def is_number(value: object) -> bool:
    """True for finite ints and floats (Python or NumPy), False for bools, NaN and
    infinity."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        return False
    return math.isfinite(float(value))


def _range_text(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"between {minimum} and {maximum}"
    if minimum is not None:
        return f">= {minimum}"
    if maximum is not None:
        return f"<= {maximum}"
    return "any value"


def require_int(
    name: str, value: object, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` as an int, if it is an integer within [minimum, maximum] (either bound
    optional)."""
    if (
        not is_int(value)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        raise ValueError(
            f"{name} must be an integer {_range_text(minimum, maximum)}, got {value!r}"
        )
    return int(value)  # type: ignore[arg-type]


def require_number(
    name: str,
    value: object,
    minimum: float | None = None,
    maximum: float | None = None,
    strict: bool = False,
) -> float:
    """``value`` as a float, if finite and within the bounds (``strict``: excluding the
    bounds)."""
    ok = is_number(value)
    if ok:
        x = float(value)  # type: ignore[arg-type]
        low_ok = minimum is None or (x > minimum if strict else x >= minimum)
        high_ok = maximum is None or (x < maximum if strict else x <= maximum)
        ok = low_ok and high_ok
    if not ok:
        bounds = _range_text(minimum, maximum)
        if strict and bounds != "any value":
            bounds = (
                bounds.replace(">=", ">")
                .replace("<=", "<")
                .replace("between", "strictly between")
            )
        raise ValueError(f"{name} must be a finite number {bounds}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def require_ints(
    name: str, values: Iterable[object], minimum: int | None = None
) -> tuple[int, ...]:
    """A non-empty sequence of integers, each >= minimum."""
    values = tuple(values)
    if not values or not all(
        is_int(v) and (minimum is None or v >= minimum) for v in values
    ):
        raise ValueError(
            f"{name} must be a non-empty sequence of integers "
            f"{_range_text(minimum, None)}, got {values!r}"
        )
    return tuple(int(v) for v in values)  # type: ignore[arg-type]


def require_choice(name: str, value: Any, allowed: Sequence[Any]) -> Any:
    """``value``, if it is one of ``allowed``."""
    if value not in allowed:
        raise ValueError(
            f"unknown {name} {value!r}; allowed: {', '.join(map(repr, allowed))}"
        )
    return value
