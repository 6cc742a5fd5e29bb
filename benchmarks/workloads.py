"""Deterministic workloads for the benchmarks: plain numpy, no fabricsim import.

Everything here is generated from a fixed seed with ``numpy.random.default_rng``, so every run
of the suite times the same problem. Topologies are returned as link arrays (the arguments of
``fs.Topology.from_arrays``) and flows as arrays plus explicit up-down routes in CSR form
(``route_offsets``, ``route_link_ids``: flow i uses
``route_link_ids[route_offsets[i]:route_offsets[i + 1]]``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LINK_LATENCY_S = 1e-6
HOST_LINK_BPS = 100e9 / 8  # 100 Gb/s host links, in bytes per second

SIZE_MIN_BYTES = 10e3  # log-uniform flow sizes from 10 kB ...
SIZE_MAX_BYTES = 100e6  # ... to 100 MB
# Staggered arrivals offer this fraction of the fabric's uplink capacity (the tier uniform
# traffic has to cross: leaf uplinks of the two-tier tree, which is 2:1 oversubscribed, so
# hosts inject at 25% of their line rate; the full-bisection three-tier tree, 50%).
OFFERED_LOAD = 0.5


# --------------------------------------------------------------------------------------------
# Solver problems for fs.max_min_rates


@dataclass
class MaxMinProblem:
    """Arguments of ``fs.max_min_rates``: entry k puts ``coefficient[k] * rate[flow_index[k]]``
    on constraint ``constraint_index[k]``, whose capacity is ``capacity_Bps[...]``."""

    capacity_Bps: np.ndarray  # float64, one per constraint
    flow_index: np.ndarray  # int64, one per usage entry
    constraint_index: np.ndarray  # int64, one per usage entry
    coefficient: np.ndarray  # float64, one per usage entry
    n_flows: int

    @property
    def n_entries(self) -> int:
        return int(self.flow_index.size)


def _rows_with_repeats(table: np.ndarray) -> np.ndarray:
    ordered = np.sort(table, axis=1)
    return np.any(ordered[:, 1:] == ordered[:, :-1], axis=1)


def random_max_min_problem(
    n_flows: int, n_constraints: int, uses_per_flow: int = 6, seed: int = 0
) -> MaxMinProblem:
    """Every flow uses ``uses_per_flow`` distinct constraints drawn uniformly, coefficient 1.

    Capacities are uniform in [10, 100] GB/s. Entries are ordered flow by flow.
    """
    if uses_per_flow > n_constraints:
        raise ValueError("uses_per_flow must not exceed n_constraints")
    rng = np.random.default_rng(seed)
    used = rng.integers(0, n_constraints, size=(n_flows, uses_per_flow), dtype=np.int64)
    # Redraw the rows that picked a constraint twice until every row is distinct.
    repeated = _rows_with_repeats(used)
    while repeated.any():
        used[repeated] = rng.integers(
            0, n_constraints, size=(int(repeated.sum()), uses_per_flow), dtype=np.int64
        )
        repeated = _rows_with_repeats(used)
    capacity_Bps = rng.uniform(10e9, 100e9, size=n_constraints)
    flow_index = np.repeat(np.arange(n_flows, dtype=np.int64), uses_per_flow)
    coefficient = np.ones(n_flows * uses_per_flow, dtype=np.float64)
    return MaxMinProblem(capacity_Bps, flow_index, used.reshape(-1), coefficient, n_flows)


def max_min_problem_with_entries(n_entries: int, seed: int = 0) -> MaxMinProblem:
    """About ``n_entries`` usage entries: n_entries // 6 flows, each on 6 constraints, with
    one constraint per 5 flows (so about 30 flows share a constraint, as in the 1M x 6 of 200k
    target case)."""
    n_flows = n_entries // 6
    return random_max_min_problem(n_flows, max(n_flows // 5, 6), 6, seed)


def target_max_min_problem(seed: int = 0) -> MaxMinProblem:
    """The target case: 1,000,000 flows, each on 6 of 200,000 constraints (6e6 entries)."""
    return random_max_min_problem(1_000_000, 200_000, 6, seed)


# --------------------------------------------------------------------------------------------
# Topologies as link arrays


@dataclass
class FatTree:
    """Link arrays for ``fs.Topology.from_arrays`` plus what routing needs.

    Hosts are nodes ``0..n_hosts-1``; switches follow. Every cable is two directed links.
    """

    src: np.ndarray
    dst: np.ndarray
    capacity_Bps: np.ndarray
    latency_s: np.ndarray
    n_nodes: int
    n_hosts: int
    host_Bps: float
    tables: dict  # link id lookup tables, named by direction (see the builders)
    #: Capacity of the bottleneck tier for uniform traffic (sum of the first-tier uplinks).
    uplink_Bps: float

    @property
    def n_links(self) -> int:
        return int(self.src.size)


class _LinkList:
    def __init__(self):
        self.src, self.dst, self.capacity_Bps = [], [], []

    def add(self, src, dst, capacity_Bps) -> np.ndarray:
        """Append links src[i] -> dst[i] (broadcast); return their ids in the same shape."""
        src, dst, cap = np.broadcast_arrays(
            np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(capacity_Bps, float)
        )
        first = sum(a.size for a in self.src)
        self.src.append(src.reshape(-1))
        self.dst.append(dst.reshape(-1))
        self.capacity_Bps.append(cap.reshape(-1))
        return first + np.arange(src.size, dtype=np.int64).reshape(src.shape)

    def arrays(self):
        src = np.concatenate(self.src)
        return src, np.concatenate(self.dst), np.concatenate(self.capacity_Bps), np.full(
            src.size, LINK_LATENCY_S
        )


def two_tier_fat_tree(
    n_leaves: int = 16, hosts_per_leaf: int = 32, n_spines: int = 16, host_Bps: float = HOST_LINK_BPS
) -> FatTree:
    """Leaf-spine fabric; defaults: 512 hosts, 16 leaves, 16 spines, 100 Gb/s everywhere.

    Each leaf has one link to every spine, all links at ``host_Bps``: a leaf takes
    32 x 100 Gb/s from its hosts and has 16 x 100 Gb/s up, so uplinks are 2:1 oversubscribed.
    Every link has latency 1 us.
    Tables: host_up[h], host_down[h], leaf_up[leaf, spine], spine_down[spine, leaf].
    """
    n_hosts = n_leaves * hosts_per_leaf
    hosts = np.arange(n_hosts)
    leaf_node = n_hosts + np.arange(n_leaves)
    spine_node = n_hosts + n_leaves + np.arange(n_spines)
    leaf_of_host = leaf_node[hosts // hosts_per_leaf]
    links = _LinkList()
    host_up = links.add(hosts, leaf_of_host, host_Bps)
    host_down = links.add(leaf_of_host, hosts, host_Bps)
    leaf_up = links.add(leaf_node[:, None], spine_node[None, :], host_Bps)
    spine_down = links.add(spine_node[:, None], leaf_node[None, :], host_Bps)
    src, dst, cap, lat = links.arrays()
    tables = dict(
        hosts_per_leaf=hosts_per_leaf,
        n_spines=n_spines,
        host_up=host_up,
        host_down=host_down,
        leaf_up=leaf_up,
        spine_down=spine_down,
    )
    return FatTree(src, dst, cap, lat, n_hosts + n_leaves + n_spines, n_hosts, host_Bps, tables,
                   uplink_Bps=n_leaves * n_spines * host_Bps)


def three_tier_fat_tree(k: int = 16, host_Bps: float = HOST_LINK_BPS) -> FatTree:
    """k-ary fat-tree (full bisection): k pods of k/2 edge and k/2 aggregation switches,
    (k/2)**2 core switches, k**3/4 hosts (k=16: 1024 hosts, 64 cores), all links ``host_Bps``
    with latency 1 us. Aggregation switch a of every pod connects to cores
    a*(k/2) .. a*(k/2) + k/2 - 1.
    Tables: host_up[h], host_down[h], edge_up[edge, a], agg_down[edge, a] (agg a of the edge's
    pod -> edge), agg_up[agg, j], core_down[agg, j] (core a*(k/2)+j -> agg); edge and agg ids
    are global (pod * k/2 + index in pod).
    """
    if k % 2:
        raise ValueError("k must be even")
    half = k // 2
    n_hosts = k * half * half
    n_edge = k * half
    n_agg = k * half
    n_core = half * half
    hosts = np.arange(n_hosts)
    edge_node = n_hosts + np.arange(n_edge)
    agg_node = n_hosts + n_edge + np.arange(n_agg)
    core_node = n_hosts + n_edge + n_agg + np.arange(n_core)
    edge_of_host = edge_node[hosts // half]
    # agg_of_edge[e, a]: node of aggregation switch a in edge e's pod
    pod_of_edge = np.arange(n_edge) // half
    agg_of_edge = agg_node[pod_of_edge[:, None] * half + np.arange(half)[None, :]]
    # core_of_agg[g, j]: node of core j reached from global agg g (index a within its pod)
    a_in_pod = np.arange(n_agg) % half
    core_of_agg = core_node[a_in_pod[:, None] * half + np.arange(half)[None, :]]
    links = _LinkList()
    host_up = links.add(hosts, edge_of_host, host_Bps)
    host_down = links.add(edge_of_host, hosts, host_Bps)
    edge_up = links.add(edge_node[:, None], agg_of_edge, host_Bps)
    agg_down = links.add(agg_of_edge, edge_node[:, None], host_Bps)
    agg_up = links.add(agg_node[:, None], core_of_agg, host_Bps)
    core_down = links.add(core_of_agg, agg_node[:, None], host_Bps)
    src, dst, cap, lat = links.arrays()
    tables = dict(
        k=k,
        host_up=host_up,
        host_down=host_down,
        edge_up=edge_up,
        agg_down=agg_down,
        agg_up=agg_up,
        core_down=core_down,
    )
    return FatTree(src, dst, cap, lat, n_hosts + n_edge + n_agg + n_core, n_hosts, host_Bps, tables,
                   uplink_Bps=n_edge * half * host_Bps)


# --------------------------------------------------------------------------------------------
# Up-down routes


def _to_csr(hops: list[np.ndarray], valid: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stack per-hop link ids (one array per hop position, -1-free where ``valid``) into CSR."""
    hop_matrix = np.stack(hops, axis=1)
    valid_matrix = np.stack(valid, axis=1)
    lengths = valid_matrix.sum(axis=1)
    offsets = np.zeros(hop_matrix.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets, hop_matrix[valid_matrix].astype(np.int64)


def two_tier_routes(tree: FatTree, src: np.ndarray, dst: np.ndarray, seed: int = 1):
    """Up-down routes on :func:`two_tier_fat_tree`: hosts under one leaf go host-leaf-host
    (2 links); others go up through one spine drawn uniformly per flow (4 links).
    Returns (route_offsets, route_link_ids)."""
    t = tree.tables
    rng = np.random.default_rng(seed)
    spine = rng.integers(0, t["n_spines"], size=src.size)
    src_leaf = src // t["hosts_per_leaf"]
    dst_leaf = dst // t["hosts_per_leaf"]
    remote = src_leaf != dst_leaf
    always = np.ones(src.size, dtype=bool)
    hops = [t["host_up"][src], t["leaf_up"][src_leaf, spine], t["spine_down"][spine, dst_leaf],
            t["host_down"][dst]]
    return _to_csr(hops, [always, remote, remote, always])


def three_tier_routes(tree: FatTree, src: np.ndarray, dst: np.ndarray, seed: int = 1):
    """Up-down routes on :func:`three_tier_fat_tree`, going no higher than needed: same edge
    switch 2 links, same pod 4 links (random aggregation switch), other pod 6 links (random
    aggregation switch a and random core among a's k/2). Returns (route_offsets, route_link_ids)."""
    t = tree.tables
    half = t["k"] // 2
    rng = np.random.default_rng(seed)
    a = rng.integers(0, half, size=src.size)
    j = rng.integers(0, half, size=src.size)
    src_edge, dst_edge = src // half, dst // half
    src_pod, dst_pod = src_edge // half, dst_edge // half
    src_agg, dst_agg = src_pod * half + a, dst_pod * half + a
    leaves_edge = src_edge != dst_edge
    leaves_pod = src_pod != dst_pod
    always = np.ones(src.size, dtype=bool)
    hops = [
        t["host_up"][src],
        t["edge_up"][src_edge, a],
        t["agg_up"][src_agg, j],
        t["core_down"][dst_agg, j],
        t["agg_down"][dst_edge, a],
        t["host_down"][dst],
    ]
    return _to_csr(hops, [always, leaves_edge, leaves_pod, leaves_pod, leaves_edge, always])


# --------------------------------------------------------------------------------------------
# Flow sets


@dataclass
class FlowSet:
    src: np.ndarray  # int64 host ids
    dst: np.ndarray  # int64 host ids, never equal to src
    size_bytes: np.ndarray  # float64, whole bytes
    start_s: np.ndarray  # float64
    route_offsets: np.ndarray  # int64, n_flows + 1
    route_link_ids: np.ndarray  # int64

    @property
    def n_flows(self) -> int:
        return int(self.src.size)

    def route(self, i: int) -> np.ndarray:
        return self.route_link_ids[self.route_offsets[i] : self.route_offsets[i + 1]]

    def routes_as_lists(self) -> list[list[int]]:
        """Per-flow lists of link ids, the form ``Scenario.add_flow(route=...)`` takes."""
        return [r.tolist() for r in np.split(self.route_link_ids, self.route_offsets[1:-1])]


def mean_log_uniform_bytes(low: float = SIZE_MIN_BYTES, high: float = SIZE_MAX_BYTES) -> float:
    """Mean of a log-uniform distribution on [low, high]: (high - low) / ln(high / low)."""
    return (high - low) / math.log(high / low)


def log_uniform_sizes(rng: np.random.Generator, n: int) -> np.ndarray:
    """Flow sizes log-uniform between 10 kB and 100 MB, rounded to whole bytes."""
    log_size = rng.uniform(math.log(SIZE_MIN_BYTES), math.log(SIZE_MAX_BYTES), size=n)
    return np.round(np.exp(log_size))


def poisson_starts_s(rng: np.random.Generator, n: int, capacity_Bps: float,
                     offered_load: float = OFFERED_LOAD) -> np.ndarray:
    """Start times of a Poisson arrival process offering ``offered_load`` of ``capacity_Bps``:
    arrival rate = offered_load * capacity_Bps / mean size. The first flow starts at 0."""
    rate_per_s = offered_load * capacity_Bps / mean_log_uniform_bytes()
    gaps_s = rng.exponential(1.0 / rate_per_s, size=n)
    gaps_s[0] = 0.0
    return np.cumsum(gaps_s)


def random_flows(tree: FatTree, n_flows: int, arrival: str, seed: int = 0) -> FlowSet:
    """Uniform random host pairs (src != dst) with log-uniform sizes and explicit routes.

    ``arrival="together"``: every flow starts at 0. ``arrival="staggered"``: Poisson arrivals
    offering :data:`OFFERED_LOAD` (50%) of the fabric's uplink capacity (``tree.uplink_Bps``).
    """
    rng = np.random.default_rng(seed)
    src = rng.integers(0, tree.n_hosts, size=n_flows, dtype=np.int64)
    dst = (src + rng.integers(1, tree.n_hosts, size=n_flows, dtype=np.int64)) % tree.n_hosts
    size_bytes = log_uniform_sizes(rng, n_flows)
    if arrival == "together":
        start_s = np.zeros(n_flows)
    elif arrival == "staggered":
        start_s = poisson_starts_s(rng, n_flows, tree.uplink_Bps)
    else:
        raise ValueError(f"arrival must be 'together' or 'staggered', not {arrival!r}")
    if "spine_down" in tree.tables:
        offsets, link_ids = two_tier_routes(tree, src, dst, seed=seed + 1)
    else:
        offsets, link_ids = three_tier_routes(tree, src, dst, seed=seed + 1)
    return FlowSet(src, dst, size_bytes, start_s, offsets, link_ids)


def check_routes(tree: FatTree, flows: FlowSet) -> None:
    """Assert every route is a connected path from its flow's src to its dst (for tests of
    this module; the benchmarks do not call it)."""
    for i in range(flows.n_flows):
        route = flows.route(i)
        assert tree.src[route[0]] == flows.src[i], i
        assert tree.dst[route[-1]] == flows.dst[i], i
        assert np.all(tree.dst[route[:-1]] == tree.src[route[1:]]), i
