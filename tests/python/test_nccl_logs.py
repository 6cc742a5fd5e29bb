"""fabricsim.read_nccl_tests: nccl-tests' output, as several versions print it, read into SI units.

The logs below are laid out as nccl-tests prints them (src/common.cu and src/util.cu of the
version named; header lines lose their trailing spaces here). Their numbers obey nccl-tests'
arithmetic: algbw = size / time, busbw = algbw x the op's bus factor, printed %6.2f.
"""

import gzip

import pyarrow as pa
import pytest

import fabricsim as fs
from fabricsim.exceptions import InvalidArgumentError, NcclLogError
from fabricsim.collectives.conventions import busbw_factor, format_table

# all_reduce_perf -b 8 -e 128M -f 8 on one H100 host, 8 processes (mpirun -np 8), nccl-tests
# 2.13: ranks with a Group, the bus id as [0x%02x], no "Collective test starting" line.
ALL_REDUCE_8 = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 8(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41235 on gpu-node-07 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41236 on gpu-node-07 device  1 [0x2a] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  41237 on gpu-node-07 device  2 [0x3a] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  41238 on gpu-node-07 device  3 [0x5d] NVIDIA H100 80GB HBM3
#  Rank  4 Group  0 Pid  41239 on gpu-node-07 device  4 [0x84] NVIDIA H100 80GB HBM3
#  Rank  5 Group  0 Pid  41240 on gpu-node-07 device  5 [0x8b] NVIDIA H100 80GB HBM3
#  Rank  6 Group  0 Pid  41241 on gpu-node-07 device  6 [0x91] NVIDIA H100 80GB HBM3
#  Rank  7 Group  0 Pid  41242 on gpu-node-07 device  7 [0xe4] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    10.21    0.00    0.00      0    10.11    0.00    0.00      0
          64            16     float     sum      -1    10.05    0.01    0.01      0     9.95    0.01    0.01      0
         512           128     float     sum      -1    10.38    0.05    0.09      0    10.28    0.05    0.09      0
        4096          1024     float     sum      -1    11.92    0.34    0.60      0    11.80    0.35    0.61      0
       32768          8192     float     sum      -1    14.37    2.28    3.99      0    14.23    2.30    4.03      0
      262144         65536     float     sum      -1    19.85   13.21   23.11      0    19.65   13.34   23.34      0
     2097152        524288     float     sum      -1    45.63   45.96   80.43      0    45.17   46.42   81.24      0
    16777216       4194304     float     sum      -1    181.4   92.49  161.85      0    179.6   93.42  163.49      0
   134217728      33554432     float     sum      -1   1234.5  108.72  190.26      0   1222.2  109.82  192.19      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 51.4078
#
"""
ALL_REDUCE_8_FIRST_ROW_LINE = 16

# all_reduce_perf_mpi -b 1M -e 1G -f 4 on two hosts of 8 GPUs, nccl-tests 2.20, with Open MPI's
# --tag-output prefix on every line and NCCL_DEBUG=INFO lines from several ranks in between.
ALL_REDUCE_16_TWO_HOSTS = """\
[1,0]<stdout>:# nccl-tests version 2.20.0 (b4d5bee) nccl-headers=22703 nccl-library=22703
[1,0]<stdout>:# Collective test starting: all_reduce_perf_mpi
[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
[1,0]<stdout>:#
[1,0]<stdout>:# Using devices
[1,0]<stdout>:#  Rank  0 Group  0 Pid 200311 on     node-a device  0 [0000:18:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  1 Group  0 Pid 200312 on     node-a device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  2 Group  0 Pid 200313 on     node-a device  2 [0000:3a:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  3 Group  0 Pid 200314 on     node-a device  3 [0000:5d:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  4 Group  0 Pid 200315 on     node-a device  4 [0000:84:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  5 Group  0 Pid 200316 on     node-a device  5 [0000:8b:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  6 Group  0 Pid 200317 on     node-a device  6 [0000:91:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  7 Group  0 Pid 200318 on     node-a device  7 [0000:e4:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  8 Group  0 Pid 118842 on     node-b device  0 [0000:18:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  9 Group  0 Pid 118843 on     node-b device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank 10 Group  0 Pid 118844 on     node-b device  2 [0000:3a:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank 11 Group  0 Pid 118845 on     node-b device  3 [0000:5d:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank 12 Group  0 Pid 118846 on     node-b device  4 [0000:84:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank 13 Group  0 Pid 118847 on     node-b device  5 [0000:8b:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank 14 Group  0 Pid 118848 on     node-b device  6 [0000:91:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank 15 Group  0 Pid 118849 on     node-b device  7 [0000:e4:00] NVIDIA H100 80GB HBM3
[1,3]<stdout>:node-a:200314:200314 [3] NCCL INFO Bootstrap : Using eth0:10.0.0.11<0>
[1,9]<stdout>:node-b:118843:118843 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.12<0>
[1,0]<stdout>:#
[1,0]<stdout>:#                                                              out-of-place                       in-place
[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
[1,0]<stdout>:#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
[1,0]<stdout>:node-a:200311:200311 [0] NCCL INFO comm 0x55d5c1a0 rank 0 nranks 16 cudaDev 0 busId 18000 - Init COMPLETE
[1,0]<stdout>:     1048576        262144     float     sum      -1    61.87   16.95   31.78       0    61.25   17.12   32.10       0
[1,0]<stdout>:     4194304       1048576     float     sum      -1   118.30   35.45   66.48       0   117.12   35.81   67.15       0
[1,0]<stdout>:    16777216       4194304     float     sum      -1   282.60   59.37  111.31       0   279.77   59.97  112.44       0
[1,0]<stdout>:    67108864      16777216     float     sum      -1   856.40   78.36  146.93       0   847.84   79.15  148.41       0
[1,0]<stdout>:   268435456      67108864     float     sum      -1  3105.20   86.45  162.09       0  3074.15   87.32  163.73       0
[1,0]<stdout>:  1073741824     268435456     float     sum      -1  12003.7   89.45  167.72       0  11883.7   90.35  169.41       0
[1,0]<stdout>:# Out of bounds values : 0 OK
[1,0]<stdout>:# Avg bus bandwidth    : 114.963
[1,0]<stdout>:#
[1,0]<stdout>:# Collective test concluded: all_reduce_perf_mpi
"""

# alltoall_perf -b 1K -e 256M -f 8 -g 8 (one process, 8 GPUs), run under srun --label, nccl-tests
# 2.14: "none" redop and -1 root for an op that has neither.
ALL_TO_ALL_8 = """\
0: # Collective test starting: alltoall_perf
0: # nThread 1 nGpus 8 minBytes 1024 maxBytes 268435456 step: 8(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
0: #
0: # Using devices
0: #  Rank  0 Group  0 Pid  90412 on    dgx-a17 device  0 [0x07] NVIDIA A100-SXM4-80GB
0: #  Rank  1 Group  0 Pid  90412 on    dgx-a17 device  1 [0x0f] NVIDIA A100-SXM4-80GB
0: #  Rank  2 Group  0 Pid  90412 on    dgx-a17 device  2 [0x47] NVIDIA A100-SXM4-80GB
0: #  Rank  3 Group  0 Pid  90412 on    dgx-a17 device  3 [0x4e] NVIDIA A100-SXM4-80GB
0: #  Rank  4 Group  0 Pid  90412 on    dgx-a17 device  4 [0x87] NVIDIA A100-SXM4-80GB
0: #  Rank  5 Group  0 Pid  90412 on    dgx-a17 device  5 [0x90] NVIDIA A100-SXM4-80GB
0: #  Rank  6 Group  0 Pid  90412 on    dgx-a17 device  6 [0xb7] NVIDIA A100-SXM4-80GB
0: #  Rank  7 Group  0 Pid  90412 on    dgx-a17 device  7 [0xbd] NVIDIA A100-SXM4-80GB
0: #
0: #                                                              out-of-place                       in-place
0: #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
0: #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
0:         1024            32     float    none      -1    18.02    0.06    0.05      0    17.84    0.06    0.05      0
0:         8192           256     float    none      -1    18.94    0.43    0.38      0    18.75    0.44    0.38      0
0:        65536          2048     float    none      -1    24.77    2.65    2.32      0    24.52    2.67    2.34      0
0:       524288         16384     float    none      -1    41.53   12.62   11.05      0    41.11   12.75   11.16      0
0:      4194304        131072     float    none      -1    152.9   27.43   24.00      0    151.4   27.71   24.25      0
0:     33554432       1048576     float    none      -1    921.6   36.41   31.86      0    912.4   36.78   32.18      0
0:    268435456       8388608     float    none      -1   6905.3   38.87   34.01      0   6836.2   39.27   34.36      0
0: # Out of bounds values : 0 OK
0: # Avg bus bandwidth    : 14.885
0: #
0: # Collective test concluded: alltoall_perf
"""

# all_gather_perf -b 32 -e 1M -f 8 -g 4 with nccl-tests 2.0 (2018): each test printed its own
# header, all_gather's without redop or root, and an "error" column (the largest deviation).
ALL_GATHER_OLD = """\
# nThread 1 nGpus 4 minBytes 32 maxBytes 1048576 step: 8(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  23145 on     dgx1-3 device  0 [0x06] Tesla V100-SXM2-32GB
#   Rank  1 Pid  23145 on     dgx1-3 device  1 [0x07] Tesla V100-SXM2-32GB
#   Rank  2 Pid  23145 on     dgx1-3 device  2 [0x0a] Tesla V100-SXM2-32GB
#   Rank  3 Pid  23145 on     dgx1-3 device  3 [0x0b] Tesla V100-SXM2-32GB
#
#                                             out-of-place                       in-place
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
          32             2   float    12.45    0.00    0.00  0e+00    12.33    0.00    0.00  0e+00
         256            16   float    12.61    0.02    0.02  0e+00    12.48    0.02    0.02  0e+00
        2048           128   float    13.88    0.15    0.11  0e+00    13.74    0.15    0.11  0e+00
       16384          1024   float    19.20    0.85    0.64  0e+00    19.01    0.86    0.65  0e+00
      131072          8192   float    60.33    2.17    1.63  0e+00    59.73    2.19    1.65  0e+00
     1048576         65536   float    398.2    2.63    1.97  0e+00    394.2    2.66    1.99  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.7325
"""

# broadcast_perf -b 1K -e 64M -f 16 -g 4 -c 0 (no data check: #wrong is N/A), nccl-tests 2.13.
BROADCAST_NO_CHECK = """\
# nThread 1 nGpus 4 minBytes 1024 maxBytes 67108864 step: 16(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 0 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   7781 on      l40s-2 device  0 [0x01] NVIDIA L40S
#  Rank  1 Group  0 Pid   7781 on      l40s-2 device  1 [0x21] NVIDIA L40S
#  Rank  2 Group  0 Pid   7781 on      l40s-2 device  2 [0x41] NVIDIA L40S
#  Rank  3 Group  0 Pid   7781 on      l40s-2 device  3 [0x61] NVIDIA L40S
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float    none       0     9.87    0.10    0.10    N/A     9.77    0.10    0.10    N/A
       16384          4096     float    none       0    11.02    1.49    1.49    N/A    10.91    1.50    1.50    N/A
      262144         65536     float    none       0    16.64   15.75   15.75    N/A    16.47   15.91   15.91    N/A
     4194304       1048576     float    none       0    71.21   58.90   58.90    N/A    70.50   59.50   59.50    N/A
    67108864      16777216     float    none       0    745.9   89.97   89.97    N/A    738.4   90.88   90.88    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 33.41
#
"""


def rank_lines(text):
    return [line for line in text.splitlines() if "Rank " in line]


def without(text, lines):
    return "\n".join(line for line in text.splitlines() if line not in lines) + "\n"


def table_rows(text):
    return [line for line in text.splitlines() if line.strip()[:1].isdigit() and "float" in line]


# ------------------------------------------------------------------------------ the layouts


def test_an_8_gpu_all_reduce_as_nccl_tests_2_13_prints_it():
    log = fs.read_nccl_tests(ALL_REDUCE_8, op="all_reduce")
    assert (log.op, log.n_ranks, log.n_hosts, log.source) == ("all_reduce", 8, 1, "<text>")
    assert log.devices == ("NVIDIA H100 80GB HBM3",) * 8
    rows = log.rows
    assert rows.num_rows == 9
    assert rows.schema == pa.schema([
        ("size_bytes", pa.int64()), ("count", pa.int64()), ("dtype", pa.string()),
        ("redop", pa.string()), ("root", pa.int64()), ("time_s", pa.float64()),
        ("algbw_Bps", pa.float64()), ("busbw_Bps", pa.float64()), ("in_place_time_s", pa.float64()),
        ("in_place_algbw_Bps", pa.float64()), ("in_place_busbw_Bps", pa.float64()),
        ("n_wrong", pa.int64()), ("line", pa.int64()),
    ])
    last = rows.slice(8).to_pylist()[0]
    assert last["size_bytes"] == 134217728 and last["count"] == 33554432
    assert (last["dtype"], last["redop"], last["root"]) == ("float", "sum", None)
    assert last["time_s"] == pytest.approx(1.2345e-3, rel=1e-15)       # 1234.5 us
    assert last["algbw_Bps"] == pytest.approx(108.72e9, rel=1e-15)     # GB = 1e9 B
    assert last["busbw_Bps"] == pytest.approx(190.26e9, rel=1e-15)
    assert last["in_place_time_s"] == pytest.approx(1222.2e-6, rel=1e-15)
    assert last["in_place_busbw_Bps"] == pytest.approx(192.19e9, rel=1e-15)
    assert last["n_wrong"] == 0
    assert rows.column("line").to_pylist() == list(range(ALL_REDUCE_8_FIRST_ROW_LINE, ALL_REDUCE_8_FIRST_ROW_LINE + 9))
    assert rows.column("size_bytes").to_pylist() == [8 * 8**i for i in range(9)]
    assert rows.column("time_s").to_pylist()[0] == pytest.approx(10.21e-6, rel=1e-15)


def test_the_op_comes_from_the_file_name_and_paths_of_any_kind_are_read(tmp_path):
    path = tmp_path / "all_reduce_perf_8gpu.log"
    path.write_text(ALL_REDUCE_8)
    for source in (path, str(path)):
        log = fs.read_nccl_tests(source)
        assert (log.op, log.n_ranks, log.source) == ("all_reduce", 8, str(path))
    for name, op in [("nccl_allgather.out", "all_gather"), ("reduce-scatter_16.txt", "reduce_scatter"),
                     ("alltoall.log", "all_to_all"), ("sendrecv_perf", "send_recv"),
                     ("reduce_perf.log", "reduce"), ("broadcast_perf_4gpu.log", "broadcast"),
                     ("AllReduce.txt", "all_reduce"), ("alltoallv_perf.log", None)]:
        path = tmp_path / name
        path.write_text(ALL_REDUCE_8)
        try:
            assert fs.read_nccl_tests(path, n_ranks=8).op == op, name
        except NcclLogError as e:  # the numbers are all_reduce's
            assert op != "all_reduce" and (op is None) == ("names none" in str(e)), (name, str(e))
            if op is not None:
                assert f"bus factor for {op} (the file name {name!r})" in str(e)


def test_sixteen_ranks_on_two_hosts_with_mpi_prefixes_and_nccl_info_lines():
    log = fs.read_nccl_tests(ALL_REDUCE_16_TWO_HOSTS)  # op from "Collective test starting"
    assert (log.op, log.n_ranks, log.n_hosts) == ("all_reduce", 16, 2)
    assert len(log.devices) == 16
    rows = log.rows
    assert rows.column("size_bytes").to_pylist() == [1 << (20 + 2 * i) for i in range(6)]
    assert rows.column("time_s").to_pylist()[-1] == pytest.approx(12003.7e-6, rel=1e-15)
    assert rows.column("busbw_Bps").to_pylist()[-1] == pytest.approx(167.72e9, rel=1e-15)
    # busbw / algbw is 2 (n-1) / n for n = 16 to the printed precision.
    ratio = rows.column("busbw_Bps").to_pylist()[-1] / rows.column("algbw_Bps").to_pylist()[-1]
    assert ratio == pytest.approx(busbw_factor("all_reduce", 16), abs=1e-4)
    assert rows.column("n_wrong").to_pylist() == [0] * 6


def test_all_to_all_prints_none_and_minus_one_which_read_as_null():
    log = fs.read_nccl_tests(ALL_TO_ALL_8)
    assert (log.op, log.n_ranks, log.n_hosts) == ("all_to_all", 8, 1)
    assert log.devices[0] == "NVIDIA A100-SXM4-80GB"
    assert set(log.rows.column("redop").to_pylist()) == {None}
    assert set(log.rows.column("root").to_pylist()) == {None}
    # count is per peer: size / 4 bytes / 8 ranks.
    assert log.rows.column("count").to_pylist()[-1] == 268435456 // 4 // 8
    assert log.rows.column("algbw_Bps").to_pylist()[-1] == pytest.approx(38.87e9, rel=1e-15)


def test_the_old_layout_without_redop_and_root_and_with_an_error_column():
    log = fs.read_nccl_tests(ALL_GATHER_OLD, op="all_gather")
    assert (log.op, log.n_ranks, log.n_hosts) == ("all_gather", 4, 1)
    assert log.devices == ("Tesla V100-SXM2-32GB",) * 4
    rows = log.rows
    assert rows.num_rows == 6
    assert set(rows.column("redop").to_pylist()) == {None}
    assert set(rows.column("root").to_pylist()) == {None}
    # "error" is the largest deviation, not a count of wrong elements.
    assert set(rows.column("n_wrong").to_pylist()) == {None}
    assert rows.column("time_s").to_pylist()[-1] == pytest.approx(398.2e-6, rel=1e-15)
    assert rows.column("in_place_busbw_Bps").to_pylist()[-1] == pytest.approx(1.99e9, rel=1e-15)


def test_n_a_in_wrong_reads_as_null_and_root_as_printed():
    log = fs.read_nccl_tests(BROADCAST_NO_CHECK, op="broadcast")
    assert (log.op, log.n_ranks, log.n_hosts) == ("broadcast", 4, 1)
    assert set(log.rows.column("n_wrong").to_pylist()) == {None}
    assert set(log.rows.column("root").to_pylist()) == {0}
    assert set(log.rows.column("redop").to_pylist()) == {None}


def fabricsim_table(op, n, sizes, times_s):
    factor = busbw_factor(op, n)
    algbw = [s / t for s, t in zip(sizes, times_s)]
    return pa.table({
        "size_bytes": sizes, "count": [s // 4 for s in sizes], "time_s": times_s,
        "algbw_Bps": algbw, "busbw_Bps": [a * factor for a in algbw],
        "algorithm": ["ring"] * len(sizes), "protocol": ["simple"] * len(sizes),
        "analytical_s": [t * 0.9 for t in times_s[:-1]] + [None],
    })


def test_fabricsim_s_own_table_reads_back_within_the_printed_precision():
    sizes = [1 << 20, 1 << 24, 1 << 28, 1 << 32]
    times = [41.3e-6, 201.77e-6, 2.71234e-3, 42.1e-3]
    text = format_table(fabricsim_table("all_reduce", 8, sizes, times), op="all_reduce")
    # No rank list: the rank count comes from busbw/algbw, which only n = 8 fits.
    log = fs.read_nccl_tests(text, op="all_reduce")
    assert (log.op, log.n_ranks, log.n_hosts, log.devices) == ("all_reduce", 8, None, ())
    rows = log.rows
    assert rows.column("size_bytes").to_pylist() == sizes
    for got, want in zip(rows.column("time_s").to_pylist(), times):
        assert got == pytest.approx(want, rel=5e-4)
    for got, s, t in zip(rows.column("algbw_Bps").to_pylist(), sizes, times):
        assert got == pytest.approx(s / t, abs=0.005e9)
    # fabricsim fills both halves with its one result, and prints N/A for #wrong.
    assert rows.column("in_place_time_s").to_pylist() == rows.column("time_s").to_pylist()
    assert set(rows.column("n_wrong").to_pylist()) == {None}
    # With nccl-tests' header above it (the rank list now gives the count).
    preamble = "\n".join(rank_lines(ALL_REDUCE_8)[:8]) + "\n"
    header = ALL_REDUCE_8.splitlines()[0] + "\n#\n# Using devices\n"
    log = fs.read_nccl_tests(header + preamble + text, op="all_reduce")
    assert (log.n_ranks, log.n_hosts) == (8, 1)


def test_groups_split_the_ranks_and_the_results_are_of_rank_0_s_group():
    # NCCL_TESTS_SPLIT_MASK=0x1 on 16 ranks: even and odd ranks make two communicators of 8,
    # and the results printed are of rank 0's.
    lines = []
    for line in ALL_REDUCE_16_TWO_HOSTS.splitlines():
        if "#  Rank" in line:
            rank = int(line.split("Rank")[1].split()[0])
            line = line.replace("Group  0", f"Group  {rank & 1}")
        elif line.split(">:", 1)[1].strip()[:1].isdigit():
            continue  # the rows of 16 ranks
        elif "Out of bounds" in line:
            lines += ["[1,0]<stdout>:" + row for row in table_rows(ALL_REDUCE_8)]
        lines.append(line)
    log = fs.read_nccl_tests("\n".join(lines) + "\n")
    assert (log.n_ranks, log.n_hosts, len(log.devices)) == (8, 2, 8)  # ranks 0, 2, ..., 14


def test_the_table_goes_to_polars_and_duckdb_through_the_arrow_stream():
    log = fs.read_nccl_tests(ALL_TO_ALL_8)
    polars = pytest.importorskip("polars")
    df = polars.DataFrame(log)
    assert df.height == 7 and df["busbw_Bps"][-1] == pytest.approx(34.01e9)
    assert pa.table(log).equals(log.rows)
    assert "rows" not in repr(log) and "all_to_all" in repr(log)


# ------------------------------------------------------------------------------ the errors


def test_the_exception_is_an_invalid_argument_error():
    assert issubclass(NcclLogError, InvalidArgumentError) and issubclass(NcclLogError, ValueError)
    assert "NcclLogError" in fs.exceptions.__all__ and fs.NcclLogError is NcclLogError


def test_a_missing_file_names_it_and_says_a_one_line_str_is_a_path(tmp_path):
    path = tmp_path / "nope.log"
    with pytest.raises(NcclLogError, match=r"cannot read nccl-tests log .*nope\.log: .*No such file") as e:
        fs.read_nccl_tests(str(path))
    assert "taken for a path" in str(e.value)
    assert isinstance(e.value.__cause__, FileNotFoundError)
    with pytest.raises(NcclLogError, match="cannot read nccl-tests log .*: .*[Ii]s a directory"):
        fs.read_nccl_tests(tmp_path)


def test_binary_compressed_and_non_utf8_files_say_so(tmp_path):
    binary = tmp_path / "all_reduce.bin"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00")
    with pytest.raises(NcclLogError, match=r"all_reduce\.bin is a binary file \(a NUL byte at offset 7\)"):
        fs.read_nccl_tests(binary)
    gz = tmp_path / "all_reduce.log.gz"
    gz.write_bytes(gzip.compress(ALL_REDUCE_8.encode()))
    with pytest.raises(NcclLogError, match=r"all_reduce\.log\.gz is gzip-compressed"):
        fs.read_nccl_tests(gz)
    latin = tmp_path / "all_reduce.log"
    latin.write_bytes(ALL_REDUCE_8.replace("gpu-node-07", "gpu-n\xf6de").encode("latin-1"))
    with pytest.raises(NcclLogError,
                       match=r"all_reduce\.log is not UTF-8 text: byte 0xf6 at offset \d+ \(line 4\)") as e:
        fs.read_nccl_tests(latin)
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_a_source_of_another_type_is_refused():
    with pytest.raises(InvalidArgumentError, match="source=bytes .*expected a path .* or the log's text"):
        fs.read_nccl_tests(ALL_REDUCE_8.encode())
    with pytest.raises(InvalidArgumentError, match="source=int"):
        fs.read_nccl_tests(3)


def test_text_that_is_not_nccl_tests_output():
    with pytest.raises(NcclLogError, match=r"<text> is not nccl-tests output: expected a header line "
                       r"'#  size  count  type.*found none \(line 1 reads 'Hello'\)"):
        fs.read_nccl_tests("Hello\nworld\n", op="all_reduce")
    with pytest.raises(NcclLogError, match="<text> is not nccl-tests output"):
        fs.read_nccl_tests("", op="all_reduce")
    # Rows without their header: the layout (redop? root?) is unknown.
    rows = "\n".join(table_rows(ALL_REDUCE_8)) + "\n"
    with pytest.raises(NcclLogError, match=r"before the first line of numbers \(line 1\)"):
        fs.read_nccl_tests(rows, op="all_reduce")


def test_a_header_without_rows():
    text = ALL_REDUCE_8.split("           8             2")[0]
    with pytest.raises(NcclLogError, match=r"<text>, line 14: the results table has no data rows: "
                       "expected lines of size count type redop root time algbw busbw #wrong"):
        fs.read_nccl_tests(text, op="all_reduce")


def test_a_row_that_does_not_parse_names_its_line_and_column():
    short = ALL_REDUCE_8.replace("      0    10.11    0.00    0.00      0\n", "\n", 1)
    with pytest.raises(NcclLogError, match=r"<text>, line 16: expected 13 columns \(size count type redop "
                       r"root time algbw busbw #wrong time algbw busbw #wrong\) as the header on line 14 "
                       r"names them, got 8: '8             2     float"):
        fs.read_nccl_tests(short, op="all_reduce")
    bad = ALL_REDUCE_8.replace("   1234.5  108.72", "   1234.5  1O8.72")
    with pytest.raises(NcclLogError, match=r"<text>, line 24: column 7 \(algbw\) reads '1O8.72': expected "
                       r"a bandwidth in GB/s, a number >= 0"):
        fs.read_nccl_tests(bad, op="all_reduce")
    bad = ALL_REDUCE_8.replace("    float     sum      -1    45.63", "    float     sum      xx    45.63")
    with pytest.raises(NcclLogError, match=r"line 22: column 5 \(root\) reads 'xx': expected a whole number"):
        fs.read_nccl_tests(bad, op="all_reduce")
    bad = ALL_REDUCE_8.replace("   181.4   92.49  161.85      0", "   181.4   92.49  161.85    abc")
    with pytest.raises(NcclLogError, match=r"line 23: column 9 \(#wrong\) reads 'abc': expected a count of "
                       "wrong elements, or N/A"):
        fs.read_nccl_tests(bad, op="all_reduce")


def test_a_header_of_another_layout():
    bad = ALL_REDUCE_8.replace("redop    root     time", "redop    root    clock")
    with pytest.raises(NcclLogError, match=r"line 14: expected nccl-tests' columns size count type \[redop\] "
                       r"\[root\] time algbw busbw #wrong"):
        fs.read_nccl_tests(bad, op="all_reduce")


def test_no_op_to_be_found_asks_for_op():
    with pytest.raises(NcclLogError, match=r"cannot tell which collective <text> holds: it has no "
                       r"'# Collective test starting:' line .* and it was given as text; pass op=, one of all_reduce"):
        fs.read_nccl_tests(ALL_REDUCE_8)


def test_a_file_name_naming_no_op_or_two_asks_for_op(tmp_path):
    for name, says in [("results.log", "names none"),
                       ("all_reduce_vs_all_gather.log", "names all_reduce and all_gather")]:
        path = tmp_path / name
        path.write_text(ALL_REDUCE_8)
        with pytest.raises(NcclLogError, match=f"its file name '{name}' {says}; pass op="):
            fs.read_nccl_tests(path)


def test_a_bad_op_or_one_the_log_contradicts():
    with pytest.raises(InvalidArgumentError, match=r"op='allreduce': expected one of all_reduce"):
        fs.read_nccl_tests(ALL_REDUCE_8, op="allreduce")
    with pytest.raises(NcclLogError, match=r"op='all_gather', but <text>, line 1: 'Collective test starting: "
                       r"alltoall_perf', says the log is of all_to_all"):
        fs.read_nccl_tests(ALL_TO_ALL_8, op="all_gather")
    gather = ALL_TO_ALL_8.replace("alltoall_perf", "gather_perf")
    with pytest.raises(NcclLogError, match=r"line 1: the log is of gather_perf, which is none of the ops "
                       r"fabricsim models \(all_reduce, .*, send_recv\): pass op= if"):
        fs.read_nccl_tests(gather)


def test_a_log_read_as_another_op_says_which_op_fits():
    with pytest.raises(NcclLogError) as e:
        fs.read_nccl_tests(ALL_TO_ALL_8.replace("alltoall_perf", "all_reduce_perf"))
    msg = str(e.value)
    assert msg.startswith("<text>, line 23: busbw/algbw is 0.8750 (busbw 34.36 GB/s, algbw 39.27 GB/s), "
                          "but nccl-tests' bus factor for all_reduce (line 1: 'Collective test starting: "
                          "all_reduce_perf') on 8 ranks (the 8 '# Rank' lines, lines 5-12) is 1.7500.")
    assert "The bandwidths fit reduce_scatter, all_gather, all_to_all on 8 ranks: the log looks to be of " \
           "another op; pass op=." in msg
    assert "n_ranks" not in msg
    # An all_reduce log read as all_gather: its 1.75 is above any (n-1)/n.
    with pytest.raises(NcclLogError, match="The bandwidths fit all_reduce on 8 ranks: the log looks to be of another"):
        fs.read_nccl_tests(ALL_REDUCE_8, op="all_gather")


def test_a_truncated_rank_list_says_how_many_ranks_fit():
    cut = without(ALL_REDUCE_16_TWO_HOSTS, rank_lines(ALL_REDUCE_16_TWO_HOSTS)[12:])
    with pytest.raises(NcclLogError) as e:
        fs.read_nccl_tests(cut)
    msg = str(e.value)
    assert "on 12 ranks (the 12 '# Rank' lines, lines 6-17) is 1.8333." in msg
    assert "The bandwidths fit all_reduce on 16 ranks: the '# Rank' list looks truncated; pass n_ranks=" in msg
    # As the message says: n_ranks= overrides the list, and the hosts of a partial list are unknown.
    log = fs.read_nccl_tests(cut, n_ranks=16)
    assert (log.n_ranks, log.n_hosts, len(log.devices)) == (16, None, 12)
    log = fs.read_nccl_tests(ALL_REDUCE_16_TWO_HOSTS, n_ranks=16)
    assert (log.n_ranks, log.n_hosts) == (16, 2)


def test_a_wrong_n_ranks_is_caught_by_the_bus_factor():
    with pytest.raises(NcclLogError, match=r"on 4 ranks \(n_ranks=4 as given\) is 1.5000\. The bandwidths fit "
                       r"all_reduce on 8 ranks: the rank count is wrong; pass n_ranks="):
        fs.read_nccl_tests(ALL_REDUCE_8, op="all_reduce", n_ranks=4)
    for bad in (0, -1, 2.0, True, "8"):
        with pytest.raises(InvalidArgumentError, match="n_ranks="):
            fs.read_nccl_tests(ALL_REDUCE_8, op="all_reduce", n_ranks=bad)


def test_gaps_and_repeats_in_the_rank_list():
    gap = without(ALL_REDUCE_8, rank_lines(ALL_REDUCE_8)[2:4])
    with pytest.raises(NcclLogError, match=r"<text>, lines 4-9: the '# Rank' list misses rank\(s\) 2, 3 of 0-7: "
                       "is it truncated\\? Pass n_ranks="):
        fs.read_nccl_tests(gap, op="all_reduce")
    repeated = ALL_REDUCE_8.replace("#  Rank  5 Group", "#  Rank  4 Group")
    with pytest.raises(NcclLogError, match=r"line 9: rank 4 is listed a second time \(first on line 8\)"):
        fs.read_nccl_tests(repeated, op="all_reduce")
    # Fewer ranks than whole processes of nThread x nGpus.
    cut = without(ALL_TO_ALL_8, rank_lines(ALL_TO_ALL_8)[6:])
    with pytest.raises(NcclLogError, match=r"lines 5-10: 6 ranks are listed, but line 2 says each process ran "
                       r"nThread x nGpus = 8: is the list truncated\? Pass n_ranks="):
        fs.read_nccl_tests(cut)


def test_two_runs_in_one_log():
    # mpirun -np 2 of a binary built without MPI=1: each process prints its own run.
    twice = ALL_REDUCE_8.split("#\n#      ")[0]
    text = twice + twice + ALL_REDUCE_8.split("# Using devices\n", 1)[1]
    with pytest.raises(NcclLogError, match=r"<text>, line 12: a second nccl-tests run starts here \(the first "
                       r"began on line 1\): expected one run; split the log\. If mpirun .* MPI=1"):
        fs.read_nccl_tests(text, op="all_reduce")
    table = ALL_REDUCE_8.split("# Using devices\n", 1)[1].split("#\n#  ", 1)[1]
    with pytest.raises(NcclLogError, match=r"line 29: a second results table starts here \(the first on line 14\)"):
        fs.read_nccl_tests(ALL_REDUCE_8 + "#  " + table, op="all_reduce")


def test_no_rank_list_and_a_ratio_that_does_not_tell():
    no_ranks = without(BROADCAST_NO_CHECK, rank_lines(BROADCAST_NO_CHECK))
    with pytest.raises(NcclLogError, match=r"cannot tell how many ranks <text> ran on: it lists no '#  Rank' "
                       r"lines and busbw = algbw for broadcast on any number of ranks; line 1 says each process "
                       r"ran nThread x nGpus = 4 of them; pass n_ranks="):
        fs.read_nccl_tests(no_ranks, op="broadcast")
    log = fs.read_nccl_tests(no_ranks, op="broadcast", n_ranks=4)
    assert (log.n_ranks, log.n_hosts, log.devices) == (4, None, ())
    # all_reduce at 0.00 GB/s only (tiny sizes): nothing to tell n by.
    tiny = without(ALL_REDUCE_8, rank_lines(ALL_REDUCE_8) + table_rows(ALL_REDUCE_8)[1:])
    with pytest.raises(NcclLogError, match="no row has a bandwidth above 0 to tell it by"):
        fs.read_nccl_tests(tiny, op="all_reduce")
    # Many ranks: 2 (n-1)/n of 1.99 at two decimals fits a range of n.
    sizes, times = [1 << 30], [5e-3]
    text = format_table(fabricsim_table("all_reduce", 300, sizes, times), op="all_reduce")
    with pytest.raises(NcclLogError, match=r"busbw/algbw fits 29\d to 30\d ranks, within the printed precision"):
        fs.read_nccl_tests(text, op="all_reduce")
    assert fs.read_nccl_tests(text, op="all_reduce", n_ranks=300).n_ranks == 300


def test_ratios_that_differ_between_rows():
    bad = ALL_REDUCE_8.replace("13.21   23.11", "13.21   20.11")
    with pytest.raises(NcclLogError, match=r"<text>: busbw/algbw is at least 1.7\d+ on line \d+ but at most "
                       r"1.52\d+ on line 21: .*not what their header says"):
        fs.read_nccl_tests(bad, op="all_reduce")


@pytest.mark.parametrize("op, n", [("all_reduce", 2), ("all_reduce", 72), ("all_gather", 3),
                                   ("reduce_scatter", 64), ("all_to_all", 16)])
def test_the_rank_count_from_the_bus_factor_matches_the_table_s(op, n):
    sizes, times = [1 << 24, 1 << 30], [0.4e-3, 9.7e-3]
    text = format_table(fabricsim_table(op, n, sizes, times), op=op)
    assert fs.read_nccl_tests(text, op=op).n_ranks == n
