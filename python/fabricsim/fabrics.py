"""Topologies: nodes and directed links with capacities (bytes/s) and latencies (s).

Build one from plain link arrays (:meth:`Topology.from_arrays`) or from a NetworkX graph
(:meth:`Topology.from_networkx`). Nodes are numbered ``0..n_nodes-1``; a topology may also
carry node labels, which are then accepted wherever a node is expected.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Sequence

import numpy as np
import pyarrow as pa

from . import _core
from .exceptions import InvalidArgumentError, UnknownNodeError
from .units import bandwidth_Bps, duration_s

__all__ = ["Topology"]


def _int_array(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InvalidArgumentError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        as_int = arr.astype(np.int64, casting="unsafe") if np.issubdtype(arr.dtype, np.number) else None
        if as_int is None or not np.array_equal(as_int, arr):
            raise InvalidArgumentError(f"{name} must hold integer node ids, got dtype {arr.dtype}")
        arr = as_int
    return np.ascontiguousarray(arr, dtype=np.int64)


def _float_array(name: str, values: Any, n: int, parse) -> np.ndarray:
    """A float64 array of length n from an array, a number or a unit string (broadcast)."""
    if isinstance(values, str) or np.isscalar(values):
        return np.full(n, parse(values), dtype=np.float64)
    seq = list(values) if not isinstance(values, np.ndarray) else values
    if isinstance(seq, list) and any(isinstance(v, str) for v in seq):
        seq = [parse(v) for v in seq]
    arr = np.asarray(seq, dtype=np.float64)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise InvalidArgumentError(f"{name} must be a 1-D array of {n} values, got shape {arr.shape}")
    return np.ascontiguousarray(arr)


class Topology:
    """A directed graph of links. Immutable; cheap to share between scenarios."""

    __slots__ = ("_core", "_labels", "_label_index")

    def __init__(self, core: _core.Topology, labels: Sequence[Hashable] | None = None) -> None:
        self._core = core
        self._labels = list(labels) if labels is not None else None
        self._label_index = None
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
        """
        src_a, dst_a = _int_array("src", src), _int_array("dst", dst)
        if src_a.shape != dst_a.shape:
            raise InvalidArgumentError(
                f"src and dst must have one length, got {src_a.shape[0]} and {dst_a.shape[0]}"
            )
        n = src_a.shape[0]
        cap = _float_array("capacity_Bps", capacity_Bps, n, bandwidth_Bps)
        lat = _float_array("latency_s", latency_s, n, duration_s)
        if n_nodes is None:
            if node_names is not None:
                n_nodes = len(node_names)
            else:
                n_nodes = int(max(src_a.max(initial=-1), dst_a.max(initial=-1))) + 1
        return cls(_core.Topology.from_arrays(int(n_nodes), src_a, dst_a, cap, lat), node_names)

    @classmethod
    def from_networkx(
        cls, graph: Any, *, capacity: str = "capacity_Bps", latency: str = "latency_s"
    ) -> "Topology":
        """Links from a NetworkX graph's edges and their ``capacity`` / ``latency`` attributes.

        A directed edge becomes one link; an undirected edge becomes two (u->v, then v->u).
        Parallel edges of a multigraph become parallel links. Nodes are numbered in
        ``graph.nodes`` order and keep their labels. A missing latency is 0.
        """
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
            c = bandwidth_Bps(data[capacity])
            lat = duration_s(data.get(latency, 0.0))
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
        return self._core.n_nodes

    @property
    def n_links(self) -> int:
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
        """The id of a node given by label (if the topology has labels) or by id."""
        if self._label_index is not None:
            try:
                return self._label_index[node]
            except (KeyError, TypeError):
                raise UnknownNodeError(f"no node labelled {node!r} in this topology") from None
        if isinstance(node, (bool, np.bool_)) or not isinstance(node, (int, np.integer)):
            raise UnknownNodeError(f"node must be an integer id, got {node!r}")
        return int(node)

    def node_ids(self, nodes: Any) -> np.ndarray:
        """Vectorised :meth:`node_id` for arrays of nodes."""
        if self._label_index is None:
            return _int_array("nodes", nodes)
        return np.fromiter((self.node_id(n) for n in nodes), dtype=np.int64)

    def route(self, src: Any, dst: Any, *, key: int = 0, seed: int = 0) -> list[int]:
        """Link ids of the ECMP path a flow with ``key`` takes under ``seed``."""
        return self._core.route(self.node_id(src), self.node_id(dst), key, seed)

    def __repr__(self) -> str:
        return f"Topology(n_nodes={self.n_nodes}, n_links={self.n_links})"
