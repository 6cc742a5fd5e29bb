"""Turn the numpy workloads into fabricsim objects through the public API only."""

from __future__ import annotations

import fabricsim as fs

from .workloads import FatTree, FlowSet


def topology(tree: FatTree) -> "fs.Topology":
    return fs.Topology.from_arrays(
        tree.src, tree.dst, tree.capacity_Bps, tree.latency_s, n_nodes=tree.n_nodes
    )


def scenario_with_routes(topo: "fs.Topology", flows: FlowSet, seed: int = 0) -> "fs.Scenario":
    """All flows in one ``add_flows`` call with their explicit up-down routes."""
    sc = fs.Scenario(topo, seed=seed)
    sc.add_flows(
        flows.src,
        flows.dst,
        flows.size_bytes,
        start_s=flows.start_s,
        routes=(flows.route_offsets, flows.route_link_ids),
    )
    return sc
