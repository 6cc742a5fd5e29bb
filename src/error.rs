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

/// Checks that `value` (named `what`) is finite and >= 0. `what` is formatted only for a
/// bad value: a per-element name (`format_args!`) costs nothing on millions of good ones.
pub fn check_non_negative(what: impl std::fmt::Display, value: f64) -> Result<()> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what} must be a finite number >= 0, got {value}"
        )))
    }
}
