"""Defects found by probing the API with extreme input, each held as it was found: values at
the edge of the float range, arguments that are read twice or not at all, errors that must
name the value (two more, a failed GPU and an iterator of ranks, are in test_fidelity.py)."""

import copy
import json
import math
import os
import re
import tracemalloc

import numpy as np
import pyarrow.parquet as pq
import pytest

import fabricsim as fs
from fabricsim._checks import MAX_CAPACITY_BPS
from fabricsim.exceptions import FabricsimError, InvalidArgumentError, ScenarioRunningError, ScenarioTooLargeError, WriteError

ABOVE = math.nextafter(MAX_CAPACITY_BPS, math.inf)


# ---- defect 2: a silently wrong finish time at capacities near the largest double ----------


def test_a_capacity_near_the_largest_double_is_refused_naming_value_and_bound():
    # Flow 0 finished at 1.9e-8 s (exact: 1e-8) and verify_rates raised InternalError.
    with pytest.raises(InvalidArgumentError, match=r"^capacity_Bps of link 0 must be at most 1e300 B/s, got 1e308: "):
        fs.Topology.from_arrays([0], [1], 1e308)
    with pytest.raises(InvalidArgumentError, match=r"^capacity of constraint 0 must be at most 1e300 B/s, got 9e307"):
        fs.max_min_rates([9e307], [0], [0])


def test_the_python_bound_is_the_cores():
    fs.Topology.from_arrays([0], [1], MAX_CAPACITY_BPS)
    with pytest.raises(InvalidArgumentError, match=r"got 1\.0000000000000002e300"):
        fs.Topology.from_arrays([0], [1], ABOVE)


def test_at_the_bound_the_finish_time_is_exact():
    topo = fs.Topology.from_arrays([0], [1], MAX_CAPACITY_BPS)
    sc = fs.Scenario(topo)
    sc.add_flow(0, 1, 1e292)
    sc.add_flow(0, 1, 1, start_s=1e-9)
    res = sc.run(verify_rates=True)
    assert res.flows["finish_s"].to_pylist() == [1e-8, 1e-9]


@pytest.mark.parametrize("field", ["port_Bps", "lane_Bps"])
def test_a_catalog_rate_above_the_bound_is_refused_where_it_is_given(field):
    fields = dict(protocol="ethernet", ports=2, port_Bps=1e12, lane_Bps=1e12, optics="co-packaged",
                  ports_per_cage=None, optics_watts_per_port=0, system_watts=None, latency_s=1e-7,
                  sharp=False, adaptive_routing=False)
    fields[field] = 1e301
    before = fs.catalog.parts()
    with pytest.raises(InvalidArgumentError, match=rf"^switch part 'huge-sw': {field} must be a rate of at most "
                                                   r"1e\+300 bytes/s .*got 1e\+301$"):
        fs.catalog.add_part("huge-sw", "switch", source="[assumed] a test", **fields)
    assert fs.catalog.parts().equals(before)


# ---- defect 3: bytes_carried past the largest double ---------------------------------------


def test_flows_carrying_more_than_a_double_holds_are_refused_and_the_summary_prints():
    # bytes_carried overflowed to inf, mean_utilization came back null and print(summary)
    # raised TypeError.
    sc = fs.Scenario(fs.Topology.from_arrays([0], [1], 1e6))
    with pytest.raises(InvalidArgumentError, match=r"^element 0: size_bytes 1e308 over usage coefficients adding up "
                                                   r"to 1 would bring the bytes all flows carry .* to 1e308: more than "
                                                   r"the 1e300 bytes"):
        sc.add_flows([0, 0], [1, 1], 1e308)
    assert sc.n_activities == 0
    sc.add_flows([0, 0], [1, 1], 4e299)
    res = sc.run()
    row, = res.links.to_pylist()
    assert row["bytes_carried"] == 8e299 and row["mean_utilization"] == 1.0
    assert "100.0%" in str(res.summary)
    assert res.summary.bytes_moved == 8e299


# ---- defect 4: load_parts lets foreign exceptions through ----------------------------------


@pytest.mark.parametrize("content,expected", [
    (b"[" * 100000 + b"]" * 100000, r"nests arrays or objects too deeply to read"),
    ('{"parts": {"\u00e9": 1}}'.encode("latin-1"), r"is not UTF-8 text: byte 0xe9 at offset 12"),
    ('{"parts": {}}'.encode("utf-16"), r"is not UTF-8 text \(it starts with a UTF-16 byte order mark\)"),
    (b'{"parts": {}, "version": ' + b"1" * 5000 + b"}", r"holds a number that cannot be read: .*5000 digits"),
])
def test_load_parts_refuses_what_it_cannot_read_as_its_own_error(tmp_path, content, expected):
    # RecursionError, UnicodeDecodeError and a bare ValueError escaped.
    path = tmp_path / "parts.json"
    path.write_bytes(content)
    before = fs.catalog.parts()
    with pytest.raises(InvalidArgumentError, match=rf"^catalog file {str(path)!r} {expected}"):
        fs.catalog.load_parts(path)
    assert fs.catalog.parts().equals(before)


def test_load_parts_wraps_a_path_the_os_cannot_take(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"^cannot read catalog file .*embedded null"):
        fs.catalog.load_parts(str(tmp_path / "a\0b.json"))


# ---- defect 5: add_part's OverflowError ----------------------------------------------------


@pytest.mark.parametrize("port,lane", [(1e300, 1e300), (1e300, 1e-300)])
def test_a_switch_radix_beyond_double_range_is_an_error_not_overflow(port, lane):
    # ports * port_Bps / lane_Bps was inf, and round(inf) raised OverflowError.
    fields = dict(protocol="ethernet", ports=2, port_Bps=port, lane_Bps=lane, optics="co-packaged",
                  ports_per_cage=None, optics_watts_per_port=0, system_watts=None, latency_s=1e-7,
                  sharp=False, adaptive_routing=False)
    if lane == port:
        part = fs.catalog.add_part("big-sw", "switch", source="[assumed] a test", **fields)
        try:
            assert part.port_Bps == 1e300
        finally:
            fs.catalog.remove_part("big-sw")
    else:
        with pytest.raises(InvalidArgumentError, match=r"into a whole number of lanes \(ports \* port_Bps / lane_Bps = inf\)"):
            fs.catalog.add_part("big-sw", "switch", source="[assumed] a test", **fields)


# ---- defect 7: large allocations before the memory check -----------------------------------


def test_flows_along_very_long_routes_are_refused_before_they_are_stored(monkeypatch):
    # 60 end-to-end flows on a path of 2,000,000 nodes grew the process by 2.5 GB under a
    # 1 GB budget and only run() refused: each route's usage entries are counted now.
    n = 200_000
    topo = fs.Topology.from_arrays(np.arange(n - 1), np.arange(1, n), 1e9)
    sc = fs.Scenario(topo)
    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(100_000_000))
    with pytest.raises(ScenarioTooLargeError, match=r"a flow with a route of 199999 usage entries, with the \d+ "
                                                    r"activities already added, and their run needs about "):
        sc.add_flows(np.zeros(60, dtype=np.int64), np.full(60, n - 1), 1e6)
    assert sc.n_activities == 0
    with pytest.raises(ScenarioTooLargeError):
        for _ in range(60):
            sc.add_flow(0, n - 1, 1e6)
    assert 0 < sc.n_activities < 10
    monkeypatch.delenv("FABRICSIM_AVAILABLE_BYTES")
    sc.add_flow(0, n - 1, 1e6)  # room again


def test_a_broadcast_value_bigger_than_the_memory_is_refused_before_it_is_made(monkeypatch):
    # One size for 20 million flows is 160 MB made from nothing (np.full), unchecked.
    from fabricsim._checks import quantities

    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(100 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(ScenarioTooLargeError, match=r"^size_bytes \(20000000 values of 8 bytes\) needs about "
                                                        r"152\.6 MiB of memory, but only 100\.0 MiB is available$"):
            quantities("size_bytes", 1.0, 20_000_000, fs.units.size_bytes)
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()
    assert quantities("size_bytes", 1.0, 3, fs.units.size_bytes).tolist() == [1.0] * 3


def test_broadcast_add_flows_inputs_are_refused_before_any_is_made(monkeypatch):
    # 1e8 flows reached 3.1 GB before refusing under 1 GB: each array fits on its own.
    sc = fs.Scenario(fs.Topology.from_arrays([0], [1], 1e9))
    n = 10_000_000
    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(150 << 20))
    tracemalloc.start()
    try:
        src, dst = np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64)
        given = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        with pytest.raises(ScenarioTooLargeError, match=r"^10000000 more flows"):
            sc.add_flows(src, dst, 1.0, start_s=0.0)
        assert tracemalloc.get_traced_memory()[1] - given < 40 << 20
    finally:
        tracemalloc.stop()


def test_an_all_to_all_v_matrix_is_checked_before_it_is_read(monkeypatch):
    fabric = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2")
    n = fabric.n_gpus  # 128: the reading takes about 41 n^2 = 672 KB
    sizes = np.ones((n, n))
    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(300_000))
    with pytest.raises(ScenarioTooLargeError, match=r"all_to_all size matrix"):
        fs.estimate(fabric, "all_to_all", sizes=sizes)


# ---- defect 8: to_parquet ------------------------------------------------------------------


def _result():
    sc = fs.Scenario(fs.Topology.from_arrays([0, 1], [1, 2], 1e9))
    sc.add_flow(0, 2, 1e6)
    return sc.run(record_rates=True)


def test_to_parquet_wraps_os_errors_naming_the_path(tmp_path):
    res = _result()
    (tmp_path / "file").write_text("")
    for bad, cause in ((tmp_path / "file", "File exists"), (tmp_path / "file" / "sub", "Not a directory"),
                       (str(tmp_path / "a\0b"), "embedded null")):
        with pytest.raises(WriteError, match=rf"^cannot write {re.escape(repr(str(bad)))}: .*{cause}"):
            res.to_parquet(bad)
    assert isinstance(WriteError("x"), OSError) and isinstance(WriteError("x"), FabricsimError)


def test_to_parquet_is_all_or_nothing(tmp_path, monkeypatch):
    # A write that failed part-way left a new flows.parquet beside a stale links.parquet.
    first = _result()
    paths = first.to_parquet(tmp_path)
    before = {p: open(p, "rb").read() for p in paths}
    sc = fs.Scenario(fs.Topology.from_arrays([0, 1], [1, 2], 1e9))
    sc.add_flows([0, 1], [2, 2], 2e6)
    second = sc.run()
    real_write = pq.write_table
    calls = []

    def failing(table, where, *args, **kwargs):
        calls.append(where)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_write(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", failing)
    with pytest.raises(WriteError, match=r"delays\.parquet'?: No space left on device"):
        second.to_parquet(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)  # no temporary left
    assert {p: open(p, "rb").read() for p in paths} == before
    monkeypatch.setattr(pq, "write_table", real_write)
    written = second.to_parquet(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["delays.parquet", "flows.parquet", "links.parquet"]  # stale rate_changes gone
    assert pq.read_table(written[0]).num_rows == 2


# ---- defect 9: a copy changed while the original runs --------------------------------------


def test_a_copy_is_a_scenario_of_its_own_that_can_change_while_the_original_runs():
    # A shallow copy shared the original's core but not its running state: changing it while
    # the original ran reached PyO3's bare "Already borrowed". A copy is now rebuilt from the
    # original's calls (as pickling does): its own core, free to change at any time.
    sc = fs.Scenario(fs.Topology.from_arrays([0], [1], 1.0))
    sc.add_flows([0] * 200, [1] * 200, np.arange(1.0, 201.0))
    twin = copy.copy(sc)
    added = []

    def progress(n_done, n_total, t):
        added.append(twin.add_flow(0, 1, 1.0))
        return True

    result = sc.run(progress=progress)
    assert added and result.flows.num_rows == 200
    assert twin.n_activities == 200 + len(added)
    assert twin.run().flows.num_rows == 200 + len(added)


# ---- defect 10 ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["\u0661\u0662Gb/s", "\uff11\uff12Gb/s", "1\u0662 GB/s", "\u0661e3 B/s"])
def test_unit_strings_take_ascii_digits_only(text):
    # Arabic-Indic and fullwidth digits were read as 12.
    with pytest.raises(InvalidArgumentError, match=rf"^cannot parse bandwidth {text!r}: expected a non-negative number "
                                                   r"\(digits 0-9\)"):
        fs.units.bandwidth_Bps(text)
    for parse in (fs.units.size_bytes, fs.units.duration_s):
        with pytest.raises(InvalidArgumentError, match=r"digits 0-9"):
            parse(text.replace("Gb/s", "GB").replace("GB/s", "s").replace("B/s", "s"))


def test_a_fabric_with_every_link_down_takes_a_collective_as_it_takes_a_flow():
    fabric = fs.hgx_h100()
    dead = fabric.fail(links=list(range(fabric.n_links)))
    sc = fs.Scenario(dead)
    sc.add_flow(0, 1, "1MiB")
    sc.add_collective("all_reduce", [2, 3], "1MiB")
    flows = sc.run().flows.to_pylist()
    assert {f["status"] for f in flows} == {"failed"}


def test_the_cli_refuses_a_bad_parquet_directory_before_the_run(tmp_path, capsys, monkeypatch):
    from fabricsim.cli import main

    ran = []
    monkeypatch.setattr(fs.Scenario, "run", lambda self, **kw: ran.append(1))
    (tmp_path / "file").write_text("")
    assert main(["demo", "--parquet", str(tmp_path / "file" / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fabricsim: error: cannot write {str(tmp_path / 'file' / 'out')!r}: Not a directory"), err
    assert not ran


# ---- the surfaces added since: memory before allocation, hangs, foreign exceptions ----------

_RANK_LINE = "#  Rank  7 Group  0 Pid  41242 on gpu-node-07 device  7 [0xe4] NVIDIA H100 80GB HBM3"


def _nccl_log():
    from test_nccl_logs import ALL_REDUCE_8

    assert _RANK_LINE in ALL_REDUCE_8
    return ALL_REDUCE_8


def test_a_rank_of_a_billion_costs_no_memory_and_names_the_missing_ranks():
    log = _nccl_log().replace(_RANK_LINE, _RANK_LINE.replace("Rank  7", "Rank 1000000000"))
    tracemalloc.start()
    with pytest.raises(fs.NcclLogError, match=r"misses rank\(s\) 7, 8, 9, 10, 11, 12, 13, 14, \.\.\. of 0-1000000000"):
        fs.read_nccl_tests(log, op="all_reduce")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1e6  # the list of ranks up to a billion took 1.2 GB per 10**7
    with pytest.raises(fs.NcclLogError, match=r"line 11: expected a rank and group below 4,294,967,295"):
        fs.read_nccl_tests(_nccl_log().replace("Rank  7", "Rank " + "9" * 5000), op="all_reduce")


def test_nccl_numbers_beyond_the_doubles_are_read_or_refused_by_column():
    row = "   134217728      33554432     float     sum      -1   1234.5"
    with pytest.raises(fs.NcclLogError, match=r"line 24: column 1 \(size\) reads '1000000000000000000000000000000': "
                                              r"expected a whole number in \[0, 2\*\*63\)"):
        fs.read_nccl_tests(_nccl_log().replace(row, row.replace("   134217728", "1" + "0" * 30)), op="all_reduce")
    # a time past the doubles reads as inf (no OverflowError), as does an exponent of 5,000 digits
    for time_text in ("1e400", "1e" + "9" * 5000):
        log = fs.read_nccl_tests(_nccl_log().replace("1234.5", time_text), op="all_reduce")
        assert log.rows.column("time_s").to_pylist()[-1] == math.inf


def test_a_scenario_files_line_of_blanks_is_indexed_in_linear_time(tmp_path):
    import signal

    def hung(*_):
        raise AssertionError("indexing the lines hung (a '[' and 5,000 blanks took 136 s)")

    path = tmp_path / "study.toml"
    path.write_text('[fabric]\ngenerator = "hgx_h100"\n[output]\ndirectory = """\n[' + " " * 400_000 + '\n"""\n')
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        assert fs.load_scenario(path).scenario.topology.n_gpus == 8
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_scenario_files_run_options_and_names_are_checked_when_it_is_loaded(tmp_path):
    path = tmp_path / "study.toml"
    base = '[fabric]\ngenerator = "hgx_h100"\n'
    for text, message in (
        (base + "\n[run]\ntolerance = 2\n", r":5: run\.tolerance: tolerance must be a number in \[0, 1\)"),
        (base + "\n[run]\nrecord_rates = \"yes\"\n", r":5: run\.record_rates: record_rates must be True or False"),
        ('[fabric]\ngenerator = ["hgx_h100"]\n', r":2: fabric\.generator: unknown generator \['hgx_h100'\]"),
        (base + '\n[[workload]]\ntype = ["flow"]\n', r":5: workload\[0\]\.type: type must be one of"),
        (base + "\n[scenario]\ncost_model = {latency_scale = 1e400}\n",
         r":5: scenario\.cost_model: CostModel\.latency_scale=inf: expected a finite number >= 0"),
    ):
        path.write_text(text)
        with pytest.raises(fs.ScenarioFileError, match=re.escape(str(path)) + message):
            fs.load_scenario(path)


def test_cost_models_refuse_what_they_cannot_hold_by_field():
    for make, message in (
        (lambda: fs.CostModel(latency_scale=10**400), r"latency_scale=100000000000\.\.\. \(an int of 401 digits\)"),
        (lambda: fs.CostModel.from_json('{"latency_scale": 1e400}'), r"latency_scale=inf: expected a finite number"),
        (lambda: fs.CostModel.from_json('{"ring_plateau_factor": {}}'),
         r"ring_plateau_factor: expected a list of 2 entries, got \{\}"),
        (lambda: fs.CostModel.from_dict({1: 2}), r"keys are its field names \(str\), got int 1"),
        (lambda: fs.CostModel.from_json(None), r"must be a path"),
        (lambda: fs.CostModel(p2p_group_size=0), r"p2p_group_size=0: expected a whole number in \[1, 2\*\*31\)"),
        (lambda: fs.CostModel().replace(ladder_intra_Bps=tuple((5e-324,) * len(row)
                                                               for row in fs.CostModel().ladder_intra_Bps)),
         r"ladder_intra_Bps\[0\]=5e-324: expected 0 or a rate in \[1, 1e\+300\] B/s"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            make()
    # 0 is NCCL_P2P_LL_THRESHOLD=0: LL off, not a division
    no_ll = fs.estimate(fs.hgx_h100(), "all_to_all", "1KiB", cost_model=fs.CostModel(p2p_ll_threshold_bytes=0))
    assert no_ll.protocol == "simple"


def test_draws_and_grids_too_large_for_memory_are_refused_before_they_are_made(monkeypatch):
    from fabricsim import reliability, serving

    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(10**9))
    for make, what in (
        (lambda: reliability.simulate(fabric, 1.0, horizon_s=1e300), r"about [\d.]+e\+292 failures over the horizon"),
        (lambda: serving.poisson_requests(1e7, 1e6), r"about 1e\+13 requests"),
        (lambda: fs.sweep({"a": range(10**6), "b": range(10**6)}, lambda a, b: {}),
         r"a sweep grid of 1,000,000,000,000 points"),
        (lambda: fs.MoeRouting.from_topk(np.array([[[0, 10**12]]])), r"the placement of 1,000,000,000,001 experts"),
    ):
        with pytest.raises(ScenarioTooLargeError, match=what + r" needs about [\d.e]+ GiB of memory, but only 953\.7 MiB is available"):
            make()


def test_workload_arguments_are_refused_by_name_not_by_a_foreign_exception():
    from fabricsim import reliability, serving

    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    cpo = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-x-photonics")
    for make, message in (
        (lambda: reliability.simulate(None, 1.0, horizon_s=1.0), r"fabric must be a generated fabricsim\.Fabric"),
        (lambda: reliability.compare_optics(fabric, cpo, 1.0, horizon_s=1.0, seeds=2**31),
         r"seeds must be an integer in \[1, 10001\)"),
        (lambda: reliability.cpo_port_factor(5), r"rates must be a reliability\.FailureRates"),
        (lambda: reliability.failure_rates().replace(repair_s=5), r"repair_s must be a mapping"),
        (lambda: serving.TokenCounts(np.zeros(0)), r"TokenCounts kind must be"),
        (lambda: serving.TokenCounts("uniform", low=np.int64(3), high=0.0), r"TokenCounts high \(tokens\) must be"),
        (lambda: serving.kv_cache_bytes("llama3-70b", None), r"tokens must be a finite number >= 0"),
        (lambda: serving.kv_cache_bytes("llama3-70b", [1, -1]), r"tokens\[1\] must be a finite count >= 0"),
        (lambda: serving.Pool("ab", tp=8), r"Pool gpus must be a sequence of integers"),
        (lambda: fs.Scenario(fabric).add_job("a", n_gpus=8, placement=np.zeros(0)), r"placement must be one of"),
        (lambda: fs.MoeRouting.from_counts("", top_k=2), r"counts must be an array of token counts"),
        (lambda: fs.nccl_tests(fs.hgx_h100(), "all_reduce", 5e-324, "32M"), r"makes inf sizes"),
        (lambda: fs.calibrate(fs.hgx_h100(), fs.read_nccl_tests(_nccl_log(), op="all_reduce"), algorithm=None),
         r"^algorithm must be one name or a list of one per log \(1\), got NoneType None"),
        (lambda: fs.sweep({"a": (x for x in [1])}, lambda a: {}), r"grid\['a'\] must be a sequence of values"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            make()


def test_serving_efficiencies_and_probe_intervals_that_no_double_holds_are_refused_by_name(monkeypatch):
    from fabricsim import serving

    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    requests = serving.trace_requests([0.0, 0.01], [64, 64], [50, 50])
    with pytest.raises(InvalidArgumentError, match=r"^prefill_efficiency=5e-324 makes a prefill take longer than a double"):
        serving.add_serving(fs.Scenario(fabric), "llama3-8b", requests, prefill=serving.Pool(range(8), tp=8),
                            decode=serving.Pool(range(8, 16), tp=8), prefill_efficiency=5e-324)
    # EP across the two servers: a probe every 5e-324 s is a grid of inf, refused before it is made
    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(10**9))
    with pytest.raises(ScenarioTooLargeError, match=r"^EP probes every 4\.94066e-324 s over [\d.e-]+ s of decode needs"):
        serving.add_serving(fs.Scenario(fabric), "mixtral-8x7b", requests, prefill=serving.Pool([0, 1, 8, 9], tp=2),
                            decode=serving.Pool([4, 5, 6, 7, 12, 13, 14, 15], tp=1, ep=8), ep_probe_interval_s=5e-324)


# ---- the training step's building blocks: bare TypeErrors and AttributeErrors, each as found --


def test_the_training_building_blocks_refuse_what_is_not_theirs_naming_value_and_expectation():
    from fabricsim.workloads.training.compute import compute_beside_comm_s

    training = fs.training
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    for make, message in (
        # TypeError: 'numpy.int64' object is not iterable (a NumPy size taken for a list of them)
        (lambda: training.gemm_s(np.int64(4096), 4096, 4096, grouped=True, n_groups=-1),
         r"^gemm_s: n_groups must be an integer in \[1, 2\*\*32\), got -1$"),
        (lambda: training.gemm_s([64, "x"], 4096, 4096, grouped=True), r"^gemm_s: m\[1\] must be a real number .*got str 'x'"),
        (lambda: training.gemm_s([64] * 3, 4096, [8] * 2, grouped=True), r"^gemm_s: m and k give 3 and 2 groups"),
        # AttributeError: 'str' object has no attribute 'gemm_efficiency'
        (lambda: training.gemm_s(4096, 4096, 4096, compute="fused"),
         r"^gemm_s: compute must be a fabricsim\.training\.ComputeModel or None, got str 'fused'$"),
        (lambda: training.attention_s(1e12, compute="fused"), r"^attention_s: compute must be a fabricsim\.training\.ComputeModel"),
        (lambda: training.memory_bound_s(1e9, compute=0.8), r"^memory_bound_s: compute must be .*got float 0\.8$"),
        (lambda: training.layer_work("llama3-8b", 0, tokens=8192, precision=5), r"^precision must be a recipe name"),
        # ValueError (not enough values to unpack), TypeError (cannot unpack, '>' between str and int,
        # None not iterable); NaN seconds and negative SMs were taken
        (lambda: compute_beside_comm_s(1e-3, [(1e-3,)]),
         r"^compute_beside_comm_s: overlaps\[0\] must be a pair \(seconds the communication runs, SMs its kernels hold\), "
         r"got tuple \(0\.001,\)$"),
        (lambda: compute_beside_comm_s(1e-3, [1]), r"overlaps\[0\] must be a pair .*got int 1$"),
        (lambda: compute_beside_comm_s(1e-3, [(1e-3, 8), ("a", 2)]),
         r"^compute_beside_comm_s: overlaps\[1\] seconds must be a real number in \[0, inf\), got str 'a'$"),
        (lambda: compute_beside_comm_s(1e-3, None), r"^compute_beside_comm_s: overlaps must be a sequence of \(seconds, "
                                                    r"SMs held\) pairs, got NoneType None$"),
        (lambda: compute_beside_comm_s(1e-3, [(math.nan, 2)]), r"overlaps\[0\] seconds must be .*got nan$"),
        (lambda: compute_beside_comm_s(1e-3, [(1e-3, -5)]), r"overlaps\[0\] SMs held must be .*got -5$"),
        # AttributeError: 'str' object has no attribute 'n_gpus'
        (lambda: training.domain_aware("x", fabric), r"^domain_aware: parallelism must be a fabricsim\.Parallelism, got str 'x'$"),
        # TypeError: MoeOptions.__init__() got an unexpected keyword argument 'bogus'
        (lambda: training.MoeOptions(bogus=1),
         r"^MoeOptions: no field 'bogus'; its fields are dispatcher, routing, concentration, seed, fp8_dispatch, overlap, "
         r"comm_sm_fraction$"),
        (lambda: training.MoeOptions("deepep", dispatcher="alltoall"), r"^MoeOptions: 'dispatcher' given twice"),
        (lambda: training.ComputeModel("eager", None, None, 0.8, 1), r"^ComputeModel: 4 fields, not 5 positional arguments"),
        (lambda: training.Precision("fp8", bogus=True), r"^Precision: no field 'bogus'; its fields are recipe, "),
        (lambda: fs.TrainingStep("llama3-8b", training.Parallelism(tp=8), fabric, moe={"bogus": 1}),
         r"^MoeOptions: no field 'bogus'"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            make()
    with pytest.raises(training.TrainingConfigError, match=r"^Parallelism: no field 'tensor_parallel'; its fields are tp, pp, "):
        training.Parallelism(tensor_parallel=8)
    # the sizes are NumPy's as well as Python's; and the options still copy, pickle and replace
    assert training.gemm_s(np.int64(4096), 4096, 4096, grouped=True, n_groups=2) == training.gemm_s(
        [4096, 4096], 4096, 4096, grouped=True)
    options = training.MoeOptions(dispatcher="deepep")
    assert copy.deepcopy(options) == options and training.Parallelism(tp=2).__class__(tp=2) == training.Parallelism(tp=2)
