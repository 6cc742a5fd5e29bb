"""Collectives as NCCL runs them, in two fidelities (DESIGN.md section 2).

**flow**: a pipelined ring (or reduction tree) is one *coupled flow* whose usage is the union
of its edges' routes, so the slowest edge paces it; phases (hierarchical algorithms) are a DAG
joined by zero-length barriers; all-to-all and send/recv are independent flows.

**analytical**: the alpha-beta closed form of the same construction on an idle fabric: alpha
from NCCL's latency model (`nccl_model`, Simple protocol), beta from the per-GPU NVLink and
network bandwidths. On an uncongested fabric the two agree; the difference is contention.

Algorithms (``size_bytes`` is nccl-tests' "size", ``S``; ``n`` ranks, ``D`` NVLink domains of
``p`` ranks each; ``B_nvl``, ``B_net`` per-GPU NVLink and network payload rates):

* ``ring``: every op. All-reduce moves ``2(n-1)/n S`` over every ring edge, reduce-scatter and
  all-gather ``(n-1)/n S``, broadcast/reduce ``S`` along a chain from the root. Across domains
  the ring runs ``p`` channels: channel ``c`` enters domain ``d`` at local GPU ``c - d`` and
  leaves from the GPU before it, on the same rail as the next domain's entry, so each GPU is the
  exit of one channel and each NIC carries one channel's edge (no PXN hop is modelled).
* ``direct``: all-to-all (``S/n`` to every peer, or a size matrix) and send/recv (rank i to
  rank i+1, as nccl-tests' sendrecv).
* ``nvls``: all-reduce inside one NVSwitch domain: every GPU sends and receives ``S(1 + 1/n)``
  (hardware.md 3.3), and the switch's reduction engine runs at NCCL's NVLS efficiency (0.85
  Hopper, 0.74 Blackwell) of the GPUs' NVLink bandwidth.
* ``sharp``: all-reduce across the scale-out fabric with one rank per domain: one flow up and
  down the aggregation tree, every link carrying ``S`` once (switches reduce at line rate;
  their engine is a constraint sized to all their ports).
* ``hierarchical``: ring reduce-scatter in each domain, ring all-reduce of ``S/p`` per rail
  across domains, ring all-gather in each domain.
* ``nvls_sharp``: NVLS reduce-scatter in each domain, SHARP all-reduce of ``S/p`` per rail,
  NVLS all-gather.

``algorithm="auto"`` takes NCCL's choice (`nccl_model.choose`, Simple protocol) among the
algorithms fabricsim models for that fabric; ``hierarchical`` has no NCCL counterpart and is
only used when asked for. Only the Simple protocol is modelled in flows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from . import nccl_conventions, nccl_model
from .exceptions import InvalidArgumentError, UnknownNodeError

__all__ = ["ALGORITHMS", "OPS", "FabricView", "fabric_view", "analytical_s"]

OPS = nccl_conventions.OPS
ALGORITHMS = ("ring", "direct", "nvls", "sharp", "hierarchical", "nvls_sharp")
# NCCL's name for each algorithm whose latency (and auto choice) comes from its model.
_NCCL_NAME = {"ring": "ring", "nvls": "nvls", "sharp": "collnet_direct", "nvls_sharp": "nvls"}
# NVLS reduction efficiency per architecture (tuning.cc:138-144, hardware.md 4.2).
_NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
# Point-to-point (all-to-all, send/recv): NCCL's Simple base latency plus one step over
# NVLink or the network (hardware.md 4.2; NCCL does not tune p2p, this is fabricsim's choice).
_P2P_BASE_S, _P2P_NVLINK_S, _P2P_NET_S = 8.4e-6, 3.4e-6, 14e-6


@dataclass(frozen=True)
class FabricView:
    """What collectives need to know about a fabric, per GPU (bytes/s per direction)."""

    gpus_per_domain: int
    nvlink_Bps: float
    nvlink_link_Bps: float
    net_Bps: float
    nvls: bool
    sharp: bool
    arch: str
    #: Node ids that can be ranks: GPUs, or hosts of a GPU-less Clos; None: any node.
    n_rank_nodes: int | None


def fabric_view(topology) -> FabricView:
    """The per-GPU figures of a generated fabric (or, for a plain topology, of its nodes)."""
    cached = getattr(topology, "_collective_view", None)
    if cached is not None:
        return cached
    parts = getattr(topology, "_parts", None) or {}
    st = topology._core.structure() if parts else {}
    gpu = parts.get("gpu")
    arch = gpu["arch"] if gpu is not None else "hopper"
    nvl_link = nvl = 0.0
    gpd = 1
    nvls = False
    if "domain" in st:
        dom = parts["domain"]
        gpd = int(dom["gpus_per_domain"])
        nvl_link = float(dom["link_Bps"])
        nvl = nvl_link * float(sum(dom["chip_links"]))
        nvls = bool(parts["nvswitch"]["sharp"]) and _NVLS_EFFICIENCY[arch] > 0
    net = 0.0
    sharp = False
    if "scale_out" in st:
        so = st["scale_out"]
        net = float(so["link_Bps"]) * int(so["planes"]) * float(sum(so["endpoint_links"]))
        if st["n_gpus"] > 0 and "nic" in parts:
            net = min(net, min(float(parts["nic"]["host_Bps"]), float(gpu["pcie_Bps"])))
        sharp = bool(parts["switch"]["sharp"]) and parts["switch"]["protocol"] == "infiniband"
    if st.get("n_gpus", 0) > 0:
        n_rank_nodes = int(st["n_gpus"])
    elif "scale_out" in st:
        n_rank_nodes = int(st["n_nics"])
    else:
        n_rank_nodes = None
    view = FabricView(gpd, nvl, nvl_link, net, nvls, sharp, arch, n_rank_nodes)
    try:
        topology._collective_view = view
    except AttributeError:
        pass
    return view


@dataclass
class _Comm:
    ranks: np.ndarray
    domains: list[np.ndarray]  # ranks of each domain the communicator spans, in order
    view: FabricView
    net_Bps: float  # per-rank network rate (the view's, or a plain topology's injection)

    @property
    def n(self) -> int:
        return len(self.ranks)

    @property
    def ppn(self) -> int:
        """Ranks per domain if every domain has as many, else 0."""
        sizes = {len(d) for d in self.domains}
        return sizes.pop() if len(sizes) == 1 else 0

    def within(self, ranks: np.ndarray) -> "_Comm":
        """A communicator of some ranks of one domain."""
        return _Comm(ranks, [ranks], self.view, self.net_Bps)

    def across(self, ranks: np.ndarray) -> "_Comm":
        """A communicator of one rank in each of several domains."""
        return _Comm(ranks, [np.array([g]) for g in ranks], self.view, self.net_Bps)

    def rails(self) -> list[np.ndarray]:
        """Rank k of every domain, for each k (needs ``ppn``)."""
        return [np.array([x[k] for x in self.domains]) for k in range(self.ppn)]


def _comm(topology, ranks: Any) -> _Comm:
    view = fabric_view(topology)
    try:
        arr = np.asarray(ranks)
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise ValueError
    except (ValueError, TypeError):
        raise InvalidArgumentError(f"ranks must be a 1-d sequence of node ids, got {ranks!r}") from None
    arr = arr.astype(np.int64)
    if arr.size < 1:
        raise InvalidArgumentError("a communicator needs at least one rank, got none")
    limit = view.n_rank_nodes if view.n_rank_nodes is not None else topology.n_nodes
    bad = arr[(arr < 0) | (arr >= limit)]
    if bad.size:
        what = "GPU" if view.n_rank_nodes is not None else "node"
        raise UnknownNodeError(f"rank {int(bad[0])} is not a {what} of this fabric ({what}s are 0..{limit - 1})")
    uniq, counts = np.unique(arr, return_counts=True)
    if uniq.size != arr.size:
        raise InvalidArgumentError(f"rank {int(uniq[counts > 1][0])} appears more than once in the communicator")
    # Ranks grouped by domain, domains and ranks within them in the order given.
    dom = arr // view.gpus_per_domain
    _, first, inverse = np.unique(dom, return_index=True, return_inverse=True)
    position = np.argsort(np.argsort(first))[inverse]
    order = np.argsort(position, kind="stable")
    _, starts = np.unique(position[order], return_index=True)
    domains = np.split(arr[order], starts[1:])
    net = view.net_Bps
    if view.n_rank_nodes is None:  # a plain topology: each rank's injection bandwidth
        links = topology.links
        src = links["src"].to_numpy()
        cap = links["capacity_Bps"].to_numpy()
        out = np.bincount(src, weights=cap, minlength=topology.n_nodes)
        net = float(out[arr].min())
    return _Comm(arr, domains, view, net)


def applicable(op: str, comm: _Comm) -> list[str]:
    """The algorithms fabricsim can run for ``op`` on this communicator."""
    if op in ("all_to_all", "send_recv"):
        return ["direct"]
    if op != "all_reduce":
        return ["ring"]
    v, d, p = comm.view, len(comm.domains), comm.ppn
    algos = ["ring"]
    if d == 1 and v.nvls and comm.n > 1:
        algos.append("nvls")
    if d > 1 and p == 1 and v.sharp:
        algos.append("sharp")
    if d > 1 and p > 1:
        algos.append("hierarchical")
        if v.nvls and v.sharp:
            algos.append("nvls_sharp")
    return algos


def _shape(comm: _Comm, n: int, n_nodes: int) -> nccl_model.CommShape:
    v = comm.view
    return nccl_model.CommShape(
        n_ranks=n, n_nodes=n_nodes, arch=v.arch, nvlink_Bps=v.nvlink_Bps,
        nvlink_link_Bps=v.nvlink_link_Bps, net_Bps=comm.net_Bps if n_nodes > 1 else 0.0,
        nvswitch=v.nvls, collnet=v.sharp and n_nodes > 1,
    )


def _nccl_latency_s(op: str, algo: str, size_bytes: float, comm: _Comm, n: int, n_nodes: int) -> float:
    if n < 2:
        return 0.0
    name = _NCCL_NAME[algo]
    for p in nccl_model.predict(op, max(size_bytes, 1.0), _shape(comm, n, n_nodes)):
        if p.algorithm == name and p.protocol == "simple":
            return p.latency_s
    raise InvalidArgumentError(f"NCCL's model has no {name} for {op} on {n} ranks over {n_nodes} nodes")


def latency_s(op: str, algo: str, size_bytes: float, comm: _Comm) -> float:
    """The alpha term of a collective (NCCL's Simple-protocol latency model)."""
    d, p = len(comm.domains), comm.ppn
    if algo == "direct":
        return _P2P_BASE_S + (_P2P_NET_S if d > 1 else _P2P_NVLINK_S)
    if algo in ("hierarchical", "nvls_sharp"):
        intra = "ring" if algo == "hierarchical" else "nvls"
        inter = "ring" if algo == "hierarchical" else "sharp"
        one, rail = comm.within(comm.domains[0]), comm.across(comm.rails()[0])
        phases = [("reduce_scatter", intra, one, p, 1), ("all_reduce", inter, rail, d, d),
                  ("all_gather", intra, one, p, 1)]
        if intra == "nvls":  # NCCL's NVLS latency does not depend on the op
            phases = [("all_reduce", "nvls", one, p, 1), phases[1], ("all_reduce", "nvls", one, p, 1)]
        return sum(_nccl_latency_s(o, a, size_bytes, c, n, nn) for o, a, c, n, nn in phases)
    return _nccl_latency_s(op if op != "send_recv" else "broadcast", algo, size_bytes, comm, comm.n, d)


def _ring_Bps(comm: _Comm) -> float:
    """Per-rank rate of a ring over the communicator with its channels (module docs)."""
    v, d, p = comm.view, len(comm.domains), comm.ppn
    if d == 1:
        return v.nvlink_Bps if v.gpus_per_domain > 1 else comm.net_Bps
    if p >= 2:
        return p * min(comm.net_Bps, v.nvlink_Bps / (p - 1))
    nvl = v.nvlink_Bps if max(len(x) for x in comm.domains) > 1 else float("inf")
    return min(comm.net_Bps, nvl)


def _nvls_Bps(v: FabricView, k: int) -> float:
    """Rate of an NVLS pass of k ranks of one domain whose busiest link direction carries one
    byte per byte: the GPUs' links, or the domain's reduction engine shared by k ranks."""
    return min(v.nvlink_Bps, _NVLS_EFFICIENCY[v.arch] * v.nvlink_Bps * v.gpus_per_domain / k)


def analytical_s(op: str, algo: str, size_bytes: float, comm: _Comm) -> float:
    """Alpha-beta time of the flow construction on an idle fabric."""
    n, d, p = comm.n, len(comm.domains), comm.ppn
    if n == 1 and op != "send_recv":
        return 0.0
    a = latency_s(op, algo, size_bytes, comm)
    S = float(size_bytes)
    if algo == "ring":
        volume = {"all_reduce": 2 * (n - 1) / n * S, "reduce_scatter": (n - 1) / n * S,
                  "all_gather": (n - 1) / n * S}.get(op, S)
        return a + volume / _ring_Bps(comm)
    if algo == "nvls":
        return a + S * (1 + 1 / n) / _nvls_Bps(comm.view, n)
    if algo == "sharp":
        return a + S / comm.net_Bps
    if algo == "hierarchical":
        intra = _ring_Bps(comm.within(comm.domains[0]))
        return a + 2 * (p - 1) / p * S / intra + 2 * (d - 1) / d * (S / p) / comm.net_Bps
    if algo == "nvls_sharp":
        return a + 2 * S / _nvls_Bps(comm.view, p) + (S / p) / comm.net_Bps
    raise AssertionError(algo)


def _direct_analytical_s(comm: _Comm, matrix: np.ndarray, a: float) -> float:
    """All-to-all(v): every rank's sends and receives, split into NVLink and network."""
    dom = comm.ranks // comm.view.gpus_per_domain
    same = dom[:, None] == dom[None, :]
    m = matrix.astype(np.float64).copy()
    np.fill_diagonal(m, 0.0)
    t = 0.0
    for axis in (1, 0):  # sends, then receives
        for part, rate in ((np.where(same, m, 0), comm.view.nvlink_Bps), (np.where(same, 0, m), comm.net_Bps)):
            most = float(np.max(part.sum(axis=axis)))
            if most > 0:
                t = max(t, most / rate)
    return a + t


def choose(op: str, size_bytes: float, comm: _Comm) -> str:
    """NCCL's choice (Simple protocol) among the algorithms fabricsim runs here."""
    algos = applicable(op, comm)
    if len(algos) == 1:
        return algos[0]
    d = len(comm.domains)
    wanted = {_NCCL_NAME[x]: x for x in algos if x in _NCCL_NAME}
    best = None
    for p in nccl_model.predict(op, max(size_bytes, 1.0), _shape(comm, comm.n, d)):
        if p.protocol == "simple" and p.algorithm in wanted and (best is None or p.time_s < best.time_s):
            best = p
    return wanted[best.algorithm] if best is not None else "ring"


class Builder:
    """Adds collectives to a scenario's core and remembers them for the results table."""

    def __init__(self, scenario) -> None:
        self.sc = scenario
        self.rows: list[tuple] = []
        self._communicators: dict[bytes, int] = {}
        self._engines: dict[tuple, int] = {}

    def add(self, op, ranks, size_bytes, algorithm, after, start_s, tag, sizes=None) -> int:
        if op not in OPS:
            raise InvalidArgumentError(f"op must be one of {', '.join(OPS)}, got {op!r}")
        comm = _comm(self.sc.topology, ranks)
        if op == "send_recv" and comm.n < 2:
            raise InvalidArgumentError("send_recv needs at least 2 ranks")
        algos = applicable(op, comm)
        algo = choose(op, size_bytes, comm) if algorithm == "auto" else algorithm
        if algo not in algos:
            why = {
                "nvls": "NVLS needs NVSwitch chips that reduce (NVSwitch gen 3+) and all ranks in one NVLink domain",
                "sharp": "SHARP needs InfiniBand switches with SHARP and one rank per NVLink domain",
                "nvls_sharp": "NVLS+SHARP needs reducing NVSwitches, SHARP switches and ranks in several domains",
                "hierarchical": "hierarchical needs the same number (>= 2) of ranks in each of several domains",
            }.get(algo, "")
            known = algo in ALGORITHMS
            raise InvalidArgumentError(
                f"algorithm {algo!r} cannot run {op} here (can: {', '.join(algos)})"
                + (f": {why}" if why and known else "" if known else f"; algorithms are {', '.join(ALGORITHMS)}")
            )
        core = self.sc._core
        label = tag if tag is not None else op
        first = core.n_activities
        try:
            begin = core.add_delay(0.0, start_s, list(after), label)
            end, analytical = self._build(op, algo, comm, float(size_bytes), begin, label, sizes)
        except Exception:
            core.truncate(first)
            raise
        key = comm.ranks.tobytes()
        communicator = self._communicators.setdefault(key, len(self._communicators))
        self.rows.append((end, communicator, op, algo, comm.n, float(size_bytes), begin, analytical))
        return end

    # -- flow construction ---------------------------------------------------------------------

    def _coupled(self, src, dst, coef, combine, engines, nbytes, latency, after, tag) -> int:
        return self.sc._core.add_coupled_flow(
            np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64),
            np.ascontiguousarray(np.broadcast_to(coef, len(src)), dtype=np.float64),
            combine, engines, nbytes, latency, 0.0, [after], tag,
        )

    def _barrier(self, after: list[int], tag) -> int:
        return self.sc._core.add_delay(0.0, 0.0, after, tag)

    def _ring(self, op, comm: _Comm, S, latency, after, tag) -> list[int]:
        """One coupled flow per channel (module docs)."""
        n, d, p = comm.n, len(comm.domains), comm.ppn
        volume = {"all_reduce": 2 * (n - 1) / n * S, "reduce_scatter": (n - 1) / n * S,
                  "all_gather": (n - 1) / n * S}.get(op, S)
        channels = p if d > 1 and p >= 2 else 1
        ids = []
        for c in range(channels):
            if channels == 1:
                order = np.concatenate(comm.domains)
            else:
                order = np.concatenate([np.roll(x, -((c - k) % p)) for k, x in enumerate(comm.domains)])
            if op in ("broadcast", "reduce"):  # a chain from (or to) the root, ranks[0]
                root = int(np.flatnonzero(order == comm.ranks[0])[0])
                order = np.roll(order, -root)
                src, dst = order[:-1], order[1:]
                if op == "reduce":
                    src, dst = dst[::-1], src[::-1]
            else:
                src, dst = order, np.roll(order, -1)
            ids.append(self._coupled(src, dst, 1.0, "sum", [], volume / channels, latency, after, tag))
        return ids

    def _engine(self, key, capacity_Bps) -> int:
        if key not in self._engines:
            self._engines[key] = self.sc._core.add_engine(capacity_Bps)
        return self._engines[key]

    def _nvls(self, ranks, S, up, down, latency, after, tag) -> int:
        """A reduction through the NVSwitches of one domain: each rank sends ``up`` and
        receives ``down`` bytes per byte of S (links count them once: combine="max"). Edges
        run between each rank and ranks[0], whose own up and down coefficients swap."""
        v = fabric_view(self.sc.topology)
        p0, rest = int(ranks[0]), ranks[1:]
        capacity = _NVLS_EFFICIENCY[v.arch] * v.nvlink_Bps * v.gpus_per_domain
        engine = self._engine(("nvls", p0 // v.gpus_per_domain), capacity)
        src = np.concatenate([rest, np.full(len(rest), p0)])
        dst = np.concatenate([np.full(len(rest), p0), rest])
        coef = np.concatenate([np.full(len(rest), up), np.full(len(rest), down)])
        return self._coupled(src, dst, coef, "max", [(engine, max(up, down) * len(ranks))],
                             S, latency, after, tag)

    def _sharp(self, ranks, S, latency, after, tag) -> int:
        """Up and down the scale-out aggregation tree: every link carries S once."""
        st = self.sc.topology._core.structure()["scale_out"]
        ports = st["n_leaves"] * st["radix"] * st["planes"]
        engine = self._engine(("sharp",), ports * st["link_Bps"])
        p0, rest = int(ranks[0]), ranks[1:]
        src = np.concatenate([rest, np.full(len(rest), p0)])
        dst = np.concatenate([np.full(len(rest), p0), rest])
        return self._coupled(src, dst, 1.0, "max", [(engine, float(len(ranks)))], S, latency, after, tag)

    def _build(self, op, algo, comm: _Comm, S, begin, tag, sizes) -> tuple[int, float]:
        core = self.sc._core
        n, d, p = comm.n, len(comm.domains), comm.ppn
        lat = latency_s(op, algo, S, comm) if n > 1 or op == "send_recv" else 0.0
        if algo == "direct":
            if op == "send_recv":
                src, dst = comm.ranks, np.roll(comm.ranks, -1)
                matrix = np.zeros((n, n))
                matrix[np.arange(n), (np.arange(n) + 1) % n] = S
                nbytes = np.full(n, S)
            else:
                matrix = np.full((n, n), S / n) if sizes is None else sizes
                i, j = np.nonzero(~np.eye(n, dtype=bool))
                src, dst, nbytes = comm.ranks[i], comm.ranks[j], matrix[i, j]
            ids = self.sc._core.add_flows(
                np.ascontiguousarray(src), np.ascontiguousarray(dst), np.ascontiguousarray(nbytes, dtype=np.float64),
                np.zeros(len(src)), tag, None, None, [begin],
            ) if len(src) else np.zeros(0, dtype=np.int64)
            # NCCL's p2p alpha, paid once after the transfers (the flows' own route latency,
            # about a microsecond, comes on top and is not in the analytical time).
            end = core.add_delay(lat, 0.0, ids if len(ids) else [begin], tag)
            return end, _direct_analytical_s(comm, matrix, lat)
        if n == 1:
            return core.add_delay(0.0, 0.0, [begin], tag), 0.0
        analytical = analytical_s(op, algo, S, comm)
        if algo == "ring":
            return self._barrier(self._ring(op, comm, S, lat, begin, tag), tag), analytical
        if algo == "nvls":
            return self._barrier([self._nvls(comm.ranks, S, 1 + 1 / n, 1 + 1 / n, lat, begin, tag)], tag), analytical
        if algo == "sharp":
            return self._barrier([self._sharp(comm.ranks, S, lat, begin, tag)], tag), analytical
        # Three phases joined by barriers; the latency is paid once, by the first phase.
        rails = comm.rails()
        if algo == "hierarchical":
            first = [i for x in comm.domains for i in self._ring("reduce_scatter", comm.within(x), S, lat, begin, tag)]
            mid = self._barrier(first, tag)
            second = [i for r in rails for i in self._ring("all_reduce", comm.across(r), S / p, 0.0, mid, tag)]
            mid = self._barrier(second, tag)
            third = [i for x in comm.domains for i in self._ring("all_gather", comm.within(x), S, 0.0, mid, tag)]
        else:  # nvls_sharp
            first = [self._nvls(x, S, 1.0, 1.0 / p, lat, begin, tag) for x in comm.domains]
            mid = self._barrier(first, tag)
            second = [self._sharp(r, S / p, 0.0, mid, tag) for r in rails]
            mid = self._barrier(second, tag)
            third = [self._nvls(x, S, 1.0 / p, 1.0, 0.0, mid, tag) for x in comm.domains]
        return self._barrier(third, tag), analytical

    # -- results -------------------------------------------------------------------------------

    def table(self, delays: pa.Table) -> pa.Table:
        """The ``collectives`` table: one row per collective, nccl-tests' algbw and busbw."""
        rows = self.rows
        ids = delays["delay_id"].to_numpy()
        finish = delays["finish_s"].to_numpy(zero_copy_only=False)

        def at(a):
            return finish[np.searchsorted(ids, np.asarray(a, dtype=np.int64))]

        end = np.array([r[0] for r in rows], dtype=np.int64)
        begin = np.array([r[6] for r in rows], dtype=np.int64)
        start_s, finish_s = at(begin), at(end)
        n = np.array([r[4] for r in rows], dtype=np.int64)
        size = np.array([r[5] for r in rows], dtype=np.float64)
        ops = [r[2] for r in rows]
        duration = finish_s - start_s
        with np.errstate(divide="ignore", invalid="ignore"):
            algbw = np.where(duration > 0, size / duration, np.nan)
        factor = np.array([nccl_conventions.busbw_factor(o, int(k)) if k > 0 else 1.0 for o, k in zip(ops, n)])
        return pa.table({
            "collective_id": pa.array(end),
            "communicator": pa.array([r[1] for r in rows], type=pa.int64()),
            "op": pa.array(ops).dictionary_encode(),
            "algorithm": pa.array([r[3] for r in rows]).dictionary_encode(),
            "n_ranks": pa.array(n),
            "size_bytes": pa.array(size),
            "start_s": pa.array(start_s, mask=np.isnan(start_s)),
            "finish_s": pa.array(finish_s, mask=np.isnan(finish_s)),
            "algbw_Bps": pa.array(algbw, mask=np.isnan(algbw)),
            "busbw_Bps": pa.array(algbw * factor, mask=np.isnan(algbw)),
            "analytical_s": pa.array(np.array([r[7] for r in rows], dtype=np.float64)),
        })


def sizes_matrix(sizes: Any, n: int) -> np.ndarray:
    m = np.asarray(sizes, dtype=np.float64)
    if m.shape != (n, n):
        raise InvalidArgumentError(f"an all_to_all size matrix must be {n}x{n} (ranks x ranks), got shape {m.shape}")
    if not np.all(np.isfinite(m)) or np.any(m < 0):
        raise InvalidArgumentError("an all_to_all size matrix must hold finite sizes >= 0 bytes")
    return m


def nccl_tests(
    fabric,
    op: str = "all_reduce",
    min_bytes: Any = "8M",
    max_bytes: Any = "8G",
    step_factor: float = 2,
    *,
    algorithm: str = "auto",
    ranks: Any = None,
    dtype: str = "float",
    seed: int = 0,
) -> pa.Table:
    """nccl-tests, simulated: one collective per size from ``min_bytes`` to ``max_bytes``
    (multiplied by ``step_factor``), each alone on ``fabric`` over ``ranks`` (default every
    GPU). Columns: size_bytes, count, time_s, algbw_Bps, busbw_Bps, algorithm, analytical_s;
    ``nccl_conventions.format_table`` prints it in nccl-tests' layout."""
    from .scenario import Scenario
    from .units import size_bytes as parse_size

    lo, hi = parse_size(min_bytes), parse_size(max_bytes)
    if not 0 < lo <= hi:
        raise InvalidArgumentError(f"need 0 < min_bytes <= max_bytes, got {lo!r} and {hi!r}")
    if isinstance(step_factor, bool) or not (isinstance(step_factor, (int, float)) and step_factor > 1):
        raise InvalidArgumentError(f"step_factor must be a number > 1, got {step_factor!r}")
    if ranks is None:
        view = fabric_view(fabric)
        ranks = np.arange(view.n_rank_nodes if view.n_rank_nodes is not None else fabric.n_nodes)
    sizes = []
    s = lo
    while s <= hi * (1 + 1e-12):
        sizes.append(s)
        s *= step_factor
    n = len(np.asarray(ranks).reshape(-1))
    rows = []
    for size in sizes:
        sc = Scenario(fabric, seed=seed)
        sc.add_collective(op, ranks, size, algorithm=algorithm)
        row = sc.run().collectives.to_pylist()[0]
        rows.append(row)
    return pa.table({
        "size_bytes": pa.array([int(r["size_bytes"]) for r in rows], type=pa.int64()),
        "count": pa.array([nccl_conventions.element_count(op, int(r["size_bytes"]), n, dtype) for r in rows],
                          type=pa.int64()),
        "time_s": pa.array([r["finish_s"] - r["start_s"] for r in rows], type=pa.float64()),
        "algbw_Bps": pa.array([r["algbw_Bps"] for r in rows], type=pa.float64()),
        "busbw_Bps": pa.array([r["busbw_Bps"] for r in rows], type=pa.float64()),
        "algorithm": pa.array([r["algorithm"] for r in rows]),
        "analytical_s": pa.array([r["analytical_s"] for r in rows], type=pa.float64()),
    })
