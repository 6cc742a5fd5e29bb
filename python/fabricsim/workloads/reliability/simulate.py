"""Failures over a job's life (issue 27): failure rates per part, failures drawn over a
horizon, what each one costs, goodput; pluggable against co-packaged optics.

**Rates** (``data/failure_rates.json``, :func:`failure_rates`): failures per unit per hour,
each derived as events / (units x hours) from the 419 unexpected interruptions of Llama 3 405B
pre-training (54 days on 16,384 H100 in 2,048 hosts; arXiv:2407.21783, Table 5). GPU, host,
unplanned host maintenance, software, unknown (NCCL watchdog timeouts) and NIC come straight
from the table; its one "Network Switch/Cable" row is split between switches, pluggable
transceivers and cables by a named assumption, over the counts of fabricsim's equivalent
16,384-GPU fabric. A co-packaged switch port's rate is the pluggable per-port rate times the
mechanism factors of ``optics_mechanisms`` (fewer lasers, no DSP, fewer connectors).

**Parts of a fabric** (:func:`part_counts`): GPUs, hosts (8 GPUs per HGX host, 4 per NVL72
compute tray), NICs, scale-out switches by tier, cables, pluggable transceivers (NIC side and
switch side, as :meth:`Fabric.describe` counts them) or co-packaged switch ports, each by
location: ``host`` (the NIC-to-leaf links; ``nic`` for the NIC's own transceiver on them),
``leaf-spine``, ``spine-core``. A job on part of
the fabric (a :class:`~fabricsim.training.TrainingStep` on fewer GPUs than the fabric has)
sees that fraction of every part.

**Sampling** (:func:`simulate`): for each (part, location), the number of failures over the
horizon is Poisson(rate x units x hours), their times uniform over the horizon and the unit
uniform among the units; one ``numpy.random.Generator`` seeded with ``seed`` draws them in a
fixed order, so a seed gives the same tables every time.

**Consequences** (:class:`Policy`), by part or ``part.location`` (the more specific wins):

* ``restart``: the job goes back to its last checkpoint. Lost work is the time since the
  later of the last checkpoint and the last resume (checkpoints every ``checkpoint_interval_s``
  of running time after each resume), plus ``restart_s`` of downtime. A failure during a
  restart starts the restart again (the downtime runs ``restart_s`` from the new failure).
* ``reroute`` (a switch above the leaves, or a leaf-spine or spine-core link or its optics):
  adaptive routing spreads the traffic over the surviving paths. The job goes on with less
  bandwidth until the part is repaired (``repair_hours`` of the rates).
* ``fallback`` (a NIC, a leaf, or a NIC-to-leaf link or its optics): NCCL runs on the
  remaining rails (PXN moves the lost rail's traffic over NVLink to the domain's other NICs)
  until the part is repaired.
* ``ignore``: no cost (e.g. a failure a spare absorbs).

**Slowed step** (bounded closed form): a failure that removes a fraction ``f`` of the
bottleneck's capacity (one of ``U`` uplinks of a leaf: ``f = links_down / leaf_up``; a spine
switch: ``leaf_spine_width / leaf_up``; a core switch: ``spine_core_width / spine_up``; one
rail of ``R`` rails x ``P`` planes: ``links_down / (R x P)``) makes every pipelined
collective crossing it run at the slowest member's rate, so the exposed scale-out
communication ``X`` (the step's ``dp + pp + cp + ep`` exposed times) grows by ``1 / (1 - f)``:
``step' = step + X (1 / (1 - f) - 1)``. It is an upper bound: the whole fault is charged to
one plane and to every collective, and ``X`` counts cp and ep even where they stay in the
NVLink domain. ``Policy.slowdown`` replaces ``1 / (1 - f)`` by a given factor (e.g. NCCL's
fallback from SHARP to a ring, measured). Work lost while degraded over ``d`` seconds is
``d (1 - step / step')``. A fault that takes a whole bottleneck (``f >= 1``) is a restart.

**Goodput** is useful step time / wall time: (horizon - lost) / horizon, lost being the
restarts' lost work and downtime, the slowed steps' lost work and checkpoint writes
(``checkpoint_write_s`` per ``checkpoint_interval_s`` of running time). Degradations are
counted independently (two overlapping ones each lose their own share) and not stopped by a
restart.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa

from ..._checks import finite, shown
from ...exceptions import InvalidArgumentError

__all__ = [
    "PARTS",
    "CONSEQUENCES",
    "FailureRates",
    "Policy",
    "ReliabilityResult",
    "failure_rates",
    "part_counts",
    "expected_failures",
    "simulate",
    "compare_optics",
    "cpo_port_factor",
]

#: Parts that fail, in the order their failures are drawn.
PARTS = ("gpu", "host", "host_maintenance", "software", "unknown", "nic", "switch", "optics", "cpo_port", "link")
#: What a failure can do to the job.
CONSEQUENCES = ("restart", "reroute", "fallback", "ignore")

_HOUR_S = 3600.0
_FABRIC_LOCATIONS = ("leaf-spine", "spine-core", "spine", "core")
_ENDPOINT_PARTS = ("gpu", "host", "host_maintenance", "software", "unknown")
# Which consequences each kind of location allows.
_ALLOWED = {
    "endpoint": ("restart", "ignore"),
    "host": ("restart", "fallback", "ignore"),
    "fabric": ("restart", "reroute", "ignore"),
}
_DEFAULT_CONSEQUENCES: dict[str, str] = {
    "gpu": "restart", "host": "restart", "host_maintenance": "restart", "software": "restart", "unknown": "restart",
    "nic": "restart", "switch.leaf": "restart", "switch.spine": "reroute", "switch.core": "reroute",
    "optics.host": "restart", "optics.fabric": "reroute", "cpo_port.host": "restart", "cpo_port.fabric": "reroute",
    "link.host": "restart", "link.fabric": "reroute",
}


def _load() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("data/failure_rates.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


_DATA = _load()


def _nonnegative(what: str, value: Any, unit: str) -> float:
    v = finite(value)
    if v is None or v < 0:
        raise InvalidArgumentError(f"{what} must be a finite number >= 0 ({unit}), got {shown(value)}")
    return v


def _positive(what: str, value: Any, unit: str) -> float:
    v = finite(value)
    if v is None or v <= 0:
        raise InvalidArgumentError(f"{what} must be a finite number > 0 ({unit}), got {shown(value)}")
    return v


def _part_name(what: str, name: Any, known: Iterable[str]) -> str:
    known = tuple(known)
    if not isinstance(name, str) or name not in known:
        raise InvalidArgumentError(f"{what}: unknown part {name!r}; the parts are {', '.join(known)}")
    return name


# ------------------------------------------------------------------------------------------
# Rates
# ------------------------------------------------------------------------------------------


def _derived_rates() -> tuple[dict[str, float], dict[str, str]]:
    """Per-part rates from Table 5 and the reference counts, with the derivation of each."""
    ref = _DATA["reference"]
    hours = float(ref["hours"])
    events: dict[str, float] = {}
    causes: dict[str, list[str]] = {}
    for row in _DATA["table5"]:
        events[row["part"]] = events.get(row["part"], 0.0) + row["count"]
        causes.setdefault(row["part"], []).append(f"{row['cause']} {row['count']}")
    network = events.pop("network")
    split = _DATA["network_split"]
    for part in ("switch", "optics", "link"):
        events[part] = network * split[part]
        causes[part] = [f"{split[part]:g} x Network Switch/Cable {network:g} [assumed split]"]
    denominators = {"gpus": ref["gpus"], "hosts": ref["hosts"], **ref["fabric_counts"]}
    rates, derivations = {}, {}
    for part, meta in _DATA["parts"].items():
        units = float(denominators[meta["denominator"]])
        rates[part] = events[part] / (units * hours)
        derivations[part] = (
            f"({' + '.join(causes[part])}) = {events[part]:g} failures / ({units:,.0f} {meta['unit']}s x "
            f"{hours:g} h); Llama 3 Table 5" + (f"; {meta['assumption']}" if "assumption" in meta else "")
        )
    return rates, derivations


@dataclass(frozen=True)
class FailureRates:
    """Failure rates per unit per hour (``rates_per_hour``), how long a part that the job
    routes around stays down (``repair_s``), and the co-packaged optics mechanism
    (``optics_shares``: what a pluggable transceiver's failures are made of, summing to 1;
    ``cpo_factors``: what CPO does to each share). ``cpo_port`` is derived from ``optics``
    unless given.

    Example::

        from fabricsim import reliability
        r = reliability.failure_rates()
        round(r.rate_per_hour("gpu") * 16384 * 1296)   # 268: Table 5's GPU rows in 54 days
        r2 = r.replace(rates_per_hour={"gpu": 1e-5})
    """

    rates_per_hour: Mapping[str, float]
    repair_s: Mapping[str, float]
    optics_shares: Mapping[str, float]
    cpo_factors: Mapping[str, float]
    derivations: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        rates = {}
        for k, v in dict(self.rates_per_hour).items():
            _part_name("rates_per_hour", k, PARTS)
            rates[k] = _nonnegative(f"failure rate of {k!r}", v, "failures per unit per hour")
        missing = [p for p in PARTS if p != "cpo_port" and p not in rates]
        if missing:
            raise InvalidArgumentError(f"rates_per_hour lacks {missing}; start from reliability.failure_rates().replace(...)")
        repair = {}
        for k, v in dict(self.repair_s).items():
            _part_name("repair_s", k, PARTS)
            repair[k] = _nonnegative(f"repair time of {k!r}", v, "seconds")
        shares = {k: _nonnegative(f"optics share {k!r}", v, "a fraction") for k, v in dict(self.optics_shares).items()}
        if shares and abs(sum(shares.values()) - 1.0) > 1e-6:
            raise InvalidArgumentError(f"optics_shares must add up to 1, got {sum(shares.values())!r} ({shares})")
        factors = {k: _nonnegative(f"cpo factor {k!r}", v, "a multiplier") for k, v in dict(self.cpo_factors).items()}
        unknown = sorted(set(factors) - set(shares))
        if unknown:
            raise InvalidArgumentError(f"cpo_factors names {unknown}, which are not optics_shares ({sorted(shares)})")
        object.__setattr__(self, "rates_per_hour", rates)
        object.__setattr__(self, "repair_s", repair)
        object.__setattr__(self, "optics_shares", shares)
        object.__setattr__(self, "cpo_factors", factors)

    def rate_per_hour(self, part: str) -> float:
        """Failures per unit per hour of ``part``; ``cpo_port`` derived when not given.

        Example::

            fs.reliability.failure_rates().rate_per_hour("nic") > 0   # True
        """
        _part_name("rate_per_hour", part, PARTS)
        if part == "cpo_port" and "cpo_port" not in self.rates_per_hour:
            ppc = float(_DATA["optics_mechanisms"]["reference_ports_per_cage"])
            return self.rates_per_hour["optics"] / ppc * cpo_port_factor(self)
        return float(self.rates_per_hour[part])

    def replace(
        self, *, rates_per_hour: Mapping[str, Any] | None = None, repair_s: Mapping[str, Any] | None = None,
        optics_shares: Mapping[str, Any] | None = None, cpo_factors: Mapping[str, Any] | None = None,
    ) -> "FailureRates":
        """A copy with some rates, repair times, shares or CPO factors changed (merged).

        Example::

            r = fs.reliability.failure_rates().replace(rates_per_hour={"link": 0.0}, repair_s={"switch": 3600})
            r.rate_per_hour("link")   # 0.0
        """
        derivations = dict(self.derivations)
        for k in rates_per_hour or {}:
            derivations[str(k)] = "given"
        return FailureRates(
            {**self.rates_per_hour, **(rates_per_hour or {})}, {**self.repair_s, **(repair_s or {})},
            {**self.optics_shares, **(optics_shares or {})}, {**self.cpo_factors, **(cpo_factors or {})}, derivations,
        )

    @property
    def table(self) -> pa.Table:
        """``part, rate_per_hour, repair_s, derivation``: one row per part.

        Example::

            fs.reliability.failure_rates().table.num_rows == len(fs.reliability.PARTS)   # True
        """
        derivations = dict(self.derivations)
        if "cpo_port" not in self.rates_per_hour:
            derivations["cpo_port"] = (
                f"optics rate / {_DATA['optics_mechanisms']['reference_ports_per_cage']} ports per cage x "
                f"{cpo_port_factor(self):.4f} (sum of optics_shares x cpo_factors); "
                + _DATA["optics_mechanisms"]["cpo_factors_derivation"]
            )
        return pa.table({
            "part": pa.array(PARTS, pa.string()),
            "rate_per_hour": pa.array([self.rate_per_hour(p) for p in PARTS], pa.float64()),
            "repair_s": pa.array([self.repair_s.get(p) for p in PARTS], pa.float64()),
            "derivation": pa.array([derivations.get(p, "") for p in PARTS], pa.string()),
        })


def failure_rates() -> FailureRates:
    """The default rates (``data/failure_rates.json``): Llama 3 Table 5 over its cluster,
    the named network split, repair times and the CPO mechanism.

    Example::

        from fabricsim import reliability
        print(reliability.failure_rates().table.select(["part", "rate_per_hour"]))
    """
    rates, derivations = _derived_rates()
    mech = _DATA["optics_mechanisms"]
    repair = {k: float(v) * _HOUR_S for k, v in _DATA["repair_hours"].items() if k != "assumption"}
    for k in ("shares", "cpo_factors"):
        derivations[f"optics_{k}"] = mech.get(f"{k}_derivation", "")
    return FailureRates(rates, repair, dict(mech["shares"]), dict(mech["cpo_factors"]), derivations)


def cpo_port_factor(rates: FailureRates | None = None) -> float:
    """A co-packaged switch port's failure rate as a fraction of a pluggable one's:
    sum over the failure mechanisms of share x CPO factor (a share without a factor keeps 1).

    Example::

        round(fs.reliability.cpo_port_factor(), 4)   # 0.66 = 0.2286/4 + 0.0686*0 + 0.5028*1 + 0.2/2
    """
    r = rates or failure_rates()
    return float(sum(s * r.cpo_factors.get(k, 1.0) for k, s in r.optics_shares.items()))


def _rates_of(rates: Any) -> FailureRates:
    if rates is None:
        return failure_rates()
    if isinstance(rates, FailureRates):
        return rates
    if isinstance(rates, Mapping):
        return failure_rates().replace(rates_per_hour=rates)
    raise InvalidArgumentError(
        f"rates must be a reliability.FailureRates or a mapping part -> failures per unit per hour, got {type(rates).__name__}")


# ------------------------------------------------------------------------------------------
# Policy
# ------------------------------------------------------------------------------------------


def _kind(part: str, location: str) -> str:
    if part in _ENDPOINT_PARTS:
        return "endpoint"
    if part == "nic" or location in ("nic", "host", "leaf"):
        return "host"
    return "fabric"


@dataclass(frozen=True)
class Policy:
    """What each failure does to the job, and the checkpoint/restart costs.

    ``consequences`` overrides the defaults by part (``"switch"``) or part and location
    (``"switch.spine"``, ``"optics.host"`` for both ends of the NIC-to-leaf links or
    ``"optics.nic"`` for the NIC's end, ``"optics.fabric"`` for both switch-to-switch tiers): one of ``restart``, ``reroute`` (switch-to-switch parts only), ``fallback``
    (NIC-side parts only: NCCL on fewer rails) or ``ignore``. ``slowdown`` gives, by the same
    keys, the factor on the exposed scale-out communication while degraded, in place of the
    closed form 1 / (1 - f).

    Defaults [assumed]: a checkpoint every 30 min (``checkpoint_interval_s=1800``) and a
    4-minute restart (``restart_s=240``), chosen so that Table 5's 419 restarts in 1,296 h
    lose (900 + 240) s each, 10% of the time: the paper's "higher than 90% effective training
    time". Checkpoint writes are asynchronous (``checkpoint_write_s=0``).

    Example::

        from fabricsim import reliability
        p = reliability.Policy(checkpoint_interval_s=3600, consequences={"nic": "fallback"})
        p.consequence("nic", "host")   # 'fallback'
    """

    checkpoint_interval_s: float = 1800.0
    restart_s: float = 240.0
    checkpoint_write_s: float = 0.0
    consequences: Mapping[str, str] = field(default_factory=dict)
    slowdown: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoint_interval_s",
                           _positive("checkpoint_interval_s", self.checkpoint_interval_s, "seconds"))
        object.__setattr__(self, "restart_s", _nonnegative("restart_s", self.restart_s, "seconds"))
        object.__setattr__(self, "checkpoint_write_s",
                           _nonnegative("checkpoint_write_s", self.checkpoint_write_s, "seconds"))
        cons = {}
        for key, value in dict(self.consequences).items():
            part, _, loc = str(key).partition(".")
            _part_name(f"consequences[{key!r}]", part, PARTS)
            if value not in CONSEQUENCES:
                raise InvalidArgumentError(
                    f"consequences[{key!r}] must be one of {', '.join(CONSEQUENCES)}, got {shown(value)}")
            locs = [loc] if loc else _locations_of(part)
            for lo in locs:
                allowed = _ALLOWED[_kind(part, lo)]
                if value not in allowed:
                    raise InvalidArgumentError(
                        f"consequences[{key!r}] = {value!r} is not possible for {part} at {lo!r}: "
                        f"there it can be {', '.join(allowed)} (reroute needs a redundant switch-to-switch path; "
                        f"fallback to fewer rails applies to NIC-side parts)")
            cons[str(key)] = value
        slow = {}
        for skey, factor in dict(self.slowdown).items():
            _part_name(f"slowdown[{skey!r}]", str(skey).partition(".")[0], PARTS)
            v = finite(factor)
            if v is None or v < 1:
                raise InvalidArgumentError(
                    f"slowdown[{skey!r}] must be a finite factor >= 1 on the exposed scale-out time, got {shown(factor)}")
            slow[str(skey)] = v
        object.__setattr__(self, "consequences", cons)
        object.__setattr__(self, "slowdown", slow)

    def _lookup(self, table: Mapping[str, Any], part: str, location: str) -> Any:
        keys = [f"{part}.{location}"]
        if location == "nic":  # the NIC's end of a NIC-to-leaf link
            keys.append(f"{part}.host")
        if location in _FABRIC_LOCATIONS and location not in ("spine", "core"):
            keys.append(f"{part}.fabric")
        keys.append(part)
        for k in keys:
            if k in table:
                return table[k]
        return None

    def consequence(self, part: str, location: str = "") -> str:
        """What a failure of ``part`` at ``location`` does: the policy's, else the default.

        Example::

            fs.reliability.Policy().consequence("switch", "spine")   # 'reroute'
        """
        got = self._lookup(self.consequences, part, location)
        if got is None:
            got = self._lookup(_DEFAULT_CONSEQUENCES, part, location)
        return str(got) if got is not None else "restart"

    def slowdown_factor(self, part: str, location: str = "") -> float | None:
        """The given factor on the exposed scale-out time while degraded, or None (closed form).

        Example::

            fs.reliability.Policy(slowdown={"switch": 1.5}).slowdown_factor("switch", "core")   # 1.5
        """
        got = self._lookup(self.slowdown, part, location)
        return None if got is None else float(got)


def _locations_of(part: str) -> list[str]:
    if part in _ENDPOINT_PARTS:
        return [""]
    if part == "nic":
        return ["host"]
    if part == "switch":
        return ["leaf", "spine", "core"]
    if part == "link":
        return ["host", "leaf-spine", "spine-core"]
    return ["nic", "host", "leaf-spine", "spine-core"]


# ------------------------------------------------------------------------------------------
# Part counts
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stream:
    part: str
    location: str
    units: float
    links_down: float  # links one failure takes down
    capacity_lost: float  # f: fraction of the bottleneck's capacity one failure removes


def _streams(fabric: Any, gpus: int | None, gpus_per_host: int | None) -> list[_Stream]:
    s = fabric.structure
    parts = fabric._parts
    n_gpus = int(s["n_gpus"])
    dom, out = s.get("domain"), s.get("scale_out")
    if gpus_per_host is None:
        if dom is not None:
            # An HGX board is one host; an NVL72 rack has 18 compute trays of 4 GPUs (reference/hardware.md 1.4).
            gpus_per_host = dom["n_endpoints"] if dom["n_endpoints"] <= 8 else 4
        else:
            gpus_per_host = max(n_gpus, 1)
    gph = int(gpus_per_host)
    if gph < 1:
        raise InvalidArgumentError(f"gpus_per_host must be a whole number >= 1, got {gpus_per_host!r}")
    n_hosts = math.ceil(n_gpus / gph) if n_gpus else int(s["n_nics"])
    q = 1.0
    if gpus is not None and n_gpus:
        if not 1 <= gpus <= n_gpus:
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
    h = _positive("horizon_s", horizon_s, "seconds") / _HOUR_S
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


# ------------------------------------------------------------------------------------------
# Simulation
# ------------------------------------------------------------------------------------------


def _step_times(step: Any, exposed_network_s: Any) -> tuple[float, float]:
    """(step_s, exposed scale-out communication per step, s)."""
    if hasattr(step, "estimate") and callable(step.estimate) and not hasattr(step, "step_s"):
        step = step.estimate()
    if hasattr(step, "step_s") and hasattr(step, "parts"):
        step_s = _positive("step_s", step.step_s, "seconds")
        exposed = sum(float(step.parts.get(k, 0.0)) for k in ("dp", "pp", "cp", "ep"))
    else:
        step_s = _positive("step (seconds per step)", step, "a TrainingStep, a StepEstimate or seconds")
        exposed = step_s  # upper bound: the whole step slows
    if exposed_network_s is not None:
        exposed = _nonnegative("exposed_network_s", exposed_network_s, "seconds")
    if exposed > step_s:
        raise InvalidArgumentError(f"exposed_network_s {exposed!r} exceeds the step's {step_s!r} s")
    return step_s, exposed


@dataclass(frozen=True)
class ReliabilityResult:
    """What :func:`simulate` found. ``failures``: one row per failure, in time order
    (``time_s, part, location, unit, consequence, lost_s, lost_work_s, downtime_s,
    degraded_s, step_s``: lost_s = lost_work_s + downtime_s + degraded_s; step_s the step
    while degraded). ``summary``: ``quantity, value, unit`` rows (horizon, goodput, restarts,
    lost time by cause). ``goodput``, ``n_restarts`` and ``lost_s`` as numbers.

    Example::

        from fabricsim import reliability
        f = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2")
        r = reliability.simulate(f, 7.5, horizon_s=30 * 86400, seed=1)
        0 < r.goodput <= 1   # True
    """

    failures: pa.Table
    summary: pa.Table
    goodput: float
    n_restarts: int
    lost_s: float
    horizon_s: float

    def lost_by_cause(self) -> dict[str, float]:
        """Lost seconds per part (and ``checkpoint`` for checkpoint writes).

        Example::

            f = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
            r = fs.reliability.simulate(f, 7.5, horizon_s=86400)
            "gpu" in r.lost_by_cause()   # True
        """
        out: dict[str, float] = {}
        for row in self.summary.to_pylist():
            q = row["quantity"]
            if q.startswith("lost, "):
                out[q[len("lost, "):]] = float(row["value"])
        return out

    def __repr__(self) -> str:
        return (f"ReliabilityResult(horizon_s={self.horizon_s:g}, failures={self.failures.num_rows}, "
                f"restarts={self.n_restarts}, goodput={self.goodput:.4f})")


def simulate(
    fabric: Any, step: Any, *, horizon_s: float, seed: int = 0, policy: Policy | None = None, rates: Any = None,
    exposed_network_s: float | None = None, gpus_per_host: int | None = None,
) -> ReliabilityResult:
    """Failures of a job on ``fabric`` drawn over ``horizon_s`` seconds with ``seed``, each
    costed by ``policy`` (default :class:`Policy`), rates from ``rates`` (a
    :class:`FailureRates`, or a mapping of rates per hour merged into the defaults).

    ``step`` is a :class:`~fabricsim.training.TrainingStep` (estimated analytically), its
    :class:`~fabricsim.training.StepEstimate` or ``StepResult``, or the step time in seconds
    (then the whole step counts as exposed scale-out communication unless
    ``exposed_network_s`` says otherwise).

    Example::

        from fabricsim import reliability, training
        f = fs.cluster(domain="hgx-h100", n_domains=2048, scale_out="quantum-2")
        par = training.Parallelism(**training.VALIDATION["llama3-405b-16k"]["parallelism"])
        job = training.TrainingStep("llama3-405b", par, f, check_memory=False)
        r = reliability.simulate(f, job, horizon_s=54 * 86400, seed=0)
        print(r.summary)
    """
    H = _positive("horizon_s", horizon_s, "seconds")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidArgumentError(f"seed must be a whole number >= 0, got {shown(seed)}")
    pol = policy if policy is not None else Policy()
    if not isinstance(pol, Policy):
        raise InvalidArgumentError(f"policy must be a reliability.Policy, got {type(pol).__name__}")
    r = _rates_of(rates)
    step_s, exposed = _step_times(step, exposed_network_s)
    streams = _streams(fabric, _job_gpus(step), gpus_per_host)
    rng = np.random.default_rng(int(seed))
    hours = H / _HOUR_S
    times, which, units = [], [], []
    for i, x in enumerate(streams):
        lam = r.rate_per_hour(x.part) * x.units * hours
        n = int(rng.poisson(lam)) if lam > 0 else 0
        times.append(rng.uniform(0.0, H, n))
        which.append(np.full(n, i, dtype=np.int64))
        units.append(rng.integers(0, max(1, math.ceil(x.units)), n))
    t_all = np.concatenate(times) if times else np.zeros(0)
    order = np.argsort(t_all, kind="stable")
    t_all = t_all[order]
    w_all = np.concatenate(which)[order] if which else np.zeros(0, np.int64)
    u_all = np.concatenate(units)[order] if units else np.zeros(0, np.int64)

    # Per stream: the consequence and, for degradations, the slowed step.
    kinds, slowed = [], []
    for x in streams:
        kind = pol.consequence(x.part, x.location)
        s1 = step_s
        if kind in ("reroute", "fallback"):
            factor = pol.slowdown_factor(x.part, x.location)
            if factor is None:
                if x.capacity_lost >= 1.0:
                    kind = "restart"  # the whole bottleneck is gone: nothing to reroute over
                else:
                    factor = 1.0 / (1.0 - x.capacity_lost)
            if factor is not None:
                s1 = step_s + exposed * (factor - 1.0)
        kinds.append(kind)
        slowed.append(s1)

    C, R = pol.checkpoint_interval_s, pol.restart_s
    n = len(t_all)
    lost_work = np.zeros(n)
    downtime = np.zeros(n)
    degraded = np.zeros(n)
    step_col = np.full(n, step_s)
    cons = [""] * n
    resume_at = 0.0  # the job runs from resume_at on (down before it)
    down_total = 0.0
    for j in range(n):
        t = float(t_all[j])
        i = int(w_all[j])
        kind = kinds[i]
        cons[j] = kind
        if kind == "restart":
            end_new = min(t + R, H)
            if t >= resume_at:
                lost_work[j] = math.fmod(t - resume_at, C)
                downtime[j] = end_new - t
            else:  # down already: the restart begins again
                downtime[j] = max(0.0, end_new - min(resume_at, H))
            down_total += downtime[j]
            resume_at = t + R
        elif kind in ("reroute", "fallback"):
            s1 = slowed[i]
            step_col[j] = s1
            repair = r.repair_s.get(streams[i].part, 0.0)
            degraded[j] = (min(t + repair, H) - t) * (1.0 - step_s / s1)
    running = H - down_total
    checkpoint_s = running * pol.checkpoint_write_s / C
    lost = lost_work + downtime + degraded
    lost_total = float(lost.sum()) + checkpoint_s
    goodput = float(max(0.0, (H - lost_total) / H))

    part_col = [streams[int(i)].part for i in w_all]
    failures = pa.table({
        "time_s": pa.array(t_all, pa.float64()),
        "part": pa.array(part_col, pa.string()),
        "location": pa.array([streams[int(i)].location for i in w_all], pa.string()),
        "unit": pa.array(u_all, pa.int64()),
        "consequence": pa.array(cons, pa.string()),
        "lost_s": pa.array(lost, pa.float64()),
        "lost_work_s": pa.array(lost_work, pa.float64()),
        "downtime_s": pa.array(downtime, pa.float64()),
        "degraded_s": pa.array(degraded, pa.float64()),
        "step_s": pa.array(step_col, pa.float64()),
    })
    n_restarts = sum(1 for c in cons if c == "restart")
    rows: list[tuple[str, float, str]] = [
        ("horizon", H, "s"), ("step", step_s, "s"), ("exposed scale-out communication per step", exposed, "s"),
        ("failures", float(n), "count"), ("restarts", float(n_restarts), "count"),
        ("degradations (reroute or fallback)", float(sum(1 for c in cons if c in ("reroute", "fallback"))), "count"),
        ("lost", lost_total, "s"), ("lost work (since last checkpoint)", float(lost_work.sum()), "s"),
        ("restart downtime", float(downtime.sum()), "s"), ("slowed steps", float(degraded.sum()), "s"),
        ("checkpoint writes", checkpoint_s, "s"), ("goodput", goodput, "fraction"),
    ]
    by_part: dict[str, float] = {p: 0.0 for p in PARTS if any(x.part == p for x in streams)}
    for p, v in zip(part_col, lost):
        by_part[p] += float(v)
    rows += [(f"lost, {p}", v, "s") for p, v in by_part.items()]
    rows.append(("lost, checkpoint", checkpoint_s, "s"))
    summary = pa.table({
        "quantity": pa.array([q for q, _, _ in rows], pa.string()),
        "value": pa.array([v for _, v, _ in rows], pa.float64()),
        "unit": pa.array([u for _, _, u in rows], pa.string()),
    })
    return ReliabilityResult(failures, summary, goodput, n_restarts, lost_total, H)


# ------------------------------------------------------------------------------------------
# Pluggable against co-packaged optics
# ------------------------------------------------------------------------------------------

_NETWORK_PARTS = ("nic", "switch", "optics", "cpo_port", "link")
_OPTICS_PARTS = ("optics", "cpo_port")


def compare_optics(
    pluggable: Any, co_packaged: Any, step: Any, *, horizon_s: float, seeds: int = 8, policy: Policy | None = None,
    rates: Any = None, exposed_network_s: float | None = None,
) -> pa.Table:
    """The same job on two fabrics that differ in their switches' optics, pluggable and
    co-packaged (e.g. ``scale_out="quantum-x800"`` against ``"quantum-x-photonics"``):
    ``metric, pluggable, co_packaged, ratio`` (pluggable / co-packaged, the "x times more
    resilient" figure) and ``note``. Failure rates are the closed form; lost time and goodput
    the mean over ``seeds`` seeds (0, 1, ...) of :func:`simulate`.

    Example::

        from fabricsim import reliability
        a = fs.cluster(domain="nvl72", n_domains=16, scale_out="quantum-x800")
        b = fs.cluster(domain="nvl72", n_domains=16, scale_out="quantum-x-photonics")
        t = reliability.compare_optics(a, b, 7.5, horizon_s=30 * 86400, seeds=2)
        print(t)
    """
    for name, fab, want in (("pluggable", pluggable, "pluggable"), ("co_packaged", co_packaged, "co-packaged")):
        sw = fab._parts.get("switch") if hasattr(fab, "_parts") else None
        if sw is None or sw["optics"] != want:
            got = "no scale-out switch" if sw is None else f"{sw.name!r} with {sw['optics']} optics"
            raise InvalidArgumentError(f"{name} must be a fabric whose switches have {want} optics, got {got}")
    n_seeds = int(seeds)
    if isinstance(seeds, bool) or n_seeds < 1:
        raise InvalidArgumentError(f"seeds must be a whole number >= 1, got {shown(seeds)}")
    H = _positive("horizon_s", horizon_s, "seconds")
    r = _rates_of(rates)
    per_h = 1.0 / (H / _HOUR_S)

    def expected(fab: Any) -> pa.Table:
        return expected_failures(fab, horizon_s=H, rates=r, gpus=_job_gpus(step))

    def total(t: pa.Table, parts: Iterable[str], where: str | None = None) -> float:
        parts = tuple(parts)
        return float(sum(e for p, loc, e in zip(t.column("part").to_pylist(), t.column("location").to_pylist(),
                                                t.column("expected").to_pylist())
                         if p in parts and (where is None or loc == where)))

    def switch_side_optics(t: pa.Table) -> float:
        return float(sum(e for p, loc, e, in zip(t.column("part").to_pylist(), t.column("location").to_pylist(),
                                                 t.column("expected").to_pylist())
                         if p == "cpo_port" or (p == "optics" and loc != "nic")))

    e_p, e_c = expected(pluggable), expected(co_packaged)
    sims = {}
    for name, fab in (("pluggable", pluggable), ("co_packaged", co_packaged)):
        res = [simulate(fab, step, horizon_s=H, seed=k, policy=policy, rates=r, exposed_network_s=exposed_network_s)
               for k in range(n_seeds)]
        net_lost = [sum(v for p, v in x.lost_by_cause().items() if p in _NETWORK_PARTS) for x in res]
        net_restarts = [sum(1 for p, c in zip(x.failures.column("part").to_pylist(),
                                              x.failures.column("consequence").to_pylist())
                            if p in _NETWORK_PARTS and c == "restart") for x in res]
        sims[name] = (float(np.mean(net_lost)) / _HOUR_S, float(np.mean([x.lost_s for x in res])) / _HOUR_S,
                      float(np.mean([x.goodput for x in res])), float(np.mean(net_restarts)) * per_h)
    ppc = float(_DATA["optics_mechanisms"]["reference_ports_per_cage"])
    nic_side = total(e_p, ["optics"], "nic")
    rows: list[tuple[str, float, float, str]] = [
        ("optics failures per switch port per hour", r.rate_per_hour("optics") / ppc, r.rate_per_hour("cpo_port"),
         "the mechanism: transceiver rate / ports per cage, against that times sum(share x CPO factor)"),
        ("switch-side optics failures per hour", switch_side_optics(e_p) * per_h, switch_side_optics(e_c) * per_h,
         "the switches' own optics over the fabric"),
        ("optics failures per hour, NIC side included", total(e_p, _OPTICS_PARTS) * per_h,
         total(e_c, _OPTICS_PARTS) * per_h, "NICs keep pluggable transceivers on both fabrics"),
        ("upper bound: CPO switch optics that never fail", total(e_p, _OPTICS_PARTS) * per_h, nic_side * per_h,
         "the most fewer optics failures CPO switches can give while the NICs' optics stay pluggable"),
        ("network failures per hour (NIC, switch, optics, link)", total(e_p, _NETWORK_PARTS) * per_h,
         total(e_c, _NETWORK_PARTS) * per_h, "closed form"),
        ("job restarts caused by the network per hour", sims["pluggable"][3], sims["co_packaged"][3],
         f"mean of {n_seeds} seeds"),
        ("hours lost to the network", sims["pluggable"][0], sims["co_packaged"][0], f"mean of {n_seeds} seeds"),
        ("all failures per hour", total(e_p, PARTS) * per_h, total(e_c, PARTS) * per_h, "closed form"),
        ("hours lost, all causes", sims["pluggable"][1], sims["co_packaged"][1], f"mean of {n_seeds} seeds"),
        ("goodput", sims["pluggable"][2], sims["co_packaged"][2], f"mean of {n_seeds} seeds; ratio is co-packaged / pluggable"),
    ]

    def ratio(metric: str, a: float, b: float) -> float:
        if metric == "goodput":
            return b / a if a > 0 else math.nan
        return a / b if b > 0 else (math.inf if a > 0 else math.nan)

    return pa.table({
        "metric": pa.array([m for m, _, _, _ in rows], pa.string()),
        "pluggable": pa.array([a for _, a, _, _ in rows], pa.float64()),
        "co_packaged": pa.array([b for _, _, b, _ in rows], pa.float64()),
        "ratio": pa.array([ratio(m, a, b) for m, a, b, _ in rows], pa.float64()),
        "note": pa.array([nt for _, _, _, nt in rows], pa.string()),
    })
