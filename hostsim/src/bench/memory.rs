//! Peak resident memory of the process, per workload: Linux's `VmHWM` from
//! `/proc/self/status`, reset before each workload by writing `5` to
//! `/proc/self/clear_refs`. Elsewhere (or where the reset is refused) nothing is reported
//! rather than a figure that would include earlier workloads.

use std::fs;

/// Resets the peak-RSS mark to the current RSS; `false` if the OS refused.
pub fn reset_peak() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak resident set since the last reset, bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    parse_kib_field(&status, "VmHWM:").map(|kib| kib.saturating_mul(1024))
}

/// The value of a `Name:   123 kB` line of a `/proc/*/status` text.
fn parse_kib_field(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    let value = line.strip_prefix(name)?.trim().strip_suffix("kB")?;
    value.trim().parse().ok()
}

/// Measures the peak RSS of `f` (after a reset): its result and the peak, or `None` for
/// the peak when the mark could not be reset.
pub fn with_peak<T>(f: impl FnOnce() -> T) -> (T, Option<u64>) {
    let reset = reset_peak();
    let out = f();
    (out, peak_rss_bytes().filter(|_| reset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_status_line() {
        let s = "Name:\thostsim\nVmPeak:\t  100 kB\nVmHWM:\t   2048 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_kib_field(s, "VmHWM:"), Some(2048));
        assert_eq!(parse_kib_field(s, "VmSwap:"), None);
        assert_eq!(parse_kib_field("VmHWM: lots", "VmHWM:"), None);
    }

    #[test]
    fn peak_sees_a_large_touched_allocation() {
        let (_, peak) = with_peak(|| {
            let v = vec![7u8; 64 << 20];
            std::hint::black_box(&v);
            v.iter().map(|&b| u64::from(b)).sum::<u64>()
        });
        if let Some(p) = peak {
            assert!(p >= 64 << 20, "peak {p} below the 64 MiB just touched");
        }
    }
}
