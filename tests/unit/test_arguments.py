"""The shared scalar checks accept what they promise and name the argument otherwise."""

import math

import pytest

from expattn.arguments import finite_number, positive_int


@pytest.mark.parametrize("value", [1, 2, 10**12])
def test_positive_int_accepts(value):
    assert positive_int("n", value) == value


@pytest.mark.parametrize("value", [0, -3, 1.0, True, "2", None])
def test_positive_int_rejects_naming_the_argument(value):
    with pytest.raises(ValueError, match=r"^heads must be a positive integer, got "):
        positive_int("heads", value)


def test_finite_number_bounds():
    assert finite_number("x", -2.5) == -2.5
    assert finite_number("ridge", 0, at_least=0) == 0.0
    assert finite_number("beta", 1e-300, above=0) == 1e-300
    with pytest.raises(ValueError, match=r"^beta must be a finite number > 0, got 0$"):
        finite_number("beta", 0, above=0)
    with pytest.raises(ValueError, match=r"^ridge must be a finite number >= 0, got -1e-09$"):
        finite_number("ridge", -1e-9, at_least=0)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, False, "1", None])
def test_finite_number_rejects_non_finite_and_non_numbers(value):
    with pytest.raises(ValueError, match=r"^c must be a finite number, got"):
        finite_number("c", value)
