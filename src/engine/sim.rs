//! The event loop. Time jumps from event to event; between events every rate is constant.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

use super::activities::{Activities, Kind};
use super::disruption::{Disruption, Schedule, Step};
use super::meters::{MeterRun, Meters};
use super::sharing::Sharing;
use crate::error::{shown, Error, Result};
use crate::ids::ActivityId;
use crate::solver::Usage;
use crate::solver::{Filling, IndexedHeap};
use crate::units::SAME_INSTANT_REL;

/// Wall time between progress reports (and Ctrl-C checks).
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Relative change below which a re-solved rate counts as unchanged.
const RATE_REL_TOL: f64 = 1e-13;

/// Bytes of a recorded rate change: in the log (time, flow, rate), and in the table made from
/// the log at the end (the flow widened to i64).
const RATE_ROW_BYTES: usize = 8 + 4 + 8;
const RATE_TABLE_ROW_BYTES: usize = 8 + 8 + 8;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Keep every rate change as (time_s, flow, rate_Bps) rows.
    pub record_rates: bool,
    /// With `record_rates`, also each row's group (`RunOutput::rate_change_group`).
    pub record_groups: bool,
    /// After every instant, check all rates against a from-scratch solve (slow: for tests).
    pub verify: bool,
    /// 0: exact. Above 0, the fast mode: the flows whose projected finish falls within this
    /// fraction of the transfers' age after the current time (and before any other event)
    /// finish with this instant, each reported at its own projected time, and the rates of
    /// the others are re-solved once for all of them (module `sim` docs on `finish_window`).
    pub finish_rel_tol: f64,
    /// Sums of constraint loads whose peak and busy time to report (`RunOutput::meter_*`).
    pub meters: Meters,
}

/// Progress of a run, handed to the caller's callback now and then.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Activities that are over: done, failed or skipped.
    pub n_done: usize,
    pub n_activities: usize,
    pub time_s: f64,
    pub n_instants: u64,
}

/// How an activity's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Outcome {
    Done = 0,
    /// A flow that could not finish (`RunOutput::fail_reason` says why).
    Failed = 1,
    /// Never ran: an activity it waits for, directly or not, failed.
    Skipped = 2,
}

/// `RunOutput::fail_reason` of an activity that did not fail.
pub const NO_FAILURE: u32 = u32::MAX;
/// Fewest transferring flows for which a re-solve may take the plain filling over all of
/// them (`Sim::reshare`): below, the lazy filling's bookkeeping costs little either way.
const FULL_SOLVE_MIN_FLOWS: usize = 1024;

/// `RunOutput::fail_reason` of a flow rerouted to no path before it finished.
pub const NO_PATH: u32 = u32::MAX - 1;

/// Everything a run measures, indexed by activity id or constraint id. Times of an activity
/// that did not get there are NaN.
#[derive(Debug, Clone, Default)]
pub struct RunOutput {
    /// When dependencies were met and the earliest start had come.
    pub ready_s: Vec<f64>,
    /// When a flow's transfer began (after its latency); a delay's ready time.
    pub start_s: Vec<f64>,
    /// When a done activity finished.
    pub finish_s: Vec<f64>,
    pub outcome: Vec<Outcome>,
    /// When a failed flow failed.
    pub failed_s: Vec<f64>,
    /// Why a failed flow failed: `NO_PATH`, or the constraint of capacity 0 it was to
    /// transfer on. `NO_FAILURE` for the other activities.
    pub fail_reason: Vec<u32>,
    /// Time each constraint carried any load.
    pub busy_s: Vec<f64>,
    /// Highest load seen on each constraint, bytes per second.
    pub peak_load_Bps: Vec<f64>,
    /// Bytes each constraint carried (usage coefficient times bytes moved on it, summed).
    pub carried_bytes: Vec<f64>,
    /// A flow's rate from each of its rows to the next, and 0 after it finished or failed.
    pub rate_change_time_s: Vec<f64>,
    pub rate_change_flow: Vec<u32>,
    pub rate_change_Bps: Vec<f64>,
    /// With `RunOptions::record_groups`, the bottleneck constraint of each row's flow then
    /// (`u32::MAX` for a flow at its rate cap): the flows of one bottleneck move as one.
    pub rate_change_group: Vec<u32>,
    /// Peak and busy time of each of `RunOptions::meters`.
    pub meter_peak_Bps: Vec<f64>,
    pub meter_busy_s: Vec<f64>,
    /// When the last activity finished or failed: the span the links' statistics cover.
    pub makespan_s: f64,
    /// Distinct instants at which something happened.
    pub n_instants: u64,
    /// Max-min re-solves run (one per instant where rates can change).
    pub n_solves: u64,
    /// Of those, re-solves by the plain filling over every transferring flow (`reshare`).
    pub n_full_solves: u64,
    /// Flows re-solved (woken by the lazy filling), summed over all re-solves: the work done.
    pub n_flows_resolved: u64,
    /// Rate changes applied, summed over all instants.
    pub n_rate_changes: u64,
    /// Flows whose bottleneck (the constraint whose saturation sets its rate, or its cap)
    /// changed while it transferred, summed over all instants; arrivals and departures
    /// not counted. The per-flow work of an engine that moves the flows of one bottleneck
    /// as one group (docs/engine.md).
    pub n_bottleneck_moves: u64,
    /// Groups whose rate changed, summed over all instants: per instant, the distinct
    /// bottlenecks of the flows whose rate changed, each flow at its cap a group of its own.
    /// Such an engine's per-group work, where this one has `n_rate_changes`.
    pub n_group_share_changes: u64,
    /// Constraints the lazy re-solve took at their saturation level as it counts it (each a
    /// look at the dormant flows faster than that), summed over all re-solves: most are taken
    /// again higher, where those flows still rise, the rest freeze their flows.
    pub n_saturations: u64,
    /// Times a wake or a freeze moved a constraint's floor along its tangent instead of
    /// sending it back to be taken again (src/engine/sharing.rs).
    pub n_floor_moves: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    /// A flow's latency has passed: its transfer begins.
    TransferStart,
    /// A delay's duration has passed.
    DelayEnd,
    /// A disruption comes (id: its step in the schedule).
    Disruption,
}

/// Heap entry ordered by time, then kind, then id, so ties resolve the same way every run.
#[derive(Debug, Clone, Copy)]
struct Timed {
    time_s: f64,
    kind: EventKind,
    id: u32,
}

impl PartialEq for Timed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    fn cmp(&self, other: &Self) -> Ordering {
        self.time_s
            .total_cmp(&other.time_s)
            .then(self.kind.cmp(&other.kind))
            .then(self.id.cmp(&other.id))
    }
}

/// Events in time order. Most are known before the run (the activities ready at the
/// start, the disruptions): those are sorted once and taken from the end of a vector,
/// which is cheaper than popping a large binary heap. Events made during the run go through
/// the heap, unless one instant makes very many (every flow of a collective becoming ready
/// at once): those are sorted and merged into the vector in one pass.
#[derive(Default)]
struct Events {
    /// Sorted, latest first.
    sorted: Vec<Timed>,
    heap: BinaryHeap<Reverse<Timed>>,
    /// Pushed since the last peek or pop.
    fresh: Vec<Timed>,
}

/// Fewest fresh events worth a sort and merge instead of heap pushes.
const BULK_EVENTS: usize = 4096;

impl Events {
    fn push(&mut self, e: Timed) {
        self.fresh.push(e);
    }

    /// Files the fresh events: into the sorted vector when they are many (at least half as
    /// many as it holds, so merging stays linear overall), else into the heap.
    fn absorb(&mut self) {
        if self.fresh.len() >= BULK_EVENTS && 2 * self.fresh.len() >= self.sorted.len() {
            self.fresh.sort_unstable_by(|a, b| b.cmp(a));
            if self.sorted.is_empty() {
                std::mem::swap(&mut self.sorted, &mut self.fresh);
                return;
            }
            let (old, new) = (
                std::mem::take(&mut self.sorted),
                std::mem::take(&mut self.fresh),
            );
            let mut merged = Vec::with_capacity(old.len() + new.len());
            let (mut a, mut b) = (old.into_iter().peekable(), new.into_iter().peekable());
            while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
                merged.push(if x >= y { a.next() } else { b.next() }.unwrap());
            }
            merged.extend(a);
            merged.extend(b);
            self.sorted = merged;
        } else {
            self.heap.extend(self.fresh.drain(..).map(Reverse));
        }
    }

    fn peek(&mut self) -> Option<Timed> {
        if !self.fresh.is_empty() {
            self.absorb();
        }
        match (self.sorted.last(), self.heap.peek()) {
            (Some(&a), Some(&Reverse(b))) => Some(if a <= b { a } else { b }),
            (Some(&a), None) => Some(a),
            (None, b) => b.map(|&Reverse(b)| b),
        }
    }

    fn pop(&mut self) -> Option<Timed> {
        if !self.fresh.is_empty() {
            self.absorb();
        }
        match (self.sorted.last(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) if a > b => self.heap.pop().map(|Reverse(b)| b),
            (Some(_), _) => self.sorted.pop(),
            (None, _) => self.heap.pop().map(|Reverse(b)| b),
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct LoadStat {
    /// Start of the current busy interval: a constraint is busy while it carries a transfer
    /// (coefficients and rates are > 0), so the interval opens and closes only when its
    /// first flow attaches and its last detaches, not at every rate change.
    since_s: f64,
    busy_s: f64,
    peak_Bps: f64,
    carried_bytes: f64,
    /// Listed in `Sim::touched` this instant.
    touched: bool,
}

/// Lists constraint `c`, whose load changes in this instant, for the peaks and meters read
/// at the instant's end.
#[inline]
fn load_changes(stats: &mut [LoadStat], touched: &mut Vec<u32>, c: u32) {
    let stat = &mut stats[c as usize];
    if !stat.touched {
        stat.touched = true;
        touched.push(c);
    }
}

/// A flow's bytes left at a time (since when it has moved at its current rate).
#[derive(Debug, Clone, Copy)]
struct BytesLeft {
    bytes: f64,
    as_of_s: f64,
}

impl BytesLeft {
    /// Brought up to `now_s` at `rate_Bps` (never below zero: rounding can overshoot).
    fn at(self, now_s: f64, rate_Bps: f64) -> BytesLeft {
        BytesLeft {
            bytes: (self.bytes - rate_Bps * (now_s - self.as_of_s)).max(0.0),
            as_of_s: now_s,
        }
    }
}

struct Sim<'a> {
    acts: &'a Activities,
    /// Each activity's bytes in share units (`Schedule`: bytes / weight).
    share_bytes: &'a [f64],
    dependents_offsets: Vec<usize>,
    dependents: Vec<u32>,
    n_pending: Vec<u32>,
    events: Events,
    /// Projected finish time of every transferring flow, updated in place.
    finishes: IndexedHeap,
    /// Bytes each flow has left, as of when they were last brought up to date (one array:
    /// a rate change reads and writes both).
    left: Vec<BytesLeft>,
    sharing: Sharing<'a>,
    /// Workspace of the plain filling over every flow, and whether the next re-solve uses
    /// it (`reshare`).
    filling: Filling,
    full_next: bool,
    /// A full re-solve's new finish times, set in the heap together (`IndexedHeap::set_many`).
    new_finishes: Vec<(u32, f64)>,
    /// Busy-time and peak statistics per constraint, in one struct since `load_changes`
    /// updates them together (copied into `out` at the end).
    load_stats: Vec<LoadStat>,
    touched: Vec<u32>,
    /// The last solve in which each constraint's group of flows changed rate
    /// (`RunOutput::n_group_share_changes`).
    group_changed_in: Vec<u64>,
    meters: MeterRun<'a>,
    out: RunOutput,
    record_rates: bool,
    record_groups: bool,
    verify: bool,
    finish_rel_tol: f64,
    /// Fast mode, per constraint: the released flows' load on it (coefficient x rate) and
    /// that load times their finish times, summed over the instant (`local_change_s`).
    released_load: Vec<(f64, f64)>,
    released_on: Vec<u32>,
    /// Fast mode: the span of the instant's window, which rate changes are placed in.
    window_s: (f64, f64),
    /// Fast mode: how many flows are transferring, by ready time (`ready_key`), so that the
    /// latest is the youngest transfer's (`transfers_age_s`).
    transferring_by_ready: BTreeMap<u64, u32>,
    /// Activities done, failed or skipped.
    n_over: usize,
    /// The disruptions in time order, and those due at the current instant.
    steps: &'a [Step],
    due: Vec<u32>,
    /// Constraints of capacity 0 right now: arriving flows are checked only while there are.
    n_zero_capacity: usize,
    /// Per flow: waiting without a path since a reroute to none (empty if no reroute is).
    no_path: Vec<bool>,
    /// Per flow: bytes left when it last attached, so that leaving credits what it moved.
    /// Kept only if disruptions can detach flows: else a flow attaches once, with all its
    /// bytes left.
    attached_bytes: Vec<f64>,
}

/// Runs the activities over constraints of the given capacities (bytes per second), without
/// disruptions.
pub fn run(
    capacity_Bps: &[f64],
    acts: &Activities,
    options: &RunOptions,
    progress: &mut dyn FnMut(&Progress) -> bool,
) -> Result<RunOutput> {
    run_with_disruptions(capacity_Bps, acts, &[], options, progress)
}

/// Runs the activities over constraints of the given capacities (bytes per second), which
/// `disruptions` change during the run (src/engine/disruption.rs). `progress` is called about
/// every 0.1 s of wall time; returning false stops the run with `Error::Interrupted`.
pub fn run_with_disruptions(
    capacity_Bps: &[f64],
    acts: &Activities,
    disruptions: &[Disruption],
    options: &RunOptions,
    progress: &mut dyn FnMut(&Progress) -> bool,
) -> Result<RunOutput> {
    validate(capacity_Bps, acts)?;
    let schedule = Schedule::new(capacity_Bps.len(), acts, disruptions)?;
    crate::memory::check_fits(
        &format!(
            "running {} activities with {} usage entries over {} constraints",
            acts.len(),
            schedule.usage.len(),
            capacity_Bps.len()
        ),
        estimate_run_bytes(capacity_Bps.len(), acts, &schedule, options.record_rates),
    )?;
    let mut sim = Sim::new(capacity_Bps, acts, &schedule, options)?;
    sim.start();
    sim.event_loop(progress)?;
    Ok(sim.finish())
}

/// Working memory of a run: per-activity state and results, per-entry positions, per-
/// constraint lists and statistics, the result tables built afterwards, and the copy of the
/// usage lists that reroutes make.
fn estimate_run_bytes(
    n_constraints: usize,
    acts: &Activities,
    schedule: &Schedule,
    record_rates: bool,
) -> f64 {
    let per_activity = 280.0;
    let per_entry = 40.0;
    let per_constraint = 280.0;
    let rates = if record_rates {
        40.0 * acts.n_usage_entries() as f64
    } else {
        0.0
    };
    let copied = match schedule.usage {
        std::borrow::Cow::Borrowed(_) => 0.0,
        std::borrow::Cow::Owned(_) => std::mem::size_of::<Usage>() as f64,
    };
    per_activity * acts.len() as f64
        + (per_entry + copied) * schedule.usage.len() as f64
        + per_constraint * n_constraints as f64
        + rates
}

fn validate(capacity: &[f64], acts: &Activities) -> Result<()> {
    if capacity.len() >= NO_PATH as usize {
        return Err(Error::InvalidArgument(format!(
            "{} constraints: ids must stay below {NO_PATH}",
            capacity.len()
        )));
    }
    for (c, &cap) in capacity.iter().enumerate() {
        crate::error::check_capacity(format_args!("capacity of constraint {c}"), cap)?;
    }
    for a in 0..acts.len() {
        let usage = &acts.usage[acts.usage_offsets[a]..acts.usage_offsets[a + 1]];
        for u in usage {
            let c = u.constraint as usize;
            if c >= capacity.len() {
                return Err(Error::InvalidArgument(format!(
                    "flow {a} uses constraint {c}, but there are only {} constraints",
                    capacity.len()
                )));
            }
        }
    }
    Ok(())
}

impl<'a> Sim<'a> {
    fn new(
        capacity: &[f64],
        acts: &'a Activities,
        schedule: &'a Schedule<'a>,
        options: &'a RunOptions,
    ) -> Result<Self> {
        let (usage, steps, share_bytes) = (
            &schedule.usage[..],
            &schedule.steps[..],
            &schedule.bytes[..],
        );
        let n = acts.len();
        let mut n_pending = vec![0u32; n];
        let mut dependents_offsets = vec![0usize; n + 1];
        for &(a, after) in &acts.deps {
            n_pending[a as usize] += 1;
            dependents_offsets[after as usize + 1] += 1;
        }
        for i in 0..n {
            dependents_offsets[i + 1] += dependents_offsets[i];
        }
        let mut cursor = dependents_offsets.clone();
        let mut dependents = vec![0u32; acts.deps.len()];
        for &(a, after) in &acts.deps {
            dependents[cursor[after as usize]] = a;
            cursor[after as usize] += 1;
        }
        check_acyclic(n, &n_pending, &dependents_offsets, &dependents)?;
        let n_c = capacity.len();
        let span = acts
            .usage_offsets
            .windows(2)
            .map(|w| (w[0], w[1]))
            .collect();
        let has_no_path = steps
            .iter()
            .any(|s| s.reroutes.iter().any(|r| r.1.is_none()));
        let mut events = Events::default();
        for (i, step) in steps.iter().enumerate() {
            events.push(Timed {
                time_s: step.time_s,
                kind: EventKind::Disruption,
                id: i as u32,
            });
        }
        Ok(Sim {
            acts,
            share_bytes,
            dependents_offsets,
            dependents,
            n_pending,
            events,
            finishes: IndexedHeap::with_ids(n),
            left: share_bytes
                .iter()
                .map(|&bytes| BytesLeft {
                    bytes,
                    as_of_s: 0.0,
                })
                .collect(),
            attached_bytes: if steps.is_empty() {
                Vec::new()
            } else {
                share_bytes.to_vec()
            },
            sharing: Sharing::new(usage, span, capacity.to_vec(), &schedule.rate_cap_Bps),
            filling: Filling::default(),
            full_next: false,
            new_finishes: Vec::new(),
            load_stats: vec![LoadStat::default(); n_c],
            touched: Vec::new(),
            group_changed_in: vec![0; capacity.len()],
            meters: MeterRun::new(&options.meters, n_c)?,
            out: RunOutput {
                ready_s: vec![f64::NAN; n],
                start_s: vec![f64::NAN; n],
                finish_s: vec![f64::NAN; n],
                // Done unless it fails or is skipped; `n_over` checks that all got somewhere.
                outcome: vec![Outcome::Done; n],
                failed_s: vec![f64::NAN; n],
                fail_reason: vec![NO_FAILURE; n],
                // busy_s, peak_load_Bps and carried_bytes come from `load_stats` at the end.
                ..Default::default()
            },
            record_rates: options.record_rates,
            record_groups: options.record_rates && options.record_groups,
            verify: options.verify,
            finish_rel_tol: options.finish_rel_tol,
            released_load: vec![(0.0, 0.0); n_c],
            released_on: Vec::new(),
            window_s: (0.0, 0.0),
            transferring_by_ready: BTreeMap::new(),
            n_over: 0,
            steps,
            due: Vec::new(),
            n_zero_capacity: capacity.iter().filter(|&&c| c == 0.0).count(),
            no_path: if has_no_path {
                vec![false; n]
            } else {
                Vec::new()
            },
        })
    }

    fn start(&mut self) {
        for a in 0..self.acts.len() {
            if self.n_pending[a] == 0 {
                self.make_ready(a as u32, 0.0);
            }
        }
    }

    /// Dependencies of `a` are met at `time_s`: it becomes ready at its earliest start.
    fn make_ready(&mut self, a: u32, time_s: f64) {
        let ai = a as usize;
        let ready = time_s.max(self.acts.start_s[ai]);
        self.out.ready_s[ai] = ready;
        let kind = match self.acts.kind[ai] {
            Kind::Flow => EventKind::TransferStart,
            Kind::Delay => {
                self.out.start_s[ai] = ready;
                EventKind::DelayEnd
            }
        };
        self.events.push(Timed {
            time_s: ready + self.acts.wait_s[ai],
            kind,
            id: a,
        });
    }

    fn complete(&mut self, a: u32, time_s: f64) {
        self.out.finish_s[a as usize] = time_s;
        self.n_over += 1;
        for i in self.dependents_offsets[a as usize]..self.dependents_offsets[a as usize + 1] {
            let d = self.dependents[i];
            self.n_pending[d as usize] -= 1;
            if self.n_pending[d as usize] == 0 {
                self.make_ready(d, time_s);
            }
        }
    }

    /// A delay's end or a transfer's start past the largest double (a finite ready time
    /// plus a duration or latency) would end the run at inf s; refused as a flow's
    /// finish past it is.
    fn check_event_time(&self, e: Timed) -> Result<()> {
        if e.time_s.is_finite() {
            return Ok(());
        }
        let a = e.id as usize;
        let (ready, wait) = (self.out.ready_s[a], self.acts.wait_s[a]);
        let (event, wait_is) = match e.kind {
            EventKind::DelayEnd => (format!("delay {a} would end"), "lasting"),
            _ => (
                format!("flow {a} would start its transfer"),
                "then its route's latency of",
            ),
        };
        Err(Error::InvalidArgument(format!(
            "{event} at {} s (ready at {} s, {wait_is} {} s): beyond what double precision holds",
            shown(e.time_s),
            shown(ready),
            shown(wait)
        )))
    }

    /// The latest projected finish the instant at `now` takes. Exact: its own rounding
    /// horizon. Fast mode (`finish_rel_tol` > 0), at an instant of finishes alone: up to
    /// `finish_rel_tol` times the transfers' age after `now` (`transfers_age_s`), but never
    /// past the next event of another kind (an arrival, a delay's end, a disruption keeps its
    /// exact time and order). The flows taken are reported finished at their own projected
    /// times and leave together, at the re-solve (`release_time`), which is what the
    /// tolerance buys: one re-solve for all of them, where the exact engine re-solves at each.
    /// The others' rates are exact for the flows left.
    fn finish_window(&mut self, now: f64, horizon: f64, arrivals: bool) -> f64 {
        // A disruption due at this instant applies after its finishes: a flow it cuts off or
        // slows must not be taken early at its old rate. Arrivals start at this instant's
        // time, so its re-solve cannot move to the finishes' mean: finishes taken early would
        // free their bandwidth too soon, with nothing to balance it.
        if self.finish_rel_tol <= 0.0 || !self.due.is_empty() || arrivals {
            return horizon;
        }
        let next_event = self.events.peek().map_or(f64::INFINITY, |e| e.time_s);
        (now + self.transfers_age_s(now) * self.finish_rel_tol)
            .min(next_event)
            .max(horizon)
    }

    /// How long the youngest transfer has run at `now`, counted from its ready time (its
    /// latency is part of its time): every flow transferring has run at least that long, so
    /// a window of a fraction of it is that fraction of any flow's time so far. Counted from
    /// time 0 instead, a window would grow with the run's clock: a stage that starts late
    /// (a dispatch after 100 ms of compute) would be one window, and along a chain of
    /// stages the error would add up stage by stage. Where every flow is ready at 0, it is
    /// `now`.
    fn transfers_age_s(&self, now: f64) -> f64 {
        let ready_s = self
            .transferring_by_ready
            .last_key_value()
            .map_or(0.0, |(&key, _)| f64::from_bits(key));
        (now - ready_s).max(0.0)
    }

    /// A flow's ready time as a key that orders as the time: non-negative doubles order as
    /// their bits (+ 0.0 makes -0.0, a start of -0.0 s, into 0).
    fn ready_key(&self, f: u32) -> u64 {
        (self.out.ready_s[f as usize] + 0.0).to_bits()
    }

    /// When the flows a fast-mode instant took leave and the others are re-solved: the
    /// rate-weighted mean of their projected finishes, so that the bandwidth those finishing
    /// before it hold too long and those finishing after it free too soon balance, to first
    /// order (where the instant has arrivals or disruptions, at its own time, theirs). Never
    /// past an event the instant's finishes made (a dependent ready at once). The rates it
    /// re-solves each change at their own flow's local mean (`local_change_s`): this is the
    /// instant's time, when the loop goes on.
    fn release_time(&mut self, now: f64, released: &[(u32, f64)], only_finishes: bool) -> f64 {
        if !only_finishes {
            return now;
        }
        let (mut weight, mut sum) = (0.0, 0.0);
        for &(f, t) in released {
            // The flow's own rate, not its share level (weights: `Schedule`).
            let r = self.sharing.rate(f) * self.acts.weight(ActivityId(f));
            weight += r;
            sum += r * (t - now);
        }
        let mean = if weight > 0.0 {
            now + sum / weight
        } else {
            now
        };
        let next_event = self.events.peek().map_or(f64::INFINITY, |e| e.time_s);
        mean.min(next_event).max(now)
    }

    /// Adds a flow released at `t` to the released load on its constraints.
    fn note_released_load(&mut self, f: u32, t: f64) {
        let r = self.sharing.rate(f);
        for u in self.sharing.usage_of(f) {
            let acc = &mut self.released_load[u.constraint as usize];
            if acc.0 == 0.0 {
                self.released_on.push(u.constraint);
            }
            let load = u.coefficient * r;
            acc.0 += load;
            acc.1 += load * t;
        }
    }

    fn clear_released_loads(&mut self) {
        for &c in &self.released_on {
            self.released_load[c as usize] = (0.0, 0.0);
        }
        self.released_on.clear();
    }

    /// When a flow's rate change takes effect in a fast-mode instant: the load-weighted mean
    /// finish of the released flows on its constraints (the release time if none), within
    /// the window. Bandwidth freed early on one link then reaches the flows there early, not
    /// at the mean of finishes elsewhere (README "Fast mode" has the errors before and after).
    fn local_change_s(&self, f: u32, release_s: f64) -> f64 {
        let (mut w, mut s) = (0.0, 0.0);
        for u in self.sharing.usage_of(f) {
            let acc = self.released_load[u.constraint as usize];
            w += acc.0;
            s += acc.1;
        }
        if w > 0.0 {
            (s / w).clamp(self.window_s.0, self.window_s.1)
        } else {
            release_s
        }
    }

    /// Whether a flow due inside a fast-mode window must wait for the instant's re-solve
    /// instead of being taken early: something waits for its finish (a dependent that it
    /// alone still holds back, or the run's end), and flows taken earlier in the window free
    /// load on its constraints, so its rate would rise inside the window and its projected
    /// finish, at the old rate, is late. Taken anyway, it would hand that lateness on to its
    /// dependent (stage after stage along a chain) or to the makespan; left in, it gets its
    /// re-solved rate, and the next stage starts where those rates put its finish. Flows
    /// nobody waits for keep the cheap treatment: their error stays theirs.
    fn awaited_at_a_rising_rate(&self, f: u32) -> bool {
        let fi = f as usize;
        let awaited = self.n_over + 1 == self.acts.len()
            || self.dependents[self.dependents_offsets[fi]..self.dependents_offsets[fi + 1]]
                .iter()
                .any(|&d| self.n_pending[d as usize] == 1);
        awaited
            && self
                .sharing
                .usage_of(f)
                .iter()
                .any(|u| self.released_load[u.constraint as usize].0 > 0.0)
    }

    fn next_finish_s(&self) -> Option<f64> {
        self.finishes.peek().map(|(t, _)| t)
    }

    fn event_loop(&mut self, progress: &mut dyn FnMut(&Progress) -> bool) -> Result<()> {
        let mut arrived: Vec<u32> = Vec::new();
        let mut finishing: Vec<u32> = Vec::new();
        // Fast mode: the flows an instant takes early, their projected finish times, and
        // their rates (which weigh when the instant's re-solve comes).
        let mut finishing_s: Vec<f64> = Vec::new();
        let mut released: Vec<(u32, f64)> = Vec::new();
        let mut order: Vec<usize> = Vec::new();
        // The first check (after 64 instants) reports at once.
        let mut last_report = std::time::Instant::now()
            .checked_sub(REPORT_EVERY)
            .unwrap_or_else(std::time::Instant::now);
        loop {
            let next_event = self.events.peek().map(|e| e.time_s);
            let next_finish = self.next_finish_s();
            let mut now = match (next_event, next_finish) {
                (None, None) => break,
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
            };
            let horizon = now + now.abs() * SAME_INSTANT_REL;
            let mut n_left = 0usize;
            let mut window_open = true;
            arrived.clear();
            // Drain everything at this instant, including what it triggers (zero waits).
            loop {
                if let Some(e) = self.events.peek() {
                    if e.time_s <= horizon {
                        self.events.pop();
                        match e.kind {
                            EventKind::DelayEnd => {
                                self.check_event_time(e)?;
                                self.complete(e.id, e.time_s)
                            }
                            EventKind::TransferStart => {
                                let f = e.id as usize;
                                if self.out.outcome[f] != Outcome::Done {
                                    continue; // failed while it waited
                                }
                                self.check_event_time(e)?;
                                self.out.start_s[f] = e.time_s;
                                if self.acts.bytes[f] == 0.0 {
                                    self.complete(e.id, e.time_s);
                                } else {
                                    arrived.push(e.id);
                                }
                            }
                            // Applied once the instant's finishes and starts are in.
                            EventKind::Disruption => self.due.push(e.id),
                        }
                        continue;
                    }
                }
                let bound = if window_open {
                    self.finish_window(now, horizon, !arrived.is_empty())
                } else {
                    horizon
                };
                match self.finishes.peek() {
                    Some((t, _)) if t <= bound => {
                        finishing.clear();
                        if bound > horizon {
                            finishing_s.clear();
                            self.finishes.take_at_most_keyed(
                                bound,
                                &mut finishing,
                                Some(&mut finishing_s),
                            );
                            // In order of projected finish: each is reported at its own time
                            // (within the window after now) and leaves when the instant
                            // re-solves (`release_time`). The window closes, and the rest go
                            // back, where a completion made an event (a dependent ready at
                            // once) before the next one's finish, since the release must not
                            // come before finishes it has taken; and before a flow whose
                            // finish is awaited at a rate the window raises
                            // (`awaited_at_a_rising_rate`).
                            order.clear();
                            order.extend(0..finishing.len());
                            order.sort_unstable_by(|&a, &b| {
                                finishing_s[a]
                                    .total_cmp(&finishing_s[b])
                                    .then(finishing[a].cmp(&finishing[b]))
                            });
                            for (k, &i) in order.iter().enumerate() {
                                let (f, t) = (finishing[i], finishing_s[i].max(now));
                                if self.events.peek().is_some_and(|e| e.time_s < t)
                                    || self.awaited_at_a_rising_rate(f)
                                {
                                    for &j in &order[k..] {
                                        self.finishes.set(finishing[j], finishing_s[j]);
                                    }
                                    window_open = false;
                                    break;
                                }
                                self.note_released_load(f, t);
                                self.complete(f, t);
                                released.push((f, t));
                                n_left += 1;
                            }
                            continue;
                        }
                        self.finishes.take_at_most(horizon, &mut finishing);
                        // Highest id first: flows attach in id order, so when many leave at
                        // once they come off the end of their constraints' lists.
                        finishing.sort_unstable_by(|a, b| b.cmp(a));
                        for &f in &finishing {
                            self.left[f as usize].bytes = 0.0;
                            self.leave(now, f);
                            // Recorded at the instant, when the others' rates change.
                            self.complete(f, now);
                        }
                        n_left += finishing.len();
                    }
                    _ => break,
                }
            }
            if !released.is_empty() {
                let start = now;
                now = self.release_time(now, &released, arrived.is_empty() && self.due.is_empty());
                if now > start {
                    let end = released.iter().fold(now, |m, &(_, t)| m.max(t));
                    self.window_s = (start, end);
                } else {
                    self.clear_released_loads();
                }
                for &(f, _) in &released {
                    self.left[f as usize].bytes = 0.0;
                    self.leave(now, f);
                }
                released.clear();
            }
            if !self.due.is_empty() {
                n_left += self.disrupt(now, &mut arrived)?;
            }
            if (self.n_zero_capacity > 0 || !self.no_path.is_empty()) && !arrived.is_empty() {
                self.fail_on_zero_capacity(now, &mut arrived);
            }
            self.out.n_instants += 1;
            if n_left > 0 || !arrived.is_empty() {
                self.reshare(now, &arrived)?;
            }
            if self.finish_rel_tol > 0.0 {
                for &f in &arrived {
                    *self
                        .transferring_by_ready
                        .entry(self.ready_key(f))
                        .or_insert(0) += 1;
                }
            }
            self.clear_released_loads();
            // Report every tenth of a second of wall time (the clock is read every 64 instants).
            if self.out.n_instants % 64 == 0 && last_report.elapsed() >= REPORT_EVERY {
                last_report = std::time::Instant::now();
                let p = Progress {
                    n_done: self.n_over,
                    n_activities: self.acts.len(),
                    time_s: now,
                    n_instants: self.out.n_instants,
                };
                if !progress(&p) {
                    return Err(Error::Interrupted(format!(
                        "run stopped at simulated time {} s with {} of {} activities over",
                        shown(now),
                        self.n_over,
                        self.acts.len()
                    )));
                }
            }
        }
        if self.n_over != self.acts.len() {
            return Err(Error::Internal(format!(
                "run ended with {} of {} activities done, failed or skipped",
                self.n_over,
                self.acts.len()
            )));
        }
        Ok(())
    }

    /// Takes a transferring flow off its constraints and its load off theirs, crediting them
    /// with the bytes it moved since it attached (`left` must be up to date).
    fn leave(&mut self, now: f64, f: u32) {
        let fi = f as usize;
        let moved = match self.attached_bytes.get_mut(fi) {
            Some(attached) => std::mem::replace(attached, self.left[fi].bytes),
            None => self.share_bytes[fi],
        } - self.left[fi].bytes;
        for u in self.sharing.usage_of(f) {
            self.load_stats[u.constraint as usize].carried_bytes += u.coefficient * moved;
        }
        let (stats, touched) = (&mut self.load_stats, &mut self.touched);
        self.sharing.detach(f, |c| load_changes(stats, touched, c));
        if self.finish_rel_tol > 0.0 {
            let key = self.ready_key(f);
            if let Some(n) = self.transferring_by_ready.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.transferring_by_ready.remove(&key);
                }
            }
        }
        for u in self.sharing.usage_of(f) {
            let ci = u.constraint as usize;
            if self.sharing.on[ci].is_empty() {
                let stat = &mut self.load_stats[ci];
                stat.busy_s += now - stat.since_s;
            }
        }
    }

    /// Whether `a` has neither finished, failed nor been skipped.
    fn is_live(&self, a: u32) -> bool {
        self.out.outcome[a as usize] == Outcome::Done && self.out.finish_s[a as usize].is_nan()
    }

    /// Applies the disruptions due at `now` (module `disruption`): detaches the transferring
    /// flows they touch, changes capacities and usage lists, fails flows rerouted to no path
    /// and adds the survivors to `arrived`. Returns how many flows were detached.
    fn disrupt(&mut self, now: f64, arrived: &mut Vec<u32>) -> Result<usize> {
        let due = std::mem::take(&mut self.due);
        // Steps are in time order, and a stable sort keeps each step's own order: the last
        // capacity of a constraint and the last reroute of a flow count.
        let mut capacities: Vec<(u32, f64)> = due
            .iter()
            .flat_map(|&i| self.steps[i as usize].capacities.iter().copied())
            .collect();
        let mut reroutes: Vec<(u32, Option<(usize, usize)>)> = due
            .iter()
            .flat_map(|&i| self.steps[i as usize].reroutes.iter().copied())
            .collect();
        capacities.sort_by_key(|&(c, _)| c);
        reroutes.sort_by_key(|&(f, _)| f);
        keep_last(&mut capacities, |x| x.0);
        keep_last(&mut reroutes, |x| x.0);
        capacities.retain(|&(c, cap)| cap != self.sharing.capacity(c));
        // Detach every transferring flow on a changing constraint, and every rerouted one,
        // bringing its bytes up to date: the survivors arrive again below.
        let mut detached = Vec::new();
        for &(c, _) in &capacities {
            while let Some(s) = self.sharing.on[c as usize].last() {
                let f = s.flow;
                self.cut(now, f);
                detached.push(f);
            }
        }
        for &(f, _) in &reroutes {
            if self.sharing.is_attached(f) {
                self.cut(now, f);
                detached.push(f);
            }
        }
        for &(c, cap) in &capacities {
            let was_zero = self.sharing.capacity(c) == 0.0;
            match (was_zero, cap == 0.0) {
                (false, true) => self.n_zero_capacity += 1,
                (true, false) => self.n_zero_capacity -= 1,
                _ => {}
            }
            self.sharing.set_capacity(c, cap);
        }
        // A transferring flow that loses its path fails, even if what it waits for fails at
        // this instant; one that has not started waits without a path (and fails if it is
        // still without one when it would start).
        let mut failed = Vec::new();
        for &(f, span) in &reroutes {
            if !self.is_live(f) {
                continue;
            }
            let fi = f as usize;
            match span {
                Some(span) => {
                    self.sharing.set_usage(f, span)?;
                    if let Some(flag) = self.no_path.get_mut(fi) {
                        *flag = false;
                    }
                }
                None if self.out.start_s[fi].is_nan() => self.no_path[fi] = true,
                None => {
                    self.fail(f, now, NO_PATH);
                    failed.push(f);
                }
            }
        }
        for f in failed {
            self.skip_dependents(f);
        }
        arrived.retain(|&f| self.out.outcome[f as usize] == Outcome::Done);
        arrived.extend(
            detached
                .iter()
                .filter(|&&f| self.out.outcome[f as usize] == Outcome::Done),
        );
        self.due = due;
        self.due.clear();
        Ok(detached.len())
    }

    /// Stops a transferring flow's transfer at `now`, keeping the bytes it has left.
    fn cut(&mut self, now: f64, f: u32) {
        let fi = f as usize;
        // A fast-mode instant can have re-rated it from a moment after `now` (within a
        // window ahead); it is cut from then on.
        let as_of_s = now.max(self.left[fi].as_of_s);
        self.left[fi] = self.left[fi].at(as_of_s, self.sharing.rate(f));
        self.finishes.remove(f);
        self.leave(now, f);
    }

    /// Fails the arriving flows that have no path or would transfer on a constraint of
    /// capacity 0.
    fn fail_on_zero_capacity(&mut self, now: f64, arrived: &mut Vec<u32>) {
        arrived.retain(|&f| {
            let reason = if self.no_path.get(f as usize) == Some(&true) {
                NO_PATH
            } else {
                let usage = self.sharing.usage_of(f);
                match usage
                    .iter()
                    .find(|u| self.sharing.capacity(u.constraint) == 0.0)
                {
                    Some(u) => u.constraint,
                    None => return true,
                }
            };
            self.fail(f, now, reason);
            self.skip_dependents(f);
            false
        });
    }

    /// Fails a live flow that is not attached (`skip_dependents` must follow).
    fn fail(&mut self, a: u32, now: f64, reason: u32) {
        debug_assert!(
            !self.sharing.is_attached(a),
            "flow {a} failed while attached"
        );
        let ai = a as usize;
        self.out.outcome[ai] = Outcome::Failed;
        self.out.failed_s[ai] = now;
        self.out.fail_reason[ai] = reason;
        // Ready later, not within this instant (whose events can lie a rounding error
        // after `now`, its earliest time): it never was ready.
        if self.out.ready_s[ai] > now + now.abs() * SAME_INSTANT_REL {
            self.out.ready_s[ai] = f64::NAN;
        }
        self.n_over += 1;
        // One more dependency that never completes: it does not become ready.
        self.n_pending[ai] += 1;
    }

    /// Skips every live activity that waits for `a`, directly or not.
    fn skip_dependents(&mut self, a: u32) {
        let mut stack = vec![a];
        while let Some(x) = stack.pop() {
            let x = x as usize;
            for i in self.dependents_offsets[x]..self.dependents_offsets[x + 1] {
                let d = self.dependents[i];
                if self.out.outcome[d as usize] == Outcome::Done {
                    self.out.outcome[d as usize] = Outcome::Skipped;
                    self.n_over += 1;
                    stack.push(d);
                }
            }
        }
    }

    /// Re-solves rates after flows left or `arrived` at `now`, and moves every flow whose
    /// rate changed onto its new finish time.
    fn reshare(&mut self, now: f64, arrived: &[u32]) -> Result<()> {
        for &f in arrived {
            for u in self.sharing.usage_of(f) {
                if self.sharing.on[u.constraint as usize].is_empty() {
                    self.load_stats[u.constraint as usize].since_s = now;
                }
            }
        }
        let full = self.full_next;
        if full {
            self.out.n_full_solves += 1;
            self.sharing.resolve_full(arrived, &mut self.filling)?;
        } else {
            self.sharing.resolve(arrived)?;
        }
        let region = std::mem::take(&mut self.sharing.region);
        let n_changes_before = self.out.n_rate_changes;
        let local = !self.released_on.is_empty();
        let mut new_finishes = std::mem::take(&mut self.new_finishes);
        new_finishes.clear();
        for &f in &region {
            let fi = f as usize;
            let old = self.sharing.rate(f);
            let new = self.sharing.solved(f);
            // Before the unchanged-rate test: an arrival whose rate rounds to 0 is "unchanged"
            // too, and would stay attached with no finish time.
            // Messages show the flow's own bytes and rate, not share units (`Schedule`).
            let weight = || self.acts.weight(ActivityId(f));
            if !(new > 0.0 && new.is_finite()) {
                return Err(crate::error::rate_out_of_range(
                    f,
                    new * weight(),
                    &format!(" at {} s", shown(now)),
                ));
            }
            // A re-solve reproduces an unchanged rate only to rounding; keeping the old value
            // saves a finish-time update and keeps unaffected flows bit-stable.
            if (new - old).abs() <= old * RATE_REL_TOL {
                continue;
            }
            self.out.n_rate_changes += 1;
            match self.sharing.bottleneck(f) {
                Some(b) if self.group_changed_in[b as usize] == self.sharing.n_solves => {}
                Some(b) => {
                    self.group_changed_in[b as usize] = self.sharing.n_solves;
                    self.out.n_group_share_changes += 1;
                }
                None => self.out.n_group_share_changes += 1,
            }
            // A transfer that began inside this instant counts from its own start time, and
            // a change never comes before the flow's last one: an instant's events span a
            // rounding resolution after `now`, so a transfer that began a moment after the
            // last instant's `now` can be re-rated at this one's, which is earlier still.
            let since = if old == 0.0 {
                self.out.start_s[fi].max(now)
            } else if local {
                self.local_change_s(f, now).max(self.left[fi].as_of_s)
            } else {
                self.left[fi].as_of_s.max(now)
            };
            self.left[fi] = self.left[fi].at(since, old);
            let bytes_left = self.left[fi].bytes;
            if full {
                self.sharing.set_rate_deferred(f, new);
            } else {
                let (stats, touched) = (&mut self.load_stats, &mut self.touched);
                self.sharing
                    .set_rate(f, new, |c| load_changes(stats, touched, c));
            }
            let finish_s = (since + bytes_left / new).max(now);
            if !finish_s.is_finite() {
                return Err(Error::InvalidArgument(format!(
                    "flow {f} would finish at {} s ({} bytes left at {} B/s): beyond what \
                     double precision holds",
                    shown(finish_s),
                    shown(bytes_left * weight()),
                    shown(new * weight())
                )));
            }
            if full {
                new_finishes.push((f, finish_s));
            } else {
                self.finishes.set(f, finish_s);
            }
            if self.record_rates {
                if self.out.rate_change_flow.len() == self.out.rate_change_flow.capacity() {
                    self.grow_rate_log(now)?;
                }
                self.out.rate_change_time_s.push(since);
                self.out.rate_change_flow.push(f);
                // Shared in share units (`Schedule`): the flow's own rate is weight x that.
                self.out
                    .rate_change_Bps
                    .push(new * self.acts.weight(ActivityId(f)));
                if self.record_groups {
                    let group = self.sharing.bottleneck(f).unwrap_or(u32::MAX);
                    self.out.rate_change_group.push(group);
                }
            }
        }
        if full {
            let (stats, touched) = (&mut self.load_stats, &mut self.touched);
            self.sharing
                .refresh_loads(|c| load_changes(stats, touched, c));
            self.finishes.set_many(&new_finishes);
        }
        self.new_finishes = new_finishes;
        // Where most rates change anyway, the plain filling over every flow is cheaper than
        // the lazy one (same rates to rounding): taken while an instant's changes or the
        // lazy filling's wakes reach half the transferring flows, of which there are enough
        // for it to matter.
        let n_changed = (self.out.n_rate_changes - n_changes_before) as usize;
        let touched = if full { n_changed } else { region.len() };
        self.full_next = self.sharing.n_attached >= FULL_SOLVE_MIN_FLOWS
            && 2 * touched >= self.sharing.n_attached;
        self.sharing.region = region;
        self.close_instant_loads(now);
        if self.verify {
            self.verify_against_full_solve(now)?;
        }
        Ok(())
    }

    /// Doubles the rate-change log's room if the doubled log, and the table made from it at
    /// the end, fit in memory. The up-front estimate allows a row per usage entry, but flows
    /// that start together change about n^2/2 rates; checking only when the log grows costs a
    /// check per doubling.
    fn grow_rate_log(&mut self, now: f64) -> Result<()> {
        let group_bytes = if self.record_groups { 4 } else { 0 };
        let log = &mut self.out;
        let n_rows = log.rate_change_flow.len();
        let grown = (2 * n_rows).max(64);
        crate::memory::check_fits(
            &format!(
                "the rate-change log would not fit: growing it past its {n_rows} rows ({} bytes, \
                 recorded by simulated time {} s)",
                n_rows * RATE_ROW_BYTES,
                shown(now)
            ),
            (grown * (RATE_ROW_BYTES + group_bytes + RATE_TABLE_ROW_BYTES)) as f64,
        )
        .map_err(|e| match e {
            Error::TooLarge(m) => Error::TooLarge(format!(
                "{m}; run without record_rates (the flows table still has every flow's start, \
                 finish and mean rate)"
            )),
            e => e,
        })?;
        log.rate_change_time_s.reserve_exact(grown - n_rows);
        log.rate_change_flow.reserve_exact(grown - n_rows);
        log.rate_change_Bps.reserve_exact(grown - n_rows);
        if self.record_groups {
            log.rate_change_group.reserve_exact(grown - n_rows);
        }
        Ok(())
    }

    /// Compares every transferring flow's rate with a from-scratch solve of all of them.
    fn verify_against_full_solve(&self, now: f64) -> Result<()> {
        let rate = |f: u32| self.sharing.rate(f);
        let active: Vec<u32> = (0..self.acts.len() as u32)
            .filter(|&f| rate(f) > 0.0)
            .collect();
        let (mut fi, mut ci, mut k) = (Vec::new(), Vec::new(), Vec::new());
        for (i, &f) in active.iter().enumerate() {
            for u in self.sharing.usage_of(f) {
                fi.push(i as u32);
                ci.push(u.constraint);
                k.push(u.coefficient);
            }
        }
        let caps = active
            .iter()
            .map(|&f| self.sharing.rate_cap[f as usize])
            .collect();
        let capacity = (0..self.sharing.n_constraints() as u32)
            .map(|c| self.sharing.capacity(c))
            .collect();
        let full = crate::solver::max_min_rates(capacity, &fi, &ci, &k, active.len(), Some(caps))?;
        for (i, &f) in active.iter().enumerate() {
            if (full[i] - rate(f)).abs() > 1e-9 * full[i] {
                // The flow's own rates, not share levels (weights: `Schedule`).
                let weight = self.acts.weight(ActivityId(f));
                return Err(Error::Internal(format!(
                    "at {} s flow {f} has rate {} B/s but a full solve gives {} B/s",
                    shown(now),
                    shown(rate(f) * weight),
                    shown(full[i] * weight)
                )));
            }
        }
        Ok(())
    }

    /// Peaks are read once every change of an instant is in: a flow that speeds up before
    /// another slows down must not show as a transient overload.
    fn close_instant_loads(&mut self, now: f64) {
        for &c in &self.touched {
            let stat = &mut self.load_stats[c as usize];
            stat.touched = false;
            stat.peak_Bps = stat.peak_Bps.max(self.sharing.load(c));
            self.meters.touch(c);
        }
        self.touched.clear();
        let sharing = &self.sharing;
        self.meters.close_instant(now, |c| sharing.load(c));
    }

    fn finish(mut self) -> RunOutput {
        self.out.busy_s = self.load_stats.iter().map(|s| s.busy_s).collect();
        self.out.peak_load_Bps = self.load_stats.iter().map(|s| s.peak_Bps).collect();
        self.out.carried_bytes = self.load_stats.iter().map(|s| s.carried_bytes).collect();
        self.out.meter_peak_Bps = std::mem::take(&mut self.meters.peak_Bps);
        self.out.meter_busy_s = std::mem::take(&mut self.meters.busy_s);
        self.out.n_solves = self.sharing.n_solves;
        self.out.n_flows_resolved = self.sharing.n_solved_flows;
        self.out.n_bottleneck_moves = self.sharing.n_bottleneck_moves;
        self.out.n_saturations = self.sharing.n_saturations;
        self.out.n_floor_moves = self.sharing.n_floor_moves;
        // A failed flow ends at its failure and carried bytes until then (max skips NaN).
        let ends = self.out.finish_s.iter().chain(&self.out.failed_s);
        self.out.makespan_s = ends.copied().fold(0.0, f64::max);
        self.out
    }
}

/// Kahn's algorithm; on a cycle, names the activities on it.
fn check_acyclic(n: usize, n_pending: &[u32], offsets: &[usize], dependents: &[u32]) -> Result<()> {
    let mut pending = n_pending.to_vec();
    let mut stack: Vec<u32> = (0..n as u32)
        .filter(|&a| pending[a as usize] == 0)
        .collect();
    let mut n_seen = 0usize;
    while let Some(a) = stack.pop() {
        n_seen += 1;
        for &d in &dependents[offsets[a as usize]..offsets[a as usize + 1]] {
            pending[d as usize] -= 1;
            if pending[d as usize] == 0 {
                stack.push(d);
            }
        }
    }
    if n_seen == n {
        return Ok(());
    }
    // Walk backwards along unfinished dependencies from a stuck activity until one repeats.
    let mut waits_for: Vec<Option<u32>> = vec![None; n];
    for a in 0..n {
        for &d in &dependents[offsets[a]..offsets[a + 1]] {
            if pending[d as usize] > 0 && pending[a] > 0 {
                waits_for[d as usize] = Some(a as u32);
            }
        }
    }
    let start = (0..n).find(|&a| pending[a] > 0).expect("a stuck activity") as u32;
    let mut seen_at = vec![usize::MAX; n];
    let mut path = Vec::new();
    let mut a = start;
    while seen_at[a as usize] == usize::MAX {
        seen_at[a as usize] = path.len();
        path.push(a);
        a = waits_for[a as usize].expect("a stuck activity waits for another stuck one");
    }
    let cycle: Vec<String> = path[seen_at[a as usize]..]
        .iter()
        .map(|x| x.to_string())
        .collect();
    Err(Error::DependencyCycle(format!(
        "dependency cycle among activities {} (each waits for the next)",
        cycle.join(" -> ")
    )))
}

/// Keeps the last entry of each run of entries with one key.
fn keep_last<T: Copy, K: PartialEq>(v: &mut Vec<T>, key: impl Fn(&T) -> K) {
    let mut w = 0;
    for r in 0..v.len() {
        if w > 0 && key(&v[w - 1]) == key(&v[r]) {
            v[w - 1] = v[r];
        } else {
            v[w] = v[r];
            w += 1;
        }
    }
    v.truncate(w);
}
