"""fabricsim.nccl_model: NCCL 2.30's tuning model against docs/sources.md §4 (worked checks, rules)."""

import math

import pytest

from fabricsim.exceptions import InvalidArgumentError
from fabricsim.collectives.cost.nccl import ALGORITHMS, PROTOCOLS, CommShape, choose, graphs, predict

GiB = 2**30
H100_NVL = 18 * 20.6e9  # NCCL's 18 x SM90_NVLINK_BW
B200_NVL = 18 * 40.1e9


def hgx_h100(n_nodes=1, **kw):
    args = dict(n_ranks=8 * n_nodes, n_nodes=n_nodes, arch="hopper", nvlink_Bps=H100_NVL,
                nvlink_link_Bps=20.6e9, net_Bps=50e9 if n_nodes > 1 else 0.0, nvswitch=True,
                collnet=False)
    args.update(kw)
    return CommShape(**args)


def by_pair(op, size, shape):
    return {(p.algorithm, p.protocol): p for p in predict(op, size, shape)}


# --- docs/sources.md §4.6 worked checks -------------------------------------------------------------


def test_h100_nvls_worked_check():
    p = by_pair("all_reduce", GiB, hgx_h100())[("nvls", "simple")]
    assert p.bus_Bps == pytest.approx(476e9, rel=1e-12)  # 8 x (40 x 0.85 x 7/8 x 2)
    assert p.alg_Bps == pytest.approx(272e9, rel=1e-12)  # 476 x 8/14
    assert p.latency_s == pytest.approx(25e-6, rel=1e-12)
    assert p.time_s == pytest.approx((25 + GiB / (1000 * 272)) * 1e-6, rel=1e-12)
    assert round(p.time_s * 1e3, 2) == 3.97
    g = graphs(hgx_h100())["nvls"]
    assert (g.n_channels, g.bw_intra_Bps) == (8, 40e9)  # 9 x 40 <= 370.8 < 9 x 50


def test_h100_ring_worked_check():
    g = graphs(hgx_h100())["ring"]
    assert (g.n_channels, g.bw_intra_Bps) == (12, 30e9)  # 6 x 60 duplicated
    pairs = by_pair("all_reduce", GiB, hgx_h100())
    assert pairs[("ring", "simple")].bus_Bps == pytest.approx(360e9, rel=1e-12)
    assert round(pairs[("ring", "ll128")].bus_Bps / 1e9) == 331  # 0.92 x 360
    assert pairs[("ring", "ll")].bus_Bps == pytest.approx(141e9, rel=1e-12)  # Hopper llMaxBw
    lat_us = {p: pairs[("ring", p)].latency_s * 1e6 for p in PROTOCOLS}
    assert lat_us["ll"] == pytest.approx(15.0, abs=1e-9)
    assert lat_us["ll128"] == pytest.approx(40.6, abs=1e-9)
    assert lat_us["simple"] == pytest.approx(56.0, abs=1e-9)
    # Ring all-reduce algBw = busBw x n / (2(n-1)).
    assert pairs[("ring", "simple")].alg_Bps == pytest.approx(360e9 * 8 / 14, rel=1e-12)


def test_b200_nvls_worked_check():
    b200 = CommShape(8, 1, "blackwell", B200_NVL, 40.1e9, 0.0, True, False)
    g = graphs(b200)["nvls"]
    assert (g.n_channels, g.bw_intra_Bps) == (8, 80e9)  # 9 x 80 = 720 <= 721.8
    p = by_pair("all_reduce", GiB, b200)[("nvls", "simple")]
    assert round(p.bus_Bps / 1e9) == 829
    assert p.bus_Bps == pytest.approx(8 * 80 * 0.74 * 7 / 8 * 2 * 1e9, rel=1e-12)


def test_multi_node_ring_latency_and_plateau():
    shape = hgx_h100(n_nodes=16)  # 128 ranks
    small = by_pair("all_reduce", 8, shape)[("ring", "simple")]
    assert small.latency_s * 1e6 == pytest.approx(8.4 + 224 * 3.4 + 30 * 14, abs=1e-9)  # 1190 us
    big = by_pair("all_reduce", GiB, shape)[("ring", "simple")]
    assert big.latency_s == pytest.approx(1.4 * small.latency_s, rel=1e-12)
    # Only ring/Simple all-reduce gets the plateau factor.
    assert by_pair("all_reduce", GiB, shape)[("ring", "ll")].latency_s == by_pair(
        "all_reduce", 8, shape)[("ring", "ll")].latency_s
    single = hgx_h100()
    assert by_pair("all_reduce", GiB, single)[("ring", "simple")].latency_s == pytest.approx(56e-6)


def test_uneven_nodes_take_the_least_graph_and_a_fractional_ppn():
    """3 ranks on 2 nodes (2 GPUs + 1 GPU, 50 GB/s NICs). Per node, the ring search (sm90
    inter ladder, from 48) finds 1 channel x 48 on the 1-GPU node (one NIC) and 2 x 48 on the
    other; duplication makes them 2 x 24 and 4 x 24; NCCL keeps the least: 2 x 24 = 48 GB/s
    busBw (the even 4-rank shape has 96). NVLS needs >= 2 GPUs on every node, so it is gone.
    Latencies (us), NVLink intra as one node has 2 GPUs, NET inter as ppn = 1.5 != 1:
    ring Simple 8.4 + (4 - 2) * 3.4 + 2 * 14; tree Simple 8.4 + 2 * ((3 // 2 - 1) * 4 + 1 * 14)."""
    shape = hgx_h100(n_nodes=2, n_ranks=3, local_ranks=(1, 2))
    assert shape.ppn == 1.5
    assert graphs(shape)["ring"] == graphs(hgx_h100(n_nodes=2, n_ranks=2))["ring"]
    assert graphs(shape)["ring"].n_channels == 2 and graphs(shape)["ring"].bw_intra_Bps == 24e9
    even = graphs(hgx_h100(n_nodes=2, n_ranks=4))["ring"]
    assert even.n_channels * even.bw_intra_Bps == 96e9
    p = by_pair("all_reduce", 8, shape)
    assert "nvls" not in graphs(shape) and ("nvls_tree", "simple") not in p
    assert p[("ring", "simple")].bus_Bps == pytest.approx(48e9, rel=1e-12)
    assert p[("ring", "simple")].latency_s * 1e6 == pytest.approx(8.4 + 2 * 3.4 + 2 * 14, abs=1e-9)
    assert p[("tree", "simple")].latency_s * 1e6 == pytest.approx(8.4 + 2 * 14, abs=1e-9)


# --- Disabling rules (docs/sources.md §4.3) -----------------------------------------------------------


def algos(op, shape, size=GiB):
    return {p.algorithm for p in predict(op, size, shape)}


def test_no_nvls_without_nvswitch():
    assert "nvls" in algos("all_reduce", hgx_h100())
    assert not {"nvls", "nvls_tree"} & algos("all_reduce", hgx_h100(nvswitch=False))
    assert not {"nvls", "nvls_tree"} & algos("all_reduce", hgx_h100(n_nodes=4, nvswitch=False))


def test_nvls_needs_hopper():
    a100 = CommShape(8, 1, "ampere", 12 * 20e9, 20e9, 0.0, True, False)
    assert "nvls" not in algos("all_reduce", a100)


def test_no_collnet_without_collnet():
    without = algos("all_reduce", hgx_h100(n_nodes=4))
    assert not {"collnet_direct", "collnet_chain"} & without
    with_sharp = algos("all_reduce", hgx_h100(n_nodes=4, collnet=True))
    assert {"collnet_direct", "collnet_chain"} <= with_sharp
    # CollNetDirect needs an NVSwitch; CollNet is for reductions across nodes only.
    assert "collnet_direct" not in algos("all_reduce", hgx_h100(n_nodes=4, collnet=True, nvswitch=False))
    assert not {"collnet_direct", "collnet_chain"} & algos("all_reduce", hgx_h100(collnet=True))


def test_multi_node_nvls_needs_collnet():
    assert "nvls" not in algos("all_reduce", hgx_h100(n_nodes=4))
    assert "nvls" in algos("all_reduce", hgx_h100(n_nodes=4, collnet=True))


def test_nvls_tree_disabled_on_one_node():
    assert "nvls_tree" not in algos("all_reduce", hgx_h100())
    assert "nvls_tree" in algos("all_reduce", hgx_h100(n_nodes=2))


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather", "broadcast", "reduce"])
def test_tree_only_for_all_reduce(op):
    assert "tree" in algos("all_reduce", hgx_h100(n_nodes=4))
    assert "tree" not in algos(op, hgx_h100(n_nodes=4))


@pytest.mark.parametrize("op", ["broadcast", "reduce"])
def test_broadcast_and_reduce_run_on_ring_only(op):
    assert algos(op, hgx_h100(n_nodes=2, collnet=True)) == {"ring"}
    assert [p.protocol for p in predict(op, GiB, hgx_h100())] == list(PROTOCOLS)


def test_simple_only_algorithms():
    shape = hgx_h100(n_nodes=2, collnet=True)
    for p in predict("all_reduce", GiB, shape):
        if p.algorithm not in ("ring", "tree"):
            assert p.protocol == "simple", p


def test_ll128_needs_nvlink():
    pcie = CommShape(8, 1, "hopper", 0.0, 0.0, 0.0, False, False)
    assert "ll128" not in {p.protocol for p in predict("all_reduce", GiB, pcie)}
    assert "ll128" in {p.protocol for p in predict("all_reduce", GiB, hgx_h100())}


def test_pat_needs_one_gpu_per_node():
    one = CommShape(16, 16, "hopper", 0.0, 0.0, 50e9, False, False)
    assert "pat" in algos("all_gather", one) and "pat" in algos("reduce_scatter", one)
    assert "pat" not in algos("all_reduce", one)
    assert "pat" not in algos("all_gather", hgx_h100(n_nodes=2))


def test_all_gather_conversion():
    pairs = by_pair("all_gather", GiB, hgx_h100())
    ring = pairs[("ring", "simple")]
    assert ring.alg_Bps == pytest.approx(ring.bus_Bps * 8 / 7, rel=1e-12)  # n/(n-1)
    nvls = pairs[("nvls", "simple")]
    assert nvls.alg_Bps == nvls.bus_Bps  # AG/RS on non-ring algorithms: stored unconverted
    assert nvls.bus_Bps == pytest.approx(8 * 40 * 0.85 * 7 / 8 * 7 / 8 * 1e9, rel=1e-12)


# --- Choice ----------------------------------------------------------------------------------------------


def test_choose_small_is_ll_and_large_is_nvls_on_hgx_h100():
    small = choose("all_reduce", 8, hgx_h100())
    assert (small.algorithm, small.protocol) == ("ring", "ll")
    big = choose("all_reduce", GiB, hgx_h100())
    assert (big.algorithm, big.protocol) == ("nvls", "simple")
    assert choose("all_reduce", GiB, hgx_h100(nvswitch=False)).protocol == "simple"


@pytest.mark.parametrize("shape", [hgx_h100(), hgx_h100(n_nodes=16), hgx_h100(n_nodes=4, collnet=True),
                                   CommShape(16, 16, "hopper", 0.0, 0.0, 50e9, False, False, "amd")])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"])
def test_choose_is_the_first_minimum_and_time_grows_with_size(shape, op):
    sizes = [0] + [2**k for k in range(0, 35)]
    prev = {}
    prev_best = -1.0
    for size in sizes:
        preds = predict(op, size, shape)
        order = [(ALGORITHMS.index(p.algorithm), PROTOCOLS.index(p.protocol)) for p in preds]
        assert order == sorted(order) and len(set(order)) == len(order)
        best = min(preds, key=lambda p: p.time_s)  # min() keeps the first of equal times
        assert choose(op, size, shape) == best
        for p in preds:
            assert p.time_s == pytest.approx(p.latency_s + size / p.alg_Bps, rel=1e-12)
            key = (p.algorithm, p.protocol)
            assert p.time_s >= prev.get(key, 0.0)
            prev[key] = p.time_s
        assert best.time_s >= prev_best
        prev_best = best.time_s


def test_cached_tables_give_equal_answers():
    a = predict("all_reduce", 1 << 20, hgx_h100())
    b = predict("all_reduce", 1 << 20, hgx_h100())  # an equal, distinct shape hits the cache
    assert a == b


# --- Bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, fragment", [
    ({"n_ranks": 0}, "n_ranks=0"),
    ({"n_ranks": 1}, "n_ranks=1"),
    ({"n_ranks": 8.0}, "n_ranks=8.0"),
    ({"n_ranks": True}, "n_ranks=True"),
    ({"n_ranks": 8, "n_nodes": 0}, "n_nodes=0"),
    ({"arch": "pascal"}, "arch='pascal'"),
    ({"nvlink_Bps": -1.0}, "nvlink_Bps=-1.0"),
    ({"nvlink_Bps": math.nan}, "nvlink_Bps=nan"),
    ({"nvlink_Bps": "370GB/s"}, "nvlink_Bps='370GB/s'"),
    ({"nvlink_link_Bps": 0.0}, "nvlink_link_Bps=0.0"),
    ({"nvlink_link_Bps": 1e15}, "nvlink_link_Bps=1000000000000000.0"),
    ({"net_Bps": math.inf}, "net_Bps=inf"),
    ({"nvswitch": 1}, "nvswitch=1"),
    ({"collnet": "yes"}, "collnet='yes'"),
    ({"cpu_vendor": "via"}, "cpu_vendor='via'"),
])
def test_bad_shape_names_the_value(kwargs, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        hgx_h100(**kwargs)


def test_inconsistent_shapes():
    with pytest.raises(InvalidArgumentError, match="n_ranks=8 over n_nodes=3: .* local_ranks"):
        hgx_h100(n_ranks=8, n_nodes=3)
    with pytest.raises(InvalidArgumentError, match=r"local_ranks=\(1, 2\): expected nodes of these sizes to hold n_ranks=8"):
        hgx_h100(n_ranks=8, n_nodes=3, local_ranks=(1, 2))
    with pytest.raises(InvalidArgumentError, match=r"local_ranks=\[2, 3\]: expected a tuple"):
        hgx_h100(n_ranks=8, n_nodes=3, local_ranks=[2, 3])
    with pytest.raises(InvalidArgumentError, match="net_Bps=0"):
        hgx_h100(n_nodes=2, net_Bps=0.0)
    with pytest.raises(InvalidArgumentError, match="nvswitch=True"):
        CommShape(8, 1, "hopper", 0.0, 0.0, 0.0, True, False)


@pytest.mark.parametrize("size", [-1, math.nan, math.inf, "1GiB", None, True])
def test_bad_size_names_the_value(size):
    with pytest.raises(InvalidArgumentError, match=r"size_bytes="):
        choose("all_reduce", size, hgx_h100())
    with pytest.raises(InvalidArgumentError, match=r"size_bytes=" + repr(size).replace("'", ".")):
        predict("all_reduce", size, hgx_h100())


def test_bad_op_and_shape():
    with pytest.raises(InvalidArgumentError, match="op='allreduce'"):
        choose("allreduce", 8, hgx_h100())
    for op in ("all_to_all", "send_recv"):
        with pytest.raises(InvalidArgumentError, match=f"op='{op}' is not in NCCL's tuning table"):
            predict(op, 8, hgx_h100())
    with pytest.raises(InvalidArgumentError, match="shape=None"):
        choose("all_reduce", 8, None)
    with pytest.raises(InvalidArgumentError, match="shape="):
        graphs({"n_ranks": 8})
