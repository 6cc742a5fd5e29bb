"""The hardware catalog: GPUs, NVSwitch chips, NICs, switches, optics, PCIe links and the named
efficiency factors that presets are built from, each figure with its source.

The shipped catalog is one data file inside the package, ``fabricsim/fabrics/data/catalog.json``. It is
validated once, when this module is imported, so a broken file fails loudly. Users can add their
own parts for the running process (:func:`add_part`, :func:`load_parts`) without editing the
package; they never overwrite a shipped part unless asked to (``replace=True``).

Units are SI and named in each field: ``_Bps`` is bytes per second *per direction*, ``_s`` is
seconds, ``_watts`` is watts, ``_usd`` is US dollars. :func:`add_part` also accepts unit strings for ``_Bps`` and ``_s``
fields ("400Gb/s", "150ns"), parsed by :mod:`fabricsim.units`.

Kinds and their fields (required unless marked optional; ``system_watts``, a switch's
``ports_per_cage`` and a NIC's ``ethernet_port_Bps`` may be ``None``). Power and price fields
are optional and ``None`` when unknown: ``watts`` is a GPU's TDP and a switch chip's
maximum; NICs and switch systems have a typical (``watts``, ``system_watts``) and a maximum
(``watts_max``, ``system_watts_max``), without transceivers; ``usd`` is a price, public for
few parts, so most are ``None``. :mod:`fabricsim.power` adds them up per fabric.

``gpu``
    ``nvlink_generation`` (int), ``nvlink_links`` (int), ``nvlink_link_Bps`` (line rate per link
    per direction), ``nvlink_efficiency`` (name of an ``efficiency`` part), ``nic`` (name of the
    default ``nic`` part), ``pcie_Bps`` (host PCIe per direction), ``arch`` ("hopper" or
    "blackwell"); optional: the dense ``bf16_dense_flop_per_s``, ``fp8_dense_flop_per_s``,
    ``hbm_bytes``, ``hbm_Bps``, and ``watts``, ``usd``.
``nvswitch``
    ``nvlink_generation`` (int), ``ports`` (int), ``port_Bps`` (per direction), ``sharp`` (bool),
    ``latency_s``; optional ``watts`` (per chip, with its share of the tray or board),
    ``usd``.
``nic``
    ``rate_Bps``, ``max_planes`` (int: how many independent planes the port splits into),
    ``ports_per_cage`` (int: how many of those plane ports leave through one transceiver cage),
    ``ethernet_port_Bps`` (fastest Ethernet port, so the fewest planes Ethernet needs;
    ``None`` if the NIC runs Ethernet at ``rate_Bps`` on one port or not at all), ``host_Bps`` (PCIe per direction), ``protocols`` (non-empty subset of "infiniband",
    "ethernet"), ``latency_s``; optional ``switch`` (the scale-out switch of its generation,
    :func:`fabricsim.cluster`'s default), ``watts`` (adapter without transceiver, its
    datasheet's typical power) and ``watts_max`` (its maximum), ``optics_watts_per_cage`` (the
    transceiver plugged into each of its cages), ``usd``, ``optics_usd_per_cage``.
``switch``
    ``protocol`` ("infiniband" or "ethernet"), ``ports`` (native ports), ``port_Bps``,
    ``lane_Bps`` (smallest breakout port speed; radix at breakout is
    ``ports * port_Bps / lane_Bps``, which must be a whole number), ``optics`` ("pluggable" or
    "co-packaged"), ``ports_per_cage`` (native ports per pluggable transceiver cage, e.g. 2 for
    twin-port OSFP; ``None`` for co-packaged optics), ``optics_watts_per_port`` (per native
    port), ``system_watts`` (switch without optics, its datasheet's typical power with passive
    cables; ``None`` if unknown), ``latency_s``, ``sharp`` (bool), ``adaptive_routing`` (bool);
    optional ``system_watts_max`` (its maximum, without optics), ``system_usd`` (switch without
    optics), ``optics_usd_per_port`` (per native port).
``optic``
    ``rate_Bps``, ``watts``, ``form`` ("pluggable" or "co-packaged"); optional ``usd``.
``efficiency``
    ``value`` (in (0, 1]), ``applies_to`` (free text, e.g. "nvlink4", "infiniband").
``pcie``
    ``rate_Bps`` (per direction).

Every numeric and boolean field carries a source. In the shipped file a source is a URL, or is
tagged ``[2nd] <url>`` (secondary source), ``[derived] <arithmetic>``, ``[assumed] <why>``, or
``[no source] <what was searched>`` (only for a ``None`` value).

Names are lowercase and looked up case-insensitively; aliases (``"qm9700"`` for
``"quantum-2"``) resolve to the canonical name.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from importlib import resources
from typing import Any

import pyarrow as pa

from .._checks import did_you_mean, flag
from .._files import read_bytes, reason
from ..exceptions import InvalidArgumentError, UnknownPartError
from .part import (_ARROW_TYPE, _KINDS, Part, _bad, _build, _check_kind, _check_name, _check_refs, _parse_document,
                   _referrers, kinds)

__all__ = [
    "Part",
    "part",
    "parts",
    "kinds",
    "add_part",
    "load_parts",
    "remove_part",
]


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


_DATA_FILE = "fabricsim/fabrics/data/catalog.json"


def _load_shipped() -> tuple[dict[str, Part], dict[str, str]]:
    text = resources.files(__package__).joinpath("data").joinpath("catalog.json").read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidArgumentError(f"shipped catalog {_DATA_FILE} is not valid JSON: {err}") from err
    shipped, aliases = _parse_document(doc, f"shipped catalog {_DATA_FILE}", origin="shipped")
    for alias, target in aliases.items():
        if target not in shipped:
            raise InvalidArgumentError(f"shipped catalog: alias {alias!r} points to unknown part {target!r}")
    _check_refs(shipped, lambda n: (n, shipped[n]) if n in shipped else None, {})
    return shipped, aliases


# Shipped parts are fixed after import; user parts and aliases live for the process.
_SHIPPED, _SHIPPED_ALIASES = _load_shipped()
_USER: dict[str, Part] = {}
_USER_ALIASES: dict[str, str] = {}


def _all_parts() -> dict[str, Part]:
    """Canonical name -> part, user parts shadowing shipped ones."""
    return {**_SHIPPED, **_USER}


def _resolve(name: str) -> tuple[str, Part] | None:
    key = name.strip().lower()
    if key in _USER:
        return key, _USER[key]
    if key in _USER_ALIASES:
        target = _USER_ALIASES[key]
        return target, _all_parts()[target]
    if key in _SHIPPED:
        return key, _SHIPPED[key]
    if key in _SHIPPED_ALIASES:
        target = _SHIPPED_ALIASES[key]
        return target, _all_parts()[target]
    return None


def _unknown(name: str) -> InvalidArgumentError:
    known = sorted(set(_all_parts()) | set(_SHIPPED_ALIASES) | set(_USER_ALIASES))
    return UnknownPartError(
        f"no catalog part named {name!r}{did_you_mean(name.strip().lower(), known)}; "
        f"kinds are {', '.join(_KINDS)} (list them with fabricsim.catalog.parts(kind))"
    )


def part(name: str) -> Part:
    """The catalog entry ``name`` (case-insensitive; aliases such as ``"qm9700"`` work).

    Raises UnknownPartError (an InvalidArgumentError) naming close matches if there is none.

    Example::

        fs.catalog.part("qm9700").name   # 'quantum-2': an alias
        fs.catalog.part("H100").watts    # 700.0
    """
    if not isinstance(name, str):
        raise _bad(f"part name must be a string, got {type(name).__name__} {name!r}")
    found = _resolve(name)
    if found is None:
        raise _unknown(name)
    return found[1]


def parts(kind: str | None = None) -> pa.Table:
    """The catalog as an Arrow table, one row per part, ordered by kind then name.

    With ``kind``: columns ``name``, ``kind``, ``origin``, ``description`` and one typed column
    per field of that kind (SI units as in the field names; ``protocols`` is a list column).
    Without: ``name``, ``kind``, ``origin``, ``description`` and ``fields``, the part's fields as
    JSON text. ``origin`` is ``"shipped"`` or ``"user"``.

    Example::

        nics = fs.catalog.parts("nic")   # one row per NIC, a typed column per field
        nics.select(["name", "rate_Bps"]).to_pylist()
    """
    all_parts = _all_parts()
    if kind is None:
        rows = sorted(all_parts.values(), key=lambda p: (list(_KINDS).index(p.kind), p.name))
        return pa.table(
            {
                "name": pa.array([p.name for p in rows], pa.string()),
                "kind": pa.array([p.kind for p in rows], pa.string()),
                "origin": pa.array([p.origin for p in rows], pa.string()),
                "description": pa.array([p.description for p in rows], pa.string()),
                "fields": pa.array(
                    [json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in p.items()})
                     for p in rows],
                    pa.string(),
                ),
            }
        )
    kind = _check_kind(kind, "parts()")
    rows = sorted((p for p in all_parts.values() if p.kind == kind), key=lambda p: p.name)
    columns: dict[str, pa.Array] = {
        "name": pa.array([p.name for p in rows], pa.string()),
        "kind": pa.array([p.kind for p in rows], pa.string()),
        "origin": pa.array([p.origin for p in rows], pa.string()),
        "description": pa.array([p.description for p in rows], pa.string()),
    }
    for spec in _KINDS[kind]:
        values = [list(p[spec.name]) if spec.type == "protocols" else p[spec.name] for p in rows]
        columns[spec.name] = pa.array(values, _ARROW_TYPE[spec.type])
    return pa.table(columns)


def _taken(name: str) -> str | None:
    """Why ``name`` cannot be added without ``replace=True``, or None if it is free."""
    if name in _USER:
        return f"a user {_USER[name].kind} part {name!r} already exists"
    if name in _SHIPPED:
        return f"{name!r} is a shipped {_SHIPPED[name].kind} part"
    if name in _USER_ALIASES:
        return f"{name!r} is an alias of user part {_USER_ALIASES[name]!r}"
    if name in _SHIPPED_ALIASES:
        return f"{name!r} is an alias of shipped part {_SHIPPED_ALIASES[name]!r}"
    return None


def _commit(new: Mapping[str, Part], new_aliases: Mapping[str, str], replace: bool) -> None:
    """Check names and references of validated parts, then add them all (or none)."""
    if not replace:
        for name in list(new) + list(new_aliases):
            why = _taken(name)
            if why is not None:
                raise _bad(f"cannot add {name!r}: {why}; pass replace=True to shadow it")

    def resolve(target: str) -> tuple[str, Part] | None:
        if target in new:
            return target, new[target]
        if target in new_aliases and new_aliases[target] in new:
            return new_aliases[target], new[new_aliases[target]]
        return _resolve(target)

    _check_refs(new, resolve, _all_parts())
    # A replacement must keep serving the parts that already refer to it.
    for name, p in new.items():
        old = _resolve(name)
        if old is not None and old[0] == name and old[1].kind != p.kind:
            users = _referrers(old[0], _all_parts())
            if users:
                raise _bad(
                    f"cannot replace {name!r} ({old[1].kind}) with a {p.kind}: "
                    f"{', '.join(map(repr, users))} refer to it"
                )
    for alias, target in new_aliases.items():
        if target not in new and _resolve(target) is None:
            raise _bad(f"alias {alias!r} points to unknown part {target!r}")
    for name, p in new.items():
        _USER_ALIASES.pop(name, None)
        _USER[name] = p
    for alias, target in new_aliases.items():
        _USER_ALIASES[alias] = target if target in new else _resolve(target)[0]  # type: ignore[index]


def add_part(
    name: str,
    kind: str,
    *,
    source: str | Mapping[str, str],
    description: str = "",
    replace: bool = False,
    **fields: Any,
) -> Part:
    """Add a part to the catalog for this process and return it.

    ``fields`` are the kind's fields (see :func:`kinds`), all required. ``_Bps`` fields accept a
    number in bytes/s per direction or a string such as ``"800Gb/s"``; ``_s`` fields a number in
    seconds or a string such as ``"150ns"``; ``_watts`` fields a number in watts. ``source``
    is one string for every figure, or a mapping field -> source covering every numeric and
    boolean field.

    A name that is already a part or alias (shipped or user) is refused unless ``replace=True``,
    in which case the new part shadows it until :func:`remove_part`. Raises InvalidArgumentError
    naming the bad value.

    Example::

        fields = dict(fs.catalog.part("cx7"))   # a ConnectX-7's fields, at twice its rate
        fields["rate_Bps"] = fields["ethernet_port_Bps"] = "800Gb/s"
        nic = fs.catalog.add_part("my-nic", "nic", source="vendor datasheet", **fields)
        fs.clos(n_hosts=16, switch="quantum-x800", nic="my-nic")
        fs.catalog.remove_part("my-nic")
    """
    key = _check_name(name)
    kind = _check_kind(kind, f"add_part({name!r})")
    flag("replace", replace)
    new = _build(key, kind, fields, source, description, origin="user")
    _commit({key: new}, {}, replace)
    return _USER[key]


def _parse_json(data: bytes, where: str) -> Any:
    """The JSON document in ``data`` (UTF-8), or an InvalidArgumentError saying why it is not
    one: text in another encoding (Latin-1, UTF-16), nesting deeper than Python's recursion
    limit and integers of more digits than Python converts (4300) raised UnicodeDecodeError,
    RecursionError and a bare ValueError."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        hint = " (it starts with a UTF-16 byte order mark)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise _bad(f"{where} is not UTF-8 text{hint}: byte {data[err.start]:#04x} at offset {err.start} "
                   "cannot be decoded; save it as UTF-8") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise _bad(f"{where} is not valid JSON: {err}") from err
    except RecursionError:
        raise _bad(f"{where} nests arrays or objects too deeply to read (deeper than Python's recursion "
                   f"limit, {sys.getrecursionlimit()})") from None
    except ValueError as err:  # an integer of more digits than int() converts
        raise _bad(f"{where} holds a number that cannot be read: {err}") from None


def load_parts(path: str | os.PathLike[str], *, replace: bool = False) -> tuple[Part, ...]:
    """Add every part (and alias) of a JSON file in the shipped catalog's format.

    The file holds ``{"parts": {name: {"kind": ..., "description": ..., <fields>,
    "sources": {field: source}}}, "aliases": {alias: name}}``; unit strings are accepted as in
    :func:`add_part`. All parts are checked before any is added, so a bad file adds nothing.
    Returns the added parts.

    Example::

        import json
        cx7 = fs.catalog.part("cx7")
        entry = dict(cx7, kind="nic", rate_Bps="800Gb/s", sources={f: "my lab" for f in cx7})
        with open("parts.json", "w") as f:
            json.dump({"parts": {"my-nic": entry}, "aliases": {"mynic": "my-nic"}}, f)
        fs.catalog.load_parts("parts.json")   # (Part('my-nic', kind='nic', rate_Bps=1e+11 (100 GB/s), ...),)
        fs.catalog.part("mynic").rate_Bps     # 1e11
        fs.catalog.remove_part("my-nic")
    """
    flag("replace", replace)
    try:
        path, data = read_bytes("path", path)
    except OSError as err:  # the path is one: read_bytes checked it
        raise _bad(f"cannot read catalog file {os.fspath(path)!r}: {reason(err)}") from err
    doc = _parse_json(data, f"catalog file {os.fspath(path)!r}")
    new, new_aliases = _parse_document(doc, f"catalog file {os.fspath(path)!r}", origin="user")
    _commit(new, new_aliases, replace)
    return tuple(_USER[n] for n in new)


def remove_part(name: str) -> None:
    """Remove a user part (and the user aliases pointing to it); a shipped part it shadowed
    becomes visible again. Shipped parts cannot be removed.

    Example::

        fs.catalog.add_part("h100", "gpu", replace=True, source="what if", **dict(fs.catalog.part("h100"), watts=800.0))
        fs.catalog.part("h100").watts   # 800.0: the user part shadows the shipped one
        fs.catalog.remove_part("h100")
        fs.catalog.part("h100").watts   # 700.0 again
    """
    if not isinstance(name, str):
        raise _bad(f"part name must be a string, got {type(name).__name__} {name!r}")
    key = name.strip().lower()
    target = _USER_ALIASES.get(key, key)
    if target not in _USER:
        if _resolve(key) is not None:
            raise _bad(f"cannot remove {name!r}: it is a shipped part; only user parts can be removed")
        raise _unknown(name)
    shadowed = _SHIPPED.get(target)
    remaining = {n: p for n, p in _all_parts().items() if n != target}
    users = _referrers(target, remaining)
    if users and (shadowed is None or shadowed.kind != _USER[target].kind):
        raise _bad(f"cannot remove {name!r}: {', '.join(map(repr, users))} refer to it")
    del _USER[target]
    for alias in [a for a, t in _USER_ALIASES.items() if t == target]:
        del _USER_ALIASES[alias]
