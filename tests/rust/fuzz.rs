//! Fuzzing of the core's entry points on stable Rust (issue 24): cargo-fuzz needs a nightly
//! toolchain and libFuzzer, which CI does not have, so this is a deterministic, seeded
//! equivalent that runs inside `cargo test`.
//!
//! Each target reads its input from a stream of numbers (`Input`): counts, ids and values
//! are taken from it in order, so any stream is a valid input, and a short one ends in
//! zeros. Streams come from a committed corpus (tests/rust/fuzz_corpus/<target>/*.txt:
//! readable, `#` comments, an optional `# expect: ok` or `# expect: err <text>` line, then
//! the numbers), from mutations of it, and from a seeded random generator that favours the
//! values where arithmetic breaks (0, subnormals, 1e-300, 1e300, the largest double, inf,
//! NaN, negatives). Every target asserts that
//! * nothing panics, and a refusal is an `Err` other than `Error::Internal` (a bug);
//! * what succeeds keeps the model's promises: rates within capacity and max-min fair (and
//!   equal to a plainly written filling), times in order, bytes conserved, a refused add
//!   leaves the scenario as it was, result tables whole and finite;
//! * times are exact at the edges of the float range: scaling every capacity and size by a
//!   power of two (exact in floating point) gives bit-identical times, from 2^-500 to
//!   2^500 of the values drawn (issue 24, defect 2 was a silently wrong finish time near
//!   the largest double).
//!
//! `cargo test --test fuzz` replays the corpus and runs a short bounded search (a few
//! seconds). A longer search: `FABRICSIM_FUZZ_ITERS=200000 FABRICSIM_FUZZ_SEED=7 cargo test
//! --release --test fuzz -- --nocapture`. A failure prints the input as a corpus file to
//! commit once fixed.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use fabricsim::engine::{run_with_disruptions, Activities, Disruption, Outcome, RunOptions};
use fabricsim::ids::{ActivityId, LinkId, NodeId};
use fabricsim::rng::Rng;
use fabricsim::scenario::{Combine, Edge, Leg, Route, Scenario};
use fabricsim::solver::{max_min_rates, Usage};
use fabricsim::topology::fabric::{Fabric, Mode};
use fabricsim::topology::generators::{clos, ScaleOutParams};
use fabricsim::topology::Topology;
use fabricsim::units::{MAX_CAPACITY_BPS, MAX_CARRIED_BYTES, SAME_INSTANT_REL};
use fabricsim::Error;

thread_local! {
    /// What the target under way built, step by step: printed with a failure.
    static TRACE: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn trace(step: String) {
    TRACE.with(|t| t.borrow_mut().push(step));
}

/// A fuzz input: numbers read in order; past the end, zeros.
#[derive(Clone, Debug)]
struct Input {
    tokens: Vec<f64>,
    pos: usize,
}

impl Input {
    fn new(tokens: Vec<f64>) -> Self {
        Input { tokens, pos: 0 }
    }

    fn f(&mut self) -> f64 {
        let x = self.tokens.get(self.pos).copied().unwrap_or(0.0);
        self.pos += 1;
        x
    }

    /// A count in 0..=max.
    fn n(&mut self, max: usize) -> usize {
        let x = self.f();
        if x.is_finite() {
            (x.abs() as u64 % (max as u64 + 1)) as usize
        } else {
            0
        }
    }

    fn b(&mut self) -> bool {
        self.n(1) == 1
    }

    /// An index below `n`, or `n` itself (one past the end) now and then, or u32::MAX for a
    /// negative or non-finite number: ids the callee must refuse.
    fn idx(&mut self, n: usize) -> u32 {
        let x = self.f();
        if x.is_finite() && x >= 0.0 {
            (x as u64 % (n as u64 + 1)) as u32
        } else {
            u32::MAX
        }
    }
}

/// Values where arithmetic breaks, and ordinary ones.
const PALETTE: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    2.0,
    0.5,
    3.0,
    1e-9,
    1e9,
    -1.0,
    5e-324,
    2.2250738585072014e-308,
    1e-300,
    1e300,
    MAX_CAPACITY_BPS,
    1.0000000000000002e300,
    9e307,
    1e308,
    f64::MAX,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    4294967295.0,
    4294967296.0,
];

fn random_token(rng: &mut Rng) -> f64 {
    match rng.below(10) {
        0..=4 => rng.below(12) as f64,
        5..=7 => PALETTE[rng.below(PALETTE.len() as u64) as usize],
        _ => {
            let e = rng.below(630) as i32 - 320;
            (1.0 + rng.next_f64()) * 10f64.powi(e)
        }
    }
}

fn random_input(rng: &mut Rng) -> Vec<f64> {
    let len = 4 + rng.below(120) as usize;
    (0..len).map(|_| random_token(rng)).collect()
}

/// A corpus entry mutated: tokens replaced, inserted, deleted, or a stretch of another
/// entry spliced in.
fn mutate(rng: &mut Rng, base: &[f64], other: &[f64]) -> Vec<f64> {
    let mut t = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = if t.is_empty() {
            0
        } else {
            rng.below(t.len() as u64) as usize
        };
        match rng.below(5) {
            0 | 1 if !t.is_empty() => t[at] = random_token(rng),
            2 => t.insert(at, random_token(rng)),
            3 if !t.is_empty() => {
                t.remove(at);
            }
            _ if !other.is_empty() => {
                let from = rng.below(other.len() as u64) as usize;
                let len = 1 + rng.below((other.len() - from) as u64) as usize;
                t.splice(at..at, other[from..from + len].iter().copied());
            }
            _ => t.push(random_token(rng)),
        }
    }
    t
}

type Target = fn(&mut Input) -> Result<Outcome2, String>;

/// What an input did: ran, or was refused with this error.
#[derive(Debug)]
enum Outcome2 {
    Ok,
    Refused(Error),
}

/// Refusals are fine unless they are bugs.
fn refused(e: Error) -> Result<Outcome2, String> {
    match e {
        Error::Internal(m) => Err(format!("internal error: {m}")),
        e => Ok(Outcome2::Refused(e)),
    }
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + 1e-300
}

// ---- targets -----------------------------------------------------------------------------

/// `solver::max_min_rates`: any problem is refused or solved max-min fairly.
fn solver_target(inp: &mut Input) -> Result<Outcome2, String> {
    let n_c = inp.n(6);
    let capacity: Vec<f64> = (0..n_c).map(|_| inp.f()).collect();
    let n_flows = inp.n(6);
    let n_e = inp.n(16);
    let (mut fi, mut ci, mut k) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n_e {
        fi.push(inp.idx(n_flows));
        ci.push(inp.idx(n_c));
        k.push(if inp.b() { 1.0 } else { inp.f() });
    }
    let caps = if inp.b() {
        let n = n_flows + inp.n(1);
        Some(
            (0..n)
                .map(|_| if inp.b() { f64::INFINITY } else { inp.f() })
                .collect::<Vec<_>>(),
        )
    } else {
        None
    };
    let rates = match max_min_rates(capacity.clone(), &fi, &ci, &k, n_flows, caps.clone()) {
        Ok(r) => r,
        Err(e) => return refused(e),
    };
    let cap = caps.unwrap_or_else(|| vec![f64::INFINITY; n_flows]);
    if rates.len() != n_flows || rates.iter().any(|r| !(r.is_finite() && *r >= 0.0)) {
        return Err(format!("rates not finite and >= 0: {rates:?}"));
    }
    let mut usage = vec![Vec::new(); n_flows];
    for e in 0..n_e {
        usage[fi[e] as usize].push((ci[e] as usize, k[e]));
    }
    let mut load = vec![0.0; n_c];
    for (f, u) in usage.iter().enumerate() {
        for &(c, kk) in u {
            load[c] += kk * rates[f];
        }
    }
    for c in 0..n_c {
        if load[c] > capacity[c] * (1.0 + 1e-9) {
            return Err(format!(
                "constraint {c} carries {} over its capacity {}",
                load[c], capacity[c]
            ));
        }
    }
    // Max-min: each flow is at its cap, or on a saturated constraint where none is faster.
    for f in 0..n_flows {
        if rates[f] > cap[f] * (1.0 + 1e-9) {
            return Err(format!("flow {f} at {} over its cap {}", rates[f], cap[f]));
        }
        if close(rates[f], cap[f], 1e-9) {
            continue;
        }
        let bottleneck = usage[f].iter().any(|&(c, _)| {
            load[c] >= capacity[c] * (1.0 - 1e-9)
                && usage.iter().enumerate().all(|(g, ug)| {
                    !ug.iter().any(|&(cc, _)| cc == c) || rates[g] <= rates[f] * (1.0 + 1e-9)
                })
        });
        if !bottleneck {
            return Err(format!(
                "flow {f} at {} has no bottleneck: rates {rates:?}",
                rates[f]
            ));
        }
    }
    // Moderate problems against the plainly written filling.
    let moderate = |x: f64| (1e-3..=1e6).contains(&x);
    if capacity.iter().all(|&c| moderate(c)) && k.iter().all(|&x| moderate(x)) {
        let merged: Vec<Vec<(usize, f64)>> = usage;
        let naive = common::naive_max_min(&capacity, &merged, &cap);
        for f in 0..n_flows {
            if !close(naive[f], rates[f], 1e-9) {
                return Err(format!(
                    "flow {f}: {} where the reference gives {}",
                    rates[f], naive[f]
                ));
            }
        }
    }
    Ok(Outcome2::Ok)
}

/// `Topology::from_links`: any arrays are refused or make a topology that holds them.
fn topology_target(inp: &mut Input) -> Result<Outcome2, String> {
    let n_nodes = inp.n(12);
    let n = inp.n(16);
    let extra = inp.n(3); // one array a hair longer, now and then
    let mut src: Vec<u32> = (0..n).map(|_| inp.idx(n_nodes)).collect();
    let dst: Vec<u32> = (0..n).map(|_| inp.idx(n_nodes)).collect();
    let cap: Vec<f64> = (0..n).map(|_| inp.f()).collect();
    let lat: Vec<f64> = (0..n)
        .map(|_| if inp.b() { 0.0 } else { inp.f() })
        .collect();
    if extra == 3 {
        src.push(0);
    }
    match Topology::from_links(n_nodes, src.clone(), dst, cap.clone(), lat) {
        Err(e) => refused(e),
        Ok(t) => {
            if t.n_links() != n || t.capacity_Bps() != &cap[..] {
                return Err("the topology does not hold the links given".into());
            }
            if cap.iter().any(|c| !(*c >= 0.0 && *c <= MAX_CAPACITY_BPS)) {
                return Err(format!(
                    "a capacity outside [0, {MAX_CAPACITY_BPS}] was taken: {cap:?}"
                ));
            }
            for node in 0..n_nodes as u32 {
                for &l in t.out_links(NodeId(node)) {
                    if src[l as usize] != node {
                        return Err(format!("link {l} listed out of node {node}"));
                    }
                }
            }
            Ok(Outcome2::Ok)
        }
    }
}

/// The engine's activities, capacities and disruptions as the engine target reads them.
struct EngineCase {
    capacity: Vec<f64>,
    acts: Activities,
    disruptions: Vec<Disruption>,
    record_rates: bool,
    scale_exp: i32,
}

fn usage_of(inp: &mut Input, n_c: usize) -> Vec<Usage> {
    (0..inp.n(3))
        .map(|_| Usage {
            constraint: inp.idx(n_c),
            coefficient: if inp.b() { 1.0 } else { inp.f() },
        })
        .collect()
}

/// Reads an engine case; adds that fail are refused (and must leave the activities as they
/// were) and skipped. Capacities are kept within `MAX_CAPACITY_BPS`, the engine's contract,
/// until `engine::run` refuses larger ones itself (`validate` in src/engine/sim.rs).
fn engine_case(inp: &mut Input) -> Result<EngineCase, String> {
    let n_c = inp.n(5);
    let capacity: Vec<f64> = (0..n_c).map(|_| inp.f()).collect();
    let mut acts = Activities::new();
    for _ in 0..inp.n(10) {
        let before = acts.len();
        let n_deps = inp.n(2);
        let after: Vec<ActivityId> = (0..n_deps).map(|_| ActivityId(inp.idx(before))).collect();
        let added = if inp.n(3) == 3 {
            let (d, s) = (inp.f(), inp.f());
            let r = acts.add_delay(d, s, &after);
            trace(format!("add_delay({d:e}, {s:e}, {after:?}) -> {r:?}"));
            r
        } else {
            let bytes = inp.f();
            let usage = usage_of(inp, n_c);
            let (latency, start) = (if inp.b() { 0.0 } else { inp.f() }, inp.f());
            let cap = if inp.b() { inp.f() } else { f64::INFINITY };
            let r = acts.add_flow(bytes, &usage, latency, start, cap, &after);
            trace(format!("add_flow({bytes:e}, {usage:?}, {latency:e}, {start:e}, {cap:e}, {after:?}) -> {r:?}"));
            r
        };
        match added {
            Ok(_) if acts.len() != before + 1 => {
                return Err("an add did not add one activity".into())
            }
            Err(Error::Internal(m)) => return Err(format!("internal error: {m}")),
            Err(_) if acts.len() != before => {
                return Err("a refused add changed the activities".into())
            }
            _ => {}
        }
    }
    trace(format!("capacities {capacity:?}"));
    for _ in 0..inp.n(3) {
        let (a, b) = (inp.idx(acts.len()), inp.idx(acts.len()));
        trace(format!("add_dependency({a}, {b})"));
        if let Err(Error::Internal(m)) = acts.add_dependency(ActivityId(a), ActivityId(b)) {
            return Err(format!("internal error: {m}"));
        }
    }
    let mut disruptions = Vec::new();
    for _ in 0..inp.n(2) {
        let time_s = inp.f();
        let capacities = (0..inp.n(2)).map(|_| (inp.idx(n_c), inp.f())).collect();
        let reroutes = (0..inp.n(2))
            .map(|_| {
                (
                    inp.idx(acts.len()),
                    if inp.b() {
                        None
                    } else {
                        Some(usage_of(inp, n_c))
                    },
                )
            })
            .collect();
        let d = Disruption {
            time_s,
            capacities,
            reroutes,
        };
        trace(format!("{d:?}"));
        disruptions.push(d);
    }
    Ok(EngineCase {
        capacity,
        acts,
        disruptions,
        record_rates: inp.b(),
        scale_exp: (inp.n(40) as i32 - 20) * 25,
    })
}

fn engine_target(inp: &mut Input) -> Result<Outcome2, String> {
    let case = engine_case(inp)?;
    let within = |c: &f64| !(*c > MAX_CAPACITY_BPS);
    if !case.capacity.iter().all(within)
        || !case
            .disruptions
            .iter()
            .flat_map(|d| &d.capacities)
            .all(|(_, c)| within(c))
    {
        return Ok(Outcome2::Ok); // outside the engine's contract (see `engine_case`)
    }
    let options = RunOptions {
        record_rates: case.record_rates,
        verify: true, // every instant's rates against a full solve: a mismatch is Internal
        ..Default::default()
    };
    let out = match run_with_disruptions(
        &case.capacity,
        &case.acts,
        &case.disruptions,
        &options,
        &mut |_| true,
    ) {
        Ok(out) => out,
        Err(e) => return refused(e),
    };
    let acts = &case.acts;
    let n = acts.len();
    // In order, up to the engine's instant: events within SAME_INSTANT_REL of an instant
    // are handled in it, and a finish due then is reported at the instant's time.
    let before = |x: f64, y: f64| x <= y + y.abs() * SAME_INSTANT_REL;
    for a in 0..n {
        let id = ActivityId(a as u32);
        let (r, s, f) = (out.ready_s[a], out.start_s[a], out.finish_s[a]);
        if out.outcome[a] == Outcome::Done && !(before(r, s) && before(s, f) && f.is_finite()) {
            return Err(format!(
                "activity {a} done with ready {r:e}, start {s:e}, finish {f:e}"
            ));
        }
        if out.outcome[a] == Outcome::Done && !before(acts.start_s(id), f) {
            return Err(format!(
                "activity {a} finished at {f:e} before its start {:e}",
                acts.start_s(id)
            ));
        }
    }
    for (c, &peak) in out.peak_load_Bps.iter().enumerate() {
        let most = case
            .disruptions
            .iter()
            .flat_map(|d| &d.capacities)
            .filter(|(cc, _)| *cc as usize == c)
            .map(|(_, x)| *x)
            .fold(case.capacity[c], f64::max);
        if peak > most * (1.0 + 1e-9) {
            return Err(format!(
                "constraint {c} peaked at {peak} over its capacity {most}"
            ));
        }
    }
    if case.disruptions.is_empty() {
        // Bytes conserved: every done flow's bytes times its coefficients reached its
        // constraints, and a failed one moved nothing.
        let mut expected = vec![0.0; case.capacity.len()];
        for a in 0..n {
            let id = ActivityId(a as u32);
            if out.outcome[a] == Outcome::Done && acts.bytes(id) > 0.0 {
                for u in acts.usage(id) {
                    expected[u.constraint as usize] += u.coefficient * acts.bytes(id);
                }
            }
        }
        for (c, (&got, &want)) in out.carried_bytes.iter().zip(&expected).enumerate() {
            if !close(got, want, 1e-9) {
                return Err(format!(
                    "constraint {c} carried {got} bytes, its flows moved {want}"
                ));
            }
        }
        scale_invariance(&case, &out.finish_s)?;
    }
    Ok(Outcome2::Ok)
}

/// Capacities, sizes and rate caps times 2^k give the same times, bit for bit, where the
/// scaled values stay clear of the bounds and of subnormals.
fn scale_invariance(case: &EngineCase, finish_s: &[f64]) -> Result<(), String> {
    let k = case.scale_exp;
    let scale = 2f64.powi(k);
    // Rates are capacities over coefficients: with both bounded, they stay normal too.
    let ok = |x: f64| {
        x == 0.0
            || !x.is_finite()
            || (1e-200..=1e200).contains(&x) && (1e-200..=1e200).contains(&(x * scale))
    };
    let acts = &case.acts;
    let ids = (0..acts.len()).map(|a| ActivityId(a as u32));
    if !case.capacity.iter().all(|&c| ok(c))
        || !ids
            .clone()
            .all(|a| ok(acts.bytes(a)) && ok(acts.rate_cap_Bps(a)))
        || !ids.clone().all(|a| {
            acts.usage(a)
                .iter()
                .all(|u| (1e-20..=1e20).contains(&u.coefficient))
        })
        || acts.carried_bytes() * scale.max(1.0) > MAX_CARRIED_BYTES
    {
        return Ok(());
    }
    let mut scaled = Activities::new();
    for a in ids {
        let after: Vec<ActivityId> = Vec::new();
        let added = match acts.kind(a) {
            fabricsim::engine::Kind::Delay => {
                scaled.add_delay(acts.wait_s(a), acts.start_s(a), &after)
            }
            fabricsim::engine::Kind::Flow => scaled.add_flow(
                acts.bytes(a) * scale,
                acts.usage(a),
                acts.wait_s(a),
                acts.start_s(a),
                acts.rate_cap_Bps(a) * scale,
                &after,
            ),
        };
        added.map_err(|e| format!("a scaled copy was refused: {e}"))?;
    }
    for (a, b) in acts.dependencies() {
        scaled
            .add_dependency(ActivityId(a), ActivityId(b))
            .map_err(|e| format!("a scaled copy was refused: {e}"))?;
    }
    let capacity: Vec<f64> = case.capacity.iter().map(|c| c * scale).collect();
    let out = run_with_disruptions(&capacity, &scaled, &[], &RunOptions::default(), &mut |_| {
        true
    })
    .map_err(|e| format!("scaled by 2^{k} the run failed: {e}"))?;
    for (a, (x, y)) in out.finish_s.iter().zip(finish_s).enumerate() {
        if x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()) {
            return Err(format!(
                "scaled by 2^{k}, activity {a} finished at {x}, not {y}"
            ));
        }
    }
    Ok(())
}

/// A scenario on a small generic topology or Clos: flows, delays, faults, coupled flows
/// and engines added from the input, then run and exported.
fn scenario_target(inp: &mut Input) -> Result<Outcome2, String> {
    let fabric = if inp.b() {
        let so = ScaleOutParams {
            tiers: 1 + inp.n(1) as u32,
            planes: 1 + inp.n(1) as u32,
            radix: [4, 8, 6][inp.n(2)],
            oversubscription: [1.0 + inp.n(2) as f64, 1.0],
            link_Bps: inp.f(),
            switch_latency_s: if inp.b() { 1e-7 } else { inp.f() },
            nic_latency_s: 0.0,
            mode: if inp.b() { Mode::Spray } else { Mode::Ecmp },
        };
        let n_hosts = 2 + inp.n(14) as u32;
        trace(format!("clos({n_hosts}, {so:?})"));
        match clos(n_hosts, &so) {
            Ok(f) => f,
            Err(e) => return refused(e),
        }
    } else {
        let n_nodes = 2 + inp.n(6);
        let n = inp.n(10);
        let src: Vec<u32> = (0..n).map(|_| inp.idx(n_nodes - 1)).collect();
        let dst: Vec<u32> = (0..n).map(|_| inp.idx(n_nodes - 1)).collect();
        let cap: Vec<f64> = (0..n)
            .map(|_| if inp.b() { 1e9 } else { inp.f() })
            .collect();
        let lat = vec![1e-6; n];
        trace(format!(
            "Topology::from_links({n_nodes}, {src:?}, {dst:?}, {cap:?}, 1e-6 each)"
        ));
        match Topology::from_links(n_nodes, src, dst, cap, lat) {
            Ok(t) => Fabric::generic(t),
            Err(e) => return refused(e),
        }
    };
    let fabric = Arc::new(fabric);
    let n_nodes = fabric.topology().n_nodes();
    let n_links = fabric.n_links();
    let mut sc = Scenario::new(Arc::clone(&fabric), inp.n(3) as u64);
    let mut engines = Vec::new();
    for _ in 0..inp.n(12) {
        let before = sc.n_activities();
        let n_acts = before;
        let after: Vec<ActivityId> = (0..inp.n(1)).map(|_| ActivityId(inp.idx(n_acts))).collect();
        let result: Result<(), Error> = match inp.n(4) {
            0 | 1 => {
                let (src, dst) = (NodeId(inp.idx(n_nodes - 1)), NodeId(inp.idx(n_nodes - 1)));
                let (bytes, start) = (inp.f(), if inp.b() { 0.0 } else { inp.f() });
                let links: Vec<LinkId> = (0..inp.n(4)).map(|_| LinkId(inp.idx(n_links))).collect();
                let route = if inp.b() {
                    Route::Links(&links)
                } else {
                    Route::Ecmp
                };
                let cap = if inp.b() { inp.f() } else { f64::INFINITY };
                if (src.index() >= n_nodes)
                    || (dst.index() >= n_nodes)
                    || links.iter().any(|l| l.index() >= n_links)
                {
                    Ok(()) // ids are checked by the caller of add_flow (`Topology::node`, `link`)
                } else {
                    let r = sc.add_flow(src, dst, bytes, start, &after, route, Some("t"), cap);
                    trace(format!("add_flow({src:?}, {dst:?}, {bytes:e}, {start:e}, {after:?}, {links:?}, {cap:e}) -> {r:?}"));
                    r.map(|_| ())
                }
            }
            2 => {
                let (d, s) = (inp.f(), inp.f());
                let r = sc.add_delay(d, s, &after, None);
                trace(format!("add_delay({d:e}, {s:e}, {after:?}) -> {r:?}"));
                r.map(|_| ())
            }
            3 => {
                let links: Vec<u32> = (0..1 + inp.n(3)).map(|_| inp.idx(n_links)).collect();
                let (t, factor) = (inp.f(), if inp.b() { 0.0 } else { inp.f() });
                let r = sc.add_fault(t, &links, factor);
                trace(format!("add_fault({t:e}, {links:?}, {factor:e}) -> {r:?}"));
                r
            }
            _ => {
                if inp.b() {
                    let c = inp.f();
                    let r = sc.add_engine(c);
                    trace(format!("add_engine({c:e}) -> {r:?}"));
                    r.map(|e| engines.push(e))
                } else {
                    let edges = (0..inp.n(3))
                        .map(|_| Edge {
                            src: inp.idx(n_nodes - 1),
                            dst: inp.idx(n_nodes - 1),
                            coefficient: if inp.b() { 1.0 } else { inp.f() },
                            leg: [Leg::Whole, Leg::Up, Leg::Down][inp.n(2)],
                            tree: 0,
                        })
                        .collect();
                    let eng: Vec<Usage> = engines
                        .iter()
                        .take(inp.n(1))
                        .map(|&c| Usage {
                            constraint: c,
                            coefficient: 1.0,
                        })
                        .collect();
                    let combine = if inp.b() { Combine::Sum } else { Combine::Max };
                    let (bytes, latency, start) =
                        (inp.f(), if inp.b() { 0.0 } else { inp.f() }, 0.0);
                    let shown = format!("add_coupled_flow({edges:?}, {combine:?}, {eng:?}, {bytes:e}, {latency:e}, {after:?})");
                    let r = sc.add_coupled_flow(
                        edges,
                        combine,
                        eng,
                        bytes,
                        latency,
                        start,
                        &after,
                        None,
                        f64::INFINITY,
                    );
                    trace(format!("{shown} -> {r:?}"));
                    r.map(|_| ())
                }
            }
        };
        match result {
            Err(Error::Internal(m)) => return Err(format!("internal error: {m}")),
            Err(_) if sc.n_activities() != before => {
                return Err(format!(
                    "a refused add left {} activities, not {before}",
                    sc.n_activities()
                ))
            }
            _ => {}
        }
    }
    let ran = match sc.run(&RunOptions::default(), &mut |_| true) {
        Ok(r) => r,
        Err(e) => return refused(e),
    };
    let tables = [
        fabricsim::export::flows_table(&sc, &ran),
        fabricsim::export::delays_table(&sc, &ran),
        fabricsim::export::links_table(&sc, &ran),
        fabricsim::export::rate_changes_table(&ran.out),
    ];
    for table in &tables {
        let lens: Vec<usize> = table.columns.iter().map(|(_, c)| column_len(c)).collect();
        if lens.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!("a table's columns differ in length: {lens:?}"));
        }
    }
    let column = |name: &str| match tables[2].columns.iter().find(|(n, _)| *n == name) {
        Some((_, fabricsim::export::Column::F64(v))) => v.clone(),
        _ => Vec::new(),
    };
    for (name, col) in &tables[2].columns {
        if let fabricsim::export::Column::F64(v) = col {
            if v.iter().any(|x| !x.is_finite() || *x < 0.0) {
                return Err(format!("links column {name} has {v:?}"));
            }
        }
    }
    if column("peak_utilization").iter().any(|x| *x > 1.0 + 1e-9) {
        return Err(format!(
            "a link's peak over its capacity: {:?}",
            column("peak_utilization")
        ));
    }
    // A link carries at most capacity x makespan, up to rounding: a flow cut after moving a
    // tiny part of its bytes is credited with the difference of two remainders (`leave` in
    // src/engine/sim.rs), off by about 1e-16 of its size, and a makespan of subnormal
    // seconds is off by its last bit.
    let (cap, carried) = (column("capacity_Bps"), column("bytes_carried"));
    let slack = 1e-14 * sc.activities().carried_bytes();
    for (l, (&c, &b)) in cap.iter().zip(&carried).enumerate() {
        if b > c * (ran.out.makespan_s + 2e-323) * (1.0 + 1e-9) + slack {
            return Err(format!(
                "link row {l} carried {b:e} bytes, more than its {c:e} B/s over {:e} s",
                ran.out.makespan_s
            ));
        }
    }
    Ok(Outcome2::Ok)
}

fn column_len(c: &fabricsim::export::Column) -> usize {
    match c {
        fabricsim::export::Column::I64(v) => v.len(),
        fabricsim::export::Column::F64(v) => v.len(),
        fabricsim::export::Column::Dict { indices, .. } => indices.len(),
    }
}

const TARGETS: &[(&str, Target)] = &[
    ("solver", solver_target),
    ("topology", topology_target),
    ("engine", engine_target),
    ("scenario", scenario_target),
];

// ---- driver --------------------------------------------------------------------------------

/// Runs `target` on `tokens`: Err with a report (the input as a corpus file) on a panic or a
/// broken promise.
fn check(name: &str, target: Target, tokens: &[f64]) -> Result<Outcome2, String> {
    let mut inp = Input::new(tokens.to_vec());
    TRACE.with(|t| t.borrow_mut().clear());
    let got = catch_unwind(AssertUnwindSafe(|| target(&mut inp)));
    let failure = match got {
        Ok(Ok(o)) => return Ok(o),
        Ok(Err(m)) => m,
        Err(p) => format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        ),
    };
    let steps = TRACE.with(|t| t.borrow().join("\n  "));
    Err(format!(
        "fuzz target {name}: {failure}\n--- what it built ---\n  {steps}\n--- input (save as \
         tests/rust/fuzz_corpus/{name}/<what>.txt) ---\n{}\n",
        tokens
            .iter()
            .map(|t| format!("{t:e}"))
            .collect::<Vec<_>>()
            .join(" ")
    ))
}

/// A corpus file: its `# expect:` line, if any, and its numbers.
fn read_corpus_file(path: &Path) -> (Option<String>, Vec<f64>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut expect = None;
    let mut tokens = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix('#') {
            if let Some(e) = rest.trim().strip_prefix("expect:") {
                expect = Some(e.trim().to_string());
            }
            continue;
        }
        for word in line.split_whitespace() {
            let x = match word {
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                "nan" | "NaN" => f64::NAN,
                w => w
                    .parse()
                    .unwrap_or_else(|_| panic!("{}: {w:?} is not a number", path.display())),
            };
            tokens.push(x);
        }
    }
    (expect, tokens)
}

fn corpus(name: &str) -> Vec<(String, Option<String>, Vec<f64>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/rust/fuzz_corpus")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let (expect, tokens) = read_corpus_file(&p);
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                expect,
                tokens,
            )
        })
        .collect()
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every corpus input keeps the promises, and does what its `# expect:` line says.
#[test]
fn corpus_replays() {
    let mut failures = Vec::new();
    for &(name, target) in TARGETS {
        let entries = corpus(name);
        assert!(!entries.is_empty(), "no corpus for {name}");
        for (file, expect, tokens) in entries {
            match (check(name, target, &tokens), expect.as_deref()) {
                (Err(report), _) => failures.push(format!("{file}: {report}")),
                (Ok(Outcome2::Ok), Some(e)) if e != "ok" => {
                    failures.push(format!("{name}/{file}: ran, expected {e}"))
                }
                (Ok(Outcome2::Refused(err)), Some(e)) => match e.strip_prefix("err") {
                    Some(text) if err.to_string().contains(text.trim()) => {}
                    _ => failures.push(format!("{name}/{file}: refused with {err}, expected {e}")),
                },
                _ => {}
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A short seeded search from the corpus and from random inputs: deterministic for a seed
/// (`FABRICSIM_FUZZ_SEED`), as long as `FABRICSIM_FUZZ_ITERS` asks (per target).
#[test]
fn seeded_search() {
    let seed = env_u64("FABRICSIM_FUZZ_SEED", 24);
    let iters = env_u64("FABRICSIM_FUZZ_ITERS", 8000);
    let mut failures = Vec::new();
    for &(name, target) in TARGETS {
        let entries: Vec<Vec<f64>> = corpus(name).into_iter().map(|e| e.2).collect();
        let mut rng = Rng::new(seed ^ fabricsim::rng::splitmix64(name.len() as u64 * 0x9e37));
        let (mut ran, mut refused) = (0u64, 0u64);
        for _ in 0..iters {
            let tokens = if rng.below(2) == 0 {
                let base = &entries[rng.below(entries.len() as u64) as usize];
                let other = &entries[rng.below(entries.len() as u64) as usize];
                mutate(&mut rng, base, other)
            } else {
                random_input(&mut rng)
            };
            match check(name, target, &tokens) {
                Ok(Outcome2::Ok) => ran += 1,
                Ok(Outcome2::Refused(_)) => refused += 1,
                Err(report) => {
                    failures.push(report);
                    if failures.len() >= 5 {
                        break;
                    }
                }
            }
        }
        eprintln!("fuzz {name}: {iters} inputs from seed {seed}: {ran} ran, {refused} refused");
        // The search must reach past the validation, not only be refused by it.
        assert!(
            ran >= iters / 20,
            "fuzz {name}: only {ran} of {iters} inputs ran"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
