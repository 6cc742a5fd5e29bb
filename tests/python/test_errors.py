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
    ScenarioTooLargeError,
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
    name = "capacity_bps" if column == "capacity" else "latency_s"
    assert message(e) == f"{name} of link 1 must be a finite number >= 0, got {text}"


def test_from_arrays_wrong_shapes():
    with pytest.raises(InvalidArgumentError, match=r"^src and dst must have one length, got 2 and 1$"):
        fs.Topology.from_arrays(np.array([0, 1]), np.array([1]), np.array([1.0, 1.0]),
                                np.array([0.0, 0.0]))
    with pytest.raises(InvalidArgumentError,
                       match=r"^capacity_Bps must be one value or a 1-D sequence of 1, got shape \(2,\)$"):
        fs.Topology.from_arrays(np.array([0]), np.array([1]), np.array([1.0, 1.0]),
                                np.array([0.0]))


def test_from_arrays_node_out_of_range():
    with pytest.raises(InvalidArgumentError) as e:
        fs.Topology.from_arrays(np.array([0]), np.array([7]), np.array([1.0]), np.array([0.0]),
                                n_nodes=3)
    assert message(e) == "dst[0] = 7 is out of range: expected 0 <= value < 3"


# ------------------------------------------------------------------ flows


@pytest.mark.parametrize("src,dst,named", [(9, 1, "src node 9"), (0, 12, "dst node 12"), (5, 0, "src node 5"),
                                            (-1, 1, "src node -1")])
def test_unknown_node(src, dst, named):
    m = line()
    with pytest.raises(UnknownNodeError) as e:
        m.sc.add_flow(src, dst, 10.0)
    assert message(e) == f"{named} does not exist: node ids run from 0 to 4"
    still_usable(m)


def test_same_endpoints():
    m = line()
    with pytest.raises(SameEndpointsError) as e:
        m.sc.add_flow(3, 3, 10.0)
    assert message(e) == "flow from node3 to itself: src and dst must differ"  # node 3's name
    still_usable(m)


@pytest.mark.parametrize("bad,text", [(-2.5, "-2.5"), (math.nan, "nan"), (math.inf, "inf")])
def test_bad_bytes(bad, text):
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_flow(0, 1, bad)
    assert message(e) == f"size_bytes must be a finite number >= 0, got {text}"
    still_usable(m)


@pytest.mark.parametrize("bad,text", [(-0.75, "-0.75"), (math.nan, "nan"), (math.inf, "inf")])
def test_bad_start_s(bad, text):
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_flow(0, 1, 10.0, start_s=bad)
    assert message(e) == f"start_s must be a finite number >= 0, got {text}"
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_delay(1.0, start_s=bad)
    assert message(e) == f"start_s must be a finite number >= 0, got {text}"
    still_usable(m)


@pytest.mark.parametrize("bad,text", [(-3.5, "-3.5"), (math.nan, "nan")])
def test_bad_max_rate(bad, text):
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_flow(0, 1, 10.0, max_rate_Bps=bad)
    assert message(e) == f"max_rate_bps must be > 0 (or none), got {text}"
    still_usable(m)


@pytest.mark.parametrize("bad,text", [(-1.5, "-1.5"), (math.nan, "nan"), (math.inf, "inf")])
def test_bad_duration(bad, text):
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_delay(bad)
    assert message(e) == f"duration_s must be a finite number >= 0, got {text}"
    still_usable(m)


def test_zero_capacity_path():
    m = line()
    # 1 -> 2 -> 3 crosses link 3 (2 -> 3) whose capacity is 0.
    with pytest.raises(ZeroCapacityPathError) as e:
        m.sc.add_flow(1, 3, 10.0, route=[1, 3])
        m.sc.run()
    assert message(e) == "route crosses link 3 whose capacity is 0"


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
    assert message(e) == "no path from node 2 to node 4"
    with pytest.raises(UnreachableError) as e:
        m.sc.add_flow(1, 0, 10.0)     # links only go forwards
    assert message(e) == "no path from node 1 to node 0"
    still_usable(m)


def test_route_with_unknown_link():
    m = line()
    with pytest.raises(UnknownLinkError) as e:
        m.sc.add_flow(0, 2, 10.0, route=[0, 99])
    assert message(e) == "link 99 does not exist: link ids run from 0 to 3"
    still_usable(m)


@pytest.mark.parametrize("route, said", [
    ([1], "route is not a path from node 0: its first link 1 starts at node 1"),
    ([0], "route is not a path to node 2: its last link 0 ends at node 1"),
    ([0, 2], "route is not a path: link 0 ends at node 1 but the next link 2 starts at node 3"),
    ([], "route from node 0 to node 2 is empty"),
])
def test_route_not_a_path(route, said):
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        m.sc.add_flow(0, 2, 10.0, route=route)
    assert message(e) == said
    still_usable(m)


# ------------------------------------------------------------------ dependencies


def test_dependency_on_unknown_activity():
    m = line()
    m.flow(0, 1, 10.0)
    for call, bad in [(lambda: m.sc.add_flow(0, 1, 10.0, after=[42]), 42),
                      (lambda: m.sc.add_delay(1.0, after=[0, 17]), 17),
                      (lambda: m.sc.add_dependency(0, 42), 42), (lambda: m.sc.add_dependency(43, 0), 43)]:
        with pytest.raises(UnknownActivityError) as e:
            call()
        assert message(e) == f"no activity with id {bad}: ids so far run from 0 to 0"
    still_usable(m)


def test_dependency_cycle():
    m = line()
    a = m.flow(0, 1, 10.0)
    b = m.delay(1.0, after=[a])
    c = m.flow(0, 2, 10.0, after=[b])
    with pytest.raises(DependencyCycleError) as e:
        m.sc.add_dependency(a, c)   # a after c after b after a
        m.sc.run()
    assert (a, b, c) == (0, 1, 2)
    assert message(e) == "dependency cycle among activities 0 -> 2 -> 1 (each waits for the next)"


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
    assert message(e) == "capacity of constraint 1 must be a finite number >= 0, got -2.5"
    with pytest.raises(InvalidArgumentError) as e:
        fs.max_min_rates(cap, fi, np.array([0, 5]), co, n_flows=2)
    assert message(e) == "constraint_index[1] = 5 is out of range: expected 0 <= value < 2"
    with pytest.raises(InvalidArgumentError) as e:
        fs.max_min_rates(cap, fi, ci, np.array([1.0]), n_flows=2)
    assert message(e) == "coefficient must be one value or a 1-d sequence of 2, got shape (1,)"
    with pytest.raises(InvalidArgumentError) as e:
        fs.max_min_rates(cap, fi, ci, np.array([1.0, math.nan]), n_flows=2)
    assert message(e) == "coefficient[1] must be a finite number > 0, got nan"
    with pytest.raises(InvalidArgumentError) as e:
        fs.max_min_rates(cap, np.array([0, 6]), ci, co, n_flows=2)
    assert message(e) == "flow_index[1] = 6 is out of range: expected 0 <= value < 2"



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
    ("progress", 5), ("progress", "yes"),
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


def test_route_going_on_from_its_destination_is_refused():
    # Links 0 and 3 both go 0 -> 1. Route 0, 1, 3 (0 -> 1 -> 0 -> 1) crosses no link twice
    # but is at node 1 after link 0: it was accepted, loading links 1 and 3 for nothing.
    m = Model([0, 1, 1, 0], [1, 0, 2, 1], [100.0] * 4, [0.0] * 4)
    with pytest.raises(InvalidArgumentError, match=r"^route reaches its destination node 1 at link 0 \(position 0\) "
                       r"and goes on for 2 more links: a route must end where it first reaches its destination$"):
        m.sc.add_flow(0, 1, 10.0, route=[0, 1, 3])
    with pytest.raises(InvalidArgumentError, match=r"^element 1: route reaches its destination node 1 at link 0 "):
        m.sc.add_flows([0, 0], [1, 1], 10.0, routes=[[3], [0, 1, 3]])
    assert m.sc.n_activities == 0
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


# ------------------------------------------------------------------ quantities


HUGE = 10**400  # an int no float holds: float(HUGE) raises OverflowError


def _quantity_entry_points():
    """(label, call taking one bad quantity, the parameter the error must name)."""
    def a2a(sc, **kw):
        return sc.add_collective("all_to_all", [0, 1], **kw)

    return [
        ("add_flow size_bytes", lambda m, bad: m.sc.add_flow(0, 2, bad), "size_bytes"),
        ("add_flow start_s", lambda m, bad: m.sc.add_flow(0, 2, 10.0, start_s=bad), "start_s"),
        ("add_flow max_rate_Bps", lambda m, bad: m.sc.add_flow(0, 2, 10.0, max_rate_Bps=bad), "max_rate_Bps"),
        ("add_flows size_bytes", lambda m, bad: m.sc.add_flows([0], [2], bad), "size_bytes"),
        ("add_flows size_bytes[1]", lambda m, bad: m.sc.add_flows([0, 0], [2, 2], [1.0, bad]), "size_bytes[1]"),
        ("add_flows start_s", lambda m, bad: m.sc.add_flows([0], [2], 1.0, start_s=bad), "start_s"),
        ("add_delay duration_s", lambda m, bad: m.sc.add_delay(bad), "duration_s"),
        ("add_delay start_s", lambda m, bad: m.sc.add_delay(1.0, start_s=bad), "start_s"),
        ("add_fault at_s", lambda m, bad: m.sc.add_fault(at_s=bad, links=[0]), "at_s"),
        ("add_fault until_s", lambda m, bad: m.sc.add_fault(at_s=1.0, links=[0], until_s=bad), "until_s"),
        ("add_collective size_bytes", lambda m, bad: fs.Scenario(fs.hgx_h100()).add_collective(
            "all_reduce", range(8), bad), "size_bytes"),
        ("add_collective start_s", lambda m, bad: fs.Scenario(fs.hgx_h100()).add_collective(
            "all_reduce", range(8), 8.0, start_s=bad), "start_s"),
        ("add_collective sizes", lambda m, bad: a2a(fs.Scenario(fs.hgx_h100()), sizes=[[0, bad], [1, 0]]),
         "sizes (flattened row by row)[1]"),
        ("estimate size_bytes", lambda m, bad: fs.estimate(fs.hgx_h100(), "all_reduce", bad), "size_bytes"),
        ("nccl_tests max_bytes", lambda m, bad: fs.nccl_tests(fs.hgx_h100(), max_bytes=bad), "max_bytes"),
        ("from_arrays capacity_Bps", lambda m, bad: fs.Topology.from_arrays([0], [1], bad), "capacity_Bps"),
        ("from_arrays latency_s[1]", lambda m, bad: fs.Topology.from_arrays([0, 1], [1, 0], 1.0, [0.0, bad]),
         "latency_s[1]"),
        ("pcie_server cpu_link_Bps", lambda m, bad: fs.pcie_server(cpu_link_Bps=bad), "cpu_link_Bps"),
        ("pcie_server latency_s", lambda m, bad: fs.pcie_server(latency_s=bad), "latency_s"),
        ("max_min_rates capacity_Bps", lambda m, bad: fs.max_min_rates([1.0, bad], [0], [0]), "capacity_Bps[1]"),
        ("max_min_rates rate_cap_Bps", lambda m, bad: fs.max_min_rates([1.0], [0], [0], rate_cap_Bps=bad),
         "rate_cap_Bps"),
        ("max_min_rates coefficient", lambda m, bad: fs.max_min_rates([1.0], [0, 0], [0, 0], [1.0, bad]),
         "coefficient[1]"),
    ]


@pytest.mark.parametrize("bad,shown", [
    (HUGE, "100000000000... (an int of 401 digits)"),
    (-HUGE, "-100000000000... (an int of 401 digits)"),
    (10**5000, "100000000000... (an int of 5001 digits)"),  # beyond Python's 4300-digit repr
], ids=["1e400", "-1e400", "1e5000"])
@pytest.mark.parametrize("label,call,name", _quantity_entry_points(), ids=lambda x: x if isinstance(x, str) else "")
def test_quantities_beyond_the_float_range(label, call, name, bad, shown):
    # Each gave a bare OverflowError ("int too large to convert to float") naming nothing.
    m = line()
    with pytest.raises(InvalidArgumentError) as e:
        call(m, bad)
    assert str(e.value).startswith(f"{name}: ") and shown in str(e.value), str(e.value)
    still_usable(m)


def test_quantity_messages_name_the_parameter_and_what_is_expected():
    # The single-value path said "size must be a number or a string", not which argument.
    m = line()
    with pytest.raises(InvalidArgumentError, match=r"^size_bytes: size must be a number \(of bytes\) or a string "
                       r"with a unit, got 100000000000\.\.\. \(an int of 401 digits\), beyond the float range"):
        m.sc.add_flow(0, 2, HUGE)
    with pytest.raises(InvalidArgumentError, match=r"^start_s: duration must be a number \(of seconds\) or a "
                       r"string with a unit, got Decimal Decimal\('1'\); accepted units: ps, ns"):
        m.sc.add_flow(0, 2, 10.0, start_s=__import__("decimal").Decimal(1))
    with pytest.raises(InvalidArgumentError, match=r"^max_rate_Bps: bandwidth must be a number \(of bytes/s\) or a "
                       r"string with a unit, got True;"):
        m.sc.add_flow(0, 2, 10.0, max_rate_Bps=True)
    with pytest.raises(InvalidArgumentError, match=r"^duration_s: duration must be a number \(of seconds\) or a "
                       r"string with a unit, got complex \(1\+0j\);"):
        m.sc.add_delay(1 + 0j)
    # A number a float holds is still taken as it is, however large.
    assert m.flow(0, 2, float(2**64)) == 0
    still_usable(m)


@pytest.mark.parametrize("call,match", [
    (lambda: fs.max_min_rates([1.0], [0], [0], ["x"]), r"coefficient\[0\]: must be a real number .*got str 'x'"),
    (lambda: fs.max_min_rates([1.0], [0], [0], __import__("decimal").Decimal(2)),
     r"coefficient: must be a real number .*got Decimal"),
    (lambda: fs.max_min_rates([1.0], [0, 0], [0, 0], [[1.0], [1.0, 2.0]]), r"coefficient must be one value or a 1-D"),
    (lambda: fs.max_min_rates([1.0, 2.0], [0], [0], np.zeros((1, 1))),
     r"coefficient must be one value or a 1-D sequence of 1, got shape \(1, 1\)"),
    (lambda: fs.Topology.from_arrays([0, 1], [1, 0], [[1.0], [1.0, 2.0]]), r"capacity_Bps must be one value or a 1-D"),
    (lambda: fs.hgx_h100().fail(nodes=[[1], [1, 2]]), r"nodes must be a 1-D sequence of integers"),
    (lambda: fs.Scenario(fs.hgx_h100()).add_collective("all_reduce", [[0], [1, 2]], 8.0),
     r"ranks must be a 1-D sequence of integers"),
])
def test_numbers_in_odd_forms_are_refused(call, match):
    # A string coefficient gave NumPy's "could not convert string to float", a Decimal one was
    # taken, ragged nestings gave NumPy's "inhomogeneous shape" ValueError.
    with pytest.raises(InvalidArgumentError, match=match):
        call()


def test_a_coefficient_is_one_number_for_all_entries_or_one_per_entry():
    # Link of 6 B/s; flow 0 puts 2 r on it, flow 1 puts r: both rise to 2 B/s.
    np.testing.assert_allclose(fs.max_min_rates([6.0], [0, 1], [0, 0], [2.0, 1.0]), [2.0, 2.0])
    np.testing.assert_allclose(fs.max_min_rates([6.0], [0, 1], [0, 0], 2.0), [1.5, 1.5])


# ------------------------------------------------------------------ tags


@pytest.mark.parametrize("bad,shown", [
    (5, "int 5"), (b"grads", "bytes b'grads'"), (["a"], "list ['a']"), (1.5, "float 1.5"),
    (True, "bool True"), (np.int64(3), "int64 np.int64(3)"),
])
@pytest.mark.parametrize("entry", ["add_flow", "add_flows", "add_delay", "add_collective"])
def test_a_tag_is_a_string_or_none(entry, bad, shown):
    # A tag labels rows of the results' tag column (Arrow strings). Anything else gave PyO3's
    # "argument 'tag': 'int' object cannot be converted to 'PyString'".
    sc = fs.Scenario(fs.hgx_h100())
    calls = {
        "add_flow": lambda tag: sc.add_flow(0, 1, 10.0, tag=tag),
        "add_flows": lambda tag: sc.add_flows([0, 1], [1, 2], 10.0, tag=tag),
        "add_delay": lambda tag: sc.add_delay(1.0, tag=tag),
        "add_collective": lambda tag: sc.add_collective("all_reduce", range(8), 1e6, tag=tag),
    }
    with pytest.raises(InvalidArgumentError) as e:
        calls[entry](bad)
    assert str(e.value) == f"tag must be a string (a label for the results' tag column) or None, got {shown}"
    assert sc.n_activities == 0
    calls[entry](np.str_("grads"))  # a NumPy string is a string
    calls[entry](None)
    res = sc.run()
    tags = set(res.flows.column("tag").to_pylist()) | set(res.delays.column("tag").to_pylist())
    # A collective without a tag is tagged with its op.
    assert tags == ({"grads", "all_reduce"} if entry == "add_collective" else {"grads", None}), tags


def test_a_tag_must_be_encodable_text():
    # A lone surrogate gave a bare UnicodeEncodeError from the core.
    m = line()
    with pytest.raises(InvalidArgumentError, match=r"tag must be text that UTF-8 can encode .*got '\\ud800'"):
        m.sc.add_flow(0, 2, 10.0, tag="\ud800")
    still_usable(m)


# ------------------------------------------------------------------ the rest of the API (a sweep)


def test_node_id_names_a_node_the_topology_has():
    # node_id(99) returned 99 and node_ids([1, 2, 3]) returned them, on a 3-node topology.
    topo = fs.Topology.from_arrays([0, 1], [1, 2], 1.0)
    assert topo.node_id(2) == 2 and topo.node_ids([2, 0]).tolist() == [2, 0]
    with pytest.raises(UnknownNodeError, match=r"^node: no node 3 in this topology \(nodes are 0\.\.2\)$"):
        topo.node_id(3)
    with pytest.raises(UnknownNodeError, match=r"^nodes\[1\]: no node -1 in this topology"):
        topo.node_ids([0, -1])
    named = fs.Topology.from_arrays([0], [1], 1.0, node_names=["a", "b"])
    assert named.node_id("b") == 1
    with pytest.raises(UnknownNodeError, match="no node labelled 'c'"):
        named.node_id("c")


@pytest.mark.parametrize("names,match", [
    (5, r"node_names must be a sequence of labels, one per node, got int 5"),
    ("ab", r"node_names must be a sequence of labels, one per node, got str 'ab'"),
    (["a", ["b"]], r"node_names\[1\] must be a hashable label .*got \['b'\]"),
])
def test_node_names_are_a_sequence_of_hashable_labels(names, match):
    # 5 gave "object of type 'int' has no len()", a list label "unhashable type: 'list'".
    with pytest.raises(InvalidArgumentError, match=match):
        fs.Topology.from_arrays([0], [1], 1.0, node_names=names)


def test_from_networkx_wants_a_graph():
    with pytest.raises(InvalidArgumentError, match="graph must be a NetworkX graph, got int 5"):
        fs.Topology.from_networkx(5)   # was AttributeError: 'int' object has no attribute 'nodes'


@pytest.mark.parametrize("bad", [None, 5, ""])
def test_to_parquet_wants_a_directory(bad, tmp_path, monkeypatch):
    # None and 5 gave os.makedirs' TypeError, "" its FileNotFoundError; the CLI skipped
    # --parquet "" without a word.
    monkeypatch.chdir(tmp_path)
    m = line()
    m.flow(0, 2, 10.0)
    res = m.sc.run()
    with pytest.raises(InvalidArgumentError, match=r"directory must be a path \(a non-empty str or os.PathLike\)"):
        res.to_parquet(bad)
    assert [p.rsplit("/", 1)[1] for p in res.to_parquet(tmp_path / "out")] == [
        "flows.parquet", "delays.parquet", "links.parquet"]


def test_cli_parquet_needs_a_directory(capsys):
    from fabricsim.cli import main

    assert main(["demo", "--parquet", ""]) == 2
    # Named as the command line gives it, and before the run.
    assert "fabricsim: error: --parquet must be a path" in capsys.readouterr().err


def test_cli_parquet_in_a_directory_it_cannot_make_is_an_error_not_a_traceback(tmp_path, capsys):
    from fabricsim.cli import main

    # A file where the directory should be: os.makedirs' FileExistsError escaped as a traceback.
    (tmp_path / "taken").write_text("")
    assert main(["demo", "--leaves", "1", "--hosts-per-leaf", "2", "--parquet", str(tmp_path / "taken")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fabricsim: error: ") and str(tmp_path / "taken") in err, err


def test_cli_demo_too_large_for_memory_is_refused_before_it_is_built(capsys, monkeypatch):
    """100 million spines made Python lists of 400 million cables (tens of GB) before any
    check; the demo now estimates its memory first."""
    from fabricsim.cli import main

    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(1 << 30))
    assert main(["demo", "--spines", "100000000"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fabricsim: error: the demo's 4 leaves x 8 hosts per leaf and 100000000 spines "
                          "(800000064 links, 32 flows and more) needs about "), err
    assert err.rstrip().endswith("but only 1.0 GiB is available"), err
    assert main(["demo", "--spines", "4"]) == 0  # the default sizes fit in far less
    capsys.readouterr()
    # More spines than a double holds: the estimate raised OverflowError, a traceback.
    huge = "1" + "0" * 400
    assert main(["demo", "--spines", huge]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fabricsim: error: the demo's 4 leaves x 8 hosts per leaf and {huge} spines "), err
    assert err.rstrip().endswith("needs about inf GiB of memory, but only 1.0 GiB is available"), err


def test_cli_demo_estimate_counts_the_routers_distances(capsys, monkeypatch):
    """Routing 10,000 hosts on the demo's plain topology keeps each host's hop distances from
    all 10,110 nodes: 404 MB of peak RSS growth (measured 424 MB), where the estimate said
    7.4 MB and let it run with 100 MB available."""
    from fabricsim.cli import main

    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(100 << 20))
    assert main(["demo", "--leaves", "100", "--hosts-per-leaf", "100", "--spines", "10"]) == 1
    err = capsys.readouterr().err
    head = ("fabricsim: error: the demo's 100 leaves x 100 hosts per leaf and 10 spines "
            "(22000 links, 10000 flows and more) needs about ")
    assert err.startswith(head) and err.rstrip().endswith("but only 100.0 MiB is available"), err
    estimate_MiB = float(err[len(head):].split(" MiB")[0])
    assert 10000 * 10110 * 4 / 2**20 < estimate_MiB < 424e6 / 2**20 * 1.1


def test_cli_nccl_tests_on_one_node_still_refuses_an_unknown_scale_out(capsys, no_runs):
    from fabricsim.cli import main

    assert main(["nccl-tests", "--scale-out", "quantum-9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fabricsim: error: --scale-out: no catalog part named 'quantum-9'"), err
    assert main(["nccl-tests", "--scale-out", "cx8"]) == 2
    assert "--scale-out must be a switch from the catalog, got 'cx8', a nic" in capsys.readouterr().err
    assert main(["nccl-tests", "--nodes", "2", "--scale-out", "quantum-9"]) == 2
    assert capsys.readouterr().err.startswith("fabricsim: error: scale_out: no catalog part named 'quantum-9'")


def test_cli_nccl_tests_names_a_bad_node_count(capsys, no_runs):
    from fabricsim.cli import main

    for nodes in ("0", "-3"):
        assert main(["nccl-tests", "--nodes", nodes]) == 2
        assert capsys.readouterr().err == f"fabricsim: error: --nodes must be a whole number >= 1, got {nodes}\n"


def test_cluster_names_its_scale_out_argument_when_it_is_not_a_switch():
    """cluster() takes its switch as scale_out=, but the message named clos()'s switch=."""
    with pytest.raises(fs.InvalidArgumentError, match=r"^scale_out must be a switch from the catalog, got 'cx8', a nic$"):
        fs.cluster(domain="hgx-h100", n_domains=2, scale_out="cx8")
    with pytest.raises(fs.InvalidArgumentError, match=r"^switch must be a switch from the catalog, got 'cx8', a nic$"):
        fs.clos(n_hosts=4, switch="cx8")


@pytest.mark.parametrize("call,match", [
    (lambda: fs.estimate(None, "all_reduce", 8.0), r"fabric must be a fabricsim.Topology .*got NoneType None"),
    (lambda: fs.nccl_tests("hgx-h100"), r"fabric must be a fabricsim.Topology .*got str 'hgx-h100'"),
    (lambda: fs.estimate(fs.hgx_h100(), np.array(["all_reduce"]), 8.0), r"op must be one of .*got array"),
    (lambda: fs.estimate(fs.hgx_h100(), "all_reduce", 8.0, algorithm=["ring"]), r"algorithm must be a name, got \['ring'\]"),
    (lambda: fs.estimate(fs.hgx_h100(), "all_reduce", 8.0, protocol=np.array([])), r"protocol must be 'auto' or one of"),
    (lambda: fs.nccl_tests(fs.hgx_h100(), dtype=["float"]), r"dtype=\['float'\]: expected one of"),
    (lambda: fs.clos(n_hosts=16, routing=np.array(["ecmp"])), r"routing must be 'ecmp' or 'adaptive'"),
    (lambda: fs.Scenario(fs.hgx_h100(), routing={"scale_out": np.array(["ecmp", "x"])}),
     r"routing of scale_out must be 'ecmp' or 'adaptive'"),
    (lambda: fs.clos(n_hosts=16, oversubscription=HUGE), r"oversubscription must be a number.*an int of 401 digits"),
])
def test_names_and_objects_of_the_wrong_type(call, match):
    # Arrays gave NumPy's "truth value of an array is ambiguous", lists "unhashable type",
    # a missing fabric "'NoneType' object has no attribute '_core'", a huge ratio an
    # OverflowError.
    with pytest.raises(InvalidArgumentError, match=match):
        call()


@pytest.mark.parametrize("kwargs,match", [
    (dict(on_row=5), r"on_row must be None or a callable taking each row \(a dict\), got int 5"),
    (dict(step_factor=math.inf), r"step_factor must be a finite number > 1, got inf"),
    (dict(step_factor=HUGE), r"step_factor must be a finite number > 1, got 100000000000\.\.\."),
    (dict(max_bytes=math.inf), r"need 0 < min_bytes <= max_bytes < 2\*\*63, got 8388608.0 and inf"),
    (dict(max_bytes=2**64), r"need 0 < min_bytes <= max_bytes < 2\*\*63"),
])
def test_nccl_tests_arguments_are_checked_before_the_sweep(kwargs, match):
    # on_row=5 failed with "'int' object is not callable" after the first size had run,
    # step_factor=inf ran one size, max_bytes=inf raised OverflowError and 2**64 failed in
    # pyarrow after the whole sweep.
    rows = []
    with pytest.raises(InvalidArgumentError, match=match):
        fs.nccl_tests(fs.hgx_h100(), min_bytes="8M", **{"on_row": rows.append, "max_bytes": "8M", **kwargs})
    assert rows == []


@pytest.fixture
def no_runs(monkeypatch):
    """Scenario.run fails the test: what is checked must be checked before any size runs."""
    def run(*args, **kwargs):
        raise AssertionError("ran a size before checking every argument")

    monkeypatch.setattr(fs.Scenario, "run", run)


@pytest.mark.parametrize("kwargs,match", [
    # 69 million sizes; the sweep ran them one after another.
    (dict(max_bytes="8G", step_factor=1.0000001), r"step_factor=1.0000001 from min_bytes=8388608 to "
     r"max_bytes=8589934592 makes 69314722 sizes, more than the 10000 a sweep runs"),
    # These failed with a TypeError once the first size had run.
    (dict(on_row=lambda: None), r"on_row=<function .*> cannot be called as on_row\(row\)"),
    (dict(progress=lambda done: None), r"progress=<function .*> cannot be called as "
     r"progress\(n_done, n_activities, sim_time_s\)"),
    (dict(on_start=lambda sizes, extra: None), r"on_start=<function .*> cannot be called as on_start\(sizes\)"),
    (dict(on_start=5), r"on_start must be None or a callable taking the list of sizes, got int 5"),
])
def test_nccl_tests_refuses_before_running_any_size(kwargs, match, no_runs):
    with pytest.raises(InvalidArgumentError, match=match):
        fs.nccl_tests(fs.hgx_h100(), "all_reduce", "8M", **{"max_bytes": "16M", **kwargs})


def test_nccl_tests_runs_up_to_10000_sizes():
    class Started(Exception):
        pass

    def start(sizes):
        raise Started(len(sizes))

    # 2**40 lies between the 10,000th and the 10,001st size of the first factor, and between
    # the 10,001st and the 10,002nd of the second.
    with pytest.raises(Started) as e:
        fs.nccl_tests(fs.hgx_h100(), "all_reduce", 1, 2**40, 2 ** (40 / 9999.5), on_start=start)
    assert e.value.args == (10000,)
    with pytest.raises(InvalidArgumentError, match="makes 10001 sizes, more than the 10000 a sweep runs"):
        fs.nccl_tests(fs.hgx_h100(), "all_reduce", 1, 2**40, 2 ** (40 / 10000.5), on_start=start)


@pytest.mark.parametrize("argv,error", [
    (["--op", "foo"], f"op must be one of {', '.join(fs.collectives.OPS)}, got 'foo'"),
    (["--algorithm", "pat"], "algorithm 'pat' cannot run all_reduce here"),
    (["--protocol", "ll2"], "protocol must be 'auto' or one of simple, ll128, ll, got 'll2'"),
    (["--algorithm", "nvls", "--protocol", "ll"], "protocol 'll' cannot run nvls"),
    (["-b", "8G", "-e", "8M"], "need 0 < min_bytes <= max_bytes < 2**63, got 8589934592.0 and 8388608.0"),
    (["-f", "1.0000001"], "step_factor=1.0000001 from min_bytes=8388608 to max_bytes=8589934592 makes "
     "69314722 sizes, more than the 10000 a sweep runs"),
])
def test_cli_nccl_tests_prints_only_the_error_for_a_bad_argument(argv, error, capsys, no_runs):
    # The header came out first, then the error; -f 1.0000001 ran 69 million sizes.
    from fabricsim.cli import main

    assert main(["nccl-tests", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"fabricsim: error: {error}"), captured.err


@pytest.mark.parametrize("argv,flag", [
    (["demo", "--size", "1e400"], "--size: size '1e400' is not finite"),
    (["demo", "--link", "fast"], "--link: cannot parse bandwidth 'fast'"),
    (["nccl-tests", "-f", "inf"], "step_factor must be a finite number > 1, got inf"),  # ran one size
    # Swept towards an infinite size.
    (["nccl-tests", "-e", "1e400"], "need 0 < min_bytes <= max_bytes < 2**63, got 8388608.0 and inf"),
])
def test_cli_errors_name_the_flag(argv, flag, capsys):
    from fabricsim.cli import main

    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"fabricsim: error: {flag}"), captured.err
    assert "wrote" not in captured.out and "Avg bus bandwidth" not in captured.out


def test_all_to_all_sizes():
    sc = fs.Scenario(fs.hgx_h100())
    # Both a size and a matrix: size_bytes was silently ignored.
    with pytest.raises(InvalidArgumentError, match=r"give size_bytes or a sizes matrix, not both \(got size_bytes=5\)"):
        sc.add_collective("all_to_all", [0, 1], 5, sizes=[[0, 1], [1, 0]])
    for bad, match in [
        ([[0, "x"], [1, 0]], r"sizes \(flattened row by row\)\[1\]: cannot parse size 'x'"),
        ([[0, 1 + 0j], [1, 0]], r"must hold numbers or unit strings, got complex128"),
        ([[0, 1], [1]], r"must be 2x2 \(ranks x ranks\), got rows of different lengths"),
        ([[0, -1], [1, 0]], r"must hold finite sizes >= 0 bytes, got sizes\[0\]\[1\] = -1.0"),
        ([[0, 1], [math.nan, 0]], r"got sizes\[1\]\[0\] = nan"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            sc.add_collective("all_to_all", [0, 1], sizes=bad)
    assert sc.n_activities == 0
    # Sizes are quantities like any other: numbers or unit strings. Every GPU by default
    # (ranks=None took the matrix for a 1-rank one).
    a = fs.estimate(fs.hgx_h100(), "all_to_all", sizes=[[0, "1KiB"], [2048, 0]], ranks=[0, 1])
    b = fs.estimate(fs.hgx_h100(), "all_to_all", sizes=[[0, 1024], [2048, 0]], ranks=[0, 1])
    assert a == b and a.size_bytes == 1536.0
    full = np.full((8, 8), 1e6) - np.diag(np.full(8, 1e6))
    ids = [sc.add_collective("all_to_all", None, sizes=full), sc.add_collective("all_to_all", range(8), sizes=full)]
    rows = sc.run().collectives.to_pylist()
    assert [r["size_bytes"] for r in rows] == [7e6, 7e6] and ids[0] != ids[1]


@pytest.mark.parametrize("call,match", [
    (lambda: fs.units.format_bytes("1GiB"), r"n_bytes: must be a real number .*got str '1GiB'"),
    (lambda: fs.units.format_rate(HUGE), r"rate_Bps: must be a real number .*an int of 401 digits"),
    (lambda: fs.units.format_duration(None), r"seconds: must be a real number .*got NoneType None"),
    (lambda: fs.units.format_duration(1.0, precision=0), r"precision must be an integer in \[1, 18\), got 0"),
    (lambda: fs.units.format_bytes(1.0, precision=None), r"precision must be an integer in \[1, 18\), got NoneType"),
    (lambda: fs.units.format_rate(1.0, bits=np.array([1])), r"bits must be True or False, got ndarray"),
    (lambda: fs.units.format_bytes(1.0, binary="no"), r"binary must be True or False, got str 'no'"),
])
def test_format_arguments(call, match):
    # Strings gave "could not convert string to float", precision=None "Format specifier
    # missing precision", an array flag NumPy's ambiguous truth value, binary="no" binary.
    with pytest.raises(InvalidArgumentError, match=match):
        call()


@pytest.mark.parametrize("call,match", [
    (lambda: __import__("fabricsim.collectives.conventions").collectives.conventions.busbw_factor("all_reduce", HUGE),
     r"n_ranks=100000000000\.\.\. \(an int of 401 digits\): expected a positive integer below 2\*\*32"),
    (lambda: __import__("fabricsim.collectives.conventions").collectives.conventions.element_count("all_reduce", HUGE, 8),
     r"size_bytes=100000000000\.\.\. \(an int of 401 digits\): expected a finite number of bytes >= 0"),
    (lambda: __import__("fabricsim.collectives.conventions").collectives.conventions.busbw_factor(np.array(["x", "y"]), 8),
     r"op=array\(\['x', 'y'\]"),
    (lambda: __import__("fabricsim.collectives.conventions").collectives.conventions.format_footer(None),
     r"busbw_Bps must be a 1-D sequence of values, got None"),
    (lambda: __import__("fabricsim.collectives.conventions").collectives.conventions.format_row(None, op="all_reduce"),
     r"row=NoneType: expected a mapping"),
    (lambda: fs.nccl_model.CommShape(8, 1, "hopper", HUGE, 2.5e10, 5e10, True, False),
     r"nvlink_Bps=100000000000\.\.\. \(an int of 401 digits\): expected a finite number of bytes/s >= 0"),
    (lambda: fs.nccl_model.CommShape(HUGE, 1, "hopper", 4.5e11, 2.5e10, 5e10, True, False),
     r"n_ranks=100000000000\.\.\. \(an int of 401 digits\): expected a positive integer below 2\*\*32"),
    (lambda: fs.nccl_model.choose("all_reduce", HUGE, fs.nccl_model.CommShape(8, 1, "hopper", 4.5e11, 2.5e10, 5e10,
                                                                               True, False)),
     r"size_bytes=100000000000\.\.\. \(an int of 401 digits\): expected"),
])
def test_nccl_helpers_bad_arguments(call, match):
    # Huge ints gave a bare OverflowError (math.isfinite of an int no float holds), an array
    # op NumPy's ambiguous truth value, a missing row or footer list a bare TypeError.
    with pytest.raises(InvalidArgumentError, match=match):
        call()


def test_integer_checks_show_huge_ints_briefly():
    # The message itself failed: Python refuses to print an int of more than 4300 digits.
    with pytest.raises(InvalidArgumentError, match=r"^n_hosts must be an integer in \[1, 2\*\*32\), got "
                       r"100000000000\.\.\. \(an int of 5001 digits\)$"):
        fs.clos(n_hosts=10**5000)


@pytest.mark.parametrize("bad,shown", [(True, "True"), (np.True_, "np.True_"), (1.0, "1.0"), (np.float64(0.0), "np.float64(0.0)")])
def test_a_label_is_found_by_itself_not_by_a_bool_or_float_equal_to_it(bad, shown):
    # A dict finds the label 1 for True and 1.0, 0 for False: a flag or a computed float was
    # taken for a node of a graph labelled by ints (from_networkx's usual 0..n-1).
    topo = fs.Topology.from_arrays([0, 1, 1, 2], [1, 0, 2, 1], 1.0, node_names=[10, 1, 0])
    sc = fs.Scenario(topo)
    with pytest.raises(UnknownNodeError, match=rf"^src: no node labelled {re.escape(shown)} in this topology \("
                       rf"{re.escape(shown)} is of type {type(bad).__name__}, the label equal to it of type int\)$"):
        sc.add_flow(bad, 10, 1.0)
    with pytest.raises(UnknownNodeError, match=rf"^dst\[1\]: no node labelled {re.escape(shown)}"):
        sc.add_flows([1, 0], [10, bad], 1.0)
    assert sc.add_flow(np.int64(1), 10, 1.0) == 0 and topo.node_id(np.int32(0)) == 2
    assert sc.n_activities == 1
    flags = fs.Topology.from_arrays([0], [1], 1.0, node_names=[False, True])
    assert flags.node_id(True) == 1
    with pytest.raises(UnknownNodeError, match=r"^node: no node labelled 1 in this topology \(1 is of type int, the "
                       r"label equal to it of type bool\)$"):
        flags.node_id(1)


@pytest.mark.parametrize("bad,kinds", [((1.0, 2), "tuple[float, int]"), ((True, 2), "tuple[bool, int]"),
                                       (("a", (2, np.float64(3.0))), "tuple[str, tuple[int, float64]]")])
def test_a_tuple_label_is_found_by_elements_of_their_own_kind(bad, kinds):
    # A dict finds the label (1, 2) for (1.0, 2) and (True, 2): the kind rule held for a number
    # label but not for the numbers inside a tuple (NetworkX grid graphs are labelled so).
    topo = fs.Topology.from_arrays([0, 1, 2], [1, 2, 0], 1.0, node_names=[(1, 2), ("a", (2, 3)), (0, 0)])
    label = next(x for x in topo.node_names if x == bad)
    with pytest.raises(UnknownNodeError, match=rf"^node: no node labelled {re.escape(repr(bad))} in this topology \("
                       rf"{re.escape(repr(bad))} is of type {re.escape(kinds)}, the label equal to it of type "):
        topo.node_id(bad)
    sc = fs.Scenario(topo)
    with pytest.raises(UnknownNodeError, match=r"^src\[0\]: no node labelled "):
        sc.add_flows([bad], [(0, 0)], 1.0)
    assert sc.n_activities == 0
    assert topo.node_id(label) == topo.node_names.index(label)


def test_a_fault_takes_one_tuple_label_as_one_node():
    """add_fault(nodes=(0, 1)) on a NetworkX-style grid read the label (0, 1) as the two
    nodes 0 and 1 ('no node labelled 0'), where add_flow takes it as one node; a list of
    tuple labels is still many."""
    topo = fs.Topology.from_arrays([0, 1, 1, 2], [1, 2, 0, 1], 1.0, latency_s=0.0,
                                   node_names=[(0, 0), (0, 1), (1, 1)])
    for nodes in [(0, 1), [(0, 1)]]:
        sc = fs.Scenario(topo)
        sc.add_flow((0, 0), (1, 1), 1.0)
        sc.add_fault(at_s=0.5, nodes=nodes)
        flows = sc.run().flows.to_pydict()
        assert flows["status"] == ["failed"] and flows["failed_s"] == [0.5], nodes
    with pytest.raises(UnknownNodeError, match=r"^nodes\[0\]: no node labelled \(2, 2\)"):
        fs.Scenario(topo).add_fault(at_s=0.5, nodes=[(2, 2)])


@pytest.mark.parametrize("nodes,shown", [("ab", "str 'ab'"), (0, "int 0"), (np.int64(2), "int64 np.int64(2)"), (np.array("a"), "ndarray array('a', dtype='<U1')")])
def test_many_nodes_of_a_labelled_topology_are_a_sequence(nodes, shown):
    # A string was read letter by letter (add_flows("ab", "bc", ...) made flows a->b and b->c),
    # an int failed with "'int' object is not iterable".
    topo = fs.Topology.from_arrays([0, 1, 1, 2], [1, 0, 2, 1], 1.0, node_names=["a", "b", "c"])
    sc = fs.Scenario(topo)
    with pytest.raises(InvalidArgumentError, match=rf"^src must be a sequence of nodes \(labels of this topology\), "
                       rf"got {re.escape(shown)}$"):
        sc.add_flows(nodes, ["b", "c"], 1.0)
    with pytest.raises(InvalidArgumentError, match=rf"^nodes must be a sequence of nodes .*got {re.escape(shown)}$"):
        topo.node_ids(nodes)
    assert sc.add_flows(("a", "b"), iter(["b", "c"]), 1.0).tolist() == [0, 1]


@pytest.mark.parametrize("labels", [None, ["a", "b", "c"]])
@pytest.mark.parametrize("unordered", [set, frozenset, lambda xs: dict.fromkeys(xs).keys(), dict.fromkeys])
def test_many_nodes_are_not_a_set(labels, unordered):
    # A set was taken in its arbitrary order, so add_flows paired its nodes with dst's at
    # random (a set of labels iterates in an order that changes from run to run).
    topo = fs.Topology.from_arrays([0, 1, 1, 2], [1, 0, 2, 1], 1.0, node_names=labels)
    a, b, c = (0, 1, 2) if labels is None else labels
    sc = fs.Scenario(topo)
    kind = type(unordered([a, b])).__name__
    with pytest.raises(InvalidArgumentError, match=rf"^src must be a sequence of .*, got a {kind} of 2, whose order "
                       r"is arbitrary: give a list, tuple or 1-D array$"):
        sc.add_flows(unordered([a, b]), [b, c], 1.0)
    with pytest.raises(InvalidArgumentError, match=rf"^dst must be a sequence of .*, got a {kind} of 2, "):
        sc.add_flows([a, b], unordered([b, c]), 1.0)
    with pytest.raises(InvalidArgumentError, match=rf"^nodes must be a sequence of .*, got a {kind} of 3, "):
        topo.node_ids(unordered([a, b, c]))
    assert sc.n_activities == 0
    assert sc.add_flows((a, b), (x for x in [b, c]), 1.0).tolist() == [0, 1]  # a generator has an order
    with pytest.raises(InvalidArgumentError, match=rf"^node_names must be a sequence of labels, one per node, got a "
                       rf"{kind} of 3, "):
        fs.Topology.from_arrays([0, 1], [1, 2], 1.0, node_names=unordered(["a", "b", "c"]))


def test_huge_and_tiny_floats_in_core_messages_are_shown_short(monkeypatch):
    # These messages printed their float with {}: 1e300 with all its 301 digits.
    with pytest.raises(InvalidArgumentError, match=r"a 144-port leaf switch at 1e300:1 has no up ports left"):
        fs.clos(n_hosts=64, oversubscription=1e300)
    sc = fs.Scenario(fs.hgx_h100())
    src, dst = np.array([0], dtype=np.int64), np.array([1], dtype=np.int64)
    with pytest.raises(InvalidArgumentError, match=r"^engine usage \(0, -1e-300\): expected an engine id"):
        sc._core.add_coupled_flow(src, dst, np.ones(1), "max", [(0, -1e-300)], 1.0, 0.0)
    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(1 << 30))
    with pytest.raises(ScenarioTooLargeError, match=r"^x needs about 9.3e290 GiB of memory, but only 1.0 GiB is "):
        fs._core.check_fits("x", 1e300)


def test_a_set_is_taken_where_order_means_nothing():
    # Refusing sets as many nodes (their order pairs src with dst) also refused them for the
    # activities a flow waits for and the links, nodes and planes a fault takes down, whose
    # order means nothing: after={a, b} and fail(links={...}) worked before and failed since.
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="sn5600")
    as_list, as_set = fs.Scenario(fabric), fs.Scenario(fabric)
    for sc, group in ((as_list, list), (as_set, set)):
        a, b = sc.add_delay(1e-3), sc.add_delay(2e-3)
        sc.add_flow(0, 8, 1e6, after=group([a, b]))
        sc.add_collective("all_reduce", [0, 8], 1e6, algorithm="ring", after=group([a, b]))
        sc.add_fault(at_s=2.5e-3, links=group([0, 1]), until_s=3e-3)
    ran_list, ran_set = as_list.run(), as_set.run()
    assert ran_set.flows.equals(ran_list.flows)
    assert ran_set.flows["ready_s"].to_pylist()[0] == 2e-3  # it waited for both
    for kw in ({"links": [0, 1]}, {"nodes": [0, 8]}, {"planes": [0]}):
        (name, ids), = kw.items()
        failed = fabric.fail(**kw).links
        assert not failed.equals(fabric.links) and fabric.fail(**{name: set(ids)}).links.equals(failed), name
    # Mappings stay refused: iterated, they give their keys.
    with pytest.raises(InvalidArgumentError, match=r"^after must be .*, got a dict of 1, whose order is arbitrary"):
        as_set.add_flow(0, 8, 1e6, after={0: 1})


@pytest.mark.parametrize("make,routing,tier,what", [
    (lambda: fs.Topology.from_arrays([0, 1, 0, 2], [1, 3, 2, 3], 1.0), "adaptive", "scale_out", "scale-out Clos"),
    (lambda: fs.pcie_server(), {"scale_up": "adaptive"}, "scale_up", "NVLink domains"),
    (lambda: fs.hgx_h100(), "adaptive", "scale_out", "scale-out Clos"),
])
def test_adaptive_routing_needs_a_structure_to_spread_over(make, routing, tier, what):
    # Accepted and reported by Scenario.routing, while every flow was hashed onto one path:
    # on two parallel paths a flow took 1 s, not the 0.5 s that spreading gives.
    topo = make()
    with pytest.raises(InvalidArgumentError, match=rf"^routing of {tier} must be 'ecmp' or None here, got 'adaptive': "
                       rf"this topology has no {what} to spread flows over"):
        fs.Scenario(topo, routing=routing)
    assert fs.Scenario(topo, routing="ecmp").routing["scale_out"] == "ecmp"


def test_a_pcie_server_too_large_for_memory_is_refused_before_it_is_built(monkeypatch):
    # Checked only by the topology after every array was built: 2**31 GPUs, one per switch,
    # were killed by the operating system instead.
    monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(1 << 20))
    with pytest.raises(fs.ScenarioTooLargeError, match=r"^a fabric of 200001 nodes and 400000 links needs about "
                       r"18\.5 MiB of memory, but only 1\.0 MiB is available$"):
        fs.pcie_server(n_gpus=100_000, gpus_per_switch=1, nics_per_switch=0, n_cpus=1)


def test_a_coupled_flows_edge_trees_are_one_number_from_0_per_edge():
    sc = fs.Scenario(fs.hgx_h100())
    src, dst = np.array([0, 2], dtype=np.int64), np.array([1, 1], dtype=np.int64)

    def add(trees):
        return sc._core.add_coupled_flow(src, dst, np.ones(2), "max", [], 1.0, 0.0,
                                         edge_tree=np.array(trees, dtype=np.int64))

    with pytest.raises(InvalidArgumentError, match=r"^edge_tree must have one entry per edge \(2\), got 1$"):
        add([0])
    with pytest.raises(InvalidArgumentError, match=r"^edge_tree\[1\] must be a tree number from 0 to 4294967295, "
                       r"got -1$"):
        add([0, -1])
    assert sc.n_activities == 0
    assert add([0, 1]) == 0


# ------------------------------------------------------------------ beyond double range


def test_a_time_past_the_largest_double_is_refused_not_inf():
    # Finite delays, start times and latencies whose sum overflows: a delay ended at inf s
    # (makespan inf) without a word, while a flow's finish past it was refused.
    m = line()
    a = m.delay(1e308)
    m.delay(1e308, after=[a])
    with pytest.raises(InvalidArgumentError, match=r"^delay 1 would end at inf s \(ready at 1e308 s, lasting "
                       r"1e308 s\): beyond what double precision holds$"):
        m.sc.run()
    topo = fs.Topology.from_arrays([0, 1], [1, 2], 100.0, [1e308, 1e308])
    sc = fs.Scenario(topo)
    # A route's latency is its links' latencies added up: the message named a latency_s
    # that add_flow does not take ("latency_s must be a finite number >= 0, got inf").
    with pytest.raises(InvalidArgumentError, match=r"^the route from node 0 to node 2 has a latency of inf s \(its "
                       r"links' latency_s added up\): beyond what double precision holds$"):
        sc.add_flow(0, 2, 10.0)
    with pytest.raises(InvalidArgumentError, match=r"^element 1: the route from node 0 to node 2 has a latency of inf"):
        sc.add_flows([0, 0], [1, 2], 10.0)
    assert sc.n_activities == 0
    sc.add_flow(0, 1, 10.0, start_s=1e308)
    with pytest.raises(InvalidArgumentError, match=r"^flow 0 would start its transfer at inf s \(ready at 1e308 s, "
                       r"then its route's latency of 1e308 s\): beyond what double precision holds$"):
        sc.run()
    # Within range it runs.
    sc = fs.Scenario(topo)
    sc.add_flow(0, 1, 10.0, start_s=1e307)
    assert sc.run().flows["start_s"].to_pylist() == [1e307 + 1e308]


def test_max_min_rates_beyond_double_range_are_refused_not_inf_or_0():
    # A capacity over a tiny coefficient gave a rate of inf, rates below the smallest double
    # 0 (on links of positive capacity) or a subnormal, coefficients adding up past the
    # largest double 0.
    with pytest.raises(InvalidArgumentError, match=r"^flow 0 got rate inf B/s: capacities and coefficients this far "
                       r"apart overflow or underflow double precision$"):
        fs.max_min_rates([1.0], [0], [0], [5e-324])
    with pytest.raises(InvalidArgumentError, match=r"^flow 0 got rate inf B/s"):
        fs.max_min_rates([1e300], [0], [0], [1e-10])  # 1e308 is refused as a capacity
    with pytest.raises(InvalidArgumentError, match=r"^flow 0 got rate 0 B/s"):
        fs.max_min_rates([1e300, 1e-300], [0, 0, 1], [0, 1, 1], [1e-300, 1e300, 1.0])
    # A subnormal rate has lost precision: 1e-317 B/s put 1.00000023e-9 B/s on 1e-9.
    with pytest.raises(InvalidArgumentError, match=r"^flow 0 got rate 1e-317 B/s"):
        fs.max_min_rates([1e-9], [0], [0], [1e308])
    with pytest.raises(InvalidArgumentError, match=r"^the coefficients of flow 0 on constraint 0 add up to inf: "
                       r"beyond what double precision holds$"):
        fs.max_min_rates([1.0], [0, 0], [0, 0], [1e308, 1e308])
    # A link of capacity 0 still gives its flows 0; extremes within range are exact.
    np.testing.assert_array_equal(fs.max_min_rates([1.0, 0.0], [0, 1], [0, 1]), [1.0, 0.0])
    np.testing.assert_array_equal(fs.max_min_rates([1e300], [0], [0], [1e-8]), [1e308])


def test_an_unknown_activity_is_named_with_the_ids_there_are():
    # "ids so far: 0..2" read as 0 to 2 when 2 did not exist, and "0..0" with no activity.
    sc = fs.Scenario(line().topo)
    with pytest.raises(UnknownActivityError, match=r"^no activity with id 0: the scenario has no activities yet$"):
        sc.add_delay(1.0, after=[0])
    sc.add_delay(1.0)
    sc.add_delay(1.0)
    with pytest.raises(UnknownActivityError, match=r"^no activity with id 2: ids so far run from 0 to 1$"):
        sc.add_dependency(0, 2)
    with pytest.raises(UnknownActivityError, match=r"^no activity with id 2: ids so far run from 0 to 1$"):
        sc.route_of(2)
    assert sc.run().delays.num_rows == 2


def test_a_fabrics_node_names_can_be_iterated():
    # Iteration indexed past the last node: list(fabric.node_names) raised UnknownNodeError.
    fabric = fs.hgx_h100()
    names = list(fabric.node_names)
    assert len(names) == fabric.n_nodes and names[0] == fabric.node_names[0] and names[-1] == "d0.nvswitch3"
    assert "gpu7" in fabric.node_names and fabric.names_of(range(fabric.n_nodes)) == names


@pytest.mark.parametrize("kw,shown", [(dict(latency=["x"]), "list ['x']"), (dict(capacity=None), "NoneType None"),
                                      (dict(capacity=5), "int 5")])
def test_from_networkx_attribute_names_are_strings(kw, shown):
    # A list gave a bare TypeError (unhashable type), None "edge (0, 1) has no None attribute".
    nx = pytest.importorskip("networkx")
    graph = nx.path_graph(3)
    nx.set_edge_attributes(graph, 1.0, "capacity_Bps")
    (name, _), = kw.items()
    with pytest.raises(InvalidArgumentError, match=rf"^{name} must be the name of an edge attribute \(a str\), "
                       rf"got {re.escape(shown)}$"):
        fs.Topology.from_networkx(graph, **kw)
    assert fs.Topology.from_networkx(graph).n_links == 4


def test_a_gpu_part_of_very_many_nvlinks_is_refused_before_its_chips_are_listed(monkeypatch):
    # The default chip_links (one chip per NVLink) of a user part with 2**31 NVLinks was
    # built as Python tuples first: the operating system killed the process.
    fields = fs.catalog.part("h100").to_dict()
    for key in ("kind", "description", "sources"):
        fields.pop(key)
    fs.catalog.add_part("many-links-gpu", "gpu", source="[assumed] a test", **{**fields, "nvlink_links": 2**31})
    try:
        monkeypatch.setenv("FABRICSIM_AVAILABLE_BYTES", str(1 << 30))
        with pytest.raises(ScenarioTooLargeError, match=r"^the default chip_links of a many-links-gpu, one NVSwitch chip "
                           r"for each of its 2147483648 NVLinks needs about 96\.0 GiB of memory, but only 1\.0 GiB"):
            fs.nvlink_domain(gpu="many-links-gpu", switch="nvswitch3", n_gpus=4)
    finally:
        fs.catalog.remove_part("many-links-gpu")


def test_a_switch_part_whose_breakout_radix_passes_32_bits_is_refused_by_name():
    # 2**31 ports of 800 Gb/s broken out to 400 Gb/s make 2**32 ports: the message was the
    # core's "parameter radix: OverflowError: out of range integral type conversion attempted".
    fields = fs.catalog.part("quantum-x800").to_dict()
    for key in ("kind", "description", "sources"):
        fields.pop(key)
    fs.catalog.add_part("huge-radix-switch", "switch", source="[assumed] a test", **{**fields, "ports": 2**31})
    try:
        with pytest.raises(InvalidArgumentError, match=r"^no huge-radix-switch Clos holds 32 endpoints: planes=1: "
                           r"huge-radix-switch has 4294967296 ports of 400 Gb/s, more than the 2\*\*32 - 1 a switch "
                           r"can have$"):
            fs.cluster(domain="hgx-h100", n_domains=4, scale_out="huge-radix-switch")
        assert fs.clos(n_hosts=16, switch="huge-radix-switch").n_nodes == 17  # 2**31 ports of 800 Gb/s fit
    finally:
        fs.catalog.remove_part("huge-radix-switch")


def test_a_collective_past_the_largest_double_is_refused_by_its_size():
    # A ring all-reduce moves 2(n-1)/n times its size over each edge: 1e308 bytes gave an
    # estimate of inf s (algbw 0), and in a scenario "size_bytes must be a finite number >= 0,
    # got inf", a size the caller never gave; an all-to-all matrix of finite sizes adding up
    # past the largest double gave an estimate of inf bytes at inf B/s. The edge's bytes are
    # what cannot be held, so estimate and scenario both refuse on them.
    fabric = fs.cluster(domain="hgx-h100", n_domains=3, scale_out="quantum-x800")
    expected = (r"^size_bytes=1e\+308: all_reduce by ring \(simple\) on 24 ranks would move inf bytes over one edge: "
                r"beyond what double precision holds$")
    with pytest.raises(InvalidArgumentError, match=expected):
        fs.estimate(fabric, "all_reduce", 1e308, algorithm="ring")
    sc = fs.Scenario(fabric)
    with pytest.raises(InvalidArgumentError, match=expected):
        sc.add_collective("all_reduce", None, 1e308, algorithm="ring")
    assert sc.n_activities == 0
    with pytest.raises(InvalidArgumentError, match=r"^an all_to_all size matrix must add up to a finite number of "
                       r"bytes, got inf: beyond what double precision holds$"):
        fs.estimate(fabric, "all_to_all", sizes=[[0, 1e308], [1e308, 0]], ranks=[0, 8])
    # Within range both work: a tree moves each byte once up and once down, its time is finite.
    assert math.isfinite(fs.estimate(fabric, "all_reduce", 1e308, algorithm="tree").time_s)
    sc.add_collective("all_reduce", None, 1e6, algorithm="ring")
    assert sc.run().collectives.num_rows == 1


@pytest.mark.parametrize("call, match", [
    # OverflowError (a range over 10**30 layers)
    (lambda: fs.training.Model(name="m", layers=10**30, hidden=64, ffn=64, heads=1, kv_heads=1, vocab=8, seq_len=8),
     r"^Model 'm': layers must be an integer in \[1, 2\*\*16\), got 100000000000\.\.\. \(an int of 31 digits\)$"),
    # TypeError ('>=' between str and float)
    (lambda: fs.Parallelism(ep_imbalance="2"), r"^Parallelism: ep_imbalance .* must be a real number in \[1, 1\], got str '2'$"),
    # AttributeError ('int' object has no attribute 'split')
    (lambda: fs.Parallelism(order=5), r"^Parallelism: order must name each of tp, cp, ep, dp, pp once .*got int 5$"),
    # AttributeError ('int' object has no attribute 'precision')
    (lambda: fs.TrainingStep("llama3-8b", fs.Parallelism(tp=8), fs.hgx_h100(), compute=5),
     r"^compute must be a fabricsim.training.ComputeModel \(None for the default\), got int 5$"),
    # named GPU 0 (the largest entry) as the bad value
    (lambda: fs.Parallelism(dp=2, placement=[-1, 0]), r"^Parallelism: placement\[0\] must be an integer in \[0, 2\*\*63\), got -1$"),
    # a step of -2.4 s; truncated to 16; counted as True
    (lambda: fs.Parallelism(tp=8, global_batch_size=-8),
     r"^Parallelism: global_batch_size must be an integer in \[1, 2\*\*32\), got -8$"),
    (lambda: fs.Parallelism(pp=2, stage_layers=[16.5, 15.5]),
     r"^Parallelism: stage_layers\[0\] must be an integer in \[1, 2\*\*32\), got float 16\.5$"),
    (lambda: fs.Parallelism(recompute="False"), r"^Parallelism: recompute must be True or False, got str 'False'$"),
])
def test_training_arguments_are_refused_by_name_not_with_foreign_errors(call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call()
