//! Median, minimum and maximum of timed repetitions.

use shared::lab::Stats;

/// Summarises `samples` (in any unit); `None` when there are none or one is not a number.
pub fn summarize(samples: &[f64]) -> Option<Stats> {
    if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    let median = if sorted.len().is_multiple_of(2) { (sorted[mid - 1] + sorted[mid]) / 2.0 } else { sorted[mid] };
    Some(Stats {
        median,
        min: sorted[0],
        max: sorted[sorted.len() - 1],
        n: u32::try_from(sorted.len()).unwrap_or(u32::MAX),
    })
}

/// Times in ms turned into a rate of `amount / ms` per second scaled by `scale`
/// (e.g. bytes → GB/s with `scale = 1e-9`). The fastest time gives the max rate.
pub fn rates(amount: f64, times_ms: &[f64], scale: f64) -> Option<Stats> {
    let t = summarize(times_ms)?;
    let rate = |ms: f64| if ms > 0.0 { amount / (ms / 1e3) * scale } else { f64::INFINITY };
    Some(Stats { median: rate(t.median), min: rate(t.max), max: rate(t.min), n: t.n })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = summarize(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (3.0, 1.0, 5.0, 3));
        assert_eq!(summarize(&[4.0, 1.0, 3.0, 2.0]).unwrap().median, 2.5);
        assert!(summarize(&[]).is_none());
        assert!(summarize(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn rates_invert_times() {
        // 1 GB in 20, 10 and 40 ms: median 50 GB/s, slowest 25, fastest 100.
        let r = rates(1e9, &[20.0, 10.0, 40.0], 1e-9).unwrap();
        assert!((r.median - 50.0).abs() < 1e-9 && (r.min - 25.0).abs() < 1e-9 && (r.max - 100.0).abs() < 1e-9);
    }
}
