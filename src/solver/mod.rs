//! Weighted max-min fair sharing (docs/design.md section 1), in SimGrid's LMM nouns: constraints
//! with capacities, variables (flows) with usage coefficients and optional rate caps.
//! Nothing here knows about networks.

mod filling;
mod heap;
mod sum;

pub use filling::{Filling, RowFlows, Rows, CAPPED};
pub use heap::IndexedHeap;
pub use sum::CompensatedSum;

use crate::error::{check_capacity, shown, Error, Result};

/// One entry of a flow's usage list: its rate `r` puts `coefficient * r` on `constraint`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    pub constraint: u32,
    pub coefficient: f64,
}

/// Read access to the usage lists of a sharing problem's flows.
pub trait Incidence {
    /// The usage list of flow `f`, one entry per constraint.
    fn usage(&self, f: u32) -> &[Usage];
}

/// A static sharing problem: usage lists in compressed sparse rows.
#[derive(Debug, Clone)]
pub struct Problem {
    capacity: Vec<f64>,
    rate_cap: Vec<f64>,
    flow_offsets: Vec<usize>,
    usage: Vec<Usage>,
    /// Whether any flow uses each constraint.
    used: Vec<bool>,
}

impl Incidence for Problem {
    #[inline]
    fn usage(&self, f: u32) -> &[Usage] {
        let f = f as usize;
        &self.usage[self.flow_offsets[f]..self.flow_offsets[f + 1]]
    }
}

impl Problem {
    /// Builds a problem from usage triples `(flow_index[e], constraint_index[e], coefficient[e])`.
    /// Repeated (flow, constraint) pairs add their coefficients. `rate_cap` holds one cap per
    /// flow (`f64::INFINITY` for none).
    pub fn new(
        capacity: Vec<f64>,
        flow_index: &[u32],
        constraint_index: &[u32],
        coefficient: &[f64],
        n_flows: usize,
        rate_cap: Option<Vec<f64>>,
    ) -> Result<Problem> {
        let n_entries = flow_index.len();
        if constraint_index.len() != n_entries || coefficient.len() != n_entries {
            return Err(Error::InvalidArgument(format!(
                "flow_index, constraint_index and coefficient must have one length, got {}, {} and {}",
                n_entries,
                constraint_index.len(),
                coefficient.len()
            )));
        }
        if n_flows > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "n_flows must be at most {} (flows are numbered in 32 bits), got {n_flows}",
                u32::MAX
            )));
        }
        let n_constraints = capacity.len();
        // Usage rows (twice while merging), per-flow state and per-constraint workspace;
        // checked before anything sized by n_flows is allocated.
        crate::memory::check_fits(
            &format!("a max-min problem of {n_flows} flows and {n_entries} usage entries"),
            40.0 * n_entries as f64 + 64.0 * n_flows as f64 + 80.0 * n_constraints as f64,
        )?;
        for (c, &cap) in capacity.iter().enumerate() {
            check_capacity(format_args!("capacity of constraint {c}"), cap)?;
        }
        let rate_cap = match rate_cap {
            Some(v) => {
                if v.len() != n_flows {
                    return Err(Error::InvalidArgument(format!(
                        "rate_cap must have n_flows = {n_flows} entries, got {}",
                        v.len()
                    )));
                }
                for (f, &cap) in v.iter().enumerate() {
                    if !(cap > 0.0) {
                        return Err(Error::InvalidArgument(format!(
                            "rate cap of flow {f} must be > 0 (inf for none), got {}",
                            shown(cap)
                        )));
                    }
                }
                v
            }
            None => vec![f64::INFINITY; n_flows],
        };
        let mut flow_count = vec![0usize; n_flows + 1];
        for e in 0..n_entries {
            let (f, c, k) = (flow_index[e], constraint_index[e], coefficient[e]);
            if f as usize >= n_flows {
                return Err(Error::InvalidArgument(format!(
                    "flow_index[{e}] = {f} is out of range for n_flows = {n_flows}"
                )));
            }
            if c as usize >= n_constraints {
                return Err(Error::InvalidArgument(format!(
                    "constraint_index[{e}] = {c} is out of range for {n_constraints} constraints"
                )));
            }
            if !(k.is_finite() && k > 0.0) {
                return Err(Error::InvalidArgument(format!(
                    "coefficient[{e}] must be a finite number > 0, got {}",
                    shown(k)
                )));
            }
            flow_count[f as usize + 1] += 1;
        }
        for f in 0..n_flows {
            flow_count[f + 1] += flow_count[f];
        }
        // Scatter entries into flow rows, then merge repeated constraints within each row.
        let mut fill = flow_count.clone();
        let mut raw = vec![
            Usage {
                constraint: 0,
                coefficient: 0.0
            };
            n_entries
        ];
        for e in 0..n_entries {
            let f = flow_index[e] as usize;
            raw[fill[f]] = Usage {
                constraint: constraint_index[e],
                coefficient: coefficient[e],
            };
            fill[f] += 1;
        }
        let mut flow_offsets = Vec::with_capacity(n_flows + 1);
        let mut usage: Vec<Usage> = Vec::with_capacity(n_entries);
        flow_offsets.push(0);
        for f in 0..n_flows {
            let row = &mut raw[flow_count[f]..flow_count[f + 1]];
            row.sort_unstable_by_key(|u| u.constraint);
            let row_start = usage.len();
            for u in row.iter() {
                let n = usage.len();
                if n > row_start && usage[n - 1].constraint == u.constraint {
                    usage[n - 1].coefficient += u.coefficient;
                    if !usage[n - 1].coefficient.is_finite() {
                        return Err(Error::InvalidArgument(format!(
                            "the coefficients of flow {f} on constraint {} add up to {}: \
                             beyond what double precision holds",
                            u.constraint,
                            shown(usage[n - 1].coefficient)
                        )));
                    }
                } else {
                    usage.push(*u);
                }
            }
            flow_offsets.push(usage.len());
        }
        let mut used = vec![false; n_constraints];
        for u in &usage {
            used[u.constraint as usize] = true;
        }
        Ok(Problem {
            capacity,
            rate_cap,
            flow_offsets,
            usage,
            used,
        })
    }

    pub fn n_flows(&self) -> usize {
        self.flow_offsets.len() - 1
    }

    pub fn n_constraints(&self) -> usize {
        self.capacity.len()
    }

    /// The max-min fair rates, one per flow.
    pub fn solve(&self) -> Result<Vec<f64>> {
        let n_flows = self.n_flows();
        let mut filling = Filling::new(self.n_constraints(), n_flows);
        for (c, &cap) in self.capacity.iter().enumerate() {
            if self.used[c] {
                filling.register(c as u32, cap);
            }
        }
        let subset: Vec<u32> = (0..n_flows as u32).collect();
        let mut rates = vec![0.0; n_flows];
        filling.solve(self, &subset, &self.rate_cap, &mut rates)?;
        // With finite coefficients > 0 a flow's rate is 0 only on a constraint of capacity
        // 0, and finite unless it uses none (refused above): anything else is a capacity
        // over a coefficient beyond double range, as the engine refuses it. A subnormal
        // rate has lost precision on the way (its load can come out above capacity).
        for (f, &r) in rates.iter().enumerate() {
            // Its usage list is read only for the rare rate this small.
            let on_zero = || {
                self.usage(f as u32)
                    .iter()
                    .any(|u| self.capacity[u.constraint as usize] == 0.0)
            };
            if !r.is_finite() || (r < f64::MIN_POSITIVE && !on_zero()) {
                return Err(crate::error::rate_out_of_range(f as u32, r, ""));
            }
        }
        Ok(rates)
    }
}

/// Convenience: the max-min fair rates of a problem given as usage triples.
pub fn max_min_rates(
    capacity: Vec<f64>,
    flow_index: &[u32],
    constraint_index: &[u32],
    coefficient: &[f64],
    n_flows: usize,
    rate_cap: Option<Vec<f64>>,
) -> Result<Vec<f64>> {
    Problem::new(
        capacity,
        flow_index,
        constraint_index,
        coefficient,
        n_flows,
        rate_cap,
    )?
    .solve()
}
