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
    /// "ok", "denied" or "failed".
    pub outcome: String,
    pub detail: String,
}
