//! A GPU's energy counter without paying for it every pass: NVML's total-energy call costs about
//! 3 ms of CPU on the H200 (`gpudash-bench loops`), while the power draw the fast loop reads
//! anyway costs 3 µs. So the counter is read every [`COUNTER_PERIOD`] (and with the facts), and
//! between reads the power draw is integrated on top of it.
//!
//! The figure served never goes back: when a fresh counter reads below the estimate (the
//! integral ran ahead), it is held until the counter passes it, so usage accounting never sees
//! a counter that went back.

use std::time::{Duration, Instant};

/// How often the hardware counter is read.
pub(super) const COUNTER_PERIOD: Duration = Duration::from_secs(30);

/// Power readings further apart than this are not integrated (a lost GPU, a stalled loop): the
/// next counter read covers them.
const MAX_STEP: Duration = Duration::from_secs(10);

/// The estimate against a fresh counter reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Drift {
    /// The estimate minus the counter, mJ.
    pub drift_mj: i64,
    /// What the counter counted since its previous read, mJ.
    pub counted_mj: u64,
}

/// One GPU's energy estimate.
#[derive(Debug, Clone, Default)]
pub(super) struct EnergyEstimate {
    /// The counter as last read, in mJ, and when.
    counter: Option<(u64, Instant)>,
    /// Power integrated since that read, in mJ.
    integral_mj: f64,
    /// The last power reading (mW) and when, for the next step of the integral.
    last_power: Option<(u32, Instant)>,
    /// The highest figure served, so it never goes back.
    served_mj: u64,
}

impl EnergyEstimate {
    /// Whether the counter should be read on this pass.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.counter.is_none_or(|(_, at)| now.duration_since(at) >= COUNTER_PERIOD)
    }

    /// Adds a power reading: the trapezoid since the previous one joins the integral.
    pub(super) fn power(&mut self, milliwatts: u32, now: Instant) {
        if let Some((before, at)) = self.last_power {
            let step = now.saturating_duration_since(at);
            if step <= MAX_STEP {
                let mean_mw = (f64::from(before) + f64::from(milliwatts)) / 2.0;
                self.integral_mj += mean_mw * step.as_secs_f64();
            }
        }
        self.last_power = Some((milliwatts, now));
    }

    /// A fresh counter reading (mJ): the integral starts again from it. Returns, when there was an
    /// estimate, how far it had drifted from the counter (estimate − counter, mJ) and what the
    /// counter counted since its last read (mJ), so the drift can be told as a share.
    pub(super) fn counter(&mut self, mj: u64, now: Instant) -> Option<Drift> {
        let drift = self.counter.map(|(base, _)| Drift {
            drift_mj: (base as f64 + self.integral_mj - mj as f64).round() as i64,
            counted_mj: mj.saturating_sub(base),
        });
        self.counter = Some((mj, now));
        self.integral_mj = 0.0;
        drift
    }

    /// The figure to serve, in mJ: the last counter plus the power integrated since, never less than
    /// a figure served before. `None` until the counter was read once.
    pub(super) fn serve(&mut self) -> Option<u64> {
        let (base, _) = self.counter?;
        let estimate = base.saturating_add(self.integral_mj.round() as u64);
        self.served_mj = self.served_mj.max(estimate);
        Some(self.served_mj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integrates_power_between_counter_reads() {
        let t0 = base::clock::Stopwatch::now();
        let mut e = EnergyEstimate::default();
        assert!(e.due(t0));
        assert_eq!(e.serve(), None, "nothing before the first counter read");
        assert_eq!(e.counter(1_000_000, t0), None);
        e.power(100_000, t0);
        e.power(300_000, t0 + Duration::from_secs(2));
        // Trapezoid: (100 W + 300 W) / 2 × 2 s = 400 J.
        assert_eq!(e.serve(), Some(1_400_000));
        assert!(!e.due(t0 + Duration::from_secs(29)));
        assert!(e.due(t0 + COUNTER_PERIOD));
    }

    #[test]
    fn a_counter_read_resets_the_integral_and_reports_the_drift() {
        let t0 = base::clock::Stopwatch::now();
        let mut e = EnergyEstimate::default();
        e.counter(0, t0);
        e.power(200_000, t0);
        e.power(200_000, t0 + Duration::from_secs(10));
        assert_eq!(e.serve(), Some(2_000_000));
        // The hardware counted 1.99 kJ: the estimate was 10 J ahead.
        let drift = e.counter(1_990_000, t0 + Duration::from_secs(10));
        assert_eq!(drift, Some(Drift { drift_mj: 10_000, counted_mj: 1_990_000 }));
        // Served figures never go back, until the counter passes them.
        assert_eq!(e.serve(), Some(2_000_000));
        e.power(200_000, t0 + Duration::from_secs(11));
        assert_eq!(e.serve(), Some(2_190_000));
    }

    #[test]
    fn a_long_gap_is_left_to_the_next_counter_read() {
        let t0 = base::clock::Stopwatch::now();
        let mut e = EnergyEstimate::default();
        e.counter(5, t0);
        e.power(500_000, t0);
        e.power(500_000, t0 + MAX_STEP + Duration::from_secs(1));
        assert_eq!(e.serve(), Some(5));
    }
}
