"""The README runs as printed: its first scenario gives the times it should, every python block
runs, and the tables it shows come from the code (the pages of docs/ are checked in
test_docs.py)."""

from __future__ import annotations

import pathlib
import re

import pyarrow.parquet as pq
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MODEL = ROOT / "docs" / "model.md"


def test_first_scenario_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    res = namespace["res"]
    # After 2 ms of compute, b (256 MiB, one hop) starts on link 1->2 at 2 ms + 1 us and runs
    # alone at 50 GB/s for 1 us, until a (1 GiB, two hops) starts at 2 ms + 2 us; they share
    # link 1->2 at 25 GB/s each until b ends, then a runs alone.
    rate_Bps = 50e9
    a_start = 2e-3 + 2e-6
    b_end = a_start + (256 * 2**20 - 1e-6 * rate_Bps) / (rate_Bps / 2)
    a_left = 2**30 - (b_end - a_start) * rate_Bps / 2
    flows = res.flows.to_pydict()
    assert abs(flows["finish_s"][1] - b_end) < 1e-12
    assert abs(flows["finish_s"][0] - (b_end + a_left / rate_Bps)) < 1e-12
    assert "busiest links" in capsys.readouterr().out
    assert pq.read_table(tmp_path / "out" / "flows.parquet").num_rows == 2


def test_the_duckdb_line_of_the_first_scenario_runs_as_written(tmp_path, monkeypatch):
    duckdb = pytest.importorskip("duckdb")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"duckdb": duckdb}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    # The line in the comment: link 1->2 carried both flows.
    line = re.search(r"#\s+(links = res\.links; duckdb\.sql\(.*\))\n", blocks[0]).group(1)
    exec(line.replace("duckdb.sql(", "top = duckdb.sql("), namespace)
    busiest = dict(zip(namespace["top"].columns, namespace["top"].limit(1).fetchall()[0]))
    assert busiest["bytes_carried"] == 2**30 + 256 * 2**20 and busiest["src_name"] == "node1"


def test_results_table_lists_every_column():
    # The flows, delays and collectives rows lacked status, failed_s, error and a collectives
    # row at all. The table is docs/model.md's (the README links to it).
    import fabricsim as fs

    documented = {
        m.group(1): [c.strip() for c in m.group(2).split(",")]
        for m in re.finditer(r"^\| `(\w+)`[^|]*\| `([^`]+)` \|$", MODEL.read_text(), flags=re.M)
    }
    sc = fs.Scenario(fs.hgx_h100())
    sc.add_collective("all_reduce", range(8), "1MiB")
    res = sc.run(record_rates=True)
    for name in ("flows", "delays", "links", "collectives", "rate_changes"):
        assert documented.get(name) == getattr(res, name).column_names, name


def test_every_block_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 5, "the README lost its examples"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "llama3-70b on 32 x h100" in out and "nvls" in out
    jobs = namespace["sc"].run().jobs.to_pylist()  # the two tenants without PXN: "1.5x slower together"
    assert [round(j["slowdown"], 1) for j in jobs] == [1.5, 1.5]


def test_the_training_table_is_what_the_model_gives():
    import fabricsim as fs

    rows = {r["case"]: r for r in fs.training.validate_training().to_pylist()}
    text = README.read_text()
    for case, shown in (("llama3-405b-16k", "| 400 TFLOP/s per GPU | 438 | +9.4% |"), ("llama3-405b-8k", "| 430 | 490 | +13.9% |"),
                        ("megatron-gpt3-175b-96", "| MFU 47% | 50.9% | +8.3% |"),
                        ("megatron-gpt3-175b-4608", "| MFU 42% | 44.3% | +5.5% |")):
        r = rows[case]
        modelled = f"{r['modelled_mfu'] * 100:.1f}%" if "MFU" in shown else f"{r['modelled_tflops']:.0f}"
        assert shown == f"| {shown.split('|')[1].strip()} | {modelled} | {r['error'] * 100:+.1f}% |", case
        assert shown in text, case


def test_the_validation_table_counts_the_cases():
    from fabricsim.studies.validation import CASES

    text = README.read_text()
    for section, what in (("6.1", "one node, NVLink"), ("6.2", "several nodes"), ("6.3", "GB200 NVL72 partitions")):
        cases = [c for c in CASES if c.section == section]
        row = next(line for line in text.splitlines() if line.startswith(f"| {what}"))
        assert row.split("|")[2:4] == [f" {len(cases)} ", f" {sum(len(c.sizes_bytes) for c in cases)} "], section
