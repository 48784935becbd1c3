//! New tokens without a restart: on SIGHUP the auth file is read again and its tokens replace
//! those in force. The sessions (and open sockets) of a token removed or changed end; the
//! access policy and whether there are tokens at all stay as they were at start.

use super::{Auth, AuthConfig, AuthError, TokenEntry, lock};

/// What a reload changed, in words for the log and the audit entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokensChanged {
    /// Users who had no token before.
    pub added: Vec<String>,
    /// Users who have no token any more.
    pub removed: Vec<String>,
    /// Users whose token or role changed.
    pub replaced: Vec<String>,
    /// Browser sessions ended because their token was removed or replaced.
    pub sessions_ended: usize,
}

impl std::fmt::Display for TokensChanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        for (what, users) in [("added", &self.added), ("removed", &self.removed), ("replaced", &self.replaced)] {
            if !users.is_empty() {
                parts.push(format!("{what} {}", users.join(", ")));
            }
        }
        if parts.is_empty() {
            parts.push("no token changed".to_owned());
        }
        if self.sessions_ended > 0 {
            let s = if self.sessions_ended == 1 { "" } else { "s" };
            parts.push(format!("{} session{s} ended", self.sessions_ended));
        }
        f.write_str(&parts.join("; "))
    }
}

/// Why a reload was refused; the tokens in force stay.
#[derive(Debug, thiserror::Error)]
pub enum ReloadRefused {
    #[error(transparent)]
    File(#[from] AuthError),
    #[error(
        "'{0}' differs from the running server's; the access policy is read at start only: restart gpudash to change it"
    )]
    Policy(&'static str),
    #[error(
        "the auth file and GPUDASH_TOKENS leave no token, which would let anyone in as admin; restart gpudash to run without tokens"
    )]
    NoTokens,
    #[error(
        "this server started without tokens (its local user is admin without one); restart gpudash to start using them"
    )]
    FirstTokens,
}

impl Auth {
    /// Puts the tokens of `reloaded` in force: sessions opened with a token no longer there (or now
    /// of another user or role) end, and open WebSockets check theirs again. Refused, changing
    /// nothing, when the reload would change the policy (`viewers`, `metrics`) or whether there are
    /// tokens at all: both decide things fixed at start, such as the anonymous view of the stream.
    pub fn reload(&self, reloaded: AuthConfig) -> Result<TokensChanged, ReloadRefused> {
        if reloaded.open_viewing != self.config.open_viewing {
            return Err(ReloadRefused::Policy("viewers"));
        }
        if reloaded.open_metrics != self.config.open_metrics {
            return Err(ReloadRefused::Policy("metrics"));
        }
        match (self.enabled, reloaded.tokens.is_empty()) {
            // Behind an auth proxy or an OIDC provider people are still told apart without tokens.
            (true, true) if self.proxy.is_none() && self.oidc.is_none() => return Err(ReloadRefused::NoTokens),
            (false, false) => return Err(ReloadRefused::FirstTokens),
            _ => {}
        }
        let mut tokens = base::sync::write(&self.tokens);
        let mut changed = compare(&tokens, &reloaded.tokens);
        *tokens = reloaded.tokens;
        // Under the tokens' lock: a login checks its token and opens its session under it too.
        let mut sessions = lock(&self.sessions);
        let before = sessions.by_key.len();
        sessions.by_key.retain(|_, s| {
            // A sign-in through the OIDC provider holds no token: the tokens' reload leaves it be.
            s.token.is_none_or(|held| tokens.iter().any(|t| t.sha256 == held && t.user == s.user && t.role == s.role))
        });
        changed.sessions_ended = before - sessions.by_key.len();
        drop(sessions);
        drop(tokens);
        // Always: a socket opened with a bearer token checks that it is still in force.
        self.ended.send_modify(|generation| *generation += 1);
        Ok(changed)
    }
}

fn compare(before: &[TokenEntry], after: &[TokenEntry]) -> TokensChanged {
    let named = |list: &[TokenEntry], user: &str| list.iter().find(|t| t.user == user).cloned();
    let mut changed = TokensChanged::default();
    for entry in after {
        match named(before, &entry.user) {
            None => changed.added.push(entry.user.clone()),
            Some(old) if old != *entry => changed.replaced.push(entry.user.clone()),
            Some(_) => {}
        }
    }
    changed.removed = before.iter().filter(|t| named(after, &t.user).is_none()).map(|t| t.user.clone()).collect();
    changed
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::super::{Role, Unauthorized, hash_token};
    use super::*;

    fn entry(user: &str, role: Role, token: &str) -> TokenEntry {
        TokenEntry { user: user.into(), role, sha256: hash_token(token) }
    }

    fn config(tokens: Vec<TokenEntry>) -> AuthConfig {
        AuthConfig { tokens, ..AuthConfig::default() }
    }

    const HERE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn a_new_token_works_and_a_removed_one_ends_its_sessions() {
        let auth =
            Auth::new(config(vec![entry("root", Role::Admin, "root-secret"), entry("bo", Role::Viewer, "bo-1")]));
        assert!(auth.check_token("ana-secret").is_none());
        let (_, bo_cookie, _) = auth.login("bo-1", HERE).unwrap();
        let (_, root_cookie, _) = auth.login("root-secret", HERE).unwrap();
        let bo_socket = auth.identify(None, Some(&bo_cookie)).unwrap().1.unwrap();
        let bo_bearer = auth.identify(Some("bo-1"), None).unwrap().1.unwrap();
        let ends = auth.session_ends();

        let changed = auth
            .reload(config(vec![entry("root", Role::Admin, "root-secret"), entry("ana", Role::Operator, "ana-secret")]))
            .unwrap();
        assert_eq!(changed.to_string(), "added ana; removed bo; 1 session ended");
        assert_eq!(auth.check_token("ana-secret").unwrap().role, Role::Operator);
        assert_eq!(auth.identify(Some("bo-1"), None), Err(Unauthorized::BadToken));
        assert!(ends.has_changed().unwrap(), "open sockets are told");
        assert!(!auth.session_alive(&bo_socket) && !auth.session_alive(&bo_bearer));
        assert!(auth.identify(None, Some(&bo_cookie)).unwrap().0.anonymous, "bo's cookie opens nothing now");
        assert_eq!(auth.identify(None, Some(&root_cookie)).unwrap().0.user, "root", "root's session goes on");
    }

    #[test]
    fn a_sign_in_through_the_provider_outlives_a_reload_of_the_tokens() {
        let auth = Auth::new(config(vec![entry("root", Role::Admin, "root-secret")]));
        let bo = super::super::Identity { user: "bo".into(), role: Role::Operator, anonymous: false };
        let (cookie, _) = auth.provider_session(&bo);
        let changed = auth.reload(config(vec![entry("cy", Role::Viewer, "cy-secret")])).unwrap();
        assert_eq!(changed.sessions_ended, 0);
        let (who, session) = auth.identify(None, Some(&cookie)).unwrap();
        assert_eq!(who, bo);
        assert!(session.unwrap().from_provider, "its Log out goes through the provider");
        auth.logout(&cookie);
        assert!(auth.identify(None, Some(&cookie)).unwrap().0.anonymous, "logout ends it");
    }

    #[test]
    fn a_changed_role_or_token_ends_the_sessions_opened_with_the_old_one() {
        let auth = Auth::new(config(vec![entry("ana", Role::Admin, "old-token")]));
        let (_, cookie, _) = auth.login("old-token", HERE).unwrap();
        let changed = auth.reload(config(vec![entry("ana", Role::Viewer, "old-token")])).unwrap();
        assert_eq!(changed.to_string(), "replaced ana; 1 session ended");
        assert!(auth.identify(None, Some(&cookie)).unwrap().0.anonymous, "the admin session ended");
        assert_eq!(auth.check_token("old-token").unwrap().role, Role::Viewer);
        let unchanged = auth.reload(config(vec![entry("ana", Role::Viewer, "old-token")])).unwrap();
        assert_eq!(unchanged.to_string(), "no token changed");
    }

    #[test]
    fn a_reload_that_would_change_the_policy_or_empty_the_tokens_changes_nothing() {
        let ana = || entry("ana", Role::Operator, "ana-secret");
        let auth = Auth::new(config(vec![ana()]));
        let (_, cookie, _) = auth.login("ana-secret", HERE).unwrap();
        let closed = AuthConfig { open_viewing: false, ..config(vec![entry("bo", Role::Viewer, "bo-1")]) };
        for (reloaded, says) in [
            (closed, "'viewers' differs"),
            (AuthConfig { open_metrics: false, ..config(vec![ana()]) }, "'metrics' differs"),
            (config(Vec::new()), "leave no token"),
        ] {
            let refused = auth.reload(reloaded).unwrap_err().to_string();
            assert!(refused.contains(says) && refused.contains("restart gpudash"), "{refused}");
        }
        assert!(auth.check_token("ana-secret").is_some() && auth.check_token("bo-1").is_none());
        assert_eq!(auth.identify(None, Some(&cookie)).unwrap().0.user, "ana");
        let tokenless = Auth::new(AuthConfig::default());
        let refused = tokenless.reload(config(vec![ana()])).unwrap_err();
        assert!(matches!(refused, ReloadRefused::FirstTokens), "{refused}");
        assert!(!tokenless.enabled());
    }
}
