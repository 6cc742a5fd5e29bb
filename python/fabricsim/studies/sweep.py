"""Parameter sweeps over any ``concurrent.futures``-style executor.

:func:`sweep` calls a function at every point of a grid, in this process or on an executor
(``concurrent.futures.ProcessPoolExecutor``/``ThreadPoolExecutor``, a Dask
``distributed.Client``, or anything with ``submit(fn, *args)`` returning a future with
``result()``), and returns one Arrow table: the rows each point returned, with the point's
parameters as leading columns. Topologies, fabrics and scenarios pickle (each is rebuilt from
its arguments where it is unpickled), so they can be grid values or be built inside the
function on a worker.
"""

from __future__ import annotations

import itertools
import math
import numbers
import queue
from collections.abc import Iterable, Mapping, Sequence, Sized
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from .. import progress as _progress
from .._checks import room_for, shown
from ..exceptions import InvalidArgumentError, SweepError

__all__ = ["sweep", "grid_points"]


# Memory per point of a grid: its arguments and its labels, two dicts (measured with
# tracemalloc: about 390 bytes with one to four parameters).
_BYTES_PER_POINT = 450.0


def grid_points(grid: Any) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """``(names, points, labels)`` of a grid: each point the keyword arguments of one call,
    and its labels the values its parameter columns show.

    A grid is a mapping ``{name: values}`` (every combination, the last name varying
    fastest, as ``itertools.product``) or a sequence of mappings (those points, in order;
    a parameter a point lacks is null in its column). Values are a sequence, or a mapping
    ``{label: value}`` whose labels the column shows and whose values the function gets
    (for values that are not numbers or strings, such as fabrics).

    Example::

        from fabricsim.studies.sweep import grid_points   # (fs.sweep is the function)

        names, points, labels = grid_points({"gpu": {"h100": "hgx-h100", "b200": "hgx-b200"}, "n": [2, 4]})
        names           # ['gpu', 'n']
        points[1]       # {'gpu': 'hgx-h100', 'n': 4}: the arguments of the second call
        labels[2]       # {'gpu': 'b200', 'n': 2}: what its columns show
    """
    if isinstance(grid, Mapping):
        names = list(grid)
        axes = []
        for name in names:
            _check_name(name)
            values = grid[name]
            if isinstance(values, Mapping):
                axes.append(list(values.items()))
            elif isinstance(values, (str, bytes)) or not isinstance(values, Iterable) or not isinstance(values, Sized):
                # Sized: values whose count is known before they are read (a generator may not end)
                raise InvalidArgumentError(
                    f"grid[{name!r}] must be a sequence of values (a list, tuple, range or array) or a mapping "
                    f"{{label: value}}, got {type(values).__name__} {shown(values)} (one value is a list of one: "
                    f"[{shown(values)}])")
            else:
                room_for(f"grid[{name!r}]'s {len(values):,} values", len(values), _BYTES_PER_POINT)
                axes.append([(_label(v), v) for v in values])
            if not axes[-1]:
                raise InvalidArgumentError(f"grid[{name!r}] has no values: the grid would have no points")
        n_points = math.prod(len(axis) for axis in axes)
        room_for(f"a sweep grid of {n_points:,} points", n_points, _BYTES_PER_POINT)
        points, labels = [], []
        for combo in itertools.product(*axes):
            labels.append({n: lab for n, (lab, _) in zip(names, combo)})
            points.append({n: v for n, (_, v) in zip(names, combo)})
        return names, points, labels
    if isinstance(grid, (str, bytes)) or not isinstance(grid, Sequence):
        raise InvalidArgumentError(
            f"grid must be a mapping {{name: values}} or a sequence of mappings (one per point), got "
            f"{type(grid).__name__}")
    listed: list[str] = []
    points, labels = [], []
    for i, point in enumerate(grid):
        if not isinstance(point, Mapping):
            raise InvalidArgumentError(f"grid[{i}] must be a mapping of parameters, got {type(point).__name__} {point!r}")
        for name in point:
            _check_name(name)
            if name not in listed:
                listed.append(name)
        points.append(dict(point))
        labels.append({n: _label(v) for n, v in point.items()})
    return listed, points, labels


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise InvalidArgumentError(f"grid parameter names must be Python identifiers (they are keyword arguments), got {name!r}")


def _label(value: Any) -> Any:
    """What a parameter column shows for a value: the value itself when Arrow holds it as a
    scalar (number, string, bool, None), else its text (``repr`` of a fabric)."""
    if value is None or isinstance(value, (bool, str, numbers.Number, np.generic)):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, (tuple, list)) and all(isinstance(v, (numbers.Number, str)) for v in value):
        return list(value)
    return repr(value)


def _as_table(out: Any) -> pa.Table:
    """What a point's function returned, as a table (in the worker: only Arrow travels back)."""
    from ..results import Result

    if isinstance(out, pa.Table):
        return out
    if isinstance(out, pa.RecordBatch):
        return pa.Table.from_batches([out])
    if isinstance(out, Result):
        s = out.summary
        return pa.table({
            "makespan_s": [s.makespan_s], "n_flows": [s.n_flows], "n_delays": [s.n_delays],
            "bytes_moved": [s.bytes_moved], "n_failed": [s.n_failed], "n_skipped": [s.n_skipped],
            "n_instants": [out.n_instants], "mode": [out.mode],
        })
    if out is None:
        return pa.table({"_": pa.nulls(1)}).drop_columns(["_"])  # one row, no columns
    if isinstance(out, Mapping):
        return _rows([out])
    if hasattr(out, "__arrow_c_stream__"):  # polars, DuckDB relations, ...
        return pa.table(out)
    if isinstance(out, (list, tuple)) and all(isinstance(r, Mapping) for r in out):
        return _rows(out)
    if isinstance(out, (numbers.Number, str, np.generic)):
        return pa.table({"value": _column([out.item() if isinstance(out, np.generic) else out])})
    raise TypeError(
        f"the sweep's function returned {type(out).__name__}; return a dict (one row), a list of dicts, "
        "a pyarrow Table (or anything with __arrow_c_stream__), a fabricsim Result (its summary) or a number")


def _rows(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Rows of dicts as a table (a key a row lacks is null there), each column by :func:`_column`."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    return pa.table({n: _column([r.get(n) for r in rows]) for n in names})


def _column(values: list[Any]) -> pa.Array:
    """``values`` as Arrow infers them, or as their text where no one Arrow type holds them
    all (``[1, "auto"]``, an int beyond 64 bits): the sweep keeps every point's values."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return _text(values)


def _text(values: Iterable[Any]) -> pa.Array:
    return pa.array([v if v is None or isinstance(v, str) else str(v) for v in values], pa.string())


def _run_point(fn: Callable[..., Any], params: dict[str, Any]) -> pa.Table:
    """One grid point, run where the executor runs it."""
    return _as_table(fn(**params))


def sweep(grid: Any, fn: Callable[..., Any], *, executor: Any = None, progress: bool | None = None,
          desc: str = "sweep") -> pa.Table:
    """Calls ``fn(**point)`` at every point of ``grid`` and returns one Arrow table: each
    point's rows with its parameters as leading columns, points in grid order (whatever order
    they finish in).

    ``grid``: ``{name: values}`` for every combination (``{"n_domains": [2, 4], "routing":
    ["ecmp", "adaptive"]}``: 4 points, the last name varying fastest), or a list of dicts,
    one per point. Values may be given as ``{label: value}``: the function gets the value and
    the column shows the label (``{"fabric": {"h100": fs.hgx_h100(), "b200":
    fs.hgx_b200()}}``); other values that are not numbers or strings show as their ``repr``.

    ``fn`` returns a dict (one row), a list of dicts, a pyarrow Table (or anything with
    ``__arrow_c_stream__``, such as a polars DataFrame), a :class:`fabricsim.Result` (one row
    of its summary: makespan_s, n_flows, n_delays, bytes_moved, n_failed, n_skipped,
    n_instants, mode) or a number (a ``value`` column). A result column named as a parameter
    is refused when the first point returns it. A column whose values no one Arrow type holds
    across the points (a grid ``{"nodes": [1, 2, "auto"]}``, a number at one point and a
    string at another, an int beyond 64 bits) holds each value's text (``"1"``, ``"auto"``):
    the table keeps every point's values rather than failing at the join.

    ``executor``: None runs every point here, one after the other; otherwise anything with
    ``submit(fn, *args)`` whose futures have ``result()``: a
    ``concurrent.futures.ProcessPoolExecutor`` (``fn`` must then be importable: a module-level
    function), a ``ThreadPoolExecutor`` (the engine releases the GIL while it runs), or a Dask
    ``distributed.Client`` (cloudpickle: lambdas and closures too), local or on a cluster of
    machines. Grid values and what ``fn`` closes over are pickled to the workers; fabrics and
    scenarios pickle as their arguments and are rebuilt there.

    ``progress``: a bar on stderr with points done, their rate, the time left and the point
    running or last finished; None (the default) draws it only when stderr is a terminal.

    A point that raises stops the sweep: the points not yet started are cancelled and
    :class:`fabricsim.SweepError` names the point, with the point's error as its cause.

    Example::

        def allreduce(n_domains, size):
            f = fs.cluster(domain="hgx-h100", n_domains=n_domains, scale_out="quantum-2")
            return {"time_s": fs.estimate(f, "all_reduce", size).time_s}

        table = fs.sweep({"n_domains": [2, 4], "size": ["64MiB", "1GiB"]}, allreduce)
        table.column_names   # ['n_domains', 'size', 'time_s']: one row per point
    """
    names, points, labels = grid_points(grid)
    if not callable(fn):
        raise InvalidArgumentError(f"fn must be a callable taking the grid's parameters as keywords, got {fn!r}")
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise InvalidArgumentError(
            f"executor must have submit(fn, *args) (concurrent.futures, a Dask distributed.Client), got "
            f"{type(executor).__name__}")
    show = _progress.enabled(progress)
    tables: list[pa.Table | None] = [None] * len(points)
    with _progress.bar(len(points), desc, "pt", disable=not show) as bar:
        if executor is None:
            for i, params in enumerate(points):
                bar.set_postfix_str(_shown(labels[i]), refresh=True)
                try:
                    tables[i] = _run_point(fn, params)
                except Exception as e:
                    raise SweepError(_failed(i, labels[i], e)) from e
                _check_columns(names, tables[i])
                bar.update(1)
        else:
            _on_executor(executor, fn, names, points, labels, tables, bar)
    return _joined(names, labels, tables)


def _on_executor(executor: Any, fn: Callable[..., Any], names: list[str], points: list[dict[str, Any]],
                 labels: list[dict[str, Any]], tables: list[pa.Table | None], bar: Any) -> None:
    futures = [executor.submit(_run_point, fn, params) for params in points]
    done: queue.Queue[int] = queue.Queue()
    try:
        if all(callable(getattr(f, "add_done_callback", None)) for f in futures):
            # In the order they finish, for the bar; both concurrent.futures' and Dask's
            # futures call back with the future, from another thread.
            for i, f in enumerate(futures):
                f.add_done_callback(lambda _f, i=i: done.put(i))
            order: Iterable[int] = (done.get() for _ in futures)
        else:
            order = range(len(futures))
        for i in order:
            try:
                tables[i] = futures[i].result()
            except Exception as e:
                raise SweepError(_failed(i, labels[i], e)) from e
            _check_columns(names, tables[i])
            bar.set_postfix_str(f"done {_shown(labels[i])}", refresh=False)
            bar.update(1)
    except BaseException:  # a point failed, or Ctrl-C: what has not started does not
        for f in futures:
            try:
                f.cancel()
            except Exception:
                pass
        raise


def _shown(label: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in label.items())


def _failed(i: int, label: dict[str, Any], e: BaseException) -> str:
    return f"grid point {i} ({_shown(label)}) failed: {type(e).__name__}: {e}"


def _check_columns(names: list[str], table: pa.Table | None) -> None:
    """Refuses a result column named as a parameter, or twice, as the first point's result
    comes back (not after every point has run)."""
    assert table is not None
    twice = [c for c in dict.fromkeys(table.column_names) if table.column_names.count(c) > 1]
    if twice:
        raise InvalidArgumentError(f"the function's result has two columns named {twice[0]!r}: name them apart")
    clash = [n for n in names if n in table.column_names]
    if clash:
        raise InvalidArgumentError(
            f"the function's result has column(s) {', '.join(map(repr, clash))}, named as grid parameters: "
            "rename the parameter or the column")


def _joined(names: list[str], labels: list[dict[str, Any]], tables: list[pa.Table | None]) -> pa.Table:
    """The points' tables, one after the other, each behind its parameter columns. A column
    that no one Arrow type holds across the points (a parameter of ``[1, 2, "auto"]``, a
    result that is a number at one point and a string at another) holds every value's text."""
    parts = []
    for label, table in zip(labels, tables):
        assert table is not None
        n = table.num_rows
        params = {name: _column([label.get(name)] * n) if label.get(name) is not None else pa.nulls(n)
                  for name in names}
        parts.append(pa.table({**params, **{c: table.column(c) for c in table.column_names}}))
    if not parts:
        return pa.table({n: pa.nulls(0) for n in names})
    try:
        joined = pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        joined = pa.concat_tables(_as_text(parts, _mixed(parts)), promote_options="permissive")
    # Points may disagree on a column's type where one of them has only nulls (or lacks it).
    # One chunk per column (dictionaries unified), as a table built at once would have.
    return joined.combine_chunks()


def _mixed(parts: list[pa.Table]) -> set[str]:
    """The columns whose types across ``parts`` Arrow cannot promote to one."""
    out = set()
    for name in dict.fromkeys(c for p in parts for c in p.column_names):
        fields = [pa.schema([p.schema.field(name)]) for p in parts if name in p.column_names]
        try:
            pa.unify_schemas(fields, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            out.add(name)
    return out


def _as_text(parts: list[pa.Table], names: set[str]) -> list[pa.Table]:
    return [pa.Table.from_arrays([_text(p[c].to_pylist()) if c in names else p[c] for c in p.column_names],
                                 names=p.column_names) for p in parts]
