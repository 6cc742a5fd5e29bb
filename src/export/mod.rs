//! Result tables as named columns, ready to hand to Arrow without copying.
//! Column names carry their units (DESIGN.md section 5).

use crate::engine::RunOutput;
use crate::ids::ActivityId;
use crate::scenario::{Scenario, NONE};

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

fn id_or_null(x: u32) -> i32 {
    if x == NONE {
        -1
    } else {
        x as i32
    }
}

/// flows: flow_id, tag, src, dst, bytes, ready_s, start_s, finish_s, mean_rate_Bps
pub fn flows_table(sc: &Scenario, out: &RunOutput) -> Table {
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
                    indices: ids.iter().map(|&a| id_or_null(sc.tag()[a])).collect(),
                    values: sc.tag_names().to_vec(),
                },
            ),
            (
                "src",
                Column::I64(ids.iter().map(|&a| sc.src()[a] as i64).collect()),
            ),
            (
                "dst",
                Column::I64(ids.iter().map(|&a| sc.dst()[a] as i64).collect()),
            ),
            ("bytes", Column::F64(bytes)),
            ("ready_s", Column::F64(pick(&out.ready_s))),
            ("start_s", Column::F64(start)),
            ("finish_s", Column::F64(finish)),
            ("mean_rate_Bps", Column::F64(mean_rate)),
        ],
    }
}

/// delays: delay_id, tag, ready_s, finish_s
pub fn delays_table(sc: &Scenario, out: &RunOutput) -> Table {
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
                    indices: ids.iter().map(|&a| id_or_null(sc.tag()[a])).collect(),
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
        ],
    }
}

/// links: link_id, src, dst, capacity_Bps, bytes_carried, busy_s, mean_utilization,
/// peak_utilization
pub fn links_table(sc: &Scenario, out: &RunOutput) -> Table {
    let topo = sc.topology();
    let n = topo.n_links();
    let acts = sc.activities();
    let mut carried = vec![0.0f64; n];
    for a in 0..acts.len() {
        let a = ActivityId(a as u32);
        let b = acts.bytes(a);
        for u in acts.usage(a) {
            carried[u.constraint as usize] += u.coefficient * b;
        }
    }
    let cap = topo.capacity_Bps();
    let util = |x: f64, c: f64| if c > 0.0 { x / c } else { 0.0 };
    let mean_utilization = (0..n)
        .map(|l| util(carried[l], cap[l] * out.makespan_s))
        .collect();
    let peak_utilization = (0..n).map(|l| util(out.peak_load_Bps[l], cap[l])).collect();
    Table {
        columns: vec![
            ("link_id", Column::I64((0..n as i64).collect())),
            (
                "src",
                Column::I64(topo.link_src().iter().map(|&x| x as i64).collect()),
            ),
            (
                "dst",
                Column::I64(topo.link_dst().iter().map(|&x| x as i64).collect()),
            ),
            ("capacity_Bps", Column::F64(cap.to_vec())),
            ("bytes_carried", Column::F64(carried)),
            ("busy_s", Column::F64(out.busy_s.clone())),
            ("mean_utilization", Column::F64(mean_utilization)),
            ("peak_utilization", Column::F64(peak_utilization)),
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
