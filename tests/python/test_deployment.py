"""Deployment choices of a generated fabric: whether SHARP runs (a property of the deployment,
not of every InfiniBand switch) and the payload efficiencies link capacities are built with,
changed after the fact by ``Fabric.with_payload_efficiency``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fabricsim as fs
from fabricsim import catalog
from fabricsim.exceptions import InvalidArgumentError


def capacities(fabric) -> np.ndarray:
    return fabric.links["capacity_Bps"].to_numpy()


def link_classes(fabric) -> dict[str, np.ndarray]:
    """Boolean masks of the links by tier: "nvlink" (GPU or NVSwitch chip to NVSwitch chip or
    GPU), "host" (GPU to its NIC and back), "network" (the rest: NIC or host to leaf, and
    between switches)."""
    names = fabric.structure["kind_names"]
    kinds = np.array(names)[fabric._core.node_kinds()]
    links = fabric.links
    src, dst = kinds[links["src"].to_numpy()], kinds[links["dst"].to_numpy()]
    nvlink = (src == "nvswitch") | (dst == "nvswitch")
    host = ((src == "gpu") & (dst == "nic")) | ((src == "nic") & (dst == "gpu"))
    return {"nvlink": nvlink, "host": host, "network": ~(nvlink | host)}


# ---- SHARP -------------------------------------------------------------------------------


@pytest.fixture
def ib_switch_without_sharp():
    """An InfiniBand switch part whose catalog entry says it has no SHARP."""
    catalog.add_part(
        "test-ib-nosharp", "switch", source="[assumed] an InfiniBand switch without SHARP, for tests",
        protocol="infiniband", ports=64, port_Bps="400Gb/s", lane_Bps="200Gb/s", optics="pluggable",
        ports_per_cage=2, optics_watts_per_port=0.0, system_watts=None, latency_s=0.0, sharp=False,
        adaptive_routing=True,
    )
    yield "test-ib-nosharp"
    catalog.remove_part("test-ib-nosharp")


def test_sharp_is_off_unless_asked_for_even_on_sharp_capable_switches():
    assert catalog.part("quantum-2").sharp and catalog.part("quantum-x800").sharp
    assert fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")._parts["sharp_enabled"] is False
    assert fs.clos(n_hosts=16, switch="quantum-x800", nic="cx8")._parts["sharp_enabled"] is False


def test_every_generated_fabric_records_whether_sharp_runs():
    """False where there is no scale-out network to run it in."""
    for fabric in (fs.hgx_h100(), fs.hgx_b200(), fs.nvl72(), fs.nvlink_domain(n_gpus=8), fs.pcie_server()):
        assert fabric._parts["sharp_enabled"] is False


@pytest.mark.parametrize("switch, nic", [("quantum-2", "cx7"), ("quantum-x800", "cx8")])
def test_sharp_is_accepted_on_infiniband_switches_with_sharp(switch, nic):
    topo = fs.cluster(domain="hgx-h100", n_domains=2, scale_out=switch, nic=nic, sharp=True)
    assert topo._parts["sharp_enabled"] is True
    assert fs.clos(n_hosts=16, switch=switch, nic=nic, sharp=True)._parts["sharp_enabled"] is True
    assert fs.clos(n_hosts=16, switch=switch, nic=nic, sharp=np.bool_(True))._parts["sharp_enabled"] is True


def test_sharp_is_refused_on_ethernet_naming_the_switch_and_why():
    with pytest.raises(
        InvalidArgumentError,
        match=r"^sharp=True needs InfiniBand switches with SHARP \(in-network reduction\); "
              r"scale_out='sn5600': sn5600 is ethernet$",
    ):
        fs.cluster(domain="hgx-h100", n_domains=2, scale_out="sn5600", nic="cx7", sharp=True)
    with pytest.raises(InvalidArgumentError, match=r"switch='sn5600': sn5600 is ethernet$"):
        fs.clos(n_hosts=16, switch="sn5600", nic="cx7", sharp=True)
    # Off is always fine.
    assert fs.clos(n_hosts=16, switch="sn5600", nic="cx7", sharp=False)._parts["sharp_enabled"] is False


def test_sharp_is_refused_on_an_infiniband_switch_without_it(ib_switch_without_sharp):
    with pytest.raises(
        InvalidArgumentError,
        match=r"; switch='test-ib-nosharp': test-ib-nosharp is InfiniBand without SHARP "
              r"\(its catalog part has sharp=False\)$",
    ):
        fs.clos(n_hosts=16, switch=ib_switch_without_sharp, nic="cx7", sharp=True)
    assert fs.clos(n_hosts=16, switch=ib_switch_without_sharp, nic="cx7")._parts["sharp_enabled"] is False


@pytest.mark.parametrize("value, shown", [(1, "int 1"), ("yes", "str 'yes'"), (None, "NoneType None")])
def test_sharp_must_be_a_bool(value, shown):
    with pytest.raises(InvalidArgumentError, match=rf"^sharp must be True or False, got {shown}$"):
        fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2", sharp=value)
    with pytest.raises(InvalidArgumentError, match=rf"^sharp must be True or False, got {shown}$"):
        fs.clos(n_hosts=16, switch="quantum-2", nic="cx7", sharp=value)


def test_describe_says_whether_sharp_runs():
    def row(fabric):
        rows = [r for r in fabric.describe().table.to_pylist() if r["quantity"] == "SHARP enabled"]
        return rows

    on = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2", sharp=True)
    off = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    assert row(on) == [dict(section="in-network reduction", quantity="SHARP enabled", value=1.0, unit="bool")]
    assert row(off)[0]["value"] == 0.0
    assert "SHARP enabled" in str(on.describe()) and str(on.describe()).rstrip().endswith("yes")
    assert str(off.describe()).rstrip().endswith("no")
    # No scale-out network, nothing to say.
    assert row(fs.hgx_h100()) == []


def test_sharp_survives_faults_and_a_rebuild():
    topo = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2", sharp=True)
    assert topo.fail(links=[0])._parts["sharp_enabled"] is True
    assert topo.fail(links=[0]).with_payload_efficiency(network=0.5)._parts["sharp_enabled"] is True


# ---- payload efficiency ------------------------------------------------------------------


def test_payload_efficiency_reports_what_the_fabric_was_built_with():
    assert fs.hgx_h100().payload_efficiency == {"nvlink": catalog.part("nvlink4-payload").value, "network": None}
    assert fs.nvl72(nvlink_efficiency=0.7).payload_efficiency == {"nvlink": 0.7, "network": None}
    assert fs.clos(n_hosts=16, switch="sn5600", nic="cx7").payload_efficiency == {
        "nvlink": None, "network": catalog.part("ethernet").value}
    assert fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2", efficiency=0.9).payload_efficiency == {
        "nvlink": catalog.part("nvlink4-payload").value, "network": 0.9}
    assert fs.pcie_server().payload_efficiency == {"nvlink": None, "network": None}
    # A fresh dict each time: changing it changes nothing.
    topo = fs.hgx_h100()
    topo.payload_efficiency["nvlink"] = 0.1
    assert topo.payload_efficiency["nvlink"] == catalog.part("nvlink4-payload").value


@pytest.mark.parametrize("make", [fs.hgx_h100, fs.nvl72], ids=["hgx_h100", "nvl72"])
def test_nvlink_capacities_scale_by_the_ratio_of_efficiencies(make):
    before = make()
    after = before.with_payload_efficiency(nvlink=0.5)
    ratio = 0.5 / before.payload_efficiency["nvlink"]
    np.testing.assert_allclose(capacities(after), capacities(before) * ratio, rtol=1e-15)
    assert after.payload_efficiency == {"nvlink": 0.5, "network": None}
    assert (after.n_nodes, after.n_links) == (before.n_nodes, before.n_links)
    # The same efficiency rebuilds the same capacities, bit for bit.
    same = after.with_payload_efficiency(nvlink=before.payload_efficiency["nvlink"])
    assert np.array_equal(capacities(same), capacities(before))


def test_a_cluster_scales_each_tier_by_its_own_ratio_and_leaves_the_pcie_links():
    before = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2", nic="cx7")
    eff = before.payload_efficiency
    after = before.with_payload_efficiency(nvlink=0.6, network=0.75)
    cls = link_classes(before)
    assert all(mask.any() for mask in cls.values())
    c0, c1 = capacities(before), capacities(after)
    np.testing.assert_allclose(c1[cls["nvlink"]], c0[cls["nvlink"]] * 0.6 / eff["nvlink"], rtol=1e-15)
    np.testing.assert_allclose(c1[cls["network"]], c0[cls["network"]] * 0.75 / eff["network"], rtol=1e-15)
    assert np.array_equal(c1[cls["host"]], c0[cls["host"]])
    assert after.payload_efficiency == {"nvlink": 0.6, "network": 0.75}
    # One tier at a time keeps the other's.
    only_net = before.with_payload_efficiency(network=0.75)
    assert np.array_equal(capacities(only_net)[cls["nvlink"]], c0[cls["nvlink"]])
    np.testing.assert_allclose(capacities(only_net), c1 * np.where(cls["nvlink"], eff["nvlink"] / 0.6, 1.0),
                               rtol=1e-15)
    # What collectives read: the domain's link rate and the Clos's.
    assert after._parts["domain"]["link_Bps"] == catalog.part("h100").nvlink_link_Bps * 0.6
    assert after.structure["scale_out"]["link_Bps"] == after._parts["plane_Bps"] * 0.75
    assert before._parts["domain"]["link_Bps"] == catalog.part("h100").nvlink_link_Bps * eff["nvlink"]


def test_a_multi_tier_multi_plane_clos_scales_every_link():
    before = fs.clos(n_hosts=256, switch="quantum-x800", nic="cx8", planes=2, tiers=2)
    after = before.with_payload_efficiency(network=0.5)
    assert before.structure["scale_out"]["tiers"] == 2 and before.structure["scale_out"]["planes"] == 2
    np.testing.assert_allclose(capacities(after), capacities(before) * 0.5 / before.payload_efficiency["network"],
                               rtol=1e-15)
    assert after.payload_efficiency == {"nvlink": None, "network": 0.5}
    assert after.structure == {**before.structure, "scale_out": {**before.structure["scale_out"],
                                                                  "link_Bps": after.structure["scale_out"]["link_Bps"]}}


def test_efficiency_parts_are_accepted_as_the_builders_accept_them():
    topo = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2", efficiency=0.5)
    back = topo.with_payload_efficiency(network="infiniband")
    ref = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    assert np.array_equal(capacities(back), capacities(ref))
    with pytest.raises(InvalidArgumentError, match=r"nvlink 'infiniband' applies to infiniband, not to NVLink"):
        topo.with_payload_efficiency(nvlink="infiniband")


def test_faults_are_kept_through_a_rebuild():
    before = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2", nic="cx7")
    cls = link_classes(before)
    nv, net = int(np.flatnonzero(cls["nvlink"])[0]), int(np.flatnonzero(cls["network"])[0])
    net2 = int(np.flatnonzero(cls["network"])[1])
    # Down, then degraded, then a second fault on a link already degraded: the last one wins,
    # as it did before the rebuild.
    faulty = before.fail(links=[nv]).fail(links=[net, net2], factor=0.5).fail(links=net2, factor=0.25)
    after = faulty.with_payload_efficiency(nvlink=0.5, network=0.5)
    c = capacities(after)
    fresh = capacities(before.with_payload_efficiency(nvlink=0.5, network=0.5))
    assert c[nv] == 0.0
    assert c[net] == fresh[net] * 0.5
    assert c[net2] == fresh[net2] * 0.25
    others = np.ones(len(c), dtype=bool)
    others[[nv, net, net2]] = False
    assert np.array_equal(c[others], fresh[others])
    # Faults recorded in order, and the rebuilt fabric can fail further and rebuild again.
    assert [(ids.tolist(), factor) for ids, factor in after._parts["faults"]] == [
        ([nv], 0.0), (sorted([net, net2]), 0.5), ([net2], 0.25)]
    again = after.fail(nodes=[0]).with_payload_efficiency(network=0.9)
    assert capacities(again)[nv] == 0.0
    assert capacities(again)[before._core.links_of_nodes([0])].max() == 0.0


def test_a_failed_plane_stays_failed_after_a_rebuild():
    before = fs.clos(n_hosts=64, switch="quantum-x800", nic="cx8", planes=2)
    after = before.fail(planes=[1]).with_payload_efficiency(network=0.5)
    plane = before._core.links_of_plane(1)
    assert capacities(after)[plane].max() == 0.0
    assert capacities(after).max() == capacities(before).max() * 0.5 / before.payload_efficiency["network"]


def test_a_rebuilt_fabric_runs_at_the_new_rates():
    """The engine sees the new capacities: 1 GB between two GPUs of an HGX H100 board takes
    the path latency plus 1 GB over the GPU's 18 NVLinks at half their line rate."""
    topo = fs.hgx_h100().with_payload_efficiency(nvlink=0.5)
    sc = fs.Scenario(topo)
    sc.add_flow(0, 1, 1e9)
    per_gpu_Bps = 18 * catalog.part("h100").nvlink_link_Bps * 0.5
    assert sc.run().makespan_s == pytest.approx(topo._core.path_latency_s(0, 1) + 1e9 / per_gpu_Bps, rel=1e-12)


def test_nothing_to_change_gives_the_fabric_back():
    topo = fs.hgx_h100()
    assert topo.with_payload_efficiency() is topo
    assert fs.pcie_server().with_payload_efficiency().payload_efficiency == {"nvlink": None, "network": None}


@pytest.mark.parametrize("value, shown", [(0, "0"), (1.5, "1.5"), (math.nan, "nan"), (-0.5, "-0.5"), (True, "True")])
@pytest.mark.parametrize("tier", ["nvlink", "network"])
def test_bad_efficiencies_are_refused_naming_the_value(tier, value, shown):
    topo = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    with pytest.raises(
        InvalidArgumentError,
        match=rf"^{tier} must be a number in \(0, 1\] or the name of an efficiency part, got {shown}$",
    ):
        topo.with_payload_efficiency(**{tier: value})


@pytest.mark.parametrize("tier", ["nvlink", "network"])
def test_an_unknown_efficiency_name_is_refused_naming_it(tier):
    topo = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    with pytest.raises(InvalidArgumentError, match=rf"^{tier}: no catalog part named 'x'"):
        topo.with_payload_efficiency(**{tier: "x"})


@pytest.mark.parametrize("make, kwargs, message", [
    (fs.hgx_h100, dict(network=0.9),
     r"^network=0\.9: this fabric has no scale-out network \(NVLink domains of h100 GPUs without a scale-out "
     r"network\)"),
    (fs.nvl72, dict(network=0.9), r"^network=0\.9: this fabric has no scale-out network"),
    (lambda: fs.clos(n_hosts=16, switch="quantum-2", nic="cx7"), dict(nvlink=0.9),
     r"^nvlink=0\.9: this fabric has no NVLink domains \(a Clos of hosts on quantum-2 switches without NVLink\)"),
    (fs.pcie_server, dict(nvlink=0.9),
     r"^nvlink=0\.9: this fabric has no NVLink domains \(GPUs on PCIe, a pcie_server\)"),
    (fs.pcie_server, dict(network=0.9), r"^network=0\.9: this fabric has no scale-out network \(GPUs on PCIe"),
    # The missing tier is named even when the value is bad too, and when the other is fine.
    (fs.hgx_h100, dict(nvlink=0.5, network="x"), r"^network='x': this fabric has no scale-out network"),
])
def test_a_tier_the_fabric_does_not_have_is_refused(make, kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        make().with_payload_efficiency(**kwargs)


def test_efficiencies_are_keyword_only():
    with pytest.raises(TypeError):
        fs.hgx_h100().with_payload_efficiency(0.5)  # type: ignore[misc]
