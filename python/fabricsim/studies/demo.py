"""The demo (``fabricsim demo``): one step of a data-parallel job on an oversubscribed
leaf-spine fabric: compute, then a random permutation of transfers, then an incast into one
host."""

from __future__ import annotations

import numpy as np

from .._checks import room_for
from ..exceptions import InvalidArgumentError
from ..fabrics.generators import leaf_spine
from ..scenario import Scenario
from ..units import bandwidth_Bps, duration_s, size_bytes

__all__ = ["demo_scenario"]


# Memory of the demo, measured with demo_scenario at 10^6 to 10^7 links (peak RSS growth),
# rounded up: per link (arrays, the core's topology), per node (its name), per host (its
# flows, with their routes). Routing on a plain topology also keeps each destination's hop
# distance from every node (a u32 each), up to the router's cache of 2^28 of them
# (CACHE_MAX_ENTRIES, src/routing/mod.rs): the most of it from 10^4 hosts on.
_DEMO_BYTES_PER_LINK, _DEMO_BYTES_PER_NODE, _DEMO_BYTES_PER_HOST = 80, 200, 400
_ROUTER_CACHE_ENTRY_BYTES, _ROUTER_CACHE_MAX_ENTRIES = 4, 1 << 28


def demo_scenario(
    *,
    n_leaves: int = 4,
    hosts_per_leaf: int = 8,
    n_spines: int = 2,
    link_Bps: float = bandwidth_Bps("400Gb/s"),
    latency_s: float = duration_s("1us"),
    transfer_bytes: float = size_bytes("1GiB"),
    compute_s: float = duration_s("5ms"),
    seed: int = 0,
) -> Scenario:
    """The demo's scenario: ``n_leaves`` leaves of ``hosts_per_leaf`` hosts under ``n_spines``
    spines (:func:`~fabricsim.fabrics.generators.leaf_spine`), each host computing for
    ``compute_s``, then sending ``transfer_bytes`` to another host (a random permutation drawn
    with ``seed``), then every fourth host sending a quarter of that to host 0. Refused up
    front, with an estimate, where it would not fit in memory."""
    for name, value in (("leaves", n_leaves), ("hosts per leaf", hosts_per_leaf), ("spines", n_spines)):
        if value < 1:
            raise InvalidArgumentError(f"the demo needs at least 1 of {name}, got {value}")
    if n_leaves * hosts_per_leaf < 2:
        raise InvalidArgumentError(
            f"the demo needs at least 2 hosts, got {n_leaves} leaves x {hosts_per_leaf} hosts per leaf")
    n_hosts = n_leaves * hosts_per_leaf
    n_links, n_nodes = 2 * (n_hosts + n_leaves * n_spines), n_hosts + n_leaves + n_spines
    # Every host is a flow's destination.
    distances = min(n_hosts * n_nodes, _ROUTER_CACHE_MAX_ENTRIES)
    estimate = (_DEMO_BYTES_PER_LINK * n_links + _DEMO_BYTES_PER_NODE * n_nodes + _DEMO_BYTES_PER_HOST * n_hosts
                + _ROUTER_CACHE_ENTRY_BYTES * distances)
    room_for(f"the demo's {n_leaves} leaves x {hosts_per_leaf} hosts per leaf and {n_spines} spines "
             f"({n_links} links, {n_hosts} flows and more)", estimate, 1.0)
    topo = leaf_spine(n_leaves, hosts_per_leaf, n_spines, link_Bps, latency_s)
    sc = Scenario(topo, seed=seed)
    rng = np.random.default_rng(seed)
    compute = sc.add_delay(compute_s, tag="compute")
    # A random permutation with no fixed point: every host sends to another one.
    perm = rng.permutation(n_hosts)
    while np.any(perm == np.arange(n_hosts)):
        perm = rng.permutation(n_hosts)
    shuffle = [
        sc.add_flow(f"host{h}", f"host{perm[h]}", transfer_bytes, after=compute, tag="permutation")
        for h in range(n_hosts)
    ]
    # Then every fourth host sends a quarter of that to host 0, all after one barrier: each
    # incast flow waiting on every permutation flow itself took n_hosts^2/4 dependencies.
    shuffled = sc.add_delay(0.0, after=shuffle, tag="shuffled")
    for h in range(1, n_hosts, 4):
        sc.add_flow(f"host{h}", "host0", transfer_bytes / 4, after=shuffled, tag="incast")
    return sc
