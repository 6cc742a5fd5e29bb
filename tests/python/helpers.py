"""Shared test helpers: a scenario builder that mirrors every activity into the reference model,
and the invariants checked on every engine run.

``Model`` wraps ``fabricsim.Scenario``: each ``flow`` / ``delay`` / ``dependency`` / ``fault`` call
goes to the engine and is recorded (with the route the engine chose, from ``sc.route_of``) as a
reference activity or fault. ``Model.run()`` runs the engine with ``record_rates=True`` and
checks ``check_invariants`` before returning the result, so every test that runs the engine
through a Model checks them.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

import fabricsim as fs
from fabricsim.exceptions import RoutingError
from reference import (
    RefDelay,
    RefFault,
    RefFlow,
    max_min_reference,
    route_latency,
    route_usage,
    simulate_reference,
)

@contextlib.contextmanager
def small_switches(rates):
    """Registers, for a block, 8-port Ethernet switches with adaptive routing and no latency
    named as `rates` ({name: port rate}): at 400G, 32 hosts make a two-tier Clos of 8
    leaves and 4 spines; at 800G split in two, a two-plane ConnectX-8 host has one 400G link
    per plane."""
    from fabricsim import catalog

    for name, rate in rates.items():
        catalog.add_part(
            name, "switch", source="[assumed] a small switch for tests", protocol="ethernet",
            ports=8, port_Bps=rate, lane_Bps="400Gb/s", optics="pluggable", ports_per_cage=1,
            optics_watts_per_port=0.0, system_watts=None, latency_s=0.0, sharp=False,
            adaptive_routing=True,
        )
    try:
        yield
    finally:
        for name in rates:
            catalog.remove_part(name)


REL = 1e-9          # relative tolerance of every comparison with the engine
ABS_T = 1e-15       # absolute slack on times (for values that are exactly zero)
RESOLUTION = 1e-12  # the engine's event resolution, relative in time (docs/python-api.md)
# The engine's re-solve holds each constraint's load as a running float sum, right to some
# hundred roundings of its capacity; a flow whose own load there is a tiny share of it (a
# coefficient of 1e-6 beside flows of 1) and that takes what flows held elsewhere leave of it
# has a rate right only to that divided by its coefficient, in the engine and in the float
# reference alike (where it ties with them instead, both are exact: tests/rust/engine.rs,
# a_tiny_share_beside_dormant_flows_ties_with_them). Rates may be off by LOAD_RESOLUTION x
# capacity / coefficient at the flow's bottleneck on top of REL: nothing for a share above
# 1e-4, 1e-7 relative at a share of 1e-6.
LOAD_RESOLUTION = 1e-13


def close(a, b, rel=REL, abs_=ABS_T):
    a = float(a)
    b = float(b)
    if a == b:
        return True
    return abs(a - b) <= rel * max(abs(a), abs(b)) + abs_


def assert_close(a, b, what, rel=REL, abs_=ABS_T):
    assert close(a, b, rel, abs_), f"{what}: got {a!r}, expected {b!r} (diff {float(a) - float(b):.3g})"


class Model:
    """One scenario, built in fabricsim and recorded for the reference at the same time."""

    def __init__(self, src, dst, capacity_Bps, latency_s, *, n_nodes=None, seed=0):
        self.src = [int(x) for x in src]
        self.dst = [int(x) for x in dst]
        self.capacity = [float(x) for x in capacity_Bps]
        self.latency = [float(x) for x in latency_s]
        self.topo = fs.Topology.from_arrays(
            np.asarray(self.src, dtype=np.int64),
            np.asarray(self.dst, dtype=np.int64),
            np.asarray(self.capacity, dtype=np.float64),
            np.asarray(self.latency, dtype=np.float64),
            n_nodes=n_nodes,
        )
        self.n_nodes = n_nodes
        self.seed = seed
        self.sc = fs.Scenario(self.topo, seed=seed)
        self.acts = []     # RefFlow / RefDelay, index = activity id
        self.routed = {}   # flow id -> how the fabric routes it: (src, dst), or a coupled flow's edges
        self.faults = []   # (time_s, links, factor), as given to add_fault
        self.routes = {}   # flow id -> link ids
        self.ends = {}     # flow id -> (src, dst)
        self.tags = {}     # activity id -> tag
        self.max_rate = {}  # flow id -> cap or None
        self.weight = {}  # flow id -> share weight

    # ------------------------------------------------------------------ building

    def flow(self, src, dst, size_bytes, *, start_s=0.0, after=(), route=None, tag=None,
             max_rate_Bps=None, weight=1.0):
        fid = self.sc.add_flow(src, dst, size_bytes, start_s=start_s, after=list(after),
                               route=route, tag=tag, max_rate_Bps=max_rate_Bps, weight=weight)
        assert isinstance(fid, int) and fid == len(self.acts), (fid, len(self.acts))
        links = [int(x) for x in self.sc.route_of(fid)]
        if route is not None:
            assert links == [int(x) for x in route], (links, route)
        check_route_is_walk(self, src, dst, links)
        self.routes[fid] = links
        self.ends[fid] = (src, dst)
        if route is None:
            self.routed[fid] = (src, dst)
        self.tags[fid] = tag
        self.max_rate[fid] = max_rate_Bps
        self.weight[fid] = weight
        self.acts.append(RefFlow(
            bytes=float(size_bytes),
            usage=route_usage(links),
            latency_s=route_latency(links, self.latency),
            start_s=float(start_s),
            after=tuple(int(a) for a in after),
            max_rate_Bps=max_rate_Bps,
            weight=weight,
        ))
        return fid

    def flows(self, src, dst, size_bytes, *, start_s=0.0, tag=None):
        """add_flows (vectorised, ECMP-routed), recorded like add_flow."""
        ids = self.sc.add_flows(src, dst, size_bytes, start_s=start_s, tag=tag)
        n = len(ids)
        starts = np.broadcast_to(np.asarray(start_s, dtype=np.float64), (n,))
        for k, fid in enumerate(ids.tolist()):
            assert fid == len(self.acts), (fid, len(self.acts))
            links = [int(x) for x in self.sc.route_of(fid)]
            s_, d_ = int(src[k]), int(dst[k])
            check_route_is_walk(self, s_, d_, links)
            self.routes[fid] = links
            self.ends[fid] = (s_, d_)
            self.routed[fid] = (s_, d_)
            self.tags[fid] = tag
            self.max_rate[fid] = None
            self.weight[fid] = 1.0
            self.acts.append(RefFlow(float(size_bytes[k]), route_usage(links),
                                     route_latency(links, self.latency), float(starts[k])))
        return ids

    def coupled(self, edges, size_bytes, *, latency_s=0.0, start_s=0.0, after=(), tag=None,
                max_rate_Bps=None, usage=None, weight=1.0):
        """A coupled flow (docs/design.md section 2) of edges (src, dst, coefficient), each routed
        by ECMP and their routes added up: how a flow comes to put a coefficient other than 1
        on a link, now that a route may not cross a link twice. Recorded with the usage the
        engine made of it, which must be ``usage`` [(link, coefficient)] when given."""
        fid, got = add_coupled_flow(self.sc, edges, size_bytes, latency_s, start_s,
                                    [int(a) for a in after], tag, max_rate_Bps)
        if weight != 1.0:
            self.sc._core.set_weights(fid, fid + 1, weight)
        assert fid == len(self.acts), (fid, len(self.acts))
        assert usage is None or got == sorted((int(l), float(c)) for l, c in usage), (got, usage)
        self.routes[fid] = []
        self.ends[fid] = (None, None)  # a coupled flow has no one src or dst
        self.routed[fid] = edges
        self.tags[fid] = tag
        self.max_rate[fid] = max_rate_Bps
        self.weight[fid] = weight
        self.acts.append(RefFlow(float(size_bytes), got, float(latency_s), float(start_s),
                                 tuple(int(a) for a in after), max_rate_Bps, weight))
        return fid

    def delay(self, duration_s, *, start_s=0.0, after=(), tag=None):
        did = self.sc.add_delay(duration_s, start_s=start_s, after=list(after), tag=tag)
        assert isinstance(did, int) and did == len(self.acts), (did, len(self.acts))
        self.tags[did] = tag
        self.acts.append(RefDelay(float(duration_s), float(start_s),
                                  tuple(int(a) for a in after)))
        return did

    def dependency(self, activity_id, after_id):
        self.sc.add_dependency(activity_id, after_id)
        a = self.acts[activity_id]
        a.after = tuple(a.after) + (int(after_id),)

    def fault(self, at_s, links, factor=0.0, *, until_s=None):
        """Scenario.add_fault on links: from at_s on they carry factor x nominal capacity
        (0 = down), until until_s (then nominal again)."""
        self.sc.add_fault(at_s=at_s, links=list(links), factor=factor, until_s=until_s)
        self.faults.append((float(at_s), [int(x) for x in links], float(factor)))
        if until_s is not None:
            self.faults.append((float(until_s), [int(x) for x in links], 1.0))

    def ref_faults(self):
        """The faults as the reference takes them (RefFault): at each fault time, the capacity
        in force of every link a fault names, and the usage list of every flow the fabric routes,
        chosen again on the fabric in force (Scenario.add_fault: routed again as on the failed
        fabric, with the same flow ids and seed; None where no path is left). Flows given a
        route keep it."""
        key = (len(self.acts), len(self.faults))
        if getattr(self, "_ref_faults", (None, None))[0] != key:
            self._ref_faults = (key, self._ref_faults_now())
        return self._ref_faults[1]

    def _ref_faults_now(self):
        out = []
        factor = {}
        for time_s in sorted({t for t, _, _ in self.faults}):
            for t, links, f in self.faults:  # in the order given: the last on a link counts
                if t == time_s:
                    factor.update((link, f) for link in links)
            capacity = {link: self.capacity[link] * f for link, f in factor.items()}
            in_force = [capacity.get(link, c) for link, c in enumerate(self.capacity)]
            out.append(RefFault(time_s, capacity, self.routes_on(in_force)))
        return out

    def routes_on(self, capacity):
        """{flow: usage list or None} of the routed flows on this topology with `capacity`
        (0 = down), from a scenario that adds the same activities in the same order."""
        topo = fs.Topology.from_arrays(
            np.asarray(self.src, dtype=np.int64), np.asarray(self.dst, dtype=np.int64),
            np.asarray(capacity, dtype=np.float64), np.asarray(self.latency, dtype=np.float64),
            n_nodes=self.n_nodes)
        sc = fs.Scenario(topo, seed=self.seed)
        usage = {}
        for i in range(len(self.acts)):
            how = self.routed.get(i)
            try:
                if isinstance(how, tuple):
                    fid = sc.add_flow(how[0], how[1], 1.0)
                    usage[i] = route_usage(int(x) for x in sc.route_of(fid))
                elif how is not None:
                    fid, usage[i] = add_coupled_flow(sc, how, 1.0)
                else:
                    fid = sc.add_delay(0.0)  # keeps the ids in step
            except RoutingError:
                usage[i] = None
                fid = sc.add_delay(0.0)
            assert fid == i, (fid, i)
        return usage

    @property
    def flow_ids(self):
        return [i for i, a in enumerate(self.acts) if isinstance(a, RefFlow)]

    @property
    def delay_ids(self):
        return [i for i, a in enumerate(self.acts) if isinstance(a, RefDelay)]

    # ------------------------------------------------------------------ running

    def run(self, fairness=True):
        res = self.sc.run(record_rates=True)
        check_invariants(self, res, fairness=fairness)
        return res

    def reference(self):
        return simulate_reference(self.capacity, self.acts, self.ref_faults())


def add_coupled_flow(sc, edges, size_bytes, latency_s=0.0, start_s=0.0, after=(), tag=None,
                     max_rate_Bps=None):
    """A coupled flow of edges (src, dst, coefficient), routed by ECMP and their routes added
    up; returns its id and the usage list the engine made of it, [(link, coefficient)]."""
    e = np.asarray(edges, dtype=np.float64).reshape(-1, 3)
    fid = sc._core.add_coupled_flow(
        np.ascontiguousarray(e[:, 0], dtype=np.int64), np.ascontiguousarray(e[:, 1], dtype=np.int64),
        np.ascontiguousarray(e[:, 2]), "sum", [], float(size_bytes), float(latency_s), float(start_s),
        list(after), tag, max_rate_Bps)
    links, coefs = sc.usage_of(fid)
    return fid, sorted(zip((int(x) for x in links), (float(c) for c in coefs)))


def fair_rates(capacity, usage, caps, weights=None):
    """Max-min fair rates (the reference's) and, per flow, the absolute slack its engine rate
    has on top of REL: LOAD_RESOLUTION x capacity / coefficient at its bottleneck."""
    held = []
    rates = max_min_reference(capacity, usage, caps, bottleneck=held, weights=weights)
    slack = []
    for u, b in zip(usage, held):
        k = sum(c for link, c in u if link == b) if b is not None else 0
        slack.append(LOAD_RESOLUTION * capacity[b] / k if k else 0.0)
    return rates, slack


def check_route_is_walk(model, src, dst, links):
    """The route chains link to link from src to dst, crossing no link twice."""
    assert links, f"empty route {src}->{dst}"
    assert len(set(links)) == len(links), f"route {links} crosses a link twice"
    node = src
    for link in links:
        assert 0 <= link < len(model.src), f"route {links} has unknown link {link}"
        assert model.src[link] == node, f"route {links} from {src} to {dst} is not a walk"
        node = model.dst[link]
    assert node == dst, f"route {links} ends at {node}, not {dst}"


# ---------------------------------------------------------------------- invariants


def _columns(table):
    return {name: table.column(name).to_pylist() for name in table.column_names}


class InForce:
    """Link capacities and flows' usage lists in force during a run: the model's own, then
    those the model's faults set (Model.ref_faults), each from its time on. A time within the
    engine's resolution after a fault sees it: the engine applies a fault at the instant it
    falls in, which may open a hair before it."""

    def __init__(self, model):
        self.capacity_steps = [(-math.inf, list(model.capacity))]
        self.usage_steps = {f: [(-math.inf, model.acts[f].usage)] for f in model.flow_ids}
        self.fault_times = []
        capacity = list(model.capacity)
        for x in (model.ref_faults() if model.faults else []):
            self.fault_times.append(x.time_s)
            capacity = [x.capacity.get(link, c) for link, c in enumerate(capacity)]
            self.capacity_steps.append((x.time_s, capacity))
            for f, u in x.usage.items():
                self.usage_steps[f].append((x.time_s, u))

    @staticmethod
    def _at(steps, t):
        seen = t + RESOLUTION * abs(t)
        return [v for when, v in steps if when <= seen][-1]

    def capacity(self, t):
        return self._at(self.capacity_steps, t)

    def usage(self, f, t):
        """Flow f's usage list at time t (None: no path)."""
        return self._at(self.usage_steps[f], t)

    def links_ever_used(self):
        return sorted({link for steps in self.usage_steps.values() for _, u in steps
                       for link, _ in (u or ())})


def flow_segments(model, res, with_instants=False):
    """Per flow with bytes > 0: list of (t0, t1, rate) from res.rate_changes, clipped to its
    finish (or its failure).

    with_instants: also return the rows that have no extent but a positive rate (transfers
    shorter than the time resolution), as (flow, time, rate)."""
    flows = _columns(res.flows)
    finish = {f: (t if t is not None else x)
              for f, t, x in zip(flows["flow_id"], flows["finish_s"], flows["failed_s"])}
    rc = _columns(res.rate_changes)
    rows = {}
    for t, f, r in zip(rc["time_s"], rc["flow_id"], rc["rate_Bps"]):
        assert f in finish, f"rate_changes names flow {f}, which is not in res.flows"
        assert finish[f] is not None, f"rate_changes names flow {f}, which never ran"
        rows.setdefault(f, []).append((t, r))
    segs = {}
    instants = []
    for f, lst in rows.items():
        times = [t for t, _ in lst]
        assert times == sorted(times), f"rate_changes of flow {f} not in time order: {times}"
        out = []
        for k, (t, r) in enumerate(lst):
            end = lst[k + 1][0] if k + 1 < len(lst) else finish[f]
            end = min(end, finish[f])
            if end > t:
                out.append((t, end, r))
            else:
                # A row without extent: re-rated at the same time (by a later instant whose
                # events lay within the time resolution of this one: the later row holds from
                # t on), a closing row at the finish, or a row at the start of a transfer
                # shorter than the time resolution (checked in check_invariants). A positive
                # rate was the engine's for an instant, and may count in a peak.
                superseded = k + 1 < len(lst) and lst[k + 1][0] == t
                assert superseded or close(t, finish[f]), (
                    f"flow {f}: rate row ({t}, {r}) after its finish {finish[f]}")
                if r > 0:
                    instants.append((f, t, r))
        segs[f] = out
    if with_instants:
        return segs, instants
    return segs


def check_invariants(model, res, fairness=True):
    """Everything that must hold for any run, checked from the result tables alone (and the
    model's inputs: with faults, the capacities and usage lists in force at each time)."""
    flows = _columns(res.flows)
    delays = _columns(res.delays)
    links = _columns(res.links)
    fids = model.flow_ids
    dids = model.delay_ids
    assert flows["flow_id"] == fids, "res.flows must list every flow once, in id order"
    assert delays["delay_id"] == dids, "res.delays must list every delay once, in id order"
    force = InForce(model)

    finish = {}
    failed = {}
    status = {}
    for k, f in enumerate(flows["flow_id"]):
        finish[f] = flows["finish_s"][k]
        failed[f] = flows["failed_s"][k]
        status[f] = flows["status"][k]
    for k, d in enumerate(delays["delay_id"]):
        finish[d] = delays["finish_s"][k]
        failed[d] = None
        status[d] = delays["status"][k]
    if not model.faults:
        assert set(status.values()) <= {"done"}, "a run without faults fails nothing"

    def check_skipped(a_id, ready, start, fin):
        a = model.acts[a_id]
        assert ready is None and start is None and fin is None, f"skipped {a_id} has times"
        assert any(status[d] != "done" for d in a.after), (
            f"activity {a_id} skipped though all it waits for is done")

    def expected_ready(a):
        assert all(status[d] == "done" for d in a.after), "ran before what it waits for"
        return max([a.start_s] + [finish[d] for d in a.after])

    # ---- per-activity timing
    for k, f in enumerate(fids):
        a = model.acts[f]
        ready, start, fin = flows["ready_s"][k], flows["start_s"][k], flows["finish_s"][k]
        src, dst = model.ends[f]
        assert flows["src"][k] == src and flows["dst"][k] == dst, f"flow {f} endpoints"
        assert flows["bytes"][k] == a.bytes, f"flow {f} bytes {flows['bytes'][k]} != {a.bytes}"
        assert flows["tag"][k] == model.tags[f], f"flow {f} tag"
        mean = flows["mean_rate_Bps"][k]
        if status[f] == "skipped":
            check_skipped(f, ready, start, fin)
            assert failed[f] is None and mean == 0, f"skipped flow {f}"
            continue
        assert_close(ready, expected_ready(a), f"flow {f} ready_s = max(start_s, deps)")
        assert_close(start, ready + a.latency_s, f"flow {f} start_s = ready_s + latency")
        if status[f] == "failed":
            assert fin is None and mean == 0 and a.bytes > 0, f"failed flow {f}"
            assert failed[f] >= start * (1 - RESOLUTION), f"flow {f} failed before it started"
            assert flows["error"][k], f"failed flow {f} says no why"
            continue
        assert status[f] == "done" and failed[f] is None, f"flow {f}: {status[f]}"
        assert fin >= start >= ready, f"flow {f}: ready {ready} start {start} finish {fin}"
        if a.bytes == 0:
            assert_close(fin, start, f"zero-byte flow {f} finishes at its start")
            assert mean == 0, f"zero-byte flow {f} mean_rate {mean}"
        elif fin > start:
            assert_close(mean, a.bytes / (fin - start), f"flow {f} mean_rate_Bps")
        # (fin == start with bytes > 0 is checked below: only below the time resolution)
    for k, d in enumerate(dids):
        a = model.acts[d]
        assert delays["tag"][k] == model.tags[d], f"delay {d} tag"
        if status[d] == "skipped":
            check_skipped(d, delays["ready_s"][k], None, delays["finish_s"][k])
            continue
        assert status[d] == "done", f"delay {d}: {status[d]}"
        assert_close(delays["ready_s"][k], expected_ready(a), f"delay {d} ready_s")
        assert_close(delays["finish_s"][k], delays["ready_s"][k] + a.duration_s,
                     f"delay {d} finish_s = ready_s + duration")

    ends = [t for t in list(finish.values()) + list(failed.values()) if t is not None]
    makespan = max(ends) if ends else 0.0
    time_slack = RESOLUTION * 4 * max(makespan, 1e-300)
    summary = res.summary
    assert_close(summary.makespan_s, makespan, "summary.makespan_s = last finish or failure")
    assert summary.n_flows == len(fids) and summary.n_delays == len(dids), "summary counts"
    assert_close(summary.bytes_moved, sum(model.acts[f].bytes for f in fids if status[f] == "done"),
                 "summary.bytes_moved (flows done)")
    lk = res.links.to_pydict()
    busiest = sorted(range(len(lk["link_id"])), key=lambda i: (-lk["mean_utilization"][i], lk["link_id"][i]))[:5]
    assert summary.busiest_links["link_id"].to_pylist() == [lk["link_id"][i] for i in busiest], \
        "summary.busiest_links: the five highest mean utilizations, ties by link id"

    # ---- rates: per flow, from rate_changes
    segs, instants = flow_segments(model, res, with_instants=True)
    carried = [0.0] * len(model.capacity)
    carried_slack = [0.0] * len(model.capacity)
    for k, f in enumerate(fids):
        a = model.acts[f]
        s = segs.get(f, [])
        if a.bytes == 0 or status[f] == "skipped":
            assert not any(r > 0 for _, _, r in s), f"flow {f} ({status[f]}, {a.bytes} B) has a rate"
            continue
        start = flows["start_s"][k]
        end = finish[f] if status[f] == "done" else failed[f]
        if end - start <= time_slack and status[f] == "done":
            # A transfer shorter than the time resolution at this point in time: nothing to
            # integrate, but it must really have been that short at the fastest possible rate.
            fastest = min([model.capacity[l] / c for l, c in force.usage(f, start)]
                          + ([model.max_rate[f]] if model.max_rate[f] is not None else []))
            assert a.bytes <= fastest * 2 * time_slack, (
                f"flow {f} of {a.bytes} bytes took {end - start} s (faster than its links allow)")
            for link, c in force.usage(f, start):
                carried[link] += c * a.bytes
            continue
        if status[f] == "done" or s:
            assert s, f"flow {f} ({a.bytes} bytes) has no rate_changes"
            assert_close(s[0][0], start, f"flow {f} first rate row at start_s", abs_=time_slack)
        peak = 0.0
        moved = 0.0
        paths = set()
        for t0, t1, r in s:
            assert r > 0, f"flow {f} transfers at rate {r} on [{t0}, {t1}]"
            if model.max_rate[f] is not None:
                assert r <= model.max_rate[f] * (1 + REL), f"flow {f} rate {r} over its cap"
            usage = force.usage(f, t0)
            assert usage is not None, f"flow {f} transfers at {t0} with no path"
            paths.add(tuple(usage))
            peak = max(peak, r)
            moved += r * (t1 - t0)
        slack = peak * time_slack * (len(s) + 1)
        if status[f] == "done":
            # Bytes conserved; the absolute slack is what time resolution allows.
            assert_close(moved, a.bytes, f"flow {f} integral of rate over its transfer", abs_=slack)
        else:
            assert moved <= a.bytes * (1 + REL) + slack, f"failed flow {f} moved {moved} B"
        if status[f] == "done" and len(paths) == 1:
            for link, c in force.usage(f, s[0][0]):
                carried[link] += c * a.bytes
        else:
            # The engine counts what a flow moved as the difference of the bytes it had left
            # (so does the reference): each part is right to a few roundings of its size.
            for t0, t1, r in s:
                for link, c in force.usage(f, t0):
                    carried[link] += c * r * (t1 - t0)
                    carried_slack[link] += c * (r * time_slack * 2 + a.bytes * 1e-15)

    # ---- links: load never over the capacity in force; reconstructed link columns
    n_links = len(model.capacity)
    # Fault times split the intervals they fall in: capacities change there.
    bounds = sorted({t for s in segs.values() for t0, t1, _ in s for t in (t0, t1)}
                    | set(force.fault_times))
    starts = sorted(((t0, t1, r, f) for f, s in segs.items() for t0, t1, r in s),
                    key=lambda x: x[0])
    active = []
    nxt = 0
    busy = [0.0] * n_links
    peak_all = [0.0] * n_links   # over every interval with an extent
    peak_long = [0.0] * n_links  # over intervals longer than the time resolution
    for a_t, b_t in zip(bounds, bounds[1:]):
        while nxt < len(starts) and starts[nxt][0] <= a_t:
            active.append(starts[nxt])
            nxt += 1
        active = [x for x in active if x[1] > a_t]
        now = [(f, r) for t0, t1, r, f in active if t0 <= a_t and t1 >= b_t]
        # Intervals shorter than the engine's time resolution may come from events it handled
        # together: they count for capacity, busy time and peaks, not for the fairness check.
        # Computed as the engine computes an instant's horizon (a + |a| x RESOLUTION, rounded):
        # an event a hair more than RESOLUTION after a can still round onto the horizon.
        long_enough = b_t > a_t + abs(a_t) * RESOLUTION
        capacity = force.capacity(a_t)
        usage = {f: force.usage(f, a_t) for f, _ in now}
        load = [0.0] * n_links
        for f, r in now:
            for link, c in usage[f]:
                load[link] += c * r
        for link in range(n_links):
            cap = capacity[link]
            assert load[link] <= cap * (1 + REL), (
                f"link {link} carries {load[link]} B/s > capacity {cap} on [{a_t}, {b_t}]")
            if load[link] > 0:
                busy[link] += b_t - a_t
                peak_all[link] = max(peak_all[link], load[link] / model.capacity[link])
                if long_enough:
                    peak_long[link] = max(peak_long[link], load[link] / model.capacity[link])
        if fairness and now and long_enough:
            ids = [f for f, _ in now]
            want, slack = fair_rates(capacity, [usage[f] for f in ids],
                                     [model.max_rate[f] for f in ids],
                                     [model.weight.get(f, 1.0) for f in ids])
            for (f, r), w, x in zip(now, want, slack):
                assert_close(r, w, f"flow {f} rate on [{a_t}, {b_t}] vs max-min of the "
                             f"transferring set {ids}", abs_=ABS_T + x)

    # Loads less than one time resolution apart may be counted as simultaneous by the engine
    # (they belong to one instant), so the upper bound on a peak sums every flow's highest
    # rate within +-time_slack of each instant.
    seg_list = [(t0, t1, r, f) for f, s in segs.items() for t0, t1, r in s]
    seg_list += [(t, t, r, f) for f, t, r in instants]
    peak_window = [0.0] * n_links
    for t in bounds + [t for _, t, _ in instants]:
        top = {}
        for t0, t1, r, f in seg_list:
            if t0 <= t + time_slack and t1 >= t - time_slack:
                top[f] = max(top.get(f, 0.0), r)
        load = [0.0] * n_links
        for f, r in top.items():
            # Either side of a reroute within the window: count the flow on both paths.
            for u in {tuple(force.usage(f, x) or ()) for x in (t - time_slack, t, t + time_slack)}:
                for link, c in u:
                    load[link] += c * r
        for link in range(n_links):
            if model.capacity[link] > 0:
                peak_window[link] = max(peak_window[link], load[link] / model.capacity[link])

    used = force.links_ever_used()
    assert links["link_id"] == used, "res.links lists every link some flow uses, in id order"
    assert links["src"] == [model.src[l] for l in used], "res.links src"
    assert links["dst"] == [model.dst[l] for l in used], "res.links dst"
    assert links["capacity_Bps"] == [model.capacity[l] for l in used], "res.links capacity"
    for row, link in enumerate(used):
        assert_close(links["bytes_carried"][row], carried[link],
                     f"link {link} bytes_carried = sum of coefficient * bytes moved on it",
                     abs_=carried_slack[link] + ABS_T)
        assert_close(links["busy_s"][row], busy[link], f"link {link} busy_s",
                     abs_=time_slack * (len(bounds) + 1))
        if model.capacity[link] == 0:
            assert carried[link] == 0, f"zero-capacity link {link} carries bytes"
            continue
        peak = links["peak_utilization"][row]
        assert 0 <= peak <= 1 + REL, f"link {link} peak_utilization {peak}"
        upper = max(peak_all[link], peak_window[link])
        assert peak_long[link] * (1 - REL) - 1e-12 <= peak <= upper * (1 + REL) + 1e-12, (
            f"link {link} peak_utilization {peak}, expected {peak_long[link]} "
            f"(or up to {upper} counting loads within one time resolution as simultaneous)")
        if makespan > 0:
            assert_close(links["mean_utilization"][row],
                         links["bytes_carried"][row] / (model.capacity[link] * makespan),
                         f"link {link} mean_utilization")
    return segs


def compare_to_reference(model, res, ref=None):
    """Engine result against the reference simulation: outcome and times per activity, rates
    over time."""
    ref = ref or model.reference()
    flows = _columns(res.flows)
    delays = _columns(res.delays)

    def same_time(got, want, what):
        if want is None:
            assert got is None, f"{what}: got {got!r}, expected none"
        else:
            assert got is not None, f"{what}: got none, expected {float(want)!r}"
            assert_close(got, want, what)

    for k, f in enumerate(flows["flow_id"]):
        assert flows["status"][k] == ref.status[f], (
            f"flow {f} status: got {flows['status'][k]}, expected {ref.status[f]}")
        for col in ("ready_s", "start_s", "finish_s", "failed_s"):
            same_time(flows[col][k], getattr(ref, col)[f], f"flow {f} {col}")
    for k, d in enumerate(delays["delay_id"]):
        assert delays["status"][k] == ref.status[d], (
            f"delay {d} status: got {delays['status'][k]}, expected {ref.status[d]}")
        for col in ("ready_s", "finish_s"):
            same_time(delays[col][k], getattr(ref, col)[d], f"delay {d} {col}")
    # Rates at the middle of every reference interval long enough to be unambiguous.
    segs = flow_segments(model, res)
    force = InForce(model)
    for t0, t1, rates in ref.intervals:
        if t1 - t0 <= 1e-6 * max(abs(t1), 1e-300):
            continue
        mid = 0.5 * (t0 + t1)
        ids = sorted(rates)
        _, slack = fair_rates(force.capacity(mid), [force.usage(f, mid) for f in ids],
                              [model.max_rate[f] for f in ids],
                              [model.weight.get(f, 1.0) for f in ids])
        slack = dict(zip(ids, slack))
        for f in model.flow_ids:
            got = next((r for a, b, r in segs.get(f, []) if a <= mid < b), 0.0)
            assert_close(got, rates.get(f, 0.0), f"rate of flow {f} at t={mid}",
                         abs_=ABS_T + slack.get(f, 0.0))
    return ref
