//! Result tables as named columns, ready to hand to Arrow without copying.
//! Column names carry their units (docs/design.md section 5).

use std::collections::HashMap;

use crate::engine::{Outcome, RunOutput, NO_PATH};
use crate::ids::ActivityId;
use crate::scenario::{Ran, Scenario, NONE};

pub enum Column {
    I64(Vec<i64>),
    F64(Vec<f64>),
    /// Dictionary-encoded strings: indices (-1 for null) into `values`.
    Dict {
        indices: Vec<i32>,
        values: Vec<String>,
    },
}

pub struct Table {
    pub columns: Vec<(&'static str, Column)>,
}

/// An id, or -1 (null in the table) for `NONE`.
fn id_or_null(x: u32) -> i64 {
    if x == NONE {
        -1
    } else {
        x.into()
    }
}

/// A tag's index into the tag names (fewer than 2^31), or -1 for none.
fn tag_or_null(x: u32) -> i32 {
    id_or_null(x) as i32
}

/// flows: flow_id, tag, src, dst, bytes, ready_s, start_s, finish_s, mean_rate_Bps, status,
/// failed_s, error
pub fn flows_table(sc: &Scenario, ran: &Ran) -> Table {
    let out = &ran.out;
    let ids: Vec<usize> = (0..sc.n_activities())
        .filter(|&a| sc.is_flow(ActivityId(a as u32)))
        .collect();
    let acts = sc.activities();
    let pick = |v: &[f64]| ids.iter().map(|&a| v[a]).collect::<Vec<f64>>();
    let bytes: Vec<f64> = ids
        .iter()
        .map(|&a| acts.bytes(ActivityId(a as u32)))
        .collect();
    let start = pick(&out.start_s);
    let finish = pick(&out.finish_s);
    let mean_rate = bytes
        .iter()
        .zip(start.iter().zip(&finish))
        .map(|(&b, (&s, &f))| if b > 0.0 && f > s { b / (f - s) } else { 0.0 })
        .collect();
    Table {
        columns: vec![
            (
                "flow_id",
                Column::I64(ids.iter().map(|&a| a as i64).collect()),
            ),
            (
                "tag",
                Column::Dict {
                    indices: ids.iter().map(|&a| tag_or_null(sc.tag()[a])).collect(),
                    values: sc.tag_names().to_vec(),
                },
            ),
            // A collective's coupled flow has no one src and dst: -1, null in the table.
            (
                "src",
                Column::I64(ids.iter().map(|&a| id_or_null(sc.src()[a])).collect()),
            ),
            (
                "dst",
                Column::I64(ids.iter().map(|&a| id_or_null(sc.dst()[a])).collect()),
            ),
            ("bytes", Column::F64(bytes)),
            ("ready_s", Column::F64(pick(&out.ready_s))),
            ("start_s", Column::F64(start)),
            ("finish_s", Column::F64(finish)),
            ("mean_rate_Bps", Column::F64(mean_rate)),
            ("status", status_column(&ids, out)),
            ("failed_s", Column::F64(pick(&out.failed_s))),
            ("error", error_column(sc, ran, &ids)),
        ],
    }
}

/// "done", "failed" or "skipped" per activity.
fn status_column(ids: &[usize], out: &RunOutput) -> Column {
    Column::Dict {
        indices: ids.iter().map(|&a| out.outcome[a] as i32).collect(),
        values: ["done", "failed", "skipped"].map(String::from).to_vec(),
    }
}

/// Why a flow failed or was skipped, in words (null for one that finished).
fn error_column(sc: &Scenario, ran: &Ran, ids: &[usize]) -> Column {
    let fabric = sc.fabric();
    let topo = fabric.topology();
    let n_links = fabric.n_links() as u32;
    let out = &ran.out;
    let mut values: Vec<String> = Vec::new();
    let mut index_of: HashMap<String, i32> = HashMap::new();
    let indices = ids
        .iter()
        .map(|&a| {
            let message = match out.outcome[a] {
                Outcome::Done => return -1,
                Outcome::Skipped => "skipped: an activity it waits for failed".to_string(),
                // A collective's coupled flow has no one src or dst: one of its edges lost its path.
                Outcome::Failed if out.fail_reason[a] == NO_PATH && sc.src()[a] == NONE => {
                    "no path for one of its edges: every route crosses a link that is down"
                        .to_string()
                }
                Outcome::Failed if out.fail_reason[a] == NO_PATH => format!(
                    "no path from {} to {}: every route crosses a link that is down",
                    fabric.node_name(sc.src()[a]),
                    fabric.node_name(sc.dst()[a])
                ),
                Outcome::Failed => {
                    let c = ran.fabric_constraint(sc, out.fail_reason[a] as usize);
                    let (l, what) = if c < n_links {
                        (c, format!("link {c}"))
                    } else {
                        let mut first = NONE;
                        let mut n = 0;
                        fabric.for_each_bundle_member(c - n_links, |l| {
                            first = first.min(l);
                            n += 1;
                        });
                        (first, format!("all {n} parallel links like link {first}"))
                    };
                    let ends = format!(
                        "{} -> {}",
                        fabric.node_name(topo.link_src()[l as usize]),
                        fabric.node_name(topo.link_dst()[l as usize])
                    );
                    format!("{what} ({ends}) down when it was to transfer")
                }
            };
            *index_of.entry(message).or_insert_with_key(|m| {
                values.push(m.clone());
                values.len() as i32 - 1
            })
        })
        .collect();
    Column::Dict { indices, values }
}

/// delays: delay_id, tag, ready_s, finish_s, status
pub fn delays_table(sc: &Scenario, ran: &Ran) -> Table {
    let out = &ran.out;
    let ids: Vec<usize> = (0..sc.n_activities())
        .filter(|&a| !sc.is_flow(ActivityId(a as u32)))
        .collect();
    Table {
        columns: vec![
            (
                "delay_id",
                Column::I64(ids.iter().map(|&a| a as i64).collect()),
            ),
            (
                "tag",
                Column::Dict {
                    indices: ids.iter().map(|&a| tag_or_null(sc.tag()[a])).collect(),
                    values: sc.tag_names().to_vec(),
                },
            ),
            (
                "ready_s",
                Column::F64(ids.iter().map(|&a| out.ready_s[a]).collect()),
            ),
            (
                "finish_s",
                Column::F64(ids.iter().map(|&a| out.finish_s[a]).collect()),
            ),
            ("status", status_column(&ids, out)),
        ],
    }
}

/// links: link_id, src, dst, capacity_Bps, bytes_carried, busy_s, mean_utilization,
/// peak_utilization; one row per link that a flow uses, directly or through a bundle
/// (a bundle's load is spread over its members in proportion to their capacity in force,
/// except on the members whose own constraint carries that share already; a link loaded
/// through several constraints takes the peak and busy time of their sum).
pub fn links_table(sc: &Scenario, ran: &Ran) -> Table {
    let out = &ran.out;
    let fabric = sc.fabric();
    let topo = fabric.topology();
    let n_links = fabric.n_links() as u32;
    let constraints = sc.constraint_of().iter().chain(&ran.extra_constraints);
    let link_cap = fabric.link_capacity_Bps();
    // Bytes carried, busy time and peak load per link, accumulated over the constraints that
    // hold it (a link alone, or its share of a bundle). Dense arrays indexed by link id need
    // no sort, and pages of links never touched are never written.
    let n = n_links as usize;
    let (mut bytes, mut busy, mut peak) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let mut used = vec![false; n];
    let mut add = |l: u32, b: f64, s: f64, p: f64| {
        let l = l as usize;
        used[l] = true;
        bytes[l] += b;
        busy[l] = f64::max(busy[l], s);
        peak[l] += p;
    };
    for (ci, &c) in constraints.enumerate() {
        let (b, s, p) = (out.carried_bytes[ci], out.busy_s[ci], out.peak_load_Bps[ci]);
        // A member with no share (down) was not busy, though its bundle was.
        ran.split
            .for_each_link_share(fabric, ci as u32, c, |l, share| {
                add(l, b * share, if share > 0.0 { s } else { 0.0 }, p * share)
            });
    }
    // A link loaded through several constraints at once: its own meter's peak and busy time.
    for (m, &l) in ran.metered_links.iter().enumerate() {
        peak[l as usize] = out.meter_peak_Bps[m];
        busy[l as usize] = out.meter_busy_s[m];
    }
    let ids: Vec<usize> = (0..n).filter(|&l| used[l]).collect();
    let util = |x: f64, c: f64| if c > 0.0 { x / c } else { 0.0 };
    // Bytes over capacity x makespan; where that product leaves double range (a slow link
    // over a run of 1e302 s), the mean load first, which is within the capacity.
    let mean_util = |l: usize| {
        let span = link_cap[l] * out.makespan_s;
        if span.is_finite() && span >= f64::MIN_POSITIVE {
            bytes[l] / span
        } else if out.makespan_s > 0.0 {
            util(bytes[l] / out.makespan_s, link_cap[l])
        } else {
            0.0
        }
    };
    let column = |f: &dyn Fn(usize) -> f64| Column::F64(ids.iter().map(|&l| f(l)).collect());
    let node = |nodes: &[u32]| Column::I64(ids.iter().map(|&l| nodes[l] as i64).collect());
    Table {
        columns: vec![
            (
                "link_id",
                Column::I64(ids.iter().map(|&l| l as i64).collect()),
            ),
            ("src", node(topo.link_src())),
            ("dst", node(topo.link_dst())),
            ("capacity_Bps", column(&|l| link_cap[l])),
            ("bytes_carried", column(&|l| bytes[l])),
            ("busy_s", column(&|l| busy[l])),
            ("mean_utilization", column(&|l| mean_util(l))),
            ("peak_utilization", column(&|l| util(peak[l], link_cap[l]))),
        ],
    }
}

/// rate_changes: time_s, flow_id, rate_Bps (empty unless the run recorded rates)
pub fn rate_changes_table(out: &RunOutput) -> Table {
    Table {
        columns: vec![
            ("time_s", Column::F64(out.rate_change_time_s.clone())),
            (
                "flow_id",
                Column::I64(out.rate_change_flow.iter().map(|&f| f as i64).collect()),
            ),
            ("rate_Bps", Column::F64(out.rate_change_Bps.clone())),
        ],
    }
}
