"""The structured generators: NVLink domains (HGX boards, NVL72 racks), scale-out Clos
fabrics, clusters of both, PCIe servers, and the plain leaf-spine of the demo. Each takes its
figures from the hardware catalog (:mod:`fabricsim.catalog`) and hands plain numbers to the
Rust generators, which wire and number everything."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import _core
from .._checks import COUNT, U32, integer, parsed
from ..exceptions import InvalidArgumentError
from ..units import bandwidth_Bps, duration_s
from .fabric import Fabric, _build_core
from .specs import _cluster_parts, _nvlink_spec, _part, _scale_out_spec, _sharp_flag, _sharp_switch
from .topology import Topology

__all__ = ["hgx_h100", "hgx_b200", "nvl72", "nvlink_domain", "clos", "cluster", "pcie_server"]


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

        f = fs.clos(n_hosts=32, switch="quantum-2", nic="cx7")   # one 64-port switch, 32 hosts
        f, len(f.route(0, 31))   # (Fabric(n_gpus=0, n_nodes=33, n_links=64), 2)
    """
    n = integer("n_hosts", n_hosts, COUNT)
    sharp = _sharp_flag(sharp)
    params, parts = _scale_out_spec(n, 1, switch, nic, tiers, planes, oversubscription, routing, efficiency)
    parts = dict(parts, scale_out=params, n_hosts=n, sharp_enabled=_sharp_switch(sharp, parts["switch"], "switch"),
                 faults=())
    return Fabric(_build_core(parts), parts)


def cluster(
    *, domain: Any = "nvl72", n_domains: int, scale_out: Any = None, nic: str | None = None,
    tiers: int | None = None, planes: int | None = None, oversubscription: Any = 1.0,
    routing: str | None = None, nvlink_efficiency: Any = None, efficiency: Any = None,
    sharp: bool = False,
) -> Fabric:
    """``n_domains`` scale-up domains (a preset name such as "nvl72", "hgx-h100", or a dict
    of :func:`nvlink_domain` arguments) joined by a rail-optimised Clos of ``scale_out``
    switches (default: the switch of the NIC's generation, the NIC's catalog ``switch``:
    Quantum-2 for ConnectX-7, Quantum-X800 for ConnectX-8; docs/fabrics.md has the table):
    one NIC per GPU (default: the GPU's catalog NIC), NIC i of every domain on
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

        f = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")   # two HGX boards, 16 GPUs
        sc = fs.Scenario(f)
        sc.add_collective("all_reduce", None, "256MiB")   # across both boards
        sc.run().summary.makespan_s
    """
    parts = _cluster_parts(domain, n_domains, scale_out, nic, tiers, planes, oversubscription, routing,
                           nvlink_efficiency, efficiency, sharp)
    return Fabric(_build_core(parts), parts)


def pcie_server(
    *, n_gpus: int = 8, gpus_per_switch: int = 2, nics_per_switch: int = 1, n_cpus: int = 2,
    pcie: str = "pcie-gen5-x16", nic: str = "cx7", cpu_link_Bps: Any = "64GB/s", latency_s: Any = "1us",
) -> Fabric:
    """GPUs behind PCIe switches (``pcie`` per direction per x16 link, Gen5: 64 GB/s), the
    switches split over ``n_cpus`` sockets joined by a ``cpu_link_Bps`` link: the baseline
    NVLink is compared with. Routes are searched (the graph is a tree).

    Example::

        f = fs.pcie_server()          # two CPU sockets, 8 GPUs, 2 per PCIe Gen5 switch
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


def leaf_spine(
    n_leaves: int, hosts_per_leaf: int, n_spines: int, link_Bps: float, latency_s: float
) -> Topology:
    """The demo's plain leaf-spine (``fabricsim demo``, scenario files' ``leaf_spine``):
    hosts 0..H-1 named ``host0..``, then leaves ``leaf0..``, then spines ``spine0..``; one
    cable (two links) per host-leaf and leaf-spine pair, each of ``link_Bps`` and
    ``latency_s``. Oversubscription is hosts_per_leaf : n_spines."""
    n_hosts = n_leaves * hosts_per_leaf
    leaf0, spine0 = n_hosts, n_hosts + n_leaves
    hosts = np.arange(n_hosts, dtype=np.int64)
    # Cable ends: each host to its leaf, then each leaf to every spine.
    a = np.concatenate([hosts, leaf0 + np.repeat(np.arange(n_leaves, dtype=np.int64), n_spines)])
    b = np.concatenate([leaf0 + hosts // hosts_per_leaf, spine0 + np.tile(np.arange(n_spines, dtype=np.int64), n_leaves)])
    src, dst = np.concatenate([a, b]), np.concatenate([b, a])
    names = (
        [f"host{h}" for h in range(n_hosts)]
        + [f"leaf{i}" for i in range(n_leaves)]
        + [f"spine{i}" for i in range(n_spines)]
    )
    return Topology.from_arrays(src, dst, link_Bps, latency_s, node_names=names)
