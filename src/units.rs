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
