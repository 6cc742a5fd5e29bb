"""Structured fabrics: presets against the catalog, Clos sizes against closed forms and the DGX
SuperPOD tables, structured routes against the generic graph router, throughput measured with
the engine (bisection, ECMP collisions against adaptive routing), static faults, bad input."""

from __future__ import annotations

import re

import numpy as np
import pyarrow.compute as pc
import pytest

import fabricsim as fs
from fabricsim import catalog
from fabricsim.exceptions import InvalidArgumentError, UnknownPartError, ZeroCapacityPathError
from helpers import flow_segments

# Small user switches, so closed forms and engine runs stay cheap. Ports counted at 400 Gb/s:
# "test-sw8" has 8 ports of 400G (a ConnectX-7's rate); "test-sw8x800" 8 ports of 800G that
# break out into 16 ports of 400G (a two-plane ConnectX-8's plane rate); "test-sw32" 32 x 400G.
SWITCHES = {"test-sw8": (8, "400Gb/s"), "test-sw8x800": (8, "800Gb/s"), "test-sw32": (32, "400Gb/s")}


@pytest.fixture(scope="module", autouse=True)
def small_switches():
    for name, (ports, rate) in SWITCHES.items():
        catalog.add_part(
            name, "switch", source="[assumed] a small switch for tests", protocol="ethernet",
            ports=ports, port_Bps=rate, lane_Bps="400Gb/s", optics="pluggable", ports_per_cage=1,
            optics_watts_per_port=0.0, system_watts=None, latency_s="100ns", sharp=False,
            adaptive_routing=True,
        )
    catalog.add_part(
        "test-sw8-static", "switch", source="[assumed] a switch without adaptive routing",
        protocol="ethernet", ports=8, port_Bps="400Gb/s", lane_Bps="400Gb/s", optics="pluggable", ports_per_cage=1,
        optics_watts_per_port=0.0, system_watts=None, latency_s=0.0, sharp=False, adaptive_routing=False,
    )
    yield
    for name in [*SWITCHES, "test-sw8-static"]:
        catalog.remove_part(name)


def kind_codes(topo) -> dict[str, int]:
    return {name: code for code, name in enumerate(topo.structure["kind_names"])}


def link_arrays(topo):
    links = topo.links
    return (links["src"].to_numpy(), links["dst"].to_numpy(), links["capacity_Bps"].to_numpy())


def count_kind(topo, kind: str) -> int:
    return int(np.sum(topo._core.node_kinds() == kind_codes(topo)[kind]))


def rel_close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * abs(b)


def flow_rates(res) -> np.ndarray:
    """Mean throughput of every flow: bytes / (finish_s - start_s)."""
    f = res.flows
    return f["bytes"].to_numpy() / (f["finish_s"].to_numpy() - f["start_s"].to_numpy())


def run_flows(topo, src, dst, *, routing=None, seed=0, size=1e9):
    sc = fs.Scenario(topo, seed=seed, routing=routing)
    sc.add_flows(np.asarray(src), np.asarray(dst), size)
    return sc.run()


def plane_Bps(topo) -> float:
    return topo.structure["scale_out"]["link_Bps"]


# ---- 1. presets against the catalog ----------------------------------------------------------


def nvlink_payload(gpu: str) -> tuple[float, float]:
    """(line rate of one NVLink per direction, payload efficiency) of a catalog GPU."""
    g = catalog.part(gpu)
    return g["nvlink_link_Bps"], catalog.part(g["nvlink_efficiency"])["value"]


def gpu_to_chip_links(topo) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src GPU, dst chip, capacity) of every GPU-to-NVSwitch link."""
    src, dst, cap = link_arrays(topo)
    kinds, code = topo._core.node_kinds(), kind_codes(topo)
    up = (kinds[src] == code["gpu"]) & (kinds[dst] == code["nvswitch"])
    down = (kinds[src] == code["nvswitch"]) & (kinds[dst] == code["gpu"])
    assert up.sum() == down.sum()
    return src[up], dst[up], cap[up]


@pytest.mark.parametrize("gpu", ["gb200", "gb300"])
def test_nvl72_matches_the_catalog(gpu):
    topo = fs.nvl72(gpu=gpu)
    line, eff = nvlink_payload(gpu)
    assert (line, eff) == (50e9, 0.802)
    assert count_kind(topo, "gpu") == topo.n_gpus == 72
    assert count_kind(topo, "nvswitch") == 18
    gpus, chips, cap = gpu_to_chip_links(topo)
    assert len(gpus) == 1296 == 72 * catalog.part(gpu)["nvlink_links"]
    # One link from every GPU to every chip; every chip's 72 ports taken.
    pairs = set(zip(gpus.tolist(), chips.tolist()))
    assert len(pairs) == 1296
    assert np.all(np.bincount(chips)[np.unique(chips)] == catalog.part("nvlink5-switch")["ports"])
    # ~130 TB/s: aggregate GPU NVLink bandwidth at line rate, both directions.
    assert len(gpus) * line * 2 == pytest.approx(129.6e12, rel=1e-12)
    np.testing.assert_allclose(cap, line * eff, rtol=1e-12)
    assert cap.sum() * 2 == pytest.approx(129.6e12 * 0.802, rel=1e-12)


@pytest.mark.parametrize(
    "make, gpu, n_chips, per_chip, per_gpu_line_Bps",
    [
        (fs.hgx_h100, "h100", 4, [5, 4, 4, 5], 450e9),
        (fs.hgx_b200, "b200", 2, [9, 9], 900e9),
    ],
)
def test_hgx_boards_match_the_catalog(make, gpu, n_chips, per_chip, per_gpu_line_Bps):
    topo = make()
    line, eff = nvlink_payload(gpu)
    assert count_kind(topo, "gpu") == 8
    assert count_kind(topo, "nvswitch") == n_chips
    gpus, chips, cap = gpu_to_chip_links(topo)
    for g in range(8):
        mine = gpus == g
        _, counts = np.unique(chips[mine], return_counts=True)
        assert counts.tolist() == per_chip
        assert mine.sum() * line == pytest.approx(per_gpu_line_Bps, rel=1e-12)
        assert cap[mine].sum() == pytest.approx(per_gpu_line_Bps * eff, rel=1e-12)
    assert eff == {"h100": 0.824, "b200": 0.802}[gpu]


@pytest.mark.parametrize("make, gpu", [(fs.hgx_h100, "h100"), (fs.hgx_b200, "b200"), (fs.nvl72, "gb200")])
def test_one_gpu_pair_gets_the_whole_nvlink_payload_bandwidth(make, gpu):
    topo = make()
    line, eff = nvlink_payload(gpu)
    rate = flow_rates(run_flows(topo, [0], [5]))[0]
    assert rate == pytest.approx(18 * line * eff, rel=1e-9)


def test_nvlink_efficiency_is_a_parameter():
    topo = fs.hgx_h100(nvlink_efficiency=1.0)
    _, _, cap = gpu_to_chip_links(topo)
    assert np.all(cap == 25e9)
    assert np.all(gpu_to_chip_links(fs.nvl72(nvlink_efficiency="nvlink4-payload"))[2] == 50e9 * 0.824)


# ---- 2. Clos sizes -------------------------------------------------------------------------


def so(topo) -> dict:
    return topo.structure["scale_out"]


@pytest.mark.parametrize(
    "switch, nic, planes, k",
    [("test-sw8", "cx7", 1, 8), ("test-sw8x800", "cx8", 2, 16), ("quantum-2", "cx7", 1, 64)],
)
def test_full_two_tier_clos_closed_forms(switch, nic, planes, k):
    """k-port switches at 1:1: k^2/2 hosts, k leaves and k/2 spines per plane."""
    n = k * k // 2
    topo = fs.clos(n_hosts=n, switch=switch, nic=nic, planes=planes)
    s = so(topo)
    assert (s["tiers"], s["planes"], s["radix"]) == (2, planes, k)
    assert (s["n_leaves"], s["n_spines"], s["n_cores"]) == (k, k // 2, 0)
    assert topo.n_nodes == n + planes * (3 * k // 2)
    assert topo.n_links == planes * 2 * (n + k * k // 2)
    assert count_kind(topo, "leaf") == planes * k and count_kind(topo, "spine") == planes * k // 2
    # One more host no longer fits two tiers: the default takes three.
    assert so(fs.clos(n_hosts=n + 1, switch=switch, nic=nic, planes=planes))["tiers"] == 3


def test_hosts_that_fit_one_switch_get_one_tier():
    """32 hosts on 64-port QM9700s: one switch and no spine, where two tiers built a spine
    joined to the one leaf by 32 parallel cables (and counted their optics)."""
    topo = fs.clos(n_hosts=32, switch="quantum-2", nic="cx7")
    s = so(topo)
    assert (s["tiers"], s["n_leaves"], s["n_spines"], s["leaf_up"]) == (1, 1, 0, 0)
    assert (topo.n_nodes, topo.n_links) == (33, 64)
    assert (count_kind(topo, "leaf"), count_kind(topo, "spine")) == (1, 0)
    quantities = described(topo)
    assert quantities["scale-out cables"] == 32
    assert quantities["bisection, one switch"] == 32 * 50e9 / 2  # non-blocking: half the hosts' links
    # A flow goes up to the switch and down: two flows into one host share its link.
    sc = fs.Scenario(topo, routing="ecmp")
    sc.add_flow(0, 5, 1e9)
    sc.add_flow(1, 5, 1e9)
    route = sc.route_of(0)
    assert [(topo.links["src"][l].as_py(), topo.links["dst"][l].as_py()) for l in route] == [(0, 32), (32, 5)]
    latency_s = sum(topo.links["latency_s"][l].as_py() for l in route)
    assert sc.run().makespan_s == pytest.approx(latency_s + 2e9 / s["link_Bps"], rel=1e-12)
    # 64 hosts fill the switch; 65 need two tiers, and so does an oversubscribed leaf tier.
    assert so(fs.clos(n_hosts=64, switch="quantum-2", nic="cx7"))["tiers"] == 1
    assert so(fs.clos(n_hosts=65, switch="quantum-2", nic="cx7"))["tiers"] == 2
    assert so(fs.clos(n_hosts=32, switch="quantum-2", nic="cx7", oversubscription="2:1"))["tiers"] == 2
    with pytest.raises(InvalidArgumentError, match=r"oversubscription 2 needs uplinks, but a Clos of 1 tier"):
        fs.clos(n_hosts=32, switch="quantum-2", nic="cx7", tiers=1, oversubscription=2)
    with pytest.raises(InvalidArgumentError, match="a single 64-port switch cannot take 65 endpoints"):
        fs.clos(n_hosts=65, switch="quantum-2", nic="cx7", tiers=1)
    # Four HGX H100 servers' 32 NICs on one QM9700.
    assert so(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2", nic="cx7"))["tiers"] == 1


def test_connectx8_runs_ethernet_as_two_400g_planes():
    """ConnectX-8 has no 800GbE port (2 x 400GbE), though an SN5600 port runs 800GbE: on
    Ethernet it takes two planes of 400 Gb/s; on XDR InfiniBand one plane of 800 Gb/s."""
    eth = so(fs.clos(n_hosts=64, switch="sn5600", nic="cx8"))
    assert eth["planes"] == 2
    # Each plane link is a 400GbE link, as a ConnectX-7's on the same switch.
    assert eth["link_Bps"] == so(fs.clos(n_hosts=64, switch="sn5600", nic="cx7"))["link_Bps"]
    ib = so(fs.clos(n_hosts=64, switch="quantum-x800", nic="cx8"))
    assert ib["planes"] == 1
    with pytest.raises(InvalidArgumentError, match=r"cx8 runs Ethernet at most 400 Gb/s per port.*planes=1"):
        fs.clos(n_hosts=64, switch="sn5600", nic="cx8", planes=1)


@pytest.mark.parametrize("switch, k, planes, nic", [("test-sw8", 8, 1, "cx7"), ("test-sw8x800", 16, 2, "cx8")])
def test_full_three_tier_clos_closed_forms(switch, k, planes, nic):
    """k^3/4 hosts, 5k^2/4 switches per plane (k^2/2 leaves and spines, k^2/4 cores)."""
    n = k**3 // 4
    topo = fs.clos(n_hosts=n, switch=switch, nic=nic, planes=planes, tiers=3)
    s = so(topo)
    assert (s["n_leaves"], s["n_spines"], s["n_cores"]) == (k * k // 2, k * k // 2, k * k // 4)
    assert (s["n_pods"], s["leaves_per_pod"]) == (k, k // 2)
    assert topo.n_nodes == n + planes * 5 * k * k // 4
    assert topo.n_links == planes * 6 * n
    assert count_kind(topo, "core") == planes * k * k // 4


def test_quantum2_clos_sizes():
    two = fs.clos(n_hosts=2048, switch="quantum-2", nic="cx7")
    assert (so(two)["tiers"], so(two)["n_leaves"], so(two)["n_spines"]) == (2, 64, 32)
    three = fs.clos(n_hosts=65536, switch="quantum-2", nic="cx7", tiers=3)
    s = so(three)
    assert (s["n_leaves"], s["n_spines"], s["n_cores"]) == (2048, 2048, 1024)
    assert s["n_leaves"] + s["n_spines"] + s["n_cores"] == 5 * 64**2 // 4
    assert three.n_links == 6 * 65536


@pytest.mark.parametrize(
    "sus, tiers, leaves, spines, cores",
    [(2, 2, 16, 8, 0), (4, 2, 32, 16, 0), (8, 2, 64, 32, 0), (16, 3, 128, 128, 64), (32, 3, 256, 256, 128)],
)
def test_dgx_superpod_reference_table(sus, tiers, leaves, spines, cores):
    """DGX H100 SuperPOD: 32 nodes per scalable unit, one 400G rail per GPU, QM9700 switches."""
    topo = fs.cluster(domain="hgx-h100", n_domains=32 * sus, scale_out="quantum-2", nic="cx7")
    s = so(topo)
    assert (s["tiers"], s["n_leaves"], s["n_spines"], s["n_cores"]) == (tiers, leaves, spines, cores)
    assert s["rails"] == 8 and s["n_leaves"] * s["leaf_up"] == topo.n_gpus == 256 * sus
    assert count_kind(topo, "nic") == topo.n_gpus


@pytest.mark.parametrize("sus, leaves, spines", [(1, 8, 4), (2, 16, 8), (4, 32, 18), (8, 64, 36)])
def test_dgx_b300_xdr_superpod_reference_table(sus, leaves, spines):
    """DGX B300 SuperPOD on Quantum-X800: 72 nodes per SU, one 800G rail per GPU. A rail of 72
    NICs exactly fills a leaf's 72 down ports, so each rail keeps leaves of its own."""
    topo = fs.cluster(domain="hgx-b300", n_domains=72 * sus, scale_out="quantum-x800", nic="cx8")
    s = so(topo)
    assert (s["tiers"], s["planes"], s["rails_per_leaf"]) == (2, 1, 1)
    assert (s["n_leaves"], s["n_spines"], s["n_leaves"] * s["leaf_up"]) == (leaves, spines, 576 * sus)


def leaf_of_nics(topo) -> np.ndarray:
    """Index of the leaf each NIC is cabled to (leaves numbered in node order)."""
    src, dst, _ = link_arrays(topo)
    kinds, code = topo._core.node_kinds(), kind_codes(topo)
    leaves = np.flatnonzero(kinds == code["leaf"])
    up = np.isin(src, topo.nics) & (kinds[dst] == code["leaf"])
    order = np.argsort(src[up])
    return np.searchsorted(leaves, dst[up][order])


def test_an_nvl72_scalable_unit_shares_leaves_between_rails():
    """The DGX GB200 SuperPOD SU: 8 NVL72 racks, one CX-7 (NDR 400G) per GPU, rail i of every
    rack on one Quantum-2 leaf. A rail has 8 NICs and a leaf 32 down ports at 1:1, so 4 rails
    share a leaf: 18 leaves and 2 tiers (it was 72 leaves, one per rail, 96 spines, 64 cores).
    Their 576 uplinks would fill 9 spines, but a leaf's 32 uplinks split evenly only over a
    divisor of 32: 16 spines, 2 cables from each leaf (36 of a spine's 64 ports)."""
    for tiers in (None, 2):
        topo = fs.cluster(domain="nvl72", n_domains=8, scale_out="quantum-2", tiers=tiers)
        s = so(topo)
        assert (s["tiers"], s["rails_per_leaf"], s["n_leaves"], s["leaf_up"]) == (2, 4, 18, 32)
        assert (s["n_spines"], s["leaf_spine_width"], s["n_cores"]) == (16, 2, 0)
    gpu = np.arange(576)
    assert np.array_equal(leaf_of_nics(topo), gpu % 72 // 4)
    src, dst, _ = link_arrays(topo)
    kinds, code = topo._core.node_kinds(), kind_codes(topo)
    for leaf in np.flatnonzero(kinds == code["leaf"]):
        assert np.sum((src == leaf) & (kinds[dst] == code["nic"])) == 32
        spines = dst[(src == leaf) & (kinds[dst] == code["spine"])]
        assert np.array_equal(np.unique(spines, return_counts=True)[1], [2] * 16)
    # Cables: 576 NIC to leaf, 18 x 32 leaf to spine. Transceivers: one per CX-7 (a port a
    # cage) and one per twin-port cage of the switches, (576 + 2 x 576) ports / 2.
    d = described(topo)
    assert (d["leaf switches"], d["spine switches"], "core switches" in d) == (18, 16, False)
    assert d["scale-out cables"] == 576 + 18 * 32
    assert d["pluggable optical transceivers"] == 576 + (576 + 2 * 576) // 2
    # One rack: 72 NICs on 3 leaves of 24 rails; non-blocking, a leaf takes 24 uplinks (not
    # 32, half its ports, 8 of them idle): 72 over 2 spines (12 cables each).
    rack = fs.cluster(domain="nvl72", n_domains=1, scale_out="quantum-2")
    s = so(rack)
    assert (s["tiers"], s["rails_per_leaf"], s["n_leaves"], s["n_spines"], s["n_cores"]) == (2, 24, 3, 2, 0)
    assert (s["leaf_down"], s["leaf_up"], s["leaf_spine_width"]) == (24, 24, 12)
    assert np.array_equal(leaf_of_nics(rack), np.arange(72) // 24)
    d = described(rack)
    assert d["scale-out cables"] == 72 + 3 * 24
    assert d["pluggable optical transceivers"] == 72 + (72 + 2 * 72) // 2
    assert d["down:up capacity, fullest leaf"] == 1.0


@pytest.mark.parametrize(
    "domain, n_domains, rails_per_leaf, nics_per_leaf",
    [
        # 8 rails of 9 NICs: 3 rails fit a leaf (27 ports), so 3 leaves: rails 0-2, 3-5, 6-7.
        ("hgx-h100", 9, 3, [27, 27, 18]),
        # 72 rails of 3: 10 would fit, 8 leaves needed: 9 rails each, not 7 of 10 and one of 2.
        ("nvl72", 3, 9, [27] * 8),
        # 72 rails of 6: 5 fit, 15 leaves: 14 of 5 rails and the last takes the 2 left.
        ("nvl72", 6, 5, [30] * 14 + [12]),
    ],
)
def test_rails_share_leaves_in_consecutive_blocks(domain, n_domains, rails_per_leaf, nics_per_leaf):
    topo = fs.cluster(domain=domain, n_domains=n_domains, scale_out="quantum-2")
    s = so(topo)
    assert (s["tiers"], s["rails_per_leaf"], s["n_leaves"]) == (2, rails_per_leaf, len(nics_per_leaf))
    per = topo.n_gpus // n_domains
    assert np.array_equal(leaf_of_nics(topo), np.arange(topo.n_gpus) % per // rails_per_leaf)
    assert np.bincount(leaf_of_nics(topo)).tolist() == nics_per_leaf


def test_an_nvl72_cluster_too_big_for_two_tiers_says_why():
    # 17 racks: a rail of 17 NICs takes over half a leaf, so each rail has a leaf: 72 > 64.
    with pytest.raises(
        InvalidArgumentError,
        match=re.escape(
            "1224 endpoints need 72 leaves (72 rails of 17 endpoints, 32 of one rail to a leaf), "
            "more than the 64 leaves a two-tier Clos of 64-port switches holds: use tiers=3"
        ),
    ):
        fs.cluster(domain="nvl72", n_domains=17, scale_out="quantum-2", tiers=2)
    assert so(fs.cluster(domain="nvl72", n_domains=17, scale_out="quantum-2"))["tiers"] == 3


@pytest.mark.parametrize(
    "n, tiers, over", [(27, 2, 1.0), (16, 2, 3.0), (16, 2, 2.0), (70, 3, (1.0, 2.0)), (100, 3, 1.0)]
)
def test_switch_ports_are_never_overbooked(n, tiers, over):
    topo = fs.clos(n_hosts=n, switch="test-sw8", nic="cx7", tiers=tiers, oversubscription=over)
    src, dst, _ = link_arrays(topo)
    kinds, code = topo._core.node_kinds(), kind_codes(topo)
    switches = np.flatnonzero(np.isin(kinds, [code["leaf"], code["spine"], code["core"]]))
    out_deg = np.bincount(src, minlength=topo.n_nodes)
    in_deg = np.bincount(dst, minlength=topo.n_nodes)
    assert np.all(out_deg[switches] == in_deg[switches])
    assert np.all(out_deg[switches] <= 8) and np.all(out_deg[switches] > 0)
    hosts = topo.nics
    assert np.all(out_deg[hosts] == 1) and len(hosts) == n
    # Every leaf's down:up ratio is at most the asked oversubscription.
    leaf_over = over if np.isscalar(over) else over[0]
    for leaf in np.flatnonzero(kinds == code["leaf"]):
        down = np.sum((src == leaf) & (kinds[dst] == code["nic"]))
        up = np.sum((src == leaf) & (kinds[dst] == code["spine"]))
        assert 0 < down <= leaf_over * up


@pytest.mark.parametrize(
    "n, tiers, over, nic, switch, share",
    [
        (32, 2, 1.0, "cx7", "test-sw8", 1.0),
        (16, 2, 2.0, "cx7", "test-sw8", 0.5),
        (128, 3, 1.0, "cx7", "test-sw8", 1.0),
        (128, 3, (1.0, 2.0), "cx7", "test-sw8", 0.5),
        (128, 2, 1.0, "cx8", "test-sw8x800", 1.0),
    ],
)
def test_bisection_bandwidth_measured_by_the_engine(n, tiers, over, nic, switch, share):
    """Left half to right half under adaptive routing: full bisection at 1:1, half at 2:1."""
    topo = fs.clos(n_hosts=n, switch=switch, nic=nic, tiers=tiers, oversubscription=over)
    hosts = topo.nics
    res = run_flows(topo, hosts[: n // 2], hosts[n // 2 :], routing="adaptive")
    planes = so(topo)["planes"]
    expected = n / 2 * planes * plane_Bps(topo) * share
    assert rel_close(flow_rates(res).sum(), expected, 0.01)


def test_oversubscription_forms():
    # "3:1" read as 3 (it raised a bare ValueError) and "10" refused (it became 1:0, i.e. 1:1,
    # iterated character by character); a spine ratio needs a tier above the spines.
    def shape(over, **kw):
        s = so(fs.clos(n_hosts=16, switch="test-sw8", nic="cx7", oversubscription=over, **kw))
        return s["tiers"], s["endpoints_per_leaf"], s["leaf_up"], s["spine_up"]

    assert shape("3:1") == shape(3) == shape((3,)) == shape([3.0, 1]) == shape("1.5:0.5")
    assert shape((1, 2), tiers=3) != shape(1, tiers=3)
    for bad in ["10", "3:0", "three:1", None, True, (1, 2, 3), ("3", 1)]:
        with pytest.raises(InvalidArgumentError, match=f"oversubscription.*{re.escape(repr(bad))}"):
            shape(bad)
    for tiers in (2, None):   # asked for, or the fewest that fit
        with pytest.raises(InvalidArgumentError, match=r"oversubscription \(1, 2\) gives the spine tier.*2 tiers"):
            shape((1, 2), tiers=tiers)


# ---- oversubscription as built ---------------------------------------------------------------


def tier_capacities(topo, tier: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each ``tier`` switch's down and up capacity (B/s) and its up links, read off the built
    links (what each link joins), not off the generator's sizes."""
    src, dst, cap = link_arrays(topo)
    kinds, code = topo._core.node_kinds(), kind_codes(topo)
    below, above = {"leaf": ("nic", "spine"), "spine": ("leaf", "core")}[tier]
    switches = np.flatnonzero(kinds == code[tier])
    is_down, is_up = kinds[dst] == code[below], kinds[dst] == code[above]

    def per_switch(weights):
        return np.bincount(src, weights=weights, minlength=topo.n_nodes)[switches]

    return per_switch(cap * is_down), per_switch(cap * is_up), per_switch(is_up.astype(float))


def tier_ratio(topo, tier: str, ratio: float) -> float:
    """The down:up capacity of the tier's fullest switch, checked to be ``ratio`` within the
    rounding of whole up links (at most ``ratio``, and one up link fewer would exceed it), and
    every other switch of the tier at most at it."""
    down, up, n_up = tier_capacities(topo, tier)
    assert down.size and np.all(down > 0) and np.all(down <= ratio * up * (1 + 1e-12))
    i = int(np.argmax(down))
    one_link = up[i] / n_up[i]
    assert n_up[i] == 1 or down[i] / (up[i] - one_link) > ratio * (1 + 1e-12), (down[i], up[i], n_up[i])
    return float(down[i] / up[i])


# Catalog switches of both families (the NIC sets the plane rate: sn5600 takes a ConnectX-8 as
# two 400G planes) and oversubscriptions in every form: (leaf, spine) ratios they mean.
FAMILIES = [("quantum-2", "cx7"), ("quantum-x800", "cx8"), ("sn5600", "cx7"), ("sn5600", "cx8")]
OVERSUBSCRIPTIONS = {
    2: [(1, (1, 1)), (2, (2, 1)), (3, (3, 1)), (4, (4, 1)), ("3:1", (3, 1)), ((2.5,), (2.5, 1))],
    3: [(1, (1, 1)), (2, (2, 1)), (4, (4, 1)), ("3:1", (3, 1)), ((2, 3), (2, 3)), ((1, 4), (1, 4))],
}
OVERSUBSCRIBED = [(switch, nic, tiers, over, ratios) for switch, nic in FAMILIES
                  for tiers, overs in OVERSUBSCRIPTIONS.items() for over, ratios in overs]


def assert_built_at(topo, ratios) -> None:
    """Each oversubscribed tier at its ratio as built, and describe() reporting that ratio."""
    d = described(topo)
    assert d["down:up capacity, fullest leaf"] == pytest.approx(tier_ratio(topo, "leaf", ratios[0]), rel=1e-12)
    if so(topo)["tiers"] == 3:
        assert d["down:up capacity, fullest spine"] == pytest.approx(tier_ratio(topo, "spine", ratios[1]), rel=1e-12)
    else:
        assert "down:up capacity, fullest spine" not in d


@pytest.mark.parametrize("switch, nic, tiers, over, ratios", OVERSUBSCRIBED)
def test_oversubscription_is_the_down_up_capacity_as_built(switch, nic, tiers, over, ratios):
    """Bare Clos fabrics: full leaves and a partial last one (two tiers), or about three pods
    (three); and fabrics whose fullest leaf or pod is not full, where the ports a tier uses
    and the ports its split gives differ."""
    radix = so(fs.clos(n_hosts=2, switch=switch, nic=nic, tiers=2))["radix"]
    sizes = [radix // 3, radix * radix // 4 + 3] if tiers == 2 else [radix * radix // 8 + 1, radix * radix // 2 + 7]
    for n in sizes:
        assert_built_at(fs.clos(n_hosts=n, switch=switch, nic=nic, tiers=tiers, oversubscription=over), ratios)


RAIL_OPTIMISED = [
    ("hgx-h100", 16, "quantum-2", "cx7", 2),     # 8 rails of 16 NICs: rails share leaves
    ("nvl72", 5, "sn5600", "cx7", 2),           # 72 rails of 5 NICs on 64-port leaves
    ("hgx-b300", 300, "quantum-x800", "cx8", 3),  # a partial last block, one pod
    ("nvl72", 17, "quantum-2", "cx7", 3),       # a rail of 17 on its own leaf, 72 leaves
]


@pytest.mark.parametrize("domain, n_domains, scale_out, nic, tiers, over, ratios", [
    (*fabric, over, ratios) for fabric in RAIL_OPTIMISED for over, ratios in OVERSUBSCRIPTIONS[fabric[-1]]])
def test_rail_optimised_oversubscription_is_the_down_up_capacity_as_built(
        domain, n_domains, scale_out, nic, tiers, over, ratios):
    topo = fs.cluster(domain=domain, n_domains=n_domains, scale_out=scale_out, nic=nic, tiers=tiers,
                      oversubscription=over)
    assert_built_at(topo, ratios)


def test_one_tier_has_no_oversubscribed_tier():
    for switch, nic in FAMILIES:
        topo = fs.clos(n_hosts=8, switch=switch, nic=nic, tiers=1)
        down, up, _ = tier_capacities(topo, "leaf")
        assert np.all(down > 0) and np.all(up == 0)
        assert not any(q.startswith("down:up") for q in described(topo))
        with pytest.raises(InvalidArgumentError, match="a Clos of 1 tier is one switch per plane"):
            fs.clos(n_hosts=8, switch=switch, nic=nic, tiers=1, oversubscription="2:1")


def test_a_2_to_1_leaf_tier_halves_the_bisection():
    """16 HGX H100 on Quantum-2 in two tiers: a leaf takes two rails of 16 NICs, 32 of its 42
    down ports at 2:1, and 16 up ports (it took 21: 32:21, about 1.5:1, over 3 spines). NICs of
    the first two leaves sending to the last two's cross the leaf uplinks: at 2:1 at half the
    rate they reach at 1:1, as describe()'s leaf-tier bisection says (3.2 TB/s, then 1.6)."""
    rates = {}
    for over in (1, 2):
        topo = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2", tiers=2, oversubscription=over)
        s = so(topo)
        assert (s["n_leaves"], s["rails_per_leaf"], s["leaf_down"], s["leaf_up"], s["n_spines"]) == (
            4, 2, 32, 32 // over, 2 // over)
        d = described(topo)
        assert d["bisection, leaf tier"] == 128 * 50e9 / 2 / over
        assert d["down:up capacity, fullest leaf"] == over
        leaf = leaf_of_nics(topo)
        src, dst = topo.nics[leaf < 2], topo.nics[leaf >= 2]
        rates[over] = flow_rates(run_flows(topo, src, dst, routing="adaptive")).sum()
        assert rates[over] == pytest.approx(64 * plane_Bps(topo) / over, rel=1e-9)
    assert rates[2] == pytest.approx(rates[1] / 2, rel=1e-9)


def described(topo) -> dict:
    return {r["quantity"]: r["value"] for r in topo.describe().table.to_pylist()}


def test_describe_counts_chip_links_and_transceivers_per_cage():
    # NVL36x2: 72 GPUs x 18 links to the leaf chips, and as many leaf-to-spine links, which
    # were added to the GPU row (2,592 per domain).
    d = described(fs.cluster(domain="nvl36x2", n_domains=2, scale_out="quantum-x800"))
    assert d["NVLinks, GPU to switch chip"] == d["NVLinks, switch chip to chip"] == 2 * 72 * 18
    assert "NVLinks, switch chip to chip" not in described(fs.nvl72())
    # A full two-tier Quantum-X800 Clos: every switch uses its 144 ports, in 72 twin-port
    # cages; each ConnectX-8 one cage. Every cable end used to count as a transceiver.
    d = described(fs.clos(n_hosts=10368, switch="quantum-x800", nic="cx8"))
    assert d["pluggable optical transceivers"] == (144 + 72) * 72 + 10368
    # Two 400G planes: each 800G port carries two plane links, a ConnectX-8 both in one cage.
    d = described(fs.clos(n_hosts=41472, switch="quantum-x800", nic="cx8", planes=2))
    assert d["pluggable optical transceivers"] == 2 * (288 + 144) * 72 + 41472
    # SN5600: one 800G port per cage, here broken out into two 400G ConnectX-7 links.
    d = described(fs.clos(n_hosts=8192, switch="sn5600", nic="cx7"))
    assert d["pluggable optical transceivers"] == (128 + 64) * 64 + 8192
    # Co-packaged optics: only the NICs plug transceivers.
    assert described(fs.clos(n_hosts=1024, switch="quantum-x-photonics", nic="cx8"))[
        "pluggable optical transceivers"] == 1024


def test_describe_power_uses_the_switch_own_optics_for_its_own_kind():
    """A Quantum-2 plugs 8.5 W per 400G port (its catalog figure): 'as built' and 'if
    pluggable' are the same figure, not the 1.6T module scaled (7.5 W); a co-packaged switch
    likewise for 'if co-packaged'. An unknown switch power is null, not NaN."""
    topo = fs.cluster(domain="hgx-h100", n_domains=64, scale_out="quantum-2")
    d = described(topo)
    ports = 512 + 2 * 16 * 32  # 512 NIC-facing ports, and both ends of 512 leaf-spine cables
    assert d["switch-side optics, as built"] == d["switch-side optics if pluggable"] == ports * 8.5
    cpo = described(fs.clos(n_hosts=1024, switch="quantum-x-photonics", nic="cx8"))
    assert cpo["switch-side optics, as built"] == cpo["switch-side optics if co-packaged"]
    assert cpo["switch-side optics if pluggable"] > 3 * cpo["switch-side optics if co-packaged"]
    table = topo.describe().table
    power = table.filter(pc.equal(table["quantity"], "switches without optics"))
    assert power["value"].null_count == 1 and "unknown" in str(topo.describe())


# ---- 3. structured ECMP against the generic router -----------------------------------------


def generic(topo, mask_nvlink: bool = False):
    """The same links as a plain Topology (link ids kept); NVLinks at zero capacity if asked."""
    src, dst, cap = link_arrays(topo)
    cap = cap.copy()
    if mask_nvlink:
        kinds, code = topo._core.node_kinds(), kind_codes(topo)
        cap[(kinds[src] == code["nvswitch"]) | (kinds[dst] == code["nvswitch"])] = 0.0
    return fs.Topology.from_arrays(src, dst, cap, topo.links["latency_s"].to_numpy(), n_nodes=topo.n_nodes)


def assert_valid_path(topo, path, a, b):
    src, dst, cap = link_arrays(topo)
    assert path and src[path[0]] == a and dst[path[-1]] == b
    assert all(dst[x] == src[y] for x, y in zip(path, path[1:]))
    assert np.all(cap[path] > 0)


def compare_routes(topo, ref, pairs, rng):
    for a, b in pairs:
        key, seed = (int(x) for x in rng.integers(0, 2**63, size=2))
        got = topo.route(a, b, key=key, seed=seed)
        assert got == ref.route(a, b, key=key, seed=seed), (a, b, key, seed)
        assert_valid_path(topo, got, a, b)


def random_pairs(nodes, n, rng, keep=lambda a, b: True):
    out = []
    while len(out) < n:
        a, b = (int(x) for x in rng.choice(nodes, 2, replace=False))
        if keep(a, b):
            out.append((a, b))
    return out


CLOS_SHAPES = {
    "2-tier": dict(n_hosts=32, switch="test-sw8", nic="cx7"),
    "2-tier partial 3:1": dict(n_hosts=13, switch="test-sw8", nic="cx7", oversubscription=3.0),
    "3-tier": dict(n_hosts=128, switch="test-sw8", nic="cx7", tiers=3),
    "3-tier partial": dict(n_hosts=70, switch="test-sw8", nic="cx7", tiers=3, oversubscription=(1.0, 2.0)),
    "2-plane 2-tier": dict(n_hosts=64, switch="test-sw8x800", nic="cx8", planes=2),
    "2-plane 3-tier": dict(n_hosts=100, switch="test-sw8x800", nic="cx8", planes=2, tiers=3, oversubscription=3.0),
}


@pytest.mark.parametrize("shape", CLOS_SHAPES)
def test_clos_ecmp_routes_equal_the_generic_router(shape):
    topo = fs.clos(**CLOS_SHAPES[shape])
    rng = np.random.default_rng(1)
    compare_routes(topo, generic(topo), random_pairs(topo.nics, 300, rng), rng)


@pytest.mark.parametrize("make", [fs.hgx_h100, fs.hgx_b200, fs.nvl72])
def test_nvlink_domain_routes_equal_the_generic_router(make):
    topo = make()
    rng = np.random.default_rng(2)
    compare_routes(topo, generic(topo), random_pairs(topo.gpus, 200, rng), rng)


def test_two_tier_nvlink_domain_routes_equal_the_generic_router():
    topo = fs.nvlink_domain(n_gpus=576)
    assert topo.structure["domain"]["tiers"] == 2
    rng = np.random.default_rng(3)
    compare_routes(topo, generic(topo), random_pairs(topo.gpus, 100, rng), rng)


@pytest.mark.parametrize(
    "domain, n_domains, kw",
    [
        ("hgx-h100", 8, dict(scale_out="test-sw8", nic="cx7")),
        ("gb300-nvl72", 2, dict(scale_out="test-sw8x800", nic="cx8", planes=2)),
        # Rails sharing leaves: 4 to a leaf; and 3, 3 and 2.
        ("nvl72", 8, dict(scale_out="quantum-2")),
        ("hgx-h100", 9, dict(scale_out="quantum-2")),
    ],
)
def test_cluster_routes_equal_the_generic_router(domain, n_domains, kw):
    """Within a domain the NVLink route; across domains the rail-optimised Clos route, which is
    the graph router's once NVLinks are out of its reach (on the full graph a detour through
    another GPU's NVLink and NIC can tie on hop count, and the structure never takes it)."""
    topo = fs.cluster(domain=domain, n_domains=n_domains, **kw)
    per = topo.n_gpus // n_domains
    rng = np.random.default_rng(4)
    within = random_pairs(topo.gpus, 100, rng, lambda a, b: a // per == b // per)
    compare_routes(topo, generic(topo), within, rng)
    across = random_pairs(topo.gpus, 200, rng, lambda a, b: a // per != b // per)
    nics = random_pairs(topo.nics, 100, rng, lambda a, b: (a - topo.n_gpus) // per != (b - topo.n_gpus) // per)
    compare_routes(topo, generic(topo, mask_nvlink=True), across + nics, rng)
    # A GPU reaches another domain through its own NIC and the destination's.
    src, dst, _ = link_arrays(topo)
    a, b = across[0]
    path = topo.route(a, b)
    assert dst[path[0]] == topo.nics[a] and src[path[-1]] == topo.nics[b]


def test_rails_sharing_a_leaf_meet_there():
    """NVL72 SU on Quantum-2, 4 rails to a leaf. From rail 0 of rack 0: rail 0 of rack 5 and
    rail 3 (same leaf) are NIC, leaf, NIC; rail 4 (the next leaf), of another rack or of its
    own, is NIC, leaf, spine, leaf, NIC, whatever the hash."""
    topo = fs.cluster(domain="nvl72", n_domains=8, scale_out="quantum-2")
    src, dst, _ = link_arrays(topo)
    kinds, code = topo._core.node_kinds(), kind_codes(topo)
    nic = topo.nics
    for b, middle in [(5 * 72, ["leaf"]), (5 * 72 + 3, ["leaf"]), (5 * 72 + 4, ["leaf", "spine", "leaf"]),
                      (4, ["leaf", "spine", "leaf"])]:
        for key in range(16):
            path = topo.route(int(nic[0]), int(nic[b]), key=key)
            assert_valid_path(topo, path, int(nic[0]), int(nic[b]))
            assert [topo.structure["kind_names"][k] for k in kinds[dst[path[:-1]]]] == middle, (b, key)
    # GPU to GPU of another rack on the same rail: GPU, NIC, leaf, NIC, GPU.
    assert len(topo.route(0, 5 * 72)) == 4


@pytest.mark.parametrize("routing", ["adaptive", "ecmp"])
def test_traffic_over_an_nvl72_scalable_unit_stays_within_capacity(routing):
    """Every GPU of the SU sends 1 GB to the GPU 4 rails on in the next rack: another leaf,
    so all of it crosses the spines. Adaptive routing at 1:1: every flow at the plane rate and
    every leaf-spine link carrying 1 GB each way (576 GB over 576 links). ECMP collides,
    and no link ever carries more than its capacity."""
    topo = fs.cluster(domain="nvl72", n_domains=8, scale_out="quantum-2")
    gpu = np.arange(576)
    sc = fs.Scenario(topo, routing=routing, seed=1)
    ids = sc.add_flows(gpu, (gpu + 76) % 576, 1e9)
    res = sc.run(record_rates=True)
    src, dst, cap = link_arrays(topo)
    kinds, code = topo._core.node_kinds(), kind_codes(topo)
    fabric = np.flatnonzero(np.isin(kinds[src], [code["leaf"], code["spine"]])
                            & np.isin(kinds[dst], [code["leaf"], code["spine"]]))
    assert len(fabric) == 2 * 576
    assert res.links["peak_utilization"].to_numpy().max() <= 1 + 1e-9
    if routing == "adaptive":
        assert np.allclose(flow_rates(res), plane_Bps(topo), rtol=1e-9)
        carried = np.zeros(topo.n_links)
        carried[res.links["link_id"].to_numpy()] = res.links["bytes_carried"].to_numpy()
        assert np.allclose(carried[fabric], 1e9, rtol=1e-9)
        return
    # ECMP: each flow's links from its route, its rate over time from rate_changes: the load
    # on every link in every interval between rate changes stays within capacity.
    routes = [np.asarray(sc.route_of(int(f))) for f in ids]
    segs = flow_segments(None, res)
    times = np.unique([t for s in segs.values() for seg in s for t in seg[:2]])
    for t0, t1 in zip(times, times[1:]):
        load = np.zeros(topo.n_links)
        for f, s in segs.items():
            rate = sum(r for a, b, r in s if a <= t0 and b >= t1)
            np.add.at(load, routes[f], rate)
        assert np.all(load <= cap * (1 + 1e-9)), (t0, int(np.argmax(load / cap)))
    assert flow_rates(res).min() < plane_Bps(topo)  # some flows collided


def test_seeds_and_keys_move_flows_between_spines():
    topo = fs.clos(**CLOS_SHAPES["2-tier"])
    _, dst, _ = link_arrays(topo)
    a, b = int(topo.nics[0]), int(topo.nics[-1])
    by_seed = {s: [topo.route(a, b, key=k, seed=s) for k in range(64)] for s in (0, 1)}
    assert by_seed[0] == [topo.route(a, b, key=k, seed=0) for k in range(64)]
    differ = sum(x != y for x, y in zip(by_seed[0], by_seed[1]))
    assert 16 < differ < 64  # about 3/4 of them with 4 spines
    spines = {int(dst[p[1]]) for p in by_seed[0]}
    assert len(spines) == so(topo)["n_spines"] == 4


def test_scenario_flows_take_the_route_of_their_key():
    """A scenario hashes flow i with key i: its route is topo.route(key=i, seed)."""
    topo = fs.clos(**CLOS_SHAPES["3-tier"])
    rng = np.random.default_rng(5)
    pairs = random_pairs(topo.nics, 50, rng)
    sc = fs.Scenario(topo, seed=99, routing="ecmp")
    ids = sc.add_flows([a for a, _ in pairs], [b for _, b in pairs], 1e6)
    for fid, (a, b) in zip(ids, pairs):
        assert sc.route_of(fid) == topo.route(a, b, key=int(fid), seed=99)


def test_a_sprayed_flow_has_no_single_route_across_domains_or_within_one():
    """route_of is a path or nothing: a flow sprayed over the scale-out Clos listed only its
    GPU-NIC links, which join no path (one sprayed within a domain listed none)."""
    topo = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    sc = fs.Scenario(topo, routing="adaptive")
    across, within = sc.add_flow(0, 9, 1e6), sc.add_flow(0, 1, 1e6)
    assert sc.route_of(across) == [] and sc.route_of(within) == []
    # Its GPU-NIC links, the ends of the ECMP path, are still in what it loads.
    path = topo.route(0, 9)
    src, dst, _ = link_arrays(topo)
    assert (src[path[0]], dst[path[-1]]) == (0, 9)
    links, _ = sc.usage_of(across)
    assert {path[0], path[-1]} <= set(links)
    ecmp = fs.Scenario(topo, routing="ecmp")
    assert ecmp.route_of(ecmp.add_flow(0, 9, 1e6)) == path


# ---- 4. ECMP collisions against adaptive routing --------------------------------------------


def derangement(n: int, rng) -> np.ndarray:
    while True:
        p = rng.permutation(n)
        if not np.any(p == np.arange(n)):
            return p


@pytest.mark.parametrize("switch, n_hosts", [("test-sw32", 512), ("sn5600", 256)])
def test_ecmp_collisions_against_adaptive_routing(switch, n_hosts):
    topo = fs.clos(n_hosts=n_hosts, switch=switch, nic="cx7", routing="ecmp")
    assert so(topo)["tiers"] == 2 and so(topo)["n_spines"] > 1
    hosts = topo.nics
    for seed in (1, 2):
        dst = hosts[derangement(n_hosts, np.random.default_rng(seed))]
        line = plane_Bps(topo)
        ecmp = flow_rates(run_flows(topo, hosts, dst, routing="ecmp", seed=seed)).mean() / line
        adaptive = flow_rates(run_flows(topo, hosts, dst, routing="adaptive", seed=seed)).mean() / line
        assert 0.35 < ecmp < 0.75, ecmp
        assert adaptive >= 0.95
        assert adaptive == pytest.approx(1.0, rel=1e-9)


# ---- 5. static faults ------------------------------------------------------------------------


def leaf_spine_link(topo, leaf: int, spine: int) -> int:
    src, dst, _ = link_arrays(topo)
    code = kind_codes(topo)
    kinds = topo._core.node_kinds()
    leaves, spines = np.flatnonzero(kinds == code["leaf"]), np.flatnonzero(kinds == code["spine"])
    return int(np.flatnonzero((src == leaves[leaf]) & (dst == spines[spine]))[0])


@pytest.mark.parametrize("routing", ["ecmp", "adaptive"])
def test_a_downed_link_carries_nothing_and_ecmp_avoids_it(routing):
    topo = fs.clos(**CLOS_SHAPES["2-tier"])
    down = leaf_spine_link(topo, 0, 0)
    failed = topo.fail(links=[down])
    assert failed.structure["has_faults"] and not topo.structure["has_faults"]
    assert failed.links["capacity_Bps"][down].as_py() == 0.0
    assert topo.links["capacity_Bps"][down].as_py() > 0.0  # the original is untouched
    hosts = topo.nics
    src, dst = np.repeat(hosts[:4], 28), np.tile(hosts[4:], 4)
    for key in range(40):
        assert down not in failed.route(hosts[key % 4], hosts[4 + key % 28], key=key)
    res = run_flows(failed, src, dst, routing=routing)
    links = res.links
    carried = dict(zip(links["link_id"].to_pylist(), links["bytes_carried"].to_pylist()))
    assert carried.get(down, 0.0) == 0.0
    # The leaf's other three uplinks carry what leaves it.
    ups = [leaf_spine_link(topo, 0, s) for s in range(1, 4)]
    assert sum(carried.get(l, 0.0) for l in ups) == pytest.approx(len(src) * 1e9, rel=1e-9)


def test_failing_a_spine_node():
    topo = fs.clos(**CLOS_SHAPES["2-tier"])
    code = kind_codes(topo)
    spine = int(np.flatnonzero(topo._core.node_kinds() == code["spine"])[1])
    failed = topo.fail(nodes=[spine])
    src, dst, cap = link_arrays(failed)
    touching = (src == spine) | (dst == spine)
    assert touching.sum() == 16 and np.all(cap[touching] == 0.0)
    hosts = topo.nics
    rng = np.random.default_rng(6)
    for a, b in random_pairs(hosts, 100, rng):
        path = failed.route(a, b, key=int(rng.integers(1 << 30)))
        assert not np.any(touching[path])
    # Bisection loses a quarter: the bundles lost the spine's links.
    res = run_flows(failed, hosts[:16], hosts[16:], routing="adaptive")
    assert rel_close(flow_rates(res).sum(), 16 * plane_Bps(topo) * 3 / 4, 1e-9)


def two_plane_fabrics():
    bare = fs.clos(n_hosts=32, switch="test-sw8x800", nic="cx8", planes=2)
    hosts = bare.nics
    yield "clos", bare, int(hosts[0]), int(hosts[-1])
    big = fs.cluster(domain="gb300-nvl72", n_domains=2, scale_out="test-sw8x800", nic="cx8", planes=2)
    yield "cluster", big, 0, 76  # rails 0 and 4 of two racks: different leaves (4 rails to a leaf)


@pytest.mark.parametrize("routing", ["adaptive", "ecmp"])
def test_a_downed_plane_halves_a_two_plane_nic(routing):
    for name, topo, a, b in two_plane_fabrics():
        assert so(topo)["planes"] == 2, name
        down = topo.fail(planes=[1])
        # Under ECMP each flow is pinned to one plane: send 8 flows, so both planes carry some.
        n = 1 if routing == "adaptive" else 8
        healthy = flow_rates(run_flows(topo, [a] * n, [b] * n, routing=routing, seed=3)).sum()
        halved = flow_rates(run_flows(down, [a] * n, [b] * n, routing=routing, seed=3)).sum()
        assert rel_close(healthy, 2 * plane_Bps(topo), 0.01), name
        assert rel_close(halved, healthy / 2, 0.01), name


def test_a_degraded_link_slows_the_flow_crossing_it():
    topo = fs.clos(**CLOS_SHAPES["2-tier"])
    a, b = int(topo.nics[0]), int(topo.nics[-1])
    path = topo.route(a, b, key=0, seed=0)
    slow = topo.fail(links=[path[1]], factor=0.5)  # a leaf-to-spine link on the flow's path
    assert slow.route(a, b, key=0, seed=0) == path
    full = flow_rates(run_flows(topo, [a], [b], routing="ecmp"))[0]
    assert full == pytest.approx(plane_Bps(topo), rel=1e-9)
    assert flow_rates(run_flows(slow, [a], [b], routing="ecmp"))[0] == pytest.approx(full / 2, rel=1e-9)
    # Adaptive: the host's only uplink at half rate.
    slow_nic = topo.fail(links=[path[0]], factor=0.5)
    assert flow_rates(run_flows(slow_nic, [a], [b], routing="adaptive"))[0] == pytest.approx(full / 2, rel=1e-9)


@pytest.mark.parametrize("routing", ["ecmp", "adaptive"])
def test_a_flow_with_no_surviving_path_fails_in_its_row_naming_its_nodes(routing):
    topo = fs.clos(**CLOS_SHAPES["2-tier"])
    leaf0 = int(np.flatnonzero(topo._core.node_kinds() == kind_codes(topo)["leaf"])[0])
    cut = topo.fail(nodes=[leaf0])
    sc = fs.Scenario(cut, routing=routing)
    lost = sc.add_flow(0, 20, 1e6, start_s=0.5)
    after_lost = sc.add_delay(1.0, after=[lost])
    fine = sc.add_flow(4, 20, 1e6)  # hosts of other leaves still route
    res = sc.run()
    rows = {r["flow_id"]: r for r in res.flows.to_pylist()}
    # It fails when its transfer would start: after its start time and path latency.
    assert rows[lost]["status"] == "failed"
    assert rows[lost]["failed_s"] == rows[lost]["start_s"] == pytest.approx(0.5, abs=1e-5)
    assert rows[lost]["finish_s"] is None
    assert re.search("no path from host0 to host20", rows[lost]["error"])
    assert res.delays.to_pylist()[0]["status"] == "skipped"
    assert rows[fine]["status"] == "done" and rows[fine]["error"] is None
    assert res.delays.to_pylist()[0]["delay_id"] == after_lost
    # A cluster GPU whose NIC is down cannot leave its domain, but still reaches its peers.
    cl = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="test-sw8", nic="cx7")
    cut = cl.fail(nodes=[int(cl.nics[3])])
    sc = fs.Scenario(cut, routing=routing)
    sc.add_flow(3, 11, 1e6)
    sc.add_flow(3, 4, 1e6)
    flows = sc.run().flows.to_pylist()
    assert [f["status"] for f in flows] == ["failed", "done"]
    assert "no path from gpu3 to gpu11" in flows[0]["error"]


def test_nvlink_faults_under_spraying_and_ecmp():
    """A chip down on an HGX H100 board leaves GPU 0 its 13 links to the other chips; ECMP
    pins a flow to one NVLink; one of an NVL72 GPU's 18 links down leaves 17."""
    hgx = fs.hgx_h100()
    line, eff = nvlink_payload("h100")
    chip = int(np.flatnonzero(hgx._core.node_kinds() == kind_codes(hgx)["nvswitch"])[0])
    failed = hgx.fail(nodes=[chip])
    assert flow_rates(run_flows(failed, [0], [1]))[0] == pytest.approx(13 * line * eff, rel=1e-9)
    pinned = run_flows(failed, [0], [1], routing={"scale_up": "ecmp"})
    assert flow_rates(pinned)[0] == pytest.approx(line * eff, rel=1e-9)
    rack = fs.nvl72()
    src, _, _ = link_arrays(rack)
    one = int(np.flatnonzero(src == 0)[0])
    line, eff = nvlink_payload("gb200")
    assert flow_rates(run_flows(rack.fail(links=[one]), [0], [1]))[0] == pytest.approx(17 * line * eff, rel=1e-9)


@pytest.mark.parametrize(
    "switch, routing, expected",
    [
        ("quantum-2", None, {"scale_up": "adaptive", "scale_out": "adaptive"}),
        ("sn5600", None, {"scale_up": "adaptive", "scale_out": "ecmp"}),
        ("sn5600", "adaptive", {"scale_up": "adaptive", "scale_out": "adaptive"}),
    ],
)
def test_default_routing_follows_the_fabric(switch, routing, expected):
    topo = fs.clos(n_hosts=8, switch=switch, nic="cx7", routing=routing)
    assert fs.Scenario(topo).routing == expected
    assert fs.Scenario(topo, routing="ecmp").routing["scale_out"] == "ecmp"
    assert fs.Scenario(topo, routing={"scale_up": "ecmp"}).routing == dict(expected, scale_up="ecmp")


def test_summary_of_a_run_on_a_fabric_prints():
    sc = fs.Scenario(fs.hgx_h100())
    sc.add_flow(0, 1, 1e9)
    text = str(sc.run().summary)
    assert "busiest links" in text and "gpu0" in text and "nvswitch" in text


@pytest.mark.parametrize("make", [fs.hgx_h100, lambda: fs.clos(n_hosts=32, switch="test-sw8", nic="cx7")])
def test_a_flow_from_a_node_to_itself_is_refused(make):
    topo = make()
    node = 3 if topo.n_gpus else int(topo.nics[3])
    with pytest.raises(fs.SameEndpointsError):
        topo.route(node, node)
    with pytest.raises(fs.SameEndpointsError):
        fs.Scenario(topo).add_flow(node, node, 1e6)


# ---- 6. bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: fs.cluster(domain="hgx-h1000", n_domains=2),
            InvalidArgumentError,
            "unknown domain 'hgx-h1000'.*hgx-h100",
        ),
        (
            lambda: fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-9"),
            UnknownPartError,
            "quantum-9",
        ),
        (lambda: fs.clos(n_hosts=8, switch="quantum-9"), UnknownPartError, "quantum-9"),
        (
            lambda: fs.cluster(domain="hgx-h100", n_domains=-1),
            InvalidArgumentError,
            r"n_domains .* must be an integer in \[1, .*got -1",
        ),
        (lambda: fs.cluster(domain="hgx-h100", n_domains=2.5), InvalidArgumentError, "n_domains"),
        (
            lambda: fs.clos(n_hosts=64, switch="quantum-2", nic="cx7", planes=2),
            InvalidArgumentError,
            "cx7 .*at most 1 .*planes=2",
        ),
        (
            lambda: fs.clos(n_hosts=64, switch="sn5600", nic="cx8", planes=4),
            InvalidArgumentError,
            "cx8 .*at most 2 .*planes=4",
        ),
        (
            lambda: fs.clos(n_hosts=2049, switch="quantum-2", nic="cx7", tiers=2),
            InvalidArgumentError,
            r"65 leaves \(32 endpoints to a leaf\), more than the 64 leaves \(2048 endpoints\).*use tiers=3",
        ),
        (
            lambda: fs.clos(n_hosts=64, switch="quantum-2", nic="cx7", oversubscription=0.5),
            InvalidArgumentError,
            ">= 1.*got 0.5",
        ),
        (
            lambda: fs.clos(n_hosts=64, switch="quantum-2", nic="cx7", routing="foo"),
            InvalidArgumentError,
            "'ecmp' or 'adaptive', got 'foo'",
        ),
        (
            lambda: fs.Scenario(fs.hgx_h100(), routing="foo"),
            InvalidArgumentError,
            "'ecmp' or 'adaptive', got 'foo'",
        ),
        (lambda: fs.Scenario(fs.hgx_h100(), routing={"scaleup": "ecmp"}), InvalidArgumentError, "scaleup"),
        (
            lambda: fs.clos(n_hosts=64, switch="h100", nic="cx7"),
            InvalidArgumentError,
            "switch must be a switch.*'h100', a gpu",
        ),
        (
            lambda: fs.cluster(domain="hgx-h100", n_domains=2, scale_out="cx7"),
            InvalidArgumentError,
            "'cx7', a nic",
        ),
        (
            lambda: fs.clos(n_hosts=8, switch="test-sw8-static", nic="cx7", routing="adaptive"),
            InvalidArgumentError,
            "no adaptive routing",
        ),
        (lambda: fs.clos(n_hosts=64, switch="quantum-2", nic="cx7", tiers=0), InvalidArgumentError, "tiers"),
        (lambda: fs.clos(n_hosts=0, switch="quantum-2", nic="cx7"), InvalidArgumentError, "n_hosts"),
        (lambda: fs.nvl72(gpu="h100"), InvalidArgumentError, "'gb200' or 'gb300', got 'h100'"),
        (
            lambda: fs.nvlink_domain(gpu="h100", switch="nvlink5-switch"),
            InvalidArgumentError,
            "NVLink 4.*NVLink 5",
        ),
        (lambda: fs.nvlink_domain(gpu="gb200", chip_links=[9, 8]), InvalidArgumentError, "17 NVLinks.*18"),
        (
            # A typo once built 72-GPU domains, n_gpus' default.
            lambda: fs.cluster(domain={"gpu": "b200", "n_gpu": 8, "chip_links": [9, 9]}, n_domains=2),
            InvalidArgumentError,
            r"unknown domain key\(s\) 'n_gpu' \(did you mean 'n_gpus'.*takes gpu, n_gpus, switch, chip_links, tiers",
        ),
        # Counts beyond 32 bits gave an OverflowError naming nothing.
        (lambda: fs.cluster(domain="nvl72", n_domains=2**31), InvalidArgumentError,
         r"n_domains \(of 72 GPUs\) must be an integer in \[1, 59652324\), got 2147483648"),
        (lambda: fs.clos(n_hosts=2**33), InvalidArgumentError, r"n_hosts must be an integer in \[1, 2\*\*32\), got 8589934592"),
        (lambda: fs.nvlink_domain(n_gpus=2**40), InvalidArgumentError, r"n_gpus must be an integer in \[1, 2\*\*32\)"),
        (lambda: fs.Topology.from_arrays([0], [1], 1.0, n_nodes=2.5), InvalidArgumentError,
         r"n_nodes must be an integer in \[0, 2\*\*63\), got float 2.5"),
        (lambda: fs.Topology.from_arrays([0], [1], None), InvalidArgumentError, "capacity_Bps: bandwidth must be"),
        # An InfiniBand efficiency on NVLink, and True as 100%, were taken.
        (lambda: fs.hgx_h100(nvlink_efficiency="infiniband"), InvalidArgumentError,
         "nvlink_efficiency 'infiniband' applies to infiniband, not to NVLink.*'nvlink4-payload'"),
        (lambda: fs.clos(n_hosts=8, switch="quantum-2", nic="cx7", efficiency=True), InvalidArgumentError,
         r"efficiency must be a number in \(0, 1\] or the name of an efficiency part, got True"),
        (lambda: fs.clos(n_hosts=8, switch="quantum-2", nic="cx7", efficiency="nvlink5-payload"),
         InvalidArgumentError, "applies to nvlink5, not to a scale-out network"),
        (lambda: fs.hgx_h100().fail(), InvalidArgumentError, "at least one"),
        (lambda: fs.hgx_h100().fail(links=[0], factor=-1.0), InvalidArgumentError, "factor"),
        (lambda: fs.hgx_h100().fail(links=[10**6]), fs.UnknownLinkError, "1000000"),
        (
            lambda: fs.clos(n_hosts=8, switch="test-sw8x800", nic="cx8", planes=2).fail(planes=[2]),
            InvalidArgumentError,
            "plane 2",
        ),
        (lambda: fs.hgx_h100().fail(planes=[0]), InvalidArgumentError, "no scale-out planes"),
    ],
)
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()
