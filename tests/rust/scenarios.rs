//! Scenarios through the public crate API: even spreading over bundles whose members also
//! carry pinned flows (src/scenario/spread.rs) leaves a run with nothing pinned exactly as
//! the engine runs the scenario's own usage lists.

use std::sync::Arc;

use fabricsim::engine::{run_with_disruptions, RunOptions};
use fabricsim::ids::{ActivityId, LinkId, NodeId};
use fabricsim::rng::Rng;
use fabricsim::routing::structured::{self, Routed, Traffic};
use fabricsim::scenario::{Combine, Edge, Leg, Route, Scenario};
use fabricsim::topology::fabric::{Fabric, Mode};
use fabricsim::topology::generators::{clos, ScaleOutParams};

/// 32 hosts with one 50 GB/s link in each of two planes, sprayed: every host's two links
/// form a bundle, and so do a leaf's links to the spines of its plane.
fn two_plane_clos() -> Arc<Fabric> {
    clos_of(2, Mode::Spray)
}

/// 32 hosts on 8-port switches (4 hosts a leaf), one 50 GB/s link per plane.
fn clos_of(planes: u32, mode: Mode) -> Arc<Fabric> {
    let so = ScaleOutParams {
        tiers: 2,
        planes,
        radix: 8,
        oversubscription: [1.0, 1.0],
        link_Bps: 50e9,
        switch_latency_s: 1e-7,
        nic_latency_s: 0.0,
        mode,
    };
    Arc::new(clos(32, &so).unwrap())
}

/// `n` random sprayed flows of 1-100 MB starting within 1 ms.
fn sprayed(fabric: &Arc<Fabric>, seed: u64, n: usize) -> Scenario {
    let mut rng = Rng::new(seed);
    let mut sc = Scenario::new(Arc::clone(fabric), seed);
    for _ in 0..n {
        let src = rng.below(32) as u32;
        let dst = (src + 1 + rng.below(31) as u32) % 32;
        let bytes = 1e6 + 99e6 * rng.next_f64();
        let start_s = 1e-3 * rng.next_f64();
        sc.add_flow(
            NodeId(src),
            NodeId(dst),
            bytes,
            start_s,
            &[],
            Route::Ecmp,
            None,
            f64::INFINITY,
        )
        .unwrap();
    }
    sc
}

fn never_stop(_: &fabricsim::engine::Progress) -> bool {
    true
}

/// A host's links up into the fabric, one per plane.
fn uplinks(fabric: &Fabric, host: u32) -> Vec<u32> {
    let topo = fabric.topology();
    (0..topo.n_links() as u32)
        .filter(|&l| topo.link_src()[l as usize] == host)
        .collect()
}

#[test]
fn with_nothing_pinned_a_run_is_the_engines_on_the_scenarios_own_lists_bit_for_bit() {
    let fabric = two_plane_clos();
    for seed in 0..4 {
        let sc = sprayed(&fabric, seed, 200);
        let options = RunOptions::default();
        let ran = sc.run(&options, &mut never_stop).unwrap();
        assert!(ran.split.spread_links.is_empty());
        let capacity: Vec<f64> = sc
            .constraint_of()
            .iter()
            .map(|&c| fabric.constraint_capacity_Bps(c))
            .collect();
        let own = run_with_disruptions(&capacity, sc.activities(), &[], &options, &mut never_stop)
            .unwrap();
        let bits = |x: &[f64]| x.iter().map(|t| t.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&ran.out.finish_s), bits(&own.finish_s), "seed {seed}");
        assert_eq!(
            bits(&ran.out.carried_bytes),
            bits(&own.carried_bytes),
            "seed {seed}"
        );
    }
}

#[test]
fn a_fault_on_host_links_alone_spreads_nothing_and_a_pinned_member_is_spread() {
    let fabric = two_plane_clos();
    // Host 3 loses its plane-1 link mid-run: sprayed flows leave the host bundles for the
    // host links then, so no list uses a host link while another uses its bundle.
    let mut sc = sprayed(&fabric, 7, 200);
    let host3 = uplinks(&fabric, 3);
    sc.add_fault(5e-4, &host3[1..], 0.0).unwrap();
    let ran = sc.run(&RunOptions::default(), &mut never_stop).unwrap();
    assert!(ran.split.spread_links.is_empty());
    // A flow pinned to host 0's plane-0 links, up and down to host 1, while both hosts
    // spray: both links are spread, and nothing else.
    let mut sc = sprayed(&fabric, 7, 200);
    let up = uplinks(&fabric, 0)[0];
    let topo = fabric.topology();
    let leaf = topo.link_dst()[up as usize];
    let down = (0..topo.n_links() as u32)
        .find(|&l| topo.link_src()[l as usize] == leaf && topo.link_dst()[l as usize] == 1)
        .unwrap();
    let route = [LinkId(up), LinkId(down)];
    sc.add_flow(
        NodeId(0),
        NodeId(1),
        1e6,
        0.0,
        &[],
        Route::Links(&route),
        None,
        f64::INFINITY,
    )
    .unwrap();
    let ran = sc.run(&RunOptions::default(), &mut never_stop).unwrap();
    assert_eq!(ran.split.spread_links, vec![up.min(down), up.max(down)]);
}

/// Adds a coupled flow of 1 MB over `edges` (each carrying the flow's bytes once).
fn add_coupled(sc: &mut Scenario, edges: &[(u32, u32)]) -> fabricsim::ids::ActivityId {
    let whole: Vec<_> = edges.iter().map(|&(s, d)| (s, d, Leg::Whole)).collect();
    add_legs(sc, &whole)
}

/// Adds a coupled flow of 1 MB over `edges`, each carrying the flow's bytes once on its leg.
fn add_legs(sc: &mut Scenario, edges: &[(u32, u32, Leg)]) -> fabricsim::ids::ActivityId {
    let edges = edges
        .iter()
        .map(|&(src, dst, leg)| Edge {
            src,
            dst,
            coefficient: 1.0,
            leg,
            tree: 0,
        })
        .collect();
    try_add_edges(sc, edges).unwrap()
}

/// Adds a coupled flow of 1 MB over `edges`, summed.
fn try_add_edges(
    sc: &mut Scenario,
    edges: Vec<Edge>,
) -> fabricsim::error::Result<fabricsim::ids::ActivityId> {
    try_add_combined(sc, edges, Combine::Sum)
}

/// Adds a coupled flow of 1 MB over `edges`, combined by `combine`.
fn try_add_combined(
    sc: &mut Scenario,
    edges: Vec<Edge>,
    combine: Combine,
) -> fabricsim::error::Result<fabricsim::ids::ActivityId> {
    sc.add_coupled_flow(
        edges,
        combine,
        Vec::new(),
        1e6,
        0.0,
        0.0,
        &[],
        None,
        f64::INFINITY,
    )
}

fn add_plain(sc: &mut Scenario, src: u32, dst: u32) -> fabricsim::ids::ActivityId {
    let (src, dst) = (NodeId(src), NodeId(dst));
    sc.add_flow(src, dst, 1e6, 0.0, &[], Route::Ecmp, None, f64::INFINITY)
        .unwrap()
}

/// Coefficient of `link` in a usage list (0 when unused).
fn coefficient(usage: &[(u32, f64)], link: u32) -> f64 {
    usage.iter().find(|u| u.0 == link).map_or(0.0, |u| u.1)
}

#[test]
fn under_ecmp_a_coupled_rings_edges_split_evenly_over_the_planes_and_a_flow_takes_one() {
    // NCCL stripes a ring's channels over both ports of a two-plane NIC: each edge puts half
    // of its coefficient on each plane's uplink of its source and downlink of its
    // destination (the hosts sit on four different leaves). A plain flow is one connection,
    // hashed onto one port.
    let fabric = clos_of(2, Mode::Ecmp);
    let hosts = [0u32, 9, 18, 27];
    for seed in 0..8 {
        let mut sc = Scenario::new(Arc::clone(&fabric), seed);
        let ring: Vec<(u32, u32)> = (0..4).map(|i| (hosts[i], hosts[(i + 1) % 4])).collect();
        let ring = add_coupled(&mut sc, &ring);
        let usage = sc.usage_of(ring);
        let topo = fabric.topology();
        for &h in &hosts {
            let up = uplinks(&fabric, h);
            assert_eq!(up.len(), 2);
            let down: Vec<u32> = (0..topo.n_links() as u32)
                .filter(|&l| topo.link_dst()[l as usize] == h)
                .collect();
            for l in up.iter().chain(&down) {
                assert_eq!(
                    coefficient(&usage, *l),
                    0.5,
                    "seed {seed}, host {h}, link {l}"
                );
            }
        }
        // Every edge crosses the spines in each plane once at half its coefficient: the
        // usage sums to 4 edges x 4 links x 2 planes x 0.5.
        let total: f64 = usage.iter().map(|u| u.1).sum();
        assert_eq!(total, 16.0, "seed {seed}");
        let flow = add_plain(&mut sc, 0, 9);
        let flow = sc.usage_of(flow);
        let on_up: Vec<f64> = uplinks(&fabric, 0)
            .iter()
            .map(|&l| coefficient(&flow, l))
            .collect();
        assert!(
            on_up == [1.0, 0.0] || on_up == [0.0, 1.0],
            "seed {seed}: {on_up:?}"
        );
    }
}

#[test]
fn a_coupled_edge_splits_over_the_planes_of_a_faulty_clos_as_a_sprayed_flow_does() {
    // Host 0's plane-1 uplink down, or at a third: the edge's planes take what spraying
    // gives them (all on plane 0; then 1 : 1/3 of the ends' capacity).
    for factor in [0.0, 1.0 / 3.0] {
        let plane1_up = uplinks(&clos_of(2, Mode::Ecmp), 0)[1];
        let on = |mode: Mode| {
            let fabric = clos_of(2, mode).with_link_factors(&[plane1_up], factor);
            let mut sc = Scenario::new(Arc::new(fabric.unwrap()), 3);
            let id = match mode {
                Mode::Ecmp => add_coupled(&mut sc, &[(0, 9)]),
                Mode::Spray => add_plain(&mut sc, 0, 9),
            };
            let usage = sc.usage_of(id);
            let up = uplinks(sc.fabric(), 0);
            [coefficient(&usage, up[0]), coefficient(&usage, up[1])]
        };
        let (edge, sprayed) = (on(Mode::Ecmp), on(Mode::Spray));
        assert_eq!(edge, sprayed, "factor {factor}");
        let want = [1.0 / (1.0 + factor), factor / (1.0 + factor)];
        assert!(
            (0..2).all(|p| (edge[p] - want[p]).abs() < 1e-15),
            "factor {factor}: {edge:?}"
        );
    }
}

#[test]
fn striped_routing_is_plain_routing_on_a_single_plane_clos_bit_for_bit() {
    // One plane leaves nothing to stripe: the same links, coefficients and latency.
    let fabric = clos_of(1, Mode::Ecmp);
    let modes = [Mode::Ecmp, Mode::Ecmp];
    let bits = |r: &Routed| {
        let usage: Vec<(u32, u64)> = r
            .usage
            .iter()
            .map(|u| (u.constraint, u.coefficient.to_bits()))
            .collect();
        (usage, r.links.clone(), r.latency_s.to_bits())
    };
    let (mut plain, mut striped) = (Routed::default(), Routed::default());
    for key in 0..64u64 {
        let (src, dst) = ((key % 32) as u32, ((key * 7 + 5) % 32) as u32);
        if src == dst {
            continue;
        }
        for (traffic, out) in [
            (Traffic::Connection, &mut plain),
            (Traffic::Channels, &mut striped),
        ] {
            assert!(structured::route(&fabric, src, dst, key, 1, modes, traffic, out).unwrap());
        }
        assert_eq!(bits(&plain), bits(&striped), "key {key}");
    }
}

#[test]
fn a_coupled_flows_edges_do_not_hash_as_the_plain_flows_of_the_same_ids() {
    // Coupled flow 0's edge 0 hashed with key 0, exactly as plain flow 0: over every seed the
    // two took one path. Between two leaves of a single-plane Clos there are 4 spines.
    let fabric = clos_of(1, Mode::Ecmp);
    let differ = (0..32u64)
        .filter(|&seed| {
            let mut coupled = Scenario::new(Arc::clone(&fabric), seed);
            let mut plain = Scenario::new(Arc::clone(&fabric), seed);
            let a = add_coupled(&mut coupled, &[(0, 31)]);
            let b = add_plain(&mut plain, 0, 31);
            // A coupled flow's usage is sorted by constraint, a plain flow's in path order.
            let mut path = plain.usage_of(b);
            path.sort_by_key(|u| u.0);
            coupled.usage_of(a) != path
        })
        .count();
    assert!(differ >= 16, "only {differ} of 32 seeds route them apart");
}

#[test]
fn an_up_leg_stops_short_of_its_destination_and_a_down_leg_starts_past_its_source() {
    // Host 0 to host 9 (another leaf) over one plane, routed alike in each scenario (same
    // flow id, edge and seed): the up leg is the route less host 9's downlink, the down leg
    // the route less host 0's uplink, and together they make the whole route.
    for mode in [Mode::Ecmp, Mode::Spray] {
        let fabric = clos_of(1, mode);
        let topo = fabric.topology();
        let constraints = |leg| {
            let mut sc = Scenario::new(Arc::clone(&fabric), 7);
            let f = add_legs(&mut sc, &[(0, 9, leg)]);
            let usage = sc.usage_of(f);
            assert!(usage.iter().all(|u| u.1 == 1.0), "{usage:?}");
            usage.iter().map(|u| u.0).collect::<Vec<u32>>()
        };
        let (whole, up, down) = (
            constraints(Leg::Whole),
            constraints(Leg::Up),
            constraints(Leg::Down),
        );
        let ends_at =
            |c: u32, node: u32| fabric.any_link_of(c, |l| topo.link_dst()[l as usize] == node);
        let starts_at =
            |c: u32, node: u32| fabric.any_link_of(c, |l| topo.link_src()[l as usize] == node);
        let (into_9, out_of_0): (Vec<u32>, Vec<u32>) = (
            whole.iter().copied().filter(|&c| ends_at(c, 9)).collect(),
            whole.iter().copied().filter(|&c| starts_at(c, 0)).collect(),
        );
        assert_eq!((into_9.len(), out_of_0.len()), (1, 1), "{mode:?}");
        let less =
            |of: &[u32], c: u32| of.iter().copied().filter(|&x| x != c).collect::<Vec<u32>>();
        assert_eq!(up, less(&whole, into_9[0]), "{mode:?}");
        assert_eq!(down, less(&whole, out_of_0[0]), "{mode:?}");
        assert_eq!(
            whole.len(),
            4,
            "{mode:?}: host, leaf-spine, spine-leaf, host"
        );
    }
}

#[test]
fn a_bad_edge_coefficient_is_shown_short() {
    // {} wrote -1e300 with all its 301 digits.
    let mut sc = Scenario::new(clos_of(1, Mode::Ecmp), 0);
    let edge = Edge {
        src: 0,
        dst: 9,
        coefficient: -1e300,
        leg: Leg::Whole,
        tree: 0,
    };
    let e = try_add_edges(&mut sc, vec![edge]).unwrap_err();
    assert_eq!(
        e.message(),
        "edge 0 of a coupled flow has coefficient -1e300; expected a finite number > 0"
    );
}

#[test]
fn reduction_trees_reduce_within_themselves_and_add_across() {
    // Hosts 1 and 2 send to host 0 under its leaf (4 hosts a leaf): both routes end on
    // host 0's down link. In one reduction tree the switch merges them into one stream
    // there; as two trees (two rails' SHARP trees on one leaf) the streams add.
    let fabric = clos_of(1, Mode::Ecmp);
    let coupled = |trees: [u32; 2]| {
        let mut sc = Scenario::new(Arc::clone(&fabric), 0);
        let edges = [(1, trees[0]), (2, trees[1])]
            .map(|(src, tree)| Edge {
                src,
                dst: 0,
                coefficient: 0.5 + src as f64,
                leg: Leg::Whole,
                tree,
            })
            .to_vec();
        let a = try_add_combined(&mut sc, edges, Combine::Max).unwrap();
        sc.usage_of(a)
    };
    let (one, two) = (coupled([0, 0]), coupled([3, 7]));
    let into_0 = |usage: &[(u32, f64)]| {
        let found: Vec<f64> = usage
            .iter()
            .filter(|&&(c, _)| (c as usize) < fabric.topology().n_links())
            .filter(|&&(c, _)| fabric.topology().link_dst()[c as usize] == 0)
            .map(|&(_, k)| k)
            .collect();
        assert_eq!(found.len(), 1, "{usage:?}");
        found[0]
    };
    assert_eq!(into_0(&one), 2.5);
    assert_eq!(into_0(&two), 1.5 + 2.5);
    // Each host's own up link carries its edge alone either way.
    assert_eq!(one.len(), two.len());
    assert_eq!(
        one.iter().map(|u| u.1).sum::<f64>() + 1.5,
        two.iter().map(|u| u.1).sum::<f64>()
    );
}

/// The span a template copies in `a_template_copy_is_the_span_added_again`: a begin delay
/// after `after`, a coupled ring and two plain flows (one striped) after it, and an end
/// delay after those; every activity tagged `tag`. Returns the end.
fn add_span(sc: &mut Scenario, after: &[ActivityId], tag: &str) -> ActivityId {
    add_span_at(sc, after, tag, 0)
}

/// `add_span` with every node moved `at` nodes on.
fn add_span_at(sc: &mut Scenario, after: &[ActivityId], tag: &str, at: u32) -> ActivityId {
    let begin = sc.add_delay(1e-6, 0.0, after, Some(tag)).unwrap();
    let ring: Vec<Edge> = [(0u32, 9u32), (9, 18), (18, 0)]
        .iter()
        .map(|&(src, dst)| Edge {
            src: src + at,
            dst: dst + at,
            coefficient: 1.5,
            leg: Leg::Whole,
            tree: 0,
        })
        .collect();
    let c = sc
        .add_coupled_flow(
            ring,
            Combine::Sum,
            Vec::new(),
            3e6,
            2e-6,
            0.0,
            &[begin],
            Some(tag),
            f64::INFINITY,
        )
        .unwrap();
    let f = sc
        .add_flow(
            NodeId(1 + at),
            NodeId(30 + at),
            2e6,
            0.0,
            &[begin],
            Route::Ecmp,
            Some(tag),
            4e10,
        )
        .unwrap();
    let g = sc
        .add_flow(
            NodeId(2 + at),
            NodeId(17 + at),
            1e6,
            0.0,
            &[begin],
            Route::Striped,
            Some(tag),
            f64::INFINITY,
        )
        .unwrap();
    sc.add_delay(0.0, 0.0, &[c, f, g], Some(tag)).unwrap()
}

/// Two scenarios on one two-plane ECMP Clos, one seed.
fn twins(seed: u64) -> (Scenario, Scenario) {
    let fabric = clos_of(2, Mode::Ecmp);
    (
        Scenario::new(Arc::clone(&fabric), seed),
        Scenario::new(fabric, seed),
    )
}

fn assert_same_finishes(a: &Scenario, b: &Scenario) {
    let run = |sc: &Scenario| {
        sc.run(&RunOptions::default(), &mut never_stop)
            .unwrap()
            .out
            .finish_s
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(a), run(b));
}

#[test]
fn a_template_copy_is_the_span_added_again() {
    // ECMP hashes each flow on its id: a copy must be routed at its own ids, as the same
    // calls made again would be.
    let (mut copied, mut direct) = twins(7);
    let mut ends = [ActivityId(0), ActivityId(0)];
    for (k, sc) in [&mut copied, &mut direct].into_iter().enumerate() {
        let lead = sc.add_flow(
            NodeId(3),
            NodeId(20),
            5e6,
            0.0,
            &[],
            Route::Ecmp,
            None,
            f64::INFINITY,
        );
        ends[k] = add_span(sc, &[lead.unwrap()], "span");
    }
    let template = copied
        .template(1)
        .unwrap()
        .expect("a span whose one root waits outside it");
    assert_eq!(
        (template.len(), template.n_flows(), template.n_roots()),
        (5, 3, 1)
    );
    assert!(template.one_tag());
    for (i, tag) in ["span", "other", "span"].iter().enumerate() {
        let first = copied
            .repeat(&template, &[ends[0]], (i == 1).then_some(*tag))
            .unwrap();
        assert_eq!(first.0 as usize + 4, copied.n_activities() - 1);
        ends[0] = ActivityId(copied.n_activities() as u32 - 1);
        ends[1] = add_span(&mut direct, &[ends[1]], tag);
    }
    assert_eq!(copied.n_activities(), direct.n_activities());
    let tags = |sc: &Scenario| -> Vec<Option<String>> {
        sc.tag()
            .iter()
            .map(|&t| sc.tag_names().get(t as usize).cloned())
            .collect()
    };
    assert_eq!(tags(&copied), tags(&direct));
    let deps = |sc: &Scenario| -> Vec<(u32, u32)> {
        let mut d: Vec<_> = sc.activities().dependencies().collect();
        d.sort();
        d
    };
    assert_eq!(deps(&copied), deps(&direct));
    let mut routes_differ = false;
    for a in 0..copied.n_activities() as u32 {
        let a = ActivityId(a);
        assert_eq!(copied.usage_of(a), direct.usage_of(a), "usage of {}", a.0);
        assert_eq!(copied.route_of(a), direct.route_of(a), "route of {}", a.0);
        routes_differ |=
            a.0 > 5 && copied.route_of(a) != copied.route_of(ActivityId((a.0 - 1) % 5 + 1));
    }
    assert!(
        routes_differ,
        "ECMP should hash some copied flow onto another path than its original"
    );
    assert_same_finishes(&copied, &direct);
}

#[test]
fn a_shifted_template_copy_is_the_span_added_on_the_moved_nodes() {
    let (mut copied, mut direct) = twins(3);
    for sc in [&mut copied, &mut direct] {
        add_span(sc, &[], "span");
    }
    let template = copied.template(0).unwrap().expect("one root");
    // nodes 0..=30 moved 1 on stay below the 32 hosts; 2 on, node 30 would not
    assert!(template.shifted(2, 32).is_none());
    assert!(
        template.shifted(-1, 32).is_none(),
        "node 0 would move below 0"
    );
    let moved = template.shifted(1, 32).expect("every node stays a host");
    let end = ActivityId(copied.n_activities() as u32 - 1);
    copied.repeat(&moved, &[end], None).unwrap();
    let end = ActivityId(direct.n_activities() as u32 - 1);
    add_span_at(&mut direct, &[end], "span", 1);
    assert_eq!(copied.n_activities(), direct.n_activities());
    for a in 0..copied.n_activities() as u32 {
        let a = ActivityId(a);
        assert_eq!(copied.usage_of(a), direct.usage_of(a), "usage of {}", a.0);
        assert_eq!(copied.route_of(a), direct.route_of(a), "route of {}", a.0);
    }
    assert_same_finishes(&copied, &direct);
}

#[test]
fn a_template_refuses_what_a_copy_could_not_add_again() {
    let mut sc = Scenario::new(clos_of(2, Mode::Ecmp), 1);
    let lead = sc.add_delay(1.0, 0.0, &[], None).unwrap();
    let begin = sc.add_delay(1.0, 0.0, &[lead], None).unwrap();
    // waits inside the span and outside it: a copy could not say for what outside
    sc.add_delay(1.0, 0.0, &[begin, lead], None).unwrap();
    assert!(sc.template(1).unwrap().is_none());
    assert!(sc.template(3).is_err(), "past the last activity");
    // a dependency added once the span had begun is not one an add call makes
    let mut sc = Scenario::new(clos_of(2, Mode::Ecmp), 1);
    let a = sc.add_delay(1.0, 0.0, &[], Some("a")).unwrap();
    let b = sc.add_delay(1.0, 0.0, &[], Some("b")).unwrap();
    let t = sc.template(0).unwrap().expect("two roots");
    assert!(!t.one_tag() && t.n_roots() == 2);
    assert!(
        sc.repeat(&t, &[], Some("c")).is_err(),
        "one tag for a template of two"
    );
    sc.add_dependency(b, a).unwrap();
    assert!(sc.template(0).unwrap().is_none());
}
