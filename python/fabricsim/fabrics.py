"""Topologies: nodes and directed links with capacities (bytes/s) and latencies (s).

Build one from plain link arrays (:meth:`Topology.from_arrays`) or from a NetworkX graph
(:meth:`Topology.from_networkx`). Nodes are numbered ``0..n_nodes-1``; a topology may also
carry node labels, which are then accepted wherever a node is expected.
"""

from __future__ import annotations

import numbers
from types import ModuleType
from typing import TYPE_CHECKING, Any, Hashable, Iterator, Literal, Sequence

import numpy as np
import pyarrow as pa

from . import _core
from ._checks import COUNT, U32, U64, did_you_mean, integer, integers, many, one_value, parsed, quantities, real, shown
from .exceptions import InvalidArgumentError, UnknownNodeError, UnknownPartError
from .units import bandwidth_Bps, duration_s

if TYPE_CHECKING:
    from ._core import NvlinkParams, ScaleOutParams
    from .catalog import Part
    from .collectives.communicator import FabricView
    from .describe import Description

__all__ = ["Topology", "Fabric", "hgx_h100", "hgx_b200", "nvl72", "nvlink_domain", "clos", "cluster", "pcie_server"]


def _labels(labels: Any) -> list[Hashable]:
    """Node labels as a list, each hashable (they are looked up by value)."""
    out = list(many("node_names", labels, "a sequence of labels, one per node"))
    for i, label in enumerate(out):
        if not isinstance(label, Hashable):
            raise InvalidArgumentError(f"node_names[{i}] must be a hashable label (a str, int, tuple, ...), got {label!r}")
    return out


class Topology:
    """A directed graph of links. Immutable; cheap to share between scenarios.

    Example::

        t = fs.Topology.from_arrays([0, 1], [1, 2], "400Gb/s", "1us", node_names=["a", "b", "c"])
        t.n_links, t.route("a", "c")   # (2, [0, 1])
    """

    # _collective_view: what collectives need to know, computed once (collectives.fabric_view)
    __slots__ = ("_core", "_labels", "_label_index", "_collective_view")

    def __init__(self, core: _core.Topology, labels: Sequence[Hashable] | None = None) -> None:
        self._core = core
        self._collective_view: FabricView | None = None
        self._labels = _labels(labels) if labels is not None else None
        self._label_index: dict[Hashable, int] | None = None
        if self._labels is not None:
            if len(self._labels) != core.n_nodes:
                raise InvalidArgumentError(
                    f"node_names must have n_nodes = {core.n_nodes} entries, got {len(self._labels)}"
                )
            self._label_index = {label: i for i, label in enumerate(self._labels)}
            if len(self._label_index) != len(self._labels):
                raise InvalidArgumentError("node_names must be distinct")

    @classmethod
    def from_arrays(
        cls,
        src: Any,
        dst: Any,
        capacity_Bps: Any,
        latency_s: Any = 0.0,
        *,
        n_nodes: int | None = None,
        node_names: Sequence[Hashable] | None = None,
    ) -> "Topology":
        """Link ``i`` goes from node ``src[i]`` to node ``dst[i]``.

        ``capacity_Bps`` (bytes/s) and ``latency_s`` (s) are arrays, or one value for every
        link; unit strings such as ``"400Gb/s"`` or ``"500ns"`` are accepted. ``n_nodes``
        defaults to one more than the largest id (or to ``len(node_names)``).

        Example::

            # a line of three nodes: 0 -> 1 at 400 Gb/s, 1 -> 2 at 200 Gb/s, 500 ns each
            t = fs.Topology.from_arrays([0, 1], [1, 2], ["400Gb/s", "200Gb/s"], "500ns")
            print(t.links)   # link_id, src, dst, capacity_Bps (5e10, 2.5e10), latency_s
        """
        src_a, dst_a = integers("src", src), integers("dst", dst)
        if src_a.shape != dst_a.shape:
            raise InvalidArgumentError(
                f"src and dst must have one length, got {src_a.shape[0]} and {dst_a.shape[0]}"
            )
        n = src_a.shape[0]
        cap = quantities("capacity_Bps", capacity_Bps, n, bandwidth_Bps)
        lat = quantities("latency_s", latency_s, n, duration_s)
        if node_names is not None:
            node_names = _labels(node_names)
        if n_nodes is None:
            if node_names is not None:
                n_nodes = len(node_names)
            else:
                n_nodes = int(max(src_a.max(initial=-1), dst_a.max(initial=-1))) + 1
        n_nodes = integer("n_nodes", n_nodes, (0, 2**63))
        return cls(_core.Topology.from_arrays(n_nodes, src_a, dst_a, cap, lat), node_names)

    @classmethod
    def from_networkx(
        cls, graph: Any, *, capacity: str = "capacity_Bps", latency: str = "latency_s"
    ) -> "Topology":
        """Links from a NetworkX graph's edges and their ``capacity`` / ``latency`` attributes.

        A directed edge becomes one link; an undirected edge becomes two (u->v, then v->u).
        Parallel edges of a multigraph become parallel links. Nodes are numbered in
        ``graph.nodes`` order and keep their labels. A missing latency is 0.

        Example::

            import networkx as nx
            g = nx.Graph()   # undirected: each edge becomes a link each way
            g.add_edge("a", "b", capacity_Bps="100Gb/s")
            g.add_edge("b", "c", capacity_Bps="100Gb/s", latency_s="1us")
            t = fs.Topology.from_networkx(g)
            t.n_links, t.route("a", "c")   # (4, [0, 2])
        """
        if not all(hasattr(graph, a) for a in ("nodes", "edges", "is_directed")):
            raise InvalidArgumentError(f"graph must be a NetworkX graph, got {type(graph).__name__} {shown(graph)}")
        for name, key in (("capacity", capacity), ("latency", latency)):
            # An edge attribute's name: a list was looked up in each edge's dict and raised
            # a bare "unhashable type".
            if not isinstance(key, str):
                raise InvalidArgumentError(
                    f"{name} must be the name of an edge attribute (a str), got {type(key).__name__} {shown(key)}"
                )
        labels = list(graph.nodes)
        index = {label: i for i, label in enumerate(labels)}
        directed = graph.is_directed()
        src: list[int] = []
        dst: list[int] = []
        caps: list[float] = []
        lats: list[float] = []
        for u, v, data in graph.edges(data=True):
            if capacity not in data:
                raise InvalidArgumentError(
                    f"edge ({u!r}, {v!r}) has no {capacity!r} attribute (bytes/s or a string like '400Gb/s')"
                )
            c = parsed(f"edge ({u!r}, {v!r}) {capacity}", bandwidth_Bps, data[capacity])
            lat = parsed(f"edge ({u!r}, {v!r}) {latency}", duration_s, data.get(latency, 0.0))
            pairs = [(u, v)] if directed else [(u, v), (v, u)]
            for a, b in pairs:
                src.append(index[a])
                dst.append(index[b])
                caps.append(c)
                lats.append(lat)
        return cls.from_arrays(
            np.array(src, dtype=np.int64),
            np.array(dst, dtype=np.int64),
            np.array(caps, dtype=np.float64),
            np.array(lats, dtype=np.float64),
            n_nodes=len(labels),
            node_names=labels,
        )

    @property
    def n_nodes(self) -> int:
        """Number of nodes; ids are ``0..n_nodes-1``."""
        return self._core.n_nodes

    @property
    def n_links(self) -> int:
        """Number of directed links; ids are ``0..n_links-1``."""
        return self._core.n_links

    @property
    def node_names(self) -> list[Hashable] | None:
        """Node labels, or None when nodes are plain ids."""
        return None if self._labels is None else list(self._labels)

    @property
    def links(self) -> pa.Table:
        """One row per link: link_id, src, dst, capacity_Bps, latency_s."""
        from .results import table_from_columns

        return table_from_columns(self._core.link_columns())

    def node_id(self, node: Any) -> int:
        """The id of a node: given by its label where the topology has labels (labels may be
        ints themselves, as networkx graphs' often are, so there a bare int is a label), else
        by its id, 0 to n_nodes - 1.

        Example::

            t = fs.Topology.from_arrays([0, 1], [1, 2], "1GB/s", node_names=["a", "b", "c"])
            t.node_id("b")   # 1
        """
        return int(self._known("node", np.array([self._node("node", node)]))[0])

    def node_ids(self, nodes: Any) -> np.ndarray:
        """Vectorised :meth:`node_id` for arrays of nodes.

        Example::

            t = fs.Topology.from_arrays([0, 1], [1, 2], "1GB/s", node_names=["a", "b", "c"])
            t.node_ids(["a", "c"])   # array([0, 2])
        """
        return self._known("nodes", self._nodes("nodes", nodes))

    def _known(self, name: str, ids: np.ndarray) -> np.ndarray:
        """``ids`` if each is a node of this topology (the core checks the ids it is given;
        these are handed back to the caller)."""
        bad = np.flatnonzero((ids < 0) | (ids >= self.n_nodes))
        if bad.size:
            where = name if name == "node" else f"{name}[{bad[0]}]"
            raise UnknownNodeError(f"{where}: no node {ids[bad[0]]} in this topology (nodes are 0..{self.n_nodes - 1})")
        return ids

    def _node(self, name: str, node: Any) -> int:
        # ``name`` is the caller's parameter, for the error message.
        if self._label_index is not None:
            try:
                i = self._label_index[node]
            except (KeyError, TypeError):
                raise UnknownNodeError(f"{name}: no node labelled {node!r} in this topology") from None
            # A dict finds the label 1 for True and for 1.0: a label is found by a number of
            # its own kind, as ids are (never a bool, never a float), also within a tuple.
            assert self._labels is not None  # set with _label_index
            if _number_kind(node) != _number_kind(self._labels[i]):
                raise UnknownNodeError(
                    f"{name}: no node labelled {node!r} in this topology ({node!r} is of type "
                    f"{_type_name(node)}, the label equal to it of type {_type_name(self._labels[i])})"
                )
            return i
        return integer(name, node)

    def _nodes(self, name: str, nodes: Any, *, ordered: bool = True) -> np.ndarray:
        if self._label_index is None:
            return integers(name, nodes, ordered=ordered)
        many(name, nodes, "a sequence of nodes (labels of this topology)", ordered=ordered)
        return np.fromiter((self._node(f"{name}[{i}]", n) for i, n in enumerate(nodes)), dtype=np.int64)

    def route(self, src: Any, dst: Any, *, key: int = 0, seed: int = 0) -> list[int]:
        """Link ids of the ECMP path a flow with ``key`` takes under ``seed``.

        Example::

            f = fs.hgx_h100()
            links = f.route(0, 1)   # GPU 0 to GPU 1 through one NVSwitch chip: [6, 19]
            f.names_of(f.links.take(links).column("dst").to_pylist())   # ['d0.nvswitch0', 'gpu1']
        """
        return self._core.route(
            self._node("src", src), self._node("dst", dst), integer("key", key, U64), integer("seed", seed, U64)
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # The Rust core cannot be pickled: a topology travels as the link arrays it was built
        # from and its labels, and is built again from them where it is unpickled.
        cols = dict(self._core.link_columns())
        return (_unpickled_topology, (self._core.n_nodes, cols["src"], cols["dst"], cols["capacity_Bps"],
                                      cols["latency_s"], self._labels))

    def __repr__(self) -> str:
        return f"Topology(n_nodes={self.n_nodes}, n_links={self.n_links})"


def _unpickled_topology(n_nodes: int, src: np.ndarray, dst: np.ndarray, capacity_Bps: np.ndarray,
                        latency_s: np.ndarray, labels: list[Hashable] | None) -> Topology:
    """A pickled :class:`Topology`, built again (``Topology.__reduce__``)."""
    def arr(a: np.ndarray, dtype: Any) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=dtype)

    core = _core.Topology.from_arrays(n_nodes, arr(src, np.int64), arr(dst, np.int64), arr(capacity_Bps, np.float64),
                                      arr(latency_s, np.float64))
    return Topology(core, labels)


# ---- structured fabrics ----------------------------------------------------------------
#
# The generators below take their figures from the hardware catalog (fabricsim.catalog) and
# hand plain numbers to the Rust generators, which wire and number everything. A structured
# topology keeps the parts it was built from, for describe().

_DOMAINS: dict[str, dict[str, Any]] = {
    # name: gpu, switch chip, NVLinks from each GPU to each chip, GPUs per domain, tiers
    "hgx-h100": dict(gpu="h100", switch="nvswitch3", chip_links=(5, 4, 4, 5), n_gpus=8, tiers=1),
    "hgx-h200": dict(gpu="h200", switch="nvswitch3", chip_links=(5, 4, 4, 5), n_gpus=8, tiers=1),
    "hgx-b200": dict(gpu="b200", switch="nvlink5-switch", chip_links=(9, 9), n_gpus=8, tiers=1),
    "hgx-b300": dict(gpu="b300", switch="nvlink5-switch", chip_links=(9, 9), n_gpus=8, tiers=1),
    "nvl72": dict(gpu="gb200", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=72, tiers=1),
    "gb200-nvl72": dict(gpu="gb200", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=72, tiers=1),
    "gb300-nvl72": dict(gpu="gb300", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=72, tiers=1),
    "nvl36x2": dict(gpu="gb200", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=72, tiers=2),
    "nvl576": dict(gpu="gb200", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=576, tiers=2),
}


# What a domain dict may hold: the per-domain arguments of nvlink_domain.
_DOMAIN_KEYS = ("gpu", "n_gpus", "switch", "chip_links", "tiers")


# Bytes per entry of chip_links while it is checked and handed over: the tuple, its NumPy
# and list copies, the tuple kept and the core's own vector (8 + 8 + 8 + 8 + 8 + 4, rounded up).
_CHIP_LINK_BYTES = 48.0


def _catalog() -> ModuleType:
    from . import catalog

    return catalog


def _part(name: Any, kind: str, what: str) -> Part:
    try:
        p: Part = _catalog().part(name)
    except UnknownPartError as e:  # the message names the part, not the argument that gave it
        raise UnknownPartError(f"{what}: {e}") from None
    if p.kind != kind:
        raise InvalidArgumentError(f"{what} must be a {kind} from the catalog, got {name!r}, a {p.kind}")
    return p


def _efficiency(value: Any, default_name: str, what: str) -> float:
    """A payload efficiency: a number in (0, 1], or an efficiency part for the same side as
    the default part ``default_name`` (NVLink, of any generation, or a scale-out network)."""
    default = _catalog().part(default_name)
    if value is None:
        return float(default["value"])
    if isinstance(value, str):
        p = _part(value, "efficiency", what)
        side = default["applies_to"].startswith("nvlink")
        if p["applies_to"].startswith("nvlink") != side:
            raise InvalidArgumentError(
                f"{what} {value!r} applies to {p['applies_to']}, not to "
                f"{'NVLink' if side else 'a scale-out network'}; give a number in (0, 1] or an "
                f"efficiency part such as {default.name!r}"
            )
        return float(p["value"])
    eff = real(value)  # None for a bool or anything but a real number
    if eff is None or not 0.0 < eff <= 1.0:
        raise InvalidArgumentError(
            f"{what} must be a number in (0, 1] or the name of an efficiency part, got {value!r}"
        )
    return eff


def _nvlink_spec(domain: Any, nvlink_efficiency: Any) -> tuple[NvlinkParams, dict[str, Any]]:
    """(parameters for Rust, parts for describe) of a domain given by name or dict."""
    if isinstance(domain, str):
        key = domain.lower()
        if key not in _DOMAINS:
            raise InvalidArgumentError(
                f"unknown domain {domain!r}{did_you_mean(key, _DOMAINS)}; known: {', '.join(sorted(_DOMAINS))}"
            )
        d = dict(_DOMAINS[key])
    elif isinstance(domain, dict):
        d = dict(domain)
        unknown = sorted(map(str, set(d) - set(_DOMAIN_KEYS)))
        if unknown:
            hints = "".join(did_you_mean(k, _DOMAIN_KEYS) for k in unknown)
            raise InvalidArgumentError(
                f"unknown domain key(s) {', '.join(map(repr, unknown))}{hints}; "
                f"a domain dict takes {', '.join(_DOMAIN_KEYS)}"
            )
    else:
        raise InvalidArgumentError(f"domain must be a preset name or a dict of nvlink_domain arguments, got {domain!r}")
    gpu = _part(d.get("gpu", "gb200"), "gpu", "gpu")
    chip = _part(d.get("switch", "nvlink5-switch"), "nvswitch", "switch")
    chip_links = d.get("chip_links")
    if chip_links is None:
        # One chip per NVLink, checked before the list is made: a user part of 2**31 NVLinks
        # was killed by the operating system while its Python copies were built.
        n_links = int(gpu["nvlink_links"])
        _core.check_fits(
            f"the default chip_links of a {gpu.name}, one NVSwitch chip for each of its {n_links} NVLinks",
            _CHIP_LINK_BYTES * n_links,
        )
        chip_links = (1,) * n_links
    chip_links = tuple(integers("chip_links", chip_links, COUNT).tolist())
    if sum(chip_links) != gpu["nvlink_links"]:
        raise InvalidArgumentError(
            f"chip_links {chip_links} wire {sum(chip_links)} NVLinks per GPU, "
            f"but a {gpu.name} has {gpu['nvlink_links']}"
        )
    if gpu["nvlink_generation"] != chip["nvlink_generation"]:
        raise InvalidArgumentError(
            f"a {gpu.name} (NVLink {gpu['nvlink_generation']}) cannot use {chip.name} "
            f"(NVLink {chip['nvlink_generation']})"
        )
    eff = _efficiency(nvlink_efficiency, gpu["nvlink_efficiency"], "nvlink_efficiency")
    n_gpus = integer("n_gpus", d.get("n_gpus", 72), COUNT)
    tiers = d.get("tiers")
    if tiers is None:
        tiers = 1 if n_gpus * max(chip_links) <= chip["ports"] else 2
    params: NvlinkParams = {
        "gpus_per_domain": n_gpus,
        "chip_links": list(chip_links),
        "tiers": integer("tiers", tiers, COUNT),
        "chip_ports": int(chip["ports"]),
        "link_Bps": float(gpu["nvlink_link_Bps"]) * eff,
        "chip_latency_s": float(chip["latency_s"]),
    }
    parts = dict(gpu=gpu, nvswitch=chip, nvlink_efficiency=eff)
    return params, parts


def _scale_out_spec(
    n_endpoints: int, rails: int, switch: Any, nic: Any, tiers: Any, planes: Any,
    oversubscription: Any, routing: Any, efficiency: Any, switch_arg: str = "switch",
) -> tuple[ScaleOutParams, dict[str, Any]]:
    """The scale-out Clos's parameters and parts; ``switch_arg`` names the caller's argument
    that gave ``switch``."""
    sw = _part(switch, "switch", switch_arg)
    nic_p = _part(nic, "nic", "nic")
    if sw["protocol"] not in nic_p["protocols"]:
        raise InvalidArgumentError(f"{nic_p.name} does not speak {sw['protocol']}, which {sw.name} runs")
    if routing is None:
        routing = "adaptive" if sw["protocol"] == "infiniband" else "ecmp"
    if not isinstance(routing, str) or routing not in ("ecmp", "adaptive"):
        raise InvalidArgumentError(f"routing must be 'ecmp' or 'adaptive', got {routing!r}")
    mode: Literal["ecmp", "adaptive"] = "adaptive" if routing == "adaptive" else "ecmp"  # routing, as the core types it
    if routing == "adaptive" and not sw["adaptive_routing"]:
        raise InvalidArgumentError(f"{sw.name} has no adaptive routing; use routing='ecmp'")
    over = _oversubscription(oversubscription)
    eff = _efficiency(efficiency, sw["protocol"], "efficiency")
    capacity_Bps = float(sw["ports"]) * float(sw["port_Bps"])
    plane_options = [planes] if planes is not None else [p for p in (1, 2, 4, 8) if p <= max(1, nic_p["max_planes"])]
    # One tier is one switch per plane: nothing above it to oversubscribe.
    tier_options = [tiers] if tiers is not None else [1, 2, 3] if over == (1.0, 1.0) else [2, 3]
    errors = []
    for p in plane_options:
        p = integer("planes", p, COUNT)
        if p > max(1, nic_p["max_planes"]) and planes is not None:
            raise InvalidArgumentError(f"{nic_p.name} splits over at most {nic_p['max_planes']} plane(s), got planes={p}")
        plane_Bps = float(nic_p["rate_Bps"]) / p
        nic_port_Bps = nic_p["ethernet_port_Bps"] if sw["protocol"] == "ethernet" else None
        if nic_port_Bps is not None and plane_Bps > nic_port_Bps * (1 + 1e-9):
            why = (f"{nic_p.name} runs Ethernet at most {nic_port_Bps * 8 / 1e9:g} Gb/s per port, so "
                   f"planes={p} ({plane_Bps * 8 / 1e9:g} Gb/s per plane) cannot run on {sw.name}")
            if planes is not None:
                raise InvalidArgumentError(why)
            errors.append(why)
            continue
        if plane_Bps > sw["port_Bps"] * (1 + 1e-9) or plane_Bps < sw["lane_Bps"] * (1 - 1e-9):
            errors.append(f"planes={p}: {plane_Bps * 8 / 1e9:g} Gb/s per plane is not a port speed of {sw.name}")
            continue
        radix = int(capacity_Bps / plane_Bps + 1e-9)
        if radix >= COUNT[1]:
            # The core numbers ports in 32 bits: a user part of 2**31 ports at 800 Gb/s broke
            # out to 400 Gb/s failed with "parameter radix: OverflowError ...".
            errors.append(
                f"planes={p}: {sw.name} has {radix} ports of {plane_Bps * 8 / 1e9:g} Gb/s, "
                f"more than the 2**32 - 1 a switch can have"
            )
            continue
        for t in tier_options:
            params: ScaleOutParams = {
                "tiers": integer("tiers", t, COUNT), "planes": p, "radix": radix, "oversubscription": over,
                "link_Bps": plane_Bps * eff, "switch_latency_s": float(sw["latency_s"]),
                "nic_latency_s": float(nic_p["latency_s"]), "routing": mode,
            }
            if params["tiers"] == 1 and over != (1.0, 1.0):
                raise InvalidArgumentError(
                    f"oversubscription {oversubscription!r} needs uplinks, but a Clos of 1 tier is one "
                    "switch per plane with none; give tiers=2 or more"
                )
            fits = _clos_fits(n_endpoints, rails, params)
            if fits is None:
                if params["tiers"] == 2 and over[1] != 1.0:
                    raise InvalidArgumentError(
                        f"oversubscription {oversubscription!r} gives the spine tier a ratio of "
                        f"{over[1]:g}, but this Clos has 2 tiers and no tier above its spines; "
                        "give one ratio (the leaf tier's) or tiers=3"
                    )
                parts = dict(switch=sw, nic=nic_p, efficiency=eff, plane_Bps=plane_Bps)
                return params, parts
            errors.append(f"planes={p}, tiers={t}: {fits}")
    raise InvalidArgumentError(f"no {sw.name} Clos holds {n_endpoints} endpoints: " + "; ".join(errors))


def _oversubscription(value: Any) -> tuple[float, float]:
    """(leaf, spine) down:up ratios from a number, a string "a:b" (the leaf tier's) or a tuple
    (leaf,) or (leaf, spine)."""
    def ratio(x: Any) -> float:
        out = real(x)
        if out is None:
            raise InvalidArgumentError(
                f"oversubscription must be a number, a string 'a:b' or a tuple (leaf, spine) of "
                f"numbers, got {shown(value)}"
            )
        return out

    if isinstance(value, str):
        down, colon, up = value.partition(":")
        try:
            leaf = float(down) / float(up) if colon else None
        except (ValueError, ZeroDivisionError):
            leaf = None
        if leaf is None:
            raise InvalidArgumentError(f"oversubscription as a string is 'down:up', e.g. '3:1', got {value!r}")
        return leaf, 1.0
    if isinstance(value, (tuple, list)) and len(value) in (1, 2):
        return ratio(value[0]), ratio(value[1]) if len(value) == 2 else 1.0
    return ratio(value), 1.0


def _clos_fits(n_endpoints: int, rails: int, params: ScaleOutParams) -> str | None:
    """None when the Clos can be built, else why not (checked on a shape, no allocation)."""
    try:
        _core.clos_shape(n_endpoints, rails, [1] * params["planes"], params["tiers"], params["radix"],
                         params["oversubscription"])
    except InvalidArgumentError as e:
        return str(e)
    return None


def _sharp_flag(value: Any) -> bool:
    """``sharp`` checked to be a bool (1 or "yes" would pass a truth test and hide a typo)."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"sharp must be True or False, got {type(value).__name__} {shown(value)}")
    return bool(value)


def _sharp_switch(sharp: bool, sw: Any, switch_arg: str) -> bool:
    """``sharp`` if the scale-out switch part can run it; refused otherwise."""
    if sharp and (sw["protocol"] != "infiniband" or not sw["sharp"]):
        why = (f"{sw.name} is {sw['protocol']}" if sw["protocol"] != "infiniband"
               else f"{sw.name} is InfiniBand without SHARP (its catalog part has sharp=False)")
        raise InvalidArgumentError(
            f"sharp=True needs InfiniBand switches with SHARP (in-network reduction); "
            f"{switch_arg}={sw.name!r}: {why}"
        )
    return sharp


def _host_Bps(nic: Any, gpu: Any) -> float:
    """A GPU's link to its NIC (bytes/s per direction): the NIC's host interface or the GPU's
    PCIe, whichever is slower."""
    return min(float(nic["host_Bps"]), float(gpu["pcie_Bps"]))


def _build_core(parts: dict[str, Any]) -> _core.Topology:
    """The core of a domain, Clos or cluster fabric from its parts: the one place the
    builders and :meth:`Fabric.with_payload_efficiency` build it, so a rebuild is wired and
    numbered as the first build was (recorded faults name links by id)."""
    dom, so = parts.get("domain"), parts.get("scale_out")
    if dom is not None and so is not None:
        return _core.build_cluster(parts["n_domains"], dom, _host_Bps(parts["nic"], parts["gpu"]), so)
    if so is not None:
        return _core.build_clos(parts["n_hosts"], so)
    return _core.build_nvlink_domains(parts["n_domains"], parts["domain"])


class Fabric(Topology):
    """A topology built by a structured generator: its routes come from its structure and
    it remembers the catalog parts it was built from (see :meth:`describe`).

    Example::

        f = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        f, f.gpus[:4], f.structure["n_nics"]   # Fabric(n_gpus=16, n_nodes=41, n_links=640), [0 1 2 3], 16
    """

    __slots__ = ("_parts",)

    def __init__(self, core: _core.Topology, parts: dict[str, Any]) -> None:
        super().__init__(core, None)
        self._parts = parts

    @property
    def n_gpus(self) -> int:
        """Number of GPUs; GPU ``i`` is node ``i`` (0 for ``clos``, whose endpoints are hosts)."""
        return self._core.n_gpus

    @property
    def gpus(self) -> np.ndarray:
        """Node ids of the GPUs (GPU i is node i)."""
        return np.arange(self._core.n_gpus, dtype=np.int64)

    @property
    def nics(self) -> np.ndarray:
        """Node ids of the NICs (NIC i serves GPU i) or of a bare Clos's hosts."""
        n = self._core.n_gpus
        return np.arange(n, n + self._core.n_nics, dtype=np.int64)

    @property
    def structure(self) -> dict[str, Any]:
        """Sizes of the domains and of the scale-out Clos, as the generator laid them out."""
        return self._core.structure()

    @property
    def node_names(self) -> "_NodeNames":  # type: ignore[override]
        """Readable node names (``gpu12``, ``d3.nvswitch4``, ``p1.leaf7``), computed on demand:
        ``fabric.node_names[i]``, or ``fabric.names_of(ids)`` for many."""
        return _NodeNames(self._core)

    def names_of(self, nodes: Any) -> list[str]:
        """Readable names of node ids.

        Example::

            fs.hgx_h100().names_of([0, 8])   # ['gpu0', 'd0.nvswitch0']
        """
        return self._core.node_names(integers("nodes", nodes, one=True).tolist())

    def _node(self, name: str, node: Any) -> int:
        if isinstance(node, str):
            raise UnknownNodeError(
                f"nodes of a generated fabric are ids (GPU i is node i; see .gpus, .nics), got {name}={node!r}"
            )
        return super()._node(name, node)

    def fail(self, *, links: Any = (), nodes: Any = (), planes: Any = (), factor: float = 0.0) -> "Fabric":
        """A copy with links, every link of some nodes (switches, NICs, GPUs) or whole
        scale-out planes down (``factor=0``) or degraded (capacity times ``factor``, in
        [0, 1]; 1 leaves them at full capacity). The fault is kept through
        :meth:`with_payload_efficiency`.

        Example::

            f = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            degraded = f.fail(links=f.route(0, 8)[:1], factor=0.5)   # the first link of that path at half rate
            sc = fs.Scenario(degraded)
            sc.add_flow(0, 8, "1GiB")
            sc.run().summary.makespan_s
        """
        ids, factor = _fault(self, links, nodes, planes, factor)
        core = self._core.with_link_factors(ids, factor)
        # Kept, in order, so that with_payload_efficiency can re-apply them to a rebuilt core;
        # an array holds a whole plane's link ids in 8 bytes each, a list in about 36.
        recorded = np.asarray(ids, dtype=np.int64)
        recorded.flags.writeable = False
        return Fabric(core, dict(self._parts, faults=(*self._parts.get("faults", ()), (recorded, factor))))

    @property
    def payload_efficiency(self) -> dict[str, float | None]:
        """The payload efficiencies link capacities were built with (payload rate / line
        rate, in (0, 1]): ``{"nvlink": ..., "network": ...}``, None for a tier the fabric
        does not have (``network`` of an HGX board, both of a PCIe server)."""
        return {"nvlink": self._parts.get("nvlink_efficiency"), "network": self._parts.get("efficiency")}

    def with_payload_efficiency(self, *, nvlink: Any = None, network: Any = None) -> "Fabric":
        """This fabric rebuilt with other payload efficiencies: NVLink link capacities become
        the NVLink line rate times ``nvlink``, scale-out link capacities (NIC to leaf and
        between switches) the plane's line rate times ``network``, in bytes/s per direction.
        Each is a number in (0, 1] or the name of an efficiency part, as the builders'
        ``nvlink_efficiency`` and ``efficiency`` take; None keeps the current one. GPU-to-NIC
        (PCIe) links are not payload-scaled and keep their capacity.

        Faults applied with :meth:`fail` are re-applied in the order they were, as fractions
        of the new capacities. A fabric without the tier asked for (``network`` of an HGX
        board or an NVLink domain, ``nvlink`` of a bare Clos or a PCIe server) is refused.
        Costs about what building the fabric did.

        Example::

            f = fs.hgx_h100().with_payload_efficiency(nvlink=0.9)   # 90 % of NVLink's rate carries data
            f.describe()   # "scale-up per GPU, payload (x efficiency)  405 GB/s"
        """
        parts = self._parts
        if nvlink is not None and "domain" not in parts:
            raise InvalidArgumentError(
                f"nvlink={shown(nvlink)}: this fabric has no NVLink domains ({_kind_of(parts)}), "
                "so it has no NVLink payload efficiency to set"
            )
        if network is not None and "scale_out" not in parts:
            raise InvalidArgumentError(
                f"network={shown(network)}: this fabric has no scale-out network ({_kind_of(parts)}), "
                "so it has no network payload efficiency to set; build one with fs.cluster(...) or fs.clos(...)"
            )
        if nvlink is None and network is None:
            return self  # fabrics are immutable: nothing to rebuild
        new = dict(parts)
        if nvlink is not None:
            gpu = parts["gpu"]
            eff = _efficiency(nvlink, gpu["nvlink_efficiency"], "nvlink")
            # As _nvlink_spec computes it, so the same efficiency gives the same capacities.
            new["domain"] = dict(parts["domain"], link_Bps=float(gpu["nvlink_link_Bps"]) * eff)
            new["nvlink_efficiency"] = eff
        if network is not None:
            eff = _efficiency(network, parts["switch"]["protocol"], "network")
            new["scale_out"] = dict(parts["scale_out"], link_Bps=parts["plane_Bps"] * eff)
            new["efficiency"] = eff
        core = _build_core(new)
        for ids, factor in parts.get("faults", ()):
            core = core.with_link_factors(ids.tolist(), factor)
        return Fabric(core, new)

    def describe(self) -> Description:
        """Counts, bandwidths (line rates and payload), power and SHARP of the fabric, printed as a report (``print(fabric.describe())``).

        Example::

            print(fs.hgx_h100().describe())   # counts, bandwidth, power and cost of the parts
        """
        from .describe import describe

        return describe(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # A fabric travels as its parts (the generator's checked arguments, the catalog parts
        # it used, its faults) and is generated again where it is unpickled: a few numbers
        # instead of its links, and wired and numbered as the first build was.
        return (_unpickled_fabric, (self._parts,))

    def __repr__(self) -> str:
        s = self._core.structure()
        return f"Fabric(n_gpus={s['n_gpus']}, n_nodes={s['n_nodes']}, n_links={s['n_links']})"


def _unpickled_fabric(parts: dict[str, Any]) -> Fabric:
    """A pickled :class:`Fabric`, generated again from its parts, faults re-applied in order
    (``Fabric.__reduce__``)."""
    build = parts.get("pcie_server")
    core = _core.build_pcie_server(*build) if build is not None else _build_core(parts)
    faults = []
    for ids, factor in parts.get("faults", ()):
        ids = np.asarray(ids, dtype=np.int64)
        ids.flags.writeable = False  # as fail() keeps them
        core = core.with_link_factors(ids.tolist(), factor)
        faults.append((ids, factor))
    return Fabric(core, dict(parts, faults=tuple(faults)))


def _kind_of(parts: dict[str, Any]) -> str:
    """What a generated fabric is, from its parts, for messages."""
    if "domain" in parts:
        return f"NVLink domains of {parts['gpu'].name} GPUs without a scale-out network"
    if "scale_out" in parts:
        return f"a Clos of hosts on {parts['switch'].name} switches without NVLink"
    return "GPUs on PCIe, a pcie_server"


class _NodeNames:
    """A read-only sequence of a fabric's node names, each made when asked for."""

    __slots__ = ("_core",)

    def __init__(self, core: _core.Topology) -> None:
        self._core = core

    def __len__(self) -> int:
        return self._core.n_nodes

    def __getitem__(self, i: int) -> str:
        return self._core.node_names([integer("node", i)])[0]

    def __iter__(self) -> Iterator[str]:
        # Without it, iteration indexes until IndexError, and an id past the last node is
        # an UnknownNodeError: list(fabric.node_names) raised instead of listing them.
        n = len(self)
        for lo in range(0, n, 65536):
            yield from self._core.node_names(list(range(lo, min(lo + 65536, n))))


def _number_kind(x: Any) -> Any:
    """"bool", "integer" or "real" for a number, None for any other label, and for a tuple
    those of its elements (a dict finds the label (1, 2) for (1.0, 2) and (True, 2) too)."""
    if isinstance(x, tuple):
        return tuple(map(_number_kind, x))
    if isinstance(x, (bool, np.bool_)):
        return "bool"
    if isinstance(x, numbers.Integral):
        return "integer"
    return "real" if isinstance(x, numbers.Real) else None


def _type_name(x: Any) -> str:
    """``x``'s type, with its elements' for a tuple: tuple[float, int]."""
    if isinstance(x, tuple):
        return f"tuple[{', '.join(map(_type_name, x))}]"
    return type(x).__name__


def _is_label(topo: Topology, x: Any) -> bool:
    """Whether ``x`` is one of ``topo``'s node labels."""
    try:
        return topo._label_index is not None and x in topo._label_index
    except TypeError:  # a tuple holding something unhashable
        return False


def _fault(topo: Topology, links: Any, nodes: Any, planes: Any, factor: Any) -> tuple[list[int], float]:
    """The link ids a fault names and its capacity factor, checked."""
    # A fault takes capacity away or gives it back; more than nominal would be a faster link.
    checked = real(factor)  # None for a bool or anything but a real number
    if checked is None or not 0.0 <= checked <= 1.0:
        raise InvalidArgumentError(
            f"factor must be a number in [0, 1] (0 = down, 1 = full capacity), got {factor!r}"
        )
    # Which links, nodes or planes fail has no order: sets of them are fine.
    ids = integers("links", links, one=True, ordered=False).tolist()
    # One node (an id, or a label, a tuple such as NetworkX's grid labels too) or many.
    # (NumPy reads a set as one value, but a set is never a label: labels are hashable.)
    one = isinstance(nodes, Hashable) and (one_value(nodes) or _is_label(topo, nodes))
    node_list = topo._nodes("nodes", [nodes] if one else nodes, ordered=False).tolist()
    if node_list:
        ids += topo._core.links_of_nodes(node_list)
    for p in integers("planes", planes, one=True, ordered=False).tolist():
        ids += topo._core.links_of_plane(p)
    if not ids:
        raise InvalidArgumentError("name at least one link, node or plane to fail")
    return sorted(set(ids)), checked


def nvlink_domain(
    *, gpu: str = "gb200", n_gpus: int = 72, switch: str = "nvlink5-switch",
    chip_links: Sequence[int] | None = None, tiers: int | None = None, n_domains: int = 1,
    nvlink_efficiency: Any = None,
) -> Fabric:
    """``n_domains`` NVLink domains of ``n_gpus`` GPUs each, every GPU wired to every first-tier
    switch chip with ``chip_links[i]`` NVLinks to chip i (default one link to each of as many
    chips as the GPU has links). Domains larger than a chip's ports get a second tier of
    spine chips (NVL576-style). Link capacities are payload rates: line rate times
    ``nvlink_efficiency`` (default: the GPU's catalog efficiency).

    Example::

        f = fs.nvlink_domain(gpu="gb200", n_gpus=8, n_domains=2)   # two 8-GPU NVLink 5 domains
        f.structure["n_gpus"]                                    # 16
    """
    params, parts = _nvlink_spec(
        dict(gpu=gpu, switch=switch, chip_links=chip_links, n_gpus=n_gpus, tiers=tiers), nvlink_efficiency
    )
    parts = dict(parts, domain=params, n_domains=integer("n_domains", n_domains, COUNT), sharp_enabled=False, faults=())
    return Fabric(_build_core(parts), parts)


def _preset(name: str, nvlink_efficiency: Any, n_domains: int = 1) -> Fabric:
    params, parts = _nvlink_spec(name, nvlink_efficiency)
    parts = dict(parts, domain=params, n_domains=integer("n_domains", n_domains, COUNT), preset=name,
                 sharp_enabled=False, faults=())
    return Fabric(_build_core(parts), parts)


def hgx_h100(*, nvlink_efficiency: Any = None) -> Fabric:
    """An HGX H100 board: 8 H100s, 4 NVSwitch3 chips, each GPU's 18 NVLinks split 5/4/4/5.

    Example::

        f = fs.hgx_h100()   # Fabric(n_gpus=8, n_nodes=12, n_links=288)
        sc = fs.Scenario(f)
        sc.add_collective("all_reduce", None, "1GiB")   # all 8 GPUs
        sc.run().summary.makespan_s
    """
    return _preset("hgx-h100", nvlink_efficiency)


def hgx_b200(*, nvlink_efficiency: Any = None) -> Fabric:
    """An HGX B200 board: 8 B200s, 2 NVLink 5 switch chips, 9 + 9 NVLinks per GPU.

    Example::

        fs.hgx_b200()   # Fabric(n_gpus=8, n_nodes=10, n_links=288)
    """
    return _preset("hgx-b200", nvlink_efficiency)


def nvl72(*, gpu: str = "gb200", nvlink_efficiency: Any = None) -> Fabric:
    """A GB200 or GB300 NVL72 rack: 72 GPUs, 18 NVLink 5 switch chips in 9 trays, each GPU one
    link to each chip (the NVLink spine).

    Example::

        f = fs.nvl72(gpu="gb300")   # Fabric(n_gpus=72, n_nodes=90, n_links=2592)
        len(f.route(0, 71))         # 2: GPU to switch chip to GPU
    """
    name = {"gb200": "gb200-nvl72", "gb300": "gb300-nvl72"}.get(str(gpu).lower())
    if name is None:
        raise InvalidArgumentError(f"nvl72 gpu must be 'gb200' or 'gb300', got {gpu!r}")
    return _preset(name, nvlink_efficiency)


def clos(
    *, n_hosts: int, switch: str = "quantum-x800", nic: str = "cx8", tiers: int | None = None,
    planes: int | None = None, oversubscription: Any = 1.0, routing: str | None = None,
    efficiency: Any = None, sharp: bool = False,
) -> Fabric:
    """A fat-tree of ``n_hosts`` hosts (one NIC each) built from catalog switches.

    ``tiers`` (1, one switch per plane; 2 or 3) and ``planes`` (the NIC's rate split over that
    many parallel fabrics, raising the switch radix) default to the fewest that hold every host. ``oversubscription``
    is the leaf tier's down:up capacity ratio (a number, or a string such as "3:1"), or a tuple
    (leaf, spine) whose spine ratio, between spines and cores, needs 3 tiers. It holds as built:
    a tier's up ports are the fewest that carry, at that ratio, the down ports its fullest
    switch uses (a leaf or spine with fewer below it is less oversubscribed);
    ``describe()`` reports each tier's ratio. ``routing`` is "ecmp" (static hashing)
    or "adaptive" (even spreading); default adaptive on InfiniBand, ECMP on Ethernet.
    ``efficiency`` is the payload efficiency (link capacity = line rate x efficiency; a number
    in (0, 1] or an efficiency part, default the protocol's).

    ``sharp=True`` says the deployment runs SHARP, in-network reduction in the switches
    (NCCL's CollNet). The switches alone do not reduce anything: a real deployment needs
    SHARP-capable InfiniBand switches (Quantum-2: SHARPv3, Quantum-X800: SHARPv4), the SHARP
    Aggregation Manager running on the fabric, and NCCL's ``nccl-rdma-sharp-plugins`` net
    plugin with ``NCCL_COLLNET_ENABLE=1``. Refused on switches without SHARP (Ethernet ones
    among them); default False, as a cluster runs without SHARP unless all of that is set up.

    Example::

        f = fs.clos(n_hosts=32, switch="quantum-2", nic="cx7")   # 32 hosts on one 64-port switch
        f, len(f.route(0, 31))   # Fabric(n_gpus=0, n_nodes=33, n_links=64), 2
    """
    n = integer("n_hosts", n_hosts, COUNT)
    sharp = _sharp_flag(sharp)
    params, parts = _scale_out_spec(n, 1, switch, nic, tiers, planes, oversubscription, routing, efficiency)
    parts = dict(parts, scale_out=params, n_hosts=n, sharp_enabled=_sharp_switch(sharp, parts["switch"], "switch"),
                 faults=())
    return Fabric(_build_core(parts), parts)


def cluster(
    *, domain: Any = "nvl72", n_domains: int, scale_out: Any = "quantum-x800", nic: str | None = None,
    tiers: int | None = None, planes: int | None = None, oversubscription: Any = 1.0,
    routing: str | None = None, nvlink_efficiency: Any = None, efficiency: Any = None,
    sharp: bool = False,
) -> Fabric:
    """``n_domains`` scale-up domains (a preset name such as "nvl72", "hgx-h100", or a dict
    of :func:`nvlink_domain` arguments) joined by a rail-optimised Clos of ``scale_out``
    switches: one NIC per GPU (default: the GPU's catalog NIC), NIC i of every domain on
    rail i, each rail on leaves of its own, or, when a rail does not fill a leaf, consecutive
    rails sharing one (``structure["scale_out"]["rails_per_leaf"]``). ``tiers``, ``planes``,
    ``oversubscription`` (down:up capacity of the fullest leaf, and spine, as built) and
    ``routing`` are :func:`clos`'s. Photonic fabrics are the same call with a photonic
    switch. NVLink capacities are line rate x ``nvlink_efficiency``, scale-out ones line rate
    x ``efficiency`` (each a number in (0, 1] or an efficiency part; default the catalog's).

    ``sharp=True`` says the deployment runs SHARP, in-network reduction in the scale-out
    switches (NCCL's CollNet, and NVLS+SHARP across domains). The switches alone do not
    reduce anything: a real deployment needs SHARP-capable InfiniBand switches (Quantum-2:
    SHARPv3, Quantum-X800: SHARPv4), the SHARP Aggregation Manager running on the fabric, and
    NCCL's ``nccl-rdma-sharp-plugins`` net plugin with ``NCCL_COLLNET_ENABLE=1``. Refused on
    switches without SHARP (Ethernet ones among them); default False, as a cluster runs
    without SHARP unless all of that is set up.

    Example::

        f = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")   # 16 GPUs, 2 HGX boards
        sc = fs.Scenario(f)
        sc.add_collective("all_reduce", None, "256MiB")   # across both boards
        sc.run().summary.makespan_s
    """
    parts = _cluster_parts(domain, n_domains, scale_out, nic, tiers, planes, oversubscription, routing,
                           nvlink_efficiency, efficiency, sharp)
    return Fabric(_build_core(parts), parts)


def _cluster_parts(
    domain: Any, n_domains: Any, scale_out: Any, nic: Any, tiers: Any, planes: Any, oversubscription: Any,
    routing: Any, nvlink_efficiency: Any, efficiency: Any, sharp: Any,
) -> dict[str, Any]:
    """:func:`cluster`'s arguments checked and its parts chosen, nothing built (also what
    ``fabricsim.power.plan_cluster`` counts from)."""
    sharp = _sharp_flag(sharp)
    params, parts = _nvlink_spec(domain, nvlink_efficiency)
    gpd = params["gpus_per_domain"]
    # Every GPU is a node and node ids are 32-bit: fewer than 2**32 GPUs in all.
    nd = integer(f"n_domains (of {gpd} GPUs)", n_domains, (1, (COUNT[1] - 1) // gpd + 1))
    nic_name = nic if nic is not None else parts["gpu"]["nic"]
    _part(nic_name, "nic", "nic")  # named before a bad scale_out is
    n = gpd * nd
    so, so_parts = _scale_out_spec(
        n, params["gpus_per_domain"], scale_out, nic_name, tiers, planes, oversubscription, routing, efficiency,
        switch_arg="scale_out",
    )
    return dict(parts, **so_parts, domain=params, n_domains=nd, scale_out=so, faults=(),
                sharp_enabled=_sharp_switch(sharp, so_parts["switch"], "scale_out"))


def pcie_server(
    *, n_gpus: int = 8, gpus_per_switch: int = 2, nics_per_switch: int = 1, n_cpus: int = 2,
    pcie: str = "pcie-gen5-x16", nic: str = "cx7", cpu_link_Bps: Any = "64GB/s", latency_s: Any = "1us",
) -> Fabric:
    """GPUs behind PCIe switches (``pcie`` per direction per x16 link, Gen5: 64 GB/s), the
    switches split over ``n_cpus`` sockets joined by a ``cpu_link_Bps`` link: the baseline
    NVLink is compared with. Routes are searched (the graph is a tree).

    Example::

        f = fs.pcie_server()          # 8 GPUs, 2 per PCIe Gen5 switch, 2 CPU sockets
        hops = f.links.take(f.route(0, 7)).column("dst").to_pylist()
        f.names_of(hops)   # ['pcie_switch12', 'cpu16', 'cpu17', 'pcie_switch15', 'gpu7']
    """
    pcie_p = _part(pcie, "pcie", "pcie")
    nic_p = _part(nic, "nic", "nic")
    # Kept in the parts: a pickled server is rebuilt from them (Fabric.__reduce__).
    build = (
        integer("n_gpus", n_gpus, COUNT), integer("gpus_per_switch", gpus_per_switch, COUNT),
        integer("nics_per_switch", nics_per_switch, U32), integer("n_cpus", n_cpus, COUNT),
        float(pcie_p["rate_Bps"]), float(nic_p["rate_Bps"]), parsed("cpu_link_Bps", bandwidth_Bps, cpu_link_Bps),
        parsed("latency_s", duration_s, latency_s),
    )
    core = _core.build_pcie_server(*build)
    return Fabric(core, dict(pcie=pcie_p, nic=nic_p, sharp_enabled=False, faults=(), pcie_server=build))
