"""Scenarios and training steps written as Chakra execution traces (:func:`write`): one file
per rank, for ASTRA-sim and the other tools that read Chakra."""

from __future__ import annotations

import bisect
import json
import math
import os
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..._core import __version__
from ..._checks import integers, shown
from ..._files import write_files
from ...collectives.construction import Builder
from ...exceptions import DependencyCycleError, InvalidArgumentError
from ...scenario import Scenario
from . import schema
from .matching import EXACT_DURATION, OPS, ordered
from .schema import COMM_GROUP_FILE, COMM_TYPE_NUMBER, NODE_TYPE_NUMBER

__all__ = ["ChakraWritten", "write", "CHAKRA_VERSION"]

#: The schema version written in each file's GlobalMetadata: the one ASTRA-sim's own example
#: traces carry (astra-sim examples/workload/microbenchmarks/generator_scripts).
CHAKRA_VERSION = "0.0.4"

# fabricsim's collective -> (Chakra's comm type, whether comm_size is S / n): the reader's, the
# other way.
_COMM: dict[str, tuple[str, bool]] = {op: (chakra, per_rank) for chakra, (op, per_rank) in OPS.items()
                                      if chakra != "reduce_scatter_block"}


@dataclass
class ChakraWritten:
    """What :func:`write` wrote.

    ``files`` (one per rank, then ``comm_group.json``); ``workload``, the path ASTRA-sim's
    ``--workload-configuration`` takes (``directory/prefix``); ``gpus``, the fabric node each
    rank stands for; ``groups``, each process group's ranks; ``n_nodes``, the nodes of each
    rank's file; ``dropped``, the dependencies (activity, what it waited for) that no rank
    holds both ends of, which a per-rank trace cannot keep; ``left_out``, what a Chakra trace
    cannot say (faults, share weights, given routes, rate caps), counted.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", range(8), "1GiB")
        out = fs.chakra.write(sc, "traces")
        out.workload, out.n_nodes[:2]   # ('traces/trace', [1, 1])
    """
    directory: str
    prefix: str
    files: list[str]
    gpus: np.ndarray
    groups: dict[str, tuple[int, ...]]
    n_nodes: list[int]
    dropped: list[tuple[int, int]]
    left_out: dict[str, int]

    @property
    def workload(self) -> str:
        """``directory/prefix``: the traces as ASTRA-sim names them (``<workload>.<rank>.et``)."""
        return os.path.join(self.directory, self.prefix)


@dataclass
class _Activity:
    """One activity of the scenario as the trace writes it."""
    kind: str  # "delay", "flow", "collective" or "p2p" (a collective written as its sends and receives)
    value: Any  # delay: s; flow: (src, dst, bytes); collective: (op, nodes, bytes); p2p: [(src, dst, bytes)]
    start_s: float
    after: list[int]
    tag: str | None


class _Recorder:
    """A scenario's core, recording each activity and dependency added through it; every
    other call passes through."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.delays: dict[int, tuple[float, float, list[int], str | None]] = {}
        self.flows: dict[int, tuple[int, int, float, float, list[int], str | None]] = {}
        self.deps: list[tuple[int, int]] = []
        self.left_out: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.core, name)

    def add_delay(self, duration_s: float, start_s: float, after: Any, tag: str | None) -> int:
        a = int(self.core.add_delay(duration_s, start_s, after, tag))
        self.delays[a] = (float(duration_s), float(start_s), [int(x) for x in after], tag)
        return a

    def add_flow(self, src: int, dst: int, size: float, start_s: float, after: Any, route: Any, tag: str | None,
                 max_rate: Any) -> int:
        a = int(self.core.add_flow(src, dst, size, start_s, after, route, tag, max_rate))
        self.flows[a] = (int(src), int(dst), float(size), float(start_s), [int(x) for x in after], tag)
        self.left_out["given routes"] += route is not None
        self.left_out["rate caps"] += max_rate is not None
        return a

    def add_flows(self, src: Any, dst: Any, sizes: Any, starts: Any, tag: str | None, offsets: Any, links: Any,
                  after: Any, **options: Any) -> Any:
        ids = self.core.add_flows(src, dst, sizes, starts, tag, offsets, links, after, **options)
        waits = [int(x) for x in after]
        for a, s, d, b, t in zip(np.asarray(ids).tolist(), np.asarray(src).tolist(), np.asarray(dst).tolist(),
                                 np.asarray(sizes, dtype=np.float64).tolist(), np.asarray(starts).tolist()):
            self.flows[a] = (s, d, b, float(t), waits, tag)
        self.left_out["given routes"] += 0 if offsets is None else len(ids)
        return ids

    def template(self, first: int) -> None:
        """None: nothing is kept to be copied, so that every activity is added, and recorded,
        by a call of its own (a batch then holds delays only)."""
        return None

    def add_batch(self, template: Any, duration_s: Any, tag: Any, tags: list[str], after_offsets: Any,
                  after_ids: Any) -> None:
        first = int(self.core.n_activities)
        self.core.add_batch(template, duration_s, tag, tags, after_offsets, after_ids)
        for i, (d, t) in enumerate(zip(np.asarray(duration_s).tolist(), np.asarray(tag).tolist())):
            after = np.asarray(after_ids)[after_offsets[i]:after_offsets[i + 1]].tolist()
            self.delays[first + i] = (float(d), 0.0, after, tags[t] if t >= 0 else None)

    def add_dependency(self, activity_id: int, after_id: int) -> None:
        self.core.add_dependency(activity_id, after_id)
        self.deps.append((int(activity_id), int(after_id)))

    def add_fault(self, *args: Any) -> None:
        self.core.add_fault(*args)
        self.left_out["faults"] += 1

    def set_weights(self, first: int, end: int, weight: float) -> None:
        self.core.set_weights(first, end, weight)
        self.left_out["share weights"] += end - first


def _recorded(workload: Any) -> tuple[Scenario, _Recorder, dict[int, tuple[int, ...]]]:
    """The workload built again on a scenario whose core records it, and the ranks (fabric
    nodes) of the delays whose ranks the workload knows (a training step's, by stage and
    replica)."""
    from ..training import TrainingStep  # a sibling workload; imported where it is used

    if isinstance(workload, TrainingStep):
        kw = {} if workload.cost_model is None else {"cost_model": workload.cost_model}
        sc = Scenario(workload.fabric, **kw)
        rec = _install(sc)
        built = workload._into(sc, None)
        p, G = workload.par, workload.gpus
        known: dict[int, tuple[int, ...]] = {}
        delays = rec.delays
        for a, s, r in zip(built.ids.tolist(), built.stage.tolist(), built.replica.tolist()):
            if a in delays and s >= 0 and r >= 0:
                d, c = divmod(r, p.cp)
                known[a] = tuple(int(g) for g in G[s, d, c, :])
        return sc, rec, known
    if not isinstance(workload, Scenario):
        raise InvalidArgumentError(f"workload must be a fabricsim.Scenario or TrainingStep, got "
                                   f"{type(workload).__name__} {shown(workload)}")
    with workload._lock:
        if (workload._core.n_activities, workload._core.n_faults) != workload._n_recorded:
            raise InvalidArgumentError("this scenario was changed through its core, not its add_* methods: its "
                                       "activities cannot be read back to be written")
        calls = tuple(workload._calls)
    topology, seed, routing, cost_model = workload._init_args
    sc = Scenario(topology, seed=seed, routing=routing, cost_model=cost_model)
    rec = _install(sc)
    for name, args, kwargs in calls:
        getattr(sc, name)(*args, **kwargs)
    return sc, rec, {}


def _install(sc: Scenario) -> _Recorder:
    rec = _Recorder(sc._core)
    sc._core = rec  # type: ignore[assignment]  # it passes every call on
    sc._collectives = Builder(sc)
    return rec


def _activities(sc: Scenario, rec: _Recorder) -> dict[int, _Activity]:
    """The scenario's activities as written: its own delays and flows, and each collective as
    one (the activities its construction made are its own: ids from its begin to its end)."""
    rows = sorted(sc._collectives.rows if sc._collectives is not None else [], key=lambda row: row[6])
    begins = [row[6] for row in rows]
    ends = [row[0] for row in rows]

    def owner(a: int) -> int:
        """The activity ``a`` is part of: its collective's end, or itself."""
        k = bisect.bisect_right(begins, a) - 1
        return ends[k] if k >= 0 and a <= ends[k] else a

    out: dict[int, _Activity] = {}
    for a, (d, start, after, tag) in rec.delays.items():
        if owner(a) == a:
            out[a] = _Activity("delay", d, start, after, tag)
    inner: dict[int, list[tuple[int, int, float]]] = {}
    for a, (s, d, b, start, after, tag) in rec.flows.items():
        o = owner(a)
        if o == a:
            out[a] = _Activity("flow", (s, d, b), start, after, tag)
        else:
            inner.setdefault(o, []).append((s, d, b))
    keys = {i: np.frombuffer(k, dtype=np.int64).tolist() for k, i in
            (sc._collectives._communicators.items() if sc._collectives is not None else ())}
    for end, comm, op, _algo, n, size, begin, _analytical, _proto in rows:
        _, start, after, tag = rec.delays[begin]
        nodes = keys[comm]
        if op in ("all_to_all", "send_recv"):
            pairs = sorted(inner.get(end, []))
            uniform = op == "all_to_all" and len(pairs) == n * (n - 1) and all(math.isclose(b, size / n) for *_, b in pairs)
            if not uniform:
                out[end] = _Activity("p2p", pairs, start, after, tag)
                continue
        out[end] = _Activity("collective", (op, tuple(nodes), size), start, after, tag)
    for a, act in out.items():
        act.after = sorted({owner(x) for x in act.after} - {a})
    for a, b in rec.deps:
        oa, ob = owner(a), owner(b)
        if oa != ob and ob not in out[oa].after:
            out[oa].after.append(ob)
    return dict(sorted(out.items()))


def _own_ranks(act: _Activity) -> tuple[int, ...] | None:
    """The fabric nodes an activity other than a delay runs on."""
    if act.kind == "flow":
        return (act.value[0], act.value[1])
    if act.kind == "collective":
        return tuple(act.value[1])
    if act.kind == "p2p":
        return tuple(sorted({x for s, d, _ in act.value for x in (s, d)}))
    return None


def _delay_ranks(acts: dict[int, _Activity], order: list[int], known: Mapping[int, Any]) -> dict[int, tuple[int, ...]]:
    """The nodes each activity runs on. A delay runs where the workload says (``known``), else
    where what waits for it starts (a flow's source, a collective's ranks, a delay's own such
    nodes), else, where nothing on a GPU waits for it, where what it waits for ran (a flow's
    destination, a collective's ranks, a delay's nodes)."""
    users: dict[int, list[int]] = {a: [] for a in acts}
    for a in order:
        for b in acts[a].after:
            users[b].append(a)
    down: dict[int, set[int]] = {}
    for a in reversed(order):
        if acts[a].kind != "delay":
            continue
        found: set[int] = set()
        for u in users[a]:
            act = acts[u]
            if act.kind == "flow":
                found.add(act.value[0])
            elif act.kind == "delay":
                found |= set(known[u]) if u in known else down[u]
            else:
                found.update(_own_ranks(act) or ())
        down[a] = found
    ranks: dict[int, tuple[int, ...]] = {}
    for a in order:
        act = acts[a]
        own = _own_ranks(act)
        if own is None and a in known:
            own = tuple(sorted(int(x) for x in known[a]))
        if own is not None:
            ranks[a] = own
            continue
        chosen = down[a]
        if not chosen:
            for b in act.after:
                pre = acts[b]
                if pre.kind == "flow":
                    chosen.add(pre.value[1])
                else:
                    chosen.update(ranks[b])
        if not chosen:
            raise InvalidArgumentError(
                f"delay {a} ({act.tag or 'no tag'}) runs on no GPU: nothing on one waits for it and it waits for nothing "
                "on one, so no rank of a trace can hold it; give its GPUs in delay_ranks={activity_id: [nodes]}")
        ranks[a] = tuple(sorted(chosen))
    return ranks


def _order(acts: dict[int, _Activity]) -> list[int]:
    """The activities with each after what it waits for (the smallest id first where free)."""
    order, stuck = ordered({a: act.after for a, act in acts.items()})
    if stuck:
        raise DependencyCycleError(f"the scenario's dependencies make a cycle (activities {stuck[:8]}"
                                   f"{' ...' if len(stuck) > 8 else ''} wait for each other): it cannot be written")
    return order


def write(workload: Any, directory: Any, *, prefix: str = "trace",
          delay_ranks: Mapping[int, Any] | None = None) -> ChakraWritten:
    """Writes a scenario or a :class:`~fabricsim.TrainingStep` as Chakra execution traces, one
    file per rank (``directory/<prefix>.<rank>.et``) and the process groups'
    ``comm_group.json``, as ASTRA-sim runs them (``--workload-configuration=directory/prefix
    --comm-group-configuration=directory/comm_group.json``).

    Ranks are the GPUs (fabric nodes) the workload uses, in increasing order
    (``ChakraWritten.gpus``). On each rank:

    * a delay is a compute node (COMP) of its duration (``duration_micros``, whole
      microseconds as Chakra stores them; the exact seconds also in the attribute
      ``fabricsim.duration_s``, which :func:`~fabricsim.chakra.load` reads back). It runs on
      the GPUs the workload says (a training step's stage and replica; ``delay_ranks``, a
      mapping of activity ids to nodes, for a scenario), else where what waits for it starts
      (a flow's source, a collective's ranks), else where what it waits for ends;
    * a flow is a send (COMM_SEND) on its source and a receive (COMM_RECV) on its destination,
      each with ``comm_src``, ``comm_dst``, ``comm_size`` and a ``comm_tag`` of its own;
    * a collective is one COMM_COLL node on each of its ranks (``comm_type``, ``comm_size``:
      each rank's input, S / n for an all-gather, ``pg_name``: its process group, numbered
      from 1 in ``comm_group.json``); an all-to-all-v and a send/recv ring are their sends and
      receives; a collective of one rank, which takes no time, a compute node of none;
    * a start time (``start_s``) is a compute node of that long before it.

    Each node's ``data_deps`` are its activity's dependencies on that rank. A dependency
    between activities that share no rank (a delay on one GPU waiting for a delay on another)
    cannot be said per rank: it is left out and listed in ``ChakraWritten.dropped``; so are
    faults, share weights, given routes and rate caps (``left_out``), with a warning.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        step = fs.TrainingStep("llama3-8b", fs.Parallelism(tp=8, pp=2), fabric)
        out = fs.chakra.write(step, "traces")
        len(out.files), out.groups["1"]   # (17, (0, 1, 2, 3, 4, 5, 6, 7)): 16 ranks and the groups
    """
    if not isinstance(prefix, str) or not prefix or os.sep in prefix or prefix in (".", ".."):
        raise InvalidArgumentError(f"prefix must be a file name prefix (no {os.sep!r}), got {shown(prefix)}")
    sc, rec, known = _recorded(workload)
    if delay_ranks is not None:
        if not isinstance(delay_ranks, Mapping):
            raise InvalidArgumentError(f"delay_ranks must be a mapping {{activity_id: [nodes]}}, got "
                                       f"{type(delay_ranks).__name__}")
        n_nodes = sc.topology.n_nodes
        for a, given in delay_ranks.items():
            if a not in rec.delays:
                raise InvalidArgumentError(f"delay_ranks names activity {a!r}, which is not a delay of the workload")
            known[a] = tuple(integers(f"delay_ranks[{a}]", given, (0, n_nodes), one=True).tolist())
    acts = _activities(sc, rec)
    order = _order(acts)
    where = _delay_ranks(acts, order, known)
    gpus = np.array(sorted({g for rs in where.values() for g in rs}), dtype=np.int64)
    rank_of = {int(g): r for r, g in enumerate(gpus.tolist())}
    groups: dict[tuple[int, ...], str] = {}
    nodes: list[list[bytes]] = [[] for _ in gpus]
    exits: dict[int, dict[int, list[int]]] = {}  # activity -> rank -> its nodes there that others wait for
    dropped: list[tuple[int, int]] = []
    msgs = schema.messages()
    A = msgs.AttributeProto
    tag_counter = 0

    def node(r: int, name: str, kind: str, deps: list[int], duration_s: float = 0.0,
             attrs: tuple[Any, ...] = ()) -> int:
        i = len(nodes[r])
        micros = int(round(duration_s * 1e6)) if duration_s > 0 else 0
        extra = (A(name=EXACT_DURATION, double_val=duration_s),) if kind == "compute" else ()
        msg = msgs.Node(id=i, name=name, type=NODE_TYPE_NUMBER[kind], data_deps=deps, duration_micros=micros,
                        attr=(A(name="is_cpu_op", bool_val=False),) + attrs + extra)
        nodes[r].append(schema.frame(msg.SerializeToString()))
        return i

    def p2p(r: int, name: str, kind: str, deps: list[int], src: int, dst: int, nbytes: float, tag: int) -> int:
        return node(r, name, kind, deps, attrs=(
            A(name="comm_src", int32_val=rank_of[src]), A(name="comm_dst", int32_val=rank_of[dst]),
            A(name="comm_size", int64_val=int(round(nbytes))), A(name="comm_tag", int32_val=tag)))

    for a in order:
        act = acts[a]
        ranks = where[a]
        name = act.tag or act.kind
        deps_on: dict[int, list[int]] = {}  # node of the fabric -> the trace nodes there it waits for
        for b in act.after:
            held = False
            for g in ranks:
                ex = exits[b].get(rank_of[g])
                if ex is not None:
                    deps_on.setdefault(g, []).extend(ex)
                    held = True
            if not held:
                dropped.append((a, b))
        if act.start_s > 0:
            for g in ranks:
                r = rank_of[g]
                deps_on.setdefault(g, []).append(node(r, f"{name}.start", "compute", [], act.start_s))
        out: dict[int, list[int]] = {}
        if act.kind == "delay":
            for g in ranks:
                r = rank_of[g]
                out[r] = [node(r, name, "compute", sorted(set(deps_on.get(g, []))), act.value)]
        elif act.kind == "flow":
            src, dst, nbytes = act.value
            tag_counter += 1
            out[rank_of[src]] = [p2p(rank_of[src], name, "send", sorted(set(deps_on.get(src, []))), src, dst, nbytes,
                                     tag_counter)]
            out[rank_of[dst]] = [p2p(rank_of[dst], name, "recv", sorted(set(deps_on.get(dst, []))), src, dst, nbytes,
                                     tag_counter)]
        elif act.kind == "p2p":
            tag_counter += 1
            for src, dst, nbytes in act.value:
                for g, kind in ((src, "send"), (dst, "recv")):
                    r = rank_of[g]
                    out.setdefault(r, []).append(p2p(r, name, kind, sorted(set(deps_on.get(g, []))), src, dst, nbytes,
                                                     tag_counter))
        else:
            op, members, size = act.value
            chakra_op, per_rank_input = _COMM[op]
            ranks_of = tuple(rank_of[g] for g in members)
            pg = groups.setdefault(ranks_of, str(len(groups) + 1)) if len(members) > 1 else ""
            for g in members:
                r = rank_of[g]
                d = sorted(set(deps_on.get(g, [])))
                if len(members) == 1:
                    out[r] = [node(r, name, "compute", d)]
                    continue
                comm_size = size / len(members) if per_rank_input else size
                out[r] = [node(r, name, "collective", d, attrs=(
                    A(name="comm_type", int64_val=COMM_TYPE_NUMBER[chakra_op]),
                    A(name="comm_size", int64_val=int(round(comm_size))), A(name="pg_name", string_val=pg)))]
        exits[a] = out
    meta = schema.frame(msgs.GlobalMetadata(version=CHAKRA_VERSION,
                                            attr=[A(name="fabricsim", string_val=__version__)]).SerializeToString())
    contents: dict[str, Any] = {f"{prefix}.{r}.et": meta + b"".join(ns) for r, ns in enumerate(nodes)}
    group_map = {pg: list(rs) for rs, pg in groups.items()}
    contents[COMM_GROUP_FILE] = (json.dumps(group_map, indent=1) + "\n").encode()
    files = write_files("directory", directory, contents)
    left_out = {k: v for k, v in sorted(rec.left_out.items()) if v}
    if dropped or left_out:
        parts = [f"{len(dropped)} dependencies between activities on different GPUs (ChakraWritten.dropped)"] \
            if dropped else []
        parts += [f"{v} {k}" for k, v in left_out.items()]
        warnings.warn("the Chakra traces leave out what a per-rank trace cannot say: " + ", ".join(parts),
                      stacklevel=2)
    return ChakraWritten(os.fspath(directory), prefix, files, gpus, {pg: tuple(rs) for rs, pg in groups.items()},
                         [len(ns) for ns in nodes], dropped, left_out)
