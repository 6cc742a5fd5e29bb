"""fabricsim.collectives.conventions: busbw factors, sizes and the text layout of nccl-tests' tables."""

import pyarrow as pa
import pytest

from fabricsim.exceptions import InvalidArgumentError
from fabricsim.collectives.conventions import (
    BUSBW_FACTOR,
    DTYPE_SIZE_BYTES,
    algbw_size_bytes,
    busbw_factor,
    element_count,
    format_footer,
    format_header,
    format_row,
    format_table,
    rounded_size_bytes,
    size_flag_bytes,
)

# Header block and one row as nccl-tests printed them, from NVIDIA/nccl-tests issues #249 and #128
# (reduce_scatter_perf, 8 ranks, float, sum); nccl-tests pads the first and last header lines with
# spaces. fabricsim has one result per size, so the row's in-place half (23.18 us there) is
# replaced by a copy of its out-of-place half.
NCCL_TESTS_HEADER = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
]
NCCL_TESTS_ROW = "         256             8     float     sum      -1    24.01    0.01    0.01      0    24.01    0.01    0.01      0"


@pytest.mark.parametrize("op, n, expected", [
    ("all_reduce", 8, 14 / 8), ("all_reduce", 2, 1.0), ("reduce_scatter", 8, 7 / 8),
    ("all_gather", 8, 7 / 8), ("all_to_all", 4, 3 / 4), ("broadcast", 8, 1.0),
    ("reduce", 8, 1.0), ("send_recv", 2, 1.0), ("all_reduce", 1, 0.0),
])
def test_busbw_factors(op, n, expected):
    assert busbw_factor(op, n) == pytest.approx(expected, rel=1e-15)
    assert BUSBW_FACTOR[op](n) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("op, per_rank, expected", [
    ("all_reduce", 1024, 1024), ("broadcast", 1024, 1024), ("reduce", 1024, 1024),
    ("send_recv", 1024, 1024), ("all_gather", 1024, 8192), ("reduce_scatter", 1024, 8192),
    ("all_to_all", 1024, 8192),
])
def test_algbw_size(op, per_rank, expected):
    assert algbw_size_bytes(op, per_rank, 8) == expected


def test_element_count_follows_nccl_tests():
    assert element_count("all_reduce", 1024, 8, "float") == 256
    assert element_count("all_gather", 1024, 8, "float") == 32  # per-rank count
    assert element_count("all_to_all", 1 << 20, 4, "bfloat16") == (1 << 19) // 4
    assert DTYPE_SIZE_BYTES["double"] == 8 and DTYPE_SIZE_BYTES["half"] == 2


@pytest.mark.parametrize("op, size, n, dtype, expected", [
    ("all_gather", 1000, 16, "float", 960),          # 250 floats: 15 per rank
    ("reduce_scatter", 1000, 16, "float", 960),
    ("all_to_all", 8 << 20, 3, "bfloat16", 8388606),  # 4194304 elements: 1398101 per peer
    ("all_reduce", 1001, 16, "float", 1000),         # whole elements only
    ("broadcast", 1001, 16, "float", 1000),
    ("send_recv", 7, 2, "double", 0),
    ("all_gather", 1 << 20, 8, "float", 1 << 20),     # already whole blocks
])
def test_rounded_size_is_what_nccl_tests_prints_for_a_swept_size(op, size, n, dtype, expected):
    """common.cu: count = size / wordSize, getCollByteCount cuts it to whole per-rank blocks for
    all_gather, reduce_scatter and all_to_all, and the size printed is max(sendBytes,
    expectedBytes) of that count."""
    got = rounded_size_bytes(op, size, n, dtype)
    assert got == expected
    assert element_count(op, got, n, dtype) == element_count(op, size, n, dtype)


def table(rows, **extra):
    cols = {k: [r[i] for r in rows] for i, k in enumerate(["size_bytes", "count", "time_s", "algbw_Bps", "busbw_Bps"])}
    cols.update(extra)
    return pa.table(cols)


def test_layout_matches_nccl_tests_output():
    # The row of NCCL_TESTS_ROW: 256 B in 24.01 us, algbw 0.0107 GB/s, busbw 7/8 of it.
    busbw = 256 / 24.01e-6 * 7 / 8
    t = table([(256, element_count("reduce_scatter", 256, 8), 24.01e-6, 256 / 24.01e-6, busbw)])
    lines = format_table(t, op="reduce_scatter").split("\n")
    assert lines[0] == "#"
    assert lines[1:4] == NCCL_TESTS_HEADER
    # With data checking off nccl-tests prints N/A, right-aligned where the error count was.
    assert lines[4] == NCCL_TESTS_ROW.replace("      0", "    N/A")
    assert lines[5:] == ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {busbw / 1e9:g} ", "#", ""]


def test_time_formatting_and_average():
    rows = [(8, 2, 15.234e-6, 0.0, 0.0), (1 << 20, 1 << 18, 123.46e-6, 8.5e9, 14.875e9),
            (1 << 33, 1 << 31, 30210.4e-6, 284.37e9, 497.64e9)]
    lines = format_table(table(rows), op="all_reduce").split("\n")
    rows_text = lines[4:7]
    assert rows_text[0].split()[5] == "15.23"     # %7.2f below 100 us
    assert rows_text[1].split()[5] == "123.5"     # %7.1f below 10 ms
    assert rows_text[2].split()[5:8] == ["30210", "284.37", "497.64"]  # %7.0f above
    assert all(len(r) == len(NCCL_TESTS_ROW) for r in rows_text)
    avg = (0.0 + 14.875 + 497.64) / 3
    assert lines[8] == f"# Avg bus bandwidth    : {avg:g} "


def test_redop_root_and_type_columns():
    t = table([(1024, 256, 1e-5, 1e8, 1e8)])
    bcast = format_table(t, op="broadcast", dtype="int8", root=3).split("\n")[4].split()
    assert bcast[2:5] == ["int8", "none", "3"]
    gather = format_table(t, op="all_gather", dtype="bfloat16", redop="max").split("\n")[4].split()
    assert gather[2:5] == ["bfloat16", "none", "-1"]
    reduce = format_table(t, op="reduce", redop="max").split("\n")[4].split()
    assert reduce[2:5] == ["float", "max", "0"]
    # sendrecv.cu runs TimeTest with the op's name, as the reducing tests do: "sum" by default.
    sendrecv = format_table(t, op="send_recv").split("\n")[4].split()
    assert sendrecv[2:5] == ["float", "sum", "-1"]
    alltoall = format_table(t, op="all_to_all").split("\n")[4].split()
    assert alltoall[2:5] == ["float", "none", "-1"]


def test_extra_columns_on_the_right_align_with_their_headers():
    t = table([(8, 2, 15e-6, 5e5, 8.75e5), (1 << 30, 1 << 28, 4e-3, 268e9, 469e9)],
              algorithm=["ring", "collnet_direct"], protocol=["ll", "simple"], analytical_s=[1.5e-5, None])
    lines = format_table(t, op="all_reduce").split("\n")
    base = len(NCCL_TESTS_ROW)
    head, units, r0, r1 = lines[2], lines[3], lines[4], lines[5]
    assert head[:base] == NCCL_TESTS_HEADER[1]
    assert head[base:].split() == ["algorithm", "protocol", "analytical"]
    assert units[base:].split() == ["(us)"]
    assert r0[base:].split() == ["ring", "ll", "15.00"]
    assert r1[base:].split() == ["collnet_direct", "simple"]
    # Every extra value ends in the column of its header's last character.
    for label, value in (("algorithm", "ring"), ("protocol", "ll"), ("analytical", "15.00")):
        assert head.index(label) + len(label) == r0.index(value, base) + len(value)
    assert units.index("(us)", base) + 4 == head.index("analytical") + len("analytical")
    assert len(r0) == len(r1) == len(head)


def test_header_rows_and_footer_one_at_a_time_make_the_table():
    rows = [(8, 2, 15e-6, 5e5, 8.75e5), (1 << 30, 1 << 28, 4e-3, 268e9, 469e9)]
    extra = dict(algorithm=["ring", "nvls"], protocol=["ll", "simple"], analytical_s=[1.5e-5, None])
    t = table(rows, **extra)
    extras = ("algorithm", "protocol", "analytical_s")
    streamed = [format_header(extras)]
    streamed += [format_row(r, op="all_reduce", extras=extras) for r in t.to_pylist()]
    streamed.append(format_footer([r[4] for r in rows]))
    assert "\n".join(streamed) + "\n" == format_table(t, op="all_reduce")
    with pytest.raises(InvalidArgumentError, match="row lacks busbw_Bps"):
        format_row({"size_bytes": 8, "count": 2, "time_s": 1e-5, "algbw_Bps": 1.0}, op="all_reduce")
    with pytest.raises(InvalidArgumentError, match=r"extras=\('bandwidth',\)"):
        format_header(("bandwidth",))


@pytest.mark.parametrize("kwargs, fragment", [
    ({"op": "allreduce"}, "op='allreduce'"),
    ({"op": "all_reduce", "dtype": "fp32"}, "dtype='fp32'"),
    ({"op": "all_reduce", "redop": "add"}, "redop='add'"),
    ({"op": "broadcast", "root": -1}, "root=-1"),
])
def test_bad_arguments_name_the_value(kwargs, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        format_table(table([(8, 2, 1e-5, 1.0, 1.0)]), **kwargs)


def test_bad_tables():
    with pytest.raises(InvalidArgumentError, match="busbw_Bps"):
        format_table(pa.table({"size_bytes": [8], "count": [2], "time_s": [1e-5], "algbw_Bps": [1.0]}),
                     op="all_reduce")
    with pytest.raises(InvalidArgumentError, match="time_s holds -1.0"):
        format_table(table([(8, 2, -1.0, 1.0, 1.0)]), op="all_reduce")
    with pytest.raises(InvalidArgumentError, match="table=dict"):
        format_table({"size_bytes": [8]}, op="all_reduce")
    with pytest.raises(InvalidArgumentError, match="n_ranks=0"):
        busbw_factor("all_reduce", 0)
    with pytest.raises(InvalidArgumentError, match="op='gather'"):
        algbw_size_bytes("gather", 8, 2)
    with pytest.raises(InvalidArgumentError, match="size_bytes_per_rank=-8"):
        algbw_size_bytes("all_gather", -8, 2)


@pytest.mark.parametrize("text, expected", [
    ("8M", 8 << 20), ("8MB", 8 << 20), ("8 m", 8 << 20), ("1GiB", 1 << 30), ("64K", 65536), ("64kb", 65536),
    ("1000", 1000), ("1e6", 1e6), ("0.5G", 1 << 29), ("1T", 1 << 40),
])
def test_size_flags_read_as_nccl_tests_reads_them(text, expected):
    """parsesize in nccl-tests' common.cu: sscanf("%lf %1s"), only the suffix's first letter."""
    assert size_flag_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "M", "100B", "8P", "eight"])
def test_size_flags_nccl_tests_cannot_read_are_refused(text):
    with pytest.raises(InvalidArgumentError, match="optional K, M, G or T suffix"):
        size_flag_bytes(text)
