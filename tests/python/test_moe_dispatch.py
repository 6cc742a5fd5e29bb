"""Mixture-of-experts dispatch and combine as collectives of their own: DeepEP's node
deduplication read from the links, the three modes' bytes, the analytical time against the
flow-level one, the results row, and bad input refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import fabricsim as fs
from fabricsim.collectives.moe import MoeTraffic, add_moe, moe_traffic

KiB = 2**10
B = 7168 + 224  # an FP8 token of DeepSeek-V3 and its scales


def network_bytes(fabric, res) -> float:
    """Bytes that left a NIC for the network (every NIC-to-leaf link)."""
    names = [fabric.node_names[i] for i in range(fabric.n_nodes)]
    return sum(link["bytes_carried"] for link in res.links.to_pylist()
               if names[link["src"]].startswith("nic") and names[link["dst"]].startswith("leaf"))


def one_token_to_a_remote_node():
    """16 ranks on 2 HGX H100 nodes, one expert each: rank 0's token goes to experts 8-11 (all on
    node 1); every other token to four experts of its own node."""
    ids = np.zeros((16, 1, 4), dtype=np.int64)
    for r in range(16):
        base = 8 * (r // 8)
        ids[r, 0] = [base + (r % 8 + d) % 8 for d in range(1, 5)]
    ids[0, 0] = [8, 9, 10, 11]
    return fs.MoeRouting.from_topk(ids, n_experts=16)


@pytest.mark.parametrize("mode, copies", [("deepep", 1), ("deepep_ll", 4), ("all_to_all", 4)])
def test_a_token_crosses_the_network_once_per_node_with_deepep(mode, copies):
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    sc = fs.Scenario(fabric)
    sc.add_moe_dispatch(one_token_to_a_remote_node(), bytes_per_token=B, mode=mode)
    res = sc.run()
    assert network_bytes(fabric, res) == pytest.approx(copies * B)
    row = res.collectives.to_pylist()[0]
    assert (row["op"], row["algorithm"], row["n_ranks"]) == ("moe_dispatch", mode, 16)
    assert row["size_bytes"] == pytest.approx(copies * B / 16)  # network bytes per rank
    assert row["busbw_Bps"] == row["algbw_Bps"]
    if mode == "deepep":  # GPU 8 (rank 0's rail) forwards over NVLink to 9, 10 and 11
        moved = {(f["src"], f["dst"]): f["bytes"] for f in res.flows.to_pylist()}
        assert moved[(0, 8)] == pytest.approx(B)
        assert [moved.get((8, j), 0.0) for j in (9, 10, 11)] == pytest.approx([B] * 3)


def test_the_combine_runs_the_dispatch_backwards():
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    ids = np.random.default_rng(1).permuted(np.tile(np.arange(32), (16, 64, 1)), axis=2)[:, :, :4]
    routing = fs.MoeRouting.from_topk(ids, n_experts=32)
    for mode in ("deepep", "deepep_ll"):
        got = {}
        for kind, nbytes in (("dispatch", B), ("combine", 2 * 7168)):
            sc = fs.Scenario(fabric)
            (sc.add_moe_dispatch if kind == "dispatch" else sc.add_moe_combine)(routing, bytes_per_token=nbytes,
                                                                                 mode=mode)
            got[kind] = {(f["src"], f["dst"]): f["bytes"] / nbytes for f in sc.run().flows.to_pylist()}
        assert got["combine"] == pytest.approx({(b, a): t for (a, b), t in got["dispatch"].items()})


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("mode", ["deepep", "deepep_ll", "all_to_all"])
def test_analytical_time_is_near_the_flow_levels_for_even_routing(nodes, mode):
    """Even routing (every rank's tokens spread evenly over the experts): every port alike, so
    the busiest port's time is the flow-level time up to the wire latency's spread."""
    fabric = fs.hgx_h100() if nodes == 1 else fs.cluster(domain="hgx-h100", n_domains=nodes, scale_out="quantum-2")
    n = 8 * nodes
    routing = fs.MoeRouting.from_counts(np.full((n, 4 * n), 4096 * 8 / (4 * n)), top_k=8)
    sc = fs.Scenario(fabric)
    sc.add_moe_dispatch(routing, bytes_per_token=B, mode=mode)
    row = sc.run().collectives.to_pylist()[0]
    took = row["finish_s"] - row["start_s"]
    assert row["analytical_s"] == pytest.approx(took, rel=1e-2)
    assert fs.estimate_moe(fabric, "dispatch", routing, bytes_per_token=B, mode=mode) == row["analytical_s"]


def test_deepep_across_nodes_is_nic_bound_as_deepep_reports():
    """DeepEP's internode dispatch reports 43-58 GB/s of RDMA bottleneck bandwidth on 400G
    CX7 NICs (deepseek-ai/DeepEP docs/legacy.md): on H100 nodes with the same NIC the model's
    dispatch moves a NIC's payload rate, 49.7 GB/s."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    routing = fs.MoeRouting.from_counts(np.full((16, 64), 4096 * 8 / 64), top_k=8)
    sc = fs.Scenario(fabric)
    sc.add_moe_dispatch(routing, bytes_per_token=B)
    bw = sc.run().collectives.column("busbw_Bps").to_pylist()[0]
    assert 43e9 < bw < 49.7e9


def test_counts_estimate_the_deduplication_of_random_routing():
    """From counts the tokens per GPU and per node are estimated as if each token's distinct
    experts were drawn in proportion to the counts: for tokens routed uniformly at random, the
    exact count in all within 0.2%."""
    rng = np.random.default_rng(5)
    ids = np.argsort(rng.random((16, 2048, 64)), axis=2)[:, :, :8]
    exact = fs.MoeRouting.from_topk(ids, n_experts=64)
    counts = np.zeros((16, 64))
    np.add.at(counts, (np.repeat(np.arange(16), 2048 * 8), ids.ravel()), 1)
    estimated = fs.MoeRouting.from_counts(counts, top_k=8)
    assert np.array_equal(exact.copies, estimated.copies)
    # The estimate is the expectation; the draw's own spread is some 3% per (rank, GPU) pair here.
    assert estimated.per_gpu().sum() == pytest.approx(exact.per_gpu().sum(), rel=2e-3)
    assert estimated.per_gpu() == pytest.approx(exact.per_gpu(), rel=0.08)
    assert np.array_equal(exact.tokens, estimated.tokens)


def test_a_step_builder_hands_token_arrays():
    """What a training step builds: the traffic as NumPy arrays of tokens onto the scenario's
    collectives builder, the same flows as from the routing."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    routing = fs.MoeRouting.from_counts(np.full((16, 32), 256.0), top_k=2)
    sc = fs.Scenario(fabric)
    sc.add_moe_dispatch(routing, bytes_per_token=B)
    want = sc.run().collectives.to_pylist()[0]
    from fabricsim.collectives import communicator
    from fabricsim.collectives.construction import Builder

    t = moe_traffic(routing, communicator(fabric, "all_to_all"))
    arrays = MoeTraffic(t.copies.copy(), t.per_gpu.copy(), t.per_node.copy())
    sc = fs.Scenario(fabric)
    builder = sc._collectives = Builder(sc)
    end = add_moe(builder, "dispatch", None, arrays, B, "deepep", np.zeros(0, dtype=np.int64), 0.0, "ep")
    got = sc.run().collectives.to_pylist()[0]
    assert got["collective_id"] == end
    assert got["finish_s"] == want["finish_s"] and got["size_bytes"] == want["size_bytes"]


@pytest.mark.parametrize("make, message", [
    (lambda: fs.MoeRouting.from_topk(np.zeros((4, 8))), r"expert_ids must hold integer expert ids, got dtype float64"),
    (lambda: fs.MoeRouting.from_topk(np.zeros((4, 8), dtype=int)), r"shape \(ranks, tokens per rank, top_k\), got shape \(4, 8\)"),
    (lambda: fs.MoeRouting.from_topk(np.full((4, 2, 1), 9), n_experts=8), r"expert_ids\[0, 0, 0\] = 9: expected an expert id in \[0, 8\)"),
    (lambda: fs.MoeRouting.from_topk(np.full((4, 2, 1), -1), n_experts=8), r"expert_ids\[0, 0, 0\] = -1"),
    (lambda: fs.MoeRouting.from_topk(np.array([[[1, 1]]] * 4), n_experts=8), r"token 0 of rank 0 is routed to expert 1 twice"),
    (lambda: fs.MoeRouting.from_topk(np.zeros((4, 1, 1), dtype=int), n_experts=6), r"6 experts over 4 ranks: .* a multiple"),
    (lambda: fs.MoeRouting.from_topk(np.zeros((2, 1, 1), dtype=int), n_experts=4, placement=[0, 0, 0, 1]),
     r"placement puts 3 experts on rank 0: every rank holds 2 .* a permutation of the blocks"),
    (lambda: fs.MoeRouting.from_topk(np.zeros((2, 1, 1), dtype=int), n_experts=4, placement=[0, 1, 2, 1]),
     r"placement\[2\] = 2: expected a rank position in \[0, 2\)"),
    (lambda: fs.MoeRouting.from_topk(np.zeros((2, 1, 1), dtype=int), n_experts=4, placement=[0, 1]),
     r"placement must be 4 integer rank positions"),
    (lambda: fs.MoeRouting.from_counts(np.array([[1.0, -2.0]]), top_k=1), r"counts\[0\]\[1\] = -2.0: expected a finite token count >= 0"),
    (lambda: fs.MoeRouting.from_counts(np.array([[1.0, np.nan]]), top_k=1), r"counts\[0\]\[1\] = nan"),
    (lambda: fs.MoeRouting.from_counts(np.ones((2, 4)), top_k=5), r"top_k=5: expected at most the 4 experts"),
    (lambda: fs.MoeRouting.from_counts(np.ones((2, 4)), top_k=0), r"top_k must be a whole number >= 1, got 0"),
    (lambda: fs.MoeRouting.from_counts(np.ones(4), top_k=1), r"counts must be an array of shape \(ranks, experts\)"),
])
def test_bad_routing_is_refused_by_name(make, message):
    with pytest.raises(fs.InvalidArgumentError, match=message):
        make()


def test_bad_dispatch_arguments_are_refused_by_name():
    fabric = fs.hgx_h100()
    routing = fs.MoeRouting.from_counts(np.ones((8, 8)), top_k=1)
    sc = fs.Scenario(fabric)
    with pytest.raises(fs.InvalidArgumentError, match=r"mode must be one of deepep, deepep_ll, all_to_all, got 'nccl'"):
        sc.add_moe_dispatch(routing, bytes_per_token=B, mode="nccl")
    with pytest.raises(fs.InvalidArgumentError, match=r"bytes_per_token must be a finite number of bytes > 0, got 0"):
        sc.add_moe_dispatch(routing, bytes_per_token=0)
    with pytest.raises(fs.InvalidArgumentError, match=r"the routing is for 8 ranks, the communicator has 4"):
        sc.add_moe_dispatch(routing, range(4), bytes_per_token=B)
    with pytest.raises(fs.InvalidArgumentError, match=r"routing must be a fabricsim.MoeRouting, got ndarray"):
        sc.add_moe_dispatch(np.ones((8, 8)), bytes_per_token=B)
    assert sc.n_activities == 0  # nothing of a refused call stays
    sc.add_moe_dispatch(routing, bytes_per_token="7KiB", tag="ep")
    assert sc.run().collectives.column("size_bytes").to_pylist() == [pytest.approx(7 * 7 * KiB)]  # NVLink, per rank
