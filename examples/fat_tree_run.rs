//! Times `engine::run` on the engine benchmark of benchmarks/bench_engine.py (TwoTierFatTree),
//! built in Rust so the engine can be measured and profiled without Python. The workload is
//! the same in kind as benchmarks/workloads.py (512 hosts, 16 leaves x 16 spines, 100 Gb/s,
//! 1 us per link, uniform pairs, log-uniform 10 kB - 100 MB, random spine), drawn from the
//! crate's own RNG rather than NumPy's, so the flows differ but the statistics do not.
//!
//! cargo run --release --example fat_tree_run -- <n_flows> <together|staggered> [repeats] [--verify]
//!     [--dump FILE | --check FILE] [--stop-after SECONDS] [--stop-at INSTANTS] [--tolerance T]
//!     [--floor]
//!
//! `--floor` times lower bounds instead: the run's rate changes replayed with only the
//! bookkeeping every engine that keeps a rate per flow must do for each (bytes left, a
//! finish-time heap, the loads on its constraints), no solver at all; then the same run
//! replayed as an engine that moves the flows of one bottleneck as one group must (a service
//! clock and a finish heap per group, the loads from per-(group, constraint) coefficient
//! sums), with per-flow work only where a flow changes group (docs/engine.md).
//!
//! `--tolerance` runs the fast mode (`RunOptions::finish_rel_tol`, benchmarks/bench_engine.py's
//! FastModeFatTree) instead of the exact one.
//!
//! `--stop-after` ends a long run early and prints how many instants it reached, so that
//! builds can be compared on the slow 1e5-together run in a minute instead of minutes.
//! `--stop-at` ends it at the first progress report (every 64 instants and 0.1 s of wall
//! time) from that instant on: a fixed stretch of the run, for counting instructions there.
//!
//! Wall times on a shared VM vary by 10% or more from minute to minute. To compare builds on
//! a change smaller than that, count instructions instead (deterministic):
//! valgrind --tool=cachegrind --cache-sim=no target/release/examples/fat_tree_run 10000 staggered 1

#![allow(non_snake_case)]

use fabricsim::engine::{run, Activities, RunOptions, RunOutput};
use fabricsim::ids::ActivityId;
use fabricsim::rng::Rng;
use fabricsim::solver::{IndexedHeap, Usage};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const N_LEAVES: usize = 16;
const HOSTS_PER_LEAF: usize = 32;
const N_SPINES: usize = 16;
const LINK_BPS: f64 = 100e9 / 8.0;
const LINK_LATENCY_S: f64 = 1e-6;
const SIZE_MIN: f64 = 10e3;
const SIZE_MAX: f64 = 100e6;
const OFFERED_LOAD: f64 = 0.5;

/// Link ids in the order of workloads.two_tier_fat_tree: host up, host down, leaf up
/// [leaf, spine], spine down [spine, leaf].
fn build(n_flows: usize, staggered: bool, seed: u64) -> (Vec<f64>, Activities) {
    let n_hosts = N_LEAVES * HOSTS_PER_LEAF;
    let host_up = |h: usize| h;
    let host_down = |h: usize| n_hosts + h;
    let leaf_up = |l: usize, s: usize| 2 * n_hosts + l * N_SPINES + s;
    let spine_down = |s: usize, l: usize| 2 * n_hosts + N_LEAVES * N_SPINES + s * N_LEAVES + l;
    let n_links = 2 * n_hosts + 2 * N_LEAVES * N_SPINES;
    let capacity = vec![LINK_BPS; n_links];
    let uplink_Bps = (N_LEAVES * N_SPINES) as f64 * LINK_BPS;
    let mean_size = (SIZE_MAX - SIZE_MIN) / (SIZE_MAX / SIZE_MIN).ln();
    let arrivals_per_s = OFFERED_LOAD * uplink_Bps / mean_size;
    let mut rng = Rng::new(seed);
    let mut acts = Activities::new();
    let mut t = 0.0;
    let mut route = Vec::with_capacity(4);
    for i in 0..n_flows {
        let src = rng.below(n_hosts as u64) as usize;
        let dst = (src + 1 + rng.below(n_hosts as u64 - 1) as usize) % n_hosts;
        let log_size = SIZE_MIN.ln() + rng.next_f64() * (SIZE_MAX / SIZE_MIN).ln();
        let bytes = log_size.exp().round();
        if staggered && i > 0 {
            t += -(1.0 - rng.next_f64()).ln() / arrivals_per_s;
        }
        let spine = rng.below(N_SPINES as u64) as usize;
        let (sl, dl) = (src / HOSTS_PER_LEAF, dst / HOSTS_PER_LEAF);
        route.clear();
        route.push(host_up(src));
        if sl != dl {
            route.push(leaf_up(sl, spine));
            route.push(spine_down(spine, dl));
        }
        route.push(host_down(dst));
        let usage: Vec<Usage> = route
            .iter()
            .map(|&l| Usage {
                constraint: l as u32,
                coefficient: 1.0,
            })
            .collect();
        let latency = route.len() as f64 * LINK_LATENCY_S;
        acts.add_flow(bytes, &usage, latency, t, f64::INFINITY, &[])
            .expect("valid flow");
    }
    (capacity, acts)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n_flows: usize = args.first().map_or(10_000, |s| s.parse().expect("n_flows"));
    let staggered = match args.get(1).map(String::as_str) {
        None | Some("together") => false,
        Some("staggered") => true,
        Some(other) => panic!("arrival must be together or staggered, not {other}"),
    };
    let repeats: usize = args.get(2).map_or(3, |s| s.parse().expect("repeats"));
    let verify = args.iter().any(|a| a == "--verify");
    // --dump FILE writes every finish time, --check FILE compares against such a file.
    let path_after = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| args[i + 1].clone())
    };
    let (dump, check) = (path_after("--dump"), path_after("--check"));
    let stop_at: u64 = path_after("--stop-at").map_or(u64::MAX, |s| {
        s.parse().expect("--stop-at takes a number of instants")
    });
    let stop_after_s: f64 = path_after("--stop-after").map_or(f64::INFINITY, |s| {
        s.parse().expect("--stop-after takes seconds")
    });
    let (capacity, acts) = build(n_flows, staggered, 0);
    if args.iter().any(|a| a == "--floor") {
        // One run's log, each row with its flow's group, serves both replays.
        let options = RunOptions {
            record_rates: true,
            record_groups: true,
            ..Default::default()
        };
        let out = run(&capacity, &acts, &options, &mut |_| true).expect("run");
        bookkeeping_floor(&capacity, &acts, &out, repeats);
        group_floor(&capacity, &acts, &out, repeats);
        return;
    }
    let options = RunOptions {
        verify,
        finish_rel_tol: path_after("--tolerance").map_or(0.0, |s| {
            s.parse().expect("--tolerance takes a relative tolerance")
        }),
        ..Default::default()
    };
    let mut times = Vec::new();
    let mut digest = 0.0f64;
    for _ in 0..repeats {
        let t0 = std::time::Instant::now();
        let cpu0 = cpu_s();
        let mut reached = 0;
        let outcome = run(&capacity, &acts, &options, &mut |p| {
            reached = p.n_instants;
            t0.elapsed().as_secs_f64() < stop_after_s && p.n_instants < stop_at
        });
        let out = match outcome {
            Ok(out) => out,
            Err(fabricsim::Error::Interrupted(_)) => {
                println!(
                    "{n_flows}: stopped after {:.2} s ({:.2} s of CPU) at instant {reached}",
                    t0.elapsed().as_secs_f64(),
                    cpu_s() - cpu0
                );
                continue;
            }
            Err(e) => panic!("run failed: {e}"),
        };
        let dt = t0.elapsed().as_secs_f64();
        let cpu = cpu_s() - cpu0;
        times.push(cpu);
        digest = out.finish_s.iter().sum::<f64>();
        if let Some(path) = &dump {
            let text: String = out.finish_s.iter().map(|t| format!("{t:e}\n")).collect();
            std::fs::write(path, text).expect("write dump");
        }
        if let Some(path) = &check {
            let text = std::fs::read_to_string(path).expect("read check file");
            let mut worst = 0.0f64;
            for (i, line) in text.lines().enumerate() {
                let expect: f64 = line.parse().expect("a time");
                let rel = (out.finish_s[i] - expect).abs() / expect;
                worst = worst.max(rel);
            }
            println!("worst relative finish-time difference vs {path}: {worst:e}");
            assert!(worst <= 1e-9, "finish times moved");
        }
        println!(
            "{n_flows} {}: {dt:.4} s ({cpu:.4} s of CPU)  instants {}  solves {}  re-solved flows {}  rate changes {}  \
             group share changes {}  bottleneck moves {}  saturations {}  floor moves {}  \
             makespan {:.9e}  sum finish {:.17e}",
            if staggered { "staggered" } else { "together" },
            out.n_instants,
            out.n_solves,
            out.n_flows_resolved,
            out.n_rate_changes,
            out.n_group_share_changes,
            out.n_bottleneck_moves,
            out.n_saturations,
            out.n_floor_moves,
            out.makespan_s,
            digest,
        );
    }
    if times.is_empty() {
        return;
    }
    times.sort_by(f64::total_cmp);
    println!(
        "median {:.4} s of CPU (of {repeats}), digest {digest:.17e}",
        times[times.len() / 2]
    );
}

/// CPU time this thread has run, in seconds (Linux; wall time elsewhere): on a shared machine
/// the floors' small differences drown in wall-time noise.
fn cpu_s() -> f64 {
    let ran_ns = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok());
    match ran_ns {
        Some(ns) => ns * 1e-9,
        None => {
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            START
                .get_or_init(std::time::Instant::now)
                .elapsed()
                .as_secs_f64()
        }
    }
}

/// Times the replay of a run's rate changes with only the per-change bookkeeping: bring the
/// flow's bytes left up to date, move its finish time in an indexed heap (flows whose finish
/// passes leave it and their loads), and move its load on each constraint (plain sums).
fn bookkeeping_floor(capacity: &[f64], acts: &Activities, out: &RunOutput, repeats: usize) {
    let n = acts.len();
    let usage: Vec<&[Usage]> = (0..n).map(|a| acts.usage(ActivityId(a as u32))).collect();
    let mut times = Vec::new();
    let mut load_updates = 0;
    for _ in 0..repeats {
        let t0 = cpu_s();
        let mut finishes = IndexedHeap::with_ids(n);
        let mut left: Vec<(f64, f64)> = (0..n)
            .map(|a| (acts.bytes(ActivityId(a as u32)), 0.0))
            .collect();
        let mut rate = vec![0.0f64; n];
        let mut load = vec![0.0f64; capacity.len()];
        load_updates = 0;
        for i in 0..out.rate_change_flow.len() {
            let (t, f, r) = (
                out.rate_change_time_s[i],
                out.rate_change_flow[i] as usize,
                out.rate_change_Bps[i],
            );
            while let Some((_, g)) = finishes.peek().filter(|&(finish, _)| finish < t) {
                finishes.remove(g);
                for u in usage[g as usize] {
                    load[u.constraint as usize] -= u.coefficient * rate[g as usize];
                }
            }
            let (bytes, as_of) = left[f];
            let bytes = (bytes - rate[f] * (t - as_of)).max(0.0);
            left[f] = (bytes, t);
            for u in usage[f] {
                load[u.constraint as usize] += u.coefficient * (r - rate[f]);
            }
            load_updates += usage[f].len();
            rate[f] = r;
            finishes.set(f as u32, t + bytes / r);
        }
        std::hint::black_box((&left, &load));
        times.push(cpu_s() - t0);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{} rate changes, {load_updates} load updates: bookkeeping floor median {:.4} s of CPU \
         (of {repeats})",
        out.rate_change_flow.len(),
        times[times.len() / 2],
    );
}

/// A group's clock: flows bottlenecked together all move at its share, so each is due when
/// the group's cumulative service (bytes per flow since the run began) reaches the service
/// at which it joined plus its bytes left then. A share change moves only the clock.
#[derive(Clone, Copy, Default)]
struct GroupClock {
    share_Bps: f64,
    service: f64,
    as_of_s: f64,
}

impl GroupClock {
    fn service_at(&self, t: f64) -> f64 {
        self.service + self.share_Bps * (t - self.as_of_s)
    }
}

/// Times the replay of the same run as group-level bookkeeping, the floor of an engine that
/// keeps a share per bottleneck instead of a rate per flow: per instant, each group whose share
/// changes brings its clock up to date, moves its loads (one per constraint its flows use,
/// from the per-(group, constraint) coefficient sums) and its next finish in a heap of groups;
/// a flow joining or leaving a group moves its coefficients and its entry in the group's
/// heap of finish services. Groups are constraints; a flow at its cap is a group of its own.
fn group_floor(capacity: &[f64], acts: &Activities, out: &RunOutput, repeats: usize) {
    let (n, n_c) = (acts.len(), capacity.len());
    let usage: Vec<&[Usage]> = (0..n).map(|a| acts.usage(ActivityId(a as u32))).collect();
    let group_of_row = |i: usize| match out.rate_change_group[i] {
        u32::MAX => n_c + out.rate_change_flow[i] as usize,
        g => g as usize,
    };
    let n_groups = n_c + n;
    let mut times = Vec::new();
    let (mut n_moves, mut n_group_changes, mut n_load_updates) = (0u64, 0u64, 0u64);
    for _ in 0..repeats {
        let t0 = cpu_s();
        let (mut moves, mut group_changes, mut load_updates) = (0u64, 0u64, 0u64);
        let mut clock = vec![GroupClock::default(); n_groups];
        // Per constraint group, the constraints its flows use with their coefficient sum and
        // number there, read in a row at a share change; `at` finds an entry when a flow
        // joins or leaves (a group of one flow at its cap uses that flow's usage).
        let mut used: Vec<Vec<(u32, f64, u32)>> = vec![Vec::new(); n_c];
        let mut at = vec![u32::MAX; n_c * n_c];
        let mut members: Vec<BinaryHeap<Reverse<(u64, u32, u32)>>> =
            vec![BinaryHeap::new(); n_groups];
        // Each flow's group, its finish service there, and its membership's serial number
        // (heap entries of an earlier membership are stale).
        let mut group = vec![usize::MAX; n];
        let mut due = vec![0.0f64; n];
        let mut serial = vec![0u32; n];
        let mut next_finish = IndexedHeap::with_ids(n_groups);
        let mut load = vec![0.0f64; n_c];
        let mut changed_in = vec![u64::MAX; n_groups];
        let mut dirty: Vec<usize> = Vec::new();
        let mut instant = 0u64;
        let mut now = f64::NEG_INFINITY;
        // Flow f leaves or joins group g (sign -1 or 1): its coefficients and load move.
        let member = |g: usize,
                      f: usize,
                      sign: f64,
                      share: f64,
                      load: &mut [f64],
                      used: &mut [Vec<(u32, f64, u32)>],
                      at: &mut [u32]| {
            for u in usage[f] {
                let c = u.constraint as usize;
                load[c] += sign * u.coefficient * share;
                if g >= n_c {
                    continue;
                }
                let list = &mut used[g];
                if sign > 0.0 {
                    match at[g * n_c + c] {
                        u32::MAX => {
                            at[g * n_c + c] = list.len() as u32;
                            list.push((c as u32, u.coefficient, 1));
                        }
                        k => {
                            list[k as usize].1 += u.coefficient;
                            list[k as usize].2 += 1;
                        }
                    }
                } else {
                    let k = at[g * n_c + c] as usize;
                    list[k].1 -= u.coefficient;
                    list[k].2 -= 1;
                    if list[k].2 == 0 {
                        at[g * n_c + c] = u32::MAX;
                        list.swap_remove(k);
                        if let Some(&(moved, _, _)) = list.get(k) {
                            at[g * n_c + moved as usize] = k as u32;
                        }
                    }
                }
            }
        };
        // The earliest live finish service of group g, stale entries dropped on the way.
        let earliest = |members: &mut BinaryHeap<Reverse<(u64, u32, u32)>>,
                        group: &[usize],
                        serial: &[u32],
                        g: usize| {
            while let Some(&Reverse((s, f, k))) = members.peek() {
                if group[f as usize] == g && serial[f as usize] == k {
                    return Some((f64::from_bits(s), f as usize));
                }
                members.pop();
            }
            None
        };
        let rekey = |g: usize,
                     clock: &[GroupClock],
                     members: &mut [BinaryHeap<Reverse<(u64, u32, u32)>>],
                     group: &[usize],
                     serial: &[u32],
                     next_finish: &mut IndexedHeap| {
            match earliest(&mut members[g], group, serial, g) {
                Some((s, _)) if clock[g].share_Bps > 0.0 => {
                    let c = clock[g];
                    next_finish.set(g as u32, c.as_of_s + (s - c.service) / c.share_Bps)
                }
                _ => next_finish.remove(g as u32),
            }
        };
        for i in 0..out.rate_change_flow.len() {
            let (t, f, r) = (
                out.rate_change_time_s[i],
                out.rate_change_flow[i] as usize,
                out.rate_change_Bps[i],
            );
            if t != now {
                // The last instant's groups get their next finish once each.
                for g in dirty.drain(..) {
                    rekey(g, &clock, &mut members, &group, &serial, &mut next_finish);
                }
                // Flows due before this instant leave their groups.
                while let Some((_, g)) = next_finish.peek().filter(|&(finish, _)| finish < t) {
                    let g = g as usize;
                    let (_, d) = earliest(&mut members[g], &group, &serial, g).unwrap();
                    members[g].pop();
                    let share = clock[g].share_Bps;
                    member(g, d, -1.0, share, &mut load, &mut used, &mut at);
                    group[d] = usize::MAX;
                    rekey(g, &clock, &mut members, &group, &serial, &mut next_finish);
                }
                now = t;
                instant += 1;
            }
            let g = group_of_row(i);
            if group[f] != g {
                // Joins g, with its bytes left from its old group's clock (or all of them).
                let bytes_left = match group[f] {
                    usize::MAX => acts.bytes(ActivityId(f as u32)),
                    old => {
                        moves += 1;
                        let share = clock[old].share_Bps;
                        member(old, f, -1.0, share, &mut load, &mut used, &mut at);
                        if changed_in[old] != instant {
                            changed_in[old] = instant;
                            dirty.push(old);
                        }
                        (due[f] - clock[old].service_at(t)).max(0.0)
                    }
                };
                let c = &mut clock[g];
                c.service = c.service_at(t);
                c.as_of_s = t;
                due[f] = c.service + bytes_left;
                serial[f] += 1;
                group[f] = g;
                members[g].push(Reverse((due[f].to_bits(), f as u32, serial[f])));
                let share = c.share_Bps;
                member(g, f, 1.0, share, &mut load, &mut used, &mut at);
            }
            // The engine keeps a rate that a re-solve reproduces to rounding: so does a group.
            if (r - clock[g].share_Bps).abs() > 1e-13 * r {
                if changed_in[g] != instant {
                    changed_in[g] = instant;
                    dirty.push(g);
                }
                let c = &mut clock[g];
                {
                    group_changes += 1;
                    c.service = c.service_at(t);
                    c.as_of_s = t;
                    let delta = r - std::mem::replace(&mut c.share_Bps, r);
                    if g < n_c {
                        for &(k, coef, _) in &used[g] {
                            load[k as usize] += delta * coef;
                            load_updates += 1;
                        }
                    } else {
                        for u in usage[f] {
                            load[u.constraint as usize] += delta * u.coefficient;
                            load_updates += 1;
                        }
                    }
                }
            }
        }
        std::hint::black_box((&load, &due));
        times.push(cpu_s() - t0);
        (n_moves, n_group_changes, n_load_updates) = (moves, group_changes, load_updates);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{} group share changes, {} flows changing group, {} load updates: group floor median \
         {:.4} s of CPU (of {repeats})",
        n_group_changes,
        n_moves,
        n_load_updates,
        times[times.len() / 2],
    );
}
