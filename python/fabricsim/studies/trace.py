"""A run's timeline: collectives per rank, delays and flows, as a table and as a trace that
Perfetto (ui.perfetto.dev) and chrome://tracing open.

:func:`timeline` lays the activities of a result out on lanes: each collective on the lane of
every one of its ranks (``gpu3``), each delay on the lane of its tag (or one given by
``lanes=``), and each flow on the lane of its source node. The activities that make up a
collective (its flows and internal delays) are left out: the collective stands for them.
Activities that overlap in time on one lane (two collectives on the same ranks at once, a
node's concurrent flows) go on lanes of their own beside it (``gpu3 #2``), so none is drawn
over another. :func:`write_trace` writes the same as Chrome's Trace Event Format (JSON).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from .._files import path_argument, write_file
from ..fabrics.links import name_array

__all__ = ["timeline", "trace_events", "trace_json", "write_trace"]


def _collective_parts(scenario: Any) -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]:
    """(first, last) activity ids of each collective of ``scenario``, and the ranks of each
    communicator id."""
    builder = getattr(scenario, "_collectives", None) if scenario is not None else None
    if builder is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), {}
    first = np.array([r[6] for r in builder.rows], dtype=np.int64)
    last = np.array([r[0] for r in builder.rows], dtype=np.int64)
    ranks = {cid: np.frombuffer(key, dtype=np.int64) for key, cid in builder._communicators.items()}
    return first, last, ranks


def _inside(ids: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Whether each id lies in one of the ranges [first, last] (collectives are built
    contiguously, so the ranges do not overlap)."""
    if first.size == 0 or ids.size == 0:
        return np.zeros(ids.shape, dtype=bool)
    order = np.argsort(first)
    f, l = first[order], last[order]
    k = np.searchsorted(f, ids, side="right") - 1
    ok = k >= 0
    out = np.zeros(ids.shape, dtype=bool)
    out[ok] = ids[ok] <= l[k[ok]]
    return out


def _node_label(scenario: Any, result: Any) -> Callable[[int], str]:
    topo = getattr(scenario, "topology", None)
    names = getattr(result, "_node_names", None)
    if topo is not None:  # gpu3, nic3, ... on a generated fabric; labels or node3 on a plain topology
        every = name_array(topo)
        return lambda i: str(every[int(i)])
    if names is not None:
        return lambda i: str(names[int(i)])
    return lambda i: f"node{int(i)}"


def timeline(result: Any, scenario: Any = None, *, lanes: Mapping[int, str] | Callable[[int], str | None] | None = None,
             flows: bool = True, max_flows: int = 100_000) -> pa.Table:
    """One row per activity on a lane: ``lane, kind, activity_id, name, start_s, finish_s,
    status`` (kind: "collective", "delay" or "flow"), sorted by lane then start. Activities
    that overlap on a lane are moved to lanes of their own beside it: ``gpu3``, ``gpu3 #2``,
    ... (each the first one free when the activity starts), so that no two on one lane
    overlap.

    ``scenario`` (the one that produced ``result``) gives each collective's ranks, so that a
    collective shows on every rank's lane (``gpu3``), and tells which flows and delays are
    a collective's own (left out); without it a collective shows on the lane of its
    communicator (``comm 0``) and every delay shows. A delay goes on the lane ``lanes`` gives
    for its id (a mapping, or a callable returning a lane or None), else on the lane of its
    tag. The flows that are not a collective's go on their source node's lane (at most
    ``max_flows``, the longest first; ``flows=False`` leaves them out). Start is when an activity was ready (a
    flow's ready_s: its latency included); a failed flow ends when it failed; skipped
    activities are left out.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        compute = sc.add_delay("1ms")
        sc.add_collective("all_reduce", None, "64MiB", after=compute)
        t = fs.trace.timeline(sc.run(), sc)
        t.column("lane").unique()   # ['delays', 'gpu0', 'gpu1', ..., 'gpu7']
    """
    first, last, comm_ranks = _collective_parts(scenario)
    label = _node_label(scenario, result)
    rows: dict[str, list[Any]] = {k: [] for k in ("lane", "kind", "activity_id", "name", "start_s", "finish_s", "status")}

    def add(lane: str, kind: str, aid: int, name: str, start: float, finish: float, status: str) -> None:
        for k, v in zip(rows, (lane, kind, aid, name, start, finish, status)):
            rows[k].append(v)

    coll = result.collectives
    if coll.num_rows:
        for r in coll.to_pylist():
            if r["start_s"] is None or r["finish_s"] is None:
                continue
            name = f"{r['op']} ({r['algorithm']})"
            ranks = comm_ranks.get(r["communicator"])
            cl = [label(g) for g in ranks] if ranks is not None else [f"comm {r['communicator']}"]
            for lane in cl:
                add(lane, "collective", r["collective_id"], name, r["start_s"], r["finish_s"], "done")

    def lane_of(aid: int) -> str | None:
        if lanes is None:
            return None
        if callable(lanes):
            return lanes(aid)
        return lanes.get(aid)

    d = result.delays
    ids = d["delay_id"].to_numpy()
    own = ~_inside(ids, first, last)
    tags = d["tag"].cast(pa.string()).to_pylist()
    status = d["status"].cast(pa.string()).to_pylist()
    ready = d["ready_s"].to_numpy(zero_copy_only=False)
    finish = d["finish_s"].to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(own):
        if status[i] != "done":
            continue
        aid = int(ids[i])
        lane = lane_of(aid) or (tags[i] if tags[i] is not None else "delays")
        add(lane, "delay", aid, tags[i] or "delay", float(ready[i]), float(finish[i]), status[i])

    if flows:
        f = result.flows
        fids = f["flow_id"].to_numpy()
        st = f["status"].cast(pa.string()).to_pylist()
        keep = ~_inside(fids, first, last) & np.array([s != "skipped" for s in st], dtype=bool)
        idx = np.flatnonzero(keep)
        fr = f["ready_s"].to_numpy(zero_copy_only=False)
        ff = f["finish_s"].to_numpy(zero_copy_only=False)
        failed = f["failed_s"].to_numpy(zero_copy_only=False)
        end = np.where(np.isnan(ff), failed, ff)
        if idx.size > max_flows:
            idx = idx[np.argsort(-(end[idx] - fr[idx]), kind="stable")[:max_flows]]
            idx.sort()
        src = f["src"].to_numpy(zero_copy_only=False)
        ftags = f["tag"].cast(pa.string()).to_pylist()
        for i in idx:
            aid = int(fids[i])
            lane = lane_of(aid) or label(src[i])
            add(lane, "flow", aid, ftags[i] or "flow", float(fr[i]), float(end[i]), st[i])

    table = pa.table({
        "lane": pa.array(rows["lane"], pa.string()), "kind": pa.array(rows["kind"], pa.string()),
        "activity_id": pa.array(rows["activity_id"], pa.int64()), "name": pa.array(rows["name"], pa.string()),
        "start_s": pa.array(rows["start_s"], pa.float64()), "finish_s": pa.array(rows["finish_s"], pa.float64()),
        "status": pa.array(rows["status"], pa.string()),
    })
    if table.num_rows == 0:
        return table
    lane_names = _apart(rows["lane"], rows["start_s"], rows["finish_s"], rows["activity_id"])
    table = table.set_column(0, "lane", pa.array(lane_names, pa.string()))
    order = sorted(range(table.num_rows), key=lambda i: (_lane_key(lane_names[i]), rows["start_s"][i], rows["activity_id"][i]))
    return table.take(pa.array(order, pa.int64()))


def _apart(lanes: list[str], start: list[float], finish: list[float], ids: list[int]) -> list[str]:
    """Each activity's lane, those that overlap another on their lane moved to lanes of their
    own beside it (``lane #2``, ``lane #3``, ...): in order of start, each takes the first of
    its lane's sub-lanes free by then (interval partitioning: as few as the most that overlap
    at any instant)."""
    out = list(lanes)
    free_at: dict[str, list[float]] = {}  # per lane, when each of its sub-lanes is next free
    for i in sorted(range(len(lanes)), key=lambda i: (start[i], ids[i])):
        ends = free_at.setdefault(lanes[i], [])
        k = next((k for k, end in enumerate(ends) if end <= start[i]), len(ends))
        if k == len(ends):
            ends.append(finish[i])
        else:
            ends[k] = finish[i]
        if k:
            out[i] = f"{lanes[i]} #{k + 1}"
    return out


def _lane_key(lane: str) -> tuple[tuple[int, Any], ...]:
    """Lanes in natural order: gpu2 before gpu10."""
    import re

    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", lane) if p)


def trace_events(result: Any, scenario: Any = None, **timeline_options: Any) -> dict[str, Any]:
    """The timeline (:func:`timeline`, same options) in Chrome's Trace Event Format: a dict
    ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}`` with one complete
    event ("ph": "X", times in microseconds) per row, a thread per lane, collectives and flows
    under the process "ranks", delays under "delays".

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", None, "64MiB")
        events = fs.trace.trace_events(sc.run(), sc)
        events["traceEvents"][0]   # Chrome's Trace Event Format: dicts with "ph", "ts", "dur", ...
    """
    from .._core import __version__

    t = timeline(result, scenario, **timeline_options)
    lanes = t["lane"].to_pylist()
    kinds = t["kind"].to_pylist()
    names = t["name"].to_pylist()
    ids = t["activity_id"].to_pylist()
    start = t["start_s"].to_pylist()
    finish = t["finish_s"].to_pylist()
    status = t["status"].to_pylist()
    tid: dict[tuple[int, str], int] = {}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "ranks"}},
        {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "delays"}},
    ]
    for lane, kind, name, aid, s, f, st in zip(lanes, kinds, names, ids, start, finish, status):
        pid = 2 if kind == "delay" else 1
        key = (pid, lane)
        if key not in tid:
            tid[key] = len(tid) + 1
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid[key], "args": {"name": lane}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid[key],
                           "args": {"sort_index": tid[key]}})
        events.append({"name": name, "cat": kind, "ph": "X", "pid": pid, "tid": tid[key], "ts": s * 1e6,
                       "dur": max(f - s, 0.0) * 1e6, "args": {"activity_id": aid, "status": st}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"generator": f"fabricsim {__version__}", "makespan_s": result.makespan_s}}


def write_trace(result: Any, path: str | os.PathLike[str], scenario: Any = None, **timeline_options: Any) -> str:
    """Writes :func:`trace_events` as JSON to ``path`` (open it in ui.perfetto.dev or
    chrome://tracing); returns the path. Whole or not at all: a write that fails leaves the
    file that was there as it was and raises :class:`WriteError` naming the path.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", None, "64MiB")
        fs.trace.write_trace(sc.run(), "trace.json", sc)   # open it in ui.perfetto.dev
    """
    path = path_argument("path", path)
    return write_file("path", path, trace_json(result, scenario, **timeline_options))


def trace_json(result: Any, scenario: Any = None, **timeline_options: Any) -> bytes:
    """:func:`trace_events` as the bytes of a JSON file (what :func:`write_trace` writes).

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", None, "64MiB")
        fs.trace.trace_json(sc.run(), sc)[:15]   # b'{"traceEvents":'
    """
    return json.dumps(trace_events(result, scenario, **timeline_options), separators=(",", ":")).encode()
