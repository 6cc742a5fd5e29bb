//! Progressive filling (water-filling) over a subset of flows, the one max-min mechanism of
//! fabricsim. The standalone solver runs it over every flow; the engine runs it over the flows
//! an event can affect, with the load of the others subtracted from the capacities.

use super::heap::IndexedHeap;
use super::sum::CompensatedSum;
use super::{Incidence, Usage};
use crate::error::{Error, Result};

/// `Filling::bottleneck` of a flow that stopped at its own rate cap.
pub const CAPPED: u32 = u32::MAX;
const NONE: u32 = u32::MAX;

/// A registered constraint's part in the filling.
#[derive(Debug, Clone, Copy, Default)]
struct ConstraintSums {
    /// Capacity left for the subset's flows.
    residual: CompensatedSum,
    /// Sum of the unfrozen flows' coefficients.
    coef_sum: CompensatedSum,
    /// Number of unfrozen flows: exact, unlike the float sum.
    n_unfrozen: u32,
}

impl ConstraintSums {
    /// The level at which the unfrozen flows fill what is left.
    #[inline]
    fn level(&self) -> f64 {
        self.residual.value() / self.coef_sum.value()
    }
}

/// The flows on each constraint, as the filling walks them when one saturates.
pub trait RowFlows {
    /// Number of flows on constraint `c`.
    fn row_len(&self, c: u32) -> usize;
    /// The `i`-th flow on constraint `c`.
    fn row_flow(&self, c: u32, i: usize) -> u32;
}

/// The flows on each constraint and their coefficient sums, where the caller keeps them
/// already: a solve over every flow on its registered constraints then builds no rows of
/// its own (`Filling::solve_rows`).
pub trait Rows: RowFlows {
    /// Sum of the coefficients of the flows on constraint `c`.
    fn row_coef_sum(&self, c: u32) -> f64;
}

/// The rows `setup` builds: the subset's flows grouped by registered constraint, in
/// compressed rows over `local`.
struct OwnRows<'a> {
    local: &'a [u32],
    offsets: &'a [usize],
    flows: &'a [u32],
}

impl RowFlows for OwnRows<'_> {
    #[inline]
    fn row_len(&self, c: u32) -> usize {
        let row = self.local[c as usize] as usize;
        self.offsets[row + 1] - self.offsets[row]
    }

    #[inline]
    fn row_flow(&self, c: u32, i: usize) -> u32 {
        self.flows[self.offsets[self.local[c as usize] as usize] + i]
    }
}

/// Reusable workspace; `solve` costs O(E log C) over the subset's E usage entries and C
/// constraints, with no allocation once warmed up.
#[derive(Debug, Default)]
pub struct Filling {
    /// Per constraint, what freezing a flow updates (valid while registered), together: one
    /// cache line per constraint touched.
    sums: Vec<ConstraintSums>,
    /// Position of each registered constraint in `registered` (valid while registered).
    local: Vec<u32>,
    is_registered: Vec<bool>,
    registered: Vec<u32>,
    /// The subset's flows grouped by registered constraint (compressed rows over `local`).
    row_offsets: Vec<usize>,
    row_flows: Vec<u32>,
    /// `unfrozen[f]` is true while flow f is in the subset and not yet frozen.
    unfrozen: Vec<bool>,
    /// Per flow, while `fill_heap` runs: its lowest constraint that no other flow uses
    /// (`NONE` between runs).
    sole: Vec<u32>,
    heap: IndexedHeap,
    capped: Vec<(f64, u32)>,
    /// The constraint that froze each flow of the last solve, or `CAPPED`.
    bottleneck: Vec<u32>,
}

impl Filling {
    pub fn new(n_constraints: usize, n_flows: usize) -> Self {
        let mut f = Filling::default();
        f.ensure(n_constraints, n_flows);
        f
    }

    /// Grows the workspace to at least these sizes.
    pub fn ensure(&mut self, n_constraints: usize, n_flows: usize) {
        if self.sums.len() < n_constraints {
            self.sums.resize(n_constraints, ConstraintSums::default());
            self.local.resize(n_constraints, 0);
            self.is_registered.resize(n_constraints, false);
            self.heap.ensure_ids(n_constraints);
        }
        if self.unfrozen.len() < n_flows {
            self.unfrozen.resize(n_flows, false);
            self.sole.resize(n_flows, NONE);
            self.bottleneck.resize(n_flows, CAPPED);
        }
    }

    /// The constraint at which flow `f` was frozen by the last solve (`CAPPED` for its cap):
    /// a saturated constraint on which no flow of the subset has a higher rate.
    pub fn bottleneck(&self, f: u32) -> u32 {
        self.bottleneck[f as usize]
    }

    /// Declares constraint `c` with `residual` capacity left for the subset. Every constraint
    /// used by a flow of the subset must be registered before `solve`.
    pub fn register(&mut self, c: u32, residual: f64) {
        let ci = c as usize;
        debug_assert!(!self.is_registered[ci]);
        self.is_registered[ci] = true;
        self.local[ci] = self.registered.len() as u32;
        self.registered.push(c);
        self.sums[ci] = ConstraintSums {
            residual: CompensatedSum::new(residual),
            ..ConstraintSums::default()
        };
    }

    /// Max-min fair rates of `subset` (written to `rates[f]`), every flow starting unfrozen.
    /// `rate_cap[f]` is a per-flow cap (`f64::INFINITY` for none).
    pub fn solve<I: Incidence>(
        &mut self,
        inc: &I,
        subset: &[u32],
        rate_cap: &[f64],
        rates: &mut [f64],
    ) -> Result<()> {
        let result = self.setup(inc, subset, rate_cap).and_then(|_| {
            let (local, offsets, flows) = (
                std::mem::take(&mut self.local),
                std::mem::take(&mut self.row_offsets),
                std::mem::take(&mut self.row_flows),
            );
            let rows = OwnRows {
                local: &local,
                offsets: &offsets,
                flows: &flows,
            };
            self.fill_heap(&rows);
            let result = self.fill(inc, &rows, rates);
            (self.local, self.row_offsets, self.row_flows) = (local, offsets, flows);
            result
        });
        self.clean(subset);
        result
    }

    /// As `solve`, where `subset` is every flow on the registered constraints and `rows`
    /// lists them on each (a flow on every one of its constraints): the rows and their sums
    /// are read from there, not built.
    pub fn solve_rows<I: Incidence, R: Rows>(
        &mut self,
        inc: &I,
        rows: &R,
        subset: &[u32],
        rate_cap: &[f64],
        rates: &mut [f64],
    ) -> Result<()> {
        let result = self.setup_caps(inc, subset, rate_cap).and_then(|_| {
            for i in 0..self.registered.len() {
                let c = self.registered[i];
                let sums = &mut self.sums[c as usize];
                sums.n_unfrozen = rows.row_len(c) as u32;
                sums.coef_sum = CompensatedSum::new(rows.row_coef_sum(c));
            }
            self.fill_heap(rows);
            self.fill(inc, rows, rates)
        });
        self.clean(subset);
        result
    }

    /// Leaves the workspace clean whatever happened.
    fn clean(&mut self, subset: &[u32]) {
        self.heap.clear();
        for &f in subset {
            self.unfrozen[f as usize] = false;
        }
        for &c in &self.registered {
            self.is_registered[c as usize] = false;
        }
        self.registered.clear();
    }

    /// Marks the subset's flows unfrozen and lists their caps in order.
    fn setup_caps<I: Incidence>(
        &mut self,
        inc: &I,
        subset: &[u32],
        rate_cap: &[f64],
    ) -> Result<()> {
        self.capped.clear();
        for &f in subset {
            let cap = rate_cap[f as usize];
            if !cap.is_finite() && inc.usage(f).is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "flow {f} uses no constraint and has no rate cap, so its rate is unbounded"
                )));
            }
            self.unfrozen[f as usize] = true;
            if cap.is_finite() {
                self.capped.push((cap, f));
            }
        }
        self.capped
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        Ok(())
    }

    /// The initial keys: every registered constraint with flows, at its saturation level,
    /// but of the constraints that only one flow uses, only that flow's lowest (by level,
    /// then id). Such a constraint's level stays its capacity over the coefficient while
    /// the flow rises, so the lowest is taken before the others, and freezes the flow if
    /// nothing froze it before: the others could only reach the top with no flow left to
    /// freeze. Left out, they cost no removal each (a ring's flow has one for every link that
    /// only it crosses), and the filling is the same.
    fn fill_heap<R: RowFlows>(&mut self, rows: &R) {
        let (sums, sole) = (&self.sums, &mut self.sole);
        let level = |c: u32| sums[c as usize].level();
        for &c in &self.registered {
            if sums[c as usize].n_unfrozen == 1 {
                let f = rows.row_flow(c, 0) as usize;
                let best = sole[f];
                if best == NONE || IndexedHeap::less((level(c), c), (level(best), best)) {
                    sole[f] = c;
                }
            }
        }
        self.heap.extend(self.registered.iter().filter_map(|&c| {
            let keep = match sums[c as usize].n_unfrozen {
                0 => false,
                1 => sole[rows.row_flow(c, 0) as usize] == c,
                _ => true,
            };
            keep.then(|| (c, level(c)))
        }));
        for &c in &self.registered {
            if sums[c as usize].n_unfrozen == 1 {
                sole[rows.row_flow(c, 0) as usize] = NONE;
            }
        }
    }

    /// Coefficient sums, the per-constraint rows of the subset, caps in order.
    fn setup<I: Incidence>(&mut self, inc: &I, subset: &[u32], rate_cap: &[f64]) -> Result<()> {
        self.setup_caps(inc, subset, rate_cap)?;
        for &f in subset {
            for u in inc.usage(f) {
                let ci = u.constraint as usize;
                if !self.is_registered[ci] {
                    return Err(Error::Internal(format!(
                        "constraint {} of flow {f} was not registered",
                        u.constraint
                    )));
                }
                self.sums[ci].coef_sum.add(u.coefficient);
                self.sums[ci].n_unfrozen += 1;
            }
        }
        // Counting sort of the subset's flows into rows, one per registered constraint.
        let n_rows = self.registered.len();
        self.row_offsets.clear();
        self.row_offsets.resize(n_rows + 1, 0);
        for (i, &c) in self.registered.iter().enumerate() {
            self.row_offsets[i + 1] =
                self.row_offsets[i] + self.sums[c as usize].n_unfrozen as usize;
        }
        self.row_flows.clear();
        self.row_flows.resize(self.row_offsets[n_rows], 0);
        for &f in subset {
            for u in inc.usage(f) {
                let row = self.local[u.constraint as usize] as usize;
                // row_offsets[row] serves as the fill cursor, restored below.
                self.row_flows[self.row_offsets[row]] = f;
                self.row_offsets[row] += 1;
            }
        }
        for i in (0..n_rows).rev() {
            self.row_offsets[i + 1] = self.row_offsets[i];
        }
        self.row_offsets[0] = 0;
        Ok(())
    }

    fn fill<I: Incidence, R: RowFlows>(
        &mut self,
        inc: &I,
        rows: &R,
        rates: &mut [f64],
    ) -> Result<()> {
        let mut level = 0.0f64;
        let mut next_capped = 0usize;
        loop {
            while next_capped < self.capped.len()
                && !self.unfrozen[self.capped[next_capped].1 as usize]
            {
                next_capped += 1;
            }
            let cap = self.capped.get(next_capped).copied();
            // Heap keys are lazy: freezing a flow only raises its constraints' saturation
            // levels, so a stored key is a lower bound, refreshed when it reaches the top.
            let top = loop {
                let Some((stored, c)) = self.heap.peek() else {
                    break None;
                };
                let ci = c as usize;
                if self.sums[ci].n_unfrozen == 0 {
                    self.heap.remove(c);
                    continue;
                }
                let key = self.sums[ci].level();
                if key > stored {
                    self.heap.set(c, key);
                    continue;
                }
                break Some((key, c));
            };
            match (top, cap) {
                (None, None) => return Ok(()),
                (top, Some((cap_rate, f))) if top.is_none_or(|(key, _)| cap_rate <= key) => {
                    level = level.max(cap_rate);
                    self.freeze(inc, f, cap_rate, CAPPED, rates);
                    next_capped += 1;
                }
                (Some((key, c)), _) => {
                    // Rounding can put a key a hair below the level already reached.
                    level = level.max(key);
                    self.heap.remove(c);
                    let mut frozen_any = false;
                    for i in 0..rows.row_len(c) {
                        let f = rows.row_flow(c, i);
                        if self.unfrozen[f as usize] {
                            frozen_any = true;
                            self.freeze(inc, f, level, c, rates);
                        }
                    }
                    if !frozen_any {
                        return Err(Error::Internal(format!(
                            "constraint {c} saturated with no unfrozen flow"
                        )));
                    }
                }
                (None, Some(_)) => unreachable!("handled by the cap arm"),
            }
        }
    }

    /// Freezes `f` at `rate`, taking its share off its constraints.
    fn freeze<I: Incidence>(&mut self, inc: &I, f: u32, rate: f64, by: u32, rates: &mut [f64]) {
        self.unfrozen[f as usize] = false;
        self.bottleneck[f as usize] = by;
        rates[f as usize] = rate;
        for &Usage {
            constraint,
            coefficient,
        } in inc.usage(f)
        {
            let ci = constraint as usize;
            let sums = &mut self.sums[ci];
            sums.residual.add_product(-coefficient, rate);
            sums.coef_sum.add(-coefficient);
            sums.n_unfrozen -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::solver::Problem;

    /// Rows kept outside the filling, in the reverse of the order `setup` builds them.
    struct KeptRows {
        flows: Vec<Vec<u32>>,
        coef_sums: Vec<f64>,
    }

    impl RowFlows for KeptRows {
        fn row_len(&self, c: u32) -> usize {
            self.flows[c as usize].len()
        }

        fn row_flow(&self, c: u32, i: usize) -> u32 {
            self.flows[c as usize][i]
        }
    }

    impl Rows for KeptRows {
        fn row_coef_sum(&self, c: u32) -> f64 {
            self.coef_sums[c as usize]
        }
    }

    /// A random problem: flows on constraints 0..n_c (each on at least one), coefficients
    /// of 0.5-3, capacities of 1-`max_capacity`, and a cap on about one flow in four.
    struct Random {
        capacity: Vec<f64>,
        fi: Vec<u32>,
        ci: Vec<u32>,
        k: Vec<f64>,
        caps: Vec<f64>,
    }

    impl Random {
        fn new(rng: &mut Rng, n_c: usize, n_f: usize, max_capacity: u64) -> Self {
            let (mut fi, mut ci, mut k) = (Vec::new(), Vec::new(), Vec::new());
            for f in 0..n_f as u32 {
                for c in 0..n_c as u32 {
                    if rng.below(3) == 0 || c == f % n_c as u32 {
                        fi.push(f);
                        ci.push(c);
                        k.push([0.5, 1.0, 1.0, 1.0, 3.0][rng.below(5) as usize]);
                    }
                }
            }
            let capacity = (0..n_c)
                .map(|_| 1.0 + rng.below(max_capacity) as f64)
                .collect();
            let caps = (0..n_f)
                .map(|_| match rng.below(4) {
                    0 => 0.2 + rng.next_f64(),
                    _ => f64::INFINITY,
                })
                .collect();
            Random {
                capacity,
                fi,
                ci,
                k,
                caps,
            }
        }

        /// Adds a constraint of `capacity` that flow `f` alone uses, with `coefficient`.
        fn add_own(&mut self, f: u32, coefficient: f64, capacity: f64) -> u32 {
            let c = self.capacity.len() as u32;
            self.fi.push(f);
            self.ci.push(c);
            self.k.push(coefficient);
            self.capacity.push(capacity);
            c
        }

        /// Rates and bottlenecks of a solve of every flow, by the filling's own rows or by
        /// rows kept outside it (`solve_rows`), built in the reverse of the order `setup`
        /// builds them.
        fn solve(&self, kept: bool) -> (Vec<f64>, Vec<u32>) {
            let (n_c, n_f) = (self.capacity.len(), self.caps.len());
            let problem = Problem::new(
                self.capacity.clone(),
                &self.fi,
                &self.ci,
                &self.k,
                n_f,
                Some(self.caps.clone()),
            )
            .unwrap();
            let mut rows = KeptRows {
                flows: vec![Vec::new(); n_c],
                coef_sums: vec![0.0; n_c],
            };
            for f in (0..n_f as u32).rev() {
                for u in problem.usage(f) {
                    rows.flows[u.constraint as usize].push(f);
                    rows.coef_sums[u.constraint as usize] += u.coefficient;
                }
            }
            let mut filling = Filling::new(n_c, n_f);
            for (c, &cap) in self.capacity.iter().enumerate() {
                filling.register(c as u32, cap);
            }
            let subset: Vec<u32> = (0..n_f as u32).collect();
            let mut rates = vec![0.0; n_f];
            if kept {
                filling.solve_rows(&problem, &rows, &subset, &self.caps, &mut rates)
            } else {
                filling.solve(&problem, &subset, &self.caps, &mut rates)
            }
            .unwrap();
            let bottlenecks = subset.iter().map(|&f| filling.bottleneck(f)).collect();
            (rates, bottlenecks)
        }
    }

    /// The filling keeps only a flow's lowest constraint of those no other flow uses: more
    /// of them, at its level or above (a ring's flow alone on link after link), must change
    /// no rate by a bit and leave each bottleneck as it was (the new ones have higher ids),
    /// and one below a flow's rate must become its bottleneck, at that constraint's level.
    #[test]
    fn constraints_of_one_flow_beyond_its_lowest_change_nothing() {
        let mut rng = Rng::new(29);
        for case in 0..300 {
            let n_f = 1 + rng.below(20) as usize;
            let n_c = 1 + rng.below(6) as usize;
            let mut problem = Random::new(&mut rng, n_c, n_f, 8);
            // Some flows have a constraint of their own already.
            for f in 0..n_f as u32 {
                if rng.below(2) == 0 {
                    let coefficient = [0.5, 1.0, 2.0][rng.below(3) as usize];
                    problem.add_own(f, coefficient, 0.5 + rng.below(8) as f64);
                }
            }
            let kept = case % 2 == 0;
            let (rates, by) = problem.solve(kept);
            for f in 0..n_f {
                for _ in 0..1 + rng.below(4) {
                    let coefficient = [1.0, 2.0][rng.below(2) as usize];
                    let above = [1.0, 1.0, 1.5, 4.0][rng.below(4) as usize];
                    problem.add_own(f as u32, coefficient, rates[f] * coefficient * above);
                }
            }
            let (more_rates, more_by) = problem.solve(kept);
            for f in 0..n_f {
                assert_eq!(
                    more_rates[f].to_bits(),
                    rates[f].to_bits(),
                    "case {case} flow {f}"
                );
                assert_eq!(more_by[f], by[f], "case {case} flow {f}");
            }
            let f = rng.below(n_f as u64) as u32;
            let low = rates[f as usize] * 0.25;
            let c = problem.add_own(f, 1.0, low);
            let (low_rates, low_by) = problem.solve(kept);
            assert_eq!(
                (low_rates[f as usize], low_by[f as usize]),
                (low, c),
                "case {case}"
            );
        }
    }

    #[test]
    fn solve_rows_matches_solve_with_rows_of_its_own() {
        let mut rng = Rng::new(17);
        for case in 0..300 {
            let n_c = 1 + rng.below(10) as usize;
            let n_f = 1 + rng.below(30) as usize;
            let problem = Random::new(&mut rng, n_c, n_f, 5);
            let (own, own_by) = problem.solve(false);
            let (kept, kept_by) = problem.solve(true);
            assert_eq!(own_by, kept_by, "case {case}");
            for f in 0..n_f {
                let err = (own[f] - kept[f]).abs() / own[f];
                assert!(
                    err <= 1e-12,
                    "case {case} flow {f}: {} vs {}",
                    own[f],
                    kept[f]
                );
            }
        }
    }
}
