"""Failures over a job's life: rates derived from their data, sampling against its
closed forms, restart and reroute costs, determinism, bad input and the CPO comparison."""

from __future__ import annotations

import json
import math
from importlib import resources

import numpy as np
import pyarrow.compute as pc
import pytest

import fabricsim as fs
from fabricsim import reliability as rl
from fabricsim.exceptions import InvalidArgumentError

DATA = json.loads(resources.files("fabricsim.workloads.reliability").joinpath("data/failure_rates.json").read_text(encoding="utf-8"))
REF = DATA["reference"]
HOUR = 3600.0


@pytest.fixture(scope="module")
def reference_fabric():
    f = DATA["reference"]["fabric"]
    return fs.cluster(domain=f["domain"], n_domains=f["n_domains"], scale_out=f["scale_out"])


@pytest.fixture(scope="module")
def small():
    return fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2")


def _zero_rates(**keep: float) -> rl.FailureRates:
    rates = {p: 0.0 for p in rl.PARTS}
    rates.update(keep)
    return rl.failure_rates().replace(rates_per_hour=rates)


def _counts(table, section: str | None = None) -> dict[str, float]:
    return {r["quantity"]: r["value"] for r in table.to_pylist() if section is None or r["section"] == section}


# ---- the data


def test_table5_adds_up_to_the_papers_419_interruptions():
    assert sum(r["count"] for r in DATA["table5"]) == REF["unexpected_interruptions"] == 419
    assert REF["hours"] == REF["days"] * 24
    assert REF["hosts"] * REF["gpus_per_host"] == REF["gpus"]
    split = DATA["network_split"]
    assert math.isclose(split["switch"] + split["optics"] + split["link"], 1.0)


def test_reference_denominators_are_the_reference_fabrics_own_counts(reference_fabric):
    d = _counts(reference_fabric.describe().table, "counts")
    c = REF["fabric_counts"]
    assert d["NICs"] == c["nics"]
    assert d["leaf switches"] + d["spine switches"] + d["core switches"] == c["switches"]
    assert d["pluggable optical transceivers"] == c["transceivers"]
    assert d["scale-out cables"] == c["cables"]
    # part_counts counts the same parts by location.
    t = rl.part_counts(reference_fabric).to_pylist()
    by = {}
    for r in t:
        by[r["part"]] = by.get(r["part"], 0.0) + r["units"]
    assert by["optics"] == c["transceivers"] and by["link"] == c["cables"] and by["switch"] == c["switches"]
    assert by["gpu"] == REF["gpus"] and by["host"] == REF["hosts"] and by["nic"] == c["nics"]


def test_rates_over_the_reference_run_give_back_each_row_of_table5(reference_fabric):
    t = rl.expected_failures(reference_fabric, horizon_s=REF["hours"] * HOUR)
    got: dict[str, float] = {}
    for r in t.to_pylist():
        got[r["part"]] = got.get(r["part"], 0.0) + r["expected"]
    want: dict[str, float] = {}
    for row in DATA["table5"]:
        want[row["part"]] = want.get(row["part"], 0) + row["count"]
    network = want.pop("network")
    for p in ("switch", "optics", "link"):
        want[p] = network * DATA["network_split"][p]
    assert set(got) - {"cpo_port"} == set(want)
    for p, v in want.items():
        assert got[p] == pytest.approx(v, rel=1e-9), p
    assert sum(got.values()) == pytest.approx(419, rel=1e-9)


def test_every_rate_has_a_derivation():
    t = rl.failure_rates().table.to_pylist()
    assert [r["part"] for r in t] == list(rl.PARTS)
    for r in t:
        assert r["rate_per_hour"] > 0 and r["derivation"], r


# ---- sampling against the closed form


def test_mean_count_of_each_part_is_rate_x_units_x_horizon(small):
    horizon_s = 200 * 86400.0
    # Rates raised so that every part fails a few times per run on 128 GPUs.
    rates = rl.failure_rates()
    rates = rates.replace(rates_per_hour={p: rates.rate_per_hour(p) * 200 for p in rl.PARTS if p != "cpo_port"})
    exp = rl.expected_failures(small, horizon_s=horizon_s, rates=rates)
    want: dict[tuple[str, str], float] = {(r["part"], r["location"]): r["expected"] for r in exp.to_pylist()}
    n_seeds = 40
    got = {k: 0 for k in want}
    for seed in range(n_seeds):
        f = rl.simulate(small, 7.5, horizon_s=horizon_s, seed=seed, rates=rates).failures
        for p, loc in zip(f.column("part").to_pylist(), f.column("location").to_pylist()):
            got[(p, loc)] += 1
    for k, lam in want.items():
        # Poisson: the mean of n_seeds draws has standard deviation sqrt(lam / n_seeds).
        assert abs(got[k] / n_seeds - lam) < 5 * math.sqrt(lam / n_seeds) + 1e-9, (k, got[k] / n_seeds, lam)


def test_lost_work_per_restart_is_half_the_checkpoint_interval_plus_the_restart(small):
    # Only GPUs fail, at a total of 0.01 per hour: with a 1 h checkpoint interval the time since
    # the last checkpoint is (Exp mod C), whose mean 1/L - C/(e^(LC) - 1) is C/2 - L C^2/12 + ...
    # (0.4992 h), and a failure inside a 6 min restart is rare (L x R = 0.001).
    C, R = 3600.0, 360.0
    total_per_hour = 0.01
    rates = _zero_rates(gpu=total_per_hour / small.n_gpus)
    policy = rl.Policy(checkpoint_interval_s=C, restart_s=R)
    lost, n = 0.0, 0
    for seed in range(4):
        res = rl.simulate(small, 7.5, horizon_s=5e5 * HOUR, seed=seed, rates=rates, policy=policy)
        f = res.failures
        assert set(f.column("consequence").to_pylist()) == {"restart"}
        lost += float(pc.sum(f["lost_s"]).as_py())
        n += f.num_rows
    assert n > 10_000
    L = total_per_hour / HOUR
    exact = 1 / L - C / math.expm1(L * C) + R
    sigma = C / math.sqrt(12 * n)  # the spread of a uniform [0, C) mean
    assert abs(lost / n - exact) < 5 * sigma + 0.002 * R
    assert abs(lost / n - (C / 2 + R)) < 0.01 * (C / 2 + R)


def test_goodput_is_horizon_less_lost_time(small):
    res = rl.simulate(small, 7.5, horizon_s=365 * 86400.0, seed=3,
                      rates=rl.failure_rates().replace(rates_per_hour={"gpu": 1e-3}))
    lost = float(pc.sum(res.failures["lost_s"]).as_py())
    assert res.goodput == pytest.approx(1 - lost / res.horizon_s, rel=1e-12)
    s = _counts(res.summary)
    assert s["restarts"] == res.n_restarts == sum(c == "restart" for c in res.failures.column("consequence").to_pylist())
    assert s["lost"] == pytest.approx(sum(v for k, v in res.lost_by_cause().items()), rel=1e-12)
    # Checkpoint writes cost write/interval of the running time.
    pol = rl.Policy(checkpoint_interval_s=1800, checkpoint_write_s=18)
    res2 = rl.simulate(small, 7.5, horizon_s=365 * 86400.0, seed=3, policy=pol,
                       rates=rl.failure_rates().replace(rates_per_hour={"gpu": 1e-3}))
    running = res2.horizon_s - float(pc.sum(res2.failures["downtime_s"]).as_py())
    assert _counts(res2.summary)["checkpoint writes"] == pytest.approx(running * 0.01, rel=1e-12)


def test_a_rerouted_spine_failure_slows_the_step_by_the_closed_form(reference_fabric):
    step_s, exposed = 7.5, 0.5
    rates = _zero_rates(switch=1e-3)
    res = rl.simulate(reference_fabric, step_s, horizon_s=30 * 86400.0, seed=0, rates=rates,
                      exposed_network_s=exposed)
    so = reference_fabric.structure["scale_out"]
    f_spine = so["leaf_spine_width"] / so["leaf_up"]
    f_core = so["spine_core_width"] / so["spine_up"]
    repair = rl.failure_rates().repair_s["switch"]
    seen = set()
    for r in res.failures.to_pylist():
        if r["location"] == "leaf":
            assert r["consequence"] == "restart" and r["lost_s"] > 0
            continue
        f = f_spine if r["location"] == "spine" else f_core
        slowed = step_s + exposed * (1 / (1 - f) - 1)
        assert r["consequence"] == "reroute" and r["step_s"] == pytest.approx(slowed)
        d = min(repair, res.horizon_s - r["time_s"])
        assert r["degraded_s"] == pytest.approx(d * (1 - step_s / slowed))
        assert r["lost_work_s"] == 0 and r["downtime_s"] == 0
        seen.add(r["location"])
    assert seen == {"spine", "core"}


def test_nccl_fallback_to_fewer_rails_costs_one_rail_of_eight(reference_fabric):
    rates = _zero_rates(nic=1e-4)
    pol = rl.Policy(consequences={"nic": "fallback"})
    res = rl.simulate(reference_fabric, 7.5, horizon_s=10 * 86400.0, seed=1, rates=rates, policy=pol,
                      exposed_network_s=1.0)
    rails = reference_fabric.structure["scale_out"]["rails"]
    assert res.failures.num_rows > 0 and res.n_restarts == 0
    for r in res.failures.to_pylist():
        assert r["step_s"] == pytest.approx(7.5 + 1.0 * (rails / (rails - 1) - 1))
    # A given slowdown (NCCL's fallback to a slower algorithm, measured) replaces the closed form.
    pol2 = rl.Policy(consequences={"nic": "fallback"}, slowdown={"nic": 3.0})
    res2 = rl.simulate(reference_fabric, 7.5, horizon_s=10 * 86400.0, seed=1, rates=rates, policy=pol2,
                       exposed_network_s=1.0)
    assert res2.failures.column("step_s").to_pylist() == pytest.approx([9.5] * res2.failures.num_rows)


def test_a_training_step_gives_its_step_time_and_exposed_network_time():
    from fabricsim import training

    f = fs.cluster(domain="hgx-h100", n_domains=2048, scale_out="quantum-2")
    par = training.Parallelism(**training.VALIDATION["llama3-405b-16k"]["parallelism"])
    job = training.TrainingStep("llama3-405b", par, f, check_memory=False)
    est = job.estimate()
    s = _counts(rl.simulate(f, job, horizon_s=86400.0, seed=0).summary)
    assert s["step"] == est.step_s
    assert s["exposed scale-out communication per step"] == pytest.approx(
        sum(est.parts[k] for k in ("dp", "pp", "cp", "ep")))


# ---- determinism


def test_same_seed_same_tables_other_seed_other_failures(small):
    kw = dict(horizon_s=365 * 86400.0, rates=rl.failure_rates().replace(rates_per_hour={"gpu": 1e-3}))
    a = rl.simulate(small, 7.5, seed=11, **kw)
    b = rl.simulate(small, 7.5, seed=11, **kw)
    c = rl.simulate(small, 7.5, seed=12, **kw)
    assert a.failures.equals(b.failures) and a.summary.equals(b.summary)
    assert not a.failures.equals(c.failures)


# ---- bad input


@pytest.mark.parametrize("bad", [-1e-6, float("nan"), float("inf"), -float("inf")])
def test_a_bad_failure_rate_is_refused_naming_it(small, bad):
    with pytest.raises(InvalidArgumentError, match=r"failure rate of 'gpu' must be a finite number >= 0.*" + repr(bad)):
        rl.failure_rates().replace(rates_per_hour={"gpu": bad})
    with pytest.raises(InvalidArgumentError, match=repr(bad)):
        rl.simulate(small, 7.5, horizon_s=HOUR, rates={"gpu": bad})


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_a_bad_horizon_is_refused(small, bad):
    with pytest.raises(InvalidArgumentError, match=r"horizon_s must be a finite number > 0.*" + repr(bad)):
        rl.simulate(small, 7.5, horizon_s=bad)
    with pytest.raises(InvalidArgumentError, match="horizon_s"):
        rl.expected_failures(small, horizon_s=bad)


@pytest.mark.parametrize("bad", [0, -60.0, float("nan"), float("inf")])
def test_a_bad_checkpoint_interval_is_refused(bad):
    with pytest.raises(InvalidArgumentError, match=r"checkpoint_interval_s must be a finite number > 0.*" + repr(bad)):
        rl.Policy(checkpoint_interval_s=bad)


def test_impossible_consequences_and_unknown_parts_are_refused():
    with pytest.raises(InvalidArgumentError, match="reroute.*not possible for gpu"):
        rl.Policy(consequences={"gpu": "reroute"})
    with pytest.raises(InvalidArgumentError, match="not possible for switch at 'leaf'"):
        rl.Policy(consequences={"switch": "reroute"})
    with pytest.raises(InvalidArgumentError, match="fallback.*not possible for link at 'leaf-spine'"):
        rl.Policy(consequences={"link.leaf-spine": "fallback"})
    with pytest.raises(InvalidArgumentError, match="one of restart, reroute, fallback, ignore"):
        rl.Policy(consequences={"nic": "pray"})
    with pytest.raises(InvalidArgumentError, match="unknown part 'tpu'"):
        rl.failure_rates().replace(rates_per_hour={"tpu": 1e-6})
    with pytest.raises(InvalidArgumentError, match="restart_s must be a finite number >= 0"):
        rl.Policy(restart_s=-1)
    with pytest.raises(InvalidArgumentError, match="slowdown.*>= 1"):
        rl.Policy(slowdown={"nic": 0.5})


# ---- pluggable against co-packaged optics


@pytest.fixture(scope="module")
def optics_pair():
    a = fs.cluster(domain="hgx-h100", n_domains=64, scale_out="quantum-x800")
    b = fs.cluster(domain="hgx-h100", n_domains=64, scale_out="quantum-x-photonics")
    return a, b


def test_cpo_per_port_ratio_is_the_mechanisms_and_far_from_10x(optics_pair):
    mech = DATA["optics_mechanisms"]
    factor = sum(s * mech["cpo_factors"].get(k, 1.0) for k, s in mech["shares"].items())
    assert rl.cpo_port_factor() == pytest.approx(factor)
    t = {r["metric"]: r for r in rl.compare_optics(*optics_pair, 7.5, horizon_s=30 * 86400.0, seeds=2).to_pylist()}
    per_port = t["optics failures per switch port per hour"]
    assert per_port["ratio"] == pytest.approx(1 / factor)
    assert t["switch-side optics failures per hour"]["ratio"] == pytest.approx(1 / factor)
    # The NICs' transceivers stay pluggable: no CPO switch can remove more than the switch side.
    bound = t["upper bound: CPO switch optics that never fail"]["ratio"]
    overall = t["optics failures per hour, NIC side included"]["ratio"]
    assert 1 < overall < bound < 10
    assert 1 <= t["network failures per hour (NIC, switch, optics, link)"]["ratio"] < overall
    assert t["all failures per hour"]["ratio"] < 1.05


def test_cpo_optics_that_never_fail_reach_the_bound(optics_pair):
    rates = rl.failure_rates().replace(cpo_factors={k: 0.0 for k in DATA["optics_mechanisms"]["shares"]})
    t = {r["metric"]: r for r in rl.compare_optics(*optics_pair, 7.5, horizon_s=30 * 86400.0, seeds=1,
                                                   rates=rates).to_pylist()}
    assert t["optics failures per hour, NIC side included"]["ratio"] == pytest.approx(
        t["upper bound: CPO switch optics that never fail"]["ratio"])
    # Counted from the fabric: (NIC-side + switch-side transceivers) / NIC-side.
    a = optics_pair[0]
    d = _counts(a.describe().table, "counts")
    nic_side = d["NICs"]  # one single-port cage per ConnectX-7
    assert t["upper bound: CPO switch optics that never fail"]["ratio"] == pytest.approx(
        d["pluggable optical transceivers"] / nic_side)


def test_compare_optics_refuses_fabrics_of_the_wrong_kind(optics_pair):
    a, b = optics_pair
    with pytest.raises(InvalidArgumentError, match="co_packaged must be a fabric whose switches have co-packaged optics"):
        rl.compare_optics(a, a, 7.5, horizon_s=86400.0)
    with pytest.raises(InvalidArgumentError, match="pluggable must be"):
        rl.compare_optics(b, b, 7.5, horizon_s=86400.0)


def test_a_job_on_part_of_the_fabric_sees_that_part(optics_pair):
    a = optics_pair[0]
    full = rl.expected_failures(a, horizon_s=86400.0, gpus=a.n_gpus)
    half = rl.expected_failures(a, horizon_s=86400.0, gpus=a.n_gpus // 2)
    assert np.allclose(np.asarray(half.column("expected")) * 2, np.asarray(full.column("expected")))
    with pytest.raises(InvalidArgumentError, match="between 1 and the fabric's 512"):
        rl.expected_failures(a, horizon_s=86400.0, gpus=10_000)
