"""Property-based tests of the core API's promises under any input: only FabricsimError
subclasses escape, a refusal names the bad value, a refused add leaves the scenario as it was,
bytes are conserved, and what is accepted is right: parsed units equal the value written, a
built topology holds the links given, rates equal the reference's, a lone collective on an idle
fabric takes its analytical time, a part added or loaded holds its fields.

Each test draws mostly valid inputs (so that it reaches the comparison it is named for) mixed
with hostile ones, and asserts how often each path was reached (hostile.py). The workloads'
surfaces are in test_properties_workloads.py; the Rust core's own search is tests/rust/fuzz.rs."""

import json
import math
import os
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import strategies as st

import fabricsim as fs
from fabricsim.exceptions import FabricsimError
from helpers import Model, check_invariants, compare_to_reference
from hostile import (COMPARED, RAN, anything, assert_reach, draws_valid, explore, floats, ints, mostly,
                     only_fabricsim_errors, refused, scalars, sequences, texts)

# ---- units -------------------------------------------------------------------------------

# Each unit written as people write it, and its value in SI, from the units' definitions (not
# from fabricsim's tables): a bit is 1/8 byte; k, M, G, T are powers of 1000, Ki, Mi, Gi powers
# of 1024; a size's bare prefix letter is nccl-tests' (binary, any case).
UNITS = {
    "size_bytes": {"B": "1", " B": "1", "bytes": "1", "kB": "1e3", "KB": "1e3", "MB": "1e6", "GB": "1e9",
                   "TB": "1e12", "KiB": "1024", "MiB": "1048576", "GiB": "1073741824", "TiB": "1099511627776",
                   "K": "1024", "k": "1024", "M": "1048576", "m": "1048576", "G": "1073741824", "g": "1073741824"},
    "bandwidth_Bps": {"b/s": "0.125", "bps": "0.125", "Gb/s": "125e6", " Gbps": "125e6", "Gbit/s": "125e6",
                      "Tb/s": "125e9", "Kb/s": "125", "B/s": "1", "Bps": "1", "GB/s": "1e9", " MB/s": "1e6",
                      "GiB/s": "1073741824", "TB/s": "1e12"},
    "duration_s": {"ps": "1e-12", "ns": "1e-9", "us": "1e-6", "\u00b5s": "1e-6", " ms": "1e-3", "s": "1",
                   "min": "60", "h": "3600"},
}
numbers_written = st.one_of(
    st.integers(0, 10**6).map(str),
    st.builds(lambda i, f: f"{i}.{f}", st.integers(0, 9999), st.integers(0, 999)),
    st.integers(1, 99).map(lambda f: f".{f}"),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(1, 99), st.integers(-12, 12)),
)


@st.composite
def quantities(draw):
    """(parser, text, exact value) of a valid quantity."""
    parser = draw(st.sampled_from(sorted(UNITS)))
    unit = draw(st.sampled_from(sorted(UNITS[parser])))
    number = draw(numbers_written)
    return parser, number + unit, Decimal(number) * Decimal(UNITS[parser][unit])


def test_unit_parsers_take_any_value():
    # Hostile draws 5 in 10: Hypothesis mixes the package's own constants into text draws, so
    # the share of them refused moves with the code (3 in 10 left 13 of 300 on one branch).
    @explore(300, mostly(quantities(), st.tuples(st.sampled_from(sorted(UNITS)), st.one_of(texts, scalars)),
                         valid_in_10=5))
    def seen(case):
        if len(case) == 3:  # a valid quantity: its value, rounded once
            parser, text, exact = case
            assert getattr(fs.units, parser)(text) == float(exact), (parser, text)
            return "compared"
        parser, value = case
        got = only_fabricsim_errors(getattr(fs.units, parser), value)
        if refused(got):
            if isinstance(value, str):  # the message names the text as given
                assert repr(value) in str(got), (value, str(got))
            return "refused"
        if isinstance(value, str):
            assert isinstance(got, float) and not (got < 0)
            assert all(not c.isdigit() or c in "0123456789" for c in value), value  # ASCII digits only
        else:  # a number passes through as it is
            assert got == value or (math.isnan(got) and math.isnan(value)), (value, got)
        return "ran"

    assert_reach(seen, "compared", COMPARED)
    assert_reach(seen, "refused", RAN)


def test_formatted_quantities_parse_back_close():
    @explore(100, st.floats(min_value=1e-12, max_value=1e30), st.booleans())
    def seen(x, bits):
        rate = fs.units.format_rate(x, bits=bits)
        assert fs.units.bandwidth_Bps(rate) == pytest.approx(x, rel=5e-3)
        assert fs.units.size_bytes(fs.units.format_bytes(x)) == pytest.approx(x, rel=5e-3)
        assert fs.units.duration_s(fs.units.format_duration(x)) == pytest.approx(x, rel=5e-3)
        return "compared"

    assert_reach(seen, "compared", 1.0)


# ---- generators --------------------------------------------------------------------------

SWITCHES = ["quantum-2", "quantum-x800", "sn5600"]
GENERATORS = {
    # name: (valid keyword strategies, hostile ones, the GPUs (or hosts) it must build)
    "hgx_h100": ({}, {}, lambda kw: 8),
    "clos": ({"n_hosts": st.integers(2, 48), "oversubscription": st.sampled_from([1, 2, 4, 1.5]),
              "tiers": st.integers(2, 3), "switch": st.sampled_from(SWITCHES)},  # 1 tier has no uplinks to thin
             {"n_hosts": ints, "oversubscription": floats, "planes": ints, "tiers": ints, "switch": texts},
             lambda kw: kw["n_hosts"]),
    "nvlink_domain": ({"n_gpus": st.integers(1, 72), "n_domains": st.integers(1, 3),
                       "gpu": st.sampled_from(["b200", "gb200", "gb300"])},
                      {"n_gpus": ints, "n_domains": ints, "tiers": ints, "gpu": texts},
                      lambda kw: kw.get("n_gpus", 72) * kw.get("n_domains", 1)),
    "cluster": ({"n_domains": st.integers(1, 6), "domain": st.sampled_from(["hgx-h100", "nvl72"]),
                 "scale_out": st.sampled_from(SWITCHES)},
                {"n_domains": ints, "domain": st.sampled_from(["hgx-h100", "nvl72", "x"]),
                 "scale_out": st.sampled_from(["quantum-2", "sn5600", "bogus"])},
                lambda kw: kw["n_domains"] * (72 if kw.get("domain") == "nvl72" else 8)),
    "pcie_server": ({"n_gpus": st.sampled_from([4, 8, 16]), "gpus_per_switch": st.sampled_from([1, 2])},
                    {"n_gpus": ints, "gpus_per_switch": ints, "nics_per_switch": ints},
                    lambda kw: kw.get("n_gpus", 8)),
}
# A required argument left out is Python's TypeError, not a value to check: always given.
REQUIRED = {"cluster": {"n_domains", "domain", "scale_out"}, "clos": {"n_hosts"}}


@st.composite
def generator_calls(draw):
    name = draw(st.sampled_from(sorted(GENERATORS)))
    valid, hostile, _ = GENERATORS[name]
    params = draw(mostly(st.just(valid), st.just(hostile)))
    kwargs = {k: draw(v, label=k) for k, v in params.items()
              if k in REQUIRED.get(name, ()) or draw(st.booleans(), label=f"give {k}")}
    return name, kwargs, params is valid


def test_generators_build_or_refuse_with_a_fabricsim_error():
    @explore(150, generator_calls())
    def seen(call):
        name, kwargs, valid = call
        if any(isinstance(v, int) and not isinstance(v, bool) and v > 80 for v in kwargs.values()):
            return "too large to try"  # large but valid sizes only take time; their refusals are tested with budgets
        got = only_fabricsim_errors(getattr(fs, name), **kwargs)
        if refused(got):
            assert not valid, (name, kwargs, str(got))
            return "refused"
        links = got.links
        assert links.num_rows == got.n_links
        caps = links["capacity_Bps"].to_numpy()
        assert np.all((caps > 0) & (caps <= fs._checks.MAX_CAPACITY_BPS))
        # Every cable is two links, one each way.
        ends = set(zip(links["src"].to_numpy().tolist(), links["dst"].to_numpy().tolist()))
        assert all((d, s) in ends for s, d in ends)
        if valid:
            built = got.structure["scale_out"]["n_endpoints"] if name == "clos" else got.n_gpus
            assert built == GENERATORS[name][2](kwargs), (name, kwargs)
            return "compared"
        return "ran"

    assert_reach(seen, "compared", COMPARED)
    assert_reach(seen, "refused", RAN)


# ---- topologies from arrays ----------------------------------------------------------------


@st.composite
def link_arrays(draw):
    """Valid (src, dst, capacity, latency, n_nodes) in the forms the API takes: lists, tuples,
    arrays, scalars broadcast."""
    n = draw(st.integers(2, 8))
    k = draw(st.integers(1, 10))
    src = draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k))
    dst = [(s + draw(st.integers(1, n - 1))) % n for s in src]
    cap = draw(st.one_of(st.floats(1.0, 1e12), st.lists(st.floats(0.0, 1e12), min_size=k, max_size=k)))
    lat = draw(st.one_of(st.none(), st.floats(0.0, 1e-3), st.lists(st.floats(0.0, 1e-3), min_size=k, max_size=k)))
    form = draw(st.sampled_from([list, tuple, np.asarray]))
    n_nodes = draw(st.one_of(st.none(), st.integers(n, n + 3)))
    return form(src), form(dst), cap if np.isscalar(cap) else form(cap), lat, n_nodes


hostile_arrays = st.tuples(sequences(ints), sequences(ints), st.one_of(floats, sequences(floats)),
                           st.one_of(floats, st.none()), st.one_of(ints, st.none()))


def test_topology_from_arrays_builds_the_links_given_or_refuses():
    @explore(200, mostly(link_arrays().map(lambda a: (True, a)), hostile_arrays.map(lambda a: (False, a))))
    def seen(case):
        valid, (src, dst, capacity, latency, n_nodes) = case
        args = (src, dst, capacity) if latency is None else (src, dst, capacity, latency)
        got = only_fabricsim_errors(fs.Topology.from_arrays, *args, n_nodes=n_nodes)
        if refused(got):
            assert not valid, (args, str(got))
            return "refused"
        caps = got.links["capacity_Bps"].to_numpy()
        assert np.all((caps >= 0) & (caps <= fs._checks.MAX_CAPACITY_BPS))
        if not valid:
            return "ran"
        links = got.links.to_pydict()
        k = len(src)
        assert links["link_id"] == list(range(k))
        assert links["src"] == [int(x) for x in src] and links["dst"] == [int(x) for x in dst]
        assert links["capacity_Bps"] == list(np.broadcast_to(np.asarray(capacity, dtype=float), k))
        assert links["latency_s"] == list(np.broadcast_to(np.asarray(0.0 if latency is None else latency, dtype=float), k))
        assert got.n_nodes == (max(max(src), max(dst)) + 1 if n_nodes is None else n_nodes)
        return "compared"

    assert_reach(seen, "compared", COMPARED)
    assert_reach(seen, "refused", RAN)


# ---- the solver alone ------------------------------------------------------------------------


@st.composite
def moderate_problems(draw):
    """A max-min problem the reference solves as the engine does: capacities and coefficients
    within nine orders of magnitude, every flow on some constraint."""
    n_c = draw(st.integers(1, 4))
    n_f = draw(st.integers(1, 5))
    capacity = draw(st.lists(st.floats(1e-3, 1e6), min_size=n_c, max_size=n_c))
    entries = [(f, draw(st.integers(0, n_c - 1)), draw(st.floats(1e-3, 1e3))) for f in range(n_f)]
    entries += draw(st.lists(st.tuples(st.integers(0, n_f - 1), st.integers(0, n_c - 1), st.floats(1e-3, 1e3)),
                             max_size=6))
    return capacity, entries


hostile_problems = st.tuples(st.lists(floats, min_size=1, max_size=4),
                             st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), floats), max_size=8))


def test_max_min_rates_solve_or_refuse_and_equal_the_reference():
    from reference import max_min_reference_coo

    @explore(200, mostly(moderate_problems().map(lambda p: (True, p)), hostile_problems.map(lambda p: (False, p))))
    def seen(case):
        valid, (capacity, entries) = case
        n_flows = 1 + max((f for f, _, _ in entries), default=0)
        fi, ci, k = ([e[j] for e in entries] for j in range(3))
        got = only_fabricsim_errors(fs.max_min_rates, capacity, fi, ci, k, n_flows=n_flows)
        if refused(got):
            assert not valid, (capacity, entries, str(got))
            return "refused"
        assert np.all(np.isfinite(got)) and np.all(got >= 0)
        if not valid:
            return "ran"
        np.testing.assert_allclose(got, max_min_reference_coo(capacity, fi, ci, k, n_flows), rtol=1e-9)
        return "compared"

    assert_reach(seen, "compared", COMPARED)
    assert_reach(seen, "refused", RAN)


# ---- scenarios: nothing half-added, bytes conserved, the reference -------------------------


def _small_topology():
    # 0 -> 1 -> 2 and back, plus a second path 0 -> 3 -> 2.
    return Model([0, 1, 1, 2, 0, 3], [1, 2, 0, 1, 3, 2], [1e9, 2e9, 1e9, 2e9, 5e8, 5e8], [1e-6] * 6)


# Each add_* with its positional arguments and the keywords it may get, all drawn from anything.
ADD_SIGNATURES = {
    "add_flow": (3, ["start_s", "after", "route", "tag", "max_rate_Bps"]),
    "add_flows": (3, ["start_s", "tag", "routes", "after"]),
    "add_delay": (1, ["start_s", "after", "tag"]),
    "add_dependency": (2, []),
    "add_fault": (0, ["at_s", "links", "nodes", "planes", "factor", "until_s"]),
}


@st.composite
def add_calls(draw):
    name = draw(st.sampled_from(sorted(ADD_SIGNATURES)))
    n_args, keywords = ADD_SIGNATURES[name]
    args = [draw(anything) for _ in range(n_args)]
    kwargs = {k: draw(anything) for k in keywords if draw(st.booleans())}
    if name == "add_fault":
        kwargs.setdefault("at_s", draw(anything))
    return name, args, kwargs


def test_refused_adds_leave_nothing_and_the_rest_equals_the_reference():
    """Adds with arbitrary arguments interleaved with good flows: every refusal is a
    FabricsimError that leaves the activities and faults as they were, and the run equals
    the pure-Python reference of the good flows alone, with every constraint within capacity
    and bytes conserved (check_invariants)."""
    @explore(60, st.lists(add_calls(), max_size=8),
             st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.floats(1.0, 1e9), st.floats(0, 1e-3))
                      .filter(lambda f: f[0] != f[1]), min_size=1, max_size=5))
    def seen(calls, flows):
        m = _small_topology()
        for k in range(max(len(calls), len(flows))):
            if k < len(calls):
                name, args, kwargs = calls[k]
                before = (m.sc.n_activities, m.sc._core.n_faults)
                got = only_fabricsim_errors(getattr(m.sc, name), *args, **kwargs)
                if not refused(got):
                    return "an arbitrary add was valid"  # not this test's case: the reference lacks it
                assert (m.sc.n_activities, m.sc._core.n_faults) == before, (name, args, kwargs)
            if k < len(flows):
                src, dst, size, start = flows[k]
                m.flow(src, dst, size, start_s=start)
        compare_to_reference(m, m.run())
        return "compared"

    assert_reach(seen, "compared", COMPARED)


def test_bytes_are_conserved_through_faults():
    @explore(40, st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.floats(1.0, 1e12))
                          .filter(lambda f: f[0] != f[1]), min_size=1, max_size=6),
             st.one_of(st.just(0.0), st.floats(0.01, 1.0)), st.integers(0, 5))
    def seen(flows, factor, link):
        m = _small_topology()
        for src, dst, size in flows:
            m.flow(src, dst, size)
        m.fault(1e-4, [link], factor, until_s=1e-3)
        res = m.run()
        check_invariants(m, res)
        compare_to_reference(m, res)
        return "compared"

    assert_reach(seen, "compared", 1.0)


# ---- collectives ---------------------------------------------------------------------------

OPS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "send_recv"]
ALGOS = ["ring", "tree", "nvls", "direct", "halving_doubling", "hierarchical", "sharp", "nvls_sharp", "nvls_tree"]


@pytest.fixture(scope="module")
def fabrics():
    return [fs.hgx_h100(), fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"),
            fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2", sharp=True),
            fs.hgx_h100().fail(nodes=[3])]


def _p2p_alike(fabric, op, ranks) -> bool:
    """Whether every rank of the p2p schedule sends and receives alike (its estimate exact)."""
    from fabricsim.collectives.communicator import applied_fabric, communicator
    from fabricsim.collectives.cost import p2p

    cost = fs.CostModel()
    return p2p.alike(op, communicator(applied_fabric(fabric, cost), op, ranks), None, cost)


@st.composite
def collective_calls(draw, fabrics):
    """(fabric, op, size, ranks, algorithm, valid): valid ones name an op, ranks of the fabric
    (some with a failed GPU's, refused), a size and auto or an algorithm some ops take."""
    fabric = draw(st.sampled_from(fabrics), label="fabric")
    if draws_valid(draw, valid_in_10=8):
        op = draw(st.sampled_from(OPS))
        # auto mostly: an algorithm named at random often cannot run the op on those ranks
        algorithm = draw(st.one_of(st.just("auto"), st.just("auto"), st.just("auto"), st.sampled_from(ALGOS)))
        size = draw(st.one_of(st.floats(1, 1e9), st.sampled_from(["1MiB", "8M", 0, "64KiB"])))
        ranks = draw(st.one_of(st.none(), st.lists(st.integers(0, fabric.n_gpus - 1), min_size=2, max_size=8,
                                                   unique=True)))
        return fabric, op, size, ranks, algorithm, True
    op = draw(st.sampled_from(OPS + ["bogus"]))
    algorithm = draw(st.sampled_from(["auto", "x", *ALGOS]))
    size = draw(st.one_of(st.floats(1, 1e10), st.sampled_from(["1MiB", "0", 0, -1, math.nan, 1e308, "8M", "1 GiBB"])))
    ranks = draw(st.one_of(
        st.lists(st.integers(-1, fabric.n_gpus), min_size=1, max_size=6, unique=True),
        st.lists(st.integers(0, fabric.n_gpus - 1), min_size=2, max_size=6, unique=True).map(iter),
        st.sampled_from([[], [0, 0], ["gpu0"], {0, 1}])))
    return fabric, op, size, ranks, algorithm, False


def test_collectives_estimate_and_add_or_refuse_and_alone_take_their_analytical_time(fabrics):
    """What one estimate refuses, add_collective refuses too, leaving nothing; what it takes,
    a scenario runs alone on the idle fabric in exactly the estimated time (DESIGN section 2:
    on an uncongested fabric the flow and analytical results agree)."""
    @explore(120, collective_calls(fabrics))
    def seen(call):
        fabric, op, size, ranks, algorithm, _ = call
        as_iter = not isinstance(ranks, (list, set, type(None)))
        ranks = list(ranks) if as_iter else ranks
        est = only_fabricsim_errors(fs.estimate, fabric, op, size, iter(ranks) if as_iter else ranks,
                                    algorithm=algorithm)
        sc = fs.Scenario(fabric)
        got = only_fabricsim_errors(sc.add_collective, op, iter(ranks) if as_iter else ranks, size,
                                    algorithm=algorithm)
        if refused(got):
            assert sc.n_activities == 0, (op, ranks, size, algorithm)
            assert refused(est), str(got)  # what a scenario refuses, the estimate refuses (maybe for another reason first)
            return "refused"
        if refused(est):
            # A rank whose every link is down has no time to estimate; in a scenario its
            # collective is accepted and fails in its row, as a flow with no path does (one of
            # zero bytes moves nothing, so it never fails: Scenario.add_fault).
            assert isinstance(est, fs.ZeroCapacityPathError), str(est)
            res = sc.run()
            empty = fs.units.size_bytes(size) == 0
            assert (res.collectives["finish_s"][0].as_py() is None) != empty
            assert set(res.flows["status"].to_pylist()) == {"done" if empty else "failed"}
            return "failed in its row"
        assert est.time_s >= 0 and math.isfinite(est.time_s)
        res = sc.run()
        row, = res.collectives.to_pylist()
        assert (row["algorithm"], row["protocol"]) == (est.algorithm, est.protocol)
        assert row["analytical_s"] == pytest.approx(est.time_s, rel=1e-12)
        took_s = row["finish_s"] - row["start_s"]
        assert np.all(np.isfinite(res.links["bytes_carried"].to_numpy()))
        if est.algorithm == "p2p" and not _p2p_alike(fabric, op, ranks):
            # Where ranks send unlike amounts, the p2p estimate is a lower bound (cost.p2p.time_s).
            assert est.time_s <= took_s * (1 + 1e-9) + 1e-15, (est.time_s, took_s)
            return "p2p lower bound"
        assert took_s == pytest.approx(est.time_s, rel=1e-9, abs=1e-15)
        return "compared"

    assert_reach(seen, "compared", COMPARED)
    assert_reach(seen, "refused", RAN)


def test_a_zero_byte_send_recv_takes_nccls_p2p_latency_and_an_empty_collective_no_time():
    # NCCL src/enqueue.cc: an empty send/recv is still a proxy operation (one step, no bytes),
    # an empty collective is discarded (taskAppend).
    cost = fs.cost_model.DEFAULT
    for fabric, ranks, hop_s in ((fs.hgx_h100(), [0, 1], cost.p2p_ll_base_latency_s + cost.p2p_ll_nvlink_latency_s),
                                 (fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"), [0, 8],
                                  cost.p2p_base_latency_s + cost.p2p_net_latency_s)):
        for op, want_s in (("send_recv", hop_s * cost.latency_scale), ("all_reduce", 0.0), ("all_to_all", 0.0)):
            sc = fs.Scenario(fabric)
            sc.add_collective(op, ranks, 0)
            row, = sc.run().collectives.to_pylist()
            est = fs.estimate(fabric, op, 0, ranks)
            assert row["finish_s"] - row["start_s"] == pytest.approx(want_s, rel=1e-12, abs=0.0), (op, ranks)
            assert est.time_s == pytest.approx(want_s, rel=1e-12, abs=0.0), (op, ranks)
            assert want_s > 0 or op != "send_recv"
            # a discarded collective launches no kernel, so holds no SMs (one byte would)
            assert est.n_channels == 0, (op, est.n_channels)
            assert fs.estimate(fabric, op, 1, ranks).n_channels > 0 or op != "all_reduce"


# ---- catalog -------------------------------------------------------------------------------

# Valid values of a switch's fields, each with the value the part must then hold.
SWITCH_FIELDS = {
    "ports": st.integers(1, 512).map(lambda v: (v, v)),
    "port_Bps": st.one_of(st.floats(1e6, 1e13).map(lambda v: (v, v)),
                          st.sampled_from([("800Gb/s", 1e11), ("400Gb/s", 5e10), ("100GB/s", 1e11)])),
    "latency_s": st.one_of(st.floats(0, 1e-5).map(lambda v: (v, v)), st.sampled_from([("150ns", 1.5e-7), ("1us", 1e-6)])),
    "optics_watts_per_port": st.floats(0, 100).map(lambda v: (v, v)),
    "sharp": st.booleans().map(lambda v: (v, v)),
    "protocol": st.sampled_from(["infiniband", "ethernet"]).map(lambda v: (v, v)),
}
hostile_fields = st.dictionaries(st.sampled_from(["ports", "port_Bps", "lane_Bps", "rate_Bps", "latency_s", "value",
                                                  "watts", "protocol", "protocols", "optics", "form", "x"]),
                                 anything, min_size=1, max_size=5)


@st.composite
def part_additions(draw):
    """(kind, fields given, fields expected or None): valid switches that change some fields of
    the Quantum-X800's, or any kind with hostile fields."""
    if draws_valid(draw):
        changes = draw(st.dictionaries(st.sampled_from(sorted(SWITCH_FIELDS)), st.none(), max_size=4))
        pairs = {k: draw(SWITCH_FIELDS[k]) for k in changes}
        base = dict(fs.catalog.part("quantum-x800"))
        # a port's lanes must make up its rate
        given = {**base, **{k: v for k, (v, _) in pairs.items()}}
        if "port_Bps" in pairs:
            given["lane_Bps"] = pairs["port_Bps"][1]
        expected = {**base, **{k: want for k, (_, want) in pairs.items()}}
        expected["lane_Bps"] = given["lane_Bps"] if "port_Bps" in pairs else base["lane_Bps"]
        return "switch", given, expected
    kind = draw(st.sampled_from(["switch", "nic", "gpu", "optic", "efficiency", "pcie", "bogus"]))
    base = {"switch": "quantum-x800", "nic": "connectx-7", "gpu": "h100"}.get(kind)
    fields = {} if base is None else dict(fs.catalog.part(base))
    fields.update(draw(hostile_fields))
    return kind, fields, None


def test_add_part_adds_what_it_is_given_or_refuses_and_leaves_the_catalog_as_it_was():
    @explore(100, part_additions())
    def seen(addition):
        kind, fields, expected = addition
        before = fs.catalog.parts()
        got = only_fabricsim_errors(fs.catalog.add_part, "prop-part", kind, source="[assumed] a test", **fields)
        if refused(got):
            assert expected is None, (fields, str(got))
            assert fs.catalog.parts().equals(before)
            return "refused"
        try:
            held = dict(fs.catalog.part("prop-part"))
            if expected is None:
                return "ran"
            assert held.keys() == expected.keys()
            for k, want in expected.items():
                assert held[k] == (pytest.approx(want, rel=1e-15) if isinstance(want, float) else want), k
            return "compared"
        finally:
            fs.catalog.remove_part("prop-part")
            assert fs.catalog.parts().equals(before)

    assert_reach(seen, "compared", COMPARED)
    assert_reach(seen, "refused", RAN)


@st.composite
def parts_files(draw):
    """(bytes of a parts file, {name: expected fields} or None): valid files of NICs at drawn
    rates, or hostile bytes."""
    if draws_valid(draw):
        cx7 = dict(fs.catalog.part("cx7"))
        parts, expected = {}, {}
        for i in range(draw(st.integers(1, 3))):
            rate, want = draw(st.one_of(st.floats(1e6, 1e13).map(lambda v: (v, v)),
                                        st.sampled_from([("800Gb/s", 1e11), ("1.6Tb/s", 2e11)])))
            name = f"prop-nic-{i}"
            parts[name] = dict(cx7, kind="nic", rate_Bps=rate, protocols=list(cx7["protocols"]),
                               sources={f: "[assumed] a test" for f in cx7})
            expected[name] = dict(cx7, rate_Bps=want)
        return json.dumps({"parts": parts}).encode(), expected
    content = draw(st.one_of(st.binary(max_size=64), st.sampled_from(
        [b"[" * 5000 + b"]" * 5000, b"\xff\xfe{}", b"{\"parts\": 1}", b"{\"parts\": {\"a\": {\"kind\": \"pcie\"}}}",
         b"1" * 5000, b"{\"parts\": {\"n\": {\"kind\": \"nic\", \"rate_Bps\": \"fast\"}}}"])))
    return content, None


def test_load_parts_loads_what_the_file_holds_or_refuses_any_bytes(tmp_path_factory):
    @explore(80, parts_files())
    def seen(file):
        content, expected = file
        path = tmp_path_factory.mktemp("parts") / "p.json"
        path.write_bytes(content)
        before = fs.catalog.parts()
        got = only_fabricsim_errors(fs.catalog.load_parts, path)
        if refused(got):
            assert expected is None, str(got)
            assert fs.catalog.parts().equals(before)
            assert str(path) in str(got)
            return "refused"
        try:
            if expected is None:
                return "ran"
            assert [p.name for p in got] == list(expected)
            for name, fields in expected.items():
                assert dict(fs.catalog.part(name)) == fields, name
            return "compared"
        finally:
            for p in got:
                fs.catalog.remove_part(p.name)
            assert fs.catalog.parts().equals(before)

    assert_reach(seen, "compared", COMPARED)
    assert_reach(seen, "refused", RAN)


# ---- export --------------------------------------------------------------------------------


def test_to_parquet_writes_whole_or_raises_a_write_error(tmp_path_factory):
    import pyarrow.parquet as pq

    from fabricsim.fabrics.links import compact_names

    @explore(30, mostly(st.sampled_from(["out", "a/b/c", "existing", "deep/er/still"]),
                        st.sampled_from(["file", "file/sub", "nul\0", ""])), st.booleans())
    def seen(name, record):
        root = tmp_path_factory.mktemp("export")
        (root / "file").write_text("")
        (root / "existing").mkdir()
        (root / "existing" / "rate_changes.parquet").write_text("an earlier run's")
        m = _small_topology()
        m.flow(0, 2, 1e6)
        res = m.sc.run(record_rates=record)
        got = only_fabricsim_errors(res.to_parquet, str(root / name) if name else name)
        if refused(got):
            assert name in ("file", "file/sub", "nul\0", ""), (name, str(got))
            assert not any(p.name.endswith(".tmp") for p in root.rglob("*"))
            return "refused"
        written = sorted(os.listdir(root / name))
        assert written == sorted(os.path.basename(p) for p in got)  # one run's tables, nothing else
        for path in got:
            table = pq.read_table(path).replace_schema_metadata(None)
            # What a file keeps of the node names: the ones its rows use (compact_names).
            expected = compact_names(getattr(res, os.path.basename(path).removesuffix(".parquet")))
            assert table.equals(expected.replace_schema_metadata(None)), path
        return "compared"

    assert_reach(seen, "compared", COMPARED)
    assert_reach(seen, "refused", RAN)
