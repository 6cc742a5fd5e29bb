//! Event-driven fluid simulation of a DAG of activities under max-min fair sharing
//! (DESIGN.md section 1). The engine sees constraints (capacities) and activities only.

mod activities;
mod sharing;
mod sim;

pub use activities::{Activities, Kind};
pub use sim::{run, Progress, RunOptions, RunOutput};
