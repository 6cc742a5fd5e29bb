"""Scenarios: flows and delays on a topology, joined into a DAG by dependencies, and run."""

from __future__ import annotations

import contextlib
import functools
import math
import pickle
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypeVar, cast, overload

import numpy as np

from . import _core
from ._checks import (
    U64,
    flag,
    integer,
    integers,
    parsed,
    quantities,
    real,
    share_weight,
    shown,
)
from .collectives.communicator import applied_fabric, collective_size, communicator
from .collectives.construction import Builder
from .collectives.cost.model import checked_cost_model
from .collectives.moe import add_moe
from .exceptions import InvalidArgumentError, ScenarioRunningError
from .fabrics import Topology
from .fabrics.links import name_array
from .fabrics.topology import _fault
from .progress import AUTO_DELAY_S, RunProgress, ToleranceHint
from .progress import enabled as progress_enabled
from .results import Result
from .scenario_args import (
    ProgressCallback,
    both_callbacks,
    checked_after,
    checked_progress,
    checked_tag,
    kept,
    room_for_flows,
    routes_as_rows,
)
from .tenancy import Job, jobs_tables, new_job
from .units import bandwidth_Bps as _bandwidth_Bps
from .units import duration_s as _duration_s
from .units import size_bytes as _size_bytes

__all__ = ["Scenario"]

_Method = TypeVar("_Method", bound=Callable[..., Any])


@overload
def _change(method: _Method, *, precheck: Callable[..., Any] | None = None) -> _Method: ...
@overload
def _change(method: None = None, *, precheck: Callable[..., Any] | None = None) -> Callable[[_Method], _Method]: ...


def _change(method: Callable[..., Any] | None = None, *,
            precheck: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """A method that changes the scenario: refused while it runs, and done whole before a run
    can start (the lock), so that a run started by another thread cannot come between the
    check and the core's calls (PyO3's bare "Already borrowed", half a collective left in).
    ``precheck(self, *args, **kwargs)`` runs first, before the arguments are copied for
    pickling: a memory check that must refuse before anything is made."""
    if method is None:
        return functools.partial(_change, precheck=precheck)
    wrapped: Callable[..., Any] = method  # not None inside changing() either, for type checkers
    name = wrapped.__name__

    @functools.wraps(wrapped)
    def changing(self: Scenario, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self._refuse_while_running(name)
            if precheck is not None:
                precheck(self, *args, **kwargs)
            if self._depth:  # made by an outer change (a job's call, a training step): kept there
                return wrapped(self, *args, **kwargs)
            # Pickling: the call is kept, to be replayed where the scenario is unpickled, with
            # arguments the caller can no longer change (and an iterator read once, here).
            args = tuple(kept(a) for a in args)
            kwargs = {k: kept(v) for k, v in kwargs.items()}
            first, n_faults = self._core.n_activities, self._core.n_faults
            self._depth += 1
            try:
                out = wrapped(self, *args, **kwargs)
            except BaseException:  # Ctrl-C too: nothing of a change that failed stays
                self._undo_from(first, n_faults)
                raise
            finally:
                self._depth -= 1
            self._calls.append((name, args, kwargs))
            self._call_spans.append((first, self._core.n_activities))
            self._n_recorded = (self._core.n_activities, self._core.n_faults)
            return out

    return changing


# Values a kept call holds as they are: nothing can change them (the types, exactly, that most
# elements of a list have, for a fast check of each).
class Scenario:
    """Flows between nodes of a topology and delays (compute time), joined by dependencies.

    Every ``add_*`` returns an activity id (flows and delays share one id space) that later
    activities can wait for with ``after=``. ``seed`` drives ECMP hashing.

    ``routing`` overrides how flows cross a generated fabric: "ecmp" (each flow hashed onto
    one path; collisions are real; a collective's transfers, its ring and tree edges as its
    direct and halving-doubling flows, are split over the planes of a multi-plane fabric, as
    NCCL stripes its channels over the NIC's ports, and hashed within each; a SHARP tree
    climbs to one root switch, as SHARP builds it) or "adaptive" (spread evenly over every
    equal-cost next hop), for the scale-out tier, or a dict ``{"scale_up": ...,
    "scale_out": ...}`` per tier (NVLS uses every NVSwitch chip either way).
    ``cost_model`` (a :class:`fabricsim.CostModel`) holds the constants of its collectives:
    NVLS efficiency, channel ceilings, latencies, protocol overheads and, where it sets them,
    the payload efficiencies the fabric is rebuilt with.
    By default NVLink sprays and the scale-out tier follows its fabric (adaptive on
    InfiniBand, ECMP on Ethernet unless the fabric was built with ``routing="adaptive"``).
    "adaptive" for a tier the topology does not have (any tier of a plain topology or a PCIe
    server) is refused: there flows are hashed onto one shortest path.

    Example::

        sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"), seed=1)
        compute = sc.add_delay("1ms", tag="backward")
        sc.add_collective("all_reduce", None, "256MiB", after=compute)   # all 16 GPUs
        result = sc.run()
        result.collectives.column("algorithm")   # ["nvls_tree"], what NCCL picks here
    """

    def __init__(self, topology: Topology, *, seed: int = 0, routing: Any = None, cost_model: Any = None) -> None:
        if not isinstance(topology, Topology):
            raise InvalidArgumentError(f"topology must be a fabricsim.Topology, got {type(topology).__name__}")
        topology_arg = topology
        #: The constants its collectives use (fabricsim.CostModel; the defaults unless given).
        self.cost_model = checked_cost_model(cost_model)
        topology = applied_fabric(topology, self.cost_model)
        self.topology = topology
        self.seed = integer("seed", seed, U64)
        if routing is None or isinstance(routing, str):
            tiers = {"scale_out": routing}
        elif isinstance(routing, dict):
            unknown = set(routing) - {"scale_up", "scale_out"}
            if unknown:
                raise InvalidArgumentError(
                    f"routing tiers are 'scale_up' and 'scale_out', got {sorted(unknown)}"
                )
            tiers = routing
        else:
            raise InvalidArgumentError(f"routing must be 'ecmp', 'adaptive' or a dict per tier, got {routing!r}")
        for tier, mode in tiers.items():
            if mode is not None and (not isinstance(mode, str) or mode not in ("ecmp", "adaptive")):
                raise InvalidArgumentError(f"routing of {tier} must be 'ecmp' or 'adaptive', got {mode!r}")
        # Spreading needs a structure to spread over; without one every flow is hashed onto
        # one shortest path whatever the routing says (which then read "adaptive").
        structure = topology._core.structure()
        for tier, part, what in (("scale_up", "domain", "NVLink domains"), ("scale_out", "scale_out", "scale-out Clos")):
            if tiers.get(tier) == "adaptive" and part not in structure:
                raise InvalidArgumentError(
                    f"routing of {tier} must be 'ecmp' or None here, got 'adaptive': this topology has no "
                    f"{what} to spread flows over, so each flow is hashed onto one shortest path"
                )
        # Each mode was checked above to be "ecmp", "adaptive" or None.
        modes = cast("dict[str, Literal['ecmp', 'adaptive'] | None]", tiers)
        self._core = _core.Scenario(
            topology._core, self.seed, modes.get("scale_up"), modes.get("scale_out")
        )
        self._collectives: Builder | None = None
        # Pickling: what built the scenario, replayed where it is unpickled (__reduce__).
        self._init_args = (topology_arg, seed, kept(routing), cost_model)
        self._calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        # The activity ids each kept call made, [first, end): a job's own (fabricsim.tenancy).
        self._call_spans: list[tuple[int, int]] = []
        self._depth = 0  # changes under way (only the outermost is kept)
        self._n_recorded = (0, 0)  # (activities, faults) the kept calls made
        #: Jobs (tenants) on this scenario by name, in the order added (:meth:`add_job`).
        self.jobs: dict[str, Job] = {}
        self._jobs_report = True  # False for a job's run alone (fabricsim.tenancy)
        self._n_runs = 0  # under way: a progress callback may run it again
        # Held by a change for its whole length and to count a run in or out (_change).
        self._lock = threading.RLock()

    def _refuse_while_running(self, what: str) -> None:
        # The core is borrowed by the run: PyO3 would refuse with a bare "Already borrowed".
        if self._n_runs:
            raise ScenarioRunningError(
                f"{what} was called while the scenario runs (from its progress callback or another "
                "thread): change a scenario before run() or after it returns"
            )

    @property
    def routing(self) -> dict[str, str]:
        """How flows added from now on cross each tier."""
        up, out = self._core.routing
        return {"scale_up": up, "scale_out": out}

    def usage_of(self, flow_id: int) -> tuple[list[int], list[float]]:
        """A flow's usage list: constraint ids and coefficients. Ids below
        ``topology.n_links`` are links; the next ``topology.structure["n_bundles"]`` (on a
        generated fabric; a plain topology has none) are pooled bundles of links; the rest
        are this scenario's reduction engines (the SHARP and NVLS switches of its
        collectives), in the order the collectives made them. A run also loads, with each
        bundle, its members that other flows are pinned to, by their share of its capacity
        (sprayed traffic spreads evenly), so that those links stay within capacity.

        Example::

            hgx = fs.hgx_h100()
            sc = fs.Scenario(hgx)
            f = sc.add_flow(0, 1, "1MiB")   # sprayed over the NVSwitch chips: no single route
            sc.route_of(f), sc.usage_of(f)  # ([], ([288, 297], [1.0, 1.0]))
            hgx.n_links                     # 288: both are bundles, GPU 0's links up, GPU 1's down
        """
        return self._core.usage_of(integer("flow_id", flow_id))

    @property
    def n_activities(self) -> int:
        """Flows, delays and collectives added so far (they share one id space)."""
        return self._core.n_activities

    @_change
    def add_flow(
        self,
        src: Any,
        dst: Any,
        size_bytes: float | str,
        *,
        start_s: float | str = 0.0,
        after: int | Iterable[int] = (),
        route: Iterable[int] | None = None,
        tag: str | None = None,
        max_rate_Bps: float | str | None = None,
        weight: float = 1.0,
    ) -> int:
        """A flow of ``size_bytes`` from ``src`` to ``dst``, starting no earlier than
        ``start_s`` and after every activity in ``after``. ``route`` is a list of link ids, a
        path from src to dst crossing each link at most once and reaching dst only at its end
        (default: ECMP over shortest paths); ``max_rate_Bps`` caps its rate; ``tag`` (a string,
        or None) labels it in the results. ``weight`` is its share weight: at a bottleneck,
        flows get bandwidth in proportion to their weights (weighted max-min, as a switch's
        weighted traffic classes share a port); 1 by default, within [1e-6, 1e6].

        Example::

            # a line a -> b -> c at 100 GB/s a link, 1 us each
            t = fs.Topology.from_arrays([0, 1], [1, 2], "100GB/s", "1us", node_names=["a", "b", "c"])
            sc = fs.Scenario(t)
            first = sc.add_flow("a", "c", "1GB")
            sc.add_flow("b", "c", "1GB", after=first, tag="second")
            sc.run().flows.column("finish_s")   # [0.010002, 0.020003]
        """
        topo = self.topology
        with self._weighted(weight):
            return self._core.add_flow(
                topo._node("src", src),
                topo._node("dst", dst),
                parsed("size_bytes", _size_bytes, size_bytes),
                parsed("start_s", _duration_s, start_s),
                checked_after(after),
                None if route is None else integers("route", route).tolist(),
                checked_tag(tag),
                None if max_rate_Bps is None else parsed("max_rate_Bps", _bandwidth_Bps, max_rate_Bps),
            )

    @_change(precheck=room_for_flows)
    def add_flows(
        self,
        src: Any,
        dst: Any,
        size_bytes: Any,
        *,
        start_s: Any = 0.0,
        tag: str | None = None,
        routes: Any = None,
        after: int | Iterable[int] = (),
        weight: float = 1.0,
    ) -> np.ndarray:
        """Many flows at once; returns their ids. ``src`` and ``dst`` are sequences of nodes
        (not sets: flow i goes from ``src[i]`` to ``dst[i]``); ``size_bytes`` and ``start_s``
        one value for every flow or one per flow, each a number or a unit string ("1GiB",
        "5us"), as in :meth:`add_flow`.

        ``routes`` is None (ECMP), one list of link ids per flow (``[[0, 2], [1, 3]]``), or
        compressed rows: a tuple ``(offsets, link_ids)`` of ``n_flows + 1`` offsets from 0 and
        the link ids, flow i taking ``link_ids[offsets[i]:offsets[i + 1]]``. A tuple of two is
        always read as compressed rows, so give per-flow routes as a list.
        Every flow waits for every activity in ``after``, carries ``tag`` (a string, or None)
        and has the share weight ``weight`` (:meth:`add_flow`).
        All or nothing: if one element is bad, none is added and the error names it.

        Example::

            t = fs.Topology.from_arrays([0, 1], [1, 2], "100GB/s", "1us", node_names=["a", "b", "c"])
            sc = fs.Scenario(t)
            ids = sc.add_flows(["a", "b"], ["c", "c"], ["1GB", "3GB"])   # array([0, 1])
            sc.run().flows.column("finish_s")   # [0.020002, 0.040001]: b -> c is shared
        """
        src_ids = self.topology._nodes("src", src)
        n = src_ids.shape[0]
        dst_ids = self.topology._nodes("dst", dst)
        offsets, links = (None, None) if routes is None else routes_as_rows(routes, n)
        with self._weighted(weight):
            return self._core.add_flows(
                src_ids,
                dst_ids,
                quantities("size_bytes", size_bytes, n, _size_bytes),
                quantities("start_s", start_s, n, _duration_s),
                checked_tag(tag),
                offsets,
                links,
                checked_after(after),
            )

    @_change
    def add_delay(
        self,
        duration_s: float | str,
        *,
        start_s: float | str = 0.0,
        after: int | Iterable[int] = (),
        tag: str | None = None,
    ) -> int:
        """A delay (compute time) of ``duration_s`` after ``after`` and not before ``start_s``,
        labelled ``tag`` (a string, or None) in the results.

        Example::

            t = fs.Topology.from_arrays([0, 1], [1, 2], "100GB/s", "1us", node_names=["a", "b", "c"])
            sc = fs.Scenario(t)
            compute = sc.add_delay("2ms", tag="compute")
            sc.add_flow("a", "c", "100MB", after=compute)   # 1 ms on the wire, after it
            sc.run().summary.makespan_s   # 0.003002
        """
        return self._core.add_delay(
            parsed("duration_s", _duration_s, duration_s), parsed("start_s", _duration_s, start_s), checked_after(after), checked_tag(tag)
        )

    @_change
    def add_collective(
        self,
        op: str,
        ranks: Any,
        size_bytes: float | str | None = None,
        *,
        algorithm: str = "auto",
        protocol: str = "auto",
        after: int | Iterable[int] = (),
        start_s: float | str = 0.0,
        tag: str | None = None,
        sizes: Any = None,
        weight: float = 1.0,
    ) -> int:
        """A collective ``op`` ("all_reduce", "reduce_scatter", "all_gather", "broadcast",
        "reduce", "all_to_all", "send_recv") over ``ranks`` (GPU ids, in order), of
        ``size_bytes`` as nccl-tests counts it; ``sizes`` (instead of ``size_bytes``) is an
        all-to-all-v matrix of what rank i sends to rank j, numbers of bytes or strings such as
        "1MiB". ``algorithm``: "auto" (NCCL's choice for this fabric and size),
        "ring", "tree", "halving_doubling", "p2p", "direct", "nvls", "sharp", "hierarchical" or
        "nvls_sharp" (see :mod:`fabricsim.collectives`); ``protocol``: "auto" (NCCL's choice),
        "simple", "ll128" or "ll" (ring and tree only). Returns an id that flows, delays and
        collectives can wait for; ``Result.collectives`` reports it. ``tag`` (a string; default
        the op) labels its flows and delays in the results. ``weight``: its flows' share
        weight (:meth:`add_flow`).

        Example::

            sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
            grads = sc.add_collective("all_reduce", None, "1GiB")   # every GPU, NCCL's algorithm
            sc.add_collective("all_gather", range(8), "256MiB", algorithm="ring", after=grads)
            reduced, gathered = sc.run().collectives.to_pylist()
            reduced["algorithm"], gathered["algorithm"]   # ('nvls_tree', 'ring')
            reduced["finish_s"], gathered["finish_s"]     # about 4.4 ms and 5.1 ms
        """
        if self._collectives is None:
            self._collectives = Builder(self)
        if ranks is not None and not isinstance(ranks, np.ndarray):  # an iterator is read once, here
            ranks = integers("ranks", ranks)
        size, sizes = collective_size(op, size_bytes, sizes, communicator(self.topology, op, ranks).n)
        with self._weighted(weight):
            return self._collectives.add(op, ranks, size, algorithm, checked_after(after),
                                         parsed("start_s", _duration_s, start_s), checked_tag(tag), sizes, protocol)

    @_change
    def add_moe_dispatch(self, routing: Any, ranks: Any = None, *, bytes_per_token: float | str,
                         mode: str = "deepep", after: int | Iterable[int] = (), start_s: float | str = 0.0,
                         tag: str | None = None, weight: float = 1.0) -> int:
        """A mixture-of-experts dispatch of ``routing`` (a :class:`fabricsim.MoeRouting` over
        ``ranks``, GPU ids; None: every GPU), ``bytes_per_token`` each, as ``mode`` runs it:
        "deepep" (once per node over the network, on the rail, then NVLink), "deepep_ll" (a copy
        per expert straight to its GPU) or "all_to_all" (NCCL's all-to-all-v;
        :mod:`fabricsim.collectives.moe`). ``after``, ``start_s``, ``tag``, ``weight`` as for
        :meth:`add_collective`. Its row (op "moe_dispatch") has DeepEP's bottleneck bandwidth.

        Example::

            import numpy as np
            fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            ids = np.random.default_rng(0).integers(0, 64, size=(16, 4096, 1))   # top-1 of 64 experts
            routing = fs.MoeRouting.from_topk(ids, n_experts=64)
            sc = fs.Scenario(fabric)
            d = sc.add_moe_dispatch(routing, bytes_per_token=7168 + 224)           # FP8 and its scales
            sc.add_moe_combine(routing, bytes_per_token=2 * 7168, after=d)         # BF16 back
            sc.run().collectives.select(["op", "algorithm", "busbw_Bps"])
        """
        return self._moe("dispatch", routing, ranks, bytes_per_token, mode, after, start_s, tag, weight)

    @_change
    def add_moe_combine(self, routing: Any, ranks: Any = None, *, bytes_per_token: float | str,
                        mode: str = "deepep", after: int | Iterable[int] = (), start_s: float | str = 0.0,
                        tag: str | None = None, weight: float = 1.0) -> int:
        """The combine of :meth:`add_moe_dispatch`, op "moe_combine": each token's expert outputs
        back to its rank (in "deepep" a node's outputs of one token added on the forwarding GPU).

        Example::

            routing = fs.MoeRouting.from_counts([[512.0] * 16] * 8, top_k=4)   # for 8 ranks and 16 experts
            sc = fs.Scenario(fs.hgx_h100())
            sc.add_moe_combine(routing, bytes_per_token="14KiB", mode="all_to_all")
            sc.run().collectives.column("algorithm")   # ['all_to_all']
        """
        return self._moe("combine", routing, ranks, bytes_per_token, mode, after, start_s, tag, weight)

    def _moe(self, kind: str, routing: Any, ranks: Any, nbytes: Any, mode: str, after: Any, start_s: Any, tag: Any,
             weight: Any) -> int:
        self._collectives = self._collectives or Builder(self)
        ranks = ranks if ranks is None or isinstance(ranks, np.ndarray) else integers("ranks", ranks)
        with self._weighted(weight):
            return add_moe(self._collectives, kind, ranks, routing, nbytes, mode, checked_after(after),
                           parsed("start_s", _duration_s, start_s), checked_tag(tag))

    @contextlib.contextmanager
    def _weighted(self, weight: Any) -> Iterator[None]:
        """Gives the flows added inside the block the share weight ``weight``, checked before
        anything is added (so a bad one adds nothing)."""
        w = share_weight(weight)
        first = self._core.n_activities
        yield
        if w != 1.0:
            self._core.set_weights(first, self._core.n_activities, w)

    @_change
    def add_fault(
        self,
        *,
        at_s: float | str,
        links: Any = (),
        nodes: Any = (),
        planes: Any = (),
        factor: float = 0.0,
        until_s: float | str | None = None,
    ) -> None:
        """From ``at_s`` on, links, every link of some nodes (switches, NICs, GPUs) or whole
        scale-out planes are down (``factor=0``) or degraded (capacity times ``factor``, in
        [0, 1]); ``until_s`` brings them back to full capacity then (a fault with
        ``factor=1`` at a later time does the same). The last fault on a link counts.
        ``links`` are link ids or a selection by the topology's links table
        (``{"tier": "leaf-spine", "plane": 0}``, as :meth:`Topology.links_where` takes it).

        When the run reaches ``at_s``, every flow routed by the fabric is routed again as on
        ``topology.fail(...)``: ECMP re-hashes over the survivors, adaptive routing loses
        the failed members. A transferring flow moves with the bytes it has left; one left
        without any path fails then, and one that has not started fails when it would start
        unless a repair comes first (a zero-byte flow moves nothing, so it never fails).
        Failures show in the flows table (``status``, ``failed_s``, ``error``) and skip what
        waits for them; the run completes.
        Flows given an explicit ``route`` keep it (and fail on a down link).

        Example::

            t = fs.Topology.from_arrays([0, 1], [1, 2], "100GB/s", "1us", node_names=["a", "b", "c"])
            sc = fs.Scenario(t)
            sc.add_flow("a", "c", "1GB")   # alone, 10 ms
            sc.add_fault(at_s="5ms", links=[1], factor=0.5)   # b -> c at half capacity from 5 ms
            sc.run().flows.column("finish_s")   # [0.015004]: the second half at 50 GB/s
        """
        ids, factor = _fault(self.topology, links, nodes, planes, factor)
        at = parsed("at_s", _duration_s, at_s)
        until = None if until_s is None else parsed("until_s", _duration_s, until_s)
        # Checked whole before the fault is added: an until_s the core refuses after the fault
        # went in (inf) left the links down for the whole run.
        if until is not None and not at < until < math.inf:
            raise InvalidArgumentError(f"until_s must be a finite time after at_s={at!r}, got {until!r}")
        self._core.add_fault(at, ids, factor)
        if until is not None:
            self._core.add_fault(until, ids, 1.0)

    @_change
    def add_job(
        self,
        name: str,
        *,
        n_gpus: int | None = None,
        gpus: Any = None,
        placement: str = "packed",
        weight: float = 1.0,
    ) -> Job:
        """A job (tenant) named ``name`` owning ``n_gpus`` GPUs placed by ``placement``
("packed": whole free NVLink domains first, in order; "random": whole free domains
        drawn with the scenario's seed, as a batch scheduler hands out the free nodes of a
        fragmented cluster; "spread": one GPU per domain in turn) or the GPUs ``gpus`` given
        in rank order. Its flows share bottlenecks with ``weight`` (weighted max-min, as a
        switch's traffic classes or NCCL's traffic class let a tenant have a larger share).
        Add its work through the returned :class:`~fabricsim.tenancy.Job` (ranks are the job's
        own, 0..n_gpus-1); ``Result.jobs`` then reports each job's time shared and alone.

        Example::

            sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"))
            a = sc.add_job("a", n_gpus=16)
            b = sc.add_job("b", n_gpus=16, placement="spread", weight=2.0)
            a.add_collective("all_reduce", None, "256MiB")
            b.add_collective("all_to_all", None, "256MiB")
            print(sc.run().jobs)
        """
        job = new_job(self, name, n_gpus, gpus, placement, weight)
        self.jobs[job.name] = job
        return job

    @_change
    def _job_call(self, job_name: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """What a :class:`~fabricsim.tenancy.Job` adds, as one kept call (replayed by pickling)
        whose activities the job owns."""
        return getattr(self.jobs[job_name], "_" + method)(*args, **kwargs)

    @contextlib.contextmanager
    def _one_change(self, name: str, args: tuple[Any, ...]) -> Iterator[None]:
        """Internal: what the block adds straight through the core (code whose arguments are
        known good, such as a training step's builder, skipping the add_* checks) as one
        change, as :func:`_change` makes one: refused while the scenario runs, done whole
        under the lock, and, where it is the outermost change, kept for pickling as the call
        ``self.name(*args)``, which must add the same activities again. ``args`` are kept as
        they are (not copied): the caller gives values it will not change."""
        with self._lock:
            self._refuse_while_running(name)
            if self._depth:  # inside an outer change (a job's call): kept there
                yield
                return
            first, n_faults = self._core.n_activities, self._core.n_faults
            self._depth += 1
            try:
                yield
            except BaseException:  # Ctrl-C too: nothing of a change that failed stays
                self._undo_from(first, n_faults)
                raise
            finally:
                self._depth -= 1
            self._calls.append((name, args, {}))
            self._call_spans.append((first, self._core.n_activities))
            self._n_recorded = (self._core.n_activities, self._core.n_faults)

    def _undo_from(self, first: int, n_faults: int) -> None:
        """Takes out what a change that failed partway made: the activities from ``first`` on,
        what the collectives and jobs recorded of them, and the faults from ``n_faults`` on."""
        self._core.truncate(first)
        self._core.truncate_faults(n_faults)
        if self._collectives is not None:
            self._collectives.forget_from(first)
        for job in self.jobs.values():
            job._forget_from(first)

    def _training_step(self, step: Any, start: int | None = None) -> Any:
        """Internal: adds a :class:`~fabricsim.training.TrainingStep` (the builder keeps it as
        this one call through :meth:`_one_change`; unpickling replays it). The step adds
        itself (``TrainingStep._into``), so that the scenario never imports the workloads."""
        return step._into(self, start)

    @_change
    def add_dependency(self, activity_id: int, after_id: int) -> None:
        """Makes ``activity_id`` wait for ``after_id``. A cycle is refused when the scenario runs.

        Example::

            t = fs.Topology.from_arrays([0, 1], [1, 2], "100GB/s", "1us", node_names=["a", "b", "c"])
            sc = fs.Scenario(t)
            first = sc.add_flow("a", "c", "1GB")
            second = sc.add_flow("b", "c", "1GB")
            sc.add_dependency(second, first)   # as add_flow(..., after=first) would
            sc.run().flows.column("finish_s")   # [0.010002, 0.020003]
        """
        a, b = integer("activity_id", activity_id), integer("after_id", after_id)
        # A job's activity waits only for its own; other work may wait for anything (it is
        # emptied in each job's alone run, so it cannot change one).
        owner_a, owner_b = self._owner_of(a), self._owner_of(b)
        if owner_a is not None and owner_a != owner_b:
            def whose(owner: str | None) -> str:
                return "no job" if owner is None else f"job {owner!r}"

            raise InvalidArgumentError(
                f"activity {a} belongs to {whose(owner_a)} and activity {b} to {whose(owner_b)}: a job's work waits only "
                "for its own (each job is also run alone, without the rest)")
        self._core.add_dependency(a, b)

    def _owner_of(self, activity_id: int) -> str | None:
        """The name of the job that made an activity, or None."""
        return next((job.name for job in self.jobs.values() if job._owns(activity_id)), None)

    def route_of(self, flow_id: int) -> list[int]:
        """Link ids a flow crosses, in path order; empty for a delay, a sprayed flow
        (adaptive routing) and a collective's transfer split over the planes of a multi-plane
        fabric under ECMP, which have no single path (:meth:`usage_of` gives what one loads).

        Example::

            fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            sc = fs.Scenario(fabric, routing="ecmp")
            f = sc.add_flow(0, 8, "1MiB")   # GPU 0 to GPU 8, in the other domain
            sc.route_of(f)   # [576, 608, 625, 593]: gpu0 -> nic0 -> leaf0 -> nic8 -> gpu8
        """
        return self._core.route_of(integer("flow_id", flow_id))

    def run(
        self,
        *,
        progress: bool | ProgressCallback | None = None,
        record_rates: bool = False,
        verify_rates: bool = False,
        tolerance: float = 0.0,
    ) -> Result:
        """Simulates to completion and returns the :class:`Result`.

        The GIL is released while the core runs. ``progress``: None (the default) draws a
        progress bar on stderr when stderr is a terminal and the run has taken a second
        (:data:`fabricsim.progress.AUTO_DELAY_S`), nothing in a pipe, a file or a notebook
        without one; True always draws it, False never; a callable gets ``(n_done,
        n_activities, sim_time_s)`` now and then instead. An exact run with many activities
        that has taken long says once (a :class:`~fabricsim.progress.PerformanceHint` warning)
        that ``tolerance=`` exists.
        ``record_rates=True`` keeps every rate change (``Result.rate_changes``): about n^2/2
        rows when n flows start together, so a log that outgrows the memory stops the run with
        :class:`ScenarioTooLargeError`.
        ``verify_rates=True`` re-solves every rate from scratch after every instant and raises
        :class:`InternalError` on any difference with the incremental engine (slow; a check).
        Ctrl-C stops the run with KeyboardInterrupt.

        ``tolerance``: 0 (the default) runs the exact engine. A positive relative tolerance
        runs the fast mode, for many flows of different sizes that start together: the
        flows due to finish within ``tolerance`` times the transfers' age (the time since the
        latest of the transferring flows became ready) after an instant finish with it, each
        at its own projected time, and the others' rates are re-solved once for all of them
        (``Result.mode`` and ``Result.tolerance`` say which ran; docs/performance.md, "Fast
        mode", gives the bound it holds to).

        Example::

            t = fs.Topology.from_arrays([0, 1], [1, 2], "100GB/s", "1us", node_names=["a", "b", "c"])
            sc = fs.Scenario(t)
            sc.add_flows(["a", "b"], ["c", "c"], ["1GB", "3GB"])
            exact = sc.run()
            fast = sc.run(tolerance=1e-3)   # the same scenario again, in the fast mode
            exact.summary.makespan_s, fast.mode   # (0.040001, 'fast')
            print(exact.summary)   # makespan, flows, bytes moved, busiest links
        """
        checked_progress(progress)
        tol = real(tolerance)
        if tol is None or not 0 <= tol < 1:
            raise InvalidArgumentError(
                f"tolerance must be a number in [0, 1) (0: exact; e.g. 1e-3 for the fast mode), got {shown(tolerance)}")
        flag("record_rates", record_rates)
        flag("verify_rates", verify_rates)
        bar: RunProgress | None = None
        callback: ProgressCallback | None = None
        if progress is True or (progress is None and progress_enabled(None)):
            bar = callback = RunProgress(total=self._core.n_activities,
                                         delay=AUTO_DELAY_S if progress is None else 0.0)
        elif callable(progress):
            callback = progress
        if tol == 0:  # the exact engine: a long run is told of the fast mode
            callback = both_callbacks(callback, ToleranceHint())
        with self._lock:  # not while another thread is changing it
            self._n_runs += 1
        raw = None
        try:
            raw = self._core.run(record_rates, callback, verify_rates, tol)
        finally:
            with self._lock:
                self._n_runs -= 1
            if bar is not None:
                if raw is not None:  # a finished run shows as complete, not as it last reported
                    bar.finish(raw["makespan_s"], self._core.n_activities)
                bar.close()
        builder = self._collectives or Builder(self)
        result = Result(raw, self.topology.node_names, builder.edge_bytes_per_byte, name_array(self.topology))
        result.mode, result.tolerance = ("fast" if tol > 0 else "exact"), tol
        result.seed = self.seed
        result.collectives = builder.table(result.delays)
        if self.jobs and self._jobs_report:
            result.jobs, result.job_links = jobs_tables(self, result, tolerance=tol)
        return result

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickling: a scenario travels as what built it, its constructor's arguments (the
        topology or fabric pickles as its own arguments) and every ``add_*`` call in order,
        and is built again by replaying them where it is unpickled, so that it runs to the
        same result. What a run returned is not part of it."""
        with self._lock:
            self._refuse_while_running("pickling")
            if (self._core.n_activities, self._core.n_faults) != self._n_recorded:
                raise pickle.PicklingError(
                    "this scenario was changed through its core, not its add_* methods, so it cannot "
                    "be rebuilt from its calls")
            return (_unpickled_scenario, (type(self), self._init_args, tuple(self._calls), self._n_recorded))

    def __repr__(self) -> str:
        return f"Scenario({self.topology!r}, seed={self.seed}, n_activities={self.n_activities})"


def _unpickled_scenario(cls: type[Scenario], init_args: tuple[Any, ...], calls: tuple[Any, ...],
                        n_recorded: tuple[int, int]) -> Scenario:
    """A pickled :class:`Scenario`, built again by replaying its calls (``Scenario.__reduce__``)."""
    topology, seed, routing, cost_model = init_args
    sc = cls(topology, seed=seed, routing=routing, cost_model=cost_model)
    for name, args, kwargs in calls:
        getattr(sc, name)(*args, **kwargs)
    if (sc._core.n_activities, sc._core.n_faults) != tuple(n_recorded):
        raise pickle.UnpicklingError(
            f"the unpickled scenario has {sc._core.n_activities} activities and {sc._core.n_faults} faults where "
            f"the pickled one had {n_recorded[0]} and {n_recorded[1]}: built by another fabricsim version?")
    return sc
