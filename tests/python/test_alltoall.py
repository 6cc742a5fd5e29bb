"""NCCL's all-to-all and send/recv as its point-to-point schedule runs them (``algorithm="p2p"``):
the schedule's figures against NCCL's formulas worked by hand (NCCL v2.30.7, src/), PXN's rails
read from the links the flows load, waves past the channel budget, bytes conserved, and the
analytical time against the flow-level one on an idle fabric."""

from __future__ import annotations

import numpy as np
import pytest

import fabricsim as fs
from fabricsim.collectives.communicator import communicator
from fabricsim.collectives.cost import p2p

GiB, MiB, KiB = 2**30, 2**20, 2**10
NO_PXN = fs.CostModel(pxn=False)


def h100_nodes(n: int) -> fs.Fabric:
    return fs.hgx_h100() if n == 1 else fs.cluster(domain="hgx-h100", n_domains=n, scale_out="quantum-2")


def setup_of(fabric, ranks=None) -> p2p.P2pSetup:
    return p2p.setup(communicator(fabric, "all_to_all", ranks))


def run(fabric, ranks, size, cost_model=None, sizes=None, op="all_to_all"):
    sc = fs.Scenario(fabric, cost_model=cost_model)
    sc.add_collective(op, ranks, None if sizes is not None else size, sizes=sizes)
    res = sc.run()
    return sc, res, res.collectives.to_pylist()[0]


# ---- the schedule, against NCCL's formulas ---------------------------------------------------


def test_group_deltas_are_nccls_quadratic_order():
    """init.cc:936-953: delta += k + 1 mod the next power of two, those past the groups left out
    (the comment at init.cc:934 gives the 16-rank sequence)."""
    assert p2p.group_deltas(16).tolist() == [0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]
    assert p2p.group_deltas(8).tolist() == [0, 1, 3, 6, 2, 7, 5, 4]
    assert p2p.group_deltas(3).tolist() == [0, 1, 2]  # 3 (of 0, 1, 3, 2 mod 4) is past the groups
    assert p2p.group_deltas(1).tolist() == [0]
    for n in (5, 12, 48, 100):
        assert sorted(p2p.group_deltas(n).tolist()) == list(range(n))


@pytest.mark.parametrize("nodes, per_peer", [(2, 4), (4, 4), (8, 2), (16, 1), (32, 1)])
def test_channels_across_h100_nodes(nodes, per_peer):
    """16 CTAs across H100 nodes (2 x the 8 channels of the ring graph, connect.cc:460;
    NVIDIA/nccl#1453's logs), so p2pnChannels C = 16 (paths.cc:977-991); 4 channels per network
    peer for a 400G NIC (ceil(49 / 14), paths.cc:943-951), halved while 4 x nodes > 16
    (paths.cc:993-1001); the fewest channels of an operation: halved while it times the ranks
    exceeds C, down to 1 (enqueue.cc:1143-1146). Steps of 128 KiB (init.cc:830)."""
    s = setup_of(h100_nodes(nodes))
    assert (s.channels, s.per_peer, s.min_channels, s.chunk_bytes) == (16, per_peer, 1, 128 * KiB)
    assert (s.group_size, s.n_groups) == (8, nodes)


def test_channels_on_one_h100_node():
    """One node: 24 CTAs (2 x 12 ring channels), so C = 32; an NVLink peer gets 2 x 18 links =
    36 channels, a power of two, 64, held to C (paths.cc:932-936, 1003); the fewest per
    operation 32 / ranks; steps of 512 KiB (init.cc:837)."""
    for ranks, fewest in ((range(8), 4), (range(4), 8), (range(2), 16)):
        s = setup_of(fs.hgx_h100(), ranks)
        assert (s.channels, s.per_peer, s.min_channels, s.chunk_bytes) == (32, 32, fewest, 512 * KiB)


@pytest.mark.parametrize("nbytes, want", [(0, 1), (30 * KiB, 1), (100 * KiB, 1), (200 * KiB, 2), (300 * KiB, 4),
                                          (GiB, 4)])
def test_operation_channels_across_nodes(nbytes, want):
    """enqueue.cc:919-926 on 2 nodes: from 1 (the fewest), doubled while a part passes 128 KiB
    (the step), up to the 4 per peer: 200 KiB -> two parts of 100 KiB; 300 KiB -> 150 KiB ->
    four of 75 KiB."""
    assert int(p2p.op_channels(setup_of(h100_nodes(2)), nbytes)) == want


def test_the_channel_count_doubles_just_above_512_MiB_on_one_node():
    """NVIDIA/nccl#2169's cliff: on one node the largest part is 32 steps, 16 MiB
    (enqueue.cc:920), and an operation starts from 32 / ranks channels, so S / ranks / (32 /
    ranks) = S / 32 passes 16 MiB just above S = 512 MiB, for 4 ranks as for 8."""
    for ranks in (range(4), range(8)):
        s = setup_of(fs.hgx_h100(), ranks)
        n = len(ranks)
        below, above = p2p.op_channels(s, np.array([512 * MiB, 512 * MiB + 4096]) / n).tolist()
        assert above == 2 * below == 2 * 32 // n


def test_base_channels_are_bit_reversed_rounds():
    """channel.h:21-33: on one node round r starts on bitrev(r) of log2(C) bits; across nodes a
    round group k (one node) on bitrev(k). C = 32 on one node, 16 across."""
    one = setup_of(fs.hgx_h100(), range(4))
    assert p2p.base(one, np.zeros(4, dtype=np.int64), np.arange(4)).tolist() == [0, 16, 8, 24]
    two = setup_of(h100_nodes(4))
    assert p2p.base(two, np.arange(4), np.zeros(4, dtype=np.int64)).tolist() == [0, 8, 4, 12]


def test_receive_warps_split_as_nccls_kernel_does():
    """src/device/sendrecv.h:107-113 with 20 warps: w = 20 // works; w // 2 receive where w <= 4,
    else (w - 1) // 2."""
    assert p2p.recv_warps(np.arange(1, 9)).tolist() == [9, 4, 2, 2, 2, 1, 1, 1]


@pytest.mark.parametrize("nodes, waves, kernels", [(16, False, 1), (17, True, 1), (32, True, 1), (260, True, 2)])
def test_waves_start_past_the_channel_budget(nodes, waves, kernels):
    """With one channel per peer the 16 channels hold 16 node groups at once; past that, group
    k waits on its channel for group k - 16 (channel.h: bitrev(k mod 16)); past 254 batches a
    kernel ends and the next waits for it (enqueue.cc:294-300)."""
    from fabricsim.collectives.communicator import _Comm, fabric_view

    fabric = h100_nodes(min(nodes, 32)) if nodes <= 32 else None
    if fabric is None:  # a setup needs no fabric of 2,080 GPUs: a communicator of that shape
        view = fabric_view(h100_nodes(2))
        comm = _Comm(np.arange(8 * nodes), np.arange(0, 8 * nodes, 8), 8, view, view.net_Bps, h100_nodes(2)._core)
    else:
        comm = communicator(fabric, "all_to_all")
    s = p2p.setup(comm)
    ks = p2p.keys(s, np.ones(8 * nodes, dtype=np.int64))
    assert any(ks.pred) == waves
    assert int(ks.kernel.max()) + 1 == kernels
    if waves and kernels == 1:
        assert all(pred == [k - 16] for k, pred in enumerate(ks.pred) if k >= 16)


# ---- PXN's rails, read from the fabric ----------------------------------------------------------


def _bytes_by_kind(fabric, res):
    names = [fabric.node_names[i] for i in range(fabric.n_nodes)]
    links = res.links.to_pylist()
    out: dict[str, float] = {}
    for link in links:
        kind = names[link["src"]].rstrip("0123456789").split(".")[-1] + ">" + \
            names[link["dst"]].rstrip("0123456789").split(".")[-1]
        out[kind] = out.get(kind, 0.0) + link["bytes_carried"]
    return out


def test_pxn_keeps_the_network_on_the_rails():
    """32 GPUs (4 HGX H100 nodes) of a 16-node Quantum-2 fabric, four leaves of two rails each:
    with PXN every network flow leaves the NIC of the receiver's rail on the sender's node and
    reaches that rail's NIC, so no byte crosses a spine; without it a GPU's NIC sends to every
    rail, and 3/4 of the network bytes cross one."""
    fabric = h100_nodes(16)
    S = 256 * MiB
    _, res, _ = run(fabric, range(32), S)
    flows = res.flows.to_pylist()
    gpu = {f["flow_id"]: (f["src"], f["dst"]) for f in flows if f["src"] is not None}
    network = [(a, b) for a, b in gpu.values() if a // 8 != b // 8]
    assert network and all(a % 8 == b % 8 for a, b in network)  # rail to rail
    by_kind = _bytes_by_kind(fabric, res)
    remote = 32 * S * 24 / 32  # what crosses nodes
    assert by_kind.get("leaf>spine", 0.0) == 0.0
    assert by_kind["nic>leaf"] == pytest.approx(remote, rel=1e-9)
    _, res, _ = run(fabric, range(32), S, NO_PXN)
    by_kind = _bytes_by_kind(fabric, res)
    assert by_kind["nic>leaf"] == pytest.approx(remote, rel=1e-9)
    assert by_kind["leaf>spine"] == pytest.approx(remote * 3 / 4, rel=1e-9)


def test_the_pxn_hop_stays_on_the_senders_node():
    """Each sender's bytes to another node reach the rail GPU over NVLink on its own node: every
    flow between two GPUs of one node is an NVLink flow (NVLink bundles only), and a GPU's
    hops carry exactly what it sends to the other nodes' GPUs of other rails."""
    fabric = h100_nodes(2)
    sc, res, _ = run(fabric, None, GiB)
    m = GiB / 16
    n_links = fabric.n_links
    hop_bytes = np.zeros((16, 16))
    for f in res.flows.to_pylist():
        a, b = f["src"], f["dst"]
        if a // 8 == b // 8:
            used, _ = sc.usage_of(f["flow_id"])
            assert all(c >= n_links for c in used)  # the NVLink bundles, nothing else
            hop_bytes[a, b] += f["bytes"]
    # Per pair on a node: the operation itself (m) and the hop of the other node's GPU on b's rail (m).
    off = ~np.eye(16, dtype=bool) & (np.arange(16)[:, None] // 8 == np.arange(16)[None, :] // 8)
    assert np.allclose(hop_bytes[off], 2 * m)


def test_bytes_are_conserved_in_the_aggregated_flows():
    """An all-to-all-v over 3 nodes: every byte from i to j is in one flow: an NVLink operation
    inside a node, else the network flow of i's node to j (from j's rail GPU), whose bytes are
    the sum of its senders', plus, where i is not on j's rail, a hop of i's bytes to the rail GPU."""
    fabric = h100_nodes(3)
    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 5 * MiB, size=(24, 24)).astype(float)
    sizes[rng.random((24, 24)) < 0.2] = 0.0
    comm = communicator(fabric, "all_to_all")
    plan = p2p.transfers(comm, sizes)
    node = np.arange(24) // 8
    off = ~np.eye(24, dtype=bool)
    same = node[:, None] == node[None, :]
    nv = plan.kind == p2p.NVLINK
    got = np.zeros((24, 24))
    np.add.at(got, (plan.src[nv], plan.dst[nv]), plan.nbytes[nv])
    assert np.array_equal(got, np.where(same & off, sizes, 0.0))
    net = plan.kind == p2p.NETWORK
    assert np.all(plan.src[net] % 8 == plan.dst[net] % 8)
    per_node = np.zeros((3, 24))
    np.add.at(per_node, (node[plan.src[net]], plan.dst[net]), plan.nbytes[net])
    want = np.add.reduceat(np.where(~same, sizes, 0.0), [0, 8, 16], axis=0)
    assert np.allclose(per_node, want)
    hop = plan.kind == p2p.HOP
    hops = np.zeros(24)
    np.add.at(hops, plan.src[hop], plan.nbytes[hop])
    off_rail = ~same & (np.arange(24)[:, None] % 8 != np.arange(24)[None, :] % 8)
    assert np.allclose(hops, np.where(off_rail, sizes, 0.0).sum(axis=1))


# ---- time ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes, ranks", [(1, range(4)), (1, range(8)), (1, [0, 3, 5]), (2, None), (4, None),
                                          (8, None), (16, None), (32, None)])
@pytest.mark.parametrize("pxn", [True, False])
@pytest.mark.parametrize("size", [4 * KiB, 1 * MiB, 64 * MiB, GiB])
def test_analytical_time_is_the_flow_levels_on_an_idle_fabric(nodes, ranks, pxn, size):
    """Even all-to-alls from one node to 32 (waves past 16): the estimate is the construction's
    own flows by class, exact but that a batch's flows all take its farthest pair's wire
    latency: where its pairs differ (rails crossing through a spine without PXN, nodes on
    two leaves past 16), it is up to that difference (two Quantum-2 switches, 0.3 us) late."""
    if nodes == 1 and not pxn:
        pytest.skip("one node: no network, nothing for PXN to change")
    fabric = h100_nodes(nodes)
    _, _, row = run(fabric, ranks, size, None if pxn else NO_PXN)
    took = row["finish_s"] - row["start_s"]
    wire = communicator(fabric, "all_to_all", ranks).class_latency_s[1:]
    spread_s = 0.0 if nodes == 1 or (pxn and nodes < 32) else 1.05 * float(wire.max() - wire[wire > 0].min())
    assert took * (1 - 1e-9) <= row["analytical_s"] <= took * (1 + 1e-9) + spread_s
    est = fs.estimate(fabric, "all_to_all", size, ranks, cost_model=None if pxn else NO_PXN)
    assert est.algorithm == "p2p" and est.time_s == row["analytical_s"]


@pytest.mark.parametrize("nodes", [1, 2, 4, 32])
def test_all_to_all_v_estimate_is_near_the_flow_level(nodes):
    """Uneven sizes (a MoE dispatch, log-normal): the estimate is the busiest port or slowest
    capped flow after the batches' latencies, within 15% of the flow-level time here."""
    fabric = h100_nodes(nodes)
    n = 8 * nodes if nodes > 1 else 8
    rng = np.random.default_rng(nodes)
    sizes = rng.lognormal(0.0, 0.6, (n, n)) * MiB
    _, _, row = run(fabric, range(n), None, sizes=sizes)
    took = row["finish_s"] - row["start_s"]
    assert 0.85 * took <= row["analytical_s"] <= took * 1.001


def test_the_512_MiB_cliff_comes_from_the_channels():
    """NVIDIA/nccl#2169: 4 H100s of one node lose 12-15% of their all-to-all bandwidth just
    above 512 MiB. The operations double their channels there and share each channel with
    another (16 x 4 over 32), so each gets 4 of its channel's receive warps where it had 9: a
    CTA-bound all-to-all loses 1 - 8/9 = 11.1% (less its latency's share)."""
    fabric = fs.hgx_h100()
    busbw = {}
    for S in (500 * MiB, 512 * MiB, 512 * MiB + 4 * KiB, 530 * MiB):
        _, _, row = run(fabric, range(4), S)
        busbw[S] = row["busbw_Bps"]
    assert busbw[512 * MiB] == pytest.approx(busbw[500 * MiB], rel=2e-3)
    drop = 1 - busbw[512 * MiB + 4 * KiB] / busbw[512 * MiB]
    assert drop == pytest.approx(1 - 8 / 9, abs=3e-3)
    assert busbw[530 * MiB] == pytest.approx(busbw[512 * MiB + 4 * KiB], rel=2e-3)


def test_send_recv_runs_the_schedule_too():
    """nccl-tests' sendrecv on one node: one round (delta 1), its operation on 32 channels at
    4 GiB, alone on each: NVLink-bound, as NVIDIA/nccl#1264 measures (371-377 GB/s)."""
    fabric = fs.hgx_h100()
    _, _, row = run(fabric, range(8), 4 * GiB, op="send_recv")
    assert row["algorithm"] == "p2p"
    assert row["analytical_s"] == pytest.approx(row["finish_s"] - row["start_s"], rel=1e-9)
    assert row["busbw_Bps"] == pytest.approx(370.8e9, rel=0.01)


def test_direct_stays_available_by_name():
    fabric = h100_nodes(2)
    _, res, row = run(fabric, None, GiB)
    sc = fs.Scenario(fabric)
    sc.add_collective("all_to_all", None, GiB, algorithm="direct")
    direct = sc.run()
    assert row["algorithm"] == "p2p" and direct.collectives.column("algorithm").to_pylist() == ["direct"]
    assert direct.flows.num_rows == 16 * 15
    assert res.flows.num_rows == 2 * 8 + 2 * 8 * 7 * 2  # network per (node, receiver), NVLink operations, hops


def test_pxn_is_a_boolean_of_the_cost_model():
    with pytest.raises(fs.InvalidArgumentError, match=r"pxn=1: expected True or False"):
        fs.CostModel(pxn=1)
    assert fs.CostModel().pxn is True


def test_p2p_needs_a_generated_fabric():
    topo = fs.Topology.from_arrays([0, 1, 1, 2], [1, 0, 2, 1], "100GB/s", "1us")
    with pytest.raises(fs.InvalidArgumentError, match=r"algorithm 'p2p' cannot run all_to_all here \(can: direct\)"):
        fs.estimate(topo, "all_to_all", "1MiB", algorithm="p2p")
    assert fs.estimate(topo, "all_to_all", "1MiB").algorithm == "direct"


def test_the_fast_mode_keeps_an_all_to_all_v_within_one_percent():
    """The fast mode (tolerance 1e-2) on a MoE dispatch over 24 nodes (192 ranks, channels in
    two waves), log-normal sizes: every flow and the collective finish within 1% of the exact
    engine's (the asv case MoeAllToAllV runs it at 512 ranks)."""
    fabric = h100_nodes(24)
    rng = np.random.default_rng(0)
    m = rng.lognormal(0.0, 0.6, (192, 192))
    np.fill_diagonal(m, 0.0)
    sizes = m / m.sum(axis=1, keepdims=True) * 64 * MiB
    sc = fs.Scenario(fabric)
    sc.add_collective("all_to_all", range(192), sizes=sizes)
    exact, fast = sc.run(), sc.run(tolerance=1e-2)
    a, b = exact.flows["finish_s"].to_numpy(), fast.flows["finish_s"].to_numpy()
    assert np.max(np.abs(b - a) / a) < 0.01
    assert fast.collectives.column("finish_s")[0].as_py() == pytest.approx(
        exact.collectives.column("finish_s")[0].as_py(), rel=0.01)


@pytest.mark.parametrize("nodes, most", [(16, 15), (32, 16)])
def test_a_nic_carries_one_flow_per_channel_at_a_time(nodes, most):
    """Counted over the run: the network flows leaving GPU 0's NIC (one per other node, its rail
    GPU for every sender of its node) are all in flight at once up to 16 nodes; at 32 nodes at
    most 16 are (one per channel: the channel budget), the rest waiting for their channel."""
    fabric = h100_nodes(nodes)
    _, res, _ = run(fabric, None, 256 * MiB)
    out = [(f["start_s"], f["finish_s"]) for f in res.flows.to_pylist()
           if f["src"] == 0 and f["dst"] is not None and f["dst"] // 8 != 0]
    assert len(out) == nodes - 1
    edges = sorted([(s, 1) for s, _ in out] + [(f, -1) for _, f in out], key=lambda e: (e[0], e[1]))
    live = peak = 0
    for _, step in edges:
        live += step
        peak = max(peak, live)
    assert peak == most
