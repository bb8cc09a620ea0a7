"""The checks every stored or loaded result passes (dlperf.report.reading) read long lists of
numbers at the speed of builtins: their answers are, value for value, those of the rule each
states, checked here against that rule written out element by element (hypothesis draws the
values: finite and not, bools, ints past a float's range, None, text; nests to the depth
limit and past it)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlperf.report import reading

# no framework, nothing measured
pytestmark = pytest.mark.parallel

# no subnormal floats: a library an earlier test in the same process loaded may have set the
# CPU to flush them to zero (-ffast-math), and hypothesis then refuses to draw them; the checks
# treat a subnormal as any other finite float
ELEMENTS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False), st.integers(),
    st.none(), st.booleans(),
    st.integers(min_value=2 ** 1000, max_value=2 ** 1100), st.sampled_from([1e300, -1e300,
                                                                            1.0000001e300]),
    st.text(max_size=3))


def numbers_by_hand(value: list[Any]) -> str | None:
    """The rule: each element None, or an int or float (not a bool), finite, within 1e300."""
    for element in value:
        if element is None:
            continue
        if isinstance(element, bool) or not isinstance(element, (int, float)):
            return "bad"
        try:
            if not math.isfinite(element) or abs(element) > reading.MAX_NUMBER:
                return "bad"
        except OverflowError:
            return "bad"
    return None


@settings(max_examples=300, derandomize=True)
@given(st.lists(ELEMENTS, max_size=12))
def test_a_list_of_numbers_is_judged_as_each_element_would_be(value):
    found = reading.numbers(value)
    assert (found is None) == (numbers_by_hand(value) is None), (value, found)
    if found is not None:
        assert found.startswith("must hold finite numbers (not ")


def depth_by_hand(value: Any) -> int:
    """Levels, the outermost 1: a container's children one deeper (recursion is fine here)."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return 1 + max((depth_by_hand(child) for child in value), default=0)
    return 1


def nested(depth: int, leaf: Any, as_dict: bool) -> Any:
    value = leaf
    for level in range(depth - 1):
        value = {"k": value, "n": [1.0, 2.0]} if as_dict and level % 2 else [3.0, value]
    return value


@pytest.mark.parametrize("as_dict", [False, True])
@pytest.mark.parametrize("leaf", [1.0, [], {}, [1.0], {"x": None}])
@pytest.mark.parametrize("depth", [1, 2, 63, 64, 65, 66])
def test_nesting_past_the_limit_is_found_at_any_leaf(depth, leaf, as_dict):
    value = nested(depth, leaf, as_dict)
    deep = depth_by_hand(value) > reading.MAX_DEPTH
    assert (reading.too_deep(value) is not None) == deep, (depth, leaf)


@settings(max_examples=200, derandomize=True)
@given(st.recursive(ELEMENTS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=2), inner, max_size=3), max_leaves=20),
       st.integers(min_value=1, max_value=6))
def test_too_deep_agrees_with_the_depth_by_hand(value, limit):
    assert (reading.too_deep(value, limit) is not None) == (depth_by_hand(value) > limit)
