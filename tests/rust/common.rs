//! Slow, obviously-right references shared by the integration tests.
#![allow(dead_code)]

use fabricsim::engine::{Activities, Kind};
use fabricsim::ids::ActivityId;

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
    let n = acts.len();
    let mut ready = vec![f64::NAN; n];
    let mut start = vec![f64::NAN; n];
    let mut finish = vec![f64::NAN; n];
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
    loop {
        // Mark ready, start transfers and end delays that are due now (repeat for chains).
        loop {
            let mut changed = false;
            for a in 0..n {
                let id = ActivityId(a as u32);
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
        let rates: Vec<f64> = {
            let usage: Vec<Vec<(usize, f64)>> = transferring
                .iter()
                .map(|&a| {
                    acts.usage(ActivityId(a as u32))
                        .iter()
                        .map(|u| (u.constraint as usize, u.coefficient))
                        .collect()
                })
                .collect();
            let caps = vec![f64::INFINITY; transferring.len()];
            naive_max_min(capacity, &usage, &caps)
        };
        // Next event: a transfer ending or a pending wait ending.
        let mut next = f64::INFINITY;
        for (i, &a) in transferring.iter().enumerate() {
            next = next.min(now + remaining[a] / rates[i]);
        }
        for a in 0..n {
            if !ready[a].is_nan() && start[a].is_nan() {
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
            if remaining[a] <= acts.bytes(ActivityId(a as u32)) * 1e-12 {
                finish[a] = now;
            } else {
                still.push(a);
            }
        }
        transferring = still;
    }
    (0..n).map(|a| (ready[a], start[a], finish[a])).collect()
}

pub fn assert_close(what: &str, got: f64, want: f64) {
    let tol = 1e-9 * want.abs().max(1e-12);
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, want {want} (diff {})",
        got - want
    );
}
