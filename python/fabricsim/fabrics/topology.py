"""Topologies: nodes and directed links with capacities (bytes/s) and latencies (s).

Build one from plain link arrays (:meth:`Topology.from_arrays`) or from a NetworkX graph
(:meth:`Topology.from_networkx`). Nodes are numbered ``0..n_nodes-1``; a topology may also
carry node labels, which are then accepted wherever a node is expected. Faults name the links
of a topology by id, by node or by scale-out plane (:func:`_fault`).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, Hashable, Sequence

import numpy as np
import pyarrow as pa

from .. import _core
from .._checks import U64, integer, integers, many, one_value, parsed, quantities, real, shown
from .._columns import table_from_columns
from ..exceptions import InvalidArgumentError, UnknownNodeError
from ..units import bandwidth_Bps, duration_s
from . import links as _links

__all__ = ["Topology"]


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

    # _collective_view: what collectives need to know of it, computed once by
    # fabricsim.collectives.fabric_view and kept here (a topology is immutable); _name_array:
    # every node's name, made on first use (fabrics.links.name_array)
    __slots__ = ("_core", "_labels", "_label_index", "_collective_view", "_n_gpus", "_name_array")

    def __init__(self, core: _core.Topology, labels: Sequence[Hashable] | None = None, n_gpus: int | None = None) -> None:
        self._core = core
        self._collective_view: Any = None
        self._n_gpus = n_gpus
        self._name_array: pa.Array | None = None
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
        Parallel edges of a multigraph become parallel links, in edge order; where every edge
        of a directed graph has a ``link_id`` attribute (as :meth:`to_networkx` writes) and
        they number the edges 0, 1, ..., the links take those ids. Nodes are numbered in
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
        order = _links.link_order(graph) if directed else None
        arrays = [np.array(x, dtype=t) for x, t in ((src, np.int64), (dst, np.int64), (caps, np.float64),
                                                     (lats, np.float64))]
        if order is not None:
            arrays = [a[order] for a in arrays]
        return cls.from_arrays(*arrays, n_nodes=len(labels), node_names=labels)

    @classmethod
    def from_ibnetdiscover(
        cls, text: Any, *, gpus: Any = "per_hca", nvlink: Any = None, domain_of: Any = None, efficiency: Any = None,
        gpu_link_Bps: Any = None, switch_latency_s: Any = None,
    ) -> "Topology":
        """The fabric an InfiniBand cluster is cabled as: ``text`` is ``ibnetdiscover``'s output
        (or an ``os.PathLike`` to a file of it), every switch, HCA and cable as discovered,
        miswirings included (:mod:`fabricsim.fabrics.ibnetdiscover` has the format and checks).

        Nodes are named by their node descriptions (with the GUID where descriptions repeat);
        each cable is a link each way of width x lane rate x ``efficiency`` (default the
        catalog's InfiniBand payload efficiency), with latency ``switch_latency_s`` into a
        switch (default the catalog's Quantum-2). A port line that the other end does not list
        is left out, with a warning; ends that disagree raise :class:`~fabricsim.CablingError`.
        GPUs come first (GPU i is node i, as in generated fabrics), each linked to its HCA at
        ``gpu_link_Bps`` (default PCIe Gen5 x16): ``gpus="per_hca"`` puts GPU i of a host on
        its i-th HCA (host and device from the description, rdma-ndd's "<host> <device>", in
        natural order: mlx5_2 before mlx5_10), a mapping names the GPU of each HCA (its
        description or GUID -> GPU name; one name on several HCAs is one GPU with several
        NICs), a function ``(description, guid) -> name or None`` decides per HCA, None attaches
        none. ``nvlink``, a domain preset such as "hgx-h100", joins the GPUs of each host
        (``domain_of(host)`` -> a domain name groups hosts) through one switch, each GPU's link
        its NVLinks' payload rate: what spraying over the domain's switch chips gives. Flows
        take shortest paths (ECMP among equal ones).

        Example::

            text = '''
            Switch 4 "S-0000000000000001" # "leaf0" base port 0 lid 1 lmc 0
            [1] "H-0000000000000011"[1](111) # "n1 mlx5_0" lid 3 4xNDR
            [2] "H-0000000000000012"[1](121) # "n2 mlx5_0" lid 4 4xNDR
            Ca 1 "H-0000000000000011" # "n1 mlx5_0"
            [1](111) "S-0000000000000001"[1] # lid 3 lmc 0 "leaf0" lid 1 4xNDR
            Ca 1 "H-0000000000000012" # "n2 mlx5_0"
            [1](121) "S-0000000000000001"[2] # lid 4 lmc 0 "leaf0" lid 1 4xNDR
            '''
            t = fs.Topology.from_ibnetdiscover(text)
            t.node_names[:3], t.n_gpus   # (['n1 gpu0', 'n2 gpu0', 'leaf0'], 2)
            sc = fs.Scenario(t)
            sc.add_collective("all_reduce", None, "1GiB")   # over both GPUs
        """
        import os
        import warnings

        from .._files import read_bytes
        from ..exceptions import CablingError
        from .ibnetdiscover import fabric_arrays

        if isinstance(text, os.PathLike):
            try:
                text = read_bytes("text", text)[1].decode("utf-8", errors="replace")
            except OSError as err:
                raise CablingError(f"cannot read the ibnetdiscover file {os.fspath(text)!r}: {err.strerror or err}") from None
        arrays = fabric_arrays(text, gpus=gpus, nvlink=nvlink, domain_of=domain_of, efficiency=efficiency,
                               gpu_link_Bps=gpu_link_Bps, switch_latency_s=switch_latency_s)
        if arrays.loose:
            ends = "; ".join(map(str, arrays.loose[:5])) + ("; ..." if len(arrays.loose) > 5 else "")
            warnings.warn(f"{len(arrays.loose)} port line(s) that the other end does not list, left out: {ends}",
                          stacklevel=2)
        core = _core.Topology.from_arrays(len(arrays.names), arrays.src, arrays.dst, arrays.capacity_Bps,
                                          arrays.latency_s)
        return Topology(core, arrays.names, n_gpus=arrays.n_gpus)  # a plain topology, whatever cls is

    @property
    def n_gpus(self) -> int | None:
        """Number of GPUs where the topology knows which nodes they are (nodes ``0..n_gpus-1``,
        as :meth:`from_ibnetdiscover` puts them), else None: any node can be a rank."""
        return self._n_gpus

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
        """One row per link: ``link_id``, ``src``, ``dst``, ``src_name``, ``dst_name``, ``kind``,
        ``tier``, ``direction``, ``plane``, ``rail``, ``domain``, ``capacity_Bps`` (in force,
        faults applied), ``latency_s``.

        ``kind`` is "scale_up" (NVLink), "pcie" (a GPU's link to its NIC, a PCIe server's
        links), "scale_out" (the Clos of NICs and switches) or "link" (a plain topology's);
        ``tier`` names the two levels a link joins as its ends' names do ("gpu-nvswitch",
        "gpu-nic", "nic-leaf", "leaf-spine", "spine-core"; "host-leaf" in a Clos of hosts);
        ``direction`` is "up" (towards the core) or "down"; ``plane`` is the NVSwitch plane or
        scale-out plane, ``rail`` the rail of a NIC's links (its GPU's index in its domain) and
        of a leaf that serves one rail, ``domain`` the NVLink domain of a scale-up link or a
        GPU's link to its NIC: each null where a link has none (every role of a plain
        topology's links). Names are dictionary columns over the node ids
        (:meth:`names_of`). :meth:`links_where` selects by these columns.

        Example::

            f = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            f.links.select(["link_id", "src_name", "dst_name", "kind", "tier", "rail"]).slice(576, 2).to_pylist()
            # gpu0 -> nic0 and back: kind pcie, tier gpu-nic, rail 0
        """
        return _links.links_table(self)

    def links_where(self, *, kind: Any = None, tier: Any = None, direction: Any = None, plane: Any = None,
                    rail: Any = None, domain: Any = None, src: Any = None, dst: Any = None) -> np.ndarray:
        """Ids (ascending, an int64 array) of the links that match every criterion given, each
        one value or a list of them (any of which matches): ``kind``, ``tier``, ``direction``,
        ``plane``, ``rail``, ``domain`` as the :attr:`links` table has them, ``src`` and
        ``dst`` as nodes (ids, a labelled topology's labels, or names such as "p0.leaf3").
        What :meth:`Fabric.fail` and :meth:`Scenario.add_fault` take as ``links=`` (they also
        take the criteria themselves, as a dict). A value no link has is refused, naming the
        values there are.

        Example::

            f = fs.cluster(domain="hgx-h100", n_domains=64, scale_out="quantum-2")
            up = f.links_where(tier="leaf-spine", direction="up", rail=3)   # rail 3's leaves to the spines
            f.names_of(f.links["dst"].take(up[:5]))   # ['spine0', 'spine0', 'spine0', 'spine0', 'spine1']: parallel cables
            broken = f.fail(links=up[:1])   # one leaf-to-spine cable of rail 3 down
        """
        return _links.links_where(self, kind=kind, tier=tier, direction=direction, plane=plane, rail=rail,
                                  domain=domain, src=src, dst=dst)

    def names_of(self, nodes: Any) -> list[str]:
        """Names of node ids (one id or many): a labelled topology's labels as text, a
        generated fabric's readable names, ``node<i>`` for a plain topology's nodes.

        Example::

            fs.hgx_h100().names_of([0, 8])   # ['gpu0', 'd0.nvswitch0']
            t = fs.Topology.from_arrays([0, 1], [1, 2], "1GB/s", node_names=["a", "b", "c"])
            t.names_of(t.links["dst"])   # ['b', 'c']
        """
        return _links.names_of(self, nodes)

    def to_networkx(self) -> Any:
        """The topology as a ``networkx.MultiDiGraph``: one node per node, in id order, keyed
        by its label (a labelled topology), its name (a generated fabric: "gpu0", "p0.leaf3") or
        its id (a plain topology), with attribute ``node_id`` (and ``kind`` on a generated
        fabric); one edge per link, keyed by its link id, with the columns of :attr:`links`
        (``capacity_Bps`` in force, ``latency_s``, ``link_id``, ``kind``, ``tier``, ...) as
        attributes, nulls left out. :meth:`from_networkx` builds the same topology back, link ids
        included. About 1 KB of memory per link: refused up front where it would not fit.

        Example::

            g = fs.hgx_h100().to_networkx()
            g.number_of_edges(), g.nodes["gpu0"]["kind"]   # (288, 'gpu')
            t = fs.Topology.from_networkx(g)               # the same links, ids and all
        """
        return _links.to_networkx(self)

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
                                      cols["latency_s"], self._labels, self._n_gpus))

    def __repr__(self) -> str:
        return f"Topology(n_nodes={self.n_nodes}, n_links={self.n_links})"


def _unpickled_topology(n_nodes: int, src: np.ndarray, dst: np.ndarray, capacity_Bps: np.ndarray,
                        latency_s: np.ndarray, labels: list[Hashable] | None, n_gpus: int | None = None) -> Topology:
    """A pickled :class:`Topology`, built again (``Topology.__reduce__``)."""
    def arr(a: np.ndarray, dtype: Any) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=dtype)

    core = _core.Topology.from_arrays(n_nodes, arr(src, np.int64), arr(dst, np.int64), arr(capacity_Bps, np.float64),
                                      arr(latency_s, np.float64))
    return Topology(core, labels, n_gpus)


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


def _selection(links: Mapping[Any, Any]) -> dict[str, Any]:
    """``links`` given as a selection, checked to name only what links_where selects by."""
    unknown = [k for k in links if k not in _links.SELECTORS]
    if unknown:
        raise InvalidArgumentError(
            f"links={shown(dict(links))}: {unknown[0]!r} is not a column links are selected by; they are "
            f"{', '.join(_links.SELECTORS)}")
    return {str(k): v for k, v in links.items()}


def _fault(topo: Topology, links: Any, nodes: Any, planes: Any, factor: Any) -> tuple[list[int], float]:
    """The link ids a fault names and its capacity factor, checked."""
    # A fault takes capacity away or gives it back; more than nominal would be a faster link.
    checked = real(factor)  # None for a bool or anything but a real number
    if checked is None or not 0.0 <= checked <= 1.0:
        raise InvalidArgumentError(
            f"factor must be a number in [0, 1] (0 = down, 1 = full capacity), got {factor!r}"
        )
    # Which links, nodes or planes fail has no order: sets of them are fine. A mapping is a
    # selection by the links table's columns (links_where).
    if isinstance(links, Mapping):
        ids = topo.links_where(**_selection(links)).tolist()
    else:
        ids = integers("links", links, one=True, ordered=False).tolist()
    # One node (an id, or a label, a tuple such as NetworkX's grid labels too) or many.
    # (NumPy reads a set as one value, but a set is never a label: labels are hashable.)
    one = isinstance(nodes, Hashable) and (one_value(nodes) or _links.is_label(topo, nodes))
    node_list = topo._nodes("nodes", [nodes] if one else nodes, ordered=False).tolist()
    if node_list:
        ids += topo._core.links_of_nodes(node_list)
    for p in integers("planes", planes, one=True, ordered=False).tolist():
        ids += topo._core.links_of_plane(p)
    if not ids:
        raise InvalidArgumentError("name at least one link, node or plane to fail")
    return sorted(set(ids)), checked
