//! A scenario: a topology plus a DAG of flows (between nodes, routed) and delays.
//! Routing turns each flow's path into a usage list; the engine then runs activities.

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::{self, Activities, Kind, Progress, RunOptions, RunOutput};
use crate::error::{Error, Result};
use crate::ids::{ActivityId, LinkId, NodeId};
use crate::routing::{check_route, Router};
use crate::solver::Usage;
use crate::topology::Topology;

/// No node, no tag.
pub const NONE: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct Scenario {
    topology: Arc<Topology>,
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
    usage_buf: Vec<Usage>,
}

/// Where a flow's path comes from.
pub enum Route<'r> {
    /// ECMP over shortest paths, hashed on the flow's id and the scenario seed.
    Ecmp,
    /// The given links, checked to form a path from src to dst.
    Links(&'r [LinkId]),
}

impl Scenario {
    pub fn new(topology: Arc<Topology>, seed: u64) -> Self {
        Scenario {
            topology,
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
            usage_buf: Vec::new(),
        }
    }

    pub fn topology(&self) -> &Arc<Topology> {
        &self.topology
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
        let topo = Arc::clone(&self.topology);
        let id = self.acts.len() as u64;
        let links = match route {
            Route::Ecmp => self.router.route(&topo, src, dst, id, self.seed)?,
            Route::Links(links) => {
                check_route(&topo, src, dst, links)?;
                links.to_vec()
            }
        };
        self.usage_buf.clear();
        let mut latency_s = 0.0;
        for l in &links {
            latency_s += topo.latency_s()[l.index()];
            self.usage_buf.push(Usage {
                constraint: l.0,
                coefficient: 1.0,
            });
        }
        let a = self.acts.add_flow(
            bytes,
            &self.usage_buf,
            latency_s,
            start_s,
            rate_cap_Bps,
            after,
        )?;
        self.route_links.extend(links.iter().map(|l| l.0));
        self.push_meta(src.0, dst.0, tag);
        Ok(a)
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
        engine::run(self.topology.capacity_Bps(), &self.acts, options, progress)
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
