//! The live sharing state of a run and its incremental re-solve.
//!
//! After an event only flows whose max-min rate can change are re-solved, in one pass of
//! progressive filling, and the result is exact, not approximate.
//!
//! *Lazy filling.* Picture the filling over every transferring flow. A flow whose rate may
//! change is *awake*: it rises with the level until a constraint saturates or its cap. Every
//! other flow is *dormant*: it is counted on its constraints at its old rate r, as if frozen
//! there from the start, and is woken (starts rising from the current level) only where
//! that stand-in differs from the true filling:
//! * a constraint whose stand-in load reaches its capacity at level L, with dormant flows
//!   faster than L on it, really saturates higher, at the level x where its load with each
//!   of them at min(rate, x) reaches capacity (where a dormant flow is rising). It is taken
//!   again at x; the dormant flows faster than x wake there (their rate really drops);
//! * when the level reaches a dormant flow's rate r it must still have a bottleneck there (a
//!   constraint saturated at r on which no dormant flow is faster) or its cap, else it wakes
//!   at r. Every flow keeps the bottleneck it was last certified with, which holds until
//!   something changes on it (a flow leaves, arrives or wakes there): only the flows held
//!   by such a constraint are checked.
//!
//! Waking a flow at L <= r is always right: a dormant flow still rises at every level below
//! its rate (it is checked at r, and no constraint really saturates below the levels above),
//! so a needless wake costs only work. Levels are taken in order, so the pass ends with the
//! exact max-min rates, and the woken flows are the flows whose rate changes (up to ties).
//!
//! *Floors.* Write load(y) for a constraint's load at level y as the filling counts it: k x y
//! for each rising flow, k x min(rate, y) for each dormant one, the frozen flows' fixed part.
//! It is concave in y (a sum of linear and concave terms), so its tangent at the level x where
//! `saturate` finds it reaches capacity bounds it from above everywhere:
//! load(y) <= capacity + s x (y - x), s its slope there (the rising coefficients plus those of
//! the dormant flows faster than x). Keep (floor f, slope s) with load(y) <= capacity + s x (y - f) at every
//! level y from the current level L up; then nothing saturates below f. A dormant flow of
//! coefficient k that wakes at L from its old rate r <= L adds exactly k x (y - r) for y >= L,
//! so the bound holds with f' = (s f + k r) / (s + k) and s' = s + k; a rising flow that
//! freezes at L takes k x (y - L) off, so f' = (s f - k L) / (s - k), s' = s - k (kept only
//! while s' >= s / 2, where the division stays well conditioned; else f stays as a plain lower
//! bound); a drop or a rising level only lower the load. So a wake moves the floor no lower
//! than that flow's rising can take it, where resetting it sent the constraint back to
//! `saturate` (a filter of its faster dormant flows and a solve of its level) at every wake.
//!
//! *Disruptions.* A capacity change or a reroute is handled as departures and arrivals: the
//! caller detaches every flow on a constraint whose capacity changes and every rerouted
//! flow, changes capacities and usage lists while no attached flow is on what changes, and
//! re-attaches the survivors as arrivals of the same `resolve`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::solver::{CompensatedSum, Filling, Incidence, IndexedHeap, RowFlows, Rows, Usage};

/// A dormant flow's constraint counts as its bottleneck if its slack at the flow's rate r is
/// below this fraction of (k x r), k the smallest coefficient on it: no flow there could rise
/// more than that fraction of r by taking the slack.
const SATURATED: f64 = 1e-10;
/// Or if its slack is below this fraction of its capacity, whatever the coefficients: the
/// slack is then rounding, the dormant rates' own (each off by half an ulp, so the load by
/// about 1e-16 of the capacity), and a flow of coefficient k rising on it alone would take
/// that rounding / k, far from the flows it ties with (4e-5 relative beside k = 1e3 and 1e-9).
const ROUNDING: f64 = 1e-14;
/// Rates within this relative distance count as tied (fastest on a constraint, or at a rate
/// cap). A flow kept at a tie is off by up to this much: at 1e-9, all of the tolerance the
/// engine is held to (a flow kept at 1 - 1e-9 below its cap of 1 when its bottleneck left),
/// so well below it, but still far above the rounding that separates equal levels reached
/// by different sums (~1e-15), and no lower than `saturate`'s 1e-12.
const TIE: f64 = 1e-11;
/// A floor moved by a wake or a freeze (`ConstraintState::floor_slope`) is computed from two
/// levels, each within rounding of its value, with at most twice their rounding: it is moved
/// down by this fraction so that rounding cannot put it above the saturation level it bounds
/// (where the level would overshoot).
const FLOOR_ROUNDING: f64 = 1e-14;
/// `bottleneck` of a flow at its rate cap, and of one not solved yet.
const CAPPED: u32 = u32::MAX;
const NO_BOTTLENECK: u32 = u32::MAX - 1;

/// A flow's place on a constraint: `(flow, index of that constraint in the flow's usage)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub flow: u32,
    pub entry: u32,
    /// The flow's rate, copied so that scanning a constraint reads one array (chasing
    /// each flow's state missed the cache at scale). The coefficient is not: scans need it
    /// only for the few flows they pick, and a 16-byte slot keeps scans short.
    pub rate: f64,
}

/// The coefficient of a slot's flow on its constraint (read from the flow's usage list: the
/// slot keeps no copy, to stay small for scans).
#[inline]
fn slot_coefficient(usage: &[Usage], span: &[(usize, usize)], slot: &Slot) -> f64 {
    usage[span[slot.flow as usize].0 + slot.entry as usize].coefficient
}

const NO_NODE: u32 = u32::MAX;

/// The positions of the set bits of `bits`, in increasing order.
fn set_bits(bits: &[u64]) -> impl Iterator<Item = usize> + '_ {
    bits.iter().enumerate().flat_map(|(w, &word)| {
        let mut rest = word;
        std::iter::from_fn(move || {
            (rest != 0).then(|| {
                let b = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                64 * w + b
            })
        })
    })
}

/// A constraint's part in the re-solve under way.
#[derive(Debug, Clone, Copy)]
struct ConstraintState {
    /// Capacity left for the rising flows: the capacity minus dormant flows at their old
    /// rates minus frozen awake flows at their new rates. Both sums are compensated: flows
    /// come and go in any order, and what is left after large terms leave must keep its
    /// own precision (a tiny coefficient beside large ones, a small rest of a busy link).
    residual: CompensatedSum,
    /// Sum of the rising flows' coefficients where some coefficient on it is not 1 (read it
    /// through `coef_sum()`), and their number (exact, unlike the sum).
    non_unit_coef_sum: CompensatedSum,
    /// A lower bound of its saturation level with its dormant flows counted at
    /// min(rate, level), or 0. Where `floor_slope` s is > 0 it comes with a bound of the
    /// load itself, at every level y from the current one up: load(y) <= capacity +
    /// s x (y - floor), which wakes and freezes move exactly (module docs, *Floors*).
    floor: f64,
    floor_slope: f64,
    /// The floor was moved by a wake or a freeze since `saturate` set it.
    floor_moved: bool,
    n_rising: u32,
    /// Every attached flow's coefficient on it is 1, so the coefficient sum is `n_rising`.
    unit: bool,
    /// Head of its list of woken flows in `Sharing::woken`, or `NO_NODE`.
    woken: u32,
    /// Something changed on it in this re-solve.
    touched: bool,
    /// It has awake flows, so the state above is valid.
    registered: bool,
    /// Flows woke on it since keys were last set.
    dirty: bool,
    /// Flows left it since the last re-solve.
    left_any: bool,
    /// Its flows were scanned for faster dormant ones in this re-solve: they are in
    /// `Sharing::faster`.
    scanned: bool,
    /// Its one flow rises, and has a constraint of its own with a lower key (`rise`): it is
    /// kept out of the heap.
    shadowed: bool,
}

impl Default for ConstraintState {
    fn default() -> Self {
        ConstraintState {
            residual: CompensatedSum::default(),
            non_unit_coef_sum: CompensatedSum::default(),
            floor: 0.0,
            floor_slope: 0.0,
            floor_moved: false,
            scanned: false,
            shadowed: false,
            n_rising: 0,
            unit: true,
            woken: NO_NODE,
            touched: false,
            registered: false,
            dirty: false,
            left_any: false,
        }
    }
}

/// A constraint's capacity and the load on it.
#[derive(Debug, Clone, Copy)]
struct ConstraintLoad {
    capacity: f64,
    /// Sum of the attached flows' coefficient x rate, kept up to date over the whole run:
    /// compensated, so rounding does not build up in it.
    load_Bps: CompensatedSum,
    /// An upper bound of the fastest rate on it: raised by `set_rate`, made exact whenever
    /// its flows are scanned.
    top_rate_bound: f64,
    /// Attached flows whose coefficient on it is not 1: while there are none, a scan needs
    /// no coefficient (looking each up misses the cache at scale).
    n_non_unit: u32,
    /// Attached flows (the length of its list in `Sharing::on`, read here with the rest).
    n_flows: u32,
    /// A lower bound of the attached flows' coefficients (exact until one leaves), infinity
    /// when none is attached.
    min_coefficient: f64,
}

impl ConstraintState {
    /// Sum of the rising flows' coefficients.
    #[inline]
    fn coef_sum(&self) -> f64 {
        if self.unit {
            self.n_rising as f64
        } else {
            self.non_unit_coef_sum.value()
        }
    }

    /// Sets up the filling state at the first wake on it in this re-solve.
    #[inline]
    fn register(&mut self, load: &ConstraintLoad) {
        if !self.registered {
            self.registered = true;
            self.shadowed = false;
            // A floor is only valid within one re-solve.
            self.floor = 0.0;
            self.floor_slope = 0.0;
            self.residual = load.unused();
            self.unit = load.n_non_unit == 0;
            self.non_unit_coef_sum = CompensatedSum::default();
            self.n_rising = 0;
        }
    }
}

impl ConstraintLoad {
    /// Capacity minus load, with the load's own rounding error kept.
    #[inline]
    fn unused(&self) -> CompensatedSum {
        let mut unused = CompensatedSum::new(self.capacity);
        unused.subtract(self.load_Bps);
        unused
    }

    /// Moves a flow's part of the load from k x `old_Bps` to k x `new_Bps`. The old part is
    /// taken off as it was put on (not k x the difference), so a flow leaves no rounding
    /// behind.
    #[inline]
    fn move_load(&mut self, k: f64, old_Bps: f64, new_Bps: f64) {
        // Compensated, it stays the sum of what the flows on it put on, to its own rounding:
        // never below 0 by more than that, so no clamp is needed.
        self.load_Bps.add_product(k, new_Bps);
        self.load_Bps.add_product(-k, old_Bps);
    }
}

/// A flow's part in the sharing state.
#[derive(Debug, Clone, Copy)]
struct FlowState {
    /// Current rate (0 when not transferring).
    rate: f64,
    /// Rate computed by the last re-solve, for the flows of `Sharing::region`.
    solved: f64,
    /// The bottleneck it was last certified with: a constraint saturated with no faster
    /// flow on it, or `CAPPED` (or `NO_BOTTLENECK` before its first solve). It stays valid
    /// until something on it changes, so only the flows it holds are checked then.
    bottleneck: u32,
    /// Its place in `Sharing::held[bottleneck]` (an entry elsewhere is stale).
    held_pos: u32,
    /// Awake and not yet frozen.
    rising: bool,
    /// In `Sharing::checks`.
    queued: bool,
    /// Has a finite rate cap (saves reading the cap, another array, for most flows).
    capped: bool,
    /// On its constraints' lists (between `attach` and `detach`).
    attached: bool,
}

impl Default for FlowState {
    fn default() -> Self {
        FlowState {
            rate: 0.0,
            solved: 0.0,
            bottleneck: NO_BOTTLENECK,
            held_pos: 0,
            rising: false,
            queued: false,
            capped: false,
            attached: false,
        }
    }
}

/// Rates of transferring flows, the flows on each constraint, and the re-solve workspace.
pub(crate) struct Sharing<'a> {
    /// Every usage list a flow can have: the activities' own, then the disruptions' reroutes.
    usage: &'a [Usage],
    /// The current usage list of each flow: `usage[span[f].0..span[f].1]`.
    span: Vec<(usize, usize)>,
    /// Capacity, load and top-rate bound of each constraint, read together.
    link: Vec<ConstraintLoad>,
    pub rate_cap: &'a [f64],
    /// Transferring flows on each constraint.
    pub on: Vec<Vec<Slot>>,
    /// Bit c set while `on[c]` is not empty: a full re-solve walks these constraints, in
    /// id order, where a walk of every list read each list's header (most are empty when a
    /// few collectives run on a large fabric).
    busy: Vec<u64>,
    /// For each entry of `usage` in use by a transferring flow, its position in
    /// `on[constraint]`.
    pos: Vec<u32>,
    /// Per-flow state, read together when a flow is checked, woken or frozen.
    fs: Vec<FlowState>,
    /// Whether each flow was woken in this re-solve: apart, as scans of a constraint's
    /// flows read it alone and a compact array stays in cache.
    in_region: Vec<bool>,
    /// Flows re-solved (woken) by the last call (their new rate is in `solved`).
    pub region: Vec<u32>,
    /// Dormant flows to check when the level reaches their rate, lowest first (ties by id);
    /// a flow woken meanwhile is skipped when it comes up. Each is one integer, the rate's
    /// bits (rates are positive, so they order as the rates do) above the flow's id:
    /// compared in one step where a (rate, id) pair took two.
    checks: BinaryHeap<Reverse<u128>>,
    /// Rising flows with a rate cap, keyed by it.
    caps: IndexedHeap,
    /// Constraints with rising flows, keyed by a lower bound of their saturation level.
    heap: IndexedHeap,
    /// The filling state of each constraint, in one place: a wake or a freeze reads and
    /// writes all of it (separate arrays cost a cache miss each).
    cs: Vec<ConstraintState>,
    /// Constraints where flows woke since keys were last set (`dirty` flags them).
    dirty_list: Vec<u32>,
    /// Constraints where something changed in this re-solve (`touched` flags them).
    constraints: Vec<u32>,
    scratch: Vec<(f64, f64, u32)>,
    /// Per constraint scanned in this re-solve (`ConstraintState::scanned`), its dormant
    /// flows faster than the level it was first saturated at (rate, coefficient, flow),
    /// less those since woken or overtaken: taking it again, at any level, needs no scan.
    faster: Vec<Vec<(f64, f64, u32)>>,
    /// Flows woken on each constraint in this re-solve (some may have frozen since), as
    /// lists linked from `ConstraintState::woken` through this arena (flow, next): the flows
    /// to freeze when it saturates, without scanning all its flows. One arena, appended
    /// in order and cleared per re-solve, stays in cache where a vector per constraint did
    /// not.
    woken: Vec<(u32, u32)>,
    /// Constraints with flows detached since the last re-solve (`left_any` flags them).
    left: Vec<u32>,
    /// Per constraint, a dormant flow on it that `faster_dormant` found faster than its bound
    /// in re-solve number `.0` (the re-solve under way is number `n_solves`).
    faster_witness: Vec<(u64, u32)>,
    /// The flows whose recorded bottleneck (`FlowState::bottleneck`) each constraint is,
    /// among stale entries (`is_held` tells them apart), and how many.
    held: Vec<Vec<u32>>,
    n_held: Vec<u32>,
    /// `resolve_full`'s rates, by flow id (sized at its first call).
    full_rates: Vec<f64>,
    /// Flows attached (transferring).
    pub n_attached: usize,
    /// Re-solves run, and flows they woke, over the whole run.
    pub n_solves: u64,
    pub n_solved_flows: u64,
    /// Times a transferring flow's bottleneck changed from one constraint (or its cap) to
    /// another, over the whole run (`RunOutput::n_bottleneck_moves`).
    pub n_bottleneck_moves: u64,
    /// Constraints taken at their lazy saturation level (`saturate`), and floors moved by
    /// a wake or a freeze instead (`RunOutput::n_saturations`, `n_floor_moves`).
    pub n_saturations: u64,
    pub n_floor_moves: u64,
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
        debug_assert_eq!(rate_cap.len(), n_acts);
        let n_c = capacity.len();
        Sharing {
            usage,
            span,
            link: capacity
                .iter()
                .map(|&capacity| ConstraintLoad {
                    capacity,
                    load_Bps: CompensatedSum::default(),
                    top_rate_bound: 0.0,
                    n_non_unit: 0,
                    n_flows: 0,
                    min_coefficient: f64::INFINITY,
                })
                .collect(),
            rate_cap,
            on: vec![Vec::new(); n_c],
            busy: vec![0; n_c.div_ceil(64)],
            pos: vec![0; usage.len()],
            fs: rate_cap
                .iter()
                .map(|cap| FlowState {
                    capped: cap.is_finite(),
                    ..FlowState::default()
                })
                .collect(),
            in_region: vec![false; n_acts],
            region: Vec::new(),
            checks: BinaryHeap::new(),
            // Sized only if a flow has a cap (an empty heap reads no position).
            caps: IndexedHeap::with_ids(if rate_cap.iter().any(|c| c.is_finite()) {
                n_acts
            } else {
                0
            }),
            heap: IndexedHeap::with_ids(n_c),
            cs: vec![ConstraintState::default(); n_c],
            dirty_list: Vec::new(),
            constraints: Vec::new(),
            scratch: Vec::new(),
            faster: vec![Vec::new(); n_c],
            woken: Vec::new(),
            left: Vec::new(),
            faster_witness: vec![(u64::MAX, 0); n_c],
            held: vec![Vec::new(); n_c],
            n_held: vec![0; n_c],
            full_rates: Vec::new(),
            n_attached: 0,
            n_solves: 0,
            n_solved_flows: 0,
            n_bottleneck_moves: 0,
            n_saturations: 0,
            n_floor_moves: 0,
        }
    }

    #[inline]
    pub fn usage_of(&self, f: u32) -> &'a [Usage] {
        let (begin, end) = self.span[f as usize];
        &self.usage[begin..end]
    }

    /// Gives flow `f` the usage list `usage[span.0..span.1]`. Refused while it is attached:
    /// its places on its constraints' lists are counted from its usage list.
    pub fn set_usage(&mut self, f: u32, span: (usize, usize)) -> crate::Result<()> {
        if self.fs[f as usize].attached {
            return Err(crate::Error::Internal(format!(
                "flow {f} was given a new usage list while transferring"
            )));
        }
        self.span[f as usize] = span;
        Ok(())
    }

    /// The constraint whose saturation sets flow `f`'s rate, `None` for a flow at its cap
    /// (or not solved yet): flows with the same one share its fair share.
    #[inline]
    pub fn bottleneck(&self, f: u32) -> Option<u32> {
        let b = self.fs[f as usize].bottleneck;
        (b < NO_BOTTLENECK).then_some(b)
    }

    /// Whether flow `f` is on its constraints (transferring).
    #[inline]
    pub fn is_attached(&self, f: u32) -> bool {
        self.fs[f as usize].attached
    }

    #[inline]
    pub fn capacity(&self, c: u32) -> f64 {
        self.link[c as usize].capacity
    }

    /// Current load of constraint `c`.
    #[inline]
    pub fn load(&self, c: u32) -> f64 {
        self.link[c as usize].load_Bps.value()
    }

    pub fn n_constraints(&self) -> usize {
        self.link.len()
    }

    /// Changes the capacity of constraint `c`, which must carry no flow.
    pub fn set_capacity(&mut self, c: u32, capacity: f64) {
        debug_assert!(self.on[c as usize].is_empty());
        self.link[c as usize].capacity = capacity;
    }

    /// Current rate of flow `f` (0 when not transferring).
    #[inline]
    pub fn rate(&self, f: u32) -> f64 {
        self.fs[f as usize].rate
    }

    /// Rate of flow `f` of `region` computed by the last re-solve.
    #[inline]
    pub fn solved(&self, f: u32) -> f64 {
        self.fs[f as usize].solved
    }

    /// Sets the rate of attached flow `f`, moving its part of each constraint's load with it;
    /// `changed(c)` sees each of its constraints.
    pub fn set_rate(&mut self, f: u32, rate: f64, mut changed: impl FnMut(u32)) {
        let old = std::mem::replace(&mut self.fs[f as usize].rate, rate);
        let base = self.span[f as usize].0;
        for (k, u) in self.usage_of(f).iter().enumerate() {
            let ci = u.constraint as usize;
            self.on[ci][self.pos[base + k] as usize].rate = rate;
            let link = &mut self.link[ci];
            changed(u.constraint);
            link.top_rate_bound = link.top_rate_bound.max(rate);
            link.move_load(u.coefficient, old, rate);
        }
    }

    /// Sets the rate of attached flow `f` alone, for `refresh_loads` to bring its
    /// constraints up to date: where a re-solve changes most rates, one pass over the
    /// constraints' lists costs far less than a write to each list per usage entry.
    #[inline]
    pub fn set_rate_deferred(&mut self, f: u32, rate: f64) {
        self.fs[f as usize].rate = rate;
    }

    /// Brings every constraint's list rates, load and top-rate bound up to its flows'
    /// rates, the load summed afresh; `changed(c)` sees each constraint with flows.
    pub fn refresh_loads(&mut self, mut changed: impl FnMut(u32)) {
        let (fs, usage, span) = (&self.fs, self.usage, &self.span);
        for c in set_bits(&self.busy) {
            let list = &mut self.on[c];
            let link = &mut self.link[c];
            let unit = link.n_non_unit == 0;
            let mut load = CompensatedSum::default();
            let mut top = 0.0f64;
            for slot in list.iter_mut() {
                let rate = fs[slot.flow as usize].rate;
                slot.rate = rate;
                top = top.max(rate);
                if unit {
                    load.add(rate);
                } else {
                    load.add_product(slot_coefficient(usage, span, slot), rate);
                }
            }
            link.load_Bps = load;
            link.top_rate_bound = top;
            changed(c as u32);
        }
    }

    /// Takes a flow off its constraints, and its load off theirs, noting its departure for
    /// the next `resolve`; its rate becomes 0. `changed(c)` sees each of its constraints.
    pub fn detach(&mut self, f: u32, mut changed: impl FnMut(u32)) {
        let base = self.span[f as usize].0;
        let old = std::mem::replace(&mut self.fs[f as usize].rate, 0.0);
        self.fs[f as usize].attached = false;
        self.n_attached -= 1;
        self.set_bottleneck(f, NO_BOTTLENECK);
        for (k, u) in self.usage_of(f).iter().enumerate() {
            let ci = u.constraint as usize;
            let list = &mut self.on[ci];
            let p = self.pos[base + k] as usize;
            list.swap_remove(p);
            if let Some(moved) = list.get(p) {
                self.pos[self.span[moved.flow as usize].0 + moved.entry as usize] = p as u32;
            }
            changed(u.constraint);
            let link = &mut self.link[ci];
            link.n_flows -= 1;
            if u.coefficient != 1.0 {
                link.n_non_unit -= 1;
            }
            if list.is_empty() {
                self.busy[ci / 64] &= !(1 << (ci % 64));
                link.min_coefficient = f64::INFINITY;
                // Exact zero, not rounding residue, once the constraint is idle.
                link.load_Bps = CompensatedSum::default();
            } else {
                link.move_load(u.coefficient, old, 0.0);
            }
            // The flows held there may speed up (they are checked at their rates).
            if !self.cs[ci].left_any {
                self.cs[ci].left_any = true;
                self.left.push(u.constraint);
            }
        }
    }

    /// Records `c` as flow `f`'s bottleneck. Its entry in the old bottleneck's `held` list
    /// goes stale rather than being taken out (a collective's flows leaving together would
    /// each move another entry): stale entries are dropped when the list is next read, or
    /// when they outnumber the live ones.
    fn set_bottleneck(&mut self, f: u32, c: u32) {
        let fi = f as usize;
        let old = self.fs[fi].bottleneck;
        if old == c {
            return;
        }
        if old != NO_BOTTLENECK && c != NO_BOTTLENECK {
            self.n_bottleneck_moves += 1;
        }
        if old < NO_BOTTLENECK {
            self.n_held[old as usize] -= 1;
        }
        if c < NO_BOTTLENECK {
            let ci = c as usize;
            // Before `f` points here: an old entry of its own in this list stays stale.
            if self.held[ci].len() >= 2 * self.n_held[ci] as usize + 16 {
                self.drop_stale_held(ci);
            }
            self.fs[fi].held_pos = self.held[ci].len() as u32;
            self.held[ci].push(f);
            self.n_held[ci] += 1;
        }
        self.fs[fi].bottleneck = c;
    }

    /// Whether entry `k` of constraint `ci`'s `held` list is live.
    #[inline]
    fn is_held(&self, ci: usize, k: usize) -> bool {
        let st = &self.fs[self.held[ci][k] as usize];
        st.bottleneck as usize == ci && st.held_pos as usize == k
    }

    fn drop_stale_held(&mut self, ci: usize) {
        let mut kept = 0;
        for k in 0..self.held[ci].len() {
            if self.is_held(ci, k) {
                let g = self.held[ci][k];
                self.held[ci][kept] = g;
                self.fs[g as usize].held_pos = kept as u32;
                kept += 1;
            }
        }
        self.held[ci].truncate(kept);
    }

    fn attach(&mut self, f: u32) {
        let base = self.span[f as usize].0;
        self.fs[f as usize].attached = true;
        self.n_attached += 1;
        for (k, u) in self.usage_of(f).iter().enumerate() {
            let load = &mut self.link[u.constraint as usize];
            load.n_flows += 1;
            if u.coefficient != 1.0 {
                load.n_non_unit += 1;
            }
            load.min_coefficient = load.min_coefficient.min(u.coefficient);
            let ci = u.constraint as usize;
            let list = &mut self.on[ci];
            if list.is_empty() {
                self.busy[ci / 64] |= 1 << (ci % 64);
            }
            self.pos[base + k] = list.len() as u32;
            list.push(Slot {
                flow: f,
                entry: k as u32,
                rate: self.fs[f as usize].rate,
            });
        }
    }

    /// Sizes the lists that many arrivals at once (a collective starting) grow, once
    /// rather than by doubling (each copy touches fresh memory, slow to map on a VM).
    fn reserve_for(&mut self, arrived: &[u32]) {
        let mut n_new = vec![0u32; self.on.len()];
        let mut n_entries = 0;
        for &f in arrived {
            for u in self.usage_of(f) {
                n_new[u.constraint as usize] += 1;
                n_entries += 1;
            }
        }
        for (list, n) in self.on.iter_mut().zip(n_new) {
            list.reserve(n as usize);
        }
        self.woken.reserve(n_entries);
        self.region.reserve(arrived.len());
    }

    /// Re-solves after the flows detached since the last call left and `arrived` flows (at
    /// rate 0) start transferring. Afterwards `region` lists the flows whose rate may have
    /// changed, with the new rates in `solved`; `rate` is not updated (the caller needs the
    /// old rates to integrate bytes).
    pub fn resolve(&mut self, arrived: &[u32]) -> crate::Result<()> {
        self.region.clear();
        if arrived.len() >= 4096 && arrived.len() >= self.on.len() {
            self.reserve_for(arrived);
        }
        for &f in arrived {
            self.attach(f);
            // Awake before any constraint is touched, so none counts as dormant.
            self.in_region[f as usize] = true;
            self.region.push(f);
        }
        for i in 0..self.left.len() {
            self.touch(self.left[i], 0.0);
        }
        for &f in arrived {
            self.rise(f, 0.0)?;
        }
        let mut result = self.fill();
        self.n_solves += 1;
        self.n_solved_flows += self.region.len() as u64;
        // Leave the workspace clean whatever happened.
        for &f in &self.region {
            self.in_region[f as usize] = false;
            let state = &mut self.fs[f as usize];
            if state.rising {
                state.rising = false;
                if result.is_ok() {
                    result = Err(crate::Error::InvalidArgument(format!(
                        "flow {f} uses no constraint and has no rate cap, so its rate is \
                         unbounded"
                    )));
                }
            }
        }
        self.heap.clear();
        self.caps.clear();
        for &c in &self.constraints {
            let ci = c as usize;
            let st = &mut self.cs[ci];
            // Every constraint left is touched, so is cleared here too.
            st.touched = false;
            st.registered = false;
            st.left_any = false;
            st.woken = NO_NODE;
            // Read only where it was set: the vector's header is another cache line.
            if st.scanned {
                st.scanned = false;
                self.faster[ci].clear();
            }
        }
        self.constraints.clear();
        self.woken.clear();
        self.left.clear();
        result
    }

    /// As `resolve`, but re-solving every transferring flow with the plain progressive
    /// filling (`solver::Filling`) instead of lazily: the same rates (to rounding), for a
    /// fraction of the lazy filling's bookkeeping per flow where most flows' rates change
    /// anyway (the fast mode's instants, where many finishes are taken at once). Afterwards
    /// `region` lists every transferring flow, each with its bottleneck recorded, so a lazy
    /// re-solve can follow.
    pub fn resolve_full(&mut self, arrived: &[u32], filling: &mut Filling) -> crate::Result<()> {
        self.region.clear();
        if arrived.len() >= 4096 && arrived.len() >= self.on.len() {
            self.reserve_for(arrived);
        }
        for &f in arrived {
            self.attach(f);
        }
        // Every transferring flow with a usage list once (a flow with none has only its cap,
        // and only an arrival has not been given it yet).
        filling.ensure(self.on.len(), self.fs.len());
        debug_assert!(self
            .on
            .iter()
            .enumerate()
            .all(|(c, list)| { list.is_empty() == (self.busy[c / 64] & (1 << (c % 64)) == 0) }));
        for c in set_bits(&self.busy) {
            filling.register(c as u32, self.link[c].capacity);
        }
        // In id order where most flows are attached: each flow's usage list, and its state
        // here and in the filling, are then read in memory order (in constraint order they
        // missed the cache at every flow).
        if 4 * self.n_attached >= self.fs.len() {
            for (f, state) in self.fs.iter().enumerate() {
                let (begin, end) = self.span[f];
                if state.attached && end > begin {
                    self.region.push(f as u32);
                }
            }
        } else {
            for c in set_bits(&self.busy) {
                self.region
                    .extend(self.on[c].iter().filter(|s| s.entry == 0).map(|s| s.flow));
            }
        }
        if self.full_rates.len() < self.fs.len() {
            self.full_rates.resize(self.fs.len(), 0.0);
        }
        let mut rates = std::mem::take(&mut self.full_rates);
        // Its lists are the filling's rows: every flow on them is in the region.
        let result = filling.solve_rows(&*self, &*self, &self.region, self.rate_cap, &mut rates);
        if result.is_ok() {
            for i in 0..self.region.len() {
                let f = self.region[i];
                self.fs[f as usize].solved = rates[f as usize];
                self.set_bottleneck(f, filling.bottleneck(f));
            }
            // An arrival with no usage is on no list: its rate is its cap.
            for &f in arrived {
                if self.usage_of(f).is_empty() {
                    self.fs[f as usize].solved = self.rate_cap[f as usize];
                    self.set_bottleneck(f, CAPPED);
                    self.region.push(f);
                }
            }
        }
        self.full_rates = rates;
        self.n_solves += 1;
        self.n_solved_flows += self.region.len() as u64;
        for &c in &self.left {
            self.cs[c as usize].left_any = false;
        }
        self.left.clear();
        result
    }

    /// The lazy progressive filling (module docs), in level order: dormant flows' checks
    /// first, then caps, then saturating constraints.
    fn fill(&mut self) -> crate::Result<()> {
        let mut level = 0.0f64;
        loop {
            self.set_dirty_keys();
            // Stored keys are lower bounds: freezing a flow only raises its constraints'
            // saturation levels, so a key is refreshed when it reaches the top.
            let top = loop {
                let Some((stored, c)) = self.heap.peek() else {
                    break None;
                };
                let key = self.saturation_key(c as usize);
                if key > stored {
                    self.heap.set(c, key);
                    continue;
                }
                break Some((key, c));
            };
            let key = top.map_or(f64::INFINITY, |t| t.0);
            let check = self
                .checks
                .peek()
                .map(|&Reverse(key)| (f64::from_bits((key >> 32) as u64), key as u32));
            let cap = self.caps.peek();
            match (check, cap, top) {
                (Some((r, g)), _, _) if r <= key && cap.is_none_or(|(x, _)| r <= x) => {
                    self.checks.pop();
                    self.fs[g as usize].queued = false;
                    level = level.max(r);
                    if !self.in_region[g as usize] {
                        match self.kept_bottleneck(g, level) {
                            Some(b) => {
                                self.set_bottleneck(g, b);
                                // Saturated at this level as `kept_bottleneck` counts it (its
                                // slack a hair or rounding), so its rising flows stop here,
                                // with g: else they would take the slack over their
                                // coefficients, which for a tiny one alone is rounding / 1e-9.
                                if b < NO_BOTTLENECK && self.cs[b as usize].n_rising > 0 {
                                    self.freeze_on(b, level);
                                }
                            }
                            None => self.rise(g, level)?,
                        }
                    }
                }
                (_, Some((x, f)), _) if x <= key => {
                    level = level.max(x);
                    self.freeze(f, x);
                    self.set_bottleneck(f, CAPPED);
                }
                (_, _, Some((key, c))) => {
                    // Rounding can put a key a hair below the level already reached.
                    level = level.max(key);
                    self.saturate(c, level)?;
                }
                _ => break,
            }
        }
        // A flow still rising is unbounded: `resolve` reports it as it cleans up.
        Ok(())
    }

    /// Sets the keys of the constraints where flows woke.
    fn set_dirty_keys(&mut self) {
        for i in 0..self.dirty_list.len() {
            let c = self.dirty_list[i];
            let ci = c as usize;
            self.cs[ci].dirty = false;
            if self.cs[ci].shadowed {
                continue;
            }
            // With no rising flow it stays only if its woken flows froze at once, leaving
            // it overloaded (see `freeze`).
            if self.cs[ci].n_rising > 0 || self.cs[ci].residual.value() < 0.0 {
                // A stored key need only be a lower bound (`fill` raises it when it reaches
                // the top): a key that rose is left as it is, which saves most moves.
                let key = self.saturation_key(ci);
                if self.heap.key(c).is_none_or(|stored| key < stored) {
                    self.heap.set(c, key);
                }
            } else {
                self.heap.remove(c);
            }
        }
        self.dirty_list.clear();
    }

    /// A lower bound of constraint `ci`'s saturation level: where its rising flows fill its
    /// residual, or its floor (all that is left when none rises).
    #[inline]
    fn saturation_key(&self, ci: usize) -> f64 {
        let st = &self.cs[ci];
        if st.n_rising == 0 {
            st.floor
        } else {
            (st.residual.value() / st.coef_sum()).max(st.floor)
        }
    }

    /// Constraint `c` reaches its lazy saturation level `level`. Dormant flows on it faster
    /// than that still rise in the true filling, so it saturates at the level x where the
    /// load with each of them at min(its rate, x) reaches capacity. Only those faster than x
    /// change (to x): they wake when the level gets there; then the rising flows freeze.
    fn saturate(&mut self, c: u32, level: f64) -> crate::Result<()> {
        let ci = c as usize;
        self.n_saturations += 1;
        let tangent_floor = (self.cs[ci].floor_slope > 0.0).then_some(self.cs[ci].floor);
        self.scratch.clear();
        let above = level * (1.0 + 1e-12);
        if self.cs[ci].scanned {
            // Scanned earlier in this re-solve, at a lower level: the dormant flows then
            // faster than that are all that can be faster now (the level only rises, and a
            // woken flow never turns dormant again), so none of its other flows is read.
            let in_region = &self.in_region;
            self.faster[ci].retain(|&(r, _, g)| r > above && !in_region[g as usize]);
            self.scratch.extend_from_slice(&self.faster[ci]);
        } else if self.link[ci].top_rate_bound > above {
            // Often no flow on it is that fast: then there is nothing to scan for.
            self.cs[ci].scanned = true;
            let unit = self.link[ci].n_non_unit == 0;
            let faster = &mut self.faster[ci];
            for s in &self.on[ci] {
                let g = s.flow as usize;
                if s.rate > above && !self.in_region[g] {
                    let k = if unit {
                        1.0
                    } else {
                        slot_coefficient(self.usage, &self.span, s)
                    };
                    faster.push((s.rate, k, s.flow));
                }
            }
            self.scratch.extend_from_slice(faster);
        }
        self.debug_check_floor(ci, tangent_floor);
        if self.scratch.is_empty() {
            self.freeze_on(c, level);
            return Ok(());
        }
        // Load at y: capacity - residual + y * coef_sum - sum over dormant flows faster
        // than y of k * (rate - y). Solved for y with the dormant flows faster than the last
        // solution, until none is slower: the solutions only rise, to the one sought.
        // In floats they need not: at the kink where a flow stops being faster (load there
        // equal to capacity within rounding), the sum without it can round below its rate
        // again, by the rounding of the load over the rising coefficients (1e-7 relative
        // for a coefficient of 1e-6 beside flows of 1000), and the rising flows froze there,
        // below a dormant flow they tie with. So each solution is kept at least the last.
        let mut last = f64::NEG_INFINITY;
        let (x, slope) = loop {
            // The residual plus the faster flows' k x rate is the small rest of large terms:
            // summed in the residual's own compensated sum, not after rounding it.
            let st = &self.cs[ci];
            let (mut room, mut sum_k) = (st.residual, 0.0);
            for &(r, k, _) in &self.scratch {
                room.add_product(k, r);
                sum_k += k;
            }
            // With no rising flow left (coef_sum 0), only the dormant ones rise.
            let slope = st.coef_sum() + sum_k;
            let x = (room.value() / slope).max(last);
            last = x;
            let before = self.scratch.len();
            self.scratch.retain(|t| t.0 > x);
            if self.scratch.len() == before {
                break (x, slope);
            }
            if self.scratch.is_empty() && self.cs[ci].n_rising == 0 {
                // Even with every dormant flow at its old rate it has room: nothing to do.
                self.heap.remove(c);
                self.cs[ci].floor = 0.0;
                self.cs[ci].floor_slope = 0.0;
                return Ok(());
            }
        };
        // A floor moved by wakes or freezes is a hair below the level it bounds (by
        // `FLOOR_ROUNDING`), so where it set the level the flows are frozen at x, taken
        // again at once, not a hair too low.
        let moved_floor = self.cs[ci].floor_slope > 0.0 && self.cs[ci].floor_moved;
        if x > level * (1.0 + 1e-12) || (moved_floor && x > level) {
            // The load is concave in the level (linear in the rising flows, min(rate, y) in
            // the dormant ones), so its tangent at x, of slope the rising coefficients plus
            // those of the dormant flows faster than x, bounds it from above below x.
            self.cs[ci].floor = x;
            self.cs[ci].floor_slope = slope;
            self.cs[ci].floor_moved = false;
            self.heap.set(c, x);
            return Ok(());
        }
        // They really drop to this level, and freeze here with the rising flows.
        for i in 0..self.scratch.len() {
            let g = self.scratch[i].2;
            self.drop_to(g, level, c);
        }
        self.freeze_on(c, level);
        Ok(())
    }

    /// Checks, in debug builds, that a floor with its tangent (`ConstraintState::floor`) was
    /// a lower bound of the constraint's saturation level: that the load there, the rising
    /// flows at the floor and the dormant ones at min(rate, floor) (`scratch` holds those
    /// faster than the level), is within the engine's tolerance of the capacity. A floor
    /// above the saturation level lets the level pass it, and overloads the constraint.
    fn debug_check_floor(&self, ci: usize, tangent_floor: Option<f64>) {
        if !cfg!(debug_assertions) {
            return;
        }
        let Some(floor) = tangent_floor else {
            return;
        };
        let st = &self.cs[ci];
        let (mut room, mut slope) = (st.residual, st.coef_sum());
        for &(r, k, _) in &self.scratch {
            if r > floor {
                room.add_product(k, r);
                slope += k;
            }
        }
        let over_Bps = floor * slope - room.value();
        assert!(
            over_Bps <= 1e-9 * self.link[ci].capacity,
            "constraint {ci}: at its floor {floor} its load is {over_Bps} B/s over capacity"
        );
    }

    /// Freezes every rising flow on constraint `c` at `level`.
    fn freeze_on(&mut self, c: u32, level: f64) {
        let ci = c as usize;
        let mut node = std::mem::replace(&mut self.cs[ci].woken, NO_NODE);
        while node != NO_NODE {
            let (g, next) = self.woken[node as usize];
            if self.fs[g as usize].rising {
                self.freeze(g, level);
                self.set_bottleneck(g, c);
            }
            node = next;
        }
        self.heap.remove(c);
        self.cs[ci].floor = 0.0;
        self.cs[ci].floor_slope = 0.0;
    }

    /// The bottleneck (or `CAPPED`) dormant flow `g` still has when the level reaches its
    /// rate (`level`), if any.
    fn kept_bottleneck(&mut self, g: u32, level: f64) -> Option<u32> {
        let r = self.fs[g as usize].rate;
        if self.fs[g as usize].capped && self.rate_cap[g as usize] <= r * (1.0 + TIE) {
            return Some(CAPPED);
        }
        for u in self.usage_of(g) {
            let ci = u.constraint as usize;
            let slack = if self.cs[ci].registered {
                self.cs[ci].residual.value() - level * self.cs[ci].coef_sum()
            } else {
                self.link[ci].unused().value()
            };
            // A rising flow with a smaller coefficient than g's would take the slack faster.
            let k_min = self.link[ci].min_coefficient.min(u.coefficient);
            if slack > SATURATED * k_min * r && slack > ROUNDING * self.link[ci].capacity {
                continue;
            }
            // The bound often settles it without a scan.
            let tied = r * (1.0 + TIE);
            if self.link[ci].top_rate_bound <= tied || !self.faster_dormant(ci, tied) {
                return Some(u.constraint);
            }
        }
        None
    }

    /// Whether a dormant flow on constraint `ci` is faster than `bound` (at or above the
    /// level); a scan of its flows makes `top_rate_bound` exact when there is none.
    fn faster_dormant(&mut self, ci: usize, bound: f64) -> bool {
        if self.cs[ci].scanned {
            // Its list holds every dormant flow faster than the level now (`saturate`),
            // and `bound` is above it.
            let in_region = &self.in_region;
            return self.faster[ci]
                .iter()
                .any(|&(r, _, g)| r > bound && !in_region[g as usize]);
        }
        // A dormant flow found faster by an earlier scan in this re-solve often still is.
        let (solve, g) = self.faster_witness[ci];
        if solve == self.n_solves && self.fs[g as usize].rate > bound && !self.in_region[g as usize]
        {
            return true;
        }
        let mut top = 0.0f64;
        for s in &self.on[ci] {
            if s.rate > bound && !self.in_region[s.flow as usize] {
                self.faster_witness[ci] = (self.n_solves, s.flow);
                return true;
            }
            top = top.max(s.rate);
        }
        self.link[ci].top_rate_bound = top;
        false
    }

    /// Puts flow `f` in the region re-solved, at `level`.
    // Forced: with the floors' arithmetic in `rise` the compiler stopped inlining it, for
    // 1-3% more instructions on the fat-tree runs (cachegrind).
    #[inline(always)]
    fn wake(&mut self, f: u32, level: f64) {
        // Its constraints are touched while it still counts as dormant there.
        for u in self.usage_of(f) {
            self.touch(u.constraint, level);
        }
        if !self.in_region[f as usize] {
            self.in_region[f as usize] = true;
            self.region.push(f);
        }
    }

    /// Wakes flow `f` (an arrival, or a dormant flow) at `level`: it rises from there.
    fn rise(&mut self, f: u32, level: f64) -> crate::Result<()> {
        let fi = f as usize;
        self.wake(f, level);
        self.fs[fi].rising = true;
        let old = self.fs[fi].rate;
        let mut n_own = 0;
        for u in self.usage_of(f) {
            let ci = u.constraint as usize;
            n_own += (self.link[ci].n_flows == 1) as u32;
            let st = &mut self.cs[ci];
            st.register(&self.link[ci]);
            // Counted at min(old, y) until now, at y from here on: at every level y from
            // here up (old <= level) the load grows by k x (y - old), and so does the line
            // that bounds it (`floor`): it reaches capacity at the weighted mean below.
            let k = u.coefficient;
            if st.floor_slope > 0.0 && old <= level {
                st.floor = (st.floor_slope * st.floor + k * old) / (st.floor_slope + k)
                    * (1.0 - FLOOR_ROUNDING);
                st.floor_slope += k;
                st.floor_moved = true;
                self.n_floor_moves += 1;
            } else if old < st.floor {
                // A plain lower bound x of the saturation level: with this flow rising it
                // is still at least min(x, old).
                st.floor = old;
                st.floor_slope = 0.0;
            }
            st.residual.add_product(u.coefficient, old);
            if !st.unit {
                st.non_unit_coef_sum.add(u.coefficient);
            }
            st.n_rising += 1;
            let next = std::mem::replace(&mut st.woken, self.woken.len() as u32);
            // Waking can lower a key as well as raise it: it is set exactly before the
            // next step, once for all the flows woken meanwhile.
            let newly_dirty = !std::mem::replace(&mut st.dirty, true);
            self.woken.push((f, next));
            if newly_dirty {
                self.dirty_list.push(u.constraint);
            }
        }
        if n_own > 1 {
            self.shadow_own_but_lowest(f);
        }
        if self.fs[fi].capped {
            self.caps.set(f, self.rate_cap[fi].max(level));
        }
        Ok(())
    }

    /// Of the constraints rising flow `f` alone uses, marks all but the lowest (by key, then
    /// id, as the heap orders them) `shadowed`, to be kept out of the heap. Each was
    /// registered by this rise, so its key is its capacity over the coefficient (no floor)
    /// and stays so while `f` rises: the lowest is taken first and freezes `f` if nothing
    /// did before, and the others could only be taken once `f` froze, saturating nothing
    /// (`freeze` puts back one that rounding left overloaded, to be taken as such). A ring's
    /// flow has one for every link that only it crosses; each cost a sift in and out.
    fn shadow_own_but_lowest(&mut self, f: u32) {
        let own = |u: &&Usage| self.link[u.constraint as usize].n_flows == 1;
        let key = |c: u32| self.saturation_key(c as usize);
        let lowest = self
            .usage_of(f)
            .iter()
            .filter(own)
            .map(|u| (key(u.constraint), u.constraint))
            .reduce(|a, b| if IndexedHeap::less(b, a) { b } else { a })
            .map(|(_, c)| c);
        for u in self.usage_of(f) {
            if self.link[u.constraint as usize].n_flows == 1 && Some(u.constraint) != lowest {
                self.cs[u.constraint as usize].shadowed = true;
            }
        }
    }

    /// Wakes dormant flow `g` and freezes it at once at `level`, with bottleneck `c`: a rise
    /// and a freeze without what the freeze undoes. Its share on its other constraints only
    /// shrinks (from its old rate to `level`), so their keys and floors stay lower bounds.
    fn drop_to(&mut self, g: u32, level: f64, c: u32) {
        let gi = g as usize;
        self.wake(g, level);
        self.fs[gi].solved = level;
        let old = self.fs[gi].rate;
        for u in self.usage_of(g) {
            let ci = u.constraint as usize;
            let st = &mut self.cs[ci];
            st.register(&self.link[ci]);
            st.residual.add_product(u.coefficient, old);
            st.residual.add_product(-u.coefficient, level);
            if st.n_rising > 0 {
                continue;
            }
            // As in `freeze` when the last rising flow leaves.
            if st.residual.value() < 0.0 {
                if level > st.floor {
                    st.floor = level;
                    st.floor_slope = 0.0;
                }
                if !self.heap.contains(u.constraint) {
                    self.heap.set(u.constraint, st.floor);
                }
            } else {
                st.floor = 0.0;
                st.floor_slope = 0.0;
                self.heap.remove(u.constraint);
            }
        }
        self.set_bottleneck(g, c);
    }

    /// Freezes rising flow `f` at `rate`, taking its share off its constraints.
    fn freeze(&mut self, f: u32, rate: f64) {
        self.fs[f as usize].rising = false;
        self.fs[f as usize].solved = rate;
        self.caps.remove(f);
        for u in self.usage_of(f) {
            let st = &mut self.cs[u.constraint as usize];
            st.residual.add_product(-u.coefficient, rate);
            st.n_rising -= 1;
            // From k x y to k x rate at every level y from here (rate) up: the line that
            // bounds the load loses k of its slope and reaches capacity higher. Where that
            // leaves too little slope for the floor to be well conditioned, it is kept as a
            // plain lower bound (the load only fell).
            if st.floor_slope > 0.0 {
                let k = u.coefficient;
                let slope = st.floor_slope - k;
                if slope >= 0.5 * st.floor_slope {
                    st.floor =
                        (st.floor_slope * st.floor - k * rate) / slope * (1.0 - FLOOR_ROUNDING);
                    st.floor_slope = slope;
                    st.floor_moved = true;
                    self.n_floor_moves += 1;
                } else {
                    st.floor_slope = 0.0;
                }
            }
            if st.n_rising > 0 {
                if !st.unit {
                    st.non_unit_coef_sum.add(-u.coefficient);
                }
                continue;
            }
            st.non_unit_coef_sum = CompensatedSum::default();
            // Overloaded as the stand-in counts it, it has dormant flows faster than the
            // level: it stays until they are dealt with (at a level no lower).
            if st.residual.value() < 0.0 {
                if rate > st.floor {
                    st.floor = rate;
                    st.floor_slope = 0.0;
                }
                if std::mem::replace(&mut st.shadowed, false) {
                    self.heap.set(u.constraint, st.floor);
                }
            } else {
                st.floor = 0.0;
                st.floor_slope = 0.0;
                if !st.shadowed {
                    self.heap.remove(u.constraint);
                }
            }
        }
    }

    /// The first change on constraint `c` in this re-solve, at `level`: the dormant flows
    /// it holds as their bottleneck may lose it, so each is checked when the level reaches
    /// its rate.
    #[inline]
    fn touch(&mut self, c: u32, level: f64) {
        // Most calls (every wake touches all its flow's constraints) find it touched: that
        // test is inlined, the first touch is not.
        if !self.cs[c as usize].touched {
            self.touch_first(c, level);
        }
    }

    #[inline(never)]
    fn touch_first(&mut self, c: u32, level: f64) {
        let ci = c as usize;
        self.cs[ci].touched = true;
        self.constraints.push(c);
        // Stale entries are dropped on the way.
        let mut kept = 0;
        for k in 0..self.held[ci].len() {
            if !self.is_held(ci, k) {
                continue;
            }
            let g = self.held[ci][k];
            let st = &mut self.fs[g as usize];
            if kept != k {
                self.held[ci][kept] = g;
                st.held_pos = kept as u32;
            }
            kept += 1;
            // Before its first change every flow on it but the arrivals is dormant.
            debug_assert!(!self.in_region[g as usize]);
            if st.rate >= level && !st.queued {
                st.queued = true;
                let key = (u128::from(st.rate.to_bits()) << 32) | u128::from(g);
                self.checks.push(Reverse(key));
            }
        }
        self.held[ci].truncate(kept);
    }
}

impl RowFlows for Sharing<'_> {
    #[inline]
    fn row_len(&self, c: u32) -> usize {
        self.on[c as usize].len()
    }

    #[inline]
    fn row_flow(&self, c: u32, i: usize) -> u32 {
        self.on[c as usize][i].flow
    }
}

impl Rows for Sharing<'_> {
    fn row_coef_sum(&self, c: u32) -> f64 {
        let list = &self.on[c as usize];
        if self.link[c as usize].n_non_unit == 0 {
            return list.len() as f64;
        }
        let mut sum = CompensatedSum::default();
        for slot in list {
            sum.add(slot_coefficient(self.usage, &self.span, slot));
        }
        sum.value()
    }
}

impl Incidence for Sharing<'_> {
    #[inline]
    fn usage(&self, f: u32) -> &[Usage] {
        self.usage_of(f)
    }
}

#[cfg(test)]
mod tests {
    use super::set_bits;
    use crate::rng::Rng;

    #[test]
    fn set_bits_lists_every_set_bit_in_order() {
        let mut rng = Rng::new(7);
        for _ in 0..200 {
            let words: Vec<u64> = (0..rng.below(5))
                .map(|_| match rng.below(4) {
                    0 => 0,
                    1 => u64::MAX,
                    _ => rng.next_u64() & rng.next_u64(),
                })
                .collect();
            let expect: Vec<usize> = (0..64 * words.len())
                .filter(|&i| words[i / 64] >> (i % 64) & 1 == 1)
                .collect();
            assert_eq!(set_bits(&words).collect::<Vec<_>>(), expect);
        }
    }
}
