"""Links and nodes by name: the links table of a fabric, selection by its columns for faults,
names beside the ids of result tables (dictionary columns over the ids themselves), node names
sliced, and NetworkX out and back."""

import numpy as np
import pyarrow as pa
import pytest

import fabricsim as fs


@pytest.fixture(scope="module")
def pod():
    # 64 HGX H100 boards on Quantum-2: 512 NICs on 16 leaves (2 per rail) and 16 spines.
    return fs.cluster(domain="hgx-h100", n_domains=64, scale_out="quantum-2")


def test_the_links_table_says_what_each_link_is(pod):
    links = pod.links
    assert links.num_rows == pod.n_links
    rows = links.slice(0, 2).to_pylist()
    # HGX H100: GPU 0 has 5 links to NVSwitch chip 0 (plane 0), each a cable of two links.
    assert rows[0] | {"capacity_Bps": None, "latency_s": None} == dict(
        link_id=0, src=0, dst=1024, src_name="gpu0", dst_name="d0.nvswitch0", kind="scale_up",
        tier="gpu-nvswitch", direction="up", plane=0, rail=None, domain=0, capacity_Bps=None, latency_s=None)
    assert rows[1]["direction"] == "down" and rows[1]["src_name"] == "d0.nvswitch0"
    counts = {t: n for t, n in zip(*np.unique(links["tier"].to_numpy(zero_copy_only=False).astype(str),
                                                  return_counts=True))}
    s = pod.structure
    dom, so = s["domain"], s["scale_out"]
    # Every count from the structure: 18 NVLinks per GPU, one GPU-NIC cable per GPU, one NIC
    # cable per NIC, every leaf's up ports, each a cable of two links.
    assert counts == {
        "gpu-nvswitch": 2 * 512 * sum(dom["endpoint_links"]),
        "gpu-nic": 2 * 512,
        "nic-leaf": 2 * 512,
        "leaf-spine": 2 * so["n_leaves"] * so["leaf_up"],
    }
    # A row's names are its ids' names.
    sample = links.take([0, 9000, pod.n_links - 1])
    assert sample["src_name"].to_pylist() == pod.names_of(sample["src"])
    assert sample["dst_name"].to_pylist() == pod.names_of(sample["dst"])


def test_rails_planes_and_domains_follow_the_layout(pod):
    links = pod.links
    nic = links.filter(pa.compute.equal(links["tier"], "nic-leaf"))
    src, dst = nic["src"].to_numpy(), nic["dst"].to_numpy()
    up = np.array(nic["direction"].to_pylist()) == "up"
    endpoint = np.where(up, src, dst) - pod.n_gpus  # NIC i serves GPU i
    assert np.array_equal(nic["rail"].to_numpy(), endpoint % 8)
    # Rail-optimised: every NIC of a leaf is of one rail, the leaf's links named with it.
    leaf = np.where(up, dst, src)
    for node in np.unique(leaf):
        assert len(set((endpoint[leaf == node] % 8).tolist())) == 1
    gpu_nic = links.filter(pa.compute.equal(links["tier"], "gpu-nic"))
    gpus = np.minimum(gpu_nic["src"].to_numpy(), gpu_nic["dst"].to_numpy())
    assert np.array_equal(gpu_nic["domain"].to_numpy(), gpus // 8)
    assert np.array_equal(gpu_nic["rail"].to_numpy(), gpus % 8)
    assert gpu_nic["plane"].null_count == gpu_nic.num_rows
    spine = links.filter(pa.compute.equal(links["tier"], "leaf-spine"))
    assert set(spine["kind"].to_pylist()) == {"scale_out"} and spine["domain"].null_count == spine.num_rows


def test_links_where_selects_by_every_column(pod):
    links = pod.links
    tier = np.array(links["tier"].to_pylist(), dtype=object)
    direction = np.array(links["direction"].to_pylist(), dtype=object)
    rail = links["rail"].to_numpy(zero_copy_only=False)
    want = np.flatnonzero((tier == "leaf-spine") & (direction == "up") & (rail == 3))
    got = pod.links_where(tier="leaf-spine", direction="up", rail=3)
    assert got.dtype == np.int64 and np.array_equal(got, want) and want.size == pod.structure["scale_out"]["leaf_up"] * 2
    assert np.array_equal(pod.links_where(tier=["gpu-nic", "nic-leaf"]),
                          np.flatnonzero((tier == "gpu-nic") | (tier == "nic-leaf")))
    assert np.array_equal(pod.links_where(domain=5, plane=2),
                          np.flatnonzero((links["domain"].to_numpy(zero_copy_only=False) == 5)
                                         & (links["plane"].to_numpy(zero_copy_only=False) == 2)))
    # Ends by name or id, one or many.
    leaf3 = pod.links_where(src="leaf3")
    assert set(pod.names_of(links["src"].take(leaf3))) == {"leaf3"}
    node = {name: i for i, name in enumerate(pod.node_names)}
    by_name = pod.links_where(src="leaf3", dst=["spine0", "spine1"])
    assert by_name.size and np.array_equal(by_name, pod.links_where(src=node["leaf3"],
                                                                    dst=[node["spine0"], node["spine1"]]))
    assert pod.links_where(kind="scale_up").size == 2 * 512 * 18


def test_links_where_names_what_there_is(pod):
    with pytest.raises(fs.InvalidArgumentError, match=r"no link of this topology has tier 'spine-core'; its "
                       r"links' tiers are 'gpu-nic', 'gpu-nvswitch', 'leaf-spine', 'nic-leaf'"):
        pod.links_where(tier="spine-core")  # a two-tier Clos
    with pytest.raises(fs.InvalidArgumentError, match=r"did you mean 'leaf-spine'"):
        pod.links_where(tier="leaf-spin")
    with pytest.raises(fs.InvalidArgumentError, match=r"rail=8: no link .* rails are from 0 to 7"):
        pod.links_where(rail=8)
    with pytest.raises(fs.UnknownNodeError, match=r"no node named 'leaf99'"):
        pod.links_where(src="leaf99")
    with pytest.raises(fs.InvalidArgumentError, match=r"'plan' is not a column links are selected by"):
        pod.fail(links={"plan": 0})


def test_a_named_link_fails_in_a_fabric_and_during_a_run(pod):
    one = pod.links_where(tier="leaf-spine", rail=3, direction="up")[:1]
    broken = pod.fail(links=one)
    caps = broken.links["capacity_Bps"].to_numpy()
    assert caps[one[0]] == 0 and np.count_nonzero(caps == 0) == 1
    by_dict = pod.fail(links={"tier": "leaf-spine", "rail": 3, "direction": "up"})
    assert np.array_equal(np.flatnonzero(by_dict.links["capacity_Bps"].to_numpy() == 0),
                          pod.links_where(tier="leaf-spine", rail=3, direction="up"))
    # During a run: every NIC-to-leaf link of rail 0 at half rate from 1 ms; GPU 0 (rail 0)
    # to GPU 8 (rail 0, another board) then crosses them at half rate.
    sc = fs.Scenario(pod)
    sc.add_flow(0, 8, "1GB")
    sc.add_fault(at_s="1ms", links={"tier": "nic-leaf", "rail": 0}, factor=0.5)
    alone = fs.Scenario(pod)
    alone.add_flow(0, 8, "1GB")
    t_full = alone.run().flows["finish_s"][0].as_py()
    t = sc.run().flows["finish_s"][0].as_py()
    rate = 1e9 / (t_full - 0)  # about the NIC's rate: the flow's path latency is tiny
    assert t == pytest.approx(1e-3 + 2 * (1e9 - rate * 1e-3) / rate, rel=1e-3)


def test_result_tables_name_their_nodes_over_the_ids_without_a_copy():
    polars = pytest.importorskip("polars")
    fab = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    sc = fs.Scenario(fab)
    sc.add_flows([0, 3], [9, 12], "1MiB")
    sc.add_collective("all_reduce", range(8), "1MiB")
    res = sc.run()
    flows = res.flows
    assert flows["src_name"].to_pylist()[:2] == ["gpu0", "gpu3"] and flows["dst_name"].to_pylist()[:2] == ["gpu9", "gpu12"]
    assert flows["src_name"].to_pylist()[2:] == [None] * (flows.num_rows - 2)  # a collective's flow has no one end
    for table in (flows, res.links):
        for end in ("src", "dst"):
            names, ids = table[f"{end}_name"].chunks[0], table[end].chunks[0]
            assert names.indices.buffers()[1].address == ids.buffers()[1].address  # the ids themselves
            assert names.dictionary.buffers()[2].address == res.flows["src_name"].chunks[0].dictionary.buffers()[2].address
            assert names.to_pylist() == [None if i is None else fab.node_names[i] for i in ids.to_pylist()]
    two_tier = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2", oversubscription=2)
    jobs = fs.Scenario(two_tier, cost_model=fs.CostModel(pxn=False))
    for name in ("a", "b"):  # two tenants meeting on leaf-spine links (without PXN their traffic crosses rails)
        jobs.add_job(name, n_gpus=64, placement="random").add_collective("all_to_all", None, "16MiB")
    met = jobs.run().job_links
    assert met.num_rows and met["src_name"].to_pylist() == two_tier.names_of(met["src"])
    assert polars.from_arrow(res.links)["src_name"].cast(str).to_list() == res.links["src_name"].to_pylist()


def test_a_labelled_topology_names_by_its_labels():
    t = fs.Topology.from_arrays([0, 1], [1, 2], "1GB/s", node_names=["a", ("b", 1), 3])
    assert t.names_of([0, 1, 2]) == ["a", "('b', 1)", "3"]
    assert t.links["dst_name"].to_pylist() == ["('b', 1)", "3"]
    assert t.links["kind"].to_pylist() == ["link", "link"] and t.links["tier"].null_count == 2
    assert list(t.links_where(src="a")) == [0]
    plain = fs.Topology.from_arrays([0], [1], "1GB/s")
    assert plain.names_of(1) == ["node1"]
    with pytest.raises(fs.InvalidArgumentError, match="no link of this topology has tier 'leaf-spine'; .* none"):
        plain.links_where(tier="leaf-spine")


def test_node_names_slice_and_take_arrays():
    f = fs.hgx_h100()
    everything = f.names_of(range(f.n_nodes))
    assert f.node_names[:3] == everything[:3] and f.node_names[::-4] == everything[::-4]
    assert f.node_names[np.array([8, 0])] == ["d0.nvswitch0", "gpu0"] and f.node_names[[-1]] == [everything[-1]]
    assert f.node_names[-1] == "d0.nvswitch3" and f.node_names[np.int64(1)] == "gpu1"
    with pytest.raises(IndexError, match="node 12 is out of range"):
        f.node_names[12]
    with pytest.raises(fs.UnknownNodeError):
        f.node_names[[0, 12]]


def test_pcie_server_links_name_their_tiers():
    f = fs.pcie_server(n_gpus=4, gpus_per_switch=2, nics_per_switch=1, n_cpus=2)
    links = f.links
    assert set(links["kind"].to_pylist()) == {"pcie"}
    assert set(links["tier"].to_pylist()) == {"gpu-pcie_switch", "nic-pcie_switch", "pcie_switch-cpu", "cpu-cpu"}
    cpu = links.filter(pa.compute.equal(links["tier"], "cpu-cpu"))
    assert cpu["direction"].null_count == cpu.num_rows  # neither end is above the other


@pytest.mark.parametrize("make", [fs.hgx_h100, lambda: fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"),
                                  lambda: fs.Topology.from_arrays([0, 1, 1], [1, 2, 0], [1e9, 2e9, 3e9], [0, 1e-6, 0]),
                                  lambda: fs.Topology.from_arrays([0, 1], [1, 0], 1e9, node_names=["x", (1, 2)])])
def test_networkx_out_and_back_keeps_every_link(make):
    pytest.importorskip("networkx")
    topo = make()
    g = topo.to_networkx()
    assert g.number_of_nodes() == topo.n_nodes and g.number_of_edges() == topo.n_links
    back = fs.Topology.from_networkx(g)
    for column in ("src", "dst", "capacity_Bps", "latency_s"):
        assert back.links[column].to_pylist() == topo.links[column].to_pylist(), column
    # Nodes keep their names (a plain topology's nodes go out as their ids, and come back labelled by them).
    names = [str(n) for n in g.nodes]
    assert back.links["src_name"].to_pylist() == [names[i] for i in topo.links["src"].to_pylist()]
    if isinstance(topo, fs.Fabric) or topo.node_names is not None:
        assert back.links["dst_name"].to_pylist() == topo.links["dst_name"].to_pylist()
    first = next(iter(g.edges(keys=True, data=True)))
    assert first[3]["link_id"] == first[2]
    if isinstance(topo, fs.Fabric):
        assert g.nodes["gpu0"] == {"node_id": 0, "kind": "gpu"}
        assert g.edges["gpu0", "d0.nvswitch0", 0]["tier"] == "gpu-nvswitch"


def test_a_scenario_file_fails_links_by_what_they_are(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    study = tmp_path / "study.toml"
    study.write_text("""
[fabric]
generator = "cluster"
domain = "hgx-h100"
n_domains = 64
fail = [{ links = { tier = "leaf-spine", rail = 3, direction = "up" }, factor = 0.5 }]

[[workload]]
type = "flow"
src = 3
dst = 11
size_bytes = "1GiB"

[[fault]]
at_s = "1ms"
links = { tier = "nic-leaf", rail = [0, 1] }
""")
    spec = fs.load_scenario(study)
    pod = fs.cluster(domain="hgx-h100", n_domains=64)
    caps = spec.scenario.topology.links["capacity_Bps"].to_numpy()
    halved = pod.links_where(tier="leaf-spine", rail=3, direction="up")
    assert np.array_equal(np.flatnonzero(caps != pod.links["capacity_Bps"].to_numpy()), halved)
    import json

    from fabricsim.studies.scenario_file import SCHEMA_PATH

    jsonschema.validate(tomllib.loads(study.read_text()), json.loads(open(SCHEMA_PATH).read()))
    bad = tomllib.loads(study.read_text())
    bad["fault"][0]["links"] = {"tire": "nic-leaf"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, json.loads(open(SCHEMA_PATH).read()))
