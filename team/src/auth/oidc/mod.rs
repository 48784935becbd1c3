//! Sign-in with an OpenID Connect provider (Keycloak, authentik, Dex, Entra ID, Okta, Google): the
//! authorization code flow with PKCE (S256), a `state` bound to the browser and a nonce in the ID token.
//! The `openidconnect` crate does discovery, the code exchange and the ID token's checks (signature by
//! the provider's published keys, issuer, audience, expiry, nonce); this module adds what gpudash needs
//! on top: the user name and groups from configurable claims (the ID token's, else UserInfo's), roles
//! by `GroupRoles`, owner names by `UserMap`, and a reload (SIGHUP) of the provider and the secret.

mod claims;
mod sealed;
mod settings;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use base::clock::Clock;
use openidconnect::core::{CoreClient, CoreResponseType};
use openidconnect::{
    AuthenticationFlow, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet,
    EndpointSet, IssuerUrl, Nonce, OAuth2TokenResponse as _, PkceCodeChallenge, PkceCodeVerifier,
    ProviderMetadataWithLogout, RedirectUrl, Scope,
};

pub use claims::parse_claim;
pub use sealed::Pending;
use sealed::Sealer;
pub use settings::{OidcConfig, parse_issuer, parse_redirect_url, parse_scope};

use super::{Identity, valid_user};

/// How long someone has to sign in at the provider (the browser's state cookie lasts as long).
pub const PENDING_SECONDS: u64 = 600;
/// The path that starts a sign-in (`?next=/path` for where to go afterwards).
pub const LOGIN_PATH: &str = "/auth/oidc/login";
/// The default `--oidc-username-claim`.
pub const DEFAULT_USERNAME_CLAIM: &str = "preferred_username";
/// The default `--oidc-groups-claim`.
pub const DEFAULT_GROUPS_CLAIM: &str = "groups";
/// The path the provider sends people back to; `--oidc-redirect-url` is an origin and this path.
pub const CALLBACK_PATH: &str = "/auth/oidc/callback";
/// How long the provider has to answer discovery, the code exchange or UserInfo.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);
/// An ID token issued further in the future than this is refused (the two clocks disagree too much).
pub const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// Why the provider could not be used; start-up stops with it, a reload keeps the one in force.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("cannot read the OIDC client secret {path}: {source}")]
    Secret { path: String, source: std::io::Error },
    #[error("the OIDC client secret file {0} is empty (or longer than 4 KiB): put the client secret in it, alone")]
    BadSecret(String),
    #[error(
        "cannot use the OIDC provider {issuer}: {reason}. Check --oidc-issuer (its {issuer}/.well-known/openid-configuration \
         must answer, and name the same issuer) and that this machine reaches it"
    )]
    Discovery { issuer: String, reason: String },
    #[error("--oidc-redirect-url {0} is not a URL the OIDC library takes")]
    Redirect(String),
}

/// Why a sign-in through the provider was refused; each is shown on the page and audited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidcRefused {
    #[error("this sign-in expired, was already used, or was started elsewhere; start again")]
    Unknown,
    #[error("the identity provider refused the sign-in: {0}")]
    Provider(String),
    #[error("the identity provider could not be reached to finish the sign-in: {0}")]
    Unreachable(String),
    #[error("the identity provider's ID token was refused: {0}")]
    IdToken(String),
    #[error(
        "the identity provider named no user in the '{claim}' claim (ID token or UserInfo); set --oidc-username-claim \
         to a claim it sends, or have it send this one"
    )]
    NoUser { claim: String },
    #[error(
        "the identity provider has not verified the e-mail address '{0}' (email_verified is not true), so it names nobody"
    )]
    Unverified(String),
    #[error(
        "the identity provider named the user '{0}': a user name here is 1–64 letters, digits or . _ - @ (map it with --user-map)"
    )]
    BadUser(String),
    #[error(
        "'{user}' is in none of the groups that give a role here ({rule}) and --default-role none refuses everyone \
         else; their groups: {groups}"
    )]
    NoRole { user: String, rule: String, groups: String },
}

/// Someone the provider signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    pub identity: Identity,
    /// The name the provider gave, before `--user-map`.
    pub signed_in_as: String,
    pub groups: Vec<String>,
    /// The page to open now.
    pub next: String,
}

/// A sign-in to start: send the browser to `url`, with `cookie` as its state cookie.
#[derive(Debug, Clone)]
pub struct Begun {
    pub url: String,
    pub cookie: String,
}

type Client =
    CoreClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointMaybeSet, EndpointMaybeSet>;

/// What discovery and the secret file gave.
struct Provider {
    client: Client,
    userinfo: Option<url::Url>,
    end_session: Option<url::Url>,
}

/// The OIDC sign-in of one running server.
pub struct Oidc {
    config: OidcConfig,
    provider: RwLock<Arc<Provider>>,
    /// Seals what a sign-in under way needs into the browser's state cookie: the server holds nothing
    /// per sign-in, so no flood of starts can push anyone's out.
    sealer: Sealer,
    http: reqwest::Client,
    clock: Clock,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc").field("issuer", &self.config.issuer).finish_non_exhaustive()
    }
}

/// The HTTP client for the provider: no redirects followed (discovery and tokens come from where the
/// settings say), a timeout, the system's CA roots.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .user_agent(concat!("gpudash/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .timeout(PROVIDER_TIMEOUT)
        .build()
}

impl Oidc {
    /// Reads the secret and the provider's discovery document (and its keys): any failure stops start-up.
    pub async fn discover(config: OidcConfig, clock: Clock) -> Result<Self, OidcError> {
        let http =
            http_client().map_err(|e| OidcError::Discovery { issuer: config.issuer.clone(), reason: e.to_string() })?;
        let provider = provider(&config, &http).await?;
        Ok(Self { config, provider: RwLock::new(Arc::new(provider)), sealer: Sealer::new(), http, clock })
    }

    /// Reads the provider's discovery document, its keys and the secret file again (SIGHUP, or keys the
    /// provider rotated); on failure the provider in force stays. Sessions are not touched.
    pub async fn reload(&self) -> Result<(), OidcError> {
        let fresh = provider(&self.config, &self.http).await?;
        *base::sync::write(&self.provider) = Arc::new(fresh);
        Ok(())
    }

    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    /// The provider as the page names it: its issuer's host.
    pub fn provider_name(&self) -> String {
        url::Url::parse(&self.config.issuer).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default()
    }

    /// Starts a sign-in that ends on `next` (a path here): where to send the browser, and the sealed
    /// cookie value that binds the sign-in to it.
    pub fn begin(&self, next: &str) -> Begun {
        let provider = self.current();
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let scopes = self.config.scopes.iter().map(|s| Scope::new(s.clone()));
        let (url, state, nonce) = provider
            .client
            .authorize_url(
                AuthenticationFlow::<CoreResponseType>::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scopes(scopes)
            .set_pkce_challenge(challenge)
            .url();
        let pending = Pending {
            state: state.secret().clone(),
            verifier: verifier.secret().clone(),
            nonce: nonce.secret().clone(),
            next: next.to_owned(),
            started_ms: self.clock.now_ms(),
        };
        Begun { url: url.to_string(), cookie: self.sealer.seal(&pending) }
    }

    /// The sign-in a browser's state cookie holds, if it is one of ours, still young, and the provider
    /// sent back its `state` (anything else: [`OidcRefused::Unknown`]).
    pub fn bound(&self, cookie: Option<&str>, state: Option<&str>) -> Result<Pending, OidcRefused> {
        let pending = self.sealer.open(cookie.ok_or(OidcRefused::Unknown)?).ok_or(OidcRefused::Unknown)?;
        let same =
            state.is_some_and(|s| bool::from(subtle::ConstantTimeEq::ct_eq(s.as_bytes(), pending.state.as_bytes())));
        let age_ms = self.clock.now_ms().saturating_sub(pending.started_ms);
        if !same || age_ms > PENDING_SECONDS * 1000 {
            return Err(OidcRefused::Unknown);
        }
        Ok(pending)
    }

    /// Finishes the sign-in `pending` (from [`Oidc::bound`]): trades `code` for tokens, checks the ID
    /// token, and names the user and their role.
    pub async fn finish(&self, pending: Pending, code: &str) -> Result<SignedIn, OidcRefused> {
        let mut provider = self.current();
        let exchange = provider
            .client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| OidcRefused::Provider(format!("its discovery document names no token endpoint ({e})")))?;
        let tokens = exchange
            .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(token_error)?;
        let id_token = tokens.extra_fields().id_token().ok_or_else(|| {
            OidcRefused::IdToken(
                "the token answer holds no ID token (is `openid` among the client's scopes?)".to_owned(),
            )
        })?;
        let nonce = Nonce::new(pending.nonce.clone());
        let mut checked = self.check_id_token(&provider, id_token, &nonce);
        if matches!(
            checked,
            Err(openidconnect::ClaimsVerificationError::SignatureVerification(
                openidconnect::SignatureVerificationError::NoMatchingKey,
            ))
        ) {
            // The provider may have rotated its keys since discovery: read them once more and check again.
            match self.reload().await {
                Ok(()) => {
                    tracing::info!(
                        "OIDC: an ID token named a key not seen at discovery; the provider's keys were read again"
                    );
                    provider = self.current();
                    checked = self.check_id_token(&provider, id_token, &nonce);
                }
                Err(e) => tracing::warn!("OIDC: reading the provider's keys again failed: {e}"),
            }
        }
        let subject = checked.map_err(|e| OidcRefused::IdToken(id_token_error(&e)))?;
        let mut found = claims::payload(&id_token.to_string()).unwrap_or_default();
        let user_claim = &self.config.username_claim;
        let groups_claim = &self.config.groups_claim;
        if (claims::user(&found, user_claim).is_none() || claims::groups(&found, groups_claim).is_none())
            && let Some(endpoint) = &provider.userinfo
        {
            let more = self.userinfo(endpoint, tokens.access_token().secret(), &subject).await?;
            for (name, value) in more {
                found.entry(name).or_insert(value);
            }
        }
        let user = claims::user(&found, user_claim).ok_or_else(|| OidcRefused::NoUser { claim: user_claim.clone() })?;
        // An address the provider has not verified names nobody (anyone may type one at many providers).
        if user_claim == "email" && found.get("email_verified").and_then(serde_json::Value::as_bool) != Some(true) {
            return Err(OidcRefused::Unverified(user));
        }
        if valid_user(&user).is_err() && self.config.user_map.owner(&user) == user {
            return Err(OidcRefused::BadUser(user.chars().take(80).collect()));
        }
        let groups = claims::groups(&found, groups_claim).unwrap_or_default();
        let names: Vec<&str> = groups.iter().map(String::as_str).collect();
        let Some(role) = self.config.roles.role(&names) else {
            let listed = &names[..names.len().min(20)];
            return Err(OidcRefused::NoRole {
                user,
                rule: self.config.roles.describe(),
                groups: if listed.is_empty() { "none".to_owned() } else { listed.join(", ") },
            });
        };
        let owner = self.config.user_map.owner(&user).to_owned();
        Ok(SignedIn {
            identity: Identity { user: owner, role, anonymous: false },
            signed_in_as: user,
            groups: groups.into_iter().take(50).collect(),
            next: pending.next,
        })
    }

    /// Where "Log out" sends the browser after gpudash's own session ended: the provider's end-session
    /// endpoint (RP-initiated logout) with the way back to `back`, or `None` when it has none.
    pub fn end_session_url(&self, back: &str) -> Option<String> {
        let mut url = self.current().end_session.clone()?;
        url.query_pairs_mut()
            .append_pair("client_id", &self.config.client_id)
            .append_pair("post_logout_redirect_uri", back);
        Some(url.to_string())
    }

    fn current(&self) -> Arc<Provider> {
        base::sync::read(&self.provider).clone()
    }

    /// The ID token's signature and claims, as OpenID Connect Core §3.1.3.7 lists them; its subject.
    fn check_id_token(
        &self,
        provider: &Provider,
        id_token: &openidconnect::core::CoreIdToken,
        nonce: &Nonce,
    ) -> Result<String, openidconnect::ClaimsVerificationError> {
        let now_ms = self.clock.now_ms();
        let now = now_ms / 1000;
        let at = chrono::DateTime::from_timestamp_millis(i64::try_from(now_ms).unwrap_or(i64::MAX)).unwrap_or_default();
        // Expiry and issue time judged on one clock, the Oidc's.
        let verifier = provider.client.id_token_verifier().set_time_fn(move || at).set_issue_time_verifier_fn(move |issued| {
            let ahead = issued.timestamp().saturating_sub(i64::try_from(now).unwrap_or(i64::MAX));
            if ahead > CLOCK_SKEW.as_secs() as i64 {
                return Err(format!(
                    "it was issued {ahead} s in the future: this machine's clock and the provider's disagree (run gpudash doctor)"
                ));
            }
            Ok(())
        });
        id_token.claims(&verifier, nonce).map(|claims| claims.subject().to_string())
    }

    /// The UserInfo answer (a JSON object) for the access token; its `sub` must be the ID token's.
    async fn userinfo(
        &self,
        endpoint: &url::Url,
        access_token: &str,
        subject: &str,
    ) -> Result<serde_json::Map<String, serde_json::Value>, OidcRefused> {
        let unreachable = |e: reqwest::Error| OidcRefused::Unreachable(format!("UserInfo: {}", e.without_url()));
        let response = self.http.get(endpoint.clone()).bearer_auth(access_token).send().await.map_err(unreachable)?;
        if !response.status().is_success() {
            return Err(OidcRefused::Provider(format!("UserInfo answered HTTP {}", response.status())));
        }
        let claims: serde_json::Map<String, serde_json::Value> = response.json().await.map_err(|e| {
            OidcRefused::Provider(format!("UserInfo's answer is not a JSON object ({})", e.without_url()))
        })?;
        if claims.get("sub").and_then(|s| s.as_str()) != Some(subject) {
            return Err(OidcRefused::IdToken("UserInfo names another subject than the ID token".to_owned()));
        }
        Ok(claims)
    }
}

/// Discovery, the keys, and the secret file, as one provider.
async fn provider(config: &OidcConfig, http: &reqwest::Client) -> Result<Provider, OidcError> {
    let secret = match &config.client_secret_file {
        Some(path) => Some(read_secret(path)?),
        None => None,
    };
    let failed = |reason: String| OidcError::Discovery { issuer: config.issuer.clone(), reason };
    let issuer = IssuerUrl::new(config.issuer.clone()).map_err(|e| failed(e.to_string()))?;
    let metadata =
        ProviderMetadataWithLogout::discover_async(issuer, http).await.map_err(|e| failed(base::error::chain(&e)))?;
    let userinfo = metadata.userinfo_endpoint().map(|u| u.url().clone());
    let end_session = metadata.additional_metadata().end_session_endpoint.as_ref().map(|u| u.url().clone());
    let redirect = RedirectUrl::new(config.redirect_url.to_string())
        .map_err(|_| OidcError::Redirect(config.redirect_url.to_string()))?;
    let client = CoreClient::from_provider_metadata(metadata, ClientId::new(config.client_id.clone()), secret)
        .set_redirect_uri(redirect);
    Ok(Provider { client, userinfo, end_session })
}

fn read_secret(path: &std::path::Path) -> Result<ClientSecret, OidcError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| OidcError::Secret { path: shown.clone(), source })?;
    let secret = text.trim();
    if secret.is_empty() || secret.len() > 4096 {
        return Err(OidcError::BadSecret(shown));
    }
    Ok(ClientSecret::new(secret.to_owned()))
}

fn token_error<E: std::error::Error + 'static>(
    error: openidconnect::RequestTokenError<
        E,
        openidconnect::StandardErrorResponse<openidconnect::core::CoreErrorResponseType>,
    >,
) -> OidcRefused {
    match error {
        openidconnect::RequestTokenError::ServerResponse(answer) => {
            let described = answer.error_description().map(|d| format!(" ({d})")).unwrap_or_default();
            OidcRefused::Provider(format!("the token endpoint answered {}{described}", answer.error()))
        }
        openidconnect::RequestTokenError::Request(e) => OidcRefused::Unreachable(base::error::chain(&e)),
        other => OidcRefused::Provider(format!("the token endpoint's answer: {}", base::error::chain(&other))),
    }
}

fn id_token_error(error: &openidconnect::ClaimsVerificationError) -> String {
    use openidconnect::ClaimsVerificationError as E;
    match error {
        E::SignatureVerification(cause) => format!("its signature does not verify with the provider's keys ({cause})"),
        E::Expired(why) => format!("expired or not yet valid: {why}"),
        E::InvalidAudience(why) => format!("it was not issued to this client (--oidc-client-id): {why}"),
        E::InvalidIssuer(why) => format!("it was issued by another issuer than --oidc-issuer: {why}"),
        E::InvalidNonce(why) => format!("its nonce is not this sign-in's: {why}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_file_must_hold_a_secret() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "  \n").unwrap();
        assert!(matches!(read_secret(file.path()), Err(OidcError::BadSecret(_))));
        std::fs::write(file.path(), "s3cret\n").unwrap();
        assert_eq!(read_secret(file.path()).unwrap().secret(), "s3cret");
        assert!(
            read_secret(std::path::Path::new("/nonexistent/secret")).unwrap_err().to_string().contains("cannot read")
        );
    }
}
