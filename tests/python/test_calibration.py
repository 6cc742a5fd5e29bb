"""Calibration from nccl-tests logs: logs in nccl-tests' own layout (as fabricsim prints it,
with the device list nccl-tests writes) made by a known cost model are fitted back to it, with
the error on held-out sizes; bad logs and mismatched fabrics are refused."""

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
