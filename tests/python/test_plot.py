"""Plots (fabricsim.plot), checked by what they draw: axes, labels and the data on them; the
Perfetto/Chrome trace; progress bars."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fabricsim as fs
from fabricsim import cli, plot, progress, trace

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


def line_scenario():
    """Links 0->1 and 1->2 at 1 GB/s, no latency: a (1 GB, 0->2) and b (0.5 GB, 0->1) share
    link 0 at 0.5 GB/s each until b ends at 1 s; a then runs alone and ends at 1.5 s."""
    topo = fs.Topology.from_arrays([0, 1], [1, 2], 1e9)
    sc = fs.Scenario(topo)
    sc.add_flow(0, 2, 1e9, tag="a")
    sc.add_flow(0, 1, 0.5e9, tag="b")
    return sc


def test_utilisation_heatmap_shows_the_hand_solved_loads(tmp_path):
    sc = line_scenario()
    res = sc.run(record_rates=True)
    fig = plot.link_utilization(res, sc, bins=3)
    ax = fig.axes[0]
    image = ax.images[0]
    # Busiest first: link 0 full all along; link 1 half while b runs, then full.
    np.testing.assert_allclose(image.get_array(), [[1.0, 1.0, 1.0], [0.5, 0.5, 1.0]], rtol=1e-12)
    assert image.get_extent() == [0.0, 1.5, 2.0, 0.0]
    assert image.get_clim() == (0.0, 1.0)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0: node0\u2192node1", "1: node1\u2192node2"]
    assert ax.get_xlabel() == "time (s)" and ax.get_ylabel() == "link"
    assert "top 2 of 2 links" in ax.get_title()
    assert fig.axes[1].get_ylabel() == "utilisation"  # the colour bar
    path = plot.save(fig, tmp_path / "u.png")
    assert open(path, "rb").read(8) == PNG


def test_utilisation_needs_the_rates():
    sc = line_scenario()
    with pytest.raises(fs.InvalidArgumentError, match="record_rates=True"):
        plot.link_utilization(sc.run(), sc)


@pytest.mark.parametrize("fabric", [
    lambda: fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2", tiers=2),
    lambda: fs.clos(n_hosts=128, switch="quantum-2", nic="cx7", tiers=3),
    lambda: fs.nvl72(),
], ids=["hgx-cluster", "clos-3-tier", "nvl72"])
def test_link_loads_add_up_to_what_the_run_reports(fabric):
    # Sprayed flows load pooled bundles; the plot spreads a bundle's load over its member
    # links. Integrated over time, every link must carry what the engine says it carried.
    fabric = fabric()
    eps = fabric.gpus if fabric.n_gpus else fabric.nics
    sc = fs.Scenario(fabric, seed=1)
    dst = np.roll(eps, 5)
    sc.add_flows(eps, dst, "8MiB")
    sc.add_collective("all_reduce", eps[:16], "32MiB")
    res = sc.run(record_rates=True)
    edges, ids, load = plot.link_load(res, sc, bins=40)
    carried = load.sum(axis=1) * (edges[1] - edges[0])
    np.testing.assert_allclose(carried, res.links["bytes_carried"].to_numpy(), rtol=1e-9, atol=1.0)
    assert np.all(load <= res.links["capacity_Bps"].to_numpy()[:, None] * (1 + 1e-9))


def test_fct_cdf_steps_through_every_flow():
    sc = line_scenario()
    fig = plot.fct_cdf(sc.run())
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    # One flow per tag: a point at its time, not a vertical step.
    assert set(lines) == {"a (1): 1.5 s", "b (1): 1 s"}
    np.testing.assert_allclose(lines["a (1): 1.5 s"].get_xdata(), [1.5])
    np.testing.assert_allclose(lines["a (1): 1.5 s"].get_ydata(), [1.0])
    assert lines["a (1): 1.5 s"].get_linestyle() == "None" and lines["a (1): 1.5 s"].get_marker() == "o"
    np.testing.assert_allclose(lines["b (1): 1 s"].get_xdata(), [1.0])
    assert ax.get_xlabel() == "completion time (s)" and ax.get_ylabel() == "fraction completed"
    assert ax.get_xscale() == "linear"  # 1 s to 1.5 s is no span for a log axis

    topo = fs.Topology.from_arrays([0], [1], 1e9)
    sc = fs.Scenario(topo)
    sizes = np.geomspace(1e3, 1e9, 7)
    sc.add_flows([0] * 7, [1] * 7, sizes, start_s=np.arange(7) * 10.0)  # one at a time
    fig = plot.fct_cdf(sc.run(), sc, by=None)
    (line,) = fig.axes[0].get_lines()
    np.testing.assert_allclose(line.get_xdata()[1:] * 1.0, sizes / 1e9)
    np.testing.assert_allclose(line.get_ydata(), np.arange(8) / 7)
    assert fig.axes[0].get_xscale() == "log"
    assert fig.axes[0].get_title() == "Completion times on 2 nodes, 1 link"


def test_fct_of_a_collective_run_shows_each_collective_against_its_idle_time():
    # Its flows finish together (one pipelined transfer): their CDF was one vertical line.
    sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
    sc.add_collective("all_reduce", None, "256MiB")
    sc.add_collective("all_reduce", range(8), "64MiB")
    sc.add_collective("all_to_all", range(8, 16), "64MiB")  # at the same time: contention
    res = sc.run()
    fig = plot.fct_cdf(res, sc)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    colls = res.collectives.to_pylist()
    took = sorted(r["finish_s"] - r["start_s"] for r in colls if r["op"] == "all_reduce")
    idle = sorted(r["analytical_s"] for r in colls if r["op"] == "all_reduce")
    steps = lines["all_reduce (collectives)"]
    np.testing.assert_allclose(steps.get_xdata(), np.array([took[0], *took]) * 1e3, rtol=1e-12)  # ms
    np.testing.assert_allclose(steps.get_ydata(), [0.0, 0.5, 1.0])
    hollow = lines["all_reduce on an idle fabric"]
    np.testing.assert_allclose(hollow.get_xdata(), np.array(idle) * 1e3, rtol=1e-12)
    assert hollow.get_markerfacecolor() == "none"
    (a2a,) = [r for r in colls if r["op"] == "all_to_all"]
    point = next(line for name, line in lines.items() if name.startswith("all_to_all (collectives): "))
    np.testing.assert_allclose(point.get_xdata(), [(a2a["finish_s"] - a2a["start_s"]) * 1e3], rtol=1e-12)
    assert not any(name.startswith("all_reduce (") and "flows" in name for name in lines)  # its flows left out
    assert ax.get_title() == "Completion times on 2 x 8 H100 on quantum-2"


def collective_scenario():
    sc = fs.Scenario(fs.hgx_h100())
    compute = sc.add_delay("1ms", tag="compute")
    ar = sc.add_collective("all_reduce", [0, 1, 2, 3], "64MiB", after=compute, tag="grads")
    sc.add_delay("200us", after=ar, tag="optimizer")
    return sc


def bars_of(ax):
    """Each bar drawn: (lane label, start, width) read off the axes' rectangles."""
    labels = [t.get_text() for t in ax.get_yticklabels()]
    out = []
    for c in ax.collections:
        for path in c.get_paths():
            (x0, y0), (x1, _) = path.vertices.min(axis=0), path.vertices.max(axis=0)
            out.append((labels[int(y0)], x0, x1 - x0))
    return sorted(out)


def test_timeline_shows_each_collective_on_its_ranks():
    sc = collective_scenario()
    res = sc.run()
    t = trace.timeline(res, sc)
    assert t["lane"].to_pylist() == ["compute", "gpu0", "gpu1", "gpu2", "gpu3", "optimizer"]
    coll = res.collectives.to_pylist()[0]
    rows = t.to_pylist()
    assert {r["kind"] for r in rows[1:5]} == {"collective"}
    assert all(r["start_s"] == coll["start_s"] and r["finish_s"] == coll["finish_s"] for r in rows[1:5])
    assert rows[0]["finish_s"] == pytest.approx(1e-3) and rows[5]["finish_s"] == pytest.approx(res.makespan_s)

    fig = plot.timeline(res, sc)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["compute", "gpu0", "gpu1", "gpu2", "gpu3", "optimizer"]
    scale = 1e3  # ms
    drawn = bars_of(ax)
    assert [(lane, pytest.approx(x), pytest.approx(w)) for lane, x, w in drawn] == [
        (lane, (r["start_s"] * scale), ((r["finish_s"] - r["start_s"]) * scale)) for lane, r in
        sorted(zip(t["lane"].to_pylist(), rows), key=lambda p: (p[0], p[1]["start_s"]))]
    assert ax.get_xlim() == pytest.approx((0.0, res.makespan_s * scale))
    assert ax.get_xlabel() == "time (ms)"
    assert ax.get_title() == "Timeline on 8 H100: all_reduce"
    labels = {t.get_text() for t in ax.get_legend().get_texts()}
    assert labels == {"compute", "optimizer", f"all_reduce ({coll['algorithm']})"}
    # Lanes by the caller, and flows on their sources.
    t = trace.timeline(res, sc, lanes={0: "stage 0"})
    assert t["lane"].to_pylist()[-1] == "stage 0"
    sc2 = line_scenario()
    t = trace.timeline(sc2.run(), sc2)
    # Both flows leave node0 at once: the second on a lane of its own beside the first.
    assert t["lane"].to_pylist() == ["node0", "node0 #2"] and t["kind"].to_pylist() == ["flow", "flow"]
    assert trace.timeline(sc2.run(), sc2, flows=False).num_rows == 0


def test_concurrent_collectives_get_lanes_of_their_own():
    # An all-reduce from 1.2 ms and an all-to-all from 1 ms on the same GPUs: the all-reduce
    # appeared to start when the all-to-all ended, drawn over it.
    sc = fs.Scenario(fs.hgx_h100())
    sc.add_collective("all_to_all", range(4), "256MiB", start_s="1ms")
    sc.add_collective("all_reduce", range(4), "1GiB", start_s="1.2ms")
    res = sc.run()
    colls = {r["op"]: r for r in res.collectives.to_pylist()}
    assert colls["all_reduce"]["start_s"] < colls["all_to_all"]["finish_s"]  # they overlap
    t = trace.timeline(res, sc).to_pylist()
    lanes = {(r["lane"], r["name"].split(" ")[0]) for r in t}
    assert lanes == {(f"gpu{g}", "all_to_all") for g in range(4)} | {(f"gpu{g} #2", "all_reduce") for g in range(4)}
    for r in t:  # each where it really is
        c = colls[r["name"].split(" ")[0]]
        assert (r["start_s"], r["finish_s"]) == (c["start_s"], c["finish_s"])
    ax = plot.timeline(res, sc).axes[0]
    assert [x.get_text() for x in ax.get_yticklabels()] == ["gpu0", "gpu0 #2", "gpu1", "gpu1 #2", "gpu2", "gpu2 #2",
                                                            "gpu3", "gpu3 #2"]
    drawn = bars_of(ax)
    assert ("gpu0 #2", pytest.approx(colls["all_reduce"]["start_s"] * 1e3),
            pytest.approx((colls["all_reduce"]["finish_s"] - colls["all_reduce"]["start_s"]) * 1e3)) in drawn
    # Nothing on one lane overlaps.
    for lane in {d[0] for d in drawn}:
        spans = sorted((x, x + w) for l, x, w in drawn if l == lane)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(spans, spans[1:]))
    events = trace.trace_events(res, sc)["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(threads.values()) == sorted(x.get_text() for x in ax.get_yticklabels())


def test_the_demo_timeline_draws_its_flows():
    # The demo's timeline was one bar (its compute) in 155 ms: the flows were left out.
    from fabricsim.studies.demo import demo_scenario

    sc = demo_scenario(n_leaves=2, hosts_per_leaf=2, n_spines=1, link_Bps=50e9, transfer_bytes=2**20, seed=0)
    res = sc.run()
    ax = plot.timeline(res, sc).axes[0]
    drawn = bars_of(ax)
    flows = res.flows.to_pylist()
    assert len(drawn) == res.delays.num_rows + len(flows)
    for f in flows:  # every flow on its source's lane, from ready to finish
        assert any(lane.split(" #")[0] == f["src_name"] and x == pytest.approx(f["ready_s"] * 1e3)
                   and w == pytest.approx((f["finish_s"] - f["ready_s"]) * 1e3) for lane, x, w in drawn), f


def test_busbw_against_size(tmp_path, capsys):
    table = fs.nccl_tests(fs.hgx_h100(), "all_reduce", "1M", "4M", 2)
    fig = plot.busbw(table, by="algorithm")
    ax = fig.axes[0]
    xs = np.concatenate([line.get_xdata() for line in ax.get_lines()])
    ys = np.concatenate([line.get_ydata() for line in ax.get_lines()])
    np.testing.assert_allclose(np.unique(xs), table["size_bytes"].to_numpy())
    np.testing.assert_allclose(np.sort(ys[~np.isnan(ys)]), np.sort(table["busbw_Bps"].to_numpy() / 1e9))
    assert ax.get_xscale() == "log" and ax.get_ylabel() == "busbw (GB/s)" and ax.get_xlabel() == "size"
    fig.canvas.draw()
    ticks = {t.get_text() for t in ax.get_xticklabels() if t.get_text()}
    assert ticks >= {"1 MiB", "2 MiB", "4 MiB"}, ticks  # sizes as they are written, not 2^20
    assert ax.get_title() == "all_reduce bus bandwidth on 8 H100"
    # from the shell: nccl-tests --plot, and plot from a table written before
    png = tmp_path / "busbw.png"
    assert cli.main(["nccl-tests", "-b", "1M", "-e", "2M", "--no-progress", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == PNG
    pq.write_table(table, tmp_path / "t.parquet")
    assert cli.main(["plot", "busbw", str(tmp_path / "t.parquet"), "-o", str(tmp_path / "b2.png"), "--by", "algorithm"]) == 0
    assert (tmp_path / "b2.png").read_bytes()[:8] == PNG
    capsys.readouterr()


def test_busbw_leaves_a_gap_where_another_algorithm_ran():
    # Ring at the small and large sizes, tree in between: ring's line was drawn straight across.
    table = pa.table({"size_bytes": [1, 2, 4, 8, 16], "busbw_Bps": [1e9, 2e9, 3e9, 4e9, 5e9],
                      "algorithm": ["ring", "tree", "tree", "ring", "ring"]})
    ax = plot.busbw(table, by="algorithm", title="t").axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    np.testing.assert_array_equal(lines["algorithm=ring"].get_xdata(), [1, 2, 4, 8, 16])
    np.testing.assert_array_equal(lines["algorithm=ring"].get_ydata(), [1, np.nan, np.nan, 4, 5])
    np.testing.assert_array_equal(lines["algorithm=tree"].get_ydata(), [np.nan, 2, 3, np.nan, np.nan])
    assert ax.get_title() == "t"


def test_trace_is_chrome_trace_event_format(tmp_path):
    sc = collective_scenario()
    res = sc.run()
    path = trace.write_trace(res, tmp_path / "t.json", scenario=sc)
    data = json.loads(open(path).read())
    events = data["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == 6
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    coll = res.collectives.to_pylist()[0]
    on_ranks = [e for e in complete if e["cat"] == "collective"]
    assert sorted(threads[e["pid"], e["tid"]] for e in on_ranks) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    for e in on_ranks:
        assert e["ts"] == pytest.approx(coll["start_s"] * 1e6)
        assert e["dur"] == pytest.approx((coll["finish_s"] - coll["start_s"]) * 1e6)
    delays = [e for e in complete if e["cat"] == "delay"]
    assert {e["pid"] for e in delays} == {2} and {e["name"] for e in delays} == {"compute", "optimizer"}
    assert data["otherData"]["makespan_s"] == res.makespan_s


# ---- progress ---------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_on_for_a_terminal_only():
    assert progress.enabled(None, _Tty()) is True
    assert progress.enabled(None, io.StringIO()) is False
    assert progress.enabled(True, io.StringIO()) is True
    assert progress.enabled(False, _Tty()) is False
    with pytest.raises(fs.InvalidArgumentError):
        progress.enabled("yes")


def test_run_progress_bar_counts_activities(capsys):
    with progress.RunProgress("case") as bar:
        bar(5, 20, 1.5e-3)
        assert (bar._bar.n, bar._bar.total) == (5, 20)
        bar.finish(2e-3)
        assert bar._bar.n == 20
    err = capsys.readouterr().err
    assert "case" in err and "20/20" in err and "sim 2 ms" in err


def test_commands_show_progress_on_request_and_stay_quiet_otherwise(tmp_path, capsys):
    # stderr is captured, so not a terminal: quiet by default
    assert cli.main(["demo", "--leaves", "2", "--hosts-per-leaf", "2", "--spines", "1", "--size", "1MiB"]) == 0
    assert capsys.readouterr().err == ""
    assert cli.main(["demo", "--leaves", "2", "--hosts-per-leaf", "2", "--spines", "1", "--size", "1MiB",
                     "--progress"]) == 0
    assert "demo" in capsys.readouterr().err
    assert cli.main(["nccl-tests", "-b", "1M", "-e", "4M", "--progress"]) == 0
    out, err = capsys.readouterr()
    assert "sizes" in err and "3/3" in err
    rows = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert len(rows) == 3 and all(len(r.split()) > 8 for r in rows)
    assert cli.main(["nccl-tests", "-b", "1M", "-e", "4M"]) == 0
    assert capsys.readouterr().err == ""
    assert cli.main(["validate", "h100-ring-8", "--progress"]) == 0
    err = capsys.readouterr().err
    assert "validate" in err and "h100-ring-8" in err


def test_the_workflows_doc_examples_run(tmp_path, monkeypatch, capsys):
    import pathlib
    import re

    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "workflows.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks[:2]:  # plots and a sweep; the Dask ones need a cluster
        exec(compile(block, str(doc), "exec"), namespace)
    for name in ("utilization", "fct", "timeline", "busbw"):
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    table = namespace["table"]
    assert table.num_rows == 12 and table.column_names[:3] == ["n_domains", "size", "routing"]
    assert "Client(" in blocks[2] and "tcp://SCHEDULER:8786" in blocks[3]


def test_nccl_tests_bars_follow_the_sizes(monkeypatch, capsys):
    bars = cli._SizeProgress(True)
    bars.start([2**20, 2**21])
    assert "running 1 MiB" in capsys.readouterr().err
    bars.run_callback(10, 40, 1e-3)  # the engine reports: a bar for the size running
    assert bars._inner._bar.n == 10 and "size 1 MiB" in capsys.readouterr().err
    bars.row_done()
    assert bars._inner is None and bars._outer.n == 1
    assert "running 2 MiB" in capsys.readouterr().err
    bars.write("a row")
    assert capsys.readouterr().out == "a row\n"
    bars.close()
    capsys.readouterr()
    quiet = cli._SizeProgress(False)
    assert quiet.run_callback is False
    quiet.start([1])
    quiet.row_done()
    quiet.close()
    assert capsys.readouterr().err == ""
