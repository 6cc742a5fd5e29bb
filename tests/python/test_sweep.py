"""Pickling of topologies, fabrics and scenarios (rebuilt from their arguments), and
fabricsim.sweep over serial, thread, process and Dask executors."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import pickle

import numpy as np
import pyarrow as pa
import pytest

import fabricsim as fs
from sweep_points import all_reduce_point, fabric_point, run_tables


def roundtrip(obj):
    return pickle.loads(pickle.dumps(obj))


# ---- pickling -----------------------------------------------------------------------------


def test_plain_topology_pickles_with_its_labels():
    topo = fs.Topology.from_arrays([0, 1, 1, 2], [1, 2, 0, 1], ["400Gb/s", "100Gb/s", "400Gb/s", "100Gb/s"], "1us",
                                   node_names=["a", "b", ("c", 1)])
    back = roundtrip(topo)
    assert type(back) is fs.Topology
    assert back.links.equals(topo.links)
    assert back.node_names == ["a", "b", ("c", 1)]
    assert back.route("a", ("c", 1)) == topo.route("a", ("c", 1))


FABRICS = {
    "hgx_h100": lambda: fs.hgx_h100(),
    "nvl72_gb300": lambda: fs.nvl72(gpu="gb300"),
    "nvlink_domain": lambda: fs.nvlink_domain(n_gpus=16, chip_links=(9, 9), gpu="b200"),
    "clos_eth": lambda: fs.clos(n_hosts=200, switch="sn5600", nic="cx7", oversubscription="3:1"),
    "cluster_faults": lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2", sharp=True)
    .fail(nodes=[35]).fail(links=[3, 4], factor=0.25),
    "payload": lambda: fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    .fail(planes=[0], factor=0.5).with_payload_efficiency(nvlink=0.7, network=0.9),
    "pcie_server": lambda: fs.pcie_server(n_gpus=4, gpus_per_switch=2, cpu_link_Bps="32GB/s").fail(links=[0]),
}


@pytest.mark.parametrize("name", FABRICS)
def test_fabric_pickles_as_its_parts_and_is_generated_again(name):
    fabric = FABRICS[name]()
    blob = pickle.dumps(fabric)
    assert len(blob) < 20_000  # its parts, not its links
    back = pickle.loads(blob)
    assert type(back) is fs.Fabric
    assert back.links.equals(fabric.links)
    assert back.structure == fabric.structure
    assert list(back.node_names) == list(fabric.node_names)
    assert back.payload_efficiency == fabric.payload_efficiency
    assert str(back.describe()) == str(fabric.describe())
    # Faults are kept as fail() keeps them, so a rebuild re-applies them.
    if "domain" in fabric._parts:
        again = back.with_payload_efficiency(nvlink=0.75)
        assert again.links.equals(fabric.with_payload_efficiency(nvlink=0.75).links)


def _busy_scenario(fabric):
    sc = fs.Scenario(fabric, seed=3, routing={"scale_out": "ecmp"})
    compute = sc.add_delay("1ms", tag="compute")
    src = np.arange(16)
    ids = sc.add_flows(src, (src + 9) % 32, "64MiB", after=compute, tag="perm")
    src[:] = 0  # changing an array after the call changes neither the scenario nor its pickle
    ranks = (g for g in range(32))  # an iterator is read once, by the call
    ar = sc.add_collective("all_reduce", ranks, "256MiB", after=ids, tag="ar")
    sc.add_collective("all_to_all", range(8), sizes=np.full((8, 8), 1e6), after=[ar])
    sc.add_fault(at_s="1.2ms", planes=[0], factor=0.5, until_s="1.5ms")
    late = sc.add_flow(0, 31, "1GiB", start_s="1us", max_rate_Bps="100Gb/s")
    sc.add_dependency(late, compute)
    return sc


def _same_run(a, b):
    ra, rb = a.run(record_rates=True), b.run(record_rates=True)
    for name in ("flows", "delays", "links", "collectives", "rate_changes"):
        assert getattr(ra, name).equals(getattr(rb, name)), name
    assert ra.makespan_s == rb.makespan_s
    return ra


def test_scenario_pickles_as_its_calls_and_runs_to_the_identical_result():
    sc = _busy_scenario(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2", routing="ecmp"))
    back = roundtrip(sc)
    assert back.n_activities == sc.n_activities
    assert back.seed == 3 and back.routing == sc.routing
    assert back.route_of(1) == sc.route_of(1)
    res = _same_run(sc, back)
    assert res.summary.n_flows > 30
    # Pickled again after a run, and from the copy: still the same scenario.
    _same_run(sc, roundtrip(roundtrip(back)))


def test_scenario_on_a_labelled_topology_with_a_cost_model_pickles():
    from fabricsim.cli import demo_scenario

    sc = demo_scenario(n_leaves=2, hosts_per_leaf=4, n_spines=1)
    _same_run(sc, roundtrip(sc))
    model = fs.CostModel().replace(latency_scale=0.5, nvlink_efficiency=0.7)
    sc = fs.Scenario(fs.hgx_h100(), cost_model=model)
    sc.add_collective("all_gather", range(8), "64MiB")
    back = roundtrip(sc)
    assert back.cost_model == model
    _same_run(sc, back)


def test_a_scenario_changed_behind_its_methods_refuses_to_pickle():
    sc = fs.Scenario(fs.Topology.from_arrays([0], [1], "1GB/s"))
    sc.add_flow(0, 1, "1MB")
    sc._core.add_delay(1.0, 0.0, [], None)
    with pytest.raises(pickle.PicklingError, match="changed through its core"):
        pickle.dumps(sc)


def test_a_failed_call_is_not_kept():
    sc = fs.Scenario(fs.Topology.from_arrays([0], [1], "1GB/s"))
    sc.add_flow(0, 1, "1MB")
    with pytest.raises(fs.InvalidArgumentError):
        sc.add_flow(0, 1, "-1MB")
    assert roundtrip(sc).n_activities == 1


def _spawn_pool(n: int = 1) -> cf.ProcessPoolExecutor:
    # spawn: a fresh interpreter, so everything it gets really went through pickle
    return cf.ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))


def test_scenario_runs_identically_in_another_process():
    sc = _busy_scenario(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2", routing="ecmp"))
    with _spawn_pool() as pool:
        remote = pool.submit(run_tables, sc).result()
    res = sc.run(record_rates=True)
    for name, table in remote.items():
        assert table.equals(getattr(res, name)), name


# ---- sweep --------------------------------------------------------------------------------


GRID = {"n_domains": [1, 2], "size": ["1MiB", "64MiB"], "routing": ["ecmp", "adaptive"]}


@pytest.fixture(scope="module")
def serial():
    return fs.sweep(GRID, all_reduce_point, progress=False)


def test_sweep_returns_one_table_with_the_parameters_as_columns(serial):
    assert serial.column_names == ["n_domains", "size", "routing", "algorithm", "time_s", "busbw_Bps"]
    assert serial.num_rows == 8
    # itertools.product's order: the last parameter varies fastest
    assert serial["n_domains"].to_pylist() == [1, 1, 1, 1, 2, 2, 2, 2]
    assert serial["size"].to_pylist() == ["1MiB", "1MiB", "64MiB", "64MiB"] * 2
    assert serial["routing"].to_pylist() == ["ecmp", "adaptive"] * 4
    for row in serial.to_pylist():
        assert row == {**{k: row[k] for k in GRID}, **all_reduce_point(row["n_domains"], row["size"], row["routing"])}
    big = serial.filter(pa.compute.equal(serial["size"], "64MiB"))
    assert all(b > 1e10 for b in big["busbw_Bps"].to_pylist())


def test_sweep_on_threads_and_processes_gives_the_serial_table(serial):
    with cf.ThreadPoolExecutor(max_workers=3) as pool:
        assert fs.sweep(GRID, all_reduce_point, executor=pool, progress=False).equals(serial)
    with _spawn_pool(2) as pool:
        assert fs.sweep(GRID, all_reduce_point, executor=pool, progress=False).equals(serial)


def test_sweep_labels_objects_and_takes_every_kind_of_return():
    fabrics = {"hgx": fs.hgx_h100(), "b200": fs.hgx_b200()}
    t = fs.sweep({"fabric": fabrics, "size": [2**20]}, fabric_point, progress=False)
    assert t["fabric"].to_pylist() == ["hgx", "b200"]
    assert t["n_links"].to_pylist() == [fabrics["hgx"].n_links, fabrics["b200"].n_links]

    def many(k):  # a table of k rows: each row carries the point's parameters
        return pa.table({"i": list(range(k))})

    t = fs.sweep({"k": [0, 2, 3]}, many, progress=False)
    assert t.to_pydict() == {"k": [2, 2, 3, 3, 3], "i": [0, 1, 0, 1, 2]}

    def run(n):
        sc = fs.Scenario(fs.Topology.from_arrays([0], [1], "1GB/s"))
        sc.add_flows([0] * n, [1] * n, "1GB")
        return sc.run()

    t = fs.sweep([{"n": 1}, {"n": 4}], run, progress=False)
    assert t["makespan_s"].to_pylist() == pytest.approx([1.0, 4.0])
    assert t["n_flows"].to_pylist() == [1, 4]
    assert fs.sweep({"x": [1.5, 2]}, lambda x: x * 2, progress=False).to_pydict() == {"x": [1.5, 2.0], "value": [3.0, 4]}


def test_sweep_errors_name_the_point():
    def fn(size):
        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", range(8), size)
        return sc.run()

    with pytest.raises(fs.SweepError, match=r"grid point 1 \(size=-1\) failed: InvalidArgumentError") as e:
        fs.sweep({"size": ["1MiB", -1, "2MiB"]}, fn, progress=False)
    assert isinstance(e.value.__cause__, fs.InvalidArgumentError)
    with cf.ThreadPoolExecutor(max_workers=2) as pool, pytest.raises(fs.SweepError, match="grid point 1"):
        fs.sweep({"size": ["1MiB", -1, "2MiB"]}, fn, executor=pool, progress=False)
    with pytest.raises(fs.InvalidArgumentError, match="'x', named as grid parameters"):
        fs.sweep({"x": [1]}, lambda x: {"x": 2}, progress=False)
    with pytest.raises(fs.InvalidArgumentError, match="a list of one"):
        fs.sweep({"x": 1}, lambda x: x)
    with pytest.raises(fs.InvalidArgumentError, match="executor must have submit"):
        fs.sweep({"x": [1]}, lambda x: x, executor=object())


def test_sweep_progress_shows_on_request_and_not_when_not_a_terminal(capsys):
    fs.sweep({"x": [1, 2]}, lambda x: x)  # stderr captured: not a terminal
    assert capsys.readouterr().err == ""
    fs.sweep({"x": [1, 2]}, lambda x: x, progress=True, desc="grid")
    err = capsys.readouterr().err
    assert "grid" in err and "2/2" in err and "x=2" in err


def test_sweep_on_a_dask_local_cluster(serial):
    distributed = pytest.importorskip("distributed")
    # Worker processes: grid values (a fabric) and the function travel pickled to them.
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        t = fs.sweep(GRID, all_reduce_point, executor=client, progress=False)
        assert t.equals(serial)
        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2").fail(nodes=[17], factor=0.5)
        t = fs.sweep({"fabric": {"broken": fabric}, "size": ["16MiB"]}, fabric_point, executor=client, progress=False)
        assert t["time_s"].to_pylist() == [fabric_point(fabric, "16MiB")["time_s"]]
