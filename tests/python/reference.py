"""Pure-Python reference implementation of fabricsim's model (docs/design.md section 1).

Slow and plain on purpose: it is the contract the Rust engine is checked against, so every step
is written the way the design states it, with no incremental bookkeeping and no cleverness.

* ``max_min_reference`` is progressive filling: every unfrozen flow sits at one common level;
  raise the level until the first constraint saturates (``sum(coefficient * rate) ==
  capacity``) or the first per-flow cap is reached; freeze the flows concerned; repeat.
* ``simulate_reference`` is an event-driven fluid simulation of a DAG of flows and delays that
  recomputes the *full* max-min allocation of all transferring flows at every event, under
  faults (``RefFault``): capacities and usage lists that change at given times, failing the
  flows left on a link that is down or with no path, and skipping what waits for them.

Both work in floats (events closer than ``TIE_REL`` relative are handled together, as the engine
does) or, with ``exact=True``, in exact rational arithmetic (``fractions.Fraction``), where ties
are exact and no tolerance is used at all. The exact mode is the check on the float mode.

Units: bytes, seconds, bytes per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

# Events (and saturation levels) closer than this, relative, are treated as simultaneous.
TIE_REL = 1e-12


def _num(x, exact):
    """Converts an input number to the arithmetic in use (float, or an exact Fraction)."""
    if exact:
        return Fraction(x)  # exact: a float converts to its exact binary value
    return float(x)


# --------------------------------------------------------------------------------------------
# The solver
# --------------------------------------------------------------------------------------------


def max_min_reference(capacity, usage, caps=None, *, exact=False, bottleneck=None, weights=None):
    """Weighted max-min fair rates by progressive filling.

    capacity: capacity of each constraint, bytes/s (>= 0).
    usage: one list per flow of ``(constraint_index, coefficient)`` pairs; a flow with rate r
        puts ``coefficient * r`` on the constraint. Repeated constraints add up. Coefficients
        must be >= 0; zero entries are ignored.
    caps: None, or one entry per flow: a rate cap in bytes/s, or None / inf for no cap.
    weights: None (all 1), or one share weight per flow: the fill raises every unfrozen
        flow's rate at weight x the common level, so flows frozen together by one constraint
        have rates in the ratio of their weights.
    exact: compute in exact rational arithmetic (returns Fractions).
    bottleneck: None, or a list that gets, per flow, the constraint that froze it (the
        lowest-numbered one saturating then), or None if its cap did (or nothing bounds it).

    Returns the list of rates, bytes/s. A flow with no constraint and no cap gets ``inf``.
    """
    n_flows = len(usage)
    n_cons = len(capacity)
    zero = _num(0, exact)
    tie = 0 if exact else TIE_REL

    cap_c = [_num(c, exact) for c in capacity]
    for i, c in enumerate(cap_c):
        if not c >= 0:
            raise ValueError(f"capacity of constraint {i} is {c}")

    # coef[f] = {constraint: summed coefficient}
    coef = []
    for f, entries in enumerate(usage):
        d = {}
        for c, a in entries:
            if not 0 <= c < n_cons:
                raise ValueError(f"flow {f} uses unknown constraint {c}")
            a = _num(a, exact)
            if not a >= 0:
                raise ValueError(f"flow {f} has coefficient {a} on constraint {c}")
            d[c] = d.get(c, zero) + a
        coef.append({c: a for c, a in d.items() if a != 0})

    flow_cap = []
    for f in range(n_flows):
        cp = None if caps is None else caps[f]
        if cp is not None and math.isinf(float(cp)):
            cp = None
        if cp is not None:
            cp = _num(cp, exact)
            if not cp >= 0:
                raise ValueError(f"rate cap of flow {f} is {cp}")
        flow_cap.append(cp)

    wt = [_num(1 if weights is None else weights[f], exact) for f in range(n_flows)]
    rate = [None] * n_flows
    frozen = [False] * n_flows
    for f in range(n_flows):
        if not coef[f] and flow_cap[f] is None:
            rate[f] = math.inf
            frozen[f] = True

    level = zero
    held_by = {}  # flow -> the constraint that froze it
    while not all(frozen):
        # The level at which each constraint with unfrozen flows saturates.
        sat_level = {}
        for c in range(n_cons):
            weight = zero
            used = zero
            for f in range(n_flows):
                a = coef[f].get(c)
                if a is None:
                    continue
                if frozen[f]:
                    used += a * rate[f]
                else:
                    weight += a * wt[f]
            if weight > 0:
                sat_level[c] = (cap_c[c] - used) / weight
        cap_level = {
            f: flow_cap[f] / wt[f] for f in range(n_flows) if not frozen[f] and flow_cap[f] is not None
        }
        candidates = list(sat_level.values()) + list(cap_level.values())
        new_level = min(candidates)
        # Exact arithmetic never goes down; in floats rounding may put a level a hair below.
        new_level = max(new_level, level)
        threshold = new_level + tie * abs(new_level)

        to_freeze = set()
        for c, s in sorted(sat_level.items()):
            if s <= threshold:
                for f in range(n_flows):
                    if not frozen[f] and c in coef[f]:
                        to_freeze.add(f)
                        held_by.setdefault(f, c)
        for f, cp in cap_level.items():
            if cp <= threshold:
                to_freeze.add(f)
        assert to_freeze, "progressive filling made no progress"
        for f in to_freeze:
            rate[f] = new_level * wt[f]
            frozen[f] = True
        level = new_level
    if bottleneck is not None:
        bottleneck[:] = [held_by.get(f) for f in range(n_flows)]
    return rate


def max_min_reference_coo(capacity, flow_index, constraint_index, coefficient, n_flows,
                          rate_cap=None, *, exact=False):
    """``max_min_reference`` taking the same coordinate arrays as ``fabricsim.max_min_rates``."""
    usage = [[] for _ in range(n_flows)]
    for f, c, a in zip(flow_index, constraint_index, coefficient):
        usage[int(f)].append((int(c), a))
    caps = None if rate_cap is None else [float(x) for x in rate_cap]
    return max_min_reference([float(c) for c in capacity], usage, caps, exact=exact)


# --------------------------------------------------------------------------------------------
# The simulation
# --------------------------------------------------------------------------------------------


@dataclass
class RefFlow:
    """A flow: ``bytes`` over ``usage`` [(link, coefficient)], after ``latency_s``."""

    bytes: float
    usage: list
    latency_s: float = 0.0
    start_s: float = 0.0
    after: tuple = ()
    max_rate_Bps: float | None = None
    weight: float = 1.0


@dataclass
class RefDelay:
    """A fixed-duration activity (compute time)."""

    duration_s: float
    start_s: float = 0.0
    after: tuple = ()


@dataclass
class RefFault:
    """From ``time_s`` on, each link of ``capacity`` ({link: bytes/s}, 0 = down) has that
    capacity and each flow of ``usage`` ({flow id: usage list, or None: no path}) that list."""

    time_s: float
    capacity: dict = field(default_factory=dict)
    usage: dict = field(default_factory=dict)


@dataclass
class RefResult:
    """Per activity (index = activity id): ready_s, start_s (= ready_s for delays), finish_s,
    failed_s and status ("done", "failed" or "skipped"); a time an activity never reached is
    None (a failed flow has no finish_s; a skipped activity has no time at all).

    ``intervals`` is the list of ``(t0, t1, {flow_id: rate_Bps})`` between consecutive events
    with at least one flow transferring; rates are constant on each.
    ``link_bytes`` is, per link, the sum over flows of coefficient * bytes moved while on it.
    """

    ready_s: list
    start_s: list
    finish_s: list
    intervals: list = field(default_factory=list)
    link_bytes: list = field(default_factory=list)
    failed_s: list = field(default_factory=list)
    status: list = field(default_factory=list)

    @property
    def makespan_s(self):
        ends = [t for t in self.finish_s + self.failed_s if t is not None]
        return max(ends) if ends else 0.0

    def rate_at(self, flow_id, t):
        """Rate of a flow at time t (0 outside its transfer)."""
        for t0, t1, rates in self.intervals:
            if t0 <= t < t1:
                return rates.get(flow_id, 0.0)
        return 0.0


def route_usage(route):
    """Usage list of a route given as link ids: coefficient 1 per crossing, added up."""
    counts = {}
    for link in route:
        counts[link] = counts.get(link, 0) + 1
    return sorted(counts.items())


def route_latency(route, latency_s):
    """Sum of the links' latencies along the route (a link crossed twice counts twice)."""
    total = 0.0
    for link in route:
        total += latency_s[link]
    return total


def simulate_reference(capacity, activities, faults=(), *, exact=False):
    """Event-driven fluid simulation of a DAG of RefFlow / RefDelay (ids = list positions).

    capacity: per link (constraint), bytes/s.
    faults: RefFault list: capacities and usage lists that change at a time (link failures,
        repairs, degradations, and the reroutes that come with them).
    Semantics (docs/design.md section 1, docs/python-api.md, Scenario.add_fault):
      ready_s  = max(start_s, finish_s of every dependency)
      flow:  transfer starts at ready_s + latency_s (the latency of its first path, whatever
             reroutes come later); zero-byte flows finish right then (they never transfer, so
             no fault touches them); otherwise bytes drain at the max-min fair rate of all
             transferring flows under the capacities and usage lists in force, recomputed
             from scratch at every event.
      delay: finishes at ready_s + duration_s.
      faults: take effect in time order (input order among equal times: the last word on a
             link or a flow counts), after the finishes, ready times, transfer starts and delay
             ends of their instant. Then every transferring flow (one whose transfer started
             in this instant too) that has no path, or uses a link of capacity 0, fails: it
             never finishes, and every activity that waits for it, directly or not, is
             skipped. A flow that has not started yet takes its new usage list and meets the
             same test when its transfer starts.
    Events within TIE_REL (relative) of the next event are handled with it (floats only):
    timers (ready, transfer start, delay end) keep their own times, which are exact formulas;
    a transfer that ends within the instant ends at the instant's time, when the others' rates
    change; a transfer that starts within the instant but after its time drains from its own
    start time, so that no transfer ever ends before it starts; faults within the instant
    take effect at its time.
    Raises ValueError on a dependency cycle.
    """
    n = len(activities)
    tie = 0 if exact else TIE_REL
    zero = _num(0, exact)

    deps = []
    for i, a in enumerate(activities):
        ds = sorted(set(int(d) for d in a.after))
        for d in ds:
            if not 0 <= d < n:
                raise ValueError(f"activity {i} depends on unknown activity {d}")
        deps.append(ds)
    dependents = [[] for _ in range(n)]
    for i, ds in enumerate(deps):
        for d in ds:
            dependents[d].append(i)
    n_deps_left = [len(ds) for ds in deps]

    cap_now = [_num(c, exact) for c in capacity]
    usage = [list(a.usage) if isinstance(a, RefFlow) else None for a in activities]
    pending = sorted(faults, key=lambda x: x.time_s)  # stable: input order among equal times
    for x in pending:
        for link in x.capacity:
            if not 0 <= link < len(capacity):
                raise ValueError(f"fault at {x.time_s} names unknown link {link}")
        for f in x.usage:
            if not isinstance(activities[f], RefFlow):
                raise ValueError(f"fault at {x.time_s} reroutes activity {f}, not a flow")

    ready = [None] * n
    start = [None] * n
    finish = [None] * n
    failed = [None] * n
    status = [None] * n
    timers = []  # (time, kind, activity): kind in "ready", "start", "delay_end"
    remaining = {}  # transferring flow -> bytes still to move
    since = {}      # transferring flow -> time from which `remaining` drains at its rate
    on_usage = {}   # transferring flow -> bytes it had left when it took its usage list
    rates = {}
    intervals = []
    link_bytes = [zero] * len(capacity)

    def credit(f, left_now):
        """Puts what flow f moved on its current usage list since it took it on the links."""
        moved = on_usage[f] - left_now
        for link, c in usage[f] or ():
            link_bytes[link] += _num(c, exact) * moved
        on_usage[f] = left_now

    def schedule_ready(i):
        a = activities[i]
        t_ready = _num(a.start_s, exact)
        for d in deps[i]:
            t_ready = max(t_ready, finish[d])
        timers.append((t_ready, "ready", i))

    def complete(i, t_done):
        finish[i] = t_done
        status[i] = "done"
        for j in dependents[i]:
            n_deps_left[j] -= 1
            if n_deps_left[j] == 0:
                schedule_ready(j)

    def fail(f, t_fail):
        failed[f] = t_fail
        status[f] = "failed"
        credit(f, remaining.pop(f))
        del since[f], on_usage[f]
        rates.pop(f, None)
        todo = list(dependents[f])
        while todo:
            j = todo.pop()
            if status[j] is None:
                status[j] = "skipped"
                todo.extend(dependents[j])

    def fire(t_event, kind, i):
        a = activities[i]
        if kind == "ready":
            ready[i] = t_event
            if isinstance(a, RefFlow):
                timers.append((t_event + _num(a.latency_s, exact), "start", i))
            else:
                start[i] = t_event
                timers.append((t_event + _num(a.duration_s, exact), "delay_end", i))
        elif kind == "start":
            start[i] = t_event
            if a.bytes == 0:
                complete(i, t_event)
            else:
                remaining[i] = _num(a.bytes, exact)
                on_usage[i] = remaining[i]
                # A transfer start handled with an earlier instant still starts at its own
                # time: it cannot finish (or move bytes) before it.
                since[i] = t_event
        elif kind == "delay_end":
            complete(i, t_event)
        else:  # pragma: no cover
            raise AssertionError(kind)

    for i in range(n):
        if n_deps_left[i] == 0:
            schedule_ready(i)

    t = zero
    while True:
        candidates = [tm for tm, _, _ in timers]
        candidates += [since[f] + remaining[f] / rates[f] for f in remaining]
        if pending:
            candidates.append(_num(pending[0].time_s, exact))
        if not candidates:
            break
        t_next = min(candidates)
        horizon = t_next + tie * abs(t_next)

        # Drain the transferring flows up to t_next.
        if remaining and t_next > t:
            intervals.append((t, t_next, dict(rates)))
        done_now = []
        for f in sorted(remaining):
            if since[f] + remaining[f] / rates[f] <= horizon:
                # Handled at this instant, so it finishes at this instant (t_next >= since[f]).
                done_now.append(f)
            else:
                remaining[f] -= rates[f] * (t_next - since[f])
                since[f] = t_next
        t = t_next
        for f in done_now:
            credit(f, zero)
            del remaining[f], since[f], rates[f], on_usage[f]
            complete(f, t)

        # Fire every timer due now, including those that become due as a cascade
        # (zero latency, zero duration, zero bytes).
        while True:
            due = [x for x in timers if x[0] <= horizon]
            if not due:
                break
            for x in due:
                timers.remove(x)
            for tm, kind, i in sorted(due, key=lambda x: (x[0], x[2], x[1])):
                if status[i] is None:
                    fire(tm, kind, i)

        # Then the faults of this instant, and the failures they cause.
        while pending and _num(pending[0].time_s, exact) <= horizon:
            x = pending.pop(0)
            for link, c in x.capacity.items():
                cap_now[link] = _num(c, exact)
            for f, new in x.usage.items():
                if status[f] is not None:
                    continue  # over: done, failed or skipped
                if f in remaining:
                    credit(f, remaining[f])
                usage[f] = None if new is None else list(new)
        for f in sorted(remaining):
            if usage[f] is None or any(cap_now[link] == 0 for link, c in usage[f] if c != 0):
                fail(f, t)

        # Full recomputation of the max-min allocation of the transferring flows.
        active = sorted(remaining)
        rates = {}
        if active:
            new = max_min_reference(
                cap_now,
                [usage[f] for f in active],
                [activities[f].max_rate_Bps for f in active],
                exact=exact,
                weights=[activities[f].weight for f in active],
            )
            for f, r in zip(active, new):
                if not (r > 0 and r != math.inf):
                    raise ValueError(f"flow {f} gets rate {r} (links: {len(capacity)})")
                rates[f] = r

    undone = [i for i in range(n) if status[i] is None]
    if undone:
        raise ValueError(f"dependency cycle among activities {undone}")

    return RefResult(ready, start, finish, intervals, link_bytes, failed, status)
