//! Event-driven fluid simulation of a DAG of activities under max-min fair sharing
//! (docs/design.md section 1). The engine sees constraints (capacities) and activities only;
//! disruptions change capacities and usage lists during a run (module `disruption`).

mod activities;
mod disruption;
mod meters;
mod sharing;
mod sim;

pub(crate) use activities::{push_merged, unknown_activity};
pub use activities::{Activities, Kind};
pub use disruption::Disruption;
pub use meters::Meters;
pub use sim::{
    run, run_with_disruptions, Outcome, Progress, RunOptions, RunOutput, NO_FAILURE, NO_PATH,
};
