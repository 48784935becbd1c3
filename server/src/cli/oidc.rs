//! The `--oidc-*` flags: sign-in with the team's OpenID Connect provider. Roles come from the same
//! `--admin-group`, `--operator-group` and `--default-role` as the auth proxy's.

use std::path::PathBuf;

use team::auth::oidc::{self, OidcConfig, parse_claim, parse_issuer, parse_redirect_url, parse_scope};

#[derive(clap::Args, Debug, Clone)]
pub struct OidcArgs {
    /// Sign people in with this OpenID Connect provider (its issuer URL, e.g. https://login.example.org/realms/lab):
    /// the page offers "Sign in with …", the authorization code flow with PKCE. Its discovery document must
    /// answer at start. Tokens still work for scripts and the PyTorch bridge.
    #[arg(long, env = "GPUDASH_OIDC_ISSUER", value_name = "URL", value_parser = parse_issuer,
          requires_all = ["oidc_client_id", "oidc_redirect_url"])]
    pub oidc_issuer: Option<String>,

    /// The client id gpudash is registered under at the provider.
    #[arg(long, env = "GPUDASH_OIDC_CLIENT_ID", value_name = "ID", requires = "oidc_issuer", value_parser = parse_client_id)]
    pub oidc_client_id: Option<String>,

    /// A file holding the client secret alone (re-read on SIGHUP); leave it out for a public client (PKCE only).
    #[arg(long, env = "GPUDASH_OIDC_CLIENT_SECRET_FILE", value_name = "FILE", requires = "oidc_issuer")]
    pub oidc_client_secret_file: Option<PathBuf>,

    /// Where the provider sends people back: the address people open gpudash at, followed by
    /// /auth/oidc/callback (register the same URL with the provider).
    #[arg(long, env = "GPUDASH_OIDC_REDIRECT_URL", value_name = "URL", requires = "oidc_issuer", value_parser = parse_redirect_url)]
    pub oidc_redirect_url: Option<url::Url>,

    /// The claim naming the user (ID token, else UserInfo); it must match the owner names gpudash shows
    /// (Unix, Slurm, pod labels), or be mapped to them with --user-map.
    #[arg(long, env = "GPUDASH_OIDC_USERNAME_CLAIM", value_name = "CLAIM", default_value = oidc::DEFAULT_USERNAME_CLAIM,
          requires = "oidc_issuer", value_parser = parse_claim)]
    pub oidc_username_claim: String,

    /// The claim listing the user's groups (an array, or names separated by ',' or '|'); a dotted name reads
    /// a nested claim, e.g. realm_access.roles.
    #[arg(long, env = "GPUDASH_OIDC_GROUPS_CLAIM", value_name = "CLAIM", default_value = oidc::DEFAULT_GROUPS_CLAIM,
          requires = "oidc_issuer", value_parser = parse_claim)]
    pub oidc_groups_claim: String,

    /// Scopes asked for besides openid. Repeatable; many providers need `groups` added for the groups claim.
    #[arg(long, env = "GPUDASH_OIDC_SCOPE", value_name = "SCOPE", value_delimiter = ',', default_value = "profile,email",
          requires = "oidc_issuer", value_parser = parse_scope)]
    pub oidc_scope: Vec<String>,
}

/// `--oidc-client-id`: 1–256 printable characters.
fn parse_client_id(value: &str) -> Result<String, String> {
    let id = value.trim();
    if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
        return Err(format!("'{value}' is not a client id: give the id the provider registered gpudash under"));
    }
    Ok(id.to_owned())
}

impl OidcArgs {
    /// The settings, where `--oidc-issuer` is given (clap makes the client id and redirect URL come with it).
    pub fn config(self, roles: &team::auth::GroupRoles) -> Option<OidcConfig> {
        Some(OidcConfig {
            issuer: self.oidc_issuer?,
            client_id: self.oidc_client_id?,
            client_secret_file: self.oidc_client_secret_file,
            redirect_url: self.oidc_redirect_url?,
            username_claim: self.oidc_username_claim,
            groups_claim: self.oidc_groups_claim,
            scopes: self.oidc_scope,
            roles: roles.clone(),
            user_map: team::auth::names::UserMap::default(),
        })
    }
}
