"""The Python API around the core: NetworkX input, bulk flows, progress and stopping,
memory refusal, the CLI demo."""

from __future__ import annotations

import subprocess
import sys

import ast
import inspect
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

import fabricsim as fs
from fabricsim import cli, scenario
from fabricsim.fabrics.generators import leaf_spine


def line_topology(n: int = 3, capacity_Bps: float = 1000.0) -> fs.Topology:
    src = list(range(n - 1)) + list(range(1, n))
    dst = list(range(1, n)) + list(range(n - 1))
    return fs.Topology.from_arrays(src, dst, capacity_Bps, 0.0)


def test_from_networkx_undirected_edges_become_two_links_with_labels():
    nx = pytest.importorskip("networkx")
    g = nx.Graph()
    g.add_edge("gpu0", "sw", capacity_Bps="8Gb/s", latency_s="1us")
    g.add_edge("sw", "gpu1", capacity_Bps=2e9)
    topo = fs.Topology.from_networkx(g)
    assert topo.n_nodes == 3 and topo.n_links == 4
    links = topo.links.to_pydict()
    assert links["capacity_Bps"] == [1e9, 1e9, 2e9, 2e9]
    assert links["latency_s"] == [1e-6, 1e-6, 0.0, 0.0]
    assert topo.node_names == ["gpu0", "sw", "gpu1"]
    sc = fs.Scenario(topo)
    f = sc.add_flow("gpu0", "gpu1", 1e9)
    # Bottleneck is the 1 GB/s link: 1 s after 1 us of latency.
    res = sc.run()
    assert res.flows["finish_s"][0].as_py() == pytest.approx(1.0 + 1e-6, rel=1e-12)
    assert [topo.links["dst"][link].as_py() for link in sc.route_of(f)] == [1, 2]
    with pytest.raises(fs.UnknownNodeError, match="gpu9"):
        sc.add_flow("gpu0", "gpu9", 1.0)


def test_from_networkx_directed_and_missing_capacity():
    nx = pytest.importorskip("networkx")
    g = nx.DiGraph()
    g.add_edge(0, 1, capacity_Bps=5.0)
    assert fs.Topology.from_networkx(g).n_links == 1
    g.add_edge(1, 2)
    with pytest.raises(fs.InvalidArgumentError, match=r"edge \(1, 2\) has no 'capacity_Bps'"):
        fs.Topology.from_networkx(g)


def test_add_flows_matches_add_flow_and_is_all_or_nothing():
    topo = line_topology(4)
    bulk = fs.Scenario(topo, seed=3)
    ids = bulk.add_flows([0, 1, 3], [3, 2, 0], [100.0, 200.0, 300.0], start_s=[0.0, 0.5, 1.0], tag="x")
    assert ids.tolist() == [0, 1, 2]
    one = fs.Scenario(topo, seed=3)
    for s, d, b, t in [(0, 3, 100.0, 0.0), (1, 2, 200.0, 0.5), (3, 0, 300.0, 1.0)]:
        one.add_flow(s, d, b, start_s=t, tag="x")
    assert bulk.run().flows.equals(one.run().flows)
    with pytest.raises(fs.SameEndpointsError, match="element 1"):
        bulk.add_flows([0, 2], [1, 2], 1.0)
    assert bulk.n_activities == 3, "a failed batch adds nothing"
    assert bulk.add_flow(0, 1, 1.0) == 3


def test_a_rejected_flow_leaves_no_trace_in_the_links_table():
    """Flows refused after routing (bad bytes), alone or in a batch, add no link rows: the
    links table lists the links some flow uses."""
    topo = line_topology(3)
    sc = fs.Scenario(topo)
    with pytest.raises(fs.InvalidArgumentError):
        sc.add_flow(0, 2, -5.0)
    with pytest.raises(fs.InvalidArgumentError, match="element 1"):
        sc.add_flows([1, 0], [2, 2], [5.0, -1.0])
    sc.add_flow(1, 0, 10.0)
    assert sc.run().links["link_id"].to_pylist() == [2]


def test_sizes_times_and_rates_take_the_same_forms_everywhere():
    # One converter: numbers or unit strings, one for all or one per element, wherever a
    # size, time or rate array enters (add_flows once refused unit strings from_arrays took).
    topo = fs.Topology.from_arrays([0, 1], [1, 0], ["8kb/s", 1000.0], "1ms")
    assert topo.links["capacity_Bps"].to_pylist() == [1000.0, 1000.0]
    sc = fs.Scenario(topo)
    ids = sc.add_flows([0, 1], [1, 0], ["1kB", 2000], start_s=np.array(["1ms", "2 ms"]))
    flows = sc.run().flows
    assert flows["bytes"].to_pylist() == [1000.0, 2000.0]
    assert flows["start_s"].to_pylist() == pytest.approx([2e-3, 3e-3])  # start + 1 ms latency
    assert ids.tolist() == [0, 1]
    rates = fs.max_min_rates(["8b/s", 1.0], [0, 1], [0, 1], rate_cap_Bps="4b/s")
    assert rates.tolist() == [0.5, 0.5]
    for call, name in [
        (lambda: sc.add_flows([0, 1], [1, 0], ["1kB", "1 parsec"]), "size_bytes[1]"),
        (lambda: sc.add_flows([0, 1], [1, 0], [True, 1.0]), "size_bytes"),
        (lambda: sc.add_flows([0, 1], [1, 0], 1.0, start_s=[[0.0, 1.0]]), "start_s"),
        (lambda: fs.Topology.from_arrays([0], [1], None), "capacity_Bps"),
        (lambda: fs.max_min_rates([[1.0]], [0], [0]), "capacity_Bps"),
    ]:
        with pytest.raises(fs.InvalidArgumentError, match=re.escape(name)):
            call()
    assert sc.n_activities == 2


def test_the_progress_bar_ends_at_100_percent_when_the_run_finishes(capsys):
    # It stayed at its last report, e.g. "9.7% of 1281 activities", after `fabricsim demo
    # --progress` had finished; and a long run's simulated time reads in hours, as the summary's.
    sc = fs.Scenario(line_topology(2, capacity_Bps=1.0))
    n = 5_000  # one after another: enough instants for a report
    sc.add_flows(np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64), 0.5, start_s=np.arange(n, dtype=float))
    res = sc.run(progress=True)
    last = _terminal_line(capsys.readouterr().err)
    assert "100%" in last and f"{n}/{n}" in last, last
    assert f"sim {fs.units.format_duration(res.makespan_s)}" in last, last
    assert "h" in fs.units.format_duration(res.makespan_s)  # 5,000 s: shown in hours


def _terminal_line(written: str) -> str:
    """What a terminal shows last of lines rewritten after each carriage return."""
    shown = ""
    for part in written.rstrip("\n").split("\r"):
        shown = part + shown[len(part):]
    return shown.rsplit("\n", 1)[-1]


def test_progress_callback_and_stopping():
    topo = line_topology(2, capacity_Bps=1.0)
    sc = fs.Scenario(topo)
    n = 5_000  # one after another: two instants per flow, enough for progress reports
    sc.add_flows(np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64), 0.5, start_s=np.arange(n, dtype=float))
    calls = []
    res = sc.run(progress=lambda done, total, t: calls.append((done, total, t)))
    assert res.flows.num_rows == n
    assert calls, "progress was never reported"
    assert all(total == n and 0 <= done <= n for done, total, _ in calls)
    assert [t for _, _, t in calls] == sorted(t for _, _, t in calls)

    def stop(done, total, t):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sc.run(progress=stop)
    # The scenario is intact and runs again.
    assert sc.run().flows.num_rows == n


@pytest.mark.parametrize("bad", [lambda: None, lambda done: None, lambda done, total, t, unit: None])
def test_a_progress_callback_of_the_wrong_signature_is_refused_before_the_run(bad):
    # It was accepted and failed with a TypeError at its first report, mid-run, or never in a
    # run too short to report.
    sc = fs.Scenario(line_topology(2))
    sc.add_flow(0, 1, 10.0)
    with pytest.raises(fs.InvalidArgumentError, match=re.escape(
            f"progress={bad!r} cannot be called as progress(n_done, n_activities, sim_time_s)")):
        sc.run(progress=bad)


def test_progress_callbacks_taking_three_arguments_are_called_and_their_errors_surface():
    sc = fs.Scenario(line_topology(2, capacity_Bps=1.0))
    n = 5_000
    sc.add_flows(np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64), 0.5, start_s=np.arange(n, dtype=float))
    calls = []

    class Recorder:
        def __call__(self, done, total, t):
            calls.append("object")

    # max's signature cannot be read (a builtin): it is taken as it is, and takes 3 numbers.
    for ok in (lambda *a: calls.append("varargs"), lambda done, total, t, unit="s": calls.append("default"),
               Recorder(), max):
        assert sc.run(progress=ok).flows.num_rows == n
    assert {"varargs", "default", "object"} <= set(calls)

    def fails(done, total, t):
        raise ZeroDivisionError(f"callback failed at {t} s")

    # The callback's own exception, not a panic or a wrapped copy, and the scenario still runs.
    with pytest.raises(ZeroDivisionError, match="callback failed at"):
        sc.run(progress=fails)
    assert sc.run().flows.num_rows == n


def test_a_rate_change_log_that_outgrows_memory_stops_the_run(monkeypatch):
    """n flows starting together on one link record n(n+1)/2 rate changes, which the up-front
    estimate (a row per usage entry) cannot foresee: the log is checked each time it grows."""
    n = 1000
    sc = fs.Scenario(line_topology(2, capacity_Bps=1.0))
    sc.add_flows(np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64), np.arange(1.0, n + 1))
    assert sc.run(record_rates=True).rate_changes.num_rows == n * (n + 1) // 2
    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(2 << 20))
    assert sc.run().flows.num_rows == n  # the run fits; its log does not
    with pytest.raises(fs.ScenarioTooLargeError) as e:
        sc.run(record_rates=True)
    # 65,536 rows and their table (44 bytes a row) are over 2 MiB; 32,768 were recorded (20
    # bytes a row) by the 33rd finish, at 33 x 1001 - 33 x 34 / 2 s.
    m = re.fullmatch(
        r"the rate-change log would not fit: growing it past its 32768 rows \(655360 bytes, recorded by "
        r"simulated time (\S+) s\) needs about 2.8 MiB of memory, but only 2.0 MiB is available; "
        r"run without record_rates \(.*\)", str(e.value))
    assert m, str(e.value)
    assert float(m.group(1)) == pytest.approx(33 * 1001 - 33 * 34 / 2, rel=1e-12)
    monkeypatch.delenv("FABRICSIM_AVAILABLE_BYTES")
    assert sc.run(record_rates=True).rate_changes.num_rows == n * (n + 1) // 2


@pytest.mark.parametrize("budget", ["2G", "-1", "1.5e9", ""])
def test_a_memory_budget_that_is_not_a_whole_number_of_bytes_is_refused(monkeypatch, budget):
    sc = fs.Scenario(line_topology(2, capacity_Bps=1.0))
    sc.add_flow(0, 1, 1.0)
    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", budget)
    with pytest.raises(fs.InvalidArgumentError,
                       match=re.escape(f'FABRICSIM_AVAILABLE_BYTES must be a whole number of bytes, got "{budget}"')):
        sc.run()


def test_a_memory_budget_that_is_not_text_is_refused_not_ignored(monkeypatch):
    sc = fs.Scenario(line_topology(2, capacity_Bps=1.0))
    sc.add_flow(0, 1, 1.0)
    monkeypatch.setitem(os.environb, b"FABRICSIM_AVAILABLE_BYTES", b"0\xff")
    with pytest.raises(fs.InvalidArgumentError, match="FABRICSIM_AVAILABLE_BYTES must be a whole number of bytes"):
        sc.run()


def test_a_refusal_under_a_small_budget_reads_in_bytes(monkeypatch):
    sc = fs.Scenario(line_topology(2, capacity_Bps=1.0))
    sc.add_flow(0, 1, 1.0)
    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", "100")
    with pytest.raises(fs.ScenarioTooLargeError, match=r"needs about \d+ bytes of memory, but only 100 bytes is available"):
        sc.run()


def test_huge_topology_is_refused_with_an_estimate():
    with pytest.raises(fs.ScenarioTooLargeError, match="GiB"):
        fs.Topology.from_arrays([0], [1], 1.0, 0.0, n_nodes=4_000_000_000)


def test_max_min_rates_parking_lot():
    # Flow 0 crosses links 0 and 1; flows 1 and 2 one link each; all capacities 1.
    rates = fs.max_min_rates([1.0, 1.0], [0, 0, 1, 2], [0, 1, 0, 1])
    assert rates.tolist() == [0.5, 0.5, 0.5]
    rates = fs.max_min_rates([1.0, 1.0], [0, 0, 1, 2], [0, 1, 0, 1], rate_cap_Bps=[0.25, np.inf, np.inf])
    assert rates.tolist() == [0.25, 0.75, 0.75]


def test_every_class_and_function_of_the_core_has_its_docstring():
    """A type alias put between Topology and its doc comment took the comment: help() on the
    core's Topology said nothing."""
    from fabricsim import _core

    names = [n for n in dir(_core) if not n.startswith("_")]
    undocumented = [n for n in names if callable(getattr(_core, n)) and not getattr(_core, n).__doc__]
    assert "Topology" in names and undocumented == []
    assert _core.Topology.__doc__.startswith("A directed graph of links")


def test_demo_runs_and_reports(capsys):
    assert cli.main(["demo", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "permutation" in out and "incast" in out and "busiest links" in out
    assert cli.main(["demo", "--spines", "0"]) == 2
    assert "at least 1 of spines" in capsys.readouterr().err
    assert cli.main(["demo", "--leaves", "1", "--hosts-per-leaf", "1"]) == 2
    assert "at least 2 hosts, got 1 leaves x 1 hosts per leaf" in capsys.readouterr().err


def test_demo_phase_table_groups_untagged_flows():
    # The phase table failed on a null tag: equal(tag, null) picks no row, and the empty
    # phase's first start (null) was refused by format_duration.
    sc = fs.Scenario(leaf_spine(1, 2, 1, 1e9, 0.0))
    grad = sc.add_flow("host0", "host1", 1e9, tag="grad")
    sc.add_flow("host1", "host0", 2e9)
    sc.add_flow("host1", "host0", 1e9, after=grad)
    header, *rows = cli._phase_table(sc.run().flows).splitlines()
    assert [row.split()[:2] for row in rows] == [["grad", "1"], ["(untagged)", "2"]]
    # 3e9 bytes from host1, whose 1e9 B/s link is busy from 0 to the end.
    assert fs.units.format_bytes(3e9) in rows[1]
    assert rows[1].split()[-4:-2] == fs.units.format_duration(3.0).split()  # last finish


def test_demo_phase_table_shows_a_phase_whose_flows_all_failed():
    # Their finish times and rates are null, which format_duration refused.
    sc = fs.Scenario(leaf_spine(1, 2, 1, 1e9, 0.0))
    sc.add_flow("host0", "host1", 1e9, tag="grad")
    sc.add_flow("host1", "host0", 1e9, tag="lost")
    sc.add_fault(at_s=0.0, nodes=["host1"])
    res = sc.run()
    assert res.flows["status"].to_pylist() == ["failed", "failed"]
    header, *rows = cli._phase_table(res.flows).splitlines()
    # They failed at 0 (start 0 s), moved nothing (0 GB/s, the unit of every rate the CLI prints) and have
    # no finish.
    rest = [*fs.units.format_bytes(1e9).split(), "0", "s", "-", "0.00", "GB/s"]
    assert [row.split() for row in rows] == [["grad", "1", *rest], ["lost", "1", *rest]]


def test_output_piped_into_a_reader_that_stops_early_ends_quietly():
    """`fabricsim demo | head -0`: no BrokenPipeError traceback, the shell's code for SIGPIPE."""
    proc = subprocess.Popen([sys.executable, "-m", "fabricsim.cli", "demo"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the child can start writing, so every write fails
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and err == "", err


def test_demo_is_deterministic_and_conserves_bytes():
    a = cli.demo_scenario(seed=5).run()
    b = cli.demo_scenario(seed=5).run()
    assert a.flows.equals(b.flows) and a.links.equals(b.links)
    # Every byte of every flow crosses each link of its route once.
    sc = cli.demo_scenario(seed=5)
    carried = np.zeros(sc.topology.n_links)
    sizes = a.flows["bytes"].to_numpy()
    for i, fid in enumerate(a.flows["flow_id"].to_pylist()):
        for link in sc.route_of(fid):
            carried[link] += sizes[i]
    np.testing.assert_allclose(a.links["bytes_carried"].to_numpy(), carried, rtol=1e-12)


def test_demo_incast_waits_on_one_barrier_not_on_every_permutation_flow(monkeypatch):
    """Each incast flow waited on every permutation flow itself: n_hosts^2 / 4 dependencies,
    2.5 billion at 100,000 hosts (killed at 24 GB after 8 minutes, its memory estimate saying
    73 MB). They now wait on one barrier, and are still ready as the permutation ends."""
    n_after = []
    add_flow = fs.Scenario.add_flow

    def counting(self, *args, after=(), **kwargs):
        n_after.append(np.size(after))
        return add_flow(self, *args, after=after, **kwargs)

    monkeypatch.setattr(fs.Scenario, "add_flow", counting)
    res = cli.demo_scenario(n_leaves=4, hosts_per_leaf=8, n_spines=2, seed=3).run()
    assert n_after == [1] * 40
    flows = res.flows.to_pydict()
    ends = [f for f, tag in zip(flows["finish_s"], flows["tag"]) if tag == "permutation"]
    ready = {s for s, tag in zip(flows["ready_s"], flows["tag"]) if tag == "incast"}
    assert len(ends) == 32 and ready == {max(ends)}


def test_incremental_rates_match_full_solves_on_a_busy_fabric():
    # Every instant of a permutation-plus-incast demo step, checked against a from-scratch
    # max-min solve of all transferring flows.
    res = cli.demo_scenario(n_leaves=4, hosts_per_leaf=8, n_spines=2, seed=11).run(verify_rates=True)
    assert res.flows.num_rows == 40
    topo = leaf_spine(4, 4, 2, 1e9, 0.0)
    sc = fs.Scenario(topo, seed=2)
    rng = np.random.default_rng(2)
    src = rng.integers(0, 16, 500)
    dst = (src + rng.integers(1, 16, 500)) % 16
    hosts = np.array([f"host{i}" for i in range(16)])
    sc.add_flows(hosts[src], hosts[dst], rng.uniform(1e6, 1e8, 500), start_s=rng.uniform(0, 0.05, 500))
    assert sc.run(verify_rates=True).flows.num_rows == 500


def test_add_flows_with_explicit_routes():
    topo = line_topology(4)  # links 0,1,2 go up the line; 3,4,5 come back
    sc = fs.Scenario(topo)
    ids = sc.add_flows([0, 3], [2, 1], [10.0, 20.0], routes=[[0, 1], [5, 4]])
    assert [sc.route_of(i) for i in ids] == [[0, 1], [5, 4]]
    ids = sc.add_flows([0], [3], 5.0, routes=(np.array([0, 3]), np.array([0, 1, 2])))
    assert sc.route_of(ids[0]) == [0, 1, 2]
    with pytest.raises(fs.InvalidArgumentError, match="element 1: route is not a path"):
        sc.add_flows([0, 0], [1, 2], 1.0, routes=[[0], [0, 2]])
    with pytest.raises(fs.UnknownLinkError, match="element 0: link 99"):
        sc.add_flows([0], [1], 1.0, routes=[[99]])
    with pytest.raises(fs.InvalidArgumentError, match="route_offsets must"):
        sc.add_flows([0], [1], 1.0, routes=(np.array([0, 2]), np.array([0])))
    assert sc.n_activities == 3, "failed batches add nothing"


def test_route_forms_are_unambiguous():
    # A tuple of two is compressed rows, per-flow routes are a list: ([0, 1], [0, 1]) for two
    # flows was read as offsets [0, 1] and failed with a message about route_offsets.
    topo = line_topology(4)
    sc = fs.Scenario(topo)
    with pytest.raises(fs.InvalidArgumentError, match=r"tuple of two, read as compressed rows.*"
                       r"not 3 integers from 0 for 2 flows; give one list of link ids per flow"):
        sc.add_flows([0, 0], [2, 2], 1.0, routes=([0, 1], [0, 1]))
    with pytest.raises(fs.InvalidArgumentError, match="routes has 1 routes for 2 flows; give one list"):
        sc.add_flows([0, 0], [2, 2], 1.0, routes=[[0, 1]])
    with pytest.raises(fs.InvalidArgumentError, match="routes must be a sequence, got int 5"):
        sc.add_flows([0], [2], 1.0, routes=5)
    assert sc.n_activities == 0
    ids = sc.add_flows([0, 0], [2, 2], 1.0, routes=[(0, 1), np.array([0, 1])])   # per flow
    ids = np.concatenate([ids, sc.add_flows([0], [2], 1.0, routes=([0, 2], [0, 1]))])  # rows, as lists
    assert [sc.route_of(i) for i in ids] == [[0, 1]] * 3


def test_core_stubs_list_what_the_module_has():
    # _core.pyi lagged behind the bindings (no route_many, add_engine, build_*, ...): every
    # function, method and property of the module, with its parameters and which have
    # defaults, must be in the stubs, and nothing else.
    from fabricsim import _core

    def stub_params(f):
        a = f.args
        positional = a.posonlyargs + a.args
        defaults = [False] * (len(positional) - len(a.defaults)) + [True] * len(a.defaults)
        pairs = list(zip(positional, defaults)) + [(k, d is not None) for k, d in zip(a.kwonlyargs, a.kw_defaults)]
        return [(arg.arg, has) for arg, has in pairs if arg.arg not in ("self", "cls")]

    def runtime_params(obj):
        return [(p.name, p.default is not p.empty) for p in inspect.signature(obj).parameters.values()
                if p.name != "self"]

    stub = {}
    for node in ast.parse(Path(_core.__file__).with_name("_core.pyi").read_text()).body:
        if isinstance(node, ast.FunctionDef):
            stub[node.name] = stub_params(node)
        elif isinstance(node, ast.ClassDef) and node.name in _core.__all__:
            for f in node.body:
                if isinstance(f, ast.FunctionDef):
                    prop = any(getattr(d, "id", None) == "property" for d in f.decorator_list)
                    stub[f"{node.name}.{f.name}"] = "property" if prop else stub_params(f)
    runtime = {}
    for name in _core.__all__:
        obj = getattr(_core, name)
        if not isinstance(obj, type):
            if callable(obj):
                runtime[name] = runtime_params(obj)
            continue
        if obj.__text_signature__ is not None:  # a class Python can construct (PyO3's #[new] is __new__)
            runtime[f"{name}.__new__"] = runtime_params(obj)
        for attr, value in vars(obj).items():
            if not attr.startswith("_"):
                prop = type(value).__name__ == "getset_descriptor"
                runtime[f"{name}.{attr}"] = "property" if prop else runtime_params(getattr(obj, attr))
    assert stub == runtime


def test_finish_beyond_double_precision_is_an_error_not_inf():
    topo = fs.Topology.from_arrays([0], [1], 1e-300, 0.0)
    sc = fs.Scenario(topo)
    sc.add_flow(0, 1, 1e300)
    with pytest.raises(fs.InvalidArgumentError, match="double precision"):
        sc.run()


def test_ctrl_c_while_a_collective_is_built_leaves_the_scenario_as_it_was(monkeypatch):
    # Only an Exception undid a partly built collective: a KeyboardInterrupt left its first
    # delay and flows in the scenario, run without a row in the collectives table.
    from fabricsim.collectives.construction import Builder

    fabric = fs.hgx_h100()
    sc = fs.Scenario(fabric)
    sc.add_collective("all_reduce", fabric.gpus, "1GiB", algorithm="ring")
    before = sc.run()

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Builder, "_coupled", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sc.add_collective("all_reduce", fabric.gpus, "1GiB", algorithm="ring")
    monkeypatch.undo()
    assert sc.n_activities == before.flows.num_rows + before.delays.num_rows
    after = sc.run()
    for name in ("flows", "delays", "links", "collectives"):
        assert getattr(after, name).equals(getattr(before, name)), name
    assert after.summary.bytes_moved == before.summary.bytes_moved


def test_busiest_links_break_ties_by_link_id():
    # Eight equally busy links (one flow each way on a line): which five show was left to
    # the selection's internal order (3, 4, 1, 0, 2), not the links' ids.
    sc = fs.Scenario(line_topology(5))
    for a in range(4):
        sc.add_flow(a, a + 1, 1000.0)
        sc.add_flow(a + 1, a, 1000.0)
    top = sc.run().summary.busiest_links
    assert top["link_id"].to_pylist() == [0, 1, 2, 3, 4]
    assert top["mean_utilization"].to_pylist() == [1.0] * 5


def test_changing_a_scenario_while_it_runs_is_refused_by_name():
    # From a progress callback the core is borrowed by the run: PyO3 refused with a bare
    # "RuntimeError: Already borrowed".
    sc = fs.Scenario(line_topology(3))
    for i in range(200):
        sc.add_flow(0, 2, 1000.0 + i)  # 200 instants: the callback is called every 64
    refused = []

    def progress(n_done, n_total, time_s):
        for name, call in [("add_flow", lambda: sc.add_flow(0, 1, 1.0)), ("add_delay", lambda: sc.add_delay(1.0)),
                           ("add_dependency", lambda: sc.add_dependency(0, 1)),
                           ("add_fault", lambda: sc.add_fault(at_s=1.0, links=[0]))]:
            with pytest.raises(fs.ScenarioRunningError, match=rf"^{name} was called while the scenario runs "):
                call()
        refused.append(n_done)

    res = sc.run(progress=progress)
    assert refused and res.flows.num_rows == 200 and sc.n_activities == 200
    assert isinstance(fs.ScenarioRunningError("x"), RuntimeError)
    assert sc.add_flow(0, 1, 1.0) == 200  # allowed again once the run returns


def test_a_run_started_by_another_thread_waits_for_a_change_under_way(monkeypatch):
    # The check that no run is under way came before the core's calls: a run another thread
    # started between them made the collective's next call fail with PyO3's bare "Already
    # borrowed", and the undo too, leaving its first delay in the scenario without a row.
    import threading
    from fabricsim.collectives import construction as collectives

    sc = fs.Scenario(line_topology(3))
    for i in range(200):
        sc.add_flow(0, 2, 1000.0 + i)
    building, running = threading.Event(), threading.Event()
    build = collectives.Builder._build

    def slow_build(self, *args, **kwargs):
        building.set()
        running.wait(1.0)  # the other thread's run, if it could start now
        return build(self, *args, **kwargs)

    monkeypatch.setattr(collectives.Builder, "_build", slow_build)
    results = []

    def progress(*_):
        running.set()
        time.sleep(0.2)

    def run_when_building():
        building.wait(5.0)
        results.append(sc.run(progress=progress))

    other = threading.Thread(target=run_when_building)
    other.start()
    try:
        end = sc.add_collective("all_reduce", [0, 1, 2], 1e6, algorithm="ring")
    finally:
        other.join()
    assert len(results) == 1 and results[0].collectives["collective_id"].to_pylist() == [end]
    assert sc.run().collectives.num_rows == 1


def test_all_lists_the_exception_tree_and_every_name_resolves():
    # A computed __all__ (a list + exceptions.__all__) hid every re-export from mypy --strict
    # users ("does not explicitly export attribute"): it is a literal that names them all.
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(fs))
    literal = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                   and any(getattr(t, "id", None) == "__all__" for t in node.targets))
    assert isinstance(literal, ast.List)
    assert set(fs.exceptions.__all__) <= set(fs.__all__)
    assert all(hasattr(fs, name) for name in fs.__all__)


def test_the_cli_help_is_plain_text_and_every_option_says_what_it_does(capsys):
    # The description printed reST markup ("The ``fabricsim`` command line.") and
    # demo's options showed no help or defaults.
    from fabricsim.cli import main

    for argv in (["--help"], ["demo", "--help"], ["nccl-tests", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        assert "``" not in out and ":class:" not in out, out
        if argv[0] != "--help":
            lines = out.splitlines()
            # An option with no help: its line holds only the flag (and metavar), and the next
            # line is not its help, wrapped below it, but another option or the end.
            bare = [line for i, line in enumerate(lines) if line.startswith("  -") and not line.startswith("   ")
                    and "  " not in line.strip()
                    and (i + 1 == len(lines) or not lines[i + 1].startswith(" " * 8))]
            assert not bare, bare
