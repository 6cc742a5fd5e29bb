"""A topology's links by what they are, and its nodes by name.

:func:`links_table` is :attr:`Topology.links`: one row per link with its ends' ids and names,
its kind, tier, direction, plane, rail and NVLink domain (read off a generated fabric's
structure by the core, ``src/topology/roles.rs``), its capacity and latency.
:func:`links_where` selects link ids by those columns, for :meth:`Topology.fail`,
:meth:`Scenario.add_fault` and the result tables. :func:`name_array` is every node's name as
one Arrow array, which :func:`with_names` puts beside a table's node ids as dictionary columns
whose indices are the ids themselves: no copy of the ids, no Python work per row.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._checks import did_you_mean, integer, integers, one_value, room_for, shown
from .._columns import table_from_columns
from ..exceptions import InvalidArgumentError, UnknownNodeError

if TYPE_CHECKING:
    from .topology import Topology

__all__ = ["links_table", "links_where", "name_array", "names_of", "with_names", "compact_names", "to_networkx",
           "LINK_COLUMNS",
           "SELECTORS"]

#: The columns of a links table, in order.
LINK_COLUMNS = ("link_id", "src", "dst", "src_name", "dst_name", "kind", "tier", "direction", "plane", "rail",
                "domain", "capacity_Bps", "latency_s")

#: What :func:`links_where` selects by: the role columns by value, the ends by node.
SELECTORS = ("kind", "tier", "direction", "plane", "rail", "domain", "src", "dst")


def name_array(topo: Topology) -> pa.Array:
    """Every node's name, node ``i`` at position ``i`` (a string array, made once per
    topology): a labelled topology's labels as text, a generated fabric's readable names
    (``gpu3``, ``d0.nvswitch2``, ``p1.leaf7``), ``node<i>`` for the nodes of a plain one."""
    cached = topo._name_array
    if cached is None:
        if topo._labels is not None:
            cached = pa.array([str(label) for label in topo._labels], pa.string())
        else:
            offsets, data = topo._core.node_name_buffers()
            cached = pa.StringArray.from_buffers(
                topo.n_nodes, pa.py_buffer(offsets), pa.py_buffer(data))
        topo._name_array = cached
    return cached


def names_of(topo: Topology, nodes: Any) -> list[str]:
    """The names (:func:`name_array`) of node ids, one id or many."""
    ids = integers("nodes", nodes, one=True)
    topo._known("nodes", ids)
    names: list[str] = name_array(topo).take(pa.array(ids)).to_pylist()
    return names


def with_names(table: pa.Table, names: pa.Array, columns: tuple[str, ...] = ("src", "dst")) -> pa.Table:
    """``table`` with ``<column>_name`` beside each node-id column it has: a dictionary column
    whose indices are that column's own buffers and whose dictionary is ``names`` (null where
    the id is: a collective's flow has no one end)."""
    present = [c for c in columns if c in table.column_names]
    if not present:
        return table
    kind = pa.dictionary(pa.int64(), names.type)
    where = max(table.column_names.index(c) for c in present) + 1
    for offset, column in enumerate(present):
        ids = table.column(column)
        chunks = [pa.DictionaryArray.from_arrays(chunk, names) for chunk in ids.chunks]
        table = table.add_column(where + offset, f"{column}_name", pa.chunked_array(chunks, kind))
    return table


def compact_names(table: pa.Table) -> pa.Table:
    """``table`` with each name column's dictionary cut to the names its rows use (what a
    file keeps: a few rows of a million-GPU fabric's run should not carry every node's
    name), its types unchanged."""
    for i, field in enumerate(table.schema):
        if not (field.name.endswith("_name") and pa.types.is_dictionary(field.type)):
            continue
        column = table.column(i)
        indices = pa.chunked_array([c.indices for c in column.chunks], field.type.index_type)
        used = pc.unique(indices.drop_null()).sort()
        dictionary = column.chunks[0].dictionary if column.num_chunks else pa.array([], field.type.value_type)
        chunks = [pa.DictionaryArray.from_arrays(pc.index_in(c.indices, value_set=used).cast(field.type.index_type),
                                                 dictionary.take(used)) for c in column.chunks]
        table = table.set_column(i, field, pa.chunked_array(chunks, field.type))
    return table


def links_table(topo: Topology) -> pa.Table:
    """One row per link (see :data:`LINK_COLUMNS`); capacities are those in force, faults
    applied. Kind, tier and direction are dictionary columns; plane, rail and domain are null
    where a link has none (every link of a plain topology, whose kind is "link")."""
    _room_for(topo, "a links table", _ROLE_BYTES + _COLUMN_BYTES + 16.0)  # and the null masks, names' indices
    columns = dict(topo._core.link_columns())
    roles = topo._core.link_roles()
    table = table_from_columns([
        ("link_id", columns["link_id"]), ("src", columns["src"]), ("dst", columns["dst"]), *roles,
        ("capacity_Bps", columns["capacity_Bps"]), ("latency_s", columns["latency_s"]),
    ])
    return with_names(table, name_array(topo))


def links_where(topo: Topology, *, kind: Any = None, tier: Any = None, direction: Any = None, plane: Any = None,
                rail: Any = None, domain: Any = None, src: Any = None, dst: Any = None) -> np.ndarray:
    """Ids (ascending) of the links that match every criterion given; see
    :meth:`Topology.links_where`."""
    _room_for(topo, "a selection of links", _ROLE_BYTES + 2.0)  # the roles, a mask and a match
    roles: dict[str, Any] = dict(topo._core.link_roles())
    mask = np.ones(topo.n_links, dtype=bool)
    for name, wanted in (("kind", kind), ("tier", tier), ("direction", direction)):
        if wanted is None:
            continue
        indices, values = roles[name]
        codes = []
        for i, value in enumerate(_values(name, wanted, str)):
            code = values.index(value) if value in values else -1
            if code < 0 or not (indices == code).any():
                # Which values occur, told only where one asked for does not.
                named = [v for k, v in enumerate(values) if (indices == k).any()]
                where = name if one_value(wanted) else f"{name}[{i}]"
                raise InvalidArgumentError(
                    f"{where}: no link of this topology has {name} {value!r}; its links' {name}s are "
                    f"{', '.join(repr(h) for h in sorted(named)) or 'none'}{did_you_mean(value, named)}")
            codes.append(code)
        mask &= _any_of(indices, codes)
    for name, wanted in (("plane", plane), ("rail", rail), ("domain", domain)):
        if wanted is None:
            continue
        column: np.ndarray = roles[name]
        numbers = _values(name, wanted, int)
        matches = [column == v for v in numbers]
        missing = [v for v, m in zip(numbers, matches) if not m.any()]
        if missing:
            have = np.unique(column[column >= 0])  # told only where a value asked for is missing
            known = (f"from {have[0]} to {have[-1]}" if have.size and have.size == have[-1] - have[0] + 1
                     else ", ".join(map(str, have)) or "none")
            raise InvalidArgumentError(
                f"{name}={shown(missing[0])}: no link of this topology has {name} {missing[0]}; its links' "
                f"{name}s are {known}")
        for m in matches[1:]:
            matches[0] |= m
        mask &= matches[0]
    if src is not None or dst is not None:
        columns: dict[str, Any] = dict(topo._core.link_columns())
        for name, nodes in (("src", src), ("dst", dst)):
            if nodes is not None:
                mask &= np.isin(columns[name], _node_ids(topo, name, nodes))
    return np.flatnonzero(mask).astype(np.int64)


def _any_of(column: np.ndarray, values: list[int]) -> np.ndarray:
    """Where ``column`` holds one of a few ``values`` (a comparison each: faster than np.isin
    over tens of millions of links)."""
    out: np.ndarray = column == values[0]
    for v in values[1:]:
        out |= column == v
    return out


# Bytes per link of the core's role columns (three int32 codes, three int64 ids) and of its
# link columns (link_id, src, dst, capacity, latency: five 8-byte values).
_ROLE_BYTES, _COLUMN_BYTES = 36.0, 40.0


def _room_for(topo: Topology, what: str, bytes_per_link: float) -> None:
    """Refuses, before anything is made, ``what`` that would not fit in memory (46 M links of
    a million-GPU fabric take some 4 GB as a table)."""
    room_for(f"{what} of {topo.n_links:,} links", topo.n_links, bytes_per_link)


def _values(name: str, wanted: Any, kind: type) -> list[Any]:
    """One value or a collection of them (any order), each of ``kind`` (str or int)."""
    items = [wanted] if one_value(wanted) else list(wanted) if isinstance(wanted, Iterable) else [wanted]
    if isinstance(wanted, Mapping) or not items:
        raise InvalidArgumentError(f"{name} must be one value or a list of them, got {shown(wanted)}")
    if kind is int:
        return [integer(f"{name}" if len(items) == 1 else f"{name}[{i}]", v) for i, v in enumerate(items)]
    for i, v in enumerate(items):
        if not isinstance(v, str):
            raise InvalidArgumentError(
                f"{name if len(items) == 1 else f'{name}[{i}]'} must be a string, got {type(v).__name__} {shown(v)}")
    return items


def _node_ids(topo: Topology, name: str, nodes: Any) -> np.ndarray:
    """Node ids from ids, a labelled topology's labels, or node names (``"p0.leaf3"``): one
    node or many."""
    one = isinstance(nodes, Hashable) and (one_value(nodes) or is_label(topo, nodes))
    items = [nodes] if one else list(nodes)
    if topo._label_index is not None:
        return topo._nodes(name, items, ordered=False)
    if items and all(isinstance(n, str) for n in items):
        found = pc.index_in(pa.array(items, pa.string()), value_set=name_array(topo))
        if found.null_count:
            missing = items[found.is_null().to_pylist().index(True)]
            raise UnknownNodeError(f"{name}: no node named {missing!r} in this topology")
        ids: np.ndarray = found.to_numpy().astype(np.int64)
        return ids
    return topo._known(name, integers(name, items, ordered=False))


def is_label(topo: Topology, x: Any) -> bool:
    """Whether ``x`` is one of ``topo``'s node labels."""
    try:
        return topo._label_index is not None and x in topo._label_index
    except TypeError:  # a tuple holding something unhashable
        return False


def to_networkx(topo: Topology) -> Any:
    """``topo`` as a ``networkx.MultiDiGraph``; see :meth:`Topology.to_networkx`."""
    try:
        import networkx as nx
    except ImportError:
        raise InvalidArgumentError("to_networkx needs NetworkX: pip install networkx") from None
    # Measured: about 0.9 KB per edge with its attributes, 0.4 KB per node (NetworkX 3).
    room_for(f"a NetworkX graph of {topo.n_links} links", 1000.0 * topo.n_links + 500.0 * topo.n_nodes, 1.0)
    kinds = topo._core.node_kinds()
    kind_names = topo._core.structure()["kind_names"]
    generated = topo._labels is None and bool(kinds.any())
    if topo._labels is not None:
        keys: list[Any] = list(topo._labels)
    elif generated:
        keys = name_array(topo).to_pylist()
    else:
        keys = list(range(topo.n_nodes))
    g = nx.MultiDiGraph()
    for i, key in enumerate(keys):
        g.add_node(key, node_id=i, **({"kind": kind_names[kinds[i]]} if generated else {}))
    table = links_table(topo)
    attrs = ["link_id", "capacity_Bps", "latency_s", "kind", "tier", "direction", "plane", "rail", "domain"]
    columns = [table.column(c).to_pylist() for c in attrs]
    src, dst = table.column("src").to_numpy(), table.column("dst").to_numpy()
    g.add_edges_from(
        (keys[a], keys[b], row[0], {k: v for k, v in zip(attrs, row) if v is not None})
        for a, b, row in zip(src, dst, zip(*columns)))
    return g


def link_order(graph: Any) -> np.ndarray | None:
    """The order that puts a directed graph's edges (in ``graph.edges`` order) at the link ids
    their ``link_id`` attributes give, where every edge has one and they number the edges 0,
    1, ...; else None (links in edge order)."""
    ids = [data.get("link_id") for _, _, data in graph.edges(data=True)]
    if not ids or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids):
        return None
    order = np.argsort(np.asarray(ids, dtype=np.int64), kind="stable")
    if not np.array_equal(np.asarray(ids)[order], np.arange(len(ids))):
        return None
    return order
