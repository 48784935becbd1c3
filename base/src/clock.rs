//! Time, in one place: the wall clock every part stamps its records with ([`now_ms`]); a
//! [`Clock`] that the parts which wait, expire or limit take, so that their tests drive time
//! instead of sleeping through it; and the real monotonic time of what happens outside the
//! process, which no test may fake: a [`Stopwatch`] for what is measured (a CUDA call, an NVML
//! call, a power integral) and a [`Deadline`] for waiting on something real (a GPU, a child
//! process, a socket). No other module of the product's crates reads `Instant::now` or
//! `SystemTime::now` (the `tests/` crate times the running server itself).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, the time unit of every sample.
pub fn now_ms() -> u64 {
    ms_since_epoch(SystemTime::now())
}

fn ms_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The time a part reads: the system's, the system's with its wall time off ([`Clock::skewed`]:
/// a host whose clock is wrong), or a manual one that moves only when a test says
/// ([`Clock::manual`], [`Clock::advance`]). Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    manual: Option<Arc<Manual>>,
    /// Added to the system's wall time (ms); the monotonic clock is the system's.
    skew_ms: i64,
}

#[derive(Debug)]
struct Manual {
    start: Instant,
    start_ms: u64,
    advanced_ns: AtomicU64,
}

impl Clock {
    /// The system's clocks: [`Instant::now`] and [`now_ms`].
    pub fn system() -> Self {
        Self::default()
    }

    /// The system's clocks, with the wall time `skew_ms` ahead (or behind, when negative).
    pub fn skewed(skew_ms: i64) -> Self {
        Self { manual: None, skew_ms }
    }

    /// A clock stopped at the moment it is made; only [`Clock::advance`] moves it.
    pub fn manual() -> Self {
        let manual = Manual { start: Instant::now(), start_ms: now_ms(), advanced_ns: AtomicU64::new(0) };
        Self { manual: Some(Arc::new(manual)), skew_ms: 0 }
    }

    /// Moves a manual clock (and every clone of it) forward by `by`. On the system clock it does
    /// nothing: time there moves by itself.
    pub fn advance(&self, by: Duration) {
        if let Some(manual) = &self.manual {
            let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
            manual.advanced_ns.fetch_add(ns, Ordering::SeqCst);
        }
    }

    /// Now, on the monotonic clock: for how long something has waited or is kept.
    pub fn now(&self) -> Instant {
        match &self.manual {
            None => Instant::now(),
            Some(manual) => manual.start + manual.advanced(),
        }
    }

    /// Now, in milliseconds since the Unix epoch: for what is stored or shown.
    pub fn now_ms(&self) -> u64 {
        match &self.manual {
            None => now_ms().saturating_add_signed(self.skew_ms),
            Some(manual) => {
                manual.start_ms.saturating_add(u64::try_from(manual.advanced().as_millis()).unwrap_or(u64::MAX))
            }
        }
    }
}

impl Manual {
    fn advanced(&self) -> Duration {
        Duration::from_nanos(self.advanced_ns.load(Ordering::SeqCst))
    }
}

/// Real elapsed time, for a figure that is measured: always the system's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    pub fn start() -> Self {
        Self(Instant::now())
    }

    /// The moment it started (to place other measured moments against it).
    pub fn started(&self) -> Instant {
        self.0
    }

    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }

    /// Now on the same clock: a measured moment (a power reading, a window's end).
    pub fn now() -> Instant {
        Instant::now()
    }
}

/// A limit on waiting for something real (a GPU, a child process, a socket, a condition a test
/// waits for): on the system's monotonic clock, as what is waited for runs on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline(Instant);

impl Deadline {
    /// `within` from now.
    pub fn after(within: Duration) -> Self {
        Self(Instant::now() + within)
    }

    pub fn passed(&self) -> bool {
        Instant::now() >= self.0
    }

    /// What is left (zero once passed).
    pub fn left(&self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }
}

impl governor::clock::Clock for Clock {
    type Instant = Instant;

    fn now(&self) -> Instant {
        Clock::now(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_its_clones_with_it() {
        let clock = Clock::manual();
        let (at, at_ms) = (clock.now(), clock.now_ms());
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!((clock.now(), clock.now_ms()), (at, at_ms), "a manual clock does not run by itself");
        let clone = clock.clone();
        clone.advance(Duration::from_millis(1500));
        assert_eq!(clock.now().duration_since(at), Duration::from_millis(1500));
        assert_eq!(clock.now_ms() - at_ms, 1500);
    }

    #[test]
    fn a_deadline_passes_and_a_stopwatch_runs_on_real_time() {
        let (now, later) = (Deadline::after(Duration::ZERO), Deadline::after(Duration::from_secs(3600)));
        assert!(now.passed() && now.left() == Duration::ZERO);
        assert!(!later.passed() && later.left() > Duration::from_secs(3500));
        let watch = Stopwatch::start();
        std::thread::sleep(Duration::from_millis(5));
        assert!(watch.elapsed() >= Duration::from_millis(5));
        assert!(Stopwatch::now() >= watch.started());
    }

    #[test]
    fn the_system_clock_runs_and_ignores_advance() {
        let clock = Clock::system();
        let at = clock.now();
        clock.advance(Duration::from_secs(3600));
        assert!(clock.now().duration_since(at) < Duration::from_secs(60));
        assert!(clock.now_ms().abs_diff(now_ms()) < 60_000);
        let ahead = Clock::skewed(600_000);
        assert!(ahead.now_ms().abs_diff(now_ms() + 600_000) < 60_000);
        assert!(Clock::skewed(-600_000).now_ms().abs_diff(now_ms() - 600_000) < 60_000);
    }
}
