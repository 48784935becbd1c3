//! Roles and who-am-I, as the page needs them to show or hide actions.

use serde::{Deserialize, Serialize};

/// What a caller may do; each role includes the ones before it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Sees everything.
    Viewer,
    /// Also runs experiments, empties the lab's cache, cancels own runs.
    Operator,
    /// Also cancels anyone's runs and reads the audit log.
    Admin,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(name: &str) -> Option<Role> {
        [Role::Viewer, Role::Operator, Role::Admin].into_iter().find(|r| r.name() == name.trim())
    }
}

/// Body of `GET /api/me` (and of a successful `POST /api/login`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Me {
    /// `None` when the server needs a token before showing anything.
    pub user: Option<String>,
    pub role: Option<Role>,
    pub anonymous: bool,
    /// Tokens are configured: the page offers a login form.
    pub auth_enabled: bool,
    /// Listening beyond loopback with no tokens (`--allow-anonymous`): the page shows a warning banner.
    pub exposed_without_auth: bool,
    /// `--allow-signals`: the process table offers Stop and Kill (to whom [`crate::processes::may_signal`] allows).
    #[serde(default)]
    pub signals: bool,
    /// `--read-only`: nothing can be changed (runs, caches, silences, signals, bookings), whatever the role.
    #[serde(default)]
    pub read_only: bool,
    /// Signed in by a trusted auth proxy (`--auth-proxy-header`): gpudash has no session of its own to end.
    #[serde(default)]
    pub by_proxy: bool,
    /// Where "Log out" goes for someone the proxy signed in (`--auth-proxy-sign-out`); `None`: no button for
    /// them (others log out by `POST /api/logout`).
    #[serde(default)]
    pub sign_out: Option<String>,
    /// People sign in with the team's identity provider (`--oidc-issuer`): the page offers this button.
    #[serde(default)]
    pub sign_in: Option<SignInWith>,
}

/// Body of `POST /api/logout` when the session's provider has its own sign-out to visit next.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LoggedOut {
    /// The OIDC provider's end-session address, coming back to the dashboard.
    pub sign_out: Option<String>,
}

/// The page's "Sign in with …" button.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SignInWith {
    /// Where the button goes (`/auth/oidc/login`).
    pub url: String,
    /// The provider as people know it: its issuer's host.
    pub provider: String,
}

impl Me {
    /// The caller's role is at least `role` (what they may see: the audit log for admins).
    pub fn has(&self, role: Role) -> bool {
        self.role.is_some_and(|have| have >= role)
    }

    /// The caller may change things that need `role`: they have it and the dashboard is not read-only
    /// (the server refuses the same; `Action::changes` there names what a change is).
    pub fn may_change(&self, role: Role) -> bool {
        !self.read_only && self.has(role)
    }
}

/// Body of `POST /api/login`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub token: String,
}

/// One entry of the audit log (`GET /api/audit`, admins only).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub id: u64,
    pub timestamp_ms: u64,
    pub user: String,
    /// Client address as the server saw it.
    pub client: String,
    /// e.g. "login", "experiment.start", "experiment.cancel", "empty_cache".
    pub action: String,
    /// What it acted on, e.g. "run 12" or "GPU 0".
    pub target: String,
    pub outcome: AuditOutcome,
    pub detail: String,
    /// The entry in words, e.g. "ana ran an experiment (run 12)" (empty from older servers).
    #[serde(default)]
    pub summary: String,
}

/// How an audited action ended.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum AuditOutcome {
    Ok,
    Denied,
    Failed,
}

impl AuditOutcome {
    pub const ALL: [AuditOutcome; 3] = [AuditOutcome::Ok, AuditOutcome::Denied, AuditOutcome::Failed];

    pub fn name(self) -> &'static str {
        match self {
            AuditOutcome::Ok => "ok",
            AuditOutcome::Denied => "denied",
            AuditOutcome::Failed => "failed",
        }
    }

    pub fn parse(name: &str) -> Option<AuditOutcome> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }
}

/// Most entries one `GET /api/audit` returns.
pub const AUDIT_MAX_LIMIT: u32 = 1000;
/// Entries returned when the query names no `limit`.
pub const AUDIT_DEFAULT_LIMIT: u32 = 100;
/// Longest `user` or `action` filter.
const AUDIT_MAX_FILTER_LEN: usize = 100;

/// Query of `GET /api/audit`: every field is optional and the filters combine
/// (all must match). Entries come newest first.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// At most this many entries (1 to [`AUDIT_MAX_LIMIT`]; [`AUDIT_DEFAULT_LIMIT`] when absent).
    pub limit: Option<u32>,
    /// Only entries with a smaller id: the next page after the last id seen.
    pub before: Option<u64>,
    /// Only this user's entries (exact name, e.g. "ana", "anonymous", "unknown").
    pub user: Option<String>,
    /// Only this action (exact name, e.g. "login", "experiment.start").
    pub action: Option<String>,
    pub outcome: Option<AuditOutcome>,
    /// Only entries at or after this time (ms since epoch).
    pub from: Option<u64>,
    /// Only entries at or before this time (ms since epoch).
    pub to: Option<u64>,
}

/// What is wrong with an [`AuditQuery`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditQueryError {
    #[error("'limit' must be from 1 to {max}, not {0}", max = AUDIT_MAX_LIMIT)]
    Limit(u32),
    /// `name` is `user` or `action`.
    #[error("'{name}' must be 1 to {max} characters; leave it out to see every {name}", max = AUDIT_MAX_FILTER_LEN)]
    FilterLength { name: &'static str },
    #[error("'from' ({from}) must not be after 'to' ({to})")]
    Reversed { from: u64, to: u64 },
}

impl AuditQuery {
    /// The parameters, for error messages.
    pub const PARAMETERS: &'static str = "limit (1 to 1000), before (an entry id), user, action, \
        outcome (ok, denied or failed), from and to (ms since epoch)";

    /// Says what is wrong with the query, if anything.
    pub fn validate(&self) -> Result<(), AuditQueryError> {
        if let Some(limit) = self.limit
            && !(1..=AUDIT_MAX_LIMIT).contains(&limit)
        {
            return Err(AuditQueryError::Limit(limit));
        }
        for (name, value) in [("user", &self.user), ("action", &self.action)] {
            if let Some(value) = value
                && (value.is_empty() || value.chars().count() > AUDIT_MAX_FILTER_LEN)
            {
                return Err(AuditQueryError::FilterLength { name });
            }
        }
        if let (Some(from), Some(to)) = (self.from, self.to)
            && from > to
        {
            return Err(AuditQueryError::Reversed { from, to });
        }
        Ok(())
    }

    /// The limit asked for, or the default.
    pub fn limit(&self) -> u32 {
        self.limit.unwrap_or(AUDIT_DEFAULT_LIMIT)
    }

    /// True when `entry` passes every filter but `limit` and `before`'s paging.
    pub fn matches(&self, entry: &AuditEntry) -> bool {
        self.before.is_none_or(|b| entry.id < b)
            && self.user.as_ref().is_none_or(|u| *u == entry.user)
            && self.action.as_ref().is_none_or(|a| *a == entry.action)
            && self.outcome.is_none_or(|o| o == entry.outcome)
            && self.from.is_none_or(|f| entry.timestamp_ms >= f)
            && self.to.is_none_or(|t| entry.timestamp_ms <= t)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn audit_queries_say_what_is_wrong() {
        assert_eq!(AuditQuery::default().validate(), Ok(()));
        for (query, says) in [
            (AuditQuery { limit: Some(0), ..AuditQuery::default() }, "from 1 to 1000"),
            (AuditQuery { limit: Some(1001), ..AuditQuery::default() }, "from 1 to 1000"),
            (AuditQuery { user: Some(String::new()), ..AuditQuery::default() }, "'user' must be 1 to 100"),
            (AuditQuery { action: Some("x".repeat(101)), ..AuditQuery::default() }, "'action' must be 1 to 100"),
            (AuditQuery { from: Some(9), to: Some(1), ..AuditQuery::default() }, "must not be after"),
        ] {
            let error = query.validate().unwrap_err().to_string();
            assert!(error.contains(says), "{query:?}: {error}");
        }
        let reversed = AuditQuery { from: Some(9), to: Some(1), ..AuditQuery::default() };
        assert_eq!(reversed.validate(), Err(AuditQueryError::Reversed { from: 9, to: 1 }));
        assert_eq!(reversed.validate().unwrap_err().to_string(), "'from' (9) must not be after 'to' (1)");
        let empty = AuditQuery { user: Some(String::new()), ..AuditQuery::default() };
        assert_eq!(
            empty.validate().unwrap_err().to_string(),
            "'user' must be 1 to 100 characters; leave it out to see every user"
        );
    }

    #[test]
    fn audit_outcomes_travel_as_their_names() {
        for outcome in AuditOutcome::ALL {
            assert_eq!(serde_json::to_string(&outcome).unwrap(), format!("\"{}\"", outcome.name()));
            assert_eq!(AuditOutcome::parse(outcome.name()), Some(outcome));
        }
        assert_eq!(AuditOutcome::parse("maybe"), None);
    }
}
