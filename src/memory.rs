//! Refusing work that cannot fit: estimates are checked against the memory available
//! before anything large is allocated, so a too-large scenario fails with a clear message
//! instead of being killed by the operating system halfway.

use crate::error::{Error, Result};

/// Environment variable that caps the memory the checks take as available, in bytes (a whole
/// number): to hold fabricsim to a budget on a shared machine, and to test the refusals
/// without filling the memory. Anything but a whole number is refused by the checks.
pub const AVAILABLE_BYTES_VAR: &str = "FABRICSIM_AVAILABLE_BYTES";

/// Bytes of memory available: what the system reports (Linux `MemAvailable`), or
/// `AVAILABLE_BYTES_VAR` if that is lower; None if neither is known.
pub fn available_bytes() -> Result<Option<u64>> {
    let cap = match std::env::var(AVAILABLE_BYTES_VAR) {
        Ok(v) => Some(v.trim().parse::<u64>().map_err(|_| {
            Error::InvalidArgument(format!(
                "{AVAILABLE_BYTES_VAR} must be a whole number of bytes, got {v:?}"
            ))
        })?),
        Err(_) => None,
    };
    Ok(system_available_bytes().into_iter().chain(cap).min())
}

fn system_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Fails with `Error::TooLarge` if `estimate_bytes` for `what` exceeds available memory.
pub fn check_fits(what: &str, estimate_bytes: f64) -> Result<()> {
    let Some(available) = available_bytes()? else {
        return Ok(());
    };
    if estimate_bytes > available as f64 {
        return Err(Error::TooLarge(format!(
            "{what} needs about {} of memory, but only {} is available",
            shown_bytes(estimate_bytes),
            shown_bytes(available as f64)
        )));
    }
    Ok(())
}

/// GiB to one decimal, or MiB below 1 GiB (a budget of a few MiB would read "0.0 GiB").
fn shown_bytes(bytes: f64) -> String {
    let gib = bytes / (1u64 << 30) as f64;
    if gib >= 1.0 {
        format!("{gib:.1} GiB")
    } else {
        format!("{:.1} MiB", bytes / (1u64 << 20) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_the_impossible_and_accepts_the_small() {
        if available_bytes().unwrap().is_some() {
            let e = check_fits("a test", 1e30).unwrap_err();
            assert!(
                matches!(&e, Error::TooLarge(m) if m.contains("a test")),
                "{e}"
            );
        }
        check_fits("a test", 1.0).unwrap();
    }
}
