"""Catalog parts: the kinds of part (GPUs, NVSwitch chips, NICs, switches, optics, PCIe
links, efficiency factors), the fields and units of each kind, and how an entry is checked and
read into a read-only :class:`Part`. :mod:`fabricsim.catalog` holds the parts themselves."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from .. import units
from .._checks import MAX_CAPACITY_BPS, did_you_mean, finite, parsed, real, shown
from ..exceptions import InvalidArgumentError

__all__ = ["Part", "kinds"]


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    """How one field of a kind is checked and stored."""

    name: str
    # "int", "rate" (_Bps), "duration" (_s), "watts", "usd" (a price in US dollars, >= 0),
    # "fraction", "bool", "enum", "protocols", "ref", "text"
    type: str
    choices: tuple[str, ...] = ()
    ref_kind: str = ""
    positive: bool = True  # for watts: > 0 (True) or >= 0 (False)
    nullable: bool = False
    optional: bool = False  # may be left out (then None); implies nullable

    @property
    def sourced(self) -> bool:
        """Numeric and boolean fields must carry a source."""
        return self.type in ("int", "rate", "duration", "watts", "fraction", "bool", "flops", "bytes", "usd")


_PROTOCOLS = ("infiniband", "ethernet")

_KINDS: dict[str, tuple[_Field, ...]] = {
    "gpu": (
        _Field("nvlink_generation", "int"),
        _Field("nvlink_links", "int"),
        _Field("nvlink_link_Bps", "rate"),
        _Field("nvlink_efficiency", "ref", ref_kind="efficiency"),
        _Field("nic", "ref", ref_kind="nic"),
        _Field("pcie_Bps", "rate"),
        _Field("arch", "enum", choices=("hopper", "blackwell")),
        _Field("bf16_dense_flop_per_s", "flops", nullable=True, optional=True),
        _Field("fp8_dense_flop_per_s", "flops", nullable=True, optional=True),
        _Field("fp4_dense_flop_per_s", "flops", nullable=True, optional=True),
        _Field("sms", "int", nullable=True, optional=True),
        _Field("hbm_bytes", "bytes", nullable=True, optional=True),
        _Field("hbm_Bps", "rate", nullable=True, optional=True),
        _Field("watts", "watts", nullable=True, optional=True),
        _Field("usd", "usd", nullable=True, optional=True),
    ),
    "nvswitch": (
        _Field("nvlink_generation", "int"),
        _Field("ports", "int"),
        _Field("port_Bps", "rate"),
        _Field("sharp", "bool"),
        _Field("latency_s", "duration"),
        _Field("watts", "watts", nullable=True, optional=True),
        _Field("usd", "usd", nullable=True, optional=True),
    ),
    "nic": (
        _Field("rate_Bps", "rate"),
        _Field("max_planes", "int"),
        _Field("ports_per_cage", "int"),
        _Field("ethernet_port_Bps", "rate", nullable=True),
        _Field("host_Bps", "rate"),
        _Field("protocols", "protocols", choices=_PROTOCOLS),
        _Field("latency_s", "duration"),
        # The scale-out switch of the NIC's generation: fabricsim.cluster's default.
        _Field("switch", "ref", ref_kind="switch", nullable=True, optional=True),
        _Field("watts", "watts", nullable=True, optional=True),
        _Field("watts_max", "watts", nullable=True, optional=True),
        _Field("optics_watts_per_cage", "watts", positive=False, nullable=True, optional=True),
        _Field("usd", "usd", nullable=True, optional=True),
        _Field("optics_usd_per_cage", "usd", nullable=True, optional=True),
    ),
    "switch": (
        _Field("protocol", "enum", choices=_PROTOCOLS),
        _Field("ports", "int"),
        _Field("port_Bps", "rate"),
        _Field("lane_Bps", "rate"),
        _Field("optics", "enum", choices=("pluggable", "co-packaged")),
        _Field("ports_per_cage", "int", nullable=True),
        _Field("optics_watts_per_port", "watts", positive=False),
        _Field("system_watts", "watts", nullable=True),
        _Field("system_watts_max", "watts", nullable=True, optional=True),
        _Field("latency_s", "duration"),
        _Field("sharp", "bool"),
        _Field("adaptive_routing", "bool"),
        _Field("system_usd", "usd", nullable=True, optional=True),
        _Field("optics_usd_per_port", "usd", nullable=True, optional=True),
    ),
    "optic": (
        _Field("rate_Bps", "rate"),
        _Field("watts", "watts"),
        _Field("form", "enum", choices=("pluggable", "co-packaged")),
        _Field("usd", "usd", nullable=True, optional=True),
    ),
    "efficiency": (
        _Field("value", "fraction"),
        _Field("applies_to", "text"),
    ),
    "pcie": (_Field("rate_Bps", "rate"),),
}

_ARROW_TYPE = {
    "int": pa.int64(),
    "rate": pa.float64(),
    "duration": pa.float64(),
    "watts": pa.float64(),
    "fraction": pa.float64(),
    "bool": pa.bool_(),
    "enum": pa.string(),
    "protocols": pa.list_(pa.string()),
    "ref": pa.string(),
    "text": pa.string(),
    "flops": pa.float64(),
    "bytes": pa.float64(),
    "usd": pa.float64(),
}

_NAME = re.compile(r"^[a-z0-9][a-z0-9._+-]*$")
_SHIPPED_TAG = re.compile(r"^(https?://|\[2nd\] |\[derived\] |\[assumed\] |\[no source\] )")


def kinds() -> dict[str, tuple[str, ...]]:
    """Each kind of part and the names of its fields, in table column order.

    Example::

        kinds = fs.catalog.kinds()
        list(kinds)[:3], kinds["nic"][:2]   # (['gpu', 'nvswitch', 'nic'], ('rate_Bps', 'max_planes'))
    """
    return {kind: tuple(f.name for f in fields) for kind, fields in _KINDS.items()}


# --------------------------------------------------------------------------------------------
# Part
# --------------------------------------------------------------------------------------------


class Part(Mapping[str, Any]):
    """One catalog entry, read-only.

    Fields are reachable as attributes (``part("h100").nvlink_links``) and as a mapping
    (``part("h100")["nvlink_links"]``, ``dict(part("h100"))``); the mapping holds the kind's
    fields only. Also: ``.name`` (canonical, lowercase), ``.kind``, ``.description``,
    ``.sources`` (field -> source text), ``.origin`` ("shipped" or "user").
    Values are SI: ``_Bps`` bytes/s per direction, ``_s`` seconds, ``_watts`` watts.

    Example::

        h100 = fs.catalog.part("h100")
        h100.kind, h100.nvlink_links, h100["nvlink_links"]   # ('gpu', 18, 18)
        h100.sources["nvlink_links"]                          # where the figure comes from
    """

    __slots__ = ("_name", "_kind", "_fields", "_sources", "_description", "_origin")
    _name: str
    _kind: str
    _fields: Mapping[str, Any]
    _sources: Mapping[str, str]
    _description: str
    _origin: str

    def __init__(
        self,
        name: str,
        kind: str,
        fields: Mapping[str, Any],
        sources: Mapping[str, str],
        description: str = "",
        origin: str = "user",
    ) -> None:
        # Parts are only built from validated values (see _build); this just freezes them.
        set_ = object.__setattr__
        set_(self, "_name", name)
        set_(self, "_kind", kind)
        set_(self, "_fields", MappingProxyType(dict(fields)))
        set_(self, "_sources", MappingProxyType(dict(sources)))
        set_(self, "_description", description)
        set_(self, "_origin", origin)

    @property
    def name(self) -> str:
        """Canonical lowercase name."""
        return self._name

    @property
    def kind(self) -> str:
        """One of :func:`kinds`."""
        return self._kind

    @property
    def description(self) -> str:
        """Free text."""
        return self._description

    @property
    def sources(self) -> Mapping[str, str]:
        """Field name -> where its figure comes from."""
        return self._sources

    @property
    def origin(self) -> str:
        """``"shipped"`` (in the package's data file) or ``"user"`` (added in this process)."""
        return self._origin

    def __getattr__(self, attr: str) -> Any:
        # Only called when normal lookup fails, so properties and methods win. Private names
        # never map to fields (and must not recurse before __init__ has run, e.g. in copy).
        if attr.startswith("_"):
            raise AttributeError(attr)
        try:
            return self._fields[attr]
        except KeyError:
            raise AttributeError(
                f"{self._kind} part {self._name!r} has no field {attr!r}; "
                f"its fields are {', '.join(self._fields)}"
            ) from None

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError(f"catalog parts are read-only (tried to set {attr!r} on {self._name!r})")

    def __delattr__(self, attr: str) -> None:
        raise AttributeError(f"catalog parts are read-only (tried to delete {attr!r} on {self._name!r})")

    def __getitem__(self, key: str) -> Any:
        try:
            return self._fields[key]
        except KeyError:
            raise KeyError(
                f"{self._kind} part {self._name!r} has no field {key!r}; "
                f"its fields are {', '.join(self._fields)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._fields))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Part):
            return NotImplemented
        return (self._name, self._kind, dict(self._fields), dict(self._sources), self._description) == (
            other._name,
            other._kind,
            dict(other._fields),
            dict(other._sources),
            other._description,
        )

    def __hash__(self) -> int:
        return hash((self._name, self._kind, tuple(self._fields.items())))

    def __reduce__(self) -> tuple[Any, ...]:
        state = (self._name, self._kind, dict(self._fields), dict(self._sources))
        return (Part, (*state, self._description, self._origin))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_show(k, v)}" for k, v in self._fields.items())
        return f"Part({self._name!r}, kind={self._kind!r}, {shown})"

    def to_dict(self) -> dict[str, Any]:
        """The entry in the data file's format (``kind``, ``description``, fields, ``sources``),
        so that ``load_parts`` can read it back.

        Example::

            d = fs.catalog.part("cx7").to_dict()
            d["kind"], d["rate_Bps"]   # ('nic', 50000000000.0): 400 Gb/s
        """
        out: dict[str, Any] = {"kind": self._kind, "description": self._description}
        for key, value in self._fields.items():
            out[key] = list(value) if isinstance(value, tuple) else value
        out["sources"] = dict(self._sources)
        return out


def _show(key: str, value: Any) -> str:
    """A field value as the repr shows it: SI number plus a human unit for rates and times."""
    if isinstance(value, float) and not isinstance(value, bool):
        if key.endswith("_Bps"):
            return f"{value:g} ({units.format_rate(value, bits=False)})"
        if key.endswith("_flop_per_s"):  # a rate of operations, not a time
            return f"{value:g} ({value / 1e12:.4g} TFLOP/s)"
        if key.endswith("_s"):
            return f"{value:g} ({units.format_duration(value)})"
        if key.endswith("_bytes"):
            return f"{value:g} ({units.format_bytes(value)})"
        return f"{value:g}"
    return repr(value)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _bad(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(message)


def _number(where: str, value: Any) -> float:
    """A finite real number (not a bool) as float."""
    out = real(value)
    if out is None:
        raise _bad(f"{where} must be a number (within the float range), got {type(value).__name__} {shown(value)}")
    if not math.isfinite(out):
        raise _bad(f"{where} must be finite, got {value!r}")
    return out


def _check_value(where: str, spec: _Field, value: Any) -> Any:
    """Validate and normalise one field value; ``where`` names it in messages."""
    if value is None:
        if spec.nullable:
            return None
        raise _bad(f"{where} is required and may not be None")
    t = spec.type
    if t == "int":
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _bad(f"{where} must be a whole number >= 1, got {type(value).__name__} {value!r}")
        if isinstance(value, numbers.Integral):
            count = int(value)
        elif (whole := finite(value)) is not None and whole.is_integer():
            count = int(whole)
        else:
            raise _bad(f"{where} must be a whole number >= 1, got {value!r}")
        # Counts of ports and links, kept as int64 in parts() and used as floats.
        if not 1 <= count < 2**32:
            raise _bad(f"{where} must be a whole number in [1, 2**32), got {shown(value)}")
        return count
    if t == "rate":
        out = _number(where, parsed(where, units.bandwidth_Bps, value))
        if out <= 0:
            raise _bad(f"{where} must be a rate > 0 bytes/s, got {value!r}")
        if out > MAX_CAPACITY_BPS:  # the links built from it would be refused, far from here
            raise _bad(f"{where} must be a rate of at most {MAX_CAPACITY_BPS:g} bytes/s (the most a link may "
                       f"carry in fabricsim), got {value!r}")
        return out
    if t == "duration":
        out = _number(where, parsed(where, units.duration_s, value))
        if out < 0:
            raise _bad(f"{where} must be a duration >= 0 s, got {value!r}")
        return out
    if t == "watts":
        out = _number(where, value)
        if out < 0 or (spec.positive and out == 0):
            bound = "> 0" if spec.positive else ">= 0"
            raise _bad(f"{where} must be a power {bound} W, got {value!r}")
        return out
    if t == "usd":
        out = _number(where, value)
        if out < 0:
            raise _bad(f"{where} must be a price >= 0 USD, got {value!r}")
        return out
    if t == "fraction":
        out = _number(where, value)
        if not 0.0 < out <= 1.0:
            raise _bad(f"{where} must be an efficiency in (0, 1], got {value!r}")
        return out
    if t == "flops":
        out = _number(where, value)
        if out <= 0:
            raise _bad(f"{where} must be a rate > 0 FLOP/s, got {value!r}")
        return out
    if t == "bytes":
        out = _number(where, parsed(where, units.size_bytes, value))
        if out <= 0:
            raise _bad(f"{where} must be a size > 0 bytes, got {value!r}")
        return out
    if t == "bool":
        if not isinstance(value, bool):
            raise _bad(f"{where} must be True or False, got {type(value).__name__} {value!r}")
        return value
    if t == "enum":
        if not isinstance(value, str) or value.strip().lower() not in spec.choices:
            raise _bad(f"{where} must be one of {', '.join(map(repr, spec.choices))}, got {value!r}")
        return value.strip().lower()
    if t == "protocols":
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
            raise _bad(
                f"{where} must be a non-empty list drawn from {', '.join(map(repr, spec.choices))}, "
                f"got {value!r}"
            )
        out_list = []
        for item in value:
            if not isinstance(item, str) or item.strip().lower() not in spec.choices:
                raise _bad(f"{where} has {item!r}; allowed: {', '.join(map(repr, spec.choices))}")
            if item.strip().lower() in out_list:
                raise _bad(f"{where} lists {item!r} twice")
            out_list.append(item.strip().lower())
        return tuple(out_list)
    if t in ("ref", "text"):
        if not isinstance(value, str) or not value.strip():
            raise _bad(f"{where} must be a non-empty string, got {value!r}")
        return value.strip().lower() if t == "ref" else value.strip()
    raise AssertionError(f"unhandled field type {t}")  # pragma: no cover


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise _bad(f"part name must be a string, got {type(name).__name__} {name!r}")
    key = name.strip().lower()
    if not _NAME.match(key):
        raise _bad(
            f"part name {name!r} is not valid: use letters, digits and . _ + - , "
            "starting with a letter or digit"
        )
    return key


def _check_kind(kind: Any, where: str) -> str:
    if not isinstance(kind, str) or kind.strip().lower() not in _KINDS:
        hint = did_you_mean(kind, tuple(_KINDS)) if isinstance(kind, str) else ""
        raise _bad(f"{where}: unknown kind {kind!r}{hint}; kinds are {', '.join(_KINDS)}")
    return kind.strip().lower()


def _build(
    name: str,
    kind: str,
    raw_fields: Mapping[str, Any],
    source: str | Mapping[str, str],
    description: Any,
    *,
    origin: str,
) -> Part:
    """Check one entry's fields and sources (not its references) and freeze it."""
    where = f"{kind} part {name!r}"
    specs = {f.name: f for f in _KINDS[kind]}
    unknown = [k for k in raw_fields if k not in specs]
    if unknown:
        hints = "".join(did_you_mean(k, tuple(specs)) for k in unknown)
        raise _bad(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))}{hints}; "
            f"a {kind} has {', '.join(specs)}"
        )
    missing = [k for k, spec in specs.items() if k not in raw_fields and not spec.optional]
    if missing:
        raise _bad(f"{where}: missing field(s) {', '.join(map(repr, missing))}")
    fields = {k: _check_value(f"{where}: {k}", spec, raw_fields.get(k)) for k, spec in specs.items()}

    if kind == "switch":
        if fields["optics"] == "pluggable" and fields["ports_per_cage"] is None:
            raise _bad(f"{where}: a switch with pluggable optics needs ports_per_cage, got None")
        # Lanes per port first: ports * port_Bps overflowed to inf for 2 ports of 1e308 B/s,
        # and round(inf) raised a bare OverflowError. Still inf for lanes of 1e-300 B/s.
        radix = fields["ports"] * (fields["port_Bps"] / fields["lane_Bps"])
        if (fields["lane_Bps"] > fields["port_Bps"] or not math.isfinite(radix)
                or abs(radix - round(radix)) > 1e-9 * radix):
            raise _bad(
                f"{where}: lane_Bps {fields['lane_Bps']!r} must divide port_Bps "
                f"{fields['port_Bps']!r} into a whole number of lanes (ports * port_Bps / lane_Bps "
                f"= {radix:g})"
            )

    if description is None:
        description = ""
    if not isinstance(description, str):
        raise _bad(f"{where}: description must be a string, got {type(description).__name__}")

    # An optional field left out (or None) of a user part needs no source; a shipped one
    # still says what was searched ('[no source]').
    sourced = [k for k, spec in specs.items() if spec.sourced
               and not (spec.optional and fields[k] is None and (origin != "shipped" or k not in raw_fields))]
    if isinstance(source, str):
        if not source.strip():
            raise _bad(f"{where}: source must be a non-empty string or a mapping field -> source")
        sources = {k: source.strip() for k in sourced}
    elif isinstance(source, Mapping):
        extra = [k for k in source if k not in specs]
        if extra:
            raise _bad(f"{where}: sources name unknown field(s) {', '.join(map(repr, extra))}")
        for k, text in source.items():
            if not isinstance(text, str) or not text.strip():
                raise _bad(f"{where}: source of {k!r} must be a non-empty string, got {text!r}")
        uncovered = [k for k in sourced if k not in source]
        if uncovered:
            raise _bad(f"{where}: no source for field(s) {', '.join(map(repr, uncovered))}")
        sources = {k: source[k].strip() for k in specs if k in source}
    else:
        raise _bad(
            f"{where}: source must be a string or a mapping field -> source, got "
            f"{type(source).__name__}"
        )

    if origin == "shipped":
        for k, text in sources.items():
            if not _SHIPPED_TAG.match(text):
                raise _bad(
                    f"{where}: source of {k!r} must be a URL or start with [2nd], [derived], "
                    f"[assumed] or [no source]; got {text!r}"
                )
            if (fields[k] is None) != text.startswith("[no source] "):
                raise _bad(f"{where}: {k!r} is {fields[k]!r}; '[no source]' is only for null values")
    return Part(name, kind, fields, sources, description.strip(), origin)


def _check_refs(
    candidates: Mapping[str, Part],
    resolve: Callable[[str], tuple[str, Part] | None],
    pool: Mapping[str, Part],
) -> None:
    """Every ``ref`` field of ``candidates`` must name a part of the right kind.

    ``resolve(name)`` returns (canonical name, part) or None; ``pool`` is the other parts
    visible, for the list of alternatives in the message. References given as aliases are
    rewritten to the canonical name.
    """
    for p in candidates.values():
        for spec in _KINDS[p.kind]:
            if spec.type != "ref" or (spec.nullable and p[spec.name] is None):
                continue
            target = p[spec.name]
            found = resolve(target)
            if found is None or found[1].kind != spec.ref_kind:
                of_kind = sorted(
                    {n for n, q in {**pool, **candidates}.items() if q.kind == spec.ref_kind}
                )
                what = "is not a known" if found is None else f"is a {found[1].kind}, not a"
                raise _bad(
                    f"{p.kind} part {p.name!r}: {spec.name} {target!r} {what} "
                    f"{spec.ref_kind} part{did_you_mean(target, of_kind)}; {spec.ref_kind} parts: "
                    f"{', '.join(of_kind)}"
                )
            if found[0] != target:
                fields = dict(p)
                fields[spec.name] = found[0]
                object.__setattr__(p, "_fields", MappingProxyType(fields))


def _referrers(name: str, among: Mapping[str, Part]) -> list[str]:
    """Parts in ``among`` whose reference fields name ``name``."""
    return sorted(
        n
        for n, p in among.items()
        if any(spec.type == "ref" and p[spec.name] == name for spec in _KINDS[p.kind])
    )


def _parse_document(doc: Any, where: str, *, origin: str) -> tuple[dict[str, Part], dict[str, str]]:
    """Parts and aliases of a catalog document (the data file's format), references unchecked."""
    if not isinstance(doc, Mapping):
        raise _bad(f"{where}: expected a JSON object with 'parts' (and optionally 'aliases')")
    unknown = [k for k in doc if k not in ("version", "about", "aliases", "parts")]
    if unknown:
        raise _bad(f"{where}: unknown top-level key(s) {', '.join(map(repr, unknown))}")
    entries = doc.get("parts")
    if not isinstance(entries, Mapping):
        raise _bad(f"{where}: 'parts' must be an object name -> entry")
    found: dict[str, Part] = {}
    for raw_name, entry in entries.items():
        name = _check_name(raw_name)
        if origin == "shipped" and name != raw_name:
            raise _bad(f"{where}: part name {raw_name!r} must be lowercase and trimmed")
        if name in found:
            raise _bad(f"{where}: part {name!r} appears twice")
        if not isinstance(entry, Mapping):
            raise _bad(f"{where}: entry {raw_name!r} must be an object")
        kind = _check_kind(entry.get("kind"), f"{where}: part {name!r}")
        raw_fields = {k: v for k, v in entry.items() if k not in ("kind", "description", "sources")}
        if "sources" not in entry:
            raise _bad(f"{where}: part {name!r} has no 'sources'")
        found[name] = _build(
            name, kind, raw_fields, entry["sources"], entry.get("description", ""), origin=origin
        )
    aliases_raw = doc.get("aliases", {})
    if not isinstance(aliases_raw, Mapping):
        raise _bad(f"{where}: 'aliases' must be an object alias -> part name")
    aliases: dict[str, str] = {}
    for alias, target in aliases_raw.items():
        key = _check_name(alias)
        if not isinstance(target, str):
            raise _bad(f"{where}: alias {alias!r} must map to a part name, got {target!r}")
        if key in found:
            raise _bad(f"{where}: alias {alias!r} is also a part name")
        aliases[key] = target.strip().lower()
    return found, aliases
