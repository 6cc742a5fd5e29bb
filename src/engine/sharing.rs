//! The live sharing state of a run and its incremental re-solve.
//!
//! After an event only flows whose max-min rate can change are re-solved, and the result is
//! exact, not approximate. Two facts make that possible.
//!
//! *Threshold.* Progressive filling raises rates level by level, so a change shows only at
//! and above a threshold level T:
//! * a flow leaving with rate r changes nothing below r: its constraints did not saturate
//!   below r, with or without it;
//! * flows arriving on constraint c change nothing below x_c, the level at which c would
//!   saturate with them on it while every other flow keeps min(its rate, level);
//! * a flow arriving with a rate cap changes nothing below its cap.
//!
//! Below T = the minimum of these the filling is identical, so every flow with rate < T keeps
//! its rate. What remains is the max-min problem of the flows at or above T on the capacity
//! the others leave.
//!
//! *Certificate.* An allocation is the max-min fair one if and only if it is feasible and
//! every flow is at its cap or has a bottleneck: a saturated constraint on which no flow is
//! faster. So the re-solve starts from a small region (the arriving flows and the flows at or
//! above T on the changed flows' constraints), solves it by progressive filling with every
//! other flow fixed, and checks the certificate where the region touches fixed flows. Where
//! it fails, the fixed flows that break it join and the region is solved again. The region
//! ends up close to the set of flows whose rate really changes.
//!
//! *Disruptions.* A capacity change or a reroute is handled as departures and arrivals: the
//! caller detaches every flow on a constraint whose capacity changes and every rerouted
//! flow, changes capacities and usage lists while no attached flow is on what changes, and
//! re-attaches the survivors as arrivals of the same `resolve`. Departures change nothing
//! below their rates; a capacity change on a constraint without flows changes no filling;
//! the arrivals' saturation levels are taken with the new capacities. So the threshold and
//! the certificate hold as they are.

use crate::solver::{Filling, Incidence, Usage, CAPPED};

/// Relative slack of every "might this flow be affected?" decision. It must be far wider
/// than the 1e-9 slack with which a solution is accepted, or a flow accepted a hair too slow
/// would later fall outside every region and keep a stale rate. Erring wide only costs work.
const WIDE: f64 = 1e-6;

/// A flow's place on a constraint: `(flow, index of that constraint in the flow's usage)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub flow: u32,
    pub entry: u32,
}

/// Rates of transferring flows, the flows on each constraint, and the re-solve workspace.
pub(crate) struct Sharing<'a> {
    /// Every usage list a flow can have: the activities' own, then the disruptions' reroutes.
    usage: &'a [Usage],
    /// The current usage list of each flow: `usage[span[f].0..span[f].1]`.
    span: Vec<(usize, usize)>,
    /// Current capacity of each constraint.
    pub capacity: Vec<f64>,
    pub rate_cap: &'a [f64],
    /// Transferring flows on each constraint.
    pub on: Vec<Vec<Slot>>,
    /// For each entry of `usage` in use by a transferring flow, its position in
    /// `on[constraint]`.
    pos: Vec<u32>,
    /// Current rate of each activity (0 when not transferring).
    pub rate: Vec<f64>,
    /// Rates computed by the last re-solve for the flows of `region`.
    pub solved: Vec<f64>,
    /// Flows re-solved by the last call (their new rate is in `solved`).
    pub region: Vec<u32>,
    in_region: Vec<bool>,
    visited: Vec<bool>,
    residual: Vec<f64>,
    /// Region flows whose new rate is final (below the level where a round failed).
    settled: Vec<bool>,
    /// The unsettled region flows a round solves.
    subset: Vec<u32>,
    /// Constraints where the certificate failed, with the rate from which fixed flows join.
    failures: Vec<(u32, f64)>,
    /// Load and fastest rate of the flows detached since the last re-solve, per constraint,
    /// and their slowest rate.
    left_load: Vec<f64>,
    left_max: Vec<f64>,
    left_min_rate: f64,
    /// Per-constraint effect of the region's new rates, for the certificate check.
    load_delta: Vec<f64>,
    region_old_max: Vec<f64>,
    region_new_max: Vec<f64>,
    slowest_bottlenecked: Vec<f64>,
    /// Current load of each constraint, kept up to date by the caller.
    pub load_Bps: Vec<f64>,
    /// An upper bound of the fastest rate on each constraint: raised by the caller when a
    /// rate rises, made exact whenever the constraint's flows are scanned.
    pub top_rate_bound: Vec<f64>,
    constraints: Vec<u32>,
    scratch: Vec<(f64, f64)>,
    arriving_coef: Vec<f64>,
    /// Constraints of the arriving flows (workspace of `threshold`).
    touched: Vec<u32>,
    filling: Filling,
    /// Filling solves run, and flows they solved, over the whole run.
    pub n_solves: u64,
    pub n_solved_flows: u64,
}

struct View<'a> {
    usage: &'a [Usage],
    span: &'a [(usize, usize)],
}

impl Incidence for View<'_> {
    #[inline]
    fn usage(&self, f: u32) -> &[Usage] {
        let (begin, end) = self.span[f as usize];
        &self.usage[begin..end]
    }
}

impl<'a> Sharing<'a> {
    /// `span[f]` is flow f's initial usage list in `usage`.
    pub fn new(
        usage: &'a [Usage],
        span: Vec<(usize, usize)>,
        capacity: Vec<f64>,
        rate_cap: &'a [f64],
    ) -> Self {
        let n_acts = span.len();
        let n_c = capacity.len();
        Sharing {
            usage,
            span,
            capacity,
            rate_cap,
            on: vec![Vec::new(); n_c],
            pos: vec![0; usage.len()],
            rate: vec![0.0; n_acts],
            solved: vec![0.0; n_acts],
            region: Vec::new(),
            in_region: vec![false; n_acts],
            visited: vec![false; n_c],
            residual: vec![0.0; n_c],
            settled: vec![false; n_acts],
            subset: Vec::new(),
            failures: Vec::new(),
            left_load: vec![0.0; n_c],
            left_max: vec![0.0; n_c],
            left_min_rate: f64::INFINITY,
            load_delta: vec![0.0; n_c],
            region_old_max: vec![0.0; n_c],
            region_new_max: vec![0.0; n_c],
            slowest_bottlenecked: vec![0.0; n_c],
            load_Bps: vec![0.0; n_c],
            top_rate_bound: vec![0.0; n_c],
            constraints: Vec::new(),
            scratch: Vec::new(),
            arriving_coef: vec![0.0; n_c],
            touched: Vec::new(),
            filling: Filling::new(n_c, n_acts),
            n_solves: 0,
            n_solved_flows: 0,
        }
    }

    #[inline]
    pub fn usage_of(&self, f: u32) -> &'a [Usage] {
        let (begin, end) = self.span[f as usize];
        &self.usage[begin..end]
    }

    /// Gives flow `f`, which must not be attached, the usage list `usage[span.0..span.1]`.
    pub fn set_usage(&mut self, f: u32, span: (usize, usize)) {
        self.span[f as usize] = span;
    }

    /// Changes the capacity of constraint `c`, which must carry no flow.
    pub fn set_capacity(&mut self, c: u32, capacity: f64) {
        debug_assert!(self.on[c as usize].is_empty());
        self.capacity[c as usize] = capacity;
    }

    /// Takes a flow off its constraints, noting its departure for the next `resolve`, which
    /// reads its current rate now: the caller may zero it afterwards.
    pub fn detach(&mut self, f: u32) {
        let base = self.span[f as usize].0;
        let r = self.rate[f as usize];
        self.left_min_rate = self.left_min_rate.min(r);
        for (k, u) in self.usage_of(f).iter().enumerate() {
            let ci = u.constraint as usize;
            let list = &mut self.on[ci];
            let p = self.pos[base + k] as usize;
            list.swap_remove(p);
            if let Some(moved) = list.get(p) {
                self.pos[self.span[moved.flow as usize].0 + moved.entry as usize] = p as u32;
            }
            // A changed flow's constraint passes its change on to the flows bottlenecked
            // there, its fastest ones; the certificate check finds whatever else moves.
            self.left_load[ci] += u.coefficient * r;
            self.left_max[ci] = self.left_max[ci].max(r);
            self.visit(u.constraint);
        }
    }

    fn attach(&mut self, f: u32) {
        let base = self.span[f as usize].0;
        for (k, u) in self.usage_of(f).iter().enumerate() {
            let list = &mut self.on[u.constraint as usize];
            self.pos[base + k] = list.len() as u32;
            list.push(Slot {
                flow: f,
                entry: k as u32,
            });
        }
    }

    /// Re-solves after the flows detached since the last call left and `arrived` flows (at
    /// rate 0) start transferring. Afterwards `region` lists the flows whose rate may have
    /// changed, with the new rates in `solved`; `rate` is not updated (the caller needs the
    /// old rates to integrate bytes).
    pub fn resolve(&mut self, arrived: &[u32]) -> crate::Result<()> {
        // Lowered a hair so flows tied with the threshold by rounding are re-solved too.
        let threshold = self.threshold(arrived) * (1.0 - WIDE);
        for &f in arrived {
            self.attach(f);
        }
        self.region.clear();
        for &f in arrived {
            self.add_to_region(f);
        }
        for i in 0..self.constraints.len() {
            let c = self.constraints[i] as usize;
            if self.load_Bps[c] + self.left_load[c] < self.capacity[c] * (1.0 - WIDE) {
                continue; // had slack: no flow was bottlenecked here
            }
            let top = self.on[c]
                .iter()
                .map(|s| self.rate[s.flow as usize])
                .fold(0.0, f64::max);
            let floor = threshold.max(top * (1.0 - WIDE));
            for k in 0..self.on[c].len() {
                let g = self.on[c][k].flow;
                if !self.in_region[g as usize] && self.rate[g as usize] >= floor {
                    self.add_to_region(g);
                }
            }
        }
        let result = self.solve_region(threshold);
        for &f in &self.region {
            self.in_region[f as usize] = false;
        }
        for &c in &self.constraints {
            let ci = c as usize;
            self.visited[ci] = false;
            self.left_load[ci] = 0.0;
            self.left_max[ci] = 0.0;
        }
        self.constraints.clear();
        self.left_min_rate = f64::INFINITY;
        result
    }

    /// Solves the region, and grows it and solves again for as long as the certificate of
    /// max-min fairness fails where it touches fixed flows (module docs).
    fn solve_region(&mut self, threshold: f64) -> crate::Result<()> {
        let result = self.solve_region_rounds(threshold);
        for &f in &self.region {
            self.settled[f as usize] = false;
        }
        result
    }

    fn solve_region_rounds(&mut self, threshold: f64) -> crate::Result<()> {
        let mut lowest_failure = f64::INFINITY;
        loop {
            // Capacity left for the flows being solved: the capacity minus the current load,
            // plus the region's old share, minus what settled region flows now take.
            for &c in &self.constraints {
                self.residual[c as usize] = self.capacity[c as usize] - self.load_Bps[c as usize];
            }
            self.subset.clear();
            for &f in &self.region {
                let (old, settled) = (self.rate[f as usize], self.settled[f as usize]);
                let new = if settled {
                    self.solved[f as usize]
                } else {
                    0.0
                };
                if !settled {
                    self.subset.push(f);
                }
                if old != new {
                    for u in self.usage_of(f) {
                        self.residual[u.constraint as usize] += u.coefficient * (old - new);
                    }
                }
            }
            for &c in &self.constraints {
                self.filling.register(c, self.residual[c as usize]);
            }
            let view = View {
                usage: self.usage,
                span: &self.span,
            };
            self.filling
                .solve(&view, &self.subset, self.rate_cap, &mut self.solved)?;
            self.n_solves += 1;
            self.n_solved_flows += self.subset.len() as u64;
            let n_solved = self.region.len();
            let Some(level) = self.certify(threshold) else {
                return Ok(());
            };
            // The solution stands below the lowest level where the certificate ever failed:
            // the filling there did not depend on the flows that now join (threshold
            // argument), so only flows at or above it are solved again.
            lowest_failure = lowest_failure.min(level);
            let floor = lowest_failure * (1.0 - WIDE);
            for i in 0..n_solved {
                let f = self.region[i] as usize;
                self.settled[f] = self.solved[f] < floor;
            }
        }
    }

    /// Checks the certificate of max-min fairness above the threshold (module docs) and
    /// grows the region where it fails; returns the lowest level at which it failed, or
    /// None when the region's solution stands.
    ///
    /// Every flow at or above the threshold needs a bottleneck: a saturated constraint on
    /// which no other such flow is faster. A region flow has one from the filling, unless a
    /// faster fixed flow sits on it. A fixed flow keeps its old one unless that is a
    /// constraint of the region that lost its saturation or gained a faster region flow.
    /// A constraint's flow list is scanned only when one of these can have happened.
    fn certify(&mut self, threshold: f64) -> Option<f64> {
        // What the region did to each of its constraints, from the region's own usage lists.
        for &c in &self.constraints {
            let ci = c as usize;
            self.load_delta[ci] = 0.0;
            // Flows that left count as region flows that dropped to zero.
            self.region_old_max[ci] = self.left_max[ci];
            self.region_new_max[ci] = 0.0;
            self.slowest_bottlenecked[ci] = f64::INFINITY;
        }
        for &f in &self.region {
            let (old, new) = (self.rate[f as usize], self.solved[f as usize]);
            for u in self.usage_of(f) {
                let ci = u.constraint as usize;
                self.load_delta[ci] += u.coefficient * (new - old);
                self.region_old_max[ci] = self.region_old_max[ci].max(old);
                self.region_new_max[ci] = self.region_new_max[ci].max(new);
            }
            let b = self.filling.bottleneck(f);
            if b != CAPPED {
                let bi = b as usize;
                self.slowest_bottlenecked[bi] = self.slowest_bottlenecked[bi].min(new);
            }
        }
        let mut failed_at = f64::INFINITY;
        for i in 0..self.constraints.len() {
            let c = self.constraints[i];
            let ci = c as usize;
            let cap = self.capacity[ci];
            let was_saturated = self.load_Bps[ci] + self.left_load[ci] >= cap * (1.0 - WIDE);
            // Any real drop in load counts: on a constraint shared by many slow flows, a slack
            // of 1e-9 of the capacity can be large next to its fastest flow's rate.
            let still_saturated = self.load_Bps[ci] + self.load_delta[ci] >= cap * (1.0 - 1e-9)
                && self.load_delta[ci] >= -1e-13 * cap;
            let region_sped_up = self.region_new_max[ci] > self.region_old_max[ci] * (1.0 + 1e-12);
            // A fixed flow can beat a region flow frozen here only if some flow is faster.
            let bottlenecks_region = self.slowest_bottlenecked[ci] < f64::INFINITY
                && self.top_rate_bound[ci] > self.slowest_bottlenecked[ci] * (1.0 + 1e-9);
            if !bottlenecks_region && !(was_saturated && (!still_saturated || region_sped_up)) {
                continue; // nothing here can break a certificate
            }
            let mut fixed_max = f64::NEG_INFINITY; // fastest fixed flow at or above threshold
            let mut top = 0.0f64;
            for s in &self.on[ci] {
                let g = s.flow as usize;
                top = top.max(self.rate[g]);
                if !self.in_region[g] && self.rate[g] >= threshold {
                    fixed_max = fixed_max.max(self.rate[g]);
                }
            }
            self.top_rate_bound[ci] = top;
            if fixed_max == f64::NEG_INFINITY {
                continue;
            }
            // A region flow frozen here must not be slower than a fixed flow here: the
            // faster fixed flows join. The filling went wrong from the level it froze at.
            let mut floor = f64::INFINITY;
            if fixed_max > self.slowest_bottlenecked[ci] * (1.0 + 1e-9) {
                floor = self.slowest_bottlenecked[ci] * (1.0 - WIDE);
                failed_at = failed_at.min(self.slowest_bottlenecked[ci]);
            }
            // A fixed flow that was a fastest flow on a saturated constraint keeps it as its
            // bottleneck only if it stays saturated and no region flow overtakes it: else the
            // fastest fixed flows join, from their own rate on.
            if was_saturated
                && fixed_max >= self.region_old_max[ci] * (1.0 - WIDE)
                && (!still_saturated || self.region_new_max[ci] > fixed_max * (1.0 + 1e-9))
            {
                floor = floor.min(fixed_max * (1.0 - WIDE));
                failed_at = failed_at.min(fixed_max);
            }
            if floor < f64::INFINITY {
                self.failures.push((c, floor.max(threshold)));
            }
        }
        // Flows join only after every constraint was judged on the same solution.
        for i in 0..self.failures.len() {
            let (c, floor) = self.failures[i];
            for k in 0..self.on[c as usize].len() {
                let g = self.on[c as usize][k].flow;
                if !self.in_region[g as usize] && self.rate[g as usize] >= floor {
                    self.add_to_region(g);
                }
            }
        }
        self.failures.clear();
        (failed_at < f64::INFINITY).then_some(failed_at)
    }

    /// Registers constraint `c` for the solve.
    fn visit(&mut self, c: u32) {
        let ci = c as usize;
        if !self.visited[ci] {
            self.visited[ci] = true;
            self.constraints.push(c);
        }
    }

    fn add_to_region(&mut self, f: u32) {
        self.in_region[f as usize] = true;
        self.region.push(f);
        for u in self.usage_of(f) {
            self.visit(u.constraint);
        }
    }

    /// The lowest level at which the filling can differ from the current one (module docs).
    /// Must run after the leaving flows are detached and before `arrived` flows are attached.
    fn threshold(&mut self, arrived: &[u32]) -> f64 {
        let mut t = self.left_min_rate;
        if arrived.is_empty() {
            return t;
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        for &f in arrived {
            t = t.min(self.rate_cap[f as usize]);
            for u in self.usage_of(f) {
                let c = u.constraint as usize;
                if self.arriving_coef[c] == 0.0 {
                    touched.push(u.constraint);
                }
                self.arriving_coef[c] += u.coefficient;
            }
        }
        for &c in &touched {
            let ci = c as usize;
            t = t.min(self.saturation_level(c, self.arriving_coef[ci]));
            self.arriving_coef[ci] = 0.0;
        }
        self.touched = touched;
        t
    }

    /// Level x at which constraint `c` saturates when flows with coefficient sum `arriving`
    /// rise to x while each flow already on it holds min(its rate, x).
    fn saturation_level(&mut self, c: u32, arriving: f64) -> f64 {
        let ci = c as usize;
        self.scratch.clear();
        for s in &self.on[ci] {
            let coef = self.usage[self.span[s.flow as usize].0 + s.entry as usize].coefficient;
            self.scratch.push((self.rate[s.flow as usize], coef));
        }
        self.scratch.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let cap = self.capacity[ci];
        // load(x) = below + rising * x, where `below` sums the flows already capped by x.
        let mut below = 0.0;
        let mut rising: f64 = arriving + self.scratch.iter().map(|&(_, k)| k).sum::<f64>();
        for &(r, k) in &self.scratch {
            if below + rising * r >= cap {
                break;
            }
            below += k * r;
            rising -= k;
        }
        ((cap - below) / rising.max(arriving)).max(0.0)
    }
}
