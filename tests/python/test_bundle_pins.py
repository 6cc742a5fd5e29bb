"""Flows pinned to a member of a pooled bundle while other flows spray over it (docs/design.md
sections 1 and 3). Sprayed traffic spreads evenly over the members, each taking its share of
the bundle's capacity, so a member carries its pinned flows plus that share and never more
than its capacity, also after a fault changes the shares. Closed forms on one host's two
plane uplinks and on a leaf's four spine links, the links table, bytes conserved, and random
runs of pinned and sprayed flows (whose links peaked at 1.4 to 2 times capacity before)."""

import numpy as np
import pytest

import fabricsim as fs
from helpers import small_switches

GB = 1e9
TOL = 1e-9


@pytest.fixture(scope="module", autouse=True)
def switches():
    with small_switches({"test-pin-sw8": "400Gb/s", "test-pin-sw8x800": "800Gb/s"}):
        yield


def one_plane():
    return fs.clos(n_hosts=32, switch="test-pin-sw8", nic="cx7", routing="adaptive")


def two_planes():
    return fs.clos(n_hosts=32, switch="test-pin-sw8x800", nic="cx8", planes=2, routing="adaptive")


def link(topo, src, dst):
    """The link from node `src` to node `dst`, by name."""
    names = topo.node_names
    ids = [i for i, (s, d) in enumerate(zip(topo.links["src"].to_pylist(), topo.links["dst"].to_pylist()))
           if names[s] == src and names[d] == dst]
    assert len(ids) == 1, (src, dst, ids)
    return ids[0]


def leaf0_bundle_and_route(topo):
    """Leaf 0's four links up to the spines (one bundle), and a route from host 1 through
    the first of them to host 8 (on leaf 2)."""
    members = [link(topo, "leaf0", f"spine{k}") for k in range(4)]
    route = [link(topo, "host1", "leaf0"), members[0], link(topo, "spine0", "leaf2"),
             link(topo, "leaf2", "host8")]
    return members, route


def flows(res):
    return {r["flow_id"]: r for r in res.flows.to_pylist()}


def links(res):
    return {r["link_id"]: r for r in res.links.to_pylist()}


def rate_changes(res):
    """Per flow, its (time_s, rate_Bps) changes in order (runs with record_rates)."""
    out = {}
    for change in res.rate_changes.to_pylist():
        out.setdefault(change["flow_id"], []).append((change["time_s"], change["rate_Bps"]))
    return out


def test_a_pinned_flow_and_a_sprayed_one_share_a_hosts_two_plane_uplinks():
    """Host 0 has one link of capacity C per plane, pooled in one bundle. P (B bytes) is
    pinned to the plane-0 link; S (2B bytes), added first, sprays over both. The plane-0
    link carries P + S/2 and the plane-1 link S/2: water-filling saturates plane 0 at
    P = S = 2C/3. P ends at 1.5 B/C; S then runs alone at 2C and ends at 2 B/C. (The bundle
    alone gave P = C and S = 2C: 2C on the plane-0 link.)"""
    topo = two_planes()
    c = topo.structure["scale_out"]["link_Bps"]
    up0, up1 = link(topo, "host0", "p0.leaf0"), link(topo, "host0", "p1.leaf0")
    down1 = link(topo, "p0.leaf0", "host1")
    sc = fs.Scenario(topo)
    s = sc.add_flow(0, 2, 2 * GB)
    p = sc.add_flow(0, 1, GB, route=[up0, down1])
    res = sc.run(record_rates=True, verify_rates=True)
    r, rates = flows(res), rate_changes(res)
    assert r[p]["start_s"] == r[s]["start_s"]
    t0 = r[p]["start_s"]
    assert rates[p][0][1] == pytest.approx(2 / 3 * c, rel=1e-12)
    assert rates[s][0][1] == pytest.approx(2 / 3 * c, rel=1e-12)
    assert r[p]["finish_s"] - t0 == pytest.approx(1.5 * GB / c, rel=1e-12)
    assert rates[s][1][1] == pytest.approx(2 * c, rel=1e-12)
    assert r[s]["finish_s"] - t0 == pytest.approx(2 * GB / c, rel=1e-12)
    # Each link's load once: P's bytes plus S's half on plane 0, S's other half on plane 1.
    ls = links(res)
    assert ls[up0]["bytes_carried"] == pytest.approx(2 * GB, rel=1e-12)
    assert ls[up1]["bytes_carried"] == pytest.approx(GB, rel=1e-12)
    assert ls[down1]["bytes_carried"] == pytest.approx(GB, rel=1e-12)
    for l in (up0, up1):
        assert ls[l]["peak_utilization"] == pytest.approx(1.0, rel=1e-12)
    # Pinning both members: each carries its own flow and half of S.
    sc = fs.Scenario(topo)
    s = sc.add_flow(0, 2, GB)
    p0 = sc.add_flow(0, 1, GB, route=[up0, down1])
    p1 = sc.add_flow(0, 1, GB, route=[up1, link(topo, "p1.leaf0", "host1")])
    res = sc.run(record_rates=True, verify_rates=True)
    for f in (s, p0, p1):
        assert rate_changes(res)[f][0][1] == pytest.approx(2 / 3 * c, rel=1e-12)
    assert max(res.links["peak_utilization"].to_pylist()) == pytest.approx(1.0, rel=1e-12)


def leaf0_member_degraded(pin):
    """S sprays B bytes from host 0 (leaf 0) to host 4 (leaf 1); with `pin`, P moves B bytes
    pinned through leaf 0's link to spine 0; at t_f = B / 4C the link to spine 1 drops to
    C/2. Returns the run, S, P, leaf 0's links to the spines, C and t_f."""
    topo = one_plane()
    c = topo.structure["scale_out"]["link_Bps"]
    members, route = leaf0_bundle_and_route(topo)
    t_f = 0.25 * GB / c
    sc = fs.Scenario(topo)
    s = sc.add_flow(0, 4, GB)
    p = sc.add_flow(1, 8, GB, route=route) if pin else None
    sc.add_fault(at_s=t_f, links=[members[1]], factor=0.5)
    return sc.run(record_rates=True, verify_rates=True), s, p, members, c, t_f


def test_a_member_degraded_mid_run_takes_its_new_share_of_the_sprayed_flows():
    """Leaf 0's four spine links (C each) form one bundle. P is pinned through the one to
    spine 0; S sprays from another host of leaf 0, a quarter of it on each spine link.
    Spine 0's link holds P + S/4: P = S = 0.8C. At t_f the link to spine 1 drops to C/2:
    the bundle has 3.5C, spine 0's link takes 2/7 of S, so P + 2S/7 = C gives P = S = 7C/9.
    Both move B bytes and end at t_f + (B - 0.8 C t_f) / (7C/9)."""
    res, s, p, members, c, t_f = leaf0_member_degraded(pin=True)
    r, rates = flows(res), rate_changes(res)
    moved = 0.8 * c * t_f  # by each flow before the fault
    for f in (p, s):
        assert [rate for _, rate in rates[f][:2]] == pytest.approx([0.8 * c, 7 / 9 * c], rel=1e-12)
        assert rates[f][1][0] == pytest.approx(t_f, rel=1e-12)
        assert r[f]["finish_s"] == pytest.approx(t_f + (GB - moved) / (7 / 9 * c), rel=1e-12)
    # S's bytes through each member: a quarter before the fault, the member's share after.
    after = {0: 2 / 7, 1: 1 / 7, 2: 2 / 7, 3: 2 / 7}
    ls = links(res)
    for k, l in enumerate(members):
        want = moved / 4 + (GB - moved) * after[k] + (GB if k == 0 else 0.0)
        assert ls[l]["bytes_carried"] == pytest.approx(want, rel=1e-12), k
    assert sum(ls[l]["bytes_carried"] for l in members) == pytest.approx(2 * GB, rel=1e-12)
    # Peaks against nominal capacity: spine 0's link full throughout, spine 1's at S/4
    # before the fault (S/7 after), spines 2 and 3 at S * 2/7 = 2C/9 after.
    assert ls[members[0]]["peak_utilization"] == pytest.approx(1.0, rel=1e-12)
    assert ls[members[1]]["peak_utilization"] == pytest.approx(0.2, rel=1e-12)
    for l in members[2:]:
        assert ls[l]["peak_utilization"] == pytest.approx(2 / 9, rel=1e-12)


def test_with_nothing_pinned_a_degraded_member_carries_its_share_in_force():
    """S alone runs at its host link's C throughout. After the fault the members carry
    2/7, 1/7, 2/7, 2/7 of it (a quarter each before), as the links table reports (it kept
    a quarter)."""
    res, s, _, members, c, t_f = leaf0_member_degraded(pin=False)
    assert flows(res)[s]["finish_s"] - flows(res)[s]["start_s"] == pytest.approx(GB / c, rel=1e-12)
    ls = links(res)
    for l, after in zip(members, [2 / 7, 1 / 7, 2 / 7, 2 / 7]):
        want = c * t_f / 4 + (GB - c * t_f) * after
        assert ls[l]["bytes_carried"] == pytest.approx(want, rel=1e-12)
        assert ls[l]["peak_utilization"] == pytest.approx(max(1 / 4, after), rel=1e-12)


def test_a_repair_gives_the_sprayed_flows_back_their_even_shares():
    """The spine-1 link of leaf 0 is down from the start and repaired at t_r: S spreads a
    third on each live link (P + S/3 = C: 0.75C each), then a quarter (0.8C each)."""
    topo = one_plane()
    c = topo.structure["scale_out"]["link_Bps"]
    members, route = leaf0_bundle_and_route(topo)
    t_r = 0.25 * GB / c
    sc = fs.Scenario(topo.fail(links=[members[1]]))
    s = sc.add_flow(0, 4, GB)
    p = sc.add_flow(1, 8, GB, route=route)
    sc.add_fault(at_s=t_r, links=[members[1]], factor=1.0)
    res = sc.run(record_rates=True, verify_rates=True)
    r, rates = flows(res), rate_changes(res)
    for f in (p, s):
        assert [rate for _, rate in rates[f][:2]] == pytest.approx([0.75 * c, 0.8 * c], rel=1e-12)
        assert r[f]["finish_s"] == pytest.approx(t_r + (GB - 0.75 * c * t_r) / (0.8 * c), rel=1e-12)
    ls = links(res)
    assert ls[members[1]]["bytes_carried"] == pytest.approx((GB - 0.75 * c * t_r) / 4, rel=1e-12)
    assert max(res.links["peak_utilization"].to_pylist()) == pytest.approx(1.0, rel=1e-12)


def hops(sc, topo, f, src, dst, pinned):
    """Links a flow's bytes cross: its route, or (sprayed) up and down at each tier."""
    if pinned:
        return len(sc.route_of(f))
    per_leaf = topo.structure["scale_out"]["endpoints_per_leaf"]
    return 2 if src // per_leaf == dst // per_leaf else 4


def mixed(topo, seed, n=64, faults=()):
    """Random flows, about half pinned to the path ECMP would hash them onto, half sprayed
    (the reviewer's shape); `faults` are (at_s, links, factor)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 32, n)
    dst = (src + rng.integers(1, 32, n)) % 32
    size = rng.uniform(1e8, 1e9, n)
    start = rng.uniform(0, 0.005, n)
    pinned = rng.random(n) < 0.5
    ecmp = fs.Scenario(topo, routing="ecmp", seed=seed)
    sc = fs.Scenario(topo, seed=seed)
    ids = []
    for i in range(n):
        s, d = int(src[i]), int(dst[i])
        route = ecmp.route_of(ecmp.add_flow(s, d, 1.0)) if pinned[i] else None
        ids.append(sc.add_flow(s, d, size[i], start_s=start[i], route=route))
    for at_s, ls, factor in faults:
        sc.add_fault(at_s=at_s, links=ls, factor=factor)
    res = sc.run(verify_rates=True)
    want_bytes = sum(size[i] * hops(sc, topo, ids[i], int(src[i]), int(dst[i]), pinned[i]) for i in range(n))
    return res, want_bytes


@pytest.mark.parametrize("make", [one_plane, two_planes])
@pytest.mark.parametrize("seed", range(4))
def test_pinned_and_sprayed_flows_keep_every_link_within_capacity(make, seed):
    topo = make()
    spine_links = [l for l in range(topo.n_links)
                   if "spine" in topo.node_names[topo.links["src"][l].as_py()]]
    for faults in ((), ((0.004, spine_links[1::5], 0.5), (0.006, spine_links[2::7], 0.25))):
        res, want_bytes = mixed(topo, seed, faults=faults)
        assert (res.flows["status"].to_numpy(zero_copy_only=False) == "done").all()
        assert max(res.links["peak_utilization"].to_pylist()) <= 1 + TOL
        # Every byte is counted once on every link it crosses.
        assert sum(res.links["bytes_carried"].to_pylist()) == pytest.approx(want_bytes, rel=1e-9)
        assert max(res.links["busy_s"].to_pylist()) <= res.makespan_s * (1 + 1e-12)


def test_links_down_mid_run_under_pinned_and_sprayed_flows_stay_within_capacity():
    topo = two_planes()
    spine_links = [l for l in range(topo.n_links)
                   if "spine" in topo.node_names[topo.links["dst"][l].as_py()]]
    res, _ = mixed(topo, 9, faults=((0.003, spine_links[::6], 0.0), (0.008, spine_links[::12], 1.0)))
    assert max(res.links["peak_utilization"].to_pylist()) <= 1 + TOL


def test_sprayed_flows_with_nothing_pinned_on_their_bundles_run_as_the_bundles_alone_say():
    """Nothing pinned: S1, S2 from leaf 0 to leaf 1 get C each (their host links), and a
    flow pinned to a link of leaf 2, whose bundles no sprayed flow uses, changes nothing."""
    topo = one_plane()
    c = topo.structure["scale_out"]["link_Bps"]
    sc = fs.Scenario(topo)
    a, b = sc.add_flow(0, 4, GB), sc.add_flow(1, 5, 2 * GB)
    p = sc.add_flow(8, 12, GB, route=[link(topo, "host8", "leaf2"), link(topo, "leaf2", "spine0"),
                                      link(topo, "spine0", "leaf3"), link(topo, "leaf3", "host12")])
    res = sc.run(verify_rates=True)
    r = flows(res)
    assert r[a]["finish_s"] - r[a]["start_s"] == pytest.approx(GB / c, rel=1e-12)
    assert r[b]["finish_s"] - r[b]["start_s"] == pytest.approx(2 * GB / c, rel=1e-12)
    assert r[p]["finish_s"] - r[p]["start_s"] == pytest.approx(GB / c, rel=1e-12)
    ls = links(res)
    for k in range(4):
        assert ls[link(topo, "leaf0", f"spine{k}")]["bytes_carried"] == pytest.approx(3 * GB / 4, rel=1e-12)
