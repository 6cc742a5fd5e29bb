"""The closed-form step (:meth:`TrainingStep.estimate`): every operation of the step with
the time it takes on an otherwise idle fabric, walked in the step's order. Each stage runs its
schedule (forward and backward of each chunk: compute, its exposed TP, CP and EP
communication), each op waiting for the pipeline transfer that brings its input; then each
stage's data-parallel reduction (overlapping its last backwards), optimizer step and, where it
is not overlapped, parameter all-gather. What it leaves out is contention."""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

import numpy as np

from . import data_parallel, moe
from .compute import TP_OVERLAP_SMS, _Chunk, compute_beside_comm_s, gpu_sms
from .results import StepEstimate
from .schedule import _plan, _warm_up

# Seconds of a chunk's ops on one stage: a forward, a backward, its first forward, its last backward.
_Durations = tuple[float, float, float, float]

if TYPE_CHECKING:
    from .step import TrainingStep


def _gather_s(step: TrainingStep, ch: _Chunk) -> float:
    """Seconds of chunk ``ch``'s parameter all-gathers (:func:`~.data_parallel.gathers`: the dense
    parameters over the replicas, then the experts' over the expert-data-parallel group)."""
    return sum(step._comm_s("all_gather", ch.stage, size, over=over) for over, size in data_parallel.gathers(step, ch))


def op_compute_s(step: TrainingStep, ch: _Chunk, fwd: bool, *, first: bool = False, last: bool = False) -> float:
    """Seconds of the compute of one forward or backward of chunk ``ch``, slowed by the
    communication kernels that run beside it and hold SMs (:func:`~.compute.compute_beside_comm_s`),
    each for its seconds on an idle fabric:

    * the experts' dispatch and combine with ``MoeOptions.overlap``: ``comm_sm_fraction`` of
      the SMs;
    * the TP collectives with ``tp_comm_overlap``: each of the layer's four communications of
      the direction (a quarter of the chunk's TP time) on the SMs Transformer Engine's
      userbuffers give it (:data:`~.compute.TP_OVERLAP_SMS`), and a backward's gathers of
      its inputs again (:func:`tp_sizes`), each half of their time on theirs; without
      ``tp_comm_overlap`` only those gathers run beside the compute, as asynchronous NCCL
      all-gathers on their channels (the other TP collectives wait for the compute);
    * ``last`` (the chunk's last backward) with ``overlap_grad_reduce``: the reductions of its
      bucket groups whose gradients are final before it ends (dense and expert, :func:`~.data_parallel.buckets`),
      on their NCCL channels, one SM each (:func:`fabricsim.collectives.cost.choice.channels`);
    * ``first`` (the chunk's first forward): its parameter all-gathers where they overlap the
      forward (``overlap_param_gather`` with a sharded optimizer; FSDP's gather for the
      backward, prefetched beside the forwards), on their channels.
    """
    key = ("op compute", ch.stage, ch.chunk, fwd, first, last)  # a build asks once per scheduled op
    hit: float | None = step._est_cache.get(key)
    if hit is None:
        overlaps = _overlaps(step, ch, fwd)
        edge = _edge_overlap(step, ch, fwd) if (first if fwd else last) else None
        hit = step._est_cache[key] = _beside_s(step, ch.fwd_s if fwd else ch.bwd_s,
                                               overlaps + [edge] if edge else overlaps)
    return hit


def _beside_s(step: TrainingStep, compute_s: float, overlaps: list[tuple[float, float]]) -> float:
    """:func:`~.compute.compute_beside_comm_s` on the step's GPU, once per step for each
    compute and communications beside it (chunks of as many layers repeat them)."""
    key = ("beside", compute_s, tuple(overlaps))
    hit: float | None = step._est_cache.get(key)
    if hit is None:
        hit = step._est_cache[key] = compute_beside_comm_s(compute_s, overlaps, gpu=step.gpu)
    return hit


def _overlaps(step: TrainingStep, ch: _Chunk, fwd: bool) -> list[tuple[float, float]]:
    """The communications beside every forward or backward of chunk ``ch``
    (:func:`op_compute_s`): (seconds, SMs held) of the experts' dispatch and combine and of
    the TP collectives, where they overlap the compute."""
    p = step.par
    sms = gpu_sms(step.gpu)
    overlaps: list[tuple[float, float]] = []
    if step.moe.overlap:
        overlaps.append((moe.comm_s(step, ch, fwd), step.moe.comm_sm_fraction * sms))
    if p.tp > 1 and ch.tp_bytes > 0:
        chain_s, again_s = tp_s(step, ch, fwd)
        sms_of = TP_OVERLAP_SMS.get(step.gpu.get("arch") or "hopper", TP_OVERLAP_SMS["hopper"])
        if p.tp_comm_overlap:
            held = sms_of["forward" if fwd else "backward"]
            overlaps += [(chain_s / len(held), n) for n in held]
            if again_s > 0:
                overlaps += [(again_s / len(sms_of["gather_again"]), n) for n in sms_of["gather_again"]]
        elif again_s > 0:
            # without userbuffers the gather again is an asynchronous NCCL all-gather beside the
            # data-gradient GEMM (Megatron-LM layers.py, LinearWithGradAccumulationAndAsyncCommunication
            # .backward: dist_all_gather_func(..., async_op=True); Transformer Engine linear.py
            # backward, gather_along_first_dim(..., async_op=True)), on its channels
            overlaps.append((again_s, step._comm_channels("tp.gather", ch.stage, tp_sizes(step, ch, fwd)[2])))
    return overlaps


def _edge_overlap(step: TrainingStep, ch: _Chunk, fwd: bool) -> tuple[float, float] | None:
    """The communication beside only the chunk's first forward (its parameter all-gathers)
    or only its last backward (its early gradient reductions), (seconds, SMs held), or None
    (:func:`op_compute_s`)."""
    p, s = step.par, ch.stage
    if not fwd:
        if not p.overlap_grad_reduce:
            return None
        early = [(over, size) for over, size, ready in data_parallel.buckets(step, ch) if ready < 1.0]
        if not early:
            return None
        op = "all_reduce" if p.dp_sharding == "none" else "reduce_scatter"
        return (sum(step._comm_s(op, s, size, over=over) for over, size in early),
                step._comm_channels(op, s, early[0][1], over=early[0][0]))
    gathers = data_parallel.gathers(step, ch)
    if gathers and (p.dp_sharding == "fsdp" or p.dp_sharding != "none" and p.overlap_param_gather):
        over, size = gathers[0]
        return (_gather_s(step, ch), step._comm_channels("all_gather", s, size, over=over))
    return None


def tp_sizes(step: TrainingStep, ch: _Chunk, fwd: bool) -> tuple[float, float, float]:
    """Bytes of the chunk's TP collectives in one forward or backward, per micro-batch: (the
    reductions', the all-gathers', the backward's gathers again). The reductions
    (reduce-scatters, or all-reduces without sequence parallelism) carry the GEMMs' BF16
    outputs and gradients; with sequence parallelism the all-gathers carry the linear layers'
    inputs and output gradients as the precision quantizes them
    (:meth:`~.precision.Precision.sequence_parallel_gather_bytes`). A backward that recomputes
    layers runs their forward's collectives again first. With sequence parallelism a
    backward also gathers each column-parallel layer's input again (QKV, FC1, a shared
    expert's FC1: the forward's gathers, as many bytes), for its weight gradient, as only the
    local shard was kept (Megatron-LM's ``LinearWithGradAccumulationAndAsyncCommunication.backward``,
    megatron/core/tensor_parallel/layers.py; Transformer Engine's ``backward_input_needs_gather``
    in module/linear.py, gathered with the input's quantizer): it runs beside the backward's
    compute (:func:`_op_s`)."""
    again = ch.recomputed / max(1, len(ch.layers))
    prec, ub, sp = step.precision, step.par.tp_comm_overlap, step.par.sequence_parallel
    bf16 = 2.0  # bytes per value of ch.tp_bytes
    fwd_g = prec.sequence_parallel_gather_bytes(userbuffers=ub) / bf16 if sp else 1.0
    if fwd:
        return ch.tp_bytes, ch.tp_bytes * fwd_g, 0.0
    bwd_g = prec.sequence_parallel_gather_bytes(backward=True, userbuffers=ub) / bf16 if sp else 1.0
    return ch.tp_bytes * (1.0 + again), ch.tp_bytes * (bwd_g + again * fwd_g), ch.tp_bytes * fwd_g if sp else 0.0


def tp_s(step: TrainingStep, ch: _Chunk, fwd: bool) -> tuple[float, float]:
    """Seconds of the chunk's TP communication in one forward or backward on an idle fabric
    (:func:`tp_sizes`): (the reductions' and all-gathers' chain, the gathers again)."""
    size, gather, again = tp_sizes(step, ch, fwd)
    return step._comm_s("tp", ch.stage, size, gather), step._comm_s("tp.gather", ch.stage, again)


def _op_s(step: TrainingStep, ch: _Chunk, fwd: bool, *, first: bool = False, last: bool = False) -> dict[str, float]:
    """One forward or backward of chunk ``ch`` on one replica as the step issues it: the
    compute (:func:`op_compute_s`, ``first`` and ``last`` as there) with a backward's gathers
    of its inputs again beside it (:func:`tp_sizes`), then its TP collectives (with
    ``tp_comm_overlap`` those gathers and then the collectives, all beside the compute), the
    CP ring exchange beside both, then the
    experts' dispatch and combine (beside all of them with ``MoeOptions.overlap``). Seconds
    each part adds (exposed), by part: they add up to the op's duration."""
    return _parts(step, op_compute_s(step, ch, fwd, first=first, last=last), _op_comm_s(step, ch, fwd))


def _op_comm_s(step: TrainingStep, ch: _Chunk, fwd: bool) -> tuple[float, float, float, float, float]:
    """Seconds of the communication of one forward or backward of chunk ``ch`` on an idle
    fabric (:func:`_op_s`): the experts' dispatch and combine, the TP chain, the backward's TP
    gathers again, the CP exchange and the expert-TP gather and scatter."""
    p = step.par
    ep = moe.comm_s(step, ch, fwd)
    tp, again = tp_s(step, ch, fwd) if p.tp > 1 and ch.tp_bytes > 0 else (0.0, 0.0)
    cp = step._comm_s("cp", ch.stage, ch.cp_bytes * (1.0 if fwd else 2.0))
    etp = step._comm_s("etp", ch.stage, moe.etp_bytes(step, ch, fwd))
    return ep, tp, again, cp, etp


def _parts(step: TrainingStep, comp: float, comm: tuple[float, float, float, float, float]) -> dict[str, float]:
    """An op's seconds by part (:func:`_op_s`) from its compute and its communication
    (:func:`_op_comm_s`)."""
    ep, tp, again, cp, etp = comm
    with_tp = max(comp, again + tp) if step.par.tp_comm_overlap else max(comp, again) + tp
    with_cp = max(with_tp, cp)
    with_etp = with_cp + etp
    exposed = max(with_etp, ep) - with_etp if step.moe.overlap else ep
    return {"compute": comp, "tp": with_tp - comp + etp, "cp": with_cp - with_tp, "ep": exposed}


def _chunk_ops(step: TrainingStep, ch: _Chunk) -> tuple[dict[str, float], ...]:
    """:func:`_op_s` of chunk ``ch``'s forward, backward, first forward and last backward, each
    communication timed once: the first forward and the last backward differ from the others
    only by what runs beside their compute (:func:`_edge_overlap`)."""
    ops = []
    for fwd in (True, False):
        comm = _op_comm_s(step, ch, fwd)
        comp = ch.fwd_s if fwd else ch.bwd_s
        overlaps = _overlaps(step, ch, fwd)
        plain = _beside_s(step, comp, overlaps)
        edge = _edge_overlap(step, ch, fwd)
        ops.append((_parts(step, plain, comm), _parts(step, _beside_s(step, comp, overlaps + [edge]) if edge else plain, comm)))
    (f, f0), (b, b1) = ops
    return f, b, f0, b1


def _param_gather_s(step: TrainingStep, s: int) -> float:
    """Seconds of stage ``s``'s parameter all-gathers after its optimizer step (a sharded
    optimizer without ``overlap_param_gather``), chunk after chunk."""
    p = step.par
    if p.dp_sharding == "none" or p.overlap_param_gather:
        return 0.0
    return sum(_gather_s(step, ch) for ch in step.chunks[s])


def _grads_done_s(step: TrainingStep, s: int, last_b: dict[int, tuple[float, float]], stage_end_s: float,
                  last_compute_s: list[float]) -> float:
    """When stage ``s``'s gradient reduction ends, given each chunk's last backward (start,
    end) and the seconds of its compute (:func:`op_compute_s` with ``last``), and when the
    stage's last op ends, as the step chains it on each GPU: chunk by
    chunk in the order their last backwards run, each chunk's bucket groups in turn
    (:func:`~.data_parallel.buckets`, dense and expert). With ``overlap_grad_reduce`` a group
    starts once the part of that backward's compute its gradients need has run, the last
    groups as the whole backward (its communication too) ends; without, after the stage's
    last op."""
    p = step.par
    op = "all_reduce" if p.dp_sharding == "none" else "reduce_scatter"
    t = 0.0
    for c in sorted(last_b, key=lambda c_: last_b[c_]):
        ch = step.chunks[s][c]
        start, end = last_b[c]
        comp = last_compute_s[c]
        for over, size, part in data_parallel.buckets(step, ch):
            if not p.overlap_grad_reduce:
                ready = stage_end_s
            elif part >= 1.0:
                ready = end
            else:
                ready = start + part * comp
            t = max(t, ready) + step._comm_s(op, s, size, over=over)
    return max(t, stage_end_s)


def _walk(step: TrainingStep, mb: int, dur: list[list[_Durations]], ready_f: list[list[float]],
          ready_b: list[list[float]]) -> np.ndarray:
    """When each op of every stage's schedule of ``mb`` micro-batches (:func:`schedule_order`)
    ends, ``[stage, i]`` for the stage's i-th op, walked as the step is built: an op starts once
    its stage is free, its input has come from the neighbouring virtual stage (plus the
    transfer) and, with FSDP, its chunk's parameters are gathered (``ready_f``, ``ready_b``); it
    lasts ``dur[stage][chunk][i]``, i = 0 a forward, 1 a backward, 2 the chunk's first forward
    (micro-batch 0), 3 its last backward (the last micro-batch). The ops of one level of the
    plan (:func:`~.schedule._plan`) wait only for earlier levels, so each level is one step over
    its ops (at most one per stage); every time is the same sum and maximum as one op at a
    time would take."""
    p = step.par
    pp, v = p.pp, p.virtual_stages
    plan = _plan(pp, mb, v)
    hop = np.zeros((pp + 1, pp))  # [sending stage, stage]; row pp: no input to wait for
    for a in range(pp):
        for b in {(a + 1) % pp, (a - 1) % pp} - {a}:
            hop[a, b] = step._pp_s(a, b)
    hop_s = hop[plan.src_stage, plan.stage]
    dur_s = np.asarray(dur, dtype=float).reshape(pp, v, 4)[plan.stage, plan.chunk, plan.which]
    ready = np.array([ready_f, ready_b], dtype=float).reshape(2, pp, v)[plan.back, plan.stage, plan.chunk]
    waits = bool(ready.any())
    # every time is >= 0: an op without a previous op or an input reads the last slot, 0
    e = np.zeros(len(dur_s) + 1)
    for prev, src, ops in plan.steps:
        start = e[prev]
        sent = e[src]
        sent += hop_s[ops]
        np.maximum(start, sent, out=start)
        if waits:
            np.maximum(start, ready[ops], out=start)
        np.add(start, dur_s[ops], out=e[ops])
    ends: np.ndarray = e[plan.at]
    return ends


def _schedule_ends(step: TrainingStep, dur: list[list[_Durations]], ready_f: list[list[float]],
                   ready_b: list[list[float]]) -> tuple[list[float], list[dict[int, tuple[float, float]]]]:
    """When each stage's last op ends, and each chunk's last backward (start, end) on each
    stage (:meth:`_walk`). After its warm-up a schedule repeats every pp micro-batches (2 pp
    v ops per stage) with the same durations, so once two such rounds in a row come out
    as the round before shifted by one time on every stage, every later round does too
    (each op waits only for ops at most one round back): a long schedule is walked for a
    few rounds and the rest added as that shift, exactly; where the rounds do not repeat
    within the few, the whole schedule is walked."""
    p = step.par
    pp, v, mb = p.pp, p.virtual_stages, p.n_micro_batches
    period = 2 * pp * v
    short = 8 * pp + mb % pp
    shift = 0.0
    walked = mb
    if mb > short:
        ends = _walk(step, short, dur, ready_f, ready_b)
        warm = np.array([_warm_up(pp, s, short, v) for s in range(pp)])
        w = int(warm[0])
        lam = float(ends[0, w + 2 * period] - ends[0, w + period])
        tol = 1e-12 * float(ends[0, -1])
        i = warm[:, None] + period + np.arange(2 * period)  # per stage, two rounds past the warm-up's
        rows = np.arange(pp)[:, None]
        if (np.abs(ends[rows, i + period] - ends[rows, i] - lam) <= tol).all():
            shift, walked = (mb - short) // pp * lam, short
    if walked == mb:
        ends = _walk(step, mb, dur, ready_f, ready_b)
    plan = _plan(pp, walked, v)
    end = ends[np.arange(pp)[:, None], plan.last_b].tolist()
    last_b = [{c: (end[s][c] - dur[s][c][3] + shift, end[s][c] + shift) for c in plan.first_b} for s in range(pp)]
    return [float(e) + shift for e in ends[:, -1]], last_b


def _estimate(step: TrainingStep) -> StepEstimate:
    """The step on an otherwise idle fabric, every operation in the step's order
    (:meth:`TrainingStep.estimate` says what it counts)."""
    t0 = time.perf_counter()
    p = step.par
    mb, v, pp = p.n_micro_batches, p.virtual_stages, p.pp
    ops = [[_chunk_ops(step, ch) for ch in row] for row in step.chunks]
    dur: list[list[_Durations]] = [[(sum(f.values()), sum(b.values()), sum(f0.values()), sum(b1.values()))
                                    for f, b, f0, b1 in row] for row in ops]
    # FSDP: each chunk's parameters gathered before its forwards (chunk after chunk from
    # the start) and again before its backwards
    gather = [[0.0] * v for _ in range(pp)]
    if p.dp_sharding == "fsdp":
        gather = [[_gather_s(step, ch) for ch in row] for row in step.chunks]
    ready_f = [list(itertools.accumulate(row)) for row in gather]
    ready_b = [[f + g for f, g in zip(rf, row)] for rf, row in zip(ready_f, gather)]
    free, last_b = _schedule_ends(step, dur, ready_f, ready_b)
    ends = []
    for s in range(pp):
        grads = _grads_done_s(step, s, last_b[s], free[s], [b1["compute"] for _, _, _, b1 in ops[s]])
        opt = step._optimizer_s(s)
        ends.append((grads + opt + _param_gather_s(step, s), grads - free[s] + _param_gather_s(step, s), opt))
    step_s, dp, opt = max(ends)
    # the critical stage's ops: mb - 1 plain forwards and backwards, one first forward and one
    # last backward per chunk
    work = [sum((mb - 1) * (d[0] + d[1]) + d[2] + d[3] for d in row) for row in dur]
    k = int(np.argmax(work))
    parts = {c: sum((mb - 1) * (o[0][c] + o[1][c]) + o[2][c] + o[3][c] for o in ops[k]) for c in ("compute", "tp", "cp", "ep")}
    # a micro-batch crosses each boundary between virtual stages once each way
    hops = [(vs % pp, (vs + 1) % pp) for vs in range(pp * v - 1)]
    parts.update(pp=sum((step._pp_s(a, b) + step._pp_s(b, a) for a, b in hops), 0.0), dp=dp + gather[0][0], optimizer=opt)
    parts["bubble"] = max(0.0, step_s - sum(parts.values()))
    return StepEstimate(step, step_s, parts, time.perf_counter() - t0,
                        comm_timing="simulated" if step._faulted else "analytical")
