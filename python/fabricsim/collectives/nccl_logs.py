"""Reading nccl-tests' own output, so that fabricsim can be calibrated from a cluster's logs.

:func:`read_nccl_tests` takes the text an ``all_reduce_perf`` (or any other ``*_perf``) run
printed and returns its results table in SI units, with the op and the rank count the run had.

The layout is nccl-tests' (``src/common.cu``, ``src/util.cu``; the same that
:func:`fabricsim.collectives.conventions.format_table` prints)::

    # Collective test starting: all_reduce_perf            (2.14 and later)
    # nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 ...
    # Using devices
    #  Rank  0 Group  0 Pid   1234 on     node-a device  0 [0x1b] NVIDIA H100 80GB HBM3
    ...
    #                                                              out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
         1048576        262144     float     sum      -1    30.12   34.81   60.92      0    29.87   35.10   61.43      0
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 61.175

The columns are read by the names on the header line, so older layouts work too: before
nccl-tests 2.11 or so each test printed its own header, without ``redop`` for all_gather,
alltoall and sendrecv, with ``root`` only for broadcast and reduce, and with an ``error``
column (the largest deviation, not a count) where newer versions print ``#wrong``. Columns
right of the second half (per-iteration statistics, timestamps, fabricsim's algorithm,
protocol and analytical columns) are skipped.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from .._checks import shown
from .._files import read_bytes, reason
from ..exceptions import InvalidArgumentError, NcclLogError
from .conventions import OPS, _check_op, _check_ranks, busbw_factor

__all__ = ["NcclTestsLog", "read_nccl_tests"]


@dataclass(frozen=True)
class NcclTestsLog:
    """One nccl-tests run, as :func:`read_nccl_tests` read it.

    ``rows`` is a :class:`pyarrow.Table`, one row per line of results:

    ========================  =======  ===========================================================
    size_bytes                int64    nccl-tests' "size" (B): the S of algbw = S / time
    count                     int64    its "count" (elements), the count argument of the NCCL call
    dtype                     string   "float", "bfloat16", ... as printed
    redop                     string   "sum", "max", ...; null for an op that reduces nothing
                                       (printed "none", or no column in older versions)
    root                      int64    the root rank of broadcast and reduce; null for the others
                                       (printed -1, or no column in older versions)
    time_s                    float64  out-of-place time per operation (s); the column nccl-tests
                                       prints, which is CPU time when it ran with ``-C 1``
    algbw_Bps, busbw_Bps      float64  out-of-place algorithm and bus bandwidths (bytes/s)
    in_place_time_s           float64  the same for in-place (s, bytes/s); null where the log
    in_place_algbw_Bps                 has no in-place half
    in_place_busbw_Bps
    n_wrong                   int64    wrong elements the data check found, out-of-place and
                                       in-place added up; null for "N/A" (``-c 0``) and for
                                       older versions' "error" column, which is not a count
    line                      int64    the row's line number in the log, from 1
    ========================  =======  ===========================================================

    nccl-tests prints times in microseconds and bandwidths in GB/s with GB = 1e9 bytes; the
    table holds seconds and bytes per second, so "1234.5" us is 1.2345e-3 s and "61.43"
    GB/s is 6.143e10 B/s. The object exposes ``__arrow_c_stream__`` (the rows), so polars,
    DuckDB and pandas read it directly.

    Example::

        log = '''
        #   size   count  type  redop  root    time   algbw   busbw  #wrong    time   algbw   busbw  #wrong
         1048576  262144 float    sum    -1   30.00   34.95   61.17       0   30.00   34.95   61.17       0
        16777216 4194304 float    sum    -1  100.00  167.77  293.60       0  100.00  167.77  293.60       0
        '''
        log = fs.read_nccl_tests(log, op="all_reduce", n_ranks=8)
        log.op, log.n_ranks, log.rows.num_rows   # ('all_reduce', 8, 2)
        fs.nccl_tests(fs.hgx_h100(), log.op, "1M", "16M", 16)   # the same sizes, simulated
    """

    #: The collective, as fabricsim names it: all_reduce, all_gather, reduce_scatter,
    #: all_to_all, broadcast, reduce or send_recv.
    op: str
    #: Ranks of the communicator the results are of.
    n_ranks: int
    #: Distinct hosts among those ranks; None when the log lists no ranks (or lists other
    #: ranks than ``n_ranks``, given to :func:`read_nccl_tests`, says).
    n_hosts: int | None
    #: The device name of each listed rank, in rank order, as printed ("NVIDIA H100 80GB HBM3").
    devices: tuple[str, ...]
    #: The path read, or "<text>" for a log passed as text.
    source: str
    rows: pa.Table = field(repr=False)

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self.rows.__arrow_c_stream__(requested_schema)


# --------------------------------------------------------------------------------- patterns

# A prefix a launcher puts before each line: Open MPI's --tag-output "[1,0]<stdout>:",
# MPICH's and Intel MPI's "[0] ", Slurm's srun --label "0: ", pdsh's "host: ". nccl-tests'
# own lines begin with "#" or a number, so none of them is taken for one.
_PREFIX = re.compile(r"\s*(?:\[\d+(?:,\d+)*\](?:<std(?:out|err)>)?:?\s?|\d+:\s|[A-Za-z][\w.-]*:\s)")
_NTHREAD = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)\b")
_COLLECTIVE = re.compile(r"Collective test starting:\s*(\S+)")
# "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s" (2.13 and later; the
# bus id was "[0x%02x]" before 2.14), "#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s"
# before groups.
_RANK = re.compile(
    r"#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?(?:Pid\s+\d+\s+on\s+(?P<host>\S+)\s+)?"
    r"device\s+\d+\s+\[[^\]]*\]\s*(?P<name>.*?)\s*$")
_FOOTER = ("Out of bounds values", "Avg bus bandwidth")
_INT = re.compile(r"-?\d+")
_NUMBER = re.compile(r"(?:\d+(?:\.(\d*))?|\.(\d+))(?:[eE]([+-]?\d+))?")
_NAME = re.compile(r"[A-Za-z][\w.]*")
_TIME_NAMES = ("time", "cputime")
_WRONG_NAMES = ("#wrong", "error")

# How nccl-tests names its binaries (and fabricsim its ops), squeezed to letters and digits,
# longest first so that "reduce" is only what is left of a name once "allreduce" and
# "reducescatter" are taken out of it.
_OP_KEYS = (
    ("reducescatter", "reduce_scatter"), ("allreduce", "all_reduce"), ("allgather", "all_gather"),
    ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("sendrecv", "send_recv"),
    ("reduce", "reduce"),
)
# nccl-tests binaries that are none of fabricsim's ops, though their names hold one's.
_NOT_OPS = ("alltoallv",)


def _ops_named(name: str) -> list[str]:
    """The fabricsim ops whose name (or nccl-tests binary's) occurs in ``name``."""
    s = re.sub(r"[^a-z0-9]", "", name.lower())
    for key in _NOT_OPS:
        s = s.replace(key, " ")
    found = []
    for key, op in _OP_KEYS:
        if key in s:
            found.append(op)
            s = s.replace(key, " ")
    return found


def _strip_prefix(line: str) -> str:
    for _ in range(2):  # e.g. pdsh's host prefix before Open MPI's tag
        m = _PREFIX.match(line)
        if not m or m.end() == 0:
            break
        line = line[m.end():]
    return line.strip()


def _shorten(text: str, n: int = 100) -> str:
    return repr(text if len(text) <= n else text[: n - 3] + "...")


# ------------------------------------------------------------------------------ the source

def _load(source: str | os.PathLike[str]) -> tuple[str, str, str | None]:
    """(label for messages, text, file name) of ``source``."""
    if isinstance(source, str) and ("\n" in source or "\r" in source or not source):
        return "<text>", source, None
    if not isinstance(source, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"source={type(source).__name__} {shown(source)[:60]}: expected a path "
            "(str or os.PathLike) or the log's text (a str with its newlines)")
    label = os.fsdecode(os.fspath(source))
    try:
        data = read_bytes("source", source)[1]
    except OSError as e:
        hint = ""
        if isinstance(e, FileNotFoundError) and isinstance(source, str):
            hint = " (a str without a newline is taken for a path; pass a log's text with its newlines)"
        raise NcclLogError(f"cannot read nccl-tests log {label}: {reason(e)}{hint}") from e
    if data[:2] == b"\x1f\x8b":
        raise NcclLogError(f"{label} is gzip-compressed: expected nccl-tests' text output (decompress it first)")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise NcclLogError(
            f"{label} is a binary file (a NUL byte at offset {nul}): expected nccl-tests' text output")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise NcclLogError(
            f"{label} is not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} (line {line}); "
            "expected nccl-tests' text output") from None
    return label, text, os.path.basename(label)


# ---------------------------------------------------------------------------- the columns

@dataclass(frozen=True)
class _Layout:
    line: int
    names: tuple[str, ...]
    redop: int | None
    root: int | None
    halves: tuple[tuple[int, int, int, int | None], ...]  # (time, algbw, busbw, wrong) per half

    @property
    def n_needed(self) -> int:
        return max(i for h in self.halves for i in h if i is not None) + 1


def _layout(names: list[str], line: int, label: str) -> _Layout:
    """The columns a header line names: size count type [redop] [root], then an out-of-place
    half time algbw busbw #wrong (or error), and an in-place half like it."""
    i, redop, root = 3, None, None
    if i < len(names) and names[i] == "redop":
        redop, i = i, i + 1
    if i < len(names) and names[i] == "root":
        root, i = i, i + 1
    halves = []
    for j in range(i, len(names) - 2):
        if names[j] in _TIME_NAMES and names[j + 1:j + 3] == ["algbw", "busbw"]:
            wrong = j + 3 if j + 3 < len(names) and names[j + 3] in _WRONG_NAMES else None
            halves.append((j, j + 1, j + 2, wrong))
    if not halves or halves[0][0] != i or len(halves) > 2:
        raise NcclLogError(
            f"{label}, line {line}: expected nccl-tests' columns size count type [redop] [root] "
            f"time algbw busbw #wrong [time algbw busbw #wrong], got {' '.join(names)!r}")
    return _Layout(line, tuple(names), redop, root, tuple(halves))


@dataclass
class _Value:
    """A number as printed, and half the unit of its last printed digit (its precision)."""
    value: float
    half_ulp: float


def _number(token: str) -> _Value | None:
    if token.lower() in ("inf", "nan", "-nan"):
        return _Value(float(token.lstrip("-")), math.inf)
    m = _NUMBER.fullmatch(token)
    if not m:
        return None
    decimals = len(m.group(1) or m.group(2) or "")
    # An exponent of any length: Python's int() refuses more than 4300 digits, and past 10**6
    # the value is 0 or inf whatever the digits (float() reads the token itself).
    e_text = m.group(3) or "0"
    exponent = int(e_text) if len(e_text) <= 7 else (-(10**6) if e_text.startswith("-") else 10**6)
    value = float(token)  # beyond the doubles (1e400): inf, as nccl-tests prints a time of 0's bandwidth
    precision = exponent - decimals
    return _Value(value, 0.5 * 10.0 ** precision if precision <= 300 and math.isfinite(value) else math.inf)


def _whole(token: str) -> int | None:
    """A whole number as printed, or None; None too past 30 digits, which no count or size
    reaches (and Python's int() refuses past 4300)."""
    return int(token) if len(token) <= 30 and _INT.fullmatch(token) else None


@dataclass
class _Row:
    line: int
    size: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    halves: list[tuple[_Value, _Value, _Value, int | None]]


def _row(tokens: list[str], line: int, layout: _Layout, label: str, text: str) -> _Row:
    names = layout.names
    if len(tokens) < layout.n_needed:
        shown = " ".join(names[:layout.n_needed])
        raise NcclLogError(
            f"{label}, line {line}: expected {layout.n_needed} columns ({shown}) as the header on "
            f"line {layout.line} names them, got {len(tokens)}: {_shorten(text)}")

    def bad(i: int, expected: str) -> NcclLogError:
        return NcclLogError(
            f"{label}, line {line}: column {i + 1} ({names[i]}) reads {_shorten(tokens[i], 40)}: expected "
            f"{expected}; the line reads {_shorten(text)}")

    def integer(i: int, lo: int = 0) -> int:
        value = _whole(tokens[i])
        if value is None or not lo <= value < 2**63:
            raise bad(i, f"a whole number in [{lo}, 2**63)")
        return value

    def name(i: int) -> str:
        if not _NAME.fullmatch(tokens[i]):
            raise bad(i, "a name")
        return tokens[i]

    size, count, dtype = integer(0), integer(1), name(2)
    redop: str | None = None
    root: int | None = None
    if layout.redop is not None:
        redop = name(layout.redop)
        redop = None if redop == "none" else redop
    if layout.root is not None:
        root = integer(layout.root, lo=-1)
        root = None if root < 0 else root
    halves: list[tuple[_Value, _Value, _Value, int | None]] = []
    for t, a, b, w in layout.halves:
        values: list[_Value] = []
        for i, what in ((t, "a time in us"), (a, "a bandwidth in GB/s"), (b, "a bandwidth in GB/s")):
            v = _number(tokens[i])
            if v is None:
                raise bad(i, f"{what}, a number >= 0")
            values.append(v)
        n_wrong = None
        if w is not None and names[w] == "#wrong" and tokens[w] != "N/A":
            n_wrong = _whole(tokens[w])  # %5li; a variant prints -1 with checking off
            if n_wrong is None:
                v = _number(tokens[w])  # %6g: 1.23457e+06
                n_wrong = int(v.value) if v is not None and math.isfinite(v.value) else None
            # Below 2**62, so that the two halves' counts add up within the table's int64.
            if n_wrong is None or n_wrong >= 2**62:
                raise bad(w, "a count of wrong elements, or N/A (counts are below 2**62)")
            n_wrong = n_wrong if n_wrong >= 0 else None
        halves.append((values[0], values[1], values[2], n_wrong))
    return _Row(line, size, count, dtype, redop, root, halves)


# --------------------------------------------------------------------------------- the scan

@dataclass
class _RankEntry:
    line: int
    rank: int
    group: int | None
    host: str | None
    name: str


@dataclass
class _Scan:
    layout: _Layout | None = None
    rows: list[_Row] = field(default_factory=list)
    ranks: list[_RankEntry] = field(default_factory=list)
    collective: tuple[int, str] | None = None  # (line, program name)
    nthread: tuple[int, int, int] | None = None  # (line, nThread, nGpus)
    first_data_like: int | None = None
    first_line: tuple[int, str] | None = None


def _scan(text: str, label: str) -> _Scan:
    scan = _Scan()
    in_table = False
    for number, raw in enumerate(text.splitlines(), 1):
        s = _strip_prefix(raw)
        if not s:
            continue
        if scan.first_line is None:
            scan.first_line = (number, s)
        if s.startswith("#"):
            body = s[1:].strip()
            m = _NTHREAD.match(body)
            if m:
                if scan.nthread is not None:
                    raise NcclLogError(
                        f"{label}, line {number}: a second nccl-tests run starts here (the first "
                        f"began on line {scan.nthread[0]}): expected one run; split the log. If "
                        "mpirun started copies of a binary built without MPI=1, each ran alone "
                        "on its own GPUs: rebuild nccl-tests with MPI=1")
                n_thread, n_gpus = _whole(m.group(1)), _whole(m.group(2))
                if n_thread is None or n_gpus is None or n_thread * n_gpus > _MAX_RANKS:
                    raise NcclLogError(
                        f"{label}, line {number}: nThread {_shorten(m.group(1), 24)} x nGpus {_shorten(m.group(2), 24)} "
                        f"is more ranks per process than a communicator has (at most {_MAX_RANKS:,})")
                scan.nthread = (number, n_thread, n_gpus)
                continue
            m = _COLLECTIVE.match(body)
            if m:
                if scan.collective is None:
                    scan.collective = (number, m.group(1))
                continue
            m = _RANK.match(s)
            if m:
                rank, group = _whole(m["rank"]), None if m["group"] is None else _whole(m["group"])
                if rank is None or rank >= _MAX_RANKS or (m["group"] is not None and group is None):
                    raise NcclLogError(
                        f"{label}, line {number}: expected a rank and group below {_MAX_RANKS:,} (the most ranks a "
                        f"communicator has), got {_shorten(s)}")
                scan.ranks.append(_RankEntry(number, rank, group, m["host"], m["name"]))
                continue
            names = body.split()
            if names[:3] == ["size", "count", "type"] and "algbw" in names and "busbw" in names:
                if scan.layout is not None:
                    raise NcclLogError(
                        f"{label}, line {number}: a second results table starts here (the first on "
                        f"line {scan.layout.line}): expected one run; split the log")
                scan.layout = _layout(names, number, label)
                in_table = True
            elif body.startswith(_FOOTER):
                in_table = False
            continue
        tokens = s.split()
        if not tokens[0].isdigit():
            continue  # NCCL INFO and WARN lines, launcher chatter, per-iteration detail
        if scan.first_data_like is None:
            scan.first_data_like = number
        if in_table:
            assert scan.layout is not None  # the table began at its header line
            scan.rows.append(_row(tokens, number, scan.layout, label, s))
    if scan.layout is None:
        seen = ("" if scan.first_line is None else
                f" (line {scan.first_line[0]} reads {_shorten(scan.first_line[1], 80)})")
        where = (f" before the first line of numbers (line {scan.first_data_like})"
                 if scan.first_data_like is not None else "")
        raise NcclLogError(
            f"{label} is not nccl-tests output: expected a header line '#  size  count  type  "
            f"redop  root  time  algbw  busbw  #wrong ...'{where}, found none{seen}")
    if not scan.rows:
        raise NcclLogError(
            f"{label}, line {scan.layout.line}: the results table has no data rows: expected lines "
            f"of {' '.join(scan.layout.names[:scan.layout.n_needed])} after it")
    return scan


# ------------------------------------------------------------------------ op and rank count

def _resolve_op(op: str | None, scan: _Scan, label: str, filename: str | None) -> tuple[str, str]:
    """The op and where it came from (for messages)."""
    logged = None
    if scan.collective is not None:
        line, program = scan.collective
        found = _ops_named(program)
        if len(found) != 1:
            if op is None:
                which = (f"names several ops ({', '.join(found)})" if found else
                         f"is none of the ops fabricsim models ({', '.join(OPS)})")
                raise NcclLogError(
                    f"{label}, line {line}: the log is of {program}, which {which}: pass op= if "
                    "it is of one op fabricsim models")
        else:
            logged = (found[0], f"line {line}: 'Collective test starting: {program}'")
    if op is not None:
        _check_op(op)
        if logged is not None and logged[0] != op:
            raise NcclLogError(
                f"op={op!r}, but {label}, {logged[1]}, says the log is of {logged[0]}")
        return op, f"op={op!r} as given"
    if logged is not None:
        return logged
    found = _ops_named(filename) if filename else []
    if len(found) == 1:
        return found[0], f"the file name {filename!r}"
    named = (f"its file name {filename!r} names {' and '.join(found)}" if found else
             f"its file name {filename!r} names none" if filename else "it was given as text")
    raise NcclLogError(
        f"cannot tell which collective {label} holds: it has no '# Collective test starting:' line "
        f"(nccl-tests 2.14 and later print one) and {named}; pass op=, one of {', '.join(OPS)}")


def _listed_ranks(scan: _Scan, label: str) -> tuple[list[_RankEntry], str]:
    """The '# Rank' lines of the communicator the results are of: nccl-tests splits the ranks
    into groups (NCCL_TESTS_SPLIT, NCCL_TESTS_SPLIT_MASK), each its own communicator, and
    prints the results of rank 0's."""
    entries = scan.ranks
    seen: dict[int, int] = {}
    for e in entries:
        if e.rank in seen:
            raise NcclLogError(
                f"{label}, line {e.line}: rank {e.rank} is listed a second time (first on line "
                f"{seen[e.rank]}): expected each rank once")
        seen[e.rank] = e.line
    # The gaps in the sorted ranks (not every rank up to the largest: a '# Rank 1000000000' line
    # alone would make a billion of them).
    missing: list[int] = []
    listed = sorted(seen)
    for a, b in zip([-1, *listed], listed):
        missing.extend(range(a + 1, min(b, a + 1 + 9 - len(missing))))
        if len(missing) > 8:
            break
    span = f"lines {entries[0].line}-{entries[-1].line}"
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise NcclLogError(
            f"{label}, {span}: the '# Rank' list misses rank(s) {shown} of 0-{max(seen)}: is it "
            "truncated? Pass n_ranks= to give the rank count")
    if scan.nthread is not None:
        line, n_thread, n_gpus = scan.nthread
        per_process = n_thread * n_gpus
        if per_process and len(entries) % per_process:
            raise NcclLogError(
                f"{label}, {span}: {len(entries)} ranks are listed, but line {line} says each "
                f"process ran nThread x nGpus = {per_process}: is the list truncated? Pass n_ranks= "
                "to give the rank count")
    group = next(e.group for e in entries if e.rank == 0)
    mine = sorted((e for e in entries if e.group == group), key=lambda e: e.rank)
    how = f"the {len(mine)} '# Rank' lines, {span}"
    if len(mine) != len(entries):
        how = f"the {len(mine)} '# Rank' lines of group {group}, {span}"
    return mine, how


# busbw = algbw x factor with factor = c (n-1)/n, c = 2 for all_reduce and 1 for all_gather,
# reduce_scatter and all_to_all; 1 for the others, whatever n.
_FACTOR_SCALE = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}
_MAX_RANKS = 2**32 - 1


def _ranks_fitting(op: str, lo: float, hi: float) -> tuple[int, int | None] | None:
    """The rank counts (first, last; last None if unbounded) whose bus factor for ``op`` lies
    in [lo, hi]; None if none does. Every count fits a constant factor that does."""
    c = _FACTOR_SCALE.get(op)
    if c is None:
        return (1, None) if lo <= 1.0 <= hi else None

    def f(n: int) -> float:  # increasing in n
        return c * (n - 1) / n

    if lo >= c:
        return None
    first = 1 if lo <= 0 else max(1, math.floor(c / (c - lo)) - 1)
    while f(first) < lo:
        first += 1
    if first > _MAX_RANKS:
        return None
    last = None if hi >= c else max(1, math.ceil(c / (c - hi)) + 1)
    if last is not None:
        while last >= 1 and f(last) > hi:
            last -= 1
        if last < first or last > _MAX_RANKS:
            return None if last < first else (first, None)
    return first, last


def _counts(fit: tuple[int, int | None]) -> str:
    first, last = fit
    if last is None:
        return f"{first} or more ranks"
    return f"{first} ranks" if first == last else f"{first} to {last} ranks"


@dataclass
class _Ratio:
    """The interval of busbw/algbw that every row allows within its printed precision."""
    lo: float
    hi: float
    lo_line: int
    hi_line: int
    #: (line, algbw, busbw, lo, hi): each half that bounds the ratio.
    entries: list[tuple[int, _Value, _Value, float, float]]


def _ratio(rows: list[_Row]) -> _Ratio | None:
    r = _Ratio(-math.inf, math.inf, 0, 0, [])
    for row in rows:
        for _, a, b, _ in row.halves:
            # Rows of 0.00 GB/s (the small sizes) say nothing of the ratio.
            if not (math.isfinite(a.value) and math.isfinite(b.value)) or a.value <= a.half_ulp:
                continue
            lo = (b.value - b.half_ulp) / (a.value + a.half_ulp)
            hi = (b.value + b.half_ulp) / (a.value - a.half_ulp)
            # Room for the decimal-to-binary rounding of the printed numbers.
            lo, hi = lo - 1e-9 * abs(lo), hi + 1e-9 * abs(hi)
            r.entries.append((row.line, a, b, lo, hi))
            if lo > r.lo:
                r.lo, r.lo_line = lo, row.line
            if hi < r.hi:
                r.hi, r.hi_line = hi, row.line
    return r if r.entries else None


def _check_factor(op: str, op_how: str, n: int, n_how: str, ratio: _Ratio | None, label: str,
                  ranks_listed: bool) -> None:
    """busbw/algbw must be nccl-tests' bus factor for ``op`` on ``n`` ranks in every row."""
    if ratio is None:
        return
    if ratio.lo > ratio.hi:
        raise NcclLogError(
            f"{label}: busbw/algbw is at least {ratio.lo:.4f} on line {ratio.lo_line} but at most "
            f"{ratio.hi:.4f} on line {ratio.hi_line}: nccl-tests' ratio is one constant for one op "
            "on one rank count, so the columns are not what their header says")
    factor = busbw_factor(op, n)
    if ratio.lo <= factor <= ratio.hi:
        return
    # The row that shows it best: the largest bandwidth, printed to the most significant digits.
    line, a, b = max(((line, a, b) for line, a, b, lo, hi in ratio.entries if not lo <= factor <= hi),
                     key=lambda e: e[1].value)
    message = (f"{label}, line {line}: busbw/algbw is {b.value / a.value:.4f} (busbw {b.value:g} GB/s, "
               f"algbw {a.value:g} GB/s), but nccl-tests' bus factor for {op} ({op_how}) on {n} ranks "
               f"({n_how}) is {factor:.4f}.")
    other_n = _ranks_fitting(op, ratio.lo, ratio.hi)
    other_ops = [o for o in OPS if o != op and ratio.lo <= busbw_factor(o, n) <= ratio.hi]
    causes = []
    if other_n is not None:
        what = "the '# Rank' list looks truncated" if ranks_listed else "the rank count is wrong"
        causes.append(f"The bandwidths fit {op} on {_counts(other_n)}: {what}; pass n_ranks= the "
                      "rank count of the run.")
    if other_ops:
        causes.append(f"The bandwidths fit {', '.join(other_ops)} on {n} ranks: the log looks to be "
                      "of another op; pass op=.")
    if not causes:
        causes.append(f"No op fits them on {n} ranks, nor {op} on any rank count: the columns are "
                      "not what their header says.")
    raise NcclLogError(" ".join([message, *causes]))


def _resolve_ranks(n_ranks: int | None, op: str, scan: _Scan, ratio: _Ratio | None,
                   label: str) -> tuple[int, str, int | None, tuple[str, ...]]:
    """(n_ranks, where it came from, n_hosts, devices)."""
    listed, how = _listed_ranks(scan, label) if scan.ranks and n_ranks is None else ([], "")
    if n_ranks is not None:
        n = _check_ranks(n_ranks)
        devices = tuple(e.name for e in sorted(scan.ranks, key=lambda e: e.rank))
        hosts = {e.host for e in scan.ranks}
        n_hosts = len(hosts) if len(scan.ranks) == n and None not in hosts else None
        return n, f"n_ranks={n} as given", n_hosts, devices
    if listed:
        hosts = {e.host for e in listed}
        return len(listed), how, (None if None in hosts else len(hosts)), tuple(e.name for e in listed)
    fit = None if ratio is None or ratio.lo > ratio.hi else _ranks_fitting(op, ratio.lo, ratio.hi)
    if fit is not None and fit[0] == fit[1]:
        return fit[0], "busbw/algbw, the log listing no ranks", None, ()
    if ratio is None:
        why = "and no row has a bandwidth above 0 to tell it by"
    elif op not in _FACTOR_SCALE:
        why = f"and busbw = algbw for {op} on any number of ranks"
    elif fit is None:
        why = "and busbw/algbw fits no rank count"
    else:
        why = f"and busbw/algbw fits {_counts(fit)}, within the printed precision"
    per_process = ""
    if scan.nthread is not None:
        per_process = (f"; line {scan.nthread[0]} says each process ran nThread x nGpus = "
                       f"{scan.nthread[1] * scan.nthread[2]} of them")
    raise NcclLogError(
        f"cannot tell how many ranks {label} ran on: it lists no '#  Rank' lines {why}{per_process}; "
        "pass n_ranks=")


# ------------------------------------------------------------------------------ the reader

def _table(rows: list[_Row]) -> pa.Table:
    def half(k: int, i: Literal[0, 1, 2], scale: float) -> pa.Array[Any]:
        return pa.array([r.halves[k][i].value * scale if len(r.halves) > k else None for r in rows],
                        type=pa.float64())

    def wrong(r: _Row) -> int | None:
        counts = [h[3] for h in r.halves if h[3] is not None]
        return sum(counts) if counts else None

    return pa.table({
        "size_bytes": pa.array([r.size for r in rows], type=pa.int64()),
        "count": pa.array([r.count for r in rows], type=pa.int64()),
        "dtype": pa.array([r.dtype for r in rows], type=pa.string()),
        "redop": pa.array([r.redop for r in rows], type=pa.string()),
        "root": pa.array([r.root for r in rows], type=pa.int64()),
        "time_s": half(0, 0, 1e-6),
        "algbw_Bps": half(0, 1, 1e9),
        "busbw_Bps": half(0, 2, 1e9),
        "in_place_time_s": half(1, 0, 1e-6),
        "in_place_algbw_Bps": half(1, 1, 1e9),
        "in_place_busbw_Bps": half(1, 2, 1e9),
        "n_wrong": pa.array([wrong(r) for r in rows], type=pa.int64()),
        "line": pa.array([r.line for r in rows], type=pa.int64()),
    })


def read_nccl_tests(source: str | os.PathLike[str], *, op: str | None = None,
                    n_ranks: int | None = None) -> NcclTestsLog:
    """Read the output of an nccl-tests run (``all_reduce_perf`` and the like).

    ``source`` is a path (str or os.PathLike) or the log's text, a str with newlines. Lines
    may carry a launcher's prefix (Open MPI's ``[1,0]<stdout>:``, srun's ``0: ``, MPICH's
    ``[0] ``); NCCL's INFO and WARN lines and other output between the rows are skipped. The
    log must hold one run: one results table.

    The op (fabricsim's name: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast,
    reduce, send_recv) is, first found:

    1. ``op``, if given (an error if the log's "Collective test starting" line names another);
    2. the program on the log's ``# Collective test starting: all_reduce_perf`` line (nccl-tests
       2.14 and later print it);
    3. the file name, if it names exactly one op as nccl-tests or fabricsim spell them
       (``all_reduce_perf.log``, ``alltoall-16gpu.txt``, ``nccl_allgather.out``).

    The rank count is, first found:

    1. ``n_ranks``, if given (for a log whose rank list is cut short);
    2. the ``#  Rank  N ...`` lines: the ranks of rank 0's group (nccl-tests' communicator;
       every rank unless NCCL_TESTS_SPLIT split them), with ``n_hosts`` the distinct host
       names among them;
    3. busbw/algbw: for all_reduce (2(n-1)/n), all_gather, reduce_scatter and all_to_all
       ((n-1)/n) the ratio nccl-tests prints gives n, when one n alone fits every row within
       the printed precision.

    Otherwise an error asks for ``n_ranks``: the log's ``nGpus`` is per process and nccl-tests
    does not print how many processes there were, but in the rank list.

    Every row must then have busbw/algbw equal to nccl-tests' bus factor for that op and rank
    count, within the printed precision; if not, :class:`~fabricsim.exceptions.NcclLogError`
    says whether another rank count (a truncated rank list) or another op fits.

    Raises :class:`~fabricsim.exceptions.NcclLogError` (an ``InvalidArgumentError``, so a
    ``ValueError``) for a missing, binary or non-UTF-8 file and for text that is not
    nccl-tests output, naming the source, the line and what was expected there.

    Example::

        log = '''
        #   size   count  type  redop  root    time   algbw   busbw  #wrong    time   algbw   busbw  #wrong
         1048576  262144 float    sum    -1   30.00   34.95   61.17       0   30.00   34.95   61.17       0
        16777216 4194304 float    sum    -1  100.00  167.77  293.60       0  100.00  167.77  293.60       0
        '''
        log = fs.read_nccl_tests(log, op="all_reduce", n_ranks=8)   # or a path to all_reduce_perf's output
        log.rows.select(["size_bytes", "time_s", "busbw_Bps"]).to_pylist()[0]
        # {'size_bytes': 1048576, 'time_s': 3e-05, 'busbw_Bps': 61170000000.0}
    """
    label, text, filename = _load(source)
    scan = _scan(text, label)
    op, op_how = _resolve_op(op, scan, label, filename)
    ratio = _ratio(scan.rows)
    n, n_how, n_hosts, devices = _resolve_ranks(n_ranks, op, scan, ratio, label)
    _check_factor(op, op_how, n, n_how, ratio, label, ranks_listed=bool(scan.ranks) and n_ranks is None)
    return NcclTestsLog(op=op, n_ranks=n, n_hosts=n_hosts, devices=devices, source=label,
                        rows=_table(scan.rows))
