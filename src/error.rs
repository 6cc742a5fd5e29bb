//! The one error type of fabricsim. Every variant carries a message that names the bad value;
//! the Python bindings map each variant once to a class of `fabricsim.exceptions`.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A value outside its domain: NaN, negative, infinite, wrong length.
    InvalidArgument(String),
    UnknownNode(String),
    UnknownLink(String),
    UnknownActivity(String),
    /// A flow whose source is its destination.
    SameEndpoints(String),
    /// No path between two nodes.
    Unreachable(String),
    /// Every path (or the given route) crosses a link of zero capacity.
    ZeroCapacityPath(String),
    DependencyCycle(String),
    /// A scenario too large for this machine, refused before allocating (a rate-change log,
    /// which only the run can size, as it grows).
    TooLarge(String),
    /// The caller asked the run to stop (Ctrl-C).
    Interrupted(String),
    /// A bug: a broken internal invariant or a caught panic.
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Name of the matching exception class in `fabricsim.exceptions`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidArgument(_) => "InvalidArgumentError",
            Error::UnknownNode(_) => "UnknownNodeError",
            Error::UnknownLink(_) => "UnknownLinkError",
            Error::UnknownActivity(_) => "UnknownActivityError",
            Error::SameEndpoints(_) => "SameEndpointsError",
            Error::Unreachable(_) => "UnreachableError",
            Error::ZeroCapacityPath(_) => "ZeroCapacityPathError",
            Error::DependencyCycle(_) => "DependencyCycleError",
            Error::TooLarge(_) => "ScenarioTooLargeError",
            Error::Interrupted(_) => "RunInterruptedError",
            Error::Internal(_) => "InternalError",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Error::InvalidArgument(m)
            | Error::UnknownNode(m)
            | Error::UnknownLink(m)
            | Error::UnknownActivity(m)
            | Error::SameEndpoints(m)
            | Error::Unreachable(m)
            | Error::ZeroCapacityPath(m)
            | Error::DependencyCycle(m)
            | Error::TooLarge(m)
            | Error::Interrupted(m)
            | Error::Internal(m) => m,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

impl std::error::Error for Error {}

/// `x` for a message: the shortest text that reads back as `x` for 0 and magnitudes in
/// [1e-4, 1e15), exponent form outside (`{}` writes 1e300 with all its 301 digits, 1e-300
/// with 300 zeros), NaN and inf as such.
pub fn shown(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-4..1e15).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// Checks that `value` (named `what`) is finite and >= 0. `what` is formatted only for a
/// bad value: a per-element name (`format_args!`) costs nothing on millions of good ones.
pub fn check_non_negative(what: impl std::fmt::Display, value: f64) -> Result<()> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what} must be a finite number >= 0, got {}",
            shown(value)
        )))
    }
}

/// Checks that a capacity `value` (named `what`) is finite, >= 0 and at most
/// `units::MAX_CAPACITY_BPS`, whose docs say why the arithmetic needs that headroom.
pub fn check_capacity(what: impl std::fmt::Display, value: f64) -> Result<()> {
    check_non_negative(&what, value)?;
    if value > crate::units::MAX_CAPACITY_BPS {
        return Err(capacity_too_large(what, value));
    }
    Ok(())
}

/// The error of a capacity above `units::MAX_CAPACITY_BPS`.
pub fn capacity_too_large(what: impl std::fmt::Display, value: f64) -> Error {
    Error::InvalidArgument(format!(
        "{what} must be at most {} B/s, got {}: fabricsim's arithmetic keeps a margin below \
         the largest double (1.8e308) above every capacity (sums of loads, bundles, meters)",
        shown(crate::units::MAX_CAPACITY_BPS),
        shown(value)
    ))
}

/// A max-min rate outside what a double holds (inf, or 0 on links of positive capacity):
/// the engine and `max_min_rates` refuse it alike. `when` is " at <t> s" or empty.
pub fn rate_out_of_range(flow: u32, rate_Bps: f64, when: &str) -> Error {
    Error::InvalidArgument(format!(
        "flow {flow} got rate {} B/s{when}: capacities and coefficients this far apart \
         overflow or underflow double precision",
        shown(rate_Bps)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_in_messages_are_short_at_any_magnitude() {
        let cases = [
            (1e300, "1e300"),
            (-1e-300, "-1e-300"),
            (2.5e-7, "2.5e-7"),
            (1e15, "1e15"),
            (999999999999999.9, "999999999999999.9"),
            (1e-4, "0.0001"),
            (0.1, "0.1"),
            (1.0, "1"),
            (0.0, "0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (x, want) in cases {
            assert_eq!(shown(x), want);
            assert_eq!(shown(x).parse::<f64>().unwrap().to_bits(), x.to_bits());
        }
        // Before, -1e300 printed with 301 digits and -1e-300 with 300 zeros.
        let e = check_non_negative("capacity_Bps of link 3", -1e300).unwrap_err();
        assert_eq!(
            e.message(),
            "capacity_Bps of link 3 must be a finite number >= 0, got -1e300"
        );
        let e = crate::solver::max_min_rates(vec![1.0], &[0], &[0], &[1.0], 1, Some(vec![-1e-300]))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "rate cap of flow 0 must be > 0 (inf for none), got -1e-300"
        );
    }
}
