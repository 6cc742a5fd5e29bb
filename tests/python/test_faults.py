"""Faults during a run (Scenario.add_fault): closed forms for a flow that loses, regains or
shares capacity mid-run, equality with faults made before the run, failures reported in their
rows, and bad input."""

import numpy as np
import pytest

import fabricsim as fs
from fabricsim.exceptions import InvalidArgumentError, UnknownLinkError, UnknownNodeError
from helpers import small_switches

GB = 1e9


@pytest.fixture(scope="module", autouse=True)
def small_switch():
    with small_switches({"test-fault-sw8": "400Gb/s", "test-fault-sw8x800": "800Gb/s"}):
        yield


def clos(**kw):
    return fs.clos(n_hosts=32, switch="test-fault-sw8", nic="cx7", **kw)


def host_Bps(topo) -> float:
    return topo.structure["scale_out"]["link_Bps"]


def rows(res):
    return {r["flow_id"]: r for r in res.flows.to_pylist()}


def carried(res) -> dict[int, float]:
    return dict(zip(res.links["link_id"].to_pylist(), res.links["bytes_carried"].to_pylist()))


@pytest.mark.parametrize("routing", ["ecmp", "adaptive"])
def test_a_fault_at_time_zero_equals_the_fabric_failed_before_the_run(routing):
    """Same flow keys and seed: the reroute at t=0 lands where routing on the failed fabric
    does, so every time in the flows table agrees."""
    topo = clos()
    rng = np.random.default_rng(5)
    src = rng.integers(0, 32, 200)
    dst = (src + rng.integers(1, 32, 200)) % 32
    spine_links = [l for l in range(topo.n_links) if "spine" in topo.node_names[int(topo.links["dst"][l].as_py())]]
    down = [int(x) for x in rng.choice(spine_links, 5, replace=False)]
    before = fs.Scenario(topo.fail(links=down), seed=3, routing=routing)
    before.add_flows(src, dst, 1e8)
    during = fs.Scenario(topo, seed=3, routing=routing)
    during.add_flows(src, dst, 1e8)
    during.add_fault(at_s=0.0, links=down)
    a, b = before.run().flows, during.run().flows
    for col in ("start_s", "finish_s", "status"):
        assert a[col].to_pylist() == pytest.approx(b[col].to_pylist(), rel=1e-12) if col != "status" \
            else a[col].to_pylist() == b[col].to_pylist()


def test_a_plane_down_mid_run_halves_a_two_plane_nic():
    """A 2-plane ConnectX-8 host sends 8 GB adaptively at 2 x 400G; plane 1 fails at 0.02 s:
    the rest goes at 400G. Closed form: t = T + (S - R T) / (R / 2)."""
    topo = fs.clos(n_hosts=32, switch="test-fault-sw8x800", nic="cx8", planes=2, routing="adaptive")
    rate = 2 * host_Bps(topo)
    size, t_fault = 8 * GB, 0.02
    sc = fs.Scenario(topo)
    f = sc.add_flow(0, 31, size)
    sc.add_fault(at_s=t_fault, planes=[1])
    res = sc.run()
    want = t_fault + (size - rate * t_fault) / (rate / 2)
    start = rows(res)[f]["start_s"]
    assert rows(res)[f]["finish_s"] - start == pytest.approx(want, rel=1e-9)
    # A degraded NIC (a factor on all its links) works the same way, at a quarter rate.
    sc = fs.Scenario(topo)
    f = sc.add_flow(0, 31, size)
    sc.add_fault(at_s=t_fault, nodes=[int(topo.nics[0])], factor=0.25)
    want = t_fault + (size - rate * t_fault) / (rate * 0.25)
    assert rows(sc.run())[f]["finish_s"] - start == pytest.approx(want, rel=1e-9)


def _two_plane_clos():
    return fs.clos(n_hosts=32, switch="test-fault-sw8x800", nic="cx8", planes=2, routing="adaptive")


def _links(topo, plane, *, src=None, dst=None, above_leaves=False):
    """Link ids of one plane from `src` or to `dst`, or all those between switches."""
    links = np.array(topo._core.links_of_plane(plane))
    s, d = topo.links["src"].to_numpy()[links], topo.links["dst"].to_numpy()[links]
    hosts = topo.structure["scale_out"]["n_endpoints"]
    if above_leaves:
        return links[(s >= hosts) & (d >= hosts)].tolist()
    return links[s == src].tolist() if src is not None else links[d == dst].tolist()


def test_a_sprayed_flow_gets_only_the_planes_that_reach_its_destination():
    """Plane 1 loses every link above its leaves: a flow between leaves has plane 0 alone
    (one 400G link), a flow inside a leaf still has both planes."""
    topo = _two_plane_clos()
    broken = topo.fail(links=_links(topo, 1, above_leaves=True))
    sc = fs.Scenario(broken)
    across, inside = sc.add_flow(0, 31, GB), sc.add_flow(1, 2, GB)
    r = rows(sc.run(verify_rates=True))
    assert r[across]["mean_rate_Bps"] == pytest.approx(host_Bps(topo), rel=1e-12)
    assert r[inside]["mean_rate_Bps"] == pytest.approx(2 * host_Bps(topo), rel=1e-12)
    # Spreading follows capacity: with its plane-0 link at a quarter, host 0 sends a fifth of
    # the flow there and gets 1.25 links' worth.
    slow = topo.fail(links=_links(topo, 0, src=0), factor=0.25)
    sc = fs.Scenario(slow)
    f = sc.add_flow(0, 31, GB)
    rate = rows(sc.run(verify_rates=True))[f]["mean_rate_Bps"]
    assert rate == pytest.approx(1.25 * host_Bps(topo), rel=1e-12)
    # A plane carries what both ends pass there: with the destination's plane-1 link at a
    # tenth the flow gets 1.1 links' worth (weighting by the source alone gave 0.2), and
    # never less than with that link down (1 link's worth).
    for factor, want in [(0.1, 1.1), (0.0, 1.0)]:
        sc = fs.Scenario(topo.fail(links=_links(topo, 1, dst=31), factor=factor))
        f = sc.add_flow(0, 31, GB)
        rate = rows(sc.run(verify_rates=True))[f]["mean_rate_Bps"]
        assert rate == pytest.approx(want * host_Bps(topo), rel=1e-12), factor


def test_flows_into_one_host_share_its_links_plane_by_plane_when_a_sender_lost_a_plane():
    """Host 0 lost its plane-1 link, so its flow x to host 31 comes down plane 0 alone,
    while flow y from host 8 spreads half on each plane. Host 31's plane-0 link carries
    x + y/2 and is the bottleneck of both: x = y = 2R/3 (R per link). Pooling host 31's two
    links would give x = R, y = R and put 1.5 R on that link."""
    topo = _two_plane_clos()
    broken = topo.fail(links=_links(topo, 1, src=0))
    sc = fs.Scenario(broken)
    x, y = sc.add_flow(0, 31, GB), sc.add_flow(8, 31, GB)
    res = sc.run(record_rates=True, verify_rates=True)
    first = {}
    for change in res.rate_changes.to_pylist():
        first.setdefault(change["flow_id"], change["rate_Bps"])
    assert first[x] == pytest.approx(2 / 3 * host_Bps(topo), rel=1e-12)
    assert first[y] == pytest.approx(2 / 3 * host_Bps(topo), rel=1e-12)


def test_an_ecmp_flow_moves_off_a_failed_spine_link_with_its_bytes_split_between_paths():
    topo = clos(routing="ecmp")
    size, t_fault = 5 * GB, 0.04
    sc = fs.Scenario(topo, seed=1)
    f = sc.add_flow(0, 31, size)
    path = sc.route_of(f)
    up_to_spine = path[1]  # host -> leaf -> spine -> leaf -> host
    sc.add_fault(at_s=t_fault, links=[up_to_spine])
    res = sc.run()
    r = rows(res)[f]
    rate = host_Bps(topo)
    # Alone on the fabric, the reroute costs nothing: same finish as without the fault.
    assert r["finish_s"] - r["start_s"] == pytest.approx(size / rate, rel=1e-9)
    by_link = carried(res)
    assert by_link[up_to_spine] == pytest.approx(rate * t_fault, rel=1e-9)
    assert by_link[path[0]] == pytest.approx(size, rel=1e-9)  # its own uplink carries it all
    others = sum(b for l, b in by_link.items() if l not in path)
    assert others == pytest.approx(2 * (size - rate * t_fault), rel=1e-9)  # new up and down


def test_a_repair_before_a_flow_starts_saves_it_and_one_during_does_not():
    topo = clos()
    sc = fs.Scenario(topo)
    nic_up = sc.route_of(sc.add_flow(0, 31, 0.0, start_s=1.0))[0]
    during = sc.add_flow(0, 31, 4 * GB)                 # transferring when host 0's uplink dies
    waits = sc.add_flow(0, 30, 1 * GB, start_s=0.05)    # would start while it is down
    later = sc.add_flow(0, 29, 1 * GB, start_s=0.2)     # starts after the repair
    after = sc.add_delay(0.01, after=[during])
    other = sc.add_flow(8, 16, 1 * GB)
    sc.add_fault(at_s=0.01, links=[nic_up], until_s=0.1)
    res = sc.run()
    r = rows(res)
    assert r[during]["status"] == "failed" and r[during]["failed_s"] == pytest.approx(0.01)
    assert "link" in r[during]["error"] and "down" in r[during]["error"]
    assert r[waits]["status"] == "failed" and r[waits]["failed_s"] == pytest.approx(0.05, abs=1e-6)
    assert r[later]["status"] == "done"
    assert r[later]["finish_s"] == pytest.approx(0.2 + 1 * GB / host_Bps(topo), abs=1e-6)
    assert r[other]["status"] == "done"
    assert res.delays.to_pylist()[0]["status"] == "skipped"
    assert res.delays.to_pylist()[0]["delay_id"] == after
    # The failed flow's bytes before the fault are on its links; nothing after.
    assert carried(res)[nic_up] == pytest.approx(host_Bps(topo) * 0.01 + 1 * GB, rel=1e-9)


def test_a_lost_path_fails_the_flow_with_no_path_and_the_run_completes():
    cl = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="test-fault-sw8", nic="cx7")
    sc = fs.Scenario(cl)
    cross = sc.add_flow(3, 11, 10 * GB)
    inside = sc.add_flow(3, 4, 10 * GB)
    sc.add_fault(at_s=0.001, nodes=[int(cl.nics[3])])
    res = sc.run()
    r = rows(res)
    assert r[cross]["status"] == "failed"
    assert r[cross]["error"].startswith("no path from gpu3 to gpu11")
    assert r[inside]["status"] == "done" and r[inside]["error"] is None
    assert np.isfinite(res.makespan_s)


def test_faulted_runs_are_deterministic_and_keep_every_link_within_capacity():
    topo = clos(routing="ecmp")
    kinds = topo.structure["kind_names"]
    spine = int(np.flatnonzero(topo._core.node_kinds() == kinds.index("spine"))[1])
    rng = np.random.default_rng(11)
    src = rng.integers(0, 32, 300)
    dst = (src + rng.integers(1, 32, 300)) % 32

    def run():
        sc = fs.Scenario(topo, seed=7)
        sc.add_flows(src, dst, rng_sizes, start_s=starts)
        sc.add_fault(at_s=0.002, nodes=[spine])
        sc.add_fault(at_s=0.004, links=[40, 41], factor=0.3, until_s=0.02)
        return sc.run(record_rates=True, verify_rates=True)

    rng_sizes = rng.uniform(1e6, 1e8, 300)
    starts = rng.uniform(0, 0.01, 300)
    a, b = run(), run()
    assert a.flows.equals(b.flows) and a.links.equals(b.links)
    # Peak load never exceeds capacity in force (the links table's capacity is nominal).
    assert max(a.links["peak_utilization"].to_pylist()) <= 1 + 1e-9


def test_a_link_loaded_alone_and_through_its_bundle_reports_its_true_peak():
    """Mid-run, a fault turns sprayed flows from host bundles to single host links, so some
    links are loaded by two constraints in one run. Their peak is that of the sum at one
    time (the sum of the two peaks, taken at different times, reached 2x capacity)."""
    topo = _two_plane_clos()
    rng = np.random.default_rng(1)
    src = rng.integers(0, 32, 200)
    dst = (src + rng.integers(1, 32, 200)) % 32
    sc = fs.Scenario(topo, seed=3)
    sc.add_flows(src, dst, rng.uniform(1e8, 1e9, 200), start_s=rng.uniform(0, 0.01, 200))
    sc.add_fault(at_s=0.005, links=_links(topo, 1, above_leaves=True)[:3])
    res = sc.run(verify_rates=True)
    links = res.links
    assert max(links["peak_utilization"].to_pylist()) <= 1 + 1e-9
    assert max(links["busy_s"].to_pylist()) <= res.makespan_s * (1 + 1e-12)
    # Every link listed carried something.
    assert min(links["peak_utilization"].to_pylist()) > 0


def test_bad_faults_are_refused_with_the_value_named():
    topo = clos()
    sc = fs.Scenario(topo)
    with pytest.raises(InvalidArgumentError, match="-1"):
        sc.add_fault(at_s=-1.0, links=[0])
    with pytest.raises(InvalidArgumentError, match="factor"):
        sc.add_fault(at_s=0.0, links=[0], factor=-0.5)
    with pytest.raises(InvalidArgumentError, match="factor"):
        sc.add_fault(at_s=0.0, links=[0], factor=float("nan"))
    with pytest.raises(InvalidArgumentError, match="factor"):
        sc.add_fault(at_s=0.0, links=[0], factor="half")
    with pytest.raises(UnknownLinkError, match=str(topo.n_links)):
        sc.add_fault(at_s=0.0, links=[topo.n_links])
    with pytest.raises(UnknownNodeError, match="1000"):
        sc.add_fault(at_s=0.0, nodes=[1000])
    with pytest.raises(InvalidArgumentError, match="at least one"):
        sc.add_fault(at_s=0.0)
    with pytest.raises(InvalidArgumentError, match="until_s"):
        sc.add_fault(at_s=1.0, links=[0], until_s=0.5)
    # An until_s that only the repair's own check refused left the fault in, down for good.
    with pytest.raises(InvalidArgumentError, match="until_s must be a finite time after at_s=0.0, got inf"):
        sc.add_fault(at_s=0.0, links=[0], until_s=float("inf"))
    assert sc._core.n_faults == 0


def test_a_collective_that_loses_its_path_says_so_without_naming_a_switch():
    """A coupled flow has no one src or dst: its error used to read 'no path from spine1 to
    spine1', the name of whatever node the internal 'none' id fell on."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    sc = fs.Scenario(fabric, seed=0)
    sc.add_collective("all_reduce", list(range(0, 32, 8)), "1GiB", algorithm="ring")
    sc.add_fault(at_s=1e-4, nodes=[fabric.n_gpus])  # the first rank's NIC, every link down
    flows = sc.run().flows.to_pydict()
    failed = [e for e, s in zip(flows["error"], flows["status"]) if s == "failed"]
    assert failed == ["no path for one of its edges: every route crosses a link that is down"] * len(failed)
    assert failed


def test_a_bundle_member_down_before_the_run_is_not_busy():
    """Sprayed flows over a leaf's uplink bundle with one member down from the start: that
    member carries nothing and shows no busy time (it showed its bundle's)."""
    topo = fs.clos(n_hosts=256, switch="sn5600", nic="cx7", routing="adaptive")
    links = topo.links.to_pydict()
    leaf0 = links["dst"][0]
    up = [l for l, s, d in zip(links["link_id"], links["src"], links["dst"]) if s == leaf0 and d >= 256]
    sc = fs.Scenario(topo.fail(links=[up[0]]), seed=0)
    for h in range(64):
        sc.add_flow(h, 64 + h, "10GB")
    rows = {r["link_id"]: r for r in sc.run().links.to_pylist()}
    assert rows[up[0]]["bytes_carried"] == 0 and rows[up[0]]["busy_s"] == 0
    assert rows[up[1]]["busy_s"] > 0 and rows[up[1]]["bytes_carried"] > 0


def test_a_zero_byte_flow_with_no_path_is_done_after_its_latency():
    """A zero-byte flow moves nothing, so a fault that leaves it no path does not fail it, as
    a flow of bytes waiting for its transfer would (found by the reference comparison, where
    the docs said otherwise). 0 -> 1 -> 2 with 0.5 s on the second link, down from 1 s to 2.5 s."""
    topo = fs.Topology.from_arrays([0, 1], [1, 2], 10.0, [0.0, 0.5])
    sc = fs.Scenario(topo)
    empty = sc.add_flow(0, 2, 0.0, start_s=1.2)
    full = sc.add_flow(0, 2, 1.0, start_s=1.2)
    sc.add_fault(at_s=1.0, links=[1], until_s=2.5)
    r = rows(sc.run())
    assert r[empty]["status"] == "done" and r[empty]["finish_s"] == pytest.approx(1.7, rel=1e-12)
    assert r[full]["status"] == "failed" and r[full]["failed_s"] == pytest.approx(1.7, rel=1e-12)
