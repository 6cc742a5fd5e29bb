"""Inference serving traffic: disaggregated prefill and decode pools on a fabric,
with request arrivals, KV-cache transfers simulated as flows and the tensor- and
expert-parallel collectives of every token step.

The work is put into an existing :class:`~fabricsim.Scenario`, so whatever else the user added
to it (a training neighbour on other GPUs) shares the fabric with it::

    import fabricsim as fs
    from fabricsim import serving

    fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    prefill, decode = serving.carve_pools(fabric, prefill_instances=2, decode_instances=2, tp=8)
    requests = serving.poisson_requests(rate_per_s=50, horizon_s=1.0, seed=1)
    sc = fs.Scenario(fabric)
    sv = serving.add_serving(sc, "llama3-70b", requests, prefill=prefill, decode=decode)
    report = sv.report(sc.run())
    print(report.percentiles)          # network part of TTFT and TPOT: p50, p90, p99

What is simulated and what is costed (the bounds are those of the model, stated once here):

* **KV-cache transfer** (exact at flow level): one flow per (prefill TP rank, decode TP rank)
  pair that holds a KV head, carrying that head's share of ``layers x kv_heads x head_dim x 2
  x kv_bytes_per_element x prompt_tokens`` (MLA models: the latent, ``layers x (kv_lora_rank
  + qk_rope_head_dim) x bytes x tokens``, split evenly over the ranks), started when the
  request's prefill ends. Its network time (``finish - ready``, path latency included) is
  what the max-min engine gives it beside everything else in the scenario. The whole KV
  cache moves after the prefill (no layer-by-layer overlap with the prefill compute).
  ``kv_shards="one"`` simulates only the first rank pair's flow and gives its time to the
  request: exact where the rails are symmetric (a rail-optimised fabric, every TP rank on its
  own rail, adaptive routing, neighbour traffic alike on every rail), an approximation
  otherwise, and then the other rails carry no serving load.
* **Tensor-parallel all-reduces** (exact, costed): two per layer per step (attention output,
  MLP output; one where an expert-parallel MoE layer replaces the MLP's), each of
  ``tokens x hidden x activation_bytes_per_element``, timed by :func:`fabricsim.estimate`
  on the TP group. A TP group must lie inside one NVLink domain; there its collectives use
  only the group's own GPU-switch links and NVLS engines, which KV transfers (GPU to NIC)
  and other GPUs' traffic never touch, so the flow-level time equals the analytical one.
* **Expert-parallel all-to-alls** of a MoE model (dispatch and combine per MoE layer, each
  rank sending ``tokens/ep x experts_per_token x hidden x bytes`` spread evenly over the ep
  ranks: uniform expert routing, an assumption). Inside one NVLink domain: costed exactly as
  the TP all-reduces. Across domains (decode): every ``ep_probe_interval_s`` each decode
  instance's step is simulated as one *probe* all-to-all on the fabric, carrying the bytes of
  all ``2 x n_moe_layers`` all-to-alls of the step at once; a step's EP time is then
  ``2 x n_moe_layers x alpha`` (the estimate's fixed time of one all-to-all) plus the latest
  probe's measured time scaled by the step's batch over the probe's batch. Exact at the probe
  for a background that stays constant during the step; between probes the background is
  taken as it was at the last probe (the error is bounded by how much the contention changes
  within one interval). A prefill's EP all-to-alls are costed on an idle fabric (no
  contention) wherever they run.
* **Compute and scheduling** (assumptions, not network): a prefill instance runs one prompt
  at a time, first come first served, for ``forward FLOPs / (GPUs x peak BF16 x
  prefill_efficiency)`` plus its TP/EP time; a decode instance batches continuously and every
  request it holds advances one token per step of ``decode_step_s`` (default: the instance's
  BF16 weights per GPU read once from HBM at 80% of its bandwidth) plus the step's network
  time at the mean batch (Little's law, on an idle fabric). The step's pace is fixed, not fed
  back from the simulated network time, so a request's decode interval is ``output_tokens x
  pace`` after its KV transfer ends; the batch over time follows from those intervals.

Results (:class:`ServingReport`): per request, the network part of time to first token
(prefill TP/EP time plus the KV transfer) and of time per output token (the mean, over the
request's decode interval, of the step's TP and EP time), and their percentiles.
"""

from .pools import Pool, carve_pools, kv_cache_bytes
from .prefill_decode import Serving, add_serving
from .report import ServingReport, compare
from .requests import DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS, Requests, TokenCounts, poisson_requests, trace_requests

__all__ = [
    "TokenCounts",
    "DEFAULT_PROMPT_TOKENS",
    "DEFAULT_OUTPUT_TOKENS",
    "Requests",
    "poisson_requests",
    "trace_requests",
    "Pool",
    "carve_pools",
    "kv_cache_bytes",
    "add_serving",
    "Serving",
    "ServingReport",
    "compare",
]
