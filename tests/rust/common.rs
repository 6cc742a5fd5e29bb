//! Slow, obviously-right references shared by the integration tests.
#![allow(dead_code)]

use fabricsim::engine::{Activities, Disruption, Kind, Outcome, RunOutput};
use fabricsim::ids::ActivityId;
use fabricsim::rng::Rng;
use fabricsim::solver::Usage;

/// Progressive filling written plainly: O(rounds * entries).
/// `usage[f]` lists (constraint, coefficient); `cap[f]` is the flow's rate cap.
pub fn naive_max_min(capacity: &[f64], usage: &[Vec<(usize, f64)>], cap: &[f64]) -> Vec<f64> {
    let n = usage.len();
    let mut rate = vec![0.0; n];
    let mut frozen = vec![false; n];
    loop {
        let unfrozen: Vec<usize> = (0..n).filter(|&f| !frozen[f]).collect();
        if unfrozen.is_empty() {
            return rate;
        }
        // Next level: lowest saturation level of any constraint, or the lowest cap.
        let mut level = f64::INFINITY;
        for (c, &capacity_c) in capacity.iter().enumerate() {
            let mut fixed = 0.0;
            let mut rising = 0.0;
            for f in 0..n {
                for &(cc, k) in &usage[f] {
                    if cc == c {
                        if frozen[f] {
                            fixed += k * rate[f];
                        } else {
                            rising += k;
                        }
                    }
                }
            }
            if rising > 0.0 {
                level = level.min((capacity_c - fixed) / rising);
            }
        }
        for &f in &unfrozen {
            level = level.min(cap[f]);
        }
        // Freeze every flow at its cap or on a constraint saturated at this level.
        let mut newly = Vec::new();
        for &f in &unfrozen {
            if cap[f] <= level * (1.0 + 1e-12) {
                newly.push(f);
                continue;
            }
            for &(c, _) in &usage[f] {
                let mut load = 0.0;
                for g in 0..n {
                    for &(cc, k) in &usage[g] {
                        if cc == c {
                            load += k * if frozen[g] { rate[g] } else { level };
                        }
                    }
                }
                if load >= capacity[c] * (1.0 - 1e-12) {
                    newly.push(f);
                    break;
                }
            }
        }
        assert!(!newly.is_empty(), "naive filling made no progress");
        for f in newly {
            frozen[f] = true;
            rate[f] = level.min(cap[f]);
        }
    }
}

/// Event-driven simulation recomputing every rate from scratch at every event.
/// Returns (ready, start, finish) per activity.
pub fn naive_run(
    capacity: &[f64],
    acts: &Activities,
    deps: &[(usize, usize)],
) -> Vec<(f64, f64, f64)> {
    naive_run_disrupted(capacity, acts, deps, &[])
        .iter()
        .map(|r| (r.ready, r.start, r.finish))
        .collect()
}

/// What the naive simulation says of one activity.
#[derive(Debug, Clone, Copy)]
pub struct Naive {
    pub ready: f64,
    pub start: f64,
    pub finish: f64,
    pub failed: f64,
    pub outcome: Outcome,
}

/// `naive_run` with disruptions, applied plainly after the finishes and starts of their
/// instant: capacities change, live flows take their new usage list or fail, and a flow
/// transferring on a constraint of capacity 0 fails. Failures skip every dependent.
pub fn naive_run_disrupted(
    capacity: &[f64],
    acts: &Activities,
    deps: &[(usize, usize)],
    disruptions: &[Disruption],
) -> Vec<Naive> {
    let n = acts.len();
    let mut capacity = capacity.to_vec();
    let mut usage: Vec<Vec<(usize, f64)>> = (0..n)
        .map(|a| plain(acts.usage(ActivityId(a as u32))))
        .collect();
    let mut pending: Vec<&Disruption> = disruptions.iter().collect();
    pending.sort_by(|a, b| a.time_s.total_cmp(&b.time_s));
    let mut pending = pending.into_iter().peekable();
    let mut ready = vec![f64::NAN; n];
    let mut start = vec![f64::NAN; n];
    let mut finish = vec![f64::NAN; n];
    let mut failed = vec![f64::NAN; n];
    // Failed, or waiting (directly or not) for a failed activity.
    let mut dead = vec![false; n];
    let mut no_path = vec![false; n];
    let mut remaining: Vec<f64> = (0..n).map(|a| acts.bytes(ActivityId(a as u32))).collect();
    let mut transferring: Vec<usize> = Vec::new();
    let mut now = 0.0f64;
    let deps_done = |finish: &Vec<f64>, a: usize| {
        deps.iter()
            .filter(|&&(x, _)| x == a)
            .all(|&(_, after)| !finish[after].is_nan())
    };
    let dep_time = |finish: &Vec<f64>, a: usize| {
        deps.iter()
            .filter(|&&(x, _)| x == a)
            .map(|&(_, after)| finish[after])
            .fold(0.0, f64::max)
    };
    // Flows that fail at this instant; what waits for them dies once all are known.
    let mut failing: Vec<usize> = Vec::new();
    loop {
        // Mark ready, start transfers and end delays that are due now (repeat for chains).
        loop {
            let mut changed = false;
            for a in 0..n {
                let id = ActivityId(a as u32);
                if dead[a] {
                    continue;
                }
                if ready[a].is_nan() && deps_done(&finish, a) {
                    ready[a] = dep_time(&finish, a).max(acts.start_s(id));
                    changed = true;
                }
                if !ready[a].is_nan() && finish[a].is_nan() && start[a].is_nan() {
                    let due = ready[a] + acts.wait_s(id);
                    if due <= now * (1.0 + 1e-12) {
                        start[a] = due;
                        changed = true;
                        match acts.kind(id) {
                            Kind::Delay => {
                                start[a] = ready[a];
                                finish[a] = due;
                            }
                            Kind::Flow if acts.bytes(id) == 0.0 => finish[a] = due,
                            Kind::Flow => transferring.push(a),
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
        while let Some(d) = pending.next_if(|d| d.time_s <= now * (1.0 + 1e-12)) {
            for &(c, cap) in &d.capacities {
                capacity[c as usize] = cap;
            }
            for (f, new) in &d.reroutes {
                let f = *f as usize;
                if dead[f] || !finish[f].is_nan() {
                    continue;
                }
                // The last reroute of the instant counts. Without a path, a transferring flow
                // fails below; a waiting one fails when it would start.
                match new {
                    Some(list) => {
                        usage[f] = plain(list);
                        no_path[f] = false;
                    }
                    None => no_path[f] = true,
                }
            }
        }
        for &a in &transferring {
            if !dead[a] && (no_path[a] || usage[a].iter().any(|&(c, _)| capacity[c] == 0.0)) {
                dead[a] = true;
                failing.push(a);
            }
        }
        for a in failing.drain(..) {
            failed[a] = now;
            if ready[a] > now {
                ready[a] = f64::NAN; // it would have been ready later
            }
        }
        loop {
            let mut changed = false;
            for &(x, after) in deps {
                if dead[after] && !dead[x] {
                    dead[x] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        transferring.retain(|&a| !dead[a]);
        let rates: Vec<f64> = {
            let usage: Vec<Vec<(usize, f64)>> =
                transferring.iter().map(|&a| usage[a].clone()).collect();
            let caps: Vec<f64> = transferring
                .iter()
                .map(|&a| acts.rate_cap_Bps(ActivityId(a as u32)))
                .collect();
            naive_max_min(&capacity, &usage, &caps)
        };
        // Next event: a transfer ending, a pending wait ending or a disruption.
        let mut next = pending.peek().map_or(f64::INFINITY, |d| d.time_s);
        for (i, &a) in transferring.iter().enumerate() {
            next = next.min(now + remaining[a] / rates[i]);
        }
        for a in 0..n {
            if !dead[a] && !ready[a].is_nan() && start[a].is_nan() {
                next = next.min(ready[a] + acts.wait_s(ActivityId(a as u32)));
            }
        }
        if next == f64::INFINITY {
            break;
        }
        let dt = next - now;
        now = next;
        let mut still = Vec::new();
        for (i, &a) in transferring.iter().enumerate() {
            remaining[a] -= rates[i] * dt;
            // Done if what is left would end within this instant (1e-12 relative in time, as
            // the model says). A threshold on bytes instead looped forever: a fast flow (small
            // coefficient) with a rounding residue left needs less time than one ulp of `now`,
            // so the next event came out equal to `now` and nothing moved.
            if remaining[a] <= rates[i] * now * 1e-12 {
                finish[a] = now;
            } else {
                still.push(a);
            }
        }
        transferring = still;
    }
    (0..n)
        .map(|a| Naive {
            ready: ready[a],
            start: start[a],
            finish: finish[a],
            failed: failed[a],
            outcome: if !finish[a].is_nan() {
                Outcome::Done
            } else if !failed[a].is_nan() {
                Outcome::Failed
            } else {
                Outcome::Skipped
            },
        })
        .collect()
}

fn plain(usage: &[Usage]) -> Vec<(usize, f64)> {
    usage
        .iter()
        .map(|u| (u.constraint as usize, u.coefficient))
        .collect()
}

/// The rows of `f` in the rate table, as (time, rate).
pub fn rates_of(out: &RunOutput, f: ActivityId) -> Vec<(f64, f64)> {
    (0..out.rate_change_flow.len())
        .filter(|&i| out.rate_change_flow[i] == f.0)
        .map(|i| (out.rate_change_time_s[i], out.rate_change_Bps[i]))
        .collect()
}

/// Within 1e-9 relative of `want`, or both NaN.
pub fn assert_close(what: &str, got: f64, want: f64) {
    let tol = 1e-9 * want.abs().max(1e-12);
    assert!(
        (got - want).abs() <= tol || (got.is_nan() && want.is_nan()),
        "{what}: got {got}, want {want} (diff {})",
        got - want
    );
}

/// A usage list crossing each of `links` once.
pub fn on(links: &[u32]) -> Vec<Usage> {
    links
        .iter()
        .map(|&c| Usage {
            constraint: c,
            coefficient: 1.0,
        })
        .collect()
}

/// Usage entries (constraint, coefficient).
#[allow(dead_code)] // not every test binary uses it
pub fn weighted(entries: &[(u32, f64)]) -> Vec<Usage> {
    entries
        .iter()
        .map(|&(constraint, coefficient)| Usage {
            constraint,
            coefficient,
        })
        .collect()
}

/// A random run: constraints and a DAG of flows and delays, with coarse values so that
/// simultaneous events happen.
pub struct RandomDag {
    pub capacity: Vec<f64>,
    pub acts: Activities,
    /// (activity, activity it waits for)
    pub deps: Vec<(usize, usize)>,
    pub flows: Vec<u32>,
}

/// Coefficients `random_dag` and `random_usage` draw, 1/2 to 2.
pub const COEFFICIENTS: [f64; 4] = [1.0, 1.0, 2.0, 0.5];

/// Coefficients of coupled flows: pipeline fractions, and a tiny one (a flow of coefficient
/// 1e-6 is a million times faster than one of 1 beside it). Adding 1e3 found the error that
/// engine.rs `a_tiny_share_beside_dormant_flows_ties_with_them` shows within a few seeds.
pub const MIXED_COEFFICIENTS: [f64; 7] = [1.0, 2.0, 0.5, 1e-6, 1.0 / 3.0, 2.0 / 3.0, 0.875];

/// With `faults`, some constraints start at capacity 0 and some flows have a rate cap.
pub fn random_dag(
    rng: &mut Rng,
    max_constraints: u64,
    max_activities: u64,
    faults: bool,
) -> RandomDag {
    random_dag_with(rng, max_constraints, max_activities, faults, &COEFFICIENTS)
}

/// `random_dag` with usage coefficients drawn from `coefficients`.
pub fn random_dag_with(
    rng: &mut Rng,
    max_constraints: u64,
    max_activities: u64,
    faults: bool,
    coefficients: &[f64],
) -> RandomDag {
    let n_c = 1 + rng.below(max_constraints) as usize;
    let capacities = [1.0, 2.0, 5.0, 0.3, 1.0, 0.0];
    let capacity: Vec<f64> = (0..n_c)
        .map(|_| {
            let choices = if !faults {
                4
            } else if rng.below(8) == 0 {
                6
            } else {
                5
            };
            capacities[rng.below(choices) as usize]
        })
        .collect();
    let n = 1 + rng.below(max_activities) as usize;
    let mut acts = Activities::new();
    let mut deps = Vec::new();
    let mut flows = Vec::new();
    for a in 0..n {
        let mut after = Vec::new();
        if a > 0 && rng.below(3) == 0 {
            let d = rng.below(a as u64) as usize;
            after.push(ActivityId(d as u32));
            deps.push((a, d));
        }
        let start = rng.below(4) as f64;
        if rng.below(5) == 0 {
            acts.add_delay(rng.below(3) as f64, start, &after).unwrap();
        } else {
            let usage = random_usage_with(rng, n_c, coefficients);
            let bytes = [0.0, 1.0, 2.0, 3.0, 7.5][rng.below(5) as usize];
            let latency = [0.0, 0.0, 0.5, 1.0][rng.below(4) as usize];
            let cap = if faults && rng.below(4) == 0 {
                0.5
            } else {
                f64::INFINITY
            };
            acts.add_flow(bytes, &usage, latency, start, cap, &after)
                .unwrap();
            flows.push(a as u32);
        }
    }
    RandomDag {
        capacity,
        acts,
        deps,
        flows,
    }
}

/// About two random constraints of `n_c`, with coefficients 1/2 to 2; never empty.
pub fn random_usage(rng: &mut Rng, n_c: usize) -> Vec<Usage> {
    random_usage_with(rng, n_c, &COEFFICIENTS)
}

/// `random_usage` with coefficients drawn from `coefficients`.
pub fn random_usage_with(rng: &mut Rng, n_c: usize, coefficients: &[f64]) -> Vec<Usage> {
    let mut usage = Vec::new();
    for c in 0..n_c {
        if rng.below(n_c as u64) < 2 {
            usage.push(Usage {
                constraint: c as u32,
                coefficient: coefficients[rng.below(coefficients.len() as u64) as usize],
            });
        }
    }
    if usage.is_empty() {
        usage.push(Usage {
            constraint: 0,
            coefficient: 1.0,
        });
    }
    usage
}

/// A two-tier tree's constraints: host up and down links, then leaf->spine and spine->leaf
/// links per (leaf, spine).
pub struct TwoTier {
    pub hosts: u32,
    pub leaves: u32,
    pub spines: u32,
}

impl TwoTier {
    pub fn n_constraints(&self) -> usize {
        (2 * self.hosts + 2 * self.leaves * self.spines) as usize
    }

    pub fn up(&self, h: u32) -> u32 {
        h
    }

    pub fn leaf_of(&self, h: u32) -> u32 {
        h / (self.hosts / self.leaves)
    }

    pub fn leaf_to_spine(&self, l: u32, s: u32) -> u32 {
        2 * self.hosts + l * self.spines + s
    }

    pub fn spine_to_leaf(&self, l: u32, s: u32) -> u32 {
        2 * self.hosts + self.leaves * self.spines + l * self.spines + s
    }

    /// Links from host `a` to host `b` through spine `s` (unused under one leaf).
    pub fn route(&self, a: u32, b: u32, s: u32) -> Vec<u32> {
        let (la, lb) = (self.leaf_of(a), self.leaf_of(b));
        let mut links = vec![self.up(a), self.hosts + b];
        if la != lb {
            links.extend([self.leaf_to_spine(la, s), self.spine_to_leaf(lb, s)]);
        }
        links
    }

    /// Two distinct random hosts, a random spine (0 under one leaf) and 1 to 100 bytes.
    pub fn random_flow(&self, rng: &mut Rng) -> (u32, u32, u32, f64) {
        let a = rng.below(self.hosts as u64) as u32;
        let b = (a + 1 + rng.below(self.hosts as u64 - 1) as u32) % self.hosts;
        let s = if self.leaf_of(a) != self.leaf_of(b) {
            rng.below(self.spines as u64) as u32
        } else {
            0
        };
        let bytes = (1.0 + rng.next_f64() * 99.0).round();
        (a, b, s, bytes)
    }
}
