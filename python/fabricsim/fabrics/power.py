"""Power and cost of a fabric, from its structure and the catalog parts it was built from.

Every part that draws power is counted from the fabric's structure (never from its links)
and multiplied by its catalog figure: GPUs (``gpu.watts``, the TDP), NVLink switch chips
(``nvswitch.watts``), NICs (``nic.watts``) and the transceiver in each of their cages
(``nic.optics_watts_per_cage``), scale-out switches without optics (``switch.system_watts``)
and their optics per native port in use (``switch.optics_watts_per_port``). Prices work the
same way with the ``_usd`` fields. A figure the catalog does not know is ``None``: its
component's total is ``None`` and the component is listed as unknown, never counted as 0.

* :func:`budget`: one row per component of one fabric (count, watts and price each and in all,
  sources).
* :func:`totals`: the same as one flat mapping (``gpu_watts``, ..., ``network_watts``).
* :func:`compare`: one Arrow table, one row per fabric, for fabrics side by side.
* :func:`plan_cluster`: :func:`fabricsim.cluster`'s counts without building its links, for
  million-GPU fabrics (a few milliseconds instead of seconds and gigabytes).
* :func:`cpo_claim`: NVIDIA's 3.5x power-efficiency claim for co-packaged optics, evaluated
  on one fabric built with pluggable and with co-packaged switches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import pyarrow as pa

from .. import _core
from .._checks import COUNT, integer
from ..exceptions import InvalidArgumentError
from .budget import COMPONENTS, NETWORK, _check_fabric, budget, totals
from .catalog import part
from .describe import Description, describe
from .specs import _cluster_parts, _nvlink_spec

if TYPE_CHECKING:
    from .fabric import Fabric

__all__ = [
    "COMPONENTS",
    "NETWORK",
    "FabricPlan",
    "plan_cluster",
    "budget",
    "totals",
    "compare",
    "CpoEvaluation",
    "cpo_claim",
    "CPO_CLAIMED_RATIO",
]
#: NVIDIA's claimed power-efficiency gain of co-packaged over pluggable optics (docs/sources.md 2.3:
#: [2nd] https://usdaily.xyz/nvidia-s-new-silicon-photonics-based-400-tb-s-switch-platforms-enable-clusters-with-millions-of-gpus-12775.html).
CPO_CLAIMED_RATIO = 3.5

# --------------------------------------------------------------------------------------------
# Counting from structure
# --------------------------------------------------------------------------------------------


class FabricPlan:
    """A :func:`fabricsim.cluster` fabric's counts and parts, without its nodes and links.

    ``structure`` holds what :attr:`fabricsim.Fabric.structure` holds about the domains and
    the scale-out Clos (``n_gpus``, ``n_nics``, ``domain``, ``scale_out``), but no node or link
    totals; :meth:`describe`, :func:`budget`, :func:`totals` and :func:`compare` take a plan
    wherever they take a fabric. Make one with :func:`plan_cluster`.

    Example::

        plan = fs.power.plan_cluster(domain="nvl72", n_domains=1024, scale_out="quantum-x800")
        plan.structure["n_gpus"]   # 73728, counted without building a link
    """

    __slots__ = ("_structure", "_parts")

    def __init__(self, structure: dict[str, Any], parts: dict[str, Any]) -> None:
        self._structure = structure
        self._parts = parts

    @property
    def structure(self) -> dict[str, Any]:
        """Sizes of the domains and of the scale-out Clos (a copy)."""
        return {k: dict(v) if isinstance(v, dict) else v for k, v in self._structure.items()}

    @property
    def n_gpus(self) -> int:
        """Number of GPUs."""
        return int(self._structure["n_gpus"])

    def describe(self) -> Description:
        """The report :meth:`fabricsim.Fabric.describe` gives for the built fabric.

        Example::

            plan = fs.power.plan_cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            print(plan.describe())   # as fs.cluster(...).describe() prints it
        """
        return describe(self)

    def __repr__(self) -> str:
        return f"FabricPlan(n_gpus={self.n_gpus}, switch={self._parts['switch'].name!r})"


def plan_cluster(
    *, domain: Any = "nvl72", n_domains: int, scale_out: Any = None, nic: str | None = None,
    tiers: int | None = None, planes: int | None = None, oversubscription: Any = 1.0,
    routing: str | None = None, nvlink_efficiency: Any = None, efficiency: Any = None,
    sharp: bool = False,
) -> FabricPlan:
    """What :func:`fabricsim.cluster` with the same arguments would build, counted but not
    built: the same checks, parts and structure counts, none of the nodes or links (a
    1,048,576-GPU cluster is 52 M links and 1.8 GB built; its plan takes milliseconds).

    Example::

        plan = fs.power.plan_cluster(domain="hgx-b300", n_domains=131072,
                                            scale_out="quantum-x800", tiers=3)
        fs.power.totals(plan)["switch_optics_watts"]   # 78,938,880.0
    """
    parts = _cluster_parts(domain, n_domains, scale_out, nic, tiers, planes, oversubscription, routing,
                                   nvlink_efficiency, efficiency, sharp)
    dom, so = parts["domain"], parts["scale_out"]
    gpd, nd = dom["gpus_per_domain"], parts["n_domains"]
    n = gpd * nd
    # The core's own shape arithmetic (ClosShape), without the links.
    domain_shape = _core.clos_shape(gpd, 1, dom["chip_links"], dom["tiers"], dom["chip_ports"], (1.0, 1.0))
    domain_shape.update(n_domains=nd, link_Bps=dom["link_Bps"])
    so_shape = _core.clos_shape(n, gpd, [1] * so["planes"], so["tiers"], so["radix"], so["oversubscription"])
    so_shape.update(link_Bps=so["link_Bps"])
    return FabricPlan({"n_gpus": n, "n_nics": n, "domain": domain_shape, "scale_out": so_shape}, parts)


def compare(fabrics: Sequence[Union[Fabric, FabricPlan]], names: Sequence[str] | None = None) -> pa.Table:
    """Several fabrics side by side: one row per fabric (``fabric``, its name; default
    ``"fabric 0"``, ...), the :func:`totals` columns (watts and USD per component, network,
    total, known-only sums, unknown components), and ``watts_per_gpu`` and
    ``network_watts_per_gpu`` (null without GPUs or when unknown). Each column's unit is its
    name's suffix; the schema's metadata also maps each column to its unit.

    Example::

        a = fs.cluster(domain="hgx-b300", n_domains=16, scale_out="quantum-x800")
        b = fs.cluster(domain="hgx-b300", n_domains=16, scale_out="quantum-x-photonics")
        fs.power.compare([a, b], names=["pluggable", "co-packaged"])
    """
    if isinstance(fabrics, (str, bytes)) or not isinstance(fabrics, Sequence):
        raise InvalidArgumentError(f"fabrics must be a list of fabrics, got {type(fabrics).__name__}")
    if not fabrics:
        raise InvalidArgumentError("fabrics must hold at least one fabric, got an empty list")
    for i, f in enumerate(fabrics):
        _check_fabric(f, f"fabrics[{i}]")
    if names is None:
        labels = [f"fabric {i}" for i in range(len(fabrics))]
    else:
        if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
            raise InvalidArgumentError(f"names must be a list of strings, got {names!r}")
        labels = list(names)
        if len(labels) != len(fabrics):
            raise InvalidArgumentError(f"names must have one name per fabric ({len(fabrics)}), got {len(labels)}")
        for i, n in enumerate(labels):
            if not isinstance(n, str) or not n.strip():
                raise InvalidArgumentError(f"names[{i}] must be a non-empty string, got {n!r}")
        if len(set(labels)) != len(labels):
            dup = next(n for n in labels if labels.count(n) > 1)
            raise InvalidArgumentError(f"names must be distinct, {dup!r} appears twice")
    rows = []
    for label, f in zip(labels, fabrics):
        t = totals(f)
        n = t["n_gpus"]
        t["watts_per_gpu"] = t["total_watts"] / n if n and t["total_watts"] is not None else None
        t["network_watts_per_gpu"] = t["network_watts"] / n if n and t["network_watts"] is not None else None
        rows.append({"fabric": label, **t})
    fields = [pa.field("fabric", pa.string()), pa.field("n_gpus", pa.int64())]
    units = {"fabric": "", "n_gpus": "count"}
    for key in rows[0]:
        if key in ("fabric", "n_gpus"):
            continue
        if key.startswith("unknown_"):
            fields.append(pa.field(key, pa.list_(pa.string())))
            units[key] = "component names"
        else:
            fields.append(pa.field(key, pa.float64()))
            units[key] = "W" if "watts" in key else "USD"
    schema = pa.schema(fields, metadata={f"unit.{k}": v for k, v in units.items()})
    return pa.Table.from_pylist(rows, schema=schema)


# --------------------------------------------------------------------------------------------
# The co-packaged optics claim
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpoEvaluation:
    """NVIDIA's co-packaged optics power claim evaluated by scope.

    ``table``: one row per scope (``scope``, ``pluggable_watts``, ``co_packaged_watts``,
    ``ratio`` = pluggable / co-packaged, ``claim_holds`` (ratio >= the claimed 3.5, null when
    a figure is unknown), ``mechanism``). ``plans``: the two fabrics counted
    (pluggable, co-packaged), ``comparison``: their :func:`compare` table. ``print()`` it.

    Example::

        claim = fs.power.cpo_claim(n_gpus=8192)   # a CpoEvaluation
        claim.table.column("ratio")               # pluggable / co-packaged watts, by scope
    """

    table: pa.Table
    plans: tuple[FabricPlan, FabricPlan]
    comparison: pa.Table

    def __str__(self) -> str:
        def w(v: float | None) -> str:
            return "unknown" if v is None else f"{v:,.1f} W"

        p, c = self.plans
        out = [f"Co-packaged optics at {p.n_gpus:,} GPUs: {p._parts['switch'].name} (pluggable) vs "
               f"{c._parts['switch'].name} (co-packaged); NVIDIA claims {CPO_CLAIMED_RATIO}x"]
        for r in self.table.to_pylist():
            ratio = "unknown" if r["ratio"] is None else f"{r['ratio']:.3f}x"
            out.append(f"  {r['scope']:<44} {w(r['pluggable_watts']):>20} {w(r['co_packaged_watts']):>20}  {ratio}")
            out.append(f"      {r['mechanism']}")
        return "\n".join(out)


def cpo_claim(
    n_gpus: int = 1_048_576, *, domain: Any = "hgx-b300", pluggable: str = "quantum-x800",
    co_packaged: str = "quantum-x-photonics", tiers: int | None = 3, planes: int | None = None,
) -> CpoEvaluation:
    """NVIDIA's claim of 3.5x better power efficiency for co-packaged optics, evaluated on one
    cluster of ``n_gpus`` GPUs (``domain`` domains, a multiple of its GPUs) planned twice:
    with ``pluggable`` switches and with ``co_packaged`` ones of the same ports, so the Clos,
    its cables and its NICs are the same and only the switch-side optics differ.

    Scopes, narrowest first: optics per 800G switch port; all switch-side optics; all optics
    (the NICs' transceivers stay pluggable: ConnectX NICs plug OSFP modules); the network
    (NICs, their optics, switches without optics, switch optics; unknown while the catalog has
    no switch or NIC power, and bounded above by the all-optics ratio since those parts draw
    the same in both builds); the whole fabric with GPUs and NVLink switches.

    Counted from structure (:func:`plan_cluster`): 1,048,576 GPUs take milliseconds.

    Example::

        print(fs.power.cpo_claim())   # Co-packaged optics at 1,048,576 GPUs: quantum-x800 (pluggable) vs ...
    """
    n = integer("n_gpus", n_gpus, COUNT)
    sw_p, sw_c = part(pluggable), part(co_packaged)
    for arg, sw, form in (("pluggable", sw_p, "pluggable"), ("co_packaged", sw_c, "co-packaged")):
        if sw.kind != "switch" or sw["optics"] != form:
            raise InvalidArgumentError(f"{arg}={sw.name!r} must be a switch with {form} optics, "
                                       f"it is a {sw.kind}{' with ' + sw['optics'] + ' optics' if sw.kind == 'switch' else ''}")
    same = ("protocol", "ports", "port_Bps", "lane_Bps")
    if any(sw_p[k] != sw_c[k] for k in same):
        raise InvalidArgumentError(
            f"pluggable={sw_p.name!r} and co_packaged={sw_c.name!r} must have the same ports to be compared on one "
            f"fabric: {', '.join(f'{k} {sw_p[k]!r} vs {sw_c[k]!r}' for k in same if sw_p[k] != sw_c[k])}"
        )
    gpd = _nvlink_spec(domain, None)[0]["gpus_per_domain"]
    if n % gpd:
        raise InvalidArgumentError(f"n_gpus={n} is not a whole number of {gpd}-GPU domains ({domain!r})")
    plans = tuple(plan_cluster(domain=domain, n_domains=n // gpd, scale_out=s, tiers=tiers, planes=planes)
                  for s in (pluggable, co_packaged))
    tp, tc = totals(plans[0]), totals(plans[1])
    port_p = sw_p["optics_watts_per_port"] * 100e9 / sw_p["port_Bps"]
    port_c = sw_c["optics_watts_per_port"] * 100e9 / sw_c["port_Bps"]

    def add(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a + b

    scopes = [
        ("optics per 800G switch port", port_p, port_c,
         f"the module alone: {sw_p.name} {port_p:g} W vs {sw_c.name} {port_c:g} W per 800G port (catalog)"),
        ("switch-side optics", tp["switch_optics_watts"], tc["switch_optics_watts"],
         f"{plans[0]._parts['switch'].name} and {plans[1]._parts['switch'].name} Clos of the same shape: "
         f"the same {tp['switch_optics_watts'] / sw_p['optics_watts_per_port']:,.0f} native ports in use"),
        ("all optics (switch side + NIC side)", add(tp["switch_optics_watts"], tp["nic_optics_watts"]),
         add(tc["switch_optics_watts"], tc["nic_optics_watts"]),
         "the NICs' transceivers stay pluggable in both builds, the same watts added to each side"),
        ("network (NICs, NIC optics, switches, switch optics)", tp["network_watts"], tc["network_watts"],
         "unknown parts: " + (", ".join(sorted(set(tp["unknown_power"]) | set(tc["unknown_power"])
                                              & set(NETWORK))) or "none")
         + "; switch ASICs and NICs draw the same in both builds, so the all-optics ratio is an upper bound"),
        ("whole fabric, known parts only", tp["total_known_watts"], tc["total_known_watts"],
         "what the optics saving is worth against what the catalog knows: GPUs, NVLink switch chips and "
         "optics (" + (", ".join(sorted(set(tp["unknown_power"]))) or "nothing") + " left out)"),
        ("whole fabric incl. GPUs and NVLink switches", tp["total_watts"], tc["total_watts"],
         "GPUs and NVLink switches draw the same in both builds"
         + ("" if tp["total_watts"] is not None else "; unknown while any component is"), ),
    ]
    rows = []
    for scope, a, b, why in scopes:
        ratio = None if a is None or b is None or b == 0 else a / b
        rows.append(dict(scope=scope, pluggable_watts=a, co_packaged_watts=b, ratio=ratio,
                         claim_holds=None if ratio is None else ratio >= CPO_CLAIMED_RATIO, mechanism=why))
    table = pa.Table.from_pylist(rows, schema=pa.schema([
        ("scope", pa.string()), ("pluggable_watts", pa.float64()), ("co_packaged_watts", pa.float64()),
        ("ratio", pa.float64()), ("claim_holds", pa.bool_()), ("mechanism", pa.string()),
    ]))
    both = (plans[0], plans[1])
    return CpoEvaluation(table, both, compare(list(both), names=[sw_p.name, sw_c.name]))
