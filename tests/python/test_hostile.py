"""A hostile user over the public API: every public function called with its arguments, one or
more of them replaced by what a hostile user passes (wrong types, NaN, infinities, negative,
huge, empty, other scripts' digits, nested containers, iterators).

Each call either returns or raises an error of fabricsim's tree (``InvalidArgumentError``,
``ScenarioTooLargeError``, ...) with a message; any other exception (``TypeError``,
``OverflowError``, ``MemoryError``, ``KeyError``, numpy's ``ValueError``) fails the test, and
so does a call that takes longer than :data:`_HANG_S`. Each function runs as given first (its
arguments reach its body), and a share of the spoiled calls must be refused (a hostile value
reached a check), so a case that no longer reaches the function fails instead of passing
without checking anything. ``pytest -s`` prints each function's counts of calls refused and
run (a hostile value the function takes, such as a seed of 0)."""

from __future__ import annotations

import os
import pickle
import signal
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

import fabricsim as fs
from fabricsim import reliability, serving
from fabricsim.workloads import training
from hostile import RAN, anything, assert_reach, explore, mostly, only_fabricsim_errors, refused
from test_nccl_logs import ALL_REDUCE_8

# The longest a single call may take: the slowest case here runs in about 0.2 s unspoiled.
_HANG_S = 20


@contextmanager
def _no_hang(what: str):
    def hung(*_):
        raise AssertionError(f"{what} ran for more than {_HANG_S} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(_HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


_H100 = fs.hgx_h100()
_CLUSTER = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
_CPO = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-x-photonics")
_NAMED = fs.Topology.from_arrays([0, 1], [1, 2], "1GB/s", node_names=["a", "b", "c"])
_LINE = fs.Topology.from_arrays([0, 1], [1, 0], 1e9)


def _scenario(topology=_H100):
    return fs.Scenario(topology)


def _result():
    sc = fs.Scenario(_LINE)
    sc.add_flow(0, 1, 1e6)
    return sc.run()


def _toml(tmp: str, generator: object, op: object, tolerance: object) -> str:
    path = os.path.join(tmp, "study.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"[fabric]\ngenerator = {_toml_value(generator)}\n\n[[workload]]\ntype = \"collective\"\n"
                f"op = {_toml_value(op)}\nsize_bytes = \"1MiB\"\n\n[run]\ntolerance = {_toml_value(tolerance)}\n")
    return path


def _toml_value(v: object) -> str:
    """A hostile value as TOML writes it (what TOML cannot hold becomes a string of it)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int) and -(2**63) <= v < 2**63:
        return str(v)
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v > 0 else "-inf") if abs(v) == float("inf") else repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\x00", "") + '"'


_TINY = training.Model(name="tiny", layers=4, hidden=1024, ffn=4096, heads=8, kv_heads=8, vocab=1024, seq_len=1024)


def _serving(*args, **kwargs):
    sc = fs.Scenario(_CLUSTER)
    return serving.add_serving(sc, *args, **kwargs)


def _dependency(*args):
    sc = fs.Scenario(_LINE)
    sc.add_delay("1us")
    sc.add_delay("1us")
    return sc.add_dependency(*args)


_ROUTING = fs.MoeRouting.from_counts(np.full((8, 16), 4.0), top_k=2)
_LLAMA = training.model("llama3-8b")
_PAR = training.Parallelism(tp=8, global_batch_size=8)
_SMALL_PAR = training.Parallelism(tp=4, dp=2, global_batch_size=16)


# (name, function, positional arguments, keyword arguments): each a call that runs as given.
# Arguments that are callables are made afresh for each example (scenarios, results).
CASES = [
    # fabrics
    ("hgx_h100", fs.hgx_h100, (), {"nvlink_efficiency": 0.9}),
    ("nvl72", fs.nvl72, (), {"gpu": "gb200", "nvlink_efficiency": 0.9}),
    ("nvlink_domain", fs.nvlink_domain, (), {"gpu": "gb200", "n_gpus": 8, "switch": "nvlink5-switch"}),
    ("clos", fs.clos, (), {"n_hosts": 4, "switch": "quantum-2", "nic": "cx7", "tiers": 1, "oversubscription": 1.0}),
    ("cluster", fs.cluster, (), {"domain": "hgx-h100", "n_domains": 2, "scale_out": "quantum-2", "tiers": 2,
                                 "oversubscription": 2}),
    ("pcie_server", fs.pcie_server, (), {"n_gpus": 4, "gpus_per_switch": 2}),
    ("Topology.from_arrays", fs.Topology.from_arrays, ([0, 1], [1, 2], 1e9), {"latency_s": 1e-6}),
    ("Fabric.fail", _CLUSTER.fail, (), {"links": [0, 1], "factor": 0.5}),
    ("Fabric.with_payload_efficiency", _CLUSTER.with_payload_efficiency, (), {"nvlink": 0.9, "network": 0.9}),
    ("Fabric.names_of", _CLUSTER.names_of, ([0, 1],), {}),
    ("Topology.node_ids", _NAMED.node_ids, (["a", "c"],), {}),
    ("Fabric.route", _CLUSTER.route, (0, 9), {}),
    ("Fabric.links_where", _CLUSTER.links_where, (), {"tier": "nic-leaf"}),
    # scenarios
    ("Scenario", fs.Scenario, (_H100,), {"seed": 3, "routing": "ecmp"}),
    ("Scenario.add_flow", lambda *a, **k: _scenario().add_flow(*a, **k), (0, 1, "1MiB"),
     {"start_s": "1us", "max_rate_Bps": 1e9, "weight": 2.0}),
    ("Scenario.add_flows", lambda *a, **k: _scenario().add_flows(*a, **k), ([0, 1], [1, 2], [1e6, 2e6]),
     {"start_s": 0.0, "weight": 1.0}),
    ("Scenario.add_delay", lambda *a, **k: _scenario().add_delay(*a, **k), ("1us",), {}),
    ("Scenario.add_collective", lambda *a, **k: _scenario().add_collective(*a, **k), ("all_reduce", None, "1MiB"),
     {"algorithm": "ring", "start_s": 0.0}),
    ("Scenario.add_fault", lambda **k: _scenario().add_fault(**k), (), {"at_s": "1us", "links": [0], "factor": 0.5}),
    ("Scenario.add_dependency", _dependency, (1, 0), {}),
    ("Scenario.add_job", lambda *a, **k: _scenario(_CLUSTER).add_job(*a, **k), ("a",),
     {"n_gpus": 8, "placement": "packed", "weight": 1.0}),
    ("Scenario.add_moe_dispatch", lambda *a, **k: _scenario().add_moe_dispatch(*a, **k), (_ROUTING,),
     {"bytes_per_token": 7168, "mode": "deepep"}),
    ("Scenario.run", lambda **k: _scenario(_LINE).run(**k), (), {"tolerance": 1e-3, "record_rates": True}),
    ("max_min_rates", fs.max_min_rates, ([1.0, 2.0], [0, 1], [0, 1]), {"n_flows": 2}),
    # collectives
    ("estimate", fs.estimate, (_H100, "all_reduce", "1MiB"), {"algorithm": "auto"}),
    ("estimate all_to_all", fs.estimate, (_CLUSTER, "all_to_all", "1MiB"), {}),
    ("MoeRouting.from_counts", fs.MoeRouting.from_counts, (np.full((8, 16), 4.0),), {"top_k": 2}),
    ("MoeRouting.from_topk", fs.MoeRouting.from_topk, (np.array([[[0, 1]], [[1, 3]]]),), {"n_experts": 4}),
    ("estimate_moe", fs.estimate_moe, (_H100, "dispatch", _ROUTING), {"bytes_per_token": 7168}),
    ("nccl_tests", fs.nccl_tests, (_H100, "all_reduce", "8M", "32M", 2), {}),
    ("read_nccl_tests", fs.read_nccl_tests, (ALL_REDUCE_8,), {"op": "all_reduce"}),
    ("CostModel", fs.CostModel, (), {"latency_scale": 1.5, "ring_max_channels": 16}),
    ("CostModel.from_dict", fs.CostModel.from_dict, ({"latency_scale": 2.0},), {}),
    ("CostModel.from_json", fs.CostModel.from_json, ('{"latency_scale": 2.0}',), {}),
    ("CostModel.replace", fs.CostModel().replace, (), {"latency_scale": 2.0, "p2p_group_size": 4}),
    ("calibrate", fs.calibrate, (_H100, fs.read_nccl_tests(ALL_REDUCE_8, op="all_reduce")),
     {"algorithm": "auto", "holdout_every": 3}),
    # training
    ("training.model", training.model, ("llama3-8b",), {}),
    ("Parallelism", training.Parallelism, (), {"tp": 8, "dp": 2, "global_batch_size": 16}),
    ("estimate_step", training.estimate_step, (_LLAMA, _SMALL_PAR, _CLUSTER), {}),
    ("Model.replace", _TINY.replace, (), {"layers": 8, "n_experts": 8, "experts_per_token": 2, "expert_ffn": 512}),
    ("TrainingStep", training.TrainingStep, (_TINY, _SMALL_PAR, _CLUSTER), {"tp_comm": "flow", "check_memory": True}),
    ("schedule_order", training.schedule_order, (2, 0, 4), {"virtual_stages": 1}),
    ("gemm_s", training.gemm_s, ([64, 32], 4096, 7168), {"grouped": True, "precision": "fp8",
                                                         "compute": training.ComputeModel()}),
    ("compute_beside_comm_s", training.compute.compute_beside_comm_s, (1e-3, [(4e-4, 16)]), {"gpu": "h100"}),
    ("layer_work", training.layer_work, (_TINY, 0), {"tokens": 1024, "tp": 2, "sequence_parallel": True}),
    ("domain_aware", training.domain_aware, (training.Parallelism(dp=8, ep=8), _CLUSTER), {}),
    ("MoeOptions", training.MoeOptions, (), {"dispatcher": "deepep", "routing": "dirichlet", "seed": 2}),
    ("Precision", training.Precision, ("mxfp8",), {"fp8_attention": True}),
    # serving
    ("TokenCounts", serving.TokenCounts, ("uniform",), {"low": 1, "high": 64}),
    ("poisson_requests", serving.poisson_requests, (100.0, 0.5), {"seed": 1}),
    ("trace_requests", serving.trace_requests, ([0.0, 0.1], [512, 64], [8, 1]), {}),
    ("Pool", serving.Pool, (range(8),), {"tp": 8}),
    ("carve_pools", serving.carve_pools, (_CLUSTER,), {"prefill_instances": 1, "decode_instances": 1, "tp": 8}),
    ("add_serving", _serving, (_TINY, serving.trace_requests([0.0, 1e-3], [64, 32], [2, 1])),
     {"prefill": serving.Pool(range(8), tp=8), "decode": serving.Pool(range(8, 16), tp=8), "policy": "least_loaded",
      "prefill_efficiency": 0.5}),
    ("kv_cache_bytes", serving.kv_cache_bytes, ("llama3-70b", 16), {"kv_bytes_per_element": 2.0}),
    # reliability
    ("cpo_port_factor", reliability.cpo_port_factor, (reliability.failure_rates(),), {}),
    ("FailureRates.replace", reliability.failure_rates().replace, (), {"repair_s": {"gpu": 3600.0}}),
    ("Policy", reliability.Policy, (), {"checkpoint_interval_s": 600.0, "restart_s": 60.0}),
    ("part_counts", reliability.part_counts, (_CLUSTER,), {"gpus_per_host": 8}),
    ("expected_failures", reliability.expected_failures, (_CLUSTER,), {"horizon_s": 86400.0}),
    ("simulate", reliability.simulate, (_CLUSTER, 1.0), {"horizon_s": 7 * 86400.0, "seed": 2}),
    ("compare_optics", reliability.compare_optics, (_CLUSTER, _CPO, 1.0), {"horizon_s": 86400.0, "seeds": 2}),
    # studies
    ("sweep", fs.sweep, ({"n": [1, 2]}, lambda n: {"twice": 2 * n}), {"progress": False}),
]
_IDS = [c[0] for c in CASES]


@st.composite
def spoiled_calls(draw, args, kwargs):
    """The case's arguments with one or two of them replaced by hostile values: (args,
    kwargs, how many were replaced)."""
    names = [*range(len(args)), *kwargs]
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=min(2, len(names)), unique=True))
    args, kwargs = list(args), dict(kwargs)
    for name in chosen:
        value = draw(anything)
        if isinstance(name, int):
            args[name] = value
        else:
            kwargs[name] = value
    return tuple(args), kwargs, len(chosen)


@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_a_public_function_returns_or_refuses_what_a_hostile_user_gives_it(case):
    name, fn, args, kwargs = case
    with _no_hang(name):
        fn(*args, **kwargs)  # as given, it runs: what the spoiled calls are refused for is theirs

    @explore(60, spoiled_calls(args, kwargs))
    def seen(call):
        a, k, _ = call
        with _no_hang(name):
            got = only_fabricsim_errors(fn, *a, **k)
        return "refused" if refused(got) else "ran"

    print(name, dict(seen))
    assert_reach(seen, "refused", RAN)


def test_a_scenario_file_with_hostile_values_is_refused_with_its_file_and_line(tmp_path):
    @explore(40, mostly(st.just(("hgx_h100", "all_reduce", 0.001)),
                        st.tuples(st.one_of(st.just("hgx_h100"), anything), st.one_of(st.just("all_reduce"), anything),
                                  st.one_of(st.just(0.001), anything)), valid_in_10=3))
    def seen(values):
        path = _toml(str(tmp_path), *values)
        with _no_hang("load_scenario"):
            got = only_fabricsim_errors(fs.load_scenario, path)
        if refused(got):
            assert isinstance(got, fs.ScenarioFileError), got
            assert str(got).startswith(path), got  # where: the file, then its line where the TOML has one
            return "refused"
        assert got.scenario.run(**got.run_options).summary.makespan_s > 0
        return "ran"

    assert_reach(seen, "ran", RAN)
    assert_reach(seen, "refused", RAN)


def test_a_refused_write_leaves_the_last_good_file_as_it_was(tmp_path):
    good = tmp_path / "model.json"
    fs.CostModel().to_json(good)
    before = good.read_bytes()
    out = tmp_path / "run"
    written = _result().to_parquet(out)
    tables = {p: Path(p).read_bytes() for p in written}

    @explore(40, anything)
    def seen(value):
        got = only_fabricsim_errors(fs.CostModel.from_dict, {"latency_scale": value})
        if not refused(got):
            return "ran"
        # a model that cannot be made is never written; nor is a path that is not one
        # (to_json(None) returns the text)
        assert refused(only_fabricsim_errors(fs.CostModel().to_json, value)) or isinstance(value, (str, type(None)))
        assert good.read_bytes() == before
        assert refused(only_fabricsim_errors(_result().to_parquet, value)) or isinstance(value, str)
        assert {p: Path(p).read_bytes() for p in written} == tables
        return "refused"

    assert_reach(seen, "refused", RAN)
    assert_reach(seen, "ran", RAN)


def test_every_public_object_survives_pickling():
    sc = fs.Scenario(_CLUSTER)
    sc.add_collective("all_reduce", None, "1MiB")
    result = sc.run()
    objects = [_CLUSTER, fs.CostModel(), _ROUTING, _LLAMA, _PAR, result, result.summary,
               serving.TokenCounts("fixed", mean=3), serving.Pool(range(8), tp=8), reliability.Policy(),
               reliability.failure_rates(), fs.estimate(_H100, "all_reduce", "1MiB")]
    for obj in objects:
        again = pickle.loads(pickle.dumps(obj))
        assert type(again) is type(obj)
        assert str(again) == str(obj), type(obj).__name__  # str: a summary's repr shows its names' address
