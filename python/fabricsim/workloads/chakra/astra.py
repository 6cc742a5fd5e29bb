"""The ASTRA-sim analytical network equivalent to a generated fabric (:func:`astra_sim_network`),
to run the traces :func:`~fabricsim.chakra.write` wrote side by side with fabricsim."""

from __future__ import annotations

from ...collectives.communicator import fabric_view
from ...exceptions import InvalidArgumentError
from ...fabrics import Fabric, Topology

__all__ = ["astra_sim_network", "ASTRA_GB"]

#: Bytes in the "GB" of ASTRA-sim's analytical backend's bandwidths (GB/s): 2**30
#: (astra-network-analytical, common/NetworkFunction.cc, bw_GBps_to_Bpns: "1 GB is 2^30 B").
ASTRA_GB = float(2**30)


def astra_sim_network(fabric: Topology) -> str:
    """ASTRA-sim's analytical network configuration (YAML) for a generated fabric: one
    ``Switch`` dimension per tier, NPU i of the traces being GPU i, each dimension's bandwidth
    the per-GPU payload rate fabricsim gives that tier (NVLink: the GPU's links x payload
    efficiency; scale-out: its NIC's, or the host link where that is slower) in ASTRA-sim's GB/s
    (2**30 bytes per second), and its latency half the fabric's path latency between two
    GPUs of the tier (a ``Switch`` dimension counts two links, NPU to switch to NPU), in ns.

    A cluster's two dimensions are its NVLink domains and, across them, GPUs of the same index
    on one switch: the rails of fabricsim's rail-optimised Clos. ASTRA-sim's ``Switch`` is one
    non-blocking switch: an oversubscribed or multi-tier Clos is not, and it has no ECMP
    collisions, which is what fabricsim adds (docs/interop.md).

    Example::

        print(fs.chakra.astra_sim_network(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")))
        # topology: [ Switch, Switch ]
        # npus_count: [ 8, 4 ]
        # bandwidth: [ 345.334, 46.250 ]  # GB/s (2^30 bytes/s) per NPU
        # latency: [ 300.0, 75.0 ]  # ns per link
    """
    if not isinstance(fabric, Fabric):
        raise InvalidArgumentError(
            f"astra_sim_network needs a generated fabric (fs.hgx_h100(), fs.nvl72(), fs.cluster(...), fs.clos(...)), "
            f"got {type(fabric).__name__}: write the network of another topology for ASTRA-sim by hand")
    st = fabric.structure
    view = fabric_view(fabric)
    dims: list[tuple[int, float, float]] = []  # (npus, bytes/s, latency s per link)
    core = fabric._core
    if "domain" in st:
        gpd = view.gpus_per_domain
        n_domains = fabric.n_gpus // gpd
        if n_domains > 1 and "scale_out" not in st:
            raise InvalidArgumentError(f"this fabric has {n_domains} NVLink domains and no network between them: "
                                       "ASTRA-sim cannot run one workload across them")
        dims.append((gpd, view.nvlink_Bps, core.path_latency_s(0, 1) / 2 if gpd > 1 else 0.0))
        if "scale_out" in st and n_domains > 1:
            dims.append((n_domains, view.net_Bps, core.path_latency_s(0, gpd) / 2))
    else:
        if "scale_out" not in st:
            raise InvalidArgumentError("a PCIe server has no ASTRA-sim network equivalent here: write one by hand")
        n = int(view.n_rank_nodes or 0)
        dims.append((n, view.net_Bps, core.path_latency_s(0, 1) / 2 if n > 1 else 0.0))

    def row(values: list[str]) -> str:
        return "[ " + ", ".join(values) + " ]"

    return "\n".join([
        f"topology: {row(['Switch'] * len(dims))}",
        f"npus_count: {row([str(n) for n, _, _ in dims])}",
        f"bandwidth: {row([f'{b / ASTRA_GB:.3f}' for _, b, _ in dims])}  # GB/s (2^30 bytes/s) per NPU",
        f"latency: {row([f'{lat * 1e9:.1f}' for _, _, lat in dims])}  # ns per link",
    ]) + "\n"
