"""The arguments of :class:`fabricsim.Scenario`'s add_* and run methods, checked and put in the
form the core reads (routes as compressed rows, tags, dependencies, progress callbacks), and kept
as a pickled scenario replays them."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ._checks import callback, integers, shown
from .exceptions import InvalidArgumentError

ProgressCallback = Callable[[int, int, float], Any]

_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, range, np.generic)
_SCALAR_TYPES = frozenset((int, float, str, bool, type(None), np.int64, np.float64, np.int32))


def kept(value: Any) -> Any:
    """An add_* argument as a pickled scenario replays it: arrays and containers copied (the
    caller may change them after the call), an iterator read into a list."""
    if isinstance(value, _IMMUTABLE):
        return value
    if isinstance(value, np.ndarray):
        return value.copy()
    if type(value) is list or type(value) is tuple or isinstance(value, Iterator):
        items = [v if type(v) in _SCALAR_TYPES else kept(v) for v in value]
        return tuple(items) if type(value) is tuple else items
    if type(value) is dict:
        return {k: kept(v) for k, v in value.items()}
    if type(value) in (set, frozenset):
        return type(value)(value)  # of hashable, so immutable, elements
    try:
        return copy.deepcopy(value)
    except Exception:  # an object that cannot be copied is kept as it is
        return value


def room_for_flows(self: Any, src: Any, *args: Any, **kwargs: Any) -> None:
    """add_flows' memory check, on the number of flows alone, before any array is made."""
    # Only where the count is plain (an array of one dimension, a list) and large enough for
    # its copies to matter (a check reads the free memory: 13 us): anything else is checked,
    # and refused if it must be, by add_flows itself.
    n = src.shape[0] if isinstance(src, np.ndarray) and src.ndim == 1 else \
        len(src) if isinstance(src, (list, tuple, range)) else 0
    if n >= _PRECHECKED_FLOWS:
        self._core.check_room_for_flows(n)


# Fewest flows whose add_flows is checked for memory before its arguments are copied.
_PRECHECKED_FLOWS = 1 << 16


_PROGRESS_ARGS = ("n_done", "n_activities", "sim_time_s")


def both_callbacks(first: ProgressCallback | None, second: ProgressCallback) -> ProgressCallback:
    """A progress callback that calls ``first`` (if any), then ``second``."""
    if first is None:
        return second

    def both(n_done: int, n_activities: int, sim_time_s: float) -> None:
        first(n_done, n_activities, sim_time_s)
        second(n_done, n_activities, sim_time_s)

    return both


def checked_progress(progress: Any) -> bool | ProgressCallback | None:
    """``progress`` as ``Scenario.run`` takes it, checked before the run: a bad callback
    would otherwise fail only at the first report."""
    if progress is None or isinstance(progress, bool):
        return progress
    if not callable(progress):
        raise InvalidArgumentError(
            f"progress must be True, False, None (a bar on a terminal) or a callable taking "
            f"({', '.join(_PROGRESS_ARGS)}), "
            f"got {type(progress).__name__} {progress!r}"
        )
    return callback("progress", progress, _PROGRESS_ARGS)


_ROUTE_FORMS = (
    "give one list of link ids per flow, e.g. routes=[[0, 2], [1, 3]], or compressed rows, a "
    "tuple (offsets, link_ids) of n_flows + 1 offsets from 0 in which flow i takes "
    "link_ids[offsets[i]:offsets[i + 1]]"
)


def routes_as_rows(routes: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """add_flows' routes as compressed rows (offsets, link ids) for the core."""
    if isinstance(routes, tuple) and len(routes) == 2:
        offsets = integers("routes offsets", routes[0])
        if offsets.shape[0] != n + 1 or offsets[0] != 0:
            # Most likely per-flow routes written as a tuple.
            raise InvalidArgumentError(
                f"routes is a tuple of two, read as compressed rows (offsets, link_ids), but its "
                f"offsets {routes[0]!r} are not {n + 1} integers from 0 for {n} flows; {_ROUTE_FORMS}"
            )
        return offsets, integers("routes link_ids", routes[1])
    if isinstance(routes, (str, bytes)) or not isinstance(routes, Iterable):
        raise InvalidArgumentError(f"routes must be a sequence, got {type(routes).__name__} {routes!r}; {_ROUTE_FORMS}")
    lists = [integers(f"routes[{i}]", r) for i, r in enumerate(routes)]
    if len(lists) != n:
        raise InvalidArgumentError(f"routes has {len(lists)} routes for {n} flows; {_ROUTE_FORMS}")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([r.size for r in lists], out=offsets[1:])
    return offsets, np.concatenate(lists) if lists else np.zeros(0, dtype=np.int64)


def checked_tag(tag: Any) -> str | None:
    """A tag as the core stores it: a label (a string) for the tag column of the results, or
    None for no tag."""
    if tag is None:
        return None
    if not isinstance(tag, str):
        raise InvalidArgumentError(
            f"tag must be a string (a label for the results' tag column) or None, got {type(tag).__name__} {shown(tag)}"
        )
    try:
        tag.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"tag must be text that UTF-8 can encode (Arrow strings are UTF-8), got {tag!r}") from None
    return str(tag)


def checked_after(after: int | Iterable[int]) -> np.ndarray:
    # An int64 array: the core reads it in bulk (an all-to-all's end waits on millions of flows).
    # Which activities to wait for has no order: a set of them is fine.
    return integers("after", after, one=True, ordered=False)
