"""fabricsim against SimGrid 4.1 on bench_engine.TwoTierFatTree's flows and routes.

For each case, the flows are made exactly as the benchmark makes them
(``workloads.random_flows(workloads.two_tier_fat_tree(), n_flows, arrival, seed=0)``), written
to a flow file, run through the SimGrid driver ``fat_tree_flows`` (built from
``fat_tree_flows.cpp``) and through ``Scenario.run`` (``scenarios.scenario_with_routes``).
Printed per case and SimGrid setting: the wall time of SimGrid's engine run and of fabricsim's
``run()`` (medians over the repeats shown), their ratio, and how far SimGrid's per-flow finish
times are from fabricsim's (relative to fabricsim's). A SimGrid run stopped by ``--wall-limit-s``
is compared with fabricsim's wall time to the same simulated time, the same prefix of the run.

Every flow's route in SimGrid is checked link by link against its fabricsim route (the driver
writes the routes it built; ``--no-route-check`` skips that).

Run from the repository root, with fabricsim importable (see README.md next to this file):
    python benchmarks/simgrid/compare.py --driver /tmp/simgrid-driver/fat_tree_flows
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from benchmarks import workloads  # noqa: E402

# SimGrid's numerical tolerances (precision/work-amount was maxmin/precision, in bytes;
# precision/timing was surf/precision, in seconds). "default" keeps SimGrid's own.
PRECISIONS = {
    "default": [],  # work-amount 1e-5 bytes, timing 1e-9 s
    "tight": ["--cfg=precision/work-amount:1e-9", "--cfg=precision/timing:1e-12"],
}
# How SimGrid updates its actions between events: "Lazy" (its default) re-solves only what an
# event touched and keeps a heap of finish dates; "Full" updates every action at every step.
# Both give the same max-min rates; on these flows Full is the faster.
UPDATES = {"Lazy": [], "Full": ["--cfg=network/optim:Full"]}
LATENCY_MODES = {
    # SimGrid's links carry no latency; each flow starts at start_s + its route's latency.
    # Every flow then has sharing penalty 1: plain max-min, fabricsim's model.
    "start": "--latency=start",
    # 1 us on each SimGrid link, CM02's own way: sharing weighted by 1 / route latency.
    "links": "--latency=links",
}


@dataclass
class SimgridSetting:
    latency: str  # a key of LATENCY_MODES
    precision: str  # a key of PRECISIONS
    update: str = "Lazy"  # a key of UPDATES

    @property
    def name(self) -> str:
        return f"latency={self.latency} precision={self.precision} optim={self.update}"

    def args(self) -> list[str]:
        return [LATENCY_MODES[self.latency], *PRECISIONS[self.precision], *UPDATES[self.update]]


@dataclass
class SimgridRun:
    engine_run_wall_s: list[float] = field(default_factory=list)
    platform_build_wall_s: list[float] = field(default_factory=list)
    finish_s: np.ndarray | None = None
    n_finished: int = 0
    simulated_s: float = float("nan")
    stopped_by_wall_limit: bool = False


def route_halves(flows: workloads.FlowSet):
    """Each route split into the half that leaves its source (host uplink, then the leaf's
    uplink to the flow's spine) and the half that reaches its destination (spine downlink,
    host downlink); a route under one leaf is host uplink | host downlink.

    Returns (sources, destinations, source_of_flow, destination_of_flow): the distinct halves
    as lists of link-id tuples, and each flow's index into them. A distinct first half is one
    (host, spine) pair (or a host, for flows under its leaf): SimGrid's per-flow source host.
    """
    offsets = flows.route_offsets
    lengths = np.diff(offsets)
    if not np.all((lengths == 2) | (lengths == 4)):
        raise ValueError("two-tier routes have 2 or 4 links")
    half = lengths // 2
    ids = flows.route_link_ids
    # Pad every half to 2 links with -1 so that np.unique can find the distinct ones.
    first = np.full((flows.n_flows, 2), -1, dtype=np.int64)
    second = np.full((flows.n_flows, 2), -1, dtype=np.int64)
    for k in range(2):
        has = half > k
        first[has, k] = ids[offsets[:-1][has] + k]
        second[has, k] = ids[offsets[:-1][has] + half[has] + k]
    src_rows, source_of_flow = np.unique(first, axis=0, return_inverse=True)
    dst_rows, destination_of_flow = np.unique(second, axis=0, return_inverse=True)
    as_lists = lambda rows: [tuple(int(x) for x in row if x >= 0) for row in rows]  # noqa: E731
    return as_lists(src_rows), as_lists(dst_rows), source_of_flow.ravel(), destination_of_flow.ravel()


def spine_of_flow(tree: workloads.FatTree, flows: workloads.FlowSet) -> np.ndarray:
    """The spine each flow crosses, read from its leaf-uplink link id; -1 under one leaf."""
    leaf_up = tree.tables["leaf_up"]
    first_leaf_up = int(leaf_up.min())
    lengths = np.diff(flows.route_offsets)
    spine = np.full(flows.n_flows, -1, dtype=np.int64)
    remote = lengths == 4
    link = flows.route_link_ids[flows.route_offsets[:-1][remote] + 1]
    spine[remote] = (link - first_leaf_up) % tree.tables["n_spines"]
    return spine


def write_flow_file(path: Path, tree: workloads.FatTree, flows: workloads.FlowSet) -> int:
    """The driver's input (format in fat_tree_flows.cpp); returns the number of source hosts."""
    sources, destinations, source_of_flow, destination_of_flow = route_halves(flows)
    with open(path, "w") as out:
        out.write("fabricsim-simgrid-flows 1\n")
        out.write(f"links {tree.n_links}\n")
        for cap, lat in zip(tree.capacity_Bps.tolist(), tree.latency_s.tolist()):
            out.write(f"{cap!r} {lat!r}\n")
        for section, halves in (("sources", sources), ("destinations", destinations)):
            out.write(f"{section} {len(halves)}\n")
            for links in halves:
                out.write(" ".join(map(str, (len(links), *links))) + "\n")
        out.write(f"flows {flows.n_flows}\n")
        for s, d, b, t in zip(source_of_flow.tolist(), destination_of_flow.tolist(),
                              flows.size_bytes.tolist(), flows.start_s.tolist()):
            out.write(f"{s} {d} {int(b)} {t!r}\n")
    return len(sources)


def read_driver_output(text: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        values[key] = float(value)
    return values


def run_simgrid(driver: str, flow_file: Path, setting: SimgridSetting, repeats: int,
                wall_limit_s: float | None, routes_out: Path | None) -> SimgridRun:
    run = SimgridRun()
    for k in range(repeats):
        finish_file = flow_file.with_suffix(f".{setting.latency}.{setting.precision}.{setting.update}.finish")
        cmd = [driver, str(flow_file), str(finish_file), *setting.args(), "--log=root.thres:critical"]
        if routes_out is not None and k == 0:
            cmd.append(f"--routes-out={routes_out}")
        if wall_limit_s is not None:
            cmd.append(f"--wall-limit-s={wall_limit_s}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode not in (0, 3):  # 3: stopped by the wall limit
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
        out = read_driver_output(proc.stdout)
        run.engine_run_wall_s.append(out["engine_run_wall_s"])
        run.platform_build_wall_s.append(out["platform_build_wall_s"])
        run.n_finished = int(out["n_finished"])
        run.simulated_s = out["simulated_s"]
        run.stopped_by_wall_limit = bool(out["stopped_by_wall_limit"])
        run.finish_s = np.loadtxt(finish_file, ndmin=1)
        if run.stopped_by_wall_limit:
            break
    return run


def check_routes(routes_file: Path, tree: workloads.FatTree, flows: workloads.FlowSet,
                 latency_on_links: bool) -> None:
    """SimGrid's route of every flow must be its fabricsim route, link for link, and SimGrid's
    latency along it the sum of the route's link latencies (0 where SimGrid's links have none)."""
    with open(routes_file) as f:
        for i, line in enumerate(f):
            fields = line.split()
            want = flows.route(i)
            got = np.array(fields[1:], dtype=np.int64)
            if not np.array_equal(got, want):
                raise AssertionError(f"flow {i}: SimGrid route {got.tolist()} != {want.tolist()}")
            latency = float(fields[0])
            want_latency = float(tree.latency_s[want].sum()) if latency_on_links else 0.0
            if not np.isclose(latency, want_latency, rtol=1e-12, atol=0):
                raise AssertionError(f"flow {i}: SimGrid latency {latency} != {want_latency}")
    if i + 1 != flows.n_flows:
        raise AssertionError(f"{i + 1} routes for {flows.n_flows} flows")


def run_fabricsim(tree: workloads.FatTree, flows: workloads.FlowSet, repeats: int):
    """Median wall time of ``Scenario.run`` (a fresh Scenario each time, as asv's setup does)
    and the finish times of the last run, in flow order."""
    import fabricsim  # noqa: F401  (fails early with a clear message if not importable)

    from benchmarks import scenarios

    topo = scenarios.topology(tree)
    times = []
    for _ in range(repeats):
        sc = scenarios.scenario_with_routes(topo, flows)
        t0 = time.perf_counter()
        result = sc.run()
        times.append(time.perf_counter() - t0)
    table = result.flows.sort_by("flow_id")
    return times, table["finish_s"].to_numpy()


class _Reached(Exception):
    pass


def fabricsim_wall_to(tree: workloads.FatTree, flows: workloads.FlowSet, simulated_s: float) -> float:
    """Wall time ``Scenario.run`` takes to simulate the run up to ``simulated_s``: the same
    prefix of the run a SimGrid run stopped at its wall limit got through. Read from the
    progress reports (every 0.1 s of wall time), at the first one at or past that time, so
    fabricsim is charged a little more than the prefix."""
    from benchmarks import scenarios

    sc = scenarios.scenario_with_routes(scenarios.topology(tree), flows)
    reached: list[float] = []
    t0 = time.perf_counter()

    def report(n_done: int, n_total: int, time_s: float) -> None:
        if time_s >= simulated_s:
            reached.append(time.perf_counter() - t0)
            raise _Reached

    try:
        sc.run(progress=report)
    except _Reached:
        pass
    # Finished before any report past it: the whole run is the prefix.
    return reached[0] if reached else time.perf_counter() - t0


def finish_agreement(simgrid_s: np.ndarray, fabricsim_s: np.ndarray) -> dict[str, float]:
    done = np.isfinite(simgrid_s)
    rel = np.abs(simgrid_s[done] - fabricsim_s[done]) / fabricsim_s[done]
    absolute = np.abs(simgrid_s[done] - fabricsim_s[done])
    return dict(
        n_compared=int(done.sum()),
        max_rel=float(rel.max()) if rel.size else float("nan"),
        median_rel=float(np.median(rel)) if rel.size else float("nan"),
        p99_rel=float(np.quantile(rel, 0.99)) if rel.size else float("nan"),
        max_abs_s=float(absolute.max()) if absolute.size else float("nan"),
        worst_flow=int(np.flatnonzero(done)[np.argmax(rel)]) if rel.size else -1,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", required=True, help="the built fat_tree_flows executable")
    parser.add_argument("--cases", default="10000:together,10000:staggered,100000:staggered",
                        help="comma-separated n_flows:arrival (default: %(default)s)")
    parser.add_argument("--settings", default="start:default,start:tight,start:default:Full,start:tight:Full,links:default",
                        help="comma-separated SimGrid latency:precision[:optim] settings "
                             f"(latency in {list(LATENCY_MODES)}, precision in {list(PRECISIONS)}, "
                             f"optim in {list(UPDATES)}, Lazy if not given; default: %(default)s)")
    parser.add_argument("--repeats-fabricsim", type=int, default=5)
    parser.add_argument("--repeats-simgrid", type=int, default=3,
                        help="SimGrid runs per case and setting; cases of 1e5 flows run once")
    parser.add_argument("--wall-limit-s", type=float, default=None,
                        help="stop each SimGrid run after this wall time and report how far it got")
    parser.add_argument("--no-route-check", action="store_true")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where flow files go (default: a temp dir)")
    args = parser.parse_args(argv)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fabricsim-simgrid-"))
    workdir.mkdir(parents=True, exist_ok=True)
    settings = [SimgridSetting(*s.split(":")) for s in args.settings.split(",")]
    tree = workloads.two_tier_fat_tree()
    report = []
    for case in args.cases.split(","):
        n_text, arrival = case.split(":")
        n_flows = int(n_text)
        flows = workloads.random_flows(tree, n_flows, arrival, seed=0)
        flow_file = workdir / f"flows_{n_flows}_{arrival}.txt"
        n_sources = write_flow_file(flow_file, tree, flows)
        spines = spine_of_flow(tree, flows)
        fs_repeats = args.repeats_fabricsim if n_flows <= 10_000 else max(1, args.repeats_fabricsim // 2)
        fs_times, fs_finish = run_fabricsim(tree, flows, fs_repeats)
        np.savetxt(flow_file.with_suffix(".fabricsim.finish"), fs_finish, fmt="%.17g")
        print(f"\n{n_flows} flows, {arrival}: {int((spines >= 0).sum())} through a spine, "
              f"{int((spines < 0).sum())} under one leaf; {n_sources} SimGrid source hosts")
        print(f"  fabricsim run(): median {statistics.median(fs_times):.4f} s over {fs_repeats} runs "
              f"({', '.join(f'{t:.4f}' for t in fs_times)}); makespan {np.nanmax(fs_finish):.6f} s")
        for setting in settings:
            sg_repeats = args.repeats_simgrid if n_flows <= 10_000 else 1
            routes_file = None
            if not args.no_route_check:
                routes_file = flow_file.with_suffix(f".routes.{setting.latency}")
            sg = run_simgrid(args.driver, flow_file, setting, sg_repeats, args.wall_limit_s, routes_file)
            if routes_file is not None:
                check_routes(routes_file, tree, flows, setting.latency == "links")
            agree = finish_agreement(sg.finish_s, fs_finish)
            sg_median = statistics.median(sg.engine_run_wall_s)
            fs_median = statistics.median(fs_times)
            state = (f"STOPPED at the wall limit: {sg.n_finished}/{n_flows} flows done, simulated "
                     f"{sg.simulated_s:.6f} s" if sg.stopped_by_wall_limit else "complete")
            each = ", ".join(f"{t:.3f}" for t in sg.engine_run_wall_s)
            print(f"  SimGrid {setting.name}: engine run median {sg_median:.3f} s over "
                  f"{len(sg.engine_run_wall_s)} runs ({each}); "
                  f"platform build {statistics.median(sg.platform_build_wall_s):.3f} s; {state}")
            ratio = sg_median / fs_median
            fs_prefix_s = None
            if sg.stopped_by_wall_limit:
                # Not against fabricsim's whole run: against its wall time to the same point.
                fs_prefix_s = fabricsim_wall_to(tree, flows, sg.simulated_s)
                ratio = sg_median / fs_prefix_s
                print(f"  fabricsim run() to simulated {sg.simulated_s:.6f} s: {fs_prefix_s:.2f} s")
                print(f"    SimGrid / fabricsim wall time over the same {sg.simulated_s:.6f} s: "
                      f"{ratio:.1f}x")
            else:
                print(f"    SimGrid / fabricsim wall time: {ratio:.1f}x")
            print(f"    finish times, |SimGrid - fabricsim| / fabricsim over {agree['n_compared']} flows: "
                  f"max {agree['max_rel']:.3g} (flow {agree['worst_flow']}), p99 {agree['p99_rel']:.3g}, "
                  f"median {agree['median_rel']:.3g}; max absolute {agree['max_abs_s']:.3g} s")
            if routes_file is not None:
                print(f"    routes: all {n_flows} SimGrid routes equal fabricsim's, link for link")
            report.append(dict(n_flows=n_flows, arrival=arrival, setting=setting.name,
                               simgrid_engine_run_wall_s=sg.engine_run_wall_s,
                               simgrid_platform_build_wall_s=sg.platform_build_wall_s,
                               simgrid_n_finished=sg.n_finished, simgrid_simulated_s=sg.simulated_s,
                               simgrid_stopped_by_wall_limit=sg.stopped_by_wall_limit,
                               fabricsim_run_wall_s=fs_times, fabricsim_prefix_wall_s=fs_prefix_s,
                               ratio=ratio, **agree))
            sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
