"""Chakra execution traces read into a scenario (:func:`load`): each rank's nodes become
delays, collectives and flows on the fabric's GPUs, joined by the nodes' dependencies."""

from __future__ import annotations

import ast
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from ..._checks import choice, integer, many, parsed, real_in
from ..._files import path_argument, read_bytes, reason
from ...collectives.communicator import fabric_view
from ...exceptions import ChakraTraceError, InvalidArgumentError
from ...fabrics import Topology
from ...scenario import Scenario
from ...units import bandwidth_Bps
from . import schema
from .matching import EXACT_DURATION, Ignored, TraceNode, Unit, unit_deps, unit_order, units_of
from .schema import COMM_GROUP_FILE, NODE_TYPES

__all__ = ["ChakraTrace", "load", "COMM_GROUP_FILE", "EXACT_DURATION"]

# Attributes that change what fabricsim builds.
_USED = frozenset({"comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "pg_name", "num_ops",
                   "tensor_size", "is_cpu_op", EXACT_DURATION})
# Attributes that record where a node came from, with no bearing on its timing: the PyTorch
# converter's (Chakra src/converter/pytorch_converter.py, convert_json_to_protobuf_node).
_DESCRIPTIVE = frozenset({"rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema", "stream"})

_FILE = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)\.et(?:\.gz)?$")


@dataclass
class ChakraTrace:
    """Chakra traces read into a scenario (:func:`load`).

    ``scenario`` holds the workload (run it, or add other work first); ``nodes`` has one row
    per trace node (``rank, node_id, name, kind, activity_id``; activity_id is null for a
    node that takes no time, whose dependencies pass through it: metadata, barriers, invalid
    nodes and what was ignored); ``ignored`` counts what the traces hold that fabricsim did
    not build (``what, name, count, first_rank, first_node_id``); ``groups`` gives each
    process group's ranks and ``placement`` the fabric node each rank runs on.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", range(4), "64MiB")
        fs.chakra.write(sc, "traces")                      # traces/trace.0.et ... trace.3.et
        trace = fs.chakra.load("traces", fs.hgx_h100())
        trace.nodes.column("kind").to_pylist()   # ['collective', 'collective', 'collective', 'collective']
    """
    scenario: Scenario
    nodes: pa.Table
    ignored: pa.Table
    groups: dict[str, tuple[int, ...]]
    placement: np.ndarray
    versions: list[str]

    def run(self, **options: Any) -> Any:
        """``scenario.run(**options)``: the traces simulated on the fabric.

        Example::

            sc = fs.Scenario(fs.hgx_h100())
            sc.add_flow(0, 1, "1GB")
            fs.chakra.write(sc, "traces")
            fs.chakra.load("traces", fs.hgx_h100()).run().summary.makespan_s   # as sc.run()'s
        """
        return self.scenario.run(**options)


def load(
    path: Any,
    fabric: Topology,
    *,
    placement: Any = None,
    groups: Any = None,
    compute: str = "duration",
    flop_per_s: Any = None,
    memory_Bps: Any = None,
    unknown: str = "error",
    seed: int = 0,
    routing: Any = None,
    cost_model: Any = None,
) -> ChakraTrace:
    """Reads per-rank Chakra execution traces into a scenario on ``fabric``.

    ``path`` is a directory holding one file per rank (``<prefix><rank>.et``, or ``.et.gz``:
    ``trace.0.et``, ``trace.1.et``, ... as ASTRA-sim names them; ranks 0 to N-1, each once),
    that prefix (``"traces/trace"``, as ASTRA-sim's ``--workload-configuration`` takes it),
    or a list of files, rank i the i-th. Rank r runs on ``placement[r]`` (a sequence or a
    mapping of ranks to nodes of the fabric: ids, or labels where it has them; an integer is
    an id unless the labels are integers), by default on GPU r (node r of a topology that
    does not say which nodes are GPUs).

    Each node becomes, on its rank's node of the fabric:

    * a compute node (COMP): a delay of its ``duration_micros`` (``compute="duration"``) or of
      its ``num_ops`` FLOPs at ``flop_per_s`` (``compute="flops"``; CPU operators,
      ``is_cpu_op``, keep their duration, as ASTRA-sim runs them);
    * a collective (COMM_COLL, ``comm_type``, ``comm_size``, ``pg_name``): the k-th collective
      a rank issues on a process group is matched with the k-th of every other rank of the
      group (NCCL's order on a communicator; each must agree on type and size) and the lot is
      one collective of fabricsim over those ranks' GPUs, starting when every member's
      dependencies are done; ``comm_size`` is each rank's input, so an all-gather's
      ``size_bytes`` is ``n x comm_size``; a barrier takes no time but joins its members;
    * a send and its receive (COMM_SEND on rank ``comm_src``, COMM_RECV on rank ``comm_dst``,
      matched in order per source, destination and ``comm_tag``, sizes equal): one flow,
      starting when both are posted;
    * a memory load or store (MEM_LOAD, MEM_STORE): a delay of ``tensor_size`` at
      ``memory_Bps``;
    * metadata and invalid nodes: nothing; their dependencies pass through them.

    Process groups (``pg_name``; none, or ``"0"`` unless named otherwise, is every rank, as
    ASTRA-sim has it) take their ranks from ``groups`` (a mapping ``{pg_name: ranks}`` or the
    path of a JSON file holding one), else from ``comm_group.json`` beside the traces, and from
    PyTorch's process-group metadata nodes. ``data_deps`` and ``ctrl_deps`` both order nodes.
    A node type, collective or attribute fabricsim does not build raises
    :class:`~fabricsim.ChakraTraceError` listing every one with its count, unless
    ``unknown="ignore"``, which builds the rest (a node it cannot build takes no time) and
    lists them in ``ChakraTrace.ignored``. So does a dependency on a node the rank does not
    have, a cycle, and a collective or send without its partners. ``seed``, ``routing`` and
    ``cost_model`` are the scenario's.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        step = fs.TrainingStep("llama3-8b", fs.Parallelism(tp=8, pp=2), fabric)
        fs.chakra.write(step, "traces")            # traces/trace.0.et ... trace.15.et
        trace = fs.chakra.load("traces", fabric)
        trace.run().summary.makespan_s, step.run().step_s   # the same step, about 0.47 s each
    """
    if not isinstance(fabric, Topology):
        raise InvalidArgumentError(f"fabric must be a fabricsim.Topology or Fabric, got {type(fabric).__name__}")
    compute = choice("compute", compute, ("duration", "flops"))
    unknown = choice("unknown", unknown, ("error", "ignore"))
    rate = None if flop_per_s is None else real_in("flop_per_s", flop_per_s, 0.0, math.inf, open_low=True, open_high=True)
    if compute == "flops" and rate is None:
        raise InvalidArgumentError("compute='flops' needs flop_per_s, the GPU's sustained FLOP/s (e.g. 4.9e14)")
    mem_Bps = None if memory_Bps is None else real_in("memory_Bps", parsed("memory_Bps", bandwidth_Bps, memory_Bps), 0.0,
                                                      math.inf, open_low=True, open_high=True)
    files, directory = _rank_files(path)
    schema.messages()  # protobuf missing: say so before reading anything
    ranks: list[list[TraceNode]] = []
    ids: list[dict[int, int]] = []
    versions: list[str] = []
    ignored = Ignored()
    for r, f in enumerate(files):
        version, nodes = _read_rank(f, r, ignored)
        versions.append(version)
        ranks.append(nodes)
        index: dict[int, int] = {}
        for n in nodes:
            if n.id in index:
                raise ChakraTraceError(f"{f}: rank {r} has two nodes with id {n.id} (nodes {index[n.id]} and {n.index} "
                                       "of the file)", f, r, n.id)
            index[n.id] = n.index
        ids.append(index)
    n_ranks = len(ranks)
    where = _placement(fabric, placement, n_ranks)
    pgs = _groups(groups, directory, ranks, files, n_ranks, ignored)
    units, unit_of = units_of(ranks, files, pgs, compute, rate, mem_Bps, ignored)
    if ignored.seen and unknown == "error":
        raise ChakraTraceError("the traces hold what fabricsim does not build (pass unknown='ignore' to build the "
                               "rest, each listed in ChakraTrace.ignored):\n" + ignored.message())
    deps = unit_deps(units, unit_of, ranks, ids, files)
    order = unit_order(units, deps, ranks)
    sc = Scenario(fabric, seed=seed, routing=routing, cost_model=cost_model)
    activity = _build(sc, units, deps, order, ranks, where)
    return ChakraTrace(sc, _nodes_table(ranks, unit_of, activity), ignored.table(),
                       {k: tuple(v) for k, v in pgs.items()}, where, versions)


# ---- files ------------------------------------------------------------------------------------


def _rank_files(path: Any) -> tuple[list[str], str | None]:
    """(each rank's file, the directory the traces are in) for ``load``'s ``path``."""
    if isinstance(path, (list, tuple)):
        if not path:
            raise InvalidArgumentError("path: an empty list of trace files")
        files = [path_argument(f"path[{i}]", p) for i, p in enumerate(path)]
        return files, os.path.dirname(os.path.abspath(files[0]))
    p = path_argument("path", path)
    if os.path.isfile(p):
        return [p], os.path.dirname(os.path.abspath(p))
    if os.path.isdir(p):
        directory, prefix = p, None
    else:
        directory, prefix = os.path.dirname(p) or ".", os.path.basename(p)
        if not os.path.isdir(directory):
            raise ChakraTraceError(f"{p}: no such trace file, directory or prefix (directory {directory!r} does not exist)",
                                   p)
    found: dict[str, dict[int, str]] = {}
    for name in sorted(os.listdir(directory)):
        m = _FILE.match(name)
        if m is None:
            continue
        pre = m["prefix"]
        if prefix is not None and pre not in (prefix, prefix + ".", prefix + "_"):
            continue
        rank = int(m["rank"])
        by_rank = found.setdefault(pre, {})
        if rank in by_rank:
            raise ChakraTraceError(f"{directory}: two files for rank {rank}: {by_rank[rank]} and {name}",
                                   os.path.join(directory, name), rank)
        by_rank[rank] = name
    if not found:
        what = f"files {prefix}.<rank>.et" if prefix is not None else "files <prefix><rank>.et (or .et.gz)"
        raise ChakraTraceError(f"{p}: no Chakra traces ({what}) in {directory!r}", p)
    if len(found) > 1:
        prefixes = ", ".join(repr(k) for k in sorted(found))
        raise ChakraTraceError(f"{p}: traces of several workloads in {directory!r} (prefixes {prefixes}): "
                               f"name one, as path={os.path.join(directory, sorted(found)[0])!r}", p)
    by_rank = next(iter(found.values()))
    n = max(by_rank) + 1
    missing = [r for r in range(n) if r not in by_rank]
    if missing:
        have = ", ".join(map(str, sorted(by_rank)))
        raise ChakraTraceError(f"{p}: no trace for rank {missing[0]} (ranks 0 to {n - 1} need one file each; found "
                               f"ranks {have}: {', '.join(by_rank[r] for r in sorted(by_rank)[:4])}"
                               f"{', ...' if len(by_rank) > 4 else ''})", p, missing[0])
    return [os.path.join(directory, by_rank[r]) for r in range(n)], directory


def _read_rank(path: str, rank: int, ignored: Ignored) -> tuple[str, list[TraceNode]]:
    """(the version its metadata gives, the nodes) of one rank's trace file."""
    msgs = schema.messages()
    try:
        _, raw = read_bytes("path", path)
    except OSError as err:
        raise ChakraTraceError(f"{path}: cannot read rank {rank}'s trace: {reason(err)}", path, rank) from None
    try:
        data = schema.unpacked(raw)
        it = schema.frames(data)
        first = next(it, None)
        if first is None:
            raise ChakraTraceError(f"{path}: rank {rank}'s trace is empty (a Chakra trace starts with its "
                                   "GlobalMetadata)", path, rank)
        try:
            meta = msgs.GlobalMetadata.FromString(first[1])
        except Exception as err:  # protobuf's DecodeError
            raise ChakraTraceError(f"{path}: message 0 (the GlobalMetadata, at byte 0) does not decode ({err}): "
                                   "not a Chakra trace?", path, rank) from None
        nodes: list[TraceNode] = []
        for offset, payload in it:
            try:
                node = msgs.Node.FromString(payload)
            except Exception as err:
                raise ChakraTraceError(f"{path}: message {len(nodes) + 1} (node {len(nodes)}, at byte {offset}) does "
                                       f"not decode as a Chakra node ({err})", path, rank) from None
            nodes.append(_node(node, len(nodes), rank, ignored))
    except schema.FrameError as err:
        raise ChakraTraceError(f"{path}: {err}", path, rank) from None
    return meta.version, nodes


def _node(msg: Any, index: int, rank: int, ignored: Ignored) -> TraceNode:
    attrs: dict[str, Any] = {}
    for a in msg.attr:
        value = schema.attribute_value(a)
        name = a.name
        if name in _USED:
            if value is None:
                ignored.add("attribute without a value", name, rank, msg.id)
                continue
            attrs[name] = value
        elif name not in _DESCRIPTIVE:
            ignored.add("attribute", name, rank, msg.id)
    kind = NODE_TYPES.get(msg.type, f"type {msg.type}")
    deps = list(msg.data_deps)
    deps.extend(msg.ctrl_deps)
    return TraceNode(index, msg.id, msg.name, kind, deps, msg.duration_micros, attrs, msg.inputs.values)


# ---- placement and process groups ------------------------------------------------------------


def _placement(fabric: Topology, placement: Any, n_ranks: int) -> np.ndarray:
    """The fabric node of each rank."""
    if placement is None:
        view = fabric_view(fabric)
        n = view.n_rank_nodes if view.n_rank_nodes is not None else fabric.n_nodes
        if n_ranks > n:
            what = "GPUs" if view.n_rank_nodes is not None else "nodes"
            raise InvalidArgumentError(f"the traces have {n_ranks} ranks, the fabric {n} {what}: give a bigger fabric "
                                       "or a placement")
        return np.arange(n_ranks, dtype=np.int64)
    if isinstance(placement, Mapping):
        absent = [r for r in range(n_ranks) if r not in placement]
        if absent:
            raise InvalidArgumentError(f"placement has no node for rank {absent[0]} (the traces have ranks 0 to "
                                       f"{n_ranks - 1})")
        items = [placement[r] for r in range(n_ranks)]
    else:
        items = list(many("placement", placement, "a sequence (or mapping) of the node of each rank"))
        if len(items) < n_ranks:
            raise InvalidArgumentError(f"placement gives nodes for {len(items)} ranks, the traces have {n_ranks}")
        items = items[:n_ranks]
    labels = fabric._labels
    int_labels = labels is not None and any(isinstance(x, (int, np.integer)) for x in labels)

    def node_of(i: int, x: Any) -> int:
        # An integer is an id (a GPU's, as fabric.gpus and ChakraWritten.gpus give them) unless
        # the topology is labelled by integers; anything else is a label.
        if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) and not int_labels:
            v = int(x)
            if not 0 <= v < fabric.n_nodes:
                raise InvalidArgumentError(f"placement[{i}]: no node {v} in this fabric (nodes are 0..{fabric.n_nodes - 1})")
            return v
        return fabric.node_id(x)

    nodes = np.array([node_of(i, x) for i, x in enumerate(items)], dtype=np.int64)
    uniq, first, counts = np.unique(nodes, return_index=True, return_counts=True)
    if (counts > 1).any():
        twice = int(uniq[counts > 1][0])
        r = [i for i, x in enumerate(nodes.tolist()) if x == twice]
        raise InvalidArgumentError(f"placement puts ranks {r[0]} and {r[1]} on the same node {twice}")
    return nodes


def _groups(groups: Any, directory: str | None, ranks: list[list[TraceNode]], files: list[str], n_ranks: int,
            ignored: Ignored) -> dict[str, list[int]]:
    """Each process group's ranks: PyTorch's metadata nodes, then the comm group file beside
    the traces (or ``groups``), which overrides them."""
    out: dict[str, list[int]] = {}
    for r, nodes in enumerate(ranks):
        for n in nodes:
            if n.kind == "metadata" and n.inputs:
                parsed_groups = _pg_metadata(n.inputs)
                if parsed_groups is None:
                    ignored.add("metadata it cannot read as process groups", n.name, r, n.id)
                    continue
                for name, members in parsed_groups:
                    got = members if members else list(range(n_ranks))
                    if out.setdefault(name, got) != got:
                        raise ChakraTraceError(f"{files[r]}: rank {r} node {n.id} says process group {name!r} has ranks "
                                               f"{got}, another rank said {out[name]}", files[r], r, n.id)
    source = "groups"
    if groups is None and directory is not None and os.path.isfile(os.path.join(directory, COMM_GROUP_FILE)):
        groups = source = os.path.join(directory, COMM_GROUP_FILE)
    if groups is not None and not isinstance(groups, Mapping):
        source = path_argument("groups", groups)
        try:
            with open(source, encoding="utf-8") as handle:
                groups = json.load(handle)
        except (OSError, ValueError) as err:
            raise ChakraTraceError(f"{source}: cannot read the process groups: {reason(err)}", source) from None
        if not isinstance(groups, Mapping):
            raise ChakraTraceError(f"{source}: process groups must be a JSON object {{pg_name: [ranks]}}, got "
                                   f"{type(groups).__name__}", source)
    for name, members in (groups or {}).items():
        key = str(name)
        rs = [integer(f"{source}[{key!r}][{i}]", m, (0, n_ranks)) for i, m in
              enumerate(many(f"{source}[{key!r}]", members, "a list of ranks"))]
        if len(set(rs)) != len(rs):
            raise InvalidArgumentError(f"{source}[{key!r}] lists a rank twice: {rs}")
        out[key] = rs
    return out


def _pg_metadata(values: str) -> list[tuple[str, list[int]]] | None:
    """The process groups of a PyTorch ``process_group:init`` node's input values (a JSON list
    of ``{"pg_name", "ranks"}``, which the converter writes inside a Python list's repr), or
    None where they are not that."""
    text: Any = values
    for _ in range(6):  # a str, read into a list of one str, holding the JSON list
        if isinstance(text, list) and all(isinstance(x, Mapping) for x in text):
            try:
                return [(str(x["pg_name"]), [int(r) for r in x.get("ranks", [])]) for x in text]
            except (KeyError, TypeError, ValueError):
                return None
        if isinstance(text, list) and len(text) == 1:
            text = text[0]
            continue
        if not isinstance(text, str):
            return None
        try:
            text = json.loads(text)
        except ValueError:
            try:
                text = ast.literal_eval(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
    return None


# ---- the scenario ----------------------------------------------------------------------------


def _build(sc: Scenario, units: list[Unit], deps: list[list[int]], order: list[int], ranks: list[list[TraceNode]],
           where: np.ndarray) -> list[int]:
    """Adds each unit to the scenario in ``order``; returns each unit's activity id (-1 for a
    join, whose dependencies its users wait for instead)."""
    activity = [-1] * len(units)
    passes: list[tuple[int, ...]] = [()] * len(units)  # a join: the activities its users wait for
    nodes = where.tolist()
    labels = sc.topology._labels  # a flow's ends by label where the topology has labels (ranks are ids)
    ends = nodes if labels is None else [labels[i] for i in nodes]
    for u in order:
        after_set: set[int] = set()
        for w in deps[u]:
            if activity[w] >= 0:
                after_set.add(activity[w])
            else:
                after_set.update(passes[w])
        after = sorted(after_set)
        unit = units[u]
        r, i = unit.members[0]
        tag = ranks[r][i].name or None
        if unit.kind == "delay":
            activity[u] = sc.add_delay(unit.value, after=after, tag=tag)
        elif unit.kind == "flow":
            src, dst, nbytes = unit.value
            activity[u] = sc.add_flow(ends[src], ends[dst], nbytes, after=after, tag=tag)
        elif unit.kind == "collective":
            op, members, nbytes = unit.value
            activity[u] = sc.add_collective(op, [nodes[m] for m in members], nbytes, after=after, tag=tag)
        else:
            passes[u] = tuple(after)
    return activity


def _nodes_table(ranks: list[list[TraceNode]], unit_of: list[list[int]], activity: list[int]) -> pa.Table:
    rank_col: list[int] = []
    ids: list[int] = []
    names: list[str] = []
    kinds: list[str] = []
    acts: list[int | None] = []
    for r, nodes in enumerate(ranks):
        for n in nodes:
            rank_col.append(r)
            ids.append(n.id)
            names.append(n.name)
            kinds.append(n.kind)
            a = activity[unit_of[r][n.index]]
            acts.append(a if a >= 0 else None)
    return pa.table({
        "rank": pa.array(rank_col, pa.int64()),
        "node_id": pa.array(ids, pa.uint64()),
        "name": pa.array(names, pa.string()).dictionary_encode(),
        "kind": pa.array(kinds, pa.string()).dictionary_encode(),
        "activity_id": pa.array(acts, pa.int64()),
    })

