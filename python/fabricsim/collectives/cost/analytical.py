"""The analytical (alpha-beta) time of each algorithm's construction on an idle fabric:
alpha from NCCL's latency model (:mod:`~fabricsim.collectives.cost.nccl`) for the protocol
plus the wire latency of each pipelined step, beta from the per-GPU NVLink and network rates
the construction's busiest link sees (the package docs say how each algorithm is built). The
shapes the constructions share with it (NCCL's trees, the halving-doubling steps) are here
too, so that both read them from one place."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .. import conventions
from ...exceptions import InvalidArgumentError
from ..communicator import _ARCH_INDEX, _CLASSES, _COMMS_KEPT, FabricView, _Comm
from . import nccl, p2p
from .model import DEFAULT as DEFAULT_COST
from .model import CostModel

__all__ = ["analytical_s", "finite_analytical_s", "latency_s", "nvls_ceiling_busbw_Bps", "nvls_gpu_Bps",
           "sharp_bytes_per_byte"]


# NCCL's name for each algorithm whose latency (and auto choice) comes from its model; "sharp"
# is NCCL's CollNet, Direct or Chain by the fabric (_nccl_name).
_NCCL_NAME = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvls_tree": "nvls_tree", "nvls_sharp": "nvls"}


_shape = nccl.comm_shape


def _nccl_name(algo: str, view: FabricView) -> str | None:
    """NCCL's algorithm for one of fabricsim's, None where NCCL has none. SHARP is CollNet
    Direct where the GPUs sit on NVSwitches, else CollNet Chain: NCCL enables Direct only with
    NVSwitch (NCCL src/graph/tuning.cc:508-509)."""
    if algo == "sharp":
        return "collnet_direct" if view.nvls else "collnet_chain"
    return _NCCL_NAME.get(algo)


def _nccl_latency_s(op: str, algo: str, size_bytes: float, comm: _Comm, n: int, n_nodes: int,
                    protocol: str = "simple", cost: CostModel = DEFAULT_COST) -> float:
    if n < 2:
        return 0.0
    name = _nccl_name(algo, comm.view)
    latency = None if name is None else nccl.latency_of(
        op, max(size_bytes, 1.0), _shape(comm, n, n_nodes, cost), name, protocol)
    if latency is None:
        raise InvalidArgumentError(f"NCCL's model has no {name}/{protocol} for {op} on {n} ranks over {n_nodes} nodes")
    return latency


def _efficiency(op: str, algo: str, protocol: str, comm: _Comm, cost: CostModel = DEFAULT_COST) -> float:
    """Payload fraction of the wire under ``protocol`` (1 for Simple): NCCL's own ratio."""
    if protocol == "simple":
        return 1.0
    shape = _shape(comm, comm.n, comm.n_domains, cost)
    name = _nccl_name(algo, comm.view)
    assert name is not None  # LL and LL128 run on ring and tree only, both NCCL's
    return nccl.protocol_efficiency(op, shape)[(name, protocol)]


def _p2p_latency_s(crosses_domains: bool, cost: CostModel = DEFAULT_COST) -> float:
    hop = cost.p2p_net_latency_s if crosses_domains else cost.p2p_nvlink_latency_s
    return (cost.p2p_base_latency_s + hop) * cost.latency_scale


def _log2i(k: int) -> int:
    return k.bit_length() - 1


def _wire_s(op: str, algo: str, comm: _Comm) -> float:
    """The wire latency a pipelined algorithm's steps add to its software latency: each step
    waits for its hop's route (a chunk crosses it before the next step can forward it), so
    NCCL's per-step counts (src/graph/tuning.cc:384-435) times the route latency of an NVLink hop or a
    network hop. Point-to-point transfers pay their own routes' latency in the engine.
    Size-independent, so kept per communicator: auto times every algorithm on every call."""
    key = ("wire", op, algo)
    wire: float | None = comm.memo.get(key)
    if wire is None:
        wire = comm.memo[key] = _steps_wire_s(op, algo, comm)
    return wire


def _steps_wire_s(op: str, algo: str, comm: _Comm) -> float:
    n, d = comm.n, comm.n_domains
    intra, inter = comm.intra_path_s, comm.inter_path_s
    if algo == "ring":
        nsteps = 2 * (n - 1) if op == "all_reduce" else n - 1
        n_inter = 0 if d == 1 else 2 * (d - 1) if op == "all_reduce" else d - 1
        return (nsteps - n_inter) * intra + n_inter * inter
    if algo == "tree":
        return 2 * ((max(comm.sizes) - 1) * intra + _log2i(d) * inter)
    if algo == "nvls":
        return intra
    if algo == "nvls_tree":
        return intra + 2 * _log2i(d) * inter
    if algo == "sharp":
        return inter
    if algo == "nvls_sharp":
        return intra + inter
    if algo == "hierarchical":
        k = max(comm.sizes)
        return 2 * (k - 1) * intra + 2 * (d - 1) * inter
    return 0.0


def latency_s(op: str, algo: str, size_bytes: float, comm: _Comm, protocol: str = "simple",
              cost: CostModel = DEFAULT_COST) -> float:
    """The alpha term of a collective: NCCL's software latency for that protocol (times the
    cost model's latency_scale) plus the wire latency of its steps (_wire_s); halving-doubling
    pays its alpha step by step instead."""
    d = comm.n_domains
    if algo == "direct":
        return _p2p_latency_s(d > 1, cost)
    if algo == "halving_doubling":
        return 0.0
    wire = _wire_s(op, algo, comm)
    if algo == "hierarchical":  # NCCL has no such algorithm: its phases' latencies add up
        one, rail = _phases(comm)
        phases = [("reduce_scatter", one, one.n, 1), ("all_reduce", rail, d, d), ("all_gather", one, one.n, 1)]
        return wire + sum(_nccl_latency_s(o, "ring", size_bytes, c, n, nn, "simple", cost) for o, c, n, nn in phases)
    # NVLS+SHARP is NCCL's NVLS algorithm across nodes, whose latency NCCL models as a whole
    # (one intra-node and one network latency), not as three collectives in a row.
    return wire + _nccl_latency_s(op if op != "send_recv" else "broadcast", algo, size_bytes, comm, comm.n, d,
                                  protocol, cost)


def _phases(comm: _Comm) -> tuple[_Comm, _Comm]:
    """The sub-communicators of a hierarchical algorithm's phases: the largest domain (its
    intra-domain ring has the most steps and, holding non-head ranks, the most bytes per
    edge) and one rail (the first rank of each domain)."""
    if "phases" not in comm.memo:
        big = int(np.argmax(comm.counts))
        start = int(comm.starts[big])
        comm.memo["phases"] = (comm.within(comm.ranks[start:start + int(comm.counts[big])]),
                               comm.across(comm.ranks[comm.starts]))
    phases: tuple[_Comm, _Comm] = comm.memo["phases"]
    return phases


def _head_ring_shares(k: int, m: int) -> np.ndarray:
    """Bytes per byte of S on each edge of a ring reduce-scatter over k ranks whose shards
    (S/m each) end on the first m of them, the edge from rank i to rank i + 1 (mod k). Shard j
    enters the ring after its owner, rank j, and crosses every edge but the one leaving rank j:
    an edge leaving a head carries m - 1 shards, one leaving another rank all m, which is the
    least that rank can send (its whole buffer). With m = k this is the ring reduce-scatter,
    (k-1)/k of S per edge. An all-gather from the heads is its mirror: the edge from rank i to
    rank i + 1 carries what this gives the edge leaving rank i + 1."""
    i = np.arange(k)
    return (m - (i < m)) / m


def _ring_Bps(comm: _Comm) -> float:
    """Per-rank rate of a ring over the communicator with its channels (module docs)."""
    v, d, p = comm.view, comm.n_domains, comm.ppn
    if d == 1:
        return v.nvlink_Bps if v.gpus_per_domain > 1 else comm.net_Bps
    if p >= 2:
        return p * min(comm.net_Bps, v.nvlink_Bps / (p - 1))
    # One rank per domain never crosses NVLink; uneven domains (ppn 0) have some that do.
    return min(comm.net_Bps, float("inf") if p == 1 else v.nvlink_Bps)


def nvls_gpu_Bps(view: FabricView, cost: CostModel = DEFAULT_COST) -> float:
    """The NVLink traffic an NVLS reduction can drive through one GPU's links: NCCL's NVLS
    efficiency (cost model ``nvls_efficiency``) of the GPU's NVLink payload rate. Each GPU's
    multimem loads and stores run below line rate; the efficiency is per GPU, so it holds for
    a communicator of any size, a part of a domain too."""
    return cost.nvls_efficiency[_ARCH_INDEX[view.arch]] * view.nvlink_Bps


def nvls_ceiling_busbw_Bps(view: FabricView, cost: CostModel, n_nodes: int, heads: int = 0) -> float:
    """A communicator's NVLS ceiling in bus bandwidth (all-reduce), NCCL's channel limit: NVLS
    runs ``nvls_channels`` channels (CTAs) in one domain, ``nvls_channels_multi_node``
    across domains (nvls.cc), each at the fastest ladder speed ``s`` at which the channels
    and the head's second copy fit the GPU's NVLinks (search.cc: the head carries 2x), and
    NCCL's tuning counts their bus bandwidth as ``2 eff s (nCh - 1)`` (tuning.cc:307-323).
    NVLSTree is also held to NCCL's per-channel cap ``per_channel_nvls_tree_Bps`` for its
    node count, on the channels NCCL's tuning counts for it (``heads`` > 0: the graph's
    min(nvls_max_arity, GPUs per node), search.cc:1124-1138), as NVIDIA calibrated the cap
    on those (tuning.cc:177-211, 307-323). This bounds NVLS busbw whatever the domain's size, where the per-GPU
    traffic alone would grow it as 2(n-1)/(n+1)."""
    a = _ARCH_INDEX[view.arch]
    eff = cost.nvls_efficiency[a]
    nch = (cost.nvls_channels if n_nodes == 1 else cost.nvls_channels_multi_node)[a]
    if nch < 2:  # NCCL runs NVLS on two channels or more (tuning.cc:307)
        return 0.0
    ladder = cost.ladder_intra_Bps[a]
    s = next((x for x in ladder if (nch + 1) * x <= view.nvlink_Bps * (1 + 1e-9)), ladder[-1])
    bus = 2 * eff * s * (nch - 1)
    if heads and n_nodes > 1:
        graph_channels = min(cost.nvls_max_arity, heads)
        bus = min(bus, graph_channels * cost.per_channel_nvls_tree_Bps[a][min(n_nodes, 3) - 1])
    return bus


def _busbw_to_algbw(op: str, n: int) -> float:
    return 1.0 / conventions.busbw_factor(op, n) if n > 1 else 1.0


def sharp_bytes_per_byte(n: int, cost: CostModel) -> float:
    """What one byte of a reduced stream costs a NIC on a SHARP (CollNet) network leg: the
    all-reduce bus factor 2(n-1)/n where the cost model counts that leg as bus bandwidth, as
    NCCL does and measurements bear out (cost model ``sharp_network_as_bus``), else 1."""
    return 2 * (n - 1) / n if cost.sharp_network_as_bus and n > 1 else 1.0


def btree_parents(n: int) -> np.ndarray:
    """Parent of each of ``n`` vertices in NCCL's binary tree (-1 at the root, vertex 0): a
    vertex's parent clears its lowest set bit and sets the next one up, or only clears it
    where that would leave the tree; vertex 0 has one child."""
    r = np.arange(n, dtype=np.int64)
    low = r & -r
    up = (r ^ low) | (low << 1)
    up = np.where(up >= n, r ^ low, up)
    up[0] = -1
    return up


def dtree_parents(n: int) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's double binary tree: the binary tree, and a second one in which (for n > 2) most
    leaves of the first are inner vertices: the first mirrored (n even) or shifted by one
    (n odd)."""
    first = btree_parents(n)
    r = np.arange(n, dtype=np.int64)
    if n % 2 == 0:
        p = first[n - 1 - r]
        second = np.where(p < 0, -1, n - 1 - p)
    else:
        p = first[(r - 1) % n]
        second = np.where(p < 0, -1, (p + 1) % n)
    return first, second


@lru_cache(maxsize=256)
def _tree_max_degree(d: int) -> int:
    """The most edges (parent plus children) any vertex has in both trees of the double
    binary tree over d vertices."""
    deg = np.zeros(d, dtype=np.int64)
    for parents in dtree_parents(d):
        has = parents >= 0
        deg += has
        deg += np.bincount(parents[has], minlength=d)
    return int(deg.max())


def _halving_steps(op: str, n: int) -> list[tuple[str, int, float]]:
    """The steps of recursive halving-doubling over ranks 0..n-1 in their order, as
    (kind, distance, bytes per byte of S): kind "pair" exchanges with rank ^ distance;
    all-reduce on a non-power of two first folds the last n - 2^k ranks into the first
    ("fold": rank 2^k + i sends to i) and finally sends them the result ("unfold")."""
    pof2 = 1 << (n.bit_length() - 1)
    halve = [("pair", pof2 >> (s + 1), 1.0 / (2 << s)) for s in range(pof2.bit_length() - 1)]
    double = [("pair", 1 << s, (1 << s) / pof2) for s in range(pof2.bit_length() - 1)]
    if op == "reduce_scatter":
        return halve
    if op == "all_gather":
        return double
    extra = [("fold", pof2, 1.0)] if n > pof2 else []
    return extra + halve + double + [("unfold", pof2, 1.0)] * bool(extra)


def _step_pairs(kind: str, distance: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sender and receiver positions of one halving-doubling step."""
    if kind == "pair":
        src = np.arange(1 << (n.bit_length() - 1))
        return src, src ^ distance
    far = np.arange(distance, n)
    near = far - distance
    return (far, near) if kind == "fold" else (near, far)


def _halving_step_times(op: str, S: float, comm: _Comm,
                        cost: CostModel = DEFAULT_COST) -> list[tuple[str, int, float, bool, float, float]]:
    """Per step: (kind, distance, bytes, crosses domains, alpha, idle-fabric time). Each rank
    sends and receives at most one transfer per step, alone on its port: the step lasts as its
    slowest latency class's transfer, then its alpha."""
    steps: list[tuple[str, int, float, bool, list[tuple[float, float]]]] | None = comm.memo.get(("halving", op))
    if steps is None:
        steps = comm.memo[("halving", op)] = []
        for kind, distance, share in _halving_steps(op, comm.n):
            present = np.isin(np.arange(len(_CLASSES)), comm.pair_classes(*_step_pairs(kind, distance, comm.n)))
            steps.append((kind, distance, share, bool(present[1:].any()), _busy_terms(comm, present)))
    out = []
    for kind, distance, share, crosses, terms in steps:
        alpha = _p2p_latency_s(crosses, cost)
        nbytes = S * share
        out.append((kind, distance, nbytes, crosses, alpha, alpha + _idle_finish_s(terms, nbytes)))
    return out


def analytical_s(op: str, algo: str, size_bytes: float, comm: _Comm, sizes: np.ndarray | None = None,
                 protocol: str = "simple", cost: CostModel = DEFAULT_COST) -> float:
    """Alpha-beta time of the flow construction on an idle fabric. NCCL discards a collective
    of no elements (src/enqueue.cc, taskAppend: "Empty collectives can be discarded"), so one
    of zero bytes takes no time; an empty send/recv still runs (:func:`.p2p.time_s`)."""
    S = float(size_bytes)
    if op != "send_recv" and (comm.n == 1 or (S == 0 and sizes is None)):
        return 0.0
    if algo == "direct":
        return _direct_analytical_s(op, comm, S, sizes, cost)
    if algo == "p2p":
        return p2p.time_s(op, comm, S, sizes, cost)
    if algo == "halving_doubling":
        return sum(step[-1] for step in _halving_step_times(op, S, comm, cost))
    return latency_s(op, algo, size_bytes, comm, protocol, cost) + S * _seconds_per_byte(op, algo, protocol, comm, cost)


def _seconds_per_byte(op: str, algo: str, protocol: str, comm: _Comm, cost: CostModel) -> float:
    """The beta of a pipelined algorithm (bytes of S, on an idle fabric): the slowest of its
    constraints, as the coupled flow's max-min rate is. Size-independent, so kept per
    communicator: auto tries every algorithm on every call."""
    key = ("beta", op, algo, protocol, cost)
    beta: float | None = comm.memo.get(key)
    if beta is None:
        beta = comm.memo[key] = _beta(op, algo, protocol, comm, cost)
    return beta


def _beta(op: str, algo: str, protocol: str, comm: _Comm, cost: CostModel) -> float:
    n, d = comm.n, comm.n_domains
    v = comm.view
    # The flags of the low-latency protocols ride with the data: fewer payload bytes per wire byte.
    wire = 1.0 / _efficiency(op, algo, protocol, comm, cost)
    if algo == "ring":
        volume = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n}.get(op, 1.0)
        return wire * volume / _ring_Bps(comm)
    if algo == "tree":
        # Each of m channels runs two trees of S/(2m): a head's NIC carries one edge per tree
        # neighbour of its domain (each head leads one channel, as m is the fewest ranks any
        # domain holds), a GPU one edge up and one down per chain edge it ends, per tree
        # (module docs). In a domain of k ranks the chain of channel c is its ranks rotated
        # by c, so rank i is the head (no edge up) of channel i if i < m and the tail (no edge
        # down) of channel i + 1 (mod k) if that is < m; over the m channels it ends
        # 2m - [i < m] - [(i + 1) mod k < m] chain edges. The most: 2m - 2 where k = m (every
        # rank heads one channel and ends another), 2m - 1 where k = m + 1 (ranks m - 1 and m
        # are each one of the two), 2m where k >= m + 2 (rank m is neither).
        m = comm.heads
        per = wire / (2 * m)
        net = per * _tree_max_degree(d) / comm.net_Bps if d > 1 else 0.0
        ends = max(2 * m - 2 + min(2, k - m) for k in comm.sizes)
        nvl = 2 * per * ends / v.nvlink_Bps if ends else 0.0
        return max(net, nvl)
    if algo == "hierarchical":
        # The intra-domain rings reduce-scatter onto the m = heads first ranks of each domain
        # and all-gather from them, the busiest in the largest domain; each of m rails
        # all-reduces S/m across the domains.
        one, _ = _phases(comm)
        m = comm.heads
        intra = float(_head_ring_shares(one.n, m).max()) / _ring_Bps(one)
        return 2 * intra + 2 * (d - 1) / d / m / comm.net_Bps
    if algo == "sharp":
        return sharp_bytes_per_byte(n, cost) / comm.net_Bps
    # NVLS in one domain, or its stage in each domain of NVLSTree and NVLS+SHARP: a GPU's links
    # carry S(1 + 1/h) each way, h the heads of its domain (every rank in one domain), at the
    # GPU's NVLS rate; the communicator is held to NCCL's channel ceiling.
    heads = n if algo == "nvls" else comm.heads
    ceiling = nvls_ceiling_busbw_Bps(v, cost, d, comm.heads if algo == "nvls_tree" else 0) * _busbw_to_algbw(op, n)
    stages = [(1 + 1 / heads) / nvls_gpu_Bps(v, cost), 1 / ceiling]
    if algo == "nvls_tree":  # each rail's double binary tree across the heads, two trees of S/(2m)
        stages.append(_tree_max_degree(d) / (2 * comm.heads) / comm.net_Bps)
    elif algo == "nvls_sharp":  # each rail's SHARP tree: its head's NIC carries S/m each way
        stages.append(sharp_bytes_per_byte(n, cost) / comm.heads / comm.net_Bps)
    elif algo != "nvls":
        raise AssertionError(algo)
    return max(stages)


def finite_analytical_s(op: str, algo: str, S: float, comm: _Comm, sizes: np.ndarray | None, protocol: str,
                        cost: CostModel = DEFAULT_COST) -> float:
    """:func:`analytical_s`, refused where it passes the largest double: a finite size that
    the algorithm moves more than once (a ring all-reduce 2(n-1)/n times) would make an edge
    of inf bytes in the simulation, refused as a size_bytes of inf, a size never given; so
    the estimate, which must agree with the simulation, is refused alike."""
    t = analytical_s(op, algo, S, comm, sizes, protocol, cost)
    edge_bytes = S / _efficiency(op, algo, protocol, comm, cost) if comm.n > 1 and algo not in ("direct", "p2p") else S
    if algo == "ring":
        edge_bytes *= {"all_reduce": 2 * (comm.n - 1) / comm.n}.get(op, 1.0)
    if not math.isfinite(edge_bytes):
        raise InvalidArgumentError(
            f"size_bytes={S!r}: {op} by {algo} ({protocol}) on {comm.n} ranks would move {edge_bytes!r} bytes over "
            "one edge: beyond what double precision holds"
        )
    if not math.isfinite(t):
        raise InvalidArgumentError(
            f"size_bytes={S!r}: {op} by {algo} ({protocol}) on {comm.n} ranks would take {t!r} s: beyond what "
            "double precision holds"
        )
    return t


def _direct_matrix(op: str, n: int, S: float, sizes: np.ndarray | None) -> np.ndarray:
    m = p2p.transfer_matrix(op, n, S, sizes)  # a new array: direct moves no copy to itself
    np.fill_diagonal(m, 0.0)
    return m


def _last_busy_bytes(nbytes: np.ndarray) -> np.ndarray:
    """Per latency class (columns), the most bytes any port (rows: a rank's sends or receives)
    has left to move from the moment that class's transfers start, over the ports that have
    some of that class: its own and the later classes' bytes on the NIC, its own on NVLink.
    A port that moves whenever it holds bytes (as max-min sharing has it where every port
    holds the same) finishes a busy period that began as some class started."""
    after = np.cumsum(nbytes[:, :0:-1], axis=1)[:, ::-1]  # the NIC's classes, latest first
    busy: np.ndarray = np.where(nbytes > 0, np.column_stack([nbytes[:, 0], after]), 0.0).max(axis=0, initial=0.0)
    return busy


def _busy_terms(comm: _Comm, last_busy_bytes: np.ndarray) -> list[tuple[float, float]]:
    """(wire latency, last busy period) of each latency class with bytes (_last_busy_bytes), as
    Python floats: a size-independent shape that a sweep scales (_idle_finish_s)."""
    rates = comm.class_rates_Bps()
    return [(float(comm.class_latency_s[c]), float(last_busy_bytes[c] / rates[c]))
            for c in np.flatnonzero(last_busy_bytes > 0)]


def _idle_finish_s(terms: list[tuple[float, float]], scale: float = 1.0) -> float:
    """When transfers that start after their class's wire latency are done, their bytes
    ``scale`` times those the _busy_terms were made of: the latest class's last busy period."""
    return max((latency_s + scale * busy_s for latency_s, busy_s in terms), default=0.0)


def _direct_analytical_s(op: str, comm: _Comm, S: float, sizes: np.ndarray | None,
                         cost: CostModel = DEFAULT_COST) -> float:
    """All-to-all(v) and send/recv: every rank's transfers start when their latency class's
    wire latency is paid and share its NVLink and NIC ports each way, then the p2p alpha.
    Exact where every rank's ports carry the same bytes per class (a whole Clos, whole
    domains, a ring of send/recv), as max-min sharing then keeps every port busy; elsewhere
    a lower bound (module docs)."""
    alpha = _p2p_latency_s(comm.n_domains > 1, cost)
    n, k = comm.n, len(_CLASSES)
    if op == "all_to_all" and sizes is None:  # uniform: peers per class, no n x n matrix
        if "peers_busy" not in comm.memo:
            comm.memo["peers_busy"] = _busy_terms(comm, _last_busy_bytes(comm.peer_counts))
        return alpha + _idle_finish_s(comm.memo["peers_busy"], S / n)
    ports = np.zeros((2, n, k))  # bytes each rank sends, receives, per class
    if op == "send_recv":  # rank i to rank i + 1: one transfer per port, no n x n matrix
        i = np.arange(n)
        j = (i + 1) % n
        classes = comm.pair_classes(i, j)
        ports[0, i, classes] = ports[1, j, classes] = S
    else:
        if "pair_classes" not in comm.memo:  # an n x n matrix of bytes comes with this one
            comm.memo["pair_classes"] = comm.pair_classes(*np.indices((n, n))).astype(np.int8)
        m = _direct_matrix(op, n, S, sizes)
        for c in range(k):
            part = np.where(comm.memo["pair_classes"] == c, m, 0.0)
            ports[0, :, c], ports[1, :, c] = part.sum(axis=1), part.sum(axis=0)
    return alpha + _idle_finish_s(_busy_terms(comm, _last_busy_bytes(ports.reshape(2 * n, k))))
