//! What the bench process itself costs (CPU time, peak memory), and the
//! statistics of the timings.

use std::time::Duration;

use nix::sys::resource::{UsageWho, getrusage};

/// User plus system CPU time this process has used so far.
pub fn cpu_time() -> Duration {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(usage) => timeval(usage.user_time()) + timeval(usage.system_time()),
        Err(_) => Duration::ZERO,
    }
}

fn timeval(tv: nix::sys::time::TimeVal) -> Duration {
    let micros = tv.tv_sec().max(0) as u64 * 1_000_000 + tv.tv_usec().max(0) as u64;
    Duration::from_micros(micros)
}

/// The process's peak resident memory so far, in MB (10^6 bytes): `VmHWM`
/// in `/proc/self/status`, where there is one.
///
/// Not `ru_maxrss`: Linux carries it over an `execve` from the process that
/// forked (its parent's memory at the fork), so under `cargo run` it reports
/// cargo's ~100 MB. `VmHWM` belongs to the memory of this program alone.
/// Elsewhere `ru_maxrss` is the best there is.
pub fn peak_rss_mb() -> f64 {
    let kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| vm_hwm_kib(&status))
        .unwrap_or_else(|| match getrusage(UsageWho::RUSAGE_SELF) {
            Ok(usage) => u64::try_from(usage.max_rss()).unwrap_or_default(),
            Err(_) => 0,
        });
    round3(kib as f64 * 1024.0 / 1e6)
}

/// The `VmHWM:` line of a `/proc/PID/status` text, in KiB.
fn vm_hwm_kib(status: &str) -> Option<u64> {
    let value = status.lines().find_map(|line| line.strip_prefix("VmHWM:"))?;
    value.trim().strip_suffix("kB")?.trim().parse().ok()
}

/// Milliseconds with microsecond precision.
pub fn ms(duration: Duration) -> f64 {
    round3(duration.as_secs_f64() * 1000.0)
}

/// Seconds with millisecond precision.
pub fn secs(duration: Duration) -> f64 {
    round3(duration.as_secs_f64())
}

/// Rounds to 3 decimals, which is all a benchmark figure can honestly claim.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The nearest-rank percentile (`p` in 0..=100) of `values`, in ms.
pub fn percentile_ms(values: &[Duration], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    ms(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The median of `values` in ms (the lower middle for an even count).
pub fn median_ms(values: &[Duration]) -> f64 {
    percentile_ms(values, 50.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&values, 50.0), 50.0);
        assert_eq!(percentile_ms(&values, 99.0), 99.0);
        assert_eq!(percentile_ms(&values[..1], 99.0), 1.0);
        assert_eq!(median_ms(&[3, 1, 2].map(Duration::from_millis)), 2.0);
        assert_eq!(percentile_ms(&[], 50.0), 0.0);
    }

    #[test]
    fn the_peak_is_read_from_the_vm_hwm_line() {
        let status = "Name:\taskloop-bench\nVmPeak:\t  123456 kB\nVmHWM:\t   17408 kB\nVmRSS:\t   17000 kB\n";
        assert_eq!(vm_hwm_kib(status), Some(17408));
        assert_eq!(vm_hwm_kib("Name:\tx\n"), None);
        assert_eq!(vm_hwm_kib("VmHWM:\tlots\n"), None);
    }

    #[test]
    fn this_process_has_used_some_cpu_and_memory() {
        let spin: u64 = (0..1_000_000u64).map(std::hint::black_box).sum();
        assert!(spin > 0);
        assert!(cpu_time() > Duration::ZERO);
        assert!(peak_rss_mb() > 0.1);
    }
}
