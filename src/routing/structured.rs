//! Routes computed from a fabric's structure (topology::fabric): up-down paths in a Clos,
//! plane by plane, in O(tiers) per flow, with no per-destination search.
//!
//! * ECMP: at every hop the flow hashes onto one of the next links that lie on an up-down
//!   path to its destination, `ecmp_hash(seed, key, node) % n` over those links in link-id
//!   order: the same rule, and so the same path, as the generic shortest-path router.
//! * Spray (adaptive routing, NVLink): the flow is split evenly over every equal-cost next
//!   hop, which in a symmetric Clos is exactly a set of pooled bundles (DESIGN section 3);
//!   across planes the split follows each plane's share of the endpoint's links.
//! * Striped ECMP (`Traffic::Channels`, a collective's edge): the edge stands for NCCL channels,
//!   which NCCL stripes over the NIC's ports (a CX-8 in multi-plane mode splits over the
//!   planes itself), so on a tier routed by ECMP it splits over the planes as a sprayed flow
//!   does (same shares, healthy or faulty) and is hashed onto one path within each plane,
//!   with a key of that plane's own (`rng::plane_key`). A plain flow is one connection, hashed
//!   onto one port: ECMP picks its first hop among the uplinks of every plane. On a
//!   single-plane Clos the two are the same.
//! * A reduction tree's edge (`Traffic::Tree`, SHARP): split over the planes as a collective's
//!   edge is, but where ECMP would hash it takes the link in slot `root % n` of every hop's `n`
//!   next links (counted down or not, in link-id order), the same slot whatever the switch, so
//!   all the edges of one tree climb to one root switch and each switch sends the tree through
//!   one link toward it, as SHARP's Aggregation Manager builds a tree (a set of switches and
//!   the links between them, used both ways); a job's trees (one per rail) take consecutive
//!   roots. In 3 tiers a spine's hop up and its core's hop down take root `root / leaf_up`
//!   instead, so consecutive roots fill every group (a leaf slot) before a second core of one
//!   group. A fault moves only the trees that cross it: where the link in the root's slot is
//!   down or no longer reaches the destination, the switch takes live candidate `root % live`
//!   instead. In a scale-up domain a tree is NVLS, which the NVSwitch chips serve together (a
//!   multicast object is striped over all of them), so it is sprayed there whatever the
//!   domain's routing.
//!
//! Links of zero capacity are down. ECMP then hashes over the surviving candidates only.
//! A sprayed flow in a Clos with a link not at nominal capacity splits over the planes that
//! still reach its destination, in proportion to the smaller of its two ends' capacity
//! there, and puts its part on each live endpoint link by capacity (flows now split unlike
//! one another, so an endpoint's links can no longer be pooled); its bundles above the
//! endpoints have lost the down members' capacity. When no up-down path survives, the flow has no route.

use crate::error::{Error, Result};
use crate::rng::{self, ecmp_hash};
use crate::solver::Usage;
use crate::topology::clos::ClosShape;
use crate::topology::fabric::{Fabric, Mode, Placed};

/// A route: the usage list the engine needs, the links of the path when the flow is pinned
/// to one, and the latency along it.
#[derive(Debug, Default, Clone)]
pub struct Routed {
    pub usage: Vec<Usage>,
    pub links: Vec<u32>,
    pub latency_s: f64,
}

impl Routed {
    pub fn clear(&mut self) {
        self.usage.clear();
        self.links.clear();
        self.latency_s = 0.0;
    }

    pub fn link(&mut self, f: &Fabric, l: u32) {
        self.usage.push(Usage {
            constraint: l,
            coefficient: 1.0,
        });
        self.links.push(l);
        self.latency_s += f.topology().latency_s()[l as usize];
    }

    fn bundle(&mut self, f: &Fabric, b: u32, coefficient: f64) {
        self.usage.push(Usage {
            constraint: f.n_links() as u32 + b,
            coefficient,
        });
    }
}

/// What a route carries, which decides how ECMP treats a multi-plane tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// One connection, hashed onto one port of one plane.
    Connection,
    /// A collective's edge, standing for NCCL channels striped over the endpoint's ports: split
    /// over the planes and hashed within each (module docs).
    Channels,
    /// An edge of a reduction tree rooted at slot `root` (mod their number) of every hop ECMP
    /// would hash (module docs).
    Tree { root: u32 },
}

/// How an ECMP hop picks among its candidate links.
#[derive(Debug, Clone, Copy)]
enum Choice {
    /// `ecmp_hash(seed, key, node) % n` over the live candidates, as a switch hashing the
    /// flow's header would.
    Hash { seed: u64, key: u64 },
    /// The candidate in slot `root % slots` at every switch alike (a reduction tree's way to
    /// its root); where that one is down or does not reach the destination, live candidate
    /// `root % live` instead.
    Root(u32),
}

/// One hop's candidate links, the live ones among its `slots` next links (in link-id order),
/// and the choice that picks among them. A tree's root names a slot among all the links,
/// down or not, so that it names the same link whatever else is down.
struct Candidates {
    links: Vec<u32>,
    choice: Choice,
    slots: u32,
    /// The slot a tree's root names, and the index in `links` of its link if live.
    root_slot: Option<u32>,
    at_root: Option<usize>,
}

impl Candidates {
    fn new() -> Candidates {
        Candidates {
            links: Vec::with_capacity(64),
            choice: Choice::Root(0),
            slots: 0,
            root_slot: None,
            at_root: None,
        }
    }

    /// A hop of `n_slots` next links, picked by `choice`.
    fn start(&mut self, choice: Choice, n_slots: u32) {
        self.links.clear();
        self.choice = choice;
        self.slots = 0;
        self.root_slot = match choice {
            Choice::Root(root) if n_slots > 0 => Some(root % n_slots),
            _ => None,
        };
        self.at_root = None;
    }

    /// The hop's next link, taken as a candidate when `live`.
    fn offer(&mut self, link: u32, live: bool) {
        if live {
            if self.root_slot == Some(self.slots) {
                self.at_root = Some(self.links.len());
            }
            self.links.push(link);
        }
        self.slots += 1;
    }

    fn pick(&self, node: u32) -> std::result::Result<u32, NoPath> {
        let n = self.links.len();
        if n == 0 {
            return Err(NoPath);
        }
        let i = match self.choice {
            Choice::Hash { seed, key } => (ecmp_hash(seed, key, node as u64) % n as u64) as usize,
            // Indexed among the live candidates, a root would name another link at a switch
            // with some other link down, and the tree would leave its root there.
            Choice::Root(root) => self.at_root.unwrap_or(root as usize % n),
        };
        Ok(self.links[i])
    }
}

impl Choice {
    /// The choice at a spine's hop up to a core and at that core's hop down, where a leaf
    /// took slot `root % leaf_up`: a tree's root there is `root / leaf_up`, so consecutive
    /// roots take every group (leaf slot) before a second core of one group.
    fn above_leaf(self, leaf_up: u32) -> Choice {
        match self {
            Choice::Root(root) => Choice::Root(root / leaf_up),
            hash => hash,
        }
    }

    /// The choice within plane `p` of an edge split over the planes: a hash takes the
    /// plane's own key (independent paths); a tree keeps its root.
    fn in_plane(self, p: u32) -> Choice {
        match self {
            Choice::Hash { seed, key } => Choice::Hash {
                seed,
                key: rng::plane_key(key, p),
            },
            root => root,
        }
    }
}

/// How a route crosses one tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Ecmp,
    EcmpPerPlane,
    Spray,
}

/// Routes `src -> dst` from the fabric's structure into `out`. Returns Ok(false) when the
/// pair is not covered by the structure (the caller then searches the graph).
#[allow(clippy::too_many_arguments)]
pub fn route(
    f: &Fabric,
    src: u32,
    dst: u32,
    key: u64,
    seed: u64,
    modes: [Mode; 2],
    traffic: Traffic,
    out: &mut Routed,
) -> Result<bool> {
    let tier = |m: Mode| match (m, traffic) {
        (Mode::Ecmp, Traffic::Connection) => Tier::Ecmp,
        (Mode::Ecmp, Traffic::Channels | Traffic::Tree { .. }) => Tier::EcmpPerPlane,
        (Mode::Spray, _) => Tier::Spray,
    };
    // NVLS in a domain uses every switch chip (module docs).
    let tiers = match traffic {
        Traffic::Tree { .. } => [Tier::Spray, tier(modes[1])],
        _ => modes.map(tier),
    };
    let choice = match traffic {
        Traffic::Tree { root } => Choice::Root(root),
        _ => Choice::Hash { seed, key },
    };
    out.clear();
    if src == dst {
        return Err(Error::SameEndpoints(format!(
            "flow from {} to itself: src and dst must differ",
            f.node_name(src)
        )));
    }
    let gpus = f.n_gpus;
    if src < gpus && dst < gpus {
        if let (Some((da, ea)), Some((db, eb))) = (f.gpu_domain(src), f.gpu_domain(dst)) {
            if da == db {
                let placed = f.domain(da);
                clos_route(f, &placed, ea, eb, choice, tiers[0], out)
                    .map_err(|_| no_path(f, src, dst))?;
                return Ok(true);
            }
        }
        if f.n_nics == 0 || f.scale_out.is_none() {
            return Ok(false);
        }
        let placed = f.scale_out_placed_opt().expect("scale-out");
        let up = f.nic_link_base + 2 * src;
        let down = f.nic_link_base + 2 * dst + 1;
        let caps = f.link_capacity_Bps();
        if caps[up as usize] <= 0.0 || caps[down as usize] <= 0.0 {
            return Err(no_path(f, src, dst));
        }
        out.link(f, up);
        let one_path = clos_route(f, &placed, src, dst, choice, tiers[1], out)
            .map_err(|_| no_path(f, src, dst))?;
        out.link(f, down);
        if !one_path {
            // Split, the flow has no one path (`Routed::links`): its host links alone, with
            // nothing between them, would read as a path that is none.
            out.links.clear();
        }
        return Ok(true);
    }
    if let Some(placed) = f.scale_out_placed_opt() {
        let range = placed.endpoint_base..placed.endpoint_base + placed.shape.n_endpoints;
        if range.contains(&src) && range.contains(&dst) {
            let (a, b) = (src - placed.endpoint_base, dst - placed.endpoint_base);
            clos_route(f, &placed, a, b, choice, tiers[1], out)
                .map_err(|_| no_path(f, src, dst))?;
            return Ok(true);
        }
    }
    Ok(false)
}

fn no_path(f: &Fabric, src: u32, dst: u32) -> Error {
    Error::ZeroCapacityPath(format!(
        "no path from {} to {} survives: every up-down path crosses a link that is down",
        f.node_name(src),
        f.node_name(dst)
    ))
}

struct NoPath;

/// Live-link checks of one placed Clos; with no faults every check is skipped.
struct Alive<'a> {
    s: &'a ClosShape,
    base: u32,
    caps: &'a [f64],
    faulty: bool,
}

impl Alive<'_> {
    #[inline]
    fn up(&self, offset: u32) -> bool {
        !self.faulty || self.caps[(self.base + offset) as usize] > 0.0
    }

    fn leaf_down_ok(&self, p: u32, b: u32) -> bool {
        (0..self.s.endpoint_links[p as usize]).any(|k| self.up(self.s.endpoint_link(p, b, k, true)))
    }

    /// A live down path from `spine` to endpoint `b`, or up through a core and down.
    fn spine_reaches(&self, p: u32, spine: u32, b: u32) -> bool {
        let s = self.s;
        let lb = s.leaf_of(b);
        if s.tiers == 2 {
            let w = s.leaf_spine_width;
            return (0..w).any(|k| self.up(s.leaf_spine_link(p, lb, spine * w + k, true)))
                && self.leaf_down_ok(p, b);
        }
        if spine / s.leaf_up == s.pod_of_leaf(lb) {
            return self.up(s.leaf_spine_link(p, lb, spine % s.leaf_up, true))
                && self.leaf_down_ok(p, b);
        }
        (0..s.spine_up).any(|r| {
            self.up(s.spine_core_link(p, spine, r, false))
                && self.core_reaches(p, s.core_of_port(spine, r), b)
        })
    }

    fn core_reaches(&self, p: u32, core: u32, b: u32) -> bool {
        let s = self.s;
        let lb = s.leaf_of(b);
        let (group, c) = (core / s.cores_per_group, core % s.cores_per_group);
        let spine_b = s.pod_of_leaf(lb) * s.leaf_up + group;
        let w2 = s.spine_core_width;
        (0..w2).any(|k| self.up(s.spine_core_link(p, spine_b, c * w2 + k, true)))
            && self.up(s.leaf_spine_link(p, lb, group, true))
            && self.leaf_down_ok(p, b)
    }

    fn leaf_reaches(&self, p: u32, la: u32, b: u32) -> bool {
        let s = self.s;
        if la == s.leaf_of(b) {
            return self.leaf_down_ok(p, b);
        }
        (0..s.leaf_up).any(|q| {
            self.up(s.leaf_spine_link(p, la, q, false))
                && self.spine_reaches(p, s.spine_of_port(la, q), b)
        })
    }
}

/// Routes endpoint `a` to `b` of a placed Clos into `out`; Ok(true) when the route is one
/// path (`Routed::links`).
#[allow(clippy::too_many_arguments)]
fn clos_route(
    f: &Fabric,
    placed: &Placed,
    a: u32,
    b: u32,
    choice: Choice,
    tier: Tier,
    out: &mut Routed,
) -> std::result::Result<bool, NoPath> {
    let alive = Alive {
        s: placed.shape,
        base: placed.link_base,
        caps: f.link_capacity_Bps(),
        faulty: placed.faulty,
    };
    let planes = placed.shape.planes;
    match tier {
        // One plane leaves nothing to split: striped ECMP is plain ECMP there, bit for bit.
        Tier::EcmpPerPlane if planes > 1 => {
            ecmp_per_plane(f, placed, &alive, a, b, choice, out).map(|()| false)
        }
        Tier::Ecmp | Tier::EcmpPerPlane => {
            ecmp(f, placed, &alive, 0..planes, a, b, choice, out).map(|()| true)
        }
        Tier::Spray => spray(f, placed, &alive, a, b, out).map(|()| false),
    }
}

/// ECMP from endpoint `a` to `b`, its first hop among the uplinks of `planes`.
#[allow(clippy::too_many_arguments)]
fn ecmp(
    f: &Fabric,
    placed: &Placed,
    alive: &Alive,
    planes: std::ops::Range<u32>,
    a: u32,
    b: u32,
    choice: Choice,
    out: &mut Routed,
) -> std::result::Result<(), NoPath> {
    let s = placed.shape;
    let lb_ = placed.link_base;
    let (la, lb) = (s.leaf_of(a), s.leaf_of(b));
    let mut cand = Candidates::new();
    // Endpoint: any uplink of those planes from whose leaf the destination is reachable.
    let n_up = planes.clone().map(|p| s.endpoint_links[p as usize]).sum();
    cand.start(choice, n_up);
    for p in planes {
        let reaches = !alive.faulty || alive.leaf_reaches(p, la, b);
        for k in 0..s.endpoint_links[p as usize] {
            let l = s.endpoint_link(p, a, k, false);
            cand.offer(l, reaches && alive.up(l));
        }
    }
    let first = cand.pick(placed.endpoint_base + a)?;
    let (p, _, _) = s.locate(first);
    out.link(f, lb_ + first);
    let leaf_node = placed.node_base + s.leaf_node(p, la);
    let down_to_b = |cand: &mut Candidates| {
        cand.start(choice, s.endpoint_links[p as usize]);
        for k in 0..s.endpoint_links[p as usize] {
            let l = s.endpoint_link(p, b, k, true);
            cand.offer(l, alive.up(l));
        }
    };
    if la != lb {
        // Leaf up to a spine.
        cand.start(choice, s.leaf_up);
        for q in 0..s.leaf_up {
            let l = s.leaf_spine_link(p, la, q, false);
            cand.offer(
                l,
                alive.up(l) && (!alive.faulty || alive.spine_reaches(p, s.spine_of_port(la, q), b)),
            );
        }
        let l = cand.pick(leaf_node)?;
        out.link(f, lb_ + l);
        let (_, _, pos) = s.locate(l);
        let spine = s.spine_of_port(la, pos % s.leaf_up);
        let spine_node = placed.node_base + s.spine_node(p, spine);
        let mut last_spine = spine;
        let mut last_spine_node = spine_node;
        if s.tiers == 3 && spine / s.leaf_up != s.pod_of_leaf(lb) {
            // Spine up to a core, core down to the destination pod's spine of the same group.
            cand.start(choice.above_leaf(s.leaf_up), s.spine_up);
            for r in 0..s.spine_up {
                let l = s.spine_core_link(p, spine, r, false);
                cand.offer(
                    l,
                    alive.up(l)
                        && (!alive.faulty || alive.core_reaches(p, s.core_of_port(spine, r), b)),
                );
            }
            let l = cand.pick(spine_node)?;
            out.link(f, lb_ + l);
            let (_, _, pos) = s.locate(l);
            let core = s.core_of_port(spine, pos % s.spine_up);
            let (group, c) = (core / s.cores_per_group, core % s.cores_per_group);
            let spine_b = s.pod_of_leaf(lb) * s.leaf_up + group;
            let w2 = s.spine_core_width;
            cand.start(choice.above_leaf(s.leaf_up), w2);
            for k in 0..w2 {
                let l = s.spine_core_link(p, spine_b, c * w2 + k, true);
                cand.offer(l, alive.up(l));
            }
            let l = cand.pick(placed.node_base + s.core_node(p, core))?;
            out.link(f, lb_ + l);
            last_spine = spine_b;
            last_spine_node = placed.node_base + s.spine_node(p, spine_b);
        }
        // Spine down to the destination leaf.
        if s.tiers == 2 {
            let w = s.leaf_spine_width;
            cand.start(choice, w);
            for k in 0..w {
                let l = s.leaf_spine_link(p, lb, last_spine * w + k, true);
                cand.offer(l, alive.up(l));
            }
        } else {
            cand.start(choice, 1);
            let l = s.leaf_spine_link(p, lb, last_spine % s.leaf_up, true);
            cand.offer(l, alive.up(l));
        }
        let l = cand.pick(last_spine_node)?;
        out.link(f, lb_ + l);
    }
    down_to_b(&mut cand);
    let l = cand.pick(placed.node_base + s.leaf_node(p, lb))?;
    out.link(f, lb_ + l);
    Ok(())
}

/// ECMP for a collective's edge on a multi-plane Clos: each plane takes the part of the edge
/// a sprayed flow would (`PlaneShares`) on one path chosen in the plane (`Choice::in_plane`):
/// hashed with the plane's own key, so the planes' paths are independent, or a tree's root. Latency is one path's (all planes' are alike).
#[allow(clippy::too_many_arguments)]
fn ecmp_per_plane(
    f: &Fabric,
    placed: &Placed,
    alive: &Alive,
    a: u32,
    b: u32,
    choice: Choice,
    out: &mut Routed,
) -> std::result::Result<(), NoPath> {
    let s = placed.shape;
    let shares = PlaneShares::new(f, placed, alive, a, b)?;
    let links_before = out.links.len();
    let mut path_latency_s = None;
    for p in 0..s.planes {
        let share = shares.of(s, p);
        if share == 0.0 {
            continue;
        }
        let first = out.usage.len();
        ecmp(f, placed, alive, p..p + 1, a, b, choice.in_plane(p), out)?;
        for u in &mut out.usage[first..] {
            u.coefficient *= share;
        }
        out.latency_s = *path_latency_s.get_or_insert(out.latency_s);
    }
    // Split over planes, the edge has no one path.
    out.links.truncate(links_before);
    Ok(())
}

/// Capacity in force of endpoint `e`'s links in plane `p`, up or down.
fn plane_Bps(f: &Fabric, placed: &Placed, p: u32, e: u32, down: bool) -> f64 {
    let s = placed.shape;
    let caps = f.link_capacity_Bps();
    (0..s.endpoint_links[p as usize])
        .map(|k| caps[(placed.link_base + s.endpoint_link(p, e, k, down)) as usize])
        .sum()
}

/// Each plane's part of a flow from endpoint `a` to `b` split over the planes (sprayed, or a
/// collective's edge under striped ECMP). On a faulty Clos: in proportion to the smaller of
/// the source's and the destination's capacity in each plane that still reaches the
/// destination (the most the ends pass, and never less than with a degraded link down),
/// computed once (a reachability check can be long); on a healthy one, the endpoint's share
/// of links, with no search and no allocation.
struct PlaneShares {
    faulty: Vec<f64>,
}

impl PlaneShares {
    fn new(
        f: &Fabric,
        placed: &Placed,
        alive: &Alive,
        a: u32,
        b: u32,
    ) -> std::result::Result<PlaneShares, NoPath> {
        if !alive.faulty {
            return Ok(PlaneShares { faulty: Vec::new() });
        }
        let s = placed.shape;
        let la = s.leaf_of(a);
        let reach: Vec<f64> = (0..s.planes)
            .map(|p| match alive.leaf_reaches(p, la, b) {
                true => plane_Bps(f, placed, p, a, false).min(plane_Bps(f, placed, p, b, true)),
                false => 0.0,
            })
            .collect();
        let total_Bps: f64 = reach.iter().sum();
        if !(total_Bps > 0.0) {
            return Err(NoPath);
        }
        Ok(PlaneShares {
            faulty: reach.iter().map(|c| c / total_Bps).collect(),
        })
    }

    fn of(&self, s: &ClosShape, p: u32) -> f64 {
        match self.faulty.get(p as usize) {
            Some(&share) => share,
            None => s.endpoint_links[p as usize] as f64 / s.links_per_endpoint() as f64,
        }
    }
}

fn spray(
    f: &Fabric,
    placed: &Placed,
    alive: &Alive,
    a: u32,
    b: u32,
    out: &mut Routed,
) -> std::result::Result<(), NoPath> {
    let s = placed.shape;
    let (la, lb) = (s.leaf_of(a), s.leaf_of(b));
    let mut latency_s: f64 = 0.0;
    let lat = |l: u32| f.topology().latency_s()[(placed.link_base + l) as usize];
    let capacity = |l: u32| f.link_capacity_Bps()[(placed.link_base + l) as usize];
    let shares = PlaneShares::new(f, placed, alive, a, b)?;
    let share = |p: u32| shares.of(s, p);
    // On a healthy Clos every flow splits over the planes alike, in proportion to the
    // endpoint's links, and an endpoint's bundle pooling its links in every plane stands for
    // them. After a fault, flows split differently (a plane cut beyond the first switch
    // carries none of some flows), so each flow puts its plane's part on every live endpoint
    // link there, in proportion to capacity, as adaptive spreading does; pooled, flows split
    // unlike one another could overfill a link.
    let endpoint = |e: u32, down: bool, bundle: Option<u32>, out: &mut Routed| match bundle {
        Some(bundle) if !alive.faulty => out.bundle(f, placed.bundle_base + bundle, 1.0),
        _ => {
            for p in (0..s.planes).filter(|&p| share(p) > 0.0) {
                let in_plane_Bps = plane_Bps(f, placed, p, e, down);
                for k in 0..s.endpoint_links[p as usize] {
                    let l = s.endpoint_link(p, e, k, down);
                    if capacity(l) > 0.0 {
                        out.usage.push(Usage {
                            constraint: placed.link_base + l,
                            coefficient: share(p) * capacity(l) / in_plane_Bps,
                        });
                    }
                }
            }
        }
    };
    endpoint(a, false, s.endpoint_up_bundle(a), out);
    let mut latency_plane = None;
    for p in 0..s.planes {
        let share = share(p);
        if share == 0.0 {
            continue;
        }
        latency_plane.get_or_insert(p);
        if la == lb {
            continue;
        }
        out.bundle(f, placed.bundle_base + s.leaf_up_bundle(p, la), share);
        let (pa, pb) = (s.pod_of_leaf(la), s.pod_of_leaf(lb));
        if s.tiers == 3 && pa != pb {
            out.bundle(f, placed.bundle_base + s.pod_up_bundle(p, pa), share);
            out.bundle(f, placed.bundle_base + s.pod_down_bundle(p, pb), share);
        }
        out.bundle(f, placed.bundle_base + s.leaf_down_bundle(p, lb), share);
    }
    endpoint(b, true, s.endpoint_down_bundle(b), out);
    // Latency of one up-down path in the first usable plane (all are alike).
    let p = latency_plane.expect("a usable plane");
    latency_s += lat(s.endpoint_link(p, a, 0, false)) + lat(s.endpoint_link(p, b, 0, true));
    if la != lb {
        latency_s +=
            lat(s.leaf_spine_link(p, la, 0, false)) + lat(s.leaf_spine_link(p, lb, 0, true));
        if s.tiers == 3 && s.pod_of_leaf(la) != s.pod_of_leaf(lb) {
            let spine = s.spine_of_port(la, 0);
            latency_s += lat(s.spine_core_link(p, spine, 0, false))
                + lat(s.spine_core_link(p, spine, 0, true));
        }
    }
    out.latency_s += latency_s;
    Ok(())
}
