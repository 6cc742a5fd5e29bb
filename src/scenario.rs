//! A scenario: a fabric plus a DAG of flows (between nodes, routed) and delays.
//! Routing turns each flow's path into a usage list; the engine then runs activities.
//!
//! The engine only sees the constraints some flow uses, numbered densely in order of first
//! use: a million-GPU fabric has tens of millions of links, and a run pays for the ones in play.

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::{self, Activities, Kind, Progress, RunOptions, RunOutput};
use crate::error::{Error, Result};
use crate::ids::{ActivityId, LinkId, NodeId};
use crate::routing::structured::{self, Routed};
use crate::routing::{check_route, Router};
use crate::solver::Usage;
use crate::topology::fabric::{Fabric, Mode};
use crate::topology::Topology;

/// No node, no tag.
pub const NONE: u32 = u32::MAX;

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
    /// Dense engine constraint of each fabric constraint (NONE until a flow uses it), and back.
    compact_of: Vec<u32>,
    constraint_of: Vec<u32>,
    routed: Routed,
}

/// Where a flow's path comes from.
pub enum Route<'r> {
    /// From the fabric's structure where it has one (ECMP or spraying per tier), else ECMP
    /// over shortest paths; hashed on the flow's id and the scenario seed.
    Ecmp,
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
            routed: Routed::default(),
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
        let topo = fabric.topology();
        let caps = fabric.link_capacity_Bps();
        let id = self.acts.len() as u64;
        let mut routed = std::mem::take(&mut self.routed);
        let found = match route {
            Route::Ecmp => {
                structured::route(&fabric, src.0, dst.0, id, self.seed, self.modes, &mut routed)
            }
            Route::Links(links) => check_route(topo, caps, src, dst, links).map(|_| {
                routed.clear();
                for l in links {
                    routed.usage.push(Usage { constraint: l.0, coefficient: 1.0 });
                    routed.links.push(l.0);
                    routed.latency_s += topo.latency_s()[l.index()];
                }
                true
            }),
        };
        let found = found.and_then(|found| {
            if !found {
                routed.clear();
                for l in self.router.route(topo, caps, src, dst, id, self.seed)? {
                    routed.usage.push(Usage { constraint: l.0, coefficient: 1.0 });
                    routed.links.push(l.0);
                    routed.latency_s += topo.latency_s()[l.index()];
                }
            }
            Ok(())
        });
        if let Err(e) = found {
            self.routed = routed;
            return Err(e);
        }
        for u in routed.usage.iter_mut() {
            u.constraint = self.compact(u.constraint);
        }
        let added = self.acts.add_flow(
            bytes,
            &routed.usage,
            routed.latency_s,
            start_s,
            rate_cap_Bps,
            after,
        );
        if added.is_ok() {
            self.route_links.extend_from_slice(&routed.links);
            self.push_meta(src.0, dst.0, tag);
        }
        self.routed = routed;
        added
    }

    /// The engine's dense id of fabric constraint `c`, assigned on first use.
    fn compact(&mut self, c: u32) -> u32 {
        if self.compact_of.is_empty() {
            self.compact_of = vec![NONE; self.fabric.n_constraints()];
        }
        let slot = &mut self.compact_of[c as usize];
        if *slot == NONE {
            *slot = self.constraint_of.len() as u32;
            self.constraint_of.push(c);
        }
        *slot
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
        self.push_meta(NONE, NONE, tag);
        Ok(a)
    }

    pub fn add_dependency(&mut self, activity: ActivityId, after: ActivityId) -> Result<()> {
        self.acts.add_dependency(activity, after)
    }

    /// Forgets activities `first..` (tags they introduced stay known).
    pub fn truncate(&mut self, first: usize) {
        if first >= self.n_activities() {
            return;
        }
        self.acts.truncate(first);
        self.src.truncate(first);
        self.dst.truncate(first);
        self.tag.truncate(first);
        self.route_links.truncate(self.route_offsets[first]);
        self.route_offsets.truncate(first + 1);
    }

    /// Checks an activity id coming from outside.
    pub fn activity(&self, id: i64) -> Result<ActivityId> {
        if id < 0 || id as usize >= self.acts.len() {
            return Err(Error::UnknownActivity(format!(
                "no activity with id {id} (ids so far: 0..{})",
                self.acts.len()
            )));
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

    /// Simulates the scenario to completion.
    pub fn run(
        &self,
        options: &RunOptions,
        progress: &mut dyn FnMut(&Progress) -> bool,
    ) -> Result<RunOutput> {
        let capacity: Vec<f64> = self
            .constraint_of
            .iter()
            .map(|&c| self.fabric.constraint_capacity_Bps(c))
            .collect();
        engine::run(&capacity, &self.acts, options, progress)
    }

    fn push_meta(&mut self, src: u32, dst: u32, tag: Option<&str>) {
        self.src.push(src);
        self.dst.push(dst);
        let t = match tag {
            None => NONE,
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
