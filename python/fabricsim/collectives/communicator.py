"""A communicator on its fabric: what collectives need to know of the fabric per GPU
(:class:`FabricView`), the ranks grouped by NVLink domain with the wire latencies of their
routes (:class:`Communicator`), the cost model's payload efficiencies applied, and the size of
a collective as nccl-tests counts it."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._checks import integers, parsed, quantities, room_for, shown
from ..exceptions import InvalidArgumentError, RoutingError, UnknownNodeError
from . import conventions

if TYPE_CHECKING:
    from .. import _core
    from ..fabrics import Fabric, Topology
    from .cost.model import CostModel
    from .cost.nccl import CommShape

OPS = conventions.OPS
_ARCH_INDEX = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}
# Communicators remembered per fabric (a sweep's handful, not a leak over millions).
_COMMS_KEPT = 64
# Latency classes of a pair of ranks (Communicator.pair_classes): one domain (over NVLink), else
# where their NICs meet in the scale-out Clos. A route that meets higher crosses more switches
# and cables, so the network classes' wire latencies ascend in this order (timing's
# _last_busy_bytes needs it).
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
    shapes: dict[tuple[int, int, float, tuple[int, ...], CostModel], CommShape] = field(default_factory=dict)
    comms: dict[bytes, _Comm] = field(default_factory=dict)
    #: The fabric rebuilt with a cost model's payload efficiencies, by (nvlink, network).
    variants: dict[tuple[float | None, float | None], Fabric] = field(default_factory=dict)
    #: Rank nodes whose every outgoing link is down (after fabric.fail), sorted.
    cut_off: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: For a fabric with faults: the parts to build it without them, whose routes time a
    #: collective over ranks a fault cut off (its flows then fail in their rows, as a flow's do).
    nominal_parts: dict[str, Any] | None = None
    #: That fault-free core, built when first needed.
    nominal: dict[str, Any] = field(default_factory=dict)
    #: The GPU's catalog name ("h100", "gb300", ...; "" without one): a GB host is a Grace CPU.
    gpu: str = ""

    def path_latency_s(self, core: Any, src: int, dst: int) -> float:
        """The wire latency of the route from ``src`` to ``dst``, or, where faults leave none,
        of the route the fault-free fabric has (what a scenario's flows over it are routed
        by before they fail)."""
        try:
            return float(core.path_latency_s(src, dst))
        except RoutingError:
            if self.nominal_parts is None:
                raise
            if "core" not in self.nominal:
                from ..fabrics.fabric import _build_core

                self.nominal["core"] = _build_core(self.nominal_parts)
            return float(self.nominal["core"].path_latency_s(src, dst))


def applied_fabric(topology: Topology, cost: CostModel) -> Topology:
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
        rebuild = cast("Fabric", topology).with_payload_efficiency  # only a Fabric has payload_efficiency
        if len(view.variants) >= 8:  # a calibration tries many; keep the memory of a few
            view.variants.clear()
        view.variants[key] = rebuild(nvlink=key[0], network=key[1])
    return view.variants[key]


def fabric_view(topology: Any) -> FabricView:
    """The per-GPU figures of a generated fabric (or, for a plain topology, of its nodes),
    computed once per topology."""
    from ..fabrics import Topology

    if not isinstance(topology, Topology):
        raise InvalidArgumentError(
            f"fabric must be a fabricsim.Topology or a generated Fabric (fs.hgx_h100(), fs.cluster(...)), "
            f"got {type(topology).__name__} {shown(topology)}"
        )
    cached: FabricView | None = getattr(topology, "_collective_view", None)
    if cached is not None:
        return cached
    parts: dict[str, Any] = getattr(topology, "_parts", None) or {}
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
            net = min(net, min(float(parts["nic"]["host_Bps"]), float(parts["gpu"]["pcie_Bps"])))
        # SHARP is a deployment's choice (cluster(sharp=True)), not every InfiniBand switch's.
        sharp = bool(parts.get("sharp_enabled", False))
    n_rank_nodes: int | None
    if st.get("n_gpus", 0) > 0:
        n_rank_nodes = int(st["n_gpus"])
    elif "scale_out" in st:
        n_rank_nodes = int(st["n_nics"])
    else:  # a plain topology: its GPUs where it knows them (from_ibnetdiscover), else any node
        n_rank_nodes = getattr(topology, "n_gpus", None)
    injection = None
    if "domain" not in st and "scale_out" not in st:
        # A plain topology, or GPUs on PCIe alone (pcie_server): rates and paths measured.
        links: dict[str, Any] = dict(topology._core.link_columns())  # ids and capacities, not the named table
        injection = np.bincount(links["src"], weights=links["capacity_Bps"],
                                minlength=topology.n_nodes)
    cut_off = np.zeros(0, dtype=np.int64)
    if parts.get("faults"):  # which ranks a fault cut off: a collective over them cannot run
        links = dict(topology._core.link_columns())
        live = np.bincount(links["src"], weights=links["capacity_Bps"] > 0,
                           minlength=topology.n_nodes)
        cut_off = np.flatnonzero(live[:n_rank_nodes if n_rank_nodes is not None else topology.n_nodes] == 0)
    view = FabricView(gpd, nvl, nvl_link, net, nvls, sharp, arch, n_rank_nodes, "scale_out" in st, injection,
                      cut_off=cut_off, gpu=gpu.name if gpu is not None else "",
                      nominal_parts=parts if parts.get("faults") and ("domain" in parts or "scale_out" in parts)
                      else None)
    topology._collective_view = view
    return view


class _Comm:
    """An ordered communicator: its ranks grouped by NVLink domain (domains, and ranks within
    them, in the order given), the per-rank network rate and the wire latencies."""

    def __init__(self, ranks: np.ndarray, starts: np.ndarray, ppn: int, view: FabricView, net_Bps: float,
                 core: _core.Topology, path_s: tuple[float | None, float | None] | None = None) -> None:
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
        self._intra_path_s: float | None
        self._inter_path_s: float | None
        self._intra_path_s, self._inter_path_s = path_s or (None, None)
        self.n = len(ranks)
        self.n_domains = len(starts)
        #: Ranks in each domain.
        self.counts = np.diff(starts, append=self.n)
        #: The distinct numbers of ranks the domains hold when they differ (NCCL's localRanks).
        self.local_ranks: tuple[int, ...] = () if ppn else tuple(int(k) for k in np.unique(self.counts))
        self._domains: list[np.ndarray] | None = None
        #: Size-independent structure computed once per communicator (tree degrees, steps).
        self.memo: dict[Hashable, Any] = {}

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
                latency = self.view.path_latency_s(self._core, int(self.ranks[i]), int(self.ranks[i + 1]))
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

    def _plain_paths(self) -> tuple[float | None, float | None] | None:
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
        places: tuple[np.ndarray, np.ndarray, np.ndarray] = self.memo["places"]
        return places

    def pair_classes(self, i: np.ndarray | int, j: np.ndarray | int) -> np.ndarray:
        """The latency class (_CLASSES) of each pair of rank positions ``(i[k], j[k])``."""
        dom, leaf, pod = self._places()
        return np.where(dom[i] == dom[j], 0, np.where(leaf[i] == leaf[j], 1, np.where(pod[i] == pod[j], 2, 3)))

    @property
    def peer_counts(self) -> np.ndarray:
        """Per rank (rows), how many of the other ranks are in each latency class (columns)."""
        if "peers" not in self.memo:
            dom, leaf, pod = self._places()

            # Ranks sharing each rank's place, less those of its domain.
            def elsewhere(place: np.ndarray) -> np.ndarray:
                _, at, k = np.unique(place, return_inverse=True, return_counts=True)
                # Both indices are below n: the key stays far inside int64.
                _, at_dom, k_dom = np.unique(at * self.n_domains + dom, return_inverse=True, return_counts=True)
                return k[at] - k_dom[at_dom]

            own = self.counts[dom]
            leaf_peers, pod_peers = elsewhere(leaf), elsewhere(pod)
            self.memo["peers"] = np.stack(
                [own - 1, leaf_peers, pod_peers - leaf_peers, self.n - own - pod_peers], axis=1)
        peers: np.ndarray = self.memo["peers"]
        return peers

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
                        latency[c] = self.view.path_latency_s(self._core, int(self.ranks[i]), int(self.ranks[j]))
            self.memo["class_latency"] = latency
        class_latency: np.ndarray = self.memo["class_latency"]
        return class_latency

    @property
    def inter_path_s(self) -> float:
        """Wire latency of a network hop between the communicator's domains: the slowest latency
        class its pairs across domains have (on a plain topology, its first and last rank's)."""
        return float(self.class_latency_s[1:].max()) if self.n_domains > 1 else 0.0

    def class_rates_Bps(self) -> np.ndarray:
        """The port each latency class's transfers go through, by its rate: NVLink, then the NIC."""
        return np.array([self.view.nvlink_Bps] + [self.net_Bps] * (len(_CLASSES) - 1))


def _comm(topology: Topology, ranks: Any) -> _Comm:
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


def communicator(topology: Topology, op: str, ranks: Any = None) -> _Comm:
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


def collective_size(op: str, size_bytes: Any, sizes: Any, n: int) -> tuple[float, np.ndarray | None]:
    """``S`` as nccl-tests counts it (bytes, or a size such as "1GiB"), and the all-to-all-v
    matrix when one is given instead (``S`` is then its mean per-rank send buffer)."""
    from ..units import size_bytes as parse_size

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
    from ..units import size_bytes as parse_size

    # Reading the matrix takes about 41 n^2 bytes (entries, their flat copy, checks): refused
    # before any of it is made where that would not fit.
    room_for(f"an all_to_all size matrix of {n} x {n} ranks", n * n, 41.0)
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


