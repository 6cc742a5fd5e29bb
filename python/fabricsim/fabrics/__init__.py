"""Fabrics: what the network is made of.

Modules, each importing only the ones before it:

* :mod:`~fabricsim.fabrics.part` and :mod:`~fabricsim.fabrics.catalog`: the hardware catalog,
  every part's figures with their sources (``data/catalog.json``);
* :mod:`~fabricsim.fabrics.specs`: catalog parts as the Rust generators' parameters;
* :mod:`~fabricsim.fabrics.links`: a topology's links by what they are (the links table,
  selection by its columns, NetworkX out) and its nodes by name;
* :mod:`~fabricsim.fabrics.topology`: :class:`Topology`, a graph of links, and faults on it;
* :mod:`~fabricsim.fabrics.budget` and :mod:`~fabricsim.fabrics.describe`: a fabric's parts
  counted, their power and price, and the report :meth:`Fabric.describe` prints;
* :mod:`~fabricsim.fabrics.fabric`: :class:`Fabric`, a topology built from catalog parts;
* :mod:`~fabricsim.fabrics.power`: power and cost across fabrics, plans of fabrics too large
  to build, the co-packaged optics claim;
* :mod:`~fabricsim.fabrics.generators`: HGX boards, NVL72 racks, Clos fabrics, clusters,
  PCIe servers.
"""

from .fabric import Fabric
from .generators import clos, cluster, hgx_b200, hgx_h100, nvl72, nvlink_domain, pcie_server
from .topology import Topology

__all__ = ["Topology", "Fabric", "hgx_h100", "hgx_b200", "nvl72", "nvlink_domain", "clos", "cluster", "pcie_server"]
