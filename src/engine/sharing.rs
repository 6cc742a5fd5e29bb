//! The live sharing state of a run and its incremental re-solve.
//!
//! After an event, only flows whose max-min rate can change are re-solved. Progressive filling
//! raises rates level by level, so a change shows only at and above a *threshold level* T:
//! * a flow leaving with rate r changes nothing below r: its constraints did not saturate
//!   below r, with or without it;
//! * flows arriving on constraint c change nothing below x_c, the level at which c would
//!   saturate with them on it while every other flow keeps min(its rate, level);
//! * a flow arriving with a rate cap changes nothing below its cap.
//! Below T = the minimum of these, the filling is identical, so flows with rate < T keep
//! their rates and act as fixed load; the flows with rate >= T that are connected to the
//! change through constraints (the affected region) are re-solved on what capacity is left.
//! This is exact, not a heuristic.

use crate::solver::{Filling, Incidence, Usage};

/// A flow's place on a constraint: `(flow, index of that constraint in the flow's usage)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub flow: u32,
    pub entry: u32,
}

/// Rates of transferring flows, the flows on each constraint, and the re-solve workspace.
pub(crate) struct Sharing<'a> {
    pub usage_offsets: &'a [usize],
    pub usage: &'a [Usage],
    pub capacity: &'a [f64],
    pub rate_cap: &'a [f64],
    /// Transferring flows on each constraint.
    pub on: Vec<Vec<Slot>>,
    /// For each usage entry of a transferring flow, its position in `on[constraint]`.
    pos: Vec<u32>,
    /// Current rate of each activity (0 when not transferring).
    pub rate: Vec<f64>,
    /// Rates computed by the last re-solve for the flows of `region`.
    pub solved: Vec<f64>,
    /// Flows re-solved by the last call (their new rate is in `solved`).
    pub region: Vec<u32>,
    in_region: Vec<bool>,
    visited: Vec<bool>,
    constraints: Vec<u32>,
    stack: Vec<u32>,
    scratch: Vec<(f64, f64)>,
    arriving_coef: Vec<f64>,
    filling: Filling,
}

struct View<'s, 'a> {
    usage_offsets: &'a [usize],
    usage: &'a [Usage],
    on: &'s [Vec<Slot>],
}

impl Incidence for View<'_, '_> {
    #[inline]
    fn usage(&self, f: u32) -> &[Usage] {
        let f = f as usize;
        &self.usage[self.usage_offsets[f]..self.usage_offsets[f + 1]]
    }

    #[inline]
    fn for_each_flow_on(&self, c: u32, mut visit: impl FnMut(u32)) {
        for s in &self.on[c as usize] {
            visit(s.flow);
        }
    }
}

impl<'a> Sharing<'a> {
    pub fn new(
        usage_offsets: &'a [usize],
        usage: &'a [Usage],
        capacity: &'a [f64],
        rate_cap: &'a [f64],
    ) -> Self {
        let n_acts = usage_offsets.len() - 1;
        let n_c = capacity.len();
        Sharing {
            usage_offsets,
            usage,
            capacity,
            rate_cap,
            on: vec![Vec::new(); n_c],
            pos: vec![0; usage.len()],
            rate: vec![0.0; n_acts],
            solved: vec![0.0; n_acts],
            region: Vec::new(),
            in_region: vec![false; n_acts],
            visited: vec![false; n_c],
            constraints: Vec::new(),
            stack: Vec::new(),
            scratch: Vec::new(),
            arriving_coef: vec![0.0; n_c],
            filling: Filling::new(n_c, n_acts),
        }
    }

    #[inline]
    pub fn usage_of(&self, f: u32) -> &'a [Usage] {
        let f = f as usize;
        &self.usage[self.usage_offsets[f]..self.usage_offsets[f + 1]]
    }

    /// Takes a finished flow off its constraints; its rate stays readable until `resolve`.
    pub fn detach(&mut self, f: u32) {
        let base = self.usage_offsets[f as usize];
        for (k, u) in self.usage_of(f).iter().enumerate() {
            let list = &mut self.on[u.constraint as usize];
            let p = self.pos[base + k] as usize;
            list.swap_remove(p);
            if let Some(moved) = list.get(p) {
                self.pos[self.usage_offsets[moved.flow as usize] + moved.entry as usize] = p as u32;
            }
        }
    }

    fn attach(&mut self, f: u32) {
        let base = self.usage_offsets[f as usize];
        for (k, u) in self.usage_of(f).iter().enumerate() {
            let list = &mut self.on[u.constraint as usize];
            self.pos[base + k] = list.len() as u32;
            list.push(Slot {
                flow: f,
                entry: k as u32,
            });
        }
    }

    /// Re-solves after `left` flows were detached and `arrived` flows start transferring.
    /// Afterwards `region` lists the flows whose rate may have changed, with the new rates in
    /// `solved`; `rate` is not updated (the caller needs the old rates to integrate bytes).
    pub fn resolve(&mut self, left: &[u32], arrived: &[u32]) -> crate::Result<()> {
        let threshold = self.threshold(left, arrived);
        for &f in arrived {
            self.attach(f);
        }
        // Lower the threshold a hair so flows tied with it by rounding are re-solved too.
        let threshold = threshold * (1.0 - 1e-12);

        // Collect the affected region: flows at or above the threshold, connected to the change.
        self.region.clear();
        self.constraints.clear();
        self.stack.clear();
        for &f in left.iter().chain(arrived) {
            for u in self.usage_of(f) {
                self.visit_constraint(u.constraint);
            }
        }
        for &f in arrived {
            self.add_to_region(f);
        }
        while let Some(c) = self.stack.pop() {
            for i in 0..self.on[c as usize].len() {
                let f = self.on[c as usize][i].flow;
                if !self.in_region[f as usize] && self.rate[f as usize] >= threshold {
                    self.add_to_region(f);
                }
            }
        }

        // Capacity left for the region once fixed flows take their (unchanged) rates.
        for &c in &self.constraints {
            let mut residual = self.capacity[c as usize];
            for s in &self.on[c as usize] {
                if !self.in_region[s.flow as usize] {
                    let coef = self.usage[self.usage_offsets[s.flow as usize] + s.entry as usize]
                        .coefficient;
                    residual -= coef * self.rate[s.flow as usize];
                }
            }
            self.filling.register(c, residual);
        }
        let view = View {
            usage_offsets: self.usage_offsets,
            usage: self.usage,
            on: &self.on,
        };
        let result = self
            .filling
            .solve(&view, &self.region, self.rate_cap, &mut self.solved);
        for &f in &self.region {
            self.in_region[f as usize] = false;
        }
        for &c in &self.constraints {
            self.visited[c as usize] = false;
        }
        result
    }

    fn visit_constraint(&mut self, c: u32) {
        if !self.visited[c as usize] {
            self.visited[c as usize] = true;
            self.constraints.push(c);
            self.stack.push(c);
        }
    }

    fn add_to_region(&mut self, f: u32) {
        self.in_region[f as usize] = true;
        self.region.push(f);
        for u in self.usage_of(f) {
            self.visit_constraint(u.constraint);
        }
    }

    /// The lowest level at which the filling can differ from the current one (module docs).
    /// Must run after `left` flows are detached and before `arrived` flows are attached.
    fn threshold(&mut self, left: &[u32], arrived: &[u32]) -> f64 {
        let mut t = f64::INFINITY;
        for &f in left {
            t = t.min(self.rate[f as usize]);
        }
        if arrived.is_empty() {
            return t;
        }
        let mut touched: Vec<u32> = Vec::new();
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
        t
    }

    /// Level x at which constraint `c` saturates when flows with coefficient sum `arriving`
    /// rise to x while each flow already on it holds min(its rate, x).
    fn saturation_level(&mut self, c: u32, arriving: f64) -> f64 {
        let ci = c as usize;
        self.scratch.clear();
        for s in &self.on[ci] {
            let coef = self.usage[self.usage_offsets[s.flow as usize] + s.entry as usize].coefficient;
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
