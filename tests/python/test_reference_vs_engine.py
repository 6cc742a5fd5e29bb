"""The Rust engine against the pure-Python reference (tests/python/reference.py) on random cases.

Random directed graphs (capacities over nine orders of magnitude, latencies including 0),
random flows with explicit routes (random walks, which may cross a link more than once) and
automatic (ECMP) routes, sizes including 0, start times, dependencies in a random topological
order (some through add_dependency, pointing to later ids), delays and rate caps. Every run also
goes through the invariants of helpers.check_invariants.

Examples: 300 (main) + 40 (larger) scenarios, 200 solver problems.
"""

from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fabricsim as fs
from helpers import Model, assert_close, compare_to_reference
from reference import max_min_reference_coo

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

mantissas = st.sampled_from([1.0, 1.25, 2.0, 3.0, 5.5, 7.0, 9.99])
capacities = st.builds(lambda e, m: m * 10.0 ** e, st.integers(3, 12), mantissas)
latencies = st.one_of(st.just(0.0), st.just(0.0),
                      st.sampled_from([1e-9, 5e-7, 1e-6, 2e-3, 0.1, 1.5]))
sizes = st.one_of(st.just(0.0), st.builds(lambda e, m: m * 10.0 ** e, st.integers(0, 12),
                                          mantissas))
start_times = st.one_of(st.just(0.0), st.just(0.0), st.integers(1, 40).map(lambda k: k / 8),
                        st.floats(0, 10, allow_subnormal=False), st.just(1e-6))
durations = st.one_of(st.just(0.0), st.integers(1, 16).map(lambda k: k / 4),
                      st.floats(0, 5, allow_subnormal=False))
rate_caps = st.one_of(st.none(), st.none(), capacities)
tags = st.one_of(st.none(), st.sampled_from(["a", "grad", "mlp.fwd"]))


def reachable(n, src, dst, start):
    seen = {start}
    todo = deque([start])
    while todo:
        u = todo.popleft()
        for s, d in zip(src, dst):
            if s == u and d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


@st.composite
def scenarios(draw, max_nodes=6, max_links=14, max_acts=10):
    n = draw(st.integers(2, max_nodes))
    src, dst = [], []
    for _ in range(draw(st.integers(1, max_links))):
        u = draw(st.integers(0, n - 1))
        v = draw(st.integers(0, n - 2))
        v = v + 1 if v >= u else v
        src.append(u)
        dst.append(v)
        if draw(st.integers(0, 5)) == 0:  # sometimes the reverse link too (a cable)
            src.append(v)
            dst.append(u)
    cap = [draw(capacities) for _ in src]
    lat = [draw(latencies) for _ in src]
    out = {u: [i for i, s in enumerate(src) if s == u] for u in range(n)}

    n_acts = draw(st.integers(1, max_acts))
    rank = draw(st.permutations(range(n_acts)))  # a random topological order
    acts = []
    for i in range(n_acts):
        earlier = [j for j in range(n_acts) if rank[j] < rank[i]]
        deps = sorted(set(draw(st.lists(st.sampled_from(earlier), max_size=3)))) if earlier else []
        common = dict(
            start_s=draw(start_times),
            after=[j for j in deps if j < i],
            later=[j for j in deps if j > i],   # added with add_dependency once j exists
            tag=draw(tags),
        )
        kind = draw(st.sampled_from(["route", "route", "auto", "auto", "delay"]))
        if kind == "route":
            first = draw(st.integers(0, len(src) - 1))
            walk = [first]
            for _ in range(draw(st.integers(0, 5))):
                nxt = out[dst[walk[-1]]]
                if not nxt:
                    break
                walk.append(draw(st.sampled_from(nxt)))
            while dst[walk[-1]] == src[first] and out[dst[walk[-1]]] and len(walk) < 10:
                walk.append(draw(st.sampled_from(out[dst[walk[-1]]])))
            if dst[walk[-1]] == src[first]:
                kind = "delay"
            else:
                acts.append(dict(kind="flow", src=src[first], dst=dst[walk[-1]], route=walk,
                                 bytes=draw(sizes), max_rate=draw(rate_caps), **common))
        if kind == "auto":
            s = draw(st.integers(0, n - 1))
            targets = sorted(reachable(n, src, dst, s) - {s})
            if targets:
                acts.append(dict(kind="flow", src=s, dst=draw(st.sampled_from(targets)),
                                 route=None, bytes=draw(sizes), max_rate=draw(rate_caps),
                                 **common))
            else:
                kind = "delay"
        if kind == "delay":
            acts.append(dict(kind="delay", duration=draw(durations), **common))
    seed = draw(st.integers(0, 2**32 - 1))
    return dict(n=n, src=src, dst=dst, cap=cap, lat=lat, acts=acts, seed=seed)


def build(spec):
    m = Model(spec["src"], spec["dst"], spec["cap"], spec["lat"], n_nodes=spec["n"],
              seed=spec["seed"])
    for a in spec["acts"]:
        if a["kind"] == "flow":
            m.flow(a["src"], a["dst"], a["bytes"], start_s=a["start_s"], after=a["after"],
                   route=a["route"], tag=a["tag"], max_rate_Bps=a["max_rate"])
        else:
            m.delay(a["duration"], start_s=a["start_s"], after=a["after"], tag=a["tag"])
    for i, a in enumerate(spec["acts"]):
        for j in a["later"]:
            m.dependency(i, j)
    return m


@settings(max_examples=300, **SETTINGS)
@given(scenarios())
def test_engine_matches_reference(spec):
    m = build(spec)
    res = m.run()               # invariants are checked inside
    compare_to_reference(m, res)


@settings(max_examples=40, **SETTINGS)
@given(scenarios(max_nodes=8, max_links=24, max_acts=30))
def test_engine_matches_reference_larger(spec):
    m = build(spec)
    res = m.run()
    compare_to_reference(m, res)


def test_generator_covers_the_cases():
    """The strategy really produces what the module docstring promises (not a vacuous test)."""
    from hypothesis import find

    find(scenarios(), lambda s: any(a["kind"] == "flow" and a["route"]
                                    and len(set(a["route"])) < len(a["route"]) for a in s["acts"]),
         settings=settings(database=None, derandomize=True, max_examples=2000))
    find(scenarios(), lambda s: any(a["later"] for a in s["acts"]),
         settings=settings(database=None, derandomize=True, max_examples=2000))
    find(scenarios(), lambda s: sum(a["kind"] == "flow" and a["route"] is None
                                    for a in s["acts"]) >= 3,
         settings=settings(database=None, derandomize=True, max_examples=2000))


# ---------------------------------------------------------------------- the solver alone


@st.composite
def solver_problems(draw):
    n_c = draw(st.integers(1, 6))
    n_f = draw(st.integers(1, 9))
    cap = [draw(capacities) for _ in range(n_c)]
    fi, ci, co = [], [], []
    with_caps = draw(st.booleans())
    caps = []
    for f in range(n_f):
        capped = with_caps and draw(st.booleans())
        caps.append(draw(capacities) if capped else np.inf)
        k = draw(st.integers(0 if capped else 1, 3))
        for _ in range(k):
            fi.append(f)
            ci.append(draw(st.integers(0, n_c - 1)))
            co.append(draw(st.one_of(st.sampled_from([0.5, 1.0, 2.0, 1.0, 0.25, 3.0]),
                                     st.floats(0.01, 4, allow_subnormal=False))))
    return cap, fi, ci, co, n_f, (caps if with_caps else None)


@settings(max_examples=200, **SETTINGS)
@given(solver_problems())
def test_max_min_rates_matches_reference(problem):
    cap, fi, ci, co, n_f, caps = problem
    got = fs.max_min_rates(
        np.asarray(cap, dtype=np.float64),
        np.asarray(fi, dtype=np.int64),
        np.asarray(ci, dtype=np.int64),
        np.asarray(co, dtype=np.float64),
        n_flows=n_f,
        rate_cap_Bps=None if caps is None else np.asarray(caps, dtype=np.float64),
    )
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == (n_f,)
    want = max_min_reference_coo(cap, fi, ci, co, n_f, caps)
    for f in range(n_f):
        assert_close(got[f], want[f], f"rate of flow {f}")


def test_max_min_rates_hand_solved():
    # Link 0 (100): flow 0 twice (coefficient 2) + flow 1 at 0.5; link 1 (100): flow 1 at 0.5,
    # flow 2 at 1, capped at 10. Level L: link 0 saturates at 2.5 L = 100 -> L = 40 (flows 0, 1);
    # flow 2 is capped at 10 first. Link 1: 0.5*40 + 10 = 30 <= 100.
    got = fs.max_min_rates(np.array([100.0, 100.0]), np.array([0, 1, 1, 2]),
                           np.array([0, 0, 1, 1]), np.array([2.0, 0.5, 0.5, 1.0]),
                           n_flows=3, rate_cap_Bps=np.array([np.inf, np.inf, 10.0]))
    np.testing.assert_allclose(got, [40.0, 40.0, 10.0], rtol=1e-12)
    # Without the cap flow 2 takes the rest of link 1: 100 - 20 = 80.
    got = fs.max_min_rates(np.array([100.0, 100.0]), np.array([0, 1, 1, 2]),
                           np.array([0, 0, 1, 1]), np.array([2.0, 0.5, 0.5, 1.0]), n_flows=3)
    np.testing.assert_allclose(got, [40.0, 40.0, 80.0], rtol=1e-12)
