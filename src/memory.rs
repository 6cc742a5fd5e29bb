//! Refusing work that cannot fit: estimates are checked against the memory available
//! before anything large is allocated, so a too-large scenario fails with a clear message
//! instead of being killed by the operating system halfway.

use crate::error::{Error, Result};

/// Environment variable that caps the memory the checks take as available, in bytes (a whole
/// number): to hold fabricsim to a budget on a shared machine, and to test the refusals
/// without filling the memory. Unset, or not a whole number: no cap.
pub const AVAILABLE_BYTES_VAR: &str = "FABRICSIM_AVAILABLE_BYTES";

/// Bytes of memory available: what the system reports (Linux `MemAvailable`), or
/// `AVAILABLE_BYTES_VAR` if that is lower; None if neither is known.
pub fn available_bytes() -> Option<u64> {
    let cap = std::env::var(AVAILABLE_BYTES_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    system_available_bytes().into_iter().chain(cap).min()
}

fn system_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Fails with `Error::TooLarge` if `estimate_bytes` for `what` exceeds available memory.
pub fn check_fits(what: &str, estimate_bytes: f64) -> Result<()> {
    let Some(available) = available_bytes() else {
        return Ok(());
    };
    if estimate_bytes > available as f64 {
        return Err(Error::TooLarge(format!(
            "{what} needs about {:.1} GiB of memory, but only {:.1} GiB is available",
            estimate_bytes / (1u64 << 30) as f64,
            available as f64 / (1u64 << 30) as f64
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_the_impossible_and_accepts_the_small() {
        if available_bytes().is_some() {
            let e = check_fits("a test", 1e30).unwrap_err();
            assert!(
                matches!(&e, Error::TooLarge(m) if m.contains("a test")),
                "{e}"
            );
        }
        check_fits("a test", 1.0).unwrap();
    }
}
