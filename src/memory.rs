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

/// The most a 64-bit process can address: 2^47 bytes (128 TiB), the user half of the 48-bit
/// virtual addresses of x86-64 and arm64 (Linux, macOS, Windows). Where the available memory
/// cannot be read (no `/proc/meminfo`, as on macOS), an estimate beyond it is still refused:
/// it could never be allocated, whatever the machine.
pub const ADDRESSABLE_BYTES: u64 = 1 << 47;

/// Fails with `Error::TooLarge` if `estimate_bytes` for `what` exceeds available memory, or
/// `ADDRESSABLE_BYTES` if the available memory is not known.
pub fn check_fits(what: &str, estimate_bytes: f64) -> Result<()> {
    fits(what, estimate_bytes, available_bytes()?)
}

/// The rule of `check_fits`, given the bytes available (None: not known).
fn fits(what: &str, estimate_bytes: f64, available: Option<u64>) -> Result<()> {
    let limit = available.unwrap_or(ADDRESSABLE_BYTES);
    if estimate_bytes > limit as f64 {
        let needs = format!(
            "{what} needs about {} of memory",
            shown_bytes(estimate_bytes)
        );
        return Err(Error::TooLarge(match available {
            Some(_) => format!(
                "{needs}, but only {} is available",
                shown_bytes(limit as f64)
            ),
            None => format!(
                "{needs}, more than a 64-bit process can address ({}); the memory available \
                 could not be read (set {AVAILABLE_BYTES_VAR} to check against a size)",
                shown_bytes(limit as f64)
            ),
        }));
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
        // Whether or not this system reports its available memory.
        let e = check_fits("a test", 1e30).unwrap_err();
        assert!(
            matches!(&e, Error::TooLarge(m) if m.contains("a test")),
            "{e}"
        );
        check_fits("a test", 1.0).unwrap();
    }

    #[test]
    fn unknown_memory_still_refuses_what_no_process_can_address() {
        // Unknown available memory passed every estimate, 1e30 bytes included.
        let limit = ADDRESSABLE_BYTES as f64;
        fits("a test", limit, None).unwrap();
        let e = fits("a test", limit * 1.01, None).unwrap_err();
        assert_eq!(
            e.message(),
            "a test needs about 132382.7 GiB of memory, more than a 64-bit \
             process can address (131072.0 GiB); the memory available could not be read (set \
             FABRICSIM_AVAILABLE_BYTES to check against a size)"
        );
        assert!(matches!(
            fits("a test", 1e30, None),
            Err(Error::TooLarge(_))
        ));
        assert!(matches!(
            fits("a test", f64::INFINITY, None),
            Err(Error::TooLarge(_))
        ));
        // A known amount is the limit, above or below the addressable one.
        fits("a test", limit * 2.0, Some(1 << 50)).unwrap();
        let e = fits("a test", 2.0 * 1024.0 * 1024.0, Some(1 << 20)).unwrap_err();
        assert!(
            e.message()
                .ends_with("needs about 2.0 MiB of memory, but only 1.0 MiB is available"),
            "{e}"
        );
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
