"""Inference serving traffic (issue 27): disaggregated prefill and decode pools on a fabric,
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

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from ..._checks import COUNT, integer, integers, real, shown
from ...collectives import estimate
from ...exceptions import InvalidArgumentError
from ...fabrics import Fabric
from ...results import Result
from ...scenario import Scenario
from ..training.step import DEFAULT_COMPUTE_EFFICIENCY, HBM_EFFICIENCY, Model
from ..training.step import model as _model

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

Policy = Literal["round_robin", "least_loaded"]
_POLICIES = ("round_robin", "least_loaded")


def _positive(name: str, value: Any, *, zero: bool = False) -> float:
    """A finite real number > 0 (>= 0 with ``zero``), else an error naming it."""
    x = real(value)
    ok = x is not None and math.isfinite(x) and (x >= 0 if zero else x > 0)
    if not ok:
        bound = ">= 0" if zero else "> 0"
        raise InvalidArgumentError(f"{name} must be a finite number {bound}, got {type(value).__name__} {shown(value)}")
    assert x is not None
    return x


# ------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenCounts:
    """A distribution of token counts per request.

    ``kind``: "lognormal" (arithmetic mean ``mean``, log-space spread ``sigma``), "fixed"
    (every request ``mean`` tokens) or "uniform" (integers in ``[low, high]``). Samples are
    rounded to whole tokens and clipped to ``[low, high]`` (``high=None``: no upper bound),
    which moves a lognormal's mean slightly.

    Example::

        import numpy as np
        from fabricsim import serving
        serving.TokenCounts("fixed", mean=512).sample(np.random.default_rng(0), 3).tolist()   # [512, 512, 512]
    """

    kind: str = "lognormal"
    mean: float = 1024.0
    sigma: float = 1.0
    low: int = 1
    high: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("lognormal", "fixed", "uniform"):
            raise InvalidArgumentError(f"TokenCounts kind must be 'lognormal', 'fixed' or 'uniform', got {self.kind!r}")
        _positive("TokenCounts mean", self.mean, zero=self.kind == "fixed")
        _positive("TokenCounts sigma", self.sigma, zero=True)
        integer("TokenCounts low (tokens, >= 0)", self.low, (0, 2**62))
        if self.high is not None:
            integer("TokenCounts high (tokens)", self.high, (self.low, 2**62))
        elif self.kind == "uniform":
            raise InvalidArgumentError("TokenCounts kind 'uniform' needs high (the largest count), got None")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` token counts (int64) drawn with ``rng``.

        Example::

            import numpy as np
            from fabricsim import serving
            serving.TokenCounts("uniform", low=1, high=4).sample(np.random.default_rng(0), 2).shape   # (2,)
        """
        hi = np.inf if self.high is None else self.high
        if self.kind == "fixed":
            x = np.full(n, float(self.mean))
        elif self.kind == "uniform":
            assert self.high is not None
            return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)
        else:
            mu = math.log(self.mean) - self.sigma**2 / 2  # so that the arithmetic mean is ``mean``
            x = rng.lognormal(mu, self.sigma, size=n)
        counts: np.ndarray = np.clip(np.rint(x), self.low, hi).astype(np.int64)
        return counts


#: Prompt lengths when none are given: lognormal, mean 1,024 tokens, sigma 1.0, 1 to 32,768.
#: [assumed] a long-tailed chat/RAG mix; give a trace or another TokenCounts for a workload.
DEFAULT_PROMPT_TOKENS = TokenCounts("lognormal", mean=1024.0, sigma=1.0, low=1, high=32768)
#: Output lengths when none are given: lognormal, mean 256 tokens, sigma 1.0, 1 to 8,192.
#: [assumed] chat answers; give a trace or another TokenCounts for a workload.
DEFAULT_OUTPUT_TOKENS = TokenCounts("lognormal", mean=256.0, sigma=1.0, low=1, high=8192)


@dataclass(frozen=True, eq=False)
class Requests:
    """Requests to serve: ``arrival_s`` (seconds, non-decreasing), ``prompt_tokens`` (>= 1)
    and ``output_tokens`` (>= 0, the tokens the decode pool makes) per request; request ``i``
    is row ``i``. Build with :func:`poisson_requests` or :func:`trace_requests`.

    Example::

        from fabricsim import serving
        r = serving.trace_requests([0.0, 0.5], [100, 200], [10, 20])
        r.n_requests, r.horizon_s   # (2, 0.5)
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    @property
    def n_requests(self) -> int:
        """How many requests."""
        return int(self.arrival_s.shape[0])

    @property
    def horizon_s(self) -> float:
        """The last arrival (0 for none)."""
        return float(self.arrival_s[-1]) if self.n_requests else 0.0

    def __repr__(self) -> str:
        return f"Requests(n_requests={self.n_requests}, horizon_s={self.horizon_s:.6g})"


def poisson_requests(
    rate_per_s: float,
    horizon_s: float,
    *,
    seed: int = 0,
    prompt_tokens: TokenCounts = DEFAULT_PROMPT_TOKENS,
    output_tokens: TokenCounts = DEFAULT_OUTPUT_TOKENS,
) -> Requests:
    """Poisson arrivals at ``rate_per_s`` over ``[0, horizon_s)``, with token counts drawn
    from ``prompt_tokens`` and ``output_tokens`` (see :data:`DEFAULT_PROMPT_TOKENS` and
    :data:`DEFAULT_OUTPUT_TOKENS` for the assumed defaults). One ``numpy.random.Generator``
    seeded with ``seed`` draws everything: the same seed gives identical requests. The
    count is Poisson(rate x horizon) and, given it, the arrival times are uniform, sorted.

    Example::

        from fabricsim import serving
        r = serving.poisson_requests(100.0, 2.0, seed=3)
        r.n_requests   # 176: drawn from Poisson(100 x 2), the same for the same seed
    """
    rate = _positive("rate_per_s (requests per second)", rate_per_s)
    horizon = _positive("horizon_s (seconds)", horizon_s)
    for name, dist in (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens)):
        if not isinstance(dist, TokenCounts):
            raise InvalidArgumentError(f"{name} must be a fabricsim.serving.TokenCounts, got {type(dist).__name__}")
    if prompt_tokens.low < 1:
        raise InvalidArgumentError(f"prompt_tokens low must be >= 1 (a prompt has a token), got {prompt_tokens.low}")
    rng = np.random.default_rng(integer("seed", seed, (0, 2**64)))
    n = int(rng.poisson(rate * horizon))
    arrivals = np.sort(rng.uniform(0.0, horizon, size=n))
    return Requests(arrivals, prompt_tokens.sample(rng, n), output_tokens.sample(rng, n))


def trace_requests(arrival_s: Any, prompt_tokens: Any, output_tokens: Any) -> Requests:
    """Requests from a trace: one arrival time (seconds, finite, >= 0, non-decreasing), prompt
    token count (>= 1) and output token count (>= 0) per request, as sequences or arrays of
    one length.

    Example::

        from fabricsim import serving
        serving.trace_requests([0.0, 0.1, 0.1], [512, 64, 2048], [128, 1, 0]).n_requests   # 3
    """
    a = np.asarray(arrival_s, dtype=np.float64) if not isinstance(arrival_s, np.ndarray) else arrival_s.astype(np.float64)
    if a.ndim != 1:
        raise InvalidArgumentError(f"arrival_s must be a 1-D sequence of times in seconds, got shape {a.shape}")
    bad = np.flatnonzero(~np.isfinite(a) | (a < 0))
    if bad.size:
        raise InvalidArgumentError(f"arrival_s[{bad[0]}] must be a finite time >= 0 s, got {a[bad[0]]!r}")
    down = np.flatnonzero(np.diff(a) < 0)
    if down.size:
        raise InvalidArgumentError(
            f"arrival_s must be non-decreasing (sorted by arrival), got arrival_s[{down[0] + 1}]={a[down[0] + 1]!r} "
            f"before arrival_s[{down[0]}]={a[down[0]]!r}")
    p = integers("prompt_tokens", prompt_tokens)
    o = integers("output_tokens", output_tokens)
    for name, arr, low in (("prompt_tokens", p, 1), ("output_tokens", o, 0)):
        if arr.shape[0] != a.shape[0]:
            raise InvalidArgumentError(f"{name} has {arr.shape[0]} counts for {a.shape[0]} arrivals: give one per request")
        under = np.flatnonzero(arr < low)
        if under.size:
            raise InvalidArgumentError(f"{name}[{under[0]}] must be a token count >= {low}, got {int(arr[under[0]])}")
    return Requests(a.copy(), p.copy(), o.copy())


# ------------------------------------------------------------------------------------------
# Pools
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pool:
    """A pool of identical serving instances on ``gpus`` (GPU ids, in order): each instance
    has ``tp`` GPUs (tensor parallel), or, for a MoE model with ``ep > 1``, ``ep`` GPUs with
    the experts spread over all of them and the attention data parallel over ``ep / tp``
    groups of ``tp`` (``tp`` must divide ``ep``). Consecutive GPUs make an instance.

    Example::

        from fabricsim import serving
        serving.Pool(range(16), tp=8).instance_size   # 8: two instances of TP 8
    """

    gpus: Any
    tp: int = 1
    ep: int = 1

    @property
    def instance_size(self) -> int:
        """GPUs per instance: ``max(tp, ep)``."""
        return max(int(self.tp), int(self.ep))


def carve_pools(
    fabric: Fabric,
    *,
    prefill_instances: int,
    decode_instances: int,
    tp: int = 8,
    ep: int = 1,
    decode_tp: int | None = None,
    decode_ep: int | None = None,
    gpus: Any = None,
) -> tuple[Pool, Pool]:
    """A prefill and a decode :class:`Pool` carved from ``gpus`` (default: every GPU of
    ``fabric``, in order): the first ``prefill_instances`` instances of ``max(tp, ep)`` GPUs
    for prefill, the next ``decode_instances`` instances for decode (``decode_tp``,
    ``decode_ep``: default as prefill).

    Example::

        from fabricsim import serving
        f = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
        prefill, decode = serving.carve_pools(f, prefill_instances=1, decode_instances=3)
        decode.gpus[:2].tolist()   # [8, 9]: decode starts after the prefill instance
    """
    if not isinstance(fabric, Fabric):
        raise InvalidArgumentError(f"fabric must be a fabricsim.Fabric (a generated fabric), got {type(fabric).__name__}")
    pool_gpus = fabric.gpus if gpus is None else integers("gpus", gpus)
    n_p = integer("prefill_instances", prefill_instances, COUNT)
    n_d = integer("decode_instances", decode_instances, COUNT)
    dtp = tp if decode_tp is None else decode_tp
    dep = ep if decode_ep is None else decode_ep
    size_p = max(integer("tp", tp, COUNT), integer("ep", ep, COUNT))
    size_d = max(integer("decode_tp", dtp, COUNT), integer("decode_ep", dep, COUNT))
    need = n_p * size_p + n_d * size_d
    if need > pool_gpus.shape[0]:
        raise InvalidArgumentError(
            f"{n_p} prefill instances of {size_p} GPUs and {n_d} decode instances of {size_d} need {need} GPUs, "
            f"but gpus has {pool_gpus.shape[0]}")
    cut = n_p * size_p
    return (Pool(pool_gpus[:cut].copy(), tp, ep), Pool(pool_gpus[cut:need].copy(), dtp, dep))


def kv_cache_bytes(model: str | Model, tokens: Any, *, kv_bytes_per_element: float = 2.0) -> Any:
    """Bytes of the KV cache of ``tokens`` tokens (a number or an array): ``layers x kv_heads
    x head_dim x 2 (K and V) x kv_bytes_per_element x tokens``; for multi-head latent
    attention (DeepSeek, ``kv_lora_rank`` set), the latent: ``layers x (kv_lora_rank +
    qk_rope_head_dim) x kv_bytes_per_element x tokens``.

    Example::

        from fabricsim import serving
        serving.kv_cache_bytes("llama3-70b", 1)   # 327680.0 = 80 layers x 8 KV heads x 128 x 2 x 2 bytes
    """
    per_token = _kv_bytes_per_token(_model(model), _positive("kv_bytes_per_element", kv_bytes_per_element))
    if np.ndim(tokens) == 0:
        return per_token * float(tokens)
    return per_token * np.asarray(tokens, dtype=np.float64)


def _kv_bytes_per_token(m: Model, bytes_per_element: float) -> float:
    if m.kv_lora_rank:
        return float(m.layers * (m.kv_lora_rank + m.qk_rope_head_dim)) * bytes_per_element
    assert m.head_dim is not None
    return float(m.layers * m.kv_heads * m.head_dim * 2) * bytes_per_element


def _kv_pairs(m: Model, tp_p: int, tp_d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prefill rank, decode rank, fraction of a token's KV bytes) for every pair of TP ranks
    that exchange KV heads: each KV head goes from a prefill rank holding it to every decode
    rank holding it (heads are replicated where TP exceeds the KV heads, as vLLM does)."""
    if m.kv_lora_rank:  # the latent has no heads: split it evenly over the rank pairs
        k = min(tp_p, tp_d)
        return np.arange(k), np.arange(k), np.full(k, 1.0 / k)
    h_n = m.kv_heads
    pairs: dict[tuple[int, int], float] = {}
    for h in range(h_n):
        src_holders = [h // (h_n // tp_p)] if tp_p <= h_n else list(range(h * tp_p // h_n, (h + 1) * tp_p // h_n))
        dst_holders = [h // (h_n // tp_d)] if tp_d <= h_n else list(range(h * tp_d // h_n, (h + 1) * tp_d // h_n))
        for i, d in enumerate(dst_holders):
            s = src_holders[i % len(src_holders)]
            pairs[(s, d)] = pairs.get((s, d), 0.0) + 1.0 / h_n
    keys = sorted(pairs)
    return (np.array([k[0] for k in keys]), np.array([k[1] for k in keys]), np.array([pairs[k] for k in keys]))


@dataclass
class _PoolPlan:
    name: str
    gpus: np.ndarray  # (n_instances, instance_size)
    tp: int
    ep: int
    ep_in_domain: bool

    @property
    def n_instances(self) -> int:
        return int(self.gpus.shape[0])

    @property
    def n_groups(self) -> int:
        return int(self.gpus.shape[1]) // self.tp


def _checked_pool(name: str, pool: Any, fabric: Fabric, m: Model) -> _PoolPlan:
    if not isinstance(pool, Pool):
        raise InvalidArgumentError(f"{name} must be a fabricsim.serving.Pool(gpus, tp, ep), got {type(pool).__name__}")
    if isinstance(pool.gpus, (set, frozenset)):
        raise InvalidArgumentError(f"{name}.gpus must be GPU ids in order (a list or array), got a set")
    gpus = integers(f"{name}.gpus", list(pool.gpus) if not isinstance(pool.gpus, np.ndarray) else pool.gpus)
    tp = integer(f"{name}.tp", pool.tp, COUNT)
    ep = integer(f"{name}.ep", pool.ep, COUNT)
    if gpus.shape[0] == 0:
        raise InvalidArgumentError(f"{name} pool is empty: give it at least one instance of {max(tp, ep)} GPUs")
    outside = np.flatnonzero((gpus < 0) | (gpus >= fabric.n_gpus))
    if outside.size:
        raise InvalidArgumentError(
            f"{name}.gpus[{outside[0]}] = {int(gpus[outside[0]])} is not a GPU of this fabric (GPUs 0 to {fabric.n_gpus - 1})")
    uniq, counts = np.unique(gpus, return_counts=True)
    if (counts > 1).any():
        raise InvalidArgumentError(f"{name}.gpus lists GPU {int(uniq[counts > 1][0])} more than once")
    if ep > 1:
        if not m.is_moe:
            raise InvalidArgumentError(f"{name}.ep = {ep} but model {m.name!r} has no experts: expert parallelism needs a MoE model")
        if ep % tp:
            raise InvalidArgumentError(f"{name}.tp = {tp} must divide {name}.ep = {ep} (attention groups of tp GPUs in an ep instance)")
        if m.n_experts % ep:
            raise InvalidArgumentError(f"{name}.ep = {ep} must divide the model's {m.n_experts} experts")
    if not m.kv_lora_rank and m.kv_heads % tp and tp % m.kv_heads:
        raise InvalidArgumentError(
            f"{name}.tp = {tp} must divide, or be a multiple of, the model's {m.kv_heads} KV heads (each TP rank holds whole heads)")
    size = max(tp, ep)
    if gpus.shape[0] % size:
        raise InvalidArgumentError(
            f"{name} pool of {gpus.shape[0]} GPUs is not a whole number of instances of {size} GPUs (tp={tp}, ep={ep}): "
            f"give a multiple of {size}")
    grid = gpus.reshape(-1, size)
    gpd = int(fabric.structure.get("domain", {}).get("n_endpoints", 0) or 0)
    domains = grid // gpd if gpd else np.zeros_like(grid)
    groups = domains.reshape(grid.shape[0], -1, tp)
    split = np.flatnonzero((groups != groups[:, :, :1]).any(axis=2).any(axis=1))
    if tp > 1 and (not gpd or split.size):
        i = int(split[0]) if split.size else 0
        raise InvalidArgumentError(
            f"{name} instance {i} has a TP group across NVLink domains (GPUs {grid[i].tolist()}); serving keeps TP inside "
            f"one domain: give each TP group GPUs of one domain (of {gpd} GPUs)")
    ep_in_domain = bool(gpd) and bool((domains == domains[:, :1]).all())
    return _PoolPlan(name, grid, tp, ep, ep_in_domain)


# ------------------------------------------------------------------------------------------
# Serving in a scenario
# ------------------------------------------------------------------------------------------


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


_METRICS = (("ttft_network_s", "network part of time to first token"),
            ("per_token_network_s", "network part of time per output token"),
            ("kv_network_s", "KV-cache transfer"))


def _percentiles(table: pa.Table) -> pa.Table:
    cols: dict[str, list[Any]] = {"metric": [], "p50_s": [], "p90_s": [], "p99_s": [], "mean_s": [], "n": []}
    for name, _ in _METRICS:
        x = table.column(name).to_numpy(zero_copy_only=False)
        x = x[np.isfinite(x)]
        q = np.percentile(x, [50, 90, 99]) if x.size else np.full(3, np.nan)
        cols["metric"].append(name)
        for key, v in zip(("p50_s", "p90_s", "p99_s"), q):
            cols[key].append(float(v))
        cols["mean_s"].append(float(x.mean()) if x.size else math.nan)
        cols["n"].append(int(x.size))
    return pa.table(cols)


@dataclass(frozen=True, eq=False)
class ServingReport:
    """What :meth:`Serving.report` returns: ``requests``, one row per request (request_id,
    arrival_s, prompt_tokens, output_tokens, prefill_instance, decode_instance,
    prefill_start_s, kv_start_s, kv_bytes, kv_network_s, prefill_network_s, ttft_network_s,
    per_token_network_s, decode_start_s, decode_end_s; times in seconds, NaN for a request
    whose KV transfer failed); ``percentiles``, p50/p90/p99 and mean of ttft_network_s,
    per_token_network_s and kv_network_s; ``summary``, counts and the decode pace.

    Example::

        from fabricsim import serving
        sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
        sv = serving.add_serving(sc, "llama3-8b", serving.poisson_requests(50.0, 0.2, seed=0),
                                 prefill=serving.Pool(range(8), tp=8), decode=serving.Pool(range(8, 16), tp=8))
        report = sv.report(sc.run())
        report.percentiles.select(["metric", "p99_s"])   # the network part of TTFT, TPOT and the KV transfer
    """

    requests: pa.Table
    percentiles: pa.Table
    summary: dict[str, Any]

    def __repr__(self) -> str:
        lines = [f"ServingReport: {self.summary['n_requests']} requests"]
        for row in self.percentiles.to_pylist():
            lines.append(f"  {row['metric']:<22} p50 {row['p50_s'] * 1e6:10.1f} us  p90 {row['p90_s'] * 1e6:10.1f} us  "
                         f"p99 {row['p99_s'] * 1e6:10.1f} us")
        return "\n".join(lines)


def compare(alone: ServingReport, beside: ServingReport) -> pa.Table:
    """Percentiles of the same serving traffic alone and beside a neighbour, side by side:
    one row per metric and percentile, with ``alone_s``, ``beside_s`` and ``ratio``
    (beside / alone).

    Example::

        from fabricsim import serving
        fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
        reports = []
        for neighbour in (False, True):
            sc = fs.Scenario(fabric)
            if neighbour:   # an all-to-all on the other two nodes
                sc.add_collective("all_to_all", range(16, 32), "1GiB")
            sv = serving.add_serving(sc, "llama3-8b", serving.poisson_requests(50.0, 0.2, seed=0),
                                     prefill=serving.Pool(range(8), tp=8), decode=serving.Pool(range(8, 16), tp=8))
            reports.append(sv.report(sc.run()))
        serving.compare(*reports).select(["metric", "percentile", "ratio"])   # beside / alone
    """
    for name, r in (("alone", alone), ("beside", beside)):
        if not isinstance(r, ServingReport):
            raise InvalidArgumentError(f"{name} must be a ServingReport, got {type(r).__name__}")
    a, b = alone.percentiles.to_pylist(), beside.percentiles.to_pylist()
    cols: dict[str, list[Any]] = {"metric": [], "percentile": [], "alone_s": [], "beside_s": [], "ratio": []}
    for ra, rb in zip(a, b):
        for p in ("p50_s", "p90_s", "p99_s"):
            cols["metric"].append(ra["metric"])
            cols["percentile"].append(p[:-2])
            cols["alone_s"].append(ra[p])
            cols["beside_s"].append(rb[p])
            cols["ratio"].append(rb[p] / ra[p] if ra[p] else math.nan)
    return pa.table(cols)


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
    prefill reaches (default the training compute model's, 0.50, from reference/compute.md's
    measured layers: a prefill is a forward pass of the same GEMMs). ``decode_step_s``: compute
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
    if policy not in _POLICIES:
        raise InvalidArgumentError(f"policy must be 'round_robin' or 'least_loaded', got {policy!r}")
    if kv_shards not in ("all", "one"):
        raise InvalidArgumentError(f"kv_shards must be 'all' or 'one', got {kv_shards!r}")
    kv_b = _positive("kv_bytes_per_element", kv_bytes_per_element)
    act_b = _positive("activation_bytes_per_element", activation_bytes_per_element)
    eff = _positive("prefill_efficiency", prefill_efficiency)
    if eff > 1:
        raise InvalidArgumentError(f"prefill_efficiency must be in (0, 1] (a fraction of peak), got {prefill_efficiency!r}")
    probe_dt = _positive("ep_probe_interval_s", ep_probe_interval_s)
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
        step_s = _positive("decode_step_s", decode_step_s)

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
    compute_s = np.asarray(flops) / (pre.gpus.shape[1] * peak * eff)
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
