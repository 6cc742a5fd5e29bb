"""Tests of the reference implementation itself (no engine needed).

Hand-solved cases, and the float reference against the exact-rational reference on random
problems, so that the reference the engine is judged by is itself checked.
"""

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from reference import (
    RefDelay,
    RefFault,
    RefFlow,
    max_min_reference,
    route_latency,
    route_usage,
    simulate_reference,
)


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


# ---------------------------------------------------------------- max-min, by hand


def test_maxmin_single_link_equal_share():
    assert max_min_reference([90.0], [[(0, 1)]] * 3) == [30.0, 30.0, 30.0]


def test_maxmin_parking_lot():
    # Links 10, 20, 40; long flow over all three, one short per link.
    usage = [[(0, 1), (1, 1), (2, 1)], [(0, 1)], [(1, 1)], [(2, 1)]]
    held = []
    assert max_min_reference([10, 20, 40], usage, bottleneck=held) == [5, 5, 15, 35]
    assert held == [0, 0, 1, 2]


def test_maxmin_coefficients():
    # Flow 0 crosses the link twice (2r), flow 1 spreads over two links (0.5 each).
    # Link 0 (cap 100): 2 r0 + 0.5 r1; link 1 (cap 100): 0.5 r1.
    # Common level L: 2.5 L = 100 -> L = 40, both frozen (both use link 0).
    r = max_min_reference([100, 100], [[(0, 2)], [(0, 0.5), (1, 0.5)]])
    assert r == [approx(40), approx(40)]
    # Same, link 0 at 250: 2.5 L = 250 -> L = 100 (link 1: 0.5 * 100 = 50 <= 100).
    r = max_min_reference([250, 100], [[(0, 2)], [(0, 0.5), (1, 0.5)]])
    assert r == [approx(100), approx(100)]
    # Flow 1 only on link 1 with coefficient 0.5: rate 200.
    r = max_min_reference([100, 100], [[(0, 2)], [(1, 0.5)]])
    assert r == [approx(50), approx(200)]


def test_maxmin_repeated_entries_add_up():
    assert max_min_reference([100], [[(0, 1), (0, 1)], [(0, 1)]]) == [
        approx(100 / 3),
        approx(100 / 3),
    ]


def test_maxmin_caps():
    # Cap 10 frees the rest of the link for the other flow.
    held = []
    assert max_min_reference([100], [[(0, 1)], [(0, 1)]], [10, None], bottleneck=held) == [10, 90]
    assert held == [None, 0]
    # A cap above the fair share changes nothing.
    assert max_min_reference([100], [[(0, 1)], [(0, 1)]], [60, math.inf]) == [50, 50]
    # A flow with a cap and no constraint.
    assert max_min_reference([100], [[], [(0, 1)]], [7, None]) == [7, 100]
    # No constraint, no cap: unbounded.
    assert max_min_reference([100], [[]]) == [math.inf]


def test_maxmin_second_round():
    # Link 0 (10) shared by f0, f1; link 1 (100) shared by f1, f2: f0 = f1 = 5, f2 = 95.
    assert max_min_reference([10, 100], [[(0, 1)], [(0, 1), (1, 1)], [(1, 1)]]) == [5, 5, 95]


def test_maxmin_zero_capacity():
    assert max_min_reference([0, 10], [[(0, 1)], [(1, 1)]]) == [0, 10]


def test_maxmin_exact_mode():
    r = max_min_reference([1, 1], [[(0, 1), (1, 1)], [(0, 1)], [(1, 3)]], exact=True)
    # Link 1: L + 3L = 1 -> 1/4 saturates first: f0, f2 at 1/4; f1 gets 3/4.
    assert r == [Fraction(1, 4), Fraction(3, 4), Fraction(1, 4)]


# ---------------------------------------------------------------- simulation, by hand


def test_sim_two_flows_share_a_link():
    r = simulate_reference([100.0], [RefFlow(100, [(0, 1)]), RefFlow(300, [(0, 1)])])
    assert r.finish_s == [approx(2), approx(4)]
    assert r.start_s == [0, 0]
    assert r.intervals == [(0, 2, {0: 50, 1: 50}), (2, 4, {1: 100})]


def test_sim_staggered_start():
    r = simulate_reference([100.0], [RefFlow(300, [(0, 1)]), RefFlow(100, [(0, 1)], start_s=1)])
    assert r.finish_s == [approx(4), approx(3)]
    assert r.ready_s == [0, 1]


def test_sim_latency_and_delays():
    acts = [
        RefDelay(2.0),                                        # 0: 0 -> 2
        RefFlow(100, [(0, 1)], latency_s=0.5, after=(0,)),     # 1: ready 2, start 2.5, end 3.5
        RefDelay(1.0, after=(1,)),                            # 2: 3.5 -> 4.5
        RefFlow(0, [(0, 1)], latency_s=0.25, start_s=5, after=(2,)),  # 3: ready 5, 5.25, 5.25
        RefDelay(0.0, after=(3, 0)),                          # 4: 5.25 -> 5.25
    ]
    r = simulate_reference([100.0], acts)
    assert r.ready_s == [0, 2, 3.5, 5, 5.25]
    assert r.start_s == [0, 2.5, 3.5, 5.25, 5.25]
    assert r.finish_s == [2, 3.5, 4.5, 5.25, 5.25]


def test_sim_parking_lot_staggered_finishes():
    # See test_closed_form.py: long 2.5, shorts 1, 2.5, 4.
    usage = [[(0, 1), (1, 1), (2, 1)], [(0, 1)], [(1, 1)], [(2, 1)]]
    sizes = [20, 5, 30, 140]
    r = simulate_reference([10, 20, 40], [RefFlow(s, u) for s, u in zip(sizes, usage)])
    assert r.finish_s == [approx(2.5), approx(1), approx(2.5), approx(4)]


def test_sim_cap_and_coefficient():
    acts = [RefFlow(100, [(0, 2)]), RefFlow(50, [(0, 1)])]
    r = simulate_reference([100.0], acts)
    # 2L + L = 100: both at 100/3; f1 ends at 1.5; f0 then alone at 50: 50 left -> 2.5.
    assert r.finish_s == [approx(2.5), approx(1.5)]
    assert r.link_bytes == [250]
    acts = [RefFlow(40, [(0, 1)], max_rate_Bps=20), RefFlow(400, [(0, 1)])]
    r = simulate_reference([100.0], acts)
    assert r.finish_s == [approx(2), approx(4.4)]


def test_sim_cycle_rejected():
    with pytest.raises(ValueError, match="cycle"):
        simulate_reference([1.0], [RefDelay(1, after=(1,)), RefDelay(1, after=(0,))])


# ---------------------------------------------------------------- faults, by hand


def test_fault_reroutes_a_transfer_with_the_bytes_it_has_left():
    # 100 B on link 0 (10 B/s); at t=2 link 0 goes down and the flow moves to link 1
    # (20 B/s) with 80 B left: 2 + 80 / 20 = 6.
    r = simulate_reference([10.0, 20.0], [RefFlow(100, [(0, 1)])],
                           [RefFault(2.0, {0: 0.0}, {0: [(1, 1)]})])
    assert r.finish_s == [6] and r.status == ["done"] and r.failed_s == [None]
    assert r.link_bytes == [20, 80]
    assert r.intervals == [(0, 2, {0: 10}), (2, 6, {0: 20})]


def test_fault_degrades_and_repairs_a_link():
    # Link at 10 B/s, 5 B/s from t=2 to t=4, 10 again: 20 + 10 + 70 -> 4 + 7 = 11.
    faults = [RefFault(4.0, {0: 10.0}), RefFault(2.0, {0: 5.0})]  # given out of order
    r = simulate_reference([10.0], [RefFlow(100, [(0, 1)])], faults)
    assert r.finish_s == [11]
    # Two words on one link at one time: the last counts.
    faults = [RefFault(2.0, {0: 0.0}), RefFault(2.0, {0: 5.0})]
    assert simulate_reference([10.0], [RefFlow(100, [(0, 1)])], faults).finish_s == [18]


def test_fault_fails_a_transfer_and_skips_what_waits_for_it():
    acts = [
        RefFlow(100, [(0, 1)]),                 # 0: fails at 2 (link 0 down, no reroute)
        RefDelay(1.0, after=(0,)),              # 1: skipped
        RefFlow(10, [(1, 1)], after=(1,)),      # 2: skipped, through 1
        RefFlow(30, [(0, 1), (1, 1)]),          # 3: fails at 2 too
        RefFlow(40, [(1, 1)]),                  # 4: all three at 5 B/s, then 4 alone at 10
    ]
    r = simulate_reference([10.0, 10.0], acts, [RefFault(2.0, {0: 0.0})])
    assert r.status == ["failed", "skipped", "skipped", "failed", "done"]
    assert r.failed_s == [2, None, None, 2, None]
    assert r.ready_s == [0, None, None, 0, 0] and r.start_s == [0, None, None, 0, 0]
    assert r.finish_s == [None, None, None, None, 5]  # 10 B by t=2, 30 B at 10 B/s
    assert r.link_bytes == [10 + 10, 10 + 40]
    assert r.makespan_s == 5


def test_fault_meets_flows_that_have_not_started_when_they_start():
    acts = [
        RefFlow(10, [(0, 1)], start_s=1.0),           # 0: starts during the outage: fails at 1
        RefFlow(10, [(0, 1)], latency_s=2.0),         # 1: starts at 2, after the repair: 2 + 1
        RefFlow(0, [(0, 1)], start_s=1.0),            # 2: zero bytes never transfer: done at 1
        RefFlow(10, [(1, 1)], latency_s=1.0, start_s=0.5),  # 3: no path from 0.5: fails at 1.5
        RefFlow(10, [(1, 1)], latency_s=1.0, start_s=0.5),  # 4: a path again at 1: 1.5 + 1
    ]
    faults = [RefFault(0.5, {0: 0.0}, {3: None, 4: None}), RefFault(1.0, {}, {4: [(1, 1)]}),
              RefFault(1.5, {0: 10.0})]
    r = simulate_reference([10.0, 10.0], acts, faults)
    assert r.status == ["failed", "done", "done", "failed", "done"]
    assert r.failed_s == [1, None, None, 1.5, None]
    assert r.start_s == [1, 2, 1, 1.5, 1.5]
    assert r.finish_s == [None, 3, 1, None, 2.5]


def test_fault_at_the_instant_of_a_finish_and_of_a_start():
    # Flow 0 ends at t=1 as link 0 goes down: it is done. Flow 1 starts on link 0 then: it
    # fails. Flow 2 is rerouted then onto link 0's replacement: it starts there.
    acts = [RefFlow(10, [(0, 1)]), RefFlow(10, [(0, 1)], start_s=1.0),
            RefFlow(10, [(0, 1)], start_s=1.0)]
    r = simulate_reference([10.0, 10.0], acts, [RefFault(1.0, {0: 0.0}, {2: [(1, 1)]})])
    assert r.status == ["done", "failed", "done"]
    assert r.finish_s == [1, None, 2] and r.failed_s == [None, 1, None]


def test_fault_float_mode_takes_a_fault_within_the_instant():
    # A finish at 3 - 3e-13 and a fault at 3 are one instant: the fault takes effect at the
    # finish, and the flow starting then (on the failed link) fails there.
    acts = [RefFlow(30 * (1 - 1e-13), [(0, 1)]), RefFlow(5, [(1, 1)], after=(0,))]
    r = simulate_reference([10.0, 10.0], acts, [RefFault(3.0, {1: 0.0})])
    assert r.status == ["done", "failed"]
    assert r.failed_s[1] == r.finish_s[0] == approx(3)


def test_route_helpers():
    assert route_usage([3, 1, 3]) == [(1, 1), (3, 2)]
    assert route_latency([3, 1, 3], [0, 0.5, 0, 0.25]) == 1.0


# ---------------------------------------------------------------- float against exact

magnitudes = st.integers(0, 9).map(lambda e: 10.0 ** e)
mantissa = st.sampled_from([1.0, 1.5, 2.0, 3.0, 7.0, 0.3])


@st.composite
def maxmin_problems(draw):
    n_c = draw(st.integers(1, 5))
    n_f = draw(st.integers(1, 7))
    cap = [draw(magnitudes) * draw(mantissa) for _ in range(n_c)]
    usage = []
    caps = []
    for _ in range(n_f):
        k = draw(st.integers(1, 3))
        usage.append([(draw(st.integers(0, n_c - 1)), draw(st.sampled_from([0.5, 1, 2, 1.5])))
                      for _ in range(k)])
        caps.append(draw(st.one_of(st.none(), magnitudes)))
    return cap, usage, caps


def _close(a, b, rel=1e-9):
    return abs(float(a) - float(b)) <= rel * max(abs(float(a)), abs(float(b))) + 1e-300


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(maxmin_problems())
def test_maxmin_float_matches_exact(problem):
    cap, usage, caps = problem
    fl = max_min_reference(cap, usage, caps)
    ex = max_min_reference(cap, usage, caps, exact=True)
    assert all(_close(a, b) for a, b in zip(fl, ex)), (fl, [float(x) for x in ex])
    # Feasible, and every flow is blocked by a saturated constraint or its cap (the max-min
    # characterisation: a bottleneck where it has the largest rate).
    def load(c):
        return sum(Fraction(a) * ex[g] for g, ug in enumerate(usage) for cc, a in ug if cc == c)

    for c in range(len(cap)):
        assert load(c) <= Fraction(cap[c])
    for f, u in enumerate(usage):
        if caps[f] is not None and ex[f] == Fraction(caps[f]):
            continue
        blocked = False
        for c, _ in u:
            top = max(ex[g] for g, ug in enumerate(usage) if any(cc == c for cc, _ in ug))
            if load(c) == Fraction(cap[c]) and ex[f] == top:
                blocked = True
        assert blocked, f"flow {f} has no bottleneck"


@st.composite
def small_sims(draw):
    n_links = draw(st.integers(1, 4))
    cap = [draw(magnitudes) * draw(mantissa) for _ in range(n_links)]
    acts = []
    for i in range(draw(st.integers(1, 7))):
        after = tuple(sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=2))))) if i else ()
        start = draw(st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0]))
        if draw(st.integers(0, 4)) == 0:
            acts.append(RefDelay(draw(st.sampled_from([0.0, 0.25, 1.0])), start, after))
            continue
        acts.append(RefFlow(
            bytes=draw(st.one_of(st.just(0.0), magnitudes)) * draw(mantissa),
            usage=draw(usages(n_links)),
            latency_s=draw(st.sampled_from([0.0, 0.0, 1e-6, 0.25])),
            start_s=start,
            after=after,
            max_rate_Bps=draw(st.one_of(st.none(), magnitudes)),
        ))
    # Faults at coarse times (so that they meet other events) and fine ones: capacities down,
    # degraded or back, flows rerouted (to no path too).
    flows = [i for i, a in enumerate(acts) if isinstance(a, RefFlow)]
    faults = []
    for _ in range(draw(st.integers(0, 3))):
        time_s = draw(st.one_of(st.sampled_from([0.0, 0.5, 1.0, 3.0]), st.floats(0, 5)))
        capacity = {}
        for _ in range(draw(st.integers(0, 2))):
            link = draw(st.integers(0, n_links - 1))
            capacity[link] = cap[link] * draw(st.sampled_from([0.0, 0.0, 0.5, 1.0]))
        usage = {}
        if flows:
            for _ in range(draw(st.integers(0, 3))):
                new = st.one_of(st.none(), usages(n_links), usages(n_links), usages(n_links))
                usage[draw(st.sampled_from(flows))] = draw(new)
        faults.append(RefFault(time_s, capacity, usage))
    return cap, acts, faults


def usages(n_links):
    return st.lists(st.tuples(st.integers(0, n_links - 1), st.sampled_from([1, 2, 0.5, 1 / 3])),
                    min_size=1, max_size=3)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(small_sims())
def test_sim_float_matches_exact(sim):
    cap, acts, faults = sim
    fl = simulate_reference(cap, acts, faults)
    ex = simulate_reference(cap, acts, faults, exact=True)
    assert fl.status == ex.status
    for name in ("ready_s", "start_s", "finish_s", "failed_s"):
        a, b = getattr(fl, name), getattr(ex, name)
        assert all((x is None and y is None) or _close(x, y) for x, y in zip(a, b)), (
            name, a, [None if y is None else float(y) for y in b])
    # Bytes conserved and capacity respected, exactly, in the exact run: capacities and
    # usage lists are those in force (the faults up to each interval's start, in order).
    moved = [Fraction(0)] * len(acts)
    order = sorted(faults, key=lambda x: x.time_s)
    for t0, t1, rates in ex.intervals:
        assert t1 > t0
        capacity = list(cap)
        usage = [getattr(a, "usage", None) for a in acts]
        for x in order:
            if Fraction(x.time_s) <= t0:
                capacity = [x.capacity.get(link, c) for link, c in enumerate(capacity)]
                usage = [x.usage.get(f, u) for f, u in enumerate(usage)]
        for link in range(len(cap)):
            load = sum(Fraction(c) * rates[f] for f in rates for l, c in usage[f] if l == link)
            assert load <= Fraction(capacity[link])
        for f, r in rates.items():
            moved[f] += r * (t1 - t0)
            end = ex.finish_s[f] if ex.finish_s[f] is not None else ex.failed_s[f]
            assert ex.start_s[f] <= t0 and t1 <= end
    for i, a in enumerate(acts):
        if ex.status[i] == "skipped":
            assert ex.ready_s[i] is None and ex.start_s[i] is None and ex.finish_s[i] is None
            assert any(ex.status[d] != "done" for d in a.after)
            continue
        if isinstance(a, RefFlow):
            if ex.status[i] == "done":
                assert moved[i] == Fraction(a.bytes)
            else:
                assert ex.status[i] == "failed" and a.bytes > 0 and moved[i] < Fraction(a.bytes)
            assert ex.start_s[i] == ex.ready_s[i] + Fraction(a.latency_s)
        deadline = max([Fraction(a.start_s)] + [ex.finish_s[d] for d in a.after])
        assert ex.ready_s[i] == deadline


def test_sim_float_matches_exact_draws_faults_that_matter():
    """Not vacuous: the faults of the draws above fail flows, skip others and reroute some."""
    seen = {"failed": 0, "skipped": 0, "rerouted and done": 0}

    @settings(max_examples=100, deadline=None, derandomize=True, database=None)
    @given(small_sims())
    def collect(sim):
        cap, acts, faults = sim
        r = simulate_reference(cap, acts, faults)
        seen["failed"] += "failed" in r.status
        seen["skipped"] += "skipped" in r.status
        seen["rerouted and done"] += any(r.status[f] == "done" and acts[f].bytes > 0
                                         for x in faults for f, u in x.usage.items() if u)

    collect()
    assert all(k >= 5 for k in seen.values()), seen
