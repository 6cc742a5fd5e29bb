"""fabricsim.catalog: the shipped figures, their sources, lookup, and user parts."""

from __future__ import annotations

import copy
import json
import math
import pickle

import pyarrow as pa
import pytest

from fabricsim import catalog
from fabricsim.fabrics.catalog import add_part, kinds, load_parts, part, parts, remove_part
from fabricsim.exceptions import InvalidArgumentError, UnknownPartError

SHIPPED_COUNTS = {
    "gpu": 7,
    "nvswitch": 2,
    "nic": 2,
    "switch": 6,
    "optic": 5,
    "efficiency": 4,
    "pcie": 2,
}
SOURCE_TAGS = ("http://", "https://", "[2nd] ", "[derived] ", "[assumed] ", "[no source] ")


@pytest.fixture(autouse=True)
def no_user_parts():
    """Every test starts and ends with the shipped catalog only."""
    yield
    table = parts()
    for name, origin in zip(table["name"].to_pylist(), table["origin"].to_pylist()):
        if origin == "user":
            remove_part(name)


def shipped_document() -> dict:
    with open(catalog.__file__.replace("catalog.py", "data/catalog.json"), encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------------
# Shipped figures
# ---------------------------------------------------------------------------------------------


def test_h100_nvlink_is_18_links_of_25_GBps_per_direction():
    h100 = part("h100")
    assert (h100.nvlink_generation, h100.nvlink_links, h100.nvlink_link_Bps) == (4, 18, 25e9)
    assert h100.nvlink_links * h100.nvlink_link_Bps == 450e9
    assert h100.nic == "cx7" and h100.arch == "hopper"


@pytest.mark.parametrize("gpu", ["b200", "gb200", "gb300", "b300"])
def test_blackwell_nvlink_is_18_links_of_50_GBps_so_900_GBps_per_gpu(gpu):
    p = part(gpu)
    assert (p.nvlink_generation, p.nvlink_links, p.nvlink_link_Bps) == (5, 18, 50e9)
    assert p.nvlink_links * p.nvlink_link_Bps == 900e9
    assert p.arch == "blackwell"


def test_nvl72_link_census_matches_the_switch_chips():
    # 72 GPUs x 18 links = 18 chips x 72 ports, each GPU one link to each chip.
    gpu, chip = part("gb200"), part("nvlink5-switch")
    assert 72 * gpu.nvlink_links == 18 * chip.ports
    assert chip.port_Bps == gpu.nvlink_link_Bps
    assert 72 * gpu.nvlink_links * gpu.nvlink_link_Bps == 64.8e12  # per direction; 130 TB/s both ways


def test_gb300_uses_connectx8_and_the_others_connectx7():
    assert part("gb300").nic == "cx8"
    for gpu in ("h100", "h200", "b200", "gb200"):
        assert part(gpu).nic == "cx7"


def test_nvswitch_chips():
    nvs3, nvl5 = part("nvswitch3"), part("nvlink5-switch")
    assert (nvs3.ports, nvs3.port_Bps, nvs3.nvlink_generation, nvs3.sharp) == (64, 25e9, 4, True)
    assert (nvl5.ports, nvl5.port_Bps, nvl5.nvlink_generation, nvl5.sharp) == (72, 50e9, 5, True)
    # 64 x 50 GB/s bidirectional = 3.2 TB/s; 72 x 100 GB/s = 7.2 TB/s.
    assert 2 * nvs3.ports * nvs3.port_Bps == 3.2e12
    assert 2 * nvl5.ports * nvl5.port_Bps == 7.2e12


@pytest.mark.parametrize(
    "name, ports, port_Bps, protocol, radix_at_breakout",
    [
        ("quantum-2", 64, 50e9, "infiniband", 128),
        ("quantum-x800", 144, 100e9, "infiniband", 576),
        ("quantum-x-photonics", 144, 100e9, "infiniband", 576),
        ("sn5600", 64, 100e9, "ethernet", 256),
        ("spectrum-x-photonics-128", 128, 100e9, "ethernet", 512),
        ("spectrum-x-photonics-512", 512, 100e9, "ethernet", 2048),
    ],
)
def test_switch_ports_and_breakout_radix(name, ports, port_Bps, protocol, radix_at_breakout):
    sw = part(name)
    assert (sw.ports, sw.port_Bps, sw.protocol) == (ports, port_Bps, protocol)
    assert sw.ports * sw.port_Bps / sw.lane_Bps == radix_at_breakout


def test_switch_capacities_in_tbps():
    def tbps(name):
        sw = part(name)
        return sw.ports * sw.port_Bps * 8 / 1e12

    assert tbps("quantum-2") == pytest.approx(25.6)  # 51.2 Tb/s counting both directions
    assert tbps("sn5600") == pytest.approx(51.2)
    assert tbps("quantum-x800") == pytest.approx(115.2)
    assert tbps("spectrum-x-photonics-128") == pytest.approx(102.4)
    assert tbps("spectrum-x-photonics-512") == pytest.approx(409.6)


def test_infiniband_switches_reduce_in_network_and_ethernet_ones_do_not():
    for name in ("quantum-2", "quantum-x800", "quantum-x-photonics"):
        assert part(name).sharp is True
    for name in ("sn5600", "spectrum-x-photonics-128", "spectrum-x-photonics-512"):
        assert part(name).sharp is False
        assert part(name).adaptive_routing is True


def test_nics():
    cx7, cx8 = part("cx7"), part("cx8")
    assert (cx7.rate_Bps, cx7.max_planes, cx7.host_Bps) == (50e9, 1, 64e9)
    assert (cx8.rate_Bps, cx8.max_planes, cx8.host_Bps) == (100e9, 2, 128e9)
    assert cx8.rate_Bps / cx8.max_planes == 50e9  # 2 x 400G planes
    assert (cx7.ethernet_port_Bps, cx8.ethernet_port_Bps) == (50e9, 50e9)  # no 800GbE port
    assert cx7.protocols == ("infiniband", "ethernet")


def test_co_packaged_optics_use_about_a_third_of_the_power_of_pluggables():
    pluggable, cpo = part("pluggable-1.6t"), part("cpo-1.6t")
    assert (pluggable.form, cpo.form) == ("pluggable", "co-packaged")
    assert pluggable.rate_Bps == cpo.rate_Bps == 200e9
    assert pluggable.watts / cpo.watts == pytest.approx(30 / 9)
    # The same ratio per native 800G switch port.
    assert part("quantum-x800").optics_watts_per_port / part(
        "quantum-x-photonics"
    ).optics_watts_per_port == pytest.approx(30 / 9)
    assert part("quantum-x800").optics == "pluggable"
    assert part("quantum-x-photonics").optics == "co-packaged"


def test_transceiver_watts():
    assert part("osfp-400g-dr4").watts == 9.0
    assert part("osfp-800g-2xsr4").watts == 15.0
    assert part("osfp-800g-2xdr4").watts == 17.0
    # Quantum-2's twin-port 17 W cage serves two native 400G ports.
    assert part("quantum-2").optics_watts_per_port == 17.0 / 2


def test_transceiver_cages():
    # Twin-port cages: 64 Quantum-2 ports in 32, 144 Quantum-X800 ports in 72 (so 30 W per
    # 1.6T transceiver is 15 W per port); one 800G SN5600 port per cage; none on co-packaged
    # optics. A ConnectX-7 has one single-port cage, a ConnectX-8 one cage for both planes.
    cages = {name: part(name).ports_per_cage for name in parts("switch")["name"].to_pylist()}
    assert cages == {"quantum-2": 2, "quantum-x800": 2, "sn5600": 1, "spectrum-x-photonics-128": None,
                     "spectrum-x-photonics-512": None, "quantum-x-photonics": None}
    assert part("quantum-x800").optics_watts_per_port * 2 == part("pluggable-1.6t").watts
    assert (part("cx7").ports_per_cage, part("cx8").ports_per_cage) == (1, 2)
    with pytest.raises(InvalidArgumentError, match="pluggable optics needs ports_per_cage"):
        add_part("my-switch", "switch", source="s", **{**MY_SWITCH, "ports_per_cage": None})
    assert add_part("my-cpo", "switch", source="s", **{**MY_SWITCH, "optics": "co-packaged",
                                                      "ports_per_cage": None}).ports_per_cage is None


def test_efficiency_factors():
    assert part("nvlink4-payload").value == pytest.approx(20.6 / 25)
    assert part("nvlink5-payload").value == pytest.approx(40.1 / 50)
    # Both scale-out figures are header arithmetic of a 4096-byte packet on the wire (the same
    # kind of source, said in each): InfiniBand LRH 8, BTH 12, ICRC 4, VCRC 2 and two
    # delimiters; RoCEv2 preamble+SFD 8, Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4, FCS 4,
    # inter-frame gap 12. Lighter headers: InfiniBand carries more payload than RoCE.
    ib, eth = part("infiniband"), part("ethernet")
    assert ib.value == pytest.approx(4096 / (4096 + 8 + 12 + 4 + 2 + 2), rel=1e-6)
    assert eth.value == pytest.approx(4096 / (4096 + 8 + 14 + 20 + 8 + 12 + 4 + 4 + 12), rel=1e-6)
    assert ib.value > eth.value
    for p in (ib, eth):
        assert p.sources["value"].startswith("[derived] header arithmetic of the wire format: 4096 / (4096 + ")
        assert "per-packet header overhead at the 4096-byte" in p.description
    for gpu, eff in (("h100", "nvlink4-payload"), ("gb300", "nvlink5-payload")):
        assert part(gpu).nvlink_efficiency == eff
    # H100: 18 x 25 x 0.824 = 370.8 GB/s, NCCL's effective NVLink bandwidth.
    h100 = part("h100")
    effective = h100.nvlink_links * h100.nvlink_link_Bps * part(h100.nvlink_efficiency).value
    assert effective == pytest.approx(370.8e9)


def test_pcie():
    assert part("pcie-gen5-x16").rate_Bps == 64e9
    assert part("pcie-gen6-x16").rate_Bps == 128e9
    assert part("cx7").host_Bps == part("pcie-gen5-x16").rate_Bps
    assert part("cx8").host_Bps == part("pcie-gen6-x16").rate_Bps


def test_latencies_are_seconds():
    assert part("quantum-2").latency_s == 150e-9
    assert part("sn5600").latency_s == 300e-9
    assert part("nvswitch3").latency_s == 0.6e-6
    for name in parts("switch")["name"].to_pylist():
        assert 0 < part(name).latency_s < 1e-5


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------


def test_every_numeric_and_boolean_field_of_every_entry_has_a_tagged_source():
    checked = 0
    for name in parts()["name"].to_pylist():
        p = part(name)
        for field, value in p.items():
            if isinstance(value, (int, float, bool)) or value is None:
                source = p.sources.get(field, "")
                assert source.startswith(SOURCE_TAGS), (name, field, source)
                assert len(source) > len("[derived] ") + 5, (name, field, source)
                checked += 1
    assert checked > 100


def test_no_source_is_only_for_null_values():
    for name in parts("switch")["name"].to_pylist():
        p = part(name)
        for field, source in p.sources.items():
            assert (p[field] is None) == source.startswith("[no source]"), (name, field)


def test_shipped_file_keys_are_canonical_and_aliases_resolve():
    doc = shipped_document()
    for name in doc["parts"]:
        assert name == name.strip().lower()
        assert part(name).name == name
    for alias, target in doc["aliases"].items():
        assert part(alias) is part(target)


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda d: d["parts"]["h100"]["sources"].pop("nvlink_links"), "nvlink_links"),
        (lambda d: d["parts"]["h100"]["sources"].update(nvlink_links="trust me"), "trust me"),
        (lambda d: d["parts"]["cx7"].update(rate_Bps=-5e10), "-5"),
        (lambda d: d["parts"]["cx7"].pop("max_planes"), "max_planes"),
        (lambda d: d["parts"]["cx7"].update(colour="green"), "colour"),
        (lambda d: d["parts"]["h100"].update(nic="cx9"), "cx9"),
        (lambda d: d["parts"]["h100"].update(nvlink_efficiency="cx7"), "is a nic"),
        (lambda d: d["parts"]["ethernet"].update(value=1.5), "1.5"),
        (lambda d: d["parts"]["sn5600"].update(kind="router"), "router"),
        (lambda d: d["parts"]["sn5600"].update(lane_Bps=30e9), "lane_Bps"),
        (lambda d: d["parts"]["sn5600"]["sources"].update(ports="[no source] none"), "only for null"),
        (lambda d: d["aliases"].update(qm9700="quantum-9"), "quantum-9"),
        (lambda d: d["parts"].update(H100=d["parts"]["h100"]), "lowercase"),
    ],
)
def test_a_broken_shipped_file_fails_loudly(corrupt, message):
    doc = shipped_document()
    corrupt(doc)
    with pytest.raises(InvalidArgumentError) as err:
        found, aliases = catalog._parse_document(doc, "test", origin="shipped")
        for alias, target in aliases.items():
            if target not in found:
                raise InvalidArgumentError(f"alias {alias!r} points to unknown part {target!r}")
        catalog._check_refs(found, lambda n: (n, found[n]) if n in found else None, {})
    assert message in str(err.value)


def test_the_shipped_file_loads_as_is():
    # The same checks as at import, on an untouched copy, must pass.
    found, _ = catalog._parse_document(shipped_document(), "test", origin="shipped")
    assert len(found) == sum(SHIPPED_COUNTS.values())


# ---------------------------------------------------------------------------------------------
# Lookup and the Part object
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "alias, canonical",
    [
        ("qm9700", "quantum-2"),
        ("QM9790", "quantum-2"),
        ("q3400", "quantum-x800"),
        ("Q3400-RA", "quantum-x800"),
        ("spectrum-4", "sn5600"),
        ("q3450", "quantum-x-photonics"),
        ("ConnectX-8", "cx8"),
        ("  H100 ", "h100"),
        ("GB300", "gb300"),
        ("NVSwitch3", "nvswitch3"),
    ],
)
def test_lookup_is_case_insensitive_and_alias_aware(alias, canonical):
    assert part(alias).name == canonical
    assert part(alias) is part(canonical)


def test_unknown_part_names_close_matches_and_kinds():
    with pytest.raises(InvalidArgumentError) as err:
        part("h1000")
    text = str(err.value)
    assert "'h1000'" in text and "h100" in text
    for kind in kinds():
        assert kind in text
    assert isinstance(err.value, ValueError)


def test_unknown_part_error_is_the_dedicated_class():
    with pytest.raises(UnknownPartError):
        part("quantum-9")


def test_part_is_read_only_with_attribute_and_mapping_access():
    p = part("sn5600")
    assert p["ports"] == p.ports == 64
    assert dict(p) == {k: getattr(p, k) for k in kinds()["switch"]}
    assert list(p) == list(kinds()["switch"])
    assert len(p) == len(kinds()["switch"])
    assert "ports" in p and "colour" not in p
    assert p.get("colour") is None
    assert p.kind == "switch" and p.origin == "shipped" and "Spectrum-4" in p.description
    assert p.sources["ports"].startswith("https://docs.nvidia.com")
    with pytest.raises(AttributeError, match="read-only"):
        p.ports = 128  # type: ignore[misc]
    with pytest.raises(AttributeError, match="read-only"):
        del p.ports
    with pytest.raises(TypeError):
        p.sources["ports"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        p["ports"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError, match="colour"):
        p.colour  # noqa: B018
    with pytest.raises(KeyError, match="colour"):
        p["colour"]


def test_part_repr_names_it_and_shows_units():
    text = repr(part("h100"))
    assert text.startswith("Part('h100', kind='gpu'")
    assert "nvlink_links=18" in text and "(25 GB/s)" in text
    assert "(150 ns)" in repr(part("quantum-2"))


def test_part_copies_pickles_and_compares_by_value():
    p = part("cx8")
    assert copy.copy(p) == p and copy.deepcopy(p) == p
    assert pickle.loads(pickle.dumps(p)) == p
    assert hash(copy.copy(p)) == hash(p)
    assert p != part("cx7")


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(SHIPPED_COUNTS))
def test_parts_of_a_kind_has_one_typed_column_per_field(kind):
    table = parts(kind)
    assert isinstance(table, pa.Table)
    assert table.column_names == ["name", "kind", "origin", "description", *kinds()[kind]]
    assert table.num_rows == SHIPPED_COUNTS[kind]
    assert table["name"].to_pylist() == sorted(table["name"].to_pylist())
    assert set(table["kind"].to_pylist()) == {kind}


def test_parts_column_types():
    schema = parts("switch").schema
    assert schema.field("ports").type == pa.int64()
    assert schema.field("port_Bps").type == pa.float64()
    assert schema.field("sharp").type == pa.bool_()
    assert schema.field("protocol").type == pa.string()
    assert parts("switch")["system_watts"].null_count == SHIPPED_COUNTS["switch"]
    assert parts("nic").schema.field("protocols").type == pa.list_(pa.string())


def test_all_parts_table():
    table = parts()
    assert table.column_names == ["name", "kind", "origin", "description", "fields"]
    assert table.num_rows == sum(SHIPPED_COUNTS.values())
    assert set(table["origin"].to_pylist()) == {"shipped"}
    rows = {r["name"]: r for r in table.to_pylist()}
    assert json.loads(rows["h100"]["fields"])["nvlink_links"] == 18
    # Ordered by kind (in kinds() order), then name.
    order = list(kinds())
    keys = [(order.index(k), n) for k, n in zip(table["kind"].to_pylist(), table["name"].to_pylist())]
    assert keys == sorted(keys)


def test_parts_of_an_unknown_kind():
    with pytest.raises(InvalidArgumentError, match="'swtich'.*did you mean 'switch'"):
        parts("swtich")


# ---------------------------------------------------------------------------------------------
# User parts
# ---------------------------------------------------------------------------------------------

MY_SWITCH = dict(
    protocol="ethernet",
    ports=64,
    port_Bps="800Gb/s",
    lane_Bps="200Gb/s",
    optics="pluggable",
    ports_per_cage=1,
    optics_watts_per_port=16.5,
    system_watts=1500,
    latency_s="600ns",
    sharp=False,
    adaptive_routing=False,
)


def test_add_part_parses_units_and_lists_it():
    p = add_part("tomahawk-5", "switch", source="vendor datasheet", description="51.2T box",
                 **MY_SWITCH)
    assert p.port_Bps == 100e9 and p.lane_Bps == 25e9 and p.latency_s == pytest.approx(600e-9)
    assert p.system_watts == 1500.0 and isinstance(p.system_watts, float)
    assert p.origin == "user" and p.description == "51.2T box"
    assert set(p.sources) == {
        "ports", "port_Bps", "lane_Bps", "ports_per_cage", "optics_watts_per_port", "system_watts",
        "latency_s", "sharp", "adaptive_routing",
    }
    assert part("Tomahawk-5") is p
    table = parts("switch")
    assert table.num_rows == SHIPPED_COUNTS["switch"] + 1
    row = table.filter(pa.compute.equal(table["name"], "tomahawk-5")).to_pylist()[0]
    assert row["origin"] == "user" and row["port_Bps"] == 100e9
    remove_part("tomahawk-5")
    assert parts("switch").num_rows == SHIPPED_COUNTS["switch"]
    with pytest.raises(InvalidArgumentError, match="tomahawk-5"):
        part("tomahawk-5")


def test_add_part_with_per_field_sources_and_references():
    lab = {f: "lab measurement" for f in ("rate_Bps", "max_planes", "ports_per_cage", "ethernet_port_Bps", "host_Bps",
                                          "latency_s")}
    add_part("my-nic", "nic", source=lab, rate_Bps="200Gb/s", max_planes=1, ports_per_cage=1,
             ethernet_port_Bps="200Gb/s", host_Bps="32GB/s", protocols=["Ethernet"], latency_s="1us")
    gpu = add_part("my-gpu", "gpu", source="spec sheet", nvlink_generation=4, nvlink_links=12,
                   nvlink_link_Bps="25GB/s", nvlink_efficiency="nvlink4-payload", nic="MY-NIC",
                   pcie_Bps="32GB/s", arch="Hopper")
    assert gpu.nic == "my-nic" and gpu.arch == "hopper"
    assert part("my-nic").protocols == ("ethernet",)
    # A reference through an alias is stored under the canonical name.
    assert add_part("my-gpu2", "gpu", source="x", **{**dict(gpu), "nic": "connectx-8"}).nic == "cx8"
    with pytest.raises(InvalidArgumentError, match="'my-gpu'.*refer to it"):
        remove_part("my-nic")


def test_user_parts_round_trip_through_load_parts(tmp_path):
    original = add_part("tomahawk-5", "switch", source={k: f"src {k}" for k in MY_SWITCH}, **MY_SWITCH)
    path = tmp_path / "mine.json"
    doc = {"parts": {"tomahawk-5": original.to_dict()}, "aliases": {"th5": "tomahawk-5"}}
    path.write_text(json.dumps(doc))
    remove_part("tomahawk-5")
    (loaded,) = load_parts(path)
    assert loaded == original
    assert part("TH5") is loaded
    remove_part("th5")  # through the alias
    with pytest.raises(InvalidArgumentError):
        part("th5")


def test_load_parts_reads_the_shipped_format_with_unit_strings(tmp_path):
    path = tmp_path / "optics.json"
    entry = {"kind": "optic", "description": "linear pluggable", "rate_Bps": "800Gb/s", "watts": 8,
             "form": "pluggable", "sources": {"rate_Bps": "datasheet", "watts": "datasheet"}}
    path.write_text(json.dumps({"parts": {"lpo-800g": entry}}))
    (p,) = load_parts(str(path))
    assert (p.rate_Bps, p.watts, p.form, p.description) == (100e9, 8.0, "pluggable", "linear pluggable")


@pytest.mark.parametrize("bad", [None, 2.5, ""])
def test_load_parts_wants_a_path(bad):
    # open() takes an int for a file descriptor: load_parts(True) read stdout and closed it.
    # None and 2.5 gave open()'s TypeError, "" a message about a file named ''.
    with pytest.raises(InvalidArgumentError, match=r"^path must be a path \(a non-empty str or os.PathLike\), got "):
        load_parts(bad)


def test_load_parts_replace_is_true_or_false(tmp_path):
    # replace="no" was truthy: the file's parts replaced shipped ones.
    path = tmp_path / "pcie.json"
    entry = {"kind": "pcie", "rate_Bps": "1GB/s", "sources": {"rate_Bps": "made up"}}
    path.write_text(json.dumps({"parts": {"pcie-gen5-x16": entry}}))
    with pytest.raises(InvalidArgumentError, match="^replace must be True or False, got str 'no'$"):
        load_parts(path, replace="no")
    assert part("pcie-gen5-x16").rate_Bps == 64e9


def test_a_bad_file_adds_nothing(tmp_path):
    good = {"kind": "pcie", "rate_Bps": "32GB/s", "sources": {"rate_Bps": "spec"}}
    bad = {"kind": "pcie", "rate_Bps": "-1GB/s", "sources": {"rate_Bps": "spec"}}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"parts": {"pcie-gen4-x16": good, "pcie-gen0": bad}}))
    with pytest.raises(InvalidArgumentError, match="pcie-gen0.*-1GB/s"):
        load_parts(path)
    with pytest.raises(InvalidArgumentError):
        part("pcie-gen4-x16")
    path.write_text("{not json")
    with pytest.raises(InvalidArgumentError, match="not valid JSON"):
        load_parts(path)
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        load_parts(tmp_path / "missing.json")


def test_replace_shadows_a_shipped_part_until_removed():
    with pytest.raises(InvalidArgumentError, match="'cx7' is a shipped nic part.*replace=True"):
        add_part("cx7", "nic", source="x", rate_Bps="200Gb/s", max_planes=1, ports_per_cage=1, host_Bps="64GB/s",
                 ethernet_port_Bps=None, protocols=["infiniband"], latency_s=0)
    mine = add_part("CX7", "nic", source="x", replace=True, rate_Bps="200Gb/s", max_planes=1, ports_per_cage=1,
                    ethernet_port_Bps=None, host_Bps="64GB/s", protocols=["infiniband"], latency_s=0)
    assert part("cx7") is mine and part("connectx-7") is mine
    assert parts("nic").num_rows == SHIPPED_COUNTS["nic"]
    remove_part("cx7")
    assert part("cx7").rate_Bps == 50e9 and part("cx7").origin == "shipped"
    with pytest.raises(InvalidArgumentError, match="'qm9700' is an alias of shipped part 'quantum-2'"):
        add_part("qm9700", "switch", source="x", **MY_SWITCH)


def test_replacing_a_referenced_part_with_another_kind_is_refused():
    with pytest.raises(InvalidArgumentError, match="'h100'.*refer to it"):
        add_part("cx7", "pcie", source="x", replace=True, rate_Bps=1e9)


VALID_PCIE = dict(name="pcie-x", kind="pcie", source="s", rate_Bps=1e9)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(kind="router"), "unknown kind 'router'"),
        (dict(kind="swich"), "did you mean 'switch'"),
        (dict(rate_Bps=None), "rate_Bps"),
        (dict(speed_Bps=1e9), "'speed_Bps'"),
        (dict(rate_Bps=-5e9), "-5000000000.0"),
        (dict(rate_Bps=0), "rate > 0"),
        (dict(rate_Bps=math.nan), "nan"),
        (dict(rate_Bps="fast"), "'fast'"),
        (dict(rate_Bps="100Gm/s"), "Gm/s"),
        (dict(rate_Bps=True), "rate_Bps"),
        (dict(source=""), "source"),
        (dict(source={"watts": "x"}), "'watts'"),
        (dict(source={}), "no source for field(s) 'rate_Bps'"),
        (dict(name="bad name!"), "'bad name!'"),
        (dict(name=""), "''"),
        (dict(name="pcie-gen5-x16"), "'pcie-gen5-x16' is a shipped pcie part"),
    ],
)
def test_bad_input_names_the_bad_value(change, message):
    args = {**VALID_PCIE, **change}
    if change.get("rate_Bps", 0) is None:
        del args["rate_Bps"]
    with pytest.raises(InvalidArgumentError) as err:
        add_part(args.pop("name"), args.pop("kind"), **args)
    assert message in str(err.value)


NIC = dict(rate_Bps=1e9, max_planes=1, ports_per_cage=1, ethernet_port_Bps=1e9, host_Bps=1e9, protocols=["ethernet"], latency_s=0)
GPU = dict(nvlink_generation=4, nvlink_links=18, nvlink_link_Bps=25e9,
           nvlink_efficiency="nvlink4-payload", nic="cx7", pcie_Bps=64e9, arch="hopper")
OPTIC = dict(rate_Bps=1e9, watts=5, form="pluggable")


@pytest.mark.parametrize(
    "kind, fields, message",
    [
        ("efficiency", dict(value=1.5, applies_to="x"), "(0, 1], got 1.5"),
        ("efficiency", dict(value=0, applies_to="x"), "got 0"),
        ("efficiency", dict(value=0.9, applies_to=""), "applies_to"),
        ("nic", {**NIC, "max_planes": 0}, "max_planes must be a whole number in [1, 2**32), got 0"),
        # Beyond int64 (parts() failed) and the float range (the fabric builders failed).
        ("nic", {**NIC, "max_planes": 10**400}, "max_planes must be a whole number in [1, 2**32), "
                                                "got 100000000000... (an int of 401 digits)"),
        ("nic", {**NIC, "rate_Bps": 10**400}, "rate_Bps: bandwidth must be a number (of bytes/s) or a string "
                                              "with a unit, got 100000000000... (an int of 401 digits), beyond"),
        ("optic", {**OPTIC, "watts": 10**400}, "watts must be a number (within the float range), got int "
                                               "100000000000... (an int of 401 digits)"),
        ("nic", {**NIC, "max_planes": 1.5}, "got 1.5"),
        ("nic", {**NIC, "protocols": ["myrinet"]}, "'myrinet'"),
        ("nic", {**NIC, "protocols": "ethernet"}, "non-empty list"),
        ("nic", {**NIC, "protocols": []}, "non-empty list"),
        ("nic", {**NIC, "protocols": ["ethernet", "Ethernet"]}, "twice"),
        ("nic", {**NIC, "latency_s": "-1ns"}, "'-1ns'"),
        ("nic", {**NIC, "latency_s": -1e-9}, "duration >= 0"),
        ("optic", {**OPTIC, "watts": 0}, "power > 0 W, got 0"),
        ("optic", {**OPTIC, "form": "glued"}, "'glued'"),
        ("switch", {**MY_SWITCH, "sharp": "yes"}, "sharp must be True or False, got str 'yes'"),
        ("switch", {**MY_SWITCH, "lane_Bps": "300Gb/s"}, "lane_Bps 37500000000.0 must divide"),
        ("switch", {**MY_SWITCH, "optics_watts_per_port": -1}, "must be a power >= 0 W, got -1"),
        ("gpu", {**GPU, "nic": "cx9"}, "nic 'cx9' is not a known nic part"),
        ("gpu", {**GPU, "nvlink_efficiency": "cx7"}, "nvlink_efficiency 'cx7' is a nic, not a"),
        ("gpu", {**GPU, "arch": "volta"}, "'volta'"),
    ],
)
def test_bad_field_values_name_the_field_and_value(kind, fields, message):
    with pytest.raises(InvalidArgumentError) as err:
        add_part("my-part", kind, source="s", **fields)
    assert message in str(err.value)
    with pytest.raises(InvalidArgumentError):
        part("my-part")


def test_missing_field_is_named():
    fields = {k: v for k, v in MY_SWITCH.items() if k != "lane_Bps"}
    with pytest.raises(InvalidArgumentError, match="missing field.*'lane_Bps'"):
        add_part("my-switch", "switch", source="s", **fields)


def test_duplicate_name_needs_replace():
    add_part("pcie-x", "pcie", source="s", rate_Bps=1e9)
    with pytest.raises(InvalidArgumentError, match="user pcie part 'pcie-x' already exists.*replace=True"):
        add_part("PCIE-X", "pcie", source="s", rate_Bps=2e9)
    assert part("pcie-x").rate_Bps == 1e9
    assert add_part("pcie-x", "pcie", source="s", rate_Bps=2e9, replace=True).rate_Bps == 2e9


def test_shipped_parts_cannot_be_removed():
    with pytest.raises(InvalidArgumentError, match="cannot remove 'h100': it is a shipped part"):
        remove_part("h100")
    with pytest.raises(InvalidArgumentError, match="cannot remove 'qm9700': it is a shipped part"):
        remove_part("qm9700")
    with pytest.raises(InvalidArgumentError, match="no catalog part named 'nothing'"):
        remove_part("nothing")
    assert part("h100").origin == "shipped"


def test_a_part_shows_flop_rates_as_rates_and_memory_as_bytes():
    # bf16_dense_flop_per_s ends in "_s" and was shown as a duration ("(2.749e+11 h)").
    from fabricsim import catalog

    shown = repr(catalog.part("h100"))
    assert "bf16_dense_flop_per_s=9.895e+14 (989.5 TFLOP/s)" in shown
    assert " h)" not in shown
    assert "hbm_bytes=8.55208e+10 (79.65 GiB)" in shown   # 81,559 MiB, as nvidia-smi reports it
