//! `--web-config-file`: who may scrape `/metrics`, in the Prometheus exporter-toolkit's format (the file
//! node_exporter and dcgm-exporter take with `--web.config.file`), so a Prometheus scrapes gpudash with the
//! `basic_auth` it already uses for its exporters. Only `basic_auth_users` (bcrypt hashes) is read; the
//! TLS settings are gpudash's own flags, and a file that sets them is refused rather than half-obeyed.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

use base::sync::lock;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Successful checks remembered (a scrape every 15 s would otherwise pay bcrypt's ~0.1 s each time).
const REMEMBERED: usize = 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    basic_auth_users: HashMap<String, String>,
    tls_server_config: Option<serde_yaml_ng::Value>,
    http_server_config: Option<serde_yaml_ng::Value>,
}

/// Why a web config file was refused; start-up stops with it.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("cannot read the web config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error(
        "the web config file {path} is not what gpudash reads: {source}. It takes the exporter-toolkit's \
         `basic_auth_users:` map of user names to bcrypt hashes (`htpasswd -nBC 10 USER`)"
    )]
    Parse { path: String, source: serde_yaml_ng::Error },
    #[error(
        "the web config file {path} sets `{key}`, which gpudash does not take from it: serve TLS with --tls-cert and \
         --tls-key, and leave `{key}` out"
    )]
    Unsupported { path: String, key: &'static str },
    #[error("the web config file {path} lists no user under `basic_auth_users`: add one, or drop --web-config-file")]
    NoUsers { path: String },
    #[error(
        "the web config file {path} gives user '{user}' a password that is not a bcrypt hash ($2a$, $2b$ or $2y$ and \
         53 more characters): make one with `htpasswd -nBC 10 {user}`"
    )]
    NotBcrypt { path: String, user: String },
    #[error(
        "the web config file {path} has the user name '{user}': a user name here is 1–64 letters, digits or . _ - @"
    )]
    BadUser { path: String, user: String },
}

/// The scrapers' accounts.
#[derive(Debug)]
pub struct ScrapeUsers {
    /// User name → bcrypt hash.
    users: HashMap<String, String>,
    /// SHA-256 of "user\0password" for credentials bcrypt accepted before.
    verified: Mutex<HashSet<[u8; 32]>>,
    /// A hash of nothing anyone knows, at the users' cost, checked for an unknown user so that timing
    /// does not tell who exists.
    decoy: String,
}

impl ScrapeUsers {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self, WebConfigError> {
        let shown = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|source| WebConfigError::Read { path: shown.clone(), source })?;
        Self::parse(&text, &shown)
    }

    fn parse(text: &str, path: &str) -> Result<Self, WebConfigError> {
        let file: File =
            serde_yaml_ng::from_str(text).map_err(|source| WebConfigError::Parse { path: path.to_owned(), source })?;
        if file.tls_server_config.is_some() {
            return Err(WebConfigError::Unsupported { path: path.to_owned(), key: "tls_server_config" });
        }
        if file.http_server_config.is_some() {
            return Err(WebConfigError::Unsupported { path: path.to_owned(), key: "http_server_config" });
        }
        if file.basic_auth_users.is_empty() {
            return Err(WebConfigError::NoUsers { path: path.to_owned() });
        }
        for (user, hash) in &file.basic_auth_users {
            if super::valid_user(user).is_err() {
                return Err(WebConfigError::BadUser { path: path.to_owned(), user: user.clone() });
            }
            if hash.parse::<bcrypt::HashParts>().is_err() {
                return Err(WebConfigError::NotBcrypt { path: path.to_owned(), user: user.clone() });
            }
        }
        let cost = file
            .basic_auth_users
            .values()
            .filter_map(|h| h.parse::<bcrypt::HashParts>().ok())
            .map(|p| p.get_cost())
            .max();
        let decoy = bcrypt::hash(super::new_token(), cost.unwrap_or(bcrypt::DEFAULT_COST)).unwrap_or_default();
        Ok(Self { users: file.basic_auth_users, verified: Mutex::new(HashSet::new()), decoy })
    }

    /// How many accounts, for the start-up log and `gpudash doctor`.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// True when there are none (never, for a loaded file).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The password is `user`'s: [`ScrapeUsers::remembered`] or [`ScrapeUsers::verify`].
    pub fn check(&self, user: &str, password: &str) -> bool {
        self.remembered(user, password) || self.verify(user, password)
    }

    /// These credentials passed bcrypt before (cheap: no bcrypt).
    pub fn remembered(&self, user: &str, password: &str) -> bool {
        lock(&self.verified).contains(&remember_key(user, password))
    }

    /// The password is `user`'s, by bcrypt: blocks for its work (~0.1 s at cost 10); an unknown user costs
    /// the same as a wrong password. Credentials that pass are remembered.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        let key = remember_key(user, password);
        let hash = self.users.get(user).unwrap_or(&self.decoy);
        let ok = bcrypt::verify(password, hash).unwrap_or(false) && self.users.contains_key(user);
        if ok {
            let mut verified = lock(&self.verified);
            if verified.len() >= REMEMBERED {
                verified.clear();
            }
            verified.insert(key);
        }
        ok
    }
}

fn remember_key(user: &str, password: &str) -> [u8; 32] {
    Sha256::digest(format!("{user}\0{password}").as_bytes()).into()
}

/// The user and password of an `Authorization: Basic` header, if it is one and decodes.
pub fn basic_credentials(header: &str) -> Option<(String, String)> {
    use base64::Engine as _;
    let encoded = header.strip_prefix("Basic ").or_else(|| header.strip_prefix("basic "))?.trim();
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `htpasswd -nbBC 4 prometheus s3cret`'s hash, made with the bcrypt crate at the lowest cost.
    fn hash(password: &str) -> String {
        bcrypt::hash(password, 4).unwrap()
    }

    #[test]
    fn users_with_bcrypt_hashes_are_read_and_checked() {
        let text = format!("basic_auth_users:\n  prometheus: {}\n  grafana: '{}'\n", hash("s3cret"), hash("other"));
        let users = ScrapeUsers::parse(&text, "web.yml").unwrap();
        assert_eq!(users.len(), 2);
        assert!(users.check("prometheus", "s3cret"));
        assert!(users.check("prometheus", "s3cret"), "a second check comes from memory");
        assert!(!users.check("prometheus", "wrong"));
        assert!(!users.check("grafana", "s3cret"), "one user's password is not another's");
        assert!(!users.check("nobody", "s3cret"));
    }

    #[test]
    fn files_gpudash_cannot_obey_are_refused_with_what_to_do() {
        let refused = |text: &str| ScrapeUsers::parse(text, "web.yml").unwrap_err().to_string();
        assert!(refused("basic_auth_users:\n  prometheus: plain\n").contains("htpasswd -nBC 10 prometheus"));
        assert!(refused("basic_auth_users: {}\n").contains("lists no user"));
        assert!(refused("tls_server_config:\n  cert_file: a.pem\n").contains("--tls-cert"));
        assert!(refused("basic_auth_user:\n  a: b\n").contains("basic_auth_users"));
        assert!(refused(&format!("basic_auth_users:\n  'a b': {}\n", hash("x"))).contains("'a b'"));
        assert!(refused("[").contains("not what gpudash reads"));
    }

    #[test]
    fn basic_headers_decode() {
        assert_eq!(basic_credentials("Basic cHJvbWV0aGV1czpzM2NyZXQ="), Some(("prometheus".into(), "s3cret".into())));
        assert_eq!(basic_credentials("Basic cHJvbTphOmI="), Some(("prom".into(), "a:b".into())), "':' in a password");
        assert_eq!(basic_credentials("Bearer abc"), None);
        assert_eq!(basic_credentials("Basic !!!"), None);
    }
}
