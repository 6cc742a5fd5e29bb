//! The max-min solver against hand-solved systems and a naive reference.

mod common;

use common::{assert_close, naive_max_min};
use fabricsim::rng::Rng;
use fabricsim::solver::max_min_rates;
use fabricsim::Error;

fn solve(capacity: &[f64], usage: &[Vec<(usize, f64)>], cap: Option<Vec<f64>>) -> Vec<f64> {
    let mut fi = Vec::new();
    let mut ci = Vec::new();
    let mut k = Vec::new();
    for (f, row) in usage.iter().enumerate() {
        for &(c, coef) in row {
            fi.push(f as u32);
            ci.push(c as u32);
            k.push(coef);
        }
    }
    max_min_rates(capacity.to_vec(), &fi, &ci, &k, usage.len(), cap).unwrap()
}

#[test]
fn two_flows_share_one_link_equally() {
    let r = solve(&[10.0], &[vec![(0, 1.0)], vec![(0, 1.0)]], None);
    assert_eq!(r, vec![5.0, 5.0]);
}

#[test]
fn parking_lot() {
    // One long flow over 3 links of capacity 1, one short flow per link, plus a fourth
    // link of capacity 3 that only the long flow crosses: everyone gets 1/2.
    let mut usage = vec![vec![(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0)]];
    for l in 0..3 {
        usage.push(vec![(l, 1.0)]);
    }
    let r = solve(&[1.0, 1.0, 1.0, 3.0], &usage, None);
    assert_eq!(r, vec![0.5; 4]);
}

#[test]
fn parking_lot_with_unequal_links_frees_capacity_downstream() {
    // Link 0 (cap 1) shared by the long flow and short flow A; link 1 (cap 4) by the long
    // flow and short flow B. Link 0 saturates at 1/2; B then takes 4 - 1/2.
    let usage = vec![vec![(0, 1.0), (1, 1.0)], vec![(0, 1.0)], vec![(1, 1.0)]];
    let r = solve(&[1.0, 4.0], &usage, None);
    assert_eq!(r, vec![0.5, 0.5, 3.5]);
}

#[test]
fn coefficient_two_and_one_half() {
    // 2r + r = 3 -> r = 1.
    assert_eq!(
        solve(&[3.0], &[vec![(0, 2.0)], vec![(0, 1.0)]], None),
        vec![1.0, 1.0]
    );
    // 0.5r + r = 3 -> r = 2.
    assert_eq!(
        solve(&[3.0], &[vec![(0, 0.5)], vec![(0, 1.0)]], None),
        vec![2.0, 2.0]
    );
    // A route that crosses a link twice is one entry of coefficient 2.
    let r = max_min_rates(vec![3.0], &[0, 0, 1], &[0, 0, 0], &[1.0, 1.0, 1.0], 2, None).unwrap();
    assert_eq!(r, vec![1.0, 1.0]);
}

#[test]
fn caps_give_their_share_to_others() {
    let usage = vec![vec![(0, 1.0)], vec![(0, 1.0)], vec![(0, 1.0)]];
    let r = solve(
        &[9.0],
        &usage,
        Some(vec![1.0, f64::INFINITY, f64::INFINITY]),
    );
    assert_eq!(r, vec![1.0, 4.0, 4.0]);
    // A cap above the fair share changes nothing.
    let r = solve(
        &[9.0],
        &usage,
        Some(vec![5.0, f64::INFINITY, f64::INFINITY]),
    );
    assert_eq!(r, vec![3.0, 3.0, 3.0]);
    // A flow with only a cap runs at its cap.
    let r = max_min_rates(vec![], &[], &[], &[], 1, Some(vec![7.0])).unwrap();
    assert_eq!(r, vec![7.0]);
}

#[test]
fn bad_input_names_the_value() {
    let e = max_min_rates(vec![-1.0], &[0], &[0], &[1.0], 1, None).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("-1")),
        "{e}"
    );
    let e = max_min_rates(vec![1.0], &[0], &[5], &[1.0], 1, None).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("constraint_index[0] = 5")),
        "{e}"
    );
    let e = max_min_rates(vec![1.0], &[0], &[0], &[f64::NAN], 1, None).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("NaN")),
        "{e}"
    );
    let e = max_min_rates(vec![1.0], &[], &[], &[], 1, None).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("unbounded")),
        "{e}"
    );
}

/// A flow count too large is refused before anything is sized by it (it used to abort the
/// process allocating the default rate caps).
#[test]
fn too_many_flows_are_refused_before_allocating() {
    let e = max_min_rates(vec![1.0], &[0], &[0], &[1.0], 1 << 34, None).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("17179869184")),
        "{e}"
    );
    if fabricsim::memory::available_bytes()
        .unwrap()
        .is_some_and(|b| b < 200 << 30)
    {
        let e = max_min_rates(vec![1.0], &[0], &[0], &[1.0], u32::MAX as usize, None);
        assert!(matches!(&e, Err(Error::TooLarge(_))), "{e:?}");
    }
}

#[test]
fn random_problems_match_the_naive_reference() {
    let mut rng = Rng::new(42);
    for case in 0..400 {
        let n_c = 1 + rng.below(8) as usize;
        let n_f = 1 + rng.below(12) as usize;
        // Few distinct capacities so that ties between constraints happen often.
        let capacity: Vec<f64> = (0..n_c)
            .map(|_| {
                if rng.below(3) == 0 {
                    0.0
                } else {
                    1.0 + rng.below(4) as f64 * 2.5
                }
            })
            .collect();
        let usage: Vec<Vec<(usize, f64)>> = (0..n_f)
            .map(|_| {
                let mut row: Vec<(usize, f64)> = Vec::new();
                for c in 0..n_c {
                    if rng.below(3) == 0 {
                        let k = [0.5, 1.0, 1.0, 2.0, 3.0][rng.below(5) as usize];
                        row.push((c, k));
                    }
                }
                if row.is_empty() {
                    row.push((rng.below(n_c as u64) as usize, 1.0));
                }
                row
            })
            .collect();
        let caps: Vec<f64> = (0..n_f)
            .map(|_| {
                if rng.below(4) == 0 {
                    0.5 + rng.next_f64() * 5.0
                } else {
                    f64::INFINITY
                }
            })
            .collect();
        let got = solve(&capacity, &usage, Some(caps.clone()));
        let want = naive_max_min(&capacity, &usage, &caps);
        for f in 0..n_f {
            assert_close(&format!("case {case} flow {f}"), got[f], want[f]);
        }
        // Feasible: no constraint over capacity.
        let got = &got;
        for (c, &cap) in capacity.iter().enumerate() {
            let load: f64 = usage
                .iter()
                .enumerate()
                .flat_map(|(f, row)| row.iter().filter(|e| e.0 == c).map(move |e| e.1 * got[f]))
                .sum();
            assert!(
                load <= cap * (1.0 + 1e-12) + 1e-12,
                "case {case}: constraint {c} load {load} > {cap}"
            );
        }
    }
}
