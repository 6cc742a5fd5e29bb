"""A training step as one DAG on a :class:`~fabricsim.Scenario`: per replica, stage,
micro-batch and chunk one compute delay and the chunk's TP, CP and EP collectives, the
pipeline flows between stages, the data-parallel reduction in buckets, the optimizer and the
parameter gathers (the training package's docstring, Granularity, says how they are grouped)."""

from __future__ import annotations

import contextlib
import copy
import gc
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, cast

import numpy as np

from ..._checks import room_for
from ...collectives.construction import Batch, Builder, _Copies
from ...scenario import Scenario
from . import data_parallel, moe
from .estimate import op_compute_s, tp_sizes
from .results import _CAT_INDEX
from .schedule import schedule_order

if TYPE_CHECKING:
    from .step import TrainingStep


#: Memory a built step takes per scheduled operation (one chunk's forward or backward of one
#: micro-batch on one replica and stage, with its collectives and pipeline flows): [measured]
#: 2.6 kB on an 8-way TP, 2-stage, 2-replica step of 65,536 operations (360,516 activities,
#: 172 MB); the build's lower bound, refused up front where it cannot fit.
STEP_BYTES_PER_OP = 2.5e3

#: Steps of one op on its lanes (:meth:`_Builder._lanes`) from which they go in one batch,
#: fewer one at a time: a batch's setup costs about what 30 activities added one at a time
#: do [measured: builds of the validation steps with 1-128 lanes of 3-14 steps, fastest
#: from 32 to 64 (megatron-gpt3-175b-96, one lane, 2.8 times faster than all batched)].
BATCH_MIN_STEPS = 32

# (stage, micro-batch, chunk) -> the ids the next op waits for (pipeline outputs), a row per replica.
_Outputs = dict[tuple[int, int, int], np.ndarray]


@dataclass
class _Step:
    """One step of a scheduled op that each lane (a replica, or with a CP ring the cp
    replicas of a dp index in turn) takes, as :meth:`_Builder._lanes` adds it: a delay of
    ``duration_s``; or a collective ``op`` of ``size_bytes`` over ``ranks[lane]`` (``comm``
    names the groups, ``ranks`` made once per name); or the lane's pipeline transfer
    ``sends[lane]`` (a :meth:`_Builder._pp_arrays` key); or where ``join`` what ``after``
    holds, its one id, else a delay of 0 after all of them. Tagged ``tag``, recorded as kind
    ``cat`` and as the lane's replica ``rep``; after ``after``: the activity an earlier step
    (by position) recorded, or those of several (a tuple), or per lane its own ids (a row
    each of a 2-D array, or a list each)."""
    cat: str
    tag: str
    after: int | tuple[int, ...] | np.ndarray | list[list[int]]
    duration_s: float = 0.0
    op: str | None = None
    size_bytes: float = 0.0
    ranks: Sequence[tuple[int, ...]] = ()
    comm: tuple[Any, ...] = ()
    sends: Sequence[tuple[int, int, int, int]] | None = None
    join: bool = False
    rep: int = 0


def _rows(ids: list[list[int]]) -> np.ndarray | list[list[int]]:
    """Ids per lane (or replica) as a row each of a 2-D array where they are alike in number."""
    return np.array(ids, dtype=np.int64) if len({len(x) for x in ids}) == 1 else ids


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Python's cycle collector off: a build makes millions of small lists and tuples, none
    in a cycle, and each collection of the older ones walks them all again (8% of a 4 M
    activity build)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class _Built:
    """A built step: the activities the step made (``ids``, ascending: a compute delay, a
    collective's end, a pipeline flow, ...), per activity its kind (``cat``, an index into
    the kinds of the results) and its stage, replica, micro-batch and chunk (-1 where not
    one), and what each waits for: activity ``ids[i]`` waits for
    ``after_ids[after_offsets[k]:after_offsets[k + 1]]``, ``k = group[i]`` (activities made
    together, a pipeline transfer's flows, share their dependencies)."""
    scenario: Any
    ids: np.ndarray
    cat: np.ndarray
    stage: np.ndarray
    replica: np.ndarray
    micro_batch: np.ndarray
    chunk: np.ndarray
    group: np.ndarray
    after_offsets: np.ndarray
    after_ids: np.ndarray
    n_activities: int

    def deps_of(self, activity_id: int) -> np.ndarray:
        """The ids activity ``activity_id`` (one of ``ids``) waits for."""
        k = self.group[int(np.searchsorted(self.ids, activity_id))]
        return self.after_ids[self.after_offsets[k]:self.after_offsets[k + 1]]

    def rows_of(self, activity_ids: Any) -> np.ndarray:
        """The positions in ``ids`` of ``activity_ids`` (each one of them)."""
        return np.searchsorted(self.ids, np.asarray(activity_ids, dtype=np.int64))


class _Builder:
    """Adds a step's activities to a scenario. Its arguments are known good (made here from a
    checked step), so it adds them straight through the scenario's core, without the add_*
    methods' checks and per-call records: the whole step is one change, kept for pickling as
    ``Scenario._training_step(step, start)`` (:meth:`Scenario._one_change`), and each
    distinct collective is constructed once and made again as a copy of its activities
    (:meth:`Builder.add_known`), and compute delays, collectives and pipeline transfers are
    added in batches (:class:`Batch`), one core call for thousands. The activities, their ids
    and order are those the public add_* methods would make."""

    #: Whether activities go through a :class:`Batch` (a subclass adding them one call at a
    #: time turns it off).
    batched = True

    def __init__(self, step: TrainingStep, scenario: Any = None, start: int | None = None) -> None:
        self.st = step
        kw = {} if step.cost_model is None else {"cost_model": step.cost_model}
        self.sc = Scenario(step.fabric, **kw) if scenario is None else scenario
        self.start_id = start
        # Into a scenario with other work: what the step's first activities wait for.
        self.start: list[int] = [] if start is None else [start]
        # Per group of activities made together, 7 numbers: first id, count, kind, stage,
        # replica, micro-batch, chunk; and what they wait for (counts, then the ids in a row).
        # Appended to lists (fast), moved to arrays after each scheduled op (memory).
        self.groups: list[int] = []
        self.n_after: list[int] = []
        self.after: list[int] = []
        self._recorded: tuple[list[np.ndarray], ...] = ([], [], [])
        self.core = self.sc._core
        self.batch: Batch | None = None
        # Pipeline transfers already made once, by ((stage, target, dp, cp), tag): (core
        # template, flows), or None where they are not to be copied.
        self._pp_templates: dict[tuple[tuple[int, int, int, int], str], tuple[int, int] | None] = {}
        if self.sc._collectives is None:
            self.sc._collectives = Builder(self.sc)
        self.colls = self.sc._collectives
        self._ranks: dict[tuple[Any, ...], tuple[int, ...]] = {}
        self._pp: dict[tuple[int, int, int, int], tuple[np.ndarray, ...] | None] = {}
        # (kind, stage) -> the stage's groups of that kind ("dp", "edp", "ep", "etp"), GPUs and replicas
        self._groups: dict[tuple[str, int], list[tuple[tuple[int, ...], list[int]]]] = {}
        # stage -> its TP groups' GPUs, one per replica; (stage, target) -> its pipeline
        # transfers (_pp_arrays keys), one per replica, or none
        self._tp_lists: dict[int, list[tuple[int, ...]]] = {}
        self._send_lists: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
        # (groups, op, bytes) -> a step's collectives on every lane, to be copied together;
        # (the first lane's transfer, tag) -> a step's pipeline transfers on every lane (_kept)
        self._copies: dict[tuple[Any, ...], _Copies] = {}
        self._kept_sends: dict[tuple[Any, ...], tuple[np.ndarray, int]] = {}
        #: Called as the build goes with (parts done, parts in all): each scheduled op, then
        #: each stage's data-parallel reduction and its optimizer (TrainingStep.run's bar).
        self.on_progress: Callable[[int, int], Any] | None = None

    def _rec(self, aid: int, cat: int, after: Sequence[int], s: int = -1, r: int = -1, m: int = -1, c: int = -1,
             n: int = 1) -> int:
        """Records activities ``aid .. aid + n - 1``, of kind ``cat``, each waiting for ``after``."""
        self.groups.extend((aid, n, cat, s, r, m, c))
        self.n_after.append(len(after))
        self.after.extend(after)
        return aid

    def _keep_recorded(self) -> None:
        """Moves what :meth:`_rec` recorded so far into arrays."""
        for kept, values in zip(self._recorded, (self.groups, self.n_after, self.after)):
            kept.append(np.fromiter(values, np.int64, len(values)))
            values.clear()

    def delay(self, dur: float, after: Sequence[int], cat: str, tag: str, *meta: int) -> int:
        after = after or self.start
        assert self.batch is not None
        aid = self.batch.delay(max(0.0, dur), after, tag)
        return self._rec(aid, _CAT_INDEX[cat], after, *meta)

    def coll(self, op: str, ranks: Sequence[int], size: float, after: Sequence[int], cat: str, tag: str, *meta: int,
             sizes: np.ndarray | None = None) -> int:
        after = after or self.start
        key = ranks if type(ranks) is tuple else tuple(ranks)
        aid = self.colls.add_known(op, key, None if sizes is not None else float(size), after, tag, sizes)
        return self._rec(aid, _CAT_INDEX[cat], after, *meta)

    def moe_coll(self, kind: str, ranks: tuple[int, ...], routing: Any, nbytes_per_token: float, after: Sequence[int],
                 tag: str, *meta: int) -> int:
        """A MoE dispatch or combine (:func:`fabricsim.collectives.moe.add_moe`) in the step's mode."""
        after = after or self.start
        aid = self.colls.add_known_moe(kind, ranks, routing, nbytes_per_token, self.st.moe.mode, after, tag)
        return self._rec(aid, _CAT_INDEX["ep"], after, *meta)

    def flows(self, key: tuple[int, int, int, int], pp: tuple[np.ndarray, ...], after: list[int], tag: str) -> list[int]:
        """Pipeline flows ``pp`` (:meth:`_pp_arrays` of ``key``) after ``after``, as
        ``Scenario.add_flows(src, dst, size, after=after, tag=tag)`` adds them: the first
        time for ``(key, tag)`` straight to the core, kept as a template (every flow waits for
        ``after``), then as copies of it."""
        assert self.batch is not None
        kept = self._pp_templates.get((key, tag))
        if kept is not None:
            first = self.batch.repeat(kept[0], kept[1], after)
            return list(range(first, first + kept[1]))
        src, dst, nbytes, zeros = pp
        with self.batch.direct() as core:
            first = core.n_activities
            ids: list[int] = core.add_flows(src, dst, nbytes, zeros, tag, None, None, after).tolist()
            made = core.template(first)
        # every flow a root: a copy makes each wait for its own ``after``, as add_flows does
        self._pp_templates[(key, tag)] = (made[0], len(ids)) if made is not None and made[1] == len(ids) else None
        return ids

    def _group(self, key: tuple[Any, ...], *index: Any) -> tuple[int, ...]:
        """The GPUs of ``gpus[index]`` (one communicator's ranks), made once per ``key``."""
        g = self._ranks.get(key)
        if g is None:
            g = self._ranks[key] = tuple(int(x) for x in self.st.gpus[index])
        return g

    def comm_groups(self, kind: str, s: int) -> list[tuple[tuple[int, ...], list[int]]]:
        """Stage ``s``'s groups of ``kind``, each its GPUs and replicas, made once: "dp" and "edp"
        (:func:`~.data_parallel.groups`), "ep" and "etp" (:func:`~.moe.expert_groups`)."""
        g = self._groups.get((kind, s))
        if g is None:
            g = self._groups[(kind, s)] = (moe.expert_groups(self.st, s, kind) if kind in ("ep", "etp")
                                           else data_parallel.groups(self.st, s, kind))
        return g

    def gathers(self, s: int, c: int, last: dict[int, int], after: Sequence[int], cat: str, tag: str) -> list[int]:
        """Chunk ``c`` of stage ``s``'s parameter all-gathers (:func:`~.data_parallel.gathers`),
        each after ``after`` and the gather before it on each of its GPUs (``last``, GPU ->
        the id of its latest gather, updated): the ids made."""
        ids = []
        for over, size in data_parallel.gathers(self.st, self.st.chunks[s][c]):
            for grp, _ in self.comm_groups(over, s):
                dep = list(after) + sorted({last[g] for g in grp if g in last})
                x = self.coll("all_gather", grp, size, dep, cat, tag, s, -1, -1, c)
                last.update((g, x) for g in grp)
                ids.append(x)
        return ids

    def build(self) -> _Built:
        p = self.st.par
        n_ops = p.dp * p.cp * p.pp * p.virtual_stages * p.n_micro_batches * 2
        # before its schedules are made: a global batch of 2**31 would fill memory first
        room_for(f"a {self.st.model.name} step of {n_ops:,} scheduled forwards and backwards (replicas x "
                 f"stages x chunks x micro-batches x 2)", n_ops, STEP_BYTES_PER_OP)
        # One change of the scenario, kept (where it is the outermost) as the call that makes
        # the step again; the step is kept as a shallow copy, safe from its attributes being
        # set again.
        with self.sc._one_change("_training_step", (copy.copy(self.st), self.start_id)), _no_gc():
            if not self.batched:
                return self._build()
            self.batch = self.colls.batch = Batch(self.core)
            try:
                return self._build()
            finally:
                self.batch = self.colls.batch = None

    def _build(self) -> _Built:
        st, p = self.st, self.st.par
        mb, v = p.n_micro_batches, p.virtual_stages
        n_rep = p.dp * p.cp
        orders = [schedule_order(p.pp, s, mb, v) for s in range(p.pp)]
        # position of the last backward of each chunk in each stage's order
        last_b = [{c: max(i for i, o in enumerate(orders[s]) if o[0] == "B" and o[2] == c) for c in range(v)} for s in range(p.pp)]
        first_f = [{c: min(i for i, o in enumerate(orders[s]) if o[0] == "F" and o[2] == c) for c in range(v)} for s in range(p.pp)]
        first_b = [{c: min(i for i, o in enumerate(orders[s]) if o[0] == "B" and o[2] == c) for c in range(v)} for s in range(p.pp)]
        # FSDP: parameter all-gathers, per stage and chunk, before the first forward (chained
        # in chunk order from the start on each GPU) and, prefetched after the chunk's last
        # forward, before its first backward
        fsdp_f: dict[tuple[int, int], tuple[list[int], dict[int, int]]] = {}
        if p.dp_sharding == "fsdp":
            for s in range(p.pp):
                last: dict[int, int] = {}
                for c in range(v):
                    ids = self.gathers(s, c, last, [], "dp", "fsdp.gather")
                    if ids:
                        fsdp_f[(s, c)] = (ids, dict(last))
        # per (replica, stage): the end of the previous op; outputs per (r, s, kind, mb, chunk)
        out_f: _Outputs = {}  # (s, m, c) -> per replica the ids to wait on (PP recv at the consumer)
        out_b: _Outputs = {}
        last_op: dict[int, np.ndarray] = {}  # s -> per replica the end of its latest op
        pieces: dict[tuple[int, int], np.ndarray] = {}  # (s, c) -> per replica the ids of the last backward's pieces
        fsdp_b: dict[tuple[int, int], dict[int, int]] = {}
        # Walk the schedules in a global order that respects data dependencies: repeatedly
        # advance each stage while its next op's inputs exist (identical for every replica).
        pos = [0] * p.pp
        n_left = sum(len(o) for o in orders)
        n_parts, tick = n_left + 2 * p.pp, self.on_progress or (lambda done, total: None)
        while n_left:
            progressed = False
            for s in range(p.pp):
                while pos[s] < len(orders[s]):
                    kind, m, c = orders[s][pos[s]]
                    vs = c * p.pp + s
                    if kind == "F" and vs > 0:
                        ps, pc = (s - 1, c) if s > 0 else (p.pp - 1, c - 1)
                        if (ps, m, pc) not in out_f:
                            break
                    if kind == "B" and vs < p.pp * v - 1:
                        ns, nc = (s + 1, c) if s < p.pp - 1 else (0, c + 1)
                        if (ns, m, nc) not in out_b:
                            break
                    self._op(s, kind, m, c, pos[s], last_b, first_b, first_f, out_f, out_b, last_op, pieces, fsdp_f, fsdp_b)
                    self._keep_recorded()
                    pos[s] += 1
                    n_left -= 1
                    progressed = True
                    tick(n_parts - 2 * p.pp - n_left, n_parts)
            if not progressed:  # pragma: no cover - the schedules are deadlock-free
                raise AssertionError("pipeline schedule deadlocked")
        # gradient reduction per stage and chunk, in bucket groups (dense over each TP rank's
        # replicas, experts over each expert-data-parallel group), one after the other on each GPU
        dp_last: dict[int, list[int]] = {s: [] for s in range(p.pp)}
        op = "all_reduce" if p.dp_sharding == "none" else "reduce_scatter"
        for s in range(p.pp):
            last = {}
            for c in sorted(range(v), key=lambda c_: last_b[s][c_]):
                buckets = data_parallel.buckets(st, st.chunks[s][c])
                parts = sorted({part for _, _, part in buckets})
                for over, size, part in buckets:
                    for grp, reps in self.comm_groups(over, s):
                        # without overlap_grad_reduce, after the stage's last backward
                        k = parts.index(part)
                        after = (pieces[(s, c)][reps, k].tolist() if p.overlap_grad_reduce
                                 else last_op[s][reps].tolist())
                        after += sorted({last[g] for g in grp if g in last})
                        x = self.coll(op, grp, size, after, "dp", "dp.grads", s, -1, -1, c)
                        last.update(dict.fromkeys(grp, x))
            dp_last[s] = sorted(set(last.values()))
            tick(n_parts - 2 * p.pp + s + 1, n_parts)
        # optimizer per GPU (one delay per replica and stage) and the parameter all-gather
        for s in range(p.pp):
            opt_s = st._optimizer_s(s)
            opts = []
            for r in range(n_rep):
                after = [int(last_op[s][r])] + dp_last[s]
                opts.append(self.delay(opt_s, after, "optimizer", "optimizer", s, r))
            if p.dp_sharding != "none" and not p.overlap_param_gather:
                last = {}
                for c in range(v):
                    self.gathers(s, c, last, opts if c == 0 else [], "dp", "dp.params")
            tick(n_parts - p.pp + s + 1, n_parts)
        if self.batch is not None:
            self.batch.flush()
        self._keep_recorded()
        made, n_after, after_ids = (np.concatenate(kept) for kept in self._recorded)
        made = made.reshape(-1, 7)
        n = made[:, 1]
        group = np.repeat(np.arange(len(made)), n)
        made_ids = np.repeat(made[:, 0] - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        cat, stage, replica, micro_batch, chunk = (np.repeat(made[:, k], n) for k in range(2, 7))
        offsets = np.zeros(len(made) + 1, dtype=np.int64)
        np.cumsum(n_after, out=offsets[1:])
        return _Built(self.sc, made_ids, cat, stage, replica, micro_batch, chunk, group, offsets, after_ids,
                      self.sc.n_activities)

    def _op(self, s: int, kind: str, m: int, c: int, i: int, last_b: list[dict[int, int]],
            first_b: list[dict[int, int]], first_f: list[dict[int, int]], out_f: _Outputs, out_b: _Outputs,
            last_op: dict[int, np.ndarray], pieces: dict[tuple[int, int], np.ndarray],
            fsdp_f: dict[tuple[int, int], tuple[list[int], dict[int, int]]],
            fsdp_b: dict[tuple[int, int], dict[int, int]]) -> None:
        """One scheduled op (``kind`` "F" or "B" of micro-batch ``m``, chunk ``c``, stage
        ``s``, its ``i``-th there) on every replica: its compute, TP and CP steps described
        once (:class:`_Step`) and added on every lane (:meth:`_lanes`), then its ETP and EP
        collectives per group (:meth:`_experts`), then each replica's end and pipeline
        transfer, as steps again (:meth:`_send`)."""
        st, p = self.st, self.st.par
        ch = st.chunks[s][c]
        vs = c * p.pp + s
        fwd = kind == "F"
        # with overlap_grad_reduce the chunk's last backward is cut into compute pieces, one up
        # to where each bucket group's gradients are final (data_parallel.buckets), and each
        # group's reduction starts as its piece ends (the last groups' as the whole backward
        # ends, its TP, CP and EP communication too: the chunk's first layer's gradients are
        # final only then)
        split = (not fwd) and i == last_b[s][c] and p.overlap_grad_reduce
        # the compute, slowed by the SMs the communication beside it holds (the same as the estimate's)
        first, last = fwd and m == 0, (not fwd) and i == last_b[s][c]
        comp_s = op_compute_s(st, ch, fwd, first=first, last=last)
        parts = sorted({part for _, _, part in data_parallel.buckets(st, ch)}) if split else []
        split, cuts = bool(parts), parts or [1.0]
        # FSDP: the chunk's parameters for its backward, gathered after its last forward... here
        # issued at the chunk's first backward (prefetched one op earlier in the DAG: the gather
        # waits only for the forward gather, so it overlaps the forwards); a replica waits for
        # the last gather on each of its GPUs
        gathered: dict[int, int] = {}
        if (s, c) in fsdp_f:
            if fwd and i == first_f[s][c]:
                gathered = fsdp_f[(s, c)][1]
            if not fwd and i == first_b[s][c]:
                if (s, c) not in fsdp_b:
                    fsdp_b[(s, c)] = dict(fsdp_f[(s, c)][1])
                    self.gathers(s, c, fsdp_b[(s, c)], [], "dp", "fsdp.gather")
                gathered = fsdp_b[(s, c)]
        inp = self._inputs(s, kind, m, c, last_op, out_f, out_b)
        # what each replica's op waits for: its inputs, after the gathers on its GPUs
        inputs: np.ndarray | list[list[int]] = inp
        after: np.ndarray | list[list[int]]
        if gathered:
            rows = [sorted({gathered[g] for g in grp}) + row for grp, row in zip(self._tp_groups(s), inp.tolist())]
            inputs, after = _rows(rows), _rows([row or self.start for row in rows])
        else:
            after = inp if inp.shape[1] else np.tile(np.array(self.start, dtype=np.int64), (len(inp), 1))
        # CP: ring exchanges of K and V beside the compute, one ring per TP rank, shared by
        # the cp replicas of a dp index, issued by its first after its compute and TP: a lane
        # is then a dp index's replicas in turn
        ring = p.cp > 1 and ch.cp_bytes > 0
        width = p.cp if ring else 1
        steps: list[_Step] = []
        ends_at, pieces_at, rings = [], [], []
        for rep in range(width):
            at = len(steps)
            steps += self._compute_steps(s, fwd, ch, comp_s, cuts, after[rep::width], rep, width, at)
            cid = at + len(cuts) - 1
            ends_at.append([cid] if len(steps) == cid + 1 else [cid, len(steps) - 1] if p.tp_comm_overlap
                           else [len(steps) - 1])
            pieces_at.append(list(range(at, cid + 1)))
            if ring and rep == 0:
                rings = list(range(len(steps), len(steps) + p.tp))
                steps += self._ring_steps(s, fwd, ch, inp)
        made = self._lanes(steps, width, s, m, c)
        # per replica (lane by lane, its replicas in turn): what its op ends with (each of
        # the dp index's ring exchanges too) and its compute pieces
        ends = made[:, [e + rings for e in ends_at]].reshape(len(inp), -1)
        if split:
            pieces[(s, c)] = made[:, pieces_at].reshape(len(inp), -1)
        ends_of = self._experts(s, fwd, m, c, ch, ends, inputs)
        last_op[s] = self._send(s, fwd, vs, m, c, ends_of, out_f if fwd else out_b)
        if split:
            pieces[(s, c)][:, -1] = last_op[s]

    def _experts(self, s: int, fwd: bool, m: int, c: int, ch: Any, ends: np.ndarray,
                 inputs: np.ndarray | list[list[int]]) -> np.ndarray | list[list[int]]:
        """One op's ETP and EP communication, per group, after its replicas' ends ``ends``
        (or with overlap, the EP's, beside them after their ``inputs``): what each replica's
        op then ends with, a row each of a 2-D array (a list each where the groups leave them
        unalike in number)."""
        st = self.st
        tag = "fwd" if fwd else "bwd"
        # ETP: the routed experts' tokens gathered, and their outputs reduce-scattered, over
        # each expert-tensor-parallel group, after its replicas' compute, TP and CP
        etp = moe.etp_bytes(st, ch, fwd)
        routed = ch.moe is not None and ch.moe.routing is not None
        if etp <= 0 and not routed:
            return ends
        ends_of: list[list[int]] = ends.tolist()
        if etp > 0:
            tp_tag = f"tp.{tag}"
            before_etp = list(ends_of)
            for grp, reps in self.comm_groups("etp", s):
                joined = sorted({x for r in reps for x in before_etp[r]})
                if st.tp_comm == "analytical":
                    x = self.delay(st._comm_s("etp", s, etp), joined, "tp", tp_tag, s, -1, m, c)
                else:
                    a = self.coll("all_gather", grp, etp, joined, "tp", tp_tag, s, -1, m, c)
                    x = self.coll("reduce_scatter", grp, etp, [a], "tp", tp_tag, s, -1, m, c)
                for r in reps:
                    ends_of[r] = ends_of[r] + [x]
        # EP: per expert-parallel group, the chunk's dispatches and combines in turn, after
        # its replicas' compute and TP (beside them, from the op's inputs, with overlap)
        if routed:
            before = (inputs.tolist() if isinstance(inputs, np.ndarray) else inputs) if st.moe.overlap else list(ends_of)
            for grp, reps in self.comm_groups("ep", s):
                joined = sorted({x for r in reps for x in before[r]})
                for k_, nbytes in moe.chain(st, fwd, ch.moe.redispatch):
                    joined = [self.moe_coll(k_, grp, ch.moe.routing, nbytes, joined, f"ep.{tag}", s, -1, m, c)]
                for r in reps:
                    ends_of[r] = ends_of[r] + joined
        return _rows(ends_of)

    def _send(self, s: int, fwd: bool, vs: int, m: int, c: int, ends: np.ndarray | list[list[int]],
              out: _Outputs) -> np.ndarray:
        """Each replica's end of one op (a join where it ends with more than one activity:
        ``ends``), and its pipeline transfer to the next (forward) or previous (backward)
        virtual stage, kept in ``out`` as what the op there waits for (else the end): the ends."""
        steps = []
        if not isinstance(ends, np.ndarray) or ends.shape[1] > 1:
            steps.append(_Step("compute", "join", ends, join=True))
        keys = self._send_keys(s, fwd, vs)
        if keys:
            steps.append(_Step("pp", f"pp.{'fwd' if fwd else 'bwd'}", 0 if steps else ends, sends=keys))
        made = self._lanes(steps, 1, s, m, c) if steps else cast(np.ndarray, ends)
        last: np.ndarray = made[:, 0] if steps and steps[0].join else cast(np.ndarray, ends)[:, 0]
        n_flows = len(cast("tuple[np.ndarray, ...]", self._pp_arrays(*keys[0]))[0]) if keys else 0
        out[(s, m, c)] = made[:, -1:] + np.arange(n_flows) if keys else last[:, None]
        return last

    def _send_keys(self, s: int, fwd: bool, vs: int) -> list[tuple[int, int, int, int]]:
        """Stage ``s``'s pipeline transfers (:meth:`_pp_arrays` keys), one per replica, after a
        forward (to the next virtual stage) or a backward (to the previous) of virtual stage
        ``vs``: none after the last forward or the first backward, or to the same GPUs."""
        p = self.st.par
        target = None
        if fwd and vs < p.pp * p.virtual_stages - 1:
            target = s + 1 if s < p.pp - 1 else 0
        if not fwd and vs > 0:
            target = s - 1 if s > 0 else p.pp - 1
        if target is None:
            return []
        keys = self._send_lists.get((s, target))
        if keys is None:
            keys = [(s, target, d, cp_i) for d in range(p.dp) for cp_i in range(p.cp)]
            held = [self._pp_arrays(*key) is not None for key in keys]
            if any(held) and not all(held):  # pragma: no cover - a stage and its target share all GPUs (pp 1) or none
                raise AssertionError("pipeline transfers between GPUs partly the same")
            keys = self._send_lists[(s, target)] = keys if held[0] else []
        return keys

    def _compute_steps(self, s: int, fwd: bool, ch: Any, comp_s: float, cuts: list[float],
                       after: np.ndarray | list[list[int]], rep: int, width: int, at: int) -> list[_Step]:
        """One op's compute (in pieces ending at fractions ``cuts`` of it, each after the one
        before) and its TP communication after it (or beside it, with overlap), on each lane's
        replica ``rep`` (of ``width``) after ``after``, its steps from position ``at``."""
        st, p = self.st, self.st.par
        tag = "fwd" if fwd else "bwd"
        tp_tag = f"tp.{tag}"
        steps: list[_Step] = []
        done = 0.0
        for part in cuts:
            steps.append(_Step("compute", tag, at + len(steps) - 1 if steps else after,
                               duration_s=max(0.0, comp_s * (part - done)), rep=rep))
            done = part
        if p.tp == 1 or ch.tp_bytes <= 0:
            return steps
        cid = at + len(steps) - 1
        groups = self._tp_groups(s)[rep::width]

        def tp(op: str, nbytes: float, on: int | tuple[int, ...] | np.ndarray | list[list[int]]) -> _Step:
            return _Step("tp", tp_tag, on, op=op, size_bytes=float(nbytes), ranks=groups, comm=("tp", s, rep, width),
                         rep=rep)

        base: int | tuple[int, ...] | np.ndarray | list[list[int]] = cid if not p.tp_comm_overlap else after
        size, gather, again = tp_sizes(st, ch, fwd)
        if again > 0:  # the inputs gathered again, from the op's start beside its compute
            steps.append(_Step("tp", tp_tag, after, duration_s=max(0.0, st._comm_s("tp.gather", s, again)), rep=rep)
                         if st.tp_comm == "analytical" else tp("all_gather", again, after))
            gid = at + len(steps) - 1
            base = (cid, gid) if not p.tp_comm_overlap else gid
        if st.tp_comm == "analytical":
            steps.append(_Step("tp", tp_tag, base, duration_s=max(0.0, st._comm_s("tp", s, size, gather)), rep=rep))
        elif p.sequence_parallel:
            steps.append(tp("reduce_scatter", size, base))
            steps.append(tp("all_gather", gather, at + len(steps) - 1))
        else:
            steps.append(tp("all_reduce", size, base))
        return steps

    def _ring_steps(self, s: int, fwd: bool, ch: Any, inp: np.ndarray) -> list[_Step]:
        """One op's CP ring exchanges per dp index, one per TP rank, after the inputs of the
        dp index's replicas (recorded as its first's)."""
        p = self.st.par
        rows = inp.tolist()
        after = _rows([sorted({x for r in range(d * p.cp, (d + 1) * p.cp) for x in rows[r]}) or self.start
                       for d in range(p.dp)])
        return [_Step("cp", f"cp.{'fwd' if fwd else 'bwd'}", after, op="send_recv",
                      size_bytes=float(ch.cp_bytes * (1 if fwd else 2)), comm=("cp", s, t),
                      ranks=[self._group(("cp", s, d, t), s, d, slice(None), t) for d in range(p.dp)])
                for t in range(p.tp)]

    def _tp_groups(self, s: int) -> list[tuple[int, ...]]:
        """Stage ``s``'s TP groups' GPUs, one per replica, made once."""
        groups = self._tp_lists.get(s)
        if groups is None:
            p = self.st.par
            groups = self._tp_lists[s] = [self._group(("tp", s, d, cp_i), s, d, cp_i)
                                          for d in range(p.dp) for cp_i in range(p.cp)]
        return groups

    def _lanes(self, steps: list[_Step], width: int, s: int, m: int, c: int) -> np.ndarray:
        """Adds ``steps`` on every lane of ``width`` replicas, a lane's after the previous
        one's, recorded as stage ``s``, micro-batch ``m``, chunk ``c`` and their replica: per
        lane and step, the activity recorded (a delay's id, a collective's end, a transfer's
        first flow). Runs of lanes whose collectives and transfers are all kept to be copied
        go in one :meth:`_add_lanes` where they make :data:`BATCH_MIN_STEPS` or more; the
        others one at a time (:meth:`_lane`: a collective constructed the first time, and
        kept), as every lane does where the builder adds one activity at a time."""
        n, k = self.st.par.dp * self.st.par.cp // width, len(steps)
        batched = self.batch is not None and n * k >= BATCH_MIN_STEPS
        if batched:
            kept = self._kept(steps, 0, n)
            if kept is not None:
                return self._add_lanes(steps, kept, 0, n, width, s, m, c)
        made = np.empty((n, k), dtype=np.int64)
        r = 0
        while r < n:
            j = r
            while batched and j < n and self._lane_kept(steps, j):
                j += 1
            kept = self._kept(steps, r, j) if (j - r) * k >= BATCH_MIN_STEPS else None
            if kept is not None:
                made[r:j] = self._add_lanes(steps, kept, r, j, width, s, m, c)
            else:
                j = max(j, r + 1)
                for lane in range(r, j):
                    made[lane] = self._lane(steps, lane, width, s, m, c)
            r = j
        return made

    def _lane(self, steps: list[_Step], lane: int, width: int, s: int, m: int, c: int) -> list[int]:
        """Adds ``steps`` on lane ``lane``, one activity (a collective, a transfer) at a time."""
        made: list[int] = []
        for step in steps:
            on, r = step.after, lane * width + step.rep
            after = ([made[on]] if isinstance(on, int) else [made[j] for j in on] if isinstance(on, tuple)
                     else on[lane].tolist() if isinstance(on, np.ndarray) else on[lane])
            if step.join:
                made.append(after[0] if len(after) == 1 else self.delay(0.0, after, step.cat, step.tag, s, r, m, c))
            elif step.sends is not None:
                key = step.sends[lane]
                ids = self.flows(key, cast("tuple[np.ndarray, ...]", self._pp_arrays(*key)), after, step.tag)
                made.append(self._rec(ids[0], _CAT_INDEX[step.cat], after, s, r, m, c, n=len(ids)))
            elif step.op is None:
                made.append(self.delay(step.duration_s, after, step.cat, step.tag, s, r, m, c))
            else:
                made.append(self.coll(step.op, step.ranks[lane], step.size_bytes, after, step.cat, step.tag, s, r, m, c))
        return made

    def _lane_kept(self, steps: list[_Step], lane: int) -> bool:
        """Whether every collective and transfer of lane ``lane``'s ``steps`` is kept to be
        copied, and its joins are alike (:meth:`_kept`)."""
        for step in steps:
            if step.join and not isinstance(step.after, np.ndarray):
                return False
            if step.sends is not None and self._pp_templates.get((step.sends[lane], step.tag)) is None:
                return False
            if step.op is not None and not self.colls.is_kept(step.op, step.ranks[lane], step.size_bytes):
                return False
        return True

    def _kept(self, steps: list[_Step], r0: int, r1: int) -> list[Any] | None:
        """What lanes ``r0 .. r1 - 1``'s ``steps`` copy, per step: its collectives (a
        :class:`_Copies`), or its transfers' core templates and their flows (alike), or None
        (a delay); None where one is not kept to be copied (yet), or a join's ids are not
        alike in number. Those of all lanes are kept for the next op."""
        kept: list[Any] = []
        for step in steps:
            if step.join:
                if not isinstance(step.after, np.ndarray):
                    return None
                kept.append(None)
            elif step.sends is not None:
                every = r0 == 0 and r1 == len(step.sends)
                sends = self._kept_sends.get((step.sends[0], step.tag)) if every else None
                if sends is None:
                    found = [self._pp_templates.get((key, step.tag)) for key in step.sends[r0:r1]]
                    held = [f for f in found if f is not None]
                    if len(held) < len(found) or len({n for _, n in held}) > 1:
                        return None
                    sends = (np.array([t for t, _ in held], dtype=np.int64), held[0][1])
                    if every:
                        self._kept_sends[(step.sends[0], step.tag)] = sends
                kept.append(sends)
            elif step.op is not None:
                every = r0 == 0 and r1 == len(step.ranks)
                copies = self._copies.get((step.comm, step.op, step.size_bytes)) if every else None
                if copies is None:
                    copies = self.colls.known_copies(step.op, list(step.ranks[r0:r1]), step.size_bytes)
                    if copies is None:
                        return None
                    if every:
                        self._copies[(step.comm, step.op, step.size_bytes)] = copies
                kept.append(copies)
            else:
                kept.append(None)
        return kept

    def _add_lanes(self, steps: list[_Step], kept: list[Any], r0: int, r1: int, width: int, s: int, m: int,
                   c: int) -> np.ndarray:
        """Adds ``steps`` on lanes ``r0 .. r1 - 1`` (of ``width`` replicas; what each copies:
        ``kept``, from :meth:`_kept`) in one batch, a lane's after the previous one's,
        recorded as :meth:`_lane` records them: per lane and step, the activity recorded."""
        assert self.batch is not None
        n, k = r1 - r0, len(steps)

        def per_lane(dtype: Any, values: list[Any]) -> np.ndarray:
            # the values alike on every lane in one row, then those per lane
            out = np.empty((n, k), dtype=dtype)
            out[:] = [0 if isinstance(value, np.ndarray) else value for value in values]
            for j, value in enumerate(values):
                if isinstance(value, np.ndarray):
                    out[:, j] = value
            return out

        whole = [step.sends is not None for step in steps]
        spans = per_lane(np.int64, [1 if kp is None else kp[1] if w else kp.span for kp, w in zip(kept, whole)])
        flat = spans.ravel()
        firsts = (self.batch.next_id + np.cumsum(flat) - flat).reshape(n, k)
        colls = [j for j, step in enumerate(steps) if step.op is not None]
        made: np.ndarray = firsts if not colls else firsts + per_lane(np.int64, [
            kept[j].end if steps[j].op is not None else 0 for j in range(k)])
        n_after, after = self._afters(steps, made, r0, r1)
        self.batch.extend(per_lane(np.int64, [-1 if kp is None else kp[0] if w else kp.template
                                              for kp, w in zip(kept, whole)]).ravel(),
                          per_lane(np.float64, [step.duration_s for step in steps]).ravel(),
                          per_lane(np.int64, [-1 if w else self.batch.tag(step.tag)
                                              for step, w in zip(steps, whole)]).ravel(),
                          n_after, after, int(flat.sum()))
        if colls:
            self.colls.copied([kept[j] for j in colls], firsts[:, colls])
        # records as _rec makes them, in the same order: a transfer's flows as one group
        self._keep_recorded()
        groups = np.empty((n, k, 7), dtype=np.int64)
        groups[..., 0] = made
        groups[..., 1] = np.where(whole, spans, 1)
        groups[..., 2] = [_CAT_INDEX[step.cat] for step in steps]
        groups[..., 3], groups[..., 5], groups[..., 6] = s, m, c
        groups[..., 4] = np.arange(r0, r1)[:, None] * width + [step.rep for step in steps]
        for kept_, values in zip(self._recorded, (groups.ravel(), n_after, after)):
            kept_.append(values)
        return made

    @staticmethod
    def _afters(steps: list[_Step], made: np.ndarray, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
        """What ``steps`` wait for on lanes ``r0 .. r1 - 1`` (``made``: what each step records
        there): per lane and step, how many, and the ids in a row."""
        afters: list[Any] = [made[:, step.after:step.after + 1] if isinstance(step.after, int) else
                             made[:, list(step.after)] if isinstance(step.after, tuple) else
                             step.after[r0:r1] for step in steps]
        if all(isinstance(a, np.ndarray) for a in afters):
            n_after = np.empty(made.shape, dtype=np.int64)
            for j, a in enumerate(afters):
                n_after[:, j] = a.shape[1]
            return n_after.ravel(), (np.concatenate(afters, axis=1) if len(afters) > 1 else afters[0]).ravel()
        # some lane's own ids, not alike in number: each step's put in their places
        counts = np.array([[a.shape[1]] * len(a) if isinstance(a, np.ndarray) else [len(x) for x in a]
                           for a in afters], dtype=np.int64).T
        flat = counts.ravel()
        starts = (np.cumsum(flat) - flat).reshape(counts.shape)
        after = np.empty(int(flat.sum()), dtype=np.int64)
        for j, a in enumerate(afters):
            ids = a.ravel() if isinstance(a, np.ndarray) else np.fromiter(itertools.chain.from_iterable(a), np.int64)
            n_j = counts[:, j]
            after[np.repeat(starts[:, j] - (np.cumsum(n_j) - n_j), n_j) + np.arange(len(ids))] = ids
        return flat, after

    def _pp_arrays(self, s: int, target: int, d: int, cp_i: int) -> tuple[np.ndarray, ...] | None:
        """A pipeline transfer's sources, destinations, bytes and start times as the core takes
        them (None where stage and target hold the same GPUs), made once per pair."""
        key = (s, target, d, cp_i)
        if key not in self._pp:
            G = self.st.gpus
            src, dst = G[s, d, cp_i, :], G[target, d, cp_i, :]
            n = len(src)
            self._pp[key] = None if src.tolist() == dst.tolist() else (
                np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64),
                np.full(n, float(self.st._pp_bytes())), np.zeros(n))
        return self._pp[key]

    def _inputs(self, s: int, kind: str, m: int, c: int, last_op: dict[int, np.ndarray], out_f: _Outputs,
                out_b: _Outputs) -> np.ndarray:
        """What each replica's op waits for besides FSDP gathers, a row per replica: its
        stage's previous op and the pipeline transfer bringing its input."""
        p = self.st.par
        vs = c * p.pp + s
        after = [last_op[s][:, None]] if s in last_op else [np.zeros((p.dp * p.cp, 0), dtype=np.int64)]
        if kind == "F" and vs > 0:
            ps, pc = (s - 1, c) if s > 0 else (p.pp - 1, c - 1)
            after.append(out_f[(ps, m, pc)])
        if kind == "B" and vs < p.pp * p.virtual_stages - 1:
            ns, nc = (s + 1, c) if s < p.pp - 1 else (0, c + 1)
            after.append(out_b[(ns, m, nc)])
        return np.concatenate(after, axis=1) if len(after) > 1 else after[0]
