"""Failure rates per part (``data/failure_rates.json``, :func:`failure_rates`): failures per
unit per hour, each derived from the interruptions of a published training run, and a
co-packaged switch port's rate from the pluggable one by named mechanism factors (the
reliability package's docstring, Rates, says how)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterable, Mapping

import pyarrow as pa

from ..._checks import positive, shown
from ...exceptions import InvalidArgumentError

__all__ = ["PARTS", "FailureRates", "failure_rates", "cpo_port_factor"]

#: Parts that fail, in the order their failures are drawn.
PARTS = ("gpu", "host", "host_maintenance", "software", "unknown", "nic", "switch", "optics", "cpo_port", "link")


_HOUR_S = 3600.0


def _load() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("data/failure_rates.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


_DATA = _load()


def _mapping(name: str, value: Any) -> dict[Any, Any]:
    """``value`` (None: nothing) as a dict, if it is a mapping."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{name} must be a mapping of names to numbers, got {type(value).__name__} {shown(value)}")
    return dict(value)


def _part_name(what: str, name: Any, known: Iterable[str]) -> str:
    known = tuple(known)
    if not isinstance(name, str) or name not in known:
        raise InvalidArgumentError(f"{what}: unknown part {name!r}; the parts are {', '.join(known)}")
    return name


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
        for k, v in _mapping("rates_per_hour", self.rates_per_hour).items():
            _part_name("rates_per_hour", k, PARTS)
            rates[k] = positive(f"failure rate of {k!r}", v, "failures per unit per hour", zero=True)
        missing = [p for p in PARTS if p != "cpo_port" and p not in rates]
        if missing:
            raise InvalidArgumentError(f"rates_per_hour lacks {missing}; start from reliability.failure_rates().replace(...)")
        repair = {}
        for k, v in _mapping("repair_s", self.repair_s).items():
            _part_name("repair_s", k, PARTS)
            repair[k] = positive(f"repair time of {k!r}", v, "seconds", zero=True)
        shares = {k: positive(f"optics share {k!r}", v, "a fraction", zero=True) for k, v in _mapping("optics_shares", self.optics_shares).items()}
        if shares and abs(sum(shares.values()) - 1.0) > 1e-6:
            raise InvalidArgumentError(f"optics_shares must add up to 1, got {sum(shares.values())!r} ({shares})")
        factors = {k: positive(f"cpo factor {k!r}", v, "a multiplier", zero=True) for k, v in _mapping("cpo_factors", self.cpo_factors).items()}
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
        changed = {name: _mapping(name, value) for name, value in (
            ("rates_per_hour", rates_per_hour), ("repair_s", repair_s), ("optics_shares", optics_shares),
            ("cpo_factors", cpo_factors))}
        derivations = dict(self.derivations)
        for k in changed["rates_per_hour"]:
            derivations[str(k)] = "given"
        return FailureRates(
            {**self.rates_per_hour, **changed["rates_per_hour"]}, {**self.repair_s, **changed["repair_s"]},
            {**self.optics_shares, **changed["optics_shares"]}, {**self.cpo_factors, **changed["cpo_factors"]},
            derivations,
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
    r = _rates_of(rates)
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
