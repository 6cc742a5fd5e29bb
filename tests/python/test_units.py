"""fabricsim.units: parsing human quantities into SI floats and formatting them back."""

import math
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabricsim import units
from fabricsim.exceptions import InvalidArgumentError
from fabricsim.units import (
    bandwidth_Bps,
    duration_s,
    format_bytes,
    format_duration,
    format_rate,
    size_bytes,
)


@pytest.mark.parametrize(
    "text, expected_Bps",
    [
        ("800Gb/s", 800e9 / 8),
        ("800 Gb/s", 1e11),
        ("400Gbps", 400e9 / 8),
        ("1.6Tb/s", 1.6e12 / 8),
        ("100Gbit/s", 1.25e10),
        ("10 kb/s", 1250.0),
        ("10Kbps", 1250.0),
        ("900GB/s", 9e11),
        ("25 GB/s", 2.5e10),
        ("50GBps", 5e10),
        ("1GiB/s", 2.0**30),
        ("8Gib/s", 2.0**30),
        ("1.8TB/s", 1.8e12),
        ("1e3 Gb/s", 1.25e11),
        (".5 MB/s", 5e5),
        ("  3B/s ", 3.0),
        ("0 Gb/s", 0.0),
    ],
)
def test_bandwidth_closed_form(text, expected_Bps):
    assert bandwidth_Bps(text) == pytest.approx(expected_Bps, rel=1e-15)
    assert isinstance(bandwidth_Bps(text), float)


def test_bandwidth_bits_and_bytes_differ_by_eight():
    assert bandwidth_Bps("800GB/s") == 8 * bandwidth_Bps("800Gb/s")
    assert bandwidth_Bps("800Gb/s") == 1e11


@pytest.mark.parametrize(
    "text, expected_bytes",
    [
        ("1GiB", 1073741824),
        ("512KiB", 524288),
        ("4MiB", 4 * 1048576),
        ("2TiB", 2 * 2**40),
        ("8MB", 8_000_000),
        ("1kB", 1000),
        ("1KB", 1000),
        ("1.5GB", 1.5e9),
        ("100 B", 100),
        ("100", 100),
        ("7 bytes", 7),
        ("1 byte", 1),
        # nccl-tests -b/-e style: a prefix letter alone is binary.
        ("8M", 8 * 2**20),
        ("8m", 8 * 2**20),
        ("1G", 2**30),
        ("1g", 2**30),
        ("64K", 65536),
        ("64k", 65536),
        ("1T", 2**40),
        ("0B", 0),
    ],
)
def test_size_closed_form(text, expected_bytes):
    assert size_bytes(text) == expected_bytes
    assert isinstance(size_bytes(text), float)


def test_size_nccl_suffix_is_binary_but_mb_is_decimal():
    assert size_bytes("8M") == size_bytes("8MiB") == 8388608
    assert size_bytes("8MB") == 8e6


@pytest.mark.parametrize(
    "text, expected_s",
    [
        ("500ns", 5e-7),
        ("1.5us", 1.5e-6),
        ("1.5 \u00b5s", 1.5e-6),
        ("1.5\u03bcs", 1.5e-6),
        ("2 ms", 2e-3),
        ("3s", 3.0),
        ("250ps", 2.5e-10),
        ("2min", 120.0),
        ("1h", 3600.0),
        ("0s", 0.0),
    ],
)
def test_duration_closed_form(text, expected_s):
    assert duration_s(text) == expected_s  # the nearest float, exactly


@given(mantissa=st.integers(0, 10**17), exponent=st.integers(-30, 30),
       unit=st.sampled_from([("ns", "duration"), ("us", "duration"), ("ms", "duration"), ("min", "duration"),
                             ("kB", "size"), ("MiB", "size"), ("Gb/s", "rate"), ("TB/s", "rate")]))
def test_parsed_quantities_are_the_nearest_float_to_the_decimal_written(mantissa, exponent, unit):
    """One rounding, from the exact decimal value: Fraction arithmetic is the reference."""
    text = f"{mantissa}e{exponent}{unit[0]}"
    scale = {"ns": Fraction(1, 10**9), "us": Fraction(1, 10**6), "ms": Fraction(1, 1000), "min": 60,
             "kB": 1000, "MiB": 2**20, "Gb/s": Fraction(10**9, 8), "TB/s": 10**12}[unit[0]]
    parse = {"duration": duration_s, "size": size_bytes, "rate": bandwidth_Bps}[unit[1]]
    assert parse(text) == float(Fraction(mantissa) * Fraction(10) ** exponent * scale)


@pytest.mark.parametrize("text, parse, expected", [
    ("0.3kB", size_bytes, 300.0), ("0.1us", duration_s, 1e-7), ("150ns", duration_s, 1.5e-7),
    ("0.7Gb/s", bandwidth_Bps, 87.5e6),
])
def test_decimal_fractions_parse_without_float_residue(text, parse, expected):
    assert parse(text) == expected


@pytest.mark.parametrize("parse", [bandwidth_Bps, size_bytes, duration_s])
@pytest.mark.parametrize("value", [0, 7, 2.5, 1e11, np.float64(3.5), np.int64(12)])
def test_numbers_pass_through_unchanged(parse, value):
    result = parse(value)
    assert result == value
    assert type(result) is type(value)


@pytest.mark.parametrize(
    "parse, text",
    [
        (bandwidth_Bps, "800"),  # no unit
        (bandwidth_Bps, "800G"),
        (bandwidth_Bps, "800 Gb"),
        (bandwidth_Bps, "800 gb/s"),
        (bandwidth_Bps, "fast"),
        (bandwidth_Bps, "-800Gb/s"),
        (bandwidth_Bps, ""),
        (bandwidth_Bps, "1e999 Gb/s"),
        (size_bytes, "8Mb"),  # bits are not a size
        (size_bytes, "1 GiBs"),
        (size_bytes, "1 XB"),
        (size_bytes, "-1GiB"),
        (size_bytes, "GiB"),
        (size_bytes, "1,5 GB"),
        (duration_s, "500"),  # no unit
        (duration_s, "500 nsec"),
        (duration_s, "1.5 days"),
        (duration_s, "-3s"),
        (duration_s, "nan s"),
        (duration_s, "inf s"),
    ],
)
def test_bad_strings_raise_naming_the_input_and_units(parse, text):
    with pytest.raises(InvalidArgumentError) as info:
        parse(text)
    message = str(info.value)
    assert repr(text) in message
    assert "accepted units" in message


@pytest.mark.parametrize(
    "parse, text, unit",
    [(size_bytes, "1kiB", "kiB"), (bandwidth_Bps, "1kiB/s", "kiB/s"), (bandwidth_Bps, "2 kib/s", "kib/s")],
)
def test_made_up_binary_prefixes_are_unknown_units(parse, text, unit):
    # Binary prefixes are exactly Ki, Mi, Gi, Ti, Pi, Ei; "ki" once escaped as a bare KeyError.
    with pytest.raises(InvalidArgumentError, match=f"unknown (size|bandwidth) unit {unit!r}"):
        parse(text)


def test_invalid_argument_error_is_a_value_error():
    with pytest.raises(ValueError):
        size_bytes("1 parsec")


def test_bits_in_a_size_get_a_hint():
    with pytest.raises(InvalidArgumentError, match="'b' a bit"):
        size_bytes("8Mb")


@pytest.mark.parametrize("parse", [bandwidth_Bps, size_bytes, duration_s])
@pytest.mark.parametrize("value", [None, True, [1], b"1GB"])
def test_wrong_types_raise(parse, value):
    with pytest.raises(InvalidArgumentError):
        parse(value)


@pytest.mark.parametrize(
    "n_bytes, binary, expected",
    [
        (0, True, "0 B"),
        (100, True, "100 B"),
        (1023, True, "1023 B"),
        (1024, True, "1 KiB"),
        (524288, True, "512 KiB"),
        (2**30, True, "1 GiB"),
        (1.5 * 2**20, True, "1.5 MiB"),
        (2**30 - 1, True, "1 GiB"),  # rounding carries into the next unit
        (8e6, False, "8 MB"),
        (999_999_999, False, "1 GB"),
        (1.5e9, False, "1.5 GB"),
        (12345, False, "12.35 kB"),
    ],
)
def test_format_bytes(n_bytes, binary, expected):
    assert format_bytes(n_bytes, binary=binary) == expected


@pytest.mark.parametrize(
    "rate_Bps, bits, expected",
    [
        (1e11, True, "800 Gb/s"),
        (5e10, True, "400 Gb/s"),
        (2e11, True, "1.6 Tb/s"),
        (9e11, False, "900 GB/s"),
        (2.5e10, False, "25 GB/s"),
        (0.0, True, "0 b/s"),
        (1e6 / 8, True, "1 Mb/s"),
        (1.6e308, True, "1.28e+294 Pb/s"),  # in bits, beyond the float range: was "inf b/s"
    ],
)
def test_format_rate(rate_Bps, bits, expected):
    assert format_rate(rate_Bps, bits=bits) == expected


@pytest.mark.parametrize(
    "seconds, expected",
    [
        (5e-7, "500 ns"),
        (1.5e-6, "1.5 us"),
        (2e-3, "2 ms"),
        (3.0, "3 s"),
        (59.0, "59 s"),
        (90.0, "1.5 min"),
        (120.0, "2 min"),
        (59.99996, "1 min"),  # rounding carries into the next unit
        (5400.0, "1.5 h"),
        (18000.0, "5 h"),  # was "1.8e+04 s"
        (3599.9999, "1 h"),
        (1e300, "2.778e+296 h"),
        (2.5e-10, "250 ps"),
        (0.0, "0 s"),  # a makespan of zero read "0 ps"
        (1e-15, "0.001 ps"),
        (-2e-3, "-2 ms"),
        (math.inf, "inf s"),
        (math.nan, "nan s"),
    ],
)
def test_format_duration(seconds, expected):
    assert format_duration(seconds) == expected


def test_precision_is_significant_digits():
    assert format_duration(1.23456e-6, precision=2) == "1.2 us"
    assert format_bytes(123456789, binary=False, precision=6) == "123.457 MB"


def test_round_trip_formatting():
    rng = np.random.default_rng(12345)
    for value in np.exp(rng.uniform(np.log(1e-3), np.log(1e18), size=500)):
        value = float(value)
        assert size_bytes(format_bytes(value, precision=17)) == pytest.approx(value, rel=1e-15)
        assert size_bytes(format_bytes(value, binary=False, precision=17)) == pytest.approx(
            value, rel=1e-15
        )
        assert bandwidth_Bps(format_rate(value, precision=17)) == pytest.approx(value, rel=1e-15)
        assert bandwidth_Bps(format_rate(value, bits=False, precision=17)) == pytest.approx(
            value, rel=1e-15
        )
    for value in np.exp(rng.uniform(np.log(1e-12), np.log(1e8), size=500)):
        value = float(value)
        assert duration_s(format_duration(value, precision=17)) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("seconds", [5e-324, 1e-300, 1e-20, 59.99999999999999, 3599.999999999999, 1e300])
def test_durations_round_trip_at_any_magnitude(seconds):
    assert duration_s(format_duration(seconds, precision=17)) == pytest.approx(seconds, rel=1e-15)
    assert duration_s(format_duration(seconds)) == pytest.approx(seconds, rel=5e-4)


def test_the_largest_duration_round_trips_at_full_precision():
    # At fewer digits it rounds up past the float range, in any unit.
    seconds = sys.float_info.max
    assert duration_s(format_duration(seconds, precision=17)) == pytest.approx(seconds, rel=1e-15)


def test_round_trip_at_default_precision_is_within_rounding():
    for value in [1e11, 9e11, 2e11, 3.3e9, 123456.0]:
        assert bandwidth_Bps(format_rate(value)) == pytest.approx(value, rel=5e-4)
    for value in [2**30, 8e6, 524288, 1.5e9, 999_999_999]:
        assert size_bytes(format_bytes(value)) == pytest.approx(value, rel=5e-4)


def test_public_names():
    assert set(units.__all__) == {
        "bandwidth_Bps",
        "size_bytes",
        "duration_s",
        "format_bytes",
        "format_rate",
        "format_duration",
    }
