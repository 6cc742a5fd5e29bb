//! fabricsim: a flow-level, event-driven, max-min fair simulator of AI-factory fabrics.
//!
//! Layers point one way (see docs/design.md section 4):
//! `units/ids -> topology -> routing -> engine (uses solver) -> export -> bindings`.
//! The solver knows nothing about networks; the engine sees only constraints and activities.

#![allow(non_snake_case)]
// units in names: `_Bps` is bytes per second (docs/design.md section 5)
// `!(x > 0.0)` is deliberate: it also rejects NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod engine;
pub mod error;
pub mod export;
pub mod ids;
pub mod memory;
pub mod rng;
pub mod routing;
pub mod scenario;
pub mod solver;
pub mod topology;
pub mod units;

#[cfg(feature = "python")]
mod bindings;

pub use error::{Error, Result};
