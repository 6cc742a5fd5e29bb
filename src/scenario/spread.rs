//! A scenario compiled for the engine, with even spreading made exact where the members of
//! a pooled bundle carry traffic of their own or change capacity mid-run.
//!
//! A sprayed flow loads a pooled bundle (docs/design.md section 3), whose members carry it
//! evenly, each in proportion to its capacity. A flow pinned to a member (an explicit route,
//! ECMP on a sprayed tier, a sprayed flow's own host links on a faulty Clos) loads that
//! member's own constraint, which alone would let the member carry the pinned traffic plus
//! its share of the sprayed traffic, beyond its capacity. So every member that some list
//! uses directly while another uses its bundle is *spread*: every list over the bundle also
//! loads it, with coefficient `k * cap_member / cap_bundle` for bundle coefficient `k`
//! (capacities in force then), and its own constraint bounds and measures all it carries.
//! The bundle still bounds the members nobody pins: their load is exactly their share of it.
//! A member is spread for the whole run (its accounting cannot change over time), and fault
//! steps reroute the lists whose shares change.
//!
//! The links table splits a bundle's load by its members' shares on the scenario's fabric.
//! While a fault makes them differ, the bundle's lists use another engine constraint of the
//! same capacity that the table splits by the shares in force (`Split::resplit`).
//!
//! With nothing to spread or resplit, the scenario's own lists run unchanged.

use std::borrow::Cow;
use std::collections::HashMap;

use super::{for_each_link_share, Scenario, Split, NONE};
use crate::engine::{Activities, Disruption};
use crate::error::Result;
use crate::ids::ActivityId;
use crate::solver::Usage;
use crate::topology::fabric::Fabric;

/// What the engine runs: capacities of the engine constraints (the scenario's, then
/// `extra`), the activities and the disruptions; `split` as in `Ran`.
pub(super) struct Compiled<'s> {
    pub capacity: Vec<f64>,
    pub extra: Vec<u32>,
    pub acts: Cow<'s, Activities>,
    pub disruptions: Vec<Disruption>,
    pub split: Split,
}

/// A bundle's member in one interval of the run: (link, capacity, share of the bundle).
type Member = (u32, f64, f64);

/// A bundle in one interval of the run: its capacity and members.
struct BundleAt {
    capacity_Bps: f64,
    members: Vec<Member>,
}

pub(super) fn compile(sc: &Scenario) -> Result<Compiled<'_>> {
    let fabric = &sc.fabric;
    let mut capacity: Vec<f64> = sc
        .constraint_of
        .iter()
        .map(|&c| sc.capacity_on(fabric, c))
        .collect();
    let mut extra = Vec::new();
    // The bundles faults change a member of, and each of them in every interval of the
    // run: before the first disruption, then after each.
    let mut faulted: Vec<u32> = sc
        .faults
        .iter()
        .flat_map(|f| f.links.iter().filter_map(|&l| fabric.bundle_of_link(l)))
        .collect();
    faulted.sort_unstable();
    faulted.dedup();
    let faulted_on =
        |f: &Fabric| -> Vec<BundleAt> { faulted.iter().map(|&b| bundle_at(f, b)).collect() };
    let mut faulted_at = vec![faulted_on(fabric)];
    let disruptions = sc.disruptions(&mut capacity, &mut extra, |f| {
        faulted_at.push(faulted_on(f))
    })?;
    debug_assert_eq!(faulted_at.len(), disruptions.len() + 1);

    let numbering = Numbering::new(sc, &extra);
    let (spread_links, resplit) = find_changes(sc, &numbering, &disruptions, &faulted, &faulted_at);
    if spread_links.is_empty() && !resplit.contains(&true) {
        return Ok(Compiled {
            capacity,
            extra,
            acts: Cow::Borrowed(&sc.acts),
            disruptions,
            split: Split::default(),
        });
    }

    // The bundles whose lists change, each with its spread members.
    let n_links = fabric.n_links() as u32;
    let mut bundles: Vec<u32> = spread_links
        .iter()
        .map(|&l| {
            fabric
                .bundle_of_link(l)
                .expect("a spread link is a bundle member")
        })
        .chain(faulted.iter().zip(&resplit).filter(|x| *x.1).map(|x| *x.0))
        .collect();
    bundles.sort_unstable();
    bundles.dedup();
    let mut slot = vec![NONE; capacity.len()];
    let mut groups: Vec<Group> = Vec::with_capacity(bundles.len());
    for (j, &b) in bundles.iter().enumerate() {
        let own = numbering
            .engine(n_links + b)
            .expect("a bundle in force is in play");
        slot[own as usize] = j as u32;
        groups.push(Group {
            own,
            faulted: faulted.binary_search(&b).ok(),
            nominal: bundle_at(fabric, b).members,
            spread: Vec::new(),
            ids: Vec::new(),
        });
    }
    for &l in &spread_links {
        let b = fabric
            .bundle_of_link(l)
            .expect("a spread link is a bundle member");
        let g = &mut groups[bundles.binary_search(&b).expect("listed above")];
        let pos = g.nominal.iter().position(|m| m.0 == l);
        let pos = pos.expect("a link is a member of its bundle");
        let e = numbering.engine(l).expect("a spread link is used directly");
        g.spread.push((pos, e));
    }
    // A resplit bundle's constraint in each interval: its own while its shares are those on
    // the scenario's fabric, else one per set of shares, which keeps the bundle's capacity.
    let mut split = Split {
        spread_links,
        resplit: Vec::new(),
    };
    let mut copies: Vec<(u32, usize)> = Vec::new();
    for (g, &b) in groups.iter_mut().zip(&bundles) {
        let Some(i) = g.faulted.filter(|&i| resplit[i]) else {
            continue;
        };
        let shares = |k: usize| faulted_at[k][i].members.iter().map(|m| m.2);
        let mut seen: Vec<(usize, u32)> = vec![(0, g.own)];
        for k in 0..faulted_at.len() {
            let id = match seen.iter().find(|&&(k0, _)| shares(k0).eq(shares(k))) {
                Some(&(_, id)) => id,
                None => {
                    let e = capacity.len() as u32;
                    capacity.push(faulted_at[0][i].capacity_Bps);
                    extra.push(n_links + b);
                    copies.push((e, i));
                    let members = faulted_at[k][i].members.iter().map(|m| (m.0, m.2));
                    let members = members.collect();
                    split.resplit.push((e, members));
                    seen.push((k, e));
                    e
                }
            };
            g.ids.push(id);
        }
    }
    let table_at = |k: usize| -> Vec<Entry> {
        groups
            .iter()
            .map(|g| {
                let members = g.members_at(&faulted_at, k);
                let spread = g.spread.iter().filter(|&&(pos, _)| members[pos].1 > 0.0);
                Entry {
                    id: g.ids.get(k).copied().unwrap_or(g.own),
                    members: spread
                        .map(|&(pos, e)| Usage {
                            constraint: e,
                            coefficient: members[pos].2,
                        })
                        .collect(),
                }
            })
            .collect()
    };

    let mut table = table_at(0);
    let acts = sc
        .acts
        .with_usage(|_, usage, out| rewrite(usage, &slot, &table, out));
    // Each step's reroutes are rewritten for the interval they start; so are the lists it
    // leaves alone over a bundle whose entry changes.
    let mut lists = Lists::new(&sc.acts);
    let mut rerouted_in = vec![usize::MAX; sc.acts.len()];
    let mut steps = Vec::with_capacity(disruptions.len());
    for (k, d) in disruptions.iter().enumerate() {
        let next = table_at(k + 1);
        let changed: Vec<bool> = next.iter().zip(&table).map(|(a, b)| a != b).collect();
        let mut step = Disruption {
            time_s: d.time_s,
            capacities: d.capacities.clone(),
            reroutes: Vec::with_capacity(d.reroutes.len()),
        };
        for (f, new) in &d.reroutes {
            lists.set(*f, new.as_deref());
            rerouted_in[*f as usize] = k;
            let new = new.as_deref().map(|list| {
                let mut out = Vec::new();
                rewrite(list, &slot, &next, &mut out);
                out
            });
            step.reroutes.push((*f, new));
        }
        if changed.contains(&true) {
            for a in 0..sc.acts.len() as u32 {
                let Some(list) = lists.get(a) else { continue };
                let touched = list.iter().any(|u| match slot.get(u.constraint as usize) {
                    Some(&j) if j != NONE => changed[j as usize],
                    _ => false,
                });
                if touched && rerouted_in[a as usize] != k {
                    let mut out = Vec::new();
                    rewrite(list, &slot, &next, &mut out);
                    step.reroutes.push((a, Some(out)));
                }
            }
        }
        for &(e, i) in &copies {
            let now = faulted_at[k + 1][i].capacity_Bps;
            if now != faulted_at[k][i].capacity_Bps {
                step.capacities.push((e, now));
            }
        }
        steps.push(step);
        table = next;
    }
    Ok(Compiled {
        capacity,
        extra,
        acts: Cow::Owned(acts),
        disruptions: steps,
        split,
    })
}

/// A changed bundle's entry in one interval: the engine constraint its lists use, and its
/// spread members with their shares.
#[derive(PartialEq)]
struct Entry {
    id: u32,
    members: Vec<Usage>,
}

/// Appends to `out` the list `usage` with every bundle that has an entry in `table`
/// (`slot[bundle]` indexes it) on the entry's constraint, plus its spread members at the
/// bundle's coefficient times their share.
fn rewrite(usage: &[Usage], slot: &[u32], table: &[Entry], out: &mut Vec<Usage>) {
    for u in usage {
        let j = slot.get(u.constraint as usize).copied().unwrap_or(NONE);
        if j == NONE {
            out.push(*u);
            continue;
        }
        let entry = &table[j as usize];
        out.push(Usage {
            constraint: entry.id,
            coefficient: u.coefficient,
        });
        for m in &entry.members {
            let coefficient = u.coefficient * m.coefficient;
            if coefficient > 0.0 {
                out.push(Usage {
                    constraint: m.constraint,
                    coefficient,
                });
            }
        }
    }
}

/// The links to spread (sorted): the bundle members some list uses directly while another
/// uses their bundle; and which faulted bundles to resplit: those in use while their
/// shares differ from those on the scenario's fabric. Only intervals in which time passes
/// count.
fn find_changes(
    sc: &Scenario,
    numbering: &Numbering,
    disruptions: &[Disruption],
    faulted: &[u32],
    faulted_at: &[Vec<BundleAt>],
) -> (Vec<u32>, Vec<bool>) {
    let fabric = &sc.fabric;
    let n_links = fabric.n_links() as u32;
    // The engine constraint of the bundle of a link in play, if that is in play too.
    let bundle_of = |c: u32| -> u32 {
        let b = (c < n_links).then(|| fabric.bundle_of_link(c)).flatten();
        b.and_then(|b| numbering.engine(n_links + b))
            .unwrap_or(NONE)
    };
    if disruptions.is_empty() {
        // Every constraint in play is some flow's, in force the whole run.
        let mut spread: Vec<u32> = numbering
            .fabric()
            .filter(|&c| bundle_of(c) != NONE)
            .collect();
        spread.sort_unstable();
        return (spread, vec![false; faulted.len()]);
    }
    let bundle_of: Vec<u32> = numbering.fabric().map(bundle_of).collect();
    // How many lists in force use each engine constraint.
    let mut n_users = vec![0u32; bundle_of.len()];
    for u in &sc.acts.usage {
        n_users[u.constraint as usize] += 1;
    }
    let mut lists = Lists::new(&sc.acts);
    let mut spread = Vec::new();
    let mut resplit = vec![false; faulted.len()];
    for k in 0..=disruptions.len() {
        if let Some(d) = k.checked_sub(1).map(|i| &disruptions[i]) {
            for (f, new) in &d.reroutes {
                for u in lists.get(*f).unwrap_or_default() {
                    n_users[u.constraint as usize] -= 1;
                }
                for u in new.as_deref().unwrap_or_default() {
                    n_users[u.constraint as usize] += 1;
                }
                lists.set(*f, new.as_deref());
            }
        }
        let from_s = k.checked_sub(1).map_or(0.0, |i| disruptions[i].time_s);
        if disruptions.get(k).is_some_and(|d| !(d.time_s > from_s)) {
            continue; // the next disruption comes at once: no list in force carries anything
        }
        let in_force = |e: u32| e != NONE && n_users[e as usize] > 0;
        for ((&b, &n), c) in bundle_of.iter().zip(&n_users).zip(numbering.fabric()) {
            if n > 0 && in_force(b) {
                spread.push(c);
            }
        }
        for (i, &b) in faulted.iter().enumerate() {
            let e = numbering.engine(n_links + b).unwrap_or(NONE);
            let shares = |k: usize| faulted_at[k][i].members.iter().map(|m| m.2);
            if in_force(e) && !shares(k).eq(shares(0)) {
                resplit[i] = true;
            }
        }
    }
    spread.sort_unstable();
    spread.dedup();
    (spread, resplit)
}

/// A bundle whose lists change: its engine constraint in the scenario's lists, its index
/// among the faulted bundles if it is one, its members on the scenario's fabric, the spread
/// ones (position there, engine constraint), and, if resplit, its engine constraint in
/// each interval.
struct Group {
    own: u32,
    faulted: Option<usize>,
    nominal: Vec<Member>,
    spread: Vec<(usize, u32)>,
    ids: Vec<u32>,
}

impl Group {
    /// The members in interval `k` of the run.
    fn members_at<'a>(&'a self, faulted_at: &'a [Vec<BundleAt>], k: usize) -> &'a [Member] {
        match self.faulted {
            Some(i) => &faulted_at[k][i].members,
            None => &self.nominal,
        }
    }
}

/// Engine constraint to fabric constraint and back, for the constraints in play: the
/// scenario's, then `extra`.
struct Numbering<'s> {
    compact_of: &'s [u32],
    constraint_of: &'s [u32],
    extra: &'s [u32],
    extra_of: HashMap<u32, u32>,
}

impl<'s> Numbering<'s> {
    fn new(sc: &'s Scenario, extra: &'s [u32]) -> Self {
        let first = sc.constraint_of.len() as u32;
        Numbering {
            compact_of: &sc.compact_of,
            constraint_of: &sc.constraint_of,
            extra,
            extra_of: (first..).zip(extra).map(|(e, &c)| (c, e)).collect(),
        }
    }

    /// The fabric constraint of each engine constraint, in order.
    fn fabric(&self) -> impl Iterator<Item = u32> + '_ {
        self.constraint_of.iter().chain(self.extra).copied()
    }

    fn engine(&self, c: u32) -> Option<u32> {
        match self.compact_of.get(c as usize) {
            Some(&e) if e != NONE => Some(e),
            _ => self.extra_of.get(&c).copied(),
        }
    }
}

/// Each flow's usage list as the disruptions so far leave it (None: no path).
struct Lists<'d> {
    acts: &'d Activities,
    rerouted: HashMap<u32, Option<&'d [Usage]>>,
}

impl<'d> Lists<'d> {
    fn new(acts: &'d Activities) -> Self {
        Lists {
            acts,
            rerouted: HashMap::new(),
        }
    }

    fn get(&self, a: u32) -> Option<&'d [Usage]> {
        match self.rerouted.get(&a) {
            Some(&list) => list,
            None => Some(self.acts.usage(ActivityId(a))),
        }
    }

    fn set(&mut self, a: u32, list: Option<&'d [Usage]>) {
        self.rerouted.insert(a, list);
    }
}

/// Bundle `b` on `fabric`.
fn bundle_at(fabric: &Fabric, b: u32) -> BundleAt {
    let caps = fabric.link_capacity_Bps();
    let mut members = Vec::new();
    for_each_link_share(fabric, fabric.n_links() as u32 + b, |l, share| {
        members.push((l, caps[l as usize], share))
    });
    BundleAt {
        capacity_Bps: fabric.bundle_capacity_Bps()[b as usize],
        members,
    }
}
