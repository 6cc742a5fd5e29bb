//! Faults during a run: capacities that change at a time, with the usage lists that change
//! with them (routing lives outside the engine, so a reroute arrives as a new usage list).
//!
//! * Disruptions apply in time order (input order among equal times). Those within
//!   `SAME_INSTANT_REL` of an instant apply together, after the instant's finishes and
//!   starts: a flow that finishes then is done, a transfer that starts then starts under the
//!   new capacities and usage list. Where several set one capacity or reroute one flow, the
//!   last counts.
//! * A rerouted flow that has not finished uses its new usage list from then on: a
//!   transferring flow moves with the bytes it has left, a waiting one starts on it. A
//!   transferring flow rerouted to no path (`None`) fails then; a waiting one waits without a
//!   path and fails when its transfer would start, unless a later reroute gives it one.
//! * A flow that transfers, or starts to, on a constraint of capacity 0 fails then (it could
//!   never finish).
//! * A zero-byte flow never transfers, so it fails in neither way: it is done when its
//!   latency is over, down links or no path.
//! * A failed flow has no finish time; every activity that waits for it, directly or not, is
//!   skipped: it never runs and all its times are NaN. The run itself completes; the output
//!   says per activity `Outcome`, `failed_s` and `fail_reason`.

use std::borrow::Cow;

use super::activities::{carried_by, check_usage, push_merged, too_much_carried, Activities, Kind};
use crate::error::{check_capacity, check_non_negative, Error, Result};
use crate::solver::Usage;

/// Capacities that change at one time, with the usage lists that change with them (how they
/// apply: the docs of this module, src/engine/disruption.rs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Disruption {
    pub time_s: f64,
    /// (constraint, new capacity in bytes/s); capacity 0 = down.
    pub capacities: Vec<(u32, f64)>,
    /// Flows whose usage list is replaced from this time on: Some(new usage) = rerouted,
    /// None = no surviving path: the flow fails if it has not finished by then.
    pub reroutes: Vec<(u32, Option<Vec<Usage>>)>,
}

/// One disruption, checked, its new usage lists as spans of `Schedule::usage`.
pub(crate) struct Step {
    pub time_s: f64,
    pub capacities: Vec<(u32, f64)>,
    pub reroutes: Vec<(u32, Option<(usize, usize)>)>,
}

/// The disruptions of a run in time order, and what the engine shares: the activities'
/// usage lists, bytes and rate caps, in share units where flows have weights.
///
/// A flow of weight w moving `bytes` at rate r is shared as one of weight 1 moving bytes / w
/// at rate r / w over coefficients x w (and cap / w): max-min over r / w is weighted max-min
/// over r, its load coefficient x rate and its time bytes / rate are unchanged, so the
/// engine needs no other change.
pub(crate) struct Schedule<'a> {
    /// The activities' usage entries, then (only if there are reroutes) each new usage list,
    /// sorted and merged as `Activities::add_flow` does.
    pub usage: Cow<'a, [Usage]>,
    pub bytes: Cow<'a, [f64]>,
    pub rate_cap_Bps: Cow<'a, [f64]>,
    pub steps: Vec<Step>,
}

impl<'a> Schedule<'a> {
    pub fn new(
        n_constraints: usize,
        acts: &'a Activities,
        disruptions: &[Disruption],
    ) -> Result<Self> {
        for (i, d) in disruptions.iter().enumerate() {
            check(i, d, n_constraints, acts)?;
        }
        // A rerouted flow carries over its old list what it moved before and over its new one
        // what is left: counting all of its bytes on both bounds what links can carry.
        let mut carried = acts.carried_bytes;
        for (f, list) in disruptions.iter().flat_map(|d| &d.reroutes) {
            let (bytes, Some(list)) = (acts.bytes[*f as usize], list) else {
                continue; // to no path: it carries nothing more
            };
            carried += carried_by(bytes, list);
            if !(carried <= crate::units::MAX_CARRIED_BYTES) {
                return Err(match too_much_carried(bytes, list, carried) {
                    Error::InvalidArgument(m) => {
                        Error::InvalidArgument(format!("the reroute of flow {f}: {m}"))
                    }
                    other => other,
                });
            }
        }
        let mut order: Vec<usize> = (0..disruptions.len()).collect();
        order.sort_by(|&a, &b| disruptions[a].time_s.total_cmp(&disruptions[b].time_s));
        let mut usage = Cow::Borrowed(&acts.usage[..]);
        let mut steps = Vec::with_capacity(disruptions.len());
        for i in order {
            let d = &disruptions[i];
            let mut reroutes = Vec::with_capacity(d.reroutes.len());
            for (f, new) in &d.reroutes {
                let span = new.as_ref().map(|list| {
                    let to = usage.to_mut();
                    let begin = to.len();
                    push_merged(to, list);
                    let weight = acts.weight(crate::ids::ActivityId(*f));
                    for u in &mut to[begin..] {
                        u.coefficient *= weight;
                    }
                    (begin, to.len())
                });
                reroutes.push((*f, span));
            }
            steps.push(Step {
                time_s: d.time_s,
                capacities: d.capacities.clone(),
                reroutes,
            });
        }
        let (mut bytes, mut rate_cap_Bps) = (
            Cow::Borrowed(&acts.bytes[..]),
            Cow::Borrowed(&acts.rate_cap_Bps[..]),
        );
        if !acts.weight.is_empty() {
            let (to_usage, to_bytes, to_cap) =
                (usage.to_mut(), bytes.to_mut(), rate_cap_Bps.to_mut());
            for (a, &w) in acts.weight.iter().enumerate().filter(|w| *w.1 != 1.0) {
                for u in &mut to_usage[acts.usage_offsets[a]..acts.usage_offsets[a + 1]] {
                    u.coefficient *= w;
                }
                to_bytes[a] /= w;
                to_cap[a] /= w;
            }
        }
        Ok(Schedule {
            usage,
            bytes,
            rate_cap_Bps,
            steps,
        })
    }
}

fn check(i: usize, d: &Disruption, n_constraints: usize, acts: &Activities) -> Result<()> {
    check_non_negative(format_args!("time_s of disruption {i}"), d.time_s)?;
    let check_constraint = |c: u32| {
        if c as usize >= n_constraints {
            return Err(Error::InvalidArgument(format!(
                "disruption {i} names constraint {c}, but there are only {n_constraints} \
                 constraints"
            )));
        }
        Ok(())
    };
    for &(c, capacity) in &d.capacities {
        check_constraint(c)?;
        check_capacity(
            format_args!("capacity of constraint {c} in disruption {i}"),
            capacity,
        )?;
    }
    for (f, new) in &d.reroutes {
        let fi = *f as usize;
        if fi >= acts.len() {
            return Err(Error::UnknownActivity(format!(
                "disruption {i} reroutes activity {f}, but there are only {} activities",
                acts.len()
            )));
        }
        if acts.kind[fi] != Kind::Flow {
            return Err(Error::InvalidArgument(format!(
                "disruption {i} reroutes activity {f}, which is a delay, not a flow"
            )));
        }
        let Some(list) = new else { continue };
        for u in list {
            check_constraint(u.constraint)?;
        }
        check_usage(list, acts.bytes[fi], acts.rate_cap_Bps[fi]).map_err(|e| match e {
            Error::InvalidArgument(m) => {
                Error::InvalidArgument(format!("disruption {i}, reroute of flow {f}: {m}"))
            }
            other => other,
        })?;
    }
    Ok(())
}
