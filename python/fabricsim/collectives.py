"""Collectives as NCCL runs them, in two fidelities (DESIGN.md section 2).

**flow**: a pipelined ring (or reduction tree) is one *coupled flow* whose usage is the union
of its edges' routes, so the slowest edge paces it; phases (hierarchical algorithms) are a DAG
joined by zero-length barriers; all-to-all and send/recv are independent flows.

**routing**: an edge of a coupled flow, and each independent transfer (all-to-all,
send/recv, halving-doubling's steps), stands for NCCL's channels to a peer, which NCCL
stripes over the NIC's ports (a multi-plane NIC splits over the planes itself). So where a
multi-plane tier is routed by ECMP, each splits over the planes as adaptive routing splits a
flow (by the endpoint's links per plane; after a fault, by what each plane still carries)
and is hashed onto one path within each plane, as the analytical time, which counts every
plane, assumes. A SHARP tree's edges are not hashed but climb to the tree's root switch
(``sharp`` below), and NVLS is sprayed over every NVSwitch chip whatever the routing.

**analytical**: the alpha-beta closed form of the same construction on an idle fabric: alpha
from NCCL's latency model (`nccl_model`) for the protocol, plus the wire latency of each
pipelined step (a step waits for its hop's route: NCCL's step counts times the NVLink or
network route latency), beta from the per-GPU NVLink and network bandwidths. On an
uncongested fabric the two agree; the difference is contention.

**cost model**: every constant here (NVLS efficiency and channel counts, per-channel
ceilings, latencies, protocol overheads, the SHARP accounting, optional payload
efficiencies) comes from one :class:`fabricsim.CostModel`, passed as ``cost_model=`` to
:class:`~fabricsim.Scenario`, :func:`estimate` and :func:`nccl_tests`; its ``latency_scale`` set
to 0 leaves only wire latency (ASTRA-sim's analytical ring, hardware.md 6.4, within 0.2%).

**protocols**: ring and tree run Simple, LL128 or LL. The low-latency protocols send flags
with the data, so every edge carries ``1/efficiency`` wire bytes per payload byte, the
efficiency being NCCL's own ratio of that protocol's bus bandwidth to Simple's (LL128 about
0.92 or its per-channel cap, LL far less), and the alpha is that protocol's.

Algorithms (``size_bytes`` is nccl-tests' "size", ``S``; ``n`` ranks, ``D`` NVLink domains of
``p`` ranks each, or, where domains hold different numbers, ``m`` the fewest (``m = p`` where
they hold as many); ``B_nvl``, ``B_net`` per-GPU NVLink and network payload rates):

* ``ring``: every op. All-reduce moves ``2(n-1)/n S`` over every ring edge, reduce-scatter and
  all-gather ``(n-1)/n S``, broadcast/reduce ``S`` along a chain from the root. Across domains
  the ring runs ``p`` channels: channel ``c`` enters domain ``d`` at local GPU ``c - d`` and
  leaves from the GPU before it, on the same rail as the next domain's entry, so each GPU is the
  exit of one channel and each NIC carries one channel's edge (no PXN hop is modelled).
* ``tree``: NCCL's double binary tree all-reduce: ``m`` channels (one per rail), each two
  pipelined trees of ``S/(2m)`` over the domains (NCCL's binary tree and its mirror or shift, so
  most leaves of one are inner vertices of the other), joined inside each domain by a chain
  through all its ranks that starts at the channel's rail GPU (rank ``c`` of the domain), as
  NCCL chains each node's own ranks and keeps the fewest channels any node has. Every tree and
  chain edge carries its tree's bytes once up (reduce) and once down (broadcast); a domain's
  NIC carries one edge per tree neighbour. Where domains hold more than ``m`` ranks, the
  longer chains load their GPUs' NVLink more (``analytical_s`` says how much).
* ``halving_doubling``: recursive halving (reduce-scatter) then recursive doubling
  (all-gather), as MPI's Rabenseifner all-reduce: step ``s`` of the halving exchanges
  ``S/2^(s+1)`` with the rank at distance ``2^k/2^(s+1)``; a non-power of two first folds the
  extra ranks into the first ones and finally sends them the result. Not pipelined: each step
  is a phase of independent flows and pays its own point-to-point alpha. Reduce-scatter and
  all-gather alone need a power of two. Its flows, like ``direct``'s, stand for NCCL's
  channels to a peer and are striped over the NIC's ports as a ring's edge is (under ECMP
  split over the planes of a multi-plane fabric, hashed within each).
* ``direct``: all-to-all (``S/n`` to every peer, or a size matrix) and send/recv (rank i to
  rank i+1, as nccl-tests' sendrecv). A transfer starts after its route's wire latency, which
  is its pair's latency class's: one domain (NVLink), or where the two NICs meet in the
  scale-out Clos (one leaf, a spine, a core). The analytical time has each rank's NVLink and
  NIC, each way, move their bytes at full rate from their classes' starts on (a port's last
  busy period begins as one of its classes starts), then the p2p alpha. That is exact where
  every rank's ports carry alike per class (whole domains on a Clos, send/recv's ring), as
  max-min sharing then keeps every port busy. Elsewhere it can hold a port below its rate
  while its transfers wait on busier ports: the analytical time is then a lower bound (within
  0.12% on random subsets of 16 HGX H100s, 1 KiB to 16 MiB). Halving-doubling's steps (one
  transfer per port) last as their slowest class's transfer, exactly. On a plain topology (no
  structure to class the pairs, and routing every pair costs n^2 routes) the first and last
  rank's route stands for every pair's, so a flow over a longer route comes out above the
  analytical time by the difference.
* ``nvls``: all-reduce inside one NVSwitch domain: every GPU sends and receives ``S(1 + 1/n)``
  (hardware.md 3.3). Efficiency is per GPU: each GPU's NVLS engine (a constraint of its own,
  shared by every NVLS collective on that GPU) moves its traffic at NCCL's NVLS efficiency
  (0.85 Hopper, 0.74 Blackwell) of its NVLink rate, so busbw follows 2(n-1)/(n+1) x eff x B
  with the communicator, a partial one too. Per communicator, NCCL's channels bound it: NVLS
  runs 16 channels on Hopper, 24 on Blackwell in one domain (nvls.cc), each at the ladder
  speed at which they fit the GPU's NVLinks, and that ceiling (510 GB/s busbw on H100, 817
  on B200/GB200) holds however large the domain (an NVL72's 72 GPUs as its 8).
* ``nvls_tree``: NCCL's NVLSTree, its default across NVLS nodes: NVLS in each domain, and
  each rail's double binary tree across the domains' heads (two trees of half the rail's
  bytes; a head's NIC carries one stream per tree neighbour, so beyond two domains the
  network leg's busbw is the domain's NIC aggregate, as measured), one pipelined flow held to
  the NVLS ceiling and to NCCL's NVLSTree per-channel cap (hardware.md 4.2). Needs no SHARP.
* ``sharp``: all-reduce across the scale-out fabric with one rank per domain, on a fabric
  built with SHARP (``fs.cluster(..., sharp=True)``: a deployment's choice, hardware.md 3.2):
  one flow up and down the aggregation tree. The network leg is counted as bus bandwidth, as
  NCCL counts it and measurements bear out (multi-node all-reduce reaches about the same busbw
  with SHARP as without, hardware.md 6.2): a byte of the stream takes ``2(n-1)/n`` bytes of
  every tree link (cost model ``sharp_network_as_bus``; False gives SHARP's ideal, one). The
  tree is routed as SHARP's Aggregation Manager builds one: under ECMP every switch sends it
  through one link toward a single root switch, the same port index at every hop (not hashed
  edge by edge as connections are), and a job's trees take consecutive roots; adaptive
  routing spreads it evenly instead. The switches' reduction engine is a constraint sized to
  all their ports. Its latency is NCCL's CollNet Direct's where the GPUs sit on NVSwitches,
  CollNet Chain's elsewhere (a host-level Clos).
* ``hierarchical``: ring reduce-scatter in each domain, ring all-reduce of ``S/m`` per rail
  across domains, ring all-gather in each domain. The rails are the first ``m`` ranks of each
  domain, as NCCL's CollNet and NVLS trees use the fewest heads any node has (connect.cc); a
  domain holding more ranks reduce-scatters onto those ``m`` (its other ranks send their whole
  buffer) and all-gathers from them.
* ``nvls_sharp``: NCCL's NVLS across nodes over CollNet: as ``nvls_tree`` with each rail's
  SHARP tree (counted as ``sharp`` counts it) in place of its double binary tree. The first
  ``m`` ranks of each domain are the heads (connect.cc: minHeadNum): every rank sends ``S``
  into its NVSwitches and receives ``S``; each head also takes back its reduced ``S/m`` and
  multicasts the result. The flow is counted in bytes of one rail's ``S/m``: against other
  traffic in the network it takes its share by bytes, as every flow does, while its NVLink
  legs carry ``m`` bytes per byte (a head ``m + 1``). Its alpha is NCCL's for NVLS across
  nodes; ``hierarchical``, which NCCL has no counterpart of, runs as three phases and pays
  their alphas.

``algorithm="auto"`` and ``protocol="auto"`` take, among the (algorithm, protocol) pairs NCCL
enables on the communicator (`nccl_model`: SHARP only where the deployment has it) that
fabricsim builds, the one fabricsim's own analytical time finds fastest, so that the time
reported is the time of the construction chosen; ``hierarchical`` and ``halving_doubling``
have no NCCL counterpart and are only used when asked for (on Simple).
:func:`estimate` gives the analytical time alone, without a scenario.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from . import nccl_conventions, nccl_model
from .cost_model import DEFAULT as DEFAULT_COST
from .cost_model import CostModel
from ._checks import callback, integers, parsed, quantities, real, shown
from .exceptions import InvalidArgumentError, UnknownNodeError, ZeroCapacityPathError

__all__ = ["ALGORITHMS", "OPS", "Estimate", "FabricView", "estimate", "fabric_view", "analytical_s"]

OPS = nccl_conventions.OPS
ALGORITHMS = ("ring", "tree", "halving_doubling", "direct", "nvls", "nvls_tree", "sharp", "hierarchical",
              "nvls_sharp")
# NCCL's name for each algorithm whose latency (and auto choice) comes from its model; "sharp"
# is NCCL's CollNet, Direct or Chain by the fabric (_nccl_name).
_NCCL_NAME = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvls_tree": "nvls_tree", "nvls_sharp": "nvls"}
_ARCH_INDEX = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}
# NCCL's protocols, and those fabricsim runs each algorithm with (NCCL runs NVLS and CollNet on
# Simple only; the others here are fabricsim's own constructions on Simple).
PROTOCOLS = ("simple", "ll128", "ll")
_PROTOCOLS_OF = {"ring": ("ll", "ll128", "simple"), "tree": ("ll", "ll128", "simple")}
# Communicators remembered per fabric (a sweep's handful, not a leak over millions).
_COMMS_KEPT = 64
# Latency classes of a pair of ranks (_Comm.pair_classes): one domain (over NVLink), else where
# their NICs meet in the scale-out Clos. A route that meets higher crosses more switches and
# cables, so the network classes' wire latencies ascend in this order (_last_busy_bytes needs it).
_CLASSES = ("nvlink", "leaf", "spine", "core")


@dataclass(frozen=True, eq=False)
class FabricView:
    """What collectives need to know about a fabric, per GPU (bytes/s per direction)."""

    gpus_per_domain: int
    nvlink_Bps: float
    nvlink_link_Bps: float
    net_Bps: float
    nvls: bool
    sharp: bool
    arch: str
    #: Node ids that can be ranks: GPUs, or hosts of a GPU-less Clos; None: any node.
    n_rank_nodes: int | None
    #: The fabric has a scale-out Clos: where a rank's NIC sits there (its leaf and pod) tells
    #: the latency class of a pair of ranks without routing it.
    scale_out: bool = False
    #: A plain topology's (or a PCIe server's) injection bandwidth per node (sum of its
    #: out-links), else None.
    injection_Bps: np.ndarray | None = None
    #: NCCL model shapes by (n_ranks, n_nodes, net_Bps), and communicators by their ranks'
    #: bytes, built so far: sweeps reuse them.
    shapes: dict = field(default_factory=dict)
    comms: dict = field(default_factory=dict)
    #: The fabric rebuilt with a cost model's payload efficiencies, by (nvlink, network).
    variants: dict = field(default_factory=dict)
    #: Rank nodes whose every outgoing link is down (after fabric.fail), sorted.
    cut_off: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def checked_cost_model(cost_model: Any) -> CostModel:
    """``cost_model`` as given, or the defaults for None; anything else is refused."""
    if cost_model is None:
        return DEFAULT_COST
    if not isinstance(cost_model, CostModel):
        raise InvalidArgumentError(
            f"cost_model must be a fabricsim.CostModel (None for the defaults), got {type(cost_model).__name__} "
            f"{shown(cost_model)}")
    return cost_model


def applied_fabric(topology, cost: CostModel):
    """``topology``, rebuilt with the cost model's payload efficiencies where it sets them
    (``nvlink_efficiency``, ``network_efficiency``; faults kept). Rebuilt once per fabric and
    pair of efficiencies, so that a sweep reuses it."""
    if cost.nvlink_efficiency is None and cost.network_efficiency is None:
        return topology
    has = getattr(topology, "payload_efficiency", None)
    if has is None:
        raise InvalidArgumentError(
            f"cost_model sets nvlink_efficiency={cost.nvlink_efficiency!r}, network_efficiency="
            f"{cost.network_efficiency!r}, but this topology is not a generated fabric: its link capacities are "
            "as given (set those fields to None)")
    # A tier the fabric does not have keeps nothing to rebuild: a model calibrated on a
    # cluster applies to one of its domains too.
    key = (cost.nvlink_efficiency if has["nvlink"] is not None else None,
           cost.network_efficiency if has["network"] is not None else None)
    if key == (None, None):
        return topology
    view = fabric_view(topology)
    if key not in view.variants:
        rebuild = topology.with_payload_efficiency
        if len(view.variants) >= 8:  # a calibration tries many; keep the memory of a few
            view.variants.clear()
        view.variants[key] = rebuild(nvlink=key[0], network=key[1])
    return view.variants[key]


def fabric_view(topology) -> FabricView:
    """The per-GPU figures of a generated fabric (or, for a plain topology, of its nodes),
    computed once per topology."""
    from .fabrics import Topology

    if not isinstance(topology, Topology):
        raise InvalidArgumentError(
            f"fabric must be a fabricsim.Topology or a generated Fabric (fs.hgx_h100(), fs.cluster(...)), "
            f"got {type(topology).__name__} {shown(topology)}"
        )
    cached = getattr(topology, "_collective_view", None)
    if cached is not None:
        return cached
    parts = getattr(topology, "_parts", None) or {}
    core = topology._core
    st = core.structure() if parts else {}
    gpu = parts.get("gpu")
    arch = gpu["arch"] if gpu is not None else "hopper"
    nvl_link = nvl = 0.0
    gpd = 1
    nvls = False
    if "domain" in st:
        dom = parts["domain"]
        gpd = int(dom["gpus_per_domain"])
        nvl_link = float(dom["link_Bps"])
        nvl = nvl_link * float(sum(dom["chip_links"]))
        nvls = bool(parts["nvswitch"]["sharp"]) and _ARCH_INDEX[arch] >= 2  # NVLS needs Hopper or later
    net = 0.0
    sharp = False
    if "scale_out" in st:
        so = st["scale_out"]
        # endpoint_links holds each plane's links, so its sum already counts the planes.
        net = float(so["link_Bps"]) * float(sum(so["endpoint_links"]))
        if st["n_gpus"] > 0 and "nic" in parts:
            net = min(net, min(float(parts["nic"]["host_Bps"]), float(gpu["pcie_Bps"])))
        # SHARP is a deployment's choice (cluster(sharp=True)), not every InfiniBand switch's.
        sharp = bool(parts.get("sharp_enabled", False))
    if st.get("n_gpus", 0) > 0:
        n_rank_nodes = int(st["n_gpus"])
    elif "scale_out" in st:
        n_rank_nodes = int(st["n_nics"])
    else:
        n_rank_nodes = None
    injection = None
    if "domain" not in st and "scale_out" not in st:
        # A plain topology, or GPUs on PCIe alone (pcie_server): rates and paths measured.
        links = topology.links
        injection = np.bincount(links["src"].to_numpy(), weights=links["capacity_Bps"].to_numpy(),
                                minlength=topology.n_nodes)
    cut_off = np.zeros(0, dtype=np.int64)
    if parts.get("faults"):  # which ranks a fault cut off: a collective over them cannot run
        links = topology.links
        live = np.bincount(links["src"].to_numpy(), weights=links["capacity_Bps"].to_numpy() > 0,
                           minlength=topology.n_nodes)
        cut_off = np.flatnonzero(live[:n_rank_nodes if n_rank_nodes is not None else topology.n_nodes] == 0)
    view = FabricView(gpd, nvl, nvl_link, net, nvls, sharp, arch, n_rank_nodes, "scale_out" in st, injection,
                      cut_off=cut_off)
    topology._collective_view = view
    return view


class _Comm:
    """An ordered communicator: its ranks grouped by NVLink domain (domains, and ranks within
    them, in the order given), the per-rank network rate and the wire latencies."""

    def __init__(self, ranks: np.ndarray, starts: np.ndarray, ppn: int, view: FabricView,
                 net_Bps: float, core, path_s: tuple[float, float] | None = None) -> None:
        self.ranks = ranks  # grouped by domain
        self.starts = starts  # index in ranks where each domain begins
        #: Ranks per domain if every domain has as many, else 0.
        self.ppn = ppn
        self.view = view
        self.net_Bps = net_Bps
        self._core = core
        # A plain topology's paths are measured up front; a fabric's, on the communicator's own
        # ranks, only when an algorithm asks (intra_path_s, class_latency_s): a failed GPU
        # elsewhere on the fabric must not stop this communicator.
        self._intra_path_s, self._inter_path_s = path_s or (None, None)
        self.n = len(ranks)
        self.n_domains = len(starts)
        #: Ranks in each domain.
        self.counts = np.diff(starts, append=self.n)
        #: The distinct numbers of ranks the domains hold when they differ (NCCL's localRanks).
        self.local_ranks = () if ppn else tuple(int(k) for k in np.unique(self.counts))
        self._domains = None
        #: Size-independent structure computed once per communicator (tree degrees, steps).
        self.memo: dict = {}

    @property
    def domains(self) -> list[np.ndarray]:
        if self._domains is None:
            self._domains = np.split(self.ranks, self.starts[1:])
        return self._domains

    @property
    def intra_path_s(self) -> float:
        """Wire latency of a route between two ranks of one NVLink domain, measured on the
        first domain holding two of this communicator's ranks (0 where none does): every
        such route crosses as many switch chips."""
        if self._intra_path_s is None:
            latency = 0.0
            big = np.flatnonzero(self.counts >= 2)
            if big.size and self.view.gpus_per_domain > 1:
                i = int(self.starts[big[0]])
                latency = self._core.path_latency_s(int(self.ranks[i]), int(self.ranks[i + 1]))
            self._intra_path_s = latency  # only once measured: a route that is down raises each time
        return self._intra_path_s

    @property
    def sizes(self) -> tuple[int, ...]:
        """The distinct numbers of ranks the domains hold."""
        return self.local_ranks or (self.ppn,)

    @property
    def heads(self) -> int:
        """The fewest ranks any domain holds (NCCL's minLocalRanks): as NCCL keeps the least
        channels over the nodes (init.cc) and as many NVLS/CollNet heads as the smallest node
        has (connect.cc: minHeadNum), the tree's channels and the hierarchical algorithms'
        rails are this many, led by the first ranks of each domain."""
        return min(self.sizes)

    def within(self, ranks: np.ndarray) -> "_Comm":
        """A communicator of some ranks of one domain."""
        return _Comm(ranks, np.zeros(1, dtype=np.int64), len(ranks), self.view, self.net_Bps, self._core,
                     self._plain_paths())

    def across(self, ranks: np.ndarray) -> "_Comm":
        """A communicator of one rank in each of several domains."""
        return _Comm(ranks, np.arange(len(ranks)), 1, self.view, self.net_Bps, self._core, self._plain_paths())

    def rails(self) -> list[np.ndarray]:
        """Rank k of every domain, for each k < ``heads``."""
        return [self.ranks[self.starts + k] for k in range(self.heads)]

    def _plain_paths(self) -> tuple[float, float] | None:
        return (self._intra_path_s, self._inter_path_s) if self.view.injection_Bps is not None else None

    def _places(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each rank's domain (its index in the communicator) and its NIC's leaf and pod in the
        scale-out Clos (all 0 where there is none)."""
        if "places" not in self.memo:
            dom = np.repeat(np.arange(self.n_domains), self.counts)
            leaf = pod = np.zeros(self.n, dtype=np.int64)
            if self.n_domains > 1 and self.view.scale_out:
                leaf, pod = self._core.scale_out_positions(np.ascontiguousarray(self.ranks, dtype=np.int64))
            self.memo["places"] = dom, leaf, pod
        return self.memo["places"]

    def pair_classes(self, i, j) -> np.ndarray:
        """The latency class (_CLASSES) of each pair of rank positions ``(i[k], j[k])``."""
        dom, leaf, pod = self._places()
        return np.where(dom[i] == dom[j], 0, np.where(leaf[i] == leaf[j], 1, np.where(pod[i] == pod[j], 2, 3)))

    @property
    def peer_counts(self) -> np.ndarray:
        """Per rank (rows), how many of the other ranks are in each latency class (columns)."""
        if "peers" not in self.memo:
            dom, leaf, pod = self._places()

            def elsewhere(place):  # ranks sharing each rank's place, less those of its domain
                _, at, k = np.unique(place, return_inverse=True, return_counts=True)
                # Both indices are below n: the key stays far inside int64.
                _, at_dom, k_dom = np.unique(at * self.n_domains + dom, return_inverse=True, return_counts=True)
                return k[at] - k_dom[at_dom]

            own = self.counts[dom]
            leaf_peers, pod_peers = elsewhere(leaf), elsewhere(pod)
            self.memo["peers"] = np.stack(
                [own - 1, leaf_peers, pod_peers - leaf_peers, self.n - own - pod_peers], axis=1)
        return self.memo["peers"]

    @property
    def class_latency_s(self) -> np.ndarray:
        """Wire latency of each latency class's routes, measured on one pair of the class (0
        where the communicator has none): in a Clos every route of a class crosses as many
        switches and cables. On a plain topology every route takes the first and last rank's."""
        if "class_latency" not in self.memo:
            latency = np.zeros(len(_CLASSES))
            latency[0] = self.intra_path_s
            if self._inter_path_s is not None:
                latency[1:] = self._inter_path_s
            elif self.n_domains > 1 and self.view.scale_out:
                peers = self.peer_counts
                for c in range(1, len(_CLASSES)):
                    has = np.flatnonzero(peers[:, c])
                    if has.size:
                        i = has[0]
                        j = np.flatnonzero(self.pair_classes(i, np.arange(self.n)) == c)[0]
                        latency[c] = self._core.path_latency_s(int(self.ranks[i]), int(self.ranks[j]))
            self.memo["class_latency"] = latency
        return self.memo["class_latency"]

    @property
    def inter_path_s(self) -> float:
        """Wire latency of a network hop between the communicator's domains: the slowest latency
        class its pairs across domains have (on a plain topology, its first and last rank's)."""
        return float(self.class_latency_s[1:].max()) if self.n_domains > 1 else 0.0

    def class_rates_Bps(self) -> np.ndarray:
        """The port each latency class's transfers go through, by its rate: NVLink, then the NIC."""
        return np.array([self.view.nvlink_Bps] + [self.net_Bps] * (len(_CLASSES) - 1))


def _comm(topology, ranks: Any) -> _Comm:
    view = fabric_view(topology)
    arr = integers("ranks", ranks)
    key = arr.tobytes()
    cached = view.comms.get(key)
    if cached is not None:
        return cached
    if arr.size < 1:
        raise InvalidArgumentError("a communicator needs at least one rank, got none")
    limit = view.n_rank_nodes if view.n_rank_nodes is not None else topology.n_nodes
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= limit:
        what = "GPU" if view.n_rank_nodes is not None else "node"
        raise UnknownNodeError(f"rank {lo if lo < 0 else hi} is not a {what} of this fabric ({what}s are 0..{limit - 1})")
    dom = arr // view.gpus_per_domain
    if arr.size == 1 or bool(np.all(arr[1:] > arr[:-1])):
        # Increasing ranks (the common case): no repeats, domains already contiguous.
        grouped = arr
        starts = np.flatnonzero(np.concatenate(([True], dom[1:] != dom[:-1])))
    else:
        uniq, counts = np.unique(arr, return_counts=True)
        if uniq.size != arr.size:
            raise InvalidArgumentError(f"rank {int(uniq[counts > 1][0])} appears more than once in the communicator")
        _, first, inverse = np.unique(dom, return_index=True, return_inverse=True)
        position = np.argsort(np.argsort(first))[inverse]
        order = np.argsort(position, kind="stable")
        grouped = arr[order]
        _, starts = np.unique(position[order], return_index=True)
    net = view.net_Bps
    paths = None
    if view.injection_Bps is not None:  # a plain topology: each rank's injection, measured paths
        net = float(view.injection_Bps[arr].min())
        far = topology._core.path_latency_s(int(arr[0]), int(arr[-1])) if arr.size > 1 else 0.0
        paths = (far, far)
    sizes = np.diff(starts, append=arr.size)
    ppn = int(sizes[0]) if np.all(sizes == sizes[0]) else 0
    comm = _Comm(grouped, starts, ppn, view, net, topology._core, paths)
    if len(view.comms) >= _COMMS_KEPT:
        view.comms.clear()
    view.comms[key] = comm
    return comm


def applicable(op: str, comm: _Comm, cost: CostModel = DEFAULT_COST) -> list[str]:
    """The algorithms fabricsim can run for ``op`` on this communicator (NVLS where the cost
    model gives it channels to run on)."""
    if op in ("all_to_all", "send_recv"):
        return ["direct"]
    pof2 = comm.n & (comm.n - 1) == 0
    halving = ["halving_doubling"] if comm.n > 1 and (op == "all_reduce" or pof2 and op in ("reduce_scatter", "all_gather")) else []
    if op != "all_reduce":
        return ["ring"] + halving
    v, d, p = comm.view, comm.n_domains, comm.ppn
    algos = ["ring"]
    if comm.n > 1:  # NCCL builds its tree on any layout: each node's chain is its own ranks
        algos.append("tree")
    nvls = v.nvls and comm.n > 1 and nvls_ceiling_busbw_Bps(v, cost, d) > 0
    if d == 1 and nvls:
        algos.append("nvls")
    if d > 1 and p == 1 and v.sharp:
        algos.append("sharp")
    if d > 1 and comm.n > d:  # some domain has an intra-domain phase
        algos.append("hierarchical")
    if d > 1 and comm.heads > 1 and nvls:  # NCCL's NVLS needs >= 2 GPUs per node
        algos.append("nvls_tree")
        if v.sharp:
            algos.append("nvls_sharp")
    return algos + halving


def _shape(comm: _Comm, n: int, n_nodes: int, cost: CostModel = DEFAULT_COST) -> nccl_model.CommShape:
    v = comm.view
    key = (n, n_nodes, comm.net_Bps, comm.local_ranks, cost)
    shape = v.shapes.get(key)
    if shape is None:
        if len(v.shapes) >= _COMMS_KEPT * 4:
            v.shapes.clear()
        shape = v.shapes[key] = nccl_model.CommShape(
            n_ranks=n, n_nodes=n_nodes, arch=v.arch, nvlink_Bps=v.nvlink_Bps,
            nvlink_link_Bps=v.nvlink_link_Bps, net_Bps=comm.net_Bps if n_nodes > 1 else 0.0,
            nvswitch=v.nvls, collnet=v.sharp and n_nodes > 1, local_ranks=comm.local_ranks, cost=cost,
        )
    return shape


def _nccl_name(algo: str, view: FabricView) -> str | None:
    """NCCL's algorithm for one of fabricsim's, None where NCCL has none. SHARP is CollNet
    Direct where the GPUs sit on NVSwitches, else CollNet Chain: NCCL enables Direct only with
    NVSwitch (hardware.md 3.2)."""
    if algo == "sharp":
        return "collnet_direct" if view.nvls else "collnet_chain"
    return _NCCL_NAME.get(algo)


def _nccl_latency_s(op: str, algo: str, size_bytes: float, comm: _Comm, n: int, n_nodes: int,
                    protocol: str = "simple", cost: CostModel = DEFAULT_COST) -> float:
    if n < 2:
        return 0.0
    name = _nccl_name(algo, comm.view)
    latency = nccl_model.latency_of(op, max(size_bytes, 1.0), _shape(comm, n, n_nodes, cost), name, protocol)
    if latency is None:
        raise InvalidArgumentError(f"NCCL's model has no {name}/{protocol} for {op} on {n} ranks over {n_nodes} nodes")
    return latency


def _efficiency(op: str, algo: str, protocol: str, comm: _Comm, cost: CostModel = DEFAULT_COST) -> float:
    """Payload fraction of the wire under ``protocol`` (1 for Simple): NCCL's own ratio."""
    if protocol == "simple":
        return 1.0
    shape = _shape(comm, comm.n, comm.n_domains, cost)
    return nccl_model.protocol_efficiency(op, shape)[(_nccl_name(algo, comm.view), protocol)]


def _p2p_latency_s(crosses_domains: bool, cost: CostModel = DEFAULT_COST) -> float:
    hop = cost.p2p_net_latency_s if crosses_domains else cost.p2p_nvlink_latency_s
    return (cost.p2p_base_latency_s + hop) * cost.latency_scale


def _log2i(k: int) -> int:
    return k.bit_length() - 1


def _wire_s(op: str, algo: str, comm: _Comm) -> float:
    """The wire latency a pipelined algorithm's steps add to its software latency: each step
    waits for its hop's route (a chunk crosses it before the next step can forward it), so
    NCCL's per-step counts (hardware.md 4.4) times the route latency of an NVLink hop or a
    network hop. Point-to-point transfers pay their own routes' latency in the engine."""
    n, d = comm.n, comm.n_domains
    intra, inter = comm.intra_path_s, comm.inter_path_s
    if algo == "ring":
        nsteps = 2 * (n - 1) if op == "all_reduce" else n - 1
        n_inter = 0 if d == 1 else 2 * (d - 1) if op == "all_reduce" else d - 1
        return (nsteps - n_inter) * intra + n_inter * inter
    if algo == "tree":
        return 2 * ((max(comm.sizes) - 1) * intra + _log2i(d) * inter)
    if algo == "nvls":
        return intra
    if algo == "nvls_tree":
        return intra + 2 * _log2i(d) * inter
    if algo == "sharp":
        return inter
    if algo == "nvls_sharp":
        return intra + inter
    if algo == "hierarchical":
        k = max(comm.sizes)
        return 2 * (k - 1) * intra + 2 * (d - 1) * inter
    return 0.0


def latency_s(op: str, algo: str, size_bytes: float, comm: _Comm, protocol: str = "simple",
              cost: CostModel = DEFAULT_COST) -> float:
    """The alpha term of a collective: NCCL's software latency for that protocol (times the
    cost model's latency_scale) plus the wire latency of its steps (_wire_s); halving-doubling
    pays its alpha step by step instead."""
    d = comm.n_domains
    if algo == "direct":
        return _p2p_latency_s(d > 1, cost)
    if algo == "halving_doubling":
        return 0.0
    wire = _wire_s(op, algo, comm)
    if algo == "hierarchical":  # NCCL has no such algorithm: its phases' latencies add up
        one, rail = _phases(comm)
        phases = [("reduce_scatter", one, one.n, 1), ("all_reduce", rail, d, d), ("all_gather", one, one.n, 1)]
        return wire + sum(_nccl_latency_s(o, "ring", size_bytes, c, n, nn, "simple", cost) for o, c, n, nn in phases)
    # NVLS+SHARP is NCCL's NVLS algorithm across nodes, whose latency NCCL models as a whole
    # (one intra-node and one network latency), not as three collectives in a row.
    return wire + _nccl_latency_s(op if op != "send_recv" else "broadcast", algo, size_bytes, comm, comm.n, d,
                                  protocol, cost)


def _phases(comm: _Comm) -> tuple[_Comm, _Comm]:
    """The sub-communicators of a hierarchical algorithm's phases: the largest domain (its
    intra-domain ring has the most steps and, holding non-head ranks, the most bytes per
    edge) and one rail (the first rank of each domain)."""
    if "phases" not in comm.memo:
        big = int(np.argmax(comm.counts))
        start = int(comm.starts[big])
        comm.memo["phases"] = (comm.within(comm.ranks[start:start + int(comm.counts[big])]),
                               comm.across(comm.ranks[comm.starts]))
    return comm.memo["phases"]


def _head_ring_shares(k: int, m: int) -> np.ndarray:
    """Bytes per byte of S on each edge of a ring reduce-scatter over k ranks whose shards
    (S/m each) end on the first m of them, the edge from rank i to rank i + 1 (mod k). Shard j
    enters the ring after its owner, rank j, and crosses every edge but the one leaving rank j:
    an edge leaving a head carries m - 1 shards, one leaving another rank all m, which is the
    least that rank can send (its whole buffer). With m = k this is the ring reduce-scatter,
    (k-1)/k of S per edge. An all-gather from the heads is its mirror: the edge from rank i to
    rank i + 1 carries what this gives the edge leaving rank i + 1."""
    i = np.arange(k)
    return (m - (i < m)) / m


def _ring_Bps(comm: _Comm) -> float:
    """Per-rank rate of a ring over the communicator with its channels (module docs)."""
    v, d, p = comm.view, comm.n_domains, comm.ppn
    if d == 1:
        return v.nvlink_Bps if v.gpus_per_domain > 1 else comm.net_Bps
    if p >= 2:
        return p * min(comm.net_Bps, v.nvlink_Bps / (p - 1))
    # One rank per domain never crosses NVLink; uneven domains (ppn 0) have some that do.
    return min(comm.net_Bps, float("inf") if p == 1 else v.nvlink_Bps)


def nvls_gpu_Bps(view: FabricView, cost: CostModel = DEFAULT_COST) -> float:
    """The NVLink traffic an NVLS reduction can drive through one GPU's links: NCCL's NVLS
    efficiency (cost model ``nvls_efficiency``) of the GPU's NVLink payload rate. Each GPU's
    multimem loads and stores run below line rate; the efficiency is per GPU, so it holds for
    a communicator of any size, a part of a domain too."""
    return cost.nvls_efficiency[_ARCH_INDEX[view.arch]] * view.nvlink_Bps


def nvls_ceiling_busbw_Bps(view: FabricView, cost: CostModel, n_nodes: int, heads: int = 0) -> float:
    """A communicator's NVLS ceiling in bus bandwidth (all-reduce), NCCL's channel limit: NVLS
    runs ``nvls_channels`` channels (CTAs) in one domain, ``nvls_channels_multi_node``
    across domains (nvls.cc), each at the fastest ladder speed ``s`` at which the channels
    and the head's second copy fit the GPU's NVLinks (search.cc: the head carries 2x), and
    NCCL's tuning counts their bus bandwidth as ``2 eff s (nCh - 1)`` (tuning.cc:307-323).
    NVLSTree is also held to NCCL's per-channel cap ``per_channel_nvls_tree_Bps`` for its
    node count, on the channels NCCL's tuning counts for it (``heads`` > 0: the graph's
    min(nvls_max_arity, GPUs per node), search.cc:1124-1138), as NVIDIA calibrated the cap
    on those (hardware.md 4.2-4.3). This bounds NVLS busbw whatever the domain's size, where the per-GPU
    traffic alone would grow it as 2(n-1)/(n+1)."""
    a = _ARCH_INDEX[view.arch]
    eff = cost.nvls_efficiency[a]
    nch = (cost.nvls_channels if n_nodes == 1 else cost.nvls_channels_multi_node)[a]
    if nch < 2:  # NCCL runs NVLS on two channels or more (tuning.cc:307)
        return 0.0
    ladder = cost.ladder_intra_Bps[a]
    s = next((x for x in ladder if (nch + 1) * x <= view.nvlink_Bps * (1 + 1e-9)), ladder[-1])
    bus = 2 * eff * s * (nch - 1)
    if heads and n_nodes > 1:
        graph_channels = min(cost.nvls_max_arity, heads)
        bus = min(bus, graph_channels * cost.per_channel_nvls_tree_Bps[a][min(n_nodes, 3) - 1])
    return bus


def _busbw_to_algbw(op: str, n: int) -> float:
    return 1.0 / nccl_conventions.busbw_factor(op, n) if n > 1 else 1.0


def sharp_bytes_per_byte(n: int, cost: CostModel) -> float:
    """What one byte of a reduced stream costs a NIC on a SHARP (CollNet) network leg: the
    all-reduce bus factor 2(n-1)/n where the cost model counts that leg as bus bandwidth, as
    NCCL does and measurements bear out (cost model ``sharp_network_as_bus``), else 1."""
    return 2 * (n - 1) / n if cost.sharp_network_as_bus and n > 1 else 1.0


def btree_parents(n: int) -> np.ndarray:
    """Parent of each of ``n`` vertices in NCCL's binary tree (-1 at the root, vertex 0): a
    vertex's parent clears its lowest set bit and sets the next one up, or only clears it
    where that would leave the tree; vertex 0 has one child."""
    r = np.arange(n, dtype=np.int64)
    low = r & -r
    up = (r ^ low) | (low << 1)
    up = np.where(up >= n, r ^ low, up)
    up[0] = -1
    return up


def dtree_parents(n: int) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's double binary tree: the binary tree, and a second one in which (for n > 2) most
    leaves of the first are inner vertices: the first mirrored (n even) or shifted by one
    (n odd)."""
    first = btree_parents(n)
    r = np.arange(n, dtype=np.int64)
    if n % 2 == 0:
        p = first[n - 1 - r]
        second = np.where(p < 0, -1, n - 1 - p)
    else:
        p = first[(r - 1) % n]
        second = np.where(p < 0, -1, (p + 1) % n)
    return first, second


@lru_cache(maxsize=256)
def _tree_max_degree(d: int) -> int:
    """The most edges (parent plus children) any vertex has in both trees of the double
    binary tree over d vertices."""
    deg = np.zeros(d, dtype=np.int64)
    for parents in dtree_parents(d):
        has = parents >= 0
        deg += has
        deg += np.bincount(parents[has], minlength=d)
    return int(deg.max())


def _halving_steps(op: str, n: int) -> list[tuple[str, int, float]]:
    """The steps of recursive halving-doubling over ranks 0..n-1 in their order, as
    (kind, distance, bytes per byte of S): kind "pair" exchanges with rank ^ distance;
    all-reduce on a non-power of two first folds the last n - 2^k ranks into the first
    ("fold": rank 2^k + i sends to i) and finally sends them the result ("unfold")."""
    pof2 = 1 << (n.bit_length() - 1)
    halve = [("pair", pof2 >> (s + 1), 1.0 / (2 << s)) for s in range(pof2.bit_length() - 1)]
    double = [("pair", 1 << s, (1 << s) / pof2) for s in range(pof2.bit_length() - 1)]
    if op == "reduce_scatter":
        return halve
    if op == "all_gather":
        return double
    extra = [("fold", pof2, 1.0)] if n > pof2 else []
    return extra + halve + double + [("unfold", pof2, 1.0)] * bool(extra)


def _step_pairs(kind: str, distance: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sender and receiver positions of one halving-doubling step."""
    if kind == "pair":
        src = np.arange(1 << (n.bit_length() - 1))
        return src, src ^ distance
    far = np.arange(distance, n)
    near = far - distance
    return (far, near) if kind == "fold" else (near, far)


def _halving_step_times(op: str, S: float, comm: _Comm, cost: CostModel = DEFAULT_COST):
    """Per step: (kind, distance, bytes, crosses domains, alpha, idle-fabric time). Each rank
    sends and receives at most one transfer per step, alone on its port: the step lasts as its
    slowest latency class's transfer, then its alpha."""
    steps = comm.memo.get(("halving", op))
    if steps is None:
        steps = comm.memo[("halving", op)] = []
        for kind, distance, share in _halving_steps(op, comm.n):
            present = np.isin(np.arange(len(_CLASSES)), comm.pair_classes(*_step_pairs(kind, distance, comm.n)))
            steps.append((kind, distance, share, bool(present[1:].any()), _busy_terms(comm, present)))
    out = []
    for kind, distance, share, crosses, terms in steps:
        alpha = _p2p_latency_s(crosses, cost)
        nbytes = S * share
        out.append((kind, distance, nbytes, crosses, alpha, alpha + _idle_finish_s(terms, nbytes)))
    return out


def analytical_s(op: str, algo: str, size_bytes: float, comm: _Comm, sizes: np.ndarray | None = None,
                 protocol: str = "simple", cost: CostModel = DEFAULT_COST) -> float:
    """Alpha-beta time of the flow construction on an idle fabric."""
    if comm.n == 1 and op != "send_recv":
        return 0.0
    S = float(size_bytes)
    if algo == "direct":
        return _direct_analytical_s(op, comm, S, sizes, cost)
    if algo == "halving_doubling":
        return sum(step[-1] for step in _halving_step_times(op, S, comm, cost))
    return latency_s(op, algo, size_bytes, comm, protocol, cost) + S * _seconds_per_byte(op, algo, protocol, comm, cost)


def _seconds_per_byte(op: str, algo: str, protocol: str, comm: _Comm, cost: CostModel) -> float:
    """The beta of a pipelined algorithm (bytes of S, on an idle fabric): the slowest of its
    constraints, as the coupled flow's max-min rate is. Size-independent, so kept per
    communicator: auto tries every algorithm on every call."""
    key = ("beta", op, algo, protocol, cost)
    beta = comm.memo.get(key)
    if beta is None:
        beta = comm.memo[key] = _beta(op, algo, protocol, comm, cost)
    return beta


def _beta(op: str, algo: str, protocol: str, comm: _Comm, cost: CostModel) -> float:
    n, d = comm.n, comm.n_domains
    v = comm.view
    # The flags of the low-latency protocols ride with the data: fewer payload bytes per wire byte.
    wire = 1.0 / _efficiency(op, algo, protocol, comm, cost)
    if algo == "ring":
        volume = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n}.get(op, 1.0)
        return wire * volume / _ring_Bps(comm)
    if algo == "tree":
        # Each of m channels runs two trees of S/(2m): a head's NIC carries one edge per tree
        # neighbour of its domain (each head leads one channel, as m is the fewest ranks any
        # domain holds), a GPU one edge up and one down per chain edge it ends, per tree
        # (module docs). In a domain of k ranks the chain of channel c is its ranks rotated
        # by c, so rank i is the head (no edge up) of channel i if i < m and the tail (no edge
        # down) of channel i + 1 (mod k) if that is < m; over the m channels it ends
        # 2m - [i < m] - [(i + 1) mod k < m] chain edges. The most: 2m - 2 where k = m (every
        # rank heads one channel and ends another), 2m - 1 where k = m + 1 (ranks m - 1 and m
        # are each one of the two), 2m where k >= m + 2 (rank m is neither).
        m = comm.heads
        per = wire / (2 * m)
        net = per * _tree_max_degree(d) / comm.net_Bps if d > 1 else 0.0
        ends = max(2 * m - 2 + min(2, k - m) for k in comm.sizes)
        nvl = 2 * per * ends / v.nvlink_Bps if ends else 0.0
        return max(net, nvl)
    if algo == "hierarchical":
        # The intra-domain rings reduce-scatter onto the m = heads first ranks of each domain
        # and all-gather from them, the busiest in the largest domain; each of m rails
        # all-reduces S/m across the domains.
        one, _ = _phases(comm)
        m = comm.heads
        intra = float(_head_ring_shares(one.n, m).max()) / _ring_Bps(one)
        return 2 * intra + 2 * (d - 1) / d / m / comm.net_Bps
    if algo == "sharp":
        return sharp_bytes_per_byte(n, cost) / comm.net_Bps
    # NVLS in one domain, or its stage in each domain of NVLSTree and NVLS+SHARP: a GPU's links
    # carry S(1 + 1/h) each way, h the heads of its domain (every rank in one domain), at the
    # GPU's NVLS rate; the communicator is held to NCCL's channel ceiling.
    heads = n if algo == "nvls" else comm.heads
    ceiling = nvls_ceiling_busbw_Bps(v, cost, d, comm.heads if algo == "nvls_tree" else 0) * _busbw_to_algbw(op, n)
    stages = [(1 + 1 / heads) / nvls_gpu_Bps(v, cost), 1 / ceiling]
    if algo == "nvls_tree":  # each rail's double binary tree across the heads, two trees of S/(2m)
        stages.append(_tree_max_degree(d) / (2 * comm.heads) / comm.net_Bps)
    elif algo == "nvls_sharp":  # each rail's SHARP tree: its head's NIC carries S/m each way
        stages.append(sharp_bytes_per_byte(n, cost) / comm.heads / comm.net_Bps)
    elif algo != "nvls":
        raise AssertionError(algo)
    return max(stages)


def finite_analytical_s(op: str, algo: str, S: float, comm: _Comm, sizes: np.ndarray | None, protocol: str,
                        cost: CostModel = DEFAULT_COST) -> float:
    """:func:`analytical_s`, refused where it passes the largest double: a finite size that
    the algorithm moves more than once (a ring all-reduce 2(n-1)/n times) would make an edge
    of inf bytes in the simulation, refused as a size_bytes of inf, a size never given; so
    the estimate, which must agree with the simulation, is refused alike."""
    t = analytical_s(op, algo, S, comm, sizes, protocol, cost)
    edge_bytes = S / _efficiency(op, algo, protocol, comm, cost) if comm.n > 1 and algo != "direct" else S
    if algo == "ring":
        edge_bytes *= {"all_reduce": 2 * (comm.n - 1) / comm.n}.get(op, 1.0)
    if not math.isfinite(edge_bytes):
        raise InvalidArgumentError(
            f"size_bytes={S!r}: {op} by {algo} ({protocol}) on {comm.n} ranks would move {edge_bytes!r} bytes over "
            "one edge: beyond what double precision holds"
        )
    if not math.isfinite(t):
        raise InvalidArgumentError(
            f"size_bytes={S!r}: {op} by {algo} ({protocol}) on {comm.n} ranks would take {t!r} s: beyond what "
            "double precision holds"
        )
    return t


def _direct_matrix(op: str, n: int, S: float, sizes: np.ndarray | None) -> np.ndarray:
    if op == "send_recv":
        m = np.zeros((n, n))
        m[np.arange(n), (np.arange(n) + 1) % n] = S
        return m
    m = np.full((n, n), S / n) if sizes is None else sizes.astype(np.float64, copy=True)
    np.fill_diagonal(m, 0.0)
    return m


def _last_busy_bytes(nbytes: np.ndarray) -> np.ndarray:
    """Per latency class (columns), the most bytes any port (rows: a rank's sends or receives)
    has left to move from the moment that class's transfers start, over the ports that have
    some of that class: its own and the later classes' bytes on the NIC, its own on NVLink.
    A port that moves whenever it holds bytes (as max-min sharing has it where every port
    holds the same) finishes a busy period that began as some class started."""
    after = np.cumsum(nbytes[:, :0:-1], axis=1)[:, ::-1]  # the NIC's classes, latest first
    return np.where(nbytes > 0, np.column_stack([nbytes[:, 0], after]), 0.0).max(axis=0, initial=0.0)


def _busy_terms(comm: _Comm, last_busy_bytes: np.ndarray) -> list[tuple[float, float]]:
    """(wire latency, last busy period) of each latency class with bytes (_last_busy_bytes), as
    Python floats: a size-independent shape that a sweep scales (_idle_finish_s)."""
    rates = comm.class_rates_Bps()
    return [(float(comm.class_latency_s[c]), float(last_busy_bytes[c] / rates[c]))
            for c in np.flatnonzero(last_busy_bytes > 0)]


def _idle_finish_s(terms: list[tuple[float, float]], scale: float = 1.0) -> float:
    """When transfers that start after their class's wire latency are done, their bytes
    ``scale`` times those the _busy_terms were made of: the latest class's last busy period."""
    return max((latency_s + scale * busy_s for latency_s, busy_s in terms), default=0.0)


def _direct_analytical_s(op: str, comm: _Comm, S: float, sizes: np.ndarray | None,
                         cost: CostModel = DEFAULT_COST) -> float:
    """All-to-all(v) and send/recv: every rank's transfers start when their latency class's
    wire latency is paid and share its NVLink and NIC ports each way, then the p2p alpha.
    Exact where every rank's ports carry the same bytes per class (a whole Clos, whole
    domains, a ring of send/recv), as max-min sharing then keeps every port busy; elsewhere
    a lower bound (module docs)."""
    alpha = _p2p_latency_s(comm.n_domains > 1, cost)
    n, k = comm.n, len(_CLASSES)
    if op == "all_to_all" and sizes is None:  # uniform: peers per class, no n x n matrix
        if "peers_busy" not in comm.memo:
            comm.memo["peers_busy"] = _busy_terms(comm, _last_busy_bytes(comm.peer_counts))
        return alpha + _idle_finish_s(comm.memo["peers_busy"], S / n)
    ports = np.zeros((2, n, k))  # bytes each rank sends, receives, per class
    if op == "send_recv":  # rank i to rank i + 1: one transfer per port, no n x n matrix
        i = np.arange(n)
        j = (i + 1) % n
        classes = comm.pair_classes(i, j)
        ports[0, i, classes] = ports[1, j, classes] = S
    else:
        if "pair_classes" not in comm.memo:  # an n x n matrix of bytes comes with this one
            comm.memo["pair_classes"] = comm.pair_classes(*np.indices((n, n))).astype(np.int8)
        m = _direct_matrix(op, n, S, sizes)
        for c in range(k):
            part = np.where(comm.memo["pair_classes"] == c, m, 0.0)
            ports[0, :, c], ports[1, :, c] = part.sum(axis=1), part.sum(axis=0)
    return alpha + _idle_finish_s(_busy_terms(comm, _last_busy_bytes(ports.reshape(2 * n, k))))


def choose(op: str, size_bytes: float, comm: _Comm, algorithm: str = "auto",
           protocol: str = "auto", cost: CostModel = DEFAULT_COST) -> tuple[str, str]:
    """The (algorithm, protocol) ``auto`` runs: among the pairs NCCL enables on this
    communicator that fabricsim builds (NCCL's own model says which, as the deployment
    offers them: SHARP only where the fabric was built with it), the one whose construction
    fabricsim times fastest on an idle fabric, ties to NCCL's order; either fixed where it is
    not "auto". Timed by fabricsim's own analytical form, so that the time reported is the
    time of the construction chosen."""
    algos = applicable(op, comm, cost) if algorithm == "auto" else [algorithm]
    names = {a: _nccl_name(a, comm.view) for a in algos}
    pairs = [(a, p) for a in algos if names[a] for p in _PROTOCOLS_OF.get(a, ("simple",)) if protocol in ("auto", p)]
    if pairs and comm.n > 1:
        enabled = nccl_model.enabled_pairs(op, _shape(comm, comm.n, comm.n_domains, cost))
        order = {key: i for i, key in enumerate(enabled)}
        pairs = [ap for ap in pairs if (names[ap[0]], ap[1]) in order]
        if pairs:
            S = max(float(size_bytes), 1.0)
            return min(pairs, key=lambda ap: (analytical_s(op, ap[0], S, comm, None, ap[1], cost),
                                              order[(names[ap[0]], ap[1])]))
    # Nothing NCCL tunes here: the algorithm, on Simple unless told.
    return algos[0], "simple" if protocol == "auto" else protocol


@dataclass(frozen=True)
class Estimate:
    """The analytical (alpha-beta) answer for one collective on an idle fabric."""

    op: str
    algorithm: str
    protocol: str
    n_ranks: int
    size_bytes: float
    time_s: float
    algbw_Bps: float
    busbw_Bps: float


def estimate(fabric, op: str, size_bytes: Any = None, ranks: Any = None, *, algorithm: str = "auto",
             protocol: str = "auto", sizes: Any = None, cost_model: CostModel | None = None) -> Estimate:
    """The analytical estimate of ``op`` on ``size_bytes`` (as nccl-tests counts it) over
    ``ranks`` (default: every GPU of ``fabric``) without simulating: the same alpha-beta form
    as ``Result.collectives.analytical_s``, in tens of microseconds, for sweeps.
    ``cost_model`` (default :data:`fabricsim.cost_model.DEFAULT`) holds the constants."""
    cost = checked_cost_model(cost_model)
    comm = communicator(applied_fabric(fabric, cost), op, ranks)
    cut = comm.ranks[np.isin(comm.ranks, comm.view.cut_off)] if comm.view.cut_off.size else comm.ranks[:0]
    if cut.size:  # in a scenario its flows would fail; an estimate has no time to give
        raise ZeroCapacityPathError(
            f"rank {int(cut[0])} has every link down (fabric.fail): {op} over it cannot run")
    S, sizes = collective_size(op, size_bytes, sizes, comm.n)
    algo, proto = resolve_algorithm(op, algorithm, protocol, S, comm, cost)
    t = finite_analytical_s(op, algo, S, comm, sizes, proto, cost)
    algbw = S / t if t > 0 else float("nan")
    factor = nccl_conventions.busbw_factor(op, comm.n)
    return Estimate(op, algo, proto, comm.n, S, t, algbw, algbw * factor)


def communicator(topology, op: str, ranks: Any = None) -> _Comm:
    """The communicator ``op`` runs on (default: every GPU, or every node of a plain topology),
    refused where ``op`` cannot run on it: one check for scenarios and estimates alike."""
    if not isinstance(op, str) or op not in OPS:
        raise InvalidArgumentError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    if ranks is None:
        view = fabric_view(topology)
        ranks = np.arange(view.n_rank_nodes if view.n_rank_nodes is not None else topology.n_nodes)
    comm = _comm(topology, ranks)
    if op == "send_recv" and comm.n < 2:
        raise InvalidArgumentError(f"send_recv needs at least 2 ranks, got {comm.n}")
    return comm


def resolve_algorithm(op: str, algorithm: str, protocol: str, size_bytes: float, comm: _Comm,
                      cost: CostModel = DEFAULT_COST) -> tuple[str, str]:
    """(algorithm, protocol): as given, or NCCL's choice where "auto"; a precise error where
    they cannot run."""
    if not isinstance(protocol, str) or protocol not in PROTOCOLS and protocol != "auto":
        raise InvalidArgumentError(f"protocol must be 'auto' or one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if not isinstance(algorithm, str):
        raise InvalidArgumentError(f"algorithm must be a name, got {algorithm!r}")
    algos = applicable(op, comm, cost)
    if algorithm == "auto" or algorithm in algos:
        algo, proto = choose(op, size_bytes, comm, algorithm, protocol, cost)
        if proto in _PROTOCOLS_OF.get(algo, ("simple",)):
            return algo, proto
        raise InvalidArgumentError(
            f"protocol {proto!r} cannot run {algo}: fabricsim runs LL and LL128 on ring and tree "
            "(NCCL runs NVLS, CollNet and point-to-point on Simple)")
    algo = algorithm
    why = {
        "nvls": "NVLS needs NVSwitch chips that reduce (NVSwitch gen 3+), all ranks in one NVLink domain and, "
                "in the cost model, NVLS efficiency > 0 and nvls_channels >= 2 for the GPU's architecture",
        "sharp": "SHARP needs a fabric built with SHARP enabled (fs.cluster(..., sharp=True) on InfiniBand "
                 "switches with SHARP) and one rank per NVLink domain",
        "nvls_sharp": "NVLS+SHARP needs reducing NVSwitches, a fabric built with SHARP enabled "
                      "(fs.cluster(..., sharp=True)) and >= 2 ranks in each of several domains",
        "nvls_tree": "NVLSTree needs reducing NVSwitches (NVSwitch gen 3+, Hopper or later), >= 2 ranks in "
                     "each of several domains and, in the cost model, nvls_channels_multi_node >= 2",
        "hierarchical": "hierarchical needs ranks in several domains, one of them holding >= 2",
        "tree": "the double binary tree runs all_reduce on >= 2 ranks",
        "halving_doubling": "recursive halving-doubling runs all_reduce, or reduce_scatter and all_gather "
                            "on a power-of-two number of ranks",
    }.get(algo, "")
    known = algo in ALGORITHMS
    raise InvalidArgumentError(
        f"algorithm {algo!r} cannot run {op} here (can: {', '.join(algos)})"
        + (f": {why}" if why and known else "" if known else f"; algorithms are {', '.join(ALGORITHMS)}")
    )


@dataclass(frozen=True)
class _Tree:
    """One reduction tree of a coupled flow: its edges (bytes per byte of the flow on each
    edge's leg of its route) and the usage of its switches' reduction engines."""
    src: np.ndarray
    dst: np.ndarray
    coef: np.ndarray
    legs: list[str]
    engines: dict[int, float]
    #: Each edge is a tree of its own (its stream adds to others on a shared link).
    per_edge: bool = False


class Builder:
    """Adds collectives to a scenario's core and remembers them for the results table."""

    def __init__(self, scenario) -> None:
        self.sc = scenario
        self.cost: CostModel = scenario.cost_model
        self.rows: list[tuple] = []
        self._communicators: dict[bytes, int] = {}
        self._engines: dict[tuple, int] = {}
        #: Per coupled flow id, the bytes its edges carry per byte of the flow (the sum of
        #: their coefficients): one flow of a ring stands for all its edges' traffic.
        self.edge_bytes_per_byte: dict[int, float] = {}

    def add(self, op, ranks, size_bytes, algorithm, after, start_s, tag, sizes=None, protocol="auto") -> int:
        comm = communicator(self.sc.topology, op, ranks)
        algo, proto = resolve_algorithm(op, algorithm, protocol, size_bytes, comm, self.cost)
        core = self.sc._core
        label = tag if tag is not None else op
        first = core.n_activities
        try:
            begin = core.add_delay(0.0, start_s, after, label)
            end, analytical = self._build(op, algo, proto, comm, float(size_bytes), begin, label, sizes)
        except BaseException:  # Ctrl-C too: half a collective would run without its row
            core.truncate(first)
            self.edge_bytes_per_byte = {f: w for f, w in self.edge_bytes_per_byte.items() if f < first}
            raise
        key = comm.ranks.tobytes()
        comm_id = self._communicators.setdefault(key, len(self._communicators))
        self.rows.append((end, comm_id, op, algo, comm.n, float(size_bytes), begin, analytical, proto))
        return end

    # -- flow construction ---------------------------------------------------------------------

    def _coupled(self, src, dst, coef, combine, engines, nbytes, latency, after, tag, legs=None, trees=None,
                 max_rate_Bps=None) -> int:
        coef = np.ascontiguousarray(np.broadcast_to(coef, len(src)), dtype=np.float64)
        flow = self.sc._core.add_coupled_flow(
            np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64),
            coef, combine, engines, nbytes, latency, 0.0, [after], tag, max_rate_Bps, legs,
            None if trees is None else np.ascontiguousarray(trees, dtype=np.int64),
        )
        self.edge_bytes_per_byte[flow] = float(coef.sum())
        return flow

    def _barrier(self, after: list[int], tag) -> int:
        return self.sc._core.add_delay(0.0, 0.0, after, tag)

    def _ring(self, op, comm: _Comm, S, latency, after, tag, wire=1.0, heads=None) -> list[int]:
        """One coupled flow per channel (module docs); ``wire`` bytes cross each edge per byte
        of payload (1 / the protocol's efficiency). A reduce-scatter (all-gather) in one
        domain given ``heads`` leaves its shards on (takes them from) the first ``heads``
        ranks only (_head_ring_shares)."""
        n, d, p = comm.n, len(comm.domains), comm.ppn
        volume = {"all_reduce": 2 * (n - 1) / n * S, "reduce_scatter": (n - 1) / n * S,
                  "all_gather": (n - 1) / n * S}.get(op, S)
        channels = p if d > 1 and p >= 2 else 1
        ids = []
        for c in range(channels):
            if channels == 1:
                order = np.concatenate(comm.domains)
            else:
                order = np.concatenate([np.roll(x, -((c - k) % p)) for k, x in enumerate(comm.domains)])
            coef = wire
            if op in ("broadcast", "reduce"):  # a chain from (or to) the root, ranks[0]
                root = int(np.flatnonzero(order == comm.ranks[0])[0])
                order = np.roll(order, -root)
                src, dst = order[:-1], order[1:]
                if op == "reduce":
                    src, dst = dst[::-1], src[::-1]
            else:
                src, dst = order, np.roll(order, -1)
                if heads is not None:
                    share = _head_ring_shares(n, heads)
                    if op == "all_gather":
                        share = np.roll(share, -1)
                    volume = float(share.max()) * S
                    keep = share > 0
                    src, dst, coef = src[keep], dst[keep], wire * share[keep] / share.max()
            ids.append(self._coupled(src, dst, coef, "sum", [], volume / channels, latency, after, tag))
        return ids

    def _engine(self, key, capacity_Bps) -> int:
        if key not in self._engines:
            self._engines[key] = self.sc._core.add_engine(capacity_Bps)
        return self._engines[key]

    def _nvls(self, ranks, up, down) -> _Tree:
        """A reduction through the NVSwitches of one domain: each rank sends ``up`` and
        receives ``down`` bytes per byte of the flow (numbers, or one per rank). Each rank's
        up leg is the part of its route to a peer (ranks[0], or ranks[1] for ranks[0] itself)
        short of the peer, its down leg the part of the peer's route to it past the peer: the
        switches, not the peer, receive and send. A leg carrying nothing is left out. Each
        GPU's NVLS traffic (the larger of its legs) also loads that GPU's NVLS engine, of
        :func:`nvls_gpu_Bps`: the efficiency is per GPU, shared by every NVLS collective on it."""
        v = fabric_view(self.sc.topology)
        n = len(ranks)
        capacity = nvls_gpu_Bps(v, self.cost)
        up, down = np.broadcast_to(up, n), np.broadcast_to(down, n)
        peer = np.where(np.arange(n) == 0, ranks[1], ranks[0])
        src, dst = np.concatenate([ranks, peer]), np.concatenate([peer, ranks])
        coef = np.concatenate([up, down])
        keep = coef > 0
        legs = np.array(["up"] * n + ["down"] * n)[keep].tolist()
        load = np.maximum(up, down).tolist()
        engines = {self._engine(("nvls", g), capacity): w for g, w in zip(ranks.tolist(), load) if w > 0}
        return _Tree(src[keep], dst[keep], coef[keep], legs, engines)

    def _dtrees(self, comm: _Comm) -> _Tree:
        """Each rail's double binary tree across the domains' heads (NVLSTree's network leg):
        two trees of half the rail's bytes, every edge carrying its half once up (reduce) and
        once down (broadcast). A directed edge is a stream of its own, so edges that share a
        link add there (a parent's NIC receives every child's stream): each is its own tree."""
        src, dst = [], []
        for rail in comm.rails():
            for parents in dtree_parents(len(rail)):
                child = np.flatnonzero(parents >= 0)
                a, b = rail[child], rail[parents[child]]
                src += [a, b]
                dst += [b, a]
        src_a, dst_a = np.concatenate(src), np.concatenate(dst)
        return _Tree(src_a, dst_a, np.full(len(src_a), 0.5), ["whole"] * len(src_a), {}, per_edge=True)

    def _sharp(self, ranks, coef: float = 1.0) -> _Tree:
        """Up and down the scale-out aggregation tree: every link carries ``coef`` bytes per
        byte of the flow (:func:`sharp_bytes_per_byte`)."""
        st = self.sc.topology._core.structure()["scale_out"]
        ports = st["n_leaves"] * st["radix"] * st["planes"]
        engine = self._engine(("sharp",), ports * st["link_Bps"])
        p0, rest = int(ranks[0]), ranks[1:]
        src = np.concatenate([rest, np.full(len(rest), p0)])
        dst = np.concatenate([np.full(len(rest), p0), rest])
        return _Tree(src, dst, np.full(len(src), coef), ["whole"] * len(src), {engine: float(len(ranks))})

    def _reduction(self, trees: list[_Tree], S, latency, after, tag, max_rate_Bps=None) -> int:
        """One pipelined flow of S through reduction trees (DESIGN section 2): links count a
        tree's edges once (combine="max"), and different trees' streams add; ``max_rate_Bps``
        is the communicator's ceiling (NCCL's channel limit)."""
        engines: dict[int, float] = {}
        ids, next_id = [], 0
        for t in trees:
            for e, w in t.engines.items():
                engines[e] = engines.get(e, 0.0) + w
            k = len(t.src)
            ids.append(np.arange(next_id, next_id + k) if t.per_edge else np.full(k, next_id))
            next_id += k if t.per_edge else 1
        return self._coupled(
            np.concatenate([t.src for t in trees]), np.concatenate([t.dst for t in trees]),
            np.concatenate([t.coef for t in trees]), "max", list(engines.items()), S, latency, after, tag,
            [leg for t in trees for leg in t.legs], np.concatenate(ids), max_rate_Bps,
        )

    def _flows(self, src, dst, nbytes, after: int, tag) -> np.ndarray:
        """Independent routed flows (ECMP or spraying as the scenario routes), all after one id.
        Each stands for NCCL's channels to its peer, striped over the NIC's ports as a ring's
        edge is (``striped``)."""
        if not len(src):
            return np.zeros(0, dtype=np.int64)
        return self.sc._core.add_flows(
            np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64),
            np.ascontiguousarray(np.broadcast_to(nbytes, len(src)), dtype=np.float64),
            np.zeros(len(src)), tag, None, None, [after], striped=True,
        )

    def _tree(self, comm: _Comm, S, latency, after, tag, wire=1.0) -> list[int]:
        """NCCL's double binary tree all-reduce: m channels (m = ``comm.heads``, one per rail
        where every domain holds m ranks), each two pipelined trees of S/(2m). Channel c's
        tree joins rank c of every domain; inside a domain its chain starts there and runs
        through all the domain's ranks (rotated by c), so it is as long as the domain holds
        ranks, as NCCL chains each node's own localRanks (connect.cc, treeIntra). Every tree
        edge and chain edge carries the tree's bytes once up (reduce) and once down
        (broadcast), times ``wire`` (as for the ring)."""
        d, m = comm.n_domains, comm.heads
        first = np.repeat(comm.starts, comm.counts)  # each rank's domain start and size
        size = np.repeat(comm.counts, comm.counts)
        position = np.arange(comm.n) - first
        linked = position[1:] > 0  # consecutive ranks of one domain
        ids = []
        for c in range(m):
            chain = comm.ranks[first + (position + c) % size]
            heads = chain[comm.starts]
            lower, upper = chain[1:][linked], chain[:-1][linked]  # chain edges up
            for parents in (dtree_parents(d) if d > 1 else (np.array([-1]),) * 2):
                child = np.flatnonzero(parents >= 0)
                up_src = np.concatenate([lower, heads[child]])
                up_dst = np.concatenate([upper, heads[parents[child]]])
                src, dst = np.concatenate([up_src, up_dst]), np.concatenate([up_dst, up_src])
                if len(src):
                    ids.append(self._coupled(src, dst, wire, "sum", [], S / (2 * m), latency, after, tag))
        return ids

    def _halving_doubling(self, op, comm: _Comm, S, begin, tag) -> int:
        """Recursive halving-doubling: one phase of independent flows per step (each rank
        sends to its partner), a barrier paying the step's alpha after each."""
        at = begin
        for kind, distance, nbytes, crosses, alpha, _ in _halving_step_times(op, S, comm, self.cost):
            src, dst = _step_pairs(kind, distance, comm.n)
            ids = self._flows(comm.ranks[src], comm.ranks[dst], nbytes, at, tag)
            at = self.sc._core.add_delay(alpha, 0.0, ids, tag)
        return at

    def _build(self, op, algo, proto, comm: _Comm, S, begin, tag, sizes) -> tuple[int, float]:
        core = self.sc._core
        n, d, p = comm.n, comm.n_domains, comm.ppn
        cost = self.cost
        analytical = finite_analytical_s(op, algo, S, comm, sizes, proto, cost)
        if algo == "direct":
            core.check_room_for_flows(n * (n - 1) if op == "all_to_all" else n)  # before the n x n matrix
            if op == "all_to_all" and sizes is None:  # every ordered pair, row by row, S/n each
                i = np.repeat(np.arange(n), n - 1)
                j = np.tile(np.arange(n - 1), n)
                j += j >= i
                nbytes = S / n
            else:
                m = _direct_matrix(op, n, S, sizes)
                i, j = np.nonzero(m)
                nbytes = m[i, j]
            ids = self._flows(comm.ranks[i], comm.ranks[j], nbytes, begin, tag)
            if not len(ids):
                return core.add_delay(0.0, 0.0, [begin], tag), 0.0
            # NCCL's p2p alpha, paid once after the transfers (which pay their wire latency).
            return core.add_delay(latency_s(op, algo, S, comm, "simple", cost), 0.0, ids, tag), analytical
        if n == 1:
            return core.add_delay(0.0, 0.0, [begin], tag), 0.0
        if algo == "halving_doubling":
            return self._halving_doubling(op, comm, S, begin, tag), analytical
        lat = latency_s(op, algo, S, comm, proto, cost)
        wire = 1.0 / _efficiency(op, algo, proto, comm, cost)
        if algo == "tree":
            return self._barrier(self._tree(comm, S, lat, begin, tag, wire), tag), analytical
        if algo == "ring":
            return self._barrier(self._ring(op, comm, S, lat, begin, tag, wire), tag), analytical
        if algo == "sharp":
            sharp = self._sharp(comm.ranks, sharp_bytes_per_byte(n, cost))
            return self._barrier([self._reduction([sharp], S, lat, begin, tag)], tag), analytical
        if algo in ("nvls", "nvls_tree", "nvls_sharp"):
            return self._barrier([self._nvls_pipeline(op, algo, comm, S, lat, begin, tag)], tag), analytical
        # Hierarchical: three phases joined by barriers; the latency is paid once, by the
        # first phase. Domains of one rank have no intra-domain phase; the others' rings leave the shards
        # on their first m ranks, the rails' ends (_head_ring_shares).
        m = comm.heads
        domains = [x for x in comm.domains if len(x) > 1]
        first = [i for x in domains for i in self._ring("reduce_scatter", comm.within(x), S, lat, begin, tag,
                                                        heads=m)]
        mid = self._barrier(first, tag)
        second = [i for r in comm.rails() for i in self._ring("all_reduce", comm.across(r), S / m, 0.0, mid, tag)]
        mid = self._barrier(second, tag)
        third = [i for x in domains for i in self._ring("all_gather", comm.within(x), S, 0.0, mid, tag, heads=m)]
        return self._barrier(third, tag), analytical

    def _nvls_pipeline(self, op, algo, comm: _Comm, S, latency, after, tag) -> int:
        """NVLS in one domain, or NVLS in each domain joined across domains by each rail's
        double binary tree (NVLSTree) or SHARP tree (NVLS+SHARP), as one pipelined flow: NCCL
        runs its scatter, reduce, network and broadcast warps at once over chunks, so the
        slowest stage paces it. The first m ranks of each domain are its heads (connect.cc:
        minHeadNum; m = n in one domain). Counted in bytes of one rail's S/m, so that the
        network, where other traffic meets it, shares its links with it by bytes as with any
        flow; its NVLink legs carry m (a head m + 1) bytes per byte. Held to the
        communicator's NVLS ceiling (:func:`nvls_ceiling_busbw_Bps`)."""
        cost, n, d = self.cost, comm.n, comm.n_domains
        m = n if algo == "nvls" else comm.heads
        heads = [np.where(np.arange(len(x)) < m, 1.0, 0.0) for x in comm.domains]
        trees = [self._nvls(x, m + h, h + m) for x, h in zip(comm.domains, heads)]
        if algo == "nvls_tree":
            trees.append(self._dtrees(comm))
        elif algo == "nvls_sharp":
            trees += [self._sharp(r, sharp_bytes_per_byte(n, cost)) for r in comm.rails()]
        ceiling = nvls_ceiling_busbw_Bps(comm.view, cost, d, m if algo == "nvls_tree" else 0) * _busbw_to_algbw(op, n)
        return self._reduction(trees, S / m, latency, after, tag, ceiling / m)

    # -- results -------------------------------------------------------------------------------

    def table(self, delays: pa.Table) -> pa.Table:
        """The ``collectives`` table: one row per collective, nccl-tests' algbw and busbw."""
        rows = self.rows
        ids = delays["delay_id"].to_numpy()
        finish = delays["finish_s"].to_numpy(zero_copy_only=False)

        def at(a):
            return finish[np.searchsorted(ids, np.asarray(a, dtype=np.int64))]

        end = np.array([r[0] for r in rows], dtype=np.int64)
        begin = np.array([r[6] for r in rows], dtype=np.int64)
        start_s, finish_s = at(begin), at(end)
        n = np.array([r[4] for r in rows], dtype=np.int64)
        size = np.array([r[5] for r in rows], dtype=np.float64)
        ops = [r[2] for r in rows]
        duration = finish_s - start_s
        analytical = np.array([r[7] for r in rows], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            algbw = np.where(duration > 0, size / duration, np.nan)
        factor = np.array([nccl_conventions.busbw_factor(o, int(k)) if k > 0 else 1.0 for o, k in zip(ops, n)])
        return pa.table({
            "collective_id": pa.array(end),
            "communicator": pa.array([r[1] for r in rows], type=pa.int64()),
            # Typed, so that a run without collectives has the same schema (not values=null).
            "op": pa.array(ops, pa.string()).dictionary_encode(),
            "algorithm": pa.array([r[3] for r in rows], pa.string()).dictionary_encode(),
            "protocol": pa.array([r[8] for r in rows], pa.string()).dictionary_encode(),
            "n_ranks": pa.array(n),
            "size_bytes": pa.array(size),
            "start_s": pa.array(start_s, mask=np.isnan(start_s)),
            "finish_s": pa.array(finish_s, mask=np.isnan(finish_s)),
            "algbw_Bps": pa.array(algbw, mask=np.isnan(algbw)),
            "busbw_Bps": pa.array(algbw * factor, mask=np.isnan(algbw)),
            "analytical_s": pa.array(analytical),
            # What the fabric's sharing added to the idle-fabric time: the flow result is the
            # truth, this is the difference the issue asks to see.
            "contention_s": pa.array(duration - analytical, mask=np.isnan(duration)),
        })


def collective_size(op: str, size_bytes: Any, sizes: Any, n: int) -> tuple[float, np.ndarray | None]:
    """``S`` as nccl-tests counts it (bytes, or a size such as "1GiB"), and the all-to-all-v
    matrix when one is given instead (``S`` is then its mean per-rank send buffer)."""
    from .units import size_bytes as parse_size

    if sizes is not None:
        if op != "all_to_all":
            raise InvalidArgumentError(f"sizes (a size matrix) is for all_to_all, not {op!r}")
        if size_bytes is not None:
            raise InvalidArgumentError(
                f"give size_bytes or a sizes matrix, not both (got size_bytes={shown(size_bytes)}): the "
                "matrix says how many bytes every rank sends to every other"
            )
        m = sizes_matrix(sizes, n)
        with np.errstate(over="ignore"):
            total = float(m.sum())
        if not math.isfinite(total):  # finite entries whose sum overflows: size_bytes was inf
            raise InvalidArgumentError(
                f"an all_to_all size matrix must add up to a finite number of bytes, got {total!r}: "
                "beyond what double precision holds"
            )
        return total / n, m
    if size_bytes is None:
        raise InvalidArgumentError("give size_bytes (or, for all_to_all, a sizes matrix)")
    S = float(parsed("size_bytes", parse_size, size_bytes))
    if not (math.isfinite(S) and S >= 0):
        raise InvalidArgumentError(f"size_bytes must be a finite number of bytes >= 0, got {size_bytes!r}")
    return S, None


def sizes_matrix(sizes: Any, n: int) -> np.ndarray:
    """An all-to-all-v matrix (rank i sends ``sizes[i][j]`` bytes to rank j) of numbers or
    sizes such as "1MiB", checked."""
    from .units import size_bytes as parse_size

    try:
        shape = np.shape(sizes)
    except ValueError:  # ragged nesting
        shape = None
    if shape != (n, n):
        got = "rows of different lengths" if shape is None else f"shape {shape}"
        raise InvalidArgumentError(f"an all_to_all size matrix must be {n}x{n} (ranks x ranks), got {got}")
    # Checked as a flat sequence (entry i * n + j), as every other quantity is: an array as it
    # is (no copy), nested lists entry by entry, so that an error shows the entry as given.
    flat = sizes.reshape(-1) if isinstance(sizes, np.ndarray) else [v for row in sizes for v in row]
    m = quantities("sizes (flattened row by row)", flat, n * n, parse_size).reshape(n, n)
    bad = np.flatnonzero(~(np.isfinite(m) & (m >= 0)).reshape(-1))
    if bad.size:
        i, j = divmod(int(bad[0]), n)
        raise InvalidArgumentError(
            f"an all_to_all size matrix must hold finite sizes >= 0 bytes, got sizes[{i}][{j}] = {float(m[i, j])!r}"
        )
    return m


# nccl-tests bounds no sweep (each of its sizes runs in microseconds), but here each size is a
# simulation of milliseconds to seconds: 10,000 sizes are more than any plot needs (1% steps
# over the whole int64 range are 4,390) and still a bounded wait, while a step factor a hair
# above 1 (1.0000001: 69 million sizes from 8 MiB to 8 GiB) is a slip, not a sweep.
_MAX_SWEEP_SIZES = 10_000


def nccl_tests(
    fabric,
    op: str = "all_reduce",
    min_bytes: Any = "8M",
    max_bytes: Any = "8G",
    step_factor: float = 2,
    *,
    algorithm: str = "auto",
    protocol: str = "auto",
    ranks: Any = None,
    dtype: str = "float",
    seed: int = 0,
    on_row: Callable[[dict], Any] | None = None,
    on_start: Callable[[list[int]], Any] | None = None,
    progress: Any = False,
    cost_model: CostModel | None = None,
) -> pa.Table:
    """nccl-tests, simulated: one collective per size from ``min_bytes`` to ``max_bytes``
    (multiplied by ``step_factor``), each alone on ``fabric`` over ``ranks`` (default every
    GPU). As nccl-tests, each size is cut to whole ``dtype`` elements (and per-rank blocks for
    all_gather, reduce_scatter and all_to_all) before it runs; ``size_bytes`` is that size.
    Columns: size_bytes, count, time_s, algbw_Bps, busbw_Bps, algorithm, protocol, analytical_s;
    ``nccl_conventions.format_table`` prints it in nccl-tests' layout. ``on_row`` gets each
    row (a dict of those columns) as soon as its size has run, so a caller can print as
    nccl-tests does; ``on_start`` gets the list of sizes (bytes, as the rows will have them)
    once every argument is checked, before the first size runs, so that a caller can print a
    header and be sure no bad argument follows it; ``progress`` is passed to each
    ``Scenario.run``; ``cost_model`` holds the collectives' constants (default
    :data:`fabricsim.cost_model.DEFAULT`). At most 10,000 sizes."""
    from .scenario import Scenario, checked_progress
    from .units import size_bytes as parse_size

    if not isinstance(dtype, str) or dtype not in nccl_conventions.DTYPE_SIZE_BYTES:
        raise InvalidArgumentError(
            f"dtype={dtype!r}: expected one of {', '.join(nccl_conventions.DTYPE_SIZE_BYTES)}")
    lo, hi = parsed("min_bytes", parse_size, min_bytes), parsed("max_bytes", parse_size, max_bytes)
    # The size column is int64.
    if not 0 < lo <= hi < 2**63:
        raise InvalidArgumentError(f"need 0 < min_bytes <= max_bytes < 2**63, got {lo!r} and {hi!r}")
    factor = real(step_factor)
    if factor is None or not 1 < factor < math.inf:
        raise InvalidArgumentError(f"step_factor must be a finite number > 1, got {shown(step_factor)}")
    # As many as the loop below takes, but for rounding at the last size.
    n_sizes = math.floor(math.log(hi * (1 + 1e-12) / lo) / math.log(factor)) + 1
    if n_sizes > _MAX_SWEEP_SIZES:
        raise InvalidArgumentError(
            f"step_factor={shown(step_factor)} from min_bytes={lo:.0f} to max_bytes={hi:.0f} makes {n_sizes} sizes, "
            f"more than the {_MAX_SWEEP_SIZES} a sweep runs (each size is a simulation)"
        )
    for name, hook, arg, takes in (("on_row", on_row, "row", "each row (a dict)"),
                                   ("on_start", on_start, "sizes", "the list of sizes")):
        if hook is None:
            continue
        if not callable(hook):
            raise InvalidArgumentError(
                f"{name} must be None or a callable taking {takes}, got {type(hook).__name__} {hook!r}"
            )
        callback(name, hook, (arg,))
    checked_progress(progress)
    cost = checked_cost_model(cost_model)
    fabric = applied_fabric(fabric, cost)
    comm = communicator(fabric, op, ranks)
    sizes = []
    s = lo
    while s <= hi * (1 + 1e-12):
        sizes.append(nccl_conventions.rounded_size_bytes(op, int(s), comm.n, dtype))
        s *= factor
    # NCCL's choice can change with the size: every size is resolved before any runs.
    for size in sizes:
        resolve_algorithm(op, algorithm, protocol, size, comm, cost)
    if on_start is not None:
        on_start(sizes)
    rows = []
    for size in sizes:
        sc = Scenario(fabric, seed=seed, cost_model=cost)
        sc.add_collective(op, comm.ranks if ranks is None else ranks, size, algorithm=algorithm, protocol=protocol)
        r = sc.run(progress=progress).collectives.to_pylist()[0]
        row = {"size_bytes": size, "count": nccl_conventions.element_count(op, size, comm.n, dtype),
               "time_s": r["finish_s"] - r["start_s"], "algbw_Bps": r["algbw_Bps"], "busbw_Bps": r["busbw_Bps"],
               "algorithm": r["algorithm"], "protocol": r["protocol"], "analytical_s": r["analytical_s"]}
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return pa.Table.from_pylist(rows, schema=_NCCL_TESTS_SCHEMA)


_NCCL_TESTS_SCHEMA = pa.schema([
    ("size_bytes", pa.int64()), ("count", pa.int64()), ("time_s", pa.float64()), ("algbw_Bps", pa.float64()),
    ("busbw_Bps", pa.float64()), ("algorithm", pa.string()), ("protocol", pa.string()),
    ("analytical_s", pa.float64()),
])
