//! Refusing work that cannot fit: estimates are checked against the memory available
//! before anything large is allocated, so a too-large scenario fails with a clear message
//! instead of being killed by the operating system halfway.

use crate::error::{Error, Result};

/// Environment variable that caps the memory the checks take as free, in bytes (a whole
/// number): to test the refusals without filling the memory, or to keep fabricsim's large
/// allocations under a size on a shared machine. Each check compares its own allocation with
/// the cap, as it does with the system's free memory: it is not a budget for the whole
/// process. Anything but a whole number is refused by the checks.
pub const AVAILABLE_BYTES_VAR: &str = "FABRICSIM_AVAILABLE_BYTES";

/// Bytes of memory available: what the system reports (Linux `MemAvailable`), or
/// `AVAILABLE_BYTES_VAR` if that is lower; None if neither is known.
pub fn available_bytes() -> Result<Option<u64>> {
    let cap = match std::env::var_os(AVAILABLE_BYTES_VAR) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .and_then(|text| text.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "{AVAILABLE_BYTES_VAR} must be a whole number of bytes, got {v:?}"
                    ))
                })?,
        ),
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

/// GiB or MiB to one decimal, or bytes below 1 MiB (a small budget would read "0.0 GiB"); GiB
/// in exponent form from 1e15 GiB (`{:.1}` wrote an estimate of 1e300 bytes with 292 digits).
fn shown_bytes(bytes: f64) -> String {
    let (gib, mib) = ((1u64 << 30) as f64, (1u64 << 20) as f64);
    if bytes >= 1e15 * gib {
        format!("{:.1e} GiB", bytes / gib)
    } else if bytes >= gib {
        format!("{:.1} GiB", bytes / gib)
    } else if bytes >= mib {
        format!("{:.1} MiB", bytes / mib)
    } else {
        format!("{bytes:.0} bytes")
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

    #[test]
    fn sizes_are_short_at_any_magnitude() {
        // 1e300 bytes came out as 931322574615478... GiB, 292 digits.
        assert_eq!(shown_bytes(1e300), "9.3e290 GiB");
        assert_eq!(shown_bytes(f64::INFINITY), "inf GiB");
        assert_eq!(shown_bytes(1.5 * (1u64 << 30) as f64), "1.5 GiB");
        assert_eq!(shown_bytes(3.0 * (1u64 << 20) as f64), "3.0 MiB");
        assert_eq!(shown_bytes(512.0), "512 bytes");
    }
}
