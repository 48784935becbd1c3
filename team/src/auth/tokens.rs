//! Where tokens come from: an auth file (TOML, hashes only) and the
//! `GPUDASH_TOKENS` environment variable (plain tokens, hashed on load).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use shared::auth::Role;

/// One accepted token: who it is and what they may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenEntry {
    pub user: String,
    pub role: Role,
    pub sha256: [u8; 32],
}

/// The access policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    pub tokens: Vec<TokenEntry>,
    /// Anyone may view without a token (when tokens exist).
    pub open_viewing: bool,
    /// `/metrics` is open to scrapers without a token.
    pub open_metrics: bool,
    /// How long a browser session of a viewer or operator lasts (`--session-lifetime`).
    pub session: Duration,
    /// How long an admin's browser session lasts (`--admin-session-lifetime`).
    pub admin_session: Duration,
}

/// Default browser session: a working day.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Default admin session: shorter, since an admin's cookie can cancel anyone's work and read the audit log.
pub const ADMIN_SESSION_LIFETIME: Duration = Duration::from_secs(2 * 3600);

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            tokens: Vec::new(),
            open_viewing: true,
            open_metrics: true,
            session: SESSION_LIFETIME,
            admin_session: ADMIN_SESSION_LIFETIME,
        }
    }
}

impl AuthConfig {
    /// How long a session of someone with `role` lasts.
    pub fn session_lifetime(&self, role: Role) -> Duration {
        if role == Role::Admin { self.admin_session } else { self.session }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read auth file '{path}': {source}")]
    Read { path: String, source: std::io::Error },
    #[error("auth file '{path}': {message}")]
    File { path: String, message: String },
    #[error("GPUDASH_TOKENS: {0}")]
    Env(EnvTokenError),
}

/// What is wrong with `GPUDASH_TOKENS` (or with the tokens all together).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvTokenError {
    #[error("each entry is user:role:token, entries separated by commas")]
    Shape,
    #[error(transparent)]
    User(#[from] BadUserName),
    #[error("role '{role}' of '{user}'; roles are viewer, operator, admin")]
    Role { user: String, role: String },
    #[error("the token of '{user}' is shorter than 16 characters; `gpudash token` makes a good one")]
    ShortToken { user: String },
    /// Two entries, from the file or the environment, for one user.
    #[error("user '{0}' has two tokens; give each user one")]
    TwoTokens(String),
}

/// The file format:
///
/// ```toml
/// viewers = "open"    # or "token": viewing needs a token too
/// metrics = "open"    # or "token": scrapers send a bearer token; left out, as `viewers`
///
/// [[token]]
/// user = "ana"
/// role = "operator"   # viewer | operator | admin
/// sha256 = "…"        # `gpudash token` prints a new token and this line
/// ```
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default = "open")]
    viewers: String,
    /// `None`: as `viewers`, so closing the page to strangers closes `/metrics` too.
    #[serde(default)]
    metrics: Option<String>,
    #[serde(default)]
    token: Vec<FileToken>,
}

fn open() -> String {
    "open".to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToken {
    user: String,
    role: String,
    sha256: String,
}

/// Whether an auth file can be changed only by root or by the user gpudash runs as (`me`): owned by
/// one of them and writable by no group and no other user. Whoever else could write it could give
/// themselves any role at the next reload. `Err` says what is wrong and how to fix it.
pub fn safe_file(metadata: &std::fs::Metadata, me: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let (uid, mode) = (metadata.uid(), metadata.mode() & 0o7777);
    if uid != 0 && uid != me {
        return Err(format!(
            "it belongs to uid {uid}, neither root nor the user gpudash runs as (uid {me}), who could give themselves \
             any role; make root its owner (chown root FILE)"
        ));
    }
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 { "every user" } else { "its group" };
        return Err(format!(
            "it is writable by {who} (mode {mode:04o}), who could add an admin token; make it writable by its owner \
             only (chmod go-w FILE)"
        ));
    }
    Ok(())
}

impl AuthConfig {
    /// Reads the auth file (if any) and adds `GPUDASH_TOKENS` entries (if any).
    pub fn load(file: Option<&Path>, env_tokens: Option<&str>) -> Result<Self, AuthError> {
        let mut config = match file {
            Some(path) => Self::from_file(path)?,
            None => Self::default(),
        };
        if let Some(spec) = env_tokens.filter(|s| !s.trim().is_empty()) {
            config.tokens.extend(parse_env(spec).map_err(AuthError::Env)?);
        }
        let mut users: Vec<&str> = config.tokens.iter().map(|t| t.user.as_str()).collect();
        users.sort_unstable();
        if let Some(w) = users.windows(2).find(|w| w[0] == w[1]) {
            return Err(AuthError::Env(EnvTokenError::TwoTokens(w[0].to_owned())));
        }
        Ok(config)
    }

    fn from_file(path: &Path) -> Result<Self, AuthError> {
        let shown = path.display().to_string();
        let read = |source| AuthError::Read { path: shown.clone(), source };
        // One open file, checked and read: a file swapped in between a check by path and a read by
        // path would be read unchecked.
        let mut file = std::fs::File::open(path).map_err(read)?;
        let metadata = file.metadata().map_err(read)?;
        safe_file(&metadata, rustix::process::geteuid().as_raw())
            .map_err(|message| AuthError::File { path: shown.clone(), message })?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut file, &mut text).map_err(read)?;
        Self::parse_file(&text, &shown)
    }

    /// The policy and tokens of an auth file's text; `shown` names the file in errors.
    pub fn parse_file(text: &str, shown: &str) -> Result<Self, AuthError> {
        let bad = |message: String| AuthError::File { path: shown.to_owned(), message };
        let file: File = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        let access = |name: &str, value: &str| match value {
            "open" => Ok(true),
            "token" => Ok(false),
            other => Err(bad(format!("'{name}' is '{other}'; it must be \"open\" or \"token\""))),
        };
        let tokens = file
            .token
            .into_iter()
            .map(|t| {
                let role = Role::parse(&t.role).ok_or_else(|| {
                    bad(format!("user '{}' has role '{}'; roles are viewer, operator, admin", t.user, t.role))
                })?;
                let sha256 = parse_hex(&t.sha256).ok_or_else(|| {
                    bad(format!("user '{}': sha256 must be 64 hex digits (run `gpudash token`)", t.user))
                })?;
                valid_user(&t.user).map_err(|e| bad(e.to_string()))?;
                Ok(TokenEntry { user: t.user, role, sha256 })
            })
            .collect::<Result<_, AuthError>>()?;
        Ok(Self {
            tokens,
            open_viewing: access("viewers", &file.viewers)?,
            open_metrics: access("metrics", file.metrics.as_deref().unwrap_or(&file.viewers))?,
            ..Self::default()
        })
    }
}

/// `user:role:token[,user:role:token…]`.
fn parse_env(spec: &str) -> Result<Vec<TokenEntry>, EnvTokenError> {
    spec.split(',')
        .map(|item| {
            let mut parts = item.trim().splitn(3, ':');
            let (Some(user), Some(role), Some(token)) = (parts.next(), parts.next(), parts.next()) else {
                return Err(EnvTokenError::Shape);
            };
            valid_user(user)?;
            let role = Role::parse(role)
                .ok_or_else(|| EnvTokenError::Role { user: user.to_owned(), role: role.to_owned() })?;
            if token.len() < 16 {
                return Err(EnvTokenError::ShortToken { user: user.to_owned() });
            }
            Ok(TokenEntry { user: user.to_owned(), role, sha256: hash_token(token) })
        })
        .collect()
}

/// A user name outside what tokens, sessions and the audit log accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("user name '{0}' must be 1–64 letters, digits or . _ - @")]
pub struct BadUserName(pub String);

/// Checks a user name against what tokens, sessions and the audit log accept.
pub fn valid_user(user: &str) -> Result<(), BadUserName> {
    if user.is_empty() || user.len() > 64 || !user.chars().all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c)) {
        return Err(BadUserName(user.to_owned()));
    }
    Ok(())
}

/// One `[[token]]` entry of the auth file, as `gpudash token` prints it and `gpudash token add`
/// appends it (the user is one [`valid_user`] accepts: nothing in it needs quoting).
pub fn file_entry(user: &str, role: Role, sha256: &[u8; 32]) -> String {
    format!("[[token]]\nuser = \"{user}\"\nrole = \"{}\"\nsha256 = \"{}\"\n", role.name(), hex(sha256))
}

/// SHA-256 of a token: what the server keeps and compares.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A fresh random token (256 bits, hex).
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random number generator is available");
    hex(&bytes)
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn reads_hashes_and_policy_from_the_file() {
        let hash = hex(&hash_token("a-long-enough-token"));
        let file =
            write(&format!("viewers = \"token\"\n[[token]]\nuser = \"ana\"\nrole = \"admin\"\nsha256 = \"{hash}\"\n"));
        let config = AuthConfig::load(Some(file.path()), Some("bo:viewer:0123456789abcdef0123")).unwrap();
        assert!(!config.open_viewing && !config.open_metrics, "metrics follow viewers unless told otherwise");
        assert_eq!(config.tokens.len(), 2);
        assert_eq!(config.tokens[0].sha256, hash_token("a-long-enough-token"));
        assert_eq!(config.tokens[1].role, Role::Viewer);
    }

    #[test]
    fn metrics_default_to_the_viewers_policy_and_can_differ() {
        let policy = |text: &str| {
            let config = AuthConfig::load(Some(write(text).path()), None).unwrap();
            (config.open_viewing, config.open_metrics)
        };
        assert_eq!(policy(""), (true, true));
        assert_eq!(policy("viewers = \"token\""), (false, false));
        assert_eq!(policy("viewers = \"token\"\nmetrics = \"open\""), (false, true));
        assert_eq!(policy("viewers = \"open\"\nmetrics = \"token\""), (true, false));
        let err = AuthConfig::load(Some(write("metrics = \"maybe\"").path()), None).unwrap_err().to_string();
        assert!(err.contains("'metrics' is 'maybe'"), "{err}");
    }

    #[test]
    fn bad_files_and_env_say_what_is_wrong() {
        for (text, expected) in [
            ("viewers = \"maybe\"", "must be \"open\" or \"token\""),
            ("[[token]]\nuser = \"a\"\nrole = \"god\"\nsha256 = \"00\"", "roles are viewer, operator, admin"),
            ("[[token]]\nuser = \"a\"\nrole = \"admin\"\nsha256 = \"xyz\"", "64 hex digits"),
            ("colour = 1", "unknown field"),
            ("[[token]\n", "expected"),
        ] {
            let file = write(text);
            let err = AuthConfig::load(Some(file.path()), None).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
        for (env, expected) in [
            ("ana", "user:role:token"),
            ("ana:boss:0123456789abcdef", "roles are"),
            ("ana:admin:short", "shorter than 16"),
            ("a b:admin:0123456789abcdef", "letters, digits"),
            ("ana:admin:0123456789abcdef,ana:viewer:0123456789abcdef", "two tokens"),
        ] {
            let err = AuthConfig::load(None, Some(env)).unwrap_err().to_string();
            assert!(err.contains(expected), "{env}: {err}");
        }
        let err = AuthConfig::load(Some(Path::new("/nonexistent/auth.toml")), None).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/auth.toml"), "{err}");
    }

    #[test]
    fn new_tokens_are_random_hex() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert_eq!(parse_hex(&a).map(|h| hex(&h)), Some(a));
    }

    #[test]
    fn bad_user_names_keep_their_message() {
        assert_eq!(valid_user("ana.b-c@x_1"), Ok(()));
        assert_eq!(
            valid_user("a b").unwrap_err().to_string(),
            "user name 'a b' must be 1–64 letters, digits or . _ - @"
        );
        assert_eq!(parse_env("a b:admin:0123456789abcdef"), Err(EnvTokenError::User(BadUserName("a b".into()))));
        let err = AuthConfig::load(None, Some("ana:admin:short")).unwrap_err().to_string();
        assert_eq!(
            err,
            "GPUDASH_TOKENS: the token of 'ana' is shorter than 16 characters; `gpudash token` makes a good one"
        );
    }
}
