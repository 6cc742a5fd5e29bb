"""The power and price of a fabric's parts: every part that draws power counted from the
fabric's structure (never from its links) and multiplied by its catalog figure. It reads a
generated fabric or a :class:`~fabricsim.power.FabricPlan` alike, by their catalog parts;
:mod:`fabricsim.power` gives these and compares fabrics, :meth:`Fabric.describe` reports them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import pyarrow as pa

from ..exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from .fabric import Fabric
    from .power import FabricPlan

__all__ = ["COMPONENTS", "NETWORK", "budget", "totals"]

#: The components of a fabric's power and cost, in table order.
COMPONENTS = ("gpu", "nvswitch", "nic", "nic_optics", "switch", "switch_optics")
#: The components that make up the scale-out network.
NETWORK = ("nic", "nic_optics", "switch", "switch_optics")

# component -> (catalog part key in fabric parts, count unit, typical watts field, maximum watts
# field, usd field). A GPU's and an NVSwitch chip's watts are their TDP, an optic's its
# module's maximum: one figure for both; NICs and switch systems have a typical (the datasheets'
# typical, ATIS traffic, passive cables) and a maximum.
_WHAT = {
    "gpu": ("gpu", "GPUs", "watts", "watts", "usd"),
    "nvswitch": ("nvswitch", "chips", "watts", "watts", "usd"),
    "nic": ("nic", "NICs", "watts", "watts_max", "usd"),
    "nic_optics": ("nic", "transceivers", "optics_watts_per_cage", "optics_watts_per_cage", "optics_usd_per_cage"),
    "switch": ("switch", "switches", "system_watts", "system_watts_max", "system_usd"),
    "switch_optics": ("switch", "native ports", "optics_watts_per_port", "optics_watts_per_port", "optics_usd_per_port"),
}


def _native_ports(out: Mapping[str, Any], parts: Mapping[str, Any]) -> float:
    """Scale-out switch ports in use in native ports: each NIC plane port, and both ends of
    every switch-to-switch cable, at the plane rate, over the switch's native port rate."""
    ports_used = out["planes"] * (
        out["n_endpoints"] + 2 * out["n_leaves"] * out["leaf_up"] + 2 * out["n_spines"] * out["spine_up"]
    )
    return float(ports_used * parts["plane_Bps"] / parts["switch"]["port_Bps"])


def _counts(fabric: Any) -> dict[str, float]:
    """How many of each component the fabric has (0 for a component it has none of)."""
    s, parts = fabric.structure, fabric._parts
    dom, out = s.get("domain"), s.get("scale_out")
    counts = dict.fromkeys(COMPONENTS, 0.0)
    if "gpu" in parts:
        counts["gpu"] = float(s["n_gpus"])
    if dom:
        counts["nvswitch"] = float(dom["planes"] * (dom["n_leaves"] + dom["n_spines"] + dom["n_cores"])
                                   * dom["n_domains"])
    if out and "scale_out" in parts:
        nic = parts["nic"]
        counts["nic"] = float(s["n_nics"])
        counts["nic_optics"] = float(s["n_nics"] * math.ceil(out["planes"] / nic["ports_per_cage"]))
        counts["switch"] = float(out["planes"] * (out["n_leaves"] + out["n_spines"] + out["n_cores"]))
        counts["switch_optics"] = _native_ports(out, parts)
    return counts


def _check_fabric(fabric: Any, where: str) -> None:
    """Refuses anything but a generated fabric or a plan: the two things that carry the
    catalog parts they were built or counted from (a plain topology has none)."""
    if not isinstance(getattr(fabric, "_parts", None), dict):
        raise InvalidArgumentError(
            f"{where} must be a generated fabric (fabricsim.cluster, clos, nvl72, ...) or a "
            f"fabricsim.power.plan_cluster plan, got {type(fabric).__name__}"
        )


# --------------------------------------------------------------------------------------------
# Budget and totals
# --------------------------------------------------------------------------------------------


def budget(fabric: Union[Fabric, FabricPlan]) -> pa.Table:
    """One row per component the fabric has: ``component`` (see :data:`COMPONENTS`),
    ``part`` (catalog name), ``count`` and ``count_unit``, ``each_watts`` and ``total_watts``
    (typical: a NIC's and a switch system's datasheet typical, a GPU's TDP), ``each_max_watts``
    and ``total_max_watts`` (maximum: what a power budget provisions), ``each_usd`` and
    ``total_usd`` (null when the catalog does not know), and the catalog's ``watts_source``,
    ``max_watts_source`` and ``usd_source``. Switch optics count native ports in use (a
    pluggable switch's transceiver serves ``ports_per_cage`` of them).

    Example::

        t = fs.power.budget(fs.hgx_h100())
        t.to_pylist()[0]["total_watts"]   # 5600.0 = 8 x 700.0
    """
    _check_fabric(fabric, "fabric")
    counts, parts = _counts(fabric), fabric._parts
    rows: list[dict[str, Any]] = []
    for comp in COMPONENTS:
        if not counts[comp]:
            continue
        key, unit, wf, mf, uf = _WHAT[comp]
        p = parts[key]
        each_w, each_m, each_u = p.get(wf), p.get(mf), p.get(uf)
        n = counts[comp]
        rows.append(dict(
            component=comp, part=p.name, count=n, count_unit=unit,
            each_watts=each_w, total_watts=None if each_w is None else each_w * n,
            each_max_watts=each_m, total_max_watts=None if each_m is None else each_m * n,
            each_usd=each_u, total_usd=None if each_u is None else each_u * n,
            watts_source=p.sources.get(wf, ""), max_watts_source=p.sources.get(mf, ""), usd_source=p.sources.get(uf, ""),
        ))
    schema = pa.schema([
        ("component", pa.string()), ("part", pa.string()), ("count", pa.float64()), ("count_unit", pa.string()),
        ("each_watts", pa.float64()), ("total_watts", pa.float64()), ("each_max_watts", pa.float64()),
        ("total_max_watts", pa.float64()), ("each_usd", pa.float64()), ("total_usd", pa.float64()),
        ("watts_source", pa.string()), ("max_watts_source", pa.string()), ("usd_source", pa.string()),
    ])
    return pa.Table.from_pylist(rows, schema=schema)


def _sum(values: Sequence[float | None]) -> tuple[float | None, float]:
    """(sum, or None if any is None; sum of the known ones)."""
    known = sum(v for v in values if v is not None)
    return (None if any(v is None for v in values) else known), known


def totals(fabric: Union[Fabric, FabricPlan]) -> dict[str, Any]:
    """The fabric's power and price by component as one mapping: ``<component>_watts``,
    ``<component>_max_watts`` and ``<component>_usd`` for each of :data:`COMPONENTS` (0.0 for a
    component the fabric does not have, None when its figure is unknown), ``network_watts``
    (NICs, their optics, switches, switch optics), ``total_watts``, the same at maximum and in
    USD (``network_max_watts``, ``total_usd``, ...), each known where every component's figure
    is; ``network_known_watts`` and ``total_known_watts`` (the known components only, and
    likewise at maximum and in USD), and ``unknown_power``, ``unknown_max_power`` and
    ``unknown_price``: the components whose figure is unknown.

    Example::

        fs.power.totals(fs.nvl72())["gpu_watts"]   # 86400.0 = 72 x 1200.0
    """
    rows = {r["component"]: r for r in budget(fabric).to_pylist()}
    out: dict[str, Any] = {"n_gpus": int(fabric.structure["n_gpus"])}
    for unit, unknown in (("watts", "unknown_power"), ("max_watts", "unknown_max_power"), ("usd", "unknown_price")):
        values: dict[str, float | None] = {
            c: (rows[c][f"total_{unit}"] if c in rows else 0.0) for c in COMPONENTS
        }
        for c in COMPONENTS:
            out[f"{c}_{unit}"] = values[c]
        out[f"network_{unit}"], out[f"network_known_{unit}"] = _sum([values[c] for c in NETWORK])
        out[f"total_{unit}"], out[f"total_known_{unit}"] = _sum(list(values.values()))
        out[unknown] = [c for c in COMPONENTS if values[c] is None]
    return out
