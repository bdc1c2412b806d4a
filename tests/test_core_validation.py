"""The shared argument checks: what they accept, and that what they reject names the
argument."""

import math

import numpy as np
import pytest

from lengthgen_lite.core.validation import (
    is_int,
    is_number,
    require_choice,
    require_int,
    require_ints,
    require_number,
)


def test_is_int_excludes_bools_and_floats():
    assert is_int(3) and is_int(np.int64(3))
    assert not is_int(True) and not is_int(3.0) and not is_int("3")


def test_is_number_excludes_bools_and_non_finite():
    assert is_number(1) and is_number(0.5) and is_number(np.float32(2))
    assert (
        not is_number(False)
        and not is_number(math.nan)
        and not is_number(math.inf)
        and not is_number("1")
    )


def test_require_int_returns_python_int_and_checks_bounds():
    assert (
        require_int("steps", np.int64(5), 1) == 5
        and type(require_int("steps", np.int64(5), 1)) is int
    )
    with pytest.raises(ValueError, match=r"steps must be an integer >= 1, got 0"):
        require_int("steps", 0, 1)
    with pytest.raises(
        ValueError, match=r"bits must be an integer between 1 and 8, got 9"
    ):
        require_int("bits", 9, 1, 8)
    with pytest.raises(ValueError, match="got True"):
        require_int("steps", True, 1)


def test_require_number_bounds_and_strictness():
    assert require_number("lr", 0.1, 0, strict=True) == 0.1
    with pytest.raises(ValueError, match=r"lr must be a finite number > 0, got 0"):
        require_number("lr", 0, 0, strict=True)
    with pytest.raises(
        ValueError, match="beta must be a finite number strictly between 0 and 1"
    ):
        require_number("beta", 1.0, 0, 1, strict=True)
    with pytest.raises(ValueError, match="got nan"):
        require_number("x", math.nan)


def test_require_ints_and_choice():
    assert require_ints("sizes", [1, np.int32(2)], 1) == (1, 2)
    with pytest.raises(
        ValueError, match="sizes must be a non-empty sequence of integers >= 1"
    ):
        require_ints("sizes", [], 1)
    with pytest.raises(ValueError, match="sizes must be a non-empty"):
        require_ints("sizes", [1, 0], 1)
    assert require_choice("norm", "post", ("none", "post")) == "post"
    with pytest.raises(
        ValueError, match=r"unknown norm 'mid'; allowed: 'none', 'post'"
    ):
        require_choice("norm", "mid", ("none", "post"))
