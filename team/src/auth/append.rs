//! `gpudash token add`: a new token's entry appended to the auth file. The file is replaced
//! whole (a temporary file beside it with its mode and owner, synced, then renamed over it),
//! so a server re-reading it on SIGHUP never reads half an entry, and a crash leaves the old file.

use std::fs::{File, Metadata, OpenOptions, Permissions};
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use shared::auth::Role;

use super::tokens::{AuthConfig, AuthError, BadUserName, file_entry, hash_token, new_token, valid_user};

/// The mode of an auth file `gpudash token add` creates: only its owner may read it.
pub const NEW_FILE_MODE: u32 = 0o600;

/// Why no token was added; the auth file is as it was.
#[derive(Debug, thiserror::Error)]
pub enum AddRefused {
    #[error(transparent)]
    User(#[from] BadUserName),
    #[error("role '{0}'; roles are viewer, operator, admin")]
    Role(String),
    #[error(
        "'{user}' already has a token in '{path}'; to give them a new one, delete their [[token]] entry first (or pick another name)"
    )]
    Exists { user: String, path: String },
    #[error("{0}; correct it before adding a token")]
    BadFile(AuthError),
    #[error("cannot {doing} '{path}': {source}")]
    Io { doing: &'static str, path: String, source: std::io::Error },
}

impl AddRefused {
    /// The request was at fault (a name, a role), not the file or the disk: the CLI exits 2.
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::User(_) | Self::Role(_) | Self::Exists { .. })
    }
}

/// A token added to the auth file.
#[derive(Debug)]
pub struct Added {
    /// The token itself: shown once, stored nowhere.
    pub token: String,
    /// The file written (a link's target).
    pub path: PathBuf,
    /// There was no file: it was made, with [`NEW_FILE_MODE`].
    pub created: bool,
}

/// Appends a new random token for `user` with `role` to the auth file at `path` (made when missing),
/// unless the name or role is not one the server accepts or `user` already has a token there.
pub fn add_token(path: &Path, user: &str, role: &str) -> Result<Added, AddRefused> {
    valid_user(user)?;
    let role = Role::parse(role).ok_or_else(|| AddRefused::Role(role.to_owned()))?;
    let shown = path.display().to_string();
    let io = |doing: &'static str| {
        let path = shown.clone();
        move |source| AddRefused::Io { doing, path, source }
    };
    // A link (a mounted secret, a file kept elsewhere) stays a link: its target is replaced.
    let target = match std::fs::canonicalize(path) {
        Ok(target) => target,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => path.to_owned(),
        Err(e) => return Err(io("find")(e)),
    };
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    // Two `gpudash token add` at once would each keep only their own entry: one at a time.
    let lock = File::open(&dir).map_err(io("open the directory of"))?;
    lock.lock().map_err(io("lock the directory of"))?;
    let (mut text, old) = match std::fs::read_to_string(&target) {
        Ok(text) => {
            let metadata = std::fs::metadata(&target).map_err(io("read"))?;
            // A file others may change is refused, not written again with its mode kept.
            super::tokens::safe_file(&metadata, trusted_owner(&metadata, SERVICE_USER))
                .map_err(|message| AddRefused::BadFile(AuthError::File { path: shown.clone(), message }))?;
            (text, Some(metadata))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), None),
        Err(e) => return Err(io("read")(e)),
    };
    let present = AuthConfig::parse_file(&text, &shown).map_err(AddRefused::BadFile)?;
    if present.tokens.iter().any(|t| t.user == user) {
        return Err(AddRefused::Exists { user: user.to_owned(), path: shown.clone() });
    }
    let token = new_token();
    if !text.is_empty() {
        text.push_str(if text.ends_with('\n') { "\n" } else { "\n\n" });
    }
    text.push_str(&file_entry(user, role, &hash_token(&token)));
    replace(&target, &dir, &text, old.as_ref()).map_err(io("write"))?;
    Ok(Added { token, path: target, created: old.is_none() })
}

/// The owner besides root that `token add` accepts: the user it runs as, or when that is root, the
/// user named `gpudash` (the packaged service's and the image's), whose file the server reads.
fn trusted_owner(metadata: &Metadata, service_user: &str) -> u32 {
    let me = rustix::process::geteuid().as_raw();
    let service = || uzers::get_user_by_name(service_user).map(|user| user.uid());
    if me == 0 && service() == Some(metadata.uid()) { metadata.uid() } else { me }
}

/// The user the packaged service (systemd's `DynamicUser=` takes the unit's name) and the image run as.
const SERVICE_USER: &str = "gpudash";

/// Writes `text` to a new file in `dir` with the mode and owner of `old` (or [`NEW_FILE_MODE`]),
/// syncs it and renames it over `target`; on failure the new file is removed and `target` is untouched.
fn replace(target: &Path, dir: &Path, text: &str, old: Option<&Metadata>) -> std::io::Result<()> {
    let mut name = std::ffi::OsString::from(".");
    name.push(target.file_name().unwrap_or_default());
    name.push(format!(".{}.tmp", std::process::id()));
    let temporary = dir.join(name);
    // Made readable by its owner only: what others may read is set below, before a byte is in it.
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temporary)?;
    let written = (|| {
        if let Some(old) = old {
            let new = file.metadata()?;
            // The server may read the file through its group (root:gpudash 0640): keep both ids.
            if (new.uid(), new.gid()) != (old.uid(), old.gid()) {
                std::os::unix::fs::fchown(&file, Some(old.uid()), Some(old.gid()))?;
            }
        }
        file.set_permissions(Permissions::from_mode(old.map_or(NEW_FILE_MODE, |m| m.mode() & 0o7777)))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, target)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written?;
    // The rename lasts a crash only once the directory is on disk too.
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    const ROOT_ENTRY: &str = "# who may do what\nviewers = \"token\"\n\n[[token]]\nuser = \"root\"\nrole = \"admin\"\n\
        sha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"";

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// Names in the directory besides the auth file: a temporary file left behind would show here.
    fn others(dir: &Path) -> Vec<String> {
        let names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
        names.filter(|n| n != "auth.toml").collect()
    }

    /// Run as root, `token add` takes a file owned by the service's user (whose file the server
    /// reads), and still refuses one owned by anyone else.
    #[test]
    fn as_root_the_service_users_file_is_accepted_and_another_users_refused() {
        if rustix::process::geteuid().as_raw() != 0 {
            return; // chown needs root, as CI has
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        std::fs::write(&path, ROOT_ENTRY).unwrap();
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let metadata = std::fs::metadata(&path).unwrap();
        // `nobody` stands in for the service's user here.
        assert_eq!(trusted_owner(&metadata, "nobody"), 65534);
        assert_eq!(super::super::tokens::safe_file(&metadata, trusted_owner(&metadata, "nobody")), Ok(()));
        assert_eq!(trusted_owner(&metadata, "no-such-service-user"), 0);
        let refused = super::super::tokens::safe_file(&metadata, trusted_owner(&metadata, "no-such-service-user"));
        assert!(refused.unwrap_err().contains("belongs to uid 65534"));
    }

    #[test]
    fn appends_an_entry_the_server_accepts_and_replaces_the_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        std::fs::write(&path, ROOT_ENTRY).unwrap();
        std::fs::set_permissions(&path, Permissions::from_mode(0o640)).unwrap();
        // A reader that opened the file before keeps reading the old one: it was never written in place.
        let mut before = File::open(&path).unwrap();
        let added = add_token(&path, "ana", "operator").unwrap();
        assert!(!added.created && added.token.len() == 64);
        let text = std::fs::read_to_string(&path).unwrap();
        let entry = format!(
            "\n\n[[token]]\nuser = \"ana\"\nrole = \"operator\"\nsha256 = \"{}\"\n",
            crate::auth::tokens_hex(&hash_token(&added.token))
        );
        assert_eq!(text, format!("{ROOT_ENTRY}{entry}"), "the old text stays as it was, the entry follows");
        let config = AuthConfig::load(Some(&path), None).unwrap();
        assert!(!config.open_viewing, "the policy is kept");
        let users: Vec<_> = config.tokens.iter().map(|t| (t.user.as_str(), t.role)).collect();
        assert_eq!(users, [("root", Role::Admin), ("ana", Role::Operator)]);
        assert_eq!(config.tokens[1].sha256, hash_token(&added.token));
        let mut old = String::new();
        std::io::Read::read_to_string(&mut before, &mut old).unwrap();
        assert_eq!(old, ROOT_ENTRY);
        assert_eq!(mode(&path), 0o640, "the file's mode is kept");
        assert_eq!(others(dir.path()), Vec::<String>::new(), "no temporary file is left");
    }

    #[test]
    #[allow(clippy::print_stderr, reason = "a test that cannot run here says so")]
    fn the_owner_and_group_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        std::fs::write(&path, ROOT_ENTRY).unwrap();
        // Another group than the writer's (only root can give a file one; its owner stays root).
        if std::os::unix::fs::chown(&path, None, Some(65534)).is_err() {
            eprintln!("not run: only root can give the file another group");
            return;
        }
        std::fs::set_permissions(&path, Permissions::from_mode(0o640)).unwrap();
        add_token(&path, "ana", "viewer").unwrap();
        let metadata = std::fs::metadata(&path).unwrap();
        assert_eq!((metadata.gid(), mode(&path)), (65534, 0o640));
        // Owned by another user (who could write any role into it): refused, the file left as it was.
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let before = std::fs::read_to_string(&path).unwrap();
        let refused = add_token(&path, "bo", "admin").unwrap_err().to_string();
        assert!(refused.contains("belongs to uid 65534"), "{refused}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
    }

    #[test]
    fn a_file_others_may_write_is_refused_by_the_server_and_token_add() {
        for (mode, who) in [(0o664, "its group"), (0o646, "every user")] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("auth.toml");
            std::fs::write(&path, ROOT_ENTRY).unwrap();
            std::fs::set_permissions(&path, Permissions::from_mode(mode)).unwrap();
            let refused = add_token(&path, "ana", "admin").unwrap_err().to_string();
            assert!(refused.contains(&format!("writable by {who}")) && refused.contains("chmod go-w"), "{refused}");
            let load = AuthConfig::load(Some(&path), None).unwrap_err().to_string();
            assert!(load.contains(&format!("writable by {who}")), "{load}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), ROOT_ENTRY, "nothing written");
        }
    }

    #[test]
    fn a_missing_file_is_made_for_its_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        let added = add_token(&path, "ana", "viewer").unwrap();
        assert!(added.created);
        assert_eq!(mode(&path), NEW_FILE_MODE);
        let config = AuthConfig::load(Some(&path), None).unwrap();
        assert_eq!(config.tokens[0].sha256, hash_token(&added.token));
        assert_eq!(others(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn a_name_that_has_a_token_a_bad_name_or_role_or_a_broken_file_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        std::fs::write(&path, ROOT_ENTRY).unwrap();
        for (user, role, says) in [
            ("root", "viewer", "'root' already has a token in"),
            ("a b", "viewer", "user name 'a b' must be 1–64 letters"),
            ("ana", "god", "role 'god'; roles are viewer, operator, admin"),
        ] {
            let refused = add_token(&path, user, role).unwrap_err();
            assert!(refused.to_string().contains(says) && refused.is_usage(), "{refused}");
        }
        std::fs::write(&path, "viewers = \"maybe\"\n").unwrap();
        let refused = add_token(&path, "ana", "viewer").unwrap_err();
        assert!(refused.to_string().contains("correct it before adding") && !refused.is_usage(), "{refused}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "viewers = \"maybe\"\n");
        assert_eq!(others(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn a_link_stays_a_link_to_the_file_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("kept").join("auth.toml");
        std::fs::create_dir(real.parent().unwrap()).unwrap();
        std::fs::write(&real, ROOT_ENTRY).unwrap();
        let link = dir.path().join("auth.toml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        add_token(&link, "ana", "admin").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(AuthConfig::load(Some(&real), None).unwrap().tokens.len(), 2);
    }
}
