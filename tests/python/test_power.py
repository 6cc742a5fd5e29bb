"""Power and cost: catalog power and price fields, fabricsim.power's budgets,
comparison table and the co-packaged optics claim, each held to a closed form (count x watts)
derived here from the fabric's shape, not read back from the code under test."""

import math

import pyarrow as pa
import pytest

import fabricsim as fs
from fabricsim import power
from fabricsim.fabrics.catalog import add_part, part, remove_part
from fabricsim.exceptions import InvalidArgumentError


# ---- catalog fields ---------------------------------------------------------------------------


def test_every_gpu_has_watts_and_every_figure_a_source():
    for row in fs.catalog.parts("gpu").to_pylist():
        p = part(row["name"])
        assert p.watts is not None and p.watts > 0, p.name
        assert p.sources["watts"] and p.sources["usd"]
    assert part("h100").watts == 700.0 and part("b200").watts == 1000.0 and part("gb200").watts == 1200.0
    # An assumption says so; a missing price says what was searched.
    assert part("gb300").sources["watts"].startswith("[assumed]")
    assert part("b200").usd is None and part("b200").sources["usd"].startswith("[no source]")


def test_power_and_price_columns_are_typed_with_units_in_their_names():
    assert fs.catalog.parts("gpu").schema.field("watts").type == pa.float64()
    assert fs.catalog.parts("nic").schema.field("optics_watts_per_cage").type == pa.float64()
    assert fs.catalog.parts("switch").schema.field("system_usd").type == pa.float64()
    assert fs.catalog.parts("optic").schema.field("usd").type == pa.float64()


BASE_GPU = dict(nvlink_generation=4, nvlink_links=18, nvlink_link_Bps="25GB/s", nvlink_efficiency="nvlink4-payload",
                nic="cx7", pcie_Bps="64GB/s", arch="hopper")


@pytest.mark.parametrize("field, value, message", [
    ("watts", -1, "watts must be a power > 0 W, got -1"),
    ("watts", 0, "watts must be a power > 0 W, got 0"),
    ("watts", float("nan"), "watts must be finite, got nan"),
    ("watts", "700W", "watts must be a number"),
    ("watts", True, "watts must be a number"),
    ("usd", -5.0, "usd must be a price >= 0 USD, got -5.0"),
    ("usd", float("inf"), "usd must be finite, got inf"),
])
def test_add_part_refuses_bad_power_and_price(field, value, message):
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(")):
        add_part("my-gpu", "gpu", source="test", **BASE_GPU, **{field: value})
    with pytest.raises(InvalidArgumentError):
        part("my-gpu")  # nothing half-added


def test_add_part_takes_power_and_price_and_old_parts_still_load():
    p = add_part("my-gpu", "gpu", source="test", **BASE_GPU, watts=650, usd=20000)
    try:
        assert p.watts == 650.0 and p.usd == 20000.0
        assert {"watts", "usd"} <= set(p.sources)
    finally:
        remove_part("my-gpu")
    q = add_part("my-gpu", "gpu", source="test", **BASE_GPU)  # fields optional: None
    try:
        assert q.watts is None and q.usd is None and "watts" not in q.sources
    finally:
        remove_part("my-gpu")
    with pytest.raises(InvalidArgumentError, match="optics_watts_per_cage must be a power >= 0 W, got -2"):
        add_part("my-nic", "nic", source="t", rate_Bps="400Gb/s", max_planes=1, ports_per_cage=1,
                 ethernet_port_Bps=None, host_Bps="64GB/s", protocols=["infiniband"], latency_s=0,
                 optics_watts_per_cage=-2)


# ---- budgets: closed forms --------------------------------------------------------------------


def rows(fabric):
    return {r["component"]: r for r in power.budget(fabric).to_pylist()}


def test_hgx_h100_board_is_8_gpus_of_700_watts_and_4_switch_chips():
    b = rows(fs.hgx_h100())
    assert b["gpu"]["count"] == 8 and b["gpu"]["total_watts"] == 8 * 700.0
    assert b["gpu"]["total_usd"] == 8 * 30000.0
    assert b["nvswitch"]["count"] == 4 and b["nvswitch"]["total_watts"] is None  # no public figure
    assert set(b) == {"gpu", "nvswitch"}  # no network


def test_nvl72_rack_is_72_gpus_and_18_chips():
    t = power.totals(fs.nvl72())
    assert t["gpu_watts"] == 72 * 1200.0
    assert t["nvswitch_watts"] == 18 * 200.0  # 9 trays x 2 chips
    assert t["total_watts"] == 72 * 1200.0 + 18 * 200.0
    assert t["network_watts"] == 0.0 and t["unknown_power"] == []


def test_cluster_network_components_are_count_times_watts():
    # 64 HGX H100 boards = 512 GPUs on Quantum-2 (64 x 400G): 512 / 32 = 16 leaves of 32 down + 32 up,
    # 32 x 16 = 512 uplinks over 16 spines of 32 ports... the leaf-spine cable count is 512.
    fabric = fs.cluster(domain="hgx-h100", n_domains=64, scale_out="quantum-2", tiers=2)
    out = fabric.structure["scale_out"]
    cables = out["n_leaves"] * out["leaf_up"]
    assert cables == 512
    b = rows(fabric)
    assert b["nic"]["count"] == 512 and b["nic"]["total_watts"] is None
    assert b["nic_optics"]["count"] == 512 and b["nic_optics"]["total_watts"] == 512 * 9.0
    native_ports = 512 + 2 * cables  # NIC-facing ports, both ends of each leaf-spine cable
    assert b["switch_optics"]["count"] == native_ports
    assert b["switch_optics"]["total_watts"] == native_ports * 17.0 / 2  # twin-port 17 W OSFP
    t = power.totals(fabric)
    assert t["network_watts"] is None and set(t["unknown_power"]) == {"nvswitch", "nic", "switch"}
    assert t["network_known_watts"] == 512 * 9.0 + native_ports * 8.5
    assert t["total_known_watts"] == 512 * 700.0 + t["network_known_watts"]


def test_a_user_switch_with_a_known_power_fills_the_network_total():
    base = {k: v for k, v in part("quantum-x800").items()}
    add_part("qx800-known", "switch", source="test", **{**base, "system_watts": 2000.0, "system_usd": 1e5})
    add_part("cx8-known", "nic", source="test", **{**dict(part("cx8")), "watts": 30.0})
    try:
        f = fs.cluster(domain="gb300-nvl72", n_domains=4, scale_out="qx800-known", nic="cx8-known")
        t = power.totals(f)
        n_sw = f.structure["scale_out"]["planes"] * sum(
            f.structure["scale_out"][k] for k in ("n_leaves", "n_spines", "n_cores"))
        assert t["switch_watts"] == 2000.0 * n_sw and t["switch_usd"] == 1e5 * n_sw
        assert t["nic_watts"] == 288 * 30.0
        assert t["network_watts"] == t["nic_watts"] + t["nic_optics_watts"] + t["switch_watts"] + t["switch_optics_watts"]
        assert "switch" not in t["unknown_power"]
    finally:
        remove_part("qx800-known")
        remove_part("cx8-known")


# ---- plans match built fabrics --------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    dict(domain="hgx-h100", n_domains=64, scale_out="quantum-2"),
    dict(domain="hgx-b300", n_domains=300, scale_out="quantum-x800", tiers=3),
    dict(domain="nvl72", n_domains=5, scale_out="sn5600", nic="cx7"),
    dict(domain="nvl576", n_domains=2, scale_out="quantum-x-photonics"),
    dict(domain="hgx-b200", n_domains=100, scale_out="quantum-2", tiers=3, oversubscription=(3, 2)),
    dict(domain="gb300-nvl72", n_domains=3, scale_out="spectrum-x-photonics-512", planes=2),
    # Oversubscribed tiers whose up ports follow the down ports in use (one leaf and pod not full).
    dict(domain="hgx-h100", n_domains=16, scale_out="quantum-2", tiers=2, oversubscription=2),
    dict(domain="nvl72", n_domains=1, scale_out="sn5600", nic="cx8", tiers=3, oversubscription=(3, 4)),
    dict(domain="hgx-b300", n_domains=300, scale_out="quantum-x800", tiers=3, oversubscription="3:1"),
])
def test_a_plan_counts_what_the_built_fabric_has(kwargs):
    built, plan = fs.cluster(**kwargs), power.plan_cluster(**kwargs)
    for tier in ("domain", "scale_out"):
        assert plan.structure[tier] == built.structure[tier], tier
    assert power.totals(plan) == power.totals(built)
    assert plan.describe().table.equals(built.describe().table)


def test_plan_cluster_refuses_what_cluster_refuses():
    with pytest.raises(InvalidArgumentError, match="n_domains"):
        power.plan_cluster(domain="nvl72", n_domains=0)
    with pytest.raises(InvalidArgumentError, match="sharp"):
        power.plan_cluster(domain="nvl72", n_domains=2, scale_out="sn5600", nic="cx7", sharp=True)


# ---- comparison table -------------------------------------------------------------------------


def test_compare_is_one_row_per_fabric_with_units_in_names_and_metadata():
    a = fs.cluster(domain="hgx-b300", n_domains=16, scale_out="quantum-x800")
    b = fs.cluster(domain="hgx-b300", n_domains=16, scale_out="quantum-x-photonics")
    t = power.compare([a, b, fs.hgx_h100()], names=["pluggable", "co-packaged", "board"])
    assert t.num_rows == 3 and t["fabric"].to_pylist() == ["pluggable", "co-packaged", "board"]
    for c in power.COMPONENTS:
        assert f"{c}_watts" in t.column_names and f"{c}_usd" in t.column_names
    units = {k.decode()[5:]: v.decode() for k, v in t.schema.metadata.items()}
    for name in t.column_names:
        if name.endswith("_watts") or name.endswith("_watts_per_gpu") or name == "watts_per_gpu":
            assert units[name] == "W" and t.schema.field(name).type == pa.float64()
        elif name.endswith("_usd"):
            assert units[name] == "USD"
    r = t.to_pylist()
    # The same Clos: only the switch optics differ, 15 W vs 4.5 W per 800G port.
    assert r[0]["switch_optics_watts"] / r[1]["switch_optics_watts"] == pytest.approx(15 / 4.5)
    assert r[0]["gpu_watts"] == r[1]["gpu_watts"] == 128 * 1200.0
    assert r[2]["watts_per_gpu"] is None  # NVSwitch3 power unknown
    assert r[2]["gpu_watts"] == 5600.0 and r[2]["network_watts"] == 0.0


@pytest.mark.parametrize("args, message", [
    (([],), "at least one fabric"),
    (("nvl72",), "must be a list of fabrics"),
    (([object()],), r"fabrics\[0\] must be a generated fabric"),
    (([fs.nvl72()], ["a", "b"]), "one name per fabric"),
    (([fs.nvl72(), fs.nvl72()], ["a", "a"]), "'a' appears twice"),
    (([fs.nvl72()], [3]), r"names\[0\] must be a non-empty string, got 3"),
])
def test_compare_bad_input(args, message):
    with pytest.raises(InvalidArgumentError, match=message):
        power.compare(*args)


# ---- the co-packaged optics claim at 1,048,576 GPUs -------------------------------------------


def test_cpo_claim_at_a_million_gpus_holds_to_count_times_watts():
    e = power.cpo_claim(1_048_576)
    # 131,072 HGX B300 boards, 8 rails; CX-8 over 2 planes of 400G on 144 x 800G switches:
    # radix 288, leaves of 144 down + 144 up. Per rail 131,072 endpoints -> ceil(131072 / 144)
    # = 911 blocks x 8 rails = 7,288 leaves; pods of 144 leaves -> 51 pods x 144 = 7,344
    # spines; cores: 144 groups x 36 (smallest divisor of 144 >= ceil(51 x 144 / 288) = 26).
    leaves, spines, cores = 911 * 8, math.ceil(7288 / 144) * 144, 144 * 36
    s = e.plans[0].structure["scale_out"]
    assert (s["planes"], s["n_leaves"], s["n_spines"], s["n_cores"]) == (2, leaves, spines, cores)
    # Native 800G ports in use: per plane, each endpoint's 400G port and both ends of every
    # leaf-spine and spine-core cable (144 up each), two 400G links per 800G port.
    native = 2 * (1_048_576 + 2 * leaves * 144 + 2 * spines * 144) // 2
    nic_cages = 1_048_576  # both CX-8 planes in one cage
    t = {r["scope"]: r for r in e.table.to_pylist()}
    assert t["optics per 800G switch port"]["pluggable_watts"] == 15.0
    assert t["optics per 800G switch port"]["co_packaged_watts"] == 4.5
    assert t["switch-side optics"]["pluggable_watts"] == native * 15.0
    assert t["switch-side optics"]["co_packaged_watts"] == native * 4.5
    assert t["switch-side optics"]["ratio"] == pytest.approx(30 / 9)
    both = t["all optics (switch side + NIC side)"]
    assert both["pluggable_watts"] == native * 15.0 + nic_cages * 15.0
    assert both["ratio"] == pytest.approx((native * 15 + nic_cages * 15) / (native * 4.5 + nic_cages * 15))
    # The 3.5x holds at no scope: 30 W / 9 W is 3.33x even for the module alone.
    assert [r["claim_holds"] for r in e.table.to_pylist()][:3] == [False, False, False]
    assert t["network (NICs, NIC optics, switches, switch optics)"]["ratio"] is None  # switch/NIC power unknown
    known = t["whole fabric, known parts only"]
    gpus, chips = 1_048_576 * 1200.0, 131_072 * 2 * 200.0
    assert known["pluggable_watts"] == gpus + chips + both["pluggable_watts"]
    assert "3.5x" in str(e) and e.comparison.num_rows == 2


def test_cpo_claim_bad_input():
    with pytest.raises(InvalidArgumentError, match="not a whole number of 8-GPU domains"):
        power.cpo_claim(1_000_001)
    with pytest.raises(InvalidArgumentError, match="co_packaged='quantum-2' must be a switch with co-packaged optics"):
        power.cpo_claim(1024, co_packaged="quantum-2")
    with pytest.raises(InvalidArgumentError, match="same ports"):
        power.cpo_claim(1024, pluggable="sn5600", co_packaged="quantum-x-photonics")


def test_describe_reports_every_part_and_the_total():
    d = {(r["section"], r["quantity"]): r["value"] for r in fs.nvl72().describe().table.to_pylist()}
    assert d["power", "GPUs"] == 72 * 1200.0 and d["power", "NVSwitch chips"] == 18 * 200.0
    assert d["power", "total"] == 90_000.0 and d["cost", "total"] is None  # GB200 price unknown
    text = str(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2").describe())
    assert "NIC-side optics" in text and "$960,000" in text and "unknown" in text


def test_typical_and_maximum_power_total_where_every_part_is_known():
    # Datasheet-style figures given by the user (the shipped switches' and NICs' are unknown):
    # typical and maximum, each counted over the structure.
    add_part("qm-known", "switch", source="test",
             **{**dict(part("quantum-2")), "system_watts": 750.0, "system_watts_max": 1100.0})
    add_part("cx7-known", "nic", source="test", **{**dict(part("cx7")), "watts": 20.0, "watts_max": 25.0})
    try:
        f = fs.cluster(domain="hgx-h100", n_domains=64, scale_out="qm-known", nic="cx7-known", tiers=2)
        out = f.structure["scale_out"]
        n_sw = out["n_leaves"] + out["n_spines"]
        native_ports = 512 + 2 * out["n_leaves"] * out["leaf_up"]
        optics = 512 * 9.0 + native_ports * 8.5  # the same figure typical and maximum
        t = power.totals(f)
        assert t["network_watts"] == 512 * 20.0 + n_sw * 750.0 + optics
        assert t["network_max_watts"] == 512 * 25.0 + n_sw * 1100.0 + optics
        assert t["unknown_max_power"] == ["nvswitch"]  # NVSwitch3's is not public: the total stays unknown
        assert t["total_max_watts"] is None and t["total_known_max_watts"] == 512 * 700.0 + t["network_max_watts"]
        b = {r["component"]: r for r in power.budget(f).to_pylist()}
        assert (b["switch"]["each_watts"], b["switch"]["each_max_watts"]) == (750.0, 1100.0)
        assert b["nic"]["total_max_watts"] == 512 * 25.0 and b["nic"]["max_watts_source"] == "test"
        d = {(r["section"], r["quantity"]): r["value"] for r in f.describe().table.to_pylist()}
        assert d["power", "network (NICs, their optics, switches, switch optics)"] == t["network_watts"]
        assert d["power", "network at maximum (NICs and switches at their datasheet maximum)"] == t["network_max_watts"]
        row = power.compare([f]).to_pylist()[0]
        assert row["network_max_watts"] == t["network_max_watts"] and row["network_watts_per_gpu"] == t["network_watts"] / 512
        # Without a maximum the maximum is unknown, the typical still known.
        add_part("cx7-typical", "nic", source="test", **{**dict(part("cx7")), "watts": 20.0})
        g = fs.cluster(domain="hgx-h100", n_domains=64, scale_out="qm-known", nic="cx7-typical", tiers=2)
        assert power.totals(g)["network_watts"] == t["network_watts"] and power.totals(g)["network_max_watts"] is None
    finally:
        for name in ("qm-known", "cx7-known", "cx7-typical"):
            try:
                remove_part(name)
            except InvalidArgumentError:
                pass


def test_the_network_scope_of_the_cpo_claim_is_known_once_its_parts_are():
    add_part("cx8-known", "nic", source="test", **{**dict(part("cx8")), "watts": 30.0, "watts_max": 40.0})
    add_part("qx-known", "switch", source="test", **{**dict(part("quantum-x800")), "system_watts": 2000.0})
    add_part("qxp-known", "switch", source="test", **{**dict(part("quantum-x-photonics")), "system_watts": 2000.0})
    try:
        gpu = dict(part("b300"))
        add_part("b300-known", "gpu", source="test", **{**gpu, "nic": "cx8-known"})
        domain = {"gpu": "b300-known", "switch": "nvlink5-switch", "chip_links": [9, 9], "n_gpus": 8}
        e = power.cpo_claim(8192, domain=domain, pluggable="qx-known", co_packaged="qxp-known")
        t = {r["scope"]: r for r in e.table.to_pylist()}
        net = t["network (NICs, NIC optics, switches, switch optics)"]
        p, c = (power.totals(plan) for plan in e.plans)
        assert net["pluggable_watts"] == p["nic_watts"] + p["nic_optics_watts"] + p["switch_watts"] + p["switch_optics_watts"]
        assert net["ratio"] == pytest.approx(p["network_watts"] / c["network_watts"])
        # Switch ASICs and NICs draw the same in both builds: the network gains less than the optics.
        assert 1 < net["ratio"] < t["all optics (switch side + NIC side)"]["ratio"]
    finally:
        for name in ("b300-known", "cx8-known", "qx-known", "qxp-known"):
            remove_part(name)
