//! A scenario: a fabric plus a DAG of flows (between nodes, routed) and delays.
//! Routing turns each flow's path into a usage list; the engine then runs activities.
//!
//! The engine only sees the constraints some flow uses, numbered densely in order of first
//! use: a million-GPU fabric has tens of millions of links, and a run pays for the ones in play.
//!
//! Faults at a time (`add_fault`) become engine disruptions when the scenario runs: at each
//! fault time the fabric takes its new link capacities, and every flow whose path was chosen
//! by routing is routed again on it (with the same flow key and seed, so ECMP re-hashes over
//! the survivors exactly as on a fabric failed before the run); flows whose path changes are
//! rerouted, flows left without a path fail if they transfer then or when they would start.
//! A rerouted flow keeps the latency of its first path. Flows given explicit routes keep
//! them. On a fabric failed before the run, a flow with no surviving path is accepted and
//! fails in its row when it would start (unless a repair comes first).
//!
//! A run first compiles the scenario for the engine (`spread`): where flows pinned to a
//! member of a pooled bundle meet flows sprayed over it, or a fault changes a bundle's
//! members' shares, the usage lists gain what makes even spreading exact.

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::{self, Activities, Disruption, Kind, Progress, RunOptions, RunOutput};
use crate::error::{shown, Error, Result};
use crate::ids::{ActivityId, LinkId, NodeId};
use crate::rng::ecmp_hash;
use crate::routing::structured::{self, Routed, Traffic};
use crate::routing::{check_route, Router};
use crate::solver::Usage;
use crate::topology::fabric::{Fabric, Mode};
use crate::topology::Topology;

mod spread;
mod template;

pub use template::Template;

/// No node, no tag.
pub const NONE: u32 = u32::MAX;

/// How a flow's path was chosen, so that a fault can choose it again.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PathChoice {
    /// Given by the caller (or a delay): kept through faults.
    Given,
    /// Routed with these modes per tier, as this kind of traffic.
    Routed([Mode; 2], Traffic),
    /// A coupled flow: its edges, `Scenario::coupled[i]`, routed and combined.
    Coupled(u32),
}

/// How the routes of a coupled flow's edges combine on a constraint they share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// Pipelined point-to-point edges (a ring, a tree): each edge carries its own bytes, so
    /// coefficients add.
    Sum,
    /// Reduction trees through switches that reduce (SHARP, NVLS): what several edges of one
    /// tree (`Edge::tree`) send through one link is reduced to one stream, so the largest
    /// coefficient counts; the streams of different trees (the rails of NVLS+SHARP, each its
    /// own SHARP tree) add on a link they both cross.
    Max,
}

/// Which part of its route an edge of a coupled flow loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leg {
    /// The whole route.
    Whole,
    /// From the source into the network: the route less its links into the destination. A
    /// GPU sending into the switches that reduce (NVLS), where a whole edge to a peer would
    /// also load the peer's links with what only the switches receive.
    Up,
    /// From the network to the destination: the route less its links out of the source (the
    /// switches sending a GPU the result).
    Down,
}

/// One edge of a coupled flow: `coefficient` bytes per byte of the flow on `leg` of the route
/// from `src` to `dst`, part of reduction tree `tree` (read only under `Combine::Max`).
#[derive(Debug, Clone, Copy)]
pub struct Edge {
    pub src: u32,
    pub dst: u32,
    pub coefficient: f64,
    pub leg: Leg,
    pub tree: u32,
}

/// One coupled flow's recipe (docs/design.md section 2): edges, routed with `modes`, combined,
/// plus usage of scenario constraints (reduction engines) in fabric-constraint numbering.
#[derive(Debug, Clone)]
pub struct Coupled {
    pub edges: Vec<Edge>,
    pub combine: Combine,
    pub engines: Vec<Usage>,
    modes: [Mode; 2],
}

/// Links whose capacity becomes `factor` times nominal at `time_s`.
#[derive(Debug, Clone)]
struct Fault {
    time_s: f64,
    links: Vec<u32>,
    factor: f64,
}

/// A finished run and the fabric constraints of its engine constraints.
pub struct Ran {
    pub out: RunOutput,
    /// Fabric constraint of each engine constraint past `Scenario::constraint_of`: those
    /// only paths chosen after a fault use.
    pub extra_constraints: Vec<u32>,
    /// The link each of the run's meters (`RunOutput::meter_*`) measures: the links more
    /// than one engine constraint loads.
    pub metered_links: Vec<u32>,
    /// How the engine constraints' loads fall on links.
    pub split: Split,
}

/// How a run's engine constraints load links where even spreading (src/scenario/spread.rs)
/// changed the usage lists.
#[derive(Debug, Clone, Default)]
pub struct Split {
    /// Bundle members whose own constraint carries their share of every sprayed flow
    /// (sorted): their bundle's load is in theirs already.
    pub spread_links: Vec<u32>,
    /// Engine constraints that stand for a bundle while its members' shares differ from
    /// those on the scenario's fabric (after a fault), with those shares: (constraint,
    /// [(member, share)]), sorted by constraint.
    pub resplit: Vec<(u32, Vec<(u32, f64)>)>,
}

impl Split {
    /// Calls `f(link, share)` for each link engine constraint `e` (fabric constraint `c`)
    /// loads, as `for_each_link_share` does, except for the spread members of a bundle and
    /// with a resplit bundle's own shares.
    pub fn for_each_link_share(
        &self,
        fabric: &Fabric,
        e: u32,
        c: u32,
        mut f: impl FnMut(u32, f64),
    ) {
        // `l == c`: the constraint is that link itself.
        let mut g = |l: u32, share: f64| {
            if l == c || self.spread_links.binary_search(&l).is_err() {
                f(l, share)
            }
        };
        match self.resplit.binary_search_by_key(&e, |r| r.0) {
            Ok(i) => self.resplit[i].1.iter().for_each(|&(l, share)| g(l, share)),
            Err(_) => for_each_link_share(fabric, c, g),
        }
    }
}

/// Calls `f(link, share)` for each link fabric constraint `c` loads, with the share of the
/// constraint's load it carries: all of it for a link, its part of the capacity for a
/// bundle's member (an even split if the bundle has none left); nothing for an engine.
pub fn for_each_link_share(fabric: &Fabric, c: u32, mut f: impl FnMut(u32, f64)) {
    let n_links = fabric.n_links() as u32;
    if c < n_links {
        return f(c, 1.0);
    }
    if c as usize >= fabric.n_constraints() {
        return; // a reduction engine, not a link
    }
    let bundle = c - n_links;
    let total = fabric.bundle_capacity_Bps()[bundle as usize];
    let link_cap = fabric.link_capacity_Bps();
    let mut n_members = 0usize;
    if total <= 0.0 {
        fabric.for_each_bundle_member(bundle, |_| n_members += 1);
    }
    fabric.for_each_bundle_member(bundle, |l| {
        f(
            l,
            if total > 0.0 {
                link_cap[l as usize] / total
            } else {
                1.0 / n_members as f64
            },
        )
    });
}

impl Ran {
    /// Fabric constraint of engine constraint `e`.
    pub fn fabric_constraint(&self, sc: &Scenario, e: usize) -> u32 {
        let first = sc.constraint_of();
        match first.get(e) {
            Some(&c) => c,
            None => self.extra_constraints[e - first.len()],
        }
    }
}

/// Memory one flow of a two-link route takes from adding to results, measured on a
/// million-flow all-to-all: about 150 B of scenario state, 120 B of result rows and the
/// engine's per-flow state at the peak of the run. Longer routes take more, so this refuses
/// only what cannot fit.
const BYTES_PER_FLOW: f64 = 380.0;

/// Memory of each usage entry past the two of `BYTES_PER_FLOW`'s route: 16 B in the
/// scenario's usage list (32 while the list doubles), 16 in the copy a run compiles and 40 in
/// the engine's run (its own per-entry estimate); and of each link of a route past two, 4 B
/// (8 while the list doubles). A flow along a path of 2,000,000 links takes 192 MB: 60 of
/// them grew the process by 2.5 GB before anything was checked (issue 24, defect 7).
const BYTES_PER_ENTRY: f64 = 88.0;
const BYTES_PER_ROUTE_LINK: f64 = 8.0;

/// Growth of the estimate between two checks of the memory available while flows are added
/// one by one (each check reads /proc/meminfo): at most 1/16 of the estimate and 64 MiB.
const ROOM_CHECK_STEP_BYTES: f64 = 64.0 * 1024.0 * 1024.0;

#[derive(Debug, Clone)]
pub struct Scenario {
    fabric: Arc<Fabric>,
    /// Routing of the scale-up and the scale-out tier.
    modes: [Mode; 2],
    seed: u64,
    router: Router,
    acts: Activities,
    /// Per activity: flow endpoints (NONE for delays) and tag index (NONE for no tag).
    src: Vec<u32>,
    dst: Vec<u32>,
    tag: Vec<u32>,
    tag_names: Vec<String>,
    tag_index: HashMap<String, u32>,
    /// Per activity: the links of its route in path order (empty for delays).
    route_offsets: Vec<usize>,
    route_links: Vec<u32>,
    /// Dense engine constraint of each fabric constraint (NONE until a flow uses it), and back,
    /// and the activity that first used each (numbered in order of first use, so a rejected
    /// or truncated activity's constraints are a tail to forget).
    compact_of: Vec<u32>,
    constraint_of: Vec<u32>,
    first_user: Vec<u32>,
    routed: Routed,
    /// Per activity: how its path was chosen.
    choice: Vec<PathChoice>,
    /// Flows added with no surviving path on the failed fabric (they hold a nominal path).
    unrouted: Vec<u32>,
    /// The fabric without its faults, once a flow needed it.
    nominal: Option<Arc<Fabric>>,
    faults: Vec<Fault>,
    coupled: Vec<Coupled>,
    /// Capacities of the scenario's own constraints (reduction engines), numbered after the
    /// fabric's constraints.
    engine_capacity: Vec<f64>,
    /// `BYTES_PER_ENTRY` times the usage entries and route links of every flow past its first
    /// two: the memory of long routes, which `BYTES_PER_FLOW` does not count.
    long_route_bytes: f64,
    /// The memory estimate past which the next flow is checked against the memory available.
    next_room_check: f64,
}

/// Where a flow's path comes from.
pub enum Route<'r> {
    /// From the fabric's structure where it has one (ECMP or spraying per tier), else ECMP
    /// over shortest paths; hashed on the flow's id and the scenario seed. One connection:
    /// under ECMP on one port of one plane.
    Ecmp,
    /// As `Ecmp`, for a collective's transfer: it stands for NCCL channels, striped over the
    /// NIC's ports (`Traffic::Channels`), so under ECMP it splits over the planes and is hashed
    /// within each.
    Striped,
    /// The given links, checked to form a path from src to dst.
    Links(&'r [LinkId]),
}

impl Scenario {
    pub fn new(fabric: Arc<Fabric>, seed: u64) -> Self {
        let modes = fabric.default_modes;
        Scenario {
            fabric,
            modes,
            seed,
            router: Router::new(),
            acts: Activities::new(),
            src: Vec::new(),
            dst: Vec::new(),
            tag: Vec::new(),
            tag_names: Vec::new(),
            tag_index: HashMap::new(),
            route_offsets: vec![0],
            route_links: Vec::new(),
            compact_of: Vec::new(),
            constraint_of: Vec::new(),
            first_user: Vec::new(),
            routed: Routed::default(),
            choice: Vec::new(),
            unrouted: Vec::new(),
            nominal: None,
            faults: Vec::new(),
            coupled: Vec::new(),
            engine_capacity: Vec::new(),
            long_route_bytes: 0.0,
            next_room_check: 0.0,
        }
    }

    pub fn topology(&self) -> &Arc<Topology> {
        self.fabric.topology()
    }

    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// Sets how flows added from now on cross the scale-up and scale-out tiers.
    pub fn set_modes(&mut self, modes: [Mode; 2]) {
        self.modes = modes;
    }

    pub fn modes(&self) -> [Mode; 2] {
        self.modes
    }

    /// Fabric constraint (link, then bundle) of each engine constraint.
    pub fn constraint_of(&self) -> &[u32] {
        &self.constraint_of
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn activities(&self) -> &Activities {
        &self.acts
    }

    /// Refuses, before anything is built, `n_flows` more flows that could not be run in the
    /// memory available (their scenario state, the engine's and their result rows).
    pub fn check_room_for_flows(&self, n_flows: usize) -> Result<()> {
        crate::memory::check_fits(
            &format!(
                "{n_flows} more flows (with the {} already added) and their run",
                self.acts.len()
            ),
            (n_flows + self.acts.len()) as f64 * BYTES_PER_FLOW + self.long_route_bytes,
        )
    }

    /// Memory of a flow's usage entries and route links past the two `BYTES_PER_FLOW` counts.
    fn long_route_bytes_of(n_entries: usize, n_links: usize) -> f64 {
        BYTES_PER_ENTRY * n_entries.saturating_sub(2) as f64
            + BYTES_PER_ROUTE_LINK * n_links.saturating_sub(2) as f64
    }

    /// Refuses, before it is stored, a flow whose route (`n_entries` usage entries, `n_links`
    /// links) would take the scenario and its run past the memory available. Long routes are
    /// what `check_room_for_flows`, made before flows are routed, cannot see; the memory is
    /// read again only once the estimate has grown by `ROOM_CHECK_STEP_BYTES` or 1/16.
    fn check_room_for_route(&mut self, n_entries: usize, n_links: usize) -> Result<()> {
        let extra = Self::long_route_bytes_of(n_entries, n_links);
        if extra == 0.0 {
            return Ok(());
        }
        let needed = (self.acts.len() + 1) as f64 * BYTES_PER_FLOW + self.long_route_bytes + extra;
        if needed > self.next_room_check {
            crate::memory::check_fits(
                &format!(
                    "a flow with a route of {n_entries} usage entries, with the {} activities \
                     already added, and their run",
                    self.acts.len()
                ),
                needed,
            )?;
            self.next_room_check = needed + (needed / 16.0).min(ROOM_CHECK_STEP_BYTES);
        }
        Ok(())
    }

    pub fn n_activities(&self) -> usize {
        self.acts.len()
    }

    /// Adds a flow of `bytes` from `src` to `dst`; returns its activity id.
    #[allow(clippy::too_many_arguments)]
    pub fn add_flow(
        &mut self,
        src: NodeId,
        dst: NodeId,
        bytes: f64,
        start_s: f64,
        after: &[ActivityId],
        route: Route<'_>,
        tag: Option<&str>,
        rate_cap_Bps: f64,
    ) -> Result<ActivityId> {
        let fabric = Arc::clone(&self.fabric);
        let id = self.acts.len() as u64;
        let mut routed = std::mem::take(&mut self.routed);
        let mut unrouted = false;
        let (choice, found) = match route {
            Route::Ecmp | Route::Striped => {
                let traffic = match route {
                    Route::Striped => Traffic::Channels,
                    _ => Traffic::Connection,
                };
                let modes = self.modes;
                let seed = self.seed;
                let found = self.route_or_nominal(|fabric, router| {
                    route_on(
                        fabric,
                        router,
                        traffic,
                        src,
                        dst,
                        id,
                        seed,
                        modes,
                        &mut routed,
                    )
                });
                let found = found.map(|nominal_only| unrouted = nominal_only);
                (PathChoice::Routed(modes, traffic), found)
            }
            Route::Links(links) => {
                // Checked against nominal capacities: a given route over a down link is
                // accepted, and the flow fails when it would transfer on it.
                let topo = fabric.topology();
                let found = check_route(topo, topo.capacity_Bps(), src, dst, links).map(|_| {
                    routed.clear();
                    for l in links {
                        routed.link(&fabric, l.0);
                    }
                });
                (PathChoice::Given, found)
            }
        };
        if let Err(e) = found {
            self.routed = routed;
            return Err(e);
        }
        if let Err(e) = self.check_room_for_route(routed.usage.len(), routed.links.len()) {
            self.routed = routed;
            return Err(e);
        }
        for u in routed.usage.iter_mut() {
            u.constraint = self.compact(u.constraint);
        }
        let added = if routed.latency_s.is_finite() {
            self.acts.add_flow(
                bytes,
                &routed.usage,
                routed.latency_s,
                start_s,
                rate_cap_Bps,
                after,
            )
        } else {
            // Finite link latencies whose sum overflows: the core's check would name a
            // latency_s the caller never gave.
            Err(Error::InvalidArgument(format!(
                "the route from node {} to node {} has a latency of {} s (its links' \
                 latency_s added up): beyond what double precision holds",
                src.0,
                dst.0,
                shown(routed.latency_s)
            )))
        };
        match added {
            Ok(a) => {
                self.long_route_bytes +=
                    Self::long_route_bytes_of(routed.usage.len(), routed.links.len());
                self.route_links.extend_from_slice(&routed.links);
                self.push_meta(src.0, dst.0, tag, choice);
                if unrouted {
                    self.unrouted.push(a.0);
                }
            }
            Err(_) => self.forget_constraints_from(id as usize),
        }
        self.routed = routed;
        added
    }

    /// Runs `route` on the fabric; if down links (not the topology) leave no path, runs it
    /// on the fabric without faults instead and returns true: the flow is added holding that
    /// path and fails in its row when it would start.
    fn route_or_nominal(
        &mut self,
        mut route: impl FnMut(&Fabric, &mut Router) -> Result<()>,
    ) -> Result<bool> {
        let fabric = Arc::clone(&self.fabric);
        match route(&fabric, &mut self.router) {
            Err(Error::ZeroCapacityPath(_)) if fabric.has_faults() => {
                let nominal = self.nominal_fabric()?;
                route(&nominal, &mut Router::new())?;
                Ok(true)
            }
            other => other.map(|()| false),
        }
    }

    fn nominal_fabric(&mut self) -> Result<Arc<Fabric>> {
        if self.nominal.is_none() {
            self.nominal = Some(Arc::new(self.fabric.without_faults()?));
        }
        Ok(Arc::clone(self.nominal.as_ref().expect("set above")))
    }

    /// From `time_s` on, `links` carry `factor` (in [0, 1]) times their nominal capacity
    /// (0 = down, 1 = repaired); the last fault on a link counts.
    pub fn add_fault(&mut self, time_s: f64, links: &[u32], factor: f64) -> Result<()> {
        crate::error::check_non_negative("fault time_s", time_s)?;
        crate::topology::fabric::check_factor(factor)?;
        if links.is_empty() {
            return Err(Error::InvalidArgument(
                "a fault needs at least one link".into(),
            ));
        }
        for &l in links {
            self.fabric.topology().link(l as i64)?;
        }
        self.faults.push(Fault {
            time_s,
            links: links.to_vec(),
            factor,
        });
        Ok(())
    }

    pub fn n_faults(&self) -> usize {
        self.faults.len()
    }

    /// Forgets faults `n..` (undoes a change that failed partway).
    pub fn truncate_faults(&mut self, n: usize) {
        self.faults.truncate(n);
    }

    /// A constraint of the scenario's own (a switch's reduction engine) of `capacity_Bps`;
    /// returns its id in fabric-constraint numbering (after the fabric's links and bundles).
    pub fn add_engine(&mut self, capacity_Bps: f64) -> Result<u32> {
        if !(capacity_Bps.is_finite() && capacity_Bps > 0.0) {
            return Err(Error::InvalidArgument(format!(
                "engine capacity_Bps must be a finite number > 0, got {}",
                shown(capacity_Bps)
            )));
        }
        crate::error::check_capacity("engine capacity_Bps", capacity_Bps)?;
        self.engine_capacity.push(capacity_Bps);
        Ok((self.fabric.n_constraints() + self.engine_capacity.len() - 1) as u32)
    }

    /// Capacity of fabric-numbered constraint `c` on `fabric` (this scenario's fabric, or
    /// it with faults).
    fn capacity_on(&self, fabric: &Fabric, c: u32) -> f64 {
        let n = fabric.n_constraints();
        match (c as usize).checked_sub(n) {
            Some(k) => self.engine_capacity[k],
            None => fabric.constraint_capacity_Bps(c),
        }
    }

    /// Adds a coupled flow (docs/design.md section 2): one flow of `bytes` whose usage is its
    /// edges' routes, each scaled by the edge's coefficient and combined by `combine`, plus
    /// `engines` (scenario constraints from `add_engine`). `latency_s` is the algorithm's
    /// latency term, waited before the transfer; `rate_cap_Bps` caps its rate (infinity for
    /// none). Routes follow the scenario's modes, an edge striped over the planes of a tier
    /// routed by ECMP (`route_coupled`); faults route the edges again.
    #[allow(clippy::too_many_arguments)]
    pub fn add_coupled_flow(
        &mut self,
        edges: Vec<Edge>,
        combine: Combine,
        engines: Vec<Usage>,
        bytes: f64,
        latency_s: f64,
        start_s: f64,
        after: &[ActivityId],
        tag: Option<&str>,
        rate_cap_Bps: f64,
    ) -> Result<ActivityId> {
        if edges.is_empty() {
            return Err(Error::InvalidArgument(
                "a coupled flow needs at least one edge".into(),
            ));
        }
        crate::error::check_non_negative("latency_s of a coupled flow", latency_s)?;
        let n_fabric = self.fabric.n_constraints();
        for (i, e) in edges.iter().enumerate() {
            let topo = self.fabric.topology();
            topo.node("src", e.src as i64)?;
            topo.node("dst", e.dst as i64)?;
            let coef = e.coefficient;
            if !(coef.is_finite() && coef > 0.0) {
                return Err(Error::InvalidArgument(format!(
                    "edge {i} of a coupled flow has coefficient {}; expected a finite number > 0",
                    shown(coef)
                )));
            }
        }
        for u in &engines {
            let k = (u.constraint as usize).checked_sub(n_fabric);
            if k.is_none_or(|k| k >= self.engine_capacity.len()) {
                return Err(Error::InvalidArgument(format!(
                    "constraint {} is not an engine of this scenario (engines are {}..{})",
                    u.constraint,
                    n_fabric,
                    n_fabric + self.engine_capacity.len()
                )));
            }
        }
        let id = self.acts.len() as u32;
        let recipe = Coupled {
            edges,
            combine,
            engines,
            modes: self.modes,
        };
        let mut routed = std::mem::take(&mut self.routed);
        let mut usage = Vec::new();
        let seed = self.seed;
        let found = self.route_or_nominal(|fabric, router| {
            route_coupled(fabric, router, &recipe, id, seed, &mut routed, &mut usage)
        });
        self.routed = routed;
        let unrouted = found?;
        self.check_room_for_route(usage.len(), 0)?;
        for u in usage.iter_mut() {
            u.constraint = self.compact(u.constraint);
        }
        let a = self
            .acts
            .add_flow(bytes, &usage, latency_s, start_s, rate_cap_Bps, after)
            .inspect_err(|_| self.forget_constraints_from(id as usize))?;
        self.long_route_bytes += Self::long_route_bytes_of(usage.len(), 0);
        self.push_meta(
            NONE,
            NONE,
            tag,
            PathChoice::Coupled(self.coupled.len() as u32),
        );
        self.coupled.push(recipe);
        if unrouted {
            self.unrouted.push(a.0);
        }
        Ok(a)
    }

    /// The engine's dense id of fabric constraint `c`, assigned on first use.
    fn compact(&mut self, c: u32) -> u32 {
        if self.compact_of.len() <= c as usize {
            // Fabric constraints first, then the scenario's engines as they come.
            let n = (self.fabric.n_constraints() + self.engine_capacity.len()).max(c as usize + 1);
            self.compact_of.resize(n, NONE);
        }
        let slot = &mut self.compact_of[c as usize];
        if *slot == NONE {
            *slot = self.constraint_of.len() as u32;
            self.constraint_of.push(c);
            self.first_user.push(self.acts.len() as u32);
        }
        *slot
    }

    /// Forgets the engine constraints that activities from `first` on brought in.
    fn forget_constraints_from(&mut self, first: usize) {
        let keep = self.first_user.partition_point(|&a| (a as usize) < first);
        for &c in &self.constraint_of[keep..] {
            self.compact_of[c as usize] = NONE;
        }
        self.constraint_of.truncate(keep);
        self.first_user.truncate(keep);
    }

    /// A flow's usage in fabric constraints: (constraint, coefficient); links come first in
    /// the numbering, bundles after them.
    pub fn usage_of(&self, a: ActivityId) -> Vec<(u32, f64)> {
        self.acts
            .usage(a)
            .iter()
            .map(|u| (self.constraint_of[u.constraint as usize], u.coefficient))
            .collect()
    }

    /// Adds a delay of `duration_s`; returns its activity id.
    pub fn add_delay(
        &mut self,
        duration_s: f64,
        start_s: f64,
        after: &[ActivityId],
        tag: Option<&str>,
    ) -> Result<ActivityId> {
        let a = self.acts.add_delay(duration_s, start_s, after)?;
        self.push_meta(NONE, NONE, tag, PathChoice::Given);
        Ok(a)
    }

    pub fn add_dependency(&mut self, activity: ActivityId, after: ActivityId) -> Result<()> {
        self.acts.add_dependency(activity, after)
    }

    /// Gives the flows among activities `first..end` the share weight `weight`
    /// (`Activities::set_weights`).
    pub fn set_weights(&mut self, first: usize, end: usize, weight: f64) -> Result<()> {
        self.acts.set_weights(first, end, weight)
    }

    /// Forgets activities `first..` (tags they introduced stay known).
    pub fn truncate(&mut self, first: usize) {
        if first >= self.n_activities() {
            return;
        }
        self.acts.truncate(first);
        self.forget_constraints_from(first);
        self.src.truncate(first);
        self.dst.truncate(first);
        self.tag.truncate(first);
        if let Some(k) = self.choice[first..].iter().find_map(|c| match c {
            PathChoice::Coupled(k) => Some(*k as usize),
            _ => None,
        }) {
            self.coupled.truncate(k);
        }
        self.choice.truncate(first);
        self.unrouted.retain(|&f| (f as usize) < first);
        self.route_links.truncate(self.route_offsets[first]);
        self.route_offsets.truncate(first + 1);
        self.long_route_bytes = (0..first)
            .map(|a| {
                let a = ActivityId(a as u32);
                Self::long_route_bytes_of(self.acts.usage(a).len(), self.route_of(a).len())
            })
            .sum();
        self.next_room_check = 0.0;
    }

    /// Checks an activity id coming from outside.
    pub fn activity(&self, id: i64) -> Result<ActivityId> {
        if id < 0 || id as usize >= self.acts.len() {
            return Err(crate::engine::unknown_activity(id, self.acts.len()));
        }
        Ok(ActivityId(id as u32))
    }

    /// The links of a flow's route in path order (empty for a delay).
    pub fn route_of(&self, a: ActivityId) -> &[u32] {
        &self.route_links[self.route_offsets[a.index()]..self.route_offsets[a.index() + 1]]
    }

    pub fn is_flow(&self, a: ActivityId) -> bool {
        self.acts.kind(a) == Kind::Flow
    }

    pub fn src(&self) -> &[u32] {
        &self.src
    }

    pub fn dst(&self) -> &[u32] {
        &self.dst
    }

    pub fn tag(&self) -> &[u32] {
        &self.tag
    }

    pub fn tag_names(&self) -> &[String] {
        &self.tag_names
    }

    /// Simulates the scenario to completion, faults included.
    pub fn run(
        &self,
        options: &RunOptions,
        progress: &mut dyn FnMut(&Progress) -> bool,
    ) -> Result<Ran> {
        let compiled = spread::compile(self)?;
        let mut options = options.clone();
        let metered_links = self.link_meters(&compiled.extra, &compiled.split, &mut options.meters);
        let out = engine::run_with_disruptions(
            &compiled.capacity,
            &compiled.acts,
            &compiled.disruptions,
            &options,
            progress,
        )?;
        Ok(Ran {
            out,
            extra_constraints: compiled.extra,
            metered_links,
            split: compiled.split,
        })
    }

    /// A meter in `meters` for each link that more than one engine constraint loads (used on
    /// its own and through its bundle, before and after a fault): the links, in meter order.
    fn link_meters(&self, extra: &[u32], split: &Split, meters: &mut engine::Meters) -> Vec<u32> {
        let fabric = &self.fabric;
        let constraints = || self.constraint_of.iter().chain(extra).enumerate();
        let mut n_loaders = vec![0u8; fabric.n_links()];
        for (e, &c) in constraints() {
            split.for_each_link_share(fabric, e as u32, c, |l, _| {
                let n = &mut n_loaders[l as usize];
                *n = n.saturating_add(1);
            });
        }
        let links: Vec<u32> = (0..fabric.n_links() as u32)
            .filter(|&l| n_loaders[l as usize] > 1)
            .collect();
        if links.is_empty() {
            return links;
        }
        let meter_of: HashMap<u32, usize> =
            links.iter().enumerate().map(|(m, &l)| (l, m)).collect();
        let mut terms: Vec<Vec<(u32, f64)>> = vec![Vec::new(); links.len()];
        for (e, &c) in constraints() {
            split.for_each_link_share(fabric, e as u32, c, |l, share| {
                if let Some(&m) = meter_of.get(&l) {
                    terms[m].push((e as u32, share));
                }
            });
        }
        for t in terms {
            meters.push(t);
        }
        links
    }

    /// The faults as engine disruptions, in time order; `on_step` sees the fabric in force
    /// from each on. Constraints that only new paths use are appended to `capacity` (at
    /// their capacity before any fault) and to `extra`.
    fn disruptions(
        &self,
        capacity: &mut Vec<f64>,
        extra: &mut Vec<u32>,
        mut on_step: impl FnMut(&Fabric),
    ) -> Result<Vec<Disruption>> {
        let mut out = Vec::new();
        if !self.unrouted.is_empty() {
            out.push(Disruption {
                time_s: 0.0,
                capacities: Vec::new(),
                reroutes: self.unrouted.iter().map(|&f| (f, None)).collect(),
            });
            on_step(&self.fabric);
        }
        if self.faults.is_empty() {
            return Ok(out);
        }
        let mut extra_of: HashMap<u32, u32> = HashMap::new();
        // Capacity in force per engine constraint, and the path of each rerouted flow.
        let mut now = capacity.clone();
        let mut path_of: HashMap<u32, Option<Vec<Usage>>> =
            self.unrouted.iter().map(|&f| (f, None)).collect();
        let mut order: Vec<usize> = (0..self.faults.len()).collect();
        order.sort_by(|&a, &b| self.faults[a].time_s.total_cmp(&self.faults[b].time_s));
        let mut fabric = Arc::clone(&self.fabric);
        let mut routed = Routed::default();
        let mut unmerged: Vec<Usage> = Vec::new();
        let mut new_path: Vec<Usage> = Vec::new();
        let mut k = 0;
        while k < order.len() {
            let time_s = self.faults[order[k]].time_s;
            while k < order.len() && self.faults[order[k]].time_s == time_s {
                let f = &self.faults[order[k]];
                fabric = Arc::new(fabric.with_link_factors(&f.links, f.factor)?);
                k += 1;
            }
            let mut step = Disruption {
                time_s,
                ..Disruption::default()
            };
            for (e, c) in self.constraint_of.iter().chain(extra.iter()).enumerate() {
                let cap = self.capacity_on(&fabric, *c);
                if cap != now[e] {
                    now[e] = cap;
                    step.capacities.push((e as u32, cap));
                }
            }
            let mut router = Router::new();
            for a in 0..self.acts.len() {
                let found = match self.choice[a] {
                    PathChoice::Given => continue,
                    PathChoice::Routed(modes, traffic) => {
                        let (src, dst) = (NodeId(self.src[a]), NodeId(self.dst[a]));
                        route_on(
                            &fabric,
                            &mut router,
                            traffic,
                            src,
                            dst,
                            a as u64,
                            self.seed,
                            modes,
                            &mut routed,
                        )
                        .map(|()| unmerged.clone_from(&routed.usage))
                    }
                    PathChoice::Coupled(k) => {
                        let recipe = &self.coupled[k as usize];
                        route_coupled(
                            &fabric,
                            &mut router,
                            recipe,
                            a as u32,
                            self.seed,
                            &mut routed,
                            &mut unmerged,
                        )
                    }
                };
                match found {
                    Ok(()) => {
                        for u in unmerged.iter_mut() {
                            let c = u.constraint;
                            u.constraint = match self.compact_of.get(c as usize) {
                                Some(&e) if e != NONE => e,
                                _ => *extra_of.entry(c).or_insert_with(|| {
                                    let e = capacity.len() as u32;
                                    extra.push(c);
                                    capacity.push(self.capacity_on(&self.fabric, c));
                                    now.push(self.capacity_on(&fabric, c));
                                    if now[e as usize] != capacity[e as usize] {
                                        step.capacities.push((e, now[e as usize]));
                                    }
                                    e
                                }),
                            };
                        }
                        new_path.clear();
                        engine::push_merged(&mut new_path, &unmerged);
                        let old = match path_of.get(&(a as u32)) {
                            Some(p) => p.as_deref(),
                            None => Some(self.acts.usage(ActivityId(a as u32))),
                        };
                        if old != Some(&new_path[..]) {
                            step.reroutes.push((a as u32, Some(new_path.clone())));
                            path_of.insert(a as u32, Some(new_path.clone()));
                        }
                    }
                    Err(Error::ZeroCapacityPath(_)) => {
                        if path_of.get(&(a as u32)) != Some(&None) {
                            step.reroutes.push((a as u32, None));
                            path_of.insert(a as u32, None);
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            out.push(step);
            on_step(&fabric);
        }
        Ok(out)
    }

    fn push_meta(&mut self, src: u32, dst: u32, tag: Option<&str>, choice: PathChoice) {
        self.choice.push(choice);
        self.src.push(src);
        self.dst.push(dst);
        let last = self.tag.last().copied().unwrap_or(NONE);
        let t = match tag {
            None => NONE,
            // Flows come in runs of one tag (a collective's): no lookup for those.
            Some(name) if last != NONE && self.tag_names[last as usize] == name => last,
            Some(name) => match self.tag_index.get(name) {
                Some(&i) => i,
                None => {
                    let i = self.tag_names.len() as u32;
                    self.tag_names.push(name.to_string());
                    self.tag_index.insert(name.to_string(), i);
                    i
                }
            },
        };
        self.tag.push(t);
        self.route_offsets.push(self.route_links.len());
    }
}

/// Routes a flow on `fabric` into `routed` (fabric constraints): from the fabric's structure
/// where it has one, else ECMP over shortest paths.
#[allow(clippy::too_many_arguments)]
fn route_on(
    fabric: &Fabric,
    router: &mut Router,
    traffic: Traffic,
    src: NodeId,
    dst: NodeId,
    key: u64,
    seed: u64,
    modes: [Mode; 2],
    routed: &mut Routed,
) -> Result<()> {
    if !structured::route(fabric, src.0, dst.0, key, seed, modes, traffic, routed)? {
        routed.clear();
        for l in router.route(
            fabric.topology(),
            fabric.link_capacity_Bps(),
            src,
            dst,
            key,
            seed,
        )? {
            routed.link(fabric, l.0);
        }
    }
    Ok(())
}

/// Flow key of edge `i` of coupled flow `id`: `1 << 63 | id << 32 | i`. A plain flow's key
/// is its id (below 2^32), so the high bit keeps coupled edges from hashing as plain flows
/// do (coupled flow 0's edge i would otherwise take plain flow i's path); keys are distinct
/// for ids below 2^31, more flows than memory holds.
pub fn coupled_key(id: u32, i: u32) -> u64 {
    1 << 63 | (id as u64) << 32 | i as u64
}

/// The root (`Traffic::Tree`) of reduction tree `tree` of coupled flow `id`: a job's trees
/// take consecutive roots from an offset hashed from the flow, so they spread over the root
/// switches, and so do the trees of different jobs.
fn tree_root(seed: u64, id: u32, tree: u32) -> u32 {
    (ecmp_hash(seed, coupled_key(id, 0), 0) as u32).wrapping_add(tree)
}

/// Routes every edge of a coupled flow on `fabric` and combines them into `usage` (fabric
/// constraints, merged). Edge i of flow `id` hashes with key `coupled_key(id, i)` and is
/// striped over the planes of a tier routed by ECMP (`Traffic::Channels`): it stands
/// for NCCL channels, which are striped over the NIC's ports. An edge of reduction tree t
/// (`Combine::Max`) is routed as the tree's (`Traffic::Tree`, rooted at `tree_root(seed,
/// id, t)`; key `coupled_key(id, t)` where the graph is searched). An `Up` or `Down` edge
/// keeps only its leg of the route (`Leg`; a route of one link has no links between, so
/// its legs are empty).
fn route_coupled(
    fabric: &Fabric,
    router: &mut Router,
    recipe: &Coupled,
    id: u32,
    seed: u64,
    routed: &mut Routed,
    usage: &mut Vec<Usage>,
) -> Result<()> {
    usage.clear();
    let (link_src, link_dst) = (fabric.topology().link_src(), fabric.topology().link_dst());
    // Each entry tagged with its edge's tree: merged within a tree, then summed.
    let mut tagged: Vec<(u32, u32, f64)> = Vec::new();
    for (i, e) in recipe.edges.iter().enumerate() {
        let (key, traffic) = match recipe.combine {
            Combine::Sum => (coupled_key(id, i as u32), Traffic::Channels),
            Combine::Max => (
                coupled_key(id, e.tree),
                Traffic::Tree {
                    root: tree_root(seed, id, e.tree),
                },
            ),
        };
        route_on(
            fabric,
            router,
            traffic,
            NodeId(e.src),
            NodeId(e.dst),
            key,
            seed,
            recipe.modes,
            routed,
        )?;
        let on_leg = |c: u32| match e.leg {
            Leg::Whole => true,
            Leg::Up => !fabric.any_link_of(c, |l| link_dst[l as usize] == e.dst),
            Leg::Down => !fabric.any_link_of(c, |l| link_src[l as usize] == e.src),
        };
        let tree = match recipe.combine {
            Combine::Sum => 0,
            Combine::Max => e.tree,
        };
        tagged.extend(
            routed
                .usage
                .iter()
                .filter(|u| on_leg(u.constraint))
                .map(|u| (u.constraint, tree, u.coefficient * e.coefficient)),
        );
    }
    tagged.sort_unstable_by_key(|&(c, tree, _)| (c, tree));
    for group in tagged.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
        let coefficients = group.iter().map(|&(_, _, k)| k);
        let k = match recipe.combine {
            Combine::Sum => coefficients.sum(),
            Combine::Max => coefficients.fold(0.0, f64::max),
        };
        match usage.last_mut() {
            Some(u) if u.constraint == group[0].0 => u.coefficient += k,
            _ => usage.push(Usage {
                constraint: group[0].0,
                coefficient: k,
            }),
        }
    }
    usage.extend_from_slice(&recipe.engines);
    Ok(())
}
