"""NCCL's all-to-all and grouped send/recv as flows on a scenario's core (``algorithm="p2p"``):
the transfers of its point-to-point schedule (:func:`fabricsim.collectives.cost.p2p.transfers`:
PXN's rail-aligned network flows, their NVLink hops, the operations inside a node, each capped
at its channels' share) joined as NCCL runs them.

Where every channel runs one batch (the schedule fits its channels, as up to 16 nodes of 8
H100s do), every transfer starts at once and the collective ends when each batch key's
transfers are done and have paid its point-to-point latency. Where a channel runs several
batches one after another (past the channel budget, or in kernels one after another past 254
batches), each batch ends with a zero-length-but-for-latency join per unit (a group of ranks
across nodes, a rank on one node) waiting for the transfers it sends and receives in it; a
transfer of a later batch waits for the joins of its predecessors on its channels at both its
ends (and, first on its channels in a kernel, for both ends' joins of the kernel before). NCCL
has no barrier across channels: neither has this, but a unit's join stands for its ranks on
all the channels of the batch key, which is the same where they finish together. Where every
rank runs alike (an even all-to-all over whole nodes) a batch key has one join for all its
units: they would end within their wire latencies' spread (a microsecond), and one join
instead of one per node and batch keeps a 4,096-rank all-to-all at 512 of them."""

from __future__ import annotations

from typing import Any

import numpy as np

from .communicator import _Comm
from .cost import p2p


def add_p2p(core: Any, comm: _Comm, plan: p2p.Transfers, begin: int, tag: str, alike: bool = False) -> int:
    """Adds the ``p2p`` construction of ``plan`` (:func:`fabricsim.collectives.cost.p2p.plan`)
    after activity ``begin``; returns the id of its end (module docs). ``alike``: every rank
    sends and receives the same (an even all-to-all over whole nodes), so a batch's joins,
    which would end together but for their wire latencies' spread, are one for every unit."""
    if alike:
        plan = p2p.one_unit(plan)
    ranks = comm.ranks
    n_flows = len(plan.nbytes)
    if not n_flows:
        return int(core.add_delay(0.0, 0.0, [begin], tag))
    core.check_room_for_flows(n_flows)

    def flows(sel: np.ndarray, after: list[int]) -> np.ndarray:
        k = len(sel)
        ids: np.ndarray = core.add_flows(
            np.ascontiguousarray(ranks[plan.src[sel]]), np.ascontiguousarray(ranks[plan.dst[sel]]),
            np.ascontiguousarray(plan.nbytes[sel]), np.zeros(k), tag, None, None, after, striped=True,
            max_rate_Bps=np.ascontiguousarray(plan.cap_Bps[sel]))
        return ids

    hops = np.flatnonzero(plan.kind == p2p.HOP)
    hop_ids = flows(hops, [begin]) if len(hops) else np.zeros(0, dtype=np.int64)
    batched = np.flatnonzero(plan.kind != p2p.HOP)
    if not plan.waves:
        ids = flows(batched, [begin])
        ends = [core.add_delay(float(plan.alpha_s[x]), 0.0, ids[plan.key[batched] == x], tag)
                for x in np.unique(plan.key[batched])]
        return int(core.add_delay(0.0, 0.0, np.concatenate([np.array(ends, dtype=np.int64), hop_ids]), tag))
    return _waves(core, plan, batched, hop_ids, begin, tag, flows)


def _waves(core: Any, plan: p2p.Transfers, batched: np.ndarray, hop_ids: np.ndarray, begin: int, tag: str,
           flows: Any) -> int:
    """The batches one after another on their channels (module docs)."""
    ks = plan.keys
    joins: dict[tuple[int, int], int] = {}
    kernel_joins: dict[tuple[int, int], int] = {}
    order = batched[np.lexsort((plan.unit_src[batched], plan.key[batched]))]
    keys_of = plan.key[order]
    bounds = np.searchsorted(keys_of, np.arange(len(ks.pred) + 1))
    n_kernels = int(ks.kernel.max()) + 1
    for x in range(len(ks.pred)):
        sel = order[bounds[x]:bounds[x + 1]]
        if not len(sel):
            continue
        first_in_kernel = not ks.pred[x] and ks.kernel[x] > 0
        # One call per sending unit: its transfers of this batch share their waits.
        units = plan.unit_src[sel]
        cut = np.flatnonzero(np.diff(units)) + 1
        made = []
        for part in np.split(sel, cut):
            ends = {int(plan.unit_src[part[0]])} | {int(u) for u in np.unique(plan.unit_dst[part])}
            if first_in_kernel:
                after = [kernel_joins[(u, int(ks.kernel[x]) - 1)] for u in ends if (u, int(ks.kernel[x]) - 1) in kernel_joins]
            else:
                after = [joins[(u, p)] for p in ks.pred[x] for u in ends if (u, p) in joins]
            made.append((part, flows(part, after or [begin])))
        ids = np.concatenate([m[1] for m in made])
        sel_all = np.concatenate([m[0] for m in made])
        # Each unit's join: the transfers it sends and receives in this batch, then the latency.
        members = np.concatenate([plan.unit_src[sel_all], plan.unit_dst[sel_all]])
        both = np.concatenate([ids, ids])
        by = np.argsort(members, kind="stable")
        members, both = members[by], both[by]
        starts = np.flatnonzero(np.concatenate(([True], members[1:] != members[:-1])))
        for a, b in zip(starts, np.append(starts[1:], len(members))):
            joins[(int(members[a]), x)] = int(core.add_delay(float(plan.alpha_s[x]), 0.0, np.unique(both[a:b]), tag))
        if x == len(ks.pred) - 1 or ks.kernel[x + 1] != ks.kernel[x]:
            kern = int(ks.kernel[x])
            if kern + 1 < n_kernels:
                mine: dict[int, list[int]] = {}
                for (u, y), j in joins.items():
                    if ks.kernel[y] == kern:
                        mine.setdefault(u, []).append(j)
                for u, js in mine.items():
                    kernel_joins[(u, kern)] = int(core.add_delay(0.0, 0.0, js, tag))
    return int(core.add_delay(0.0, 0.0, np.concatenate([np.fromiter(joins.values(), np.int64, len(joins)), hop_ids]),
                              tag))
