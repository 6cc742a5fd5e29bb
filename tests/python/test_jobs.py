"""Jobs (tenants) on a shared fabric and weighted max-min sharing: placement, the
jobs table against closed forms, the alone runs, isolation policies, and bad input refused
whole."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pyarrow.parquet as pq
import pytest

import fabricsim as fs
from fabricsim.exceptions import InvalidArgumentError
from fabricsim.tenancy import alone_scenario
from fabricsim.workloads.jobs import JobSpec, compare_isolation
from fabricsim.workloads.training import Parallelism, TrainingStep

GiB = 2**30


def one_link(capacity=100.0):
    """Nodes 0 -> 1 over one link of ``capacity`` B/s, no latency."""
    return fs.Topology.from_arrays(np.array([0]), np.array([1]), np.array([capacity]), np.array([0.0]))


def pcie():
    """A PCIe server without latency: GPUs 0 and 1 sit behind one PCIe switch, 2 and 3 behind
    the next, every link 64 GB/s; 0 -> 2 and 1 -> 3 share the switch-to-CPU link and the
    CPU-to-switch link (ids 24 and 27)."""
    return fs.pcie_server(latency_s=0)


# ---------------------------------------------------------------------- weighted sharing


def test_weights_divide_a_bottleneck_in_their_ratio():
    # 100 B/s shared 1:3: B (150 B at 75 B/s) ends at 2 s with A half done (50 B at 25 B/s);
    # A then has the link alone: 50 B more at 100 B/s, ending at 2.5 s.
    sc = fs.Scenario(one_link())
    a = sc.add_flow(0, 1, 100)
    b = sc.add_flow(0, 1, 150, weight=3.0)
    fin = dict(zip(*(sc.run().flows[c].to_pylist() for c in ("flow_id", "finish_s"))))
    assert fin[b] == pytest.approx(2.0, rel=1e-12)
    assert fin[a] == pytest.approx(2.5, rel=1e-12)


def test_a_collective_and_add_flows_take_the_weight_of_every_flow_they_make():
    # Two equal batches of flows over one link: the weight-2 batch finishes first, at
    # 2 x 100 B / (2/3 x 100 B/s) = 3 s, where equal weights would finish both at 4 s.
    sc = fs.Scenario(one_link())
    heavy = sc.add_flows([0, 0], [1, 1], 100, weight=2.0)
    light = sc.add_flows([0, 0], [1, 1], 100)
    fin = dict(zip(*(sc.run().flows[c].to_pylist() for c in ("flow_id", "finish_s"))))
    assert [fin[int(i)] for i in heavy] == pytest.approx([3.0, 3.0], rel=1e-12)
    assert [fin[int(i)] for i in light] == pytest.approx([4.0, 4.0], rel=1e-12)


@pytest.mark.parametrize("weight", [0, -1.0, math.nan, math.inf, 2e6, "2", True, None])
def test_a_bad_weight_is_refused_and_adds_nothing(weight):
    sc = fs.Scenario(one_link())
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    sc2 = fs.Scenario(fabric)
    for add in (lambda: sc.add_flow(0, 1, 10, weight=weight),
                lambda: sc.add_flows([0], [1], 10, weight=weight),
                lambda: sc2.add_collective("all_reduce", range(16), "1MiB", weight=weight)):
        with pytest.raises(InvalidArgumentError, match=r"weight must be a number within \[1e-06, 1e\+06\], got "):
            add()
    assert sc.n_activities == 0 and sc2.n_activities == 0


# ---------------------------------------------------------------------- placement


def test_packed_takes_whole_free_domains_first_and_spread_one_per_domain():
    sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"))
    a = sc.add_job("a", n_gpus=12)                       # domain 0 and half of domain 1
    b = sc.add_job("b", n_gpus=8)                        # a whole free domain: 2, not 1's rest
    c = sc.add_job("c", n_gpus=6, placement="spread")    # 1's rest and 3 in turn
    assert a.gpus.tolist() == list(range(12))
    assert b.gpus.tolist() == list(range(16, 24))
    assert c.gpus.tolist() == [12, 24, 13, 25, 14, 26]
    assert a.placement == "packed" and c.placement == "spread"


def test_random_draws_whole_domains_with_the_seed():
    def placed(seed):
        sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2"), seed=seed)
        return [sc.add_job(n, n_gpus=32, placement="random").gpus.tolist() for n in "ab"]

    a, b = placed(1)
    assert placed(1) == [a, b]
    for gpus in (a, b):
        domains = sorted({g // 8 for g in gpus})
        assert len(domains) == 4 and sorted(gpus) == [d * 8 + k for d in domains for k in range(8)]
    assert not set(a) & set(b)
    assert any(placed(s) != [a, b] for s in range(2, 6))  # the seed draws


def test_bad_jobs_are_refused_naming_the_value_and_nothing_is_added():
    sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
    sc.add_job("a", gpus=[0, 1, 2, 3])
    cases = [
        (dict(name="b", gpus=[4, 2]), "GPU 2 is owned by job 'a'"),
        (dict(name="b", gpus=[4, 4]), "GPU 4 is listed twice"),
        (dict(name="b", gpus=[99]), "gpus"),
        (dict(name="a", n_gpus=1), "a job named 'a' is already"),
        (dict(name="", n_gpus=1), "non-empty string"),
        (dict(name="b", n_gpus=13), "asks for 13 GPUs, but 12 of the fabric's 16 are free"),
        (dict(name="b", n_gpus=0), "n_gpus"),
        (dict(name="b", n_gpus=2, placement="tight"), "placement must be one of packed, spread, random"),
        (dict(name="b", n_gpus=2, weight=0.0), r"weight must be a number within .* got 0.0"),
        (dict(name="b", n_gpus=2, weight=math.nan), "got nan"),
        (dict(name="b"), "give n_gpus"),
    ]
    for kw, message in cases:
        name = kw.pop("name")
        with pytest.raises(InvalidArgumentError, match=message):
            sc.add_job(name, **kw)
    assert list(sc.jobs) == ["a"] and sc.n_activities == 0
    tp = fs.Topology.from_arrays(np.array([0]), np.array([1]), np.array([1.0]), np.array([0.0]))
    with pytest.raises(InvalidArgumentError, match="jobs own GPUs"):
        fs.Scenario(tp).add_job("x", n_gpus=1)


def test_a_job_works_in_its_own_ranks_and_only_after_its_own_activities():
    sc = fs.Scenario(pcie())
    a = sc.add_job("a", gpus=[0, 2])
    b = sc.add_job("b", gpus=[1, 3])
    fa = a.add_flow(0, 1, "1MiB")
    assert sc.route_of(fa)[0] == 0 and sc.route_of(fa)[-1] == 5  # GPU 0 -> GPU 2
    with pytest.raises(InvalidArgumentError, match=r"src_rank must be .* got 2"):
        b.add_flow(2, 0, "1MiB")
    with pytest.raises(InvalidArgumentError, match=f"after names activity {fa}, which is not the job's own"):
        b.add_flow(0, 1, "1MiB", after=fa)
    with pytest.raises(InvalidArgumentError, match="weight=2.0 given to one of its activities"):
        b.add_flow(0, 1, "1MiB", weight=2.0)
    assert sc.n_activities == 1 and a.activity_ids().tolist() == [fa] and b.activity_ids().size == 0
    assert a.add_flow(1, 0, "1MiB", after=fa) == 1  # its own: fine


# ---------------------------------------------------------------------- the jobs table


def test_jobs_table_holds_the_closed_form_of_two_weighted_jobs_on_one_link():
    # Each job sends S from its rank 0 to rank 1 across the shared switch-CPU links (C =
    # 64 GB/s, the bottleneck of both routes): alone, S / C each. Shared 1:3, b runs at 3C/4
    # and ends at 4/3 S/C, a has moved S/3 by then and the rest at C: 2 S/C.
    sc = fs.Scenario(pcie())
    a = sc.add_job("a", gpus=[0, 2])
    b = sc.add_job("b", gpus=[1, 3], weight=3.0)
    a.add_flow(0, 1, GiB)
    b.add_flow(0, 1, GiB)
    res = sc.run()
    rows = {r["job"]: r for r in res.jobs.to_pylist()}
    alone = GiB / 64e9
    assert rows["a"]["alone_time_s"] == pytest.approx(alone, rel=1e-12)
    assert rows["b"]["alone_time_s"] == pytest.approx(alone, rel=1e-12)
    assert rows["a"]["time_s"] == pytest.approx(2 * alone, rel=1e-12)
    assert rows["b"]["time_s"] == pytest.approx(4 / 3 * alone, rel=1e-12)
    assert rows["a"]["slowdown"] == pytest.approx(2.0, rel=1e-12)
    assert rows["b"]["slowdown"] == pytest.approx(4 / 3, rel=1e-12)
    assert rows["b"]["weight"] == 3.0 and rows["a"]["n_gpus"] == 2
    assert rows["a"]["n_links_met"] == rows["b"]["n_links_met"] == 2
    assert sorted(res.job_links["link_id"].to_pylist()) == [24, 27]
    assert res.job_links["jobs"].to_pylist() == [["a", "b"], ["a", "b"]]
    assert res.job_links["peak_utilization"].to_pylist() == pytest.approx([1.0, 1.0])


def test_jobs_that_share_no_link_have_no_slowdown_and_met_nowhere():
    sc = fs.Scenario(pcie())
    a = sc.add_job("a", gpus=[0, 1])  # behind one PCIe switch
    b = sc.add_job("b", gpus=[2, 3])  # behind the other
    a.add_flow(0, 1, GiB)
    b.add_flow(0, 1, GiB)
    res = sc.run()
    assert res.jobs["slowdown"].to_pylist() == [1.0, 1.0]
    assert res.jobs["n_links_met"].to_pylist() == [0, 0]
    assert res.job_links.num_rows == 0


def test_alone_keeps_ids_and_faults_and_drops_the_other_jobs_and_loose_traffic():
    sc = fs.Scenario(pcie())
    a = sc.add_job("a", gpus=[0, 2])
    b = sc.add_job("b", gpus=[1, 3])
    loose = sc.add_flow(4, 6, GiB)  # belongs to no job: background, not in any job's alone run
    fb = b.add_flow(0, 1, GiB)
    fa = a.add_flow(0, 1, GiB)
    sc.add_fault(at_s=0.001, links=[0], factor=0.5)  # GPU 0's link halves: a's, alone too
    alone = alone_scenario(sc, a)
    assert alone.n_activities == sc.n_activities
    flows = alone.run().flows
    assert flows["flow_id"].to_pylist() == [fa]
    moved = 0.001 * 64e9
    assert flows["finish_s"][0].as_py() == pytest.approx(0.001 + (GiB - moved) / 32e9, rel=1e-12)
    assert loose < fb < fa


def test_a_training_step_in_a_job_takes_what_the_same_step_alone_takes():
    fabric = fs.cluster(domain="hgx-h100", n_domains=8, scale_out="quantum-2")
    par = Parallelism(tp=8, pp=2, dp=2, global_batch_size=8)
    own = TrainingStep("llama3-8b", par, fabric).run().step_s
    sc = fs.Scenario(fabric)
    a = sc.add_job("a", n_gpus=32)
    b = sc.add_job("b", n_gpus=32)
    first = a.add_training_step("llama3-8b", par)
    a.add_training_step("llama3-8b", par, after=first)
    b.add_training_step("llama3-8b", par)
    rows = {r["job"]: r for r in sc.run().jobs.to_pylist()}
    assert rows["a"]["n_steps"] == 2 and rows["b"]["n_steps"] == 1
    # a sits where the step alone sits (GPUs 0-31); b on 32-63, the same shape of fabric
    for job in ("a", "b"):
        assert rows[job]["alone_step_s"] == pytest.approx(own, rel=1e-9)
    assert rows["a"]["time_s"] == pytest.approx(2 * rows["a"]["step_s"], rel=1e-9)
    with pytest.raises(InvalidArgumentError, match="job 'b' has 32 GPUs; the step needs .* = 64"):
        b.add_training_step("llama3-8b", Parallelism(tp=8, pp=2, dp=4, global_batch_size=8))


def test_a_scenario_with_jobs_pickles_to_the_same_tables(tmp_path):
    sc = fs.Scenario(pcie())
    a = sc.add_job("a", gpus=[0, 2])
    b = sc.add_job("b", gpus=[1, 3], weight=2.0)
    a.add_flow(0, 1, GiB)
    b.add_collective("all_reduce", None, "64MiB")
    copy = pickle.loads(pickle.dumps(sc))
    assert list(copy.jobs) == ["a", "b"] and copy.jobs["b"].weight == 2.0
    assert copy.run().jobs.equals(sc.run().jobs)
    assert sc.run().jobs["step_s"].null_count == 2  # no training steps: null, not NaN
    written = sc.run().to_parquet(tmp_path)
    assert {p.rsplit("/", 1)[-1] for p in written} >= {"jobs.parquet", "job_links.parquet"}
    assert pq.read_table(tmp_path / "jobs.parquet").num_rows == 2


# ---------------------------------------------------------------------- isolation policies


def test_compare_isolation_runs_each_policy_and_reserves_by_weight():
    fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2", tiers=2, oversubscription=2)
    specs = [JobSpec("a", 16, lambda j: j.add_collective("all_to_all", None, "256MiB")),
             JobSpec("b", 16, lambda j: j.add_collective("all_to_all", None, "256MiB"))]
    t = compare_isolation(fabric, specs, ["shared", "rails", "reserved:0.75"])
    assert t.column_names[0] == "policy" and t.num_rows == 6
    rows = {(r["policy"], r["job"]): r for r in t.to_pylist()}
    assert rows[("reserved:0.75", "a")]["weight"] == 0.75 and rows[("reserved:0.75", "b")]["weight"] == 0.25
    assert rows[("rails", "a")]["placement"] == "given"
    # a: GPUs 0-3 of each node (rails 0-3), b: 4-7: no rail, and here no leaf, in common
    assert rows[("rails", "a")]["n_links_met"] == 0 and rows[("rails", "b")]["slowdown"] == 1.0
    for r in rows.values():
        assert r["slowdown"] >= 1.0 - 1e-12 and r["status"] == "done"
    # one baseline per job (alone, packed, whole fabric) across policies
    for job in "ab":
        assert len({rows[(p, job)]["baseline_s"] for p in ("shared", "rails", "reserved:0.75")}) == 1
        for p in ("shared", "rails", "reserved:0.75"):
            r = rows[(p, job)]
            assert r["vs_baseline"] == pytest.approx(r["time_s"] / r["baseline_s"], rel=1e-12)
    # the guaranteed job slows no more than it does with equal shares
    assert rows[("reserved:0.75", "a")]["slowdown"] <= rows[("shared", "a")]["slowdown"] + 1e-12
    with pytest.raises(InvalidArgumentError, match="reserved fraction must be a number in"):
        compare_isolation(fabric, specs, ["reserved:1.5"])
    with pytest.raises(InvalidArgumentError, match="unknown isolation policy 'planes2'"):
        compare_isolation(fabric, specs, ["planes2"])


def test_planes_give_each_job_its_block_of_planes():
    # Two jobs on a 2-plane fabric: each alone on one plane, half its NIC bandwidth, so an
    # all-to-all whose time is set by injection takes what it takes on a 1-plane build.
    fabric = fs.cluster(domain="hgx-b300", n_domains=4, scale_out="quantum-x800", planes=2)
    specs = [JobSpec(n, 16, lambda j: j.add_collective("all_to_all", None, "256MiB")) for n in "ab"]
    rows = compare_isolation(fabric, specs, ["planes"]).to_pylist()
    from fabricsim.fabrics.fabric import _unpickled_fabric

    parts = dict(fabric._parts)
    parts["scale_out"] = dict(parts["scale_out"], planes=1)
    for r, gpus in zip(rows, (range(16), range(16, 32))):
        one_plane = fs.Scenario(_unpickled_fabric(parts))
        one_plane.add_collective("all_to_all", list(gpus), "256MiB")
        whole = fs.Scenario(fabric)
        whole.add_collective("all_to_all", list(gpus), "256MiB")
        assert r["policy"] == "planes" and r["n_links_met"] == 0
        assert r["time_s"] == pytest.approx(one_plane.run().makespan_s, rel=1e-12)
        assert r["alone_time_s"] == pytest.approx(whole.run().makespan_s, rel=1e-12)
        assert r["slowdown"] > 1.5  # half the injection bandwidth
    with pytest.raises(InvalidArgumentError, match="policy 'planes': 2 jobs need a fabric whose scale-out planes"):
        compare_isolation(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"), specs, ["planes"])


def test_a_weight_moves_no_other_flow_in_fast_mode():
    # X alone on its own link; Y and Z share another. X's weight changes nothing for Z, in
    # the fast mode too (its release time is weighted by flows' own rates, not share levels).
    t = fs.Topology.from_arrays(np.array([0, 2]), np.array([1, 3]), np.array([100.0, 100.0]), np.array([0.0, 0.0]))

    def z_finish(weight):
        sc = fs.Scenario(t)
        sc.add_flow(0, 1, 350, weight=weight)
        sc.add_flow(2, 3, 100)
        z = sc.add_flow(2, 3, 300)
        return sc.run(tolerance=0.05).flows["finish_s"][z].as_py()

    assert z_finish(100.0) == z_finish(1.0)


def test_alone_runs_keep_a_jobs_own_dependencies_and_cross_job_ones_are_refused():
    sc = fs.Scenario(pcie())
    a = sc.add_job("a", gpus=[0, 2])
    b = sc.add_job("b", gpus=[1, 3])
    x, y = a.add_delay("1ms"), a.add_delay("1ms")
    a.add_dependency(y, x)
    u, v = b.add_delay("1ms"), b.add_delay("1ms")
    sc.add_dependency(v, u)  # through the scenario: both b's, so fine
    loose = sc.add_delay("5ms")
    for first, second, message in ((y, u, "activity .* belongs to job 'a' and activity .* to job 'b'"),
                                   (y, loose, "to no job")):
        with pytest.raises(InvalidArgumentError, match=message):
            sc.add_dependency(first, second)
    sc.add_dependency(loose, y)  # other work may wait for a job's (a checkpoint after a step)
    with pytest.raises(InvalidArgumentError, match=f"job 'a': after_id {u} is not the job's own activity"):
        a.add_dependency(y, u)
    rows = {r["job"]: r for r in sc.run().jobs.to_pylist()}
    for job in "ab":
        assert rows[job]["time_s"] == pytest.approx(2e-3) and rows[job]["alone_time_s"] == pytest.approx(2e-3)
        assert rows[job]["slowdown"] == pytest.approx(1.0)


def test_a_job_call_that_fails_partway_leaves_nothing(monkeypatch):
    from fabricsim import jobs as jobs_module

    sc = fs.Scenario(pcie())
    a = sc.add_job("a", gpus=[0, 2])
    a.add_flow(0, 1, "1MiB")
    before = (sc.n_activities, list(a._spans), len(sc._calls))
    real = jobs_module.Job._add_delay

    def half(self, *args, **kwargs):  # adds its delay, then is interrupted
        real(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs_module.Job, "_add_delay", half)
    with pytest.raises(KeyboardInterrupt):
        a.add_delay("1ms")
    with pytest.raises(KeyboardInterrupt):
        sc.add_job("b", gpus=[1, 3]).add_delay("1ms")
    assert (sc.n_activities, list(a._spans), len(sc._calls) - 1) == before  # the second add_job stays
    monkeypatch.undo()
    copy = pickle.loads(pickle.dumps(sc))
    assert copy.run().jobs.equals(sc.run().jobs)


def test_an_interrupted_change_leaves_no_fault_and_no_communicator(monkeypatch):
    # A fault with a repair is two core calls; a collective numbers its communicator in the
    # collectives table. Interrupted after the first / halfway, neither stays.
    sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
    sc.add_collective("all_reduce", range(8), "1MiB")
    core = sc._core
    calls = []

    class Interrupting:
        def __getattr__(self, name):
            return getattr(core, name)

        def add_fault(self, *args):
            calls.append(args)
            core.add_fault(*args)
            if len(calls) == 1:
                raise KeyboardInterrupt

    sc._core = Interrupting()
    with pytest.raises(KeyboardInterrupt):
        sc.add_fault(at_s="1ms", links=[0], factor=0.5, until_s="2ms")
    sc._core = core
    assert sc._core.n_faults == 0
    from fabricsim.collectives import construction

    real = construction.Builder._build

    def halfway(self, *args, **kwargs):
        real(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(construction.Builder, "_build", halfway)
    with pytest.raises(KeyboardInterrupt):
        sc.add_collective("all_reduce", range(8, 16), "1MiB")
    monkeypatch.undo()
    sc.add_collective("all_gather", range(4), "1MiB")
    assert sc.run().collectives["communicator"].to_pylist() == [0, 1]
    copy = pickle.loads(pickle.dumps(sc))
    assert copy.run().collectives.equals(sc.run().collectives)


def test_compare_isolation_checks_everything_before_running_anything(monkeypatch):
    fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    ran = []
    specs = [JobSpec(n, 16, lambda j: ran.append(j.add_collective("all_reduce", None, "1MiB"))) for n in "ab"]
    for policies, message in ((["shared", "spread", "bogus"], "unknown isolation policy 'bogus'"),
                              (["shared", "reserved:2"], "reserved fraction must be a number in"),
                              (["shared", "planes"], "policy 'planes': 2 jobs need .* got 1 planes"),
                              ("shared", "policies must be a non-empty sequence of policy names .* got 'shared'")):
        with pytest.raises(InvalidArgumentError, match=message):
            compare_isolation(fabric, specs, policies)
    with pytest.raises(InvalidArgumentError, match="non-empty sequence of policy names"):
        compare_isolation(fabric, specs, [])

    with pytest.raises(InvalidArgumentError, match="job names must differ"):
        compare_isolation(fabric, specs[:1] * 2, ["shared"])
    with pytest.raises(InvalidArgumentError, match="asks for 20 GPUs, but 16 of the fabric's 32 are free"):
        compare_isolation(fabric, [specs[0], JobSpec("b", 20, specs[0].workload)], ["shared"])
    assert ran == []

    def failing(job):
        raise RuntimeError("bad workload")

    runs = []
    real_run = fs.Scenario.run
    monkeypatch.setattr(fs.Scenario, "run", lambda self, *a, **k: runs.append(self) or real_run(self, *a, **k))
    with pytest.raises(RuntimeError, match="bad workload"):
        compare_isolation(fabric, [specs[0], JobSpec("b", 16, failing)], ["shared"])
    assert runs == []  # the first job's scenario was built, but nothing ran
