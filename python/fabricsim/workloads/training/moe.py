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
recomputation the forward's again first (for the share of the layers recomputed). The flex
dispatcher with expert tensor parallelism (etp > 1) sends each token to every expert-TP rank of
its destination over one TP x EP group; that dispatch is not built, and such a step is refused.

**Overlap** (``overlap``, off by default as in Megatron, ``--overlap-moe-expert-parallel-comm``):
the dispatch and combine run beside the chunk's compute, as Megatron's 1F1B all-to-all overlap
and DeepSeek's DualPipe pair one micro-batch's communication with another's compute; while
they run, their kernels hold :data:`COMM_SM_FRACTION` of the SMs, and the overlapped part of the
compute runs on the SMs left, as beside every overlapped communication of the step
(:func:`~.compute.compute_beside_comm_s`). The pairing of micro-batches is not modelled: every
op, the warm-up's too, overlaps its own communication.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._checks import U32, choice, flag, integer, known_fields, real_in, shown
from ...collectives import fabric_view
from ...collectives.moe import MoeRouting, estimate_moe
from ...exceptions import InvalidArgumentError
from ...scenario import Scenario
from .compute import _Chunk, gemm_s, layer_work, logits_work, memory_bound_s
from .placement import expert_layout

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


@known_fields
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
        m = fs.training.model("deepseek-v3").replace(layers=4, first_dense_layers=0, mtp_layers=0)
        par = fs.Parallelism(dp=32, ep=16, dp_sharding="zero1")   # each EP group on two boards
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
        if not all(isinstance(k, str) for k in moe):
            raise InvalidArgumentError(f"moe: a dict of MoeOptions' fields is keyed by their names, got {shown(moe)}")
        return MoeOptions(**moe)
    raise InvalidArgumentError(f"moe must be a fabricsim.training.MoeOptions, a dict of its fields or None, got "
                               f"{type(moe).__name__} {shown(moe)}")


@dataclass
class MoeWork:
    """One chunk's routed experts on one GPU, per micro-batch: the forward and backward
    seconds of its experts on the busiest rank, their forward FLOPs, and the routing of its
    dispatch (every MoE layer's token counts added up)."""

    layers: list[int]
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    flops_fwd: float = 0.0
    routing: MoeRouting | None = None
    #: tokens the busiest rank's experts compute, gathered over its expert-tensor-parallel group
    #: (every MoE layer's added up)
    rows: float = 0.0
    #: the share of the MoE layers whose forward dispatch and combine run again before the
    #: backward (the layers recomputed)
    redispatch: float = 0.0
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
#: HBM bytes per token value of the permutation around the experts, forward (the backward the
#: same, reversed): the permutation reads each token (2 bytes a BF16 value) and writes one
#: copy per routed expert (2 each); the unpermutation reads the copies and writes their
#: weighted sum (Megatron's fused ``moe_permute`` and ``moe_unpermute`` kernels,
#: megatron/core/transformer/moe/moe_utils.py). Counted per token held (the reads and the sum)
#: and per copy received (the copies written and read).
PERMUTE_BYTES_PER_TOKEN = 2.0 + 2.0
PERMUTE_BYTES_PER_COPY = 2.0 + 2.0


def expert_work(step: TrainingStep, tokens_per_expert: np.ndarray, tokens: float) -> tuple[float, float, float, float]:
    """One GPU's routed experts of one MoE layer, holding ``tokens`` and its experts receiving
    ``tokens_per_expert`` (each local expert's, gathered over the ETP group): (forward s,
    backward s, forward FLOPs, forward s of the gated activation alone). Each of the expert
    MLP's two linear layers is a grouped GEMM with each expert's tokens as its shape
    (:func:`~.compute.gemm_s`), its backward the data-gradient and weight-gradient grouped
    GEMMs (each expert's weight gradient from its own tokens), the recipe's casts around them; the activation and the permutation
    (:data:`PERMUTE_BYTES_PER_TOKEN`, :data:`PERMUTE_BYTES_PER_COPY`) are memory-bound."""
    m, p, prec, cm, gpu = step.model, step.par, step.precision, step.compute, step.gpu
    ms = [float(x) * p.expert_tp for x in tokens_per_expert]
    rows = sum(ms)
    h, f = m.hidden, m.expert_ffn / p.expert_tp
    up = 2 if m.gated_mlp else 1
    fmt = prec.gemm_format
    g = dict(gpu=gpu, precision=fmt, compute=cm, grouped=True)
    fwd = gemm_s(ms, up * f, h, **g) + gemm_s(ms, h, f, **g)
    # data gradients: each expert's tokens x its weight; weight gradients: each expert's own,
    # its tokens the inner dimension
    bwd = gemm_s(ms, h, up * f, **g) + gemm_s(ms, f, h, **g) + gemm_s(h, up * f, ms, **g) + gemm_s(f, h, ms, **g)
    c = prec.cast_bytes_per_value
    if c:
        fwd += memory_bound_s(c * rows * (h + f), gpu=gpu, compute=cm)
        bwd += memory_bound_s(c * rows * (up * f + h), gpu=gpu, compute=cm)
    act_f, act_b = cm.bytes_per_value["swiglu" if m.gated_mlp else "gelu"]
    act = memory_bound_s(act_f * rows * f, gpu=gpu, compute=cm)
    permute = memory_bound_s(PERMUTE_BYTES_PER_TOKEN * tokens * h + PERMUTE_BYTES_PER_COPY * rows / p.expert_tp * h,
                             gpu=gpu, compute=cm)
    fwd += act + permute
    bwd += memory_bound_s(act_b * rows * f, gpu=gpu, compute=cm) + permute
    return fwd, bwd, 2.0 * rows * (up + 1) * h * f, act


def _mtp_work(step: TrainingStep) -> tuple[float, float, float, float, float]:
    """One multi-token prediction module's dense part on one GPU of the last stage: (forward s,
    backward s, forward FLOPs, parameters, forward s run again by full recomputation): its
    2h -> h projection, a layer like the last without its routed experts (those are the
    routing's), and the shared output head. Full recomputation runs the projection and the
    layer again, not the head and its loss (Megatron's MultiTokenPredictionLayer checkpoints
    ``_proj_and_transformer_layer``; ``process_mtp_loss`` runs outside it:
    megatron/core/transformer/multi_token_prediction.py)."""
    m, p = step.model, step.par
    tokens = p.micro_batch_size * m.seq_len / p.cp
    last = m.layers - 1
    work, flops = layer_work(m, last, tokens=tokens, tp=p.tp, cp=p.cp, sequence_parallel=bool(p.sequence_parallel),
                             micro_batch_size=p.micro_batch_size, tp_comm_overlap=p.tp_comm_overlap, gpu=step.gpu,
                             precision=step.precision, compute=step.compute)
    fwd = sum(t[0] for t in work.values())
    bwd = sum(t[1] for t in work.values())
    h = m.hidden
    g = dict(gpu=step.gpu, precision=step.precision.gemm_format, compute=step.compute)
    proj_f = gemm_s(tokens, h / p.tp, 2 * h, **g)
    proj_b = gemm_s(tokens, 2 * h, h / p.tp, **g) + gemm_s(2 * h, h / p.tp, tokens, **g)
    lf, lb, lflops = logits_work(m, tokens=tokens, tp=p.tp, gpu=step.gpu, compute=step.compute)
    params = (2 * h * h + m.layer_params(last) - (m.n_experts * m.expert_params() if m.is_moe_layer(last) else 0)) / p.tp
    return (fwd + proj_f + lf, bwd + proj_b + lb, flops + 2.0 * tokens * 2 * h * h / p.tp + lflops, params,
            fwd + proj_f)


def add_experts(step: TrainingStep, chunks: list[list[_Chunk]]) -> None:
    """Adds each chunk's routed experts (and, on the last virtual stage, the multi-token
    prediction modules) to its time, FLOPs and parameters, and gives it its :class:`MoeWork`.
    A layer's recomputation (full, or Megatron's "moe" or "moe_act" module) runs its experts'
    forward, or their activation, again before their backward."""
    m, p = step.model, step.par
    if not m.is_moe and not m.mtp_layers:
        return
    last_vs = p.pp * p.virtual_stages - 1
    t = tokens_per_rank(step)
    local = m.n_experts // p.ep if m.is_moe else 0
    routings: dict[bytes, MoeRouting] = {}
    alike: list[tuple[np.ndarray, float, float, float, float, float]] = []  # balanced: every layer's the same

    def per_layer(i: int) -> tuple[np.ndarray, float, float, float, float, float]:
        """Layer i's counts; its experts' forward s, backward s, forward FLOPs and activation
        s on the busiest rank, and the tokens they compute (gathered over its ETP group)."""
        if alike:
            return alike[0]
        counts = layer_counts(step, i)
        per_expert = counts.sum(axis=0).reshape(p.ep, local)  # tokens each rank's experts receive
        recv = per_expert.sum(axis=1)
        busiest = int(np.argmax(recv))
        f, b, flops, act = expert_work(step, per_expert[busiest], t)
        out = (counts, f, b, flops, act, float(recv[busiest]) * p.expert_tp)
        if step.moe.routing == "balanced":
            alike.append(out)
        return out

    for row in chunks:
        for ch in row:
            moe_layers = [(k, i) for k, i in enumerate(ch.layers) if m.is_moe_layer(i)]
            mtp = ch.chunk * p.pp + ch.stage == last_vs and m.mtp_layers > 0
            if mtp:
                f, b, flops, params, again = _mtp_work(step)
                full = ch.recomputed == len(ch.layers) and p.recompute
                ch.fwd_s += m.mtp_layers * f
                ch.bwd_s += m.mtp_layers * (b + (again if full else 0.0))
                ch.flops_fwd += m.mtp_layers * flops
                ch.params += m.mtp_layers * params
                if m.is_moe_layer(m.layers - 1):  # each module's experts, routed as a layer of their own
                    moe_layers += [(len(ch.layers) if not full else -1, m.layers + j) for j in range(m.mtp_layers)]
            if not moe_layers:
                continue
            work = MoeWork([i for _, i in moe_layers])
            total = None
            rerun = [0 <= k_ < ch.recomputed or k_ < 0 or "moe" in p.recompute_modules for k_, _ in moe_layers]
            for (k_, i), layer_again in zip(moe_layers, rerun):
                counts, f, b, flops, act, rows = per_layer(i)
                again = f if layer_again else (act if "moe_act" in p.recompute_modules else 0.0)
                work.fwd_s += f
                work.bwd_s += b + again
                work.flops_fwd += flops
                work.rows += rows
                total = counts if total is None else total + counts
                ch.expert_params += local * m.expert_params() / p.expert_tp
            if p.ep > 1 and total is not None:
                # one routing per distinct traffic: chunks routed alike share it (and the
                # collectives made of it, made again from their first construction)
                key = total.tobytes()
                work.routing = routings.get(key)
                if work.routing is None:
                    work.routing = routings[key] = MoeRouting.from_counts(total, m.experts_per_token)
            work.redispatch = sum(rerun) / len(rerun)
            ch.moe = work
            ch.flops_fwd += work.flops_fwd
            ch.fwd_s += work.fwd_s
            ch.bwd_s += work.bwd_s


# ---- expert-parallel groups and their communication
def _expert_layout(step: TrainingStep, s: int) -> tuple[np.ndarray, np.ndarray]:
    """Stage ``s``'s GPUs and replicas (dp x cp index, cp innermost) as Megatron lays out its
    expert groups, each of shape (expert_dp, ep, etp) (:func:`~.placement.expert_layout`)."""
    p = step.par
    replicas = np.repeat(np.arange(p.dp * p.cp), p.tp)  # the stage's ranks map (dp, cp, tp)
    return expert_layout(p, step.ranks[s], step.gpus[s]), expert_layout(p, step.ranks[s], replicas)


#: The axis of :func:`_expert_layout` each kind of expert group runs along.
_EXPERT_AXES = {"edp": 0, "ep": 1, "etp": 2}


def expert_groups(step: TrainingStep, s: int, kind: str = "ep") -> list[tuple[tuple[int, ...], list[int]]]:
    """Stage ``s``'s expert groups of ``kind`` as Megatron forms them (:func:`_expert_layout`):
    "ep" (expert parallel: the ranks that exchange tokens), "etp" (expert tensor parallel: the
    ranks that split each expert's weights) or "edp" (expert data parallel: the ranks that hold
    the same experts and reduce their gradients); each group's GPUs, and the replicas (dp x cp
    index, cp innermost) they belong to."""
    g, r = (np.moveaxis(a, _EXPERT_AXES[kind], -1) for a in _expert_layout(step, s))
    n = g.shape[-1]
    return [(tuple(int(x) for x in gg), sorted({int(x) for x in rr}))
            for gg, rr in zip(g.reshape(-1, n), r.reshape(-1, n))]


def chain(step: TrainingStep, fwd: bool, redispatch: float = 0.0) -> list[tuple[str, float]]:
    """The dispatches and combines of one forward or backward, in order: (kind, bytes per
    token); ``redispatch``: the share of the MoE layers whose forward ones the backward runs
    again first (recomputation), as that share of their bytes."""
    h = step.model.hidden
    fp8 = h + h / FP8_DISPATCH_BLOCK * 4.0
    forward = [("dispatch", fp8 if step.moe.fp8_dispatch else 2.0 * h), ("combine", 2.0 * h)]
    backward = [("dispatch", 2.0 * h), ("combine", 2.0 * h)]
    if fwd:
        return forward
    return [(kind, nbytes * redispatch) for kind, nbytes in forward if redispatch > 0] + backward


def etp_bytes(step: TrainingStep, ch: _Chunk, fwd: bool) -> float:
    """Bytes (nccl-tests' size) of the all-gather, and of the reduce-scatter, of the chunk's
    routed tokens over each expert-tensor-parallel group in one forward or backward, per
    micro-batch: the tokens the busiest rank's experts receive, gathered over the etp ranks,
    BF16, every MoE layer's added up; none with etp 1. Megatron's token dispatcher takes the
    expert-TP group as its tensor-parallel group (megatron/core/transformer/moe/token_dispatcher.py,
    ``MoETokenDispatcher.__init__``: ``self.tp_group = pg_collection.expt_tp``): after the
    all-to-all it gathers the received tokens over it (``MoEAlltoAllTokenDispatcher.dispatch_postprocess``,
    ``gather_from_sequence_parallel_region``) and before the combine reduce-scatters the
    experts' outputs (``combine_preprocess``, ``reduce_scatter_to_sequence_parallel_region``);
    the backward runs the pair reversed, after the forward's again for the layers recomputed."""
    work = ch.moe
    if work is None or step.par.expert_tp == 1:
        return 0.0
    passes = 1.0 if fwd else 1.0 + work.redispatch
    return float(passes * work.rows * step.model.hidden * 2.0)


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
            for grp, _ in expert_groups(step, ch.stage, "ep"):
                prev: list[int] = []
                for kind, nbytes in chain(step, fwd, work.redispatch):
                    add = sc.add_moe_dispatch if kind == "dispatch" else sc.add_moe_combine
                    prev = [add(work.routing, list(grp), bytes_per_token=nbytes, mode=step.moe.mode, after=prev)]
            hit = float(sc.run().summary.makespan_s)
        else:
            key_g = ("ep_layouts", ch.stage)
            layouts = step._est_cache.get(key_g)
            if layouts is None:
                layouts = step._est_cache[key_g] = _distinct(step, [g for g, _ in expert_groups(step, ch.stage, "ep")])
            counts = work.routing.counts
            assert counts is not None  # made from counts
            # chunks of as many layers routed alike, on groups laid out alike, take the same time
            key = ("moe", counts.tobytes(), tuple(layouts), fwd, work.redispatch)
            hit = step._est_cache.get(key)
            if hit is None:
                hit = step._est_cache[key] = max(
                    sum(estimate_moe(step.fabric, kind, work.routing, list(grp), bytes_per_token=nbytes,
                                     mode=step.moe.mode, cost_model=step.cost_model)
                        for kind, nbytes in chain(step, fwd, work.redispatch))
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
