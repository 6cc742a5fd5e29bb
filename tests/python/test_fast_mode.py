"""The fast mode (``Scenario.run(tolerance=...)``) against the exact engine, on random scenarios of
every kind it is for: incast, all-to-all-v, ECMP collisions, staggered arrivals, faults mid-run
and dependencies. It holds every finish time within the README's stated bound (2% at tolerance
1e-2, 0.2% at 1e-3) and the makespan within a tenth of that; bytes, routes and outcomes are the
exact engine's, and tolerance 0 is the exact engine itself."""

import numpy as np
import pytest

import fabricsim as fs

FAB = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
ETH = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="sn5600", nic="cx7")
# Tolerance -> (largest relative error of any finish time, of the makespan), as the README states.
BOUNDS = {1e-2: (0.02, 0.002), 1e-3: (0.002, 0.0002)}


def incast(rng):
    sc = fs.Scenario(FAB)
    n = 40
    sc.add_flows(rng.integers(0, 31, n), np.full(n, 31), rng.lognormal(15, 1.5, n))
    return sc


def all_to_all_v(rng):
    n = 32
    m = rng.lognormal(0, 1.0, (n, n)) * 2**20
    np.fill_diagonal(m, 0)
    sc = fs.Scenario(FAB)
    sc.add_collective("all_to_all", np.arange(n), sizes=m)
    return sc


def _pairs(rng, n):
    src = rng.integers(0, 32, n)
    return src, (src + rng.integers(1, 32, n)) % 32, rng.lognormal(16, 1.5, n)


def ecmp_collisions(rng):
    sc = fs.Scenario(ETH, routing="ecmp")
    sc.add_flows(*_pairs(rng, 300))
    return sc


def staggered(rng):
    sc = fs.Scenario(FAB)
    sc.add_flows(*_pairs(rng, 300), start_s=rng.exponential(2e-4, 300))
    return sc


def faults_mid_run(rng):
    sc = fs.Scenario(FAB)
    sc.add_flows(*_pairs(rng, 300))
    sc.add_fault(at_s=float(rng.uniform(1e-5, 1e-3)), links=[int(rng.integers(0, FAB.n_links))], factor=0.3)
    sc.add_fault(at_s=float(rng.uniform(1e-5, 1e-3)), nodes=[int(rng.integers(32, 64))],
                 until_s=float(rng.uniform(2e-3, 4e-3)))
    return sc


def dependencies(rng):
    sc = fs.Scenario(FAB)
    src, dst, size = _pairs(rng, 120)
    first = sc.add_flows(src[:60], dst[:60], size[:60])
    step = sc.add_delay("20us", after=first[:30].tolist())
    sc.add_flows(src[60:], dst[60:], size[60:], after=[step])
    sc.add_collective("all_reduce", np.arange(16), "64MiB", after=first[30:].tolist())
    return sc


KINDS = [incast, all_to_all_v, ecmp_collisions, staggered, faults_mid_run, dependencies]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_fast_mode_holds_every_finish_time_within_the_stated_bound(kind, seed):
    exact = kind(np.random.default_rng(seed)).run()
    done = exact.flows["status"].to_numpy(zero_copy_only=False) == "done"
    t_exact = exact.flows["finish_s"].to_numpy()
    assert done.any()
    for tol, (bound, makespan_bound) in BOUNDS.items():
        fast = kind(np.random.default_rng(seed)).run(tolerance=tol)
        assert fast.mode == "fast" and fast.tolerance == tol
        assert fast.flows["status"].to_pylist() == exact.flows["status"].to_pylist()
        t_fast = fast.flows["finish_s"].to_numpy()
        err = np.abs(t_fast[done] / t_exact[done] - 1)
        assert err.max() <= bound, f"{kind.__name__} seed {seed} tolerance {tol}: {err.max():.2%}"
        assert abs(fast.makespan_s / exact.makespan_s - 1) <= makespan_bound
        # Every flow still moves all its bytes over the same routes: the links carry the same
        # (where a fault reroutes a flow, the bytes it had left when it hit, within the bound).
        carried = exact.links["bytes_carried"].to_numpy()
        rtol = bound if kind is faults_mid_run else 1e-9
        assert np.allclose(fast.links["bytes_carried"].to_numpy(), carried, rtol=rtol)
        assert fast.n_instants <= exact.n_instants


def test_tolerance_zero_is_the_exact_engine_bit_for_bit():
    a = staggered(np.random.default_rng(7)).run()
    b = staggered(np.random.default_rng(7)).run(tolerance=0.0)
    assert b.mode == "exact" and b.tolerance == 0.0
    assert a.flows.equals(b.flows) and a.links.equals(b.links)


def test_fast_mode_is_deterministic():
    a = all_to_all_v(np.random.default_rng(3)).run(tolerance=1e-2)
    b = all_to_all_v(np.random.default_rng(3)).run(tolerance=1e-2)
    assert a.flows.equals(b.flows)


def test_fast_mode_takes_finishes_together_and_each_keeps_its_own_time():
    # Two flows of 1000 and 1001 bytes on one 1000 B/s link, sharing it: exact, the first ends at
    # 2 s and the second at 2.001 s. Within a 1e-3 window they are taken in one instant, each at
    # its own projected time (2 s and 2.002 s: the second's last byte, alone, would take 1 ms),
    # while each arrival keeps its exact time.
    topo = fs.Topology.from_arrays([0], [1], 1000.0)
    for tol, second in ((0.0, 2.001), (1e-3, 2.002)):
        sc = fs.Scenario(topo)
        sc.add_flows([0, 0], [1, 1], [1000.0, 1001.0])
        r = sc.run(tolerance=tol)
        assert r.flows["finish_s"].to_pylist() == pytest.approx([2.0, second], rel=1e-12)
        assert r.n_instants == (3 if tol == 0 else 2)


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan"), "fast", True, None])
def test_a_bad_tolerance_is_refused_naming_it(bad):
    sc = incast(np.random.default_rng(0))
    with pytest.raises(fs.InvalidArgumentError, match=r"tolerance must be a number in \[0, 1\)"):
        sc.run(tolerance=bad)
    assert sc.run().mode == "exact"


def test_a_flow_a_fault_cuts_off_is_never_taken_early_at_its_old_rate():
    # Found by a second reading: the window of the fault's own instant took a flow due just
    # after it, which was reported done at its old rate on a dead link and ran its dependent.
    topo = fs.Topology.from_arrays(src=[0, 1], dst=[1, 0], capacity_Bps=1e9, latency_s=0.0)
    for tol in (0.0, 1e-2):
        sc = fs.Scenario(topo)
        a = sc.add_flow(0, 1, 1.005e9)
        sc.add_flow(0, 1, 1e6, after=a)
        sc.add_fault(at_s=1.0, links=[0])
        rows = sc.run(tolerance=tol).flows.to_pylist()
        assert [r["status"] for r in rows] == ["failed", "skipped"], tol
        assert rows[0]["failed_s"] == 1.0


@pytest.mark.parametrize("seed", range(3))
def test_zero_latency_dependents_do_not_let_a_link_carry_more_than_its_capacity(seed):
    # Found by a second reading: a dependent ready at once cut the instant's re-solve short of
    # the finishes it had taken, which freed their bandwidth early: 300 flows on one 50 GB/s
    # link, each with a 1 kB flow after it, ended up to 0.85% before bytes / capacity.
    rng = np.random.default_rng(seed)
    topo = fs.Topology.from_arrays([0], [1], 50e9)
    sizes = rng.lognormal(16, 1.0, 300)
    for tol in (1e-2, 1e-3):
        sc = fs.Scenario(topo)
        ids = sc.add_flows(np.zeros(300, dtype=np.int64), np.ones(300, dtype=np.int64), sizes)
        for i in ids.tolist():
            sc.add_flow(0, 1, 1e3, after=i)
        res = sc.run(tolerance=tol)
        assert res.makespan_s >= (sizes.sum() + 300e3) / 50e9 * (1 - 1e-12)
