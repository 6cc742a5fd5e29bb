"""Jobs sharing a fabric, compared under isolation policies: :class:`JobSpec` names a job's
size and its work, and :func:`compare_isolation` runs the same jobs packed, spread, on their
own rails or planes, or with reserved shares, against each job alone on the whole fabric.

A job itself (its GPUs, its activities, its time shared and alone) is part of the scenario
it runs on: :meth:`Scenario.add_job <fabricsim.Scenario.add_job>` makes one, and
``Result.jobs`` reports them (:mod:`fabricsim.tenancy`, read here as :class:`Job` and
:data:`PLACEMENTS` too). Share weights are weighted max-min fairness: at a bottleneck,
transferring flows get rates in proportion to their weights (docs/design.md section 1), as a
switch's weighted traffic classes (ETS, IEEE 802.1Qaz) share a port.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .._checks import integer, shown
from ..exceptions import InvalidArgumentError
from ..fabrics import Fabric
from ..fabrics.fabric import _unpickled_fabric
from ..scenario import Scenario
from ..tenancy import PLACEMENTS, Job, _jobs_table

__all__ = ["Job", "JobSpec", "PLACEMENTS", "compare_isolation"]


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A job to place under several policies (:func:`compare_isolation`): ``name``,
    ``n_gpus`` and ``workload(job)``, which adds its work through the :class:`Job`.

    Example::

        spec = fs.JobSpec("a", 64, lambda job: job.add_collective("all_reduce", None, "1GiB"))
    """

    name: str
    n_gpus: int
    workload: Callable[[Job], Any]


def compare_isolation(fabric: Any, jobs: Sequence[JobSpec], policies: Sequence[str] = ("shared", "spread"),
                      *, seed: int = 0, routing: Any = None, tolerance: float = 0.0) -> pa.Table:
    """Runs the same jobs on ``fabric`` under each isolation policy and returns one table,
    a row per (policy, job) with the jobs table's columns (``slowdown``: against the job alone
    under the same policy) and ``baseline_s``, the job alone packed from GPU 0 on the whole
    fabric, the same for every policy, with ``vs_baseline`` = ``time_s / baseline_s``, which
    compares policies (an isolated job that is slow alone shows here, not in its slowdown):

    * "shared": every job packed by NVLink domain, equal weights;
    * "spread": every job spread over the domains (the worst case for meeting others);
    * "random": placed on whole free NVLink domains drawn at random (a fragmented cluster);
    * "rails": of n jobs, job k on the k-th block of rails (GPU local index within its node,
      as a rail-optimised fabric wires NIC i to rail i): jobs share no rail, and no leaf where
      a leaf's rails fall in one block;
    * "planes": of n jobs on a fabric of P scale-out planes, job k alone on the k-th block of
      P / n planes (each NIC's ports on those planes only), packed: jobs share no scale-out
      link, each with 1/n of the injection bandwidth (its run on the reduced fabric is its
      time; alone is on the whole fabric);
    * "reserved:F": the first job's flows have weight F and the others' 1 - F, packed: where
      the jobs have as many flows on a link, the first gets fraction F of it (a traffic class
      guaranteed its share, as ETS does; work-conserving). Weights are per flow, so a job
      with more flows on a link gets more of it.

    Every policy and job is checked before anything runs.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
        specs = [fs.JobSpec("a", 16, lambda j: j.add_collective("all_to_all", None, "64MiB")),
                 fs.JobSpec("b", 16, lambda j: j.add_collective("all_reduce", None, "256MiB"))]
        table = fs.compare_isolation(fabric, specs, ["shared", "spread"])
        table.select(["policy", "job", "slowdown", "vs_baseline"])   # one row per (policy, job)
    """
    specs = list(jobs) if isinstance(jobs, Sequence) else []
    if not specs or not all(isinstance(j, JobSpec) for j in specs):
        raise InvalidArgumentError(f"jobs must be a non-empty sequence of fabricsim.JobSpec, got {shown(jobs)}")
    names = [j.name for j in specs]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"job names must differ, got {names}")
    if (isinstance(policies, str) or not isinstance(policies, Sequence) or not policies
            or not all(isinstance(p, str) for p in policies)):
        raise InvalidArgumentError(f"policies must be a non-empty sequence of policy names such as ['shared', 'rails'], "
                                   f"got {shown(policies)}")
    probe = Scenario(fabric, seed=seed, routing=routing)
    plans = [_policy_plan(probe, policy, specs) for policy in policies]
    for spec in specs:  # the job sizes, together on the whole fabric
        probe.add_job(spec.name, n_gpus=spec.n_gpus)
    # Every scenario is built (each workload called) before any runs, so a workload that
    # fails does so before anything is spent.
    alone = []
    for spec in specs:
        sc = Scenario(fabric, seed=seed, routing=routing)
        spec.workload(sc.add_job(spec.name, n_gpus=spec.n_gpus))
        alone.append(sc)
    shared: list[Any] = []
    for plan in plans:
        if isinstance(plan, Fabric):
            shared.append(plan)
            continue
        sc = Scenario(fabric, seed=seed, routing=routing)
        for spec, (kw, w) in zip(specs, plan):
            spec.workload(sc.add_job(spec.name, weight=w, **kw))
        shared.append(sc)
    baseline = [sc.run(tolerance=tolerance).jobs["time_s"][0].as_py() for sc in alone]
    tables = []
    for policy, built in zip(policies, shared):
        if isinstance(built, Fabric):
            t = _planes_policy(fabric, built, specs, seed=seed, routing=routing, tolerance=tolerance)
        else:
            t = built.run(tolerance=tolerance).jobs
        times = t["time_s"].to_pylist()
        t = t.add_column(0, "policy", pa.array([policy] * t.num_rows, pa.string()))
        t = t.append_column("baseline_s", pa.array(baseline, pa.float64())).append_column(
            "vs_baseline", pa.array([x / b if x is not None and b else None for x, b in zip(times, baseline)], pa.float64()))
        tables.append(t)
    return pa.concat_tables(tables)


def _planes_policy(fabric: Any, own: Any, jobs: Sequence[JobSpec], *, seed: int, routing: Any,
                   tolerance: float) -> pa.Table:
    """compare_isolation's "planes": each job on its own block of planes, so on ``own`` (the
    fabric rebuilt with P / n planes of the same rate), at the GPUs packing gives it on the
    whole one."""
    whole = Scenario(fabric, seed=seed, routing=routing)
    placed = [whole.add_job(spec.name, n_gpus=spec.n_gpus) for spec in jobs]
    rows = []
    for spec, job in zip(jobs, placed):
        times = []
        for fab in (own, fabric):  # on its planes, then alone on all of them
            sc = Scenario(fab, seed=seed, routing=routing)
            spec.workload(sc.add_job(spec.name, gpus=job.gpus))
            times.append(sc.run(tolerance=tolerance).jobs.to_pylist()[0])
        row, alone = times
        row.update(alone_time_s=alone["time_s"], alone_step_s=alone["step_s"], placement="planes",
                   slowdown=row["time_s"] / alone["time_s"] if alone["time_s"] else None)
        rows.append(row)
    return _jobs_table(rows)


def _policy_plan(sc: "Scenario", policy: str, jobs: Sequence[JobSpec]) -> Any:
    """What a policy does, checked: each job's add_job arguments and weight, or for "planes"
    the fabric each job runs on."""
    if policy in ("shared", "spread", "random"):
        kind = "packed" if policy == "shared" else policy
        return [({"n_gpus": j.n_gpus, "placement": kind}, 1.0) for j in jobs]
    if policy.startswith("reserved:"):
        try:
            f = float(policy.split(":", 1)[1])
        except ValueError:
            f = float("nan")
        if not 0 < f < 1:
            raise InvalidArgumentError(f"policy {policy!r}: the reserved fraction must be a number in (0, 1), e.g. 'reserved:0.75'")
        weights = [f] + [(1 - f)] * (len(jobs) - 1)
        return [({"n_gpus": j.n_gpus, "placement": "packed"}, w) for j, w in zip(jobs, weights)]
    structure = sc.topology._core.structure()
    if policy == "rails":
        domain = int(structure.get("domain", {}).get("n_endpoints", 0))
        if domain == 0:
            raise InvalidArgumentError("policy 'rails' needs a fabric of NVLink domains (GPUs with a local index)")
        if domain % len(jobs):
            raise InvalidArgumentError(f"policy 'rails': {len(jobs)} jobs do not divide the {domain} rails of a domain")
        block = np.arange(int(sc.topology._core.n_gpus)) % domain // (domain // len(jobs))
        out = []
        for k, j in enumerate(jobs):
            mine = np.flatnonzero(block == k)
            n = integer(f"job {j.name!r} n_gpus", j.n_gpus, (1, 1 << 62))
            if n > mine.size:
                raise InvalidArgumentError(f"policy 'rails': job {j.name!r} needs {n} GPUs, its rails have {mine.size}")
            out.append(({"gpus": mine[:n]}, 1.0))
        return out
    if policy == "planes":
        fabric = sc.topology
        planes = int(structure.get("scale_out", {}).get("planes", 0)) if isinstance(fabric, Fabric) else 0
        if not isinstance(fabric, Fabric) or planes < len(jobs) or planes % len(jobs):
            raise InvalidArgumentError(
                f"policy 'planes': {len(jobs)} jobs need a fabric whose scale-out planes they divide, got {planes} planes "
                "(build it with fs.cluster(..., planes=...))")
        parts = dict(fabric._parts)
        parts["scale_out"] = dict(parts["scale_out"], planes=planes // len(jobs))
        return _unpickled_fabric(parts)
    raise InvalidArgumentError(
        f"unknown isolation policy {policy!r}: expected 'shared', 'spread', 'random', 'rails', 'planes' or 'reserved:F' (0 < F < 1)")
