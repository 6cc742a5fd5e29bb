"""Fabrics: topologies built by a structured generator, which route by their structure and
remember the catalog parts they were built from (for :meth:`Fabric.describe`, power and
rebuilding with other payload efficiencies)."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from .. import _core
from .._checks import integer, integers, one_value, shown
from ..exceptions import InvalidArgumentError, UnknownNodeError
from .describe import Description, describe
from .links import name_array
from .specs import _efficiency
from .topology import Topology, _fault

__all__ = ["Fabric"]


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
        f, f.gpus[:4], f.structure["n_nics"]   # (Fabric(n_gpus=16, n_nodes=41, n_links=640), array([0, 1, 2, 3]), 16)
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
        ``fabric.node_names[i]``, a slice (``[:3]``) or an array of ids gives a list of them;
        ``fabric.names_of(ids)`` does the same, and the result tables carry them beside the ids.

        Example::

            f = fs.hgx_h100()
            f.node_names[8], f.node_names[:2], f.node_names[[0, 8]]
            # ('d0.nvswitch0', ['gpu0', 'gpu1'], ['gpu0', 'd0.nvswitch0'])
        """
        return _NodeNames(self)

    def _node(self, name: str, node: Any) -> int:
        if isinstance(node, str):
            raise UnknownNodeError(
                f"nodes of a generated fabric are ids (GPU i is node i; see .gpus, .nics), got {name}={node!r}"
            )
        return super()._node(name, node)

    def fail(self, *, links: Any = (), nodes: Any = (), planes: Any = (), factor: float = 0.0) -> "Fabric":
        """A copy with links, every link of some nodes (switches, NICs, GPUs) or whole
        scale-out planes down (``factor=0``) or degraded (capacity times ``factor``, in
        [0, 1]; 1 leaves them at full capacity). ``links`` are link ids, or a selection by the
        :attr:`links` table's columns as :meth:`links_where` takes it (``{"tier":
        "leaf-spine", "rail": 3}``). The fault is kept through :meth:`with_payload_efficiency`.

        Example::

            f = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            degraded = f.fail(links=f.route(0, 8)[:1], factor=0.5)   # the first link of that path at half rate
            sc = fs.Scenario(degraded)
            sc.add_flow(0, 8, "1GiB")
            sc.run().summary.makespan_s
            no_rail_3 = f.fail(links={"tier": "nic-leaf", "rail": 3})   # every NIC of rail 3 cut off its leaf
        """
        ids, factor = _fault(self, links, nodes, planes, factor)
        core = self._core.with_link_factors(ids, factor)
        # Kept, in order, so that with_payload_efficiency can re-apply them to a rebuilt core;
        # an array holds a whole plane's link ids in 8 bytes each, a list in about 36.
        recorded = np.asarray(ids, dtype=np.int64)
        recorded.flags.writeable = False
        return self._same_nodes(Fabric(core, dict(self._parts, faults=(*self._parts.get("faults", ()), (recorded, factor)))))

    def _same_nodes(self, other: "Fabric") -> "Fabric":
        """``other``, a rebuild of this fabric with its nodes as they are, given the node names
        already made (a million-GPU fabric's take a few tenths of a second)."""
        other._name_array = self._name_array
        return other

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

            f = fs.hgx_h100().with_payload_efficiency(nvlink=0.9)   # where 90% of NVLink's rate carries data
            print(f.describe())   # ...scale-up per GPU, payload (x efficiency)  405 GB/s...
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
        return self._same_nodes(Fabric(core, new))

    def describe(self) -> Description:
        """Counts, bandwidths (line rates and payload), power and SHARP of the fabric, printed as a report (``print(fabric.describe())``).

        Example::

            print(fs.hgx_h100().describe())   # counts, bandwidth, power and cost of the parts
        """
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
    """A read-only sequence of a fabric's node names, made when asked for: one by an index
    (negative from the end), a list by a slice or by a sequence or array of ids."""

    __slots__ = ("_fabric",)

    def __init__(self, fabric: Fabric) -> None:
        self._fabric = fabric

    def __len__(self) -> int:
        return self._fabric.n_nodes

    def __getitem__(self, i: Any) -> Any:
        n = len(self)
        if isinstance(i, slice):
            return self._fabric.names_of(np.arange(n, dtype=np.int64)[i])
        if one_value(i):
            k = integer("node", i)
            if not -n <= k < n:
                raise IndexError(f"node {k} is out of range: nodes are 0..{n - 1} (or -{n}..-1 from the end)")
            return self._fabric.names_of(k % n)[0]
        ids = integers("nodes", i)
        return self._fabric.names_of(np.where(ids < 0, ids + n, ids))

    def __reduce__(self) -> tuple[Any, ...]:
        # A result keeps its fabric's names to print its summary; the core does not pickle,
        # so a pickled result carries the names themselves.
        return (list, (list(self),))

    def __iter__(self) -> Iterator[str]:
        # Without it, iteration indexes until IndexError: one call into the core per node.
        names = name_array(self._fabric)
        for lo in range(0, len(self), 65536):
            yield from names.slice(lo, 65536).to_pylist()
