"""Calibration from nccl-tests logs: logs in nccl-tests' own layout (as fabricsim prints it,
with the device list nccl-tests writes) made by a known cost model are fitted back to it, with
the error on held-out sizes; real logs quoted from public issues are fitted to what their
numbers imply by hand; bad logs and mismatched fabrics are refused."""

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

import fabricsim as fs
from fabricsim import cli
from fabricsim.collectives.calibration import PARAMETERS, calibrate
from fabricsim.collectives.cost.model import DEFAULT
from fabricsim.collectives.conventions import format_table

GiB = 2**30


def log_text(fabric, op, truth, *, ranks=None, algorithm="auto", hosts=1, lo="1M", hi="8G"):
    table = fs.nccl_tests(fabric, op, lo, hi, 2, algorithm=algorithm, ranks=ranks, cost_model=truth)
    n = fabric.n_gpus if ranks is None else len(ranks)
    per_host = n // hosts
    head = [f"# Collective test starting: {op}_perf",
            "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 8589934592 step: 2(factor) warmup iters: 5 "
            "iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    head += [f"#  Rank {i:2d} Group  0 Pid {4000 + i:5d} on   node{i // per_host} device {i % per_host:2d} "
             f"[0x{i % per_host:02x}] NVIDIA H100 80GB HBM3" for i in range(n)]
    return "\n".join(head + ["#", format_table(table, op=op)]) + "\n"


def test_recovers_the_cost_model_that_made_one_node_logs(tmp_path):
    f = fs.hgx_h100()
    truth = DEFAULT.replace(nvlink_efficiency=0.72, latency_scale=1.7, nvls_efficiency={"hopper": 0.78})
    paths = []
    for op in ("all_reduce", "all_gather"):
        p = tmp_path / f"{op}_perf.log"
        p.write_text(log_text(f, op, truth))
        paths.append(p)
    cal = calibrate(f, paths)
    assert set(cal.fitted) == {"nvlink_efficiency", "latency_scale", "nvls_efficiency"}
    assert cal.not_determined == ("network_efficiency",)
    # nccl-tests prints 2-4 significant digits: the fit is that close.
    assert cal.fitted["nvlink_efficiency"] == pytest.approx(0.72, rel=2e-3)
    assert cal.fitted["nvls_efficiency"] == pytest.approx(0.78, rel=2e-3)
    assert cal.fitted["latency_scale"] == pytest.approx(1.7, rel=2e-2)
    s = cal.error_summary()
    assert s["held_out_max"] < 0.005 and s["fit_max"] < 0.005
    held = cal.table["held_out"].to_pylist()
    assert 0 < sum(held) < len(held)
    # With the defaults the same rows are far off: the fit is what closes them.
    assert np.max(np.abs(cal.table["default_error"].to_numpy())) > 0.2


def test_a_multi_node_log_determines_the_network_efficiency():
    f = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    truth = DEFAULT.replace(network_efficiency=0.85)
    text = log_text(f, "all_reduce", truth, algorithm="ring", hosts=4, lo="64M")
    cal = calibrate(f, text, algorithm="ring", parameters=("network_efficiency", "latency_scale"))
    assert cal.fitted["network_efficiency"] == pytest.approx(0.85, rel=2e-3)
    assert cal.cost_model.network_efficiency == pytest.approx(0.85, rel=2e-3)


def test_a_subset_of_ranks_is_calibrated_with_ranks():
    f = fs.hgx_h100()
    text = log_text(f, "all_reduce", DEFAULT.replace(nvls_efficiency={"hopper": 0.7}), ranks=[0, 1, 2, 3, 4, 5])
    cal = calibrate(f, text, ranks=range(6), parameters=("nvls_efficiency",), holdout_every=0)
    assert cal.fitted["nvls_efficiency"] == pytest.approx(0.7, rel=2e-3)
    assert not any(cal.table["held_out"].to_pylist())


def test_a_ring_log_said_to_be_ring_fits_the_nvlink_rate():
    # nccl-tests does not print the algorithm: a run with NCCL_ALGO=RING is calibrated with
    # algorithm="ring", and then fits the NVLink efficiency, never NVLS's.
    f = fs.hgx_h100()
    text = log_text(f, "all_reduce", DEFAULT.replace(nvlink_efficiency=0.7357), algorithm="ring", lo="64M")
    cal = calibrate(f, text, algorithm="ring")
    assert cal.fitted["nvlink_efficiency"] == pytest.approx(0.7357, rel=2e-3)
    assert cal.fitted.get("latency_scale", 1.0) == pytest.approx(1.0, rel=0.05)
    assert set(cal.table["algorithm"].to_pylist()) == {"ring"}
    assert "nvls_efficiency" in cal.not_determined


def test_an_nvls_only_log_puts_what_it_measures_on_nvls_efficiency():
    # NVLS rows see only NVLS efficiency x NVLink rate: with no ring row to pin the NVLink
    # rate, the product is fitted as NVLS efficiency, and every row's time is met.
    f = fs.hgx_h100()
    truth = DEFAULT.replace(nvlink_efficiency=0.80, nvls_efficiency={"hopper": 0.78})  # ceiling not binding
    text = log_text(f, "all_reduce", truth, lo="512M")
    cal = calibrate(f, text)
    assert set(cal.table["algorithm"].to_pylist()) == {"nvls"}
    assert "nvlink_efficiency" in cal.not_determined
    assert cal.fitted["nvls_efficiency"] == pytest.approx(0.78 * 0.80 / (370.8 / 450), rel=2e-3)
    assert cal.error_summary()["held_out_max"] < 0.002


def test_measurement_noise_is_fitted_through_and_shows_on_held_out_rows():
    # Real logs are not made by the model: 2% noise on each time still gives the efficiency
    # within about a percent, with the held-out error the size of the noise.
    f = fs.hgx_h100()
    rng = np.random.default_rng(1)
    log = fs.read_nccl_tests(log_text(f, "all_gather", DEFAULT.replace(nvlink_efficiency=0.7), lo="16M"))
    noisy = log.rows.set_column(log.rows.column_names.index("time_s"), "time_s",
                                pa.array(log.rows["time_s"].to_numpy() * rng.normal(1, 0.02, log.rows.num_rows)))
    log = dataclasses.replace(log, rows=noisy)
    cal = calibrate(f, log)
    assert cal.fitted["nvlink_efficiency"] == pytest.approx(0.7, rel=0.02)
    s = cal.error_summary()
    assert 0.002 < s["held_out_rms"] < 0.06


def test_a_log_whose_rank_count_is_not_the_fabrics_is_refused():
    text = log_text(fs.hgx_h100(), "all_reduce", DEFAULT, ranks=[0, 1, 2, 3])
    with pytest.raises(fs.InvalidArgumentError, match=r"ran all_reduce on 4 ranks, but the fabric has 8 GPUs"):
        calibrate(fs.hgx_h100(), text)


def test_bad_input_is_refused_precisely(tmp_path):
    f = fs.hgx_h100()
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\nworld\n")
    with pytest.raises(fs.NcclLogError):
        calibrate(f, notes)
    with pytest.raises(fs.InvalidArgumentError, match="at least one"):
        calibrate(f, [])
    with pytest.raises(fs.InvalidArgumentError, match="holdout_every"):
        calibrate(f, log_text(f, "all_reduce", DEFAULT), holdout_every=1)
    with pytest.raises(fs.InvalidArgumentError, match="parameters must be some of"):
        calibrate(f, log_text(f, "all_reduce", DEFAULT), parameters=("speed",))
    with pytest.raises(fs.InvalidArgumentError, match="generated fabric"):
        calibrate(fs.Topology.from_arrays([0, 1], [1, 0], 1e9), log_text(f, "all_reduce", DEFAULT))
    assert set(PARAMETERS) == {"nvlink_efficiency", "network_efficiency", "nvls_efficiency", "latency_scale"}


def test_the_cli_fits_and_writes_a_cost_model(tmp_path, capsys):
    f = fs.hgx_h100()
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(log_text(f, "all_reduce", DEFAULT.replace(nvls_efficiency={"hopper": 0.8})))
    out = tmp_path / "cost.json"
    assert cli.main(["calibrate", str(log), "--fabric", "hgx-h100", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fitted nvls_efficiency = 0.8" in printed and "held out" in printed
    model = fs.CostModel.from_json(out)
    assert model.nvls_efficiency[2] == pytest.approx(0.8, rel=2e-3)
    # The fitted model then drives the simulated nccl-tests.
    assert cli.main(["nccl-tests", "--fabric", "hgx-h100", "-b", "4G", "-e", "4G", "--cost-model", str(out)]) == 0
    assert "nvls" in capsys.readouterr().out
    assert cli.main(["calibrate", str(tmp_path / "none.log"), "--fabric", "hgx-h100"]) == 2
    assert "none.log" in capsys.readouterr().err


# ---- real nccl-tests output ------------------------------------------------------------------
#
# Logs as nccl-tests prints them (header, rank list, NCCL's INFO lines from NCCL_DEBUG=INFO
# between them, the table with its out-of-place and in-place groups and #wrong columns, the
# footer), whose rows are measurements quoted from public logs, not anything fabricsim made.
# Host names and process ids are ours; every number of a row is the log's.

# https://github.com/NVIDIA/nccl-tests/issues/252 (comment of 2024-09-24): all_reduce_perf
# with NCCL_ALGO=RING on two hosts of four H100 SXM each; the maintainer reads it as "~24GB/s
# per NIC", so four 200 Gb/s NICs a host (one per GPU: [assumed], as the per-NIC figure says).
TWO_HOSTS_OF_FOUR_RING = """\
# nThread 1 nGpus 1 minBytes 536870912 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  31001 on      hosta device  0 [0x42] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  31002 on      hosta device  1 [0x55] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  31003 on      hosta device  2 [0xd4] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  31004 on      hosta device  3 [0xe6] NVIDIA H100 80GB HBM3
#  Rank  4 Group  0 Pid  47011 on      hostb device  0 [0x42] NVIDIA H100 80GB HBM3
#  Rank  5 Group  0 Pid  47012 on      hostb device  1 [0x55] NVIDIA H100 80GB HBM3
#  Rank  6 Group  0 Pid  47013 on      hostb device  2 [0xd4] NVIDIA H100 80GB HBM3
#  Rank  7 Group  0 Pid  47014 on      hostb device  3 [0xe6] NVIDIA H100 80GB HBM3
hosta:31001:31001 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>
hosta:31001:31001 [0] NCCL INFO NCCL_ALGO set by environment to RING
NCCL version 2.21.5+cuda12.4
hosta:31001:31090 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0:10.0.0.1<0>
hosta:31001:31090 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/IB/3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
   536870912     134217728     float     sum      -1    10052   53.41   93.46      0   9676.9   55.48   97.09      0
  1073741824     268435456     float     sum      -1    20079   53.48   93.58      0    19265   55.74   97.54      0
  2147483648     536870912     float     sum      -1    39871   53.86   94.26      0    39357   54.56   95.49      0
  4294967296    1073741824     float     sum      -1    77194   55.64   97.37      0    79688   53.90   94.32      0
  8589934592    2147483648     float     sum      -1   158070   54.34   95.10      0   158561   54.17   94.80      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 95.3009
#
"""

# https://github.com/NVIDIA/nccl-tests/issues/194: all_reduce_perf -b 1G -e 8G -f 2 -g 2 on two
# H100 PCIe joined by NVLink bridges (12 NVLink4 links: [assumed] from the card's 600 GB/s
# bidirectional bridge figure), one process driving both. The 8 GiB row is cut off
# and its 4 GiB in-place busbw ends at "116.": both left out.
TWO_H100_PCIE_BRIDGED = """\
# nThread 1 nGpus 2 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   5120 on   pcie-box device  0 [0x01] NVIDIA H100 PCIe
#  Rank  1 Group  0 Pid   5120 on   pcie-box device  1 [0x21] NVIDIA H100 PCIe
pcie-box:5120:5120 [0] NCCL INFO cudaDriverVersion 12030
NCCL version 2.19.3+cuda12.3
pcie-box:5120:5140 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1 [2] 1/-1/-1->0->-1
pcie-box:5120:5141 [1] NCCL INFO Channel 00/0 : 1[21000] -> 0[1000] via P2P/direct pointer
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1   9306.7  115.37  115.37      0   9291.5  115.56  115.56      0
  2147483648     536870912     float     sum      -1    18535  115.86  115.86      0    18524  115.93  115.93      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 115.68
#
"""


@pytest.fixture
def measured_parts():
    """The parts those hosts had and the catalog lacks, each from its log's figures."""
    fs.catalog.add_part("test-cx-200g", "nic", source="[assumed] a ConnectX port at 200 Gb/s (HDR/NDR200)",
                        **dict(fs.catalog.part("cx7"), rate_Bps="200Gb/s", ethernet_port_Bps="200Gb/s"))
    fs.catalog.add_part("test-h100-pcie", "gpu", source="[assumed] H100 PCIe: 12 NVLink4 links over its bridges",
                        **dict(fs.catalog.part("h100"), nvlink_links=12))
    yield
    fs.catalog.remove_part("test-cx-200g")
    fs.catalog.remove_part("test-h100-pcie")


def _geometric_mean(values):
    return float(np.exp(np.mean(np.log(values))))


def test_a_real_two_host_ring_log_fits_the_network_efficiency_its_busbw_implies(measured_parts):
    log = fs.read_nccl_tests(TWO_HOSTS_OF_FOUR_RING, op="all_reduce")
    assert (log.n_ranks, log.n_hosts) == (8, 2)
    assert log.rows["time_s"].to_pylist() == pytest.approx([10052e-6, 20079e-6, 39871e-6, 77194e-6, 158070e-6])
    assert log.rows["in_place_busbw_Bps"].to_pylist() == pytest.approx([97.09e9, 97.54e9, 95.49e9, 94.32e9, 94.80e9])
    # The ring crosses between the hosts on all four rails at once: its busbw is 4 x 25 GB/s
    # x the network efficiency, less the alpha (about 116 us here: NCCL's ring latency across
    # two nodes and the wire), 1% of the smallest row's time and 0.07% of the largest's.
    fabric = fs.cluster(domain={"gpu": "h100", "n_gpus": 4, "switch": "nvswitch3"}, n_domains=2,
                        scale_out="quantum-2", nic="test-cx-200g")
    cal = fs.calibrate(fabric, log, algorithm="ring", holdout_every=0)
    assert set(cal.fitted) == {"network_efficiency"}
    assert "latency_scale" in cal.not_determined  # every row is bandwidth-bound
    by_row = [1.75 * size / (100e9 * (t - 115.6e-6)) for size, t in
              zip(log.rows["size_bytes"].to_pylist(), log.rows["time_s"].to_pylist())]
    # a fit of log times: the rows' geometric mean (0.9517), each row within 2.5% of it
    assert cal.fitted["network_efficiency"] == pytest.approx(_geometric_mean(by_row), rel=1e-3)
    assert cal.fitted["network_efficiency"] == pytest.approx(95.10 / 100, rel=0.002)  # the 8 GiB row alone
    assert cal.error_summary()["fit_max"] < 0.025
    # With the catalog's InfiniBand payload efficiency (header arithmetic, 0.993) every row
    # comes out 1.8-5.2% faster than these hosts ran it.
    default = cal.table["default_error"].to_numpy()
    assert np.all((default < -0.015) & (default > -0.055))


def test_a_real_bridged_pair_log_fits_the_nvlink_efficiency_its_busbw_implies(measured_parts):
    log = fs.read_nccl_tests(TWO_H100_PCIE_BRIDGED, op="all_reduce")
    assert (log.n_ranks, log.n_hosts) == (2, 1)
    fabric = fs.nvlink_domain(gpu="test-h100-pcie", n_gpus=2, switch="nvswitch3")
    cal = fs.calibrate(fabric, log, algorithm="ring", holdout_every=0)
    assert set(cal.fitted) == {"nvlink_efficiency"}
    # Two ranks: a ring all-reduce sends S each way, so busbw = algbw = 12 x 25 GB/s x the
    # NVLink efficiency; the alpha (9 us) is 0.1% of the rows' time. About 116 GB/s: 39% of
    # the links' line rate, where the catalog's NVLink 4 payload efficiency is 82.4%.
    by_row = [size / (300e9 * (t - 9e-6)) for size, t in
              zip(log.rows["size_bytes"].to_pylist(), log.rows["time_s"].to_pylist())]
    assert cal.fitted["nvlink_efficiency"] == pytest.approx(_geometric_mean(by_row), rel=1e-3)
    assert cal.fitted["nvlink_efficiency"] == pytest.approx(115.86 / 300, rel=0.005)
    assert cal.error_summary()["fit_max"] < 0.005
    # The fitted model gives the busbw the log shows at the size between the rows.
    est = fs.estimate(fabric, "all_reduce", "1536MiB", algorithm="ring", cost_model=cal.cost_model)
    assert est.busbw_Bps == pytest.approx(115.6e9, rel=0.005)
