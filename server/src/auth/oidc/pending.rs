//! Sign-ins under way: what a browser sent to the identity provider must come back with (the `state`),
//! and what only gpudash knows of it (the PKCE verifier, the nonce, where to go afterwards). Each is
//! used once and lives [`PENDING_FOR`]; at most [`PENDING_MAX`] at once, the oldest dropped first.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long someone has to sign in at the provider.
pub const PENDING_FOR: Duration = Duration::from_secs(600);
/// Sign-ins under way at once; past it the oldest is forgotten (its callback then says to start again).
pub const PENDING_MAX: usize = 10_000;

/// What gpudash keeps of one sign-in until the provider sends the browser back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The PKCE code verifier (its S256 challenge went to the provider).
    pub verifier: String,
    /// The nonce the ID token must carry.
    pub nonce: String,
    /// The page to open after signing in (a path on this site).
    pub next: String,
    pub started: Instant,
}

/// Sign-ins under way, by their `state`.
#[derive(Debug, Default)]
pub struct PendingLogins {
    by_state: HashMap<String, Pending>,
}

impl PendingLogins {
    /// Keeps `pending` under `state`, forgetting expired ones (and the oldest when full).
    pub fn insert(&mut self, state: String, pending: Pending, now: Instant) {
        if self.by_state.len() >= PENDING_MAX {
            self.by_state.retain(|_, p| now.saturating_duration_since(p.started) < PENDING_FOR);
        }
        if self.by_state.len() >= PENDING_MAX {
            let oldest = self.by_state.iter().min_by_key(|(_, p)| p.started).map(|(s, _)| s.clone());
            if let Some(oldest) = oldest {
                self.by_state.remove(&oldest);
            }
        }
        self.by_state.insert(state, pending);
    }

    /// The sign-in started with `state`, once: a second callback with it finds nothing.
    pub fn take(&mut self, state: &str, now: Instant) -> Option<Pending> {
        let pending = self.by_state.remove(state)?;
        (now.saturating_duration_since(pending.started) < PENDING_FOR).then_some(pending)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_state.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(started: Instant) -> Pending {
        Pending { verifier: "v".into(), nonce: "n".into(), next: "/".into(), started }
    }

    #[test]
    fn a_sign_in_is_taken_once_and_not_after_it_expires() {
        let start = Instant::now();
        let mut logins = PendingLogins::default();
        logins.insert("a".into(), pending(start), start);
        logins.insert("b".into(), pending(start), start);
        assert_eq!(logins.take("a", start + Duration::from_secs(5)), Some(pending(start)));
        assert_eq!(logins.take("a", start + Duration::from_secs(5)), None, "used once");
        assert_eq!(logins.take("b", start + PENDING_FOR), None, "expired");
        assert_eq!(logins.take("never", start), None);
    }

    #[test]
    fn when_full_the_oldest_goes_first() {
        let start = Instant::now();
        let mut logins = PendingLogins::default();
        for i in 0..PENDING_MAX {
            logins.insert(format!("s{i}"), pending(start + Duration::from_millis(i as u64)), start);
        }
        logins.insert("new".into(), pending(start + Duration::from_secs(60)), start + Duration::from_secs(60));
        assert_eq!(logins.len(), PENDING_MAX);
        assert!(logins.take("s0", start).is_none(), "the oldest was dropped");
        assert!(logins.take("s1", start).is_some() && logins.take("new", start).is_some());
    }
}
