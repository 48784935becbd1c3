//! The one rate limiter: "at most `count` in `per`", as GCRA (governor's, a token bucket that
//! starts full: `count` at once, then one every `per / count`), on a [`Clock`] so tests drive it.
//! A [`Limiter`] limits one thing (a WebSocket's messages, a process's reports); a
//! [`KeyedLimiter`] one per key (an address's failed sign-ins), tracking a bounded number of keys.
//! governor's own keyed store cannot say whether a key is tracked, so a full table would refuse
//! keys it already holds; the keyed limiter is a map of direct ones instead.

use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use crate::clock::Clock;
use crate::sync::lock;

/// "At most `count` in `per`": `count` at once, then one more every `per / count`. A zero count
/// or length is taken as one (a limit that allows nothing is not a limit).
fn quota(count: u32, per: Duration) -> Quota {
    let burst = NonZeroU32::new(count).unwrap_or(NonZeroU32::MIN);
    let period = (per / burst.get()).max(Duration::from_nanos(1));
    Quota::with_period(period).unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN)).allow_burst(burst)
}

/// Limits one thing to at most `count` in `per`.
#[derive(Debug)]
pub struct Limiter {
    limiter: RateLimiter<NotKeyed, InMemoryState, Clock, NoOpMiddleware<Instant>>,
    clock: Clock,
}

impl Limiter {
    pub fn new(count: u32, per: Duration, clock: &Clock) -> Self {
        Self { limiter: RateLimiter::direct_with_clock(quota(count, per), clock.clone()), clock: clock.clone() }
    }

    /// Takes one: `Ok`, or how long until one more is allowed.
    pub fn check(&self) -> Result<(), Duration> {
        self.limiter.check().map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

/// Why a [`KeyedLimiter`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// This key is over its limit: one more is allowed after this long.
    Wait(Duration),
    /// So many keys are tracked that a new one cannot be: refused without being counted.
    Full,
}

/// Limits each key to at most `count` in `per`, tracking at most `keys` keys at once: one
/// [`Limiter`] per key, dropped once `per` has passed since its last take (its allowance is full
/// again by then, so dropping it forgets nothing).
#[derive(Debug)]
pub struct KeyedLimiter<K: Hash + Eq> {
    limiters: Mutex<HashMap<K, (Limiter, Instant)>>,
    count: u32,
    per: Duration,
    keys: usize,
    clock: Clock,
}

impl<K: Hash + Eq> KeyedLimiter<K> {
    pub fn new(count: u32, per: Duration, keys: usize, clock: &Clock) -> Self {
        Self { limiters: Mutex::new(HashMap::new()), count, per, keys, clock: clock.clone() }
    }

    /// Takes one for `key`. When the table is full, the keys whose allowance is full again are
    /// dropped first; if it is still full, a new key is [`Refused::Full`] (and not counted).
    pub fn check(&self, key: K) -> Result<(), Refused> {
        let now = self.clock.now();
        let mut limiters = lock(&self.limiters);
        if limiters.len() >= self.keys && !limiters.contains_key(&key) {
            limiters.retain(|_, (_, last)| now.duration_since(*last) < self.per);
            if limiters.len() >= self.keys {
                return Err(Refused::Full);
            }
        }
        let (limiter, last) =
            limiters.entry(key).or_insert_with(|| (Limiter::new(self.count, self.per, &self.clock), now));
        *last = now;
        limiter.check().map_err(Refused::Wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_at_once_then_one_every_per_over_count() {
        let clock = Clock::manual();
        let limiter = Limiter::new(10, Duration::from_secs(60), &clock);
        for _ in 0..10 {
            assert_eq!(limiter.check(), Ok(()));
        }
        assert_eq!(limiter.check(), Err(Duration::from_secs(6)), "the 11th waits one period");
        clock.advance(Duration::from_secs(5));
        assert_eq!(limiter.check(), Err(Duration::from_secs(1)));
        clock.advance(Duration::from_secs(1));
        assert_eq!(limiter.check(), Ok(()));
        assert!(limiter.check().is_err());
        clock.advance(Duration::from_secs(60));
        for _ in 0..10 {
            assert_eq!(limiter.check(), Ok(()), "a quiet minute refills it");
        }
        assert!(limiter.check().is_err(), "never more than the count at once");
    }

    #[test]
    fn each_key_has_its_own_allowance_and_the_table_is_bounded() {
        let clock = Clock::manual();
        let limiter = KeyedLimiter::new(2, Duration::from_secs(10), 2, &clock);
        assert_eq!((limiter.check("a"), limiter.check("a")), (Ok(()), Ok(())));
        assert_eq!(limiter.check("a"), Err(Refused::Wait(Duration::from_secs(5))));
        assert_eq!(limiter.check("b"), Ok(()), "another key is not held back by a's");
        assert_eq!(limiter.check("c"), Err(Refused::Full), "two keys tracked, both recent");
        clock.advance(Duration::from_secs(6));
        assert_eq!(limiter.check("c"), Err(Refused::Full), "a and b were used less than 10 s ago");
        assert_eq!(limiter.check("a"), Ok(()), "a key already tracked is never Full");
        clock.advance(Duration::from_secs(10));
        assert_eq!(limiter.check("c"), Ok(()), "keys idle for 10 s make room");
        assert_eq!((limiter.check("c"), limiter.check("c")), (Ok(()), Err(Refused::Wait(Duration::from_secs(5)))));
    }
}
