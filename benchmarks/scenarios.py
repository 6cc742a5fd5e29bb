"""Turn the numpy workloads into fabricsim objects through the public API only."""

from __future__ import annotations

import fabricsim as fs

from .workloads import FatTree, FlowSet


def topology(tree: FatTree) -> "fs.Topology":
    return fs.Topology.from_arrays(
        tree.src, tree.dst, tree.capacity_Bps, tree.latency_s, n_nodes=tree.n_nodes
    )


def scenario_with_routes(topo: "fs.Topology", flows: FlowSet, seed: int = 0) -> "fs.Scenario":
    """One ``add_flow`` call per flow with its explicit up-down route (``add_flows`` takes no
    routes)."""
    sc = fs.Scenario(topo, seed=seed)
    src = flows.src.tolist()
    dst = flows.dst.tolist()
    size_bytes = flows.size_bytes.tolist()
    start_s = flows.start_s.tolist()
    for i, route in enumerate(flows.routes_as_lists()):
        sc.add_flow(src[i], dst[i], size_bytes[i], start_s=start_s[i], route=route)
    return sc
