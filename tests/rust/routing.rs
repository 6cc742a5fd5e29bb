//! The generic graph router against a slow reference: the router it replaced, which searched
//! the whole graph (every node, hosts included) breadth-first from each destination. Routes
//! must be the same link for link (the same ECMP pick at every hop) and failures the same
//! error, on random stars, trees and leaf-spines built by hand, and on graphs of no such shape,
//! with and without links down.

#![allow(non_snake_case)]

use std::collections::VecDeque;

use fabricsim::ids::{LinkId, NodeId};
use fabricsim::rng::{ecmp_hash, Rng};
use fabricsim::routing::{check_route, Router};
use fabricsim::topology::Topology;
use fabricsim::Error;

const UNREACHED: u32 = u32::MAX;

/// Hop distances from every node to `dst` over the whole graph (reverse breadth-first search),
/// over links of positive capacity when capacities are given.
fn reference_distances(topo: &Topology, capacity_Bps: Option<&[f64]>, dst: NodeId) -> Vec<u32> {
    let mut dist = vec![UNREACHED; topo.n_nodes()];
    let mut queue = VecDeque::new();
    dist[dst.index()] = 0;
    queue.push_back(dst);
    while let Some(v) = queue.pop_front() {
        for &l in topo.in_links(v) {
            if capacity_Bps.is_some_and(|c| c[l as usize] <= 0.0) {
                continue;
            }
            let u = topo.link_src()[l as usize] as usize;
            if dist[u] == UNREACHED {
                dist[u] = dist[v.index()] + 1;
                queue.push_back(NodeId(u as u32));
            }
        }
    }
    dist
}

/// The route by the documented rule, written plainly: at each node, the live out-links whose
/// far end is one hop closer to `dst`, in link-id order, and the one the hash picks.
fn reference_route(
    topo: &Topology,
    capacity_Bps: &[f64],
    src: NodeId,
    dst: NodeId,
    key: u64,
    seed: u64,
) -> Result<Vec<LinkId>, Error> {
    if src == dst {
        return Err(Error::SameEndpoints(format!(
            "flow from node {} to itself: src and dst must differ",
            src.0
        )));
    }
    let dist = reference_distances(topo, Some(capacity_Bps), dst);
    if dist[src.index()] == UNREACHED {
        return Err(
            if reference_distances(topo, None, dst)[src.index()] == UNREACHED {
                Error::Unreachable(format!("no path from node {} to node {}", src.0, dst.0))
            } else {
                Error::ZeroCapacityPath(format!(
                    "every path from node {} to node {} crosses a link of zero capacity",
                    src.0, dst.0
                ))
            },
        );
    }
    let mut path = Vec::new();
    let mut node = src;
    while node != dst {
        let want = dist[node.index()] - 1;
        let candidates: Vec<u32> = topo
            .out_links(node)
            .iter()
            .copied()
            .filter(|&l| {
                capacity_Bps[l as usize] > 0.0 && dist[topo.link_dst()[l as usize] as usize] == want
            })
            .collect();
        let pick = (ecmp_hash(seed, key, node.0 as u64) % candidates.len() as u64) as usize;
        let l = candidates[pick];
        path.push(LinkId(l));
        node = NodeId(topo.link_dst()[l as usize]);
    }
    Ok(path)
}

/// A graph under construction: undirected edges become a link each way, in a random order
/// of link ids and under a random numbering of the nodes, so nothing rests on hosts coming
/// first or links being listed switch by switch.
struct Graph {
    n: usize,
    links: Vec<(u32, u32)>,
}

impl Graph {
    fn new(n: usize) -> Self {
        Graph {
            n,
            links: Vec::new(),
        }
    }

    /// `copies` parallel links each way between `a` and `b`.
    fn both(&mut self, a: u32, b: u32, copies: u32) {
        for _ in 0..copies {
            self.links.push((a, b));
            self.links.push((b, a));
        }
    }

    fn build(mut self, rng: &mut Rng) -> Topology {
        let mut label: Vec<u32> = (0..self.n as u32).collect();
        shuffle(&mut label, rng);
        shuffle(&mut self.links, rng);
        let src = self.links.iter().map(|&(a, _)| label[a as usize]).collect();
        let dst = self.links.iter().map(|&(_, b)| label[b as usize]).collect();
        let m = self.links.len();
        Topology::from_links(self.n, src, dst, vec![1e9; m], vec![0.0; m]).unwrap()
    }
}

fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// 1 link mostly, sometimes 2 or 3 in parallel (several ports to one switch).
fn copies(rng: &mut Rng) -> u32 {
    match rng.below(6) {
        0 => 2,
        1 => 3,
        _ => 1,
    }
}

/// `hosts` nodes on one switch (node 0).
fn star(rng: &mut Rng, hosts: u32) -> Topology {
    let mut g = Graph::new(hosts as usize + 1);
    for h in 1..=hosts {
        let c = copies(rng);
        g.both(h, 0, c);
    }
    g.build(rng)
}

/// A random tree of `switches` switches (each joined to an earlier one), `hosts` hosts each
/// on a random switch.
fn tree(rng: &mut Rng, switches: u32, hosts: u32) -> Topology {
    let mut g = Graph::new((switches + hosts) as usize);
    for s in 1..switches {
        let up = rng.below(s as u64) as u32;
        let c = copies(rng);
        g.both(s, up, c);
    }
    for h in 0..hosts {
        let s = rng.below(switches as u64) as u32;
        let c = copies(rng);
        g.both(switches + h, s, c);
    }
    g.build(rng)
}

/// `leaves` leaves of `hosts` hosts each, every leaf joined to every one of `spines` spines.
fn leaf_spine(rng: &mut Rng, leaves: u32, hosts: u32, spines: u32) -> Topology {
    let n = leaves * hosts + leaves + spines;
    let mut g = Graph::new(n as usize);
    let leaf = |i: u32| leaves * hosts + i;
    let spine = |i: u32| leaves * hosts + leaves + i;
    for h in 0..leaves * hosts {
        let c = copies(rng);
        g.both(h, leaf(h / hosts), c);
    }
    for l in 0..leaves {
        for s in 0..spines {
            let c = copies(rng);
            g.both(leaf(l), spine(s), c);
        }
    }
    g.build(rng)
}

/// A graph of no such shape: a random directed core with one-way links, hosts hung on it
/// (some dual-homed, some with a link one way only, some on a one-way chain), a two-node
/// component, a chain, and an isolated node.
fn tangle(rng: &mut Rng, core: u32, hosts: u32) -> Topology {
    let n = core + hosts + 2 + 3 + 1;
    let mut g = Graph::new(n as usize);
    for a in 0..core {
        for b in 0..core {
            if a != b && rng.below(core as u64) < 2 {
                g.links.push((a, b));
            }
        }
    }
    for h in core..core + hosts {
        let s = rng.below(core as u64) as u32;
        match rng.below(6) {
            0 => {
                let t = rng.below(core as u64) as u32;
                g.both(h, s, 1);
                g.both(h, t, 1);
            }
            1 => g.links.push((h, s)),
            2 => g.links.push((s, h)),
            3 if h > core => {
                // On the previous host: a host of a host, or a chain of hosts.
                g.both(h, h - 1, 1);
            }
            _ => {
                let c = copies(rng);
                g.both(h, s, c);
            }
        }
    }
    let pair = core + hosts;
    g.both(pair, pair + 1, copies(rng));
    let chain = pair + 2;
    g.both(chain, chain + 1, 1);
    g.both(chain + 1, chain + 2, 1);
    g.build(rng)
}

/// Capacities with each link down (0) with probability `down`.
fn capacities(rng: &mut Rng, topo: &Topology, down: f64) -> Vec<f64> {
    (0..topo.n_links())
        .map(|_| if rng.next_f64() < down { 0.0 } else { 1e9 })
        .collect()
}

/// Routes every ordered pair of nodes (or `pairs` random ones) with random keys and seeds
/// through one router (its cache kept across them) and a new router, against the reference.
/// Returns how many of the pairs were routed.
fn agrees(topo: &Topology, capacity_Bps: &[f64], rng: &mut Rng, pairs: Option<usize>) -> usize {
    let n = topo.n_nodes() as u64;
    let all: Vec<(u32, u32)> = match pairs {
        None => (0..n as u32)
            .flat_map(|a| (0..n as u32).map(move |b| (a, b)))
            .collect(),
        Some(k) => (0..k)
            .map(|_| (rng.below(n) as u32, rng.below(n) as u32))
            .collect(),
    };
    let mut router = Router::new();
    let mut routed = 0;
    for (i, &(a, b)) in all.iter().enumerate() {
        let (src, dst) = (NodeId(a), NodeId(b));
        let (key, seed) = (rng.next_u64(), rng.below(4));
        let want = reference_route(topo, capacity_Bps, src, dst, key, seed);
        let got = router
            .route(topo, capacity_Bps, src, dst, key, seed)
            .map(|p| p.to_vec());
        assert_eq!(
            format!("{got:?}"),
            format!("{want:?}"),
            "route {a} -> {b}, key {key}, seed {seed}"
        );
        if i % 7 == 0 {
            let fresh = Router::new()
                .route(topo, capacity_Bps, src, dst, key, seed)
                .map(|p| p.to_vec());
            assert_eq!(format!("{fresh:?}"), format!("{want:?}"));
        }
        if let Ok(p) = got {
            check_route(topo, capacity_Bps, src, dst, &p).unwrap();
            routed += 1;
        }
    }
    routed
}

/// Each shape with all links up and with a tenth, then a third, of them down.
fn agrees_on(make: impl Fn(&mut Rng) -> Topology, cases: u64, pairs: Option<usize>) {
    let mut routed = 0;
    for case in 0..cases {
        let mut rng = Rng::new(1000 + case);
        let topo = make(&mut rng);
        for down in [0.0, 0.1, 0.35] {
            let cap = capacities(&mut rng, &topo, down);
            routed += agrees(&topo, &cap, &mut rng, pairs);
        }
    }
    assert!(routed > 0);
}

#[test]
fn stars_route_as_the_reference() {
    agrees_on(
        |r| {
            let h = 1 + r.below(12) as u32;
            star(r, h)
        },
        20,
        None,
    );
    agrees_on(
        |r| {
            let h = 300 + r.below(200) as u32;
            star(r, h)
        },
        3,
        Some(3000),
    );
}

#[test]
fn trees_route_as_the_reference() {
    agrees_on(
        |r| {
            let (s, h) = (1 + r.below(8) as u32, r.below(20) as u32);
            tree(r, s, h)
        },
        30,
        None,
    );
    agrees_on(|r| tree(r, 40, 600), 3, Some(4000));
}

#[test]
fn leaf_spines_route_as_the_reference() {
    agrees_on(
        |r| {
            let (l, h, s) = (1 + r.below(5), r.below(5), 1 + r.below(4));
            leaf_spine(r, l as u32, h as u32, s as u32)
        },
        30,
        None,
    );
    agrees_on(|r| leaf_spine(r, 32, 16, 8), 2, Some(4000));
}

#[test]
fn graphs_of_no_such_shape_route_as_the_reference() {
    agrees_on(
        |r| {
            let (c, h) = (2 + r.below(10) as u32, r.below(14) as u32);
            tangle(r, c, h)
        },
        40,
        None,
    );
    agrees_on(|r| tangle(r, 60, 300), 3, Some(4000));
}

#[test]
fn graphs_of_no_such_shape_route_correctly() {
    // Shortest by hop count and a valid route wherever the reference finds one, on graphs
    // where few nodes are pendant: a complete graph, a ring, a grid, a ring of dual-homed
    // hosts.
    let mut rng = Rng::new(7);
    let mut complete = Graph::new(7);
    for a in 0..7 {
        for b in a + 1..7 {
            complete.both(a, b, 1);
        }
    }
    let mut ring = Graph::new(9);
    for a in 0..9 {
        ring.both(a, (a + 1) % 9, 1);
    }
    let mut grid = Graph::new(16);
    for a in 0..16u32 {
        if a % 4 != 3 {
            grid.both(a, a + 1, 1);
        }
        if a < 12 {
            grid.both(a, a + 4, 1);
        }
    }
    let mut dual = Graph::new(12);
    for s in 0..4 {
        dual.both(s, (s + 1) % 4, 1);
    }
    for h in 4..12 {
        dual.both(h, h % 4, 1);
        dual.both(h, (h + 1) % 4, 1);
    }
    for g in [complete, ring, grid, dual] {
        let topo = g.build(&mut rng);
        let cap = topo.capacity_Bps().to_vec();
        let mut router = Router::new();
        for a in 0..topo.n_nodes() as u32 {
            for b in (0..topo.n_nodes() as u32).filter(|&b| b != a) {
                let (src, dst) = (NodeId(a), NodeId(b));
                let hops = reference_distances(&topo, None, dst)[a as usize];
                let p = router.route(&topo, &cap, src, dst, 3, 1).unwrap().to_vec();
                assert_eq!(p.len() as u32, hops, "{a} -> {b}");
                check_route(&topo, &cap, src, dst, &p).unwrap();
            }
        }
        agrees(&topo, &cap, &mut rng, None);
    }
}

#[test]
fn hosts_on_one_switch_spread_over_its_parallel_links_by_the_hash() {
    // Two links each way between every host and the switch: both uplinks and both downlinks
    // are taken, by the hash at the host and at the switch.
    let hosts = 64;
    let mut src = Vec::new();
    let mut dst = Vec::new();
    for h in 1..=hosts {
        src.extend([h, h, 0, 0]);
        dst.extend([0, 0, h, h]);
    }
    let m = src.len();
    let topo =
        Topology::from_links(hosts as usize + 1, src, dst, vec![1.0; m], vec![0.0; m]).unwrap();
    let mut router = Router::new();
    let (mut up, mut down) = ([0; 2], [0; 2]);
    for key in 0..200u64 {
        let p = router
            .route(&topo, topo.capacity_Bps(), NodeId(1), NodeId(2), key, 5)
            .unwrap();
        assert_eq!(p.len(), 2);
        up[(p[0].0 % 4) as usize] += 1;
        down[(p[1].0 % 4 - 2) as usize] += 1;
    }
    assert!(
        up.iter().all(|&k| k > 50) && down.iter().all(|&k| k > 50),
        "{up:?} {down:?}"
    );
}
