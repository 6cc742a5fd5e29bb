"""fabricsim.training (issue 25): models, parallelism checks, compute calibration, the step DAG,
its breakdown and critical path, and the validation against published step figures."""

from __future__ import annotations

import numpy as np
import pytest

import fabricsim as fs
from fabricsim import training as T


@pytest.fixture(scope="module")
def four_nodes():
    return fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")


# ---- models ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, params_b, rel", [
    ("llama3-8b", 8.03, 0.01), ("llama3-70b", 70.6, 0.01), ("llama3-405b", 405.8, 0.005),
    ("gpt3-175b", 174.6, 0.01), ("mixtral-8x7b", 46.7, 0.01), ("deepseek-v3", 671.0, 0.01)])
def test_preset_parameter_counts_match_the_published_sizes(name, params_b, rel):
    assert T.model(name).n_params / 1e9 == pytest.approx(params_b, rel=rel)


def test_moe_active_parameters_and_pattern():
    ds = T.model("deepseek-v3")
    assert ds.n_active_params / 1e9 == pytest.approx(37.5, rel=0.02)  # paper: 37B activated
    assert [ds.is_moe_layer(i) for i in range(4)] == [False, False, False, True] and ds.n_moe_layers == 58
    assert T.model("mixtral-8x7b").n_active_params / 1e9 == pytest.approx(12.9, rel=0.02)  # paper: 13B active


def test_every_preset_figure_has_a_source():
    for name in T.models():
        m = T.model(name)
        assert m.sources and all(v.startswith(("http", "[derived]", "[assumed]")) for v in m.sources.values())


def test_flops_count_as_compute_md():
    m = T.model("llama3-405b")
    # compute.md: 405B layer shard at TP8, seq 8192: 13.38 ms forward at ~508 TFLOP/s => 6.8e12 FLOPs
    shard = (2 * 8192 * m.layer_active_params(0) + m.attention_core_flops(8192)) / 8
    assert shard == pytest.approx(13.38e-3 * 508e12, rel=0.01)
    assert m.model_flops_per_sequence() == pytest.approx(3 * m.forward_flops())


# ---- compute calibration against reference/compute.md --------------------------------------

@pytest.mark.parametrize("name, tp, seq, measured_s", [
    ("llama3-8b", 1, 8192, 23.75e-3), ("llama3-8b", 1, 4096, 11.23e-3),
    ("llama3-70b", 8, 8192, 14.76e-3), ("llama3-405b", 8, 8192, 41.66e-3), ("llama3-405b", 8, 4096, 20.91e-3)])
def test_modelled_layer_fwd_bwd_lands_near_compute_md(name, tp, seq, measured_s):
    m = T.model(name).replace(seq_len=seq, layers=T.model(name).layers)
    cm = T.ComputeModel()
    assert cm.efficiency == T.DEFAULT_COMPUTE_EFFICIENCY == 0.50
    flops = 3 * (2 * seq * m.layer_active_params(0) + m.attention_core_flops(seq)) / tp
    modelled = flops / (fs.catalog.part("h100").bf16_dense_flop_per_s * cm.layer_efficiency(m.ffn / tp))
    assert modelled == pytest.approx(measured_s, rel=0.10)


# ---- parallelism and checks ---------------------------------------------------------------

def test_megatron_rank_order_tp_innermost_then_cp_dp_pp():
    p = T.Parallelism(tp=2, cp=2, dp=2, pp=2)
    assert p.rank(tp=1) == 1 and p.rank(cp=1) == 2 and p.rank(dp=1) == 4 and p.rank(pp=1) == 8
    g = p.gpu_map()
    assert g.shape == (2, 2, 2, 2) and g[1, 1, 1, 1] == 15
    q = T.Parallelism(tp=2, dp=2, pp=2, order="tp-pp-dp-cp-ep")
    assert q.rank(pp=1) == 2 and q.rank(dp=1) == 4
    r = T.Parallelism(tp=2, dp=2, placement=[3, 2, 1, 0])
    assert r.gpu_map()[0, 0, 0].tolist() == [3, 2]


@pytest.mark.parametrize("par, fabric_nodes, message", [
    (dict(tp=16, pp=1, dp=2), 4, "tp 16 is wider than an NVLink domain of 8 GPUs"),
    (dict(tp=8, pp=3, dp=1), 4, "32 layers are not divisible by pp 3"),
    (dict(tp=8, pp=2, dp=2, global_batch_size=5), 4, "global_batch_size 5 is not divisible by dp 2 x micro_batch_size 1"),
    (dict(tp=8, pp=4, dp=2), 4, "= 64 GPUs, but the fabric has 32"),
    (dict(tp=3, pp=1, dp=1), 4, "heads 32 not divisible by tp 3"),
    (dict(tp=8, pp=2, dp=2, ep=2), 4, "ep 2 > 1 but llama3-8b has no experts"),
    (dict(tp=8, pp=2, dp=2, schedule="interleaved", virtual_stages=2, global_batch_size=6), 4, "divisible by pp 2"),
    (dict(tp=4, pp=1, dp=8, placement=list(range(2, 34))), 4, "GPUs 0..31"),
])
def test_impossible_configurations_name_the_numbers(par, fabric_nodes, message):
    f = fs.cluster(domain="hgx-h100", n_domains=fabric_nodes, scale_out="quantum-2")
    with pytest.raises(T.TrainingConfigError, match=None) as err:
        T.TrainingStep("llama3-8b", T.Parallelism(**par), f)
    assert message in str(err.value)


def test_tp_group_across_domains_is_refused_when_asked_to_stay_inside(four_nodes):
    par = T.Parallelism(tp=4, dp=8, placement=[(i % 4) * 8 + i // 4 for i in range(32)])
    with pytest.raises(T.TrainingConfigError, match="spans NVLink domains"):
        T.TrainingStep("llama3-8b", par, four_nodes)
    T.TrainingStep("llama3-8b", T.Parallelism(tp=4, dp=8, placement=par.placement, tp_in_domain=False), four_nodes)


def test_memory_over_hbm_is_refused_with_the_figures():
    with pytest.raises(T.TrainingConfigError, match=r"llama3-70b does not fit: stage 0 needs [0-9.]+ GB per GPU .* has 80 GB"):
        T.TrainingStep("llama3-70b", T.Parallelism(tp=8, dp=1), fs.hgx_h100())
    step = T.TrainingStep("llama3-70b", T.Parallelism(tp=8, dp=1), fs.hgx_h100(), check_memory=False)
    mem = step.memory
    assert set(mem.column_names) >= {"weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "total_bytes"}
    assert mem["weights_bytes"][0].as_py() == pytest.approx(2 * 70.6e9 / 8, rel=0.01)


def test_recompute_and_sharding_shrink_memory(four_nodes):
    base = T.Parallelism(tp=8, pp=2, dp=2, global_batch_size=8)
    a = T.TrainingStep("llama3-8b", base, four_nodes).memory
    b = T.TrainingStep("llama3-8b", T.Parallelism(**{**base.__dict__, "recompute": True}), four_nodes).memory
    c = T.TrainingStep("llama3-8b", T.Parallelism(**{**base.__dict__, "dp_sharding": "zero1"}), four_nodes).memory
    assert b["activations_bytes"][0].as_py() < a["activations_bytes"][0].as_py() / 4
    assert c["optimizer_bytes"][0].as_py() == pytest.approx(a["optimizer_bytes"][0].as_py() / 2)


# ---- memory accounting: closed forms -------------------------------------------------------

@pytest.mark.parametrize("sharding, grad_bytes, w, g, o", [
    # bytes per parameter of the GPU's TP/PP shard, d = dp = 4; with pp = 1 the one chunk whose
    # gradients (optim_grads) or weights (fsdp) are whole is the whole shard
    ("none", 4, 2, 4, 12),                  # Megatron: bf16 params, fp32 grads: 18
    ("none", 2, 2, 2, 16),                  # 16-bit params and grads: 20 (fp32 main grads kept)
    ("zero1", 4, 2, 4, 12 / 4),             # distributed optimizer: 6 + 12/d
    ("zero1", 2, 2, 2, 16 / 4),             # 4 + 16/d
    ("optim_grads", 4, 2, 4 * (1 / 4 + 1), 12 / 4),
    ("fsdp", 4, 2 * (1 / 4 + 1), 4 * (1 / 4 + 1), 12 / 4),
])
def test_model_state_bytes_per_parameter(four_nodes, sharding, grad_bytes, w, g, o):
    par = T.Parallelism(tp=8, dp=4, global_batch_size=4, dp_sharding=sharding, grad_reduce_bytes=grad_bytes)
    mem = T.TrainingStep("llama3-8b", par, four_nodes, check_memory=False).memory
    P = T.model("llama3-8b").n_params / 8  # untied: every layer and both vocabulary matrices, split by TP
    assert mem["weights_bytes"][0].as_py() == pytest.approx(w * P)
    assert mem["grads_bytes"][0].as_py() == pytest.approx(g * P)
    assert mem["optimizer_bytes"][0].as_py() == pytest.approx(o * P)
    assert T.WEIGHT_BYTES + 4 + T.OPTIMIZER_STATE_BYTES == 18 and T.MAIN_GRAD_COPY_BYTES == 4


def test_dp_sharding_spellings_and_exclusive_recompute():
    for given, canonical in [("no_shard", "none"), ("optim", "zero1"), ("ZeRO2", "optim_grads"),
                             ("optim_grads_params", "fsdp"), ("zero3", "fsdp")]:
        assert T.Parallelism(dp_sharding=given).dp_sharding == canonical
    with pytest.raises(T.TrainingConfigError, match="dp_sharding must be"):
        T.Parallelism(dp_sharding="zero4")
    with pytest.raises(T.TrainingConfigError, match="exclude each other"):
        T.Parallelism(recompute=True, selective_recompute=True)


_GPT = T.Model(name="gpt-like", layers=4, hidden=1024, ffn=4096, heads=16, kv_heads=16, vocab=1024, seq_len=2048,
               gated_mlp=False)


@pytest.mark.parametrize("par, per_layer", [
    # Korthikanti et al. 2022 per layer, s*b*h*(34 + 5as/h) with dropout; without dropout the two
    # one-byte masks (2 sbh) and the attention dropout's mask and output (3 as^2 b) go
    (dict(tp=1), lambda s, h, a, t: s * h * 32),
    (dict(tp=8), lambda s, h, a, t: s * h * 32 / t),                                   # sequence parallel: all / t
    (dict(tp=8, sequence_parallel=False), lambda s, h, a, t: s * h * (8 + 24 / t)),   # 10 + 24/t, less the masks
    (dict(tp=8, flash_attention=False), lambda s, h, a, t: s * h * 32 / t + 2 * a * s * s / t),
    (dict(tp=8, flash_attention=False, selective_recompute=True), lambda s, h, a, t: s * h * 32 / t),  # 34/t
    (dict(tp=8, recompute=True), None),
])
def test_activation_bytes_per_layer_are_korthikantis(par, per_layer):
    m = _GPT
    s, h, a = m.seq_len, m.hidden, m.heads
    p = T.Parallelism(**par)
    t, rep = p.tp, (p.tp if p.sequence_parallel else 1)
    mem = T.TrainingStep(m, p, fs.hgx_h100(), check_memory=False).memory
    last = 2 * s * 2 * h / rep + T.LOGIT_BYTES * s * m.vocab / t  # final norm and output-layer inputs, fp32 logits
    if per_layer is None:  # full recomputation: each layer's input, plus the layer being re-run
        expected = m.layers * 2 * s * h / t + s * h * 32 / t
    else:
        expected = m.layers * per_layer(s, h, a, t)
    assert mem["activations_bytes"][0].as_py() == pytest.approx(expected + last)


def _llama8b_layer_bytes(tp):
    m = T.model("llama3-8b")
    return 2 * m.seq_len * (6 * m.hidden + 2 * m.kv_heads * m.head_dim + 3 * m.ffn) / tp


def test_schedules_keep_their_micro_batches_in_flight(four_nodes):
    per_layer = _llama8b_layer_bytes(8)
    one = T.TrainingStep("llama3-8b", T.Parallelism(tp=8, pp=4, global_batch_size=8), four_nodes).memory
    acts = one["activations_bytes"].to_pylist()
    assert acts[0] == pytest.approx(4 * 8 * per_layer)  # 1F1B: stage s holds pp - s micro-batches
    assert acts[2] == pytest.approx(2 * 8 * per_layer)
    inter = T.TrainingStep("llama3-8b", T.Parallelism(tp=8, pp=4, global_batch_size=8, schedule="interleaved",
                                                      virtual_stages=2), four_nodes).memory
    # Megatron's interleaved warm-up on stage 0: 2 (pp - 1) + (v - 1) pp = 10 chunk forwards, then one more
    assert inter["activations_bytes"][0].as_py() == pytest.approx(11 * 4 * per_layer)


def test_llama3_405b_fits_with_the_papers_settings_and_the_distributed_optimizer_alone_does_not():
    step = T.validation_step("llama3-405b-16k")  # check_memory on
    assert T.VALIDATION["llama3-405b-16k"]["check_memory"] and step.par.dp_sharding == "optim_grads"
    mem = step.memory
    worst = max(range(mem.num_rows), key=lambda i: mem["total_bytes"][i].as_py())
    gb = {k: mem[k][worst].as_py() / 1e9 for k in ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                                                    "total_bytes")}
    assert gb["total_bytes"] < 80
    P = sum(c.params for c in step.chunks[worst])  # 8 layers of the TP shard: 3.19 B
    assert gb["weights_bytes"] == pytest.approx(2 * P / 1e9)
    assert gb["optimizer_bytes"] == pytest.approx(12 * P / 128 / 1e9)
    # 16 micro-batches of 8 layers in flight (the interleaved warm-up covers the whole step)
    per_layer = 2 * 8192 * (6 * 16384 + 2 * 8 * 128 + 3 * 53248) / 8  # 533 MB at TP8 with sequence parallelism
    assert gb["activations_bytes"] == pytest.approx(16 * 8 * per_layer / 1e9)
    assert gb["grads_bytes"] == pytest.approx(4 * (P / 128 + 2 * P / 8) / 1e9)  # fp32, sharded + one 2-layer chunk
    par = T.Parallelism(**{**T.VALIDATION["llama3-405b-16k"]["parallelism"], "dp_sharding": "zero1"})
    with pytest.raises(T.TrainingConfigError) as err:
        T.TrainingStep("llama3-405b", par, step.fabric)
    msg = str(err.value)
    assert "llama3-405b does not fit: stage 1 needs 87.6 GB per GPU" in msg and "grads 12.8" in msg
    assert "activations 68.2" in msg and "has 80 GB" in msg


# ---- schedules ----------------------------------------------------------------------------

def test_1f1b_and_interleaved_orders_are_megatrons():
    assert T.schedule_order(4, 0, 4) == [("F", 0, 0), ("F", 1, 0), ("F", 2, 0), ("F", 3, 0), ("B", 0, 0),
                                        ("B", 1, 0), ("B", 2, 0), ("B", 3, 0)]
    assert T.schedule_order(4, 3, 4)[:4] == [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0)]
    o = T.schedule_order(2, 0, 4, 2)
    assert len(o) == 16 and o[:5] == [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1), ("F", 2, 0)]
    for s in range(2):  # every (kind, micro-batch, chunk) once
        assert sorted(T.schedule_order(2, s, 4, 2)) == sorted((k, m, c) for k in "BF" for m in range(4) for c in range(2))


# ---- the step as a DAG on the fabric ------------------------------------------------------

def _step(fabric, **par):
    kw = dict(tp=8, pp=2, dp=2, global_batch_size=16, dp_sharding="zero1")
    kw.update(par)
    return T.TrainingStep("llama3-8b", T.Parallelism(**kw), fabric)


@pytest.mark.parametrize("par", [dict(), dict(schedule="interleaved", virtual_stages=2), dict(dp_sharding="none"),
                                 dict(tp_comm_overlap=True), dict(dp_sharding="fsdp"), dict(recompute=True),
                                 dict(dp_sharding="optim_grads")])
def test_flow_step_agrees_with_the_analytical_estimate_on_an_idle_fabric(four_nodes, par):
    step = _step(four_nodes, **par)
    res, est = step.run(), step.estimate()
    assert res.step_s == pytest.approx(est.step_s, rel=0.05)
    bd = res.breakdown
    assert sum(bd["time_s"].to_pylist()) == pytest.approx(res.step_s, rel=1e-9)
    assert bd["component"].to_pylist() == ["compute", "tp", "cp", "ep", "pp", "dp", "optimizer", "bubble"]
    cp = res.critical_path
    assert cp["finish_s"][cp.num_rows - 1].as_py() == pytest.approx(res.step_s)
    # contiguous: each activity starts when the one before it on the path finished
    assert cp["start_s"].to_pylist()[1:] == pytest.approx(cp["finish_s"].to_pylist()[:-1])


def test_step_figures_are_consistent(four_nodes):
    step = _step(four_nodes)
    res = step.run()
    assert res.tokens_per_s == pytest.approx(16 * 8192 / res.step_s)
    assert res.mfu == pytest.approx(16 * T.model("llama3-8b").model_flops_per_sequence() / (res.step_s * 32 * 989.5e12))
    # compute per stage: 8 micro-batches x (16 layers fwd + bwd) of the shard, at the calibrated efficiency
    assert res.parts["compute"] == pytest.approx(sum(c.fwd_s + c.bwd_s for c in step.chunks[1]) * 8)
    kinds = set(res.result.collectives["op"].to_pylist())
    assert {"reduce_scatter", "all_gather"} <= kinds  # TP with sequence parallelism, DP sharded
    assert "pp.fwd" in set(res.result.flows["tag"].to_pylist())


def test_interleaving_shrinks_the_bubble(four_nodes):
    a = _step(four_nodes).estimate()
    b = _step(four_nodes, schedule="interleaved", virtual_stages=2).estimate()
    assert b.parts["bubble"] < a.parts["bubble"] and b.step_s < a.step_s


def test_tp_comm_analytical_mode_matches_flow_mode(four_nodes):
    a = _step(four_nodes).run()
    b = T.TrainingStep("llama3-8b", _step(four_nodes).par, four_nodes, tp_comm="analytical").run()
    assert b.step_s == pytest.approx(a.step_s, rel=0.02)
    assert b.built.n_activities < a.built.n_activities


def test_a_degraded_link_slows_the_step_through_its_pipeline_transfers():
    f = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    step = T.TrainingStep("llama3-8b", T.Parallelism(tp=8, pp=4, dp=1, global_batch_size=8), f)
    base = step.run().step_s
    slow = T.TrainingStep("llama3-8b", step.par, f.fail(nodes=f.nics[8:16], factor=0.01)).run()
    assert slow.step_s > base * 1.02
    assert slow.parts["pp"] > 0


def test_moe_step_with_expert_parallelism_and_imbalance():
    f = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    m = T.model("mixtral-8x7b").replace(layers=4, seq_len=4096)
    par = dict(tp=2, pp=1, dp=16, ep=8, global_batch_size=16, dp_sharding="zero1")
    even = T.TrainingStep(m, T.Parallelism(**par), f).run()
    hot = T.TrainingStep(m, T.Parallelism(**par, ep_imbalance=2.0), f).run()
    assert "all_to_all" in set(even.result.collectives["op"].to_pylist())
    assert even.parts["ep"] > 0 and hot.step_s > even.step_s


def test_context_parallel_ring_exchanges():
    f = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    res = T.TrainingStep("llama3-8b", T.Parallelism(tp=4, cp=2, dp=2, global_batch_size=2), f).run()
    tags = set(res.result.collectives["communicator"].to_pylist()) if "communicator" in res.result.collectives.column_names else set()
    assert "send_recv" in set(res.result.collectives["op"].to_pylist()) and tags is not None
    assert res.step_s == pytest.approx(T.TrainingStep("llama3-8b", T.Parallelism(tp=4, cp=2, dp=2, global_batch_size=2), f).estimate().step_s, rel=0.05)


class _PublicBuilder(T._Builder):
    """The step built through the public, checked Scenario.add_* methods, one call per
    activity (as it was before the builder went straight to the core): the reference."""

    def delay(self, dur, after, cat, tag, *meta):
        after = after or self.start
        return self._rec(self.sc.add_delay(max(0.0, dur), after=after, tag=tag), T._CAT_INDEX[cat], after, *meta)

    def coll(self, op, ranks, size, after, cat, tag, *meta, sizes=None):
        after = after or self.start
        if sizes is not None:
            aid = self.sc.add_collective(op, list(ranks), sizes=sizes, after=after, tag=tag)
        else:
            aid = self.sc.add_collective(op, list(ranks), size, after=after, tag=tag)
        return self._rec(aid, T._CAT_INDEX[cat], after, *meta)

    def flows(self, pp, after, tag):
        src, dst, nbytes, _ = pp
        return [int(x) for x in self.sc.add_flows(src.tolist(), dst.tolist(), float(nbytes[0]), after=after, tag=tag)]


_MIXTRAL = T.model("mixtral-8x7b").replace(layers=4, seq_len=4096)


@pytest.mark.parametrize("fabric_domains, model, par, options", [
    (4, "llama3-8b", dict(), {}),
    (4, "llama3-8b", dict(schedule="interleaved", virtual_stages=2, dp_sharding="none"), {}),
    (8, "llama3-8b", dict(tp=4, dp=8, dp_sharding="fsdp", schedule="interleaved", virtual_stages=2,
                          global_batch_size=32), {}),
    (4, "llama3-8b", dict(dp_sharding="optim_grads", tp_comm_overlap=True, recompute=True), {}),
    (4, "llama3-8b", dict(sequence_parallel=False, overlap_grad_reduce=False, overlap_param_gather=False,
                          dp_sharding="optim_grads"), {}),
    (8, "llama3-8b", dict(tp=4, pp=4, dp=4, schedule="interleaved", virtual_stages=2, global_batch_size=32),
     dict(tp_comm="analytical")),
    (4, _MIXTRAL, dict(tp=2, pp=2, dp=8, ep=4, ep_imbalance=2.0, dp_sharding="none"), {}),
    (4, "llama3-8b", dict(tp=4, pp=2, cp=2, dp=2, global_batch_size=8, dp_sharding="optim_grads"), {}),
])
def test_the_step_built_through_the_core_is_the_one_the_public_methods_build(fabric_domains, model, par, options):
    """The builder adds activities straight through the core and makes repeated collectives
    again from their recorded core calls: every table, id and figure must be those of the
    step added one checked add_* call at a time."""
    f = fs.cluster(domain="hgx-h100", n_domains=fabric_domains, scale_out="quantum-2")
    step = _step(f, **par) if model == "llama3-8b" and not options else T.TrainingStep(
        model, T.Parallelism(**{**dict(tp=8, pp=2, dp=2, global_batch_size=16, dp_sharding="zero1"), **par}), f,
        check_memory=False, **options)
    fast, slow = step.build(), _PublicBuilder(step).build()
    assert fast.n_activities == slow.n_activities == fast.scenario.n_activities
    for name in ("ids", "cat", "stage", "replica", "micro_batch", "chunk"):
        assert (getattr(fast, name) == getattr(slow, name)).all(), name
    assert fast.deps == slow.deps
    a = T.StepResult(step, fast, fast.scenario.run(), build_s=0.0, run_s=0.0)
    b = T.StepResult(step, slow, slow.scenario.run(), build_s=0.0, run_s=0.0)
    for name in ("flows", "delays", "collectives"):
        assert getattr(a.result, name).equals(getattr(b.result, name)), name
    assert a.step_s == b.step_s
    assert a.breakdown.equals(b.breakdown) and a.critical_path.equals(b.critical_path)
    # Counts that follow from the parallelism alone: one TP collective (two with sequence
    # parallelism) per replica, stage, chunk, micro-batch and direction; one pipeline flow per
    # TP rank for each of a micro-batch's virtual-stage boundaries, each way.
    p = step.par
    n_rep, ops = p.dp * p.cp, p.pp * p.virtual_stages * p.n_micro_batches * 2
    n_tp = (np.asarray(fast.cat) == T._CAT_INDEX["tp"]).sum()
    assert n_tp == n_rep * ops * (2 if p.sequence_parallel and step.tp_comm == "flow" else 1)
    n_pp = (np.asarray(fast.cat) == T._CAT_INDEX["pp"]).sum()
    assert n_pp == n_rep * p.tp * 2 * p.n_micro_batches * (p.pp * p.virtual_stages - 1)
    assert len(set(fast.ids.tolist())) == len(fast.ids) and fast.ids.max() < fast.n_activities


def test_a_built_step_is_one_kept_call_and_pickles_to_the_same_tables(four_nodes):
    import pickle

    built = _step(four_nodes).build()
    sc = built.scenario
    assert [name for name, _, _ in sc._calls] == ["_training_step"] and sc._call_spans == [(0, sc.n_activities)]
    copy = pickle.loads(pickle.dumps(sc))
    assert copy.n_activities == sc.n_activities
    a, b = sc.run(), copy.run()
    for name in ("flows", "delays", "collectives"):
        assert getattr(a, name).equals(getattr(b, name)), name


def test_collectives_made_again_from_their_core_calls_match_constructed_ones():
    """Builder.add_known (each distinct collective constructed once, then its core calls
    repeated at new ids) against the public add_collective, on algorithms a training step
    does not always reach: across domains (ring, NVLSTree's engines), all-to-all-v (its last
    transfer the largest, so that its end must wait for every one), send/recv."""
    f = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
    calls = [("all_reduce", tuple(range(32)), 64e6, None), ("all_reduce", tuple(range(0, 32, 8)), 1e6, None),
             ("reduce_scatter", tuple(range(8, 24)), 32e6, None), ("all_gather", tuple(range(8)), 4e6, None),
             ("send_recv", (3, 11, 19), 2e6, None), ("all_to_all", (0, 8, 16, 24), None,
                                                     np.arange(16, dtype=float).reshape(4, 4) * 1e5)]
    from fabricsim.collectives.construction import Builder

    fast, slow = fs.Scenario(f), fs.Scenario(f)
    fast._collectives = known = Builder(fast)
    prev_f: list[int] = []
    prev_s: list[int] = []
    for _ in range(3):
        for op, ranks, size, sizes in calls:
            x = known.add_known(op, ranks, size, prev_f, f"t.{op}", sizes)
            if sizes is None:
                y = slow.add_collective(op, list(ranks), size, after=prev_s, tag=f"t.{op}")
            else:
                y = slow.add_collective(op, list(ranks), sizes=sizes, after=prev_s, tag=f"t.{op}")
            assert x == y
            prev_f, prev_s = [x], [y]
    # every one made again at least once (a construction that made a reduction engine is
    # recorded again the next time)
    assert len(known._plans) == len(calls) and all(v is not None for v in known._plans.values())
    a, b = fast.run(), slow.run()
    for name in ("flows", "delays", "collectives"):
        assert getattr(a, name).equals(getattr(b, name)), name


# ---- validation against published figures (analytical: fast) ------------------------------

@pytest.mark.parametrize("case", list(T.VALIDATION))
def test_validation_cases_within_15_percent(case):
    step = T.validation_step(case)
    est = step.estimate()
    reported = T.VALIDATION[case]["reported_flop_per_s_per_gpu"]
    assert est.model_flop_per_s_per_gpu == pytest.approx(reported, rel=0.15)
    assert step.compute.efficiency == 0.50


def test_llama3_405b_estimate_is_fast_and_reproduces_the_mfu_band():
    step = T.validation_step("llama3-405b-16k")
    step.estimate()
    est = step.estimate()
    assert est.wall_s < 0.05
    assert 0.33 < est.mfu < 0.45  # reported ~38-43%


def test_cli_train_prints_the_breakdown(capsys):
    from fabricsim.cli import main

    assert main(["train", "llama3-8b", "--tp", "8", "--pp", "2", "--dp", "2", "--nodes", "4", "--scale-out",
                 "quantum-2", "--global-batch", "16", "--analytical"]) == 0
    out = capsys.readouterr().out
    assert "MFU" in out and "bubble" in out and "memory:" in out
