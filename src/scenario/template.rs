//! Repeated structure added in bulk: the latest activities of a scenario kept as a template
//! (a collective as its construction made it, a step's pipeline transfers), then added again
//! at new ids as the calls that made them would add them.
//!
//! A training step adds the same collective on the same ranks hundreds of thousands of times;
//! constructing each (choosing its algorithm, building its edges) costs far more than adding
//! what the construction made. A copy repeats each activity's add with the arguments it was
//! made with: a delay's duration, a flow's endpoints, bytes, rate cap and routing (routed
//! again, on the copy's own id, so ECMP hashes it as it would hash a new flow), a coupled
//! flow's edges, engines and latency, and every tag. The result is the scenario that
//! repeating the calls would build, activity for activity.

use super::{PathChoice, Route, Scenario};
use crate::engine::Kind;
use crate::error::{Error, Result};
use crate::ids::{ActivityId, LinkId, NodeId};
use crate::routing::structured::Traffic;

/// How a template's activity is made again.
#[derive(Debug, Clone)]
enum Made {
    Delay,
    /// A flow, routed as it was.
    Flow(Way),
    /// A coupled flow of this recipe.
    Coupled(super::Coupled),
}

/// How a plain flow was routed (`Route`, owning its links).
#[derive(Debug, Clone)]
enum Way {
    Ecmp,
    Striped,
    Links(Vec<LinkId>),
}

#[derive(Debug, Clone)]
struct Act {
    made: Made,
    src: u32,
    dst: u32,
    /// A delay's duration or a coupled flow's latency (a routed flow's comes from its route).
    wait_s: f64,
    bytes: f64,
    start_s: f64,
    rate_cap_Bps: f64,
    tag: Option<String>,
    /// Positions in the template of the activities it waits for; none for a root, which
    /// waits for what the copy is given.
    deps: Vec<u32>,
}

/// Activities kept to be added again (`Scenario::template`, `Scenario::repeat`).
#[derive(Debug, Clone)]
pub struct Template {
    acts: Vec<Act>,
    n_flows: usize,
    /// Whether every activity has the same tag (a collective's label), which a copy may
    /// then replace.
    one_tag: bool,
}

impl Template {
    /// Activities a copy adds.
    pub fn len(&self) -> usize {
        self.acts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.acts.is_empty()
    }

    /// Flows (plain and coupled) a copy adds.
    pub fn n_flows(&self) -> usize {
        self.n_flows
    }

    /// Activities that wait for none of the template's (a copy makes them wait for its `after`).
    pub fn n_roots(&self) -> usize {
        self.acts.iter().filter(|a| a.deps.is_empty()).count()
    }

    /// Whether every activity has the same tag, so that a copy may give them another.
    pub fn one_tag(&self) -> bool {
        self.one_tag
    }

    /// The same activities between other nodes: each flow's endpoints and each coupled
    /// flow's edges' moved from node `v` to `v + shift` (a collective on other GPUs of a
    /// fabric whose GPUs repeat, each copy routed on its own nodes). None where an endpoint
    /// lies at or past `limit`, before or after the move, a flow's links were given (they do
    /// not move), or a coupled flow uses reduction engines (they belong to their switches).
    pub fn shifted(&self, shift: i64, limit: u32) -> Option<Template> {
        let moved = |v: u32| -> Option<u32> {
            let w = i64::from(v).checked_add(shift)?;
            (v < limit && (0..i64::from(limit)).contains(&w)).then_some(w as u32)
        };
        let mut acts = self.acts.clone();
        for act in &mut acts {
            match &mut act.made {
                Made::Delay => {}
                Made::Flow(Way::Links(_)) => return None,
                Made::Flow(_) => {
                    act.src = moved(act.src)?;
                    act.dst = moved(act.dst)?;
                }
                Made::Coupled(recipe) => {
                    if !recipe.engines.is_empty() {
                        return None;
                    }
                    for e in &mut recipe.edges {
                        e.src = moved(e.src)?;
                        e.dst = moved(e.dst)?;
                    }
                }
            }
        }
        Some(Template {
            acts,
            n_flows: self.n_flows,
            one_tag: self.one_tag,
        })
    }
}

impl Scenario {
    /// The activities from `first` to the latest, kept to be added again. Its roots (those
    /// that wait for none of them) are what a copy makes wait for the copy's `after`; the
    /// others keep waiting for theirs, moved with the copy. None where one that is not a
    /// root waits for an activity before `first` (a copy could not say for which), or where
    /// a dependency was added (`add_dependency`) once they had begun, which no add call makes.
    pub fn template(&self, first: usize) -> Result<Option<Template>> {
        let n = self.acts.len();
        if first >= n {
            return Err(Error::InvalidArgument(format!(
                "a template needs activities: first must be below {n}, got {first}"
            )));
        }
        if self.acts.dependency_added_at > first {
            return Ok(None);
        }
        // Each activity's dependencies were pushed as it was added, in order, and none since:
        // the span's are the tail of the list.
        let deps = &self.acts.deps;
        let mut tail = deps.len();
        while tail > 0 && deps[tail - 1].0 as usize >= first {
            tail -= 1;
        }
        let mut inside: Vec<Vec<u32>> = vec![Vec::new(); n - first];
        let mut outside = vec![false; n - first];
        for &(a, b) in &deps[tail..] {
            let a = a as usize;
            match (b as usize).checked_sub(first) {
                Some(k) => inside[a - first].push(k as u32),
                None => outside[a - first] = true,
            }
        }
        let mut acts = Vec::with_capacity(n - first);
        let mut n_flows = 0;
        for (k, deps) in inside.into_iter().enumerate() {
            if !deps.is_empty() && outside[k] {
                return Ok(None);
            }
            let a = first + k;
            let made = match (self.acts.kind[a], self.choice[a]) {
                (Kind::Delay, _) => Made::Delay,
                (Kind::Flow, PathChoice::Routed(_, Traffic::Connection)) => Made::Flow(Way::Ecmp),
                (Kind::Flow, PathChoice::Routed(_, Traffic::Channels)) => Made::Flow(Way::Striped),
                (Kind::Flow, PathChoice::Routed(_, Traffic::Tree { .. })) => {
                    return Err(Error::Internal(
                        "a plain flow routed as a reduction tree".into(),
                    ))
                }
                (Kind::Flow, PathChoice::Given) => Made::Flow(Way::Links(
                    self.route_links[self.route_offsets[a]..self.route_offsets[a + 1]]
                        .iter()
                        .map(|&l| LinkId(l))
                        .collect(),
                )),
                (Kind::Flow, PathChoice::Coupled(i)) => {
                    Made::Coupled(self.coupled[i as usize].clone())
                }
            };
            n_flows += usize::from(self.acts.kind[a] == Kind::Flow);
            let tag = self.tag[a];
            acts.push(Act {
                made,
                src: self.src[a],
                dst: self.dst[a],
                wait_s: self.acts.wait_s[a],
                bytes: self.acts.bytes[a],
                start_s: self.acts.start_s[a],
                rate_cap_Bps: self.acts.rate_cap_Bps[a],
                tag: (tag != super::NONE).then(|| self.tag_names[tag as usize].clone()),
                deps,
            });
        }
        let one_tag = acts.iter().all(|a| a.tag == acts[0].tag);
        Ok(Some(Template {
            acts,
            n_flows,
            one_tag,
        }))
    }

    /// Adds `template`'s activities again, in order, its roots waiting for `after`, each
    /// tagged as it was or, where `tag` is given, with `tag` (a template of one tag only);
    /// returns the id of the first. On an error, what the copy added so far stays (the caller
    /// undoes its whole change).
    pub fn repeat(
        &mut self,
        template: &Template,
        after: &[ActivityId],
        tag: Option<&str>,
    ) -> Result<ActivityId> {
        if tag.is_some() && !template.one_tag {
            return Err(Error::InvalidArgument(
                "a template of several tags cannot be given one".into(),
            ));
        }
        let first = self.acts.len() as u32;
        let mut deps: Vec<ActivityId> = Vec::new();
        for act in &template.acts {
            let wait: &[ActivityId] = if act.deps.is_empty() {
                after
            } else {
                deps.clear();
                deps.extend(act.deps.iter().map(|&k| ActivityId(first + k)));
                &deps
            };
            let tag = tag.or(act.tag.as_deref());
            match &act.made {
                Made::Delay => self.add_delay(act.wait_s, act.start_s, wait, tag)?,
                Made::Flow(way) => {
                    let route = match way {
                        Way::Ecmp => Route::Ecmp,
                        Way::Striped => Route::Striped,
                        Way::Links(links) => Route::Links(links),
                    };
                    let (src, dst) = (NodeId(act.src), NodeId(act.dst));
                    let cap = act.rate_cap_Bps;
                    self.add_flow(src, dst, act.bytes, act.start_s, wait, route, tag, cap)?
                }
                Made::Coupled(recipe) => self.add_coupled_flow(
                    recipe.edges.clone(),
                    recipe.combine,
                    recipe.engines.clone(),
                    act.bytes,
                    act.wait_s,
                    act.start_s,
                    wait,
                    tag,
                    act.rate_cap_Bps,
                )?,
            };
        }
        Ok(ActivityId(first))
    }
}
