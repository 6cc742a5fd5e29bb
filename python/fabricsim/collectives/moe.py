"""Mixture-of-experts dispatch and combine as collectives of their own: which tokens go to which
experts (:class:`MoeRouting`), where the experts sit, and the traffic three dispatchers make of
it (:data:`MODES`), as flows on a scenario's core and as an idle-fabric time.

* ``"all_to_all"``: the plain NCCL all-to-all-v of Megatron's all-to-all dispatcher: rank i
  sends rank j one copy of a token per expert of j the token is routed to, run by NCCL's
  point-to-point schedule (``algorithm="p2p"``, PXN and all). The combine sends them back.
* ``"deepep"``: DeepEP's normal kernels (deepseek-ai/DeepEP, README and docs/legacy.md; the
  DeepSeek-V3 report, arXiv:2412.19437 section 3.2.2): a token crosses the network once per
  node holding any of its experts, by RDMA to the GPU of its own rail there, which forwards it
  over NVLink to each GPU of that node holding one (one copy per GPU); experts on the sender's
  own node get it over NVLink. A forwarder sends what arrives, so its NVLink flows are paced at
  their share of its NIC's rate. The combine runs the other way: each expert GPU sends its
  outputs over NVLink to the forwarder, which adds a token's outputs and sends one copy back.
* ``"deepep_ll"``: DeepEP's low-latency kernels: one copy per (token, expert) straight to the
  expert's GPU, by RDMA from the sender's own NIC across rails (NVLink on one node), no
  forwarding; the combine the same way back.

The collectives table reports what DeepEP's tests report, the "bottleneck bandwidth": the
bytes per rank over the bottleneck's kind of link (the network where the ranks span nodes,
NVLink in one), averaged over the ranks, over the time; ``size_bytes`` is those bytes and
busbw equals algbw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._checks import shown
from ..exceptions import InvalidArgumentError
from .alltoall import add_p2p
from .communicator import _Comm, applied_fabric, communicator
from .cost import p2p
from .cost.model import CostModel, checked_cost_model

if TYPE_CHECKING:
    from ..fabrics import Topology
    from .construction import Builder

__all__ = ["MODES", "MoeRouting", "MoeTraffic", "add_moe", "estimate_moe", "moe_traffic"]

MODES = ("deepep", "deepep_ll", "all_to_all")
KINDS = ("dispatch", "combine")


@dataclass(frozen=True, eq=False)
class MoeRouting:
    """The tokens each of ``n_ranks`` ranks routes to ``n_experts`` experts, ``top_k`` each,
    and where the experts sit (``placement[e]``: the rank, by position in the communicator,
    holding expert e; every rank holds ``n_experts / n_ranks``).

    Made from each token's expert ids (:meth:`from_topk`: deduplication per GPU and per node
    exact) or from token counts per rank and expert (:meth:`from_counts`: deduplication
    estimated as if each token's distinct experts were drawn in proportion to its rank's
    counts).

    Example::

        import numpy as np
        ids = np.random.default_rng(0).integers(0, 64, size=(16, 512, 1))   # top-1: 16 ranks, 512 tokens each
        routing = fs.MoeRouting.from_topk(ids, n_experts=64)   # in blocks: 4 experts per rank
        routing.tokens.tolist()[:2]                            # [512.0, 512.0]
    """

    n_ranks: int
    n_experts: int
    top_k: int
    placement: np.ndarray
    #: Tokens each rank holds.
    tokens: np.ndarray
    #: copies[i, j]: tokens of rank i routed to experts of rank j, one per expert.
    copies: np.ndarray
    #: The ranks of each token's experts (n_ranks, tokens, top_k), or None (made from counts).
    topk: np.ndarray | None = None
    counts: np.ndarray | None = None
    _traffic: dict[bytes, "MoeTraffic"] = field(default_factory=dict, repr=False)

    @classmethod
    def from_topk(cls, expert_ids: Any, n_experts: int | None = None, placement: Any = None) -> "MoeRouting":
        """A routing from each token's expert ids: an integer array of shape (ranks, tokens per
        rank, top_k), ids in ``[0, n_experts)`` (default: one past the largest), no expert
        twice for one token; ``placement`` as in the class docs (default: experts in blocks,
        rank r holding experts ``r E/n .. (r + 1) E/n - 1``).

        Example::

            import numpy as np
            ids = np.array([[[0, 1]], [[1, 3]]])            # top-2 of 4 experts: 2 ranks, a token each
            routing = fs.MoeRouting.from_topk(ids, placement=[1, 1, 0, 0])   # experts 2, 3 on rank 0
            routing.copies.tolist()                          # [[0.0, 2.0], [1.0, 1.0]]
        """
        ids = np.asarray(expert_ids)
        if not np.issubdtype(ids.dtype, np.integer):
            raise InvalidArgumentError(f"expert_ids must hold integer expert ids, got dtype {ids.dtype}")
        if ids.ndim != 3 or 0 in ids.shape:
            raise InvalidArgumentError(
                f"expert_ids must be an array of shape (ranks, tokens per rank, top_k), got shape {ids.shape}")
        n, t, k = ids.shape
        lo, hi = int(ids.min()), int(ids.max())
        n_experts = hi + 1 if n_experts is None else _positive_int("n_experts", n_experts)
        if lo < 0 or hi >= n_experts:
            bad = lo if lo < 0 else hi
            where = np.argwhere(ids == bad)[0].tolist()
            raise InvalidArgumentError(
                f"expert_ids{where} = {bad}: expected an expert id in [0, {n_experts})")
        ordered = np.sort(ids, axis=2)
        twice = np.argwhere(ordered[:, :, 1:] == ordered[:, :, :-1])
        if len(twice):
            r, tok = twice[0][:2].tolist()
            raise InvalidArgumentError(
                f"token {tok} of rank {r} is routed to expert {int(ordered[r, tok][twice[0][2]])} twice: a token's "
                "top_k experts are distinct")
        place = _placement(placement, n_experts, n)
        dst = place.astype(np.int32)[ids]  # each token's experts' ranks
        wide = np.int32 if n * n < 2**31 else np.int64
        copies = np.bincount((dst + (np.arange(n, dtype=wide) * n)[:, None, None]).ravel(), minlength=n * n).reshape(n, n)
        return cls(n, n_experts, k, place, np.full(n, float(t)), copies.astype(np.float64), topk=dst)

    @classmethod
    def from_counts(cls, counts: Any, top_k: int, placement: Any = None) -> "MoeRouting":
        """A routing from token counts: ``counts[i, e]`` tokens of rank i routed to expert e
        (numbers >= 0; each rank's row adds up to top_k times its tokens); ``placement`` as in
        :meth:`from_topk`.

        Example::

            import numpy as np
            routing = fs.MoeRouting.from_counts(np.full((8, 32), 256.0), top_k=2)   # even routing
            routing.tokens.tolist()[0], routing.copies[0, 1]                       # (4096.0, 1024.0)
        """
        c = np.asarray(counts, dtype=np.float64) if not isinstance(counts, np.ndarray) else counts.astype(np.float64)
        if c.ndim != 2 or 0 in c.shape:
            raise InvalidArgumentError(f"counts must be an array of shape (ranks, experts), got shape {np.shape(counts)}")
        bad = np.argwhere(~(np.isfinite(c) & (c >= 0)))
        if len(bad):
            i, e = bad[0].tolist()
            raise InvalidArgumentError(f"counts[{i}][{e}] = {float(c[i, e])!r}: expected a finite token count >= 0")
        k = _positive_int("top_k", top_k)
        n, n_experts = c.shape
        if k > n_experts:
            raise InvalidArgumentError(f"top_k={k}: expected at most the {n_experts} experts")
        place = _placement(placement, n_experts, n)
        copies = np.zeros((n, n))
        np.add.at(copies.T, place, c.T)
        return cls(n, n_experts, k, place, c.sum(axis=1) / k, copies, counts=c)

    def per_gpu(self) -> np.ndarray:
        """tokens[i, j] of rank i with at least one expert on rank j (one copy per GPU).

        Example::

            import numpy as np
            routing = fs.MoeRouting.from_topk(np.array([[[0, 1]], [[2, 3]]]))   # experts 0, 1 on rank 0
            routing.copies.tolist(), routing.per_gpu().tolist()   # ([[2.0, 0.0], [0.0, 2.0]], [[1.0, 0.0], [0.0, 1.0]])
        """
        return self._dedup(np.arange(self.n_ranks), self.n_ranks)

    def _dedup(self, group_of_rank: np.ndarray, n_groups: int) -> np.ndarray:
        """Tokens of each rank with at least one expert in each group of ranks."""
        n = self.n_ranks
        if self.topk is not None:
            identity = n_groups == n and np.array_equal(group_of_rank, np.arange(n))
            where = np.sort(self.topk if identity else group_of_rank.astype(np.int32)[self.topk], axis=2)
            first = np.empty(where.shape, dtype=bool)
            first[:, :, 0] = True
            np.not_equal(where[:, :, 1:], where[:, :, :-1], out=first[:, :, 1:])
            wide = np.int32 if n * n_groups < 2**31 else np.int64
            offset: np.ndarray = (np.arange(n, dtype=wide) * n_groups)[:, None, None]
            key = where.astype(wide, copy=False) + offset
            out: np.ndarray = np.bincount(key[first], minlength=n * n_groups)
            return out.reshape(n, n_groups).astype(np.float64)
        # From counts: a token misses a group if none of its k distinct picks lands there, the
        # picks drawn without replacement from E experts, the group's share of them in
        # proportion to its counts (exact for even counts: C(E - g, k) / C(E, k)).
        assert self.counts is not None
        per_group = np.zeros((n, n_groups))
        np.add.at(per_group.T, group_of_rank[self.placement], self.counts.T)
        total = self.counts.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(total > 0, per_group / total, 0.0)
        e = float(self.n_experts)
        miss = np.ones_like(p)
        for i in range(self.top_k):
            miss *= np.clip((e * (1.0 - p) - i) / (e - i), 0.0, 1.0)
        return self.tokens[:, None] * (1.0 - miss)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidArgumentError(f"{name} must be a whole number >= 1, got {shown(value)}")
    return int(value)


def _placement(placement: Any, n_experts: int, n_ranks: int) -> np.ndarray:
    """The rank of each expert, checked: every rank holds as many (DeepEP's and Megatron's
    num_local_experts = num_experts / ep_size)."""
    if n_experts % n_ranks:
        raise InvalidArgumentError(
            f"{n_experts} experts over {n_ranks} ranks: every rank holds as many experts, so n_experts must be "
            "a multiple of the ranks")
    if placement is None:
        return np.repeat(np.arange(n_ranks), n_experts // n_ranks)
    place = np.asarray(placement)
    if place.shape != (n_experts,) or not np.issubdtype(place.dtype, np.integer):
        raise InvalidArgumentError(
            f"placement must be {n_experts} integer rank positions (the rank of each expert), got "
            f"{shown(placement)}")
    out = np.flatnonzero((place < 0) | (place >= n_ranks))
    if len(out):
        e = int(out[0])
        raise InvalidArgumentError(f"placement[{e}] = {int(place[e])}: expected a rank position in [0, {n_ranks})")
    held = np.bincount(place, minlength=n_ranks)
    uneven = np.flatnonzero(held != n_experts // n_ranks)
    if len(uneven):
        r = int(uneven[0])
        raise InvalidArgumentError(
            f"placement puts {int(held[r])} experts on rank {r}: every rank holds {n_experts // n_ranks} "
            f"(n_experts / n_ranks), so the placement must be a permutation of the blocks")
    return place.astype(np.int64)


@dataclass(frozen=True)
class MoeTraffic:
    """A routing on a communicator's nodes, in tokens (NumPy arrays; rank positions): what a
    step builder hands :func:`add_moe`.

    ``copies[i, j]`` one per routed expert, ``per_gpu[i, j]`` one per GPU holding any of the
    token's experts, ``per_node[i, b]`` one per node (by the communicator's node index)."""

    copies: np.ndarray
    per_gpu: np.ndarray
    per_node: np.ndarray


def moe_traffic(routing: MoeRouting, comm: _Comm) -> MoeTraffic:
    """The routing's token traffic on ``comm``'s nodes, once per communicator layout."""
    if routing.n_ranks != comm.n:
        raise InvalidArgumentError(
            f"the routing is for {routing.n_ranks} ranks, the communicator has {comm.n}: give as many ranks")
    node = np.repeat(np.arange(comm.n_domains), comm.counts)
    key = node.tobytes()
    hit = routing._traffic.get(key)
    if hit is None:
        hit = MoeTraffic(routing.copies, routing.per_gpu(), routing._dedup(node, comm.n_domains))
        routing._traffic.clear()  # one layout at a time: a routing serves one communicator
        routing._traffic[key] = hit
    return hit


# -- flows -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Flows:
    """A MoE collective's flows (rank positions), their caps, and its bottleneck bytes per rank."""
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    cap_Bps: np.ndarray
    network: np.ndarray  # whether each flow crosses the network
    size_bytes: float


def _forwarders(comm: _Comm) -> np.ndarray:
    """forward[i, b]: DeepEP's RDMA peer of rank i on node b, the rank there on i's rail (its
    NVLink-local rank), else the rank of node b holding i's index in its own node."""
    prox = p2p.proxies(comm)
    rail = comm.ranks % max(comm.view.gpus_per_domain, 1)
    fwd = prox[:, rail].T.copy()
    local = np.arange(comm.n) - np.repeat(comm.starts, comm.counts)
    fallback = comm.starts[None, :] + np.minimum(local[:, None], comm.counts[None, :] - 1)
    return np.where(fwd >= 0, fwd, fallback)


def _flows(kind: str, mode: str, comm: _Comm, traffic: MoeTraffic, nbytes_per_token: float) -> _Flows:
    """The flows of a deepep or deepep_ll dispatch (combine: the same, reversed)."""
    n = comm.n
    node = np.repeat(np.arange(comm.n_domains), comm.counts)
    same = node[:, None] == node[None, :]
    off = ~np.eye(n, dtype=bool)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(i: np.ndarray, j: np.ndarray, tokens: np.ndarray, cap: np.ndarray | float, net: np.ndarray | bool) -> None:
        keep = tokens > 0
        parts.append((i[keep], j[keep], tokens[keep] * nbytes_per_token, np.broadcast_to(cap, keep.shape)[keep],
                      np.broadcast_to(net, keep.shape)[keep]))

    if mode == "deepep_ll":  # every copy straight to its expert's GPU: NVLink on its node, else its NIC
        i, j = np.nonzero(off)
        add(i, j, traffic.copies[i, j], math.inf, ~same[i, j])
    else:  # normal: each node once, on the rail, then NVLink from there
        i, j = np.nonzero(same & off)
        add(i, j, traffic.per_gpu[i, j], math.inf, False)
        fwd = _forwarders(comm)
        i, b = np.nonzero(node[:, None] != np.arange(comm.n_domains)[None, :])
        f = fwd[i, b]
        add(i, f, traffic.per_node[i, b], math.inf, True)
        rdma = np.bincount(f, weights=traffic.per_node[i, b], minlength=n)
        # Forwarded over NVLink: from f to each GPU j of its node, what f's RDMA peers send j.
        ii, jj = np.nonzero(~same)
        ff = fwd[ii, node[jj]]
        hop = ff != jj
        ii, jj, ff = ii[hop], jj[hop], ff[hop]
        fwd_tokens = np.bincount(ff * n + jj, weights=traffic.per_gpu[ii, jj], minlength=n * n)
        k = np.flatnonzero(fwd_tokens)
        fi, fj = k // n, k % n
        add(fi, fj, fwd_tokens[k], fwd_tokens[k] / rdma[fi] * comm.net_Bps, False)
    src, dst, nb, cap, net = (np.concatenate([p[c] for p in parts]) for c in range(5))
    if kind == "combine":
        src, dst = dst, src
    over = net if comm.n_domains > 1 else ~net
    size = float(nb[over].sum() / n)
    return _Flows(src.astype(np.int64), dst.astype(np.int64), nb, cap.astype(np.float64), net, size)


def _matrix(kind: str, traffic: MoeTraffic, nbytes_per_token: float) -> np.ndarray:
    m = traffic.copies * nbytes_per_token
    return m.T.copy() if kind == "combine" else m


def _alpha_s(comm: _Comm, cost: CostModel) -> float:
    """A DeepEP kernel's latency [assumed]: NCCL's point-to-point one, its network step where the
    ranks span nodes."""
    step = cost.p2p_net_latency_s if comm.n_domains > 1 else cost.p2p_nvlink_latency_s
    return (cost.p2p_base_latency_s + step) * cost.latency_scale


def _time_s(flows: _Flows, comm: _Comm, cost: CostModel) -> float:
    """The idle-fabric time of a deepep or deepep_ll collective: its busiest port (a GPU's NIC
    or NVLink, each way) or its slowest flow at its cap, after its wire latency, then the
    kernel's latency. A lower bound, exact where one port binds every flow through it."""
    if not len(flows.nbytes):
        return 0.0
    n, v = comm.n, comm.view
    net = flows.network
    ports = [(flows.src[net], comm.net_Bps), (flows.dst[net], comm.net_Bps),
             (flows.src[~net], v.nvlink_Bps), (flows.dst[~net], v.nvlink_Bps)]
    sel = [net, net, ~net, ~net]
    busy = max((float(np.bincount(at, flows.nbytes[s], n).max(initial=0.0)) / rate
                for (at, rate), s in zip(ports, sel) if s.any()), default=0.0)
    busy = max(busy, float(np.max(flows.nbytes / flows.cap_Bps)))
    wire = float(comm.class_latency_s.max()) if net.any() else comm.intra_path_s
    return busy + wire + _alpha_s(comm, cost)


def _checked(kind: str, mode: str, nbytes_per_token: Any) -> float:
    from ..units import size_bytes as parse_size
    from .._checks import parsed

    if kind not in KINDS:
        raise InvalidArgumentError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(mode, str) or mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}, got {shown(mode)}")
    b = float(parsed("bytes_per_token", parse_size, nbytes_per_token))
    if not (math.isfinite(b) and b > 0):
        raise InvalidArgumentError(f"bytes_per_token must be a finite number of bytes > 0, got {shown(nbytes_per_token)}")
    return b


def add_moe(builder: "Builder", kind: str, ranks: Any, traffic: MoeRouting | MoeTraffic, nbytes_per_token: Any,
            mode: str, after: Any, start_s: float, tag: str | None) -> int:
    """Adds a MoE dispatch or combine (``kind``) of ``traffic`` (a :class:`MoeRouting`, or a
    step builder's :class:`MoeTraffic` for these ranks) over ``ranks`` (GPU ids in order; None:
    every GPU) to ``builder``'s scenario, after the activity ids ``after``; returns its end id
    and gives it a row of the collectives table (module docs)."""
    b = _checked(kind, mode, nbytes_per_token)
    comm = communicator(builder.sc.topology, "all_to_all", ranks)
    if isinstance(traffic, MoeRouting):
        traffic = moe_traffic(traffic, comm)
    elif not isinstance(traffic, MoeTraffic):
        raise InvalidArgumentError(f"routing must be a fabricsim.MoeRouting, got {type(traffic).__name__}")
    elif traffic.copies.shape != (comm.n, comm.n):
        raise InvalidArgumentError(f"traffic is for {traffic.copies.shape[0]} ranks, the communicator has {comm.n}")
    cost = builder.cost
    label = tag if tag is not None else f"moe_{kind}"
    core = builder._core
    first = core.n_activities
    try:
        begin = core.add_delay(0.0, start_s, after, label)
        if mode == "all_to_all":
            matrix = _matrix(kind, traffic, b)
            S = float(matrix.sum() / comm.n)
            analytical = p2p.time_s("all_to_all", comm, S, matrix, cost)
            end = add_p2p(core, comm, p2p.plan("all_to_all", comm, S, matrix, cost), begin, label)
            net = np.repeat(np.arange(comm.n_domains), comm.counts)
            remote = net[:, None] != net[None, :]
            over = remote if comm.n_domains > 1 else ~np.eye(comm.n, dtype=bool)
            size = float(matrix[over].sum() / comm.n)
        else:
            flows = _flows(kind, mode, comm, traffic, b)
            analytical = _time_s(flows, comm, cost)
            size = flows.size_bytes
            if len(flows.nbytes):
                core.check_room_for_flows(len(flows.nbytes))
                ids = core.add_flows(
                    np.ascontiguousarray(comm.ranks[flows.src]), np.ascontiguousarray(comm.ranks[flows.dst]),
                    np.ascontiguousarray(flows.nbytes), np.zeros(len(flows.nbytes)), label, None, None, [begin],
                    striped=True, max_rate_Bps=np.ascontiguousarray(flows.cap_Bps))
                end = core.add_delay(_alpha_s(comm, cost), 0.0, ids, label)
            else:
                end = core.add_delay(0.0, 0.0, [begin], label)
    except BaseException:  # Ctrl-C too: half a collective would run without its row
        core.truncate(first)
        raise
    builder.record(int(end), comm, f"moe_{kind}", mode, size, int(begin), analytical, "simple")
    return int(end)


def estimate_moe(fabric: "Topology", kind: str, routing: MoeRouting, ranks: Any = None, *, bytes_per_token: Any,
                 mode: str = "deepep", cost_model: CostModel | None = None) -> float:
    """The idle-fabric time, in seconds, of a MoE ``kind`` ("dispatch" or "combine") of
    ``routing`` over ``ranks`` (default every GPU) in ``mode`` (module docs), as the
    collectives table's ``analytical_s`` gives it.

    Example::

        import numpy as np
        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        ids = np.random.default_rng(0).integers(0, 64, size=(16, 4096, 1))   # top-1 over 64 experts
        routing = fs.MoeRouting.from_topk(ids, n_experts=64)
        fs.estimate_moe(fabric, "dispatch", routing, bytes_per_token=7168, mode="deepep")   # about 0.3 ms
    """
    cost = checked_cost_model(cost_model)
    b = _checked(kind, mode, bytes_per_token)
    comm = communicator(applied_fabric(fabric, cost), "all_to_all", ranks)
    if not isinstance(routing, MoeRouting):
        raise InvalidArgumentError(f"routing must be a fabricsim.MoeRouting, got {type(routing).__name__}")
    traffic = moe_traffic(routing, comm)
    if mode == "all_to_all":
        matrix = _matrix(kind, traffic, b)
        return p2p.time_s("all_to_all", comm, float(matrix.sum() / comm.n), matrix, cost)
    return _time_s(_flows(kind, mode, comm, traffic, b), comm, cost)
