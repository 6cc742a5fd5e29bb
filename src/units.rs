//! SI units. Everything crossing the API is in bytes, seconds and bytes per second; these
//! constants keep conversions readable where figures are quoted in bits or binary multiples.

/// Bytes per second in one gigabit per second.
pub const GBIT_PER_S_IN_BPS: f64 = 1e9 / 8.0;
/// Bytes per second in one gigabyte per second.
pub const GBYTE_PER_S_IN_BPS: f64 = 1e9;
pub const KIB: f64 = 1024.0;
pub const MIB: f64 = 1024.0 * 1024.0;
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
pub const NS: f64 = 1e-9;
pub const US: f64 = 1e-6;

/// Relative tolerance under which two event times are the same instant.
pub const SAME_INSTANT_REL: f64 = 1e-12;

/// The largest capacity fabricsim takes for a link, a bundle of links, a reduction engine or a
/// constraint of `max_min_rates`, in bytes per second: 1e300, 10^286 above the fastest link
/// there is, and a factor of 1.8e8 below the largest double (1.8e308), which the arithmetic
/// on capacities needs:
/// * within an instant the engine moves each re-rated flow's load from its old rate to its
///   new one, flow by flow, so a constraint's load passes through the old and new rates of
///   its flows at once: up to twice its capacity. At 9e307 B/s that sum overflowed, the load
///   turned NaN and a flow kept the half rate of one that had left (issue 24, defect 2);
/// * a link's meter adds the loads of every constraint that holds it (itself and its
///   bundle), a bundle's capacity is the sum of its members', and a fault or a payload
///   efficiency multiplies capacities;
/// * results divide by capacities and multiply them by times (utilization).
///
/// Each of these stays finite, with room to spare, below 1.8e308 / 1e300.
pub const MAX_CAPACITY_BPS: f64 = 1e300;

/// The most bytes a scenario's flows may carry over their constraints together: the sum over
/// flows of size_bytes times the flow's usage coefficients (at least 1). Each constraint's
/// bytes carried (coefficient x bytes moved, summed over its flows), a link's share of the
/// constraints that hold it and the summary's bytes moved are each at most this (the summary
/// counting a collective's edges, a factor of the edges per link within the same 1.8e8 of
/// headroom as `MAX_CAPACITY_BPS`). Two flows of 1e308 bytes on one link carried inf bytes,
/// and its mean utilization came out NaN (issue 24, defect 3).
pub const MAX_CARRIED_BYTES: f64 = 1e300;
