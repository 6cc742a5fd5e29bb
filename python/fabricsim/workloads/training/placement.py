"""Where a step's communicating groups sit against the fabric's NVLink domains: which tensor-
and expert-parallel groups straddle domains, spanning more than their size needs (:func:`straddling`, reported in a
step's results and warned about when the step is made), and a rank order that keeps them in
one (:func:`domain_aware`).

Tensor-parallel traffic and the expert dispatch run at NVLink rates inside a domain; a group
that straddles domains sends part of it over the scale-out network at a tenth of that.
Megatron numbers ranks tp innermost, pipeline stages outermost, and maps rank i to GPU i: on
72-GPU NVL72 racks, an 8-way expert group of ranks 64-71 fits rack 0, but a 32-way group of
ranks 64-95 straddles racks 0 and 1, and the step runs at the network's pace. NVIDIA's GB200
and GB300 recipes avoid it by using 64 of each rack's 72 GPUs (16 of its 18 trays); the
domain-aware order does the same on any fabric: it places each block of ranks that must share
a domain (the union of the TP and EP groups that overlap) at the start of a domain with room
for it, leaving the rest of a domain idle where the next block does not fit.
"""

from __future__ import annotations

from dataclasses import is_dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._checks import shown
from ...collectives import fabric_view
from ...exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from .step import Parallelism, TrainingStep

__all__ = ["straddling", "domain_aware"]


def _domain_size(fabric: Any) -> int:
    """GPUs per NVLink domain (GPU ids numbered domain by domain), 0 where the fabric has no domains."""
    n = int(fabric_view(fabric).gpus_per_domain or 0)
    return n if n > 1 else 0


def layout(fabric: Any, ranks: tuple[int, ...]) -> tuple[Any, ...]:
    """A group's places on ``fabric`` as far as the times of its collectives go: inside one
    NVLink domain, its GPUs' positions in the domain (the domains are alike: a group at the
    same places of another domain takes the same time); else its GPUs themselves."""
    size = _domain_size(fabric)
    domain = ranks[0] // size if size else -1
    if domain >= 0 and all(r // size == domain for r in ranks):
        return ("domain",) + tuple(r - domain * size for r in ranks)
    return ranks


def _tp_groups(rank_map: np.ndarray) -> np.ndarray:
    """Every TP group's members (rows), from an array shaped (pp, dp, cp, tp)."""
    return rank_map.reshape(-1, rank_map.shape[-1])


def expert_layout(par: Parallelism, stage_ranks: np.ndarray, values: Any) -> np.ndarray:
    """``values`` (one per rank of a stage, shaped as ``stage_ranks``, its Megatron ranks) as
    Megatron lays out the stage's expert groups: shape (expert_dp, ep, etp). Megatron's expert
    rank generator orders a stage's tp x cp x dp ranks "tp-ep-dp" with the expert sizes: etp
    innermost, then ep, then expert-dp (megatron/core/parallel_state.py,
    ``initialize_model_parallel``: the ``expert_decoder_rank_generator`` and the groups made
    from its 'ep', 'tp' and 'dp' ranks)."""
    order = np.argsort(np.asarray(stage_ranks).ravel(), kind="stable")
    return np.asarray(values).ravel()[order].reshape(-1, par.ep, par.expert_tp)


def _ep_groups(par: Parallelism, rank_map: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Every expert-parallel group's members (rows) of ``values`` (shaped as ``rank_map``),
    stage by stage (:func:`expert_layout`)."""
    return np.concatenate([np.moveaxis(expert_layout(par, rank_map[s], values[s]), 1, -1).reshape(-1, par.ep)
                           for s in range(par.pp)])


def straddling(step: TrainingStep) -> dict[str, int]:
    """How many of the step's TP groups and expert-parallel groups straddle NVLink domains:
    span more of them than their size needs (a group of k ranks needs ceil(k / domain size));
    ``{"tp": n, "ep": n}`` (0 each on a fabric without domains).

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        m = fs.training.model("mixtral-8x7b").replace(layers=2, seq_len=4096)
        step = fs.TrainingStep(m, fs.Parallelism(dp=16, ep=8, order="dp-tp-cp-ep-pp"), fabric)
        fs.training.straddling(step)   # {'tp': 0, 'ep': 0}: each EP group one board
    """
    size = _domain_size(step.fabric)
    p = step.par
    if not size:
        return {"tp": 0, "ep": 0}
    dom = step.gpus // size

    def spread(groups: np.ndarray) -> int:
        k = groups.shape[1]
        if k < 2:
            return 0
        g = np.sort(groups, axis=1)
        n_domains = 1 + (g[:, 1:] != g[:, :-1]).sum(axis=1)
        return int((n_domains > -(-k // size)).sum())

    ep = spread(_ep_groups(p, step.ranks, dom)) if step.model.is_moe and p.ep > 1 else 0
    return {"tp": spread(_tp_groups(dom)), "ep": ep}


def domain_aware(parallelism: Parallelism, fabric: Any) -> Parallelism:
    """``parallelism`` with a ``placement`` that keeps each TP group and expert-parallel group
    inside one NVLink domain of ``fabric`` where it fits in one: the blocks of ranks that must
    share a domain (TP and EP groups, joined where they overlap) go, in rank order, to the next
    GPUs of the current domain, or to the start of the next domain where they do not fit. A
    block wider than a domain starts at a domain's first GPU. Refused where the fabric has
    too few GPUs for the blocks so placed.

    Example::

        fabric = fs.cluster(domain="gb200-nvl72", n_domains=4, scale_out="quantum-2")
        par = fs.Parallelism(dp=256, ep=32)
        placed = fs.training.domain_aware(par, fabric)
        placed.placement[64:66], placed.placement[96]   # ((72, 73), 104): ranks 64-95 on rack 1
    """
    # a Parallelism (step.py imports this module, so it is known by what it has)
    if isinstance(parallelism, type) or not (is_dataclass(parallelism) and callable(getattr(parallelism, "rank_map", None))):
        raise InvalidArgumentError(f"domain_aware: parallelism must be a fabricsim.Parallelism, got "
                                   f"{type(parallelism).__name__} {shown(parallelism)}")
    size = _domain_size(fabric)
    p = parallelism
    n = p.n_gpus
    if not size:
        return replace(p, placement=None)
    ranks = p.rank_map()
    parent = np.arange(n)

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = int(parent[x])
        return x

    groups = [_tp_groups(ranks)]
    if p.ep > 1:
        groups.append(_ep_groups(p, ranks, ranks))
    for g in groups:
        for row in g:
            root = find(int(row[0]))
            for x in row[1:]:
                r = find(int(x))
                if r != root:
                    parent[max(r, root)] = min(r, root)
                    root = min(r, root)
    roots = np.array([find(i) for i in range(n)])
    placement = np.empty(n, dtype=np.int64)
    at = 0
    for root in np.unique(roots):  # blocks by their first rank
        members = np.flatnonzero(roots == root)
        k = len(members)
        room = size - at % size
        if k > room and (k <= size or room < size):
            at += room
        placement[members] = np.arange(at, at + k)
        at += k
    n_fabric = getattr(fabric, "n_gpus", None)
    if n_fabric is not None and at > n_fabric:
        raise InvalidArgumentError(
            f"a domain-aware placement of {n} ranks in blocks that each stay in one {size}-GPU NVLink domain needs "
            f"{at} GPUs, but the fabric has {n_fabric}: add domains, or keep the default placement")
    return replace(p, placement=tuple(int(x) for x in placement))
