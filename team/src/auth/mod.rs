//! Who is asking: roles, tokens (kept only as SHA-256 hashes, compared in
//! constant time, replaced on SIGHUP by [`Auth::reload`]), browser sessions, and the
//! policy for anonymous access.

mod append;
pub mod groups;
pub mod names;
pub mod oidc;
pub mod proxy;
mod reload;
mod tokens;
pub mod web_config;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use append::{AddRefused, Added, NEW_FILE_MODE, add_token};
use base::clock::Clock;
use base::rate::{self, KeyedLimiter};
use base::sync::lock;
pub use groups::GroupRoles;
pub use proxy::{ProxyAuth, ProxyConfig, ProxyRefused, ProxyUser};
pub use reload::{ReloadRefused, TokensChanged};
pub use shared::auth::Role;
pub use tokens::{
    ADMIN_SESSION_LIFETIME, AuthConfig, AuthError, BadUserName, SESSION_LIFETIME, TokenEntry, file_entry, hash_token,
    hex as tokens_hex, new_token, valid_user,
};
pub use web_config::{ScrapeUsers, WebConfigError};

/// Failed token attempts (logins or Bearer headers) from one address in [`FAILURES_PER`] before
/// its further wrong tokens are answered 429 (`base::rate`: ten at once, then one every six
/// seconds). A correct token always works.
const FAILURES_ALLOWED: u32 = 10;
const FAILURES_PER: Duration = Duration::from_secs(60);
/// Addresses whose failures are tracked at once; past that, a new address's wrong token is
/// refused without being counted.
const FAILURES_TRACKED: usize = 10_000;
/// Sessions held at once; a login past that ends the session closest to expiry.
const MAX_SESSIONS: usize = 100_000;

/// The OS user gpudash runs as, by name (its uid where the name cannot be read): who every caller is on a
/// server without tokens, the single local user. Read once.
pub fn local_user_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        uzers::get_current_username()
            .map_or_else(|| uzers::get_current_uid().to_string(), |name| name.to_string_lossy().into_owned())
    })
}

/// The caller of a request, as the server trusts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// A token's user name; on a server without tokens the single local user's, the OS user gpudash runs
    /// as ([`local_user_name`]), so the Lab, silences, bookings and the audit log name one person alike;
    /// "anonymous" for a visitor without a token where tokens exist.
    pub user: String,
    pub role: Role,
    /// True when no token or session identified the caller.
    pub anonymous: bool,
}

impl Identity {
    /// The caller's role allows `needed`, or why not (the web layer answers 403).
    pub fn require(&self, needed: Role, action: &str) -> Result<(), Forbidden> {
        if self.role >= needed {
            return Ok(());
        }
        Err(Forbidden {
            action: action.to_owned(),
            needed,
            who: if self.anonymous { "an anonymous visitor".to_owned() } else { format!("'{}'", self.user) },
            has: self.role,
        })
    }
}

/// A caller's role is below what an action takes.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{action} needs the {} role; {who} has {}", needed.name(), has.name())]
pub struct Forbidden {
    /// What was refused, e.g. "running an experiment".
    pub action: String,
    pub needed: Role,
    /// The caller as the message names them: "'ana'" or "an anonymous visitor".
    pub who: String,
    pub has: Role,
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

/// Why a token was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    #[error("invalid token")]
    Invalid,
    #[error("too many wrong tokens from your address; wait {0} s (a correct token is still accepted)")]
    Throttled(u64),
}

struct Session {
    user: String,
    role: Role,
    /// The SHA-256 of the token it was opened with: the session ends when a reload drops that token.
    /// `None` for a sign-in through the OIDC provider, which a reload of the tokens leaves alone.
    token: Option<[u8; 32]>,
    expires: Instant,
}

/// A browser session, or a bearer token, as a request presents it: the key to check it again
/// later (an open WebSocket closes when its session ends or its token is removed) and when it expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRef {
    /// The SHA-256 of the session id, or of the token when `bearer`.
    key: [u8; 32],
    bearer: bool,
    /// Opened by a sign-in through the OIDC provider: "Log out" ends the provider's session too.
    pub from_provider: bool,
    pub expires: Instant,
}

/// How long a socket opened with a bearer token may stay open: as long as the token is in force.
const BEARER_LIFETIME: Duration = Duration::from_secs(86_400 * 365 * 30);

/// Tokens, sessions and the anonymous policy of one running server.
pub struct Auth {
    /// The access policy, as read at start (its `tokens` are moved to `tokens`).
    config: AuthConfig,
    /// The tokens in force: those of start-up until a reload replaces them.
    tokens: RwLock<Vec<TokenEntry>>,
    /// Tokens were configured at start, or a trusted auth proxy signs people in; a reload never changes
    /// this (see [`Auth::reload`]).
    enabled: bool,
    /// `--auth-proxy-header`: a trusted proxy names the signed-in user.
    proxy: Option<ProxyAuth>,
    /// `--oidc-issuer`: people sign in with the team's identity provider.
    oidc: Option<std::sync::Arc<oidc::Oidc>>,
    /// `--web-config-file`: the scrapers' accounts; `/metrics` then needs them (or a token).
    scrapers: RwLock<Option<std::sync::Arc<ScrapeUsers>>>,
    /// `--metrics-client-ca`: scrapers present a client certificate; `/metrics` then needs one (or credentials).
    client_certificates: bool,
    /// Keyed by the SHA-256 of the session id, so memory never holds a usable cookie.
    sessions: Mutex<Sessions>,
    /// Wrong tokens per address.
    failures: KeyedLimiter<IpAddr>,
    /// Sessions' and bearer sockets' expiry, and the failures' limiter.
    clock: Clock,
    /// Bumped whenever a session ends early (logout, a token removed), so open WebSockets re-check theirs.
    ended: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct Sessions {
    by_key: HashMap<[u8; 32], Session>,
    /// Expired sessions are swept when the map grows past this, so a login costs O(1) amortized.
    sweep_at: usize,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("tokens", &read(&self.tokens).len()).finish_non_exhaustive()
    }
}

impl Auth {
    pub fn new(config: AuthConfig) -> Self {
        Self::with_clock(config, Clock::system())
    }

    /// [`Auth::new`] on `clock` (sessions expire and wrong tokens are limited by it).
    pub fn with_clock(mut config: AuthConfig, clock: Clock) -> Self {
        let tokens = std::mem::take(&mut config.tokens);
        Self {
            config,
            enabled: !tokens.is_empty(),
            tokens: RwLock::new(tokens),
            proxy: None,
            oidc: None,
            scrapers: RwLock::new(None),
            client_certificates: false,
            sessions: Mutex::new(Sessions { by_key: HashMap::new(), sweep_at: 1024 }),
            failures: KeyedLimiter::new(FAILURES_ALLOWED, FAILURES_PER, FAILURES_TRACKED, &clock),
            clock,
            ended: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Signs people in from a trusted auth proxy's headers too (`--auth-proxy-header`): access is then
    /// controlled as with tokens (anonymous visitors get what the policy gives them), tokens or not.
    #[must_use]
    pub fn with_proxy(mut self, proxy: Option<ProxyConfig>) -> Self {
        if let Some(config) = proxy {
            self.proxy = Some(ProxyAuth::new(config, self.clock.clone()));
            self.enabled = true;
        }
        self
    }

    /// Signs people in through an OpenID Connect provider too (`--oidc-issuer`): access is then controlled
    /// as with tokens, tokens or not.
    #[must_use]
    pub fn with_oidc(mut self, oidc: Option<std::sync::Arc<oidc::Oidc>>) -> Self {
        if oidc.is_some() {
            self.enabled = true;
        }
        self.oidc = oidc;
        self
    }

    /// The OIDC sign-in, where one is configured.
    pub fn oidc(&self) -> Option<&std::sync::Arc<oidc::Oidc>> {
        self.oidc.as_ref()
    }

    /// `/metrics` takes Prometheus's `basic_auth` from these accounts (`--web-config-file`), and is then
    /// closed to anyone without them or a token, whatever the auth file's `metrics` says.
    #[must_use]
    pub fn with_scrapers(self, scrapers: Option<std::sync::Arc<ScrapeUsers>>) -> Self {
        *base::sync::write(&self.scrapers) = scrapers;
        self
    }

    /// Puts the accounts of a re-read `--web-config-file` in force (SIGHUP); a server started without
    /// the file keeps `/metrics` as it was.
    pub fn reload_scrapers(&self, scrapers: ScrapeUsers) -> Result<(), ReloadRefused> {
        let mut current = base::sync::write(&self.scrapers);
        if current.is_none() {
            return Err(ReloadRefused::Policy("web config"));
        }
        *current = Some(std::sync::Arc::new(scrapers));
        Ok(())
    }

    /// `/metrics` lets in a connection whose client certificate `--metrics-client-ca` verified, and is then
    /// closed to anyone without one (or an account or a token), whatever the auth file's `metrics` says.
    #[must_use]
    pub fn with_client_certificates(mut self, on: bool) -> Self {
        self.client_certificates = on;
        self
    }

    /// `--metrics-client-ca` is on.
    pub fn client_certificates(&self) -> bool {
        self.client_certificates
    }

    /// The scrapers' accounts in force, where `--web-config-file` gives them.
    pub fn scrapers(&self) -> Option<std::sync::Arc<ScrapeUsers>> {
        read(&self.scrapers).clone()
    }

    /// A secret that is not remembered as good may be checked for `from` (a scraper's password costs
    /// bcrypt's work): at most [`FAILURES_ALLOWED`] at once, then one every six seconds, per address.
    pub fn may_check_secret(&self, from: IpAddr) -> Result<(), Refused> {
        match self.failures.check(from) {
            Ok(()) => Ok(()),
            // Too many addresses at once (a flood from a whole range): no bcrypt for a newcomer either.
            Err(rate::Refused::Full) => Err(Refused::Throttled((FAILURES_PER / FAILURES_ALLOWED).as_secs())),
            Err(rate::Refused::Wait(wait)) => Err(Refused::Throttled(wait.as_secs_f64().ceil().max(1.0) as u64)),
        }
    }

    /// The trusted auth proxy's sign-in, where one is configured.
    pub fn proxy(&self) -> Option<&ProxyAuth> {
        self.proxy.as_ref()
    }

    /// True when callers are told apart: tokens are configured or an auth proxy signs them in (otherwise
    /// every caller is the single local user).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// `/metrics` is open to scrapers without a token (never with `--web-config-file`'s accounts or
    /// `--metrics-client-ca`).
    pub fn open_metrics(&self) -> bool {
        self.config.open_metrics && read(&self.scrapers).is_none() && !self.client_certificates
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
        let user = if self.enabled() { "anonymous".to_owned() } else { local_user_name().to_owned() };
        Some(Identity { user, role, anonymous: true })
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
        find(&read(&self.tokens), &hash_token(token))
    }

    /// What a request with the bearer `token` holds: alive while the token is in force.
    pub fn bearer(&self, token: &str) -> SessionRef {
        SessionRef {
            key: hash_token(token),
            bearer: true,
            from_provider: false,
            expires: self.clock.now() + BEARER_LIFETIME,
        }
    }

    /// Who sent a request with these credentials, and the session it came with.
    pub fn identify(
        &self,
        bearer: Option<&str>,
        session: Option<&str>,
    ) -> Result<(Identity, Option<SessionRef>), Unauthorized> {
        if let Some(token) = bearer {
            return self.check_token(token).map(|who| (who, Some(self.bearer(token)))).ok_or(Unauthorized::BadToken);
        }
        if let Some(id) = session {
            let key: [u8; 32] = Sha256::digest(id.as_bytes()).into();
            let mut sessions = lock(&self.sessions);
            match sessions.by_key.get(&key) {
                Some(s) if s.expires > self.clock.now() => {
                    let who = Identity { user: s.user.clone(), role: s.role, anonymous: false };
                    let from_provider = s.token.is_none();
                    return Ok((who, Some(SessionRef { key, bearer: false, from_provider, expires: s.expires })));
                }
                Some(_) => {
                    sessions.by_key.remove(&key);
                    return Err(Unauthorized::Expired);
                }
                // An unknown cookie (e.g. from before a restart) falls back to anonymous access if allowed.
                None => return self.anonymous().map(|who| (who, None)).ok_or(Unauthorized::Expired),
            }
        }
        self.anonymous().map(|who| (who, None)).ok_or(Unauthorized::Required)
    }

    /// Checks a token presented from `from`. A correct token is always accepted; wrong
    /// ones count against the address, and past [`FAILURES_ALLOWED`] in [`FAILURES_PER`] they
    /// are answered [`Refused::Throttled`] (tokens are 256 bits: this is about load, not guessing).
    pub fn check_token_from(&self, token: &str, from: IpAddr) -> Result<Identity, Refused> {
        self.check_among(&read(&self.tokens), token, from)
    }

    /// [`Auth::check_token_from`] against `tokens` (the caller holds them).
    fn check_among(&self, tokens: &[TokenEntry], token: &str, from: IpAddr) -> Result<Identity, Refused> {
        if let Some(identity) = find(tokens, &hash_token(token)) {
            return Ok(identity);
        }
        match self.failures.check(from) {
            Ok(()) | Err(rate::Refused::Full) => Err(Refused::Invalid),
            Err(rate::Refused::Wait(wait)) => Err(Refused::Throttled(wait.as_secs_f64().ceil().max(1.0) as u64)),
        }
    }

    /// Trades a token for a session id (the cookie value) that lasts `lifetime`, or says why not.
    pub fn login(&self, token: &str, from: IpAddr) -> Result<(Identity, String, Duration), Refused> {
        // Held until the session is in: a reload removing the token then ends this session too.
        let tokens = read(&self.tokens);
        let identity = self.check_among(&tokens, token, from)?;
        let (id, lifetime) = self.open_session(&identity, Some(hash_token(token)));
        Ok((identity, id, lifetime))
    }

    /// A session for someone the OIDC provider signed in: its id (the cookie value) and lifetime. It
    /// outlives reloads of the tokens and of the provider; logout or expiry end it.
    pub fn provider_session(&self, identity: &Identity) -> (String, Duration) {
        self.open_session(identity, None)
    }

    fn open_session(&self, identity: &Identity, token: Option<[u8; 32]>) -> (String, Duration) {
        let lifetime = self.config.session_lifetime(identity.role);
        let id = new_token();
        let key: [u8; 32] = Sha256::digest(id.as_bytes()).into();
        let mut sessions = lock(&self.sessions);
        let now = self.clock.now();
        if sessions.by_key.len() >= sessions.sweep_at {
            sessions.by_key.retain(|_, s| s.expires > now);
            if sessions.by_key.len() >= MAX_SESSIONS {
                let oldest = sessions.by_key.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k);
                if let Some(oldest) = oldest {
                    sessions.by_key.remove(&oldest);
                }
            }
            sessions.sweep_at = (2 * sessions.by_key.len()).clamp(1024, MAX_SESSIONS);
        }
        let session = Session { user: identity.user.clone(), role: identity.role, token, expires: now + lifetime };
        sessions.by_key.insert(key, session);
        (id, lifetime)
    }

    /// The session is still open (not logged out, not expired, its token not removed); for a
    /// bearer token, the token is still in force.
    pub fn session_alive(&self, session: &SessionRef) -> bool {
        if session.bearer {
            return find(&read(&self.tokens), &session.key).is_some();
        }
        session.expires > self.clock.now() && lock(&self.sessions).by_key.contains_key(&session.key)
    }

    /// Changes whenever a session is ended early; WebSockets watch it.
    pub fn session_ends(&self) -> tokio::sync::watch::Receiver<u64> {
        self.ended.subscribe()
    }

    /// Ends a session; unknown ids are ignored.
    pub fn logout(&self, session: &str) {
        let key: [u8; 32] = Sha256::digest(session.as_bytes()).into();
        if lock(&self.sessions).by_key.remove(&key).is_some() {
            self.ended.send_modify(|generation| *generation += 1);
        }
    }
}

/// The entry whose hash is `presented`, touching every entry so the time taken says nothing
/// about which (or whether one) matched.
fn find(tokens: &[TokenEntry], presented: &[u8; 32]) -> Option<Identity> {
    let mut found = None;
    for entry in tokens {
        if bool::from(subtle::ConstantTimeEq::ct_eq(&entry.sha256[..], &presented[..])) {
            found = Some(Identity { user: entry.user.clone(), role: entry.role, anonymous: false });
        }
    }
    found
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    base::sync::read(lock)
}

#[cfg(test)]
mod tests;
