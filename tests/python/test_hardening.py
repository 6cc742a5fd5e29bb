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
