"""A training step as one DAG on a :class:`~fabricsim.Scenario`: per replica, stage,
micro-batch and chunk one compute delay and the chunk's TP, CP and EP collectives, the
pipeline flows between stages, the data-parallel reduction in buckets, the optimizer and the
parameter gathers (the training package's docstring, Granularity, says how they are grouped)."""

from __future__ import annotations

import contextlib
import copy
import gc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Sequence

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


# (stage, micro-batch, chunk) -> the ids the next op waits for (pipeline outputs), a row per replica.
_Outputs = dict[tuple[int, int, int], np.ndarray]


@dataclass
class _Lane:
    """One step of an op that every replica takes (:meth:`_Builder._add_lanes`): a delay of
    ``duration_s`` (``template`` -1), or a copy of a core template of ``span`` activities
    (``template`` and ``span`` one per replica, or alike), recorded as its activity ``end``
    (a collective's end; ``copies``, the kept collectives it copies), or where ``whole`` as
    one group of all (a pipeline transfer's flows); tagged ``tag`` (a :meth:`Batch.tag`
    number), recorded as kind ``cat``; after ``after``, a row of ids per replica, or the
    activity an earlier step (by position) recorded, or those of several (a tuple of positions)."""
    duration_s: float
    tag: int
    cat: int
    after: np.ndarray | int | tuple[int, ...]
    template: np.ndarray | int = -1
    span: np.ndarray | int = 1
    end: np.ndarray | int = 0
    copies: _Copies | None = None
    whole: bool = False

    @classmethod
    def copying(cls, copies: _Copies, tag: int, cat: int, after: np.ndarray | int | tuple[int, ...]) -> _Lane:
        """Copies of kept collectives ``copies``, one per replica."""
        return cls(0.0, tag, cat, after, copies.template, copies.span, copies.end, copies)


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
        # (op, stage, bytes) -> the stage's TP collectives, one per replica, to be copied together
        self._copies: dict[tuple[str, int, float], _Copies] = {}
        # (stage, target, tag) -> the stage's pipeline transfers, one per replica (_sends)
        self._kept_sends: dict[tuple[int, int, str], tuple[np.ndarray, int] | None] = {}
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

    # one scheduled op on every replica
    def _op(self, s: int, kind: str, m: int, c: int, i: int, last_b: list[dict[int, int]],
            first_b: list[dict[int, int]], first_f: list[dict[int, int]], out_f: _Outputs, out_b: _Outputs,
            last_op: dict[int, np.ndarray], pieces: dict[tuple[int, int], np.ndarray],
            fsdp_f: dict[tuple[int, int], tuple[list[int], dict[int, int]]],
            fsdp_b: dict[tuple[int, int], dict[int, int]]) -> None:
        st, p = self.st, self.st.par
        ch = st.chunks[s][c]
        n_rep = p.dp * p.cp
        vs = c * p.pp + s
        fwd = kind == "F"
        tag = f"{'fwd' if fwd else 'bwd'}"
        tp_tag, pp_tag = f"tp.{tag}", f"pp.{tag}"
        ends: list[list[int]] = []
        inputs: list[list[int]] = []
        # with overlap_grad_reduce the chunk's last backward is cut into compute pieces, one up
        # to where each bucket group's gradients are final (data_parallel.buckets), and each
        # group's reduction starts as its piece ends (the last groups' as the whole backward
        # ends, its TP, CP and EP communication too: the chunk's first layer's gradients are
        # final only then)
        split = (not fwd) and i == last_b[s][c] and p.overlap_grad_reduce
        # the compute, slowed by the SMs the communication beside it holds (the same as the estimate's)
        comp_s = op_compute_s(st, ch, fwd, first=fwd and m == 0, last=(not fwd) and i == last_b[s][c])
        cuts = sorted({part for _, _, part in data_parallel.buckets(st, ch)}) if split else []
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
        cp_ring = p.cp > 1 and ch.cp_bytes > 0
        lanes = None if gathered or cp_ring else self._compute_lanes(s, fwd, m, c, ch, comp_s, cuts, inp)
        if lanes is not None:
            inputs, ends = inp.tolist(), lanes[0].tolist()
            if cuts:
                pieces[(s, c)] = lanes[1]
        piece_ids: list[list[int]] = []
        for r in range(n_rep if lanes is None else 0):
            d, cp_i = divmod(r, p.cp)
            fs_after = sorted({gathered[g] for g in self._group(("tp", s, d, cp_i), s, d, cp_i)}) if gathered else []
            after = fs_after + inp[r].tolist()
            inputs.append(after)
            if cuts:
                ids = []
                prev, done = after, 0.0
                for part in cuts:
                    prev = [self.delay(comp_s * (part - done), prev, "compute", tag, s, r, m, c)]
                    ids.append(prev[0])
                    done = part
                piece_ids.append(ids)
                cid = ids[-1]
            else:
                cid = self.delay(comp_s, after, "compute", tag, s, r, m, c)
            end = [cid]
            # TP
            if p.tp > 1 and ch.tp_bytes > 0:
                base = [cid] if not p.tp_comm_overlap else after
                ranks = self._group(("tp", s, d, cp_i), s, d, cp_i)
                size, gather, again = tp_sizes(st, ch, fwd)
                if again > 0:  # the inputs gathered again, from the op's start beside its compute
                    if st.tp_comm == "analytical":
                        gid = self.delay(st._comm_s("tp.gather", s, again), after, "tp", tp_tag, s, r, m, c)
                    else:
                        gid = self.coll("all_gather", ranks, again, after, "tp", tp_tag, s, r, m, c)
                    base = [cid, gid] if not p.tp_comm_overlap else [gid]
                if st.tp_comm == "analytical":
                    tid = self.delay(st._comm_s("tp", s, size, gather), base, "tp", tp_tag, s, r, m, c)
                elif p.sequence_parallel:
                    a = self.coll("reduce_scatter", ranks, size, base, "tp", tp_tag, s, r, m, c)
                    tid = self.coll("all_gather", ranks, gather, [a], "tp", tp_tag, s, r, m, c)
                else:
                    tid = self.coll("all_reduce", ranks, size, base, "tp", tp_tag, s, r, m, c)
                end = [cid, tid] if p.tp_comm_overlap else [tid]
            # CP: ring exchange of K and V beside the compute, one ring per TP rank, shared by
            # the cp replicas of this dp index (issued once, by its first)
            if cp_ring and cp_i == 0:
                ring_after = sorted({x for rr in range(r, r + p.cp) for x in inp[rr].tolist()})
                cps = self._ensure_cp()
                for t in range(p.tp):
                    ring = self._group(("cp", s, d, t), s, d, slice(None), t)
                    x = self.coll("send_recv", ring, ch.cp_bytes * (1 if fwd else 2), ring_after, "cp", f"cp.{tag}",
                                  s, r, m, c)
                    cps.setdefault((d, s, kind, m, c), []).append(x)
            ends.append(end)
        if piece_ids:
            pieces[(s, c)] = np.array(piece_ids, dtype=np.int64)
        # CP joins: every replica of the dp index waits for its ring exchanges
        if cp_ring:
            for r in range(n_rep):
                ends[r] = ends[r] + self._ensure_cp().get((r // p.cp, s, kind, m, c), [])
        # ETP: the routed experts' tokens gathered, and their outputs reduce-scattered, over
        # each expert-tensor-parallel group, after its replicas' compute, TP and CP
        etp = moe.etp_bytes(st, ch, fwd)
        if etp > 0:
            before_etp = list(ends)
            for grp, reps in self.comm_groups("etp", s):
                after = sorted({x for r in reps for x in before_etp[r]})
                if st.tp_comm == "analytical":
                    x = self.delay(st._comm_s("etp", s, etp), after, "tp", tp_tag, s, -1, m, c)
                else:
                    a = self.coll("all_gather", grp, etp, after, "tp", tp_tag, s, -1, m, c)
                    x = self.coll("reduce_scatter", grp, etp, [a], "tp", tp_tag, s, -1, m, c)
                for r in reps:
                    ends[r] = ends[r] + [x]
        # EP: per expert-parallel group, the chunk's dispatches and combines in turn, after
        # its replicas' compute and TP (beside them, from the op's inputs, with overlap)
        if ch.moe is not None and ch.moe.routing is not None:
            before = inputs if st.moe.overlap else list(ends)
            for grp, reps in self.comm_groups("ep", s):
                after = sorted({x for r in reps for x in before[r]})
                for k_, nbytes in moe.chain(st, fwd, ch.moe.redispatch):
                    after = [self.moe_coll(k_, grp, ch.moe.routing, nbytes, after, f"ep.{tag}", s, -1, m, c)]
                for r in reps:
                    ends[r] = ends[r] + after
        # PP: send to the next (forward) or previous (backward) virtual stage
        last_vs = p.pp * p.virtual_stages - 1
        target = None
        if fwd and vs < last_vs:
            target = s + 1 if s < p.pp - 1 else 0
        if not fwd and vs > 0:
            target = s - 1 if s > 0 else p.pp - 1
        out = out_f if fwd else out_b
        if self._send_lanes(s, target, pp_tag, m, c, ends, last_op, out):
            if cuts:
                pieces[(s, c)][:, -1] = last_op[s]
            return
        pp_cat = _CAT_INDEX["pp"]
        lasts, outs = [], []
        for r in range(n_rep):
            end = ends[r]
            last = end[0] if len(end) == 1 else self.delay(0.0, end, "compute", "join", s, r, m, c)
            lasts.append(last)
            if cuts:
                pieces[(s, c)][r, -1] = last
            d, cp_i = divmod(r, p.cp)
            key = None if target is None else (s, target, d, cp_i)
            pp = None if key is None else self._pp_arrays(*key)
            if key is None or pp is None:  # the last virtual stage's forward, the first's backward, or the same GPUs
                outs.append([last])
                continue
            # As Scenario.add_flows(src, dst, pp bytes, after=[last op], tag) adds them.
            dep = [last]
            ids = self.flows(key, pp, dep, pp_tag)
            self._rec(ids[0], pp_cat, dep, s, r, m, c, n=len(ids))
            outs.append(ids)
        last_op[s] = np.array(lasts, dtype=np.int64)
        out[(s, m, c)] = np.array(outs, dtype=np.int64)

    def _compute_lanes(self, s: int, fwd: bool, m: int, c: int, ch: Any, comp_s: float, cuts: list[float],
                       inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Every replica's compute of one op (in pieces ending at fractions ``cuts`` of it,
        where given) and its TP communication, as the loop over replicas in :meth:`_op` adds
        them, in one :meth:`_add_lanes` (None where a TP collective of it is not yet kept to
        be copied, or the builder adds one at a time): what each replica's op ends with and
        its compute pieces, a row per replica."""
        st, p = self.st, self.st.par
        if self.batch is None:
            return None
        tag = "fwd" if fwd else "bwd"
        tp_tag = f"tp.{tag}"
        after = inputs if inputs.shape[1] else np.tile(np.array(self.start, dtype=np.int64), (len(inputs), 1))
        steps: list[_Lane] = []
        done = 0.0
        for part in cuts or [1.0]:
            # each piece after the one before, as the loop chains them
            scale = part - done if cuts else 1.0
            steps.append(_Lane(max(0.0, comp_s * scale), self.batch.tag(tag), _CAT_INDEX["compute"],
                               len(steps) - 1 if steps else after))
            done = part
        cid = len(steps) - 1
        if p.tp > 1 and ch.tp_bytes > 0:
            base: np.ndarray | int | tuple[int, ...] = cid if not p.tp_comm_overlap else after
            size, gather, again = tp_sizes(st, ch, fwd)
            tp_cat, tp_label = _CAT_INDEX["tp"], self.batch.tag(tp_tag)
            if again > 0:  # the inputs gathered again, from the op's start beside its compute
                if st.tp_comm == "analytical":
                    steps.append(_Lane(max(0.0, st._comm_s("tp.gather", s, again)), tp_label, tp_cat, after))
                else:
                    copies = self._tp_copies("all_gather", s, float(again))
                    if copies is None:
                        return None
                    steps.append(_Lane.copying(copies, tp_label, tp_cat, after))
                base = (cid, len(steps) - 1) if not p.tp_comm_overlap else len(steps) - 1
            if st.tp_comm == "analytical":
                steps.append(_Lane(max(0.0, st._comm_s("tp", s, size, gather)), tp_label, tp_cat, base))
            else:
                ops = ([("reduce_scatter", size), ("all_gather", gather)] if p.sequence_parallel
                       else [("all_reduce", size)])
                for op, nbytes in ops:
                    copies = self._tp_copies(op, s, float(nbytes))
                    if copies is None:
                        return None
                    steps.append(_Lane.copying(copies, tp_label, tp_cat, base if op != "all_gather" else len(steps) - 1))
        made = self._add_lanes(steps, s, m, c)
        ends = made[:, [cid]] if len(steps) == cid + 1 else made[:, [cid, -1]] if p.tp_comm_overlap else made[:, -1:]
        return ends, made[:, :cid + 1]

    def _tp_copies(self, op: str, s: int, size: float) -> _Copies | None:
        """Stage ``s``'s TP collectives ``op`` of ``size`` bytes, one per replica, to be copied."""
        key = (op, s, size)
        copies = self._copies.get(key)
        if copies is None:
            p = self.st.par
            groups = [self._group(("tp", s, d, cp_i), s, d, cp_i) for d in range(p.dp) for cp_i in range(p.cp)]
            copies = self.colls.known_copies(op, groups, size)
            if copies is not None:
                self._copies[key] = copies
        return copies

    def _send_lanes(self, s: int, target: int | None, pp_tag: str, m: int, c: int, ends: list[list[int]],
                    last_op: dict[int, np.ndarray], out: _Outputs) -> bool:
        """Every replica's end of one op (a join where it ends with more than one activity)
        and its pipeline transfer to stage ``target``, as the loop over replicas in
        :meth:`_op` adds them, in one :meth:`_add_lanes`; False (nothing added) where that
        cannot be (the builder adds one at a time, a transfer not yet kept, replicas unalike)."""
        if self.batch is None or len({len(e) for e in ends}) != 1:
            return False
        sends = self._sends(s, target, pp_tag)
        if sends is False:
            return False
        end = np.array(ends, dtype=np.int64)
        steps: list[_Lane] = []
        if end.shape[1] > 1:
            steps.append(_Lane(0.0, self.batch.tag("join"), _CAT_INDEX["compute"], end))
        if sends is not None:
            template, n = sends
            steps.append(_Lane(0.0, -1, _CAT_INDEX["pp"], 0 if steps else end[:, :1], template=template, span=n,
                               whole=True))
        made = self._add_lanes(steps, s, m, c) if steps else end
        last = last_op[s] = made[:, 0] if end.shape[1] > 1 else end[:, 0]
        out[(s, m, c)] = made[:, -1:] + np.arange(sends[1]) if sends is not None else last[:, None]
        return True

    def _sends(self, s: int, target: int | None, pp_tag: str) -> tuple[np.ndarray, int] | None | Literal[False]:
        """Stage ``s``'s pipeline transfers ``pp_tag`` to ``target``, one per replica, as
        their kept core templates and their flows (alike); None where there are none (no
        target, or the same GPUs); False where one is not kept (yet) or they are unalike."""
        if target is None:
            return None
        key = (s, target, pp_tag)
        if key in self._kept_sends:
            return self._kept_sends[key]
        p = self.st.par
        keys = [(s, target, d, cp_i) for d in range(p.dp) for cp_i in range(p.cp)]
        sent = [k for k in keys if self._pp_arrays(*k) is not None]
        if not sent:
            self._kept_sends[key] = None
            return None
        found = [self._pp_templates.get((k, pp_tag)) for k in sent]
        kept = [t for t in found if t is not None]
        if len(sent) < len(keys) or len(kept) < len(found) or len({n for _, n in kept}) > 1:
            return False
        made = self._kept_sends[key] = (np.array([t for t, _ in kept], dtype=np.int64), kept[0][1])
        return made

    def _add_lanes(self, steps: list[_Lane], s: int, m: int, c: int) -> np.ndarray:
        """Adds ``steps`` for every replica, a replica's after the previous one's (replica
        ``r``'s row ``r`` of each step), recorded as stage ``s``, micro-batch ``m``, chunk
        ``c`` and replica ``r``: per replica and step, the activity recorded (a delay's id, a
        collective's end, a transfer's first flow)."""
        assert self.batch is not None
        n, k = self.st.par.dp * self.st.par.cp, len(steps)

        def per_lane(dtype: Any, values: list[Any]) -> np.ndarray:
            out = np.empty((n, k), dtype=dtype)
            for j, value in enumerate(values):
                out[:, j] = value
            return out

        spans = per_lane(np.int64, [st_.span for st_ in steps])
        flat = spans.ravel()
        firsts = (self.batch.next_id + np.cumsum(flat) - flat).reshape(n, k)
        made: np.ndarray = firsts if all(st_.whole for st_ in steps) else firsts + per_lane(np.int64, [
            0 if st_.whole else st_.end for st_ in steps])
        afters = [made[:, st_.after:st_.after + 1] if isinstance(st_.after, int) else
                  made[:, list(st_.after)] if isinstance(st_.after, tuple) else st_.after for st_ in steps]
        n_after = per_lane(np.int64, [a.shape[1] for a in afters]).ravel()
        after = (np.concatenate(afters, axis=1) if k > 1 else afters[0]).ravel()
        first = self.batch.extend(per_lane(np.int64, [st_.template for st_ in steps]).ravel(),
                                  per_lane(np.float64, [st_.duration_s for st_ in steps]).ravel(),
                                  per_lane(np.int64, [st_.tag for st_ in steps]).ravel(), n_after, after,
                                  int(flat.sum()))
        assert first == firsts[0, 0]
        colls = [j for j, st_ in enumerate(steps) if st_.copies is not None]
        if colls:
            self.colls.copied([steps[j].copies for j in colls], firsts[:, colls])  # type: ignore[misc]
        # records as _rec makes them, in the same order: a transfer's flows as one group
        self._keep_recorded()
        groups = np.empty((n, k, 7), dtype=np.int64)
        groups[..., 0] = made
        groups[..., 1] = np.where([st_.whole for st_ in steps], spans, 1)
        groups[..., 2] = [st_.cat for st_ in steps]
        groups[..., 3], groups[..., 4], groups[..., 5], groups[..., 6] = s, np.arange(n)[:, None], m, c
        for kept, values in zip(self._recorded, (groups.ravel(), n_after, after)):
            kept.append(values)
        return made

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

    def _ensure_cp(self) -> dict[tuple[int, int, str, int, int], list[int]]:
        """The CP ring exchanges issued so far: (dp index, s, kind, m, c) -> their ids."""
        if not hasattr(self, "_cp_map"):
            self._cp_map: dict[tuple[int, int, str, int, int], list[int]] = {}
        return self._cp_map
