"""Scenario.run on fat-trees with explicit up-down routes, and scenario building.

Scenarios are built in ``setup`` (asv re-runs it before every timed call, so each call runs a
fresh Scenario); only ``run()`` is timed. Flow sizes are log-uniform 10 kB - 100 MB; arrivals
are all at t=0 ("together") or Poisson, offering 50% of the fabric's uplink capacity
("staggered"; the two-tier tree is 2:1 oversubscribed, so its hosts inject at 25%).
"""

import fabricsim as fs

from . import scenarios, workloads


def two_tier_scenario(n_flows, arrival):
    """TwoTierFatTree's scenario: its fabric, flows and routes (seed 0)."""
    tree = workloads.two_tier_fat_tree()
    flows = workloads.random_flows(tree, n_flows, arrival, seed=0)
    return scenarios.scenario_with_routes(scenarios.topology(tree), flows)


class TwoTierFatTree:
    """SimGrid-comparable runs: 512 hosts, 16 leaves x 16 spines, 100 Gb/s links, 1 us per
    link, leaf uplinks 2:1 oversubscribed; each flow goes through a random spine."""

    params = ([10_000, 100_000], ["together", "staggered"])
    param_names = ["n_flows", "arrival"]
    timeout = 600
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0

    def setup(self, n_flows, arrival):
        self.scenario = two_tier_scenario(n_flows, arrival)

    def time_run(self, n_flows, arrival):
        self.scenario.run()

    def peakmem_run(self, n_flows, arrival):
        self.scenario.run()


class ThreeTierFatTree:
    """100,000 flows on a k=16 fat-tree (1024 hosts, 320 switches, full bisection, 100 Gb/s,
    1 us per link); routes go up to the lowest common tier through random agg/core switches."""

    params = ["staggered", "together"]
    param_names = ["arrival"]
    timeout = 600
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0

    def setup(self, arrival):
        tree = workloads.three_tier_fat_tree(k=16)
        flows = workloads.random_flows(tree, 100_000, arrival, seed=0)
        self.scenario = scenarios.scenario_with_routes(scenarios.topology(tree), flows)

    def time_run_100k_flows(self, arrival):
        self.scenario.run()

    def peakmem_run_100k_flows(self, arrival):
        self.scenario.run()


class BuildScenario:
    """Building 10,000 flows on the two-tier tree: one add_flow call per flow (explicit route,
    or fabricsim's own ECMP route) against one vectorised add_flows call (ECMP, or explicit
    routes as compressed rows)."""

    timeout = 120

    def setup(self):
        tree = workloads.two_tier_fat_tree()
        self.topo = scenarios.topology(tree)
        self.flows = workloads.random_flows(tree, 10_000, "staggered", seed=0)
        self.routes = self.flows.routes_as_lists()
        self.src = self.flows.src.tolist()
        self.dst = self.flows.dst.tolist()
        self.size_bytes = self.flows.size_bytes.tolist()
        self.start_s = self.flows.start_s.tolist()
        self.tree3 = workloads.three_tier_fat_tree(k=16)

    def time_add_flow_loop_explicit_routes(self):
        sc = fs.Scenario(self.topo)
        for i, route in enumerate(self.routes):
            sc.add_flow(self.src[i], self.dst[i], self.size_bytes[i], start_s=self.start_s[i],
                        route=route)

    def time_add_flow_loop_ecmp(self):
        sc = fs.Scenario(self.topo)
        for i in range(len(self.src)):
            sc.add_flow(self.src[i], self.dst[i], self.size_bytes[i], start_s=self.start_s[i])

    def time_add_flows_ecmp(self):
        sc = fs.Scenario(self.topo)
        sc.add_flows(self.flows.src, self.flows.dst, self.flows.size_bytes,
                     start_s=self.flows.start_s)

    def time_add_flows_explicit_routes(self):
        scenarios.scenario_with_routes(self.topo, self.flows)

    def time_topology_from_arrays_three_tier(self):
        scenarios.topology(self.tree3)


class FastModeFatTree:
    """TwoTierFatTree's flows all starting together, the case the exact engine is slowest on
    (each finish changes the rate of a large share of the others), in the fast mode
    (``run(tolerance=...)``): finishes within the tolerance of an instant are taken with it."""

    params = ([10_000, 100_000], [1e-2, 1e-3])
    param_names = ["n_flows", "tolerance"]
    timeout = 600
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0

    def setup(self, n_flows, tolerance):
        self.scenario = two_tier_scenario(n_flows, "together")

    def time_run(self, n_flows, tolerance):
        self.scenario.run(tolerance=tolerance)

    def peakmem_run(self, n_flows, tolerance):
        self.scenario.run(tolerance=tolerance)
