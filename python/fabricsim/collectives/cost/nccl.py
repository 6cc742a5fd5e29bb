"""NCCL's own cost model: which (algorithm, protocol) NCCL 2.30 would pick, and the time it predicts.

This reproduces ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime`` of NCCL v2.30.7
(``src/graph/tuning.cc``; docs/sources.md section 4 gives each rule with its file and line):
which pairs NCCL enables on a communicator (``algorithm="auto"`` in fabricsim chooses among them)
and their latencies. Its constants are those of a :class:`fabricsim.CostModel` (``CommShape.cost``,
default NCCL's). NCCL works in GB/s (1e9 B/s) and microseconds; this module takes and returns
bytes/s and seconds, and works in NCCL's units inside.

What is exact and what is approximated
--------------------------------------
* Exact (``tuning.cc:150-435,630-655``): the time formula, the constant tables, the bandwidth refinements per
  algorithm/protocol, the conversion to algorithm bandwidth, the latency formulas, the disabling
  rules, and the ring "plateau" latency factor on more than one node.
* Approximated: the graph search (``src/graph/search.cc``), which in NCCL walks the detected PCI/NVLink
  tree. Here a :class:`CommShape` gives per-GPU totals only, and the search is reduced to these
  rules (``search.cc``'s, docs/sources.md 4.2), evaluated on those totals:

  - a speed ``s`` is taken from the architecture's ladder, starting at the first one that is
    ``<= maxBw`` (the fastest single path: the GPU's NVLink total on one node, its NIC across nodes)
    and with ``s * minChannels <= totalBw`` (x ppn/(ppn-1) for non-ring patterns, ``search.cc:1168``);
  - **ring**: as many channels as fit ``n * s <= NVLink total`` (32 at most); across nodes each of
    the ppn NICs carries ``floor(nic / s)`` channels and a GPU forwards over NVLink on ``(ppn-1)/ppn``
    of them. Pass 1 keeps the best ``n * s`` while lowering ``s`` (stopping once ``n * s >= totalBw``,
    at 32 channels, or when the next speed is <= 0.49x the best one), then duplicates channels
    (``search.cc:1036-1049``), then pass 2 tries higher speeds at that channel count;
  - **tree / CollNet chain**: as many channels as the ring; the first ladder speed at which they
    fit (load ``n * s * (ppn-1)/ppn`` on NVLink, one channel per ``s`` of NIC); pass 2 then raises
    ``bwIntra`` while it is below 2x ``bwInter`` and still fits ("increase bwIntra for trees");
  - **CollNet direct**: as the tree, with ``min(ppn, NCCL_MAX_DIRECT_ARITY + 1 = 8)`` channels (heads);
  - **NVLS**: ``min(32, ppn)`` channels (``search.cc:1124-1138``), the first speed at which a GPU's
    load of ``(channels + heads it leads) * s`` fits its NVLink total (the head GPU's 2x, ``search.cc:410-441``);
    across nodes each head also needs ``s`` on its NIC, and pass 2 raises ``bwInter`` up to 2x
    ``bwIntra`` within the NIC. On one node there is no network leg and ``bwInter`` does not cap the
    NVLS bandwidth (docs/sources.md 4.6 evaluates it so, and measurements of ~480 GB/s agree);
  - PCIe: without NVLink the intra-node path is NCCL's default ``PCI_BW`` = 12 GB/s (Gen3 x16,
    ``topo.h``); a GPU's PCIe link is assumed to be at least as fast as its NIC; every GPU has its
    own NIC under the same PCIe switch (PIX/PXB, as on DGX/HGX) and ``latencyInter`` = 0;
  - ``ppn`` above is the searching node's own GPU count: nodes of different sizes each search
    alone, and the communicator keeps the fewest channels and lowest bandwidths (``init.cc``).

  These reproduce the worked check of docs/sources.md 4.6 exactly: HGX H100 ring 6 x 60 -> 12 x 30, NVLS 8 x 40; B200 NVLS 8 x 80.
* Left out: the tree correction factor table (``tuning.cc:620-646``, applied to Tree and, on
  Blackwell + x86, NVLSTree all-reduce bandwidth for 64 B..256 MB). Only its range (0.4-1.0) is
  transcribed here, not its values, so it is not applied: Tree's bandwidth is the one before that
  correction, up to 2.5x what NCCL uses at medium sizes, so Tree can win here where NCCL picks Ring.
  Also left out: tuner plugins, ``NCCL_ALGO``/``NCCL_PROTO`` overrides, grouped calls (latCount = 1),
  and the per-call channel/thread reduction for small messages (it changes how NCCL runs the chosen
  pair, not which pair it chooses).

all-to-all and send/recv are not in NCCL's tuning table (they always run the p2p path, Simple
protocol); :func:`predict` refuses them with an :class:`~fabricsim.exceptions.InvalidArgumentError`
rather than invent a model NCCL does not have.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..._checks import finite, shown
from ...exceptions import InvalidArgumentError
from .model import DEFAULT, CostModel

if TYPE_CHECKING:
    from ..communicator import _Comm

__all__ = [
    "ALGORITHMS",
    "ARCHS",
    "OPS",
    "PROTOCOLS",
    "CommShape",
    "Graph",
    "Prediction",
    "choose",
    "enabled_pairs",
    "graphs",
    "predict",
]

# NCCL's iteration order (NCCL_ALGO_* and NCCL_PROTO_* indices): ties go to the earlier pair,
# because enqueue.cc:2028-2048 replaces the best only on a strictly smaller time.
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")
ARCHS = ("volta", "ampere", "hopper", "blackwell")
_UNTUNED_OPS = ("all_to_all", "send_recv")
_CPU_VENDORS = ("intel", "amd", "arm")

TREE, RING, CN_DIRECT, CN_CHAIN, NVLS, NVLS_TREE, PAT = range(7)
LL, LL128, SIMPLE = range(3)
_ARCH = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}
_COMPCAP = (70, 80, 90, 100)

# NCCL's constants (latencies, per-channel caps, ladders, efficiencies) live in the cost model
# (fabricsim.cost_model, docs/sources.md 4.2), read here through CommShape.cost in NCCL's units
# (us, GB/s) once per shape: the per-shape tables are cached.
_HW_NVLINK, _HW_PCI, _HW_NET = range(3)  # rows of hw_latency_s
_EPS = 1e-9


@dataclass(frozen=True)
class CommShape:
    """A communicator on its fabric, as NCCL's topology detection would see it.

    ``n_nodes`` counts NVLink domains (hosts, or NVL72 racks), each GPU with its own NIC of
    ``net_Bps``. Every node holds ``n_ranks / n_nodes`` GPUs, or, when they differ, one of the
    counts in ``local_ranks`` (its distinct values, NCCL's ``localRanks`` of the nodes): NCCL
    then searches each node's graphs alone and keeps the least channels and bandwidths
    (``init.cc``), and its tuning formulas take ``ppn = nRanks / nNodes`` as a float. Bandwidths are payload bytes/s per
    direction: ``nvlink_Bps`` is one GPU's NVLink total as NCCL counts it (links x NCCL's per-link
    figure, e.g. 18 x 20.6e9 on H100), 0 when the GPUs talk over PCIe. ``nvswitch`` means NVLS is
    possible (NVSwitch gen 3+ with multicast; NCCL also needs Hopper or later), ``collnet`` that
    in-network reduction (InfiniBand SHARP) is available across nodes. ``cpu_vendor`` ("intel",
    "amd"; "arm" behaves as "intel") picks the multi-node LL cap and the network post overhead.

    Example::

        from fabricsim import nccl_model
        # 16 H100s on 2 HGX boards, 400 Gb/s NIC per GPU
        shape = nccl_model.CommShape(n_ranks=16, n_nodes=2, arch="hopper", nvlink_Bps=450e9,
                                     nvlink_link_Bps=25e9, net_Bps=50e9, nvswitch=True, collnet=False)
        nccl_model.choose("all_reduce", 2**30, shape).algorithm   # 'nvls_tree'
    """

    n_ranks: int
    n_nodes: int
    arch: str
    nvlink_Bps: float
    nvlink_link_Bps: float
    net_Bps: float
    nvswitch: bool
    collnet: bool
    cpu_vendor: str = "intel"
    local_ranks: tuple[int, ...] = ()
    #: The constants NCCL's model is evaluated with (fabricsim.cost_model).
    cost: CostModel = DEFAULT

    def __post_init__(self) -> None:
        for name in ("n_ranks", "n_nodes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 1 <= int(v) < 2**32:
                raise InvalidArgumentError(f"{name}={shown(v)}: expected a positive integer below 2**32")
        if self.n_ranks < 2:
            raise InvalidArgumentError(
                f"n_ranks={self.n_ranks!r}: expected at least 2 (NCCL does not tune a 1-rank communicator)"
            )
        counts = self.local_ranks
        if not isinstance(counts, tuple) or not all(
            isinstance(k, numbers.Integral) and not isinstance(k, bool) and int(k) >= 1 for k in counts
        ):
            raise InvalidArgumentError(f"local_ranks={counts!r}: expected a tuple of positive integers")
        if not counts and self.n_ranks % self.n_nodes:
            raise InvalidArgumentError(
                f"n_ranks={self.n_ranks!r} over n_nodes={self.n_nodes!r}: expected the same number of GPUs "
                "per node, or the nodes' distinct counts in local_ranks"
            )
        if counts and not min(counts) * self.n_nodes <= self.n_ranks <= max(counts) * self.n_nodes:
            raise InvalidArgumentError(
                f"local_ranks={counts!r}: expected nodes of these sizes to hold n_ranks={self.n_ranks!r} "
                f"over n_nodes={self.n_nodes!r}"
            )
        if not isinstance(self.cost, CostModel):
            raise InvalidArgumentError(f"cost={self.cost!r}: expected a fabricsim.CostModel")
        if not isinstance(self.arch, str) or self.arch not in ARCHS:
            raise InvalidArgumentError(f"arch={self.arch!r}: expected one of {', '.join(ARCHS)}")
        if not isinstance(self.cpu_vendor, str) or self.cpu_vendor not in _CPU_VENDORS:
            raise InvalidArgumentError(f"cpu_vendor={self.cpu_vendor!r}: expected 'intel', 'amd' or 'arm'")
        for name in ("nvlink_Bps", "nvlink_link_Bps", "net_Bps"):
            v = getattr(self, name)
            f = finite(v)
            if f is None or f < 0:
                raise InvalidArgumentError(f"{name}={shown(v)}: expected a finite number of bytes/s >= 0")
        for name in ("nvswitch", "collnet"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{name}={getattr(self, name)!r}: expected True or False")
        if self.nvlink_Bps > 0 and not 0 < self.nvlink_link_Bps <= self.nvlink_Bps:
            raise InvalidArgumentError(
                f"nvlink_link_Bps={self.nvlink_link_Bps!r}: expected > 0 and <= nvlink_Bps={self.nvlink_Bps!r}"
            )
        if self.nvswitch and self.nvlink_Bps == 0:
            raise InvalidArgumentError("nvswitch=True with nvlink_Bps=0: an NVSwitch needs NVLink")
        if self.n_nodes > 1 and self.net_Bps == 0:
            raise InvalidArgumentError(
                f"net_Bps=0 with n_nodes={self.n_nodes}: expected a NIC bandwidth > 0 across nodes"
            )

    @property
    def ppn(self) -> float:
        """GPUs per node (per NVLink domain) on average, as NCCL's tuning takes it (a float)."""
        return self.n_ranks / self.n_nodes

    @property
    def node_sizes(self) -> tuple[int, ...]:
        """The distinct numbers of GPUs the nodes hold."""
        return tuple(sorted(set(self.local_ranks))) or (self.n_ranks // self.n_nodes,)


@dataclass(frozen=True)
class Prediction:
    """NCCL's prediction for one (algorithm, protocol): ``time_s = latency_s + size / alg_Bps``.

    ``bus_Bps`` is NCCL's busBw after its refinements, before conversion; ``alg_Bps`` is the
    converted bandwidth NCCL stores in ``comm->bandwidths`` and divides the size by; ``latency_s``
    is the latency term of this call (with the ring plateau factor when it applies).

    Example::

        from fabricsim import nccl_model
        # 16 H100s on 2 HGX boards, 400 Gb/s NIC per GPU
        shape = nccl_model.CommShape(n_ranks=16, n_nodes=2, arch="hopper", nvlink_Bps=450e9,
                                     nvlink_link_Bps=25e9, net_Bps=50e9, nvswitch=True, collnet=False)
        p = nccl_model.choose("all_reduce", 2**30, shape)
        p.time_s == p.latency_s + 2**30 / p.alg_Bps   # True
    """

    algorithm: str
    protocol: str
    time_s: float
    bus_Bps: float
    alg_Bps: float
    latency_s: float


@dataclass(frozen=True)
class Graph:
    """One graph-search result: ``n_channels`` channels of ``bw_intra_Bps``/``bw_inter_Bps`` each.

    Example::

        from fabricsim import nccl_model
        # 16 H100s on 2 HGX boards, 400 Gb/s NIC per GPU
        shape = nccl_model.CommShape(n_ranks=16, n_nodes=2, arch="hopper", nvlink_Bps=450e9,
                                     nvlink_link_Bps=25e9, net_Bps=50e9, nvswitch=True, collnet=False)
        nccl_model.graphs(shape)["ring"]   # Graph(n_channels=8, bw_intra_Bps=48000000000.0, bw_inter_Bps=48000000000.0)
    """

    n_channels: int
    bw_intra_Bps: float
    bw_inter_Bps: float


# --- Graph search (approximation of search.cc, see the module docstring) -----------------------


@dataclass(frozen=True)
class _Units:
    """The cost model's NCCL constants in NCCL's units (us, GB/s), as _k gives them."""

    base_lat: tuple[tuple[float, ...], ...]
    hw_lat: tuple[tuple[tuple[float, ...], ...], ...]
    net_overhead: tuple[float, ...]
    ll_max: tuple[tuple[float, ...], ...]
    ring_ll128: tuple[tuple[float, ...], ...]
    tree_ll128: tuple[tuple[float, ...], ...]
    tree: tuple[tuple[float, ...], ...]
    nvls_tree: tuple[tuple[float, ...], ...]
    ladder_intra: tuple[tuple[float, ...], ...]
    ladder_inter: tuple[tuple[float, ...], ...]
    pci: float
    c: CostModel
    dup_below: float
    dup_ampere_below: float
    arity: float
    pat_per_rank: float


@lru_cache(maxsize=64)
def _k(cost: CostModel) -> _Units:
    """The cost model's NCCL constants in NCCL's units: us (times latency_scale) and GB/s."""
    # A table (nested tuples of any depth) or a number, converted entry by entry.
    def us(t: Any) -> Any:
        return tuple(us(x) for x in t) if isinstance(t, tuple) else t * 1e6 * cost.latency_scale

    def gb(t: Any) -> Any:
        return tuple(gb(x) for x in t) if isinstance(t, tuple) else t / 1e9

    return _Units(
        base_lat=us(cost.base_latency_s), hw_lat=us(cost.hw_latency_s), net_overhead=us(cost.net_overhead_s),
        ll_max=gb(cost.ll_max_Bps), ring_ll128=gb(cost.per_channel_ring_ll128_Bps),
        tree_ll128=gb(cost.per_channel_tree_ll128_Bps), tree=gb(cost.per_channel_tree_Bps),
        nvls_tree=gb(cost.per_channel_nvls_tree_Bps), ladder_intra=gb(cost.ladder_intra_Bps),
        ladder_inter=gb(cost.ladder_inter_Bps), pci=cost.pci_Bps / 1e9, c=cost,
        dup_below=cost.channel_dup_below_Bps / 1e9, dup_ampere_below=cost.channel_dup_ampere_below_Bps / 1e9,
        arity=us(cost.collnet_arity_latency_s), pat_per_rank=us(cost.pat_latency_per_rank_s),
    )


@dataclass(frozen=True)
class _Sys:
    cc: int
    ppn: int
    multi: bool
    intra: float    # one GPU's intra-node bandwidth, GB/s (inf with one GPU per node)
    nvl: float
    net: float
    max_bw: float   # system->maxBw
    total_bw: float  # system->totalBw
    ladder: tuple[float, ...]
    k: _Units  # the cost model's constants in NCCL's units (_k)


def _system(s: CommShape, ppn: int) -> _Sys:
    """One node of ``ppn`` GPUs, as its own graph search sees it."""
    a = _ARCH[s.arch]
    k = _k(s.cost)
    nvl, net = s.nvlink_Bps / 1e9, s.net_Bps / 1e9
    multi = s.n_nodes > 1
    intra = math.inf if ppn == 1 else (nvl if nvl > 0 else k.pci)
    pci = max(k.pci, net)
    return _Sys(
        cc=_COMPCAP[a], ppn=ppn, multi=multi, intra=intra, nvl=nvl, net=net if multi else 0.0,
        max_bw=net if multi else (nvl if nvl > 0 else k.pci),
        total_bw=max(nvl, pci),
        ladder=(k.ladder_inter if multi else k.ladder_intra)[a], k=k,
    )


def _start(sy: _Sys, min_channels: int, ring: bool) -> int:
    # search.cc: skip speeds above maxBw or with speed*minChannels above totalBw, which non-ring
    # patterns inflate by ngpus/(ngpus-1) because they do not loop back to the first GPU.
    total = sy.total_bw if ring or sy.ppn == 1 else sy.total_bw * sy.ppn / (sy.ppn - 1)
    lad, i = sy.ladder, 0
    while i < len(lad) - 1 and (lad[i] > sy.max_bw + _EPS or lad[i] * min_channels > total + _EPS):
        i += 1
    return i


def _nic_channels(sy: _Sys, s: float) -> int:
    return sy.ppn * math.floor(sy.net / s + _EPS) if sy.multi else sy.k.c.ring_max_channels


def _ring_channels(sy: _Sys, s: float) -> int:
    if not sy.multi:  # the ring loops back: every GPU sends s per channel over NVLink/PCIe
        return min(sy.k.c.ring_max_channels, math.floor(sy.intra / s + _EPS))
    n = _nic_channels(sy, s)
    if sy.ppn > 1:  # the last GPU of a channel sends to its NIC, not over NVLink
        n = min(n, math.floor(sy.intra * sy.ppn / ((sy.ppn - 1) * s) + _EPS))
    return min(sy.k.c.ring_max_channels, n)


def _ring_graph(sy: _Sys) -> tuple[int, float, float]:
    lad = sy.ladder
    i = _start(sy, 1, ring=True)
    n, s = 0, 0.0
    while True:  # pass 1: best n*s while decreasing the speed
        c = _ring_channels(sy, lad[i])
        if c >= 1 and c * lad[i] > n * s + _EPS:
            n, s = c, lad[i]
        if n and (n == sy.k.c.ring_max_channels or n * s >= sy.total_bw - _EPS):
            break
        if i + 1 >= len(lad) or (n and lad[i + 1] / s <= sy.k.c.search_speed_drop):
            break
        i += 1
    if not n:  # search.cc's fallback graph
        return 1, 0.1, 0.1
    # ncclTopoDupChannels (search.cc:1036-1049): double the channels, split their bandwidth.
    if not (s < sy.k.dup_below or (sy.cc > 80 and s < sy.k.dup_ampere_below and n > 4)):
        d = min(2 * n, sy.k.c.ring_max_channels)
        s, n = s / math.ceil(d / n), d
    # Pass 2: a higher speed at no fewer channels, if it carries more.
    j = next((k for k, v in enumerate(lad) if v <= s + _EPS), len(lad))
    for v in reversed(lad[:j]):
        c = _ring_channels(sy, v)
        if c >= n and c * v > n * s + _EPS:
            n, s = c, v
    return n, s, s


def _tree_like_graph(sy: _Sys, n: int) -> tuple[int, float, float]:
    """Tree, CollNet chain and CollNet direct graphs: ``n`` channels (min = max channels)."""
    lad = sy.ladder

    def fits(s_intra: float, s_inter: float) -> bool:
        intra_ok = sy.ppn == 1 or n * s_intra * (sy.ppn - 1) / sy.ppn <= sy.intra + _EPS
        return intra_ok and n <= _nic_channels(sy, s_inter)

    i = _start(sy, n, ring=False)
    while i < len(lad) - 1 and not fits(lad[i], lad[i]):
        i += 1
    if not fits(lad[i], lad[i]):
        return n, 0.1, 0.1
    intra = inter = lad[i]
    # Pass 2, "increase bwIntra for trees (2 nodes or collnet)": while below 2x bwInter.
    while i > 0 and intra < 2 * inter - _EPS and fits(lad[i - 1], inter):
        i -= 1
        intra = lad[i]
    return n, intra, inter


def _nvls_graph(sy: _Sys, s: CommShape) -> tuple[int, float, float] | None:
    if not (s.nvswitch and sy.cc >= 90 and sy.ppn >= 2):
        return None
    n = min(sy.k.c.nvls_max_arity, sy.ppn)
    heads = math.ceil(n / sy.ppn)  # channels a GPU leads; its NVSwitch link carries 2x on those

    def fits(v: float) -> bool:
        return (n + heads) * v <= sy.nvl + _EPS and (not sy.multi or heads * v <= sy.net + _EPS)

    lad = sy.ladder
    i = _start(sy, 1 if sy.multi else n, ring=False)
    while i < len(lad) - 1 and not fits(lad[i]):
        i += 1
    if not fits(lad[i]):
        return None
    intra = lad[i]
    if not sy.multi:
        return n, intra, math.inf  # no network leg on one node (module docstring)
    inter = intra  # pass 2: raise bwInter while below 2x bwIntra and the heads' NICs allow it
    while i > 0 and inter < 2 * intra - _EPS and heads * lad[i - 1] <= sy.net + _EPS:
        i -= 1
        inter = lad[i]
    return n, intra, inter


# --- ncclTopoTuneModel ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    algo: int
    proto: int
    lat_us: float
    bw: float         # converted bandwidth, GB/s
    bus: float        # busBw before conversion, GB/s
    plateau_bytes: float  # from this size on, latency x plateau (ring/Simple all-reduce across nodes)
    plateau: float


def _algos(op: str, s: CommShape, cc: int) -> tuple[int, ...]:
    if op in ("broadcast", "reduce"):
        return (RING,)
    nvls = s.nvswitch and cc >= 90 and (s.n_nodes == 1 or s.collnet)
    collnet = s.collnet and s.n_nodes > 1
    direct = collnet and s.nvswitch  # CollNetDirect needs an NVSwitch (tuning.cc:508-509)
    if op == "all_reduce":
        out = [TREE, RING]
        out += [CN_DIRECT] * direct + [CN_CHAIN] * collnet + [NVLS] * nvls
        out += [NVLS_TREE] * (s.nvswitch and cc >= 90 and s.n_nodes > 1)
        return tuple(sorted(out))
    # AllGather/ReduceScatter: Ring, NVLS, CollNetDirect, PAT. Across nodes NVLS and CollNetDirect
    # need one CollNet head per local rank (the heads of the smallest node); PAT needs one GPU per
    # node and a host-driven network.
    heads = min(min(s.node_sizes), s.cost.direct_max_heads)
    nvls = nvls and (s.n_nodes == 1 or s.ppn <= heads)
    direct = direct and s.ppn <= heads
    pat = s.ppn == 1
    return tuple(a for a, on in ((RING, True), (CN_DIRECT, direct), (NVLS, nvls), (PAT, pat)) if on)


@lru_cache(maxsize=1024)
def _graphs(s: CommShape) -> dict[int, tuple[int, float, float]]:
    """Every node's graphs, combined as NCCL combines them across ranks (init.cc): the fewest
    channels and the lowest bandwidths; a graph some node cannot build is absent."""
    per_node = [_node_graphs(s, _system(s, k)) for k in s.node_sizes]
    return {a: (min(g[a][0] for g in per_node), min(g[a][1] for g in per_node), min(g[a][2] for g in per_node))
            for a in per_node[0] if all(a in g for g in per_node)}


def _node_graphs(s: CommShape, sy: _Sys) -> dict[int, tuple[int, float, float]]:
    ring = _ring_graph(sy)
    out = {RING: ring, TREE: _tree_like_graph(sy, ring[0])}
    out[PAT] = out[TREE]  # init.cc: PAT runs on the tree graph
    if s.collnet and s.n_nodes > 1:
        out[CN_CHAIN] = _tree_like_graph(sy, ring[0])
        out[CN_DIRECT] = _tree_like_graph(sy, min(sy.ppn, s.cost.direct_max_heads))
    nvls = _nvls_graph(sy, s)
    if nvls is not None and nvls[0] >= 2:  # NVLS/NVLSTree need >= 2 channels (tuning.cc:307)
        out[NVLS] = out[NVLS_TREE] = nvls
    return out


def _bus_bw(op: str, a: int, p: int, g: tuple[int, float, float], s: CommShape, sy: _Sys, col: int) -> float:
    """busBw in GB/s of algorithm a, protocol p on graph g = (nCh, bwIntra, bwInter); 0 = disabled."""
    ar = op == "all_reduce"
    arch = _ARCH[s.arch]
    n_ch, b_intra, b_inter = g
    ppn = s.ppn
    k, c = sy.k, s.cost
    if a in (NVLS, NVLS_TREE):
        if p != SIMPLE:
            return 0.0
        intra = b_intra * c.nvls_efficiency[arch] * (n_ch - 1) / n_ch
        intra *= 2.0 if ar else (ppn - 1) / ppn  # "AllReduce pipelines two operations"
        inter = b_inter * (2 if a == NVLS_TREE and s.n_nodes <= 2 else 1)
        bw = min(intra, inter, k.nvls_tree[arch][col] if a == NVLS_TREE else math.inf)
        return n_ch * bw
    collnet = a in (CN_DIRECT, CN_CHAIN)
    bw = b_intra if s.n_nodes <= 2 or collnet else b_inter
    bus = n_ch * bw
    if a == RING and p == LL:
        ll_row = arch if s.n_nodes == 1 else (1 if s.cpu_vendor == "amd" else 0)
        return min(k.ll_max[ll_row][col], bus * c.ll_payload)
    if a == RING and p == LL128:
        return min(bus * c.ll128_payload, n_ch * k.ring_ll128[arch][col])
    if a == TREE:
        bus = min(bus * c.tree_factor, n_ch * k.tree[arch][col])
        if p == LL:
            ll_row = arch if s.n_nodes == 1 else (1 if s.cpu_vendor == "amd" else 0)
            bus = min(bus * c.tree_ll_factor, k.ll_max[ll_row][col])
        elif p == LL128:
            bus = min(bus * (c.tree_ll128_one_node if s.n_nodes == 1 else c.tree_ll128_multi_node),
                      n_ch * k.tree_ll128[arch][col])
        return bus  # the x0.85 of NCCL_TOPO_PATTERN_TREE does not apply: the search keeps BALANCED_TREE
    if a == PAT:
        return bus * c.pat_factor if p == SIMPLE else 0.0
    if collnet and p != SIMPLE:
        return 0.0
    if a == CN_DIRECT:
        if not ar:
            return ppn * min(b_intra, b_inter * c.collnet_direct_net_factor)
        f = ppn / n_ch  # "GPU/NIC ratio"
        bus /= f - (f - 1) / 2
        return bus * c.collnet_direct_factor if sy.cc >= 90 else bus
    return bus  # ring Simple, CollNet chain


def _latency_us(op: str, a: int, p: int, s: CommShape, sy: _Sys, same_channels: bool) -> float:
    n, nodes, ppn = s.n_ranks, s.n_nodes, s.ppn
    local = n // nodes - 1  # NCCL's integer nRanks/nNodes - 1 in the tree and CollNet latencies
    k = sy.k
    intra_hw = _HW_NVLINK if sy.nvl > 0 and ppn > 1 else _HW_PCI
    base = k.base_lat[a][p]
    intra = k.hw_lat[intra_hw][a][p]
    inter = k.hw_lat[_HW_NET][TREE if ppn == 1 else a][p]  # + latencyInter (x2 for Simple) = 0
    log_nodes = nodes.bit_length() - 1  # log2i
    if a == RING:
        nsteps = 2 * (n - 1) if op == "all_reduce" else n - 1 if op in ("all_gather", "reduce_scatter") else n
        if op in ("broadcast", "reduce"):
            hw = intra_hw if nodes == 1 else _HW_NET
            if same_channels:
                return base + k.hw_lat[hw][RING][p]
            return base + nsteps * k.hw_lat[hw][TREE if p == SIMPLE else RING][p]
        overhead = 0.0
        if nodes > 1:  # "inter-node rings still have to launch nsteps * net overhead"
            overhead = k.net_overhead[s.cpu_vendor == "amd"] * (s.cost.simple_net_overhead_factor if p == SIMPLE else 1)
        n_inter = 0 if nodes == 1 else 2 * (nodes - 1) if op == "all_reduce" else nodes - 1
        return base + (nsteps - n_inter) * max(intra, overhead) + n_inter * inter
    if a == TREE:
        return base + 2 * (local * intra + log_nodes * inter)
    if a == CN_DIRECT:
        return base + 2 * (min(1, local) * intra + local * k.arity) + inter
    if a == CN_CHAIN:
        return base + 2 * local * intra + inter
    if a == NVLS:  # "=", not "+=": NCCL drops the base latency here
        return intra + (inter if nodes > 1 else 0.0)
    if a == NVLS_TREE:
        return base + intra + 2 * log_nodes * inter
    return base + log_nodes * inter / s.cost.pat_net_latency_divisor + n * k.pat_per_rank  # PAT


@lru_cache(maxsize=4096)
def _table(op: str, s: CommShape) -> tuple[_Entry, ...]:
    sy = _system(s, s.node_sizes[-1])  # the per-GPU figures, the same on every node
    gs = _graphs(s)
    col = min(s.n_nodes, 3) - 1
    n = s.n_ranks
    nsteps = 2 * (n - 1) if op == "all_reduce" else n - 1 if op in ("all_gather", "reduce_scatter") else n
    # LL128 needs NVLink between the GPUs (or a single GPU per node) and a PIX/PXB/PXN NIC path,
    # which is assumed (tuning.cc:514-536).
    ll128 = sy.nvl > 0 or s.ppn == 1
    same_channels = s.n_nodes == 1
    comm_channels = min(gs[RING][0], gs[TREE][0])
    out = []
    for a in _algos(op, s, sy.cc):
        if a not in gs:
            continue
        for p in (LL, LL128, SIMPLE):
            if p == LL128 and not ll128:
                continue
            bus = _bus_bw(op, a, p, gs[a], s, sy, col)
            if bus <= 0:
                continue
            if a != RING and op in ("all_gather", "reduce_scatter"):
                bw = bus  # stored unconverted (tuning.cc:376-382)
            elif a in (RING, NVLS, NVLS_TREE):
                bw = bus * n / nsteps
            else:
                bw = bus * 0.5
            plateau_bytes, plateau = math.inf, 1.0
            if a == RING and p == SIMPLE and op == "all_reduce" and s.n_nodes > 1:
                plateau_bytes = 64 * comm_channels * n  # nBytes/(nChannels*nRanks) >= 64
                plateau = s.cost.ring_plateau_factor[sy.cc >= 80]
            lat = _latency_us(op, a, p, s, sy, same_channels)
            out.append(_Entry(a, p, lat, bw, bus, plateau_bytes, plateau))
    return tuple(out)


# --- Public API ------------------------------------------------------------------------------------


def _check(op: Any, size_bytes: Any, shape: Any) -> float:
    if type(size_bytes) is float and type(shape) is CommShape and type(op) is str and op in OPS and 0 <= size_bytes < math.inf:
        return size_bytes  # the common case, checked without the abstract-class tests below
    if not isinstance(shape, CommShape):
        raise InvalidArgumentError(f"shape={shape!r}: expected a fabricsim.nccl_model.CommShape")
    if not isinstance(op, str) or op not in OPS:
        if isinstance(op, str) and op in _UNTUNED_OPS:
            raise InvalidArgumentError(
                f"op={op!r} is not in NCCL's tuning table: NCCL runs it as point-to-point transfers "
                "(Simple protocol) and never chooses an algorithm for it"
            )
        raise InvalidArgumentError(f"op={op!r}: expected one of {', '.join(OPS)}")
    f = finite(size_bytes)
    if f is None or f < 0:
        raise InvalidArgumentError(f"size_bytes={shown(size_bytes)}: expected a finite number of bytes >= 0")
    return f


def _prediction(e: _Entry, nbytes: float) -> Prediction:
    lat = e.lat_us * (e.plateau if nbytes >= e.plateau_bytes else 1.0)
    return Prediction(
        ALGORITHMS[e.algo], PROTOCOLS[e.proto], (lat + nbytes / (1000.0 * e.bw)) * 1e-6,
        e.bus * 1e9, e.bw * 1e9, lat * 1e-6,
    )


def predict(op: str, size_bytes: float, shape: CommShape) -> list[Prediction]:
    """NCCL's predicted time of ``op`` on ``size_bytes`` for every (algorithm, protocol) it enables.

    ``size_bytes`` is nccl-tests' "size" column, which is NCCL's ``nBytes``: the per-rank buffer
    for all_reduce, broadcast and reduce, the whole gathered buffer (per-rank count x n_ranks) for
    all_gather and reduce_scatter. ``op`` is one of :data:`OPS`; all_to_all and send_recv raise
    :class:`~fabricsim.exceptions.InvalidArgumentError`, as NCCL does not tune them. Results come
    in NCCL's order: algorithm index (:data:`ALGORITHMS`), then protocol (:data:`PROTOCOLS`).

    Example::

        from fabricsim import nccl_model
        # 16 H100s on 2 HGX boards, 400 Gb/s NIC per GPU
        shape = nccl_model.CommShape(n_ranks=16, n_nodes=2, arch="hopper", nvlink_Bps=450e9,
                                     nvlink_link_Bps=25e9, net_Bps=50e9, nvswitch=True, collnet=False)
        for p in nccl_model.predict("all_reduce", 2**20, shape):   # 1 MiB: every pair NCCL enables
            print(p.algorithm, p.protocol, p.time_s)
    """
    nbytes = _check(op, size_bytes, shape)
    return [_prediction(e, nbytes) for e in _table(op, shape)]


def choose(op: str, size_bytes: float, shape: CommShape) -> Prediction:
    """The (algorithm, protocol) NCCL would run: the lowest predicted time, ties to NCCL's order.

    Arguments as for :func:`predict`. The per-shape table is cached, so a call costs only the
    time formula over the enabled pairs.

    Example::

        from fabricsim import nccl_model
        # 16 H100s on 2 HGX boards, 400 Gb/s NIC per GPU
        shape = nccl_model.CommShape(n_ranks=16, n_nodes=2, arch="hopper", nvlink_Bps=450e9,
                                     nvlink_link_Bps=25e9, net_Bps=50e9, nvswitch=True, collnet=False)
        p = nccl_model.choose("all_reduce", 2**30, shape)
        p.algorithm, p.protocol   # ('nvls_tree', 'simple')
    """
    nbytes = _check(op, size_bytes, shape)
    best, best_t = None, math.inf
    for e in _table(op, shape):
        t = e.lat_us * (e.plateau if nbytes >= e.plateau_bytes else 1.0) + nbytes / (1000.0 * e.bw)
        if t < best_t:
            best, best_t = e, t
    assert best is not None  # Ring/Simple is always enabled, with a finite time
    return _prediction(best, nbytes)


@lru_cache(maxsize=4096)
def _named_entries(op: str, shape: CommShape) -> dict[tuple[str, str], _Entry]:
    return {(ALGORITHMS[e.algo], PROTOCOLS[e.proto]): e for e in _table(op, shape)}


def enabled_pairs(op: str, shape: CommShape) -> tuple[tuple[str, str], ...]:
    """The (algorithm, protocol) pairs NCCL enables for ``op`` on ``shape``, in NCCL's order.

    Example::

        from fabricsim import nccl_model
        # 16 H100s on 2 HGX boards, 400 Gb/s NIC per GPU
        shape = nccl_model.CommShape(n_ranks=16, n_nodes=2, arch="hopper", nvlink_Bps=450e9,
                                     nvlink_link_Bps=25e9, net_Bps=50e9, nvswitch=True, collnet=False)
        nccl_model.enabled_pairs("all_reduce", shape)[:3]   # (('tree', 'll'), ('tree', 'll128'), ('tree', 'simple'))
    """
    _check(op, 0.0, shape)
    return tuple(_named_entries(op, shape))


def _entry_latency_us(e: _Entry, nbytes: float) -> float:
    return e.lat_us * (e.plateau if nbytes >= e.plateau_bytes else 1.0)


def latency_of(op: str, size_bytes: float, shape: CommShape, algorithm: str, protocol: str) -> float | None:
    """The latency of one (algorithm, protocol), or None where NCCL does not enable it."""
    nbytes = _check(op, size_bytes, shape)
    e = _named_entries(op, shape).get((algorithm, protocol))
    return None if e is None else _entry_latency_us(e, nbytes) * 1e-6


def times_s(op: str, size_bytes: float, shape: CommShape) -> dict[tuple[str, str], float]:
    """Predicted time of each (algorithm, protocol) NCCL enables, in NCCL's order."""
    nbytes = _check(op, size_bytes, shape)
    return {key: (_entry_latency_us(e, nbytes) + nbytes / (1000.0 * e.bw)) * 1e-6
            for key, e in _named_entries(op, shape).items()}


@lru_cache(maxsize=4096)
def protocol_efficiency(op: str, shape: CommShape) -> dict[tuple[str, str], float]:
    """Bus bandwidth of each (algorithm, protocol) as a fraction of the same algorithm's under
    the Simple protocol: NCCL's own ratios (LL's half or less, LL128's 0.92 and their
    per-channel caps), the cost of the flags the low-latency protocols send with the data."""
    simple = {ALGORITHMS[e.algo]: e.bus for e in _table(op, shape) if PROTOCOLS[e.proto] == "simple"}
    return {
        (ALGORITHMS[e.algo], PROTOCOLS[e.proto]): e.bus / simple[ALGORITHMS[e.algo]]
        for e in _table(op, shape) if ALGORITHMS[e.algo] in simple
    }


def graphs(shape: CommShape) -> dict[str, Graph]:
    """The channel graphs the (approximated) search finds for ``shape``, keyed by algorithm.

    ``bw_inter_Bps`` is ``inf`` for NVLS on one node, where there is no network leg.

    Example::

        from fabricsim import nccl_model
        # 16 H100s on 2 HGX boards, 400 Gb/s NIC per GPU
        shape = nccl_model.CommShape(n_ranks=16, n_nodes=2, arch="hopper", nvlink_Bps=450e9,
                                     nvlink_link_Bps=25e9, net_Bps=50e9, nvswitch=True, collnet=False)
        sorted(nccl_model.graphs(shape))   # ['nvls', 'nvls_tree', 'pat', 'ring', 'tree']
    """
    if not isinstance(shape, CommShape):
        raise InvalidArgumentError(f"shape={shape!r}: expected a fabricsim.nccl_model.CommShape")
    return {
        ALGORITHMS[a]: Graph(n, intra * 1e9, inter * 1e9)
        for a, (n, intra, inter) in sorted(_graphs(shape).items())
    }


def comm_channels(comm: "_Comm", cost: CostModel = DEFAULT) -> int:
    """The channels a communicator sets up (NCCL's ``comm->nChannels``), on which its ring and
    tree collectives run (one CTA each, before NCCL's reduction for small messages): twice the
    fewer of its ring and tree graphs' channels (src/graph/connect.cc:460), at most
    ``p2p_max_channels`` (MAXCHANNELS, 64), and twice again across nodes on Hopper and later
    where the ring's intra-node speed passes 45 GB/s with fewer than 16 (connect.cc:480-483)."""
    graphs = _graphs(comm_shape(comm, comm.n, comm.n_domains, cost))
    ring, tree = graphs[RING], graphs[TREE]
    ctas = min(cost.p2p_max_channels, 2 * min(ring[0], tree[0]))
    if comm.n_domains > 1 and comm.view.arch in ("hopper", "blackwell") and ring[1] > 45.0 and ctas < 16:
        ctas *= 2
    return int(ctas)


def comm_shape(comm: "_Comm", n: int, n_nodes: int, cost: CostModel = DEFAULT) -> CommShape:
    """The :class:`CommShape` of ``n`` ranks over ``n_nodes`` nodes of a communicator's fabric
    (its NVLink and NIC figures), made once per fabric and kept for its sweeps."""
    from ..communicator import _COMMS_KEPT

    v = comm.view
    key = (n, n_nodes, comm.net_Bps, comm.local_ranks, cost)
    shape = v.shapes.get(key)
    if shape is None:
        if len(v.shapes) >= _COMMS_KEPT * 4:
            v.shapes.clear()
        shape = v.shapes[key] = CommShape(
            n_ranks=n, n_nodes=n_nodes, arch=v.arch, nvlink_Bps=v.nvlink_Bps,
            nvlink_link_Bps=v.nvlink_link_Bps, net_Bps=comm.net_Bps if n_nodes > 1 else 0.0,
            nvswitch=v.nvls, collnet=v.sharp and n_nodes > 1, local_ranks=comm.local_ranks, cost=cost,
        )
    return shape
