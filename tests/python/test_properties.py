"""Property-based tests of the public API's promises under any input: only
FabricsimError subclasses escape, a refusal names the bad value, a refused add leaves the
scenario as it was, bytes are conserved, and results equal the reference where there is one.

Inputs mix valid values with the ones where things break: NaN, infinities, -0.0, subnormals,
1e-300, 1e300, the largest double, huge ints, bools, strings with other scripts' digits,
iterators, sets, nested lists. Each test keeps to a few dozen examples (the whole file runs in
a few seconds); the Rust core's own search is tests/rust/fuzz.rs."""

import math
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import fabricsim as fs
from fabricsim.exceptions import FabricsimError

from helpers import Model, check_invariants, compare_to_reference

# FABRICSIM_PROPERTY_SCALE=50 runs 50 times the examples, from a random start each time (a
# search for new failures); by default the few examples are the same every run.
SCALE = float(os.environ.get("FABRICSIM_PROPERTY_SCALE", "1"))
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                derandomize=SCALE == 1, database=None)


def examples(n):
    return max(1, int(n * SCALE))

NASTY_FLOATS = [0.0, -0.0, 1.0, 0.5, 2.0, -1.0, 5e-324, 2.2250738585072014e-308, 1e-300, 1e-9, 1e9, 1e300,
                1.0000000000000002e300, 9e307, 1e308, sys.float_info.max, math.inf, -math.inf, math.nan]
NASTY_INTS = [0, 1, 2, 3, 7, -1, 2**31, 2**32, 2**63, -(2**63) - 1, 10**30]
NASTY_TEXT = ["", " ", "1GiB", "800Gb/s", "500ns", "1e400 B", "\u0661\u0662Gb/s", "\uff11\uff12", "nan", "inf B",
              "-1GiB", "1.5.3", "12 zz", "1e-400s", "\x00", "\U0001f600"]

floats = st.one_of(st.sampled_from(NASTY_FLOATS), st.floats(allow_nan=True, allow_infinity=True),
                   st.floats(min_value=1e-3, max_value=1e6))
ints = st.one_of(st.sampled_from(NASTY_INTS), st.integers(-5, 40))
texts = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=8))
scalars = st.one_of(floats, ints, texts, st.booleans(), st.none(), st.just(np.float64(np.nan)), st.just(np.int64(3)),
                    st.just(1 + 2j))


def sequences(elements):
    """Lists, tuples, arrays, iterators, sets and ragged nestings of ``elements``."""
    lists = st.lists(elements, max_size=6)
    return st.one_of(
        lists, lists.map(tuple), lists.map(iter), lists.map(lambda v: set(x for x in v if _hashable(x))),
        st.lists(st.integers(-3, 40), max_size=6).map(lambda v: np.asarray(v, dtype=np.int64)),
        st.lists(st.floats(allow_nan=True), max_size=6).map(np.asarray),
        st.just([[1, 2], [3]]), st.just({0: 1}), st.just(np.zeros((2, 2))),
    )


def _hashable(x):
    try:
        hash(x)
        return True
    except TypeError:
        return False


anything = st.one_of(scalars, sequences(st.one_of(ints, floats, texts)))


def only_fabricsim_errors(call, *args, **kwargs):
    """``call(...)``'s result, or the FabricsimError it raised (any other exception fails)."""
    try:
        return call(*args, **kwargs)
    except FabricsimError as err:
        assert str(err), f"{type(err).__name__} without a message"
        return err


# ---- units -------------------------------------------------------------------------------


@settings(max_examples=examples(150), **SETTINGS)
@given(st.one_of(texts, scalars), st.sampled_from(["bandwidth_Bps", "size_bytes", "duration_s"]))
def test_unit_parsers_take_any_value(value, parser):
    got = only_fabricsim_errors(getattr(fs.units, parser), value)
    if isinstance(got, FabricsimError):
        if isinstance(value, str):  # the message names the text as given
            assert repr(value) in str(got), (value, str(got))
    elif isinstance(value, str):
        assert isinstance(got, float) and not (got < 0)
        assert all(not c.isdigit() or c in "0123456789" for c in value), value  # ASCII digits only
    else:  # a number passes through as it is
        assert got == value or (math.isnan(got) and math.isnan(value)), (value, got)


@settings(max_examples=examples(100), **SETTINGS)
@given(st.floats(min_value=1e-12, max_value=1e30), st.booleans())
def test_formatted_quantities_parse_back_close(x, bits):
    rate = fs.units.format_rate(x, bits=bits)
    assert fs.units.bandwidth_Bps(rate) == pytest.approx(x, rel=5e-3)
    assert fs.units.size_bytes(fs.units.format_bytes(x)) == pytest.approx(x, rel=5e-3)


# ---- generators --------------------------------------------------------------------------

GENERATORS = [
    (fs.hgx_h100, {}),
    (fs.clos, {"n_hosts": ints, "oversubscription": floats, "planes": ints, "tiers": ints, "switch": texts}),
    (fs.nvlink_domain, {"n_gpus": ints, "n_domains": ints, "tiers": ints, "gpu": texts}),
    (fs.cluster, {"n_domains": ints, "domain": st.sampled_from(["hgx-h100", "nvl72", "x"]),
                  "scale_out": st.sampled_from(["quantum-2", "sn5600", "bogus"])}),
    (fs.pcie_server, {"n_gpus": ints, "gpus_per_switch": ints, "nics_per_switch": ints}),
]


@settings(max_examples=examples(120), **SETTINGS)
@given(st.data())
def test_generators_build_or_refuse_with_a_fabricsim_error(data):
    make, params = data.draw(st.sampled_from(GENERATORS))
    # A required argument left out is Python's TypeError, not a value to check: always given.
    required = {"cluster": {"n_domains"}, "clos": {"n_hosts"}}.get(make.__name__, set())
    kwargs = {k: data.draw(v, label=k) for k, v in params.items()
              if k in required or data.draw(st.booleans(), label=f"give {k}")}
    if any(isinstance(v, int) and not isinstance(v, bool) and v > 64 for v in kwargs.values()):
        return  # large but valid sizes only take time; their refusals are tested with budgets
    got = only_fabricsim_errors(make, **kwargs)
    if not isinstance(got, FabricsimError):
        links = got.links
        assert links.num_rows == got.n_links
        caps = links["capacity_Bps"].to_numpy()
        assert np.all((caps > 0) & (caps <= fs._checks.MAX_CAPACITY_BPS))


@settings(max_examples=examples(120), **SETTINGS)
@given(sequences(ints), sequences(ints), st.one_of(floats, sequences(floats)), st.one_of(floats, st.none()),
       st.one_of(ints, st.none()))
def test_topology_from_arrays_builds_or_refuses(src, dst, capacity, latency, n_nodes):
    args = (src, dst, capacity) if latency is None else (src, dst, capacity, latency)
    got = only_fabricsim_errors(fs.Topology.from_arrays, *args, n_nodes=n_nodes)
    if not isinstance(got, FabricsimError):
        caps = got.links["capacity_Bps"].to_numpy()
        assert np.all((caps >= 0) & (caps <= fs._checks.MAX_CAPACITY_BPS))


@settings(max_examples=examples(150), **SETTINGS)
@given(st.lists(floats, min_size=1, max_size=4), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), floats),
                                                          max_size=8))
def test_max_min_rates_solve_or_refuse_and_equal_the_reference(capacity, entries):
    from reference import max_min_reference_coo

    n_flows = 1 + max((f for f, _, _ in entries), default=0)
    fi = [f for f, _, _ in entries]
    ci = [c for _, c, _ in entries]
    k = [x for _, _, x in entries]
    got = only_fabricsim_errors(fs.max_min_rates, capacity, fi, ci, k, n_flows=n_flows)
    if isinstance(got, FabricsimError):
        return
    assert np.all(np.isfinite(got)) and np.all(got >= 0)
    moderate = all(1e-3 <= c <= 1e6 for c in capacity) and all(1e-3 <= x <= 1e3 for x in k)
    if moderate and entries:
        want = max_min_reference_coo(capacity, fi, ci, k, n_flows)
        np.testing.assert_allclose(got, want, rtol=1e-9)


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


@settings(max_examples=examples(60), **SETTINGS)
@given(st.lists(add_calls(), max_size=8),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.floats(1.0, 1e9), st.floats(0, 1e-3)),
                min_size=1, max_size=5))
def test_refused_adds_leave_nothing_and_the_rest_equals_the_reference(calls, flows):
    """Adds with arbitrary arguments interleaved with good flows: every refusal is a
    FabricsimError that leaves the activities and faults as they were, and the run equals
    the pure-Python reference of the good flows alone, with every constraint within capacity
    and bytes conserved (check_invariants)."""
    m = _small_topology()
    for k in range(max(len(calls), len(flows))):
        if k < len(calls):
            name, args, kwargs = calls[k]
            before = (m.sc.n_activities, m.sc._core.n_faults)
            got = only_fabricsim_errors(getattr(m.sc, name), *args, **kwargs)
            if not isinstance(got, FabricsimError):
                return  # arbitrary arguments that happen to be valid: not this test's case
            assert (m.sc.n_activities, m.sc._core.n_faults) == before, (name, args, kwargs)
        if k < len(flows) and flows[k][0] != flows[k][1]:
            src, dst, size, start = flows[k]
            m.flow(src, dst, size, start_s=start)
    assume(m.flow_ids)
    res = m.run()
    compare_to_reference(m, res)


@settings(max_examples=examples(40), **SETTINGS)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.floats(1.0, 1e12)), min_size=1, max_size=6),
       st.one_of(st.just(0.0), st.floats(0.01, 1.0)), st.integers(0, 5))
def test_bytes_are_conserved_through_faults(flows, factor, link):
    m = _small_topology()
    for src, dst, size in flows:
        if src != dst:
            m.flow(src, dst, size)
    assume(m.flow_ids)
    m.fault(1e-4, [link], factor, until_s=1e-3)
    res = m.run()
    check_invariants(m, res)
    compare_to_reference(m, res)


# ---- collectives ---------------------------------------------------------------------------

OPS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "send_recv", "bogus"]
ALGOS = ["auto", "ring", "tree", "nvls", "direct", "halving_doubling", "hierarchical", "sharp", "nvls_sharp", "x"]


@pytest.fixture(scope="module")
def fabrics():
    return [fs.hgx_h100(), fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"),
            fs.hgx_h100().fail(nodes=[3])]


@settings(max_examples=examples(80), **SETTINGS)
@given(st.data())
def test_collectives_estimate_and_add_or_refuse(fabrics, data):
    fabric = data.draw(st.sampled_from(fabrics), label="fabric")
    op = data.draw(st.sampled_from(OPS), label="op")
    algorithm = data.draw(st.sampled_from(ALGOS), label="algorithm")
    size = data.draw(st.one_of(st.floats(1, 1e10), st.sampled_from(["1MiB", "0", 0, -1, math.nan, 1e308, "8M"])),
                     label="size")
    ranks = data.draw(st.one_of(
        st.none(), st.lists(st.integers(-1, fabric.n_gpus), min_size=1, max_size=6, unique=True),
        st.lists(st.integers(0, fabric.n_gpus - 1), min_size=2, max_size=6, unique=True).map(iter),
        st.sampled_from([[], [0, 0], ["gpu0"], {0, 1}])), label="ranks")
    if isinstance(ranks, type(iter([]))):
        ranks = list(ranks)
        as_iter = True
    else:
        as_iter = False
    est = only_fabricsim_errors(fs.estimate, fabric, op, size, iter(ranks) if as_iter else ranks, algorithm=algorithm)
    if not isinstance(est, FabricsimError):
        assert est.time_s >= 0 and math.isfinite(est.time_s)
    sc = fs.Scenario(fabric)
    got = only_fabricsim_errors(sc.add_collective, op, iter(ranks) if as_iter else ranks, size, algorithm=algorithm)
    if isinstance(got, FabricsimError):
        assert sc.n_activities == 0, (op, ranks, size, algorithm)
        return
    res = sc.run()
    row, = res.collectives.to_pylist()
    flows = res.flows
    if all(s == "done" for s in flows["status"].to_pylist()):
        assert row["finish_s"] >= row["start_s"]
    # Every byte a flow moved reached a link or a reduction engine (coefficients > 0).
    assert np.all(np.isfinite(res.links["bytes_carried"].to_numpy()))


# ---- catalog -------------------------------------------------------------------------------


@settings(max_examples=examples(80), **SETTINGS)
@given(st.sampled_from(["switch", "nic", "gpu", "optic", "efficiency", "pcie", "bogus"]),
       st.dictionaries(st.sampled_from(["ports", "port_Bps", "lane_Bps", "rate_Bps", "latency_s", "value", "watts",
                                        "protocol", "protocols", "optics", "form", "x"]), anything, max_size=5))
def test_add_part_adds_or_refuses_and_leaves_the_catalog_as_it_was(kind, overrides):
    base = {
        "switch": fs.catalog.part("quantum-x800"), "nic": fs.catalog.part("connectx-7"),
        "gpu": fs.catalog.part("h100"), "optic": None, "efficiency": None, "pcie": None, "bogus": None,
    }[kind]
    fields = {} if base is None else {k: v for k, v in base.to_dict().items() if k not in ("kind", "description", "sources")}
    fields.update(overrides)
    before = fs.catalog.parts()
    got = only_fabricsim_errors(fs.catalog.add_part, "prop-part", kind, source="[assumed] a test", **fields)
    if isinstance(got, FabricsimError):
        assert fs.catalog.parts().equals(before)
    else:
        fs.catalog.remove_part("prop-part")


@settings(max_examples=examples(60), **SETTINGS)
@given(st.one_of(st.binary(max_size=64), st.sampled_from([b"[" * 5000 + b"]" * 5000, b"\xff\xfe{}", b"{\"parts\": 1}",
                                                          b"{\"parts\": {\"a\": {\"kind\": \"pcie\"}}}", b"1" * 5000])))
def test_load_parts_reads_or_refuses_any_bytes(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("parts") / "p.json"
    path.write_bytes(content)
    before = fs.catalog.parts()
    got = only_fabricsim_errors(fs.catalog.load_parts, path)
    if isinstance(got, FabricsimError):
        assert fs.catalog.parts().equals(before)
        assert str(path) in str(got)
    else:
        for p in got:
            fs.catalog.remove_part(p.name)


# ---- export --------------------------------------------------------------------------------


@settings(max_examples=examples(30), **SETTINGS)
@given(st.sampled_from(["out", "a/b/c", "file", "file/sub", "nul\0", ""]), st.booleans())
def test_to_parquet_writes_whole_or_raises_a_write_error(tmp_path_factory, name, record):
    import pyarrow.parquet as pq

    from fabricsim.fabrics.links import compact_names

    root = tmp_path_factory.mktemp("export")
    (root / "file").write_text("")
    m = _small_topology()
    m.flow(0, 2, 1e6)
    res = m.sc.run(record_rates=record)
    got = only_fabricsim_errors(res.to_parquet, str(root / name) if name else name)
    if isinstance(got, FabricsimError):
        assert not any(p.name.endswith(".tmp") for p in root.rglob("*"))
    else:
        for path in got:
            table = pq.read_table(path)
            table = table.replace_schema_metadata(None)
            name_ = os.path.basename(path).removesuffix(".parquet")
            # What a file keeps of the node names: the ones its rows use (compact_names).
            expected = compact_names(getattr(res, name_))
            assert table.equals(expected.replace_schema_metadata(None)), name_
