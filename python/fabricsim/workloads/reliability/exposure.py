"""The parts of a fabric a job sees fail (:func:`part_counts`): GPUs, hosts, NICs, switches by
tier, cables and optics, each by location, in the share of the fabric the job runs on; and the
failures expected of them over a horizon (:func:`expected_failures`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..._checks import COUNT, integer, positive, shown
from ...fabrics import Fabric
from ...exceptions import InvalidArgumentError
from .rates import _HOUR_S, _rates_of

__all__ = ["part_counts", "expected_failures"]


@dataclass(frozen=True)
class _Stream:
    part: str
    location: str
    units: float
    links_down: float  # links one failure takes down
    capacity_lost: float  # f: fraction of the bottleneck's capacity one failure removes


def _streams(fabric: Any, gpus: int | None, gpus_per_host: int | None) -> list[_Stream]:
    if not isinstance(fabric, Fabric):
        raise InvalidArgumentError(
            f"fabric must be a generated fabricsim.Fabric (fs.cluster(...), fs.hgx_h100(), ...), whose parts "
            f"fail, got {type(fabric).__name__} {shown(fabric)[:80]}")
    s = fabric.structure
    parts = fabric._parts
    n_gpus = int(s["n_gpus"])
    dom, out = s.get("domain"), s.get("scale_out")
    if gpus_per_host is None:
        if dom is not None:
            # An HGX board is one host; an NVL72 rack has 18 compute trays of 4 GPUs (docs/sources.md 1.4).
            gpus_per_host = dom["n_endpoints"] if dom["n_endpoints"] <= 8 else 4
        else:
            gpus_per_host = max(n_gpus, 1)
    gph = integer("gpus_per_host", gpus_per_host, COUNT)
    n_hosts = math.ceil(n_gpus / gph) if n_gpus else int(s["n_nics"])
    q = 1.0
    if gpus is not None and n_gpus:
        if not 1 <= integer("gpus", gpus) <= n_gpus:
            raise InvalidArgumentError(f"the job's GPUs must be between 1 and the fabric's {n_gpus:,}, got {gpus!r}")
        q = gpus / n_gpus
    st = [
        _Stream("gpu", "", n_gpus * q, 0, 1.0),
        _Stream("host", "", n_hosts * q, 0, 1.0),
        _Stream("host_maintenance", "", n_hosts * q, 0, 1.0),
        _Stream("software", "", n_gpus * q, 0, 1.0),
        _Stream("unknown", "", n_gpus * q, 0, 1.0),
    ]
    if not s["n_nics"]:
        return st
    if out is None:  # a PCIe server: its NICs, nothing behind them
        st.append(_Stream("nic", "host", s["n_nics"] * q, 1, 1.0))
        return st
    P = int(out["planes"])
    rails = int(out["rails"]) if dom is not None else 1
    host_links = rails * P  # a domain's (or a bare host's) links into the scale-out network
    nic, sw = parts["nic"], parts["switch"]
    lanes_per_port = float(sw["port_Bps"]) / float(parts["plane_Bps"])
    nl, ns, nc = out["n_leaves"], out["n_spines"], out["n_cores"]
    leaf_up, spine_up = out["leaf_up"], out["spine_up"]

    def frac(links: float, of: float) -> float:
        return 1.0 if of <= 0 else min(1.0, links / of)

    st.append(_Stream("nic", "host", s["n_nics"] * q, P, frac(P, host_links)))
    # A switch takes all its cables down: its down links and its up links.
    st.append(_Stream("switch", "leaf", P * nl * q, out["endpoints_per_leaf"] + leaf_up,
                      frac(out["rails_per_leaf"], host_links)))
    if ns:
        st.append(_Stream("switch", "spine", P * ns * q, nl * leaf_up / ns + spine_up,
                          frac(out["leaf_spine_width"], leaf_up)))
    if nc:
        st.append(_Stream("switch", "core", P * nc * q, ns * spine_up / nc,
                          frac(out["spine_core_width"], spine_up)))
    tiers = [("host", P * out["n_endpoints"], host_links), ("leaf-spine", P * nl * leaf_up, leaf_up),
             ("spine-core", P * ns * spine_up, spine_up)]
    for loc, n_links, bottleneck in tiers:
        if n_links:
            st.append(_Stream("link", loc, n_links * q, 1, frac(1, bottleneck)))
    # Optics as Fabric.describe() counts them: a transceiver per NIC cage, and on pluggable
    # switches one per cage of native ports in use; a co-packaged switch has a port instead.
    nic_cages = math.ceil(P / nic["ports_per_cage"])
    per_nic_cage = min(P, nic["ports_per_cage"])
    st.append(_Stream("optics", "nic", s["n_nics"] * nic_cages * q, per_nic_cage, frac(per_nic_cage, host_links)))
    for loc, n_links, bottleneck in tiers:
        if not n_links:
            continue
        ends = 1 if loc == "host" else 2  # a switch-to-switch cable has a switch port at each end
        ports = ends * n_links / lanes_per_port
        if sw["optics"] == "pluggable":
            per = sw["ports_per_cage"] * lanes_per_port
            st.append(_Stream("optics", loc, ports / sw["ports_per_cage"] * q, per, frac(per, bottleneck)))
        else:
            st.append(_Stream("cpo_port", loc, ports * q, lanes_per_port, frac(lanes_per_port, bottleneck)))
    return st


def _job_gpus(step: Any) -> int | None:
    inner = getattr(step, "step", step)
    par = getattr(inner, "par", None)
    return int(par.n_gpus) if par is not None else None


def part_counts(fabric: Any, *, gpus: int | None = None, gpus_per_host: int | None = None) -> pa.Table:
    """The parts of ``fabric`` a job on ``gpus`` of its GPUs (default all) depends on:
    ``part, location, units, links_down`` (links one failure takes down) and
    ``capacity_lost`` (the fraction f of the bottleneck's capacity it removes; 1 for parts
    whose failure stops the job). A job on a fraction q of the GPUs is taken to depend on q
    of every tier's parts [assumption]: exact for its GPUs, hosts, NICs and leaves where it
    is packed, low for the spines and cores of a job that spans many leaves and spreads its
    traffic over all of them (their failures cost it bandwidth, not a restart, by default).

    Example::

        from fabricsim import reliability
        t = reliability.part_counts(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"))
        t.column("part").to_pylist()[:3]   # ['gpu', 'host', 'host_maintenance']
    """
    st = _streams(fabric, gpus, gpus_per_host)
    return pa.table({
        "part": pa.array([x.part for x in st], pa.string()),
        "location": pa.array([x.location for x in st], pa.string()),
        "units": pa.array([float(x.units) for x in st], pa.float64()),
        "links_down": pa.array([float(x.links_down) for x in st], pa.float64()),
        "capacity_lost": pa.array([float(x.capacity_lost) for x in st], pa.float64()),
    })


def expected_failures(
    fabric: Any, *, horizon_s: float, rates: Any = None, gpus: int | None = None, gpus_per_host: int | None = None,
) -> pa.Table:
    """The closed form: expected failures of each part over ``horizon_s`` = rate x units x
    hours. Columns ``part, location, units, rate_per_hour, expected``.

    Example::

        from fabricsim import reliability
        f = fs.cluster(domain="hgx-h100", n_domains=2048, scale_out="quantum-2")
        t = reliability.expected_failures(f, horizon_s=54 * 86400)
        round(sum(t.column("expected").to_pylist()))   # 419, as Table 5
    """
    h = positive("horizon_s", horizon_s, "seconds") / _HOUR_S
    r = _rates_of(rates)
    st = _streams(fabric, gpus, gpus_per_host)
    rate = [r.rate_per_hour(x.part) for x in st]
    return pa.table({
        "part": pa.array([x.part for x in st], pa.string()),
        "location": pa.array([x.location for x in st], pa.string()),
        "units": pa.array([float(x.units) for x in st], pa.float64()),
        "rate_per_hour": pa.array(rate, pa.float64()),
        "expected": pa.array([k * x.units * h for k, x in zip(rate, st)], pa.float64()),
    })
