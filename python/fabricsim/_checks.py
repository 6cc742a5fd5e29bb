"""Arguments as the API takes them, one rule for each kind, used wherever one enters: integers
(ids, counts, keys), quantities (sizes, times, rates, as numbers or unit strings) and names
(with the close ones suggested).

A real number (sizes, times, rates, factors) is a Python or NumPy number that a float can
hold: never a bool, a string, a complex, nor an int beyond the float range (10**400 would raise
a bare OverflowError wherever it is converted).

An integer is a Python ``int`` or a NumPy integer (scalar, or array of any integer dtype),
never a bool, a float (even 2.0: an id computed with ``/`` is a bug, and floats above 2**53
skip ids), a string or NaN. Each must also fit the core's parameter: ids cross as 64-bit
signed integers and the core then names any id it does not have (``UnknownNodeError`` and
its siblings), counts of what the core numbers in 32 bits cross as 32-bit unsigned ones,
hash keys and seeds as 64-bit unsigned ones. Whatever does not fit is refused here, naming
the parameter and the value.

Many values (ids, nodes, labels) come in an order of their own: a sequence, a 1-D array or an
iterator, never a set or mapping, whose order is arbitrary. Where order means nothing (the
activities a flow waits for, the links, nodes or planes a fault takes down) a set is taken too.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any

import numpy as np

from .exceptions import InvalidArgumentError

# The largest capacity the core takes for a link (src/units.rs MAX_CAPACITY_BPS, whose docs
# give the arithmetic that needs the margin below the largest double): rates that become link
# capacities (catalog parts) are refused above it where they are given.
MAX_CAPACITY_BPS = 1e300

# [lo, hi) of what the core's parameters take.
I64 = (-(2**63), 2**63)  # ids: the core checks them against what the topology or scenario has
U64 = (0, 2**64)  # seeds and ECMP hash keys
U32 = (0, 2**32)  # counts the core keeps in 32 bits (GPUs, hosts, domains, flows)
COUNT = (1, 2**32)  # the same, for what there must be at least one of


def _show(x: int) -> str:
    """A bound as people write it: 2**32 rather than 4294967296."""
    x = int(x)  # a NumPy integer has no bit_length
    k = abs(x).bit_length() - 1
    if k >= 16 and abs(x) == 1 << k:
        return f"{'-' if x < 0 else ''}2**{k}"
    return str(x)


def shown(value: Any) -> str:
    """``repr(value)``, cut short for an int of more than 20 digits (whose full repr may be
    thousands of digits long, or refused by Python beyond 4300)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and abs(int(value)) >= 10**20:
        v = abs(int(value))
        digits = int(math.log10(v)) + 1
        digits += (v >= 10**digits) - (v < 10 ** (digits - 1))  # log10 rounds near powers of 10
        return f"{'-' if value < 0 else ''}{v // 10 ** (digits - 12)}... (an int of {digits} digits)"
    return repr(value)


def real(value: Any) -> float | None:
    """``value`` as a float if it is a real number (not a bool) that a float can hold, else None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except OverflowError:  # an int beyond the float range
        return None


def finite(value: Any) -> float | None:
    """``value`` as a float if it is a finite real number (not a bool), else None."""
    out = real(value)
    return out if out is not None and math.isfinite(out) else None


def positive(name: str, value: Any, unit: str = "", *, zero: bool = False) -> float:
    """``value`` as a float if it is a finite real number > 0 (>= 0 with ``zero``), else an
    error naming ``name``, the unit and the value as given."""
    x = finite(value)
    if x is None or x < 0 or (x == 0 and not zero):
        got = shown(value) if real(value) is not None else f"{type(value).__name__} {shown(value)}"
        raise InvalidArgumentError(
            f"{name} must be a finite number {'>=' if zero else '>'} 0{f' ({unit})' if unit else ''}, got {got}")
    return x


def number(value: Any) -> float:
    """A parser for :func:`parsed` and :func:`quantities` of plain numbers (coefficients,
    ratios): a real number as a float, else an error."""
    out = real(value)
    if out is None:
        raise InvalidArgumentError(
            f"must be a real number (within the float range), got {type(value).__name__} {shown(value)}"
        )
    return out


def flag(name: str, value: Any) -> bool:
    """``value`` if it is True or False (a truthy 1, "no" or array is refused, not guessed at)."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def real_in(name: str, value: Any, low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> float:
    """``value`` as a float if it is a real number (not a bool, not NaN) within ``[low, high]``
    (``open_low``, ``open_high``: that end excluded; an end may be infinite), else an error
    naming ``name``, the value and the interval."""
    x = real(value)
    inside = x is not None and (x > low if open_low else x >= low) and (x < high if open_high else x <= high)
    if not inside:
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
        got = shown(value) if x is not None else f"{type(value).__name__} {shown(value)}"
        raise InvalidArgumentError(f"{name} must be a real number in {interval}, got {got}")
    assert x is not None
    return x


def choice(name: str, value: Any, options: Iterable[str]) -> str:
    """``value`` if it is one of the strings ``options``, else an error listing them (and the
    close ones to a misspelt string)."""
    options = list(options)
    if isinstance(value, str) and value in options:
        return value
    hint = did_you_mean(value, options) if isinstance(value, str) else ""
    raise InvalidArgumentError(
        f"{name} must be one of {', '.join(repr(o) for o in options)}, got {type(value).__name__} {shown(value)}{hint}")


def callback(name: str, value: Callable[..., Any], params: tuple[str, ...]) -> Callable[..., Any]:
    """``value`` (a callable) if it can be called with ``len(params)`` positional arguments,
    checked now: a wrong signature would otherwise fail only at the first call, mid-run. A
    callable whose signature cannot be read (some builtins) is taken as it is."""
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return value
    try:
        signature.bind(*params)
    except TypeError as err:
        raise InvalidArgumentError(
            f"{name}={value!r} cannot be called as {name}({', '.join(params)}): it takes {signature} ({err})"
        ) from None
    return value


def one_value(value: Any) -> bool:
    """Whether ``value`` is one value rather than a sequence of them (a string is one value;
    a ragged nesting, which ``np.ndim`` refuses, is a sequence)."""
    if isinstance(value, (str, bytes)):
        return True
    try:
        return np.ndim(value) == 0
    except ValueError:  # ragged nesting
        return False


def many(name: str, values: Any, expected: str, *, ordered: bool = True) -> Any:
    """``values`` if it is many values in an order of their own (a sequence, a 1-D array, an
    iterator), else an error saying ``name`` must be ``expected``. One value is refused (a str
    is one: read letter by letter it would be many), and so is a set or mapping: its order is
    arbitrary, so values paired by position (a flow's src and dst) would pair up arbitrarily.
    ``ordered=False`` (values whose order means nothing, such as dependencies) takes a set."""
    if isinstance(values, Mapping) or (ordered and isinstance(values, Set)):
        raise InvalidArgumentError(
            f"{name} must be {expected}, got a {type(values).__name__} of {len(values)}, whose order is "
            f"arbitrary: give a list, tuple or 1-D array"
        )
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable) or getattr(values, "ndim", 1) == 0:
        raise InvalidArgumentError(f"{name} must be {expected}, got {type(values).__name__} {shown(values)}")
    return values


def _from_arrow(name: str, values: Any) -> Any:
    """A pyarrow Array or ChunkedArray (a results table's column) as a NumPy array, other
    values as they are; a column with nulls is refused, naming the first."""
    if not type(values).__module__.startswith("pyarrow") or not hasattr(values, "null_count"):
        return values
    if values.null_count:
        first = values.is_null().to_pylist().index(True)
        raise InvalidArgumentError(f"{name}[{first}] is null: give a column without nulls (drop or fill them first)")
    return values.to_numpy(zero_copy_only=False)


def _expected(bounds: tuple[int, int]) -> str:
    return f"an integer in [{_show(bounds[0])}, {_show(bounds[1])})"


def _has_bool(items: Any) -> bool:
    """Whether a sequence holds a bool, which NumPy would quietly make 1 or 0 among numbers."""
    return not {bool, np.bool_}.isdisjoint(map(type, items))


def integer(name: str, value: Any, bounds: tuple[int, int] = I64) -> int:
    """``value`` as an int, if it is an integer within ``bounds`` = [lo, hi)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(
            f"{name} must be {_expected(bounds)}, got {type(value).__name__} {shown(value)}"
        )
    if not bounds[0] <= value < bounds[1]:
        raise InvalidArgumentError(f"{name} must be {_expected(bounds)}, got {shown(int(value))}")
    return int(value)


def integers(
    name: str, values: Any, bounds: tuple[int, int] = I64, *, one: bool = False, ordered: bool = True
) -> np.ndarray:
    """``values`` (a sequence or a 1-D array) as a contiguous int64 array, if every element is
    an integer within ``bounds``; the first bad element is named by its index. ``one=True``
    also takes a single integer, as a sequence of one; ``ordered=False`` also a set (`many`).
    A pyarrow column is read as its NumPy array."""
    values = _from_arrow(name, values)
    if type(values) is np.ndarray and values.dtype == np.int64 and values.ndim == 1 and bounds == I64:
        return np.ascontiguousarray(values)  # every int64 is within I64: nothing to check
    if type(values) is list and 0 < len(values) <= 64 and all(type(v) is int for v in values):
        # A short list of plain ints (a workload's "after" lists, by the hundred thousand):
        # checked against the bounds directly, as the general path would, but without NumPy's.
        lo, hi = min(values), max(values)
        if bounds[0] <= lo and hi < bounds[1]:
            return np.array(values, dtype=np.int64)
    if one and isinstance(values, (int, np.integer, np.bool_)):
        return np.array([integer(name, values, bounds)], dtype=np.int64)
    many(name, values, f"{'an integer or ' if one else ''}a sequence of integers", ordered=ordered)
    items = values if isinstance(values, (np.ndarray, list, tuple)) else list(values)
    try:
        arr = np.asarray(items)
    except ValueError:  # ragged nesting
        raise InvalidArgumentError(f"{name} must be a 1-D sequence of integers, got {values!r}") from None
    if arr.ndim != 1:
        raise InvalidArgumentError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not isinstance(values, np.ndarray) or arr.dtype.kind == "O":
        if arr.dtype.kind not in "iu" or _has_bool(items):
            # NumPy made the sequence into something other than the ints it may hold (floats,
            # strings, objects for ints beyond int64, 1 and 0 for bools among ints): check it
            # one element at a time, which names the first bad one as it was given.
            arr = np.array([integer(f"{name}[{i}]", v, bounds) for i, v in enumerate(items)], dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"{name} must hold integers, got {arr.dtype} values such as {name}[0] = {arr[0].item()!r}"
        )
    for i in (int(np.argmin(arr)), int(np.argmax(arr))):
        if not bounds[0] <= arr[i] < bounds[1]:
            raise InvalidArgumentError(f"{name}[{i}] must be {_expected(bounds)}, got {arr[i].item()!r}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def parsed(name: str, parse: Callable[[Any], float], value: Any) -> float:
    """``parse(value)`` (a :mod:`fabricsim.units` parser) with ``name`` in its error message."""
    try:
        return parse(value)
    except InvalidArgumentError as err:
        raise InvalidArgumentError(f"{name}: {err}") from None


# Estimates from this many bytes on are checked against the memory available: a check reads
# /proc/meminfo (about 13 us), not worth it for what any machine holds. Under a cap set by
# FABRICSIM_AVAILABLE_BYTES every estimate is checked, as the core checks them.
_CHECKED_BYTES = 1 << 20


def room_for(what: str, n: Any, bytes_each: float) -> None:
    """Refuses, before it is made, what would not fit in memory: ``n`` items (a count, or the
    expected count of a random draw) of about ``bytes_each`` bytes each. Raises
    :class:`~fabricsim.ScenarioTooLargeError` naming ``what`` with the estimate and the
    memory available (the core's rule: ``FABRICSIM_AVAILABLE_BYTES`` caps it). Every Python
    path that allocates in proportion to a number it is given (a count, a rate times a
    horizon, a rank) asks here first."""
    count = real(n)
    estimate = math.inf if count is None else count * bytes_each  # an int beyond the floats: too many
    if not estimate < _CHECKED_BYTES or "FABRICSIM_AVAILABLE_BYTES" in os.environ:  # NaN too
        from . import _core

        _core.check_fits(what, estimate if estimate == estimate else math.inf)


def quantities(name: str, values: Any, n: int | None, parse: Callable[[Any], float]) -> np.ndarray:
    """A float64 array of ``n`` quantities from one value for all or a sequence of ``n``;
    each value a number or a unit string that ``parse`` reads ("1GiB", "500ns").
    ``n=None`` takes a sequence of any length (and no single value). A pyarrow column is read
    as its NumPy array."""
    values = _from_arrow(name, values)
    expected = "a 1-D sequence of values" if n is None else f"one value or a 1-D sequence of {n}"
    if n is not None:
        # Before the array: one value broadcast to n is n x 8 bytes from nothing.
        room_for(f"{name} ({n} values of 8 bytes)", n, 8.0)
    if one_value(values):
        if n is None:
            raise InvalidArgumentError(f"{name} must be {expected}, got {shown(values)}")
        return np.full(n, parsed(name, parse, values), dtype=np.float64)
    try:
        arr = np.asarray(values)
    except ValueError:  # ragged nesting
        raise InvalidArgumentError(f"{name} must be {expected}, got nested sequences of different lengths {values!r}") from None
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        raise InvalidArgumentError(f"{name} must be {expected}, got shape {arr.shape}")
    if arr.dtype.kind in "OUS" or (not isinstance(values, np.ndarray) and _has_bool(values)):
        # Unit strings among numbers (which NumPy made strings too), or a bool NumPy made a
        # number: each value read as given.
        arr = np.array([parsed(f"{name}[{i}]", parse, v) for i, v in enumerate(values)], dtype=np.float64)
    elif arr.size and arr.dtype.kind not in "iuf":
        raise InvalidArgumentError(
            f"{name} must hold numbers or unit strings, got {arr.dtype} values such as "
            f"{name}[0] = {arr[0].item()!r}"
        )
    return np.ascontiguousarray(arr, dtype=np.float64)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the candidates close to a misspelt name, else ""."""
    matches = difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(m) for m in matches)}?)" if matches else ""


# Share weights a flow may have (src/engine/activities.rs MIN_WEIGHT, MAX_WEIGHT: wide enough
# for any switch's traffic-class ratios, narrow enough for the solver's relative precision).
MIN_WEIGHT = 1e-6
MAX_WEIGHT = 1e6


def share_weight(value: Any) -> float:
    """``value`` as a share weight (weighted max-min): a number within [MIN_WEIGHT, MAX_WEIGHT]."""
    w = real(value)
    if w is None or not MIN_WEIGHT <= w <= MAX_WEIGHT:
        raise InvalidArgumentError(f"weight must be a number within [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}], got {shown(value)}")
    return w


def known_fields(cls: Any) -> Any:
    """A class decorator for a dataclass of options whose arguments are named as its fields:
    an unknown name, one given twice, or more positional arguments than fields is refused with
    the class's ``_field_error`` (:class:`InvalidArgumentError` unless it names a subclass),
    naming it and the fields, where the dataclass's ``__init__`` would raise a bare TypeError."""
    error = getattr(cls, "_field_error", InvalidArgumentError)
    signature = inspect.signature(cls)  # the fields', which a __new__ of *args, **kwargs would hide

    def __new__(klass: Any, *args: Any, **kwargs: Any) -> Any:
        names = [f.name for f in dataclasses.fields(klass) if f.init]
        unknown = [k for k in kwargs if k not in names]
        twice = [k for k in kwargs if k in names[:len(args)]]
        if unknown or twice or len(args) > len(names):
            what = (f"no field {unknown[0]!r}" if unknown else f"{twice[0]!r} given twice (by position and by name)"
                    if twice else f"{len(names)} fields, not {len(args)} positional arguments")
            raise error(f"{klass.__name__}: {what}; its fields are {', '.join(names)}")
        return object.__new__(klass)

    cls.__new__ = __new__
    cls.__signature__ = signature
    return cls
