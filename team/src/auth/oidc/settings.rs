//! The `--oidc-*` settings, as the command line gives them, and the checks of each value.

use std::path::PathBuf;

use super::CALLBACK_PATH;
use crate::auth::groups::GroupRoles;
use crate::auth::names::UserMap;

/// The `--oidc-*` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// `--oidc-issuer`: the provider's issuer URL (its discovery document is under it).
    pub issuer: String,
    pub client_id: String,
    /// `--oidc-client-secret-file`: the client secret, read at start and on SIGHUP; `None`: a public client.
    pub client_secret_file: Option<PathBuf>,
    /// `--oidc-redirect-url`: this dashboard's origin as people's browsers reach it, and [`CALLBACK_PATH`].
    pub redirect_url: url::Url,
    pub username_claim: String,
    pub groups_claim: String,
    /// Scopes asked for besides `openid`.
    pub scopes: Vec<String>,
    pub roles: GroupRoles,
    pub user_map: UserMap,
}

/// `--oidc-redirect-url`: an http(s) URL whose path ends with [`CALLBACK_PATH`].
pub fn parse_redirect_url(value: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(value.trim()).ok().filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
    match url {
        Some(url) if url.path().ends_with(CALLBACK_PATH) && url.query().is_none() && url.fragment().is_none() => {
            Ok(url)
        }
        _ => Err(format!(
            "'{value}' is not a redirect URL here: give the address people open gpudash at, followed by \
             {CALLBACK_PATH} (e.g. https://gpu1.example.org{CALLBACK_PATH}), and register the same URL with the provider"
        )),
    }
}

/// `--oidc-issuer`: an http(s) URL without query or fragment.
pub fn parse_issuer(value: &str) -> Result<String, String> {
    match url::Url::parse(value.trim()) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() && url.query().is_none() => {
            Ok(value.trim().to_owned())
        }
        _ => Err(format!(
            "'{value}' is not an issuer URL: give the provider's issuer as its discovery document names it, e.g. \
             https://login.example.org/realms/lab (Keycloak) or https://accounts.google.com"
        )),
    }
}

/// `--oidc-scope`: one scope token (RFC 6749: printable ASCII without spaces, quotes or backslashes).
pub fn parse_scope(value: &str) -> Result<String, String> {
    let scope = value.trim();
    if scope.is_empty() || scope.len() > 128 || !scope.chars().all(|c| c.is_ascii_graphic() && c != '"' && c != '\\') {
        return Err(format!("'{value}' is not a scope: give one word such as groups, email or profile"));
    }
    Ok(scope.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_are_checked() {
        assert!(parse_redirect_url("https://gpu1.example.org/auth/oidc/callback").is_ok());
        assert!(parse_redirect_url("https://gpu1.example.org/").unwrap_err().contains(CALLBACK_PATH));
        assert!(parse_redirect_url("ftp://x/auth/oidc/callback").is_err());
        assert!(parse_redirect_url("https://x/auth/oidc/callback?a=1").is_err());
        assert_eq!(
            parse_issuer(" https://login.example.org/realms/lab ").unwrap(),
            "https://login.example.org/realms/lab"
        );
        assert!(parse_issuer("login.example.org").unwrap_err().contains("not an issuer URL"));
        assert_eq!(parse_scope("groups").unwrap(), "groups");
        assert!(parse_scope("a b").is_err() && parse_scope("").is_err());
    }
}
