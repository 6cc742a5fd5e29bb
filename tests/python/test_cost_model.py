"""The cost model: NCCL's constants as docs/sources.md section 4 gives them, serialisation, checks,
and the one object reaching Scenario, estimate and nccl_tests alike."""

import dataclasses
import json

import pytest

import fabricsim as fs
from fabricsim.collectives.communicator import _comm
from fabricsim.collectives.cost.analytical import latency_s
from fabricsim.collectives.cost.model import AXES, DEFAULT, SOURCES, CostModel

GiB = 2**30


def test_every_field_has_a_source_and_tables_have_named_axes():
    names = [f.name for f in dataclasses.fields(CostModel) if f.name != "_hash"]
    assert sorted(SOURCES) == sorted(names)
    for name, axes in AXES.items():
        table = getattr(DEFAULT, name)
        assert len(table) == len(axes[0]), name


def test_defaults_are_nccls_constants():
    us = 1e-6
    algos = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
    d = DEFAULT.to_dict()
    assert d["base_latency_s"]["ring"]["simple"] == pytest.approx(8.4 * us)
    assert d["base_latency_s"]["tree"]["ll"] == pytest.approx(6.8 * us)
    assert d["hw_latency_s"]["nvlink"]["nvls"]["simple"] == pytest.approx(25 * us)
    assert d["hw_latency_s"]["net"]["nvls_tree"]["simple"] == pytest.approx(20.9 * us)
    assert d["hw_latency_s"]["net"]["collnet_direct"]["simple"] == pytest.approx(31 * us)
    assert set(d["base_latency_s"]) == set(algos)
    assert d["nvls_efficiency"] == {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
    assert d["per_channel_nvls_tree_Bps"]["hopper"] == {"1": 0.0, "2": 57.7e9, "3+": 45.5e9}
    assert d["per_channel_tree_Bps"]["blackwell"]["3+"] == pytest.approx(24e9)
    assert d["nvls_channels"]["hopper"] == 16 and d["nvls_channels"]["blackwell"] == 24
    assert d["nvls_channels_multi_node"]["blackwell"] == 32
    assert d["ladder_intra_Bps"]["hopper"][:3] == [60e9, 50e9, 40e9]
    assert DEFAULT.ll128_payload == 0.92 and DEFAULT.ll_payload == 0.5
    assert DEFAULT.ring_plateau_factor == (1.9, 1.4)
    assert DEFAULT.sharp_network_as_bus is True
    assert DEFAULT.nvlink_efficiency is None and DEFAULT.network_efficiency is None


def test_round_trips_through_dict_and_json(tmp_path):
    model = DEFAULT.replace(latency_scale=0.5, nvls_efficiency={"hopper": 0.8}, network_efficiency=0.9,
                            sharp_network_as_bus=False)
    assert CostModel.from_dict(model.to_dict()) == model
    assert hash(CostModel.from_dict(model.to_dict())) == hash(model)
    assert CostModel.from_json(model.to_json()) == model
    path = tmp_path / "cost.json"
    model.to_json(path)
    assert CostModel.from_json(path) == model
    assert json.loads(path.read_text())["nvls_efficiency"]["hopper"] == 0.8
    assert model.differences() == {
        "latency_scale": (0.5, 1.0), "nvls_efficiency": ((0.0, 0.0, 0.8, 0.74), (0.0, 0.0, 0.85, 0.74)),
        "sharp_network_as_bus": (False, True), "network_efficiency": (0.9, None)}


def test_a_table_may_name_only_the_entries_it_changes():
    model = CostModel.from_dict({"hw_latency_s": {"net": {"ring": {"simple": 20e-6}}}})
    assert model.hw_latency_s[2][1][2] == 20e-6
    assert model.hw_latency_s[0] == DEFAULT.hw_latency_s[0]


@pytest.mark.parametrize("changes, message", [
    (dict(latency_scale=-1), r"latency_scale=-1: expected a finite number >= 0"),
    (dict(latency_scale="fast"), r"latency_scale='fast'"),
    (dict(ll128_payload=1.5), r"ll128_payload=1.5: expected a number in \[0, 1\]"),
    (dict(nvlink_efficiency=0), r"nvlink_efficiency=0: expected a fraction in \(0, 1\]"),
    (dict(nvls_channels={"hopper": 2.5}), r"nvls_channels\[2\]=2.5: expected a whole number"),
    (dict(nvls_efficiency={"hoper": 0.8}), r"unknown key 'hoper'"),
    (dict(sharp_network_as_bus=1), r"sharp_network_as_bus=1: expected True or False"),
    (dict(base_latency_s=[1, 2]), r"base_latency_s: expected 7 entries"),
    (dict(ladder_intra_Bps={"hopper": [40e9, 60e9]}), r"ladder_intra_Bps\[2\]: expected speeds in decreasing order"),
    (dict(nvls_max_arity=-1), r"nvls_max_arity=-1"),
    (dict(colour=1), r"CostModel has no field 'colour'"),
])
def test_bad_values_are_refused_naming_the_field(changes, message):
    with pytest.raises(fs.InvalidArgumentError, match=message):
        DEFAULT.replace(**changes)


def test_bad_json_and_a_wrong_object_are_refused(tmp_path):
    with pytest.raises(fs.InvalidArgumentError, match="cannot read a cost model"):
        CostModel.from_json(tmp_path / "missing.json")
    with pytest.raises(fs.InvalidArgumentError, match="JSON"):
        CostModel.from_json("{not json")
    with pytest.raises(fs.InvalidArgumentError, match="mapping"):
        CostModel.from_dict([1, 2])
    with pytest.raises(fs.InvalidArgumentError, match="cost_model must be a fabricsim.CostModel"):
        fs.estimate(fs.hgx_h100(), "all_reduce", GiB, cost_model={"latency_scale": 0})
    with pytest.raises(fs.InvalidArgumentError, match="not a generated fabric"):
        fs.estimate(fs.Topology.from_arrays([0, 1], [1, 0], 1e9), "all_reduce", GiB, [0, 1],
                    cost_model=DEFAULT.replace(nvlink_efficiency=0.5))


def test_one_model_reaches_scenario_estimate_and_nccl_tests_alike():
    # NVLS on 8 H100s is per-GPU bound: algbw = eff x B x 8/9, so halving-ish the efficiency
    # moves all three by the same closed form.
    f = fs.hgx_h100()
    model = DEFAULT.replace(nvls_efficiency={"hopper": 0.5}, latency_scale=0.0)
    est = fs.estimate(f, "all_reduce", 4 * GiB, algorithm="nvls", cost_model=model)
    sc = fs.Scenario(f, cost_model=model)
    sc.add_collective("all_reduce", range(8), 4 * GiB, algorithm="nvls")
    row = sc.run().collectives.to_pylist()[0]
    nt = fs.nccl_tests(f, "all_reduce", 4 * GiB, 4 * GiB, algorithm="nvls", cost_model=model).to_pylist()[0]
    wire = latency_s("all_reduce", "nvls", 4 * GiB, _comm(f, range(8)), "simple", model)  # the steps' wire latency
    expected = wire + 4 * GiB / (0.5 * 370.8e9 * 8 / 9)
    for t in (est.time_s, row["finish_s"] - row["start_s"], nt["time_s"]):
        assert t == pytest.approx(expected, rel=1e-9)


def test_payload_efficiency_in_the_model_rebuilds_the_fabric():
    # A ring on one HGX H100 moves 2(n-1)/n S at the NVLink payload rate: 18 x 25 GB/s x eff.
    f = fs.hgx_h100()
    model = DEFAULT.replace(nvlink_efficiency=0.6, latency_scale=0.0)
    row = fs.nccl_tests(f, "all_reduce", 4 * GiB, 4 * GiB, algorithm="ring", cost_model=model).to_pylist()[0]
    wire = latency_s("all_reduce", "ring", 4 * GiB, _comm(f, range(8)), "simple", model)
    expected = wire + 2 * 7 / 8 * 4 * GiB / (18 * 25e9 * 0.6)
    assert row["time_s"] == pytest.approx(expected, rel=1e-9)
    assert fs.estimate(f, "all_reduce", 4 * GiB, algorithm="ring", cost_model=model).time_s == pytest.approx(
        expected, rel=1e-9)
    assert f.payload_efficiency["nvlink"] == pytest.approx(370.8 / 450)  # the fabric itself is unchanged


def test_latency_scale_scales_nccls_software_latency_only():
    f = fs.hgx_h100()
    t = {s: fs.estimate(f, "all_reduce", 8, algorithm="ring", protocol="simple",
                        cost_model=DEFAULT.replace(latency_scale=s)).time_s for s in (0.0, 1.0, 2.0)}
    assert t[2.0] - t[1.0] == pytest.approx(t[1.0] - t[0.0], rel=1e-9)
    assert t[1.0] - t[0.0] == pytest.approx(8.4e-6 + 14 * 3.4e-6, rel=1e-9)
