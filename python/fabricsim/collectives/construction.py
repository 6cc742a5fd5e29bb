"""Collectives as flows: each algorithm's construction on a scenario's core (coupled flows,
phases joined by barriers, independent transfers), and the ``collectives`` results table."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import pyarrow as pa

from .. import _core
from . import conventions
from .alltoall import add_p2p
from .communicator import _Comm, collective_size, communicator, fabric_view
from .cost import p2p
from .cost.analytical import (_busbw_to_algbw, _direct_matrix, _efficiency, _halving_step_times, _head_ring_shares,
                              _step_pairs, dtree_parents, finite_analytical_s, latency_s, nvls_ceiling_busbw_Bps,
                              nvls_gpu_Bps, sharp_bytes_per_byte)
from .cost.choice import resolve_algorithm
from .cost.model import CostModel

if TYPE_CHECKING:
    from ..scenario import Scenario

# Which part of an edge's route a tree edge loads (Scenario.add_coupled_flow's edge_leg).
_Leg = Literal["whole", "up", "down"]


@dataclass(frozen=True)
class _Tree:
    """One reduction tree of a coupled flow: its edges (bytes per byte of the flow on each
    edge's leg of its route) and the usage of its switches' reduction engines."""
    src: np.ndarray
    dst: np.ndarray
    coef: np.ndarray
    legs: list[_Leg]
    engines: dict[int, float]
    #: Each edge is a tree of its own (its stream adds to others on a shared link).
    per_edge: bool = False


@dataclass(frozen=True)
class _Plan:
    """A collective as :meth:`Builder.add` constructed it, to be made again (add_known): the
    core's template of its activities (``core.template``: its begin delay the one root, the
    rest waiting within it, all of one tag, the collective's label), how many there are and
    its end among them, its coupled flows' edge bytes per byte (by position) and its row of
    the collectives table but for the ids (the communicator's key, op, algorithm, ranks,
    size, analytical s, protocol)."""
    template: int
    span: int
    end: int
    edge_bytes: tuple[tuple[int, float], ...]
    row: tuple[bytes, str, str, int, float, float, str]


@dataclass(frozen=True)
class _Copies:
    """Kept collectives (:class:`_Plan`) to be copied together, one per lane
    (:meth:`Builder.known_copies`): per lane its template, activities and end (by position),
    its communicator's number and the rest of its row but for the ids, by column (op,
    algorithm, ranks, size, analytical s, protocol); and its coupled flows' edge bytes per
    byte, flat: lane, position, bytes."""
    template: np.ndarray
    span: np.ndarray
    end: np.ndarray
    comm_ids: list[int]
    columns: list[list[Any]]
    edge_lane: np.ndarray
    edge_offset: np.ndarray
    edge_bytes: np.ndarray


class _Watcher:
    """A scenario's core as a collective's construction calls it (Builder.add_known): every
    call is passed on; one that does more than add activities (a reduction engine, which a
    construction makes once) leaves the construction not to be repeated."""

    _ADDS = frozenset({"n_activities", "add_delay", "add_flows", "add_coupled_flow", "check_room_for_flows"})

    def __init__(self, core: Any) -> None:
        self.core = core
        self.kept = True

    def __getattr__(self, name: str) -> Any:
        if name not in self._ADDS:
            self.kept = False
        return getattr(self.core, name)


class Batch:
    """Delays and copies of the core's templates (``core.template``) added in one core call
    (``core.add_batch``), in order: each item's ids are known when it is asked for (they
    follow the last), so a caller adding millions of activities makes one core call per
    batch instead of one per activity. Whatever adds straight to the core meanwhile goes
    through :meth:`direct`, which adds what is pending first."""

    #: Items kept before they are added (bounds the lists' memory, not the result).
    MAX_PENDING = 1 << 16

    def __init__(self, core: Any) -> None:
        self.core = core
        self.next_id: int = core.n_activities
        self._tags: dict[str, int] = {}
        # items given as arrays (:meth:`extend`), and those before them moved into arrays:
        # (template, duration, tag, n_after, after) each
        self._chunks: list[tuple[np.ndarray, ...]] = []
        self._n_chunked = 0
        self._clear()

    def _clear(self) -> None:
        self._template: list[int] = []
        self._duration: list[float] = []
        self._tag: list[int] = []
        self._n_after: list[int] = []
        self._after: list[int] = []

    def tag(self, tag: str | None) -> int:
        """The number :meth:`extend` takes for ``tag`` (-1: None, the template's own tags)."""
        tags = self._tags
        return -1 if tag is None else tags.setdefault(tag, len(tags))

    def delay(self, duration_s: float, after: Any, tag: str | None) -> int:
        """A delay of ``duration_s`` after ``after`` (ids), as ``core.add_delay(duration_s,
        0.0, after, tag)`` adds it; returns its id."""
        tags = self._tags
        return self._item(-1, duration_s, -1 if tag is None else tags.setdefault(tag, len(tags)), after, 1)

    def repeat(self, template: int, n: int, after: Any, tag: str | None = None) -> int:
        """A copy of core template ``template`` (of ``n`` activities), its roots after
        ``after``, every activity tagged ``tag`` where it is given (a template of one tag),
        else as in the template; returns its first id."""
        tags = self._tags
        return self._item(template, 0.0, -1 if tag is None else tags.setdefault(tag, len(tags)), after, n)

    def _item(self, template: int, duration_s: float, tag: int, after: Any, n: int) -> int:
        first = self.next_id
        self._template.append(template)
        self._duration.append(duration_s)
        self._tag.append(tag)
        self._n_after.append(len(after))
        self._after.extend(after)
        self.next_id = first + n
        if len(self._template) + self._n_chunked >= self.MAX_PENDING:
            self.flush()
        return first

    def extend(self, template: np.ndarray, duration_s: np.ndarray, tag: np.ndarray, n_after: np.ndarray,
               after: np.ndarray, n_activities: int) -> int:
        """Items as arrays, in order (each as :meth:`delay` or :meth:`repeat` takes it: template
        -1 for a delay, ``tag`` numbers from :meth:`tag`, item ``i`` after its ``n_after[i]``
        ids of ``after`` in a row), ``n_activities`` in all; returns the first one's id."""
        first = self.next_id
        self._spill()
        self._chunks.append((template, duration_s, tag, n_after, after))
        self._n_chunked += len(template)
        self.next_id = first + n_activities
        if self._n_chunked >= self.MAX_PENDING:
            self.flush()
        return first

    def _spill(self) -> None:
        """Moves the items kept in lists into a chunk of arrays (order kept)."""
        if self._template:
            self._chunks.append((_int64s(self._template), np.fromiter(self._duration, np.float64, len(self._duration)),
                                 _int64s(self._tag), _int64s(self._n_after), _int64s(self._after)))
            self._n_chunked += len(self._template)
            self._clear()

    def flush(self) -> None:
        """Adds what is pending."""
        self._spill()
        if not self._chunks:
            return
        template, duration, tag, n_after, after = (np.concatenate(parts) for parts in zip(*self._chunks))
        offsets = np.zeros(len(n_after) + 1, dtype=np.int64)
        np.cumsum(n_after, out=offsets[1:])
        self.core.add_batch(template, duration, tag, list(self._tags), offsets, after)
        self._chunks.clear()
        self._n_chunked = 0
        if self.core.n_activities != self.next_id:  # pragma: no cover - the core adds each item whole
            raise AssertionError(f"a batch ended at id {self.core.n_activities}, not {self.next_id}")

    @contextlib.contextmanager
    def direct(self) -> Iterator[Any]:
        """The core, for adds straight to it: what is pending is added first, and the ids
        that follow are counted from what the block added."""
        self.flush()
        yield self.core
        self.next_id = self.core.n_activities


class Builder:
    """Adds collectives to a scenario's core and remembers them for the results table."""

    def __init__(self, scenario: Scenario) -> None:
        self.sc = scenario
        self.cost: CostModel = scenario.cost_model
        #: Per collective: (end id, communicator, op, algorithm, ranks, size, begin id, analytical s, protocol).
        self.rows: list[tuple[int, int, str, str, int, float, int, float, str]] = []
        self._communicators: dict[bytes, int] = {}
        self._communicator_keys: list[bytes] = []  # by number
        self._engines: dict[tuple[str | int, ...], int] = {}
        #: Per coupled flow id, the bytes its edges carry per byte of the flow (the sum of
        #: their coefficients): one flow of a ring stands for all its edges' traffic.
        self.edge_bytes_per_byte: dict[int, float] = {}
        #: The scenario's core, or while a collective is recorded (add_known) a recorder of it.
        self._core: _core.Scenario = scenario._core
        #: add_known's collectives as made once, to be made again (_Plan), by their arguments.
        self._plans: dict[tuple[Any, ...], _Plan | None] = {}
        #: add_known's plans within one domain, to be moved to others: (op, places in the
        #: domain, size) -> (the domain, the plan).
        self._local_plans: dict[tuple[str, tuple[int, ...], float], tuple[int, _Plan]] = {}
        #: Where add_known adds copies while a caller adds in bulk (a training step), else None.
        self.batch: Batch | None = None

    def add(self, op: str, ranks: np.ndarray | None, size_bytes: float, algorithm: str, after: np.ndarray,
            start_s: float, tag: str | None, sizes: np.ndarray | None = None, protocol: str = "auto") -> int:
        comm = communicator(self.sc.topology, op, ranks)
        algo, proto = resolve_algorithm(op, algorithm, protocol, size_bytes, comm, self.cost)
        core = self._core
        label = _label(op, tag)
        first = core.n_activities
        try:
            begin = core.add_delay(0.0, start_s, after, label)
            end, analytical = self._build(op, algo, proto, comm, float(size_bytes), begin, label, sizes)
        except BaseException:  # Ctrl-C too: half a collective would run without its row
            core.truncate(first)
            self.edge_bytes_per_byte = {f: w for f, w in self.edge_bytes_per_byte.items() if f < first}
            raise
        self.record(end, comm, op, algo, float(size_bytes), begin, analytical, proto)
        return end

    def record(self, end: int, comm: _Comm, op: str, algo: str, size_bytes: float, begin: int, analytical: float,
               proto: str) -> None:
        """Gives a collective built from ``begin`` to ``end`` its row of the results table."""
        comm_id = self._communicator(comm.ranks.tobytes())
        self.rows.append((end, comm_id, op, algo, comm.n, size_bytes, begin, analytical, proto))

    def _communicator(self, key: bytes) -> int:
        """The number of the communicator of ranks ``key`` (bytes), numbered as first seen."""
        comm_id = self._communicators.setdefault(key, len(self._communicators))
        if comm_id == len(self._communicator_keys):
            self._communicator_keys.append(key)
        return comm_id

    def forget_from(self, first: int) -> None:
        """Forgets the collectives from activity ``first`` on (a change that failed partway:
        ``Scenario._undo_from``)."""
        self.rows = [r for r in self.rows if r[0] < first]
        self.edge_bytes_per_byte = {f: w for f, w in self.edge_bytes_per_byte.items() if f < first}
        # A communicator is numbered with its first row: those left without one are the
        # newest, so dropping them keeps the numbering dense, as if they had never come.
        used = {r[1] for r in self.rows}
        self._communicators = {k: i for k, i in self._communicators.items() if i in used}
        del self._communicator_keys[len(self._communicators):]

    def add_known(self, op: str, ranks: tuple[int, ...], size_bytes: float | None, after: Any, tag: str,
                  sizes: np.ndarray | None = None) -> int:
        """:meth:`add` for a caller whose arguments are known good (a training step adds
        millions of collectives): GPU ``ranks`` in order, ``size_bytes`` in bytes (or an
        all-to-all-v matrix ``sizes``), ``after`` a sequence of activity ids, "auto" algorithm
        and protocol, no start time. Each distinct collective (op, ranks, size) is
        constructed once and kept as a core template of its activities (:class:`_Plan`),
        then made again as a copy at new ids with its own label (into :attr:`batch` where
        one is set): the same activities, dependencies, routes and results as constructing
        it again would make, without the construction's Python."""
        key = (op, ranks, size_bytes, None if sizes is None else sizes.tobytes())
        plan = self._plans.get(key)
        if plan is None and sizes is None:
            plan = self._moved(op, ranks, cast(float, size_bytes))
            if plan is not None:
                self._plans[key] = plan
        if plan is not None:
            return self._repeat(plan, after, _label(op, tag))

        def construct() -> int:
            arr = np.array(ranks, dtype=np.int64)
            S, matrix = collective_size(op, size_bytes, sizes, communicator(self.sc.topology, op, arr).n)
            return self.add(op, arr, S, "auto", after, 0.0, tag, matrix, "auto")

        end = self._known(key, after, construct, _label(op, tag))
        if sizes is None:
            self._keep_local(op, ranks, cast(float, size_bytes), self._plans[key])
        return end

    def _domain(self, ranks: tuple[int, ...]) -> tuple[int, tuple[int, ...]] | None:
        """The NVLink domain holding all of GPU ``ranks`` and their places in it, on a fabric
        of alike domains (generated, no faults) where a collective in one domain is the same
        collective as on the same places of another, moved; else None."""
        view = fabric_view(self.sc.topology)
        gpd = view.gpus_per_domain
        if gpd < 2 or view.n_rank_nodes is None or view.injection_Bps is not None or view.nominal_parts is not None \
                or view.cut_off.size:
            return None
        dom = ranks[0] // gpd
        if any(r // gpd != dom for r in ranks):
            return None
        return dom, tuple(r - dom * gpd for r in ranks)

    def _keep_local(self, op: str, ranks: tuple[int, ...], size_bytes: float, plan: _Plan | None) -> None:
        """Keeps a constructed collective within one domain to be moved to others (:meth:`_moved`)."""
        placed = self._domain(ranks) if plan is not None else None
        # its row's communicator must be its ranks in their order, as a moved one's will be
        if placed is not None and plan is not None and plan.row[0] == np.asarray(ranks, dtype=np.int64).tobytes():
            self._local_plans.setdefault((op, placed[1], size_bytes), (placed[0], plan))

    def _moved(self, op: str, ranks: tuple[int, ...], size_bytes: float) -> _Plan | None:
        """The collective ``op`` of ``size_bytes`` on ``ranks``, all in one domain, as the same
        one constructed on the same places of another domain, its template moved there
        (``core.template_shifted``: each copy routed on its own GPUs); None where there is
        none such, or it cannot be moved (reduction engines)."""
        placed = self._domain(ranks)
        if placed is None:
            return None
        dom, places = placed
        kept = self._local_plans.get((op, places, size_bytes))
        if kept is None:
            return None
        view = fabric_view(self.sc.topology)
        shift = (dom - kept[0]) * view.gpus_per_domain
        plan = kept[1]
        moved = self._core.template_shifted(plan.template, shift, cast(int, view.n_rank_nodes))
        if moved is None:
            return None
        return _Plan(moved, plan.span, plan.end, plan.edge_bytes,
                     (np.asarray(ranks, dtype=np.int64).tobytes(), *plan.row[1:]))

    def add_known_moe(self, kind: str, ranks: tuple[int, ...], routing: Any, nbytes_per_token: float, mode: str,
                      after: Any, tag: str) -> int:
        """:meth:`add_known` for a MoE dispatch or combine (:func:`~.moe.add_moe`) of
        ``routing`` (a :class:`~.moe.MoeRouting`, kept by the plan it keys) over GPU ``ranks``."""
        from .moe import add_moe

        key = ("moe", kind, ranks, routing, nbytes_per_token, mode, tag)
        return self._known(key, after, lambda: add_moe(self, kind, np.array(ranks, dtype=np.int64), routing,
                                                       nbytes_per_token, mode, after, 0.0, tag))

    def _known(self, key: tuple[Any, ...], after: Any, construct: Any, label: str | None = None) -> int:
        """The collective ``key`` names, made again from its template where it was
        constructed before (:meth:`add_known`), its activities labelled ``label`` where it
        is given (else as the template's), else ``construct()``-ed and kept."""
        plan = self._plans.get(key)
        if plan is not None:
            return self._repeat(plan, after, label)
        with contextlib.ExitStack() as stack:
            if self.batch is not None:
                stack.enter_context(self.batch.direct())
            watch = _Watcher(self._core)
            first = self._core.n_activities
            self._core = cast("_core.Scenario", watch)  # it passes every call on
            try:
                end: int = construct()
            finally:
                self._core = watch.core
            self._plans[key] = self._plan(first, end) if watch.kept else None
        return end

    def _plan(self, first: int, end: int) -> _Plan | None:
        """The collective just constructed from activity ``first`` to ``end`` (its last row),
        as a core template; None where a copy would not be what constructing it again makes
        (its begin delay not its one root)."""
        core = self._core
        row = self.rows[-1]
        kept = core.template(first) if row[6] == first else None
        if kept is None or kept[1] != 1 or not kept[2]:
            return None
        span = core.n_activities - first
        ebpb = self.edge_bytes_per_byte
        edge_bytes = tuple((f - first, ebpb[f]) for f in range(first, first + span) if f in ebpb)
        comm_key = self._communicator_keys[row[1]]
        return _Plan(kept[0], span, end - first, edge_bytes, (comm_key, row[2], row[3], row[4], row[5], row[7], row[8]))

    def _repeat(self, plan: _Plan, after: Any, label: str | None) -> int:
        batch = self.batch if self.batch is not None else Batch(self._core)
        first = batch.repeat(plan.template, plan.span, after, label)
        if batch is not self.batch:
            batch.flush()
        for f, w in plan.edge_bytes:
            self.edge_bytes_per_byte[first + f] = w
        comm_key, op, algo, n, size, analytical, proto = plan.row
        end = first + plan.end
        comm_id = self._communicators.get(comm_key)
        if comm_id is None:
            comm_id = self._communicator(comm_key)
        self.rows.append((end, comm_id, op, algo, n, size, first, analytical, proto))
        return end

    def _kept_plan(self, op: str, ranks: tuple[int, ...], size_bytes: float) -> _Plan | None:
        """The kept collective ``add_known(op, ranks, size_bytes, ...)`` would copy (made once
        more by moving the same one on another domain where that is how it would copy it),
        its communicator numbered; else None."""
        key = (op, ranks, size_bytes, None)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._moved(op, ranks, size_bytes)
            if plan is not None:
                self._plans[key] = plan
        return plan if plan is not None and plan.row[0] in self._communicators else None

    def is_kept(self, op: str, ranks: tuple[int, ...], size_bytes: float) -> bool:
        """Whether :meth:`known_copies` would give the collective ``op`` of ``size_bytes`` on ``ranks``."""
        return self._kept_plan(op, ranks, size_bytes) is not None

    def known_copies(self, op: str, groups: list[tuple[int, ...]], size_bytes: float) -> _Copies | None:
        """The collectives ``add_known(op, group, size_bytes, ...)`` would copy, one per group of
        ``groups`` (:class:`_Copies`), for a caller adding them all at once (:meth:`copied`);
        None where one of them is not kept to be copied (not yet constructed, or never)."""
        kept: list[_Plan] = []
        for g in groups:
            plan = self._kept_plan(op, g, size_bytes)
            if plan is None:
                return None
            kept.append(plan)
        comm_ids = [self._communicators[pl.row[0]] for pl in kept]
        lane = np.repeat(np.arange(len(kept)), [len(pl.edge_bytes) for pl in kept])
        edges = np.array([e for pl in kept for e in pl.edge_bytes], dtype=np.float64).reshape(-1, 2)
        columns = [list(column) for column in zip(*(pl.row[1:] for pl in kept))]
        return _Copies(_int64s([pl.template for pl in kept]), _int64s([pl.span for pl in kept]),
                       _int64s([pl.end for pl in kept]), comm_ids, columns,
                       lane, edges[:, 0].astype(np.int64), edges[:, 1])

    def copied(self, copies: list[_Copies], firsts: np.ndarray) -> None:
        """Gives copies that a caller added (its batch's :meth:`Batch.extend`) their rows and
        edge bytes as :meth:`add_known` would: per lane ``i``, a copy of each of ``copies`` in
        turn, the ``k``-th first at ``firsts[i, k]``."""
        rows = []
        for k, cp in enumerate(copies):
            f = firsts[:, k]
            op, algo, n, size, analytical, proto = cp.columns
            rows.append(zip((f + cp.end).tolist(), cp.comm_ids, op, algo, n, size, f.tolist(), analytical, proto))
        # in the order add_known makes them: lane by lane
        self.rows.extend(itertools.chain.from_iterable(zip(*rows)) if len(rows) > 1 else rows[0])
        lane = np.concatenate([cp.edge_lane for cp in copies])
        order = np.argsort(lane, kind="stable")
        ids = np.concatenate([firsts[cp.edge_lane, k] + cp.edge_offset for k, cp in enumerate(copies)])
        weights = np.concatenate([cp.edge_bytes for cp in copies])
        self.edge_bytes_per_byte.update(zip(ids[order].tolist(), weights[order].tolist()))

    # -- flow construction ---------------------------------------------------------------------

    def _coupled(self, src: np.ndarray, dst: np.ndarray, coef: np.ndarray | float, combine: Literal["sum", "max"],
                 engines: list[tuple[int, float]], nbytes: float, latency: float, after: int, tag: str,
                 legs: list[_Leg] | None = None, trees: np.ndarray | None = None,
                 max_rate_Bps: float | None = None) -> int:
        coef = np.ascontiguousarray(np.broadcast_to(coef, len(src)), dtype=np.float64)
        flow = self._core.add_coupled_flow(
            np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64),
            coef, combine, engines, nbytes, latency, 0.0, [after], tag, max_rate_Bps, legs,
            None if trees is None else np.ascontiguousarray(trees, dtype=np.int64),
        )
        self.edge_bytes_per_byte[flow] = float(coef.sum())
        return flow

    def _barrier(self, after: list[int], tag: str) -> int:
        return self._core.add_delay(0.0, 0.0, after, tag)

    def _ring(self, op: str, comm: _Comm, S: float, latency: float, after: int, tag: str, wire: float = 1.0,
              heads: int | None = None) -> list[int]:
        """One coupled flow per channel (module docs); ``wire`` bytes cross each edge per byte
        of payload (1 / the protocol's efficiency). A reduce-scatter (all-gather) in one
        domain given ``heads`` leaves its shards on (takes them from) the first ``heads``
        ranks only (_head_ring_shares). The edges depend on the communicator alone, so they
        are made once for it (a training step repeats its TP collectives thousands of times)."""
        key = ("ring_edges", op, heads)
        edges: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, float]] | None = comm.memo.get(key)
        if edges is None:
            edges = comm.memo[key] = _ring_edges(op, comm, heads)
        return [self._coupled(src, dst, wire if share is None else wire * share, "sum", [], per_byte * S, latency,
                              after, tag)
                for src, dst, share, per_byte in edges]

    def _engine(self, key: tuple[str | int, ...], capacity_Bps: float) -> int:
        if key not in self._engines:
            self._engines[key] = self._core.add_engine(capacity_Bps)
        return self._engines[key]

    def _nvls(self, ranks: np.ndarray, up: np.ndarray | float, down: np.ndarray | float) -> _Tree:
        """A reduction through the NVSwitches of one domain: each rank sends ``up`` and
        receives ``down`` bytes per byte of the flow (numbers, or one per rank). Each rank's
        up leg is the part of its route to a peer (ranks[0], or ranks[1] for ranks[0] itself)
        short of the peer, its down leg the part of the peer's route to it past the peer: the
        switches, not the peer, receive and send. A leg carrying nothing is left out. Each
        GPU's NVLS traffic (the larger of its legs) also loads that GPU's NVLS engine, of
        :func:`nvls_gpu_Bps`: the efficiency is per GPU, shared by every NVLS collective on it."""
        v = fabric_view(self.sc.topology)
        n = len(ranks)
        capacity = nvls_gpu_Bps(v, self.cost)
        up, down = np.broadcast_to(up, n), np.broadcast_to(down, n)
        peer = np.where(np.arange(n) == 0, ranks[1], ranks[0])
        src, dst = np.concatenate([ranks, peer]), np.concatenate([peer, ranks])
        coef = np.concatenate([up, down])
        keep = coef > 0
        legs = np.array(["up"] * n + ["down"] * n)[keep].tolist()
        load = np.maximum(up, down).tolist()
        engines = {self._engine(("nvls", g), capacity): w for g, w in zip(ranks.tolist(), load) if w > 0}
        return _Tree(src[keep], dst[keep], coef[keep], legs, engines)

    def _dtrees(self, comm: _Comm) -> _Tree:
        """Each rail's double binary tree across the domains' heads (NVLSTree's network leg):
        two trees of half the rail's bytes, every edge carrying its half once up (reduce) and
        once down (broadcast). A directed edge is a stream of its own, so edges that share a
        link add there (a parent's NIC receives every child's stream): each is its own tree."""
        src: list[np.ndarray] = []
        dst: list[np.ndarray] = []
        for rail in comm.rails():
            for parents in dtree_parents(len(rail)):
                child = np.flatnonzero(parents >= 0)
                a, b = rail[child], rail[parents[child]]
                src += [a, b]
                dst += [b, a]
        src_a, dst_a = np.concatenate(src), np.concatenate(dst)
        return _Tree(src_a, dst_a, np.full(len(src_a), 0.5), ["whole"] * len(src_a), {}, per_edge=True)

    def _sharp(self, ranks: np.ndarray, coef: float = 1.0) -> _Tree:
        """Up and down the scale-out aggregation tree: every link carries ``coef`` bytes per
        byte of the flow (:func:`sharp_bytes_per_byte`)."""
        st = self.sc.topology._core.structure()["scale_out"]
        ports = st["n_leaves"] * st["radix"] * st["planes"]
        engine = self._engine(("sharp",), ports * st["link_Bps"])
        p0, rest = int(ranks[0]), ranks[1:]
        src = np.concatenate([rest, np.full(len(rest), p0)])
        dst = np.concatenate([np.full(len(rest), p0), rest])
        return _Tree(src, dst, np.full(len(src), coef), ["whole"] * len(src), {engine: float(len(ranks))})

    def _reduction(self, trees: list[_Tree], S: float, latency: float, after: int, tag: str,
                   max_rate_Bps: float | None = None) -> int:
        """One pipelined flow of S through reduction trees (DESIGN section 2): links count a
        tree's edges once (combine="max"), and different trees' streams add; ``max_rate_Bps``
        is the communicator's ceiling (NCCL's channel limit)."""
        engines: dict[int, float] = {}
        ids: list[np.ndarray] = []
        next_id = 0
        for t in trees:
            for e, w in t.engines.items():
                engines[e] = engines.get(e, 0.0) + w
            k = len(t.src)
            ids.append(np.arange(next_id, next_id + k) if t.per_edge else np.full(k, next_id))
            next_id += k if t.per_edge else 1
        return self._coupled(
            np.concatenate([t.src for t in trees]), np.concatenate([t.dst for t in trees]),
            np.concatenate([t.coef for t in trees]), "max", list(engines.items()), S, latency, after, tag,
            [leg for t in trees for leg in t.legs], np.concatenate(ids), max_rate_Bps,
        )

    def _flows(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray | float, after: int, tag: str) -> np.ndarray:
        """Independent routed flows (ECMP or spraying as the scenario routes), all after one id.
        Each stands for NCCL's channels to its peer, striped over the NIC's ports as a ring's
        edge is (``striped``)."""
        if not len(src):
            return np.zeros(0, dtype=np.int64)
        return self._core.add_flows(
            np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64),
            np.ascontiguousarray(np.broadcast_to(nbytes, len(src)), dtype=np.float64),
            np.zeros(len(src)), tag, None, None, [after], striped=True,
        )

    def _tree(self, comm: _Comm, S: float, latency: float, after: int, tag: str, wire: float = 1.0) -> list[int]:
        """NCCL's double binary tree all-reduce: m channels (m = ``comm.heads``, one per rail
        where every domain holds m ranks), each two pipelined trees of S/(2m). Channel c's
        tree joins rank c of every domain; inside a domain its chain starts there and runs
        through all the domain's ranks (rotated by c), so it is as long as the domain holds
        ranks, as NCCL chains each node's own localRanks (connect.cc, treeIntra). Every tree
        edge and chain edge carries the tree's bytes once up (reduce) and once down
        (broadcast), times ``wire`` (as for the ring)."""
        d, m = comm.n_domains, comm.heads
        first = np.repeat(comm.starts, comm.counts)  # each rank's domain start and size
        size = np.repeat(comm.counts, comm.counts)
        position = np.arange(comm.n) - first
        linked = position[1:] > 0  # consecutive ranks of one domain
        ids: list[int] = []
        for c in range(m):
            chain = comm.ranks[first + (position + c) % size]
            heads = chain[comm.starts]
            lower, upper = chain[1:][linked], chain[:-1][linked]  # chain edges up
            for parents in (dtree_parents(d) if d > 1 else (np.array([-1]),) * 2):
                child = np.flatnonzero(parents >= 0)
                up_src = np.concatenate([lower, heads[child]])
                up_dst = np.concatenate([upper, heads[parents[child]]])
                src, dst = np.concatenate([up_src, up_dst]), np.concatenate([up_dst, up_src])
                if len(src):
                    ids.append(self._coupled(src, dst, wire, "sum", [], S / (2 * m), latency, after, tag))
        return ids

    def _halving_doubling(self, op: str, comm: _Comm, S: float, begin: int, tag: str) -> int:
        """Recursive halving-doubling: one phase of independent flows per step (each rank
        sends to its partner), a barrier paying the step's alpha after each."""
        at = begin
        for kind, distance, nbytes, crosses, alpha, _ in _halving_step_times(op, S, comm, self.cost):
            src, dst = _step_pairs(kind, distance, comm.n)
            ids = self._flows(comm.ranks[src], comm.ranks[dst], nbytes, at, tag)
            at = self._core.add_delay(alpha, 0.0, ids, tag)
        return at

    def _build(self, op: str, algo: str, proto: str, comm: _Comm, S: float, begin: int, tag: str,
               sizes: np.ndarray | None) -> tuple[int, float]:
        core = self._core
        n = comm.n
        cost = self.cost
        analytical = finite_analytical_s(op, algo, S, comm, sizes, proto, cost)
        if algo == "p2p":
            core.check_room_for_flows(n * (n - 1) if op == "all_to_all" else n)  # before the n x n matrix
            plan = p2p.plan(op, comm, S, sizes, cost)
            if not len(plan.nbytes):  # nothing to move: an empty send/recv's handshake (p2p.time_s)
                return core.add_delay(analytical, 0.0, [begin], tag), analytical
            return add_p2p(core, comm, plan, begin, tag, alike=p2p.alike(op, comm, sizes, cost)), analytical
        if algo == "direct":
            core.check_room_for_flows(n * (n - 1) if op == "all_to_all" else n)  # before the n x n matrix
            if op == "all_to_all" and sizes is None:  # every ordered pair, row by row, S/n each
                i = np.repeat(np.arange(n), n - 1)
                j = np.tile(np.arange(n - 1), n)
                j += j >= i
                nbytes: np.ndarray | float = S / n
            else:
                matrix = _direct_matrix(op, n, S, sizes)
                i, j = np.nonzero(matrix)
                nbytes = matrix[i, j]
            ids = self._flows(comm.ranks[i], comm.ranks[j], nbytes, begin, tag)
            if not len(ids):
                return core.add_delay(0.0, 0.0, [begin], tag), 0.0
            # NCCL's p2p alpha, paid once after the transfers (which pay their wire latency).
            return core.add_delay(latency_s(op, algo, S, comm, "simple", cost), 0.0, ids, tag), analytical
        if n == 1 or (S == 0 and sizes is None):  # one rank, or a collective of no bytes NCCL discards
            return core.add_delay(0.0, 0.0, [begin], tag), 0.0
        if algo == "halving_doubling":
            return self._halving_doubling(op, comm, S, begin, tag), analytical
        lat = latency_s(op, algo, S, comm, proto, cost)
        wire = 1.0 / _efficiency(op, algo, proto, comm, cost)
        if algo == "tree":
            return self._barrier(self._tree(comm, S, lat, begin, tag, wire), tag), analytical
        if algo == "ring":
            return self._barrier(self._ring(op, comm, S, lat, begin, tag, wire), tag), analytical
        if algo == "sharp":
            sharp = self._sharp(comm.ranks, sharp_bytes_per_byte(n, cost))
            return self._barrier([self._reduction([sharp], S, lat, begin, tag)], tag), analytical
        if algo in ("nvls", "nvls_tree", "nvls_sharp"):
            return self._barrier([self._nvls_pipeline(op, algo, comm, S, lat, begin, tag)], tag), analytical
        # Hierarchical: three phases joined by barriers; the latency is paid once, by the
        # first phase. Domains of one rank have no intra-domain phase; the others' rings leave the shards
        # on their first m ranks, the rails' ends (_head_ring_shares).
        m = comm.heads
        domains = [x for x in comm.domains if len(x) > 1]
        first = [i for x in domains for i in self._ring("reduce_scatter", comm.within(x), S, lat, begin, tag,
                                                        heads=m)]
        mid = self._barrier(first, tag)
        second = [i for r in comm.rails() for i in self._ring("all_reduce", comm.across(r), S / m, 0.0, mid, tag)]
        mid = self._barrier(second, tag)
        third = [i for x in domains for i in self._ring("all_gather", comm.within(x), S, 0.0, mid, tag, heads=m)]
        return self._barrier(third, tag), analytical

    def _nvls_pipeline(self, op: str, algo: str, comm: _Comm, S: float, latency: float, after: int, tag: str) -> int:
        """NVLS in one domain, or NVLS in each domain joined across domains by each rail's
        double binary tree (NVLSTree) or SHARP tree (NVLS+SHARP), as one pipelined flow: NCCL
        runs its scatter, reduce, network and broadcast warps at once over chunks, so the
        slowest stage paces it. The first m ranks of each domain are its heads (connect.cc:
        minHeadNum; m = n in one domain). Counted in bytes of one rail's S/m, so that the
        network, where other traffic meets it, shares its links with it by bytes as with any
        flow; its NVLink legs carry m (a head m + 1) bytes per byte. Held to the
        communicator's NVLS ceiling (:func:`nvls_ceiling_busbw_Bps`)."""
        cost, n, d = self.cost, comm.n, comm.n_domains
        m = n if algo == "nvls" else comm.heads
        heads = [np.where(np.arange(len(x)) < m, 1.0, 0.0) for x in comm.domains]
        trees = [self._nvls(x, m + h, h + m) for x, h in zip(comm.domains, heads)]
        if algo == "nvls_tree":
            trees.append(self._dtrees(comm))
        elif algo == "nvls_sharp":
            trees += [self._sharp(r, sharp_bytes_per_byte(n, cost)) for r in comm.rails()]
        ceiling = nvls_ceiling_busbw_Bps(comm.view, cost, d, m if algo == "nvls_tree" else 0) * _busbw_to_algbw(op, n)
        return self._reduction(trees, S / m, latency, after, tag, ceiling / m)

    # -- results -------------------------------------------------------------------------------

    def table(self, delays: pa.Table) -> pa.Table:
        """The ``collectives`` table: one row per collective, nccl-tests' algbw and busbw."""
        rows = self.rows
        ids = delays["delay_id"].to_numpy()
        finish: np.ndarray = delays["finish_s"].to_numpy(zero_copy_only=False)

        def at(a: np.ndarray) -> np.ndarray:
            return finish[np.searchsorted(ids, np.asarray(a, dtype=np.int64))]

        end = np.array([r[0] for r in rows], dtype=np.int64)
        begin = np.array([r[6] for r in rows], dtype=np.int64)
        start_s, finish_s = at(begin), at(end)
        n = np.array([r[4] for r in rows], dtype=np.int64)
        size = np.array([r[5] for r in rows], dtype=np.float64)
        ops = [r[2] for r in rows]
        duration = finish_s - start_s
        analytical = np.array([r[7] for r in rows], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            algbw = np.where(duration > 0, size / duration, np.nan)
        # nccl-tests' factor for its ops; a MoE dispatch or combine reports its bottleneck
        # bandwidth. Once per (op, ranks): a training step has few of them and 10^5-10^6 rows.
        keys = list(zip(ops, n.tolist()))
        per = {(o, k): conventions.busbw_factor(o, k) if k > 0 and o in conventions.OPS else 1.0 for o, k in set(keys)}
        factor = np.array([per[key] for key in keys], dtype=np.float64)
        return pa.table({
            "collective_id": pa.array(end),
            "communicator": pa.array([r[1] for r in rows], type=pa.int64()),
            # Typed, so that a run without collectives has the same schema (not values=null).
            "op": pa.array(ops, pa.string()).dictionary_encode(),
            "algorithm": pa.array([r[3] for r in rows], pa.string()).dictionary_encode(),
            "protocol": pa.array([r[8] for r in rows], pa.string()).dictionary_encode(),
            "n_ranks": pa.array(n),
            "size_bytes": pa.array(size),
            "start_s": pa.array(start_s, mask=np.isnan(start_s)),
            "finish_s": pa.array(finish_s, mask=np.isnan(finish_s)),
            "algbw_Bps": pa.array(algbw, mask=np.isnan(algbw)),
            "busbw_Bps": pa.array(algbw * factor, mask=np.isnan(algbw)),
            "analytical_s": pa.array(analytical),
            # What the fabric's sharing added to the idle-fabric time: the flow result is the
            # truth, and this difference, contention, is what the simulation is for.
            "contention_s": pa.array(duration - analytical, mask=np.isnan(duration)),
        })


def _int64s(values: list[int]) -> np.ndarray:
    """A list of ints as an int64 array (np.fromiter: faster than np.array on a long list)."""
    return np.fromiter(values, np.int64, len(values))


def _label(op: str, tag: str | None) -> str:
    """What a collective's activities are tagged: its tag, else its op."""
    return tag if tag is not None else op


def _ring_edges(op: str, comm: _Comm, heads: int | None) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None, float]]:
    """Per channel of a ring (module docs): its edges' sources and destinations, each edge's
    share of the channel's bytes (None: all alike), and the channel's bytes per byte of S."""
    n, d, p = comm.n, len(comm.domains), comm.ppn
    volume = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n}.get(op, 1.0)
    channels = p if d > 1 and p >= 2 else 1
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, float]] = []
    for c in range(channels):
        if channels == 1:
            order = np.concatenate(comm.domains)
        else:
            order = np.concatenate([np.roll(x, -((c - k) % p)) for k, x in enumerate(comm.domains)])
        share: np.ndarray | None = None
        if op in ("broadcast", "reduce"):  # a chain from (or to) the root, ranks[0]
            root = int(np.flatnonzero(order == comm.ranks[0])[0])
            order = np.roll(order, -root)
            src, dst = order[:-1], order[1:]
            if op == "reduce":
                src, dst = dst[::-1], src[::-1]
        else:
            src, dst = order, np.roll(order, -1)
            if heads is not None:
                shares = _head_ring_shares(n, heads)
                if op == "all_gather":
                    shares = np.roll(shares, -1)
                volume = float(shares.max())
                keep = shares > 0
                src, dst, share = src[keep], dst[keep], shares[keep] / shares.max()
        out.append((np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64), share,
                    volume / channels))
    return out
