"""The command line as a new user meets it: scale-out defaults that follow the GPUs'
generation, one unit per quantity, help for every flag, and errors that say what to do."""

from __future__ import annotations

import argparse
import pathlib
import re

import pytest

import fabricsim as fs
from fabricsim import cli
from fabricsim.collectives.cost.model import DEFAULT
from fabricsim.fabrics.describe import label

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The generations (docs/fabrics.md): a GPU's catalog NIC, and that NIC's switch.
GENERATIONS = {"h100": ("cx7", "quantum-2"), "h200": ("cx7", "quantum-2"), "b200": ("cx7", "quantum-2"),
               "gb200": ("cx7", "quantum-2"), "b300": ("cx8", "quantum-x800"), "gb300": ("cx8", "quantum-x800")}


def test_the_scale_out_follows_the_generation_of_the_gpus_nic():
    for gpu, (nic, switch) in GENERATIONS.items():
        assert fs.catalog.part(gpu)["nic"] == nic and fs.catalog.part(nic)["switch"] == switch, gpu
    for domain, switch, nic in (("hgx-h100", "quantum-2", "cx7"), ("nvl72", "quantum-2", "cx7"),
                                ("gb300-nvl72", "quantum-x800", "cx8"), ("hgx-b300", "quantum-x800", "cx8")):
        f = fs.cluster(domain=domain, n_domains=2)
        assert (f._parts["switch"].name, f._parts["nic"].name) == (switch, nic), domain
        plan = fs.power.plan_cluster(domain=domain, n_domains=2)
        assert plan._parts["switch"].name == switch
    # A NIC given picks its own generation's switch; a scale_out given is kept.
    assert fs.cluster(domain="hgx-h100", n_domains=2, nic="cx8")._parts["switch"].name == "quantum-x800"
    assert fs.cluster(domain="hgx-h100", n_domains=2, scale_out="sn5600")._parts["switch"].name == "sn5600"


def test_the_generation_table_of_the_docs_is_the_catalogs():
    doc = (ROOT / "docs" / "fabrics.md").read_text()
    rows = re.findall(r"^\| ([A-Z0-9, ]+) \| `(cx\d)` \| `([a-z0-9-]+)` \|", doc, flags=re.M)
    shown = {gpu.strip().lower(): (nic, switch) for gpus, nic, switch in rows for gpu in gpus.split(",")}
    assert shown == GENERATIONS


def test_a_nic_without_a_switch_asks_for_one():
    fs.catalog.add_part("my-nic", "nic", rate_Bps=50e9, max_planes=1, ports_per_cage=1, ethernet_port_Bps=50e9,
                        host_Bps=64e9, protocols=["infiniband"], latency_s=0.0, source="[assumed] a test part")
    try:
        with pytest.raises(fs.InvalidArgumentError, match=r"nic 'my-nic' names none .* give scale_out"):
            fs.cluster(domain="hgx-h100", n_domains=2, nic="my-nic")
    finally:
        fs.catalog.remove_part("my-nic")


def test_nccl_tests_and_train_default_to_the_generations_switch(capsys):
    assert cli.main(["nccl-tests", "--fabric", "hgx-h100", "--nodes", "4", "-b", "1M", "-e", "1M"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "4 x hgx-h100 (32 GPUs, quantum-2 switches, cx7 NICs)" in head, head
    args = argparse.Namespace(fabric="gb300-nvl72", nodes=2, scale_out=None, sharp=False)
    assert cli._cli_fabric(args)._parts["switch"].name == "quantum-x800"
    args = argparse.Namespace(fabric="hgx-h100", nodes=2, scale_out=None, sharp=False)
    assert cli._cli_fabric(args)._parts["switch"].name == "quantum-2"


def test_busbw_reads_in_gb_per_s_everywhere(tmp_path, capsys):
    assert cli.main(["run", str(ROOT / "examples" / "hgx_cluster_allreduce.toml"), "--out", "none"]) == 0
    out = capsys.readouterr().out
    printed = [float(x) for x in re.findall(r"busbw (\d+\.\d\d) GB/s", out)]
    res = fs.load_scenario(ROOT / "examples" / "hgx_cluster_allreduce.toml").run()
    assert printed == [round(b / 1e9, 2) for b in res.collectives["busbw_Bps"].to_pylist()]
    assert "Tb/s" not in out and "Gb/s" not in out
    assert cli.main(["demo", "--leaves", "2", "--hosts-per-leaf", "2", "--spines", "1", "--size", "1MiB"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\d+\.\d\d GB/s", out) and "Gb/s" not in out.split("\n", 1)[1]  # the header echoes --link


def test_out_none_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = tmp_path / "study.toml"
    study.write_text((ROOT / "examples" / "hgx_cluster_allreduce.toml").read_text())
    assert cli.main(["run", str(study), "--out", "none"]) == 0
    assert "busbw" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.toml"]  # no "none", no "out"
    assert cli.main(["run", str(study), "--out", "none", "--plot", "fct"]) == 2
    assert "--out none writes nothing" in capsys.readouterr().err


def test_plotting_a_missing_table_says_what_is_missing(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert cli.main(["plot", "busbw", str(tmp_path / "missing.parquet"), "-o", str(tmp_path / "b.png")]) == 2
    err = capsys.readouterr().err
    assert "missing.parquet: no such file" in err and "size_bytes and busbw_Bps" in err
    (tmp_path / "bad.parquet").write_text("not parquet")
    assert cli.main(["plot", "busbw", str(tmp_path / "bad.parquet"), "-o", str(tmp_path / "b.png")]) == 2
    assert "cannot be read as a Parquet table" in capsys.readouterr().err


def test_calibrate_speaks_in_flags(tmp_path, capsys):
    from test_calibration import log_text

    log = tmp_path / "all_reduce_perf.log"
    log.write_text(log_text(fs.hgx_h100(), "all_reduce", DEFAULT, lo="1M", hi="16M"))
    assert cli.main(["calibrate", str(log), "--fabric", "hgx-h100", "--nodes", "2"]) == 2
    err = capsys.readouterr().err
    assert "--ranks 8" in err and "16 GPUs" in err and "ranks=" not in err, err
    assert cli.main(["calibrate", str(log), "--fabric", "hgx-h100", "--nodes", "2", "--ranks", "8"]) == 0
    capsys.readouterr()


def test_every_train_flag_says_what_it_does():
    parser = argparse.ArgumentParser()
    cli._add_train_command(parser.add_subparsers())
    train = parser._subparsers._group_actions[0].choices["train"]
    missing = [a.option_strings[0] for a in train._actions
               if a.option_strings and a.dest != "help" and not (a.help or "").strip()]
    assert not missing, missing


def test_a_fabric_is_named_in_titles_and_headers():
    assert label(fs.cluster(domain="hgx-h100", n_domains=4)) == "4 x 8 H100 on quantum-2"
    assert label(fs.hgx_h100()) == "8 H100"
    assert label(fs.clos(n_hosts=16, switch="sn5600", nic="cx7")) == "16 hosts on sn5600"
    assert label(fs.pcie_server()) == "8 GPUs on PCIe"
    assert label(fs.Topology.from_arrays([0], [1], 1.0)) == "2 nodes, 1 link"
