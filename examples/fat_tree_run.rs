//! Times `engine::run` on the engine benchmark of benchmarks/bench_engine.py (TwoTierFatTree),
//! built in Rust so the engine can be measured and profiled without Python. The workload is
//! the same in kind as benchmarks/workloads.py (512 hosts, 16 leaves x 16 spines, 100 Gb/s,
//! 1 us per link, uniform pairs, log-uniform 10 kB - 100 MB, random spine), drawn from the
//! crate's own RNG rather than NumPy's, so the flows differ but the statistics do not.
//!
//! cargo run --release --example fat_tree_run -- <n_flows> <together|staggered> [repeats] [--verify]
//!     [--dump FILE | --check FILE] [--stop-after SECONDS] [--floor]
//!
//! `--floor` times a lower bound instead: the run's rate changes replayed with only the
//! bookkeeping every engine that keeps a rate per flow must do for each (bytes left, a
//! finish-time heap, the loads on its constraints), no solver at all.
//!
//! `--stop-after` ends a long run early and prints how many instants it reached, so that
//! builds can be compared on the slow 1e5-together run in a minute instead of minutes.
//!
//! Wall times on a shared VM vary by 10% or more from minute to minute. To compare builds on
//! a change smaller than that, count instructions instead (deterministic):
//! valgrind --tool=cachegrind --cache-sim=no target/release/examples/fat_tree_run 10000 staggered 1

#![allow(non_snake_case)]

use fabricsim::engine::{run, Activities, RunOptions};
use fabricsim::ids::ActivityId;
use fabricsim::rng::Rng;
use fabricsim::solver::{IndexedHeap, Usage};

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
    let stop_after_s: f64 = path_after("--stop-after").map_or(f64::INFINITY, |s| {
        s.parse().expect("--stop-after takes seconds")
    });
    let (capacity, acts) = build(n_flows, staggered, 0);
    if args.iter().any(|a| a == "--floor") {
        bookkeeping_floor(&capacity, &acts, repeats);
        return;
    }
    let options = RunOptions {
        verify,
        ..Default::default()
    };
    let mut times = Vec::new();
    let mut digest = 0.0f64;
    for _ in 0..repeats {
        let t0 = std::time::Instant::now();
        let mut reached = 0;
        let outcome = run(&capacity, &acts, &options, &mut |p| {
            reached = p.n_instants;
            t0.elapsed().as_secs_f64() < stop_after_s
        });
        let out = match outcome {
            Ok(out) => out,
            Err(fabricsim::Error::Interrupted(_)) => {
                println!("{n_flows}: stopped after {stop_after_s} s at instant {reached}");
                continue;
            }
            Err(e) => panic!("run failed: {e}"),
        };
        let dt = t0.elapsed().as_secs_f64();
        times.push(dt);
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
            "{n_flows} {}: {dt:.4} s  instants {}  solves {}  re-solved flows {}  rate changes {}  \
             group share changes {}  bottleneck moves {}  makespan {:.9e}  sum finish {:.17e}",
            if staggered { "staggered" } else { "together" },
            out.n_instants,
            out.n_solves,
            out.n_flows_resolved,
            out.n_rate_changes,
            out.n_group_share_changes,
            out.n_bottleneck_moves,
            out.makespan_s,
            digest,
        );
    }
    if times.is_empty() {
        return;
    }
    times.sort_by(f64::total_cmp);
    println!(
        "median {:.4} s (of {repeats}), digest {digest:.17e}",
        times[times.len() / 2]
    );
}

/// Times the replay of a run's rate changes with only the per-change bookkeeping: bring the
/// flow's bytes left up to date, move its finish time in an indexed heap (flows whose finish
/// passes leave it and their loads), and move its load on each constraint (plain sums).
fn bookkeeping_floor(capacity: &[f64], acts: &Activities, repeats: usize) {
    let options = RunOptions {
        record_rates: true,
        ..Default::default()
    };
    let out = run(capacity, acts, &options, &mut |_| true).expect("run");
    let n = acts.len();
    let usage: Vec<&[Usage]> = (0..n).map(|a| acts.usage(ActivityId(a as u32))).collect();
    let mut times = Vec::new();
    for _ in 0..repeats {
        let t0 = std::time::Instant::now();
        let mut finishes = IndexedHeap::with_ids(n);
        let mut left: Vec<(f64, f64)> = (0..n)
            .map(|a| (acts.bytes(ActivityId(a as u32)), 0.0))
            .collect();
        let mut rate = vec![0.0f64; n];
        let mut load = vec![0.0f64; capacity.len()];
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
            rate[f] = r;
            finishes.set(f as u32, t + bytes / r);
        }
        std::hint::black_box((&left, &load));
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{} rate changes: bookkeeping floor median {:.4} s (of {repeats})",
        out.rate_change_flow.len(),
        times[times.len() / 2],
    );
}
