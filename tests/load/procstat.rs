//! CPU time and resident memory of a process, read from `/proc` (Linux only).

use std::time::Instant;

use gpudash::telemetry::procfs::{clock_ticks_per_second, parse_pid_stat};

/// One reading of a process: CPU seconds so far and resident memory.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    pub at: Instant,
    /// User + system CPU seconds since the process started.
    pub cpu_s: f64,
    /// Resident set size, bytes.
    pub rss: u64,
    /// Peak resident set size so far (VmHWM), bytes.
    pub rss_peak: u64,
}

/// Reads `/proc/{pid}` (`pid` may be "self"); `None` once the process is gone.
pub fn read(pid: &str) -> Option<Reading> {
    let at = Instant::now();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let stat = parse_pid_stat(&stat)?;
    let cpu_s = (stat.utime + stat.stime) as f64 / clock_ticks_per_second() as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .map_or(0, |n| n * 1024)
    };
    Some(Reading { at, cpu_s, rss: kib("VmRSS:"), rss_peak: kib("VmHWM:") })
}

/// What a series of readings says: CPU as a percentage of one core, memory in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// Mean over the whole series.
    pub cpu_mean_pct: f64,
    /// Busiest interval between two consecutive readings.
    pub cpu_peak_pct: f64,
    pub rss_last: u64,
    pub rss_peak: u64,
}

impl Usage {
    pub fn of(readings: &[Reading]) -> Self {
        let (Some(first), Some(last)) = (readings.first(), readings.last()) else { return Self::default() };
        let pct = |a: &Reading, b: &Reading| {
            let wall = b.at.duration_since(a.at).as_secs_f64();
            if wall > 0.0 { 100.0 * (b.cpu_s - a.cpu_s) / wall } else { 0.0 }
        };
        Self {
            cpu_mean_pct: pct(first, last),
            cpu_peak_pct: readings.windows(2).map(|w| pct(&w[0], &w[1])).fold(0.0, f64::max),
            rss_last: last.rss,
            rss_peak: readings.iter().map(|r| r.rss_peak.max(r.rss)).max().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = read("self").expect("/proc/self");
        assert!(me.rss > 0 && me.rss_peak >= me.rss);
    }

    #[test]
    fn usage_is_cpu_over_wall_time() {
        let t0 = Instant::now();
        let r = |s: u64, cpu_s: f64, rss: u64| Reading {
            at: t0 + std::time::Duration::from_secs(s),
            cpu_s,
            rss,
            rss_peak: rss,
        };
        let u = Usage::of(&[r(0, 1.0, 10), r(1, 1.1, 30), r(2, 1.4, 20)]);
        assert!((u.cpu_mean_pct - 20.0).abs() < 1e-9);
        assert!((u.cpu_peak_pct - 30.0).abs() < 1e-9);
        assert_eq!((u.rss_last, u.rss_peak), (20, 30));
    }
}
