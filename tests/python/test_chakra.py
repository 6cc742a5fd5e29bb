"""Chakra execution traces both ways (fabricsim.chakra): traces written by an independent
encoder (chakra_wire.py) and by fabricsim's writer, read back into scenarios whose structure and
simulated times are those of the same workload built through the API; malformed traces
refused with errors naming the file, rank and node."""

from __future__ import annotations

import gzip
import json
import math
import os
import sys
import warnings

import numpy as np
import pyarrow as pa
import pytest

import fabricsim as fs
import chakra_wire as w

pytest.importorskip("google.protobuf", reason="fabricsim.chakra needs protobuf (pip install 'fabricsim[chakra]')")

MiB = 1 << 20


def write_traces(directory, ranks, prefix="trace", groups=None):
    """Each rank's nodes (chakra_wire messages) as ``directory/<prefix>.<rank>.et``."""
    os.makedirs(directory, exist_ok=True)
    for r, nodes in enumerate(ranks):
        with open(os.path.join(directory, f"{prefix}.{r}.et"), "wb") as f:
            f.write(w.trace(nodes))
    if groups is not None:
        with open(os.path.join(directory, "comm_group.json"), "w") as f:
            json.dump(groups, f)
    return str(directory)


# Four ranks: compute of different lengths, an all-gather on a process group of two ranks, a
# send from rank 0 to rank 2 (posted on rank 0 after the all-gather, by a control dependency),
# compute after each, then an all-reduce over every rank.
def four_ranks():
    r0 = [w.compute(0, 100), w.collective(1, w.ALL_GATHER, MiB, pg="1", deps=(0,)),
          w.node(2, "send", w.SEND, ctrl_deps=(1,), attrs=(
              w.attr("comm_src", "int32", 0), w.attr("comm_dst", "int32", 2), w.attr("comm_size", "int64", 4 * MiB),
              w.attr("comm_tag", "int32", 7))),
          w.compute(3, 50, deps=(2,)), w.collective(4, w.ALL_REDUCE, 8 * MiB, deps=(3,))]
    r1 = [w.compute(0, 200), w.collective(1, w.ALL_GATHER, MiB, pg="1", deps=(0,)),
          w.node(2, "comp", w.COMP, ctrl_deps=(1,), duration_micros=10), w.collective(3, w.ALL_REDUCE, 8 * MiB, deps=(2,))]
    r2 = [w.compute(5, 300), w.p2p(9, w.RECV, 0, 2, 4 * MiB, tag=7), w.collective(11, w.ALL_REDUCE, 8 * MiB, deps=(5, 9))]
    r3 = [w.compute(0, 400), w.collective(1, w.ALL_REDUCE, 8 * MiB, deps=(0,))]
    return [r0, r1, r2, r3]


def four_ranks_api(fabric):
    """The same workload through the API, on GPUs 0 to 3, and the rank of each of its delays."""
    sc = fs.Scenario(fabric)
    c = [sc.add_delay(f"{t}us") for t in (100, 200, 300, 400)]
    ag = sc.add_collective("all_gather", [0, 1], 2 * MiB, after=[c[0], c[1]])
    f = sc.add_flow(0, 2, 4 * MiB, after=ag)
    d0 = sc.add_delay("50us", after=f)
    d1 = sc.add_delay("10us", after=ag)
    sc.add_collective("all_reduce", [0, 1, 2, 3], 8 * MiB, after=[d0, d1, c[2], f, c[3]])
    return sc, {c[0]: [0], c[1]: [1], c[2]: [2], c[3]: [3], d0: [0], d1: [1]}


def same_run(a, b):
    """Two results of the same workload: the same makespan, collectives and flows."""
    assert a.summary.makespan_s == pytest.approx(b.summary.makespan_s, rel=1e-12)
    cols = ["op", "algorithm", "n_ranks", "size_bytes", "start_s", "finish_s"]
    ca, cb = a.collectives.select(cols).to_pylist(), b.collectives.select(cols).to_pylist()
    key = lambda r: (r["finish_s"], r["op"])  # noqa: E731
    for x, y in zip(sorted(ca, key=key), sorted(cb, key=key), strict=True):
        assert x["op"] == y["op"] and x["algorithm"] == y["algorithm"] and x["n_ranks"] == y["n_ranks"]
        assert x["size_bytes"] == y["size_bytes"]
        assert x["finish_s"] == pytest.approx(y["finish_s"], rel=1e-12)
    # Every flow, the collectives' own too: the same transfers, finishing at the same times.
    # (A pipelined ring is one coupled flow of no single source: src and dst are null.)
    fa, fb = (sorted(zip([-1 if x is None else x for x in r.flows["src"].to_pylist()],
                         [-1 if x is None else x for x in r.flows["dst"].to_pylist()],
                         r.flows["bytes"].to_pylist(), r.flows["finish_s"].to_pylist())) for r in (a, b))
    assert [x[:3] for x in fa] == [y[:3] for y in fb]
    assert [x[3] for x in fa] == pytest.approx([y[3] for y in fb], rel=1e-12)


def test_a_trace_from_an_independent_encoder_runs_as_the_same_workload_built_by_the_api(tmp_path):
    fabric = fs.hgx_h100()
    trace = fs.chakra.load(write_traces(tmp_path, four_ranks(), groups={"1": [0, 1]}), fabric)
    api = four_ranks_api(fabric)[0].run()
    got = trace.run()
    same_run(got, api)
    # Structure: 4 + 2 delays, 1 flow, 2 collectives; each rank's nodes mapped to them.
    nodes = trace.nodes.to_pylist()
    assert [(n["rank"], n["node_id"], n["kind"]) for n in nodes] == [
        (0, 0, "compute"), (0, 1, "collective"), (0, 2, "send"), (0, 3, "compute"), (0, 4, "collective"),
        (1, 0, "compute"), (1, 1, "collective"), (1, 2, "compute"), (1, 3, "collective"),
        (2, 5, "compute"), (2, 9, "recv"), (2, 11, "collective"), (3, 0, "compute"), (3, 1, "collective")]
    act = {(n["rank"], n["node_id"]): n["activity_id"] for n in nodes}
    assert act[(0, 1)] == act[(1, 1)]  # one all-gather for both ranks
    assert act[(0, 2)] == act[(2, 9)]  # the send and its receive: one flow
    assert len({act[(0, 4)], act[(1, 3)], act[(2, 11)], act[(3, 1)]}) == 1
    assert trace.groups == {"1": (0, 1)} and trace.ignored.num_rows == 0
    flows = got.flows.to_pylist()
    assert [(f["src"], f["dst"], f["bytes"]) for f in flows if f["tag"] == "send"] == [(0, 2, 4 * MiB)]
    # The all-gather's comm_size is each rank's input: fabricsim's size_bytes is 2 x 1 MiB.
    sizes = dict(zip(got.collectives["op"].to_pylist(), got.collectives["size_bytes"].to_pylist()))
    assert sizes == {"all_gather": 2 * MiB, "all_reduce": 8 * MiB}
    # The flow starts after the all-gather (rank 0's send waits for it by a ctrl dependency).
    ag_end = [c["finish_s"] for c in got.collectives.to_pylist() if c["op"] == "all_gather"][0]
    assert [f["ready_s"] for f in flows if f["tag"] == "send"][0] == pytest.approx(ag_end)


def test_fabricsims_writer_and_reader_round_trip_a_scenario(tmp_path):
    fabric = fs.hgx_h100()
    sc, ranks_of = four_ranks_api(fabric)
    # A delay runs where what waits for it runs: rank 2's compute, which the all-reduce waits
    # for, on all four of its ranks (at once: the same times) unless delay_ranks says where.
    for name, ranks in (("guessed", None), ("given", ranks_of)):
        out = fs.chakra.write(sc, tmp_path / name, delay_ranks=ranks)
        assert out.gpus.tolist() == [0, 1, 2, 3] and out.dropped == [] and out.left_out == {}
        assert out.n_nodes == ([9, 8, 6, 5] if ranks is None else [5, 4, 3, 2])
        back = fs.chakra.load(tmp_path / name, fabric)
        same_run(back.run(), sc.run())
    assert sorted(os.path.basename(f) for f in out.files) == ["comm_group.json"] + [f"trace.{r}.et" for r in range(4)]
    assert out.workload == os.path.join(str(tmp_path / "given"), "trace")
    assert json.loads((tmp_path / "given" / "comm_group.json").read_text()) == {"1": [0, 1], "2": [0, 1, 2, 3]}


def test_the_written_files_are_what_astra_sim_reads(tmp_path):
    # Decoded by the independent decoder: node types, attribute names and value types as
    # ASTRA-sim's workload layer reads them (comm_type and comm_size int64, comm_src, comm_dst
    # and comm_tag int32, pg_name a string), dependencies as data_deps.
    sc, ranks_of = four_ranks_api(fs.hgx_h100())
    out = fs.chakra.write(sc, tmp_path, delay_ranks=ranks_of)
    version, r0 = w.decode_trace(open(out.files[0], "rb").read())
    assert version == "0.0.4"
    assert [n["type"] for n in r0] == [w.COMP, w.COLL, w.SEND, w.COMP, w.COLL]
    assert [n["id"] for n in r0] == [0, 1, 2, 3, 4]
    comp, ag, send, after, ar = r0
    assert comp["duration_micros"] == 100 and comp["attrs"]["fabricsim.duration_s"] == ("double", pytest.approx(1e-4))
    assert comp["attrs"]["is_cpu_op"] == ("bool", False)
    assert ag["attrs"]["comm_type"] == ("int64", w.ALL_GATHER)
    assert ag["attrs"]["comm_size"] == ("int64", MiB)  # each rank's input: 2 MiB gathered over 2 ranks
    assert ag["attrs"]["pg_name"] == ("string", "1") and ag["data_deps"] == [0]
    assert {k: v for k, v in send["attrs"].items() if k.startswith("comm_")} == {
        "comm_src": ("int32", 0), "comm_dst": ("int32", 2), "comm_size": ("int64", 4 * MiB), "comm_tag": ("int32", 1)}
    assert send["data_deps"] == [1] and after["data_deps"] == [2] and ar["data_deps"] == [2, 3]  # the flow too
    assert ar["attrs"]["pg_name"] == ("string", "2")
    _, r2 = w.decode_trace(open(out.files[2], "rb").read())
    recv = [n for n in r2 if n["type"] == w.RECV][0]
    assert recv["attrs"]["comm_src"] == ("int32", 0) and recv["attrs"]["comm_dst"] == ("int32", 2)
    assert recv["attrs"]["comm_tag"] == send["attrs"]["comm_tag"]


@pytest.mark.parametrize("par", [dict(tp=8, pp=2), dict(tp=4, pp=2, dp=2, dp_sharding="zero1"),
                                 dict(tp=2, pp=2, dp=2, cp=2)], ids=["tp8-pp2", "tp4-pp2-dp2-zero1", "tp2-pp2-dp2-cp2"])
def test_a_training_step_written_and_read_back_runs_in_the_steps_time(tmp_path, par):
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    step = fs.TrainingStep("llama3-8b", fs.Parallelism(**par), fabric)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fs.chakra.write(step, tmp_path)
    assert len(out.gpus) == 16 and len(out.files) == 17
    if "cp" in par:
        # The CP ring of one TP rank waits for the pipeline transfer to another: no rank holds both.
        assert out.dropped and "dependencies between activities on different GPUs" in str(caught[0].message)
    else:
        assert out.dropped == [] and not caught
    back = fs.chakra.load(tmp_path, fabric)
    assert back.run().summary.makespan_s == pytest.approx(step.run().step_s, rel=1e-12)
    # Compute is per GPU in the trace: every rank has compute and collective nodes.
    kinds = back.nodes.group_by(["rank", "kind"]).aggregate([]).to_pylist()
    assert {(k["rank"], k["kind"]) for k in kinds} >= {(r, "compute") for r in range(16)}


def test_compute_from_flops_memory_nodes_and_pytorch_process_groups(tmp_path):
    pg_values = repr(['[{"pg_name": "5", "pg_desc": "tp", "backend_config": "cuda:nccl", "ranks": [1, 2]}]'])
    ranks = [
        [w.node(0, "mm", w.COMP, duration_micros=999, attrs=(w.attr("num_ops", "int64", 10**12),)),
         w.node(1, "cpu", w.COMP, duration_micros=30, attrs=(w.attr("is_cpu_op", "bool", True),), data_deps=(0,)),
         w.node(2, "load", w.MEM_LOAD, data_deps=(1,), attrs=(w.attr("tensor_size", "uint64", 10**9),))],
        [w.node(0, "## process_group:init ##", w.METADATA, inputs_values=pg_values),
         w.collective(1, w.ALL_REDUCE, MiB, pg="5", deps=(0,))],
        [w.collective(0, w.ALL_REDUCE, MiB, pg="5")],
    ]
    path = write_traces(tmp_path, ranks)
    t = fs.chakra.load(path, fs.hgx_h100(), compute="flops", flop_per_s=1e15, memory_Bps="1TB/s")
    assert t.groups == {"5": (1, 2)}
    delays = t.run().delays.to_pylist()
    by_tag = {d["tag"]: d["finish_s"] for d in delays}
    assert by_tag["mm"] == pytest.approx(1e-3)  # 1e12 FLOPs at 1e15 FLOP/s, not the recorded 999 us
    assert by_tag["cpu"] == pytest.approx(1e-3 + 30e-6)  # a CPU operator keeps its duration
    assert by_tag["load"] == pytest.approx(1e-3 + 30e-6 + 1e-3)  # 1 GB at 1 TB/s
    # The metadata node takes no time: the all-reduce waits for nothing.
    kinds = t.nodes["kind"].cast(pa.string()).to_pylist()
    assert [a for k, a in zip(kinds, t.nodes["activity_id"].to_pylist()) if k == "metadata"] == [None]
    with pytest.raises(fs.InvalidArgumentError, match="flop_per_s"):
        fs.chakra.load(path, fs.hgx_h100(), compute="flops")
    with pytest.raises(fs.ChakraTraceError, match="mem_load") as e:
        fs.chakra.load(path, fs.hgx_h100())
    assert "memory_Bps" in str(e.value)


def test_a_placement_puts_ranks_on_the_gpus_it_names(tmp_path):
    path = write_traces(tmp_path, [[w.p2p(0, w.SEND, 0, 1, MiB)], [w.p2p(0, w.RECV, 0, 1, MiB)]])
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    t = fs.chakra.load(path, fabric, placement=[3, 11])
    flow = t.run().flows.to_pylist()[0]
    assert (flow["src"], flow["dst"]) == (3, 11) and t.placement.tolist() == [3, 11]
    assert fs.chakra.load(path, fabric, placement={0: 5, 1: 4}).placement.tolist() == [5, 4]
    with pytest.raises(fs.InvalidArgumentError, match="ranks 0 and 1 on the same node 4"):
        fs.chakra.load(path, fabric, placement=[4, 4])
    with pytest.raises(fs.InvalidArgumentError, match="2 ranks, the fabric 1 GPUs"):
        fs.chakra.load(path, fs.nvlink_domain(gpu="h100", switch="nvswitch3", n_gpus=1))


def test_gzip_traces_and_a_prefix_path(tmp_path):
    write_traces(tmp_path, [[w.compute(0, 5)], [w.compute(0, 7)]], prefix="job")
    for r in range(2):
        raw = (tmp_path / f"job.{r}.et").read_bytes()
        (tmp_path / f"job.{r}.et").unlink()
        (tmp_path / f"job.{r}.et.gz").write_bytes(gzip.compress(raw))
    t = fs.chakra.load(tmp_path / "job", fs.hgx_h100())
    assert t.run().summary.makespan_s == pytest.approx(7e-6)


# ---- malformed traces ---------------------------------------------------------------------------


def test_a_truncated_file_is_refused_with_its_rank_and_byte(tmp_path):
    path = write_traces(tmp_path, four_ranks(), groups={"1": [0, 1]})
    f = tmp_path / "trace.2.et"
    f.write_bytes(f.read_bytes()[:-3])
    with pytest.raises(fs.ChakraTraceError, match=r"trace\.2\.et: the file ends inside message 3\b.*truncated") as e:
        fs.chakra.load(path, fs.hgx_h100())
    assert e.value.rank == 2 and e.value.path.endswith("trace.2.et")


def test_bytes_that_are_not_a_trace_are_refused(tmp_path):
    (tmp_path / "x.0.et").write_bytes(b"\x04\xff\xff\xff\xff")
    with pytest.raises(fs.ChakraTraceError, match="message 0 .*does not decode"):
        fs.chakra.load(tmp_path, fs.hgx_h100())
    (tmp_path / "x.0.et").write_bytes(b"")
    with pytest.raises(fs.ChakraTraceError, match="empty"):
        fs.chakra.load(tmp_path, fs.hgx_h100())


def test_a_missing_rank_file_is_named(tmp_path):
    path = write_traces(tmp_path, [[w.compute(0, 1)]] * 4)
    (tmp_path / "trace.1.et").unlink()
    with pytest.raises(fs.ChakraTraceError, match=r"no trace for rank 1 .*found ranks 0, 2, 3") as e:
        fs.chakra.load(path, fs.hgx_h100())
    assert e.value.rank == 1
    with pytest.raises(fs.ChakraTraceError, match="no Chakra traces"):
        fs.chakra.load(tmp_path / "other", fs.hgx_h100())


def test_an_unknown_node_type_or_attribute_is_refused_unless_ignored(tmp_path):
    ranks = [[w.compute(0, 10), w.node(1, "future", 42, data_deps=(0,)),
              w.node(2, "later", w.COMP, data_deps=(1,), duration_micros=5,
                     attrs=(w.attr("comm_priority", "int32", 3),))]]
    path = write_traces(tmp_path, ranks)
    with pytest.raises(fs.ChakraTraceError) as e:
        fs.chakra.load(path, fs.hgx_h100())
    assert "node type 'type 42': 1 node(s), first rank 0 node 1" in str(e.value)
    assert "attribute 'comm_priority': 1 node(s), first rank 0 node 2" in str(e.value)
    t = fs.chakra.load(path, fs.hgx_h100(), unknown="ignore")
    assert t.ignored.to_pylist() == [
        {"what": "attribute", "name": "comm_priority", "count": 1, "first_rank": 0, "first_node_id": 2},
        {"what": "node type", "name": "type 42", "count": 1, "first_rank": 0, "first_node_id": 1}]
    # The unknown node takes no time and its dependencies pass through it: 10 us then 5 us.
    assert t.run().summary.makespan_s == pytest.approx(15e-6)
    assert t.nodes["activity_id"].to_pylist() == [0, None, 1]


def test_a_dependency_on_a_node_that_does_not_exist_is_named(tmp_path):
    path = write_traces(tmp_path, [[w.compute(0, 1), w.compute(1, 1, deps=(0, 99), name="mm")]])
    with pytest.raises(fs.ChakraTraceError, match=r"rank 0 node 1 \('mm'\) depends on node 99, which rank 0's trace "
                                                  "does not have"):
        fs.chakra.load(path, fs.hgx_h100())


def test_cycles_are_refused_within_a_rank_and_across_ranks(tmp_path):
    path = write_traces(tmp_path / "a", [[w.compute(0, 1, deps=(2,), name="a"), w.compute(1, 1, deps=(0,), name="b"),
                                          w.compute(2, 1, deps=(1,), name="c")]])
    with pytest.raises(fs.ChakraTraceError, match=r"cycle.*rank 0 node \d \('\w'\) -> .*-> rank 0 node"):
        fs.chakra.load(path, fs.hgx_h100())
    # Rank 0 waits for its second all-reduce before its first; rank 1 issues them in order: the
    # k-th all-reduce of each rank is one collective, so each waits for the other.
    path = write_traces(tmp_path / "b", [
        [w.collective(0, w.ALL_REDUCE, MiB, deps=(1,), name="ar1"), w.collective(1, w.ALL_REDUCE, MiB, name="ar2")],
        [w.collective(0, w.ALL_REDUCE, MiB, name="ar1"), w.collective(1, w.ALL_REDUCE, MiB, deps=(0,), name="ar2")]])
    with pytest.raises(fs.ChakraTraceError, match="cycle"):
        fs.chakra.load(path, fs.hgx_h100())
    path = write_traces(tmp_path / "c", [[w.compute(0, 1, deps=(0,), name="self")]])
    with pytest.raises(fs.ChakraTraceError, match=r"node 0 \('self'\) depends on itself"):
        fs.chakra.load(path, fs.hgx_h100())


def test_unmatched_sends_and_collectives_are_refused(tmp_path):
    path = write_traces(tmp_path / "a", [[w.p2p(0, w.SEND, 0, 1, MiB, tag=3, name="s")], [w.compute(0, 1)]])
    with pytest.raises(fs.ChakraTraceError, match=r"rank 0 node 0 \('s', send 0 -> 1, tag 3\) has no matching receive "
                                                  "on rank 1"):
        fs.chakra.load(path, fs.hgx_h100())
    path = write_traces(tmp_path / "b", [[w.p2p(0, w.SEND, 0, 1, MiB)], [w.p2p(0, w.RECV, 0, 1, 2 * MiB)]])
    with pytest.raises(fs.ChakraTraceError, match="sends 1048576 bytes to rank 1, whose matching receive, node 0, "
                                                  "takes 2097152"):
        fs.chakra.load(path, fs.hgx_h100())
    path = write_traces(tmp_path / "c", [[w.collective(0, w.ALL_REDUCE, MiB), w.collective(1, w.ALL_REDUCE, MiB)],
                                         [w.collective(0, w.ALL_REDUCE, MiB)]])
    with pytest.raises(fs.ChakraTraceError, match=r"rank 1 has 1 collective\(s\) on every rank .*, rank 0 has 2"):
        fs.chakra.load(path, fs.hgx_h100())
    path = write_traces(tmp_path / "d", [[w.collective(0, w.ALL_REDUCE, MiB)], [w.collective(0, w.ALL_GATHER, MiB)]])
    with pytest.raises(fs.ChakraTraceError, match="disagrees across ranks: rank 0 node 0 is all_reduce"):
        fs.chakra.load(path, fs.hgx_h100())
    path = write_traces(tmp_path / "e", [[w.collective(0, w.ALL_REDUCE, MiB, pg="7")]])
    with pytest.raises(fs.ChakraTraceError, match="process group '7', which no group definition names"):
        fs.chakra.load(path, fs.hgx_h100())
    path = write_traces(tmp_path / "f", [[w.collective(0, w.ALL_REDUCE, MiB, pg="1")], [w.compute(0, 1)],
                                         [w.compute(0, 1)]], groups={"1": [1, 2]})
    with pytest.raises(fs.ChakraTraceError, match=r"rank 0 node 0 .* collective on process group '1' \(ranks 1, 2\), "
                                                  "which it is not in"):
        fs.chakra.load(path, fs.hgx_h100())


def test_duplicate_node_ids_and_gather_are_refused(tmp_path):
    path = write_traces(tmp_path / "a", [[w.compute(3, 1), w.compute(3, 1)]])
    with pytest.raises(fs.ChakraTraceError, match="two nodes with id 3"):
        fs.chakra.load(path, fs.hgx_h100())
    path = write_traces(tmp_path / "b", [[w.collective(0, w.GATHER, MiB)]])
    with pytest.raises(fs.ChakraTraceError, match="collective 'gather'"):
        fs.chakra.load(path, fs.hgx_h100())


def test_without_protobuf_the_error_names_the_extra(monkeypatch, tmp_path):
    from fabricsim.workloads.chakra import schema

    monkeypatch.setattr(schema, "_MESSAGES", None)
    monkeypatch.setitem(sys.modules, "google.protobuf", None)
    path = write_traces(tmp_path, [[w.compute(0, 1)]])
    with pytest.raises(ImportError, match=r"pip install 'fabricsim\[chakra\]'"):
        fs.chakra.load(path, fs.hgx_h100())


# ---- the writer's edges ---------------------------------------------------------------------------


def test_what_a_per_rank_trace_cannot_say_is_listed_and_warned(tmp_path):
    t = fs.Topology.from_arrays([0, 1, 1, 2], [1, 0, 2, 1], "100GB/s", "1us")
    sc = fs.Scenario(t)
    a = sc.add_flow(0, 1, "1MB")
    b = sc.add_flow(2, 1, "1MB")
    x = sc.add_delay("1ms", after=a)          # on node 1 (a's destination): nothing waits for it
    y = sc.add_flow(2, 1, "1MB", after=b, max_rate_Bps="1GB/s")
    sc.add_dependency(y, x)                   # node 2's send waits for node 1's delay: no rank holds both
    sc.add_fault(at_s="1s", links=[0], factor=0.5)
    with pytest.warns(UserWarning, match="1 dependencies between activities on different GPUs.*1 faults.*1 rate caps"):
        out = fs.chakra.write(sc, tmp_path)
    # The delay runs where what waits for it starts (node 2, y's source), so its own wait for
    # a, a flow from node 0 to node 1, is held by no rank.
    assert out.dropped == [(x, a)]
    assert out.left_out == {"faults": 1, "rate caps": 1}


def test_a_delay_on_no_gpu_needs_its_ranks(tmp_path):
    sc = fs.Scenario(fs.hgx_h100())
    d = sc.add_delay("1ms")
    sc.add_flow(0, 1, "1MB")
    with pytest.raises(fs.InvalidArgumentError, match=f"delay {d} .*delay_ranks"):
        fs.chakra.write(sc, tmp_path)
    out = fs.chakra.write(sc, tmp_path, delay_ranks={d: [5]})
    assert out.gpus.tolist() == [0, 1, 5]
    assert fs.chakra.load(tmp_path, fs.hgx_h100(), placement=out.gpus).run().summary.makespan_s == \
        pytest.approx(sc.run().summary.makespan_s, rel=1e-12)


def test_all_to_all_v_send_recv_rings_and_start_times_round_trip(tmp_path):
    fabric = fs.hgx_h100()
    sc = fs.Scenario(fabric)
    sizes = np.arange(16, dtype=float).reshape(4, 4) * MiB
    a = sc.add_collective("all_to_all", [0, 1, 2, 3], sizes=sizes, start_s="20us")
    b = sc.add_collective("send_recv", [4, 5, 6, 7], 3 * MiB)
    sc.add_collective("all_to_all", [4, 5, 6, 7], 8 * MiB, after=b)
    sc.add_collective("all_reduce", [3], MiB, after=a)  # one rank: no time
    out = fs.chakra.write(sc, tmp_path)
    _, r0 = w.decode_trace(open(out.files[0], "rb").read())
    kinds = [n["type"] for n in r0]
    assert kinds[0] == w.COMP and r0[0]["duration_micros"] == 20  # the start time
    assert kinds.count(w.SEND) == 3 and kinds.count(w.RECV) == 3  # all-to-all-v: sends and receives
    _, r4 = w.decode_trace(open(out.files[4], "rb").read())
    assert [n["type"] for n in r4] == [w.SEND, w.RECV, w.COLL]  # the ring, then a uniform all-to-all
    assert r4[2]["attrs"]["comm_type"] == ("int64", w.ALL_TO_ALL)
    # Read back, the sends and receives are flows (without NCCL's p2p latency, which an
    # all-to-all-v and a ring of send/recv pay after their transfers), each starting when both
    # its ranks are past their start: the same as these flows built through the API.
    api = fs.Scenario(fabric)
    starts = [api.add_delay("20us") for _ in range(4)]
    pairs = [(i, j) for i in range(4) for j in range(4) if i != j]
    v = [api.add_flow(i, j, sizes[i, j], after=[starts[i], starts[j]]) for i, j in pairs]
    ring = [api.add_flow(4 + i, 4 + (i + 1) % 4, 3 * MiB) for i in range(4)]
    api.add_collective("all_to_all", [4, 5, 6, 7], 8 * MiB, after=ring)
    api.add_delay(0.0, after=[x for x, (i, j) in zip(v, pairs) if 3 in (i, j)])
    back = fs.chakra.load(tmp_path, fabric)
    same_run(back.run(), api.run())
    assert back.run().summary.makespan_s < sc.run().summary.makespan_s


def test_the_astra_sim_network_of_a_cluster():
    yaml = fs.chakra.astra_sim_network(fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2"))
    lines = dict(line.split(": ", 1) for line in yaml.splitlines())
    assert lines["topology"] == "[ Switch, Switch ]" and lines["npus_count"] == "[ 8, 4 ]"
    nv, net = (float(x) for x in lines["bandwidth"].split("  #")[0].strip("[] ").split(","))
    assert nv == pytest.approx(18 * 20.6e9 / 2**30, abs=1e-3)  # 18 NVLinks at NCCL's 20.6 GB/s, in GiB/s
    assert net == pytest.approx(50e9 * 0.99321 / 2**30, abs=1e-3)  # a 400G ConnectX-7's payload
    assert lines["latency"].startswith("[ 300.0, 75.0 ]")
    with pytest.raises(fs.InvalidArgumentError, match="generated fabric"):
        fs.chakra.astra_sim_network(fs.Topology.from_arrays([0], [1], "1GB/s"))
    assert math.isfinite(nv)
