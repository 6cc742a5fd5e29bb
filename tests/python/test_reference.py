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
    assert max_min_reference([10, 20, 40], usage) == [5, 5, 15, 35]


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
    assert max_min_reference([100], [[(0, 1)], [(0, 1)]], [10, None]) == [10, 90]
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
        usage = [(draw(st.integers(0, n_links - 1)), draw(st.sampled_from([1, 2, 0.5])))
                 for _ in range(draw(st.integers(1, 3)))]
        acts.append(RefFlow(
            bytes=draw(st.one_of(st.just(0.0), magnitudes)) * draw(mantissa),
            usage=usage,
            latency_s=draw(st.sampled_from([0.0, 0.0, 1e-6, 0.25])),
            start_s=start,
            after=after,
            max_rate_Bps=draw(st.one_of(st.none(), magnitudes)),
        ))
    return cap, acts


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(small_sims())
def test_sim_float_matches_exact(sim):
    cap, acts = sim
    fl = simulate_reference(cap, acts)
    ex = simulate_reference(cap, acts, exact=True)
    for name in ("ready_s", "start_s", "finish_s"):
        a, b = getattr(fl, name), getattr(ex, name)
        assert all(_close(x, y) for x, y in zip(a, b)), (name, a, [float(y) for y in b])
    # Bytes conserved and capacity respected, exactly, in the exact run.
    moved = [Fraction(0)] * len(acts)
    for t0, t1, rates in ex.intervals:
        assert t1 > t0
        for link in range(len(cap)):
            load = sum(Fraction(c) * rates[f] for f in rates for l, c in acts[f].usage if l == link)
            assert load <= Fraction(cap[link])
        for f, r in rates.items():
            moved[f] += r * (t1 - t0)
            assert ex.start_s[f] <= t0 and t1 <= ex.finish_s[f]
    for i, a in enumerate(acts):
        if isinstance(a, RefFlow):
            assert moved[i] == Fraction(a.bytes)
            assert ex.start_s[i] == ex.ready_s[i] + Fraction(a.latency_s)
        deadline = max([Fraction(a.start_s)] + [ex.finish_s[d] for d in a.after])
        assert ex.ready_s[i] == deadline
