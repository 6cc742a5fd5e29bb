"""The README's first scenario runs as printed."""

from __future__ import annotations

import pathlib
import re

import pyarrow.parquet as pq

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


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
    # The DuckDB line in the comment runs as written: link 1->2 carried both flows.
    line = re.search(r"#\s+(links = res\.links; duckdb\.sql\(.*\))\n", blocks[0]).group(1)
    import duckdb
    namespace["duckdb"] = duckdb
    exec(line.replace("duckdb.sql(", "top = duckdb.sql("), namespace)
    assert namespace["top"].limit(1).fetchall()[0][4] == 2**30 + 256 * 2**20


def test_results_table_lists_every_column():
    # The flows, delays and collectives rows lacked status, failed_s, error and a collectives
    # row at all.
    import fabricsim as fs

    documented = {
        m.group(1): [c.strip() for c in m.group(2).split(",")]
        for m in re.finditer(r"^\| `(\w+)`[^|]*\| `([^`]+)` \|$", README.read_text(), flags=re.M)
    }
    sc = fs.Scenario(fs.hgx_h100())
    sc.add_collective("all_reduce", range(8), "1MiB")
    res = sc.run(record_rates=True)
    for name in ("flows", "delays", "links", "collectives", "rate_changes"):
        assert documented.get(name) == getattr(res, name).column_names, name
