"""``Fabric.describe()``: what a generated fabric is made of, what it can carry, what it burns.

Counts come from the Rust structure, figures from the catalog parts the fabric was built
from. Bandwidths are line rates per direction unless a row says otherwise; a multi-tier
scale-out network also gets each oversubscribed tier's down:up capacity ratio as built (that of
its fullest switch: a leaf or spine with fewer endpoints below it is less oversubscribed). Power counts every part
that draws it (GPUs, NVLink switch chips, NICs and their transceivers, switches and their
optics; :mod:`fabricsim.power`), "unknown" where the catalog has no figure; the switch-side
optics are also shown for pluggable transceivers and for co-packaged optics side by side,
whatever the switch actually uses. A cost section gives prices where the catalog has them. A fabric with a
scale-out network says whether its deployment runs SHARP (``fs.cluster(..., sharp=True)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from ..units import format_rate
from . import catalog
from .budget import _native_ports, budget, totals

if TYPE_CHECKING:
    from .fabric import Fabric
    from .power import FabricPlan

__all__ = ["Description", "describe", "label"]

# Optics per port when the comparison needs the other technology (catalog names).
_PLUGGABLE, _COPACKAGED = "pluggable-1.6t", "cpo-1.6t"


@dataclass(frozen=True)
class Description:
    """Rows of (section, quantity, value, unit). ``table`` is the Arrow form; print() it.
    A unit of "bool" is a yes/no (value 1.0 or 0.0); a unit of "ratio" is x in x:1."""

    table: pa.Table

    def __str__(self) -> str:
        rows = self.table.to_pylist()
        width = max(len(r["quantity"]) for r in rows) if rows else 0
        out, section = [], None
        for r in rows:
            if r["section"] != section:
                section = r["section"]
                out.append(f"{section}")
            v, unit = r["value"], r["unit"]
            if unit == "B/s":
                shown = format_rate(v, bits=False)
            elif unit == "W":
                shown = "unknown" if v is None else f"{v:,.0f} W"
            elif unit == "USD":
                shown = "unknown" if v is None else f"${v:,.0f}"
            elif unit == "count":
                shown = f"{int(v):,}"
            elif unit == "bool":
                shown = "yes" if v else "no"
            elif unit == "ratio":
                shown = f"{v:.4g}:1"
            else:
                shown = f"{v:g} {unit}"
            out.append(f"  {r['quantity']:<{width}}  {shown}")
        return "\n".join(out)

    def _repr_html_(self) -> str:
        return "<pre>" + str(self) + "</pre>"


def describe(fabric: Fabric | FabricPlan) -> Description:
    """What ``fabric`` (a generated fabric or a plan) is made of, what it can carry and what it
    draws, as :meth:`Fabric.describe` reports it (the module docstring says what each section
    counts)."""
    s = fabric.structure
    parts = fabric._parts
    rows: list[tuple[str, str, float | None, str]] = []

    def add(section: str, quantity: str, value: float | None, unit: str) -> None:
        rows.append((section, quantity, None if value is None else float(value), unit))

    add("counts", "GPUs", s["n_gpus"], "count")
    dom = s.get("domain")
    out = s.get("scale_out")
    if dom:
        per_domain_chips = dom["planes"] * (dom["n_leaves"] + dom["n_spines"] + dom["n_cores"])
        add("counts", "scale-up domains", dom["n_domains"], "count")
        add("counts", "NVSwitch chips", per_domain_chips * dom["n_domains"], "count")
        gpu_links = dom["n_endpoints"] * sum(dom["endpoint_links"])
        add("counts", "NVLinks, GPU to switch chip", gpu_links * dom["n_domains"], "count")
        # A two-tier domain (NVL36x2, NVL576) also wires its leaf chips to spine chips.
        chip_links = dom["planes"] * (dom["n_leaves"] * dom["leaf_up"] + dom["n_spines"] * dom["spine_up"])
        if chip_links:
            add("counts", "NVLinks, switch chip to chip", chip_links * dom["n_domains"], "count")
    if s["n_nics"]:
        add("counts", "NICs" if s["n_gpus"] else "hosts", s["n_nics"], "count")
    if out:
        p = out["planes"]
        add("counts", "scale-out planes", p, "count")
        add("counts", "leaf switches", p * out["n_leaves"], "count")
        if out["n_spines"]:
            add("counts", "spine switches", p * out["n_spines"], "count")
        if out["n_cores"]:
            add("counts", "core switches", p * out["n_cores"], "count")
        nic_cables = p * out["n_endpoints"]
        fabric_cables = p * (out["n_leaves"] * out["leaf_up"] + out["n_spines"] * out["spine_up"])
        add("counts", "scale-out cables", nic_cables + fabric_cables, "count")
        # One transceiver per cage, and a cage serves ports_per_cage ports (the catalog's: two
        # on twin-port OSFP switches, both planes of a ConnectX-8): on the NIC side per NIC, on
        # the switch side per native port in use, rounded up over the fabric (none on
        # co-packaged optics).
        nic, sw = parts["nic"], parts["switch"]
        transceivers = s["n_nics"] * math.ceil(p / nic["ports_per_cage"])
        if sw["optics"] == "pluggable":
            transceivers += math.ceil(_native_ports(out, parts) / sw["ports_per_cage"] - 1e-9)
        add("counts", "pluggable optical transceivers", transceivers, "count")

    if dom:
        gpu = parts["gpu"]
        per_gpu = sum(dom["endpoint_links"]) * gpu["nvlink_link_Bps"]
        add("bandwidth", "scale-up per GPU per direction", per_gpu, "B/s")
        add("bandwidth", "scale-up per GPU, payload (x efficiency)", per_gpu * parts["nvlink_efficiency"], "B/s")
        add("bandwidth", "aggregate NVLink, both directions", 2 * per_gpu * s["n_gpus"], "B/s")
    if out:
        nic_Bps = parts["plane_Bps"] * out["planes"]
        add("bandwidth", "scale-out per endpoint per direction", nic_Bps, "B/s")
        n = out["n_endpoints"]
        injection = n * nic_Bps / 2
        plane_Bps = parts["plane_Bps"]
        if out["tiers"] == 1:  # one switch per plane: nothing but the hosts' own links to cut
            add("bandwidth", "bisection, one switch", injection, "B/s")
        else:
            leaf_up = out["planes"] * out["n_leaves"] * out["leaf_up"] * plane_Bps / 2
            add("bandwidth", "bisection, leaf tier", min(injection, leaf_up), "B/s")
        if out["n_cores"]:
            spine_up = out["planes"] * out["n_spines"] * out["spine_up"] * plane_Bps / 2
            add("bandwidth", "bisection, spine tier", min(injection, spine_up), "B/s")
        # Oversubscription as built: the fullest switch's down:up capacity (down and up links
        # of a plane run at one rate, so the port ratio is the capacity ratio).
        if out["tiers"] >= 2:
            add("bandwidth", "down:up capacity, fullest leaf", out["leaf_down"] / out["leaf_up"], "ratio")
        if out["n_cores"]:
            add("bandwidth", "down:up capacity, fullest spine", out["spine_down"] / out["spine_up"], "ratio")

    # Every part that draws power, counted from structure (fabricsim.power): GPUs and NVLink
    # switch chips first, the network's parts after; "unknown" where the catalog has no figure.
    watts = {r["component"]: r for r in budget(fabric).to_pylist()}
    labels = {"gpu": "GPUs", "nvswitch": "NVSwitch chips", "nic": "NICs", "nic_optics": "NIC-side optics"}
    for comp in ("gpu", "nvswitch", "nic", "nic_optics"):
        if comp in watts:
            add("power", labels[comp], watts[comp]["total_watts"], "W")
    if out:
        sw = parts["switch"]
        n_switches = out["planes"] * (out["n_leaves"] + out["n_spines"] + out["n_cores"])
        native_ports = _native_ports(out, parts)
        system = sw["system_watts"]
        add("power", "switches without optics", None if system is None else system * n_switches, "W")
        # The switch's own optics for its own kind; the reference module, scaled to the port
        # rate, for the other.
        per_port = {}
        for form, name in (("pluggable", _PLUGGABLE), ("co-packaged", _COPACKAGED)):
            optic = catalog.part(name)
            per_port[form] = (sw["optics_watts_per_port"] if sw["optics"] == form
                              else optic["watts"] * sw["port_Bps"] / optic["rate_Bps"])
        per_port_plug, per_port_cpo = per_port["pluggable"], per_port["co-packaged"]
        add("power", "switch-side optics, as built", native_ports * sw["optics_watts_per_port"], "W")
        add("power", "switch-side optics if pluggable", native_ports * per_port_plug, "W")
        add("power", "switch-side optics if co-packaged", native_ports * per_port_cpo, "W")
    sums = totals(fabric)
    if out:
        add("power", "network (NICs, their optics, switches, switch optics)", sums["network_watts"], "W")
        add("power", "network at maximum (NICs and switches at their datasheet maximum)", sums["network_max_watts"], "W")
    if watts:
        add("power", "total", sums["total_watts"], "W")
        add("power", "total at maximum", sums["total_max_watts"], "W")
    if watts and sums["unknown_power"] and sums["total_known_watts"]:
        add("power", "total of the known parts", sums["total_known_watts"], "W")
    for comp, r in watts.items():
        add("cost", f"{comp.replace('_', ' ')} ({r['part']})", r["total_usd"], "USD")
    if watts:
        add("cost", "total", sums["total_usd"], "USD")
    if out:
        # A deployment choice, not the switch's: SHARP-capable switches run without it unless
        # the Aggregation Manager, NCCL's SHARP plugin and CollNet are set up.
        add("in-network reduction", "SHARP enabled", parts.get("sharp_enabled", False), "bool")

    table = pa.table(
        {
            "section": pa.array([r[0] for r in rows], pa.string()),
            "quantity": pa.array([r[1] for r in rows], pa.string()),
            "value": pa.array([r[2] for r in rows], pa.float64()),
            "unit": pa.array([r[3] for r in rows], pa.string()),
        }
    )
    return Description(table)


def label(topology: object) -> str:
    """A short name for a topology, for titles and headers: ``"4 x 8 H100 on quantum-2"`` (a
    cluster), ``"8 H100"`` (one NVLink domain), ``"512 hosts on sn5600"`` (a bare Clos),
    ``"8 GPUs on PCIe"``, ``"12 nodes, 288 links"`` (a plain topology).

    Example::

        fs.fabrics.describe.label(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"))
        # '4 x 8 H100 on quantum-2'
    """
    parts = getattr(topology, "_parts", None) or {}
    structure = getattr(topology, "structure", None) or {}
    dom, switch = structure.get("domain"), parts.get("switch")
    on = f" on {switch.name}" if switch is not None and "scale_out" in structure else ""
    if dom and "gpu" in parts:
        gpus = f"{dom['n_endpoints']} {parts['gpu'].name.upper()}"
        return f"{dom['n_domains']} x {gpus}{on}" if dom["n_domains"] > 1 or on else gpus
    if on:
        return f"{structure['n_nics']} hosts{on}"
    if "pcie" in parts:
        return f"{structure['n_gpus']} GPUs on PCIe"
    n_nodes, n_links = getattr(topology, "n_nodes", 0), getattr(topology, "n_links", 0)
    return f"{n_nodes} node{'s' * (n_nodes != 1)}, {n_links} link{'s' * (n_links != 1)}"
