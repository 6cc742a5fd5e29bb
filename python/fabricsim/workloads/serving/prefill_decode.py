"""Disaggregated prefill and decode pools put into a scenario (:func:`add_serving`): request
arrivals, KV-cache transfers simulated as flows, and the tensor- and expert-parallel
collectives of every token step (the serving package's docstring says what is simulated and
what is costed)."""

from __future__ import annotations

import heapq
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from ..._checks import choice, positive, room_for
from ...collectives import estimate
from ...exceptions import InvalidArgumentError
from ...fabrics import Fabric
from ...results import Result
from ...scenario import Scenario
from ..training import DEFAULT_COMPUTE_EFFICIENCY, HBM_EFFICIENCY, Model
from ..training import model as _model
from .pools import Pool, _checked_pool, _kv_bytes_per_token, _kv_pairs, _PoolPlan
from .report import ServingReport, _percentiles
from .requests import Requests

__all__ = ["add_serving", "Serving"]


Policy = Literal["round_robin", "least_loaded"]


_POLICIES = ("round_robin", "least_loaded")


def _group_cumcount(keys: np.ndarray, n_keys: int) -> np.ndarray:
    """For each element, how many earlier elements have the same key."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.searchsorted(sorted_keys, np.arange(n_keys))
    within = np.arange(keys.shape[0]) - starts[sorted_keys]
    out: np.ndarray = np.empty_like(within)
    out[order] = within
    return out


def _fifo(arrival: np.ndarray, service: np.ndarray, instance: np.ndarray, n: int) -> np.ndarray:
    """Start times of one-at-a-time, first-come-first-served instances (arrival order)."""
    start = np.empty_like(arrival)
    for i in range(n):
        idx = np.flatnonzero(instance == i)
        if idx.size == 0:
            continue
        a, s = arrival[idx], service[idx]
        before = np.concatenate(([0.0], np.cumsum(s)[:-1]))
        # start_k = max over j <= k of (a_j + work queued between j and k)
        start[idx] = np.maximum.accumulate(a - before) + before
    return start


class Serving:
    """Serving traffic added to a scenario by :func:`add_serving`: the schedule it planned
    and the ids of its flows. After ``scenario.run()``, :meth:`report` reads the result.

    Example::

        from fabricsim import serving
        sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
        sv = serving.add_serving(sc, "llama3-8b", serving.trace_requests([0.0], [100], [4]),
                                 prefill=serving.Pool(range(8), tp=8), decode=serving.Pool(range(8, 16), tp=8))
        sv.report(sc.run()).requests.num_rows   # 1
    """

    def __init__(self, **fields: Any) -> None:
        self._f = fields
        #: The model served.
        self.model: Model = fields["model"]
        #: The requests served.
        self.requests: Requests = fields["requests"]
        #: Activity ids of the flows added (KV transfers, then EP probes).
        self.flow_ids: np.ndarray = fields["flow_ids"]
        #: Decode step pace used for every decode instance (compute + idle network), seconds.
        self.decode_pace_s: float = fields["pace_s"]

    def report(self, result: Result) -> "ServingReport":
        """The per-request table and percentiles of the run ``result`` of the scenario this
        serving traffic was added to.

        Example::

            from fabricsim import serving
            sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
            sv = serving.add_serving(sc, "llama3-8b", serving.poisson_requests(50.0, 0.2, seed=0),
                                     prefill=serving.Pool(range(8), tp=8), decode=serving.Pool(range(8, 16), tp=8))
            report = sv.report(sc.run())
            report.summary   # requests, the decode pace, ...
        """
        if not isinstance(result, Result):
            raise InvalidArgumentError(f"result must be the fabricsim.Result of scenario.run(), got {type(result).__name__}")
        f = self._f
        n_req = self.requests.n_requests
        ids = self.flow_ids
        flows = result.flows
        fid = flows.column("flow_id").to_numpy()
        if ids.size:
            rows = np.searchsorted(fid, ids) if bool((np.diff(fid) > 0).all()) else \
                np.argsort(fid, kind="stable")[np.searchsorted(np.sort(fid), ids)]
            if rows.size and (rows.max() >= fid.shape[0] or not np.array_equal(fid[rows], ids)):
                raise InvalidArgumentError("result is not from the scenario this serving traffic was added to (its flows are missing)")
            finish = flows.column("finish_s").to_numpy(zero_copy_only=False)[rows]
            ready = flows.column("ready_s").to_numpy(zero_copy_only=False)[rows]
            status = flows.column("status")
            done = np.asarray(status.combine_chunks().indices.to_numpy(zero_copy_only=False) if status.num_chunks
                              else np.zeros(0, np.int32))
            dict_vals = status.combine_chunks().dictionary.to_pylist() if status.num_chunks else []
            ok_code = dict_vals.index("done") if "done" in dict_vals else -1
            ok = done[rows] == ok_code
            finish = np.where(ok, finish, np.nan)
        else:
            finish = ready = np.zeros(0)
        n_kv = f["n_kv_flows"]
        k = f["kv_pairs_simulated"]
        prefill_end = f["prefill_end_s"]
        kv_finish = finish[:n_kv].reshape(n_req, k).max(axis=1) if n_req else np.zeros(0)
        kv_s = kv_finish - prefill_end
        ttft = f["prefill_net_s"] + kv_s
        # Decode intervals as they ran: after the KV transfer, output_tokens steps at the pace.
        out_tok = self.requests.output_tokens
        d_start = np.where(np.isfinite(kv_finish), kv_finish, prefill_end)
        d_end = d_start + out_tok * self.decode_pace_s
        probes = f["probes"]
        probe_s = np.zeros(0)
        if probes is not None:
            pf = finish[n_kv:]
            pr = ready[n_kv:]
            seg = probes["flow_offsets"]
            probe_finish = np.maximum.reduceat(pf, seg[:-1]) if pf.size else np.zeros(0)
            probe_s = probe_finish - pr[seg[:-1]]
        tpot = np.full(n_req, np.nan)
        dec: _PoolPlan = f["decode"]
        inst = f["decode_instance"]
        tp_step = f["decode_tp_step"]
        for i in range(dec.n_instances):
            idx = np.flatnonzero(inst == i)
            if idx.size == 0:
                continue
            s, e = d_start[idx], d_end[idx]
            ss, es = np.sort(s), np.sort(e)
            cuts = [ss, es]
            p_t = p_b = p_m = None
            if probes is not None:
                mine = np.flatnonzero(probes["instance"] == i)
                p_t, p_b, p_m = probes["t_s"][mine], probes["batch"][mine], probe_s[mine]
                cuts.append(p_t)
            t = np.unique(np.concatenate(cuts))
            batch = np.searchsorted(ss, t, side="right") - np.searchsorted(es, t, side="right")
            step = tp_step(batch)
            if probes is not None:
                assert p_t is not None and p_b is not None and p_m is not None
                if p_t.size:
                    j = np.clip(np.searchsorted(p_t, t, side="right") - 1, 0, p_t.size - 1)
                    scale = np.where(p_b[j] > 0, batch / np.maximum(p_b[j], 1e-300), 0.0)
                    step = step + f["ep_alpha_s"] + np.nan_to_num(p_m[j], nan=0.0) * scale
                else:
                    step = step + f["ep_alpha_s"]
            else:
                step = step + f["decode_ep_step"](batch)
            step = np.where(batch > 0, step, 0.0)
            area = np.concatenate(([0.0], np.cumsum(step[:-1] * np.diff(t))))
            span = e - s
            integral = np.interp(e, t, area) - np.interp(s, t, area)
            tpot[idx] = np.where(span > 0, integral / np.where(span > 0, span, 1.0), np.nan)
        tpot = np.where(np.isfinite(kv_finish), tpot, np.nan)
        r = self.requests
        table = pa.table({
            "request_id": pa.array(np.arange(n_req, dtype=np.int64)),
            "arrival_s": pa.array(r.arrival_s),
            "prompt_tokens": pa.array(r.prompt_tokens),
            "output_tokens": pa.array(out_tok),
            "prefill_instance": pa.array(f["prefill_instance"]),
            "decode_instance": pa.array(inst),
            "prefill_start_s": pa.array(f["prefill_start_s"]),
            "kv_start_s": pa.array(prefill_end),
            "kv_bytes": pa.array(f["kv_bytes"]),
            "kv_network_s": pa.array(kv_s),
            "prefill_network_s": pa.array(f["prefill_net_s"]),
            "ttft_network_s": pa.array(ttft),
            "per_token_network_s": pa.array(tpot),
            "decode_start_s": pa.array(d_start),
            "decode_end_s": pa.array(d_end),
        })
        return ServingReport(table, _percentiles(table), {
            "n_requests": n_req,
            "decode_pace_s": self.decode_pace_s,
            "decode_compute_step_s": f["decode_step_s"],
            "prefill_utilization": f["prefill_utilization"],
            "n_kv_flows": int(n_kv),
            "n_ep_probes": 0 if probes is None else int(probes["t_s"].shape[0]),
            "n_failed_kv": int(np.count_nonzero(~np.isfinite(kv_finish))),
        })


def add_serving(
    scenario: Scenario,
    model: str | Model,
    requests: Requests,
    *,
    prefill: Pool,
    decode: Pool,
    policy: str = "round_robin",
    kv_bytes_per_element: float = 2.0,
    activation_bytes_per_element: float = 2.0,
    prefill_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY,
    decode_step_s: float | None = None,
    ep_probe_interval_s: float = 0.1,
    kv_shards: str = "all",
    tag: str = "serving",
) -> Serving:
    """Adds disaggregated serving of ``model`` to ``scenario``: ``requests`` go to the
    ``prefill`` pool's instances, then their KV caches move as flows to the ``decode`` pool's
    (the module's docstring states what is simulated, what is costed and the bounds). Returns
    a :class:`Serving`; run the scenario, then ``serving.report(result)``.

    ``policy`` ("round_robin" or "least_loaded") picks instances in both pools: round robin in
    arrival order (prefill) and in prefill-end order (decode); least loaded is the prefill
    instance free first (a central first-come-first-served queue) and the decode instance
    holding fewest requests then. ``kv_bytes_per_element``: KV-cache bytes per element (2:
    BF16/FP16; 1: FP8); ``activation_bytes_per_element``: bytes of what TP and EP
    collectives move. ``prefill_efficiency``: fraction of the GPUs' dense BF16 peak a
    prefill reaches (default the training compute model's, 0.50, from the layers measured for
    it, docs/sources.md 7.2: a prefill is a forward pass of the same GEMMs). ``decode_step_s``: compute
    time of one decode step (default: BF16 weights per GPU / (HBM bandwidth x 0.8, the
    training module's streaming-kernel efficiency, [assumed] to hold for reading weights)). ``ep_probe_interval_s``: time
    between simulated EP all-to-all probes of each decode instance whose experts span NVLink
    domains. ``kv_shards``: "all" (one flow per TP rank pair, exact) or "one" (the first pair
    only; exact where the rails are symmetric). ``tag`` labels the flows.

    Everything is checked before anything is added, and the flows go in with one
    ``add_flows`` call: a bad argument leaves the scenario as it was.

    Example::

        from fabricsim import serving
        sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
        sv = serving.add_serving(sc, "llama3-70b", serving.poisson_requests(20.0, 0.5, seed=0),
                                 prefill=serving.Pool(range(8), tp=8), decode=serving.Pool(range(8, 16), tp=8))
        report = sv.report(sc.run())   # its requests, percentiles and summary
    """
    if not isinstance(scenario, Scenario):
        raise InvalidArgumentError(f"scenario must be a fabricsim.Scenario, got {type(scenario).__name__}")
    fabric = scenario.topology
    if not isinstance(fabric, Fabric) or fabric.n_gpus == 0:
        raise InvalidArgumentError("scenario must be on a generated fabric with GPUs (fs.cluster, fs.hgx_h100, ...)")
    m = _model(model)
    if not isinstance(requests, Requests):
        raise InvalidArgumentError(
            f"requests must be fabricsim.serving.Requests (poisson_requests or trace_requests), got {type(requests).__name__}")
    choice("policy", policy, _POLICIES)
    choice("kv_shards", kv_shards, ("all", "one"))
    kv_b = positive("kv_bytes_per_element", kv_bytes_per_element)
    act_b = positive("activation_bytes_per_element", activation_bytes_per_element)
    eff = positive("prefill_efficiency", prefill_efficiency)
    if eff > 1:
        raise InvalidArgumentError(f"prefill_efficiency must be in (0, 1] (a fraction of peak), got {prefill_efficiency!r}")
    probe_dt = positive("ep_probe_interval_s", ep_probe_interval_s)
    if not isinstance(tag, str):
        raise InvalidArgumentError(f"tag must be a string, got {type(tag).__name__}")
    pre = _checked_pool("prefill", prefill, fabric, m)
    dec = _checked_pool("decode", decode, fabric, m)
    both = np.intersect1d(pre.gpus.ravel(), dec.gpus.ravel())
    if both.size:
        raise InvalidArgumentError(
            f"prefill and decode pools overlap on {both.size} GPUs (first: GPU {int(both[0])}): disaggregated pools must be disjoint")
    gpu = getattr(fabric, "_parts", {}).get("gpu") or {}
    peak = gpu.get("bf16_dense_flop_per_s")
    hbm = gpu.get("hbm_Bps")
    if peak is None or (decode_step_s is None and hbm is None):
        raise InvalidArgumentError("this fabric's GPU has no bf16_dense_flop_per_s or hbm_Bps in the catalog: give decode_step_s")
    if decode_step_s is None:
        assert hbm is not None
        step_s = (2.0 * m.n_params / dec.gpus.shape[1]) / (float(hbm) * HBM_EFFICIENCY)
    else:
        step_s = positive("decode_step_s", decode_step_s)

    n = requests.n_requests
    arrival = requests.arrival_s
    p_tok = requests.prompt_tokens
    out_tok = requests.output_tokens
    n_moe = m.n_moe_layers
    k_exp = m.experts_per_token

    # ---- costed collectives (analytical, cached by size)
    memo: dict[tuple[str, bytes, float], float] = {}

    def costed(op: str, ranks: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Time of ``op`` on ``ranks`` at each size, on an idle fabric (one estimate per size)."""
        uniq, inv = np.unique(sizes, return_inverse=True)
        key0 = (op, np.ascontiguousarray(ranks, dtype=np.int64).tobytes())  # the whole communicator
        t = np.empty(uniq.shape[0])
        for j, s in enumerate(uniq.tolist()):
            key = (*key0, s)
            if key not in memo:
                memo[key] = estimate(fabric, op, s, ranks, cost_model=scenario.cost_model).time_s if s > 0 else 0.0
            t[j] = memo[key]
        return t[inv].reshape(np.shape(sizes))

    def n_allreduce(plan: _PoolPlan) -> int:
        return 2 * m.layers - (n_moe if plan.ep > 1 else 0) if plan.tp > 1 else 0

    # Prefill: compute from FLOPs, TP all-reduces and (idle) EP all-to-alls.
    active = sum(m.layer_active_params(i) for i in range(m.layers))
    pf = p_tok.astype(np.float64)
    flops = 2.0 * pf * active + m.layers * m.attention_core_flops(pf) + m.logits_forward_flops(pf)  # type: ignore[arg-type]
    with np.errstate(over="ignore"):
        compute_s = np.asarray(flops) / (pre.gpus.shape[1] * peak * eff)
    if not np.isfinite(compute_s).all():  # an efficiency of 5e-324
        raise InvalidArgumentError(
            f"prefill_efficiency={eff!r} makes a prefill take longer than a double holds: expected a fraction of peak "
            "in (0, 1] that a prefill's FLOPs divide by")
    pre_net = np.zeros(n)
    if n and pre.tp > 1:
        pre_net += n_allreduce(pre) * costed("all_reduce", pre.gpus[0, :pre.tp], pf * m.hidden * act_b)
    if n and pre.ep > 1:
        per_rank = pf * k_exp * m.hidden * act_b / pre.ep
        pre_net += 2 * n_moe * costed("all_to_all", pre.gpus[0], per_rank)
    service = compute_s + pre_net
    if policy == "round_robin":
        p_inst = np.arange(n, dtype=np.int64) % pre.n_instances
        p_start = _fifo(arrival, service, p_inst, pre.n_instances)
    else:
        p_inst = np.empty(n, dtype=np.int64)
        p_start = np.empty(n)
        heap = [(0.0, i) for i in range(pre.n_instances)]
        for j in range(n):
            free, i = heap[0]
            st = free if free > arrival[j] else float(arrival[j])
            p_inst[j], p_start[j] = i, st
            heapq.heapreplace(heap, (st + float(service[j]), i))
    p_end = p_start + service
    p_group = _group_cumcount(p_inst, pre.n_instances) % pre.n_groups

    # Decode: TP and (in-domain) EP step times by batch, and the pace.
    def tp_step(batch: np.ndarray) -> np.ndarray:
        b = np.asarray(batch, dtype=np.float64)
        if dec.tp == 1:
            return np.zeros(b.shape)
        per_group = b / dec.n_groups
        return n_allreduce(dec) * costed("all_reduce", dec.gpus[0, :dec.tp], per_group * m.hidden * act_b)

    def ep_step(batch: np.ndarray) -> np.ndarray:
        b = np.asarray(batch, dtype=np.float64)
        if dec.ep == 1:
            return np.zeros(b.shape)
        return 2 * n_moe * costed("all_to_all", dec.gpus[0], b / dec.ep * k_exp * m.hidden * act_b)

    horizon = requests.horizon_s
    rate = n / horizon if n > 1 and horizon > 0 else 0.0
    mean_out = float(out_tok.mean()) if n else 0.0
    pace = step_s
    for _ in range(4):  # Little's law: mean batch = arrival rate per instance x time in decode
        b_little = rate / dec.n_instances * mean_out * pace if rate else n / dec.n_instances
        b_mean = np.array([max(1.0, float(round(b_little)))])
        pace = step_s + float(tp_step(b_mean)[0] + ep_step(b_mean)[0])

    order = np.argsort(p_end, kind="stable")
    if policy == "round_robin":
        d_inst = np.empty(n, dtype=np.int64)
        d_inst[order] = np.arange(n, dtype=np.int64) % dec.n_instances
    else:
        d_inst = np.empty(n, dtype=np.int64)
        counts = np.zeros(dec.n_instances, dtype=np.int64)
        ends: list[tuple[float, int]] = []
        for j in order.tolist():
            t0 = float(p_end[j])
            while ends and ends[0][0] <= t0:
                counts[heapq.heappop(ends)[1]] -= 1
            i = int(np.argmin(counts))
            d_inst[j] = i
            counts[i] += 1
            heapq.heappush(ends, (t0 + float(out_tok[j]) * pace, i))
    d_group = np.empty(n, dtype=np.int64)
    d_group[order] = _group_cumcount(d_inst[order], dec.n_instances) % dec.n_groups

    # ---- KV flows
    per_token = _kv_bytes_per_token(m, kv_b)
    kv_bytes = per_token * pf
    ps, pd, frac = _kv_pairs(m, pre.tp, dec.tp)
    if kv_shards == "one":
        ps, pd, frac = ps[:1], pd[:1], frac[:1]
    k = ps.shape[0]
    src = pre.gpus[p_inst[:, None], p_group[:, None] * pre.tp + ps[None, :]].ravel()
    dst = dec.gpus[d_inst[:, None], d_group[:, None] * dec.tp + pd[None, :]].ravel()
    size = (kv_bytes[:, None] * frac[None, :]).ravel()
    start = np.repeat(p_end, k)

    # ---- EP probes (decode experts across NVLink domains)
    probes: dict[str, Any] | None = None
    ep_alpha = 0.0
    if dec.ep > 1 and not dec.ep_in_domain:
        ep_alpha = 2 * n_moe * estimate(fabric, "all_to_all", 1.0, dec.gpus[0], cost_model=scenario.cost_model).time_s
        nominal_start = p_end
        nominal_end = p_end + out_tok * pace
        t_lo = float(nominal_start.min()) if n else 0.0
        t_hi = float(nominal_end.max()) if n else 0.0
        # The grid, two searches and a mask over it, and each instance's probes kept: before any
        # is made (a probe every 5e-324 s is a grid of inf).
        room_for(f"EP probes every {probe_dt:g} s over {t_hi - t_lo:g} s of decode", (t_hi - t_lo) / probe_dt,
                 40.0 + 16.0 * dec.n_instances)
        grid = np.arange(t_lo, t_hi, probe_dt) if t_hi > t_lo else np.zeros(0)
        p_t, p_i, p_b = [], [], []
        for i in range(dec.n_instances):
            mine = d_inst == i
            ss, es = np.sort(nominal_start[mine]), np.sort(nominal_end[mine])
            b = np.searchsorted(ss, grid, side="right") - np.searchsorted(es, grid, side="right")
            keep = b > 0
            p_t.append(grid[keep])
            p_b.append(b[keep].astype(np.float64))
            p_i.append(np.full(int(keep.sum()), i, dtype=np.int64))
        pt, pi, pb = np.concatenate(p_t), np.concatenate(p_i), np.concatenate(p_b)
        e = dec.ep
        a_idx, b_idx = np.nonzero(~np.eye(e, dtype=bool))
        pair_bytes = 2 * n_moe * (pb / e) * k_exp * m.hidden * act_b / e  # per pair, every MoE layer of the step
        ranks = dec.gpus[pi]
        src = np.concatenate([src, ranks[:, a_idx].ravel()])
        dst = np.concatenate([dst, ranks[:, b_idx].ravel()])
        size = np.concatenate([size, np.repeat(pair_bytes, a_idx.size)])
        start = np.concatenate([start, np.repeat(pt, a_idx.size)])
        probes = {"t_s": pt, "instance": pi, "batch": pb,
                  "flow_offsets": np.arange(pt.size + 1, dtype=np.int64) * a_idx.size}

    ids = scenario.add_flows(src, dst, size, start_s=start, tag=tag) if src.size else np.zeros(0, dtype=np.int64)
    span = float(p_end.max() - arrival.min()) if n else 0.0
    busy = float(service.sum())
    return Serving(
        model=m, requests=requests, flow_ids=ids, pace_s=pace, decode_step_s=step_s,
        n_kv_flows=n * k, kv_pairs_simulated=k, prefill_end_s=p_end, prefill_start_s=p_start,
        prefill_net_s=pre_net, prefill_instance=p_inst, decode_instance=d_inst, decode=dec,
        decode_tp_step=tp_step, decode_ep_step=ep_step, ep_alpha_s=ep_alpha, probes=probes, kv_bytes=kv_bytes,
        prefill_utilization=busy / (pre.n_instances * span) if span > 0 else 0.0,
    )
