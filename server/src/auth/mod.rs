//! Who is asking: roles, tokens (kept only as SHA-256 hashes, compared in
//! constant time), browser sessions, and the policy for anonymous access.

mod tokens;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use shared::auth::Role;
pub use tokens::{AuthConfig, AuthError, TokenEntry, hash_token, hex as tokens_hex, new_token};

/// How long a browser session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Failed logins from one address before it must wait a minute.
const LOGIN_FAILURES_ALLOWED: u32 = 10;
const LOGIN_LOCKOUT: Duration = Duration::from_secs(60);

/// The caller of a request, as the server trusts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// A token's user name, or "anonymous".
    pub user: String,
    pub role: Role,
    /// True when no token or session identified the caller.
    pub anonymous: bool,
}

impl Identity {
    /// The caller's role allows `needed`, or a 403 message saying what it takes.
    pub fn require(&self, needed: Role, action: &str) -> Result<(), String> {
        if self.role >= needed {
            Ok(())
        } else {
            Err(format!(
                "{action} needs the {} role; {} has {}",
                needed.name(),
                if self.anonymous { "an anonymous visitor".to_owned() } else { format!("'{}'", self.user) },
                self.role.name()
            ))
        }
    }
}

/// Why a request could not be identified; the web layer answers 401.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unauthorized {
    #[error("invalid token; check the Authorization: Bearer header")]
    BadToken,
    #[error("your session has expired or the server restarted; log in again")]
    Expired,
    #[error("this dashboard needs a token: log in on the page, or send Authorization: Bearer <token>")]
    Required,
}

struct Session {
    user: String,
    role: Role,
    expires: Instant,
}

/// Tokens, sessions and the anonymous policy of one running server.
pub struct Auth {
    config: AuthConfig,
    /// Keyed by the SHA-256 of the session id, so memory never holds a usable cookie.
    sessions: Mutex<HashMap<[u8; 32], Session>>,
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("tokens", &self.config.tokens.len()).finish_non_exhaustive()
    }
}

impl Auth {
    pub fn new(config: AuthConfig) -> Self {
        Self { config, sessions: Mutex::new(HashMap::new()), failures: Mutex::new(HashMap::new()) }
    }

    /// True when tokens are configured (otherwise every caller is the single local user).
    pub fn enabled(&self) -> bool {
        !self.config.tokens.is_empty()
    }

    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// The role an anonymous caller gets: everything when no tokens are configured
    /// (a workstation, or `--allow-anonymous`), viewing when viewers are open, else nothing.
    pub fn anonymous(&self) -> Option<Identity> {
        let role = if !self.enabled() {
            Role::Admin
        } else if self.config.open_viewing {
            Role::Viewer
        } else {
            return None;
        };
        Some(Identity { user: "anonymous".to_owned(), role, anonymous: true })
    }

    /// Whether `caller` may see who runs what (user names, command lines, containers):
    /// anyone signed in may; an anonymous caller (or an unidentified scraper, `None`)
    /// only when no tokens are configured, as it is then the machine's own user.
    pub fn shows_people_to(&self, caller: Option<&Identity>) -> bool {
        !self.enabled() || caller.is_some_and(|who| !who.anonymous)
    }

    /// True when anonymous viewers may connect while tokens exist: the live
    /// stream then needs a second, redacted encoding of what names people.
    pub fn admits_anonymous_viewers(&self) -> bool {
        self.enabled() && self.config.open_viewing
    }

    /// Looks a presented token up among the configured hashes, touching every entry
    /// so the time taken says nothing about which (or whether one) matched.
    pub fn check_token(&self, token: &str) -> Option<Identity> {
        let presented = hash_token(token);
        let mut found = None;
        for entry in &self.config.tokens {
            if bool::from(subtle::ConstantTimeEq::ct_eq(&entry.sha256[..], &presented[..])) {
                found = Some(Identity { user: entry.user.clone(), role: entry.role, anonymous: false });
            }
        }
        found
    }

    /// Who sent a request with these credentials.
    pub fn identify(&self, bearer: Option<&str>, session: Option<&str>) -> Result<Identity, Unauthorized> {
        if let Some(token) = bearer {
            return self.check_token(token).ok_or(Unauthorized::BadToken);
        }
        if let Some(id) = session {
            let key: [u8; 32] = Sha256::digest(id.as_bytes()).into();
            let mut sessions = lock(&self.sessions);
            match sessions.get(&key) {
                Some(s) if s.expires > Instant::now() => {
                    return Ok(Identity { user: s.user.clone(), role: s.role, anonymous: false });
                }
                Some(_) => {
                    sessions.remove(&key);
                    return Err(Unauthorized::Expired);
                }
                // An unknown cookie (e.g. from before a restart) falls back to anonymous access if allowed.
                None => return self.anonymous().ok_or(Unauthorized::Expired),
            }
        }
        self.anonymous().ok_or(Unauthorized::Required)
    }

    /// Trades a token for a session id (the cookie value), or says why not.
    pub fn login(&self, token: &str, from: IpAddr) -> Result<(Identity, String), String> {
        {
            let mut failures = lock(&self.failures);
            if let Some((count, since)) = failures.get(&from) {
                if *count >= LOGIN_FAILURES_ALLOWED && since.elapsed() < LOGIN_LOCKOUT {
                    return Err("too many failed logins from your address; wait a minute".to_owned());
                }
                if since.elapsed() >= LOGIN_LOCKOUT {
                    failures.remove(&from);
                }
            }
        }
        let Some(identity) = self.check_token(token) else {
            let mut failures = lock(&self.failures);
            let entry = failures.entry(from).or_insert((0, Instant::now()));
            entry.0 += 1;
            return Err("invalid token".to_owned());
        };
        let id = new_token();
        let key: [u8; 32] = Sha256::digest(id.as_bytes()).into();
        let mut sessions = lock(&self.sessions);
        let now = Instant::now();
        sessions.retain(|_, s| s.expires > now);
        sessions
            .insert(key, Session { user: identity.user.clone(), role: identity.role, expires: now + SESSION_LIFETIME });
        Ok((identity, id))
    }

    /// Ends a session; unknown ids are ignored.
    pub fn logout(&self, session: &str) {
        let key: [u8; 32] = Sha256::digest(session.as_bytes()).into();
        lock(&self.sessions).remove(&key);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(open_viewing: bool) -> Auth {
        Auth::new(AuthConfig {
            tokens: vec![
                TokenEntry { user: "ana".into(), role: Role::Operator, sha256: hash_token("ana-secret") },
                TokenEntry { user: "root".into(), role: Role::Admin, sha256: hash_token("root-secret") },
            ],
            open_viewing,
            open_metrics: true,
        })
    }

    #[test]
    fn without_tokens_the_local_user_may_do_everything() {
        let auth = Auth::new(AuthConfig::default());
        let me = auth.identify(None, None).unwrap();
        assert!(me.anonymous && me.role == Role::Admin);
    }

    #[test]
    fn tokens_map_to_their_roles_and_wrong_ones_are_refused() {
        let auth = auth(true);
        assert_eq!(auth.identify(Some("ana-secret"), None).unwrap().role, Role::Operator);
        assert_eq!(auth.identify(Some("root-secret"), None).unwrap().user, "root");
        assert_eq!(auth.identify(Some("nope"), None), Err(Unauthorized::BadToken));
        assert_eq!(auth.identify(None, None).unwrap().role, Role::Viewer);
        assert_eq!(self::auth(false).identify(None, None), Err(Unauthorized::Required));
    }

    #[test]
    fn sessions_identify_until_logout() {
        let auth = auth(false);
        let (who, id) = auth.login("ana-secret", "127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(who.user, "ana");
        assert_eq!(auth.identify(None, Some(&id)).unwrap().role, Role::Operator);
        auth.logout(&id);
        assert_eq!(auth.identify(None, Some(&id)), Err(Unauthorized::Expired));
    }

    #[test]
    fn repeated_failed_logins_lock_the_address_out() {
        let auth = auth(true);
        let from: IpAddr = "10.0.0.9".parse().unwrap();
        for _ in 0..LOGIN_FAILURES_ALLOWED {
            assert_eq!(auth.login("guess", from).unwrap_err(), "invalid token");
        }
        assert!(auth.login("ana-secret", from).unwrap_err().contains("too many"));
        assert!(auth.login("ana-secret", "10.0.0.10".parse().unwrap()).is_ok());
    }

    #[test]
    fn only_signed_in_callers_see_people_when_tokens_exist() {
        let team = auth(true);
        let anonymous = team.identify(None, None).unwrap();
        let ana = team.identify(Some("ana-secret"), None).unwrap();
        assert!(!team.shows_people_to(Some(&anonymous)) && !team.shows_people_to(None));
        assert!(team.shows_people_to(Some(&ana)));
        assert!(team.admits_anonymous_viewers() && !auth(false).admits_anonymous_viewers());
        let workstation = Auth::new(AuthConfig::default());
        let me = workstation.identify(None, None).unwrap();
        assert!(workstation.shows_people_to(Some(&me)) && workstation.shows_people_to(None));
        assert!(!workstation.admits_anonymous_viewers(), "no tokens: nobody needs a redacted view");
    }

    #[test]
    fn require_says_what_is_missing() {
        let viewer = Identity { user: "bo".into(), role: Role::Viewer, anonymous: false };
        let err = viewer.require(Role::Operator, "running an experiment").unwrap_err();
        assert_eq!(err, "running an experiment needs the operator role; 'bo' has viewer");
        assert!(viewer.require(Role::Viewer, "x").is_ok());
    }
}
