"""Inference serving traffic: closed forms (KV bytes, one KV transfer alone, the
Poisson count, the TP step), determinism by seed, a neighbour slowing the p99, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fabricsim as fs
from fabricsim import serving as S
from fabricsim.exceptions import InvalidArgumentError


@pytest.fixture(scope="module")
def two_servers() -> fs.Fabric:
    return fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")


@pytest.fixture(scope="module")
def forty_servers() -> fs.Fabric:
    # Two leaves per rail, so that traffic between them shares uplinks and spines.
    return fs.cluster(domain="hgx-h100", n_domains=40, scale_out="quantum-2")


def pools16() -> tuple[S.Pool, S.Pool]:
    return S.Pool(range(8), tp=8), S.Pool(range(8, 16), tp=8)


# ---- closed forms ------------------------------------------------------------------------


def test_kv_bytes_follow_the_formula() -> None:
    m = fs.training.model("llama3-70b")
    assert S.kv_cache_bytes("llama3-70b", 1000) == m.layers * m.kv_heads * m.head_dim * 2 * 2 * 1000 == 327_680_000
    assert S.kv_cache_bytes("llama3-8b", 10, kv_bytes_per_element=1) == 32 * 8 * 128 * 2 * 1 * 10
    ds = fs.training.model("deepseek-v3")  # MLA: the latent, K and V joint
    assert S.kv_cache_bytes(ds, 3) == ds.layers * (ds.kv_lora_rank + ds.qk_rope_head_dim) * 2 * 3
    np.testing.assert_array_equal(S.kv_cache_bytes("llama3-70b", np.array([1, 2])), [327_680.0, 655_360.0])


def test_one_kv_transfer_alone_takes_bytes_over_bottleneck_plus_latency(two_servers: fs.Fabric) -> None:
    prefill, decode = pools16()
    sc = fs.Scenario(two_servers, routing="ecmp")
    req = S.trace_requests([0.0], [3000], [5])
    sv = S.add_serving(sc, "llama3-70b", req, prefill=prefill, decode=decode)
    row = sv.report(sc.run()).requests.to_pylist()[0]
    total = 80 * 8 * 128 * 2 * 2 * 3000
    assert row["kv_bytes"] == total
    # Eight flows, one per TP rank (one KV head each), rank i to rank i, started at the prefill's end.
    assert sv.flow_ids.shape == (8,)
    links = two_servers.links
    cap = np.asarray(links.column("capacity_Bps"))
    lat = np.asarray(links.column("latency_s"))
    expected = []
    for fid in sv.flow_ids.tolist():
        route = sc.route_of(fid)
        assert route
        expected.append(lat[route].sum() + (total / 8) / cap[route].min())
    assert row["kv_network_s"] == pytest.approx(max(expected), rel=1e-9)
    cx7_payload_Bps = 50e9 * fs.catalog.part("infiniband").value
    assert row["kv_network_s"] == pytest.approx(total / 8 / cx7_payload_Bps + 1.5e-7, rel=1e-3)
    assert row["ttft_network_s"] == pytest.approx(row["prefill_network_s"] + row["kv_network_s"], rel=1e-12)


def test_kv_pairs_replicate_heads_when_tp_exceeds_them(two_servers: fs.Fabric) -> None:
    # llama3-8b has 8 KV heads; a prefill TP of 4 holds 2 heads per rank, a decode TP of 8 one each.
    sc = fs.Scenario(two_servers)
    sv = S.add_serving(sc, "llama3-8b", S.trace_requests([0.0], [100], [1]),
                       prefill=S.Pool(range(4), tp=4), decode=S.Pool(range(8, 16), tp=8))
    flows = sc.run().flows.to_pylist()
    assert [(r["src"], r["dst"]) for r in flows] == [(i // 2, 8 + i) for i in range(8)]
    assert sum(r["bytes"] for r in flows) == pytest.approx(S.kv_cache_bytes("llama3-8b", 100))
    assert sv.report(sc.run()).requests.num_rows == 1


def test_poisson_count_within_sampling_tolerance() -> None:
    rate, horizon = 200.0, 50.0
    mean = rate * horizon
    counts = [S.poisson_requests(rate, horizon, seed=s).n_requests for s in range(5)]
    for n in counts:
        assert abs(n - mean) < 5 * math.sqrt(mean)  # 5 standard deviations: fails by chance < 1e-6
    r = S.poisson_requests(rate, horizon, seed=0)
    gaps = np.diff(r.arrival_s)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.05)
    assert gaps.std() == pytest.approx(1 / rate, rel=0.05)  # exponential gaps: sd = mean
    assert r.arrival_s.min() >= 0 and r.arrival_s.max() < horizon
    assert r.prompt_tokens.mean() == pytest.approx(1024, rel=0.05)
    assert r.prompt_tokens.min() >= 1 and r.output_tokens.max() <= 8192


def test_tp_step_is_the_analytical_all_reduce(two_servers: fs.Fabric) -> None:
    # One request alone: batch 1 for all its steps, so its per-token network time is
    # 2 x layers TP all-reduces of hidden x 2 bytes, and that time is what the flow level gives.
    prefill, decode = pools16()
    sc = fs.Scenario(two_servers)
    sv = S.add_serving(sc, "llama3-8b", S.trace_requests([0.0], [64], [100]), prefill=prefill, decode=decode)
    row = sv.report(sc.run()).requests.to_pylist()[0]
    ranks = list(range(8, 16))
    one = fs.estimate(two_servers, "all_reduce", 4096 * 2, ranks).time_s
    assert row["per_token_network_s"] == pytest.approx(2 * 32 * one, rel=1e-9)
    sc2 = fs.Scenario(two_servers)
    sc2.add_collective("all_reduce", ranks, 4096 * 2)
    assert sc2.run().collectives.to_pylist()[0]["contention_s"] == pytest.approx(0.0, abs=1e-12)


def test_fifo_prefill_queue_and_policies(two_servers: fs.Fabric) -> None:
    # Three prompts at t=0 on one prefill instance wait for each other.
    sc = fs.Scenario(two_servers)
    req = S.trace_requests([0.0, 0.0, 0.0], [1000, 1000, 1000], [1, 1, 1])
    sv = S.add_serving(sc, "llama3-8b", req, prefill=S.Pool(range(8), tp=8), decode=S.Pool(range(8, 16), tp=8))
    t = sv.report(sc.run()).requests
    starts = t.column("prefill_start_s").to_pylist()
    ends = t.column("kv_start_s").to_pylist()
    assert starts[0] == 0 and starts[1] == pytest.approx(ends[0]) and starts[2] == pytest.approx(ends[1])
    # Least loaded sends a short prompt to the idle instance, round robin to the busy one.
    req = S.trace_requests([0.0, 0.0, 0.001], [8000, 10, 10], [1, 1, 1])
    pools = dict(prefill=S.Pool(range(4), tp=2), decode=S.Pool(range(8, 16), tp=8))
    rr = S.add_serving(fs.Scenario(two_servers), "llama3-8b", req, policy="round_robin", **pools)
    ll = S.add_serving(fs.Scenario(two_servers), "llama3-8b", req, policy="least_loaded", **pools)
    assert rr._f["prefill_instance"].tolist() == [0, 1, 0]
    assert ll._f["prefill_instance"].tolist() == [0, 1, 1]


# ---- determinism ---------------------------------------------------------------------------


def test_same_seed_same_output(two_servers: fs.Fabric) -> None:
    def report(seed: int) -> S.ServingReport:
        sc = fs.Scenario(two_servers)
        prefill, decode = pools16()
        sv = S.add_serving(sc, "llama3-70b", S.poisson_requests(40.0, 0.5, seed=seed), prefill=prefill, decode=decode)
        return sv.report(sc.run())

    a, b, c = report(3), report(3), report(4)
    assert a.requests.equals(b.requests) and a.percentiles.equals(b.percentiles)
    assert not a.requests.equals(c.requests)
    r1, r2 = S.poisson_requests(10.0, 5.0, seed=9), S.poisson_requests(10.0, 5.0, seed=9)
    for name in ("arrival_s", "prompt_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(r1, name), getattr(r2, name))


# ---- a neighbour -----------------------------------------------------------------------------


def test_a_training_neighbour_slows_the_kv_p99(forty_servers: fs.Fabric) -> None:
    prefill = S.Pool(np.arange(0, 32), tp=8)  # servers 0-3
    decode = S.Pool(np.arange(36 * 8, 40 * 8), tp=8)  # servers 36-39, on the other leaf of each rail
    neighbour = np.arange(4 * 8, 36 * 8).reshape(-1, 8)  # servers 4-35: one all-to-all per rail
    requests = S.poisson_requests(100.0, 1.0, seed=0)

    def report(with_neighbour: bool) -> S.ServingReport:
        sc = fs.Scenario(forty_servers, routing="ecmp")
        if with_neighbour:
            prev: list[int] = []
            for _ in range(12):  # back to back, chained, for longer than the requests arrive
                prev = [sc.add_collective("all_to_all", neighbour[:, r], "4GiB", after=prev, tag="neighbour")
                        for r in range(8)]
        sv = S.add_serving(sc, "llama3-70b", requests, prefill=prefill, decode=decode)
        return sv.report(sc.run())

    alone, beside = report(False), report(True)
    table = {(r["metric"], r["percentile"]): r for r in S.compare(alone, beside).to_pylist()}
    assert table[("kv_network_s", "p99")]["ratio"] > 1.1
    assert table[("ttft_network_s", "p90")]["ratio"] > 1.0
    # TP all-reduces stay inside each decode server's NVLink: the neighbour does not touch them
    # (the per-token time moves only as the decode intervals shift with the KV transfers).
    assert table[("per_token_network_s", "p99")]["ratio"] == pytest.approx(1.0, rel=1e-3)


def test_moe_expert_parallel_across_domains_is_probed(two_servers: fs.Fabric) -> None:
    # Mixtral's 8 experts over 8 GPUs of two servers: the EP all-to-all crosses the network.
    sc = fs.Scenario(two_servers)
    decode = S.Pool([4, 5, 6, 7, 12, 13, 14, 15], tp=1, ep=8)
    prefill = S.Pool([0, 1, 8, 9], tp=2)
    req = S.poisson_requests(50.0, 0.5, seed=2, output_tokens=S.TokenCounts("fixed", mean=50))
    sv = S.add_serving(sc, "mixtral-8x7b", req, prefill=prefill, decode=decode, ep_probe_interval_s=0.05)
    rep = sv.report(sc.run())
    assert rep.summary["n_ep_probes"] > 0
    # Two KV flows per request (each prefill TP rank sends its 4 heads to the one decode rank).
    assert sv.flow_ids.shape[0] == 2 * req.n_requests + rep.summary["n_ep_probes"] * 56
    tpot = rep.requests.column("per_token_network_s").to_numpy()
    alpha = 2 * 32 * fs.estimate(two_servers, "all_to_all", 1.0, decode.gpus).time_s
    assert np.all(tpot > alpha)


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan"), float("inf"), "fast"])
def test_bad_rate(rate: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"rate_per_s.*> 0"):
        S.poisson_requests(rate, 1.0)  # type: ignore[arg-type]


def test_bad_token_counts() -> None:
    with pytest.raises(InvalidArgumentError, match=r"prompt_tokens\[1\] must be a token count >= 1, got -5"):
        S.trace_requests([0.0, 1.0], [10, -5], [1, 1])
    with pytest.raises(InvalidArgumentError, match=r"output_tokens\[0\] must be a token count >= 0, got -1"):
        S.trace_requests([0.0], [10], [-1])
    with pytest.raises(InvalidArgumentError, match="non-decreasing"):
        S.trace_requests([1.0, 0.0], [10, 10], [1, 1])
    with pytest.raises(InvalidArgumentError, match="TokenCounts low"):
        S.TokenCounts("lognormal", mean=10, low=-3)
    with pytest.raises(InvalidArgumentError, match="TokenCounts mean"):
        S.TokenCounts("lognormal", mean=float("nan"))


@pytest.mark.parametrize("prefill, decode, message", [
    (S.Pool([], tp=8), S.Pool(range(8, 16), tp=8), "prefill pool is empty"),
    (S.Pool(range(8), tp=8), S.Pool(range(4, 12), tp=4), "overlap on 4 GPUs"),
    (S.Pool(range(6), tp=4), S.Pool(range(8, 16), tp=8), "6 GPUs is not a whole number of instances of 4"),
    (S.Pool(range(8), tp=3), S.Pool(range(8, 16), tp=8), "prefill.tp = 3 must divide"),
    (S.Pool(range(4, 12), tp=8), S.Pool(range(12, 16), tp=4), "TP group across NVLink domains"),
    (S.Pool(range(8), tp=8), S.Pool(range(8, 16), tp=8, ep=8), "no experts"),
    (S.Pool(range(8), tp=8), S.Pool([15, 16], tp=1), r"decode.gpus\[1\] = 16 is not a GPU of this fabric \(GPUs 0 to 15\)"),
])
def test_bad_pools_add_nothing(two_servers: fs.Fabric, prefill: S.Pool, decode: S.Pool, message: str) -> None:
    sc = fs.Scenario(two_servers)
    sc.add_delay(1.0)
    with pytest.raises(InvalidArgumentError, match=message):
        S.add_serving(sc, "llama3-8b", S.trace_requests([0.0], [10], [1]), prefill=prefill, decode=decode)
    assert sc.n_activities == 1


def test_bad_options_add_nothing(two_servers: fs.Fabric) -> None:
    prefill, decode = pools16()
    sc = fs.Scenario(two_servers)
    req = S.trace_requests([0.0], [10], [1])
    for kwargs, message in [({"policy": "random"}, "policy must be"), ({"kv_bytes_per_element": 0}, "kv_bytes_per_element"),
                            ({"prefill_efficiency": 1.5}, "prefill_efficiency"), ({"kv_shards": "two"}, "kv_shards"),
                            ({"decode_step_s": float("nan")}, "decode_step_s")]:
        with pytest.raises(InvalidArgumentError, match=message):
            S.add_serving(sc, "llama3-8b", req, prefill=prefill, decode=decode, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="requests must be"):
        S.add_serving(sc, "llama3-8b", [0.0], prefill=prefill, decode=decode)  # type: ignore[arg-type]
    assert sc.n_activities == 0
