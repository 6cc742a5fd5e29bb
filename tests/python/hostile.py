"""What the property tests share: hostile values, the settings, and the guard that a property
test reaches the comparison it is named for.

A property test is a plain test that runs its check over drawn examples with :func:`explore`,
gets back how many examples ended in each outcome (the check returns a word: "compared",
"refused", ...), and asserts with :func:`assert_reach` that the outcome its name promises was
reached often enough: at least half the examples for a comparison, at least 5% for a hostile
search to get past the validation (the Python counterpart of tests/rust/fuzz.rs's guard). A
strategy that drifts into being refused every time then fails the test instead of passing it
without checking anything.

Inputs mix valid values with the ones where things break: NaN, infinities, -0.0, subnormals,
1e-300, 1e300, the largest double, huge ints, bools, strings with other scripts' digits,
iterators, sets, nested lists. ``FABRICSIM_PROPERTY_SCALE=30`` runs 30 times the examples from
a random start (otherwise the examples are the same every run)."""

from __future__ import annotations

import math
import os
import sys
from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from fabricsim.exceptions import FabricsimError

SCALE = float(os.environ.get("FABRICSIM_PROPERTY_SCALE", "1"))
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                      HealthCheck.filter_too_much],
                derandomize=SCALE == 1, database=None)

# The least share of examples that must reach what a test is named for.
COMPARED = 0.5
# The least share of a hostile search's inputs that must get past the validation and run.
RAN = 0.05


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


def explore(n: int, *strategies, **kw_strategies):
    """Decorator: runs the decorated check over ``n`` examples drawn from the strategies and
    returns (in its place) the Counter of the outcomes the check returned. A failing check
    fails as a hypothesis test does, with its shrunk example."""
    def run(check):
        seen: Counter = Counter()

        @settings(max_examples=examples(n), **SETTINGS)
        @given(st.tuples(*strategies), st.fixed_dictionaries(kw_strategies))
        def each(args, kwargs):
            seen[check(*args, **kwargs)] += 1

        each()
        return seen
    return run


def assert_reach(seen: Counter, outcome: str, at_least: float) -> None:
    """At least ``at_least`` of the examples ended in ``outcome``."""
    total = sum(seen.values())
    print(f"reach: {seen[outcome]} of {total} {outcome}; {dict(seen)}")  # shown by pytest -s
    assert total and seen[outcome] >= at_least * total, (
        f"only {seen[outcome]} of {total} examples reached {outcome!r} (at least {at_least:.0%} must): "
        f"the strategy no longer reaches what the test checks; outcomes {dict(seen)}")


def mostly(valid, hostile, *, valid_in_10: int = 7):
    """``valid`` in about ``valid_in_10`` of 10 draws, else ``hostile``."""
    return st.integers(0, 9).flatmap(lambda k: valid if k < valid_in_10 else hostile)


def draws_valid(draw, *, valid_in_10: int = 7) -> bool:
    """Inside a composite strategy: True in about ``valid_in_10`` of 10 draws."""
    return draw(st.integers(0, 9)) < valid_in_10


def only_fabricsim_errors(call, *args, **kwargs):
    """``call(...)``'s result, or the FabricsimError it raised (any other exception fails)."""
    try:
        return call(*args, **kwargs)
    except FabricsimError as err:
        assert str(err), f"{type(err).__name__} without a message"
        return err


def refused(got) -> bool:
    return isinstance(got, FabricsimError)


NASTY_FLOATS = [0.0, -0.0, 1.0, 0.5, 2.0, -1.0, 5e-324, 2.2250738585072014e-308, 1e-300, 1e-9, 1e9, 1e300,
                1.0000000000000002e300, 9e307, 1e308, sys.float_info.max, math.inf, -math.inf, math.nan]
NASTY_INTS = [0, 1, 2, 3, 7, -1, 2**31, 2**32, 2**63, -(2**63) - 1, 10**30]
NASTY_TEXT = ["", " ", "1GiB", "800Gb/s", "500ns", "1e400 B", "\u0661\u0662Gb/s", "\uff11\uff12", "nan", "inf B",
              "-1GiB", "1.5.3", "12 zz", "1e-400s", "\x00", "\U0001f600"]

floats = st.one_of(st.sampled_from(NASTY_FLOATS), st.floats(allow_nan=True, allow_infinity=True),
                   st.floats(min_value=1e-3, max_value=1e6))
ints = st.one_of(st.sampled_from(NASTY_INTS), st.integers(-5, 40))
texts = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=8))
scalars = st.one_of(floats, ints, texts, st.booleans(), st.none(), st.just(np.float64(np.nan)), st.just(np.int64(3)),
                    st.just(1 + 2j))


def _hashable(x) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


def sequences(elements):
    """Lists, tuples, arrays, iterators, sets and ragged nestings of ``elements``."""
    lists = st.lists(elements, max_size=6)
    return st.one_of(
        lists, lists.map(tuple), lists.map(iter), lists.map(lambda v: set(x for x in v if _hashable(x))),
        st.lists(st.integers(-3, 40), max_size=6).map(lambda v: np.asarray(v, dtype=np.int64)),
        st.lists(st.floats(allow_nan=True), max_size=6).map(np.asarray),
        st.just([[1, 2], [3]]), st.just({0: 1}), st.just(np.zeros((2, 2))),
    )


anything = st.one_of(scalars, sequences(st.one_of(ints, floats, texts)))
