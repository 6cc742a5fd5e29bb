"""Failures drawn over a horizon and what they cost (:func:`simulate`): lost work, downtime,
slowed steps and checkpoint writes, as goodput; and pluggable against co-packaged optics on
one fabric (:func:`compare_optics`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pyarrow as pa

from ..._checks import U64, integer, positive, room_for
from ...exceptions import InvalidArgumentError
from .exposure import _job_gpus, _streams, expected_failures
from .policy import Policy
from .rates import _DATA, _HOUR_S, PARTS, _rates_of

__all__ = ["ReliabilityResult", "simulate", "compare_optics"]


def _step_times(step: Any, exposed_network_s: Any) -> tuple[float, float]:
    """(step_s, exposed scale-out communication per step, s)."""
    if hasattr(step, "estimate") and callable(step.estimate) and not hasattr(step, "step_s"):
        step = step.estimate()
    if hasattr(step, "step_s") and hasattr(step, "parts"):
        step_s = positive("step_s", step.step_s, "seconds")
        exposed = sum(float(step.parts.get(k, 0.0)) for k in ("dp", "pp", "cp", "ep"))
    else:
        step_s = positive("step (seconds per step)", step, "a TrainingStep, a StepEstimate or seconds")
        exposed = step_s  # upper bound: the whole step slows
    if exposed_network_s is not None:
        exposed = positive("exposed_network_s", exposed_network_s, "seconds", zero=True)
    if exposed > step_s:
        raise InvalidArgumentError(f"exposed_network_s {exposed!r} exceeds the step's {step_s!r} s")
    return step_s, exposed


@dataclass(frozen=True)
class ReliabilityResult:
    """What :func:`simulate` found. ``failures``: one row per failure, in time order
    (``time_s, part, location, unit, consequence, lost_s, lost_work_s, downtime_s,
    degraded_s, step_s``: lost_s = lost_work_s + downtime_s + degraded_s; step_s the step
    while degraded). ``summary``: ``quantity, value, unit`` rows (horizon, goodput, restarts,
    lost time by cause). ``goodput``, ``n_restarts`` and ``lost_s`` as numbers.

    Example::

        from fabricsim import reliability
        f = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2")
        r = reliability.simulate(f, 7.5, horizon_s=30 * 86400, seed=1)
        0 < r.goodput <= 1   # True
    """

    failures: pa.Table
    summary: pa.Table
    goodput: float
    n_restarts: int
    lost_s: float
    horizon_s: float

    def lost_by_cause(self) -> dict[str, float]:
        """Lost seconds per part (and ``checkpoint`` for checkpoint writes).

        Example::

            f = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
            r = fs.reliability.simulate(f, 7.5, horizon_s=86400)
            "gpu" in r.lost_by_cause()   # True
        """
        out: dict[str, float] = {}
        for row in self.summary.to_pylist():
            q = row["quantity"]
            if q.startswith("lost, "):
                out[q[len("lost, "):]] = float(row["value"])
        return out

    def __repr__(self) -> str:
        return (f"ReliabilityResult(horizon_s={self.horizon_s:g}, failures={self.failures.num_rows}, "
                f"restarts={self.n_restarts}, goodput={self.goodput:.4f})")


# Memory per failure drawn, counted from what simulate makes of it: its time, stream and unit
# (drawn, joined, sorted: 9 arrays of 8 bytes), five float columns and their sum, three Python
# lists of references and the Arrow table's ten columns, rounded up.
_BYTES_PER_FAILURE = 256.0


# Each seed is two simulations over the horizon, kept until their mean is taken: 10,000 give a
# mean's standard error of 1% of a seed's spread, while 2**31 is a slip that never finishes.
_MAX_SEEDS = 10_000


def simulate(
    fabric: Any, step: Any, *, horizon_s: float, seed: int = 0, policy: Policy | None = None, rates: Any = None,
    exposed_network_s: float | None = None, gpus_per_host: int | None = None,
) -> ReliabilityResult:
    """Failures of a job on ``fabric`` drawn over ``horizon_s`` seconds with ``seed``, each
    costed by ``policy`` (default :class:`Policy`), rates from ``rates`` (a
    :class:`FailureRates`, or a mapping of rates per hour merged into the defaults).

    ``step`` is a :class:`~fabricsim.training.TrainingStep` (estimated analytically), its
    :class:`~fabricsim.training.StepEstimate` or ``StepResult``, or the step time in seconds
    (then the whole step counts as exposed scale-out communication unless
    ``exposed_network_s`` says otherwise).

    Example::

        from fabricsim import reliability, training
        f = fs.cluster(domain="hgx-h100", n_domains=2048, scale_out="quantum-2")
        par = training.Parallelism(**training.VALIDATION["llama3-405b-16k"]["parallelism"])
        job = training.TrainingStep("llama3-405b", par, f, check_memory=False)
        r = reliability.simulate(f, job, horizon_s=54 * 86400, seed=0)
        print(r.summary)
    """
    H = positive("horizon_s", horizon_s, "seconds")
    seed = integer("seed", seed, U64)
    pol = policy if policy is not None else Policy()
    if not isinstance(pol, Policy):
        raise InvalidArgumentError(f"policy must be a reliability.Policy, got {type(pol).__name__}")
    r = _rates_of(rates)
    step_s, exposed = _step_times(step, exposed_network_s)
    streams = _streams(fabric, _job_gpus(step), gpus_per_host)
    rng = np.random.default_rng(seed)
    hours = H / _HOUR_S
    lams = [r.rate_per_hour(x.part) * x.units * hours for x in streams]
    # Before any is drawn: the failures expected (six standard deviations above, which a draw
    # passes with odds of about 1e-9) must fit in memory, a row each.
    expected = sum(lams)
    room_for(f"reliability.simulate of {H:g} s: about {expected:.3g} failures over the horizon",
             expected + 6.0 * math.sqrt(expected), _BYTES_PER_FAILURE)
    times, which, units = [], [], []
    for i, (x, lam) in enumerate(zip(streams, lams)):
        n = int(rng.poisson(lam)) if lam > 0 else 0
        times.append(rng.uniform(0.0, H, n))
        which.append(np.full(n, i, dtype=np.int64))
        units.append(rng.integers(0, max(1, math.ceil(x.units)), n))
    t_all = np.concatenate(times) if times else np.zeros(0)
    order = np.argsort(t_all, kind="stable")
    t_all = t_all[order]
    w_all = np.concatenate(which)[order] if which else np.zeros(0, np.int64)
    u_all = np.concatenate(units)[order] if units else np.zeros(0, np.int64)

    # Per stream: the consequence and, for degradations, the slowed step.
    kinds, slowed = [], []
    for x in streams:
        kind = pol.consequence(x.part, x.location)
        s1 = step_s
        if kind in ("reroute", "fallback"):
            factor = pol.slowdown_factor(x.part, x.location)
            if factor is None:
                if x.capacity_lost >= 1.0:
                    kind = "restart"  # the whole bottleneck is gone: nothing to reroute over
                else:
                    factor = 1.0 / (1.0 - x.capacity_lost)
            if factor is not None:
                s1 = step_s + exposed * (factor - 1.0)
        kinds.append(kind)
        slowed.append(s1)

    C, R = pol.checkpoint_interval_s, pol.restart_s
    n = len(t_all)
    lost_work = np.zeros(n)
    downtime = np.zeros(n)
    degraded = np.zeros(n)
    step_col = np.full(n, step_s)
    cons = [""] * n
    resume_at = 0.0  # the job runs from resume_at on (down before it)
    down_total = 0.0
    for j in range(n):
        t = float(t_all[j])
        i = int(w_all[j])
        kind = kinds[i]
        cons[j] = kind
        if kind == "restart":
            end_new = min(t + R, H)
            if t >= resume_at:
                lost_work[j] = math.fmod(t - resume_at, C)
                downtime[j] = end_new - t
            else:  # down already: the restart begins again
                downtime[j] = max(0.0, end_new - min(resume_at, H))
            down_total += downtime[j]
            resume_at = t + R
        elif kind in ("reroute", "fallback"):
            s1 = slowed[i]
            step_col[j] = s1
            repair = r.repair_s.get(streams[i].part, 0.0)
            degraded[j] = (min(t + repair, H) - t) * (1.0 - step_s / s1)
    running = H - down_total
    checkpoint_s = running * pol.checkpoint_write_s / C
    lost = lost_work + downtime + degraded
    lost_total = float(lost.sum()) + checkpoint_s
    goodput = float(max(0.0, (H - lost_total) / H))

    part_col = [streams[int(i)].part for i in w_all]
    failures = pa.table({
        "time_s": pa.array(t_all, pa.float64()),
        "part": pa.array(part_col, pa.string()),
        "location": pa.array([streams[int(i)].location for i in w_all], pa.string()),
        "unit": pa.array(u_all, pa.int64()),
        "consequence": pa.array(cons, pa.string()),
        "lost_s": pa.array(lost, pa.float64()),
        "lost_work_s": pa.array(lost_work, pa.float64()),
        "downtime_s": pa.array(downtime, pa.float64()),
        "degraded_s": pa.array(degraded, pa.float64()),
        "step_s": pa.array(step_col, pa.float64()),
    })
    n_restarts = sum(1 for c in cons if c == "restart")
    rows: list[tuple[str, float, str]] = [
        ("horizon", H, "s"), ("step", step_s, "s"), ("exposed scale-out communication per step", exposed, "s"),
        ("failures", float(n), "count"), ("restarts", float(n_restarts), "count"),
        ("degradations (reroute or fallback)", float(sum(1 for c in cons if c in ("reroute", "fallback"))), "count"),
        ("lost", lost_total, "s"), ("lost work (since last checkpoint)", float(lost_work.sum()), "s"),
        ("restart downtime", float(downtime.sum()), "s"), ("slowed steps", float(degraded.sum()), "s"),
        ("checkpoint writes", checkpoint_s, "s"), ("goodput", goodput, "fraction"),
    ]
    by_part: dict[str, float] = {p: 0.0 for p in PARTS if any(x.part == p for x in streams)}
    for p, v in zip(part_col, lost):
        by_part[p] += float(v)
    rows += [(f"lost, {p}", v, "s") for p, v in by_part.items()]
    rows.append(("lost, checkpoint", checkpoint_s, "s"))
    summary = pa.table({
        "quantity": pa.array([q for q, _, _ in rows], pa.string()),
        "value": pa.array([v for _, v, _ in rows], pa.float64()),
        "unit": pa.array([u for _, _, u in rows], pa.string()),
    })
    return ReliabilityResult(failures, summary, goodput, n_restarts, lost_total, H)


_NETWORK_PARTS = ("nic", "switch", "optics", "cpo_port", "link")


_OPTICS_PARTS = ("optics", "cpo_port")


def compare_optics(
    pluggable: Any, co_packaged: Any, step: Any, *, horizon_s: float, seeds: int = 8, policy: Policy | None = None,
    rates: Any = None, exposed_network_s: float | None = None,
) -> pa.Table:
    """The same job on two fabrics that differ in their switches' optics, pluggable and
    co-packaged (e.g. ``scale_out="quantum-x800"`` against ``"quantum-x-photonics"``):
    ``metric, pluggable, co_packaged, ratio`` (pluggable / co-packaged, the "x times more
    resilient" figure) and ``note``. Failure rates are the closed form; lost time and goodput
    the mean over ``seeds`` seeds (0, 1, ...) of :func:`simulate`.

    Example::

        from fabricsim import reliability
        a = fs.cluster(domain="nvl72", n_domains=16, scale_out="quantum-x800")
        b = fs.cluster(domain="nvl72", n_domains=16, scale_out="quantum-x-photonics")
        t = reliability.compare_optics(a, b, 7.5, horizon_s=30 * 86400, seeds=2)
        print(t)
    """
    for name, fab, want in (("pluggable", pluggable, "pluggable"), ("co_packaged", co_packaged, "co-packaged")):
        sw = fab._parts.get("switch") if hasattr(fab, "_parts") else None
        if sw is None or sw["optics"] != want:
            got = "no scale-out switch" if sw is None else f"{sw.name!r} with {sw['optics']} optics"
            raise InvalidArgumentError(f"{name} must be a fabric whose switches have {want} optics, got {got}")
    n_seeds = integer("seeds", seeds, (1, _MAX_SEEDS + 1))
    H = positive("horizon_s", horizon_s, "seconds")
    r = _rates_of(rates)
    per_h = 1.0 / (H / _HOUR_S)

    def expected(fab: Any) -> pa.Table:
        return expected_failures(fab, horizon_s=H, rates=r, gpus=_job_gpus(step))

    def total(t: pa.Table, parts: Iterable[str], where: str | None = None) -> float:
        parts = tuple(parts)
        return float(sum(e for p, loc, e in zip(t.column("part").to_pylist(), t.column("location").to_pylist(),
                                                t.column("expected").to_pylist())
                         if p in parts and (where is None or loc == where)))

    def switch_side_optics(t: pa.Table) -> float:
        return float(sum(e for p, loc, e, in zip(t.column("part").to_pylist(), t.column("location").to_pylist(),
                                                 t.column("expected").to_pylist())
                         if p == "cpo_port" or (p == "optics" and loc != "nic")))

    e_p, e_c = expected(pluggable), expected(co_packaged)
    sims = {}
    for name, fab in (("pluggable", pluggable), ("co_packaged", co_packaged)):
        res = [simulate(fab, step, horizon_s=H, seed=k, policy=policy, rates=r, exposed_network_s=exposed_network_s)
               for k in range(n_seeds)]
        net_lost = [sum(v for p, v in x.lost_by_cause().items() if p in _NETWORK_PARTS) for x in res]
        net_restarts = [sum(1 for p, c in zip(x.failures.column("part").to_pylist(),
                                              x.failures.column("consequence").to_pylist())
                            if p in _NETWORK_PARTS and c == "restart") for x in res]
        sims[name] = (float(np.mean(net_lost)) / _HOUR_S, float(np.mean([x.lost_s for x in res])) / _HOUR_S,
                      float(np.mean([x.goodput for x in res])), float(np.mean(net_restarts)) * per_h)
    ppc = float(_DATA["optics_mechanisms"]["reference_ports_per_cage"])
    nic_side = total(e_p, ["optics"], "nic")
    rows: list[tuple[str, float, float, str]] = [
        ("optics failures per switch port per hour", r.rate_per_hour("optics") / ppc, r.rate_per_hour("cpo_port"),
         "the mechanism: transceiver rate / ports per cage, against that times sum(share x CPO factor)"),
        ("switch-side optics failures per hour", switch_side_optics(e_p) * per_h, switch_side_optics(e_c) * per_h,
         "the switches' own optics over the fabric"),
        ("optics failures per hour, NIC side included", total(e_p, _OPTICS_PARTS) * per_h,
         total(e_c, _OPTICS_PARTS) * per_h, "NICs keep pluggable transceivers on both fabrics"),
        ("upper bound: CPO switch optics that never fail", total(e_p, _OPTICS_PARTS) * per_h, nic_side * per_h,
         "the most fewer optics failures CPO switches can give while the NICs' optics stay pluggable"),
        ("network failures per hour (NIC, switch, optics, link)", total(e_p, _NETWORK_PARTS) * per_h,
         total(e_c, _NETWORK_PARTS) * per_h, "closed form"),
        ("job restarts caused by the network per hour", sims["pluggable"][3], sims["co_packaged"][3],
         f"mean of {n_seeds} seeds"),
        ("hours lost to the network", sims["pluggable"][0], sims["co_packaged"][0], f"mean of {n_seeds} seeds"),
        ("all failures per hour", total(e_p, PARTS) * per_h, total(e_c, PARTS) * per_h, "closed form"),
        ("hours lost, all causes", sims["pluggable"][1], sims["co_packaged"][1], f"mean of {n_seeds} seeds"),
        ("goodput", sims["pluggable"][2], sims["co_packaged"][2], f"mean of {n_seeds} seeds; ratio is co-packaged / pluggable"),
    ]

    def ratio(metric: str, a: float, b: float) -> float:
        if metric == "goodput":
            return b / a if a > 0 else math.nan
        return a / b if b > 0 else (math.inf if a > 0 else math.nan)

    return pa.table({
        "metric": pa.array([m for m, _, _, _ in rows], pa.string()),
        "pluggable": pa.array([a for _, a, _, _ in rows], pa.float64()),
        "co_packaged": pa.array([b for _, _, b, _ in rows], pa.float64()),
        "ratio": pa.array([ratio(m, a, b) for m, a, b, _ in rows], pa.float64()),
        "note": pa.array([nt for _, _, _, nt in rows], pa.string()),
    })
