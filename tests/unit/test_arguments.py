"""The shared scalar checks accept what they promise and name the argument otherwise."""

import math
import re

import pytest

from expattn.arguments import finite_number, integer, optional_integer, positive_int


@pytest.mark.parametrize("value", [1, 2, 10**12])
def test_positive_int_accepts(value):
    assert positive_int("n", value) == value


@pytest.mark.parametrize("value", [0, -3, 1.0, True, "2", None])
def test_positive_int_rejects_naming_the_argument(value):
    with pytest.raises(ValueError, match=r"^heads must be an integer >= 1, got "):
        positive_int("heads", value)


@pytest.mark.parametrize(("at_least", "value"), [(0, 0), (0, 7), (2, 2), (2, 3), (-1, -1)])
def test_integer_accepts_the_bound_and_above(at_least, value):
    assert integer("n", value, at_least=at_least) == value


@pytest.mark.parametrize(("at_least", "value"), [(0, -1), (2, 1), (2, 2.0), (1, True), (0, False), (0, None),
                                                 (0, math.nan), (0, math.inf), (0, "3")])
def test_integer_rejects_naming_the_argument_and_the_bound(at_least, value):
    with pytest.raises(ValueError, match=rf"^iters must be an integer >= {at_least}, got {re.escape(repr(value))}$"):
        integer("iters", value, at_least=at_least)


@pytest.mark.parametrize("value", [None, 1, 5])
def test_optional_integer_accepts_none_and_the_bound(value):
    assert optional_integer("steps", value, at_least=1) == value


@pytest.mark.parametrize("value", [0, 1.0, True, math.nan, "1"])
def test_optional_integer_rejects_naming_the_argument_and_the_bound(value):
    with pytest.raises(ValueError, match=rf"^steps must be an integer >= 1 or None, got {re.escape(repr(value))}$"):
        optional_integer("steps", value, at_least=1)


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
