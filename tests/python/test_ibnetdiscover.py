"""Fabrics from real cabling (Topology.from_ibnetdiscover): ibnetdiscover output written by the
tests in its format (infiniband-diags' ibnetdiscover.c: node blocks with vendid/devid/guid
lines, Switch and Ca lines, port lines from both ends of each cable), for a small two-tier
fabric as cabled, with a miswired and a missing cable, and ends that disagree."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import fabricsim as fs
from fabricsim.fabrics import ibnetdiscover

IB_EFF = fs.catalog.part("infiniband")["value"]
NDR_4X_Bps = 4 * 100e9 / 8  # 400 Gb/s of data


def leaf_guid(i):
    return 0xB83FD203000A0000 + i


def spine_guid(i):
    return 0xB83FD203000B0000 + i


def hca_guid(host, k):
    return 0x0C42A10300000000 + host * 16 + k


def two_tier(n_leaves=2, n_spines=2, hosts_per_leaf=2, hcas_per_host=2, width="4x", speed="NDR",
             miswire=None, missing=None, uplinks=1):
    """ibnetdiscover text of leaves and spines, each leaf's port 33 + s cabled to spine s (port
    leaf + 1; ``uplinks`` cables per pair on consecutive ports), each host's HCA k on its leaf's
    port host_on_leaf * hcas_per_host + k + 1. ``miswire=(leaf, s, to)``: that leaf's cable to
    spine s goes to spine ``to`` instead (both ends agree). ``missing=(leaf, s)``: the spine's
    line of that cable is left out."""
    cables = []  # (guid a, port a, guid b, port b)
    for leaf in range(n_leaves):
        for s in range(n_spines):
            for u in range(uplinks):
                target = s
                if miswire is not None and miswire[:2] == (leaf, s):
                    target = miswire[2]
                spine_port = leaf * uplinks * n_spines + s * uplinks + u + 1  # distinct on the target spine
                cables.append((leaf_guid(leaf), 33 + s * uplinks + u, spine_guid(target), spine_port))
        for h in range(hosts_per_leaf):
            host = leaf * hosts_per_leaf + h
            for k in range(hcas_per_host):
                cables.append((leaf_guid(leaf), h * hcas_per_host + k + 1, hca_guid(host, k), 1))
    names = {}
    for leaf in range(n_leaves):
        names[leaf_guid(leaf)] = ("S", f"MF0;leaf{leaf}:MQM9700/U1", 64, 10 + leaf)
    for s in range(n_spines):
        names[spine_guid(s)] = ("S", f"MF0;spine{s}:MQM9700/U1", 64, 50 + s)
    for leaf in range(n_leaves):
        for h in range(hosts_per_leaf):
            host = leaf * hosts_per_leaf + h
            for k in range(hcas_per_host):
                names[hca_guid(host, k)] = ("H", f"node{host + 1:02d} mlx5_{k}", 1, 100 + host * 16 + k)
    ports = {}  # guid -> [(port, peer guid, peer port)]
    for a, pa_, b, pb in cables:
        ports.setdefault(a, []).append((pa_, b, pb))
        if missing is None or (a, b) != (leaf_guid(missing[0]), spine_guid(missing[1])):
            ports.setdefault(b, []).append((pb, a, pa_))
    out = ["#", "# Topology file: generated on Mon Jan  6 10:00:00 2025", "#",
           f"# Initiated from node {hca_guid(0, 0):016x} port {hca_guid(0, 0):016x}", "", "Non-Chassis Nodes", ""]
    for guid, (letter, desc, n_ports, lid) in names.items():
        out += ["vendid=0x2c9", f"devid={'0xd2f0' if letter == 'S' else '0x1021'}", f"sysimgguid={guid:#x}"]
        if letter == "S":
            out += [f"switchguid={guid:#x}({guid:x})",
                    f'Switch\t{n_ports} "S-{guid:016x}"\t\t# "{desc}" enhanced port 0 lid {lid} lmc 0']
        else:
            out += [f"caguid={guid:#x}", f'Ca\t{n_ports} "H-{guid:016x}"\t\t# "{desc}"']
        for port, peer, peer_port in sorted(ports.get(guid, [])):
            p_letter, p_desc, _, p_lid = names[peer]
            if letter == "S":
                peer_guid = f"({peer:x}) " if p_letter == "H" else ""
                out.append(f'[{port}]\t"{p_letter}-{peer:016x}"[{peer_port}]{peer_guid}\t\t# "{p_desc}" lid {p_lid} '
                           f"{width}{speed}")
            else:
                out.append(f'[{port}]({guid:x}) \t"{p_letter}-{peer:016x}"[{peer_port}]\t\t# lid {lid} lmc 0 '
                           f'"{p_desc}" lid {p_lid} {width}{speed}')
        out.append("")
    return "\n".join(out)


def test_a_two_tier_fabric_is_built_as_cabled():
    t = fs.Topology.from_ibnetdiscover(two_tier())
    names = t.node_names
    assert t.n_gpus == 8 and t.n_nodes == 8 + 4 + 8
    # GPU i of a host on its i-th HCA; hosts and devices in natural order.
    assert names[:4] == ["node01 gpu0", "node01 gpu1", "node02 gpu0", "node02 gpu1"]
    assert names[8:12] == ["MF0;leaf0:MQM9700/U1", "MF0;leaf1:MQM9700/U1", "MF0;spine0:MQM9700/U1",
                           "MF0;spine1:MQM9700/U1"]
    links = t.links.to_pylist()
    idx = {n: i for i, n in enumerate(names)}
    leaf0, spine1 = idx["MF0;leaf0:MQM9700/U1"], idx["MF0;spine1:MQM9700/U1"]
    up = [x for x in links if (x["src"], x["dst"]) == (leaf0, spine1)]
    assert len(up) == 1 and up[0]["capacity_Bps"] == pytest.approx(NDR_4X_Bps * IB_EFF)
    assert up[0]["latency_s"] == fs.catalog.part("quantum-2")["latency_s"]  # into a switch
    hca = idx["node01 mlx5_0"]
    assert [x["capacity_Bps"] for x in links if (x["src"], x["dst"]) == (0, hca)] == [64e9]  # GPU to HCA: PCIe Gen5
    # Host 1 (leaf 0) to host 3 (leaf 1): GPU, HCA, leaf, spine, leaf, HCA, GPU. Nodes of a
    # topology with names are given by name (collectives take GPU ids: GPU i is node i).
    route = t.route("node01 gpu0", "node03 gpu0")
    hops = [names[links[i]["dst"]] for i in route]
    assert hops[0] == "node01 mlx5_0" and hops[1] == "MF0;leaf0:MQM9700/U1" and hops[2].startswith("MF0;spine")
    assert hops[3:] == ["MF0;leaf1:MQM9700/U1", "node03 mlx5_0", "node03 gpu0"]
    # A transfer between the two: 1 GB at the cable's payload rate (PCIe is faster).
    sc = fs.Scenario(t)
    sc.add_flow("node01 gpu0", "node03 gpu0", "1GB")
    wire_s = sum(links[i]["latency_s"] for i in route)
    assert sc.run().summary.makespan_s == pytest.approx(1e9 / (NDR_4X_Bps * IB_EFF) + wire_s, rel=1e-12)
    # A collective's default ranks are the GPUs, not the switches.
    sc = fs.Scenario(t)
    sc.add_collective("all_reduce", None, "64MiB")
    assert sc.run().collectives["n_ranks"].to_pylist() == [8]


@pytest.mark.parametrize(("width", "speed", "gbps"), [("4x", "HDR", 200), ("2x", "NDR", 200), ("4x", "XDR", 800),
                                                      ("1x", "EDR", 25), ("4x", "FDR", 4 * 14.0625 * 64 / 66)])
def test_capacities_are_width_times_lane_rate(width, speed, gbps):
    t = fs.Topology.from_ibnetdiscover(two_tier(width=width, speed=speed), gpus=None)
    caps = set(t.links["capacity_Bps"].to_pylist())
    assert len(caps) == 1 and caps.pop() == pytest.approx(gbps * 1e9 / 8 * IB_EFF) and t.n_gpus is None


def test_a_miswired_leaf_routes_over_the_spine_it_is_cabled_to():
    # Leaf 1's cable meant for spine 1 goes to spine 0: leaf 1 has two cables to spine 0, none
    # to spine 1, and every route into leaf 1 comes through spine 0.
    t = fs.Topology.from_ibnetdiscover(two_tier(miswire=(1, 1, 0)), gpus="per_hca")
    names = t.node_names
    idx = {n: i for i, n in enumerate(names)}
    leaf1, s0, s1 = (idx[f"MF0;{n}:MQM9700/U1"] for n in ("leaf1", "spine0", "spine1"))
    links = t.links.to_pylist()
    assert sum((x["src"], x["dst"]) == (s0, leaf1) for x in links) == 2
    assert sum(x["src"] == s1 and x["dst"] == leaf1 for x in links) == 0
    for key in range(16):
        hops = [links[i]["dst"] for i in t.route("node01 gpu0", "node04 gpu0", key=key)]
        assert s0 in hops and s1 not in hops
    # Two transfers from leaf 0 into leaf 1 both cross leaf 0's one cable to spine 0 (its cable
    # to spine 1 leads nowhere near leaf 1): they share it, half its rate each.
    sc = fs.Scenario(t)
    src, dst = ["node01 gpu0", "node02 gpu0"], ["node03 gpu0", "node04 gpu0"]
    sc.add_flows(src, dst, "1GB")
    wire_s = max(sum(links[i]["latency_s"] for i in t.route(a, b)) for a, b in zip(src, dst))
    assert sc.run().summary.makespan_s == pytest.approx(2e9 / (NDR_4X_Bps * IB_EFF) + wire_s, rel=1e-12)


def test_a_cable_listed_at_one_end_only_is_left_out_with_a_warning():
    text = two_tier(missing=(0, 1))
    c = ibnetdiscover.read(text)
    assert len(c.loose) == 1
    end = c.loose[0]
    assert (end.guid, end.port, end.peer, end.peer_port) == (leaf_guid(0), 34, spine_guid(1), 2)
    assert text.splitlines()[end.line - 1].startswith("[34]\t")
    with pytest.warns(UserWarning, match=rf"1 port line\(s\) that the other end does not list, left out: line {end.line}: "
                                         "port 34"):
        t = fs.Topology.from_ibnetdiscover(text)
    idx = {n: i for i, n in enumerate(t.node_names)}
    leaf0, spine1 = idx["MF0;leaf0:MQM9700/U1"], idx["MF0;spine1:MQM9700/U1"]
    assert not any({x["src"], x["dst"]} == {leaf0, spine1} for x in t.links.to_pylist())
    assert t.n_links == 2 * (len(ibnetdiscover.read(two_tier()).cables) - 1) + 2 * 8


def test_ends_that_disagree_are_refused_with_the_line():
    text = two_tier()
    lines = text.splitlines()
    # Spine 0 says its port 1 goes to leaf 1's port 33, leaf 0 says its port 33 goes there.
    i = next(k for k, line in enumerate(lines) if line.startswith(f'[1]\t"S-{leaf_guid(0):016x}"[33]'))
    lines[i] = lines[i].replace(f"S-{leaf_guid(0):016x}", f"S-{leaf_guid(1):016x}")
    with pytest.raises(fs.CablingError, match=r"^\d+: port 33 of 'MF0;leaf0:MQM9700/U1' is cabled to port 1 of "
                                              r"'MF0;spine0:MQM9700/U1', but line \d+ has that port cabled to port 33 of "
                                              "'MF0;leaf1") as e:
        fs.Topology.from_ibnetdiscover("\n".join(lines))
    assert e.value.line is not None and lines[e.value.line - 1].startswith("[33]")
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(f'[1]\t"S-{leaf_guid(0):016x}"[33]'))
    lines[i] = lines[i].replace("4xNDR", "2xNDR")
    with pytest.raises(fs.CablingError, match=rf"the two ends of a cable disagree: 4xNDR here, 2xNDR at line {i + 1}"):
        fs.Topology.from_ibnetdiscover("\n".join(lines))


def test_lines_it_cannot_read_are_refused_with_their_number():
    text = two_tier()
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if "4xNDR" in line)
    for bad, message in ((lines[i].replace("4xNDR", "4xGDR"), "link speed 'GDR'"),
                         (lines[i].replace("4xNDR", "??NDR"), "link width '\\?\\?'"),
                         ("garbage here", "not a line of ibnetdiscover's topology output"),
                         (lines[i].replace("[", "[99", 1), "port 99\\d* of .*which has ports 1 to")):
        changed = lines[:i] + [bad] + lines[i + 1:]
        with pytest.raises(fs.CablingError, match=rf"^{i + 1}: {message}"):
            fs.Topology.from_ibnetdiscover("\n".join(changed))
    with pytest.raises(fs.CablingError, match="^1: a port line before any Switch or Ca line"):
        fs.Topology.from_ibnetdiscover(lines[i])
    with pytest.raises(fs.CablingError, match="not ibnetdiscover's topology output"):
        fs.Topology.from_ibnetdiscover("# nothing\n")
    dup = lines[:i + 1] + [lines[i]] + lines[i + 1:]
    with pytest.raises(fs.CablingError, match=rf"^{i + 2}: port \d+ of .* is listed twice \(also at line {i + 1}\)"):
        fs.Topology.from_ibnetdiscover("\n".join(dup))


def test_gpus_by_mapping_by_function_and_nvlink_inside_hosts():
    text = two_tier(hcas_per_host=2)
    by_name = fs.Topology.from_ibnetdiscover(text, gpus={"node01 mlx5_0": "a", f"{hca_guid(2, 1):#x}": "b",
                                                         "node01 mlx5_1": "a"})
    assert by_name.n_gpus == 2 and by_name.node_names[:2] == ["a", "b"]
    idx = {n: i for i, n in enumerate(by_name.node_names)}
    # GPU "a" has both of node01's HCAs.
    assert sorted(by_name.node_names[x["dst"]] for x in by_name.links.to_pylist() if x["src"] == idx["a"]) == \
        ["node01 mlx5_0", "node01 mlx5_1"]
    only_first = fs.Topology.from_ibnetdiscover(text, gpus=lambda desc, guid: desc.split()[0] if desc.endswith("_0")
                                                else None)
    assert only_first.node_names[:4] == ["node01", "node02", "node03", "node04"] and only_first.n_gpus == 4
    with pytest.raises(fs.InvalidArgumentError, match="no HCA 'node09 mlx5_0'"):
        fs.Topology.from_ibnetdiscover(text, gpus={"node09 mlx5_0": "x"})
    hgx = fs.Topology.from_ibnetdiscover(text, nvlink="hgx-h100")
    assert hgx.node_names[-4:] == ["node01 nvswitch", "node02 nvswitch", "node03 nvswitch", "node04 nvswitch"]
    sc = fs.Scenario(hgx)
    sc.add_flow("node01 gpu0", "node01 gpu1", "1GB")  # over NVLink, 18 links at NCCL's 20.6 GB/s
    links = hgx.links.to_pylist()
    wire_s = sum(links[i]["latency_s"] for i in hgx.route("node01 gpu0", "node01 gpu1"))
    assert sc.run().summary.makespan_s == pytest.approx(1e9 / (18 * 20.6e9) + wire_s, rel=1e-12)
    with pytest.raises(fs.InvalidArgumentError, match="holds 8"):
        fs.Topology.from_ibnetdiscover(two_tier(hcas_per_host=9, hosts_per_leaf=1), nvlink="hgx-h100")
    # Hosts grouped into one domain.
    one = fs.Topology.from_ibnetdiscover(text, nvlink="hgx-h100", domain_of=lambda host: "rack" if host < "node03"
                                         else host)
    assert "rack nvswitch" in one.node_names


def test_the_grouped_and_full_output_variants_and_routers_are_read():
    text = two_tier(hcas_per_host=1, hosts_per_leaf=1, n_leaves=1, n_spines=1)
    # -g adds [ext N] after ports and "# Chassis" notes; -f adds s=, w=, v= after the speed.
    text = text.replace("[33]\t", "[33][ext 1]\t").replace(" 4xNDR", " 4xNDR s=64 w=2 v=3")
    text = text.replace("sysimgguid=", "Chassis 1 (guid 0x1)\nsysimgguid=", 1)
    # A router on the spine's port 9: a node that forwards, as a switch does.
    router = 0x0002C90300000077
    text = text.replace(f'# "MF0;spine0:MQM9700/U1" enhanced port 0 lid 50 lmc 0',
                        f'# "MF0;spine0:MQM9700/U1" enhanced port 0 lid 50 lmc 0\n'
                        f'[9]\t"R-{router:016x}"[1]({router:x}) \t\t# "gw1" lid 77 4xNDR')
    text += (f'\nrtguid={router:#x}\nRt\t2 "R-{router:016x}"\t\t# "gw1"\n'
             f'[1]({router:x}) \t"S-{spine_guid(0):016x}"[9]\t\t# lid 77 lmc 0 "MF0;spine0:MQM9700/U1" lid 50 4xNDR\n')
    t = fs.Topology.from_ibnetdiscover(text)
    assert t.n_gpus == 1 and t.n_links == 2 * 3 + 2 and "gw1" in t.node_names
    idx = {n: i for i, n in enumerate(t.node_names)}
    into_router = [x for x in t.links.to_pylist() if x["dst"] == idx["gw1"]]
    assert [x["latency_s"] for x in into_router] == [fs.catalog.part("quantum-2")["latency_s"]]
    # A port line that names its peer as a switch where the peer is a CA is refused.
    wrong = text.replace(f'"H-{hca_guid(0, 0):016x}"[1]', f'"S-{hca_guid(0, 0):016x}"[1]')
    with pytest.raises(fs.CablingError, match=r"names its peer S-0c42a10300000000, but that node is a ca \(line \d+\)"):
        fs.Topology.from_ibnetdiscover(wrong)


def test_a_file_path_and_repeated_descriptions(tmp_path):
    text = two_tier(hcas_per_host=1).replace("MF0;spine1:MQM9700/U1", "MF0;spine0:MQM9700/U1")
    f = tmp_path / "fabric.txt"
    f.write_text(text)
    t = fs.Topology.from_ibnetdiscover(f)
    spines = [n for n in t.node_names if n.startswith("MF0;spine0")]
    assert spines == [f"MF0;spine0:MQM9700/U1 [{spine_guid(0):#018x}]", f"MF0;spine0:MQM9700/U1 [{spine_guid(1):#018x}]"]


def test_the_cli_runs_nccl_tests_on_a_cabling_file(tmp_path):
    f = tmp_path / "fabric.txt"
    f.write_text(two_tier(hcas_per_host=2))
    out = subprocess.run([sys.executable, "-m", "fabricsim", "nccl-tests", "--fabric", f"ibnetdiscover:{f}:hgx-h100",
                          "--minbytes", "1M", "--maxbytes", "1M", "--op", "all_reduce"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "(8 GPUs)" in out.stdout and "1048576" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "fabricsim", "nccl-tests", "--fabric", f"ibnetdiscover:{f}", "--nodes",
                          "2"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--nodes and --sharp do not apply" in bad.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        missing = subprocess.run([sys.executable, "-m", "fabricsim", "nccl-tests", "--fabric",
                                  f"ibnetdiscover:{tmp_path / 'none.txt'}"], capture_output=True, text=True)
    assert missing.returncode != 0 and "cannot read" in missing.stderr


def test_a_chakra_trace_runs_on_the_cabling(tmp_path):
    pytest.importorskip("google.protobuf")
    t = fs.Topology.from_ibnetdiscover(two_tier(), nvlink="hgx-h100")
    sc = fs.Scenario(t)
    first = sc.add_collective("all_reduce", list(range(8)), "64MiB")
    sc.add_flow("node01 gpu0", "node04 gpu1", "16MiB", after=first)
    out = fs.chakra.write(sc, tmp_path)
    trace = fs.chakra.load(tmp_path, t, placement=out.gpus)
    assert trace.run().summary.makespan_s == pytest.approx(sc.run().summary.makespan_s, rel=1e-12)
