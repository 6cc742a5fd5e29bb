"""The cost model: every constant fabricsim's collectives use, named, with its default and source.

One :class:`CostModel` object holds them, and the same object is taken by
:class:`~fabricsim.Scenario`, :func:`~fabricsim.estimate` and :func:`~fabricsim.nccl_tests`
(``cost_model=``); :func:`~fabricsim.calibrate` fits one to a cluster's own nccl-tests logs.
Quantities are SI (seconds, bytes/s); tables that NCCL indexes by architecture, algorithm,
protocol or link class are nested tuples in NCCL's order and, in :meth:`CostModel.to_dict`,
nested dicts keyed by those names (:data:`AXES`), so that a saved model reads as it is meant.

Where the defaults come from
----------------------------
* NCCL v2.30.7's tuning model (``src/graph/tuning.cc``, ``search.cc``, ``nvls.cc``; docs/sources.md
  section 4 gives every constant with its file and line): latencies, protocol factors, per-channel
  ceilings, the graph search's speed ladders, NVLS efficiency and channel counts. NCCL uses
  these to choose an algorithm; fabricsim uses the same figures to time what it runs, so that
  its choice and its timing cannot disagree.
* fabricsim's own accounting where NCCL's model is silent, each marked as such in
  :data:`SOURCES` (the point-to-point latency, how a SHARP network leg is counted).
* Payload efficiency (the share of an NVLink's or a NIC's line rate that carries data) is a
  property of the fabric, from the catalog (``fs.catalog.parts("efficiency")``); the two
  fields here are ``None`` to keep the fabric's, or a number that replaces it (calibration
  fits them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..._checks import MAX_CAPACITY_BPS, real, shown
from ..._files import read_bytes, reason, write_file
from ...exceptions import InvalidArgumentError

__all__ = ["AXES", "CostModel", "DEFAULT", "SOURCES"]

# Axis labels of the tables, in NCCL's index order.
ARCHS = ("volta", "ampere", "hopper", "blackwell")
NCCL_ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
LINK_CLASSES = ("nvlink", "pci", "net")
NODE_COLUMNS = ("1", "2", "3+")  # one node, two nodes, three or more (tuning.cc:263-276)
LL_ROWS = ("volta_or_intel", "ampere_or_amd", "hopper", "blackwell")  # arch on 1 node, CPU vendor across
CPU_VENDORS = ("intel", "amd")

# The axes of each table field (outermost first): to_dict/from_dict name their entries.
AXES: dict[str, tuple[tuple[str, ...], ...]] = {
    "base_latency_s": (NCCL_ALGORITHMS, PROTOCOLS),
    "hw_latency_s": (LINK_CLASSES, NCCL_ALGORITHMS, PROTOCOLS),
    "net_overhead_s": (CPU_VENDORS,),
    "ll_max_Bps": (LL_ROWS, NODE_COLUMNS),
    "per_channel_ring_ll128_Bps": (ARCHS, NODE_COLUMNS),
    "per_channel_tree_ll128_Bps": (ARCHS, NODE_COLUMNS),
    "per_channel_tree_Bps": (ARCHS, NODE_COLUMNS),
    "per_channel_nvls_tree_Bps": (ARCHS, NODE_COLUMNS),
    "nvls_efficiency": (ARCHS,),
    "nvls_channels": (ARCHS,),
    "nvls_channels_multi_node": (ARCHS,),
    "ladder_intra_Bps": (ARCHS,),
    "ladder_inter_Bps": (ARCHS,),
}

_US, _GB = 1e-6, 1e9


def _scaled(table: Any, unit: float) -> Any:
    """A table (nested tuples of any depth) or a number, times ``unit``."""
    if isinstance(table, tuple):
        return tuple(_scaled(x, unit) for x in table)
    return table * unit


_GENERIC_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
                  2.4, 1.2, 0.24, 0.12)

_TUNING = "NCCL v2.30.7 src/graph/tuning.cc"
_NCCL = "NCCL v2.30.7 src"
SOURCES: dict[str, str] = {
    "base_latency_s": f"{_TUNING}:150-155 baseLat",
    "hw_latency_s": f"{_TUNING}:157-175 hwLat, per step",
    "latency_scale": "fabricsim: a factor on NCCL's latency tables (base and per-step latencies, the "
                     "point-to-point alpha: what a step costs beyond its wire): 1 keeps NCCL's; 0 leaves only "
                     "the routes' wire latency, as ASTRA-sim's analytical backend has it (docs/sources.md 6.4)",
    "net_overhead_s": f"{_TUNING}:225-233 netOverhead, 1 us Intel/ARM, 2 us AMD",
    "simple_net_overhead_factor": f"{_TUNING}:404-410: x3 for Simple",
    "ring_plateau_factor": f"{_TUNING}:647-650: ring/Simple all-reduce latency x1.9 before Ampere, "
                           "x1.4 from Ampere on, more than one node",
    "ll_max_Bps": f"{_TUNING}:177-211 llMaxBws",
    "per_channel_ring_ll128_Bps": f"{_TUNING}:177-211 perChMaxRingLL128Bws",
    "per_channel_tree_ll128_Bps": f"{_TUNING}:177-211 perChMaxTreeLL128Bws",
    "per_channel_tree_Bps": f"{_TUNING}:177-211 perChMaxTreeBws",
    "per_channel_nvls_tree_Bps": f"{_TUNING}:177-211 perChMaxNVLSTreeBws",
    "ll_payload": f"{_TUNING}:288-383: Ring LL busBw x0.5, 4 data bytes per 8-byte line (src/include/device.h:75-88)",
    "ll128_payload": f"{_TUNING}:288-383: LL128 busBw x0.92, 120 of 128 bytes (src/include/device.h:110-115)",
    "tree_ll_factor": f"{_TUNING}:330-336: Tree LL busBw / 3.8",
    "tree_ll128_one_node": f"{_TUNING}:330-336: Tree LL128 x7/9 on one node",
    "tree_ll128_multi_node": f"{_TUNING}:330-336: Tree LL128 x120/128 across nodes",
    "tree_factor": f"{_TUNING}:330-336: Tree busBw x0.92 before its per-channel cap",
    "collnet_direct_factor": f"{_TUNING}:340-350: CollNetDirect all-reduce x0.85 on Hopper+",
    "pat_factor": f"{_TUNING}:215-223,337: PAT busBw x0.75",
    "collnet_direct_net_factor": f"{_TUNING}:340-350: CollNetDirect all-gather/reduce-scatter busBw = ppn x "
                                 "min(bwIntra, 0.9 x bwInter)",
    "collnet_arity_latency_s": f"{_TUNING}:384-435: CollNetDirect's 0.4 us 'arity serialization' per local "
                               "rank",
    "pat_latency_per_rank_s": f"{_TUNING}:384-435: PAT latency + 2.8 us per rank",
    "pat_net_latency_divisor": f"{_TUNING}:384-435: PAT latency + log2(nodes) x interLat / 3.5",
    "channel_dup_below_Bps": "NCCL src/graph/search.cc:1036-1049: channels are not duplicated below 25 GB/s per "
                             "channel",
    "channel_dup_ampere_below_Bps": "NCCL src/graph/search.cc:1036-1049: nor, after Ampere, below 50 GB/s with "
                                    "more than 4 channels",
    "search_speed_drop": "NCCL src/graph/search.cc: the search stops lowering the speed once the next is at most "
                         "0.49 x the best found",
    "nvls_efficiency": f"{_TUNING}:138-144 nvlsEfficiency: 0.85 Hopper, 0.74 Blackwell; "
                       "fabricsim applies it to each GPU's NVLink traffic",
    "nvls_channels": "NCCL src/transport/nvls.cc:155-157,210-214: NVLS runs 16 channels (CTAs) on SM90 and "
                     "24 on SM100 in one NVLink domain",
    "nvls_channels_multi_node": "NCCL src/transport/nvls.cc:155-157,210-214: 16 on SM90, 32 on SM100 across "
                                "NVLink domains",
    "ladder_intra_Bps": "NCCL src/graph/search.cc:1051-1067 speedArrayIntra, per channel (pre-Hopper "
                        "ladders from search.cc, unchanged since 2.12)",
    "ladder_inter_Bps": "NCCL src/graph/search.cc:1051-1067 speedArrayInter, per channel",
    "pci_Bps": "NCCL src/graph/topo.h PCI_BW = 12 GB/s (Gen3 x16), its figure when nothing better is known",
    "ring_max_channels": "NCCL src/init.cc:1177 MAXCHANNELS/2 = 32",
    "nvls_max_arity": "NCCL src/include/device.h:213 NCCL_MAX_NVLS_ARITY = 32",
    "direct_max_heads": "NCCL src/include/device.h NCCL_MAX_DIRECT_ARITY + 1 = 8",
    "p2p_base_latency_s": "[assumed] NCCL does not tune point-to-point: its Simple base latency, 8.4 us "
                          f"({_TUNING}:150-155)",
    "p2p_nvlink_latency_s": f"[assumed] one Ring/Simple NVLink step, 3.4 us ({_TUNING}:157-175)",
    "p2p_net_latency_s": f"[assumed] one Ring/Simple network step, 14 us ({_TUNING}:157-175)",
    "p2p_ll_base_latency_s": "[assumed] an all-LL point-to-point batch on NVLink: NCCL's Ring LL base latency, 6.6 "
                             f"us ({_TUNING}:150-155)",
    "p2p_ll_nvlink_latency_s": f"[assumed] one Ring/LL NVLink step, 0.6 us ({_TUNING}:157-175)",
    "p2p_net_chunk_bytes": f"{_NCCL}/init.cc:818 NCCL_P2P_NET_CHUNKSIZE = 128 KiB: the step of every point-to-point "
                           "operation of a communicator across nodes (init.cc:830-835), doubled on Grace hosts with "
                           "Blackwell GPUs (4 GPUs per host)",
    "p2p_nvl_chunk_bytes": f"{_NCCL}/init.cc:820 NCCL_P2P_NVL_CHUNKSIZE = 512 KiB: the step on one all-NVLink node",
    "p2p_pci_chunk_bytes": f"{_NCCL}/init.cc:819 NCCL_P2P_PCI_CHUNKSIZE = 128 KiB: the step on one node over PCIe",
    "p2p_per_channel_net_Bps": f"{_NCCL}/graph/paths.cc:918 NCCL_P2P_PER_CHANNEL_NET_BW = 14 GB/s: channels per "
                               "network peer = max(NICs, ceil(NIC GB/s / 14)) (paths.cc:943-951)",
    "p2p_ll_threshold_bytes": f"{_NCCL}/enqueue.cc:859 NCCL_P2P_LL_THRESHOLD = 16 KiB per channel: below it an "
                              "NVLink or PCIe operation runs LL (enqueue.cc:932); network ones have no LL buffers",
    "p2p_max_channels": f"{_NCCL}/graph/paths.cc:958 NCCL_MAX_P2P_NCHANNELS = MAXCHANNELS = 64",
    "p2p_group_size": f"{_NCCL}/init.cc:888 NCCL_P2P_SCHEDULE_GROUP_SIZE = NCCL_MAX_DEV_WORK_P2P_PER_BATCH = 8 "
                      "(src/include/device.h:391): the ranks of a node taken together in the schedule",
    "p2p_ops_per_batch": f"{_NCCL}/include/device.h:391 NCCL_MAX_DEV_WORK_P2P_PER_BATCH = 8: the operations one "
                         "channel runs at once (enqueue.cc:140-150)",
    "p2p_kernel_batches": f"[derived] {_NCCL}/include/device.h:483-486 (4 KiB kernel arguments) less its 32-byte "
                          "header (device.h:473-481), over 16 bytes per batch (device.h:392-410): 254 batches per "
                          "kernel; a group of point-to-point operations needing more runs as kernels one after "
                          "another (enqueue.cc:294-300, 1184-1187)",
    "p2p_cta_warps": f"{_NCCL}/enqueue.cc:1135: a point-to-point kernel runs NCCL_MAX_NTHREADS = 640 threads, 20 "
                     "warps, per channel, split evenly over the operations of its batch (src/device/sendrecv.h:107-113)",
    "pxn": f"{_NCCL}/graph/paths.cc:668 NCCL_PXN_DISABLE = 0 and graph/search.cc:1398-1475 "
           "(NCCL_P2P_PXN_LEVEL = 2): a send to a GPU of another node goes over NVLink to the local GPU of that "
           "GPU's NIC index and leaves through its NIC, rail to rail; False: NCCL_PXN_DISABLE=1, every GPU "
           "through its own NIC",
    "sharp_network_as_bus": "docs/sources.md 3.2 and 6.2: NCCL counts the network leg of CollNet/NVLS as bus "
                            f"bandwidth ({_TUNING}:307-323, interBw caps busBw), and measured multi-node "
                            "all-reduce reaches about the same busbw with SHARP as without. True: each byte "
                            "of the reduced stream takes 2(n-1)/n bytes of its NIC, so the leg's busbw, not "
                            "its algbw, reaches the NIC rate; False: SHARP's ideal, one byte",
    "nvlink_efficiency": "None: the fabric's own NVLink payload efficiency (catalog); a number replaces it",
    "network_efficiency": "None: the fabric's own scale-out payload efficiency (catalog); a number replaces it",
}


@dataclass(frozen=True)
class CostModel:
    """Every constant of fabricsim's collective model (module docs; :data:`SOURCES` says where
    each default comes from). Immutable: ``model.replace(nvls_efficiency=...)`` or
    ``dataclasses.replace`` make a changed copy; ``to_dict``/``from_dict`` and
    ``to_json``/``from_json`` serialise it. Per-architecture fields also take a mapping of the
    architectures to change (``replace(nvls_efficiency={"hopper": 0.8})``).

    Example::

        model = fs.CostModel(latency_scale=2.0)   # every software latency doubled
        fs.estimate(fs.hgx_h100(), "all_reduce", "1MiB", cost_model=model).time_s
    """

    # -- latencies (NCCL's alpha) ------------------------------------------------------------
    base_latency_s: tuple[tuple[float, ...], ...] = _scaled((
        (6.8, 14.0, 8.4), (6.6, 14.0, 8.4), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (8.0, 8.0, 8.0),
    ), _US)
    hw_latency_s: tuple[tuple[tuple[float, ...], ...], ...] = _scaled((
        ((0.6, 1.25, 4.0), (0.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 25.0), (0, 0, 25.0), (0, 0, 4.0)),
        ((1.0, 1.9, 4.0), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 0.0), (0, 0, 0.0), (0, 0, 4.0)),
        ((5.0, 8.5, 14.0), (2.7, 4.0, 14.0), (0, 0, 31.0), (0, 0, 30.0), (0, 0, 18.0), (0, 0, 20.9), (0, 0, 14.0)),
    ), _US)
    latency_scale: float = 1.0
    net_overhead_s: tuple[float, ...] = (1e-6, 2e-6)
    simple_net_overhead_factor: float = 3.0
    ring_plateau_factor: tuple[float, ...] = (1.9, 1.4)
    p2p_base_latency_s: float = 8.4e-6
    p2p_nvlink_latency_s: float = 3.4e-6
    p2p_net_latency_s: float = 14e-6
    p2p_ll_base_latency_s: float = 6.6e-6
    p2p_ll_nvlink_latency_s: float = 0.6e-6
    # -- protocol overheads --------------------------------------------------------------------
    ll_payload: float = 0.5
    ll128_payload: float = 0.92
    tree_factor: float = 0.92
    tree_ll_factor: float = 1 / 3.8
    tree_ll128_one_node: float = 7 / 9
    tree_ll128_multi_node: float = 120 / 128
    collnet_direct_factor: float = 0.85
    pat_factor: float = 0.75
    collnet_direct_net_factor: float = 0.9
    collnet_arity_latency_s: float = 0.4e-6
    pat_latency_per_rank_s: float = 2.8e-6
    pat_net_latency_divisor: float = 3.5
    # -- per-channel ceilings (bytes/s per channel) ----------------------------------------
    ll_max_Bps: tuple[tuple[float, ...], ...] = _scaled(
        ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0)), _GB)
    per_channel_ring_ll128_Bps: tuple[tuple[float, ...], ...] = _scaled(
        ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3), _GB)
    per_channel_tree_ll128_Bps: tuple[tuple[float, ...], ...] = _scaled(
        ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0)), _GB)
    per_channel_tree_Bps: tuple[tuple[float, ...], ...] = _scaled(
        ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0)), _GB)
    per_channel_nvls_tree_Bps: tuple[tuple[float, ...], ...] = _scaled(
        ((0.0,) * 3, (0.0,) * 3, (0.0, 57.7, 45.5), (0.0, 96.0, 80.0)), _GB)
    # -- NVLS --------------------------------------------------------------------------------
    nvls_efficiency: tuple[float, ...] = (0.0, 0.0, 0.85, 0.74)
    nvls_channels: tuple[int, ...] = (0, 0, 16, 24)
    nvls_channels_multi_node: tuple[int, ...] = (0, 0, 16, 32)
    # -- channel graphs (search.cc) ----------------------------------------------------------
    ladder_intra_Bps: tuple[tuple[float, ...], ...] = _scaled((
        (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
        (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
        (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
        (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
    ), _GB)
    ladder_inter_Bps: tuple[tuple[float, ...], ...] = _scaled((
        _GENERIC_INTER,
        _GENERIC_INTER,
        (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
        (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
         2.4, 1.2, 0.24, 0.12),
    ), _GB)
    pci_Bps: float = 12e9
    channel_dup_below_Bps: float = 25e9
    channel_dup_ampere_below_Bps: float = 50e9
    search_speed_drop: float = 0.49
    ring_max_channels: int = 32
    nvls_max_arity: int = 32
    direct_max_heads: int = 8
    # -- point-to-point schedule (all-to-all, send/recv) ---------------------------------------
    p2p_net_chunk_bytes: int = 1 << 17
    p2p_nvl_chunk_bytes: int = 1 << 19
    p2p_pci_chunk_bytes: int = 1 << 17
    p2p_per_channel_net_Bps: float = 14e9
    p2p_ll_threshold_bytes: int = 1 << 14
    p2p_max_channels: int = 64
    p2p_group_size: int = 8
    p2p_ops_per_batch: int = 8
    p2p_kernel_batches: int = 254
    p2p_cta_warps: int = 20
    pxn: bool = True
    # -- in-network reduction ----------------------------------------------------------------
    sharp_network_as_bus: bool = True
    # -- payload efficiency (None: the fabric's) --------------------------------------------
    nvlink_efficiency: float | None = None
    network_efficiency: float | None = None
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name != "_hash":
                object.__setattr__(self, f.name, _checked(f.name, getattr(self, f.name), _DEFAULTS.get(f.name)))
        # Hashed once: the model keys the per-communicator tables an estimate looks up.
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, n) for n in _FIELDS)))

    def __hash__(self) -> int:
        return self._hash

    # -- derived ----------------------------------------------------------------------------

    def software_latency_s(self, table: str, *index: int) -> float:
        """One entry of a latency table (``base_latency_s``, ``hw_latency_s``), times
        :attr:`latency_scale`.

        Example::

            fs.CostModel().software_latency_s("base_latency_s", 0, 0)   # 6.8e-06: NCCL's tree LL base latency
        """
        v = getattr(self, table)
        for i in index:
            v = v[i]
        return float(v * self.latency_scale)

    def without_software_latency(self) -> "CostModel":
        """This model with every software latency zero: what is left is wire latency, as in
        ASTRA-sim's analytical backend (docs/sources.md 6.4).

        Example::

            wire = fs.CostModel().without_software_latency()
            fs.estimate(fs.hgx_h100(), "all_reduce", "1MiB", cost_model=wire).time_s   # the wire's share
        """
        return self.replace(latency_scale=0.0)

    def replace(self, **changes: Any) -> "CostModel":
        """A copy with some fields changed (checked as in the constructor). A per-architecture
        field may be given as a mapping of only the architectures to change.

        Example::

            model = fs.CostModel().replace(nvls_efficiency={"hopper": 0.8})   # other architectures kept
            model.differences()   # {'nvls_efficiency': ((0.0, 0.0, 0.8, 0.74), (0.0, 0.0, 0.85, 0.74))}
        """
        unknown = sorted(set(changes) - set(_FIELDS))
        if unknown:
            raise InvalidArgumentError(f"CostModel has no field {unknown[0]!r}; fields are {', '.join(_FIELDS)}")
        merged = {}
        for name, value in changes.items():
            axes = AXES.get(name)
            if isinstance(value, Mapping) and axes is not None:
                value = _from_named(name, value, axes, getattr(self, name), partial=True)
            merged[name] = value
        return dataclasses.replace(self, **merged)

    # -- serialisation --------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Every field, tables as nested dicts keyed by their axes' names (:data:`AXES`).

        Example::

            fs.CostModel().to_dict()["nvls_efficiency"]   # {'volta': 0.0, 'ampere': 0.0, 'hopper': 0.85, 'blackwell': 0.74}
        """
        out: dict[str, Any] = {}
        for name in _FIELDS:
            v = getattr(self, name)
            axes = AXES.get(name)
            out[name] = _to_named(v, axes) if axes else v
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CostModel":
        """A model from :meth:`to_dict`'s form; fields left out keep their defaults, and a
        table may name only the entries it changes.

        Example::

            model = fs.CostModel.from_dict({"latency_scale": 2.0, "nvls_efficiency": {"hopper": 0.8}})
            sorted(model.differences())   # ['latency_scale', 'nvls_efficiency']
        """
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(f"a cost model is a mapping of field names, got {type(data).__name__}")
        for key in data:
            if not isinstance(key, str):
                raise InvalidArgumentError(
                    f"a cost model's keys are its field names (str), got {type(key).__name__} {shown(key)}")
        return DEFAULT.replace(**dict(data))

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """JSON text of :meth:`to_dict`; written to ``path`` as well when one is given, whole
        or not at all: a write that fails (a full disk, a directory there, Ctrl-C) leaves the
        file that was there as it was and raises :class:`WriteError` naming the path.

        Example::

            fs.CostModel(latency_scale=1.5).to_json("model.json")   # the JSON text, also written to the file
        """
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            write_file("path", path, (text + "\n").encode())
        return text

    @classmethod
    def from_json(cls, source: str | os.PathLike[str]) -> "CostModel":
        """A model from JSON text (a str starting with ``{``) or a JSON file's path (a str or
        os.PathLike; not a file descriptor).

        Example::

            fs.CostModel(latency_scale=1.5).to_json("model.json")
            fs.CostModel.from_json("model.json").latency_scale   # 1.5
        """
        if isinstance(source, str) and source.lstrip().startswith("{"):
            text = source
        else:
            try:
                text = read_bytes("source", source)[1].decode("utf-8")
            except (OSError, UnicodeDecodeError) as e:  # the source is a path: read_bytes checked it
                raise InvalidArgumentError(f"cannot read a cost model from {os.fspath(source)!r}: {reason(e)}") from None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise InvalidArgumentError(f"a cost model must be JSON text or a JSON file: {e}") from None
        return cls.from_dict(data)

    def differences(self, other: "CostModel | None" = None) -> dict[str, tuple[Any, Any]]:
        """The fields where this model differs from ``other`` (default: the defaults), as
        (this, other) pairs.

        Example::

            fs.CostModel(latency_scale=2.0).differences()   # {'latency_scale': (2.0, 1.0)}: (this, the defaults)
        """
        other = DEFAULT if other is None else other
        return {n: (getattr(self, n), getattr(other, n)) for n in _FIELDS if getattr(self, n) != getattr(other, n)}


_FIELDS = tuple(f.name for f in dataclasses.fields(CostModel) if f.name != "_hash")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(CostModel) if f.name != "_hash"}
_INTS = {"ring_max_channels", "nvls_max_arity", "direct_max_heads", "nvls_channels", "nvls_channels_multi_node",
         "p2p_net_chunk_bytes", "p2p_nvl_chunk_bytes", "p2p_pci_chunk_bytes", "p2p_ll_threshold_bytes",
         "p2p_max_channels", "p2p_group_size", "p2p_ops_per_batch", "p2p_kernel_batches", "p2p_cta_warps"}
# Fields that divide (a chunk, group or batch of 0 divides by zero); an LL threshold of 0 is
# NCCL's LL turned off.
_POSITIVE = (_INTS - {"p2p_ll_threshold_bytes"}) | {"pci_Bps", "pat_net_latency_divisor", "p2p_per_channel_net_Bps"}
_FRACTIONS = {"ll_payload", "ll128_payload", "tree_factor", "tree_ll_factor", "tree_ll128_one_node",
              "tree_ll128_multi_node", "collnet_direct_factor", "pat_factor", "nvls_efficiency",
              "collnet_direct_net_factor", "search_speed_drop"}
_OPTIONAL_FRACTIONS = {"nvlink_efficiency", "network_efficiency"}


def _checked(name: str, value: Any, default: Any) -> Any:
    """``value`` as the field holds it (tuples, floats), or a precise error."""
    if name in ("sharp_network_as_bus", "pxn"):
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"CostModel.{name}={shown(value)}: expected True or False")
        return value
    if name in _OPTIONAL_FRACTIONS:
        if value is None:
            return None
        return _scalar(name, value, fraction=True, positive=True)
    if isinstance(default, tuple):
        return _table(name, value, default)
    return _scalar(name, value, integral=name in _INTS, fraction=name in _FRACTIONS, positive=name in _POSITIVE)


def _scalar(name: str, value: Any, integral: bool = False, fraction: bool = False, positive: bool = False) -> Any:
    v = real(value)
    if integral:
        low = 1 if positive else 0  # a chunk, group or batch of 0 divides by zero
        if v is None or not v.is_integer() or not low <= v < 2**31:
            raise InvalidArgumentError(f"CostModel.{name}={shown(value)}: expected a whole number in [{low}, 2**31)")
        return int(value)
    if v is None or not math.isfinite(v) or v < 0 or (fraction and v > 1) or (positive and v == 0):
        what = "a fraction in (0, 1]" if fraction and positive else "a number in [0, 1]" if fraction else \
            "a finite number > 0" if positive else "a finite number >= 0"
        raise InvalidArgumentError(f"CostModel.{name}={shown(value)}: expected {what}")
    if name.partition("[")[0].endswith("_Bps") and v and not _MIN_RATE_BPS <= v <= MAX_CAPACITY_BPS:
        raise InvalidArgumentError(
            f"CostModel.{name}={shown(value)}: expected 0 or a rate in [{_MIN_RATE_BPS:g}, {MAX_CAPACITY_BPS:g}] B/s")
    return v


# The least rate (B/s) a cost model takes other than 0: NCCL's arithmetic is in GB/s, where a
# rate of 5e-324 B/s is 0 and divides by zero, and nothing slower than a byte a second is a
# link; the most is the largest capacity the core takes (its margin below the largest double).
_MIN_RATE_BPS = 1.0


def _table(name: str, value: Any, default: tuple[Any, ...]) -> tuple[Any, ...]:
    """A table shaped as its default (ladders may differ in length: a ladder is a list)."""
    ladder = name.startswith("ladder_")

    def walk(v: Any, d: Any, where: str) -> Any:
        if isinstance(d, tuple) and not (ladder and where.count("[") == 1):
            if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__len__") or len(v) != len(d):
                raise InvalidArgumentError(
                    f"CostModel.{name}{where}: expected {len(d)} entries, got {shown(v)}")
            return tuple(walk(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(v, d)))
        if ladder and isinstance(d, tuple):  # one architecture's ladder: fastest first
            if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__len__") or not len(v):
                raise InvalidArgumentError(f"CostModel.{name}{where}: expected a list of speeds, got {shown(v)}")
            speeds = tuple(_scalar(f"{name}{where}", x, positive=True) for x in v)
            if any(a <= b for a, b in zip(speeds, speeds[1:])):
                raise InvalidArgumentError(f"CostModel.{name}{where}: expected speeds in decreasing order")
            return speeds
        return _scalar(f"{name}{where}", v, integral=name in _INTS, fraction=name in _FRACTIONS)

    if isinstance(value, Mapping):
        if name not in AXES:  # a list without names for its entries
            raise InvalidArgumentError(f"CostModel.{name}: expected a list of {len(default)} entries, got {shown(value)}")
        value = _from_named(name, value, AXES[name], default, partial=False)
    table: tuple[Any, ...] = walk(value, default, "")  # a tuple, as ``default`` is
    return table


def _to_named(v: Any, axes: tuple[tuple[str, ...], ...]) -> Any:
    if not axes:
        return list(v) if isinstance(v, tuple) else v
    return {label: _to_named(x, axes[1:]) for label, x in zip(axes[0], v)}


def _from_named(
    name: str, value: Mapping[str, Any], axes: tuple[tuple[str, ...], ...], base: tuple[Any, ...], partial: bool
) -> tuple[Any, ...]:
    """A nested mapping keyed by axis labels as a tuple; entries it leaves out keep ``base``'s."""
    labels = axes[0]
    unknown = [k for k in value if k not in labels]
    if unknown:
        raise InvalidArgumentError(
            f"CostModel.{name}: unknown key {unknown[0]!r}; expected keys among {', '.join(labels)}")
    out = []
    for label, old in zip(labels, base):
        if label not in value:
            out.append(old)
            continue
        v = value[label]
        if isinstance(v, Mapping) and len(axes) > 1:
            v = _from_named(name, v, axes[1:], old, partial)
        out.append(v)
    return tuple(out)


DEFAULT = CostModel()
"""NCCL v2.30.7's constants and fabricsim's documented choices (:data:`SOURCES`)."""


def checked_cost_model(cost_model: Any) -> CostModel:
    """``cost_model`` as given, or the defaults for None; anything else is refused."""
    if cost_model is None:
        return DEFAULT
    if not isinstance(cost_model, CostModel):
        raise InvalidArgumentError(
            f"cost_model must be a fabricsim.CostModel (None for the defaults), got {type(cost_model).__name__} "
            f"{shown(cost_model)}")
    return cost_model
