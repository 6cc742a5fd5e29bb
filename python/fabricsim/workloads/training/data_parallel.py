"""A training step's data-parallel communication as Megatron-LM groups it: which ranks reduce
each parameter's gradients and gather it back (:func:`groups`), in which buckets and when their
gradients are final (:func:`buckets`), and the parameter gathers of a sharded optimizer or FSDP
(:func:`gathers`). Dense parameters go over each TP rank's dp x cp replicas, expert parameters
over their expert-data-parallel group, the ranks holding the same experts: Megatron's
DistributedDataParallel keeps expert parameters (``allreduce=False``) in buffers of their own,
bucketed apart and reduced over the expert-DP group
(megatron/core/distributed/distributed_data_parallel.py, ``DistributedDataParallel.__init__``:
``expert_parallel_buffers`` on ``intra_expt_dp_group``, ``expert_parallel_bucket_groups``;
docs/sources.md section 8)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .compute import _Chunk
from .moe import expert_groups

if TYPE_CHECKING:
    from .step import TrainingStep


def groups(step: TrainingStep, s: int, over: str) -> list[tuple[tuple[int, ...], list[int]]]:
    """Stage ``s``'s groups reducing gradients and gathering parameters, each its GPUs and the
    replicas (dp x cp index, cp innermost) it holds: ``over`` "dp", the dense parameters' (per
    TP rank, its dp x cp replicas: Megatron's ``intra_dp_cp_group``), or "edp", the experts'
    (:func:`~.moe.expert_groups` of kind "edp")."""
    if over == "edp":
        return expert_groups(step, s, "edp")
    p = step.par
    reps = list(range(p.dp * p.cp))
    return [(tuple(int(x) for x in step.gpus[s, :, :, t].ravel()), reps) for t in range(p.tp)]


def _kinds(step: TrainingStep, ch: _Chunk) -> list[tuple[str, float]]:
    """(group, parameters on one GPU) of chunk ``ch`` that a group of two or more ranks shares."""
    p = step.par
    return [(over, params) for over, params, n in (("dp", ch.params, p.dp * p.cp), ("edp", ch.expert_params, step.expert_dp))
            if params > 0 and n >= 2]


def buckets(step: TrainingStep, ch: _Chunk) -> list[tuple[str, float, float]]:
    """One chunk's gradient reductions per GPU, in the order a GPU runs them, one after the
    other: per bucket group, its group (:func:`groups`), its bytes, and the fraction of the
    chunk's last backward after which its gradients are final. The dense and the expert
    parameters are bucketed apart, each into ``bucket_size_bytes`` buckets (at most 8 groups),
    their gradients final evenly through the backward; the dense group first where both are
    final together, as ``start_grad_sync`` walks ``bucket_groups +
    expert_parallel_bucket_groups``. [assumed] one after the other on a GPU: the two groups'
    NCCL streams may run at once, sharing the GPU's links; one after the other they take about
    as long, and the closed form stays exact.

    Example::

        from fabricsim.workloads.training import data_parallel
        m = fs.training.model("mixtral-8x7b").replace(layers=2)
        f = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        par = fs.Parallelism(dp=16, ep=4, dp_sharding="zero1", global_batch_size=16)
        step = fs.TrainingStep(m, par, f, check_memory=False)
        [over for over, _, _ in data_parallel.buckets(step, step.chunks[0][0])][:3]   # ['dp', 'edp', 'dp']
    """
    out: list[tuple[str, float, float]] = []
    for over, params in _kinds(step, ch):
        total = params * step.par.grad_reduce_bytes
        k = min(max(1, math.ceil(total / step.par.bucket_size_bytes)), 8)
        out += [(over, total / k, (i + 1) / k) for i in range(k)]
    return sorted(out, key=lambda b: b[2])  # stable: dense first on a tie


def gathers(step: TrainingStep, ch: _Chunk) -> list[tuple[str, float]]:
    """One chunk's parameter all-gathers per GPU (a sharded optimizer's, FSDP's), in the order
    a GPU runs them: (group, bytes), the dense parameters over their replicas, then the experts'
    over their expert-data-parallel group (Megatron gathers each buffer over the group it
    reduces over)."""
    return [(over, params * step.precision.param_gather_bytes) for over, params in _kinds(step, ch)]
