"""The nodes of every rank's trace matched into what the scenario builds (:func:`units_of`):
a node of its own, or the nodes of one collective on each of its ranks, or a send and its
receive; then what each waits for (:func:`unit_deps`) and an order to build them in."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ...exceptions import ChakraTraceError
from .schema import COMM_GROUP_FILE, COMM_TYPES

__all__ = ["TraceNode", "Unit", "Ignored", "units_of", "unit_deps", "unit_order", "ordered", "a_cycle", "OPS",
           "EXACT_DURATION"]

#: The attribute fabricsim writes beside ``duration_micros`` with the exact compute time in
#: seconds (a double), which it reads in preference to the whole microseconds; other readers
#: ignore it.
EXACT_DURATION = "fabricsim.duration_s"

# Collectives as fabricsim runs them: Chakra's comm type -> (fabricsim op, whether Chakra's
# comm_size is S / n of fabricsim's size_bytes, nccl-tests' S). Chakra's comm_size is the
# per-rank input buffer (the PyTorch converter sums the input tensors, and ASTRA-sim's ring
# takes it so: Ring.cc final_data_size), which for an all-gather is S / n.
OPS: dict[str, tuple[str, bool]] = {
    "all_reduce": ("all_reduce", False), "reduce": ("reduce", False), "all_gather": ("all_gather", True),
    "reduce_scatter": ("reduce_scatter", False), "reduce_scatter_block": ("reduce_scatter", False),
    "all_to_all": ("all_to_all", False), "broadcast": ("broadcast", False),
}

def ordered(deps: Mapping[int, Sequence[int]]) -> tuple[list[int], list[int]]:
    """(the ids in an order where each comes after those it waits for, ``deps[id]``, the least
    first where several are free; the ids left waiting, in a cycle or behind one)."""
    waiting = {k: len(d) for k, d in deps.items()}
    users: dict[int, list[int]] = {k: [] for k in deps}
    for k, d in deps.items():
        for w in d:
            users[w].append(k)
    ready = [k for k, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    return order, [k for k, n in waiting.items() if n]


def a_cycle(left: Sequence[int], deps: Mapping[int, Sequence[int]]) -> list[int]:
    """A cycle among ``left`` (what :func:`ordered` left waiting), in dependency order: walked
    back from the first through what each waits for, until one comes again."""
    inside = set(left)
    k = left[0]
    seen: dict[int, int] = {}
    path: list[int] = []
    while k not in seen:
        seen[k] = len(path)
        path.append(k)
        k = next(w for w in deps[k] if w in inside)
    return path[seen[k]:][::-1]


@dataclass
class TraceNode:
    """One node of one rank's trace, as read."""
    index: int
    id: int
    name: str
    kind: str  # NODE_TYPES' name, or "type N" for a number it does not know
    deps: list[int]
    duration_micros: int
    attrs: dict[str, Any]
    inputs: str


@dataclass
class Unit:
    """What one activity (or none) of the scenario stands for: a node, or the matched nodes
    of a collective or of a send and its receive on several ranks."""
    kind: str  # "delay", "flow", "collective" or "join" (no time: its dependencies pass through)
    members: list[tuple[int, int]]  # (rank, node index)
    value: Any = None  # delay: seconds; flow: (src rank, dst rank, bytes); collective: (op, ranks, bytes)


@dataclass
class Ignored:
    """What the traces hold that fabricsim does not build, counted: (what, name) -> [count,
    first rank, first node id]."""
    seen: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    def add(self, what: str, name: str, rank: int, node_id: int) -> None:
        entry = self.seen.get((what, name))
        if entry is None:
            self.seen[(what, name)] = [1, rank, node_id]
        else:
            entry[0] += 1

    def table(self) -> pa.Table:
        items = sorted(self.seen.items())
        return pa.table({
            "what": pa.array([k[0] for k, _ in items], pa.string()),
            "name": pa.array([k[1] for k, _ in items], pa.string()),
            "count": pa.array([v[0] for _, v in items], pa.int64()),
            "first_rank": pa.array([v[1] for _, v in items], pa.int64()),
            "first_node_id": pa.array([v[2] for _, v in items], pa.int64()),
        })

    def message(self) -> str:
        lines = [f"  {what} {name!r}: {count:,} node(s), first rank {r} node {n}"
                 for (what, name), (count, r, n) in sorted(self.seen.items())]
        return "\n".join(lines)


def _number(node: TraceNode, name: str, path: str, rank: int, default: Any = None) -> Any:
    value = node.attrs.get(name, default)
    if value is None:
        raise ChakraTraceError(f"{path}: rank {rank} node {node.id} ({node.name!r}, {node.kind}) has no {name}",
                               path, rank, node.id)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ChakraTraceError(f"{path}: rank {rank} node {node.id} ({node.name!r}) has {name} = {value!r}: expected a "
                               "number >= 0", path, rank, node.id)
    return value


def units_of(ranks: list[list[TraceNode]], files: list[str], pgs: dict[str, list[int]], compute: str,
             flop_per_s: float | None, memory_Bps: float | None,
             ignored: Ignored) -> tuple[list[Unit], list[list[int]]]:
    """The units the nodes make (:class:`Unit`), and the unit of each rank's each node."""
    n_ranks = len(ranks)
    units: list[Unit] = []
    unit_of: list[list[int]] = [[-1] * len(nodes) for nodes in ranks]
    colls: dict[str, list[list[int]]] = {}  # pg -> per rank, its collectives' node indices in order
    sends: dict[tuple[int, int, int], list[int]] = {}  # (src, dst, tag) -> send node indices on src
    recvs: dict[tuple[int, int, int], list[int]] = {}  # (src, dst, tag) -> recv node indices on dst

    def new(r: int, i: int, kind: str, value: Any = None) -> None:
        unit_of[r][i] = len(units)
        units.append(Unit(kind, [(r, i)], value))

    for r, nodes in enumerate(ranks):
        path = files[r]
        for n in nodes:
            kind = n.kind
            if kind == "compute":
                if EXACT_DURATION in n.attrs:
                    new(r, n.index, "delay", float(_number(n, EXACT_DURATION, path, r)))
                elif compute == "flops" and not n.attrs.get("is_cpu_op", False):
                    assert flop_per_s is not None
                    new(r, n.index, "delay", float(_number(n, "num_ops", path, r)) / flop_per_s)
                else:
                    new(r, n.index, "delay", n.duration_micros * 1e-6)
            elif kind == "collective":
                ctype = _number(n, "comm_type", path, r)
                name = COMM_TYPES.get(int(ctype))
                if name is None or (name not in OPS and name != "barrier"):
                    ignored.add("collective", name or f"comm_type {ctype}", r, n.id)
                    new(r, n.index, "join")
                    continue
                pg = str(n.attrs.get("pg_name", ""))
                key = "" if pg == "" or (pg == "0" and "0" not in pgs) else pg
                if key and key not in pgs:
                    raise ChakraTraceError(f"{path}: rank {r} node {n.id} ({n.name!r}, {name}) is on process group {pg!r}, "
                                           f"which no group definition names (known: {sorted(pgs) or 'none'}; give "
                                           f"groups= or a {COMM_GROUP_FILE} beside the traces)", path, r, n.id)
                colls.setdefault(key, [[] for _ in range(n_ranks)])[r].append(n.index)
            elif kind in ("send", "recv"):
                _number(n, "comm_size", path, r)  # there, and a size
                own, peer = ("comm_src", "comm_dst") if kind == "send" else ("comm_dst", "comm_src")
                me = int(_number(n, own, path, r, default=r))
                if me != r:
                    raise ChakraTraceError(f"{path}: rank {r} node {n.id} ({kind}) says {own} = {me}: a {kind} runs on "
                                           f"its own rank", path, r, n.id)
                other = int(_number(n, peer, path, r))
                if other >= n_ranks:
                    raise ChakraTraceError(f"{path}: rank {r} node {n.id} ({kind}) has {peer} = {other}, but the traces "
                                           f"have ranks 0 to {n_ranks - 1}", path, r, n.id)
                tag = int(n.attrs.get("comm_tag", 0))
                src, dst = (r, other) if kind == "send" else (other, r)
                (sends if kind == "send" else recvs).setdefault((src, dst, tag), []).append(n.index)
            elif kind in ("mem_load", "mem_store"):
                if memory_Bps is None:
                    ignored.add("node type (needs memory_Bps)", kind, r, n.id)
                    new(r, n.index, "join")
                else:
                    new(r, n.index, "delay", float(_number(n, "tensor_size", path, r)) / memory_Bps)
            elif kind in ("metadata", "invalid"):
                new(r, n.index, "join")
            else:
                ignored.add("node type", kind, r, n.id)
                new(r, n.index, "join")
    _match_collectives(colls, ranks, files, pgs, units, unit_of)
    _match_p2p(sends, recvs, ranks, files, units, unit_of)
    return units, unit_of


def _match_collectives(colls: dict[str, list[list[int]]], ranks: list[list[TraceNode]], files: list[str],
                       pgs: dict[str, list[int]], units: list[Unit], unit_of: list[list[int]]) -> None:
    """One unit per collective: the k-th a rank issues on a group with the k-th of each other
    member, which must agree on its type and size."""
    n_ranks = len(ranks)
    for key in sorted(colls):
        per_rank = colls[key]
        members = pgs[key] if key else list(range(n_ranks))
        label = f"process group {key!r} (ranks {_ranks_text(members)})" if key else "every rank (no pg_name)"
        inside = set(members)
        for r, idx in enumerate(per_rank):
            if idx and r not in inside:
                n = ranks[r][idx[0]]
                raise ChakraTraceError(f"{files[r]}: rank {r} node {n.id} ({n.name!r}) is a collective on {label}, "
                                       "which it is not in", files[r], r, n.id)
        counts = [len(per_rank[r]) for r in members]
        k_max = max(counts)
        for r, c in zip(members, counts):
            if c < k_max:
                other = members[counts.index(k_max)]
                n = ranks[other][per_rank[other][c]]
                raise ChakraTraceError(
                    f"{files[r]}: rank {r} has {c} collective(s) on {label}, rank {other} has {k_max}: rank {other}'s "
                    f"collective {c + 1} (node {n.id}, {n.name!r}) has no partner on rank {r}", files[r], r, None)
        for k in range(k_max):
            first_r = members[0]
            ref = ranks[first_r][per_rank[first_r][k]]
            ctype, size = ref.attrs["comm_type"], ref.attrs.get("comm_size")
            for r in members[1:]:
                n = ranks[r][per_rank[r][k]]
                if n.attrs.get("comm_type") != ctype or n.attrs.get("comm_size") != size:
                    raise ChakraTraceError(
                        f"{files[r]}: collective {k + 1} on {label} disagrees across ranks: rank {first_r} node "
                        f"{ref.id} is {COMM_TYPES.get(int(ctype), ctype)} of comm_size {size}, rank {r} node {n.id} "
                        f"{COMM_TYPES.get(int(n.attrs.get('comm_type', -1)), n.attrs.get('comm_type'))} of comm_size "
                        f"{n.attrs.get('comm_size')}", files[r], r, n.id)
            name = COMM_TYPES[int(ctype)]
            u = len(units)
            if name == "barrier":
                unit = Unit("join", [])
            else:
                op, per_rank_input = OPS[name]
                nbytes = float(_number(ref, "comm_size", files[first_r], first_r))
                unit = Unit("collective", [], (op, list(members), nbytes * len(members) if per_rank_input else nbytes))
            for r in members:
                i = per_rank[r][k]
                unit.members.append((r, i))
                unit_of[r][i] = u
            units.append(unit)


def _match_p2p(sends: dict[tuple[int, int, int], list[int]], recvs: dict[tuple[int, int, int], list[int]],
               ranks: list[list[TraceNode]], files: list[str], units: list[Unit], unit_of: list[list[int]]) -> None:
    """One flow per send and its receive: the k-th send from a rank to another with a tag
    matched with the k-th receive there from it with that tag, of the same size."""
    for key in sorted(set(sends) | set(recvs)):
        src, dst, tag = key
        s, v = sends.get(key, []), recvs.get(key, [])
        if len(s) != len(v):
            r, idx, other, what = (src, s, dst, "receive") if len(s) > len(v) else (dst, v, src, "send")
            n = ranks[r][idx[min(len(s), len(v))]]
            raise ChakraTraceError(
                f"{files[r]}: rank {r} node {n.id} ({n.name!r}, {n.kind} {src} -> {dst}, tag {tag}) has no matching "
                f"{what} on rank {other} ({len(s)} sends, {len(v)} receives from {src} to {dst} with tag {tag})",
                files[r], r, n.id)
        for i, j in zip(s, v):
            a, b = ranks[src][i], ranks[dst][j]
            if a.attrs["comm_size"] != b.attrs["comm_size"]:
                raise ChakraTraceError(f"{files[dst]}: rank {src} node {a.id} sends {a.attrs['comm_size']} bytes to rank "
                                       f"{dst}, whose matching receive, node {b.id}, takes {b.attrs['comm_size']}",
                                       files[dst], dst, b.id)
            u = len(units)
            if src == dst:
                units.append(Unit("join", [(src, i), (dst, j)]))
            else:
                units.append(Unit("flow", [(src, i), (dst, j)], (src, dst, float(a.attrs["comm_size"]))))
            unit_of[src][i] = unit_of[dst][j] = u


def _ranks_text(rs: Sequence[int]) -> str:
    return ", ".join(map(str, rs[:8])) + (", ..." if len(rs) > 8 else "")


def unit_deps(units: list[Unit], unit_of: list[list[int]], ranks: list[list[TraceNode]], ids: list[dict[int, int]],
               files: list[str]) -> list[list[int]]:
    """The units each unit waits for: those of its members' dependencies."""
    deps: list[list[int]] = []
    for u, unit in enumerate(units):
        found: set[int] = set()
        for r, i in unit.members:
            n = ranks[r][i]
            index = ids[r]
            for d in n.deps:
                j = index.get(d)
                if j is None:
                    raise ChakraTraceError(f"{files[r]}: rank {r} node {n.id} ({n.name!r}) depends on node {d}, which "
                                           f"rank {r}'s trace does not have", files[r], r, n.id)
                w = unit_of[r][j]
                if w == u:
                    raise ChakraTraceError(f"{files[r]}: rank {r} node {n.id} ({n.name!r}) depends on "
                                           f"{'itself' if j == i else f'node {d}, its partner in one transfer'}: a cycle",
                                           files[r], r, n.id)
                found.add(w)
        deps.append(sorted(found))
    return deps


def unit_order(units: list[Unit], deps: list[list[int]], ranks: list[list[TraceNode]]) -> list[int]:
    """The units in an order where each comes after what it waits for, or
    :class:`ChakraTraceError` naming a cycle."""
    order, left = ordered(dict(enumerate(deps)))
    if left:
        cycle = [_unit_text(units[c], ranks) for c in a_cycle(left, dict(enumerate(deps)))]
        r, i = units[left[0]].members[0]
        raise ChakraTraceError("the traces' dependencies make a cycle, so they never finish: "
                               + " -> ".join(cycle + cycle[:1]), None, r, ranks[r][i].id)
    return order


def _unit_text(unit: Unit, ranks: list[list[TraceNode]]) -> str:
    parts = [f"rank {r} node {ranks[r][i].id} ({ranks[r][i].name!r})" for r, i in unit.members[:2]]
    return " = ".join(parts) + (" = ..." if len(unit.members) > 2 else "")


