"""Results leave as Arrow: exact column names and types, readable by pyarrow, polars and DuckDB
through the Arrow C stream, and a Parquet round trip."""

import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fabricsim as fs
from helpers import Model

I64 = pa.int64()
F64 = pa.float64()
TAG = "tag"
WORDS = "words"  # dictionary-encoded strings

SCHEMAS = {
    "flows": [("flow_id", I64), ("tag", TAG), ("src", I64), ("dst", I64), ("src_name", WORDS),
              ("dst_name", WORDS), ("bytes", F64),
              ("ready_s", F64), ("start_s", F64), ("finish_s", F64), ("mean_rate_Bps", F64),
              ("status", WORDS), ("failed_s", F64), ("error", WORDS)],
    "delays": [("delay_id", I64), ("tag", TAG), ("ready_s", F64), ("finish_s", F64),
               ("status", WORDS)],
    "links": [("link_id", I64), ("src", I64), ("dst", I64), ("src_name", WORDS), ("dst_name", WORDS),
              ("capacity_Bps", F64),
              ("bytes_carried", F64), ("busy_s", F64), ("mean_utilization", F64),
              ("peak_utilization", F64)],
    "rate_changes": [("time_s", F64), ("flow_id", I64), ("rate_Bps", F64)],
}


def is_tag_type(t):
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return True
    return pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type)
                                          or pa.types.is_large_string(t.value_type))


def check_schema(table, expected, name):
    assert isinstance(table, pa.Table), f"{name} is {type(table)}, not a pyarrow.Table"
    assert table.column_names == [c for c, _ in expected], f"{name} columns"
    for col, t in expected:
        got = table.schema.field(col).type
        if t in (TAG, WORDS):
            assert is_tag_type(got), f"{name}.{col} has type {got}"
        else:
            assert got == t, f"{name}.{col} has type {got}, expected {t}"


@pytest.fixture(scope="module")
def run():
    # 0 -> 1 -> 2 at 100 B/s; two tagged flows, one untagged, a delay between.
    m = Model([0, 1], [1, 2], [100.0, 100.0], [0.0, 0.01])
    a = m.flow(0, 2, 100.0, tag="grad")
    d = m.delay(0.5, after=[a], tag="compute")
    m.flow(0, 1, 50.0, after=[d], tag="grad")
    m.flow(1, 2, 25.0)
    return m, m.run()


def test_result_schemas(run):
    m, res = run
    for name, expected in SCHEMAS.items():
        check_schema(getattr(res, name), expected, name)
    assert res.flows.num_rows == 3 and res.delays.num_rows == 1 and res.links.num_rows == 2
    assert res.flows.column("tag").to_pylist() == ["grad", "grad", None]
    assert res.delays.column("tag").to_pylist() == ["compute"]


def test_collectives_schema_is_the_same_with_or_without_collectives():
    # Without any, op/algorithm/protocol were dictionary<values=null>: a union or a Parquet
    # dataset of runs with and without collectives had two schemas.
    sc = fs.Scenario(fs.hgx_h100())
    empty = sc.run().collectives
    sc.add_collective("all_reduce", range(8), "1MiB")
    ran = sc.run().collectives
    assert empty.num_rows == 0 and ran.num_rows == 1
    assert empty.schema == ran.schema
    assert ran.schema.field("op").type == pa.dictionary(pa.int32(), pa.string())
    assert pa.concat_tables([empty, ran]).num_rows == 1


def test_topology_links_schema(run):
    m, _ = run
    check_schema(m.topo.links, [("link_id", I64), ("src", I64), ("dst", I64), ("src_name", WORDS),
                                ("dst_name", WORDS), ("kind", WORDS), ("tier", WORDS), ("direction", WORDS),
                                ("plane", I64), ("rail", I64), ("domain", I64), ("capacity_Bps", F64),
                                ("latency_s", F64)], "topo.links")
    assert m.topo.links.column("latency_s").to_pylist() == [0.0, 0.01]
    assert m.topo.n_nodes == 3 and m.topo.n_links == 2


def test_arrow_c_stream(run):
    _, res = run
    for name in SCHEMAS:
        t = getattr(res, name)
        assert hasattr(t, "__arrow_c_stream__")
        back = pa.RecordBatchReader.from_stream(t).read_all()
        assert back.equals(t)


def test_polars_reads_results(run):
    pl = pytest.importorskip("polars")
    _, res = run
    df = pl.DataFrame(res.flows)
    assert df.columns == res.flows.column_names
    assert df["finish_s"].to_list() == res.flows.column("finish_s").to_pylist()
    assert df["flow_id"].dtype == pl.Int64


def test_duckdb_reads_results(run):
    duckdb = pytest.importorskip("duckdb")
    _, res = run
    flows = res.flows  # noqa: F841  (DuckDB finds it by name)
    got = duckdb.sql("SELECT flow_id, finish_s FROM flows ORDER BY flow_id").fetchall()
    assert got == list(zip(res.flows.column("flow_id").to_pylist(),
                           res.flows.column("finish_s").to_pylist()))
    links = res.links  # noqa: F841
    total = duckdb.sql("SELECT sum(bytes_carried) FROM links").fetchall()[0][0]
    assert total == pytest.approx(100.0 + 100.0 + 50.0 + 25.0, rel=1e-12)


def test_to_parquet_round_trip(run, tmp_path):
    _, res = run
    res.to_parquet(tmp_path)
    for name in ("flows", "delays", "links"):
        path = tmp_path / f"{name}.parquet"
        assert path.exists(), f"{path} not written (found {sorted(p.name for p in tmp_path.iterdir())})"
        back = pq.read_table(path)
        table = getattr(res, name)
        assert back.schema.equals(table.schema), name
        # Names keep their values and types; the file's dictionaries hold only the names used.
        for column in table.column_names:
            assert back[column].to_pylist() == table[column].to_pylist(), (name, column)


def test_a_parquet_file_keeps_only_the_node_names_its_rows_use(tmp_path):
    fab = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    sc = fs.Scenario(fab)
    sc.add_flow(0, 9, "1MiB")
    res = sc.run()
    assert len(res.flows["src_name"].chunks[0].dictionary) == fab.n_nodes  # in memory: the ids index it
    res.to_parquet(tmp_path)
    back = pq.read_table(tmp_path / "flows.parquet")
    assert back["src_name"].chunks[0].dictionary.to_pylist() == ["gpu0"]
    assert back["dst_name"].to_pylist() == ["gpu9"]
    links = pq.read_table(tmp_path / "links.parquet")
    assert links["src_name"].to_pylist() == fab.names_of(links["src"])


def test_to_parquet_leaves_one_run_in_the_directory(tmp_path):
    """A run with recorded rates and a collective, then one without either, written to the
    same directory: the first run's rate_changes and collectives files go (globbing the
    directory mixed the two runs)."""
    fabric = fs.hgx_h100()
    sc = fs.Scenario(fabric)
    sc.add_collective("all_reduce", fabric.gpus, "1MiB", algorithm="ring")
    first = sc.run(record_rates=True).to_parquet(tmp_path)
    assert {pathlib.Path(p).name for p in first} >= {"rate_changes.parquet", "collectives.parquet"}
    plain = fs.Scenario(fabric)
    plain.add_flow(0, 1, "1MiB")
    second = plain.run().to_parquet(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(pathlib.Path(p).name for p in second)
    assert sorted(pathlib.Path(p).name for p in second) == ["delays.parquet", "flows.parquet", "links.parquet"]


def test_a_collectives_flow_has_null_src_and_dst():
    """A collective runs as coupled flows over many edges: no one src or dst, so null (it
    was the core's internal 'none' id, 4294967295, which no node has)."""
    fabric = fs.hgx_h100()
    sc = fs.Scenario(fabric)
    sc.add_collective("all_reduce", fabric.gpus, "1MiB", algorithm="ring")
    plain = sc.add_flow(0, 1, "1MiB")
    flows = sc.run().flows
    rows = {r["flow_id"]: r for r in flows.select(["flow_id", "src", "dst"]).to_pylist()}
    assert rows.pop(plain) == {"flow_id": plain, "src": 0, "dst": 1}
    assert rows and all(r["src"] is None and r["dst"] is None for r in rows.values())
    assert flows.schema.field("src").type == I64


def test_from_networkx_graph_and_digraph():
    nx = pytest.importorskip("networkx")
    g = nx.Graph()
    g.add_edge("a", "b", capacity_Bps=10.0, latency_s=0.5)
    g.add_edge("b", "c", capacity_Bps=20.0, latency_s=0.0)
    topo = fs.Topology.from_networkx(g)
    assert topo.n_nodes == 3 and topo.n_links == 4
    links = topo.links.to_pylist()
    # Graph edge -> u->v then v->u; nodes numbered in G.nodes order (a=0, b=1, c=2).
    assert [(r["src"], r["dst"], r["capacity_Bps"]) for r in links] == [
        (0, 1, 10.0), (1, 0, 10.0), (1, 2, 20.0), (2, 1, 20.0)]
    sc = fs.Scenario(topo)
    f = sc.add_flow("a", "c", 20.0)
    assert sc.route_of(f) == [0, 2]
    res = sc.run()
    # Latency 0.5, then 20 B at min(10, 20) = 10 B/s: 2 s.
    assert res.flows.column("finish_s").to_pylist() == [pytest.approx(2.5, rel=1e-12)]

    dg = nx.DiGraph()
    dg.add_edge(0, 1, capacity_Bps=1.0, latency_s=0.0)
    assert fs.Topology.from_networkx(dg).n_links == 1


def test_parquet_files_say_which_run_they_come_from(tmp_path):
    # Parquet output carried no fabricsim version, seed or units.
    import json

    import pyarrow.parquet as pq

    sc = fs.Scenario(fs.Topology.from_arrays([0], [1], 1e9), seed=7)
    sc.add_flow(0, 1, 1e6)
    res = sc.run(tolerance=1e-3)
    res.to_parquet(tmp_path)
    meta = pq.read_schema(tmp_path / "flows.parquet").metadata
    assert meta[b"fabricsim.version"].decode() == fs.__version__
    assert meta[b"fabricsim.seed"] == b"7"
    assert meta[b"fabricsim.mode"] == b"fast" and float(meta[b"fabricsim.tolerance"]) == 1e-3
    units = json.loads(meta[b"fabricsim.units"])
    assert units["finish_s"] == "s" and units["bytes"] == "bytes" and units["mean_rate_Bps"] == "bytes/s"
    assert "src" not in units


def test_a_results_column_goes_back_into_the_api_as_it_is():
    # A flows table's columns (pyarrow arrays) name nodes and size new flows directly.
    fab = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    sc = fs.Scenario(fab)
    sc.add_flows([0, 1, 2], [9, 10, 3], ["1MB", "2MB", "3MB"])
    flows = sc.run().flows
    assert fab.names_of(flows["src"]) == fab.names_of(flows["src"].to_pylist())
    again = fs.Scenario(fab)
    again.add_flows(flows["src"], flows["dst"], flows["bytes"])
    assert again.run().flows["finish_s"].to_pylist() == flows["finish_s"].to_pylist()


@pytest.mark.parametrize("column", [pa.array([0, None, 2]), pa.chunked_array([[0], [None, 2]])])
def test_a_column_with_nulls_is_refused_naming_the_first(column):
    fab = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    with pytest.raises(fs.InvalidArgumentError, match=r"nodes\[1\] is null"):
        fab.names_of(column)
    sc = fs.Scenario(fab)
    with pytest.raises(fs.InvalidArgumentError, match=r"\[1\] is null"):
        sc.add_flows([0, 1, 2], [9, 10, 3], column)
    assert sc.n_activities == 0  # nothing added
