"""Collectives: closed forms, the analytical estimate against the flow simulation, the H100
calibration figures, contention (ECMP collisions, shared links), SHARP's halved traffic,
dependencies, the nccl-tests sweep and CLI, and bad input."""

import numpy as np
import pytest

import fabricsim as fs
from fabricsim import catalog
from fabricsim.cli import main
from fabricsim.exceptions import InvalidArgumentError, UnknownNodeError

GiB = 1 << 30
H100_NVLINK_Bps = 18 * 25e9 * 0.824  # 18 NVLink4 links at their payload rate
H100_RING_LATENCY_S = 56.0e-6        # NCCL's Simple ring all-reduce on 8 GPUs (hardware.md 4.6)


@pytest.fixture(scope="module", autouse=True)
def small_switch():
    catalog.add_part(
        "test-coll-sw8", "switch", source="[assumed] a small switch for tests", protocol="ethernet",
        ports=8, port_Bps="400Gb/s", lane_Bps="400Gb/s", optics="pluggable", ports_per_cage=1,
        optics_watts_per_port=0.0, system_watts=None, latency_s=0.0, sharp=False, adaptive_routing=False,
    )
    for ports in (8, 16):
        catalog.add_part(
            f"test-coll-ib{ports}", "switch", source="[assumed] a small SHARP switch for tests",
            protocol="infiniband", ports=ports, port_Bps="400Gb/s", lane_Bps="400Gb/s", optics="pluggable",
            ports_per_cage=1, optics_watts_per_port=0.0, system_watts=None, latency_s=0.0, sharp=True,
            adaptive_routing=True,
        )
    yield
    for name in ("test-coll-sw8", "test-coll-ib8", "test-coll-ib16"):
        catalog.remove_part(name)


def one(fabric, op, ranks, size, **kw):
    sc = fs.Scenario(fabric, seed=kw.pop("seed", 0), routing=kw.pop("routing", None))
    sc.add_collective(op, ranks, size, **kw)
    res = sc.run()
    return res, res.collectives.to_pylist()[0]


def duration(row):
    return row["finish_s"] - row["start_s"]


# ---- closed forms and calibration --------------------------------------------------------------


@pytest.mark.parametrize("size", [1 << 20, 64 << 20, GiB])
def test_ring_all_reduce_on_hgx_h100_is_the_closed_form(size):
    _, row = one(fs.hgx_h100(), "all_reduce", range(8), size, algorithm="ring", protocol="simple")
    n = 8
    want = 2 * (n - 1) / n * size / H100_NVLINK_Bps + H100_RING_LATENCY_S
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["busbw_Bps"] == pytest.approx(row["algbw_Bps"] * 2 * (n - 1) / n, rel=1e-12)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_ring_all_gather_and_reduce_scatter_move_n_minus_1_over_n(op):
    _, row = one(fs.hgx_h100(), op, range(8), GiB, algorithm="ring")
    bandwidth_s = duration(row) - row["analytical_s"] + (7 / 8) * GiB / H100_NVLINK_Bps
    assert bandwidth_s == pytest.approx((7 / 8) * GiB / H100_NVLINK_Bps, rel=1e-9)
    # busbw on an idle ring is the per-GPU NVLink rate, up to the latency term.
    assert row["busbw_Bps"] == pytest.approx(H100_NVLINK_Bps, rel=0.02)


def test_h100_calibration_ring_and_nvls_within_5_percent():
    """The only measured figures the presets may match (issue 4): 8 GiB all-reduce."""
    _, ring = one(fs.hgx_h100(), "all_reduce", range(8), 8 * GiB, algorithm="ring")
    assert 360e9 * 0.95 <= ring["busbw_Bps"] <= 370e9 * 1.05
    _, nvls = one(fs.hgx_h100(), "all_reduce", range(8), 8 * GiB, algorithm="nvls")
    assert nvls["busbw_Bps"] == pytest.approx(480e9, rel=0.05)
    assert nvls["algbw_Bps"] == pytest.approx(275e9, rel=0.05)
    # NCCL's model picks NVLS for large all-reduces on one HGX H100.
    _, auto = one(fs.hgx_h100(), "all_reduce", range(8), 8 * GiB)
    assert auto["algorithm"] == "nvls"


CASES = [
    # (fabric builder, op, ranks, algorithm)
    (lambda: fs.hgx_h100(), "all_reduce", list(range(8)), "ring"),
    (lambda: fs.hgx_h100(), "all_reduce", [0, 3, 5], "ring"),
    (lambda: fs.hgx_h100(), "all_reduce", list(range(8)), "nvls"),
    (lambda: fs.hgx_h100(), "all_reduce", [1, 2, 6, 7], "nvls"),
    (lambda: fs.hgx_h100(), "broadcast", list(range(8)), "ring"),
    (lambda: fs.hgx_h100(), "reduce", [4, 1, 2], "ring"),
    (lambda: fs.hgx_h100(), "all_to_all", list(range(8)), "direct"),
    (lambda: fs.nvl72(), "all_gather", list(range(72)), "ring"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "all_reduce", list(range(32)), "ring"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "all_reduce", list(range(32)), "hierarchical"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "all_reduce", list(range(32)), "nvls_sharp"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "all_reduce", [0, 8, 16, 24], "sharp"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "reduce_scatter", list(range(32)), "ring"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "all_to_all", list(range(32)), "direct"),
    (lambda: fs.cluster(domain="gb200-nvl72", n_domains=2, scale_out="quantum-x800"), "all_reduce", list(range(144)), "nvls_sharp"),
    (lambda: fs.cluster(domain="gb200-nvl72", n_domains=2, scale_out="quantum-x800"), "all_reduce", list(range(144)), "hierarchical"),
    (lambda: fs.hgx_h100(), "all_reduce", list(range(8)), "tree"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "all_reduce", list(range(32)), "tree"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=5, scale_out="quantum-2"), "all_reduce", list(range(0, 40, 8)), "tree"),
    (lambda: fs.cluster(domain="gb200-nvl72", n_domains=3, scale_out="quantum-x800"), "all_reduce", list(range(216)), "tree"),
    (lambda: fs.hgx_h100(), "all_reduce", list(range(8)), "halving_doubling"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "reduce_scatter", list(range(32)), "halving_doubling"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "all_gather", list(range(32)), "halving_doubling"),
    # Domains holding different numbers of ranks.
    (lambda: fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"), "all_reduce", [0, 1, 2, 8, 9, 10, 11, 12], "tree"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "all_reduce", [0, 1, 2, 3, 4, 9, 10, 16, 17, 18, 19, 20, 21, 22, 31], "tree"),
    (lambda: fs.cluster(domain="gb200-nvl72", n_domains=2, scale_out="quantum-x800"), "all_reduce", list(range(100)), "tree"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"), "all_reduce", [0, 1, 8], "hierarchical"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "all_reduce", [0, 1, 2, 3, 4, 9, 10, 16, 17, 18, 19, 20, 21, 22, 31], "hierarchical"),
    (lambda: fs.cluster(domain="gb200-nvl72", n_domains=2, scale_out="quantum-x800"), "all_reduce", list(range(100)), "hierarchical"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), "all_reduce", [0, 1, 2, 3, 4, 9, 10, 16, 17, 18, 19, 20, 21, 22, 30, 31], "nvls_sharp"),
    (lambda: fs.cluster(domain="gb200-nvl72", n_domains=2, scale_out="quantum-x800"), "all_reduce", list(range(100)), "nvls_sharp"),
    (lambda: fs.cluster(domain="hgx-h100", n_domains=5, scale_out="quantum-2"), "all_reduce", list(range(40)), "halving_doubling"),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("size", [4 << 20, 256 << 20, 4 * GiB])
def test_analytical_and_flow_agree_within_1_percent_when_uncongested(case, size):
    build, op, ranks, algo = CASES[case]
    fabric = build()
    _, row = one(fabric, op, ranks, size, algorithm=algo)
    assert row["algorithm"] == algo
    assert duration(row) == pytest.approx(row["analytical_s"], rel=0.01)
    # The estimate without a scenario is the same number.
    assert fs.estimate(fabric, op, size, ranks, algorithm=algo).time_s == row["analytical_s"]


def test_ring_on_ranks_spread_unevenly_over_domains_is_the_closed_form():
    """[0, 1, 8] on 2 HGX H100s over Quantum-2 (400 Gb/s NICs at 96%: 48 GB/s): one ring
    through both domains, paced by the NIC. NCCL's Simple ring all-reduce latency (us) with
    nsteps = 4, 2 of them across nodes, NVLink intra (one domain has 2 GPUs), NET inter
    (ppn = 1.5): 8.4 + 2 * 3.4 + 2 * 14, x1.4 (plateau, more than one node). All-gather:
    8.4 + 1 * 3.4 + 1 * 14, no plateau."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    net_Bps = 400e9 / 8 * 0.96
    _, row = one(fabric, "all_reduce", [0, 1, 8], GiB, algorithm="ring", protocol="simple")
    want = 1.4 * (8.4 + 2 * 3.4 + 2 * 14) * 1e-6 + 2 * 2 / 3 * GiB / net_Bps
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)
    est = fs.estimate(fabric, "all_gather", GiB, [0, 1, 8], algorithm="ring", protocol="simple")
    assert est.time_s == pytest.approx((8.4 + 3.4 + 14) * 1e-6 + 2 / 3 * GiB / net_Bps, rel=1e-9)


# ---- double binary tree and recursive halving-doubling -------------------------------------------


def star(n, link_Bps=50e9, latency_s=0.5e-6):
    """n hosts on one switch (node n), every link link_Bps each way."""
    src = np.concatenate([np.arange(n), np.full(n, n)])
    dst = np.concatenate([np.full(n, n), np.arange(n)])
    return fs.Topology.from_arrays(src, dst, np.full(2 * n, link_Bps), np.full(2 * n, latency_s), n_nodes=n + 1)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 9, 16, 31, 72, 100, 1000])
def test_double_binary_tree_is_two_binary_trees_whose_vertices_have_at_most_four_edges(n):
    from fabricsim.collectives import dtree_parents

    degree = np.zeros(n, dtype=int)
    for parents in dtree_parents(n):
        assert (parents < 0).sum() == 1  # one root
        children = np.bincount(parents[parents >= 0], minlength=n)
        assert children.max() <= 2
        for v in range(n):  # every vertex reaches the root without a cycle
            seen = 0
            while parents[v] >= 0 and seen <= n:
                v, seen = parents[v], seen + 1
            assert seen <= n
        degree += (parents >= 0) + children
    assert degree.max() <= 4
    if n > 2:  # the second tree makes the leaves of the first carry inner-vertex traffic
        assert degree.min() >= 2


@pytest.mark.parametrize("size", [1 << 20, GiB])
def test_tree_all_reduce_on_a_star_is_the_closed_form(size):
    """8 hosts: in both trees together the busiest host has 4 tree neighbours, each edge
    carrying S/2 each way, so the time is alpha + 4 (S/2) / B."""
    from fabricsim.nccl_model import CommShape, latency_of

    B = 50e9
    _, row = one(star(8, B), "all_reduce", range(8), size, algorithm="tree", protocol="simple")
    alpha = latency_of("all_reduce", size, CommShape(
        n_ranks=8, n_nodes=8, arch="hopper", nvlink_Bps=0.0, nvlink_link_Bps=0.0, net_Bps=B,
        nvswitch=False, collnet=False), "tree", "simple")
    assert duration(row) == pytest.approx(alpha + 2 * size / B, rel=1e-9)


@pytest.mark.parametrize("n", [2, 8, 16])
@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather", "all_reduce"])
def test_halving_doubling_on_a_star_is_the_closed_form(n, op):
    """log2(n) steps per half, each paying the point-to-point alpha and two links of wire
    latency; (n-1)/n of S crosses each host link per half."""
    from fabricsim.collectives import _P2P_BASE_S, _P2P_NET_S

    B, hop_s = 50e9, 0.5e-6
    _, row = one(star(n, B, hop_s), op, range(n), GiB, algorithm="halving_doubling")
    halves = 2 if op == "all_reduce" else 1
    steps = halves * int(np.log2(n))
    want = steps * (_P2P_BASE_S + _P2P_NET_S + 2 * hop_s) + halves * (n - 1) / n * GiB / B
    assert duration(row) == pytest.approx(want, rel=1e-9)


def test_halving_doubling_folds_a_non_power_of_two():
    """6 ranks: the last 2 send S to ranks 0 and 1 first and get the result back last, so
    two whole-buffer steps come on top of the 4-rank halving-doubling."""
    from fabricsim.collectives import _P2P_BASE_S, _P2P_NET_S

    B, hop_s = 50e9, 0.5e-6
    res, row = one(star(6, B, hop_s), "all_reduce", range(6), GiB, algorithm="halving_doubling")
    step_s = _P2P_BASE_S + _P2P_NET_S + 2 * hop_s
    want = 6 * step_s + (2 + 2 * 3 / 4) * GiB / B
    assert duration(row) == pytest.approx(want, rel=1e-9)
    f = res.flows
    whole = f["bytes"].to_numpy() == GiB
    pairs = zip(f["src"].to_numpy()[whole], f["dst"].to_numpy()[whole])
    assert sorted(pairs) == [(0, 4), (1, 5), (4, 0), (5, 1)]


def test_tree_wins_over_ring_at_small_sizes_across_many_nodes():
    """NCCL's choice: the tree's latency grows with log(nodes), the ring's with nodes."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=64, scale_out="quantum-2", tiers=2)
    small = fs.estimate(fabric, "all_reduce", 1 << 16, algorithm="auto")
    assert small.algorithm in ("tree", "nvls_sharp", "sharp")
    ring = fs.estimate(fabric, "all_reduce", 1 << 16, algorithm="ring")
    tree = fs.estimate(fabric, "all_reduce", 1 << 16, algorithm="tree")
    assert tree.time_s < ring.time_s


@pytest.mark.parametrize("domain, n_domains, scale_out, n", [
    ("hgx-h100", 4, "quantum-2", 32), ("gb200-nvl72", 2, "quantum-x800", 144)])
def test_nvls_sharp_pays_nccls_one_nvls_latency_not_three_collectives(domain, n_domains, scale_out, n):
    """NVLS+SHARP is NCCL's NVLS algorithm across nodes: its latency is NVLS's NVLink step
    plus one network step (tuning.cc hwLat 25 + 18 us, no base), not the sum of an NVLS
    reduce-scatter, a CollNet all-reduce and an NVLS all-gather (64 us)."""
    from fabricsim.collectives import _comm, latency_s

    comm = _comm(fs.cluster(domain=domain, n_domains=n_domains, scale_out=scale_out), list(range(n)))
    for size in (1 << 10, GiB):
        assert latency_s("all_reduce", "nvls_sharp", size, comm) == pytest.approx((25.0 + 18.0) * 1e-6, rel=1e-12)
    assert fs.estimate(fs.cluster(domain=domain, n_domains=n_domains, scale_out=scale_out), "all_reduce", 1 << 10,
                       list(range(n)), algorithm="nvls_sharp").time_s < 44e-6


def test_an_all_to_all_that_cannot_fit_is_refused_up_front_with_an_estimate():
    """65,536 ranks: 4.3 billion flows, refused before the size matrix is built."""
    sc = fs.Scenario(star(65536))
    with pytest.raises(fs.ScenarioTooLargeError, match=r"4294901760 more flows .* needs about \d+\.\d GiB"):
        sc.add_collective("all_to_all", np.arange(65536), GiB)
    assert sc.n_activities == 0


# ---- protocols ---------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["ring", "tree"])
@pytest.mark.parametrize("protocol", ["ll", "ll128", "simple"])
@pytest.mark.parametrize("size", [64 << 10, 64 << 20])
@pytest.mark.parametrize("ranks", [list(range(32)), [0, 1, 2, 8, 9, 10, 11, 12, 16, 24, 25, 26, 27, 28, 29, 30, 31]])
def test_protocols_scale_the_wire_bytes_by_nccls_efficiency(algo, protocol, size, ranks):
    """LL and LL128 send flags with the data: every edge carries 1/efficiency wire bytes per
    payload byte (NCCL's bus-bandwidth ratio to Simple), and the alpha is the protocol's;
    also where the domains hold 3, 5, 1 and 8 ranks."""
    from fabricsim.collectives import _comm, _efficiency, latency_s

    fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    _, row = one(fabric, "all_reduce", ranks, size, algorithm=algo, protocol=protocol)
    _, simple = one(fabric, "all_reduce", ranks, size, algorithm=algo, protocol="simple")
    assert row["protocol"] == protocol
    assert duration(row) == pytest.approx(row["analytical_s"], rel=1e-9)
    comm = _comm(fabric, ranks)
    eff = _efficiency("all_reduce", algo, protocol, comm)
    assert (0.0 < eff < 1.0) if protocol != "simple" else eff == 1.0
    beta = (duration(simple) - latency_s("all_reduce", algo, size, comm, "simple")) / eff
    assert duration(row) == pytest.approx(latency_s("all_reduce", algo, size, comm, protocol) + beta, rel=1e-9)


def test_auto_takes_nccls_protocol_low_latency_small_and_simple_large():
    small = fs.estimate(fs.hgx_h100(), "all_reduce", 1024)
    assert (small.algorithm, small.protocol) == ("ring", "ll")
    large = fs.estimate(fs.hgx_h100(), "all_reduce", 8 * GiB)
    assert (large.algorithm, large.protocol) == ("nvls", "simple")
    sc = fs.Scenario(fs.hgx_h100())
    with pytest.raises(InvalidArgumentError, match="protocol 'll' cannot run nvls"):
        sc.add_collective("all_reduce", range(8), 1e6, algorithm="nvls", protocol="ll")
    with pytest.raises(InvalidArgumentError, match="protocol must be 'auto' or one of simple, ll128, ll, got 'LL'"):
        sc.add_collective("all_reduce", range(8), 1e6, protocol="LL")
    assert sc.n_activities == 0


def test_estimate_reports_the_chosen_algorithm_and_nccl_tests_bandwidths():
    e = fs.estimate(fs.hgx_h100(), "all_reduce", 8 * GiB)
    assert e.algorithm == "nvls" and e.n_ranks == 8
    assert e.algbw_Bps == pytest.approx(8 * GiB / e.time_s)
    assert e.busbw_Bps == pytest.approx(e.algbw_Bps * 2 * 7 / 8)
    with pytest.raises(InvalidArgumentError, match="op must be one of"):
        fs.estimate(fs.hgx_h100(), "allreduce", 1e6)
    with pytest.raises(InvalidArgumentError, match="-5"):
        fs.estimate(fs.hgx_h100(), "all_reduce", -5.0)
    with pytest.raises(UnknownNodeError, match="rank 9"):
        fs.estimate(fs.hgx_h100(), "all_reduce", 1e6, [0, 9])


# ---- contention --------------------------------------------------------------------------------


def test_an_ecmp_collision_on_one_ring_edge_slows_the_whole_ring_and_shows_the_link():
    """16 hosts, one rank each, on a static-hashing Clos of 4 leaves and 4 spines, the ring
    strided so every edge crosses leaves: 16 edges hash onto 4 spines, so some link carries
    k >= 2 edges. The ring (one coupled flow) then runs k times slower, and the links table
    shows that link carrying k edges' bytes. Adaptive routing on the same fabric does not."""
    fabric = fs.clos(n_hosts=16, switch="test-coll-sw8", nic="cx7", routing="ecmp")
    size = 256 << 20
    volume = 2 * 15 / 16 * size  # bytes per ring edge
    strided = [h + 4 * k for h in range(4) for k in range(4)]
    res, row = one(fabric, "all_reduce", strided, size, algorithm="ring")
    rate = fabric.structure["scale_out"]["link_Bps"]
    latency = row["analytical_s"] - volume / rate
    busiest = res.links.sort_by([("bytes_carried", "descending")]).to_pylist()[0]
    k = busiest["bytes_carried"] / volume
    assert k >= 2 and k == pytest.approx(round(k), rel=1e-9)
    assert duration(row) == pytest.approx(latency + round(k) * volume / rate, rel=1e-9)
    assert row["contention_s"] == pytest.approx((round(k) - 1) * volume / rate, rel=1e-9)
    assert busiest["peak_utilization"] == pytest.approx(1.0)
    _, adaptive = one(fabric, "all_reduce", strided, size, algorithm="ring", routing="adaptive")
    assert duration(adaptive) == pytest.approx(adaptive["analytical_s"], rel=1e-9)


def test_concurrent_communicators_share_a_link_max_min_fairly():
    # Hosts 0, 1 on switch 4 and 2, 3 on switch 5; one trunk 4 <-> 5 of 100 B/s each way.
    src = [0, 4, 1, 4, 2, 5, 3, 5, 4, 5]
    dst = [4, 0, 4, 1, 5, 2, 5, 3, 5, 4]
    topo = fs.Topology.from_arrays(src, dst, [100.0] * 10, 0.0)
    alone = fs.Scenario(topo)
    alone.add_collective("all_reduce", [0, 2], 1000.0, algorithm="ring", protocol="simple")
    t_alone = duration(alone.run().collectives.to_pylist()[0])
    both = fs.Scenario(topo)
    both.add_collective("all_reduce", [0, 2], 1000.0, algorithm="ring", protocol="simple")
    both.add_collective("all_reduce", [1, 3], 1000.0, algorithm="ring", protocol="simple")
    rows = both.run().collectives.to_pylist()
    lat = rows[0]["analytical_s"] - 1000.0 / 100.0  # ring of 2: 2(n-1)/n S = S per edge
    assert t_alone == pytest.approx(lat + 1000.0 / 100.0, rel=1e-9)
    for r in rows:  # each gets half the trunk
        assert duration(r) == pytest.approx(lat + 1000.0 / 50.0, rel=1e-9)
    assert [r["communicator"] for r in rows] == [0, 1]


def test_tp_groups_inside_racks_beside_dp_groups_across_racks_run_as_if_alone():
    """Two NVL72 racks: a tensor-parallel all-reduce in each rack (NVLink) and 72 data-parallel
    all-reduces, one per rail (GPU k of both racks, over the NICs), all at once. They share no
    link, so each takes exactly its time alone, and every DP group gets its own rail."""
    fabric = fs.cluster(domain="gb200-nvl72", n_domains=2, scale_out="quantum-x800")
    size = 256 << 20
    tp = [list(range(72 * r, 72 * r + 72)) for r in range(2)]
    dp = [[k, 72 + k] for k in range(72)]

    def durations(groups):
        sc = fs.Scenario(fabric)
        for g in groups:
            sc.add_collective("all_reduce", g, size, algorithm="ring", protocol="simple")
        c = sc.run().collectives
        return c["finish_s"].to_numpy() - c["start_s"].to_numpy()

    together = durations(tp + dp)
    np.testing.assert_allclose(together, np.concatenate([durations(tp), durations(dp)]), rtol=1e-12)
    assert np.ptp(together[2:]) == 0.0  # every rail alike
    assert together[2] > together[0]  # the NICs are slower than NVLink


def test_sharp_all_reduce_moves_about_half_the_bytes_per_gpu_of_ring():
    fabric = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2")
    ranks = list(range(0, 128, 8))  # one GPU per domain, all on rail 0
    size = 256 << 20
    sent = {}
    for algo in ("ring", "sharp"):
        res, _ = one(fabric, "all_reduce", ranks, size, algorithm=algo)
        links = res.links.to_pylist()
        gpu_out = [l for l in links if l["src"] == 0]  # GPU 0's link to its NIC
        sent[algo] = sum(l["bytes_carried"] for l in gpu_out)
    assert sent["ring"] == pytest.approx(2 * 15 / 16 * size, rel=1e-9)
    assert sent["sharp"] == pytest.approx(size, rel=1e-9)
    assert sent["sharp"] / sent["ring"] == pytest.approx(0.5, abs=0.05)


# Hand-derived closed forms on HGX H100 domains over Quantum-2: a GPU's NVLink is 18 links of
# 20.6 GB/s, its NIC 400 Gb/s at 96%; alphas are NCCL's latencies (hardware.md 4.2, 4.4) in us.
NVL_Bps, NET_Bps = 18 * 20.6e9, 400e9 / 8 * 0.96
RING_RS_2 = 8.4 + 1 * 3.4                  # ring reduce-scatter / all-gather, 2 GPUs, one node
RING_AR_3_NODES = 1.4 * (8.4 + 4 * 14)     # ring all-reduce, 1 GPU on each of 3 nodes (plateau)
NVLS_ACROSS_NODES = 25.0 + 18.0            # NVLS(+SHARP): the NVLink step and one NET step, base dropped
COLLNET_ONE_PER_NODE = 14.0                # CollNet Direct, ppn 1: the NET Tree Simple step
CLOSED_FORMS = {
    # Ring reduce-scatter and all-gather of S in each domain (p = 2), ring all-reduce of S/p per
    # rail over d = 3 domains: 2(d-1)/d (S/p) through each NIC.
    "hierarchical 3x2": ("hierarchical", 3, [0, 1, 8, 9, 16, 17],
                         (2 * RING_RS_2 + RING_AR_3_NODES) * 1e-6 + GiB / NVL_Bps + 2 * 2 / 3 * (GiB / 2) / NET_Bps),
    # One pipeline paced by its slowest stage. Every GPU sends S into the NVSwitches and
    # receives S, a head S/p more each way (1.5 S over 18 x 20.6 GB/s); the reduction engine,
    # 0.85 x 8 GPUs' NVLink, takes (p + 1) S = 3 S; each NIC carries S/p = S/2 through SHARP,
    # the slowest. One latency: NCCL's NVLS across nodes.
    "nvls_sharp 3x2": ("nvls_sharp", 3, [0, 1, 8, 9, 16, 17],
                       NVLS_ACROSS_NODES * 1e-6 + (GiB / 2) / NET_Bps),
    # p = 8: the engine, taking 9 S, binds (9 / (0.85 x 8 x 370.8 GB/s) per byte, beside
    # 1.125 / 370.8 GB/s on a head's links and 1 / (8 x 48 GB/s) through the NICs).
    "nvls_sharp 3x8": ("nvls_sharp", 3, list(range(24)),
                       NVLS_ACROSS_NODES * 1e-6 + 9 * GiB / (0.85 * 8 * NVL_Bps)),
    # One GPU per domain, S once up and down the aggregation tree.
    "sharp 4x1": ("sharp", 4, [0, 8, 16, 24], COLLNET_ONE_PER_NODE * 1e-6 + GiB / NET_Bps),
    # 8 channels, each two trees of S/16 over 4 domains: the busiest domain has 4 tree edges
    # in both trees together (vertices 1 and 2 of NCCL's trees over 4), each S/16 through its
    # rail NIC; the chains inside a domain (7 edges x 4 directions x S/16 per GPU over NVLink)
    # are faster. Tree latency: 8.4 + 2 ((8 - 1) 4.0 + log2(4) 14).
    "tree 4x8": ("tree", 4, list(range(32)),
                 (8.4 + 2 * (7 * 4.0 + 2 * 14)) * 1e-6 + 4 * GiB / 16 / NET_Bps),
}


def test_nvls_sharp_shares_a_nic_with_other_traffic_by_bytes():
    """A second tenant's 1 GiB from GPU 0 to GPU 8 crosses GPU 0's NIC, which carries the
    collective's S/8 of rail 0 through SHARP. The NIC splits by bytes, 24 GB/s each, and paces
    the pipeline (8 x 24 GB/s beside the NVLS engine's 274). Counted in bytes of S, the
    collective took one ninth of that NIC (its coefficient 1/8 beside the tenant's 1): 25 ms
    where this is 5.6 ms."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    sc = fs.Scenario(fabric)
    sc.add_collective("all_reduce", range(32), GiB, algorithm="nvls_sharp")
    sc.add_flow(0, 8, GiB, tag="tenant")
    row = sc.run().collectives.to_pylist()[0]
    assert duration(row) == pytest.approx(NVLS_ACROSS_NODES * 1e-6 + GiB / 8 / (NET_Bps / 2), rel=1e-9)


def test_sharp_trees_climb_to_one_root_switch_under_ecmp():
    """Four ranks per HGX server, on other rails from server to server, so every rail's SHARP
    tree spans leaves. The Aggregation Manager builds a tree as one root switch and one link
    from each switch toward it, and a job's trees take different roots: every scale-out link
    carries one tree's S/4 or nothing, and the run is the NIC-bound pipeline of the closed
    form. Hashed edge by edge as ECMP hashes connections, trees shared uplinks: 11.2 ms
    where this is 5.6."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2", routing="ecmp")
    ranks = [8 * d + (4 * d + j) % 8 for d in range(16) for j in range(4)]
    assert_one_tree_per_scale_out_link(fabric, ranks, GiB / 4)


def assert_one_tree_per_scale_out_link(fabric, ranks, tree_bytes):
    """An NVLS+SHARP all-reduce of 1 GiB over ``ranks`` runs in its closed-form time, and every
    scale-out link it uses carries one tree's ``tree_bytes``."""
    res, row = one(fabric, "all_reduce", ranks, GiB, algorithm="nvls_sharp")
    assert duration(row) == pytest.approx(row["analytical_s"], rel=1e-9)
    link_Bps = fabric.structure["scale_out"]["link_Bps"]
    links = res.links.to_pylist()
    assert {l["bytes_carried"] for l in links if l["capacity_Bps"] == link_Bps and l["bytes_carried"]} == {tree_bytes}


def test_sharp_trees_keep_their_roots_when_a_link_they_do_not_use_fails():
    """8 HGX H100 on 16-port SHARP switches (8 leaves, 4 spines, 2 links from each leaf to
    each), 4 ranks per server on rails rotated from server to server, under ECMP: the four
    trees take consecutive up ports of every leaf and leave the others idle. One idle up
    port of leaf 0 down changes none of them. Counted among the live ports only, leaf 0's
    trees moved one port along, onto spines whose links to the other leaves another tree
    already used: 11.2 ms where this is 5.6."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=8, scale_out="test-coll-ib16", routing="ecmp")
    ranks = [8 * d + (d + j) % 8 for d in range(8) for j in range(4)]
    res, row = one(fabric, "all_reduce", ranks, GiB, algorithm="nvls_sharp")
    assert duration(row) == pytest.approx(row["analytical_s"], rel=1e-9)
    links = res.links.to_pylist()
    used = {l["link_id"] for l in links if l["bytes_carried"] > 0}
    ends = fabric.links.to_pydict()
    names = zip(fabric.names_of(ends["src"]), fabric.names_of(ends["dst"]))
    leaf0_up = [i for i, (a, b) in enumerate(names) if a == "leaf0" and b.startswith("spine")]
    idle = [i for i in leaf0_up if i not in used]
    assert len(leaf0_up) == 8 and idle
    _, faulty = one(fabric.fail(links=idle[:1]), "all_reduce", ranks, GiB, algorithm="nvls_sharp")
    assert duration(faulty) == pytest.approx(duration(row), rel=1e-12)


def test_sharp_trees_beyond_a_leaf_s_up_ports_take_other_cores():
    """8 HGX H100 on 8-port SHARP switches in 3 tiers (4 up ports per leaf and per spine,
    2 cores per group), all 8 ranks per server on rails rotated from server to server, under
    ECMP: 8 trees, two to each leaf slot (group). Above the leaf a tree's root is root / 4,
    so the two go on to different cores and every scale-out link carries one tree, as
    adaptive routing's spread does: the NVLink-bound closed form. With root % 4 at the spine
    as at the leaf, trees t and t + 4 took the same core through the same links wherever
    both crossed pods: 5.6 ms where this is 3.9."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=8, scale_out="test-coll-ib8", tiers=3, routing="ecmp")
    ranks = [8 * d + (d + j) % 8 for d in range(8) for j in range(8)]
    assert_one_tree_per_scale_out_link(fabric, ranks, GiB / 8)


def test_nvls_uses_every_nvswitch_chip_whatever_the_domain_routing():
    """NVLS memory is striped over all the NVSwitch chips, so hashing each GPU's edge onto one
    chip (scale-up ECMP) does not apply to it: it took 4.2 times the sprayed run."""
    times = []
    for routing in (None, {"scale_up": "ecmp"}):
        _, row = one(fs.cluster(domain="hgx-h100", n_domains=1), "all_reduce", range(8), GiB,
                     algorithm="nvls", routing=routing)
        times.append(duration(row))
    assert times[1] == pytest.approx(times[0], rel=1e-12)


@pytest.mark.parametrize("op, ranks, algo", [("all_reduce", range(32), "halving_doubling"),
                                             ("send_recv", [0, 8, 16, 24], "direct")])
def test_point_to_point_collectives_stripe_over_a_multi_plane_nic_under_ecmp(op, ranks, algo):
    """A CX-8 in two planes: each transfer stands for NCCL channels over both ports, as a ring
    edge does, so ECMP gives the analytical (and the adaptive) time. Hashed as one connection
    onto one plane, halving-doubling took 35.0 ms where this is 26.6, and send/recv, one
    400 Gb/s plane short of the 64 GB/s host link, 22.4 where this is 16.8."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-x800", nic="cx8", planes=2,
                        routing="ecmp")
    _, row = one(fabric, op, ranks, GiB, algorithm=algo)
    assert duration(row) == pytest.approx(row["analytical_s"], rel=1e-9)


@pytest.mark.parametrize("case", CLOSED_FORMS)
def test_multi_domain_all_reduce_is_the_hand_derived_closed_form(case):
    algo, n_domains, ranks, want = CLOSED_FORMS[case]
    fabric = fs.cluster(domain="hgx-h100", n_domains=n_domains, scale_out="quantum-2")
    _, row = one(fabric, "all_reduce", ranks, GiB, algorithm=algo)
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("algo, nic_bytes", [
    ("hierarchical", 2 * 2 / 3 * GiB / 2),  # the ring all-reduce of S/2 over 3 domains
    ("nvls_sharp", GiB / 2),                # SHARP: S/2 once
])
def test_multi_domain_all_reduce_sends_s_over_p_through_each_nic(algo, nic_bytes):
    """GPU 0's link towards its NIC, each way, carries only the scale-out phase, whose size is
    S/p (p = 2 ranks per domain)."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=3, scale_out="quantum-2")
    res, _ = one(fabric, "all_reduce", [0, 1, 8, 9, 16, 17], GiB, algorithm=algo)
    nic_side = [l for l in res.links.to_pylist() if 0 in (l["src"], l["dst"]) and l["capacity_Bps"] != 20.6e9]
    assert len(nic_side) == 2
    for link in nic_side:
        assert link["bytes_carried"] == pytest.approx(nic_bytes, rel=1e-12)


@pytest.mark.parametrize("routing", ["adaptive", "ecmp"])
def test_a_nic_split_over_planes_counts_each_plane_once(routing):
    """CX-8 on Spectrum-4 Ethernet runs 800 Gb/s as 2 planes of 400GbE: a GPU reaches the
    scale-out fabric at 2 x 50 GB/s x the Ethernet efficiency, not twice that (the view
    multiplied the per-plane links, already summed over the planes, by the planes again, and
    the PCIe cap hid it at 128 GB/s). A ring of one GPU per domain uses both planes: sprayed,
    or under ECMP striped over them as NCCL stripes its channels over the NIC's ports (each
    edge hashed onto one plane took twice as long). NCCL's Simple ring all-reduce over 2
    nodes of one GPU: 1.4 (8.4 + 2 x 14) us."""
    fabric = fs.cluster(domain="gb300-nvl72", n_domains=2, scale_out="sn5600")
    assert fabric.structure["scale_out"]["planes"] == 2
    net_Bps = 2 * 400e9 / 8 * catalog.part("ethernet").value
    want = 1.4 * (8.4 + 2 * 14) * 1e-6 + GiB / net_Bps
    _, row = one(fabric, "all_reduce", [0, 72], GiB, algorithm="ring", routing=routing)
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["contention_s"] == pytest.approx(0.0, abs=1e-9 * want)


def _nic_uplinks(fabric, gpu):
    """GPU `gpu`'s NIC's link up into each scale-out plane."""
    src = fabric.links["src"].to_numpy()
    nic = fabric.n_gpus + gpu
    return [next(l for l in fabric._core.links_of_plane(p) if src[l] == nic) for p in range(2)]


def test_an_ecmp_ring_edge_takes_half_of_each_plane_and_the_surviving_plane_after_a_fault():
    """Under ECMP each edge of a ring over 2 nodes of one GPU puts half its load on each
    plane's uplink of the sending NIC (a plain flow is one connection, on one plane). With
    rank 0's plane-1 uplink down the edge takes plane 0 alone, as a sprayed flow does, and
    the ring runs at one plane's rate; failed mid-run, the rest goes at that rate."""
    fabric = fs.cluster(domain="gb300-nvl72", n_domains=2, scale_out="sn5600")
    plane_Bps = 400e9 / 8 * catalog.part("ethernet").value
    alpha_s = 1.4 * (8.4 + 2 * 14) * 1e-6
    up = _nic_uplinks(fabric, 0)

    def usage_on_uplinks(fab, routing, add):
        sc = fs.Scenario(fab, routing=routing)
        flow = add(sc)
        constraints, coefficients = sc.usage_of(flow)
        on = dict(zip(constraints, coefficients))
        return [on.get(link, 0.0) for link in up]

    def ring(sc):
        last = sc.add_collective("all_reduce", [0, 72], GiB, algorithm="ring")
        # The ring's one coupled flow, between its start and end barriers.
        return next(a for a in range(last + 1) if sc.usage_of(a)[0])

    assert usage_on_uplinks(fabric, "ecmp", ring) == [0.5, 0.5]
    assert sorted(usage_on_uplinks(fabric, "ecmp", lambda sc: sc.add_flow(0, 72, GiB))) == [0.0, 1.0]
    broken = fabric.fail(links=[up[1]])
    sprayed = usage_on_uplinks(broken, "adaptive", lambda sc: sc.add_flow(0, 72, GiB))
    assert usage_on_uplinks(broken, "ecmp", ring) == sprayed == [1.0, 0.0]
    _, row = one(broken, "all_reduce", [0, 72], GiB, algorithm="ring", routing="ecmp")
    assert duration(row) == pytest.approx(alpha_s + GiB / plane_Bps, rel=1e-9)
    # Down at t_fault mid-transfer: half the rate from then on.
    sc = fs.Scenario(fabric, routing="ecmp")
    sc.add_collective("all_reduce", [0, 72], GiB, algorithm="ring")
    t_fault = alpha_s + 0.25 * GiB / (2 * plane_Bps)
    sc.add_fault(at_s=t_fault, links=[up[1]])
    row = sc.run().collectives.to_pylist()[0]
    assert duration(row) == pytest.approx(t_fault + 0.75 * GiB / plane_Bps, rel=1e-9)


# ---- tree and hierarchical on domains holding different numbers of ranks ----------------------
# NCCL runs both on any layout: each node's tree chain is its own ranks, the channels (and the
# CollNet/NVLS heads) are the fewest any node has, and its latency takes the integer
# nRanks/nNodes as the ranks per node. Alphas below are NCCL's Simple latencies in us: tree
# 8.4 + 2 ((n // nodes - 1) 4.0 + log2(nodes) 14); ring reduce-scatter on k GPUs of one node
# 8.4 + (k - 1) 3.4; ring all-reduce over 2 nodes of one GPU each 1.4 (8.4 + 2 x 14) (plateau).
TWO_PLUS_ONE = [0, 1, 8]                      # 2 GPUs in domain 0, 1 in domain 1: m = 1
THREE_PLUS_FIVE = [0, 1, 2, 8, 9, 10, 11, 12]  # m = 3 channels / rails
RING_AR_2_NODES = 1.4 * (8.4 + 2 * 14)
UNEVEN_CLOSED_FORMS = {
    # One channel, two trees of S/2 over 2 domains: each head has one tree neighbour per tree,
    # so its NIC carries S/2 twice each way. Domain 0's chain (GPU 0 - GPU 1) carries S each
    # way over NVLink, faster. n // nodes = 1: no intra-node latency step.
    "tree 2+1": ("tree", TWO_PLUS_ONE, (8.4 + 2 * 14) * 1e-6 + GiB / NET_Bps),
    # Three channels of S/6 per tree; each head's NIC S/3 each way. The longest chain load,
    # in the domain of 5 (GPU 11 ends no chain: 6 edges x S/6 x 2 trees = 2S over NVLink),
    # is faster. n // nodes = 4: 3 intra steps.
    "tree 3+5": ("tree", THREE_PLUS_FIVE, (8.4 + 2 * (3 * 4.0 + 14)) * 1e-6 + GiB / 3 / NET_Bps),
    # m = 1: GPU 1 reduces S onto GPU 0 over NVLink, rail 0 (GPUs 0 and 8) all-reduces S
    # (2 (2-1)/2 S through each NIC), GPU 0 gives S back to GPU 1.
    "hierarchical 2+1": ("hierarchical", TWO_PLUS_ONE,
                         (2 * RING_RS_2 + RING_AR_2_NODES) * 1e-6 + 2 * GiB / NVL_Bps + GiB / NET_Bps),
    # m = 3: the domain of 5 reduce-scatters onto GPUs 8-10, its ring edges leaving GPUs 11
    # and 12 carrying all of S (domain 0's carry 2S/3); 3 rails all-reduce S/3 each
    # (S/3 through each NIC); the all-gather mirrors the reduce-scatter. The reduce-scatter
    # latency is the largest domain's: 8.4 + 4 x 3.4.
    "hierarchical 3+5": ("hierarchical", THREE_PLUS_FIVE,
                         (2 * (8.4 + 4 * 3.4) + RING_AR_2_NODES) * 1e-6 + 2 * GiB / NVL_Bps + GiB / 3 / NET_Bps),
    # m = 3 heads per domain (NCCL's minHeadNum), one pipeline: a head's links carry 4S/3
    # each way (3.9 ms per GiB at 370.8 GB/s), the engine of the domain of 5 takes 6 S
    # (2.6 ms), and 3 rails of S/3 through SHARP bind (7.5 ms).
    "nvls_sharp 3+5": ("nvls_sharp", THREE_PLUS_FIVE,
                       NVLS_ACROSS_NODES * 1e-6 + GiB / 3 / NET_Bps),
    # 8 + 3: the domain of 8's engine takes 9 S (3.8 ms), still below the 3 rails.
    "nvls_sharp 8+3": ("nvls_sharp", list(range(11)),
                       NVLS_ACROSS_NODES * 1e-6 + GiB / 3 / NET_Bps),
}


@pytest.mark.parametrize("case", UNEVEN_CLOSED_FORMS)
def test_tree_and_hierarchical_on_uneven_domains_are_the_hand_derived_closed_form(case):
    algo, ranks, want = UNEVEN_CLOSED_FORMS[case]
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    res, row = one(fabric, "all_reduce", ranks, GiB, algorithm=algo, protocol="simple")
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)
    assert fs.estimate(fabric, "all_reduce", GiB, ranks, algorithm=algo, protocol="simple").time_s == \
        pytest.approx(want, rel=1e-9)
    assert res.links["peak_utilization"].to_numpy().max() <= 1 + 1e-9


def gpu_bytes(res, gpu, nvlink_link_Bps=20.6e9):
    """Bytes GPU ``gpu`` sent over its NVLinks and towards its NIC (the links table lists
    the links that carried bytes)."""
    out = [l for l in res.links.to_pylist() if l["src"] == gpu]
    nvl = sum(l["bytes_carried"] for l in out if l["capacity_Bps"] == nvlink_link_Bps)
    nic = [l["bytes_carried"] for l in out if l["capacity_Bps"] != nvlink_link_Bps]
    assert len(nic) <= 1
    return nvl, sum(nic)


@pytest.mark.parametrize("algo, nvlink_sent", [
    # Tree: 3 channels, the chain of channel c rotated by c: 8-9-10-11-12, 9-10-11-12-8,
    # 10-11-12-8-9. A GPU sends S/6 per tree (x 2 trees) up and down each chain edge, 2 per
    # channel less one where it heads or ends the chain: GPUs 8 and 9 head one chain and end
    # another (4 edges: 4S/3), GPU 10 heads one (5: 5S/3), GPU 11 neither (6: 2S), GPU 12
    # ends one (5: 5S/3); in the domain of 3 every GPU heads one chain and ends another.
    ("tree", {0: 4 / 3, 1: 4 / 3, 2: 4 / 3, 8: 4 / 3, 9: 4 / 3, 10: 5 / 3, 11: 2, 12: 5 / 3}),
    # Hierarchical: reduce-scatter onto GPUs 8-10 then all-gather from them: an edge leaving
    # (reduce-scatter) or entering (all-gather) a head carries 2S/3, any other S. GPU 10's
    # edge leads to GPU 11 (2/3 + 1), GPU 11's to 12 (1 + 1), GPU 12's back to head 8 (1 + 2/3).
    ("hierarchical", {0: 4 / 3, 1: 4 / 3, 2: 4 / 3, 8: 4 / 3, 9: 4 / 3, 10: 5 / 3, 11: 2, 12: 5 / 3}),
    # NVLS+SHARP: every GPU sends S into the switches; a head also multicasts its S/3.
    ("nvls_sharp", {0: 4 / 3, 1: 4 / 3, 2: 4 / 3, 8: 4 / 3, 9: 4 / 3, 10: 4 / 3, 11: 1, 12: 1}),
])
def test_uneven_domains_load_each_gpu_link_as_derived(algo, nvlink_sent):
    """3 + 5 ranks: only the 3 heads of each domain (rails 0-2) use their NICs, each S/3 each
    way (tree: 2 trees x S/6 to one tree neighbour; hierarchical: 2 (2-1)/2 x S/3; SHARP:
    S/3 once)."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    res, _ = one(fabric, "all_reduce", THREE_PLUS_FIVE, GiB, algorithm=algo, protocol="simple")
    for gpu, share in nvlink_sent.items():
        nvl, nic = gpu_bytes(res, gpu)
        assert nvl == pytest.approx(share * GiB, rel=1e-12), gpu
        assert nic == pytest.approx(GiB / 3 if gpu % 8 < 3 else 0.0, rel=1e-12, abs=1e-6), gpu


def test_nvls_sharp_is_one_flow_loading_each_gpus_own_links_with_what_it_sends_and_receives():
    """NVLS+SHARP on 3 + 5 ranks, 3 heads per domain, one pipelined flow: every GPU sends S up
    into the NVSwitches and receives S; a head also takes back its S/3 and multicasts it, 4/3
    each way. Each rank's legs run toward or from a peer (the first rank) without loading the
    peer's links: a GPU's links carry only its own share."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")

    def usage(sc, fid):
        links, coefs = sc.usage_of(fid)
        return dict(zip(links, coefs))

    probe = fs.Scenario(fabric)

    def own_links(gpu):
        a, b = [g for g in THREE_PLUS_FIVE if g // 8 == gpu // 8 and g != gpu][:2]
        to = {(x, y): set(usage(probe, probe.add_flow(x, y, 1.0))) for x, y in [(gpu, a), (gpu, b), (a, gpu), (b, gpu)]}
        (up,), (down,) = to[gpu, a] & to[gpu, b], to[a, gpu] & to[b, gpu]
        return up, down

    sc = fs.Scenario(fabric)
    sc.add_collective("all_reduce", THREE_PLUS_FIVE, GiB, algorithm="nvls_sharp")
    flows = [usage(sc, f) for f in range(sc.n_activities) if sc.usage_of(f)[0]]
    assert len(flows) == 1
    for gpu in THREE_PLUS_FIVE:
        up, down = own_links(gpu)
        share = 4.0 if gpu % 8 < 3 else 3.0  # per byte of S/3, the flow's unit
        assert (flows[0][up], flows[0][down]) == pytest.approx((share, share), rel=1e-12), gpu


@pytest.mark.parametrize("ranks, chain_edges", [
    ([0, 1, 2, 8, 9, 10], 4),          # k = m = 3: every GPU heads one chain, ends another: 2m - 2
    ([0, 1, 2, 8, 9, 10, 11], 5),      # k = m + 1: GPUs 10 and 11 each end only one: 2m - 1
    (THREE_PLUS_FIVE, 6),              # k = m + 2: GPU 11 ends none: 2m
])
def test_tree_on_slow_nvlink_is_paced_by_the_longest_chain(ranks, chain_edges):
    """NVLink at 5% (18 x 1.25 GB/s = 22.5 GB/s per GPU) is slower than the NIC: the GPU with
    the most chain edges over the 3 channels paces the tree, each edge carrying S/6 per tree,
    2 trees: chain_edges x S/3. Latency: n // 2 nodes = 3, 3, 4 ranks per node."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2", nvlink_efficiency=0.05)
    local = len(ranks) // 2 - 1
    want = (8.4 + 2 * (local * 4.0 + 14)) * 1e-6 + chain_edges * GiB / 3 / 22.5e9
    res, row = one(fabric, "all_reduce", ranks, GiB, algorithm="tree", protocol="simple")
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)
    busiest = max(gpu_bytes(res, g, 1.25e9)[0] for g in ranks)
    assert busiest == pytest.approx(chain_edges * GiB / 3, rel=1e-12)
    assert res.links["peak_utilization"].to_numpy().max() <= 1 + 1e-9


def test_auto_takes_the_tree_on_uneven_domains_where_nccl_does():
    """[0, 1, 8] at 1 GiB. NCCL's graphs: the 1-GPU node's ring is 1 channel at 48 GB/s,
    duplicated to 2 x 24; its tree (2 channels) raises bwIntra to 48 (2 nodes); the 2-GPU
    node finds more, and the communicator keeps the least (init.cc). Tree Simple busBw
    min(2 x 48 x 0.92, 2 x 41.4) = 82.8 GB/s, algBw half: 36.4 us + S / 41.4 GB/s = 25.97 ms.
    Ring Simple busBw 2 x 24, algBw x 3/4 = 36 GB/s: 60.48 us + S / 36 GB/s = 29.89 ms. So
    NCCL runs the tree (CollNet Chain, faster still, is not modelled on this layout) and auto
    does too; its time is the flow construction's, 36.4 us + S / 48 GB/s."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    from fabricsim import nccl_model
    from fabricsim.collectives import _comm, _shape

    times = nccl_model.times_s("all_reduce", float(GiB), _shape(_comm(fabric, TWO_PLUS_ONE), 3, 2))
    assert times[("tree", "simple")] == pytest.approx(36.4e-6 + GiB / 41.4e9, rel=1e-9)
    assert times[("ring", "simple")] == pytest.approx(60.48e-6 + GiB / 36e9, rel=1e-9)
    _, row = one(fabric, "all_reduce", TWO_PLUS_ONE, GiB)
    assert (row["algorithm"], row["protocol"]) == ("tree", "simple")
    assert duration(row) == pytest.approx(36.4e-6 + GiB / NET_Bps, rel=1e-9)


def test_nccl_tests_sweeps_tree_and_hierarchical_on_uneven_ranks():
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    for algo in ("tree", "hierarchical"):
        _, ranks, want = UNEVEN_CLOSED_FORMS[f"{algo} 3+5"]
        table = fs.nccl_tests(fabric, "all_reduce", "1G", "1G", algorithm=algo, protocol="simple",
                              ranks=THREE_PLUS_FIVE)
        assert table["algorithm"].to_pylist() == [algo]
        assert table["time_s"].to_pylist()[0] == pytest.approx(want, rel=1e-9)


def test_hierarchical_needs_a_domain_with_two_ranks_and_nvls_sharp_two_in_every_domain():
    """NCCL's NVLS needs >= 2 GPUs on every node (its graph search finds none on one GPU),
    so a domain of one rank leaves NVLS+SHARP out, from auto as from a request."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    with pytest.raises(InvalidArgumentError, match="hierarchical needs ranks in several domains, one of them "
                                                   "holding >= 2"):
        fs.estimate(fabric, "all_reduce", GiB, [0, 8], algorithm="hierarchical")
    with pytest.raises(InvalidArgumentError, match="NVLS\\+SHARP needs .* >= 2 ranks in each of several domains"):
        fs.estimate(fabric, "all_reduce", GiB, TWO_PLUS_ONE, algorithm="nvls_sharp")


def test_sharp_on_a_host_clos_without_nvswitch_runs_as_collnet_chain():
    """16 hosts on a Quantum-2 Clos (CX7, 400 Gb/s at 96%: 48 GB/s). NCCL enables CollNet
    Direct only with NVSwitch, so SHARP runs as CollNet Chain: latency with one rank per node
    = the NET Tree Simple step, 14 us (base 0); every host link carries S up and S down.
    NCCL's model prefers it at 1 GiB (alg bw 0.5 x 2 x 48 GB/s against the ring's
    48 x 16/30), so auto takes it too, as applicable() lists it."""
    fabric = fs.clos(n_hosts=16, switch="quantum-2", nic="cx7")
    want = 14e-6 + GiB / (400e9 / 8 * 0.96)
    res, row = one(fabric, "all_reduce", range(16), GiB, algorithm="sharp")
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)
    host0 = [l for l in res.links.to_pylist() if 0 in (l["src"], l["dst"])]
    assert len(host0) == 2 and all(l["bytes_carried"] == pytest.approx(GiB, rel=1e-12) for l in host0)
    assert fs.estimate(fabric, "all_reduce", GiB).algorithm == "sharp"


def test_collectives_on_a_pcie_server_run_at_each_gpus_pcie_link():
    """pcie_server has no NVLink domain and no scale-out Clos: its GPUs talk over the PCIe
    tree, measured as on a plain topology (each GPU's injection, here its Gen5 x16 link at
    64 GB/s). They used to meet a zero NIC rate: NCCL's model refused 'net_Bps=0' and the
    all-to-all divided by it. The ring 0 -> 1 -> ... -> 7 -> 0 crosses each PCIe link and
    the socket link at most once each way, so it runs at 64 GB/s; alpha: NCCL's Simple ring
    all-reduce over 8 one-GPU nodes, 1.4 (8.4 + 14 x 14) us."""
    fabric = fs.pcie_server()
    want = 1.4 * (8.4 + 14 * 14) * 1e-6 + 2 * 7 / 8 * GiB / 64e9
    _, row = one(fabric, "all_reduce", range(8), GiB, algorithm="ring")
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)
    assert duration(row) == pytest.approx(want, rel=1e-9)
    # Each GPU sends 7/8 S through its own PCIe link (the shared uplinks are contention),
    # after the p2p alpha and the wire latency from GPU 0 to GPU 7: five 1 us links (GPU,
    # PCIe switch, CPU, the other CPU, PCIe switch, GPU).
    t = fs.estimate(fabric, "all_to_all", GiB).time_s
    assert t == pytest.approx(8.4e-6 + 14e-6 + 5e-6 + 7 / 8 * GiB / 64e9, rel=1e-9)
    with pytest.raises(UnknownNodeError, match="rank 9 is not a GPU of this fabric"):
        fs.estimate(fabric, "all_reduce", GiB, [0, 9])


# Quantum-2 adds 150 ns per switch crossed; NICs and PCIe add none (catalog). A route between
# GPUs of two domains crosses 1 switch on a shared leaf, 3 through a spine, 5 through a core.
Q2_SWITCH_S = 150e-9
P2P_NET_ALPHA_S = (8.4 + 14.0) * 1e-6  # NCCL's Simple base plus one NET step


@pytest.mark.parametrize("n_domains, tiers, ranks, switches", [
    (4, 2, [0, 8], 1),          # rail 0 of two domains: one leaf
    (4, 2, [0, 9], 1),          # rails 0 and 1 of 4 domains: their 32 NICs share one leaf
    (32, 2, [0, 9], 3),         # of a full SU, a leaf per rail: leaf, spine, leaf
    (256, 3, [0, 8], 1),        # the fabric's farthest pair would cross a core
    (256, 3, [0, 8 * 255], 5),  # first and last domain: two pods, through a core
])
def test_direct_pays_the_wire_latency_of_its_own_farthest_pair(n_domains, tiers, ranks, switches):
    fabric = fs.cluster(domain="hgx-h100", n_domains=n_domains, scale_out="quantum-2", tiers=tiers)
    size = 64 << 10
    _, row = one(fabric, "all_to_all", ranks, size)
    want = P2P_NET_ALPHA_S + switches * Q2_SWITCH_S + size / 2 / NET_Bps
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)


def test_halving_doubling_steps_pay_their_communicators_wire_latency():
    """Rail 0 of 4 domains, all on one leaf: 4 steps (S/2, S/4, S/4, S/2), each the NET p2p
    alpha and one switch."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2", tiers=2)
    _, row = one(fabric, "all_reduce", [0, 8, 16, 24], GiB, algorithm="halving_doubling")
    want = 4 * (P2P_NET_ALPHA_S + Q2_SWITCH_S) + 1.5 * GiB / NET_Bps
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("n_domains, tiers", [(4, 2), (32, 2), (256, 3)])
def test_every_pair_of_a_communicator_has_its_latency_class_wire_latency(n_domains, tiers):
    """Direct and halving-doubling charge each transfer the wire latency of its pair's class
    (one domain, one leaf, a spine, a core), measured on one pair of the class: every pair of
    the class has it, the network classes' latencies ascend, and the per-rank peer counts are
    the classes' pairs counted."""
    from fabricsim.collectives import _CLASSES, _comm

    fabric = fs.cluster(domain="hgx-h100", n_domains=n_domains, scale_out="quantum-2", tiers=tiers)
    rng = np.random.default_rng(7)
    n = 8 * n_domains
    subsets = [[0, 1, 8], [9, 8, 1], [3, 8 + 3], [5, 6, 8 * (n_domains - 1) + 5], [0, 1, 2]]
    subsets += [rng.choice(n, min(k, n), replace=False) for k in (2, 3, 5, 9, 40) for _ in range(5)]
    seen = set()
    for ranks in subsets:
        comm = _comm(fabric, ranks)
        i, j = np.nonzero(~np.eye(comm.n, dtype=bool))
        classes = comm.pair_classes(i, j)
        routes = [fabric._core.path_latency_s(int(a), int(b)) for a, b in zip(comm.ranks[i], comm.ranks[j])]
        assert comm.class_latency_s[classes].tolist() == routes, ranks
        present = np.unique(classes)
        assert np.all(np.diff(comm.class_latency_s[present[present > 0]]) > 0), ranks
        counts = np.bincount(i * len(_CLASSES) + classes, minlength=comm.n * len(_CLASSES))
        assert comm.peer_counts.tolist() == counts.reshape(comm.n, -1).tolist(), ranks
        seen.update(present.tolist())
    assert seen == ({0, 1, 2, 3} if tiers == 3 else {0, 1, 2} if n_domains > 4 else {0, 1})


NVSWITCH_HOP_S = 0.6e-6  # GPU, NVSwitch, GPU (catalog)
P2P_NVLINK_ALPHA_S = (8.4 + 3.4) * 1e-6  # NCCL's Simple base plus one NVLink step


@pytest.mark.parametrize("size, last", [(1 << 10, "nvlink"), (32 << 10, "spine"), (GiB, "leaf")])
def test_all_to_all_transfers_start_after_their_own_wire_latency(size, last):
    """16 HGX H100s on 4 Quantum-2 leaves of two rails each: every rank has 7 NVLink peers (0.6
    us), 30 on its own leaf (one switch, 0.15 us) and 90 through a spine (three, 0.45 us), S/128
    to each. Each transfer starts after its own route's latency, so the NIC sends to its leaf
    peers before its spine peers start. 1 KiB: the NVLink hop is the last to end. 32 KiB: the
    30 leaf transfers (7.7 KB) are done 0.16 us after they start, before the spine's start
    0.3 us later, so the 90 spine transfers end it. 1 GiB: the NIC is busy from the leaf's
    start on with all 120."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2")
    peer_bytes = size / 128
    want = P2P_NET_ALPHA_S + {
        "nvlink": NVSWITCH_HOP_S + 7 * peer_bytes / NVL_Bps,
        "spine": 3 * Q2_SWITCH_S + 90 * peer_bytes / NET_Bps,
        "leaf": Q2_SWITCH_S + 120 * peer_bytes / NET_Bps,
    }[last]
    _, row = one(fabric, "all_to_all", range(128), size)
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)


def test_halving_doubling_steps_pay_their_own_pairs_wire_latency():
    """Ranks 0, 2 (rails 0 and 2, on different leaves) of domain 0 and 8, 10 of domain 1: the
    network steps pair rails with themselves (one leaf switch, though 0 and 10 are a spine
    apart), the NVLink steps pay one NVSwitch hop and the NVLink p2p alpha. Halving: S/2 over
    the network, S/4 over NVLink; doubling the reverse."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2")
    size = 1 << 20
    _, row = one(fabric, "all_reduce", [0, 2, 8, 10], size, algorithm="halving_doubling")
    want = (2 * (P2P_NET_ALPHA_S + Q2_SWITCH_S + size / 2 / NET_Bps)
            + 2 * (P2P_NVLINK_ALPHA_S + NVSWITCH_HOP_S + size / 4 / NVL_Bps))
    assert duration(row) == pytest.approx(want, rel=1e-9)
    assert row["analytical_s"] == pytest.approx(want, rel=1e-9)


_IDLE_FABRICS = {
    "h100x4": lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"),
    "h100x16": lambda: fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2"),
    "h100x64-3tier": lambda: fs.cluster(domain="hgx-h100", n_domains=64, scale_out="quantum-2", tiers=3),
    "nvl72x2": lambda: fs.cluster(domain="gb200-nvl72", n_domains=2, scale_out="quantum-x800"),
}
IDLE_EXACT = [
    # (fabric, op, ranks, algorithm): every rank's ports carry the same bytes per latency class.
    ("h100x4", "all_to_all", range(32), "direct"),  # one leaf: the NIC starts before NVLink
    ("h100x16", "all_to_all", range(128), "direct"),  # leaf and spine peers
    ("h100x16", "all_reduce", range(128), "halving_doubling"),
    ("h100x16", "reduce_scatter", range(128), "halving_doubling"),
    ("h100x16", "all_gather", range(128), "halving_doubling"),
    ("h100x64-3tier", "all_to_all", range(0, 512, 8), "direct"),  # rail 0: leaf, spine, core
    ("h100x64-3tier", "all_reduce", range(0, 512, 4), "halving_doubling"),
    ("nvl72x2", "all_to_all", range(144), "direct"),
    ("nvl72x2", "all_reduce", range(144), "halving_doubling"),  # a fold; steps mixing NVLink and NIC
    ("nvl72x2", "send_recv", range(144), "direct"),
]


@pytest.fixture(scope="module")
def idle_fabrics():
    return {name: build() for name, build in _IDLE_FABRICS.items()}


@pytest.mark.parametrize("case", IDLE_EXACT, ids=lambda c: f"{c[0]}-{c[1]}-{c[3]}")
@pytest.mark.parametrize("size", [1 << 10, 16 << 10, 64 << 10, 1 << 20, 64 << 20, GiB])
def test_direct_and_halving_doubling_estimates_are_exact_on_an_idle_fabric(idle_fabrics, case, size):
    """Where each class of a rank's transfers starts after its own wire latency, at every size
    (the farthest pair's latency for all of them was up to 2% off below 64 KiB)."""
    name, op, ranks, algo = case
    fabric = idle_fabrics[name]
    _, row = one(fabric, op, ranks, size, algorithm=algo)
    assert duration(row) == pytest.approx(row["analytical_s"], rel=1e-9)
    assert fs.estimate(fabric, op, size, ranks, algorithm=algo).time_s == row["analytical_s"]


@pytest.mark.parametrize("seed", range(3))
def test_all_to_all_over_unlike_ranks_is_bounded_below_by_the_estimate(idle_fabrics, seed):
    """Random ranks of 16 HGX H100s hold different numbers of peers per class: max-min sharing
    can then hold a port below its rate while its transfers wait on busier ports, which the
    estimate (every port busy from its classes' starts) does not count, so it is a lower
    bound, within 0.2% on such subsets (0.12% the most measured, module docs)."""
    fabric = idle_fabrics["h100x16"]
    ranks = np.sort(np.random.default_rng(seed).choice(128, 20, replace=False))
    for size in [1 << 10, 64 << 10, 256 << 10, 1 << 20, 64 << 20]:
        _, row = one(fabric, "all_to_all", ranks, size)
        assert row["analytical_s"] <= duration(row) * (1 + 1e-12)
        assert row["analytical_s"] == pytest.approx(duration(row), rel=2e-3)


# ---- dependencies, results, sweeps -------------------------------------------------------------


def test_collectives_chain_with_flows_and_delays():
    sc = fs.Scenario(fs.hgx_h100())
    compute = sc.add_delay("1ms")
    ar = sc.add_collective("all_reduce", range(8), 64 << 20, after=compute, algorithm="ring", tag="grad")
    later = sc.add_flow(0, 1, 1e6, after=[ar])
    ag = sc.add_collective("all_gather", range(4), 8 << 20, after=[ar])
    res = sc.run()
    rows = res.collectives.to_pylist()
    assert rows[0]["start_s"] == pytest.approx(1e-3)
    assert rows[1]["start_s"] == pytest.approx(rows[0]["finish_s"])
    flow = [f for f in res.flows.to_pylist() if f["flow_id"] == later][0]
    assert flow["ready_s"] == pytest.approx(rows[0]["finish_s"])
    assert [r["collective_id"] for r in rows] == [ar, ag]
    assert res.collectives.column_names == [
        "collective_id", "communicator", "op", "algorithm", "protocol", "n_ranks", "size_bytes", "start_s",
        "finish_s", "algbw_Bps", "busbw_Bps", "analytical_s", "contention_s"]
    assert rows[0]["protocol"] in ("simple", "ll128", "ll")


def test_all_to_all_v_takes_a_size_matrix():
    m = np.zeros((4, 4))
    m[0, 1] = 4e9  # one heavy pair
    res, row = one(fs.hgx_h100(), "all_to_all", [0, 1, 2, 3], None, sizes=m)
    assert row["size_bytes"] == pytest.approx(1e9)  # mean per-rank send buffer
    assert duration(row) == pytest.approx(row["analytical_s"], rel=0.01)
    assert duration(row) == pytest.approx(4e9 / H100_NVLINK_Bps, rel=0.01)


def test_nccl_tests_sweep_and_cli(capsys):
    table = fs.nccl_tests(fs.hgx_h100(), "all_reduce", "8M", "64M", 2, algorithm="ring")
    assert table["size_bytes"].to_pylist() == [8 << 20, 16 << 20, 32 << 20, 64 << 20]
    assert table["count"].to_pylist() == [s // 4 for s in table["size_bytes"].to_pylist()]
    busbw = table["busbw_Bps"].to_numpy()
    assert np.all(np.diff(busbw) > 0)  # latency matters less as messages grow
    assert main(["nccl-tests", "--fabric", "hgx-h100", "--op", "all_reduce", "-b", "8M", "-e", "32M", "-f", "2"]) == 0
    out = capsys.readouterr().out
    rows = [l for l in out.splitlines() if l and not l.startswith("#")]
    assert len(rows) == 3 and rows[0].split()[0] == str(8 << 20)
    assert "# Avg bus bandwidth" in out


def test_summary_bytes_moved_counts_every_edge_of_a_collective():
    """A ring all-reduce of S on 8 GPUs sends 2(n-1)/n S from each rank: 14 S in all, though
    it runs as one flow of 2(n-1)/n S per edge; plain flows count their bytes once, and flows
    added before and between collectives keep their own count."""
    sc = fs.Scenario(fs.hgx_h100())
    first = sc.add_delay("1us")
    sc.add_flow(0, 1, "1MiB")
    sc.add_collective("all_reduce", None, size_bytes="1GiB", algorithm="ring", after=first)
    sc.add_flow(2, 3, "2MiB")
    sc.add_collective("all_gather", [0, 1, 2, 3], size_bytes="64MiB", algorithm="ring")
    res = sc.run()
    # all_gather of S on 4 ranks: each rank sends (n-1)/n S, so 3/4 x 4 = 3 S.
    expected = 14 * 2**30 + 3 * 64 * 2**20 + 3 * 2**20
    assert res.summary.bytes_moved == pytest.approx(expected, rel=1e-12)
    # Each of those bytes crosses two NVLinks (GPU to NVSwitch to GPU).
    assert res.links["bytes_carried"].to_numpy().sum() == pytest.approx(2 * expected, rel=1e-9)


def test_cli_size_flags_follow_nccl_tests(capsys):
    """-b 8MB is 8 MiB in nccl-tests (only the suffix's first letter counts), not 8e6 bytes."""
    assert main(["nccl-tests", "-b", "8MB", "-e", "8MB"]) == 0
    rows = [l for l in capsys.readouterr().out.splitlines() if l and not l.startswith("#")]
    assert [r.split()[0] for r in rows] == [str(8 << 20)]
    with pytest.raises(SystemExit) as exit_info:
        main(["nccl-tests", "-b", "100B"])
    assert exit_info.value.code == 2
    assert "size '100B': expected a number of bytes with an optional K, M, G or T" in capsys.readouterr().err


def test_nccl_tests_runs_the_size_nccl_tests_prints_and_hands_each_row_over_as_it_finishes():
    """all_gather on 8 GPUs swept at 1000 B: 250 floats, 31 per rank, so nccl-tests runs and
    prints 31 x 8 x 4 = 992 B; algbw is that size over the time."""
    seen = []
    table = fs.nccl_tests(fs.hgx_h100(), "all_gather", 1000, 10000, 10, on_row=seen.append, on_start=seen.append)
    assert table["size_bytes"].to_pylist() == [992, 9984]
    assert table["count"].to_pylist() == [31, 312]
    for row in table.to_pylist():
        assert row["algbw_Bps"] * row["time_s"] == pytest.approx(row["size_bytes"], rel=1e-12)
    assert seen == [[992, 9984], *table.to_pylist()]  # the sizes first


def test_nccl_tests_refuses_a_bad_dtype_before_running_anything(monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("ran a size before checking dtype")

    monkeypatch.setattr(fs.Scenario, "run", no_run)
    with pytest.raises(InvalidArgumentError, match="dtype='fp33': expected one of"):
        fs.nccl_tests(fs.hgx_h100(), "all_reduce", "8M", "64M", dtype="fp33")


def test_cli_nccl_tests_prints_rows_as_they_finish_and_stops_on_ctrl_c(monkeypatch, capsys):
    """The header and the first size are out before the second size runs; Ctrl-C during it
    leaves them, says one line on stderr and exits 130. --progress reaches every run."""
    real_run = fs.Scenario.run
    calls = []

    def run(self, **kwargs):
        calls.append(kwargs.get("progress"))
        if len(calls) == 2:
            assert "1048576" in capsys.readouterr().out  # streamed, not held until the end
            raise KeyboardInterrupt
        return real_run(self, **kwargs)

    monkeypatch.setattr(fs.Scenario, "run", run)
    assert main(["nccl-tests", "-b", "1M", "-e", "4M", "--progress"]) == 130
    err = capsys.readouterr().err
    assert err == "fabricsim: interrupted\n"
    assert calls == [True, True]


def test_cli_reports_a_too_large_scenario_without_a_traceback(monkeypatch, capsys):
    import fabricsim.collectives

    def too_large(*args, **kwargs):
        raise fs.ScenarioTooLargeError("5000000000 more flows than fit")

    monkeypatch.setattr(fabricsim.collectives, "nccl_tests", too_large)
    assert main(["nccl-tests", "--op", "all_to_all"]) == 1
    assert capsys.readouterr().err == "fabricsim: error: 5000000000 more flows than fit\n"


# ---- bad input ---------------------------------------------------------------------------------


def test_bad_collectives_are_refused_with_the_value_named():
    sc = fs.Scenario(fs.hgx_h100())
    with pytest.raises(InvalidArgumentError, match="rank 3 appears more than once"):
        sc.add_collective("all_reduce", [1, 3, 3], 1e6)
    with pytest.raises(UnknownNodeError, match="rank 8 is not a GPU"):
        sc.add_collective("all_reduce", [0, 8], 1e6)
    with pytest.raises(InvalidArgumentError, match="op must be one of"):
        sc.add_collective("allreduce", [0, 1], 1e6)
    with pytest.raises(InvalidArgumentError, match="'pat'.*algorithms are ring, tree"):
        sc.add_collective("all_reduce", [0, 1], 1e6, algorithm="pat")
    with pytest.raises(InvalidArgumentError, match="power-of-two"):
        sc.add_collective("all_gather", [0, 1, 2], 1e6, algorithm="halving_doubling")
    with pytest.raises(InvalidArgumentError, match="'tree' cannot run all_reduce.*on >= 2 ranks"):
        sc.add_collective("all_reduce", [5], 1e6, algorithm="tree")
    with pytest.raises(InvalidArgumentError, match="hierarchical needs ranks in several domains"):
        sc.add_collective("all_reduce", [0, 1, 2], 1e6, algorithm="hierarchical")
    with pytest.raises(InvalidArgumentError, match="-1"):
        sc.add_collective("all_reduce", [0, 1], -1.0)
    with pytest.raises(InvalidArgumentError, match="4x4"):
        sc.add_collective("all_to_all", [0, 1, 2, 3], sizes=np.ones((3, 3)))
    assert sc.n_activities == 0  # nothing half-added
    eth = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="sn5600")
    with pytest.raises(InvalidArgumentError, match="SHARP needs InfiniBand"):
        fs.Scenario(eth).add_collective("all_reduce", [0, 8], 1e6, algorithm="sharp")
    hosts = fs.clos(n_hosts=16, switch="test-coll-sw8", nic="cx7")
    with pytest.raises(InvalidArgumentError, match="NVLS needs NVSwitch"):
        fs.Scenario(hosts).add_collective("all_reduce", [0, 1, 2], 1e6, algorithm="nvls")
    split = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
    with pytest.raises(InvalidArgumentError, match="NVLS needs"):
        split.add_collective("all_reduce", [0, 8], 1e6, algorithm="nvls")


def test_a_one_rank_send_recv_is_refused_by_estimate_as_by_a_scenario():
    sc = fs.Scenario(fs.hgx_h100())
    for price in (lambda: fs.estimate(fs.hgx_h100(), "send_recv", 1e6, [3]),
                  lambda: sc.add_collective("send_recv", [3], 1e6)):
        with pytest.raises(InvalidArgumentError, match="send_recv needs at least 2 ranks, got 1"):
            price()
    assert sc.n_activities == 0
