"""nccl-tests' conventions: sizes, bus-bandwidth factors and the text layout of its result tables.

nccl-tests (github.com/NVIDIA/nccl-tests) reports, per message size, ``algbw = S / t`` and
``busbw = algbw * factor`` (``doc/PERFORMANCE.md:136-145``; docs/sources.md 5). fabricsim's ``size_bytes`` is
nccl-tests' "size" column, which is that S:

* all_reduce, broadcast, reduce, send_recv: the per-rank buffer (count x element size);
* all_gather: the gathered output, i.e. every rank's input: per-rank count x n_ranks x element size;
* reduce_scatter: the input, i.e. every rank's output block: per-rank count x n_ranks x element size;
* all_to_all: each rank's whole send (= receive) buffer: per-peer count x n_ranks x element size.

The "count" column is the count argument of the NCCL call: the whole buffer for the first group,
the per-rank (per-peer for all_to_all) block for the others (``src/*.cu``, ``getCollByteCount``).
A swept size is first cut to whole elements, and for the second group to whole blocks
(``count = size / wordSize``, block = ``count / nranks``); the size printed (and moved) is
``max(sendBytes, expectedBytes)`` of that count (``common.cu`` ``TimeTest``): see
:func:`rounded_size_bytes`.
"""

from __future__ import annotations

import numbers
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .._checks import finite, number, quantities, shown
from ..exceptions import InvalidArgumentError
from ..units import _NCCL_SUFFIX, _QUANTITY

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "BUSBW_FACTOR",
    "DTYPE_SIZE_BYTES",
    "OPS",
    "REDOPS",
    "algbw_size_bytes",
    "busbw_factor",
    "element_count",
    "format_footer",
    "format_header",
    "format_row",
    "format_table",
    "rounded_size_bytes",
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
# The ops whose rows print the redop: the reducing ones, and sendrecv, which loops over the
# ops as they do (sendrecv.cu RunTest) though it reduces nothing; the others print "none".
_REDOP_OPS = ("all_reduce", "reduce_scatter", "reduce", "send_recv")
_ROOTED_OPS = ("broadcast", "reduce")


def _check_op(op: Any) -> str:
    if not isinstance(op, str) or op not in OPS:
        raise InvalidArgumentError(f"op={op!r}: expected one of {', '.join(OPS)}")
    return op


def _check_ranks(n_ranks: Any) -> int:
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, numbers.Integral) or not 1 <= int(n_ranks) < 2**32:
        raise InvalidArgumentError(f"n_ranks={shown(n_ranks)}: expected a positive integer below 2**32")
    return int(n_ranks)


def _check_bytes(name: str, v: float) -> float:
    f = finite(v)
    if f is None or f < 0:
        raise InvalidArgumentError(f"{name}={shown(v)}: expected a finite number of bytes >= 0")
    return v


def size_flag_bytes(text: str) -> float:
    """A size as nccl-tests' ``-b``/``-e`` read it (common.cu ``parsesize``): a number and
    an optional suffix of which only the first letter counts, K, M or G in any case as
    powers of 1024, so ``"8MB"`` is 8 MiB, not fabricsim's 8e6 bytes (T for 2^40 is
    fabricsim's, as in :func:`fabricsim.units.size_bytes`)."""
    m = _QUANTITY.match(text)
    scale = {"": 1.0, **_NCCL_SUFFIX}.get(m.group("unit")[:1]) if m else None
    if m is None or scale is None:
        raise InvalidArgumentError(
            f"size {text!r}: expected a number of bytes with an optional K, M, G or T suffix "
            "(powers of 1024, as nccl-tests reads -b and -e)")
    return float(m.group("number")) * scale


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
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZE_BYTES:
        raise InvalidArgumentError(f"dtype={dtype!r}: expected one of {', '.join(DTYPE_SIZE_BYTES)}")
    _check_bytes("size_bytes", size_bytes)
    count = int(size_bytes) // DTYPE_SIZE_BYTES[dtype]
    return count // n if op in _PER_RANK_BLOCK_OPS else count


def rounded_size_bytes(op: str, size_bytes: int, n_ranks: int, dtype: str = "float") -> int:
    """The size nccl-tests runs and prints for a swept ``size_bytes``: whole ``dtype`` elements,
    and for all_gather, reduce_scatter and all_to_all whole per-rank blocks of them."""
    n = _check_ranks(n_ranks)
    count = element_count(op, size_bytes, n, dtype)
    return count * DTYPE_SIZE_BYTES[dtype] * (n if op in _PER_RANK_BLOCK_OPS else 1)


def _time_str(us: float) -> str:
    # common.cu BenchTime: fewer decimals as the time grows, always 7 wide.
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


# Extra columns fabricsim prints right of nccl-tests' own: name, width, units.
_EXTRAS = {"algorithm": ("algorithm", 14, ""), "protocol": ("protocol", 8, ""),
           "analytical_s": ("analytical", 10, "(us)")}
_REQUIRED = ("size_bytes", "count", "time_s", "algbw_Bps", "busbw_Bps")


def _check_layout(op: Any, dtype: Any, redop: Any, root: Any) -> None:
    _check_op(op)
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZE_BYTES:
        raise InvalidArgumentError(f"dtype={dtype!r}: expected one of {', '.join(DTYPE_SIZE_BYTES)}")
    if not isinstance(redop, str) or redop not in REDOPS:
        raise InvalidArgumentError(f"redop={redop!r}: expected one of {', '.join(REDOPS)}")
    if isinstance(root, bool) or not isinstance(root, numbers.Integral) or root < 0:
        raise InvalidArgumentError(f"root={root!r}: expected a rank >= 0")


def format_header(extras: tuple[str, ...] = ()) -> str:
    """nccl-tests' header lines (common.cu run(): time/algbw/busbw per half), with the
    ``extras`` among algorithm, protocol, analytical_s as columns on the right."""
    unknown = [c for c in extras if c not in _EXTRAS]
    if unknown:
        raise InvalidArgumentError(f"extras={tuple(extras)!r}: expected columns among {', '.join(_EXTRAS)}")
    head_x = "".join(f"  {_EXTRAS[c][0]:>{_EXTRAS[c][1]}}" for c in extras)
    unit_x = "".join(f"  {_EXTRAS[c][2]:>{_EXTRAS[c][1]}}" for c in extras)
    return "\n".join([
        "#",
        f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}"
        "           out-of-place                       in-place          ",
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
        f"  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}"
        f"  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}" + head_x,
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
        f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}"
        f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}" + unit_x,
    ])


def format_row(row: Mapping[str, Any], *, op: str, dtype: str = "float", redop: str = "sum", root: int = 0,
               extras: tuple[str, ...] = ()) -> str:
    """One result line: ``row`` maps size_bytes, count, time_s, algbw_Bps, busbw_Bps (and the
    ``extras``) to its values; the other arguments as for :func:`format_table`."""
    _check_layout(op, dtype, redop, root)
    if not isinstance(row, Mapping):
        raise InvalidArgumentError(f"row={type(row).__name__}: expected a mapping of column names to values")
    missing = [c for c in (*_REQUIRED, *extras) if c not in row]
    if missing:
        raise InvalidArgumentError(f"row lacks {', '.join(missing)}: expected {', '.join((*_REQUIRED, *extras))}")
    for c in (*_REQUIRED, "analytical_s"):
        v = row.get(c)
        if v is None and c == "analytical_s":
            continue  # no closed form for this row (or no such column): printed blank
        f = finite(v)
        if f is None or f < 0:
            raise InvalidArgumentError(f"column {c} holds {shown(v)}: expected finite numbers >= 0")
    opname = redop if op in _REDOP_OPS else "none"
    rootstr = f"{root if op in _ROOTED_OPS else -1:6d}"
    algbw, busbw = row["algbw_Bps"] / 1e9, row["busbw_Bps"] / 1e9
    # fabricsim has one result per size: it fills both the out-of-place and in-place halves.
    half = f"  {_time_str(row['time_s'] * 1e6)}  {algbw:6.2f}  {busbw:6.2f}  {'N/A':>5}"
    line = f"{int(row['size_bytes']):12d}  {int(row['count']):12d}  {dtype:>8}  {opname:>6}  {rootstr}" + half + half
    for c in extras:
        v = row[c]
        text = "" if v is None else _time_str(v * 1e6) if c == "analytical_s" else str(v)
        line += f"  {text:>{_EXTRAS[c][1]}}"
    return line


def format_footer(busbw_Bps: Sequence[float]) -> str:
    """nccl-tests' summary lines: the average of the rows' busbw, in GB/s ("%g %s" with an
    empty status leaves a trailing space, as common.cu prints it)."""
    values = quantities("busbw_Bps", busbw_Bps, None, number)
    avg = float(values.mean()) / 1e9 if values.size else 0.0
    return "\n".join(["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:g} ", "#"])


def format_table(table: pa.Table, *, op: str, dtype: str = "float", redop: str = "sum", root: int = 0) -> str:
    """Text in nccl-tests' own layout for a table of one result per message size.

    ``table`` is a :class:`pyarrow.Table` (or anything with ``column_names`` and
    ``column(name).to_pylist()``) with columns ``size_bytes, count, time_s, algbw_Bps, busbw_Bps``
    and optionally ``algorithm, protocol, analytical_s``, printed as extra columns on the right.
    fabricsim has one result per size: it fills both the out-of-place and the in-place columns,
    and ``#wrong`` reads "N/A", as nccl-tests prints it when data checking is off (``-c 0``).
    ``redop`` is printed for the reducing ops (all_reduce, reduce_scatter, reduce) and send_recv
    (as nccl-tests' sendrecv prints it), "none" for the others; ``root`` for broadcast and
    reduce, -1 for the others. Ends with nccl-tests' summary lines, the average busbw over the
    rows in GB/s. :func:`format_header`, :func:`format_row`
    and :func:`format_footer` print the same a line at a time.
    """
    _check_layout(op, dtype, redop, root)
    names = getattr(table, "column_names", None)
    if names is None:
        raise InvalidArgumentError(f"table={type(table).__name__}: expected a pyarrow.Table")
    missing = [c for c in _REQUIRED if c not in names]
    if missing:
        raise InvalidArgumentError(f"table lacks column(s) {', '.join(missing)}: expected {', '.join(_REQUIRED)}")
    extras = tuple(c for c in _EXTRAS if c in names)
    names = (*_REQUIRED, *extras)
    rows = [dict(zip(names, values)) for values in zip(*(table.column(c).to_pylist() for c in names))]
    lines = [format_header(extras)]
    lines += [format_row(r, op=op, dtype=dtype, redop=redop, root=root, extras=extras) for r in rows]
    lines.append(format_footer([r["busbw_Bps"] for r in rows]))
    return "\n".join(lines) + "\n"
