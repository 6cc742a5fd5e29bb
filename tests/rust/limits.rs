//! The limits of the float range (issue 24, defects 2 and 3): capacities above
//! `MAX_CAPACITY_BPS` and scenarios carrying more than `MAX_CARRIED_BYTES` are refused where
//! they enter, naming the value and the bound; at the bounds, results are exact.

mod common;

use std::sync::Arc;

use common::on;
use fabricsim::engine::{run, Activities, Disruption, RunOptions};
use fabricsim::ids::NodeId;
use fabricsim::scenario::{Route, Scenario};
use fabricsim::solver::{max_min_rates, Usage};
use fabricsim::topology::fabric::{Fabric, Mode};
use fabricsim::topology::generators::{clos, ScaleOutParams};
use fabricsim::topology::Topology;
use fabricsim::units::{MAX_CAPACITY_BPS, MAX_CARRIED_BYTES};
use fabricsim::Error;

fn message(e: Error) -> String {
    match e {
        Error::InvalidArgument(m) => m,
        other => panic!("expected InvalidArgument, got {other}"),
    }
}

const ABOVE: f64 = 1.0000000000000002e300; // the next double above the bound

#[test]
fn a_capacity_above_the_bound_is_refused_wherever_it_enters() {
    assert_eq!(ABOVE, f64::from_bits(MAX_CAPACITY_BPS.to_bits() + 1));
    let m = message(Topology::from_links(2, vec![0], vec![1], vec![1e308], vec![0.0]).unwrap_err());
    assert!(
        m.starts_with("capacity_Bps of link 0 must be at most 1e300 B/s, got 1e308: "),
        "{m}"
    );
    Topology::from_links(2, vec![0], vec![1], vec![MAX_CAPACITY_BPS], vec![0.0]).unwrap();
    assert!(Topology::from_links(2, vec![0], vec![1], vec![ABOVE], vec![0.0]).is_err());
    let m = message(max_min_rates(vec![ABOVE], &[0], &[0], &[1.0], 1, None).unwrap_err());
    assert!(
        m.starts_with(
            "capacity of constraint 0 must be at most 1e300 B/s, got 1.0000000000000002e300"
        ),
        "{m}"
    );
    // A disruption's new capacity.
    let mut acts = Activities::new();
    acts.add_flow(1.0, &on(&[0]), 0.0, 0.0, f64::INFINITY, &[])
        .unwrap();
    let raise = Disruption {
        time_s: 0.5,
        capacities: vec![(0, 1e308)],
        reroutes: Vec::new(),
    };
    let e = fabricsim::engine::run_with_disruptions(
        &[1.0],
        &acts,
        &[raise],
        &RunOptions::default(),
        &mut |_| true,
    )
    .unwrap_err();
    assert!(message(e)
        .starts_with("capacity of constraint 0 in disruption 0 must be at most 1e300 B/s"));
    // A reduction engine of a scenario.
    let topo = Topology::from_links(2, vec![0], vec![1], vec![1.0], vec![0.0]).unwrap();
    let mut sc = Scenario::new(Arc::new(Fabric::generic(topo)), 0);
    assert!(message(sc.add_engine(1e301).unwrap_err())
        .starts_with("engine capacity_Bps must be at most 1e300 B/s"));
}

#[test]
fn a_bundle_whose_members_add_up_past_the_bound_is_refused() {
    // Two planes of 1e300 B/s links sprayed: a host's two links pool into a bundle of 2e300.
    let so = |capacity: f64| ScaleOutParams {
        tiers: 2,
        planes: 2,
        radix: 8,
        oversubscription: [1.0, 1.0],
        link_Bps: capacity,
        switch_latency_s: 1e-7,
        nic_latency_s: 0.0,
        mode: Mode::Spray,
    };
    let m = message(clos(16, &so(MAX_CAPACITY_BPS)).unwrap_err());
    assert!(m.starts_with("the capacity of bundle 0 (its 2 parallel links like link 0, added up) must be at most 1e300 B/s, got 2e300"), "{m}");
    clos(16, &so(MAX_CAPACITY_BPS / 4.0)).unwrap();
}

#[test]
fn a_fault_factor_is_a_fraction_of_nominal() {
    // A factor of 8 gave a link a peak utilization of 8 (found by tests/rust/fuzz.rs).
    let topo = Topology::from_links(2, vec![0], vec![1], vec![1e9], vec![0.0]).unwrap();
    let fabric = Fabric::generic(topo);
    for bad in [8.0, 1e300, -1.0, f64::NAN] {
        let m = message(fabric.with_link_factors(&[0], bad).unwrap_err());
        assert!(
            m.starts_with("capacity factor must be a number in [0, 1]"),
            "{m}"
        );
        let mut sc = Scenario::new(Arc::new(fabric.clone()), 0);
        assert!(sc.add_fault(1.0, &[0], bad).is_err());
        assert_eq!(sc.n_faults(), 0);
    }
    fabric.with_link_factors(&[0], 1.0).unwrap();
}

/// Issue 24 defect 2 at the bound: 1e292 bytes from 0 s and 1 byte at 1e-9 s on one link of
/// 1e300 B/s. At 1e308 B/s the load's sum overflowed and flow 0 finished at 1.9e-8 s.
#[test]
fn the_largest_capacity_gives_exact_times() {
    let mut acts = Activities::new();
    acts.add_flow(1e292, &on(&[0]), 0.0, 0.0, f64::INFINITY, &[])
        .unwrap();
    acts.add_flow(1.0, &on(&[0]), 0.0, 1e-9, f64::INFINITY, &[])
        .unwrap();
    let options = RunOptions {
        verify: true,
        ..Default::default()
    };
    let out = run(&[MAX_CAPACITY_BPS], &acts, &options, &mut |_| true).unwrap();
    assert_eq!(out.finish_s, vec![1e-8, 1e-9]);
    assert_eq!(out.carried_bytes, vec![1e292 + 1.0]);
    assert_eq!(out.peak_load_Bps, vec![MAX_CAPACITY_BPS]);
}

/// Issue 24 defect 3: two flows of 1e308 bytes on one link carried inf bytes (its mean
/// utilization NaN). The second flow past the bound is refused, naming its size.
#[test]
fn flows_carrying_more_than_the_bound_are_refused_and_leave_nothing() {
    let mut acts = Activities::new();
    let m = message(
        acts.add_flow(1e308, &on(&[0]), 0.0, 0.0, f64::INFINITY, &[])
            .unwrap_err(),
    );
    assert_eq!(
        m,
        "size_bytes 1e308 over usage coefficients adding up to 1 would bring the bytes all flows carry over \
         their constraints to 1e308: more than the 1e300 bytes a link's bytes_carried can count (a margin \
         below the largest double, 1.8e308)"
    );
    assert_eq!(acts.len(), 0);
    acts.add_flow(6e299, &on(&[0]), 0.0, 0.0, f64::INFINITY, &[])
        .unwrap();
    // Coefficients count: 3e299 over a coefficient of 2 carries 6e299 more.
    let twice = [Usage {
        constraint: 0,
        coefficient: 2.0,
    }];
    assert!(acts
        .add_flow(3e299, &twice, 0.0, 0.0, f64::INFINITY, &[])
        .is_err());
    assert_eq!(
        (acts.len(), acts.n_usage_entries(), acts.carried_bytes()),
        (1, 1, 6e299)
    );
    acts.add_flow(4e299, &on(&[0]), 0.0, 0.0, f64::INFINITY, &[])
        .unwrap();
    assert_eq!(acts.carried_bytes(), MAX_CARRIED_BYTES);
    // Forgetting flows gives their room back.
    acts.truncate(1);
    assert_eq!(acts.carried_bytes(), 6e299);
    let out = run(&[1e6], &acts, &RunOptions::default(), &mut |_| true).unwrap();
    assert_eq!(out.carried_bytes, vec![6e299]);
    // Through a scenario: the links table is finite, its mean utilization 1.
    let topo = Topology::from_links(2, vec![0], vec![1], vec![1e6], vec![0.0]).unwrap();
    let mut sc = Scenario::new(Arc::new(Fabric::generic(topo)), 0);
    let add = |sc: &mut Scenario, bytes| {
        sc.add_flow(
            NodeId(0),
            NodeId(1),
            bytes,
            0.0,
            &[],
            Route::Ecmp,
            None,
            f64::INFINITY,
        )
    };
    add(&mut sc, 6e299).unwrap();
    assert!(add(&mut sc, 6e299).is_err());
    assert_eq!(sc.n_activities(), 1);
    let ran = sc.run(&RunOptions::default(), &mut |_| true).unwrap();
    let links = fabricsim::export::links_table(&sc, &ran);
    for (name, want) in [
        ("bytes_carried", 6e299),
        ("mean_utilization", 1.0),
        ("peak_utilization", 1.0),
    ] {
        match links.columns.iter().find(|(n, _)| *n == name) {
            Some((_, fabricsim::export::Column::F64(v))) => assert_eq!(v, &vec![want], "{name}"),
            _ => panic!("no column {name}"),
        }
    }
}

#[test]
fn coefficients_adding_up_past_the_largest_double_are_refused() {
    // Each finite, on one constraint they added up to inf, which the engine took.
    let mut acts = Activities::new();
    let two = [
        Usage {
            constraint: 0,
            coefficient: 1e300,
        },
        Usage {
            constraint: 0,
            coefficient: f64::MAX,
        },
    ];
    let m = message(
        acts.add_flow(0.0, &two, 0.0, 0.0, f64::INFINITY, &[])
            .unwrap_err(),
    );
    assert_eq!(m, "the usage coefficients of the flow on constraint 0 add up to inf: beyond what double precision holds");
    assert_eq!((acts.len(), acts.n_usage_entries()), (0, 0));
}

#[test]
fn mean_utilization_survives_a_capacity_times_makespan_past_double_range() {
    // 1e300 B/s over a run of 1e10 s (a long delay): capacity x makespan is inf, and the mean
    // utilization of a link that carried 1e300 bytes is 1e-10, not 0 or NaN.
    let topo = Topology::from_links(2, vec![0], vec![1], vec![1e300], vec![0.0]).unwrap();
    let mut sc = Scenario::new(Arc::new(Fabric::generic(topo)), 0);
    sc.add_flow(
        NodeId(0),
        NodeId(1),
        1e300,
        0.0,
        &[],
        Route::Ecmp,
        None,
        f64::INFINITY,
    )
    .unwrap();
    sc.add_delay(1e10, 0.0, &[], None).unwrap();
    let ran = sc.run(&RunOptions::default(), &mut |_| true).unwrap();
    let links = fabricsim::export::links_table(&sc, &ran);
    match links.columns.iter().find(|(n, _)| *n == "mean_utilization") {
        Some((_, fabricsim::export::Column::F64(v))) => assert_eq!(v, &vec![1e-10]),
        _ => panic!("no mean_utilization"),
    }
}
