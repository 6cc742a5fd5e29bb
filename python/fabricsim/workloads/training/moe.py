"""Mixture-of-experts layers as Megatron and DeepEP run them (:class:`MoeOptions`): routing
with per-expert token counts, each chunk's routed experts (their grouped GEMMs on the busiest
rank of its expert-parallel group, its dispatch and combine), the multi-token prediction
modules of the last stage, and the expert-parallel groups.

**Routing** (``routing``): "balanced", each rank's tokens spread evenly over the experts, as
the Megatron-Bridge and Megatron MoE benchmarks force it (``--moe-router-force-load-balancing``);
or "dirichlet", each MoE layer's expert popularity drawn from a symmetric Dirichlet
distribution of concentration ``concentration`` (seeded by ``seed`` and the layer), each rank's
top-k picks a multinomial draw from it. The busiest rank of an expert-parallel group sets the
group's expert time (every rank waits for it at the combine). ``Parallelism.ep_imbalance``
(the busiest rank's tokens over the mean) is the same mechanism with one deterministic
skew: the group's first rank's experts receive that many times the mean, the others the
rest evenly.

**Experts**: per GPU, per MoE layer, the tokens its experts receive from its expert-parallel
group (with expert tensor parallelism, ``etp``, gathered over the ETP group and computed on
its 1/etp shard: 2 x tokens x one expert's weights either way), as grouped GEMMs with each
expert's tokens as their shape (:func:`expert_gemm_s`), and the memory-bound work around
them: router, permutation, gated activation, unpermutation (:func:`memory_bound_s`); the
backward twice the forward.

**Dispatch and combine** (``dispatcher``, Megatron's ``moe_token_dispatcher_type``): per
chunk, per expert-parallel group, the dispatch of the chunk's MoE layers and then their combine
(:func:`fabricsim.collectives.moe.add_moe`: "alltoall", NCCL's all-to-all-v, one copy of a
token per routed expert; "deepep" (also "flex" and "hybridep", Megatron's flex dispatcher on
DeepEP or HybridEP), a token crossing the network once per destination NVLink domain and
fanning out there). Forward: the dispatch in FP8 where ``fp8_dispatch`` (one byte per value
and one FP32 scale per :data:`FP8_DISPATCH_BLOCK` values, DeepEP's format), else BF16, the
combine in BF16; backward: both in BF16 (gradients), in the other direction; with full
recomputation the forward's again first.

**Overlap** (``overlap``, off by default as in Megatron, ``--overlap-moe-expert-parallel-comm``):
the dispatch and combine run beside the chunk's compute, as Megatron's 1F1B all-to-all overlap
and DeepSeek's DualPipe pair one micro-batch's communication with another's compute; while
they run, their kernels hold :data:`COMM_SM_FRACTION` of the SMs, so the overlapped part of the
compute takes 1 / (1 - fraction) as long. The pairing of micro-batches is not modelled: every
op, the warm-up's too, overlaps its own communication.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._checks import U32, choice, flag, integer, real_in, shown
from ...collectives import fabric_view
from ...collectives.moe import MoeRouting, estimate_moe
from ...exceptions import InvalidArgumentError
from ...scenario import Scenario
from .compute import HBM_EFFICIENCY, _Chunk

if TYPE_CHECKING:
    from .step import TrainingStep

__all__ = ["MoeOptions", "DISPATCHERS", "COMM_SM_FRACTION", "FP8_DISPATCH_BLOCK", "DEFAULT_CONCENTRATION"]


#: Megatron's ``moe_token_dispatcher_type`` (and the backends of its flex dispatcher) -> the
#: collective mode of :func:`fabricsim.collectives.moe.add_moe`.
DISPATCHERS = {"alltoall": "all_to_all", "deepep": "deepep", "flex": "deepep", "hybridep": "deepep"}


ROUTINGS = ("balanced", "dirichlet")


#: Fraction of the SMs the dispatch and combine kernels hold while they overlap compute:
#: DeepSeek-V3 gives its cross-node all-to-all kernels 20 of the H800's 132 SMs
#: (arXiv:2412.19437 section 3.2.2, "only 20 SMs are sufficient").
COMM_SM_FRACTION = 20 / 132


#: Values per FP32 scale of an FP8 dispatch: DeepEP's FP8 dispatch sends E4M3 values with one
#: scale per 1x128 tile (deepseek-ai/DeepEP README, "FP8 dispatching"; arXiv:2412.19437 section
#: 3.3.1, fine-grained 1x128 activation quantization).
FP8_DISPATCH_BLOCK = 128


#: Concentration of the symmetric Dirichlet distribution of expert popularity for
#: ``routing="dirichlet"`` [assumed]: 10 gives each expert's share a coefficient of variation
#: of about 1 / sqrt(10) = 0.32 and, on 32 ranks of 4 experts each, a busiest rank near 1.3 x
#: the mean; the Megatron MoE ModelZoo reports dropless runs 8-20% slower than forced balance
#: (yanring/Megatron-MoE-ModelZoo@e8650517:best_practice/qwen3/readme.md, long-context table).
DEFAULT_CONCENTRATION = 10.0


@dataclass(frozen=True)
class MoeOptions:
    """How a step runs its mixture-of-experts layers (the module docs say what each does).

    ``dispatcher``: "alltoall" (Megatron's default), "deepep", or Megatron's "flex" /
    "hybridep" (both DeepEP's node-deduplicated dispatch here). ``routing``: "balanced"
    (forced balance, as the benchmarks run) or "dirichlet" (``concentration`` > 0, ``seed`` an
    integer >= 0). ``fp8_dispatch``: the forward dispatch in FP8 with its scales.
    ``overlap``: dispatch and combine beside the compute (Megatron's 1F1B all-to-all overlap,
    DeepSeek's DualPipe), taking ``comm_sm_fraction`` of the SMs while they overlap it.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
        m = fs.training.model("mixtral-8x7b").replace(layers=4, seq_len=4096)
        par = fs.Parallelism(tp=2, dp=16, ep=8, dp_sharding="zero1")
        plain = fs.TrainingStep(m, par, fabric).estimate()
        deepep = fs.TrainingStep(m, par, fabric, moe=fs.training.MoeOptions(dispatcher="deepep")).estimate()
        deepep.parts["ep"] < plain.parts["ep"]   # True: a token crosses the network once per node
    """

    dispatcher: str = "alltoall"
    routing: str = "balanced"
    concentration: float = DEFAULT_CONCENTRATION
    seed: int = 0
    fp8_dispatch: bool = False
    overlap: bool = False
    comm_sm_fraction: float = COMM_SM_FRACTION

    def __post_init__(self) -> None:
        at = "MoeOptions:"
        choice(f"{at} dispatcher", self.dispatcher, DISPATCHERS)
        choice(f"{at} routing", self.routing, ROUTINGS)
        object.__setattr__(self, "concentration", real_in(f"{at} concentration", self.concentration, 0.0, math.inf,
                                                          open_low=True, open_high=True))
        object.__setattr__(self, "seed", integer(f"{at} seed", self.seed, U32))
        flag(f"{at} fp8_dispatch", self.fp8_dispatch)
        flag(f"{at} overlap", self.overlap)
        object.__setattr__(self, "comm_sm_fraction", real_in(f"{at} comm_sm_fraction", self.comm_sm_fraction, 0.0, 1.0,
                                                             open_high=True))

    @property
    def mode(self) -> str:
        """The collective mode the dispatcher runs (:data:`DISPATCHERS`)."""
        return DISPATCHERS[self.dispatcher]


def checked_options(moe: Any) -> MoeOptions:
    """``moe`` as :class:`MoeOptions`: None for the defaults, a MoeOptions, or a dict of its fields."""
    if moe is None:
        return MoeOptions()
    if isinstance(moe, MoeOptions):
        return moe
    if isinstance(moe, dict):
        try:
            return MoeOptions(**moe)
        except TypeError as err:
            raise InvalidArgumentError(f"moe: {err}; its fields are dispatcher, routing, concentration, seed, "
                                       "fp8_dispatch, overlap, comm_sm_fraction") from None
    raise InvalidArgumentError(f"moe must be a fabricsim.training.MoeOptions, a dict of its fields or None, got "
                               f"{type(moe).__name__} {shown(moe)}")


@dataclass
class MoeWork:
    """One chunk's routed experts on one GPU, per micro-batch: the forward seconds of its
    grouped GEMMs on the busiest rank, their FLOPs, and the routing of its dispatch (every
    MoE layer's token counts added up)."""

    layers: list[int]
    fwd_s: float = 0.0
    flops_fwd: float = 0.0
    routing: MoeRouting | None = None
    busiest_over_mean: float = 1.0
    _comm_s: dict[Any, float] = field(default_factory=dict, repr=False)


# ---- routing
def tokens_per_rank(step: TrainingStep) -> float:
    """Tokens each GPU dispatches per MoE layer and micro-batch: its CP rank's share of the
    micro-batch, split over TP by sequence parallelism."""
    m, p = step.model, step.par
    return p.micro_batch_size * m.seq_len / p.cp / p.tp


def layer_counts(step: TrainingStep, layer: int) -> np.ndarray:
    """counts[i, e]: tokens of rank i of an expert-parallel group routed to expert e in MoE
    layer ``layer``, per micro-batch (each rank's row adds up to top_k x its tokens)."""
    m, p, o = step.model, step.par, step.moe
    t, k, n_e, ep = tokens_per_rank(step), m.experts_per_token, m.n_experts, p.ep
    if o.routing == "dirichlet":
        rng = np.random.default_rng([o.seed, layer])
        share = rng.dirichlet(np.full(n_e, o.concentration))
        picks = int(round(t * k))
        return rng.multinomial(picks, share, size=ep).astype(np.float64) * (t * k / max(picks, 1))
    weight = np.ones(ep)
    if p.ep_imbalance != 1.0 and ep > 1:
        weight[:] = (ep - p.ep_imbalance) / (ep - 1)
        weight[0] = p.ep_imbalance
    per_expert = np.repeat(weight, n_e // ep) * (t * k / n_e)
    return np.tile(per_expert, (ep, 1))


# ---- compute
def expert_gemm_s(step: TrainingStep, tokens_per_expert: np.ndarray) -> float:
    """Forward seconds of one GPU's routed experts of one layer: per local expert, its
    tokens (gathered over the ETP group) through its 1/etp shard of the expert MLP, as grouped
    GEMMs at the compute model's efficiency of the step's peak."""
    m = step.model
    flops = 2.0 * float(np.sum(tokens_per_expert)) * m.expert_params()
    return flops / (step.peak_flop_per_s * step.compute.efficiency)


def memory_bound_s(step: TrainingStep, tokens: float, copies: float) -> float:
    """Forward seconds of one MoE layer's memory-bound work on one GPU, holding ``tokens``
    and receiving ``copies`` routed tokens: the router (read a token, write and read its FP32
    logits), the permutation (read a token, write a copy per expert), the gated activation
    (read gate and up, write their product, per copy) and the unpermutation (read the copies,
    write the weighted sum), BF16, at the GPU's HBM bandwidth x ``HBM_EFFICIENCY``."""
    m = step.model
    h = 2.0 * m.hidden
    act = (3.0 if m.gated_mlp else 2.0) * 2.0 * m.expert_ffn
    nbytes = tokens * (h + 8.0 * m.n_experts) + tokens * h + copies * h + copies * act + copies * h + tokens * h
    return nbytes / (_hbm_Bps(step) * HBM_EFFICIENCY)


def _hbm_Bps(step: TrainingStep) -> float:
    bw = step.gpu.get("hbm_Bps")
    if bw is None:
        raise InvalidArgumentError(f"catalog GPU {step.gpu.name!r} has no hbm_Bps: add it (fs.catalog.add_part) or pass gpu=")
    return float(bw)


def dense_s(step: TrainingStep, flops: float) -> float:
    """Seconds of ``flops`` of dense layers' work at the compute model's efficiency."""
    return flops / (step.peak_flop_per_s * step.compute.efficiency)


def add_experts(step: TrainingStep, chunks: list[list[_Chunk]]) -> None:
    """Adds each chunk's routed experts (and, on the last virtual stage, the multi-token
    prediction modules) to its time, FLOPs and parameters, and gives it its :class:`MoeWork`."""
    m, p = step.model, step.par
    if not m.is_moe and not m.mtp_layers:
        return
    last_vs = p.pp * p.virtual_stages - 1
    rec = 1.0 if p.recompute else 0.0
    t = tokens_per_rank(step)
    local = m.n_experts // p.ep if m.is_moe else 0
    routings: dict[bytes, MoeRouting] = {}
    alike: list[tuple[np.ndarray, float, float, float]] = []  # balanced routing: every layer's the same

    def per_layer(i: int) -> tuple[np.ndarray, float, float, float]:
        """Layer i's counts, its experts' forward seconds and FLOPs on the busiest rank, and
        that rank's tokens over the mean."""
        if alike:
            return alike[0]
        counts = layer_counts(step, i)
        per_expert = counts.sum(axis=0).reshape(p.ep, local)  # tokens each rank's experts receive
        recv = per_expert.sum(axis=1)
        busiest = int(np.argmax(recv))
        out = (counts, expert_gemm_s(step, per_expert[busiest]) + memory_bound_s(step, t, float(recv[busiest])),
               2.0 * float(recv[busiest]) * m.expert_params(), float(recv[busiest] / recv.mean()) if recv.mean() > 0 else 1.0)
        if step.moe.routing == "balanced":
            alike.append(out)
        return out
    for row in chunks:
        for ch in row:
            layers = [i for i in ch.layers if m.is_moe_layer(i)]
            extra_s = extra_flops = 0.0
            if ch.chunk * p.pp + ch.stage == last_vs and m.mtp_layers:
                # each MTP module: the 2h -> h projection, a layer like the last (its dense part
                # here, its experts below), the shared output head
                last = m.layers - 1
                dense = m.layer_active_params(last) - (m.experts_per_token * m.expert_params() if m.is_moe_layer(last) else 0)
                tokens = p.micro_batch_size * m.seq_len / p.cp
                per = 2.0 * tokens * (2 * m.hidden * m.hidden + dense + m.vocab * m.hidden) / p.tp
                per += p.micro_batch_size * m.attention_core_flops() / p.tp / p.cp
                extra_flops += m.mtp_layers * per
                extra_s += m.mtp_layers * dense_s(step, per)
                ch.params += m.mtp_layers * (2 * m.hidden * m.hidden + m.layer_params(last)
                                             - (m.n_experts * m.expert_params() if m.is_moe_layer(last) else 0)) / p.tp
                if m.is_moe_layer(last):
                    layers += [m.layers + j for j in range(m.mtp_layers)]
            if not layers and not extra_flops:
                continue
            work = MoeWork(layers)
            total = None
            ratios = []
            for i in layers:
                counts, fwd_s, flops, ratio = per_layer(i)
                work.fwd_s += fwd_s
                work.flops_fwd += flops
                ratios.append(ratio)
                total = counts if total is None else total + counts
                ch.expert_params += local * m.expert_params() / p.expert_tp
            if layers and p.ep > 1 and total is not None:
                # one routing per distinct traffic: chunks routed alike share it (and the
                # collectives made of it, made again from their first construction)
                key = total.tobytes()
                work.routing = routings.get(key)
                if work.routing is None:
                    work.routing = routings[key] = MoeRouting.from_counts(total, m.experts_per_token)
            work.busiest_over_mean = max(ratios, default=1.0)
            ch.moe = work
            ch.flops_fwd += work.flops_fwd + extra_flops
            ch.fwd_s += work.fwd_s + extra_s
            ch.bwd_s += (work.fwd_s + extra_s) * (2.0 + rec)


# ---- expert-parallel groups and their communication
def ep_groups(step: TrainingStep, s: int) -> list[tuple[tuple[int, ...], list[int]]]:
    """Stage ``s``'s expert-parallel groups as Megatron forms them (its expert rank order
    "tp-ep-dp" over the stage's ranks: etp innermost, then ep): each group's GPUs, and the
    replicas (dp x cp index, cp innermost) they belong to."""
    p = step.par
    ranks = step.ranks[s].ravel()  # (dp, cp, tp) -> Megatron rank
    gpus = step.gpus[s].ravel()
    replica = np.repeat(np.arange(p.dp * p.cp), p.tp)
    order = np.argsort(ranks, kind="stable")
    g = gpus[order].reshape(-1, p.ep, p.expert_tp)
    r = replica[order].reshape(-1, p.ep, p.expert_tp)
    return [(tuple(int(x) for x in g[d, :, e]), sorted({int(x) for x in r[d, :, e]}))
            for d in range(g.shape[0]) for e in range(p.expert_tp)]


def chain(step: TrainingStep, fwd: bool) -> list[tuple[str, float]]:
    """The dispatches and combines of one forward or backward, in order: (kind, bytes per token)."""
    h = step.model.hidden
    fp8 = h + h / FP8_DISPATCH_BLOCK * 4.0
    forward = [("dispatch", fp8 if step.moe.fp8_dispatch else 2.0 * h), ("combine", 2.0 * h)]
    backward = [("dispatch", 2.0 * h), ("combine", 2.0 * h)]
    if fwd:
        return forward
    return (forward if step.par.recompute else []) + backward


def comm_s(step: TrainingStep, ch: _Chunk, fwd: bool) -> float:
    """Seconds of the chunk's dispatch and combine chain of one forward or backward on an
    otherwise idle fabric: the slowest group's, each timed by :func:`fabricsim.estimate_moe`
    (once per layout against the NVLink domains: groups that are the same GPUs of other
    domains take the same time); on a fabric with faults, every group's simulated at once."""
    work = ch.moe
    if work is None or work.routing is None:
        return 0.0
    hit = work._comm_s.get(fwd)
    if hit is None:
        if step._faulted:
            sc = Scenario(step.fabric, **({} if step.cost_model is None else {"cost_model": step.cost_model}))
            for grp, _ in ep_groups(step, ch.stage):
                prev: list[int] = []
                for kind, nbytes in chain(step, fwd):
                    add = sc.add_moe_dispatch if kind == "dispatch" else sc.add_moe_combine
                    prev = [add(work.routing, list(grp), bytes_per_token=nbytes, mode=step.moe.mode, after=prev)]
            hit = float(sc.run().summary.makespan_s)
        else:
            key_g = ("ep_layouts", ch.stage)
            layouts = step._est_cache.get(key_g)
            if layouts is None:
                layouts = step._est_cache[key_g] = _distinct(step, [g for g, _ in ep_groups(step, ch.stage)])
            counts = work.routing.counts
            assert counts is not None  # made from counts
            # chunks of as many layers routed alike, on groups laid out alike, take the same time
            key = ("moe", counts.tobytes(), tuple(layouts), fwd)
            hit = step._est_cache.get(key)
            if hit is None:
                hit = step._est_cache[key] = max(
                    sum(estimate_moe(step.fabric, kind, work.routing, list(grp), bytes_per_token=nbytes,
                                     mode=step.moe.mode, cost_model=step.cost_model) for kind, nbytes in chain(step, fwd))
                    for grp in layouts.values())
        work._comm_s[fwd] = hit
    return float(hit)


def _distinct(step: TrainingStep, groups: list[tuple[int, ...]]) -> dict[tuple[int, ...], tuple[int, ...]]:
    """One group of each layout (the same positions in as many domains, moved by whole
    NVLink domains; inside one domain, where every GPU reaches every other alike, only its
    size), by its layout."""
    size = max(int(fabric_view(step.fabric).gpus_per_domain or 0), 1)
    seen: dict[tuple[int, ...], tuple[int, ...]] = {}
    for g in groups:
        a = np.asarray(g)
        d = a // size
        key = (-1, len(g)) if size > 1 and (d == d[0]).all() else tuple((a - d.min() * size).tolist())
        seen.setdefault(key, g)
    return seen


def overlapped_compute_s(step: TrainingStep, compute_s: float, ep_s: float) -> float:
    """The compute of an op whose dispatch and combine (``ep_s``) run beside it: the part they
    overlap runs on the SMs they leave (:data:`COMM_SM_FRACTION`)."""
    if not step.moe.overlap or ep_s <= 0:
        return compute_s
    f = step.moe.comm_sm_fraction
    return compute_s + min(compute_s, ep_s) * f / (1.0 - f)
