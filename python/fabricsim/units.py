"""Human-readable quantities to and from SI floats.

Only SI base units cross the fabricsim API: bytes, seconds and bytes per second. This module
turns the strings people write ("800Gb/s", "1GiB", "500ns") into those floats, and formats
floats back into short strings for tables.

Parsing rules (whitespace between number and unit is allowed, e.g. "25 GB/s"):

* Numbers: ``12``, ``1.5``, ``.5``, ``1e3``. No sign: negative quantities are rejected.
* Decimal prefixes k/K (1e3), M (1e6), G (1e9), T (1e12), P (1e15), E (1e18).
* Binary prefixes Ki (2**10), Mi (2**20), Gi (2**30), Ti (2**40), Pi (2**50), Ei (2**60).
* ``b`` is a bit and ``B`` a byte: the case of that letter matters, "800Gb/s" is 1e11 B/s while
  "800GB/s" is 8e11 B/s.

:func:`bandwidth_Bps`
    ``<prefix>b/s``, ``<prefix>bps``, ``<prefix>bit/s`` (bits per second, divided by 8) and
    ``<prefix>B/s``, ``<prefix>Bps`` (bytes per second). "400Gbps" -> 5e10, "900GB/s" -> 9e11,
    "1.6Tb/s" -> 2e11. A bare number string has no unit and is rejected.
:func:`size_bytes`
    ``B``, ``kB``/``KB`` (1e3), ``MB`` (1e6), ``GB`` (1e9), ... are decimal; ``KiB``, ``MiB``,
    ``GiB``, ... are binary. A prefix letter alone, as nccl-tests' ``-b``/``-e`` flags take it,
    is *binary*: "8M" = 8 MiB = 8388608, "1G" = 2**30, "512K" = "512k" = 524288 (nccl-tests
    also accepts lowercase k, m, g; so does this). A bare number string is bytes, "100" -> 100.
    Bits are rejected for sizes ("8Mb" is almost always a typo for "8MB").
:func:`duration_s`
    ``ps``, ``ns``, ``us`` (also ``µs``/``μs``), ``ms``, ``s``, ``min``, ``h``. "500ns" -> 5e-7.
    A bare number string has no unit and is rejected.

Numbers (int, float, numpy scalars) pass through unchanged, so every parser can be applied to
a value that may already be SI; an int too large for a float (10**400) is refused. Strings are parsed to ``float``. Bad input raises
:class:`fabricsim.exceptions.InvalidArgumentError` (a ``ValueError``), naming the bad string
and the accepted units.
"""

from __future__ import annotations

import decimal
import math
import numbers
import re
from typing import TYPE_CHECKING

from ._checks import flag, integer, number, parsed, real, shown
from .exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

__all__ = [
    "bandwidth_Bps",
    "size_bytes",
    "duration_s",
    "format_bytes",
    "format_rate",
    "format_duration",
]

_DECIMAL_PREFIX = {
    "": 1.0,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}
_BINARY_PREFIX = {
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}
_ALL_PREFIX = {**_DECIMAL_PREFIX, **_BINARY_PREFIX}

# nccl-tests' size flags take K/M/G (any case) as powers of 1024; T continues the series.
_NCCL_SUFFIX = {
    "k": 2.0**10,
    "K": 2.0**10,
    "m": 2.0**20,
    "M": 2.0**20,
    "g": 2.0**30,
    "G": 2.0**30,
    "t": 2.0**40,
    "T": 2.0**40,
}

# Seconds per unit, as (multiplier, divisor) of whole numbers: 1e-9 is not one.
_DURATION_UNIT = {
    "ps": (1.0, 1e12),
    "ns": (1.0, 1e9),
    "us": (1.0, 1e6),
    "\u00b5s": (1.0, 1e6),  # MICRO SIGN
    "\u03bcs": (1.0, 1e6),  # GREEK SMALL LETTER MU
    "ms": (1.0, 1e3),
    "s": (1.0, 1.0),
    "sec": (1.0, 1.0),
    "min": (60.0, 1.0),
    "h": (3600.0, 1.0),
}

# ASCII digits only: ``\d`` also matches other scripts' digits, which Decimal reads too, so
# "١٢Gb/s" (Arabic-Indic) and "１２Gb/s" (fullwidth) were taken as 12 Gb/s.
_QUANTITY = re.compile(
    r"^\s*(?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>\S*?)\s*$"
)
# Exactly the prefixes above (longest first, so "Ki" wins over "K"): a made-up one such as "ki"
# must fail to match and be reported as an unknown unit.
_PREFIX_PATTERN = "(?P<prefix>" + "|".join(sorted(_ALL_PREFIX, key=len, reverse=True)) + ")"
_RATE_UNIT = re.compile(_PREFIX_PATTERN + r"(?P<base>b/s|bps|bit/s|bits/s|B/s|Bps)$")
_SIZE_UNIT = re.compile(_PREFIX_PATTERN + r"(?P<base>B|bytes?)$")

_RATE_HELP = (
    "accepted units: b/s, bps, bit/s (bits per second) or B/s, Bps (bytes per second), "
    "with an optional prefix k, M, G, T, P, E (powers of 1000) or Ki, Mi, Gi, Ti, Pi, Ei "
    "(powers of 1024), e.g. '800Gb/s', '400Gbps', '900GB/s', '25 GB/s'"
)
_SIZE_HELP = (
    "accepted units: B, kB/KB, MB, GB, TB, PB, EB (powers of 1000), KiB, MiB, GiB, TiB, PiB, "
    "EiB (powers of 1024), nccl-tests style K, M, G, T alone (powers of 1024), or no unit "
    "(bytes), e.g. '1GiB', '8MB', '8M', '512KiB', '100 B'"
)
_DURATION_HELP = (
    "accepted units: ps, ns, us (or \u00b5s), ms, s, min, h, e.g. '500ns', '1.5us', '2 ms', '3s'"
)


def _invalid(message: str) -> Exception:
    return InvalidArgumentError(message)


def _split(text: str, kind: str, help_text: str) -> tuple[decimal.Decimal, str]:
    """The number (exact, as written) and the unit of a quantity string."""
    match = _QUANTITY.match(text)
    if match is None:
        raise _invalid(f"cannot parse {kind} {text!r}: expected a non-negative number (digits 0-9) and a unit; {help_text}")
    return _EXACT.create_decimal(match.group("number")), match.group("unit")


# Enough digits that number x scale / divisor is exact before the one rounding to float; no
# traps, so an exponent out of any range ends as infinity or NaN, refused as not finite.
_EXACT = decimal.Context(prec=80, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, traps=[])


def _scaled(text: str, kind: str, help_text: str, number: decimal.Decimal, multiplier: float,
            divisor: float = 1.0) -> float:
    """number x multiplier / divisor rounded once to the nearest float: "0.3kB" is 300.0 and
    "500ns" is 5e-7, where float arithmetic gives 300.00000000000006 and 5.000000000000001e-07.
    (The scales are whole numbers, exact as floats.)"""
    exact = _EXACT.divide(_EXACT.multiply(number, decimal.Decimal(multiplier)), decimal.Decimal(divisor))
    value = float(exact)
    if not math.isfinite(value):
        raise _invalid(f"{kind} {text!r} is not finite; {help_text}")
    return value


# The SI unit a plain number of each kind is taken to be in.
_SI_UNIT = {"bandwidth": "bytes/s", "size": "bytes", "duration": "seconds"}


def _passthrough(value: object, kind: str, help_text: str) -> TypeIs[float]:
    """True if ``value`` is a plain number that the parsers return unchanged, False if it is a
    string to parse; anything else is refused."""
    expected = f"{kind} must be a number (of {_SI_UNIT[kind]}) or a string with a unit"
    if isinstance(value, bool):
        # True/False are ints in Python but never a meaningful quantity.
        raise _invalid(f"{expected}, got {value!r}; {help_text}")
    if isinstance(value, numbers.Real):
        if real(value) is None:
            raise _invalid(f"{expected}, got {shown(value)}, beyond the float range (about 1.8e308); {help_text}")
        return True
    if not isinstance(value, str):
        raise _invalid(f"{expected}, got {type(value).__name__} {value!r}; {help_text}")
    return False


def bandwidth_Bps(value: str | float) -> float:
    """Parse a bandwidth into bytes per second.

    ``"800Gb/s"`` -> 1e11, ``"400Gbps"`` -> 5e10, ``"1.6Tb/s"`` -> 2e11, ``"900GB/s"`` -> 9e11,
    ``"25 GB/s"`` -> 2.5e10, ``"1GiB/s"`` -> 1073741824.0. Lowercase ``b`` is bits (divided by
    8), uppercase ``B`` is bytes. A number is returned unchanged (taken to be bytes/s already).

    Raises InvalidArgumentError (a ValueError) for a string with no unit or an unknown unit.

    Example::

        fs.units.bandwidth_Bps("800Gb/s")   # 1e11 bytes/s
        fs.units.bandwidth_Bps("900GB/s")   # 9e11
    """
    if _passthrough(value, "bandwidth", _RATE_HELP):
        return value
    number, unit = _split(value, "bandwidth", _RATE_HELP)
    if unit == "":
        raise _invalid(f"bandwidth {value!r} has no unit; {_RATE_HELP}")
    match = _RATE_UNIT.match(unit)
    if match is None:
        raise _invalid(f"unknown bandwidth unit {unit!r} in {value!r}; {_RATE_HELP}")
    scale = _ALL_PREFIX[match.group("prefix")]
    bits = match.group("base") not in ("B/s", "Bps")
    return _scaled(value, "bandwidth", _RATE_HELP, number, scale, 8.0 if bits else 1.0)


def size_bytes(value: str | float) -> float:
    """Parse a data size into bytes.

    ``"1GiB"`` -> 1073741824.0, ``"512KiB"`` -> 524288.0, ``"8MB"`` -> 8e6, ``"100 B"`` ->
    100.0, ``"100"`` -> 100.0. Following nccl-tests' ``-b``/``-e`` flags, a prefix letter with
    no ``B`` is binary: ``"8M"`` -> 8388608.0 (8 MiB), ``"1G"`` -> 2**30, ``"64K"`` -> 65536.0.
    A number is returned unchanged (taken to be bytes already).

    Raises InvalidArgumentError (a ValueError) for an unknown unit, including bits ("8Mb").

    Example::

        fs.units.size_bytes("1GiB")   # 1073741824.0
        fs.units.size_bytes("8M")     # 8388608.0, as nccl-tests' -b 8M
    """
    if _passthrough(value, "size", _SIZE_HELP):
        return value
    number, unit = _split(value, "size", _SIZE_HELP)
    if unit == "":
        return _scaled(value, "size", _SIZE_HELP, number, 1.0)
    if unit in _NCCL_SUFFIX:
        return _scaled(value, "size", _SIZE_HELP, number, _NCCL_SUFFIX[unit])
    match = _SIZE_UNIT.match(unit)
    if match is None:
        hint = ""
        if unit.endswith("b") or unit.endswith("bit") or unit.endswith("bits"):
            hint = " (sizes are in bytes: 'B' is a byte, 'b' a bit)"
        raise _invalid(f"unknown size unit {unit!r} in {value!r}{hint}; {_SIZE_HELP}")
    return _scaled(value, "size", _SIZE_HELP, number, _ALL_PREFIX[match.group("prefix")])


def duration_s(value: str | float) -> float:
    """Parse a duration into seconds.

    ``"500ns"`` -> 5e-7, ``"1.5us"`` -> 1.5e-6, ``"2 ms"`` -> 2e-3, ``"3s"`` -> 3.0,
    ``"2min"`` -> 120.0. A number is returned unchanged (taken to be seconds already).

    Raises InvalidArgumentError (a ValueError) for a string with no unit or an unknown unit.

    Example::

        fs.units.duration_s("1.5us")   # 1.5e-06
        fs.units.duration_s("2min")    # 120.0
    """
    if _passthrough(value, "duration", _DURATION_HELP):
        return value
    number, unit = _split(value, "duration", _DURATION_HELP)
    if unit == "":
        raise _invalid(f"duration {value!r} has no unit; {_DURATION_HELP}")
    if unit not in _DURATION_UNIT:
        raise _invalid(f"unknown duration unit {unit!r} in {value!r}; {_DURATION_HELP}")
    return _scaled(value, "duration", _DURATION_HELP, number, *_DURATION_UNIT[unit])


def _format(name: str, value: float, scales: list[tuple[str, float]], precision: int, scale: float = 1.0) -> str:
    """Format ``value`` (the argument ``name``) times ``scale`` with the largest unit that keeps
    the mantissa >= 1, to ``precision`` significant digits (1 to 17, all a float has).

    ``scales`` is (unit, factor) in increasing factor order; the first entry is the fallback for
    values smaller than every other unit. Zero, infinity and NaN, with no magnitude to fit,
    are in the unit of factor 1 (``"0 s"``, not ``"0 ps"``).
    """
    value = parsed(name, number, value)
    precision = integer("precision", precision, (1, 18))
    base = next(i for i, (_, factor) in enumerate(scales) if factor == 1.0)
    # The factors are divided by the scale (8, exact) where multiplying the value would
    # overflow: a rate of 1.7e308 B/s read "inf b/s".
    scales = [(unit, factor / scale) for unit, factor in scales]
    if not math.isfinite(value):
        return f"{value} {scales[base][0]}"
    magnitude = abs(value)
    index = base if magnitude == 0 else 0
    for i, (_, factor) in enumerate(scales):
        if magnitude >= factor:
            index = i
    # Rounding can carry into the next unit (999.96 kB at 4 digits is "1000 kB" -> "1 MB").
    if index + 1 < len(scales):
        rounded = float(f"{magnitude / scales[index][1]:.{precision}g}")
        if rounded * scales[index][1] >= scales[index + 1][1]:
            index += 1
    unit, factor = scales[index]
    return f"{value / factor:.{precision}g} {unit}"


_BYTES_DECIMAL = [("B", 1.0), ("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12), ("PB", 1e15), ("EB", 1e18)]
_BYTES_BINARY = [("B", 1.0)] + [(p + "B", f) for p, f in _BINARY_PREFIX.items()]
_RATE_BITS = [("b/s", 1.0), ("kb/s", 1e3), ("Mb/s", 1e6), ("Gb/s", 1e9), ("Tb/s", 1e12), ("Pb/s", 1e15)]
_RATE_BYTES = [("B/s", 1.0), ("kB/s", 1e3), ("MB/s", 1e6), ("GB/s", 1e9), ("TB/s", 1e12), ("PB/s", 1e15)]
_DURATIONS = [("ps", 1e-12), ("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0), ("min", 60.0), ("h", 3600.0)]


def format_bytes(n_bytes: float, *, binary: bool = True, precision: int = 4) -> str:
    """Format a size in bytes: ``1073741824`` -> ``"1 GiB"``, ``1.5e6`` -> ``"1.431 MiB"``.

    ``binary=False`` uses powers of 1000 (``"1.5 MB"``). ``precision`` is the number of
    significant digits (1 to 17). :func:`size_bytes` parses the result back.

    Example::

        fs.units.format_bytes(1.5e6)                 # '1.431 MiB'
        fs.units.format_bytes(1.5e6, binary=False)   # '1.5 MB'
    """
    return _format("n_bytes", n_bytes, _BYTES_BINARY if flag("binary", binary) else _BYTES_DECIMAL, precision)


def format_rate(rate_Bps: float, *, bits: bool = True, precision: int = 4) -> str:
    """Format a rate given in bytes per second: ``1e11`` -> ``"800 Gb/s"``.

    ``bits=True`` (the default, as link speeds are quoted) shows bits per second; ``bits=False``
    shows bytes per second (``9e11`` -> ``"900 GB/s"``, as NVLink bandwidth is quoted).
    ``precision`` is the number of significant digits (1 to 17). :func:`bandwidth_Bps` parses
    the result back.

    Example::

        fs.units.format_rate(1e11)               # '800 Gb/s'
        fs.units.format_rate(9e11, bits=False)   # '900 GB/s'
    """
    if flag("bits", bits):
        return _format("rate_Bps", rate_Bps, _RATE_BITS, precision, scale=8.0)
    return _format("rate_Bps", rate_Bps, _RATE_BYTES, precision)


def format_duration(seconds: float, *, precision: int = 4) -> str:
    """Format a duration in seconds: ``5e-7`` -> ``"500 ns"``, ``1.5e-6`` -> ``"1.5 us"``,
    ``90.0`` -> ``"1.5 min"``, ``18000.0`` -> ``"5 h"``.

    Minutes and hours follow seconds because a training step or a fault scenario runs for
    hours of simulated time, which read as ``"1.8e+04 s"`` in seconds. They stay one number
    and one unit, so the result fits a table column and :func:`duration_s` parses it back
    (a mixed "5 h 3 min" would not); hours are the largest unit, so the exponent form is
    left only from 10**precision hours (over a year at the default precision), where no
    short exact form is left. ``precision`` is the number of significant digits (1 to 17).

    Example::

        fs.units.format_duration(1.5e-6)   # '1.5 us'
        fs.units.format_duration(90.0)     # '1.5 min'
    """
    return _format("seconds", seconds, _DURATIONS, precision)
