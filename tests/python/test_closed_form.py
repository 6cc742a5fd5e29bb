"""Hand-solved cases through the Python API; every expected number is worked out in a comment.

Each run also goes through helpers.check_invariants (Model.run).
"""

import pytest

from helpers import Model, assert_close, compare_to_reference, flow_segments


def one_link(capacity=100.0, latency=0.0):
    """Nodes 0 -> 1 over link 0."""
    return Model([0], [1], [capacity], [latency])


def times(res, fid, cols=("ready_s", "start_s", "finish_s")):
    t = res.flows.filter(res.flows.column("flow_id").to_numpy() == fid)
    assert t.num_rows == 1
    return tuple(t.column(c)[0].as_py() for c in cols)


def finish(res, fid):
    return times(res, fid, ("finish_s",))[0]


def assert_segments(got, want):
    assert len(got) == len(want), (got, want)
    for (a0, a1, ar), (b0, b1, br) in zip(got, want):
        assert_close(a0, b0, "segment start")
        assert_close(a1, b1, "segment end")
        assert_close(ar, br, "segment rate")


def test_single_flow_alone():
    m = one_link(capacity=8e9)
    f = m.flow(0, 1, 2e9)
    res = m.run()
    assert times(res, f) == (0.0, 0.0, pytest.approx(0.25, rel=1e-12))


def test_two_flows_share_one_link():
    # C = 100 B/s. Both at 50 until A (100 B) ends at t = 2; B has 300 - 100 = 200 B left,
    # alone at 100 B/s: ends at 4.
    m = one_link()
    a = m.flow(0, 1, 100.0)
    b = m.flow(0, 1, 300.0)
    res = m.run()
    assert_close(finish(res, a), 2.0, "A")
    assert_close(finish(res, b), 4.0, "B")
    segs = flow_segments(m, res)
    assert_segments(segs[a], [(0, 2, 50)])
    assert_segments(segs[b], [(0, 2, 50), (2, 4, 100)])
    mean = dict(zip(res.flows.column("flow_id").to_pylist(),
                    res.flows.column("mean_rate_Bps").to_pylist()))
    assert_close(mean[a], 50.0, "mean rate A")
    assert_close(mean[b], 75.0, "mean rate B = 300 B / 4 s")
    links = res.links.to_pylist()[0]
    assert_close(links["bytes_carried"], 400.0, "bytes carried")
    assert_close(links["busy_s"], 4.0, "busy")
    assert_close(links["peak_utilization"], 1.0, "peak")
    assert_close(links["mean_utilization"], 1.0, "mean = 400 / (100 * 4)")


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_parking_lot_symmetric(n):
    # Chain 0 -> 1 -> ... -> n, every link C = 10. The long flow crosses all n links; one short
    # flow per link. Every link carries two flows: all at C/2 = 5. Shorts (S = 10 B) end at 2;
    # the long one (30 B) has 20 B left, alone at 10 B/s: ends at 4.
    m = Model(list(range(n)), list(range(1, n + 1)), [10.0] * n, [0.0] * n)
    long = m.flow(0, n, 30.0)
    shorts = [m.flow(i, i + 1, 10.0) for i in range(n)]
    res = m.run()
    for s in shorts:
        assert_close(finish(res, s), 2.0, f"short {s}")
    assert_close(finish(res, long), 4.0, "long")
    assert_segments(flow_segments(m, res)[long], [(0, 2, 5), (2, 4, 10)])


def test_parking_lot_staggered():
    # Links 10, 20, 40 B/s in a chain 0 -> 1 -> 2 -> 3. Long flow (20 B) over all three;
    # shorts s0 (5 B), s1 (30 B), s2 (140 B), one per link.
    # [0, 1]: link 0 saturates first at level 5 (long, s0); s1 = 20 - 5 = 15; s2 = 40 - 5 = 35.
    #   s0 ends at 1. Left: long 15, s1 15, s2 105.
    # [1, 2.5]: link 0 alone allows 10, link 1 allows 20/2 = 10: long = s1 = 10, s2 = 30.
    #   long, s1 end at 2.5. s2 has 105 - 45 = 60 left.
    # [2.5, 4]: s2 alone at 40: ends at 4.
    m = Model([0, 1, 2], [1, 2, 3], [10.0, 20.0, 40.0], [0.0] * 3)
    long = m.flow(0, 3, 20.0)
    s0 = m.flow(0, 1, 5.0)
    s1 = m.flow(1, 2, 30.0)
    s2 = m.flow(2, 3, 140.0)
    res = m.run()
    for f, t in [(long, 2.5), (s0, 1.0), (s1, 2.5), (s2, 4.0)]:
        assert_close(finish(res, f), t, f"flow {f}")
    segs = flow_segments(m, res)
    assert_segments(segs[long], [(0, 1, 5), (1, 2.5, 10)])
    assert_segments(segs[s2], [(0, 1, 35), (1, 2.5, 30), (2.5, 4, 40)])
    compare_to_reference(m, res)


def test_rate_cap():
    # C = 100. A (40 B) capped at 20 B/s, B (400 B) uncapped: A = 20, B = 80. A ends at 2;
    # B has 400 - 160 = 240 B left at 100 B/s: ends at 4.4.
    m = one_link()
    a = m.flow(0, 1, 40.0, max_rate_Bps=20.0)
    b = m.flow(0, 1, 400.0)
    res = m.run()
    assert_close(finish(res, a), 2.0, "A")
    assert_close(finish(res, b), 4.4, "B")
    assert_segments(flow_segments(m, res)[b], [(0, 2, 80), (2, 4.4, 100)])


def test_cap_above_fair_share_is_inactive():
    # Cap 60 > fair share 50: both at 50, both 100 B end at 2.
    m = one_link()
    a = m.flow(0, 1, 100.0, max_rate_Bps=60.0)
    b = m.flow(0, 1, 100.0)
    res = m.run()
    assert_close(finish(res, a), 2.0, "A")
    assert_close(finish(res, b), 2.0, "B")


def test_staggered_starts():
    # C = 100. A (300 B) from 0 alone: 100 B by t = 1. B (100 B) starts at 1: both at 50.
    # B ends at 1 + 100/50 = 3; A then has 200 - 100 = 100 B left at 100 B/s: ends at 4.
    m = one_link()
    a = m.flow(0, 1, 300.0)
    b = m.flow(0, 1, 100.0, start_s=1.0)
    res = m.run()
    assert times(res, b) == (1.0, 1.0, pytest.approx(3.0, rel=1e-12))
    assert_close(finish(res, a), 4.0, "A")
    assert_segments(flow_segments(m, res)[a], [(0, 1, 100), (1, 3, 50), (3, 4, 100)])


def test_latency_uses_no_bandwidth():
    # 0 -(100 B/s, 0.25 s)-> 1 -(50 B/s, 0.5 s)-> 2. Both flows become ready at 1.
    # X: 0 -> 1, 200 B, starts at 1.25. Y: 0 -> 2, 100 B, starts at 1 + 0.75 = 1.75.
    # [1.25, 1.75]: X alone at 100 (50 B). Then both on link 0: level 50 saturates link 0
    #   (and link 1 for Y): X = Y = 50. Y ends at 1.75 + 2 = 3.75; X has 150 - 100 = 50 B
    #   left, alone at 100: ends at 4.25.
    m = Model([0, 1], [1, 2], [100.0, 50.0], [0.25, 0.5])
    x = m.flow(0, 1, 200.0, start_s=1.0)
    y = m.flow(0, 2, 100.0, start_s=1.0)
    res = m.run()
    assert times(res, x)[:2] == (1.0, 1.25)
    assert times(res, y)[:2] == (1.0, 1.75)
    assert_close(finish(res, y), 3.75, "Y")
    assert_close(finish(res, x), 4.25, "X")


def test_zero_byte_flow_finishes_at_transfer_start():
    m = one_link(latency=0.125)
    f = m.flow(0, 1, 0.0, start_s=2.0)
    res = m.run()
    assert times(res, f) == (2.0, 2.125, 2.125)
    assert res.flows.column("mean_rate_Bps")[0].as_py() == 0.0


def test_delay_chain_with_dependencies():
    # One link: 100 B/s, latency 0.5 s.
    # 0: delay 1 s, made to wait for 5 through add_dependency (a later id).
    # 1: delay 2 s                               ready 0    finish 2
    # 2: flow 100 B after 1                      ready 2    start 2.5   finish 3.5
    # 3: delay 1 s after 2 (add_dependency)      ready 3.5  finish 4.5
    # 4: flow 0 B, start_s 5, after 3            ready 5    start 5.5   finish 5.5
    # 5: delay 0 s after 4 and 1                 ready 5.5  finish 5.5
    # 0:                                         ready 5.5  finish 6.5
    m = one_link(latency=0.5)
    d0 = m.delay(1.0, tag="late")
    d1 = m.delay(2.0)
    f2 = m.flow(0, 1, 100.0, after=[d1])
    d3 = m.delay(1.0)
    m.dependency(d3, f2)
    f4 = m.flow(0, 1, 0.0, start_s=5.0, after=[d3])
    d5 = m.delay(0.0, after=[f4, d1])
    m.dependency(d0, d5)
    res = m.run()
    assert times(res, f2) == (2.0, 2.5, pytest.approx(3.5, rel=1e-12))
    assert times(res, f4) == (5.0, 5.5, 5.5)
    delays = {r["delay_id"]: (r["ready_s"], r["finish_s"]) for r in res.delays.to_pylist()}
    assert delays == {d0: (5.5, 6.5), d1: (0.0, 2.0), d3: (3.5, 4.5), d5: (5.5, 5.5)}
    assert res.delays.column("tag").to_pylist() == ["late", None, None, None]


def test_coupled_flow_crossing_a_link_twice():
    # Link 0: 0 -> 1 (100 B/s), link 1: 1 -> 0 (1000 B/s). A is a coupled flow of edges
    # 0 -> 1, 1 -> 0, 0 -> 1 (a route may not cross a link twice; a pipelined collective's
    # edges do): coefficient 2 on link 0. B crosses link 0 once.
    # Link 0: 2 L + L = 100 -> L = 100/3 for both. B (50 B) ends at 1.5; A has
    # 100 - 50 = 50 B left, alone: 2 r = 100 -> 50 B/s: ends at 2.5.
    m = Model([0, 1], [1, 0], [100.0, 1000.0], [0.0, 0.0])
    a = m.coupled([(0, 1, 1.0), (1, 0, 1.0), (0, 1, 1.0)], 100.0, usage=[(0, 2.0), (1, 1.0)])
    b = m.flow(0, 1, 50.0, route=[0])
    res = m.run()
    assert_close(finish(res, a), 2.5, "A")
    assert_close(finish(res, b), 1.5, "B")
    assert_segments(flow_segments(m, res)[a], [(0, 1.5, 100 / 3), (1.5, 2.5, 50)])
    carried = res.links.column("bytes_carried").to_pylist()
    assert_close(carried[0], 250.0, "link 0: 2 * 100 + 50")
    assert_close(carried[1], 100.0, "link 1: 100")


def test_simultaneous_finishes_handled_together():
    # Three equal flows end together at 3 (each 100 B at 100/3); C starts after A and B.
    m = one_link()
    a = m.flow(0, 1, 100.0)
    b = m.flow(0, 1, 100.0)
    c = m.flow(0, 1, 100.0)
    d = m.flow(0, 1, 100.0, after=[a, b, c])
    res = m.run()
    for f in (a, b, c):
        assert_close(finish(res, f), 3.0, f"flow {f}")
    assert times(res, d)[0] == pytest.approx(3.0, rel=1e-12)
    assert_close(finish(res, d), 4.0, "D")


def test_add_flows_vectorised():
    # Three flows on one link through add_flows: ids dense, equal share, same as add_flow.
    import numpy as np

    m = one_link(capacity=300.0)
    m.flow(0, 1, 0.0)  # id 0, so that add_flows must continue the id space
    ids = m.flows(np.array([0, 0, 0]), np.array([1, 1, 1]), np.array([100.0, 200.0, 300.0]),
                  start_s=np.array([0.0, 0.0, 0.5]), tag="v")
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int64
    assert ids.tolist() == [1, 2, 3]
    res = m.run()
    # [0, 0.5]: flows 1, 2 at 150 each (75 B each). Then three at 100: flow 1 (25 B left) ends
    # at 0.75; flows 2, 3 at 150: flow 2 has 125 - 25 = 100 B left -> ends at 0.75 + 2/3;
    # flow 3 has 300 - 25 - 100 = 175 B left at 17/12 s, alone at 300 B/s: ends at 2.
    got = res.flows.column("finish_s").to_pylist()
    for g, w in zip(got, [0.0, 0.75, 0.75 + 2 / 3, 2.0]):
        assert_close(g, w, "add_flows finish")
    assert res.flows.column("tag").to_pylist() == [None, "v", "v", "v"]
    compare_to_reference(m, res)


def test_transfer_starting_inside_an_instant_does_not_end_before_it_starts():
    # A delay ends at 1000 s; the flow after it waits 1e-9 s of latency, which is within the
    # 1e-12 relative resolution of that instant (1000 * 1e-12 = 1e-9), then moves 1e-3 B at
    # 1e9 B/s (1e-12 s). Its transfer starts at 1000 + 1e-9 and cannot end before that.
    m = Model([0], [1], [1e9], [1e-9])
    d = m.delay(1000.0)
    f = m.flow(0, 1, 1e-3, after=[d])
    res = m.run()
    ready, start, fin = times(res, f)
    assert ready == 1000.0
    assert start == 1000.0 + 1e-9
    assert fin >= start, f"finish_s {fin!r} < start_s {start!r}"
    compare_to_reference(m, res)


def test_finishes_handled_together_are_recorded_together():
    # C = 1000 B/s, three flows at 1000/3 each. A (1000 B) ends at 3 s; B is 1e-13 relative
    # larger, so it ends within the 1e-12 resolution of that instant and is handled with it:
    # C's rate goes to 1000 B/s at that instant, so B must be over then too (otherwise the
    # tables say the link carried 1000/3 + 1000 B/s until B's own finish).
    m = one_link(capacity=1000.0)
    a = m.flow(0, 1, 1000.0)
    b = m.flow(0, 1, 1000.0 * (1 + 1e-13))
    c = m.flow(0, 1, 3000.0)
    res = m.run()
    assert_close(finish(res, a), 3.0, "A")
    assert finish(res, b) == finish(res, a), "B is handled at A's instant"
    # C: 1000 B by 3 s, then 2000 B at 1000 B/s.
    assert_close(finish(res, c), 5.0, "C")
    compare_to_reference(m, res)


def test_group_census_through_the_api():
    # Line 0 -> 1 -> 2, link 0 of 100 B/s and link 1 of 150 B/s. X (0 -> 2, both links) and Y
    # (0 -> 1) split link 0 at 50 while Z (1 -> 2) takes link 1's other 100: three rate changes,
    # two groups (link 0's, link 1's). Y's 50 B end at t = 1; X rises onto link 1 and shares it
    # with Z at 75: two changes, one group, X's bottleneck moves. Z's 900 B left end 12 s
    # later; alone, X is held by link 0 again at 100: one change, one group, one move.
    m = Model([0, 1], [1, 2], [100.0, 150.0], [0.0, 0.0])
    x = m.flow(0, 2, 1000.0)
    m.flow(0, 1, 50.0)
    z = m.flow(1, 2, 1000.0)
    res = m.run()
    assert_close(finish(res, z), 13.0, "Z: 100 B at 100, then 900 B at 75")
    assert_close(finish(res, x), 13.5, "X: 50 + 900 B by t = 13, its last 50 B at 100")
    assert (res.n_rate_changes, res.n_group_share_changes, res.n_bottleneck_moves) == (6, 4, 2)
