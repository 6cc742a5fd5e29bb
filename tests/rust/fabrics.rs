//! Structured fabrics through the public crate API: per-hop ECMP read off the structure
//! against the generic graph router (with and without faults), and pooled bundles against
//! their member links.

use fabricsim::ids::{LinkId, NodeId};
use fabricsim::rng::Rng;
use fabricsim::routing::structured::{route, Routed, Traffic};
use fabricsim::routing::{check_route, Router};
use fabricsim::topology::fabric::{Fabric, Mode, NodeKind};
use fabricsim::topology::generators::{
    clos, cluster, nvlink_domains, pcie_server, NvlinkParams, ScaleOutParams,
};
use fabricsim::Error;

const ECMP: [Mode; 2] = [Mode::Ecmp, Mode::Ecmp];

fn scale_out(tiers: u32, planes: u32, radix: u32, oversubscription: [f64; 2]) -> ScaleOutParams {
    ScaleOutParams {
        tiers,
        planes,
        radix,
        oversubscription,
        link_Bps: 50e9,
        switch_latency_s: 1e-7,
        nic_latency_s: 0.0,
        mode: Mode::Ecmp,
    }
}

fn nvlink(gpus: u32, chip_links: Vec<u32>, tiers: u32, chip_ports: u32) -> NvlinkParams {
    NvlinkParams {
        gpus_per_domain: gpus,
        chip_links,
        tiers,
        chip_ports,
        link_Bps: 40e9,
        chip_latency_s: 6e-7,
    }
}

/// A named fabric and the nodes whose pairs its structure routes.
struct Case {
    name: &'static str,
    fabric: Fabric,
    endpoints: Vec<u32>,
    /// Links the generic router must not use (a cluster's NVLinks for scale-out pairs: a
    /// detour through another GPU's NVLink and NIC can tie with the Clos path on hop count,
    /// and the structure keeps cross-domain traffic on the scale-out fabric).
    masked: Vec<u32>,
}

fn bare(name: &'static str, n_hosts: u32, so: ScaleOutParams) -> Case {
    Case {
        name,
        fabric: clos(n_hosts, &so).unwrap(),
        endpoints: (0..n_hosts).collect(),
        masked: Vec::new(),
    }
}

fn cases() -> Vec<Case> {
    let mut out = vec![
        bare("2-tier", 32, scale_out(2, 1, 8, [1.0, 1.0])),
        bare("2-tier partial", 27, scale_out(2, 1, 8, [1.0, 1.0])),
        bare("2-tier 3:1", 16, scale_out(2, 1, 8, [3.0, 1.0])),
        bare("3-tier", 128, scale_out(3, 1, 8, [1.0, 1.0])),
        bare(
            "3-tier partial 2:1 spines",
            70,
            scale_out(3, 1, 8, [1.0, 2.0]),
        ),
        bare("2-plane 2-tier", 64, scale_out(2, 2, 16, [1.0, 1.0])),
        bare("4-plane 3-tier 2:1", 100, scale_out(3, 4, 16, [2.0, 1.0])),
    ];
    for (name, nv) in [
        ("hgx", nvlink(8, vec![5, 4, 4, 5], 1, 64)),
        ("nvl72", nvlink(72, vec![1; 18], 1, 72)),
        ("nvl576", nvlink(576, vec![1; 18], 2, 72)),
    ] {
        let fabric = nvlink_domains(2, &nv).unwrap();
        let endpoints = (0..fabric.n_gpus).collect();
        out.push(Case {
            name,
            fabric,
            endpoints,
            masked: Vec::new(),
        });
    }
    // Clusters: GPU and NIC pairs across domains, scale-out masked to the Clos.
    for (name, nv, n_domains, so) in [
        (
            "hgx cluster 3-tier",
            nvlink(8, vec![5, 4, 4, 5], 1, 64),
            8,
            scale_out(3, 1, 8, [1.0, 1.0]),
        ),
        (
            "nvl72 cluster 2-plane",
            nvlink(72, vec![1; 18], 1, 72),
            2,
            scale_out(3, 2, 16, [1.0, 1.0]),
        ),
    ] {
        let fabric = cluster(n_domains, &nv, 64e9, &so).unwrap();
        let endpoints = (0..fabric.n_gpus + fabric.n_nics).collect();
        let masked = (0..fabric.nic_link_base).collect();
        out.push(Case {
            name,
            fabric,
            endpoints,
            masked,
        });
    }
    out
}

/// A random pair of distinct endpoints, both GPUs or both NICs (hosts). Domains without a
/// scale-out fabric are islands: both GPUs in one domain. A cluster with its NVLinks masked:
/// never two nodes of one domain (their route is the NVLink one).
fn pair(c: &Case, rng: &mut Rng) -> (u32, u32) {
    let n = c.endpoints.len() as u64;
    let f = &c.fabric;
    let dom = |x: u32| f.gpu_domain(x % f.n_gpus.max(1)).map(|d| d.0);
    loop {
        let a = c.endpoints[rng.below(n) as usize];
        let b = c.endpoints[rng.below(n) as usize];
        let same = dom(a) == dom(b);
        let wanted = if f.scale_out.is_none() {
            same
        } else {
            c.masked.is_empty() || !same
        };
        let same_kind = (a < f.n_gpus) == (b < f.n_gpus);
        if a != b && wanted && same_kind {
            return (a, b);
        }
    }
}

fn capacities(c: &Case, f: &Fabric) -> Vec<f64> {
    let mut caps = f.link_capacity_Bps().to_vec();
    for &l in &c.masked {
        caps[l as usize] = 0.0;
    }
    caps
}

fn ids(links: &[u32]) -> Vec<LinkId> {
    links.iter().map(|&l| LinkId(l)).collect()
}

#[test]
fn structured_ecmp_equals_the_generic_router() {
    let mut rng = Rng::new(7);
    for c in cases() {
        let f = &c.fabric;
        let caps = capacities(&c, f);
        let mut router = Router::new();
        let mut out = Routed::default();
        for _ in 0..400 {
            let (a, b) = pair(&c, &mut rng);
            let (key, seed) = (rng.next_u64(), rng.next_u64());
            assert!(
                route(f, a, b, key, seed, ECMP, Traffic::Connection, &mut out).unwrap(),
                "{}: {a}->{b} structured",
                c.name
            );
            let want = router
                .route(f.topology(), &caps, NodeId(a), NodeId(b), key, seed)
                .unwrap();
            assert_eq!(
                ids(&out.links),
                want,
                "{}: {a}->{b} key {key} seed {seed}",
                c.name
            );
            check_route(f.topology(), &caps, NodeId(a), NodeId(b), want).unwrap();
        }
    }
}

#[test]
fn ecmp_uses_every_spine_over_many_keys() {
    let f = clos(32, &scale_out(2, 1, 8, [1.0, 1.0])).unwrap();
    let spine_of = |links: &[u32]| f.topology().link_dst()[links[1] as usize];
    let mut out = Routed::default();
    let mut seen = std::collections::BTreeSet::new();
    for key in 0..200 {
        route(&f, 0, 31, key, 3, ECMP, Traffic::Connection, &mut out).unwrap();
        seen.insert(spine_of(&out.links));
    }
    assert_eq!(
        seen.len(),
        4,
        "a 32-host, 8-port Clos has 4 spines: {seen:?}"
    );
}

/// A copy with `n` random links of the Clos (the scale-out one in a cluster) times `factor`.
fn faulty(f: &Fabric, rng: &mut Rng, n: usize, factor: f64) -> Fabric {
    let placed = f.scale_out_placed_opt();
    let first = placed.map_or(0, |p| p.link_base);
    let n_links = f.n_links() as u32 - first;
    let links: Vec<u32> = (0..n)
        .map(|_| first + rng.below(n_links as u64) as u32)
        .collect();
    f.with_link_factors(&links, factor).unwrap()
}

#[test]
fn ecmp_after_faults_takes_valid_surviving_paths() {
    let mut rng = Rng::new(11);
    // Routes compared; pairs with no up-down path left, with and without a graph detour.
    let (mut same, mut detour_only, mut cut_off) = (0, 0, 0);
    for c in cases() {
        for round in 0..6 {
            let n_down = 1 + round * 3;
            let f = faulty(&c.fabric, &mut rng, n_down, 0.0);
            assert!(f.has_faults(), "{}", c.name);
            let caps = capacities(&c, &f);
            let mut router = Router::new();
            let mut out = Routed::default();
            for _ in 0..150 {
                let (a, b) = pair(&c, &mut rng);
                let (key, seed) = (rng.next_u64(), rng.next_u64());
                let graph = router.route(f.topology(), &caps, NodeId(a), NodeId(b), key, seed);
                match (
                    route(&f, a, b, key, seed, ECMP, Traffic::Connection, &mut out),
                    graph,
                ) {
                    (Ok(found), Ok(graph)) => {
                        assert!(found, "{}: {a}->{b}", c.name);
                        let links = ids(&out.links);
                        check_route(f.topology(), &caps, NodeId(a), NodeId(b), &links)
                            .unwrap_or_else(|e| panic!("{}: {a}->{b}: {e:?}", c.name));
                        // A surviving up-down path is a shortest one, and is picked alike.
                        assert_eq!(links, graph, "{}: {a}->{b} key {key} seed {seed}", c.name);
                        same += 1;
                    }
                    (Ok(_), Err(e)) => {
                        panic!(
                            "{}: the structure routed {a}->{b} but the graph has no path: {e:?}",
                            c.name
                        )
                    }
                    (Err(Error::ZeroCapacityPath(msg)), graph) => {
                        assert!(msg.starts_with("no path from"), "{msg}");
                        match graph {
                            Ok(_) => detour_only += 1,
                            Err(_) => cut_off += 1,
                        }
                    }
                    (Err(e), _) => panic!("{}: {a}->{b}: {e:?}", c.name),
                }
            }
        }
    }
    assert!(
        same > 5000 && cut_off > 0,
        "{same} routes compared, {cut_off} pairs cut off"
    );
    eprintln!(
        "faulty ECMP: {same} equal, {detour_only} only by a non-up-down detour, {cut_off} cut off"
    );
}

#[test]
fn a_downed_spine_is_avoided_and_its_pairs_still_route() {
    let f = clos(32, &scale_out(2, 1, 8, [1.0, 1.0])).unwrap();
    let t = f.topology();
    let spine = 32 + 8; // hosts, then 8 leaves, then spines
    let links: Vec<u32> = (0..f.n_links() as u32)
        .filter(|&l| t.link_src()[l as usize] == spine || t.link_dst()[l as usize] == spine)
        .collect();
    assert_eq!(links.len(), 16, "a spine of 8 ports has 8 cables");
    let g = f.with_link_factors(&links, 0.0).unwrap();
    let mut out = Routed::default();
    let mut rng = Rng::new(2);
    for key in 0..300 {
        let (a, b) = (rng.below(32) as u32, rng.below(32) as u32);
        if a == b {
            continue;
        }
        assert!(route(&g, a, b, key, 1, ECMP, Traffic::Connection, &mut out).unwrap());
        assert!(
            out.links.iter().all(|l| !links.contains(l)),
            "route {:?} crosses the downed spine",
            out.links
        );
    }
}

#[test]
fn bundle_capacities_are_the_sums_of_their_members() {
    let mut rng = Rng::new(5);
    for c in cases() {
        let nominal = &c.fabric;
        let mut fabrics = vec![nominal.clone()];
        for (n, factor) in [(1, 0.0), (5, 0.5), (20, 0.0), (3, 0.25)] {
            let last = fabrics.last().unwrap().clone();
            fabrics.push(faulty(nominal, &mut rng, n, factor));
            // Faults on top of faults.
            fabrics.push(faulty(&last, &mut rng, n, factor));
        }
        for f in &fabrics {
            let caps = f.link_capacity_Bps();
            assert_eq!(f.bundle_capacity_Bps().len(), f.n_bundles(), "{}", c.name);
            for b in 0..f.n_bundles() as u32 {
                let mut sum = 0.0;
                let mut members = 0;
                f.for_each_bundle_member(b, |l| {
                    sum += caps[l as usize];
                    members += 1;
                    assert_eq!(f.bundle_of_link(l), Some(b), "{}: link {l}", c.name);
                });
                assert!(members > 0, "{}: bundle {b} is empty", c.name);
                let got = f.bundle_capacity_Bps()[b as usize];
                assert!(
                    (got - sum).abs() <= 1e-9 * sum.max(1.0),
                    "{}: bundle {b}: {got} != {sum}",
                    c.name
                );
                assert_eq!(f.constraint_capacity_Bps(f.n_links() as u32 + b), got);
            }
        }
    }
}

#[test]
fn spraying_splits_over_surviving_planes_by_their_links() {
    let f = clos(64, &scale_out(2, 2, 16, [1.0, 1.0])).unwrap();
    let spray = [Mode::Spray, Mode::Spray];
    let mut out = Routed::default();
    // Hosts 0 and 63 sit on different leaves: per plane one leaf-up and one leaf-down bundle.
    route(&f, 0, 63, 0, 0, spray, Traffic::Connection, &mut out).unwrap();
    // Coefficients of the bundles (constraints after the links) in the usage list.
    let n = f.n_links() as u32;
    let bundle_shares = |out: &Routed| -> Vec<f64> {
        out.usage
            .iter()
            .filter(|u| u.constraint >= n)
            .map(|u| u.coefficient)
            .collect()
    };
    let shares = bundle_shares(&out);
    assert_eq!(
        shares,
        vec![1.0, 0.5, 0.5, 0.5, 0.5, 1.0],
        "{:?}",
        out.usage
    );
    // Plane 1 down: the flow crosses plane 0 alone.
    let placed = f.scale_out_placed_opt().unwrap();
    let plane1: Vec<u32> = (0..placed.shape.n_links())
        .filter(|&l| placed.shape.locate(l).0 == 1)
        .map(|l| placed.link_base + l)
        .collect();
    let g = f.with_link_factors(&plane1, 0.0).unwrap();
    route(&g, 0, 63, 0, 0, spray, Traffic::Connection, &mut out).unwrap();
    let shares = bundle_shares(&out);
    assert_eq!(shares, vec![1.0, 1.0], "{:?}", out.usage);
    // On a faulty Clos the endpoints are not pooled: each end's plane-0 link carries it all.
    let links: Vec<(f64, f64)> = out
        .usage
        .iter()
        .filter(|u| u.constraint < n)
        .map(|u| (g.constraint_capacity_Bps(u.constraint), u.coefficient))
        .collect();
    assert_eq!(links, vec![(50e9, 1.0), (50e9, 1.0)], "{:?}", out.usage);
}

/// A PCIe server records its NICs as other fabrics do: nodes n_gpus.. n_gpus + n_nics, named
/// nic0.. (it recorded none, so `.nics` was empty).
#[test]
fn a_pcie_server_records_its_nics() {
    // 8 GPUs, 2 per switch and 1 NIC per switch: 4 switches, 4 NICs, 2 CPUs.
    let f = pcie_server(8, 2, 1, 2, 64e9, 50e9, 100e9, 1e-6).unwrap();
    assert_eq!((f.n_gpus, f.n_nics), (8, 4));
    for nic in 8..12 {
        assert_eq!(f.kind(nic), NodeKind::Nic);
        assert_eq!(f.node_name(nic), format!("nic{}", nic - 8));
    }
    assert_ne!(f.kind(12), NodeKind::Nic);
}

/// A PCIe server whose NICs pass the 2^32 ids is refused before it is built: 2 switches of
/// 2^31 NICs each wrapped to a server with no NICs, accepted; 2 of 2^32 - 1 wrapped to
/// 2^32 - 2 NICs, whose arrays filled the memory until the process was killed.
#[test]
fn a_pcie_server_too_large_for_its_ids_is_refused_before_it_is_built() {
    for (nics_per_switch, n_nodes) in [(1u32 << 31, (1u64 << 32) + 6), (u32::MAX, 8589934596)] {
        let e = pcie_server(2, 1, nics_per_switch, 2, 64e9, 50e9, 100e9, 1e-6).unwrap_err();
        let Error::TooLarge(msg) = e else {
            panic!("{nics_per_switch} NICs per switch: expected TooLarge, got {e:?}")
        };
        assert!(
            msg.starts_with(&format!("the fabric would have {n_nodes} nodes and ")),
            "{msg}"
        );
    }
    // As many GPUs as there are ids.
    let e = pcie_server(u32::MAX, u32::MAX, 0, 1, 64e9, 50e9, 100e9, 1e-6).unwrap_err();
    assert!(matches!(e, Error::TooLarge(_)), "{e:?}");
}

/// Links of `out` (constraints below the link count; a split route has no `links`).
fn used_links(f: &Fabric, out: &Routed) -> Vec<u32> {
    let n = f.n_links() as u32;
    out.usage
        .iter()
        .map(|u| u.constraint)
        .filter(|&c| c < n)
        .collect()
}

#[test]
fn a_reduction_tree_climbs_to_one_root_where_ecmp_hashes_apart() {
    // 64 hosts in 3 tiers of radix 8, in 1 and 2 planes: the edges of a tree to endpoint 0
    // converge (every node sends them on through one link) and those from it diverge (every
    // node receives them through one link); hashed as connections (a key each), they do not.
    for planes in [1, 2] {
        let f = clos(64, &scale_out(3, planes, 8, [1.0, 1.0])).unwrap();
        let (src, dst) = (f.topology().link_src(), f.topology().link_dst());
        let links_per = |traffic: Traffic, to_root: bool| {
            let mut per_node =
                std::collections::BTreeMap::<u32, std::collections::BTreeSet<u32>>::new();
            let mut out = Routed::default();
            for e in 1..64 {
                let (a, b) = if to_root { (e, 0) } else { (0, e) };
                route(&f, a, b, e as u64, 3, ECMP, traffic, &mut out).unwrap();
                for l in used_links(&f, &out) {
                    let node = if to_root {
                        src[l as usize]
                    } else {
                        dst[l as usize]
                    };
                    // An endpoint has a link in each plane; a switch is in one plane.
                    if f.kind(node) != NodeKind::Nic {
                        per_node.entry(node).or_default().insert(l);
                    }
                }
            }
            per_node.values().map(|s| s.len()).max().unwrap()
        };
        for to_root in [true, false] {
            // One link per switch.
            assert_eq!(
                links_per(Traffic::Tree { root: 5 }, to_root),
                1,
                "{planes} planes"
            );
            assert!(links_per(Traffic::Channels, to_root) > 1, "{planes} planes");
        }
        // Another root is another tree: its way up from host 63 shares no switch link.
        let mut out = Routed::default();
        let mut up_links = |root| {
            route(&f, 63, 0, 7, 3, ECMP, Traffic::Tree { root }, &mut out).unwrap();
            used_links(&f, &out)
        };
        let (first, second) = (up_links(5), up_links(6));
        let shared: Vec<_> = first.iter().filter(|l| second.contains(l)).collect();
        // Only the hosts' own links (one per plane at each end) are common.
        assert_eq!(
            shared.len(),
            2 * planes as usize,
            "{planes} planes: {shared:?}"
        );
    }
}

#[test]
fn a_reduction_tree_keeps_its_links_when_a_link_it_does_not_use_fails() {
    // A tree's root names a link by its slot among all of a switch's next links, so a fault
    // elsewhere changes nothing: the tree still climbs to its root switch. Counted among the
    // live links only, a switch with another link down took another one: half the idle
    // switch links of each shape (32 of 56 in 2 tiers, 108 of 216 in 3) moved the tree.
    for (tiers, planes, radix, hosts) in
        [(2, 1, 16, 32), (2, 2, 16, 32), (3, 1, 8, 64), (3, 2, 8, 64)]
    {
        let f = clos(hosts, &scale_out(tiers, planes, radix, [1.0, 1.0])).unwrap();
        let tree = |g: &Fabric| {
            let mut out = Routed::default();
            let mut links = std::collections::BTreeSet::new();
            for e in 1..hosts {
                for (a, b) in [(e, 0), (0, e)] {
                    route(g, a, b, 0, 3, ECMP, Traffic::Tree { root: 5 }, &mut out).unwrap();
                    links.extend(used_links(g, &out));
                }
            }
            links
        };
        let healthy = tree(&f);
        let switch =
            |n: u32| matches!(f.kind(n), NodeKind::Leaf | NodeKind::Spine | NodeKind::Core);
        let (src, dst) = (f.topology().link_src(), f.topology().link_dst());
        let idle: Vec<u32> = (0..f.n_links() as u32)
            .filter(|&l| {
                switch(src[l as usize]) && switch(dst[l as usize]) && !healthy.contains(&l)
            })
            .collect();
        assert!(!idle.is_empty());
        for &l in &idle {
            let g = f.with_link_factors(&[l], 0.0).unwrap();
            assert_eq!(
                tree(&g),
                healthy,
                "{tiers} tiers, {planes} planes: link {l} down"
            );
        }
    }
}

#[test]
fn trees_on_one_leaf_slot_climb_to_different_cores() {
    // 64 hosts in 3 tiers of radix 8: 4 up ports per leaf and per spine, 2 cores per group.
    // Roots 5 and 9 take leaf slot 1 alike (one group); above the leaf a tree's root is
    // root / 4, so they go on to different cores, as a job's trees beyond the leaf's up
    // ports spread over a group's cores. With root % 4 at the spine too, they took the
    // same core through the same links, and shared them where both crossed pods.
    let f = clos(64, &scale_out(3, 1, 8, [1.0, 1.0])).unwrap();
    let (src, dst) = (f.topology().link_src(), f.topology().link_dst());
    let mut out = Routed::default();
    let mut core_links = |root| {
        route(&f, 63, 0, 7, 3, ECMP, Traffic::Tree { root }, &mut out).unwrap();
        used_links(&f, &out)
            .into_iter()
            .filter(|&l| {
                let core = |n: u32| f.kind(n) == NodeKind::Core;
                core(src[l as usize]) || core(dst[l as usize])
            })
            .collect::<Vec<_>>()
    };
    let (first, second) = (core_links(5), core_links(9));
    assert_eq!(first.len(), 2);
    assert_ne!(dst[first[0] as usize], dst[second[0] as usize], "one core");
    assert!(
        first.iter().all(|l| !second.contains(l)),
        "{first:?} {second:?}"
    );
}

/// Each switch of `tier`'s down and up capacity and its number of up links, read off the
/// built links (what each link joins), not off the generator's sizes.
fn tier_capacities(f: &Fabric, tier: NodeKind) -> Vec<(f64, f64, u32)> {
    let (below, above) = match tier {
        NodeKind::Leaf => (NodeKind::Nic, NodeKind::Spine),
        _ => (NodeKind::Leaf, NodeKind::Core),
    };
    let t = f.topology();
    let mut per = std::collections::BTreeMap::<u32, (f64, f64, u32)>::new();
    for l in 0..t.n_links() {
        let (a, b, c) = (t.link_src()[l], t.link_dst()[l], t.capacity_Bps()[l]);
        if f.kind(a) != tier {
            continue;
        }
        let e = per.entry(a).or_default();
        if f.kind(b) == below {
            e.0 += c;
        } else if f.kind(b) == above {
            e.1 += c;
            e.2 += 1;
        }
    }
    per.into_values().collect()
}

/// The tier's fullest switch carries down:up = `ratio` within the rounding of whole up links
/// (at most `ratio`, and one up link fewer would exceed it); every other switch at most that.
fn assert_tier_at(f: &Fabric, tier: NodeKind, ratio: f64, what: &str) {
    let switches = tier_capacities(f, tier);
    assert!(!switches.is_empty(), "{what}: no {tier:?}");
    for &(down, up, _) in &switches {
        assert!(
            down > 0.0 && down <= ratio * up * (1.0 + 1e-12),
            "{what}: {down} : {up}"
        );
    }
    let &(down, up, n_up) = switches.iter().max_by(|a, b| a.0.total_cmp(&b.0)).unwrap();
    let one_link = up / n_up as f64;
    assert!(
        n_up == 1 || down / (up - one_link) > ratio * (1.0 + 1e-12),
        "{what}: fullest {tier:?} {down} : {up} with {n_up} up links, one too many for {ratio}:1"
    );
}

/// Oversubscription is each tier's down:up capacity as built, for every tier count, at radixes
/// of InfiniBand (Quantum-2 64, Quantum-X800 144) and Ethernet (SN5600 at 400G, 128) switches,
/// one and two planes, bare and rail-optimised: 2:1 is 2:1 where the leaves' used down ports
/// are fewer than the split gives them (rails sharing a leaf, partial last blocks and pods).
#[test]
fn oversubscription_is_the_down_up_capacity_ratio_as_built() {
    let mut checked = 0;
    for radix in [64, 144, 128] {
        for planes in [1, 2] {
            let one = clos(radix / 2, &scale_out(1, planes, radix, [1.0, 1.0])).unwrap();
            assert!(tier_capacities(&one, NodeKind::Leaf)
                .iter()
                .all(|&(down, up, _)| down > 0.0 && up == 0.0));
            for (tiers, over) in [
                (2, [1.0, 1.0]),
                (2, [2.0, 1.0]),
                (2, [3.0, 1.0]),
                (2, [4.0, 1.0]),
                (2, [1.5, 1.0]),
                (3, [1.0, 1.0]),
                (3, [2.0, 1.0]),
                (3, [4.0, 1.0]),
                (3, [2.0, 3.0]),
                (3, [1.0, 4.0]),
            ] {
                // Two tiers: one leaf a third full, or half what two tiers hold at 1:1 (full
                // leaves and a partial last one). Three: one pod partly full, or about three.
                let sizes = if tiers == 2 {
                    [radix / 3, radix * radix / 4 + 3]
                } else {
                    [radix * radix / 8 + 1, radix * radix / 2 + 7]
                };
                for hosts in sizes {
                    let what = format!(
                        "{hosts} hosts, radix {radix}, {planes} planes, {tiers} tiers, {over:?}"
                    );
                    let f = clos(hosts, &scale_out(tiers, planes, radix, over)).unwrap();
                    assert_tier_at(&f, NodeKind::Leaf, over[0], &what);
                    if tiers == 3 {
                        assert_tier_at(&f, NodeKind::Spine, over[1], &what);
                    }
                    checked += 1;
                }
            }
        }
    }
    // Rails sharing leaves: 16 HGX H100 on Quantum-2, two rails of 16 NICs to a leaf, 32 of
    // 42 down ports at 2:1 (it took 21 up ports, 32:21), and 9 NVL72 racks in 3 tiers.
    let hgx = nvlink(8, vec![5, 4, 4, 5], 1, 64);
    let nvl72 = nvlink(72, vec![1; 18], 1, 72);
    for (nv, n_domains, tiers) in [(&hgx, 16, 2), (&nvl72, 9, 3)] {
        for over in [[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0]] {
            let f = cluster(n_domains, nv, 64e9, &scale_out(tiers, 1, 64, over)).unwrap();
            let what = format!("{n_domains} domains, {tiers} tiers, {over:?}");
            assert_tier_at(&f, NodeKind::Leaf, over[0], &what);
            if tiers == 3 {
                assert_tier_at(&f, NodeKind::Spine, over[1], &what);
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 3 * 2 * 10 * 2 + 8);
}

/// A node name's word and its plane and domain prefixes: `d3.nvswitch4` is ("nvswitch", None,
/// Some(3)), `p1.leaf7` ("leaf", Some(1), None), `gpu12` ("gpu", None, None).
fn name_parts(name: &str) -> (String, Option<i64>, Option<i64>) {
    let (mut plane, mut domain) = (None, None);
    let mut rest = name;
    while let Some((prefix, tail)) = rest.split_once('.') {
        let n: i64 = prefix[1..].parse().unwrap();
        match &prefix[..1] {
            "p" => plane = Some(n),
            "d" => domain = Some(n),
            other => panic!("prefix {other} in {name}"),
        }
        rest = tail;
    }
    let word = rest
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .to_string();
    (word, plane, domain)
}

/// Levels of node words, endpoints lowest.
fn word_level(word: &str) -> u8 {
    match word {
        "gpu" | "host" => 0,
        "nic" => 1,
        "nvswitch" | "leaf" | "pcie_switch" => 2,
        "spine" | "cpu" => 3,
        "core" => 4,
        other => panic!("node word {other}"),
    }
}

#[test]
fn link_roles_agree_with_the_names_of_their_ends() {
    let mut all = cases();
    all.push(Case {
        name: "pcie server",
        fabric: pcie_server(8, 2, 1, 2, 64e9, 50e9, 64e9, 1e-6).unwrap(),
        endpoints: Vec::new(),
        masked: Vec::new(),
    });
    for c in all {
        let f = &c.fabric;
        let r = f.link_roles();
        let t = f.topology();
        assert_eq!(r.kind.len(), f.n_links(), "{}", c.name);
        let rails = f.scale_out.as_ref().map_or(1, |o| o.shape.rails);
        for l in 0..f.n_links() {
            let (a, b) = (t.link_src()[l], t.link_dst()[l]);
            let (wa, pa, da) = name_parts(&f.node_name(a));
            let (wb, pb, db) = name_parts(&f.node_name(b));
            let up = word_level(&wa) < word_level(&wb);
            let (low, high) = if up { (&wa, &wb) } else { (&wb, &wa) };
            let tier = &r.tier_names[r.tier[l] as usize];
            assert_eq!(tier, &format!("{low}-{high}"), "{}: link {l}", c.name);
            let level = (word_level(&wa), word_level(&wb));
            let direction = if level.0 == level.1 {
                -1
            } else if up {
                0
            } else {
                1
            };
            assert_eq!(r.direction[l], direction, "{}: link {l}", c.name);
            let kind = fabricsim::topology::roles::KIND_NAMES[r.kind[l] as usize];
            let want_kind = match (wa.as_str(), wb.as_str()) {
                ("gpu", "nic") | ("nic", "gpu") => "pcie",
                _ if f.domains.is_none() && f.scale_out.is_none() => "pcie",
                _ if wa == "nvswitch" || wb == "nvswitch" || da.is_some() || db.is_some() => {
                    "scale_up"
                }
                _ => "scale_out",
            };
            assert_eq!(kind, want_kind, "{}: link {l} {wa}->{wb}", c.name);
            // The switch end carries the plane (multi-plane Clos) and the domain.
            let plane = pa.or(pb);
            if kind == "scale_out" && plane.is_some() {
                assert_eq!(Some(r.plane[l]), plane, "{}: link {l}", c.name);
            }
            if kind == "scale_up" {
                assert_eq!(Some(r.domain[l]), da.or(db), "{}: link {l}", c.name);
                let tier1 = f.domains.as_ref().unwrap().shape.tiers == 1;
                if tier1 {
                    // One switch chip per plane, named by its plane.
                    let chip = if up { b } else { a };
                    let n = f.node_name(chip);
                    let digits: String =
                        n.chars().rev().take_while(|c| c.is_ascii_digit()).collect();
                    let plane: i64 = digits.chars().rev().collect::<String>().parse().unwrap();
                    assert_eq!(r.plane[l], plane, "{}: link {l} {n}", c.name);
                }
            }
            if matches!(tier.as_str(), "nic-leaf" | "gpu-nic") && rails > 1 {
                let endpoint = if up { a } else { b } % f.n_gpus.max(1);
                assert_eq!(r.rail[l], (endpoint % rails) as i64, "{}: link {l}", c.name);
            }
            if kind != "scale_up" && !tier.starts_with("gpu-") {
                assert_eq!(r.domain[l], -1, "{}: link {l}", c.name);
            }
        }
    }
}

#[test]
fn a_leaf_of_one_rail_names_its_rail() {
    // 4 HGX boards on 8-port leaves (4 down, 4 up): each rail's 4 NICs fill a leaf.
    let f = cluster(
        4,
        &nvlink(8, vec![5, 4, 4, 5], 1, 64),
        64e9,
        &scale_out(2, 1, 8, [1.0, 1.0]),
    )
    .unwrap();
    let r = f.link_roles();
    let t = f.topology();
    let leaf_spine = r.tier_names.iter().position(|n| n == "leaf-spine").unwrap() as i32;
    let mut seen = std::collections::BTreeSet::new();
    for l in 0..f.n_links() {
        if r.tier[l] == leaf_spine {
            let leaf = if r.direction[l] == 0 {
                t.link_src()[l]
            } else {
                t.link_dst()[l]
            };
            // The NICs under that leaf are all of the link's rail.
            for &down in t.out_links(NodeId(leaf)) {
                let nic = t.link_dst()[down as usize];
                if nic < f.n_gpus + f.n_nics && nic >= f.n_gpus {
                    assert_eq!(((nic - f.n_gpus) % 8) as i64, r.rail[l], "link {l}");
                }
            }
            seen.insert(r.rail[l]);
        }
    }
    assert_eq!(seen, (0..8).collect());
}

#[test]
fn a_plain_topology_has_plain_links() {
    let t = fabricsim::topology::Topology::from_links(
        3,
        vec![0, 1],
        vec![1, 2],
        vec![1.0, 1.0],
        vec![0.0, 0.0],
    )
    .unwrap();
    let r = Fabric::generic(t).link_roles();
    assert_eq!(r.kind, vec![0, 0]);
    assert_eq!(r.tier, vec![-1, -1]);
    assert!(r.tier_names.is_empty());
    assert_eq!(
        (r.plane, r.rail, r.domain),
        (vec![-1, -1], vec![-1, -1], vec![-1, -1])
    );
}
