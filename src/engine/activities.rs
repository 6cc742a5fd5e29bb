//! The input of a run: a DAG of activities. A flow moves bytes under a usage list of
//! constraints after waiting its latency; a delay just takes time. Both wait for their
//! dependencies and their earliest start.

use crate::error::{check_non_negative, shown, Error, Result};
use crate::ids::ActivityId;
use crate::solver::Usage;

/// Share weights are held to this range: wide enough for any traffic-class ratio a switch
/// offers (percent shares, strict-priority-like 1000:1), narrow enough that weighted
/// coefficients keep the solver's relative precision.
pub const MIN_WEIGHT: f64 = 1e-6;
pub const MAX_WEIGHT: f64 = 1e6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Flow,
    Delay,
}

/// Activities in structure-of-arrays form, ids dense in creation order.
#[derive(Debug, Clone)]
pub struct Activities {
    pub(crate) kind: Vec<Kind>,
    pub(crate) start_s: Vec<f64>,
    /// A flow's latency or a delay's duration: time waited after ready, using no bandwidth.
    pub(crate) wait_s: Vec<f64>,
    pub(crate) bytes: Vec<f64>,
    pub(crate) rate_cap_Bps: Vec<f64>,
    /// Each activity's share weight (weighted max-min: rates rise in proportion to it), or
    /// empty while every weight is 1, as in most runs.
    pub(crate) weight: Vec<f64>,
    pub(crate) usage_offsets: Vec<usize>,
    pub(crate) usage: Vec<Usage>,
    /// Dependency edges `(activity, after)`: `activity` waits for `after` to finish.
    pub(crate) deps: Vec<(u32, u32)>,
    /// The bytes the flows carry over their constraints: the sum of `carried_by`, held to
    /// `units::MAX_CARRIED_BYTES`.
    pub(crate) carried_bytes: f64,
    /// Activities there were when a dependency was last added by `add_dependency` (0 if
    /// never): those added since have theirs at the tail of `deps`, in the order added.
    pub(crate) dependency_added_at: usize,
}

impl Default for Activities {
    /// No activities (`usage_offsets` starts at 0, as every flow's span needs).
    fn default() -> Self {
        Activities {
            kind: Vec::new(),
            start_s: Vec::new(),
            wait_s: Vec::new(),
            bytes: Vec::new(),
            rate_cap_Bps: Vec::new(),
            weight: Vec::new(),
            usage_offsets: vec![0],
            usage: Vec::new(),
            deps: Vec::new(),
            carried_bytes: 0.0,
            dependency_added_at: 0,
        }
    }
}

impl Activities {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.kind.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kind.is_empty()
    }

    pub fn kind(&self, a: ActivityId) -> Kind {
        self.kind[a.index()]
    }

    pub fn bytes(&self, a: ActivityId) -> f64 {
        self.bytes[a.index()]
    }

    pub fn start_s(&self, a: ActivityId) -> f64 {
        self.start_s[a.index()]
    }

    /// Latency of a flow, duration of a delay.
    pub fn wait_s(&self, a: ActivityId) -> f64 {
        self.wait_s[a.index()]
    }

    /// A flow's rate cap (`f64::INFINITY` for none, and for a delay).
    pub fn rate_cap_Bps(&self, a: ActivityId) -> f64 {
        self.rate_cap_Bps[a.index()]
    }

    pub fn usage(&self, a: ActivityId) -> &[Usage] {
        let i = a.index();
        &self.usage[self.usage_offsets[i]..self.usage_offsets[i + 1]]
    }

    pub fn n_usage_entries(&self) -> usize {
        self.usage.len()
    }

    /// The bytes the flows carry over their constraints: each flow's bytes times its usage
    /// coefficients (at least once), added up; never above `units::MAX_CARRIED_BYTES`.
    pub fn carried_bytes(&self) -> f64 {
        self.carried_bytes
    }

    /// Dependency edges `(activity, after)`: `activity` waits for `after` to finish.
    pub fn dependencies(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.deps.iter().copied()
    }

    /// Adds a flow of `bytes` over `usage` (entries on one constraint are merged by adding
    /// their coefficients). `rate_cap_Bps` is `f64::INFINITY` for none.
    pub fn add_flow(
        &mut self,
        bytes: f64,
        usage: &[Usage],
        latency_s: f64,
        start_s: f64,
        rate_cap_Bps: f64,
        after: &[ActivityId],
    ) -> Result<ActivityId> {
        check_non_negative("size_bytes", bytes)?;
        check_non_negative("latency_s", latency_s)?;
        check_non_negative("start_s", start_s)?;
        if !(rate_cap_Bps > 0.0) {
            return Err(Error::InvalidArgument(format!(
                "max_rate_Bps must be > 0 (or None), got {}",
                shown(rate_cap_Bps)
            )));
        }
        check_usage(usage, bytes, rate_cap_Bps)?;
        self.check_after(after)?;
        let carried = carried_by(bytes, usage);
        let total = self.carried_bytes + carried;
        if !(total <= crate::units::MAX_CARRIED_BYTES) {
            return Err(too_much_carried(bytes, usage, total));
        }
        let begin = self.usage.len();
        push_merged(&mut self.usage, usage);
        // Finite coefficients on one constraint can add up past the largest double, as
        // `max_min_rates` refuses them too (the engine took a coefficient of inf).
        if let Some(u) = self.usage[begin..]
            .iter()
            .find(|u| !u.coefficient.is_finite())
        {
            let c = u.constraint;
            self.usage.truncate(begin);
            return Err(Error::InvalidArgument(format!(
                "the usage coefficients of the flow on constraint {c} add up to inf: beyond \
                 what double precision holds"
            )));
        }
        self.carried_bytes = total;
        let id = self.push(Kind::Flow, start_s, latency_s, bytes, rate_cap_Bps, after);
        self.usage_offsets.push(self.usage.len());
        Ok(id)
    }

    /// Adds a delay (compute time) of `duration_s`.
    pub fn add_delay(
        &mut self,
        duration_s: f64,
        start_s: f64,
        after: &[ActivityId],
    ) -> Result<ActivityId> {
        check_non_negative("duration_s", duration_s)?;
        check_non_negative("start_s", start_s)?;
        self.check_after(after)?;
        let id = self.push(Kind::Delay, start_s, duration_s, 0.0, f64::INFINITY, after);
        self.usage_offsets.push(self.usage.len());
        Ok(id)
    }

    /// A copy whose activity `a` uses the list `rewrite(a, usage, out)` leaves in `out`
    /// (merged as `add_flow` merges; entries must be valid as there).
    pub(crate) fn with_usage(
        &self,
        mut rewrite: impl FnMut(u32, &[Usage], &mut Vec<Usage>),
    ) -> Activities {
        let mut usage = Vec::with_capacity(self.usage.len());
        let mut usage_offsets = Vec::with_capacity(self.usage_offsets.len());
        usage_offsets.push(0);
        let mut row = Vec::new();
        for a in 0..self.len() {
            row.clear();
            rewrite(a as u32, self.usage(ActivityId(a as u32)), &mut row);
            push_merged(&mut usage, &row);
            usage_offsets.push(usage.len());
        }
        Activities {
            kind: self.kind.clone(),
            start_s: self.start_s.clone(),
            wait_s: self.wait_s.clone(),
            bytes: self.bytes.clone(),
            rate_cap_Bps: self.rate_cap_Bps.clone(),
            weight: self.weight.clone(),
            usage_offsets,
            usage,
            deps: self.deps.clone(),
            carried_bytes: self.carried_bytes,
            dependency_added_at: self.dependency_added_at,
        }
    }

    /// Gives the flows among activities `first..end` the share weight `weight` (delays have
    /// none): where flows share a bottleneck, each gets bandwidth in proportion to its weight
    /// (weighted max-min fairness, as a switch's weighted traffic classes share a port). 1
    /// for every flow by default. Nothing is changed if anything is refused.
    pub fn set_weights(&mut self, first: usize, end: usize, weight: f64) -> Result<()> {
        if first > end || end > self.len() {
            return Err(Error::InvalidArgument(format!(
                "activities {first}..{end}: expected a range within 0..{}",
                self.len()
            )));
        }
        if !((MIN_WEIGHT..=MAX_WEIGHT).contains(&weight)) {
            return Err(Error::InvalidArgument(format!(
                "weight must be within [{MIN_WEIGHT:e}, {MAX_WEIGHT:e}], got {}",
                shown(weight)
            )));
        }
        if self.weight.is_empty() {
            if weight == 1.0 {
                return Ok(());
            }
            self.weight = vec![1.0; self.len()];
        }
        for a in first..end {
            if self.kind[a] == Kind::Flow {
                self.weight[a] = weight;
            }
        }
        Ok(())
    }

    /// The share weight of activity `a` (1 unless set).
    #[inline]
    pub fn weight(&self, a: ActivityId) -> f64 {
        self.weight.get(a.index()).copied().unwrap_or(1.0)
    }

    /// Makes `activity` wait for `after`. Cycles are allowed here and refused by the run.
    pub fn add_dependency(&mut self, activity: ActivityId, after: ActivityId) -> Result<()> {
        self.check_after(&[activity, after])?;
        if activity == after {
            return Err(Error::DependencyCycle(format!(
                "activity {} cannot wait for itself",
                activity.0
            )));
        }
        self.deps.push((activity.0, after.0));
        self.dependency_added_at = self.len();
        Ok(())
    }

    /// Forgets activities `first..`, e.g. to undo a batch that failed halfway.
    pub fn truncate(&mut self, first: usize) {
        if first >= self.len() {
            return;
        }
        self.kind.truncate(first);
        self.start_s.truncate(first);
        self.wait_s.truncate(first);
        self.bytes.truncate(first);
        self.rate_cap_Bps.truncate(first);
        self.weight.truncate(first);
        self.usage.truncate(self.usage_offsets[first]);
        self.usage_offsets.truncate(first + 1);
        self.deps
            .retain(|&(a, after)| (a as usize) < first && (after as usize) < first);
        self.carried_bytes = (0..first)
            .map(|a| carried_by(self.bytes[a], self.usage(ActivityId(a as u32))))
            .sum();
    }

    fn check_after(&self, after: &[ActivityId]) -> Result<()> {
        for a in after {
            if a.index() >= self.len() {
                return Err(unknown_activity(a.0 as i64, self.len()));
            }
        }
        Ok(())
    }

    fn push(
        &mut self,
        kind: Kind,
        start_s: f64,
        wait_s: f64,
        bytes: f64,
        rate_cap_Bps: f64,
        after: &[ActivityId],
    ) -> ActivityId {
        let id = self.kind.len() as u32;
        self.kind.push(kind);
        self.start_s.push(start_s);
        self.wait_s.push(wait_s);
        self.bytes.push(bytes);
        self.rate_cap_Bps.push(rate_cap_Bps);
        if !self.weight.is_empty() {
            self.weight.push(1.0);
        }
        for a in after {
            self.deps.push((id, a.0));
        }
        ActivityId(id)
    }
}

/// Checks a flow's usage list: coefficients finite and > 0, and a route or a rate cap for a
/// flow with bytes to move.
pub(crate) fn check_usage(usage: &[Usage], bytes: f64, rate_cap_Bps: f64) -> Result<()> {
    for u in usage {
        if !(u.coefficient.is_finite() && u.coefficient > 0.0) {
            return Err(Error::InvalidArgument(format!(
                "usage coefficient on constraint {} must be finite and > 0, got {}",
                u.constraint,
                shown(u.coefficient)
            )));
        }
    }
    if usage.is_empty() && bytes > 0.0 && !rate_cap_Bps.is_finite() {
        return Err(Error::InvalidArgument(
            "a flow with bytes to move needs a route (usage list) or a rate cap".into(),
        ));
    }
    Ok(())
}

/// The bytes a flow of `bytes` carries over `usage`: its bytes times its coefficients, added
/// up (at least once: the summary counts a flow's bytes even where it uses no constraint).
pub(crate) fn carried_by(bytes: f64, usage: &[Usage]) -> f64 {
    if bytes == 0.0 {
        return 0.0; // coefficients adding up to inf carry nothing either
    }
    bytes * usage.iter().map(|u| u.coefficient).sum::<f64>().max(1.0)
}

/// A flow that would bring the bytes carried to `total`, past `units::MAX_CARRIED_BYTES`.
pub(crate) fn too_much_carried(bytes: f64, usage: &[Usage], total: f64) -> Error {
    let k: f64 = usage.iter().map(|u| u.coefficient).sum();
    Error::InvalidArgument(format!(
        "size_bytes {} over usage coefficients adding up to {} would bring the bytes all flows \
         carry over their constraints to {}: more than the {} bytes a link's bytes_carried can \
         count (a margin below the largest double, 1.8e308)",
        shown(bytes),
        shown(k),
        shown(total),
        shown(crate::units::MAX_CARRIED_BYTES)
    ))
}

/// Appends `usage` to `to` sorted by constraint, entries on one constraint merged by adding
/// their coefficients.
pub(crate) fn push_merged(to: &mut Vec<Usage>, usage: &[Usage]) {
    let begin = to.len();
    to.extend_from_slice(usage);
    let row = &mut to[begin..];
    row.sort_unstable_by_key(|u| u.constraint);
    let mut w = 0;
    for r in 0..row.len() {
        if w > 0 && row[w - 1].constraint == row[r].constraint {
            row[w - 1].coefficient += row[r].coefficient;
        } else {
            row[w] = row[r];
            w += 1;
        }
    }
    to.truncate(begin + w);
}

/// No activity `id` among the `n` so far, whose ids run from 0 to n - 1 (a Rust range
/// "0..n" read as Python's or as inclusive named an id that does not exist).
pub(crate) fn unknown_activity(id: i64, n: usize) -> Error {
    match n {
        0 => Error::UnknownActivity(format!(
            "no activity with id {id}: the scenario has no activities yet"
        )),
        n => Error::UnknownActivity(format!(
            "no activity with id {id}: ids so far run from 0 to {}",
            n - 1
        )),
    }
}
