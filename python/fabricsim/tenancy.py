"""Jobs (tenants) of one scenario: who owns which GPUs and which activities, how their
traffic shares bottlenecks, and how much each slows the others. This is the scenario's side
of jobs; the same jobs run under several isolation policies are :mod:`fabricsim.jobs`.

A job is made by :meth:`Scenario.add_job <fabricsim.Scenario.add_job>`, which places it on
free GPUs, and its work is added through it with the job's own ranks (0..n_gpus-1). After a
run, ``Result.jobs`` holds one row per job: its time in the shared run, its time alone (the
same scenario with all other work, other jobs' or no job's, emptied and the faults kept, so each job
sees the same routes and failures) and the slowdown between them; ``Result.job_links`` the
links where two or more jobs met.

Share weights are weighted max-min fairness: at a bottleneck, transferring flows get rates in
proportion to their weights (docs/design.md section 1). That is how a switch's weighted
traffic classes (ETS, IEEE 802.1Qaz) share a port: each class is guaranteed its weight's
fraction and what one leaves unused goes to the others. Weights are per flow: where two jobs
have as many flows on a link, weights f and 1 - f give them fractions f and 1 - f of it
(:func:`fabricsim.jobs.compare_isolation`'s "reserved:F"); a job with more flows there gets more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .fabrics.links import name_array, with_names
from ._checks import integer, integers, share_weight, shown
from .exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from .results import Result
    from .scenario import Scenario
    from .workloads.training import Model, Parallelism

__all__ = ["Job", "PLACEMENTS", "alone_scenario", "jobs_tables", "new_job"]


#: How :meth:`Scenario.add_job` places a job given ``n_gpus``.
PLACEMENTS = ("packed", "spread", "random")


class Job:
    """A tenant of a scenario: its GPUs (``gpus[rank]``), share ``weight`` and the
    activities added through it. Made by :meth:`Scenario.add_job`.

    Example::

        sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
        job = sc.add_job("train", n_gpus=16)
        first = job.add_collective("all_reduce", None, "1GiB")      # all 16 ranks
        job.add_flow(0, 15, "64MiB", after=first)                    # rank 0 to rank 15
        sc.run().jobs.column("time_s")
    """

    def __init__(self, scenario: "Scenario", name: str, gpus: np.ndarray, placement: str, weight: float) -> None:
        self._sc = scenario
        #: Its name, unique in the scenario.
        self.name = name
        #: GPU id of each of its ranks.
        self.gpus = gpus
        self.gpus.setflags(write=False)
        #: "packed", "spread", "random" or "given".
        self.placement = placement
        #: Its flows' share weight.
        self.weight = weight
        # Activity ids it made, as [first, end) spans in creation order.
        self._spans: list[tuple[int, int]] = []
        # Its training steps: (step, start marker id, end marker id, the built step).
        self.steps: list[tuple[Any, int, int, Any]] = []

    @property
    def n_gpus(self) -> int:
        """Number of GPUs (ranks) it owns."""
        return int(self.gpus.size)

    def activity_ids(self) -> np.ndarray:
        """Ids of every activity it added, ascending.

        Example::

            sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
            job = sc.add_job("a", n_gpus=8)
            job.add_delay("1ms")
            job.add_flow(0, 7, "1MiB")
            job.activity_ids()   # array([0, 1])
        """
        if not self._spans:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in self._spans])

    def __repr__(self) -> str:
        return f"Job({self.name!r}, n_gpus={self.n_gpus}, placement={self.placement!r}, weight={self.weight})"

    # ---- what users call: each one kept call of the scenario, so that it pickles and can be
    # replayed alone
    def add_flow(self, src_rank: int, dst_rank: int, size_bytes: float | str, **options: Any) -> int:
        """A flow from the job's rank ``src_rank`` to ``dst_rank`` (:meth:`Scenario.add_flow`'s
        options; ``after`` may name only the job's own activities).

        Example::

            sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
            job = sc.add_job("a", n_gpus=4, placement="spread")   # its ranks on both boards
            flow = job.add_flow(0, 1, "64MiB", tag="p2p")         # rank 0 to rank 1, over the network
            sc.run().flows.column("finish_s")
        """
        out: int = self._sc._job_call(self.name, "add_flow", (src_rank, dst_rank, size_bytes), options)
        return out

    def add_flows(self, src_ranks: Any, dst_ranks: Any, size_bytes: Any, **options: Any) -> np.ndarray:
        """Many flows between the job's ranks at once (:meth:`Scenario.add_flows`).

        Example::

            sc = fs.Scenario(fs.hgx_h100())
            job = sc.add_job("a", n_gpus=4)
            ids = job.add_flows([0, 1, 2, 3], [1, 2, 3, 0], "16MiB")   # a ring, one flow per rank
            len(ids)   # 4
        """
        out: np.ndarray = self._sc._job_call(self.name, "add_flows", (src_ranks, dst_ranks, size_bytes), options)
        return out

    def add_collective(self, op: str, ranks: Any = None, size_bytes: float | str | None = None, **options: Any) -> int:
        """A collective over the job's ``ranks`` (None: all of them, in rank order), as
        :meth:`Scenario.add_collective`.

        Example::

            sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
            job = sc.add_job("a", n_gpus=16)
            everyone = job.add_collective("all_reduce", None, "256MiB")   # all 16 ranks
            job.add_collective("all_gather", range(8), "64MiB", after=everyone)   # ranks 0-7
            sc.run().jobs.column("time_s")
        """
        out: int = self._sc._job_call(self.name, "add_collective", (op, ranks, size_bytes), options)
        return out

    def add_delay(self, duration_s: float | str, **options: Any) -> int:
        """A delay (compute time) of the job (:meth:`Scenario.add_delay`).

        Example::

            sc = fs.Scenario(fs.hgx_h100())
            job = sc.add_job("a", n_gpus=8)
            compute = job.add_delay("2ms")   # e.g. a backward pass
            job.add_collective("all_reduce", None, "128MiB", after=compute)
            sc.run().summary.makespan_s   # about 2.5 ms: the 2 ms plus the all-reduce
        """
        out: int = self._sc._job_call(self.name, "add_delay", (duration_s,), options)
        return out

    def add_dependency(self, activity_id: int, after_id: int) -> None:
        """Makes the job's activity ``activity_id`` wait for its activity ``after_id``.

        Example::

            sc = fs.Scenario(fs.pcie_server())
            job = sc.add_job("a", gpus=[0, 2])
            first, second = job.add_flow(0, 1, "1MiB"), job.add_flow(1, 0, "1MiB")
            job.add_dependency(second, first)
        """
        self._sc._job_call(self.name, "add_dependency", (activity_id, after_id), {})

    def add_training_step(self, model: "str | Model", parallelism: "Parallelism", *,
                          after: int | Iterable[int] = (), **options: Any) -> int:
        """One training step of ``model`` under ``parallelism`` on the job's GPUs (its ranks
        placed as ``parallelism.placement`` says, in the job's own ranks, default rank i on
        the job's rank i), after ``after``; ``options`` as :class:`fabricsim.training.TrainingStep`
        takes them (``compute``, ``tp_comm``, ``check_memory``...). Returns the id of a marker
        that finishes with the step, for the next step's ``after``. ``Result.jobs`` reports the
        mean step time of a job's steps.

        Example::

            sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
            job = sc.add_job("train", n_gpus=16)
            job.add_training_step("llama3-8b", fs.Parallelism(tp=8, dp=2, global_batch_size=16))
            sc.run().jobs.column("step_s")   # about 1.26 s
        """
        kwargs = dict(options, after=after)
        out: int = self._sc._job_call(self.name, "add_training_step", (model, parallelism), kwargs)
        return out

    # ---- the work itself, inside the kept call
    def _owning(self, add: Callable[[], Any]) -> Any:
        first = self._sc._core.n_activities
        out = add()
        end = self._sc._core.n_activities
        if end > first:
            self._spans.append((first, end))
        return out

    def _gpu_of(self, what: str, ranks: Any) -> np.ndarray:
        out: np.ndarray = self.gpus[integers(what, ranks, (0, self.n_gpus))]
        return out

    def _owned(self, ids: np.ndarray) -> np.ndarray:
        """Whether each activity id is one the job made."""
        if not self._spans:
            return np.zeros(ids.size, dtype=bool)
        starts = np.array([a for a, _ in self._spans], dtype=np.int64)
        ends = np.array([b for _, b in self._spans], dtype=np.int64)
        k = np.searchsorted(starts, ids, side="right") - 1
        return (k >= 0) & (ids < ends[np.maximum(k, 0)])

    def _owns(self, activity_id: int) -> bool:
        return bool(self._owned(np.array([activity_id], dtype=np.int64))[0])

    def _own_after(self, after: Any) -> np.ndarray:
        ids = integers("after", after, one=True, ordered=False)
        ok = self._owned(ids)
        if not ok.all():
            bad = int(ids[~ok][0])
            raise InvalidArgumentError(
                f"job {self.name!r}: after names activity {bad}, which is not the job's own: a job's "
                "work may wait only for its own activities (jobs are compared alone, without the others)")
        return ids

    def _forget_from(self, first: int) -> None:
        """Forgets activities from ``first`` on (a change that failed partway)."""
        self._spans = [(a, min(b, first)) for a, b in self._spans if a < first]
        self.steps = [s for s in self.steps if s[2] < first]

    def _options(self, options: dict[str, Any]) -> dict[str, Any]:
        if "weight" in options:
            raise InvalidArgumentError(
                f"job {self.name!r}: weight={shown(options['weight'])} given to one of its activities; a job's flows "
                f"share with the job's weight ({self.weight}), set by add_job")
        if "after" in options:
            options = dict(options, after=self._own_after(options["after"]))
        return dict(options, weight=self.weight)

    def _add_flow(self, src_rank: Any, dst_rank: Any, size_bytes: Any, **options: Any) -> int:
        src = int(self.gpus[integer("src_rank", src_rank, (0, self.n_gpus))])
        dst = int(self.gpus[integer("dst_rank", dst_rank, (0, self.n_gpus))])
        opts = self._options(options)
        out: int = self._owning(lambda: self._sc.add_flow(src, dst, size_bytes, **opts))
        return out

    def _add_flows(self, src_ranks: Any, dst_ranks: Any, size_bytes: Any, **options: Any) -> np.ndarray:
        src, dst = self._gpu_of("src_ranks", src_ranks), self._gpu_of("dst_ranks", dst_ranks)
        opts = self._options(options)
        out: np.ndarray = self._owning(lambda: self._sc.add_flows(src, dst, size_bytes, **opts))
        return out

    def _add_collective(self, op: str, ranks: Any, size_bytes: Any, **options: Any) -> int:
        gpus = self.gpus if ranks is None else self._gpu_of("ranks", ranks)
        opts = self._options(options)
        out: int = self._owning(lambda: self._sc.add_collective(op, gpus, size_bytes, **opts))
        return out

    def _add_dependency(self, activity_id: Any, after_id: Any) -> None:
        ids = {"activity_id": integer("activity_id", activity_id), "after_id": integer("after_id", after_id)}
        for what, i in ids.items():
            if not self._owns(i):
                raise InvalidArgumentError(f"job {self.name!r}: {what} {i} is not the job's own activity")
        self._sc.add_dependency(ids["activity_id"], ids["after_id"])

    def _add_delay(self, duration_s: Any, **options: Any) -> int:
        opts = self._options(options)
        opts.pop("weight")
        out: int = self._owning(lambda: self._sc.add_delay(duration_s, **opts))
        return out

    def _add_training_step(self, model: Any, parallelism: Any, *, after: Any = (), **options: Any) -> int:
        # The parallelism makes the step (Parallelism._step) and the step adds itself to the
        # scenario (TrainingStep._into): a job asks the objects it is given, so that it never
        # imports the training workload, which sits above the scenario.
        if not callable(getattr(parallelism, "_step", None)):
            raise InvalidArgumentError(f"parallelism must be a fabricsim.training.Parallelism, got {type(parallelism).__name__}")
        if parallelism.n_gpus > self.n_gpus:
            raise InvalidArgumentError(
                f"job {self.name!r} has {self.n_gpus} GPUs; the step needs tp {parallelism.tp} x pp {parallelism.pp} x "
                f"dp {parallelism.dp} x cp {parallelism.cp} = {parallelism.n_gpus}")
        for key in ("cost_model", "weight"):
            if key in options:
                raise InvalidArgumentError(f"job {self.name!r}: {key} is the scenario's (or the job's) for a step added to a job")
        local = parallelism.placement if parallelism.placement is not None else range(parallelism.n_gpus)
        placed = dataclasses.replace(parallelism, placement=tuple(int(g) for g in self._gpu_of("parallelism.placement", list(local))))
        step = placed._step(model, self._sc.topology, cost_model=self._sc.cost_model, **options)
        after_ids = self._own_after(after)

        def add() -> int:
            start = self._sc.add_delay(0.0, after=after_ids, tag=f"{self.name}.step_start")
            with self._sc._weighted(self.weight):
                built = step._into(self._sc, start)
            last = built.ids[~np.isin(built.ids, built.after_ids)].tolist()
            end = self._sc.add_delay(0.0, after=last, tag=f"{self.name}.step_end")
            self.steps.append((step, start, end, built))
            return end

        out: int = self._owning(add)
        return out


def new_job(sc: "Scenario", name: Any, n_gpus: Any, gpus: Any, placement: Any, weight: Any) -> Job:
    """A job for :meth:`Scenario.add_job`, checked whole (nothing is added if it is refused)."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"job name must be a non-empty string, got {shown(name)}")
    if name in sc.jobs:
        raise InvalidArgumentError(f"a job named {name!r} is already on this scenario")
    w = share_weight(weight)
    n_fabric = int(sc.topology._core.n_gpus)
    if n_fabric == 0:
        raise InvalidArgumentError("jobs own GPUs, and this topology has none: build it with a fabric generator (fs.cluster, ...)")
    owner = np.full(n_fabric, -1, dtype=np.int64)
    names = list(sc.jobs)
    for k, other in enumerate(sc.jobs.values()):
        owner[other.gpus] = k
    if gpus is not None:
        if n_gpus is not None or placement != "packed":
            raise InvalidArgumentError("give a job either gpus=[...] or n_gpus= with a placement, not both")
        chosen = integers("gpus", gpus, (0, n_fabric))
        if chosen.size == 0:
            raise InvalidArgumentError(f"job {name!r}: gpus is empty")
        values, counts = np.unique(chosen, return_counts=True)
        if (counts > 1).any():
            raise InvalidArgumentError(f"job {name!r}: GPU {int(values[counts > 1][0])} is listed twice in gpus")
        taken = owner[chosen] >= 0
        if taken.any():
            g = int(chosen[taken][0])
            raise InvalidArgumentError(f"job {name!r}: GPU {g} is owned by job {names[owner[g]]!r}")
        return Job(sc, name, chosen.copy(), "given", w)
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise InvalidArgumentError(f"placement must be one of {', '.join(PLACEMENTS)} (or give gpus=[...]), got {shown(placement)}")
    if n_gpus is None:
        raise InvalidArgumentError(f"job {name!r}: give n_gpus (with a placement) or gpus=[...]")
    n = integer("n_gpus", n_gpus, (1, n_fabric + 1))
    free = np.flatnonzero(owner < 0)
    if n > free.size:
        raise InvalidArgumentError(
            f"job {name!r} asks for {n} GPUs, but {free.size} of the fabric's {n_fabric} are free")
    domain = int(sc.topology._core.structure().get("domain", {}).get("n_endpoints", 1)) or 1
    by_domain: dict[int, list[int]] = {}
    for g in free.tolist():
        by_domain.setdefault(g // domain, []).append(g)
    if placement == "spread":  # one GPU per domain in turn
        queues = [by_domain[d] for d in sorted(by_domain)]
        picked: list[int] = []
        depth = 0
        while len(picked) < n:
            for q in queues:
                if depth < len(q) and len(picked) < n:
                    picked.append(q[depth])
            depth += 1
    else:
        # Whole free domains first (in order, or drawn at random as a batch scheduler hands
        # out the free nodes of a fragmented cluster), then the fullest of the rest.
        rank = {d: k for k, d in enumerate(sorted(by_domain))}
        if placement == "random":
            draw = np.random.default_rng([sc.seed, len(sc.jobs)]).permutation(len(by_domain))
            rank = {d: int(draw[k]) for d, k in rank.items()}
        order = sorted(by_domain, key=lambda d: (len(by_domain[d]) < domain, -len(by_domain[d]), rank[d]))
        picked = [g for d in order for g in by_domain[d]][:n]
    chosen = np.array(picked, dtype=np.int64)
    return Job(sc, name, chosen, placement, w)


# ------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------


def alone_scenario(sc: "Scenario", job: Job) -> "Scenario":
    """The scenario with only ``job``'s work (and every fault): each other activity becomes an
    empty delay, so that activity ids, and the ECMP hashes made from them, stay as shared."""
    topology, seed, routing, cost_model = sc._init_args
    alone = type(sc)(topology, seed=seed, routing=routing, cost_model=cost_model)
    alone._jobs_report = False
    empty = np.zeros(0, dtype=np.int64)
    for (name, args, kwargs), (first, end) in zip(sc._calls, sc._call_spans):
        mine = name == "_job_call" and args[0] == job.name
        # Dependencies join a job's own activities or work of no job (others are refused),
        # which is empty here: kept either way, as the shared run has them.
        if mine or name in ("add_job", "add_fault", "add_dependency"):
            getattr(alone, name)(*args, **kwargs)
        else:
            for _ in range(end - first):  # dependencies among them need not be kept: they are empty
                alone._core.add_delay(0.0, 0.0, empty, None)
        if alone._core.n_activities != end:  # pragma: no cover - replay is deterministic
            raise AssertionError(f"alone replay of {name} made ids up to {alone._core.n_activities}, not {end}")
    return alone


def _times(result: "Result", n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per activity id: ready, finish (NaN where none) and whether it did not end done."""
    ready, finish, bad = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=bool)
    for table, col in ((result.flows, "flow_id"), (result.delays, "delay_id")):
        if table.num_rows:
            ids = table[col].to_numpy()
            ready[ids] = table["ready_s"].to_numpy(zero_copy_only=False)
            finish[ids] = table["finish_s"].to_numpy(zero_copy_only=False)
            bad[ids] = pc.not_equal(table["status"].cast(pa.string()), "done").to_numpy(zero_copy_only=False)
    return ready, finish, bad


def _job_times(job: Job, times: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[float, float, float, bool]:
    """(start, finish, mean step time, failed) of a job, from a result's :func:`_times`."""
    ready, finish, bad = times
    ids = job.activity_ids()
    if not ids.size:
        return np.nan, np.nan, np.nan, False
    start, end = float(np.nanmin(ready[ids])), float(np.nanmax(finish[ids])) if np.isfinite(finish[ids]).any() else np.nan
    steps = [finish[e] - finish[s] for _, s, e, _ in job.steps]
    return start, end, float(np.mean(steps)) if steps else np.nan, bool(bad[ids].any())


def jobs_tables(sc: "Scenario", result: "Result", *, tolerance: float = 0.0) -> tuple[pa.Table, pa.Table]:
    """``Result.jobs`` and ``Result.job_links`` of a run of ``sc``: each job is run again
    alone (same seed, same faults, same run mode) for its time alone."""
    n = sc._core.n_activities
    n_links = int(sc.topology.n_links)
    jobs = list(sc.jobs.values())
    owned = sum(b - a for j in jobs for a, b in j._spans)
    rows: list[dict[str, Any]] = []
    used = np.zeros((len(jobs), n_links), dtype=bool)  # links each job loads alone
    shared_times = _times(result, n)
    for k, job in enumerate(jobs):
        start, end, step, failed = _job_times(job, shared_times)
        if len(jobs) == 1 and owned == n:  # nothing else runs: alone is shared
            alone_result = result
        else:
            alone_result = alone_scenario(sc, job).run(tolerance=tolerance)
        a_start, a_end, a_step, _ = _job_times(job, shared_times if alone_result is result else _times(alone_result, n))
        links = alone_result.links  # the links that carried anything
        used[k, links["link_id"].to_numpy()[links["bytes_carried"].to_numpy(zero_copy_only=False) > 0]] = True
        rows.append(dict(job=job.name, n_gpus=job.n_gpus, placement=job.placement, weight=job.weight,
                         n_activities=int(job.activity_ids().size), start_s=start, finish_s=end,
                         time_s=end - start, alone_time_s=a_end - a_start,
                         slowdown=(end - start) / (a_end - a_start) if a_end - a_start > 0 else np.nan,
                         n_steps=len(job.steps), step_s=step, alone_step_s=a_step,
                         status="failed" if failed else "done"))
    met = used.sum(axis=0) >= 2
    for k, row in enumerate(rows):
        row["n_links_met"] = int((used[k] & met).sum())
    jobs_table = _jobs_table(rows)
    shared = result.links
    ids = shared["link_id"].to_numpy()
    rows_met = np.flatnonzero(met[ids])  # rows of the shared links table on a met link
    where = ids[rows_met]

    def column(name: str) -> np.ndarray:
        out: np.ndarray = shared[name].to_numpy(zero_copy_only=False)[rows_met]
        return out

    job_links = pa.table({
        "link_id": pa.array(where, pa.int64()),
        "src": pa.array(column("src"), pa.int64()),
        "dst": pa.array(column("dst"), pa.int64()),
        "jobs": pa.array([[jobs[k].name for k in np.flatnonzero(used[:, l])] for l in where], pa.list_(pa.string())),
        "n_jobs": pa.array(used[:, where].sum(axis=0), pa.int64()),
        "bytes_carried": pa.array(column("bytes_carried"), pa.float64()),
        "mean_utilization": pa.array(column("mean_utilization"), pa.float64()),
        "peak_utilization": pa.array(column("peak_utilization"), pa.float64()),
    })
    if job_links.num_rows:
        job_links = job_links.sort_by([("peak_utilization", "descending"), ("bytes_carried", "descending")])
    return jobs_table, with_names(job_links, name_array(sc.topology))


def _jobs_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The jobs table of rows; a figure that does not apply (a job without training steps has
    no step time) is null, not NaN, as in every result table."""
    clean = [{k: None if isinstance(v, float) and np.isnan(v) else v for k, v in r.items()} for r in rows]
    return pa.Table.from_pylist(clean, schema=_JOBS_SCHEMA)


_JOBS_SCHEMA = pa.schema([
    ("job", pa.string()), ("n_gpus", pa.int64()), ("placement", pa.string()), ("weight", pa.float64()),
    ("n_activities", pa.int64()), ("start_s", pa.float64()), ("finish_s", pa.float64()),
    ("time_s", pa.float64()), ("alone_time_s", pa.float64()), ("slowdown", pa.float64()),
    ("n_steps", pa.int64()), ("step_s", pa.float64()), ("alone_step_s", pa.float64()),
    ("status", pa.string()), ("n_links_met", pa.int64()),
])
