"""Bad input: the documented exception class, a message naming the bad value, and a scenario
that is still usable after a caught error (no half-added activity, ids stay dense)."""

import math
import re

import numpy as np
import pytest

import fabricsim as fs
from fabricsim.exceptions import (
    DependencyCycleError,
    FabricsimError,
    InternalError,
    InvalidArgumentError,
    SameEndpointsError,
    UnknownActivityError,
    UnknownLinkError,
    UnknownNodeError,
    UnreachableError,
    ZeroCapacityPathError,
)
from helpers import Model


def test_exception_tree():
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidArgumentError, FabricsimError)
    for cls in (UnknownNodeError, UnknownLinkError, UnknownActivityError):
        assert issubclass(cls, InvalidArgumentError)
    for cls in (SameEndpointsError, UnreachableError, ZeroCapacityPathError,
                DependencyCycleError):
        assert issubclass(cls, FabricsimError)
    assert issubclass(InternalError, RuntimeError)
    assert issubclass(InternalError, FabricsimError)


def line():
    """0 -> 1 -> 2 (links 0, 1) and 3 -> 2 (link 2); node 4 isolated; link 3: 2 -> 3 at 0 B/s."""
    return Model([0, 1, 3, 2], [1, 2, 2, 3], [100.0, 100.0, 100.0, 0.0], [0.0, 0.1, 0.0, 0.0],
                 n_nodes=5)


def still_usable(m):
    """After a caught error: the next id is the next dense one and a run works."""
    n_before = len(m.acts)
    fid = m.flow(0, 2, 100.0)
    assert fid == n_before
    res = m.run()
    assert res.flows.num_rows == len(m.flow_ids)
    return res


def message(excinfo):
    return str(excinfo.value).lower()


# ------------------------------------------------------------------ topology construction


@pytest.mark.parametrize("column", ["capacity", "latency"])
@pytest.mark.parametrize("bad,text", [(-2.5, "-2.5"), (math.nan, "nan"), (math.inf, "inf")])
def test_from_arrays_bad_values(column, bad, text):
    cap = np.array([1.0, 2.0])
    lat = np.array([0.0, 0.0])
    (cap if column == "capacity" else lat)[1] = bad
    with pytest.raises(InvalidArgumentError) as e:
        fs.Topology.from_arrays(np.array([0, 1]), np.array([1, 0]), cap, lat)
    assert text in message(e)


def test_from_arrays_wrong_shapes():
    with pytest.raises(InvalidArgumentError):
        fs.Topology.from_arrays(np.array([0, 1]), np.array([1]), np.array([1.0, 1.0]),
                                np.array([0.0, 0.0]))
    with pytest.raises(InvalidArgumentError):
        fs.Topology.from_arrays(np.array([0]), np.array([1]), np.array([1.0, 1.0]),
                                np.array([0.0]))


def test_from_arrays_node_out_of_range():
    with pytest.raises(InvalidArgumentError) as e:
        fs.Topology.from_arrays(np.array([0]), np.array([7]), np.array([1.0]), np.array([0.0]),
                                n_nodes=3)
    assert "7" in message(e)


# ------------------------------------------------------------------ flows


@pytest.mark.parametrize("src,dst,bad", [(9, 1, 9), (0, 12, 12), (5, 0, 5), (-1, 1, -1)])
def test_unknown_node(src, dst, bad):
    m = line()
    with pytest.raises(UnknownNodeError) as e:
        m.sc.add_flow(src, dst, 10.0)
    assert str(bad) in message(e)
    still_usable(m)


def test_same_endpoints():
    m = line()
    with pytest.raises(SameEndpointsError) as e:
        m.sc.add_flow(3, 3, 10.0)
    assert "3" in message(e)
    still_usable(m)


@pytest.mark.parametrize("bad,text", [(-2.5, "-2.5"), (math.nan, "nan"), (math.inf, "inf")])
def test_bad_bytes(bad, text):
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_flow(0, 1, bad)
    assert text in message(e)
    still_usable(m)


@pytest.mark.parametrize("bad,text", [(-0.75, "-0.75"), (math.nan, "nan"), (math.inf, "inf")])
def test_bad_start_s(bad, text):
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_flow(0, 1, 10.0, start_s=bad)
    assert text in message(e)
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_delay(1.0, start_s=bad)
    assert text in message(e)
    still_usable(m)


@pytest.mark.parametrize("bad,text", [(-3.5, "-3.5"), (math.nan, "nan")])
def test_bad_max_rate(bad, text):
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_flow(0, 1, 10.0, max_rate_Bps=bad)
    assert text in message(e)
    still_usable(m)


@pytest.mark.parametrize("bad,text", [(-1.5, "-1.5"), (math.nan, "nan"), (math.inf, "inf")])
def test_bad_duration(bad, text):
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_delay(bad)
    assert text in message(e)
    still_usable(m)


def test_zero_capacity_path():
    m = line()
    # 1 -> 2 -> 3 crosses link 3 (2 -> 3) whose capacity is 0.
    with pytest.raises(ZeroCapacityPathError) as e:
        m.sc.add_flow(1, 3, 10.0, route=[1, 3])
        m.sc.run()
    assert "3" in message(e)


def test_zero_capacity_path_rejected_before_anything_runs():
    # Whether add_flow or run() rejects it, a scenario with such a flow never produces a result.
    m = line()
    try:
        m.sc.add_flow(2, 3, 10.0, route=[3])
    except ZeroCapacityPathError:
        still_usable(m)
        return
    with pytest.raises(ZeroCapacityPathError):
        m.sc.run()


def test_unreachable():
    m = line()
    with pytest.raises(UnreachableError) as e:
        m.sc.add_flow(2, 4, 10.0)     # node 4 has no link at all
    assert "4" in message(e)
    with pytest.raises(UnreachableError) as e:
        m.sc.add_flow(1, 0, 10.0)     # links only go forwards
    assert "1" in message(e) and "0" in message(e)
    still_usable(m)


def test_route_with_unknown_link():
    m = line()
    with pytest.raises(UnknownLinkError) as e:
        m.sc.add_flow(0, 2, 10.0, route=[0, 99])
    assert "99" in message(e)
    still_usable(m)


@pytest.mark.parametrize("route", [
    [1],        # starts at 1, not at src 0
    [0],        # ends at 1, not at dst 2
    [0, 2],     # 0 -> 1, then 3 -> 2: not connected
    [],         # empty
])
def test_route_not_a_path(route):
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_flow(0, 2, 10.0, route=route)
    assert route == [] or any(str(link) in message(e) for link in route)
    still_usable(m)


# ------------------------------------------------------------------ dependencies


def test_dependency_on_unknown_activity():
    m = line()
    m.flow(0, 1, 10.0)
    with pytest.raises(UnknownActivityError) as e:
        m.sc.add_flow(0, 1, 10.0, after=[42])
    assert "42" in message(e)
    with pytest.raises(UnknownActivityError) as e:
        m.sc.add_delay(1.0, after=[0, 17])
    assert "17" in message(e)
    with pytest.raises(UnknownActivityError) as e:
        m.sc.add_dependency(0, 42)
    assert "42" in message(e)
    with pytest.raises(UnknownActivityError) as e:
        m.sc.add_dependency(43, 0)
    assert "43" in message(e)
    still_usable(m)


def test_dependency_cycle():
    m = line()
    a = m.flow(0, 1, 10.0)
    b = m.delay(1.0, after=[a])
    c = m.flow(0, 2, 10.0, after=[b])
    with pytest.raises(DependencyCycleError) as e:
        m.sc.add_dependency(a, c)   # a after c after b after a
        m.sc.run()
    assert any(str(x) in message(e) for x in (a, b, c))


def test_self_dependency_is_a_cycle():
    m = line()
    a = m.delay(1.0)
    m.delay(1.0, after=[a])
    with pytest.raises(DependencyCycleError):
        m.sc.add_dependency(a, a)
        m.sc.run()


# ------------------------------------------------------------------ the solver alone


def test_max_min_rates_bad_input():
    cap = np.array([1.0, 1.0])
    fi, ci, co = np.array([0, 1]), np.array([0, 1]), np.array([1.0, 1.0])
    with pytest.raises(InvalidArgumentError) as e:
        fs.max_min_rates(np.array([1.0, -2.5]), fi, ci, co, n_flows=2)
    assert "-2.5" in message(e)
    with pytest.raises(InvalidArgumentError) as e:
        fs.max_min_rates(cap, fi, np.array([0, 5]), co, n_flows=2)
    assert "5" in message(e)
    with pytest.raises(InvalidArgumentError):
        fs.max_min_rates(cap, fi, ci, np.array([1.0]), n_flows=2)
    with pytest.raises(InvalidArgumentError) as e:
        fs.max_min_rates(cap, fi, ci, np.array([1.0, math.nan]), n_flows=2)
    assert "nan" in message(e)
    with pytest.raises(InvalidArgumentError) as e:
        fs.max_min_rates(cap, np.array([0, 6]), ci, co, n_flows=2)
    assert "6" in message(e)



# ------------------------------------------------------------------ faults


@pytest.mark.parametrize("bad", [1.5, 5, True])
def test_fault_factor_is_a_fraction_of_capacity(bad):
    # 0 is down, between is degraded, 1 is full capacity (a repair); more would be a faster link.
    m = line()
    expected = rf"factor must be a number in \[0, 1\].*got {bad!r}"
    with pytest.raises(InvalidArgumentError, match=expected):
        m.sc.add_fault(at_s=1.0, links=[0], factor=bad)
    with pytest.raises(InvalidArgumentError, match=expected):
        fs.hgx_h100().fail(links=[0], factor=bad)
    assert m.sc._core.n_faults == 0
    m.sc.add_fault(at_s=1.0, links=[0], factor=1)   # the bounds themselves are fine
    m.sc.add_fault(at_s=2.0, links=[0], factor=0)
    assert m.sc._core.n_faults == 2


# ------------------------------------------------------------------ integer ids


def _id_entry_points():
    """(label, call taking one bad id, the parameter the error must name)."""
    def fault_links(m, bad):
        m.sc.add_fault(at_s=1.0, links=[0, bad])

    return [
        ("add_flow src", lambda m, bad: m.sc.add_flow(bad, 2, 10.0), "src"),
        ("add_flow after", lambda m, bad: m.sc.add_flow(0, 2, 10.0, after=[0, bad]), "after[1]"),
        ("add_flow route", lambda m, bad: m.sc.add_flow(0, 2, 10.0, route=[0, bad]), "route[1]"),
        ("add_flows dst", lambda m, bad: m.sc.add_flows([0, 0], [2, bad], 10.0), "dst[1]"),
        ("add_flows routes", lambda m, bad: m.sc.add_flows([0], [2], 10.0, routes=[[0, bad]]), "routes[0][1]"),
        ("add_flows after", lambda m, bad: m.sc.add_flows([0], [2], 10.0, after=[bad]), "after[0]"),
        ("add_delay after", lambda m, bad: m.sc.add_delay(1.0, after=bad), "after"),
        ("add_dependency", lambda m, bad: m.sc.add_dependency(0, bad), "after_id"),
        ("route_of", lambda m, bad: m.sc.route_of(bad), "flow_id"),
        ("usage_of", lambda m, bad: m.sc.usage_of(bad), "flow_id"),
        ("add_fault links", fault_links, "links[1]"),
        ("add_fault nodes", lambda m, bad: m.sc.add_fault(at_s=1.0, nodes=[bad]), "nodes[0]"),
        ("route", lambda m, bad: m.topo.route(0, bad), "dst"),
        ("from_arrays", lambda m, bad: fs.Topology.from_arrays([0, bad], [1, 0], 1.0), "src[1]"),
        ("max_min_rates", lambda m, bad: fs.max_min_rates([1.0], [0, bad], [0, 0]), "flow_index[1]"),
        ("add_collective", lambda m, bad: m.sc.add_collective("all_gather", [0, bad], 8.0), "ranks[1]"),
    ]


@pytest.mark.parametrize("bad", [0.0, 1.5, "0", True, np.bool_(False), 2**70, None])
@pytest.mark.parametrize("label,call,name", _id_entry_points(), ids=lambda x: x if isinstance(x, str) else "")
def test_ids_are_integers(label, call, name, bad):
    # Floats were truncated (0.5 -> 0), strings parsed, bools taken as 0 and 1, and ints beyond
    # 64 bits gave an OverflowError naming nothing.
    m = line()
    m.flow(0, 2, 10.0)
    with pytest.raises(InvalidArgumentError) as e:
        call(m, bad)
    assert re.match(rf"{re.escape(name)} must (be an integer|hold integers)", str(e.value)), str(e.value)
    still_usable(m)


@pytest.mark.parametrize("bad", [np.array([2**63 + 5], dtype=np.uint64), np.array([0.0]), np.array([True])])
def test_id_arrays_of_other_dtypes_or_beyond_int64_are_refused(bad):
    m = line()
    a = m.flow(0, 2, 10.0)
    with pytest.raises(InvalidArgumentError, match=r"after(\[0\])? must"):
        m.sc.add_flow(0, 2, 10.0, after=bad)
    # NumPy integers of any width are ids.
    for dtype in (np.int8, np.uint16, np.int32, np.uint64):
        m.sc.add_flow(dtype(0), dtype(2), 10.0, after=np.array([a], dtype=dtype), route=np.array([0, 1], dtype=dtype))
        m.sc.add_flows(np.array([0], dtype=dtype), np.array([2], dtype=dtype), 10.0, after=dtype(a))
    m.sc.add_dependency(np.int16(1), np.uint8(a))
    assert m.sc.route_of(np.uint32(1)) == [0, 1]


@pytest.mark.parametrize("call,name", [
    (lambda: fs.hgx_h100().route(0, 1, key=-1), "key"),
    (lambda: fs.hgx_h100().route(0, 1, seed=2**64), "seed"),
    (lambda: fs.max_min_rates([1.0], [0], [0], n_flows=2**40), "n_flows"),
    (lambda: fs.hgx_h100().fail(planes=[0.0]), "planes[0]"),
    (lambda: fs.hgx_h100().names_of([1, 2.5]), "nodes[1]"),
])
def test_keys_seeds_and_counts_are_integers_in_range(call, name):
    with pytest.raises(InvalidArgumentError, match=rf"{re.escape(name)} must be an integer in \["):
        call()


# ------------------------------------------------------------------ run options


@pytest.mark.parametrize("option,bad", [
    ("progress", 5), ("progress", "yes"), ("progress", None),
    ("record_rates", 1), ("verify_rates", "no"),
])
def test_run_options_are_checked_before_running(option, bad):
    # A short run never reports progress, so progress=5 used to pass unnoticed.
    m = line()
    m.flow(0, 2, 10.0)
    with pytest.raises(InvalidArgumentError, match=rf"{option} must be True.*got {type(bad).__name__} {bad!r}"):
        m.sc.run(**{option: bad})
    still_usable(m)


# ------------------------------------------------------------------ routes with a loop


def loop_line():
    """0 <-> 1 -> 2: links 0 (0 -> 1), 1 (1 -> 0), 2 (1 -> 2)."""
    return Model([0, 1, 1], [1, 0, 2], [100.0, 100.0, 100.0], [0.0, 0.0, 0.0])


def test_route_crossing_a_link_twice_is_refused():
    # 0 -> 1 -> 0 -> 1 -> 2 crosses link 0 twice: it was accepted, and the flow put twice its
    # rate on link 0 (and waited its latency twice).
    m = loop_line()
    with pytest.raises(InvalidArgumentError, match=r"^route crosses link 0 twice, at positions 0 and 2: "
                       r"a route from node 0 to node 2 must cross each link at most once \(no loop\)$"):
        m.sc.add_flow(0, 2, 10.0, route=[0, 1, 0, 2])
    assert m.sc.n_activities == 0
    # Node 1 twice over distinct links (a hairpin) crosses no link twice: still a route.
    assert m.flow(1, 2, 10.0, route=[1, 0, 2]) == 0
    still_usable(m)


@pytest.mark.parametrize("form", ["lists", "rows"])
def test_add_flows_route_crossing_a_link_twice_is_refused(form):
    # The same check in the vectorised path, naming the element; nothing is added.
    m = loop_line()
    routes = [[0, 2], [1, 0, 2], [0, 1, 0, 1, 0, 2]]
    if form == "rows":
        routes = (np.array([0, 2, 5, 11]), np.concatenate([np.array(r) for r in routes]))
    with pytest.raises(InvalidArgumentError, match=r"^element 2: route crosses link 0 twice, at positions 0 and 2: "):
        m.sc.add_flows([0, 1, 0], [2, 2, 2], 10.0, routes=routes)
    assert m.sc.n_activities == 0
    still_usable(m)
