//! Routing turns a (source, destination, flow key) into the links a flow crosses.
//!
//! Generic graphs use shortest paths by hop count with per-hop ECMP: at each node the flow
//! takes one of the next links that lie on a shortest path, chosen by the fixed hash
//! `rng::ecmp_hash(seed, key, node)` over those candidates in link-id order, as a switch
//! hashing a flow's header would. Links of zero capacity are treated as down.
//!
//! Distances are kept between the *core* nodes only. A node whose links all join it to one
//! other node (a host or NPU on its switch, with any number of parallel links either way) is
//! *pendant* on that node; every other node is core. No shortest path passes through a
//! pendant node (it would leave by the node it came from), so distances between core nodes
//! are those of the core graph alone, and a pendant node is one hop further than its
//! neighbour. Distances to each core node are computed once by a reverse breadth-first search
//! over the core and kept: in a star, tree or leaf-spine built by hand the core is the
//! switches, so the search and the cache grow with switches, not hosts.

pub mod structured;

use crate::error::{Error, Result};
use crate::ids::{LinkId, NodeId};
use crate::rng::ecmp_hash;
use crate::topology::Topology;

const UNREACHED: u32 = u32::MAX;
/// No node (a core node's `parent`, a pendant node's `core` index).
const NONE: u32 = u32::MAX;
/// Distance entries kept across destinations before the cache is emptied: about 1 GiB at
/// most, and a quarter of the memory available (`cache_max_entries`), which is read once,
/// when the cache first outgrows `CACHE_SMALL_ENTRIES` (64 MiB, kept on any machine).
const CACHE_MAX_ENTRIES: usize = 1 << 28;
const CACHE_SMALL_ENTRIES: usize = 1 << 24;

/// The most distance entries (4 bytes each) a router keeps with `available` bytes free.
fn cache_max_entries(available: Option<u64>) -> usize {
    let quarter = available.map_or(u64::MAX, |b| b / 4 / 4);
    quarter.clamp(CACHE_SMALL_ENTRIES as u64, CACHE_MAX_ENTRIES as u64) as usize
}

/// A topology split into core and pendant nodes (see the module notes), with the links
/// between core nodes as adjacency lists over core indices. Capacities play no part: a
/// pendant node whose links are down is still pendant, and unreachable.
#[derive(Debug, Default, Clone)]
struct Shape {
    /// The topology this was built for, by size (a router serves one topology).
    n_nodes: usize,
    n_links: usize,
    /// Per node: the one node a pendant node is linked to (always a core node), else `NONE`.
    parent: Vec<u32>,
    /// Per node: its index among the core nodes (in id order), `NONE` if pendant.
    core: Vec<u32>,
    /// Per core node, the links to other core nodes leaving it, in link-id order, each with
    /// the core index of its far end; `out_offsets[c]..out_offsets[c + 1]`.
    out_offsets: Vec<usize>,
    out: Vec<(u32, u32)>,
    /// Per core node, the links from other core nodes entering it, with the near end's index.
    in_offsets: Vec<usize>,
    into: Vec<(u32, u32)>,
}

impl Shape {
    fn new(topo: &Topology) -> Shape {
        let n = topo.n_nodes();
        let (link_src, link_dst) = (topo.link_src(), topo.link_dst());
        let mut parent = vec![NONE; n];
        for (v, p) in parent.iter_mut().enumerate() {
            let node = NodeId(v as u32);
            let ends = topo.out_links(node).iter().map(|&l| link_dst[l as usize]);
            let ends = ends.chain(topo.in_links(node).iter().map(|&l| link_src[l as usize]));
            let mut one = NONE;
            let mut single = true;
            for w in ends {
                if one == NONE {
                    one = w;
                } else if w != one {
                    single = false;
                    break;
                }
            }
            if single && one != v as u32 {
                *p = one;
            }
        }
        // Two nodes linked only to each other are each other's one neighbour: the lower id
        // stays in the core (set first), so a pendant node's neighbour is always core.
        for v in 0..n {
            let p = parent[v];
            if p != NONE && parent[p as usize] != NONE {
                parent[v] = NONE;
            }
        }
        let mut core = vec![NONE; n];
        let mut n_core = 0u32;
        for v in 0..n {
            if parent[v] == NONE {
                core[v] = n_core;
                n_core += 1;
            }
        }
        let (mut out_offsets, mut out) = (Vec::with_capacity(n_core as usize + 1), Vec::new());
        let (mut in_offsets, mut into) = (Vec::with_capacity(n_core as usize + 1), Vec::new());
        out_offsets.push(0);
        in_offsets.push(0);
        for v in (0..n).filter(|&v| parent[v] == NONE) {
            let node = NodeId(v as u32);
            for &l in topo.out_links(node) {
                let c = core[link_dst[l as usize] as usize];
                if c != NONE {
                    out.push((l, c));
                }
            }
            for &l in topo.in_links(node) {
                let c = core[link_src[l as usize] as usize];
                if c != NONE {
                    into.push((l, c));
                }
            }
            out_offsets.push(out.len());
            in_offsets.push(into.len());
        }
        Shape {
            n_nodes: n,
            n_links: topo.n_links(),
            parent,
            core,
            out_offsets,
            out,
            in_offsets,
            into,
        }
    }

    fn n_core(&self) -> usize {
        self.out_offsets.len() - 1
    }

    fn core_out(&self, c: u32) -> &[(u32, u32)] {
        &self.out[self.out_offsets[c as usize]..self.out_offsets[c as usize + 1]]
    }

    /// Breadth-first hop distances from every core node to core node `to` (by core index),
    /// within the core, over the links of positive capacity when capacities are given.
    fn distances_to(&self, capacity_Bps: Option<&[f64]>, to: u32) -> Vec<u32> {
        let mut dist = vec![UNREACHED; self.n_core()];
        let mut queue = std::collections::VecDeque::new();
        dist[to as usize] = 0;
        queue.push_back(to);
        while let Some(v) = queue.pop_front() {
            let (a, b) = (self.in_offsets[v as usize], self.in_offsets[v as usize + 1]);
            for &(l, u) in &self.into[a..b] {
                if capacity_Bps.is_some_and(|c| c[l as usize] <= 0.0) {
                    continue;
                }
                if dist[u as usize] == UNREACHED {
                    dist[u as usize] = dist[v as usize] + 1;
                    queue.push_back(u);
                }
            }
        }
        dist
    }

    /// The core node a path to `dst` ends at before its last hop when `dst` is pendant (its
    /// neighbour), else `dst` itself, by core index; and the hops from there (1 or 0).
    fn target(&self, dst: NodeId) -> (u32, u32) {
        match self.parent[dst.index()] {
            NONE => (self.core[dst.index()], 0),
            p => (self.core[p as usize], 1),
        }
    }

    /// Whether some path leads from `src` to `dst` (src != dst), over the links of positive
    /// capacity when capacities are given.
    fn connected(
        &self,
        topo: &Topology,
        capacity_Bps: Option<&[f64]>,
        src: NodeId,
        dst: NodeId,
    ) -> bool {
        let live = |l: &u32| capacity_Bps.is_none_or(|c| c[*l as usize] > 0.0);
        let (to, last) = self.target(dst);
        if last == 1 && !topo.in_links(dst).iter().any(live) {
            return false;
        }
        let from = match self.parent[src.index()] {
            NONE => self.core[src.index()],
            p => {
                if !topo.out_links(src).iter().any(live) {
                    return false;
                }
                self.core[p as usize]
            }
        };
        self.distances_to(capacity_Bps, to)[from as usize] != UNREACHED
    }
}

#[derive(Debug, Default, Clone)]
pub struct Router {
    /// The topology's core and pendant nodes (built at the first route).
    shape: Shape,
    /// Per core node (by core index), the hop distance of every core node to it over links
    /// with capacity > 0 (empty until a flow goes there or to a node pendant on it):
    /// indexed, as a lookup per flow adds up.
    distances: Vec<Vec<u32>>,
    /// Core nodes with distances kept (each holds one entry per core node).
    cached: Vec<u32>,
    /// The last path found, and the next-hop candidates at a node (reused buffers).
    path: Vec<LinkId>,
    candidates: Vec<u32>,
    /// `cache_max_entries`, once the cache has grown past `CACHE_SMALL_ENTRIES`.
    max_entries: Option<usize>,
}

impl Router {
    pub fn new() -> Self {
        Router::default()
    }

    /// The ECMP path from `src` to `dst` for the flow with `key`, under `seed`.
    /// `capacity_Bps` gives the links' capacities in force (0 = down).
    pub fn route(
        &mut self,
        topo: &Topology,
        capacity_Bps: &[f64],
        src: NodeId,
        dst: NodeId,
        key: u64,
        seed: u64,
    ) -> Result<&[LinkId]> {
        if src == dst {
            return Err(Error::SameEndpoints(format!(
                "flow from node {} to itself: src and dst must differ",
                src.0
            )));
        }
        if self.shape.n_nodes != topo.n_nodes()
            || self.shape.n_links != topo.n_links()
            || self.shape.out_offsets.is_empty()
        {
            self.shape = Shape::new(topo);
            self.distances.clear();
            self.cached.clear();
        }
        let (to, last) = self.shape.target(dst);
        let live = |l: &u32| capacity_Bps[*l as usize] > 0.0;
        if last == 1 && !topo.in_links(dst).iter().any(live) {
            return Err(no_path_error(topo, &self.shape, src, dst));
        }
        self.cache_distances_to(capacity_Bps, to);
        let (shape, dist) = (&self.shape, &self.distances[to as usize]);
        let (path, candidates) = (&mut self.path, &mut self.candidates);
        path.clear();
        let mut node = src;
        let p = shape.parent[src.index()];
        // A pendant source's live links all lead to its neighbour: any of them is a first hop
        // on a shortest path, if the neighbour reaches dst.
        let from = if p == NONE { src } else { NodeId(p) };
        if dist[shape.core[from.index()] as usize] == UNREACHED
            || (p != NONE && !topo.out_links(src).iter().any(live))
        {
            return Err(no_path_error(topo, shape, src, dst));
        }
        if p != NONE {
            candidates.clear();
            candidates.extend(topo.out_links(src).iter().copied().filter(live));
            let l = pick(candidates, seed, key, src);
            path.push(LinkId(l));
            node = NodeId(p);
        }
        while node != dst {
            candidates.clear();
            // node is a core node here; dst is `last` hops from `to`.
            let want = dist[shape.core[node.index()] as usize] + last - 1;
            if want == 0 {
                // The last hop: the links from node into dst, scanning whichever list is
                // shorter (both are in id order, so the candidates are the same).
                let (out, into) = (topo.out_links(node), topo.in_links(dst));
                if into.len() < out.len() {
                    candidates.extend(
                        into.iter()
                            .copied()
                            .filter(|&l| live(&l) && topo.link_src()[l as usize] == node.0),
                    );
                } else {
                    candidates.extend(
                        out.iter()
                            .copied()
                            .filter(|&l| live(&l) && topo.link_dst()[l as usize] == dst.0),
                    );
                }
            } else {
                // Only core nodes lie on the way (a pendant node other than dst is a hop
                // further from dst than node is), so the core links are the ones to scan.
                let target = want - last;
                candidates.extend(
                    shape
                        .core_out(shape.core[node.index()])
                        .iter()
                        .filter(|&&(l, c)| live(&l) && dist[c as usize] == target)
                        .map(|&(l, _)| l),
                );
            }
            let l = pick(candidates, seed, key, node);
            path.push(LinkId(l));
            node = NodeId(topo.link_dst()[l as usize]);
        }
        Ok(path)
    }

    /// Computes and keeps the distances to core node `to` (by core index), unless kept.
    fn cache_distances_to(&mut self, capacity_Bps: &[f64], to: u32) {
        let n_core = self.shape.n_core();
        if self.distances.len() < n_core {
            self.distances.resize(n_core, Vec::new());
        }
        if !self.distances[to as usize].is_empty() {
            return;
        }
        let entries = (self.cached.len() + 1) * n_core;
        if entries > CACHE_SMALL_ENTRIES || self.max_entries.is_some() {
            // An unreadable limit (a bad FABRICSIM_AVAILABLE_BYTES) is reported by the
            // memory checks; here it leaves the cache at its most.
            let max = *self.max_entries.get_or_insert_with(|| {
                cache_max_entries(crate::memory::available_bytes().ok().flatten())
            });
            if entries > max {
                for d in self.cached.drain(..) {
                    self.distances[d as usize] = Vec::new();
                }
            }
        }
        let d = self.shape.distances_to(Some(capacity_Bps), to);
        self.cached.push(to);
        self.distances[to as usize] = d;
    }
}

/// The candidate (a link id) the flow with `key` takes at `node` under `seed`.
fn pick(candidates: &[u32], seed: u64, key: u64, node: NodeId) -> u32 {
    if candidates.len() == 1 {
        return candidates[0];
    }
    candidates[(ecmp_hash(seed, key, node.0 as u64) % candidates.len() as u64) as usize]
}

fn no_path_error(topo: &Topology, shape: &Shape, src: NodeId, dst: NodeId) -> Error {
    if !shape.connected(topo, None, src, dst) {
        Error::Unreachable(format!("no path from node {} to node {}", src.0, dst.0))
    } else {
        Error::ZeroCapacityPath(format!(
            "every path from node {} to node {} crosses a link of zero capacity",
            src.0, dst.0
        ))
    }
}

/// Checks that `links` is a path from `src` to `dst` over links of positive capacity that
/// crosses no link twice and reaches `dst` only at its end: a loop back over a link, or on
/// from `dst`, is a routing loop, not a route, and would silently load links the flow has no
/// need of. A node visited twice over distinct links (a hairpin) is accepted.
pub fn check_route(
    topo: &Topology,
    capacity_Bps: &[f64],
    src: NodeId,
    dst: NodeId,
    links: &[LinkId],
) -> Result<()> {
    if src == dst {
        return Err(Error::SameEndpoints(format!(
            "flow from node {} to itself: src and dst must differ",
            src.0
        )));
    }
    let Some(first) = links.first() else {
        return Err(Error::InvalidArgument(format!(
            "route from node {} to node {} is empty",
            src.0, dst.0
        )));
    };
    if topo.link_src()[first.index()] != src.0 {
        return Err(Error::InvalidArgument(format!(
            "route is not a path from node {}: its first link {} starts at node {}",
            src.0,
            first.0,
            topo.link_src()[first.index()]
        )));
    }
    for pair in links.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if topo.link_dst()[a.index()] != topo.link_src()[b.index()] {
            return Err(Error::InvalidArgument(format!(
                "route is not a path: link {} ends at node {} but the next link {} starts at node {}",
                a.0,
                topo.link_dst()[a.index()],
                b.0,
                topo.link_src()[b.index()]
            )));
        }
    }
    let last = links[links.len() - 1];
    if topo.link_dst()[last.index()] != dst.0 {
        return Err(Error::InvalidArgument(format!(
            "route is not a path to node {}: its last link {} ends at node {}",
            dst.0,
            last.0,
            topo.link_dst()[last.index()]
        )));
    }
    if let Some((link, first, second)) = repeated_link(links) {
        return Err(Error::InvalidArgument(format!(
            "route crosses link {link} twice, at positions {first} and {second}: a route from \
             node {} to node {} must cross each link at most once (no loop)",
            src.0, dst.0
        )));
    }
    // A route that reaches dst and goes on delivers the flow there: what follows is a loop
    // that would still load its links (and add their latency).
    if let Some(i) = links[..links.len() - 1]
        .iter()
        .position(|l| topo.link_dst()[l.index()] == dst.0)
    {
        return Err(Error::InvalidArgument(format!(
            "route reaches its destination node {} at link {} (position {i}) and goes on for \
             {} more links: a route must end where it first reaches its destination",
            dst.0,
            links[i].0,
            links.len() - 1 - i
        )));
    }
    for &l in links {
        if capacity_Bps[l.index()] <= 0.0 {
            return Err(Error::ZeroCapacityPath(format!(
                "route crosses link {} whose capacity is 0",
                l.0
            )));
        }
    }
    Ok(())
}

/// The link `links` crosses twice first, as (link, its first position, its second), taking
/// the earliest second crossing; None if every link is crossed once. Short routes (all real
/// ones) are scanned pairwise without allocating; long ones are sorted, O(n log n).
fn repeated_link(links: &[LinkId]) -> Option<(u32, usize, usize)> {
    const SCAN: usize = 32;
    if links.len() <= SCAN {
        return (1..links.len()).find_map(|second| {
            let first = links[..second].iter().position(|&l| l == links[second])?;
            Some((links[second].0, first, second))
        });
    }
    let mut order: Vec<(u32, u32)> = links
        .iter()
        .enumerate()
        .map(|(i, l)| (l.0, i as u32))
        .collect();
    order.sort_unstable();
    // Within a run of one link, the first pair holds its first and second crossing.
    order
        .windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .map(|w| (w[0].0, w[0].1 as usize, w[1].1 as usize))
        .min_by_key(|&(_, _, second)| second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_distance_cache_keeps_a_quarter_of_the_free_memory_within_its_bounds() {
        let gib = 1u64 << 30;
        assert_eq!(cache_max_entries(None), CACHE_MAX_ENTRIES);
        assert_eq!(cache_max_entries(Some(64 * gib)), CACHE_MAX_ENTRIES);
        assert_eq!(cache_max_entries(Some(gib)), (gib / 16) as usize);
        assert_eq!(cache_max_entries(Some(gib / 8)), CACHE_SMALL_ENTRIES);
        // At its limit the cache empties before it takes another destination.
        let t = diamond();
        let mut r = Router::new();
        r.max_entries = Some(2 * t.n_nodes());
        for dst in [3, 1, 2] {
            r.route(&t, t.capacity_Bps(), NodeId(0), NodeId(dst), 0, 0)
                .unwrap();
        }
        assert_eq!(r.cached, vec![2]);
        assert!(r.distances[3].is_empty() && r.distances[1].is_empty());
    }

    #[test]
    fn distances_are_kept_between_switches_not_hosts() {
        // 1000 hosts on switch 1000, which joins switch 1001, with 5 hosts of its own:
        // distances to every host are the two switches', two entries each.
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        for h in 0..1005u32 {
            let s = if h < 1000 { 1000 } else { 1001 };
            let h = if h < 1000 { h } else { h + 2 };
            src.extend([h, s]);
            dst.extend([s, h]);
        }
        src.extend([1000, 1001]);
        dst.extend([1001, 1000]);
        let t = unit_links(1007, src, dst);
        let mut r = Router::new();
        for (a, b) in [
            (0, 1),
            (1, 0),
            (5, 1004),
            (1006, 3),
            (1002, 1000),
            (1001, 7),
        ] {
            let p = r
                .route(&t, t.capacity_Bps(), NodeId(a), NodeId(b), 0, 0)
                .unwrap()
                .to_vec();
            check_route(&t, t.capacity_Bps(), NodeId(a), NodeId(b), &p).unwrap();
        }
        assert_eq!(r.shape.n_core(), 2);
        assert_eq!(r.cached, vec![0, 1]);
        assert!(r.distances.iter().all(|d| d.len() == 2));
    }

    /// `n` nodes and links `src[i] -> dst[i]`, each of capacity 1 and no latency.
    fn unit_links(n: usize, src: Vec<u32>, dst: Vec<u32>) -> Topology {
        let m = src.len();
        Topology::from_links(n, src, dst, vec![1.0; m], vec![0.0; m]).unwrap()
    }

    /// Two parallel two-hop paths 0 -> {1, 2} -> 3.
    fn diamond() -> Topology {
        unit_links(4, vec![0, 0, 1, 2], vec![1, 2, 3, 3])
    }

    #[test]
    fn ecmp_uses_both_paths_deterministically() {
        let topo = diamond();
        let mut r = Router::new();
        let mut firsts = std::collections::BTreeSet::new();
        for key in 0..64 {
            let p = r
                .route(&topo, topo.capacity_Bps(), NodeId(0), NodeId(3), key, 1)
                .unwrap()
                .to_vec();
            assert_eq!(p.len(), 2);
            assert_eq!(
                p,
                r.route(&topo, topo.capacity_Bps(), NodeId(0), NodeId(3), key, 1)
                    .unwrap()
            );
            check_route(&topo, topo.capacity_Bps(), NodeId(0), NodeId(3), &p).unwrap();
            firsts.insert(p[0].0);
        }
        assert_eq!(firsts.into_iter().collect::<Vec<_>>(), vec![0, 1]);
    }

    /// A ring 0 -> 1 -> ... -> n-1 -> 0: link i goes from node i to node i + 1 (mod n).
    fn ring(n: u32) -> Topology {
        let src: Vec<u32> = (0..n).collect();
        let dst: Vec<u32> = (0..n).map(|i| (i + 1) % n).collect();
        unit_links(n as usize, src, dst)
    }

    /// 0 <-> 1 <-> 2: links 0 (0 -> 1), 1 (1 -> 2), 2 (1 -> 0), 3 (2 -> 1).
    fn both_ways() -> Topology {
        unit_links(3, vec![0, 1, 1, 2], vec![1, 2, 0, 1])
    }

    fn message(r: Result<()>) -> String {
        match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    /// `check_route` of `links` from node `src` to node `dst` on `t`, at its capacities.
    fn checked(t: &Topology, src: u32, dst: u32, links: &[u32]) -> Result<()> {
        let ids: Vec<LinkId> = links.iter().map(|&l| LinkId(l)).collect();
        check_route(t, t.capacity_Bps(), NodeId(src), NodeId(dst), &ids)
    }

    #[test]
    fn a_route_crossing_a_link_twice_is_refused() {
        let t = ring(3);
        // 0 -> 1 -> 2 -> 0 -> 1: around once, then link 0 again.
        let m = message(checked(&t, 0, 1, &[0, 1, 2, 0]));
        assert_eq!(
            m,
            "route crosses link 0 twice, at positions 0 and 3: a route from node 0 to node 1 \
             must cross each link at most once (no loop)"
        );
        // Twice around: link 1 is the first to come back, at position 3.
        let m = message(checked(&t, 1, 2, &[1, 2, 0, 1, 2, 0, 1]));
        assert!(
            m.starts_with("route crosses link 1 twice, at positions 0 and 3"),
            "{m}"
        );
        // Beyond the pairwise scan (a sorted search): 40 nodes, around once and two links more.
        let t = ring(40);
        let links: Vec<u32> = (0..40).chain(0..2).collect();
        let m = message(checked(&t, 0, 2, &links));
        assert!(
            m.starts_with("route crosses link 0 twice, at positions 0 and 40:"),
            "{m}"
        );
        // Once around a long ring is fine, and so is a node visited twice over distinct links
        // (a hairpin through a switch) that is not the destination.
        let links: Vec<u32> = (0..39).collect();
        checked(&t, 0, 39, &links).unwrap();
        let both_ways = both_ways();
        // 0 -> 1 -> 0 -> 1 over links 0, 2, 0 repeats link 0; 1 -> 2 -> 1 -> 0 does not.
        assert!(checked(&both_ways, 0, 1, &[0, 2, 0]).is_err());
        checked(&both_ways, 1, 0, &[1, 3, 2]).unwrap();
    }

    #[test]
    fn a_route_going_on_from_its_destination_is_refused() {
        let t = both_ways();
        // 0 -> 1 -> 2 -> 1 crosses no link twice but is at node 1 after its first link.
        let m = message(checked(&t, 0, 1, &[0, 1, 3]));
        assert_eq!(
            m,
            "route reaches its destination node 1 at link 0 (position 0) and goes on for 2 \
             more links: a route must end where it first reaches its destination"
        );
        // 1 -> 0 -> 1 -> 2: back through its source, not its destination, is still a route.
        checked(&t, 1, 2, &[2, 0, 1]).unwrap();
    }

    #[test]
    fn zero_capacity_and_unreachable_are_told_apart() {
        let topo = Topology::from_links(3, vec![0], vec![1], vec![0.0], vec![0.0]).unwrap();
        let mut r = Router::new();
        assert!(matches!(
            r.route(&topo, topo.capacity_Bps(), NodeId(0), NodeId(1), 0, 0),
            Err(Error::ZeroCapacityPath(_))
        ));
        assert!(matches!(
            r.route(&topo, topo.capacity_Bps(), NodeId(0), NodeId(2), 0, 0),
            Err(Error::Unreachable(_))
        ));
    }
}
