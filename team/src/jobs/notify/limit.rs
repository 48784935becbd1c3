//! The notices' rate limit: at most `per_day` end-of-job notices per owner in any 24 hours.
//! The ones held back are counted per owner until their next digest says so.

use std::collections::{HashMap, VecDeque};

const DAY_MS: u64 = 86_400_000;

#[derive(Debug)]
pub struct Limiter {
    per_day: u32,
    /// When each owner's notices of the last 24 hours went out, oldest first.
    sent: HashMap<String, VecDeque<u64>>,
    held_back: HashMap<String, u64>,
}

impl Limiter {
    pub fn new(per_day: u32) -> Self {
        Self { per_day: per_day.max(1), sent: HashMap::new(), held_back: HashMap::new() }
    }

    pub fn set_per_day(&mut self, per_day: u32) {
        self.per_day = per_day.max(1);
    }

    /// Whether `owner` may get a notice at `now_ms` (counted when so; held back when not).
    pub fn allow(&mut self, owner: &str, now_ms: u64) -> bool {
        // Owners with nothing in the window are forgotten, so the map stays as small as the day's senders.
        self.sent.retain(|_, times| {
            while times.front().is_some_and(|&t| now_ms.saturating_sub(t) >= DAY_MS) {
                times.pop_front();
            }
            !times.is_empty()
        });
        let times = self.sent.entry(owner.to_owned()).or_default();
        if times.len() < self.per_day as usize {
            times.push_back(now_ms);
            return true;
        }
        *self.held_back.entry(owner.to_owned()).or_default() += 1;
        false
    }

    /// How many of `owner`'s notices were held back since their last scheduled digest.
    pub fn held_back(&self, owner: &str) -> u64 {
        self.held_back.get(owner).copied().unwrap_or(0)
    }

    /// [`Self::held_back`], counted from zero again (their scheduled digest told them).
    pub fn take_held_back(&mut self, owner: &str) -> u64 {
        self.held_back.remove(owner).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_gets_per_day_notices_in_any_24_hours() {
        let mut limiter = Limiter::new(2);
        assert!(limiter.allow("ana", 1_000));
        assert!(limiter.allow("ana", 2_000));
        assert!(!limiter.allow("ana", 3_000), "the third within a day");
        assert!(limiter.allow("bo", 3_000), "each owner has their own");
        assert!(!limiter.allow("ana", 999 + DAY_MS), "the first is not yet a day old");
        assert!(limiter.allow("ana", 1_000 + DAY_MS), "a day after the first, its place is free");
    }

    #[test]
    fn held_back_notices_are_counted_until_the_digest_takes_them() {
        let mut limiter = Limiter::new(1);
        assert!(limiter.allow("ana", 0));
        assert!(!limiter.allow("ana", 10));
        assert!(!limiter.allow("ana", 20));
        assert_eq!(limiter.held_back("ana"), 2, "asking leaves the count");
        assert_eq!(limiter.take_held_back("ana"), 2);
        assert_eq!(limiter.take_held_back("ana"), 0);
        assert!(limiter.allow("ana", DAY_MS + 1), "a day later");
    }
}
