"""nccl-tests' conventions: sizes, bus-bandwidth factors and the text layout of its result tables.

nccl-tests (github.com/NVIDIA/nccl-tests) reports, per message size, ``algbw = S / t`` and
``busbw = algbw * factor`` (``doc/PERFORMANCE.md``; hardware.md §5). fabricsim's ``size_bytes`` is
nccl-tests' "size" column, which is that S:

* all_reduce, broadcast, reduce, send_recv: the per-rank buffer (count x element size);
* all_gather: the gathered output, i.e. every rank's input: per-rank count x n_ranks x element size;
* reduce_scatter: the input, i.e. every rank's output block: per-rank count x n_ranks x element size;
* all_to_all: each rank's whole send (= receive) buffer: per-peer count x n_ranks x element size.

The "count" column is the count argument of the NCCL call: the whole buffer for the first group,
the per-rank (per-peer for all_to_all) block for the others (``src/*.cu``, ``getCollByteCount``).
"""

from __future__ import annotations

import math
import numbers
from types import MappingProxyType
from typing import Callable, Mapping

from .exceptions import InvalidArgumentError

__all__ = [
    "BUSBW_FACTOR",
    "DTYPE_SIZE_BYTES",
    "OPS",
    "REDOPS",
    "algbw_size_bytes",
    "busbw_factor",
    "element_count",
    "format_table",
]

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "send_recv")

# busbw = algbw * factor: the traffic a rank moves over the bottleneck link relative to S, for the
# ring algorithm (doc/PERFORMANCE.md:136-145; all_reduce.cu, all_gather.cu, reduce_scatter.cu,
# alltoall.cu, broadcast.cu, reduce.cu, sendrecv.cu GetBw).
BUSBW_FACTOR: Mapping[str, Callable[[int], float]] = MappingProxyType({
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
})

# Type names as nccl-tests prints them (common.cu test_typenames), with their sizes in bytes.
DTYPE_SIZE_BYTES: Mapping[str, int] = MappingProxyType({
    "int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "half": 2, "float": 4, "double": 8, "bfloat16": 2,
})

REDOPS = ("sum", "prod", "max", "min", "avg", "mulsum")  # common.cu test_opnames

_PER_RANK_BLOCK_OPS = ("all_gather", "reduce_scatter", "all_to_all")  # S = count x n x size
_REDUCING_OPS = ("all_reduce", "reduce_scatter", "reduce")
_ROOTED_OPS = ("broadcast", "reduce")


def _check_op(op) -> str:
    if op not in OPS:
        raise InvalidArgumentError(f"op={op!r}: expected one of {', '.join(OPS)}")
    return op


def _check_ranks(n_ranks) -> int:
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, numbers.Integral) or n_ranks < 1:
        raise InvalidArgumentError(f"n_ranks={n_ranks!r}: expected a positive integer")
    return int(n_ranks)


def _check_bytes(name, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (math.isfinite(v) and v >= 0):
        raise InvalidArgumentError(f"{name}={v!r}: expected a finite number of bytes >= 0")
    return v


def busbw_factor(op: str, n_ranks: int) -> float:
    """nccl-tests' busbw/algbw ratio for ``op`` on ``n_ranks`` ranks (dimensionless)."""
    return BUSBW_FACTOR[_check_op(op)](_check_ranks(n_ranks))


def algbw_size_bytes(op: str, size_bytes_per_rank: float, n_ranks: int) -> float:
    """The S, in bytes, that nccl-tests divides by the time to get algbw (its "size" column).

    ``size_bytes_per_rank`` is the NCCL call's count x element size: the per-rank buffer for
    all_reduce, broadcast, reduce and send_recv (S is the same), the per-rank input of all_gather,
    the per-rank output of reduce_scatter and the per-peer block of all_to_all (S is n_ranks times it).
    """
    _check_op(op)
    n = _check_ranks(n_ranks)
    v = _check_bytes("size_bytes_per_rank", size_bytes_per_rank)
    return v * n if op in _PER_RANK_BLOCK_OPS else v


def element_count(op: str, size_bytes: int, n_ranks: int, dtype: str = "float") -> int:
    """nccl-tests' "count" column for a row whose "size" is ``size_bytes`` (elements of ``dtype``)."""
    _check_op(op)
    n = _check_ranks(n_ranks)
    if dtype not in DTYPE_SIZE_BYTES:
        raise InvalidArgumentError(f"dtype={dtype!r}: expected one of {', '.join(DTYPE_SIZE_BYTES)}")
    _check_bytes("size_bytes", size_bytes)
    count = int(size_bytes) // DTYPE_SIZE_BYTES[dtype]
    return count // n if op in _PER_RANK_BLOCK_OPS else count


def _time_str(us: float) -> str:
    # common.cu BenchTime: fewer decimals as the time grows, always 7 wide.
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def format_table(table, *, op: str, dtype: str = "float", redop: str = "sum", root: int = 0) -> str:
    """Text in nccl-tests' own layout for a table of one result per message size.

    ``table`` is a :class:`pyarrow.Table` (or anything with ``column_names`` and
    ``column(name).to_pylist()``) with columns ``size_bytes, count, time_s, algbw_Bps, busbw_Bps``
    and optionally ``algorithm, protocol, analytical_s``, printed as extra columns on the right.
    fabricsim has one result per size: it fills both the out-of-place and the in-place columns,
    and ``#wrong`` reads "N/A", as nccl-tests prints it when data checking is off (``-c 0``).
    ``redop`` is printed for the reducing ops (all_reduce, reduce_scatter, reduce), "none" for the
    others; ``root`` for broadcast and reduce, -1 for the others. Ends with nccl-tests' summary
    lines, the average busbw over the rows in GB/s.
    """
    _check_op(op)
    if dtype not in DTYPE_SIZE_BYTES:
        raise InvalidArgumentError(f"dtype={dtype!r}: expected one of {', '.join(DTYPE_SIZE_BYTES)}")
    if redop not in REDOPS:
        raise InvalidArgumentError(f"redop={redop!r}: expected one of {', '.join(REDOPS)}")
    if isinstance(root, bool) or not isinstance(root, numbers.Integral) or root < 0:
        raise InvalidArgumentError(f"root={root!r}: expected a rank >= 0")
    names = getattr(table, "column_names", None)
    if names is None:
        raise InvalidArgumentError(f"table={type(table).__name__}: expected a pyarrow.Table")
    required = ("size_bytes", "count", "time_s", "algbw_Bps", "busbw_Bps")
    missing = [c for c in required if c not in names]
    if missing:
        raise InvalidArgumentError(f"table lacks column(s) {', '.join(missing)}: expected {', '.join(required)}")
    extras = [c for c in ("algorithm", "protocol", "analytical_s") if c in names]
    cols = {c: table.column(c).to_pylist() for c in (*required, *extras)}
    for c in ("size_bytes", "count", "time_s", "algbw_Bps", "busbw_Bps", "analytical_s"):
        for v in cols.get(c, ()):
            if v is None and c == "analytical_s":
                continue  # no closed form for this row: printed blank
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (math.isfinite(v) and v >= 0):
                raise InvalidArgumentError(f"column {c} holds {v!r}: expected finite numbers >= 0")

    opname = redop if op in _REDUCING_OPS else "none"
    rootstr = f"{root if op in _ROOTED_OPS else -1:6d}"
    # Extra columns: name, width, units.
    extra_fmt = {"algorithm": ("algorithm", 14, ""), "protocol": ("protocol", 8, ""),
                 "analytical_s": ("analytical", 10, "(us)")}
    head_x = "".join(f"  {extra_fmt[c][0]:>{extra_fmt[c][1]}}" for c in extras)
    unit_x = "".join(f"  {extra_fmt[c][2]:>{extra_fmt[c][1]}}" for c in extras)

    # Header lines: common.cu run(), "# %10s  %12s  %8s  %6s  %6s ..." (time/algbw/busbw per half).
    lines = [
        "#",
        f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}"
        "           out-of-place                       in-place          ",
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
        f"  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}"
        f"  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}" + head_x,
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
        f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}"
        f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}" + unit_x,
    ]
    busbw_sum = 0.0
    n_rows = len(cols["size_bytes"])
    for i in range(n_rows):
        algbw, busbw = cols["algbw_Bps"][i] / 1e9, cols["busbw_Bps"][i] / 1e9
        half = f"  {_time_str(cols['time_s'][i] * 1e6)}  {algbw:6.2f}  {busbw:6.2f}  {'N/A':>5}"
        row = f"{int(cols['size_bytes'][i]):12d}  {int(cols['count'][i]):12d}  {dtype:>8}  {opname:>6}  {rootstr}"
        row += half + half
        for c in extras:
            v = cols[c][i]
            if c == "analytical_s":
                text = "" if v is None else _time_str(v * 1e6)
            else:
                text = "" if v is None else str(v)
            row += f"  {text:>{extra_fmt[c][1]}}"
        lines.append(row)
        busbw_sum += busbw
    avg = busbw_sum / n_rows if n_rows else 0.0
    # Summary lines as common.cu prints them ("%g %s" with an empty status leaves a trailing space).
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:g} ", "#"]
    return "\n".join(lines) + "\n"
