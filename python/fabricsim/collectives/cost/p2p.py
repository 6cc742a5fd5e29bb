"""NCCL's point-to-point schedule, as its all-to-all and grouped send/recv run it, and the time
of its construction (``algorithm="p2p"``) on an idle fabric.

Every line cited is NCCL v2.30.7 (commit 5067397c) under ``src/``; docs/collectives.md has the
model in words and docs/sources.md 7 the figures.

* **Rounds** (``init.cc:890-960``, ``ncclP2pSchedule``): the ranks of a node are taken in
  groups of ``G`` (8, fewer where a node holds fewer or a number 8 does not divide; on one node
  all of them). Round ``r = k G + d`` of a rank sends to local rank ``(l + d) mod G`` of group
  ``(g + delta_k) mod nGroups``, the group deltas ``delta_k`` in NCCL's quadratic order
  (0, 1, 3, 6, 10, ... mod the next power of two, those past the groups left out).
* **Channels**: ``C`` channels (``paths.cc:977-991``: the communicator's CTAs, twice its
  graphs' channels, ``connect.cc:460, 480``, to a power of two). Round ``r`` starts on the
  base channel ``bitrev(k ceil(G/8) + floor(d/8))`` across nodes, ``bitrev(r)`` on one node
  (``channel.h:21-33``), and an operation of ``nCh`` channels takes ``base .. base + nCh - 1``
  mod ``C`` (``device.h:277-279``). ``nCh`` starts at the channels per peer halved until every
  peer fits (``enqueue.cc:1143-1146``) and doubles while a part exceeds the largest part, up
  to the channels per peer (``enqueue.cc:919-926``); the channels per peer are the fewest any
  peer gets (NVLink: twice its links, network: ``max(NICs, ceil(GB/s / 14))``,
  ``paths.cc:920-975``), halved across nodes until every peer fits one round
  (``paths.cc:993-1001``).
* **Batches**: a channel runs up to 8 operations of one group of 8 rounds at once
  (``enqueue.cc:126-150``), splitting its 20 warps among them (``sendrecv.h:107-113``), and
  starts its next batch only when every operation of this one is done (``common.h:405-430``); there is
  no barrier across channels. A kernel holds 254 batches; more run as kernels one after another
  (``enqueue.cc:294-300, 1184-1187``).

A channel (CTA) moves at most ``cta_Bps`` (:func:`setup`) with its whole complement of receive
warps, and an operation sharing it with ``k - 1`` others gets ``recv(k) / recv(1)`` of that,
``recv(k)`` being the receive warps NCCL gives each of ``k`` operations (9 for one, 4 each for
two, 1 each for eight): so a size that doubles every operation's channels, where they then
share them, costs 1 - 8/9 of the rate (NVIDIA/nccl#2169's drop just above 512 MiB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from ..communicator import _Comm
from . import nccl
from .model import DEFAULT as DEFAULT_COST
from .model import CostModel

__all__ = ["P2pSetup", "group_deltas", "recv_warps", "setup"]


@dataclass(frozen=True, eq=False)
class P2pSetup:
    """NCCL's point-to-point setup of a communicator (module docs): what its schedule needs.

    Ranks are positions in the communicator's order (grouped by NVLink domain)."""

    n_nodes: int
    #: Ranks per group of the schedule (G) and the groups.
    group_size: int
    n_groups: int
    #: p2pnChannels (C), p2pnChannelsPerPeer, and the channels an operation starts from.
    channels: int
    per_peer: int
    min_channels: int
    #: The step of an operation (p2pChunkSize), bytes.
    chunk_bytes: float
    #: What one channel moves with every receive warp (bytes/s; inf where the node has no NVLink).
    cta_Bps: float
    #: Per rank position: its group and its index in it; per group, its node.
    group: np.ndarray
    local: np.ndarray
    group_node: np.ndarray
    #: The group delta of each round group k, in NCCL's order, and the k of each delta.
    deltas: np.ndarray
    k_of_delta: np.ndarray

    @property
    def multi_node(self) -> bool:
        return self.n_nodes > 1

    @property
    def n_keys(self) -> int:
        """Batch keys: round groups across nodes (one per group delta), groups of 8 rounds on one node."""
        if self.multi_node:
            return len(self.deltas)
        return -(-self.group_size // 8)


def _pow2_up(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def _bitrev(x: np.ndarray, bits: int) -> np.ndarray:
    """The low ``bits`` bits of ``x`` reversed (NCCL's reverseBits, bitops.h:441-463)."""
    x = np.asarray(x, dtype=np.int64) & ((1 << bits) - 1)
    out = np.zeros_like(x)
    for b in range(bits):
        out |= ((x >> b) & 1) << (bits - 1 - b)
    return out


@lru_cache(maxsize=256)
def group_deltas(n_groups: int) -> np.ndarray:
    """The group deltas in NCCL's order (init.cc:936-953): ``delta += k + 1`` modulo the next
    power of two from 0, those at or past ``n_groups`` left out.

    Example::

        from fabricsim.collectives.cost.p2p import group_deltas
        group_deltas(16).tolist()   # [0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]
    """
    p = _pow2_up(n_groups)
    out = []
    delta = 0
    for k in range(p):
        if delta < n_groups:
            out.append(delta)
        delta = (delta + k + 1) & (p - 1)
    deltas = np.array(out, dtype=np.int64)
    deltas.flags.writeable = False
    return deltas


def recv_warps(works: np.ndarray | int, warps: int = 20) -> np.ndarray:
    """The receive warps each of ``works`` operations of one batch gets on a channel of
    ``warps`` warps (src/device/sendrecv.h:107-113): ``w = warps // works`` each, ``w // 2`` of
    them receiving where ``w <= 4``, else ``(w - 1) // 2``.

    Example::

        from fabricsim.collectives.cost.p2p import recv_warps
        recv_warps([1, 2, 4, 8]).tolist()   # [9, 4, 2, 1]
    """
    w = warps // np.maximum(np.asarray(works, dtype=np.int64), 1)
    return np.where(w <= 4, w // 2, (w - 1) // 2)


def _node_groups(comm: _Comm, cost: CostModel) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """G (init.cc:895-899), and per rank position its group and index in it, per group its node."""
    counts = comm.counts
    g = cost.p2p_group_size if comm.n_domains > 1 else int(counts.max())
    for c in counts.tolist():
        if c % g or c < g:
            g = math.gcd(g, c)
    node = np.repeat(np.arange(comm.n_domains), counts)
    position = np.arange(comm.n) - np.repeat(comm.starts, counts)
    before = np.concatenate(([0], np.cumsum(counts // g)[:-1]))
    group = before[node] + position // g
    return g, group, position % g, np.repeat(np.arange(comm.n_domains), counts // g)


def _cta_Bps(comm: _Comm, cost: CostModel) -> float:
    """What one point-to-point channel moves: as much as one of the node's ring CTAs, the
    per-channel ring bandwidth NCCL's graph search finds for one node (search.cc) over the two
    CTAs each graph channel runs as (connect.cc:460). [assumed: NCCL has no p2p bandwidth model]"""
    v = comm.view
    k = max(int(comm.counts.max()), v.gpus_per_domain if v.gpus_per_domain > 1 else 1)
    if v.nvlink_Bps <= 0 or k < 2:
        return math.inf
    shape = nccl.CommShape(n_ranks=k, n_nodes=1, arch=v.arch, nvlink_Bps=v.nvlink_Bps,
                           nvlink_link_Bps=v.nvlink_link_Bps, net_Bps=0.0, nvswitch=v.nvls, collnet=False,
                           cost=cost)
    return nccl.graphs(shape)["ring"].bw_intra_Bps / 2


def setup(comm: _Comm, cost: CostModel = DEFAULT_COST) -> P2pSetup:
    """The point-to-point setup NCCL makes for ``comm`` (module docs), once per communicator.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
        s = setup(fs.collectives.communicator(fabric, "all_to_all"))
        s.channels, s.per_peer, s.min_channels   # (16, 4, 1): NVIDIA/nccl#1453's 16 channels
    """
    key = ("p2p", cost)
    hit: P2pSetup | None = comm.memo.get(key)
    if hit is not None:
        return hit
    v, n, d = comm.view, comm.n, comm.n_domains
    g, group, local, group_node = _node_groups(comm, cost)
    n_groups = n // g
    # The communicator's CTAs (nccl.comm_channels), to a power of two
    channels = cost.p2p_max_channels
    if n > 1:
        ctas = nccl.comm_channels(comm, cost)
        channels = min(_pow2_up(min(ctas, cost.p2p_max_channels)), 1 << (cost.p2p_kernel_batches.bit_length() - 1))
    nvlink = v.nvlink_Bps > 0 and v.gpus_per_domain > 1
    peers = []
    if int(comm.counts.max()) > 1:  # peers on the node: NVLink (twice its links) or PCIe (2)
        peers.append(2 * max(1, int(v.nvlink_Bps / v.nvlink_link_Bps)) if nvlink else 2)
    if d > 1:  # network peers: a channel per NIC, more to reach 14 GB/s each (paths.cc:943-951)
        peers.append(max(1, -(-int(comm.net_Bps / 1e9) // int(cost.p2p_per_channel_net_Bps / 1e9))))
    per_peer = _pow2_up(min(peers)) if peers else 1
    if d > 1:
        while per_peer * -(-n // cost.p2p_ops_per_batch) > channels and per_peer > 1:
            per_peer //= 2
    else:
        per_peer = min(channels, per_peer)
    min_channels = per_peer
    while min_channels * n > channels and min_channels > 1:
        min_channels //= 2
    if d > 1:  # GB hosts hold 4 GPUs: twice the step (init.cc:832-835)
        chunk = cost.p2p_net_chunk_bytes * (2 if v.arch == "blackwell" and v.gpu.startswith("gb") else 1)
    else:
        chunk = cost.p2p_nvl_chunk_bytes if nvlink else cost.p2p_pci_chunk_bytes
    deltas = group_deltas(n_groups)
    k_of_delta = np.empty(n_groups, dtype=np.int64)
    k_of_delta[deltas] = np.arange(len(deltas))
    out = P2pSetup(d, g, n_groups, channels, per_peer, min_channels, float(chunk), _cta_Bps(comm, cost),
                   group, local, group_node, deltas, k_of_delta)
    comm.memo[key] = out
    return out


def op_channels(s: P2pSetup, nbytes: np.ndarray | float) -> np.ndarray:
    """Channels of an operation of ``nbytes`` (enqueue.cc:914-926): from the fewest, doubled
    while a part passes the largest part (the step across nodes, 32 steps on one node)."""
    b = np.asarray(nbytes, dtype=np.float64)
    lo = s.chunk_bytes / (2 if s.multi_node else 8)
    hi = s.chunk_bytes * (1 if s.multi_node else 32)
    nch = np.minimum(s.min_channels, np.maximum(np.ceil(b / lo), 1)).astype(np.int64)
    part = np.maximum(lo, np.ceil(b / nch))
    while True:
        grow = (part > hi) & (nch <= s.per_peer // 2)
        if not grow.any():
            return nch
        nch = np.where(grow, nch * 2, nch)
        part = np.where(grow, np.ceil(b / nch), part)


def share(works: np.ndarray | int, cost: CostModel = DEFAULT_COST) -> np.ndarray:
    """What one of ``works`` operations of a batch gets of a channel's rate: its receive warps
    over a lone operation's (:func:`recv_warps`)."""
    out: np.ndarray = recv_warps(works, cost.p2p_cta_warps) / recv_warps(1, cost.p2p_cta_warps)
    return out


def rounds(s: P2pSetup, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The round group ``k`` and the local delta ``d`` of each transfer from rank position
    ``src`` to ``dst`` (the round is ``k G + d``)."""
    k = s.k_of_delta[(s.group[dst] - s.group[src]) % s.n_groups]
    d = (s.local[dst] - s.local[src]) % s.group_size
    return k, d


def base(s: P2pSetup, k: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The first channel of round ``k G + d`` (channel.h:21-33)."""
    bits = s.channels.bit_length() - 1
    if s.multi_node:
        return _bitrev(k * -(-s.group_size // 8) + d // 8, bits)
    return _bitrev(k * s.group_size + d, bits)


def batch_key(s: P2pSetup, k: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The batch a round's operations run in on each of their channels: across nodes its round
    group (one node group, whose operations share their channels), on one node its group of 8
    rounds (enqueue.cc:140-150)."""
    return k if s.multi_node else (k * s.group_size + d) // 8


@dataclass(frozen=True)
class Keys:
    """Per batch key (in order): the channels it uses, the keys that ran last before it on
    any of them (its predecessors, -1 for none), its kernel, and per channel the operations
    sharing each of its channels (for their share of it)."""

    used: np.ndarray   # (keys, C) bool
    pred: list[list[int]]
    kernel: np.ndarray
    works: np.ndarray  # (keys, C) operations per channel


def keys(s: P2pSetup, nch_of_round: np.ndarray, cost: CostModel = DEFAULT_COST) -> Keys:
    """The batches of the schedule when round ``r`` (index ``k G + d``) runs ``nch_of_round[r]``
    channels (0 for none): which channels each key uses, how many operations share each, its
    predecessors on them and its kernel (254 batches a kernel: a key opening more batches than
    are left starts the next kernel)."""
    n_rounds = len(nch_of_round)
    r = np.arange(n_rounds)
    k, d = r // s.group_size, r % s.group_size
    first = base(s, k, d)
    key = batch_key(s, k, d)
    n_keys = int(key.max()) + 1 if n_rounds else 0
    works = np.zeros((n_keys, s.channels), dtype=np.int64)
    for j in range(int(nch_of_round.max(initial=0))):
        on = nch_of_round > j
        np.add.at(works, (key[on], (first[on] + j) % s.channels), 1)
    used = works > 0
    pred: list[list[int]] = []
    kernel = np.zeros(n_keys, dtype=np.int64)
    last = np.full(s.channels, -1, dtype=np.int64)
    batches, kern = 0, 0
    for x in range(n_keys):
        cols = np.flatnonzero(used[x])
        if batches and batches + s.per_peer > cost.p2p_kernel_batches:
            kern += 1
            batches = 0
            last[:] = -1
        kernel[x] = kern
        batches += len(cols)
        before = np.unique(last[cols])
        pred.append([int(p) for p in before if p >= 0])
        last[cols] = x
    return Keys(used, pred, kernel, works)


# -- the construction's transfers --------------------------------------------------------------

#: Kinds of transfer: an operation on NVLink (or PCIe) in a node, one through the network, and a
#: PXN hop (a sender's bytes over NVLink to the GPU whose NIC sends them).
NVLINK, NETWORK, HOP = 0, 1, 2


@dataclass(frozen=True)
class Transfers:
    """The flows of NCCL's point-to-point schedule on a communicator (positions in its order):
    each one's start and end rank, bytes, rate cap (its channels' share, bytes/s), kind, batch
    key and the join units (groups across nodes, ranks on one node) it ends a batch of at
    either end (-1 for hops, which no batch waits for); ``keys`` the schedule's batches and
    ``alpha_s`` each key's point-to-point latency."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    cap_Bps: np.ndarray
    kind: np.ndarray
    key: np.ndarray
    unit_src: np.ndarray
    unit_dst: np.ndarray
    keys: Keys
    alpha_s: np.ndarray

    @property
    def waves(self) -> bool:
        """Whether some channel runs batches one after another (or the kernels do)."""
        return any(self.keys.pred) or bool(self.keys.kernel.max(initial=0) > 0)


def _latency_s(cost: CostModel, net: bool, ll: bool) -> float:
    if ll and not net:
        return (cost.p2p_ll_base_latency_s + cost.p2p_ll_nvlink_latency_s) * cost.latency_scale
    return (cost.p2p_base_latency_s + (cost.p2p_net_latency_s if net else cost.p2p_nvlink_latency_s)) \
        * cost.latency_scale


def proxies(comm: _Comm) -> np.ndarray:
    """PXN's intermediate ranks (search.cc:1421-1473): per node and rail (a GPU's index in its
    NVLink domain, its NIC's), the position of the communicator's rank there, -1 where none is."""
    key = "p2p_proxies"
    if key not in comm.memo:
        gpd = max(comm.view.gpus_per_domain, 1)
        rail = comm.ranks % gpd
        out = np.full((comm.n_domains, gpd), -1, dtype=np.int64)
        out[np.repeat(np.arange(comm.n_domains), comm.counts), rail] = np.arange(comm.n)
        comm.memo[key] = out
    found: np.ndarray = comm.memo[key]
    return found


def transfer_matrix(op: str, n: int, S: float, sizes: np.ndarray | None) -> np.ndarray:
    """Bytes rank i sends rank j (positions), the diagonal a rank's copy to itself."""
    if op == "send_recv":
        m = np.zeros((n, n))
        m[np.arange(n), (np.arange(n) + 1) % n] = S
        return m
    return np.full((n, n), S / n) if sizes is None else np.array(sizes, dtype=np.float64)


def plan(op: str, comm: _Comm, S: float, sizes: np.ndarray | None, cost: CostModel = DEFAULT_COST) -> Transfers:
    """:func:`transfers` of ``op`` (S as nccl-tests counts it, or an all-to-all-v matrix),
    kept for the last call on the communicator: a collective's estimate and its flows read
    the same one."""
    key = (op, S, cost)
    last = comm.memo.get("p2p_plan")
    if last is not None and last[0] == key and last[1] is sizes:
        found: Transfers = last[2]
        return found
    made = transfers(comm, transfer_matrix(op, comm.n, S, sizes), cost, every_peer=op == "all_to_all")
    comm.memo["p2p_plan"] = (key, sizes, made)
    return made


def transfers(comm: _Comm, matrix: np.ndarray, cost: CostModel = DEFAULT_COST, every_peer: bool = True) -> Transfers:
    """The flows NCCL's schedule makes of ``matrix`` (bytes from position i to j; module docs);
    ``every_peer``: every rank posts an operation to every rank, of zero bytes too (an
    all-to-all), else only where bytes go (send/recv).

    Across nodes with PXN (``cost.pxn``) one network flow carries what the ranks of a group
    send to one GPU of another node, from the GPU of that GPU's rail on the senders' node (its
    NIC), as NCCL's shared connection per peer and channel does; each sender's share reaches
    that GPU over NVLink by a hop flow (one per sender and rail GPU, paced at its share of the
    rail NIC's rate, as the proxy sends what arrives). Without PXN, or where no rank of the
    node sits on the rail, a sender's network flow leaves from its own NIC. A rank's copy to
    itself is no flow, but takes its share of its channels."""
    s = setup(comm, cost)
    n, g, ng = comm.n, s.group_size, s.n_groups
    node = np.repeat(np.arange(comm.n_domains), comm.counts)
    posted = np.ones((n, n), dtype=bool) if every_peer else matrix > 0
    nch = np.where(posted, op_channels(s, matrix), 0)
    # Per round, the most channels any of its operations takes: the channels its batch holds.
    gpair_k = s.k_of_delta[(np.arange(ng)[None, :] - np.arange(ng)[:, None]) % ng]
    blocks = nch.reshape(ng, g, ng, g)
    n_rounds = len(s.deltas) * g
    if s.multi_node:
        per_k = np.zeros(len(s.deltas), dtype=np.int64)
        np.maximum.at(per_k, gpair_k.ravel(), blocks.max(axis=(1, 3)).ravel())
        nch_of_round = np.repeat(per_k, g)
    else:
        r = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n
        nch_of_round = np.zeros(n_rounds, dtype=np.int64)
        np.maximum.at(nch_of_round, r.ravel(), nch.ravel())
    ks = keys(s, nch_of_round, cost)
    round_k, round_d = np.arange(n_rounds) // g, np.arange(n_rounds) % g
    col = (base(s, round_k, round_d)[:, None] + np.arange(s.per_peer)[None, :]) % s.channels
    rkey = batch_key(s, round_k, round_d)
    shares = share(ks.works[rkey[:, None], col], cost)
    # cum[r, c]: what an operation of round r on its first c channels may move, per CTA rate.
    cum = np.concatenate([np.zeros((n_rounds, 1)), np.cumsum(shares, axis=1)], axis=1)

    def round_of(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        k, d = rounds(s, i, j)
        out: np.ndarray = k * g + d
        return out

    parts: list[tuple[np.ndarray, ...]] = []

    def add(i: np.ndarray, j: np.ndarray, nbytes: np.ndarray, cap: np.ndarray, kind: int, key: np.ndarray,
            us: np.ndarray, ud: np.ndarray) -> None:
        if len(i):
            parts.append((i, j, nbytes, cap, np.full(len(i), kind), key, us, ud))

    def ops(pairs: tuple[np.ndarray, ...], kind: int) -> None:
        i, j = pairs
        rr = round_of(i, j)
        add(i, j, matrix[i, j], s.cta_Bps * cum[rr, nch[i, j]], kind, rkey[rr], *_units(s, i, j))

    moves = (matrix > 0) & ~np.eye(n, dtype=bool)
    same = node[:, None] == node[None, :]
    ops(np.nonzero(same & moves), NVLINK)
    ll = _ll_keys(s, matrix, nch, same & moves, rkey, round_of, cost)
    if s.multi_node:
        remote = ~same & moves
        own = remote
        if cost.pxn and comm.view.gpus_per_domain > 1:
            prox = proxies(comm)
            rail = comm.ranks % comm.view.gpus_per_domain
            via = prox[node[:, None], rail[None, :]]  # the rail GPU on the sender's node, per (i, j)
            pxn = remote & (via >= 0)
            own = remote & (via < 0)
            # One network flow per sender group and receiver, from the receiver's rail GPU.
            group_bytes = np.where(pxn, matrix, 0.0).reshape(ng, g, n).sum(axis=1)
            op_cap = np.where(pxn, cum[(gpair_k * g)[:, None, :, None], blocks].reshape(n, n), 0.0)
            group_cap = op_cap.reshape(ng, g, n).sum(axis=1) * s.cta_Bps
            a, t = np.nonzero(group_bytes)
            q = prox[s.group_node[a], rail[t]]
            k = gpair_k[a, s.group[t]]
            add(q, t, group_bytes[a, t], group_cap[a, t], NETWORK, rkey[k * g], a, s.group[t])
            # Each sender's share over NVLink to the rail GPU, paced by that GPU's NIC.
            hop = pxn & (via != np.arange(n)[:, None])
            hi, ht = np.nonzero(hop)
            if len(hi):
                hb = np.bincount(hi * n + via[hi, ht], weights=matrix[hi, ht], minlength=n * n)
                sent = np.bincount(q, weights=group_bytes[a, t], minlength=n)
                f = np.flatnonzero(hb)
                fi, fq = f // n, f % n
                none = np.full(len(f), -1)
                add(fi, fq, hb[f], hb[f] / sent[fq] * comm.net_Bps, HOP, none, none, none)
        ops(np.nonzero(own), NETWORK)
    cols = [np.concatenate([p[c] for p in parts]) if parts else np.zeros(0) for c in range(8)]
    alpha = np.array([_latency_s(cost, _crosses(s, x) if s.multi_node else False, bool(ll[x]))
                      for x in range(len(ks.pred))])
    return Transfers(cols[0].astype(np.int64), cols[1].astype(np.int64), cols[2].astype(np.float64),
                     cols[3].astype(np.float64), cols[4].astype(np.int64), cols[5].astype(np.int64),
                     cols[6].astype(np.int64), cols[7].astype(np.int64), ks, alpha)


def one_unit(plan: Transfers) -> Transfers:
    """``plan`` with every batched transfer in one join unit: a batch's joins made one."""
    from dataclasses import replace

    batched = plan.kind != HOP
    units = np.where(batched, 0, -1)
    return replace(plan, unit_src=units, unit_dst=units)


def _units(s: P2pSetup, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The join units at either end of transfers from ``i`` to ``j``: groups across nodes
    (every rank of a group runs the batch of a round group), ranks on one node."""
    return (s.group[i], s.group[j]) if s.multi_node else (i, j)


def _crosses(s: P2pSetup, k: int) -> bool:
    """Whether round group ``k`` reaches another node (its delta leaves the node's groups)."""
    delta = int(s.deltas[k])
    return bool(np.any(s.group_node != s.group_node[(np.arange(s.n_groups) + delta) % s.n_groups]))


def _ll_keys(s: P2pSetup, matrix: np.ndarray, nch: np.ndarray, nvlink: np.ndarray, rkey: np.ndarray,
             round_of: "Callable[[np.ndarray, np.ndarray], np.ndarray]", cost: CostModel) -> np.ndarray:
    """Per key, whether all its operations run LL: NVLink or PCIe ones of at most
    ``p2p_ll_threshold_bytes`` per channel (enqueue.cc:932; network connections have no LL
    buffers, init.cc:859)."""
    n_keys = len(s.deltas) if s.multi_node else s.n_keys
    ll = np.ones(n_keys, dtype=bool)
    i, j = np.nonzero(nvlink)
    if s.multi_node:
        for k in range(n_keys):
            if _crosses(s, k):
                ll[k] = False
    if len(i):
        big = matrix[i, j] > np.maximum(nch[i, j], 1) * cost.p2p_ll_threshold_bytes
        bad = np.unique(rkey[round_of(i[big], j[big])])
        ll[bad] = False
    return ll


# -- the time on an idle fabric -----------------------------------------------------------------

@dataclass
class _Class:
    """Flows alike in every rank of a symmetric schedule: each carries ``nbytes`` at most at
    ``cap_Bps``; on one instance of resource r (a GPU's NIC or NVLink, each way) ``use[r]``
    of them run; they start ``latency_s`` after their key's predecessors are done."""
    nbytes: float
    cap_Bps: float
    use: dict[str, float]
    latency_s: float
    key: int  # -1: a hop, started at once and waited for by no batch


def _rates(active: list[_Class], capacity: dict[str, float]) -> np.ndarray:
    """Max-min rates per flow of each class (progressive filling, as the engine's)."""
    rate = np.zeros(len(active))
    free = np.ones(len(active), dtype=bool)
    left = dict(capacity)
    while free.any():
        step = min((c.cap_Bps - rate[i] for i, c in enumerate(active) if free[i]), default=math.inf)
        for res, cap in left.items():
            load = sum(c.use.get(res, 0.0) for i, c in enumerate(active) if free[i])
            if load > 0:
                step = min(step, cap / load)
        for i, c in enumerate(active):
            if free[i]:
                rate[i] += step
                for res, w in c.use.items():
                    left[res] -= w * step
        for i, c in enumerate(active):
            if free[i] and (rate[i] >= c.cap_Bps * (1 - 1e-12) or
                            any(left[r] <= capacity[r] * 1e-12 for r in c.use if c.use[r] > 0)):
                free[i] = False
    return rate


def _simulate(classes: list[_Class], capacity: dict[str, float], ks: Keys, alpha: np.ndarray) -> float:
    """When the last batch's latency is paid: the classes' flows run as the engine runs them
    (max-min at every event), each key's after its predecessors' batches (and, first in a
    kernel, after the previous kernel's) are done and have paid their latency."""
    n_keys = len(ks.pred)
    done = np.full(n_keys, np.nan)  # when each key's flows are all done
    has = np.zeros(n_keys, dtype=bool)
    for c in classes:
        if c.key >= 0:
            has[c.key] = True
    first_in_kernel = [x for x in range(n_keys) if not ks.pred[x] and ks.kernel[x] > 0]
    remaining = np.array([c.nbytes for c in classes])
    start = np.full(len(classes), np.nan)
    t = 0.0

    def ready_at(x: int) -> float | None:
        """When key x's batch may start, or None while something it waits for runs."""
        waits = list(ks.pred[x])
        if x in first_in_kernel:
            waits = [y for y in range(n_keys) if ks.kernel[y] == ks.kernel[x] - 1]
        at = 0.0
        for y in waits:
            if not has[y]:
                continue
            if np.isnan(done[y]):
                return None
            at = max(at, done[y] + alpha[y])
        return at

    while True:
        for i, c in enumerate(classes):
            if np.isnan(start[i]):
                at = 0.0 if c.key < 0 else ready_at(c.key)
                if at is not None:
                    start[i] = at + c.latency_s
        live = [i for i in range(len(classes)) if not np.isnan(start[i]) and start[i] <= t and remaining[i] > 0]
        later = [start[i] for i in range(len(classes)) if not np.isnan(start[i]) and start[i] > t]
        if not live and not later:
            break
        rate = _rates([classes[i] for i in live], capacity) if live else np.zeros(0)
        dt = min([remaining[i] / r for i, r in zip(live, rate) if r > 0] + [s_ - t for s_ in later])
        t += dt
        for i, r in zip(live, rate):
            remaining[i] -= r * dt
            if remaining[i] <= classes[i].nbytes * 1e-12:
                remaining[i] = 0.0
        for x in range(n_keys):
            if has[x] and np.isnan(done[x]):
                mine = [i for i, c in enumerate(classes) if c.key == x]
                if all(remaining[i] == 0 and not np.isnan(start[i]) for i in mine):
                    done[x] = t
    ends = [float(done[x] + alpha[x]) for x in range(n_keys) if has[x]]
    hops = [float(t) for c in classes if c.key < 0]
    return max(ends + hops, default=0.0)


def alike(op: str, comm: _Comm, sizes: np.ndarray | None, cost: CostModel = DEFAULT_COST) -> bool:
    """Whether every rank of ``comm`` runs the same schedule with the same bytes (:func:`_symmetric`)."""
    return _symmetric(op, comm, sizes, setup(comm, cost), cost)


def _symmetric(op: str, comm: _Comm, sizes: np.ndarray | None, s: P2pSetup, cost: CostModel) -> bool:
    """Whether every rank runs the same schedule with the same bytes: an even all-to-all over
    whole groups of equal nodes (PXN finding every rail), or a ring send/recv on one node."""
    if sizes is not None or not comm.ppn or comm.n < 2:
        return False
    if not s.multi_node:
        return op in ("all_to_all", "send_recv")
    if op != "all_to_all" or comm.ppn != s.group_size:
        return False
    # PXN finds each receiver's rail GPU on every node (whole nodes, or the same rails on each).
    return not (cost.pxn and comm.view.gpus_per_domain > 1) or bool(
        np.all((proxies(comm) >= 0).sum(axis=1) == comm.ppn) and
        np.all((proxies(comm) >= 0) == (proxies(comm)[:1] >= 0)))


def time_s(op: str, comm: _Comm, S: float, sizes: np.ndarray | None, cost: CostModel = DEFAULT_COST) -> float:
    """The idle-fabric time of the ``p2p`` construction: where every rank runs alike
    (:func:`_symmetric`) its flows reduced to one class per batch key and kind and run as the
    engine runs them (exact, but that a key's flows all take the wire latency of its farthest
    pair of nodes); elsewhere a lower bound (:func:`_bound_s`), exact where each batch's
    busiest port or slowest flow sets its end (a ring send/recv, one flow per pair) and below
    the flow-level time where transfers of several batches share a port."""
    s = setup(comm, cost)
    n = comm.n
    if n < 2:
        return 0.0
    if S <= 0:
        # NCCL keeps an empty send/recv, a proxy operation of one step and no bytes
        # (src/enqueue.cc, ncclProxyOp nsteps=1 nbytes=0): its handshake costs the p2p latency.
        return _latency_s(cost, s.multi_node, not s.multi_node) if op == "send_recv" and sizes is None else 0.0
    v = comm.view
    capacity = {"nic_out": comm.net_Bps, "nic_in": comm.net_Bps, "nvl_out": v.nvlink_Bps, "nvl_in": v.nvlink_Bps}
    if _symmetric(op, comm, sizes, s, cost):
        classes, ks, alpha = _classes(op, comm, S, s, cost)
        return _simulate(classes, capacity, ks, alpha)
    return _bound_s(comm, plan(op, comm, S, sizes, cost), capacity)


def _classes(op: str, comm: _Comm, S: float, s: P2pSetup, cost: CostModel) -> tuple[list[_Class], Keys, np.ndarray]:
    """The symmetric schedule's classes (one per batch key and kind, :class:`_Class`), its
    keys and each key's latency, as :func:`transfers` builds its flows for every rank."""
    n, g = comm.n, s.group_size
    m = S / n if op == "all_to_all" else S
    nch = int(op_channels(s, m))
    n_rounds = len(s.deltas) * g
    if op == "all_to_all":
        nch_of_round = np.full(n_rounds, nch)
        rounds_ = np.arange(1, n_rounds)
    else:  # a ring on one node: round 1 alone
        nch_of_round = np.zeros(n_rounds, dtype=np.int64)
        nch_of_round[1] = nch
        rounds_ = np.array([1])
    ks = keys(s, nch_of_round, cost)
    k, d = np.arange(n_rounds) // g, np.arange(n_rounds) % g
    col = (base(s, k, d)[:, None] + np.arange(nch)[None, :]) % s.channels
    rkey = batch_key(s, k, d)
    cap = s.cta_Bps * share(ks.works[rkey[:, None], col], cost).sum(axis=1)
    ll = not s.multi_node and m <= nch * cost.p2p_ll_threshold_bytes
    alpha = np.array([_latency_s(cost, s.multi_node and _crosses(s, x), ll and not s.multi_node)
                      for x in range(len(ks.pred))])
    out: list[_Class] = []
    intra = comm.intra_path_s
    if not s.multi_node:
        for one in rounds_.tolist():
            out.append(_Class(m, float(cap[one]), {"nvl_out": 1.0, "nvl_in": 1.0}, intra, int(rkey[one])))
        return out, ks, alpha
    pxn = cost.pxn and comm.view.gpus_per_domain > 1
    for x in range(len(s.deltas)):
        r = x * g
        if not _crosses(s, x):  # the node's own round group: g - 1 NVLink operations a GPU
            if g > 1:
                out.append(_Class(m, float(cap[r]), {"nvl_out": g - 1.0, "nvl_in": g - 1.0}, intra, x))
            continue
        wire = _farthest_s(comm, s, x, pxn)
        if pxn:  # one flow per rail GPU, the group's g senders' bytes
            out.append(_Class(g * m, g * float(cap[r]), {"nic_out": 1.0, "nic_in": 1.0}, wire, x))
        else:
            out.append(_Class(m, float(cap[r]), {"nic_out": float(g), "nic_in": float(g)}, wire, x))
    remote_nodes = s.n_nodes - 1
    if pxn and g > 1 and remote_nodes:  # each GPU to each other rail GPU, paced by its NIC
        out.append(_Class(remote_nodes * m, comm.net_Bps / g, {"nvl_out": g - 1.0, "nvl_in": g - 1.0}, intra, -1))
    return out, ks, alpha


def _farthest_s(comm: _Comm, s: P2pSetup, k: int, rail_to_rail: bool) -> float:
    """The wire latency of round group k's farthest pair: rail to rail (PXN) or any rank of a
    node to any of the other's."""
    d = int(s.deltas[k])
    a = np.repeat(comm.starts[s.group_node], s.group_size) + np.tile(np.arange(s.group_size), s.n_groups)
    b = np.repeat(comm.starts[s.group_node[(np.arange(s.n_groups) + d) % s.n_groups]], s.group_size)
    if rail_to_rail:
        b = b + np.tile(np.arange(s.group_size), s.n_groups)
        return float(comm.class_latency_s[comm.pair_classes(a, b)].max())
    b = b[:, None] + np.arange(s.group_size)[None, :]
    return float(comm.class_latency_s[comm.pair_classes(np.repeat(a, s.group_size), b.ravel())].max())


def _bound_s(comm: _Comm, plan: Transfers, capacity: dict[str, float]) -> float:
    """A lower bound of the construction's time (:func:`time_s`): the larger of the busiest
    port over all transfers and, per batch key, its own transfers' busiest port after the
    latencies of the batches it waits for, each plus its key's latency and the wire's."""
    n = comm.n
    if not len(plan.nbytes):
        return 0.0
    ks = plan.keys

    def busy_s(sel: np.ndarray) -> float:
        # Each port's bytes at its rate after the least wire latency of the transfers on it (a
        # transfer starts once its first byte has crossed the wire), or a transfer at its cap.
        net = plan.kind[sel] == NETWORK
        src, dst, nbytes = plan.src[sel], plan.dst[sel], plan.nbytes[sel]
        wire = comm.class_latency_s[comm.pair_classes(src, dst)] if comm.n_domains > 1 \
            else np.full(len(sel), comm.intra_path_s)
        ends = [float(np.max(nbytes / plan.cap_Bps[sel] + wire))]
        for on, port, rate in ((net, src, capacity["nic_out"]), (net, dst, capacity["nic_in"]),
                               (~net, src, capacity["nvl_out"]), (~net, dst, capacity["nvl_in"])):
            if on.any():
                ends.append(float(np.bincount(port[on], nbytes[on], n).max() / rate + wire[on].min()))
        return max(ends)

    # Latencies along the chains of batches: a key's joins pay its latency after its own
    # transfers, which start after the joins of the keys before it on its channels (and, for a
    # kernel's first keys, after every key of the kernel before).
    # A batch with no transfers has no joins, and nothing waits for it.
    every = np.arange(len(plan.nbytes))
    keyed = plan.key >= 0
    has = np.bincount(plan.key[keyed], minlength=len(ks.pred)) > 0
    chain = np.zeros(len(ks.pred))
    kernel_end = np.zeros(int(ks.kernel.max(initial=0)) + 1)
    for x, pred in enumerate(ks.pred):
        if not has[x]:
            continue
        first = ks.kernel[x] > 0 and not pred
        before = kernel_end[ks.kernel[x] - 1] if first else max((chain[p] for p in pred if has[p]), default=0.0)
        chain[x] = before + float(plan.alpha_s[x])
        kernel_end[ks.kernel[x]] = max(kernel_end[ks.kernel[x]], chain[x])
    per_key = [busy_s(every[keyed & (plan.key == x)]) + chain[x] for x in np.unique(plan.key[keyed])]
    return float(max(per_key + [busy_s(every) + float(plan.alpha_s.min())]))
