//! A container's name, image and labels, from the Docker Engine API on a unix socket (Docker's
//! own, or Podman's compatible `podman system service`), through bollard.

use std::path::{Path, PathBuf};
use std::time::Duration;

use shared::workload::{Container, bounded, bounded_labels};

/// Where Docker and Podman (rootful) serve the API, tried in this order when no socket is given.
pub const DEFAULT_SOCKETS: [&str; 2] = ["/var/run/docker.sock", "/run/podman/podman.sock"];

/// A connection to one engine.
#[derive(Debug, Clone)]
pub struct Engine {
    docker: bollard::Docker,
    socket: PathBuf,
    timeout: Duration,
    /// Root controls the socket ([`socket_trust`]): its owner labels name owners.
    trusted: bool,
}

/// What an engine said of a container id.
#[derive(Debug, Clone, PartialEq)]
pub enum Inspected {
    Found(Container),
    /// The engine does not know it (another runtime's container, or it has just gone).
    Unknown,
}

impl Engine {
    /// Connects lazily (nothing is sent until the first question); fails only when the socket is absent.
    pub fn new(socket: &Path, timeout: Duration) -> Result<Self, String> {
        let path = socket.to_str().ok_or_else(|| format!("{} is not a UTF-8 path", socket.display()))?;
        let docker = bollard::Docker::connect_with_unix(path, timeout.as_secs().max(1), bollard::API_DEFAULT_VERSION)
            .map_err(|e| e.to_string())?;
        let trusted = socket_trust(socket, rustix::process::geteuid().as_raw()).is_ok();
        Ok(Self { docker, socket: socket.to_owned(), timeout, trusted })
    }

    /// Why the engine's owner labels are not believed, when they are not ([`socket_trust`]).
    pub fn distrust(&self) -> Option<String> {
        socket_trust(&self.socket, rustix::process::geteuid().as_raw()).err()
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The container with full id `id`, its labels bounded as [`bounded_labels`] keeps them.
    pub async fn inspect(&self, id: &str, runtime: Option<&str>, owner_label: &str) -> Result<Inspected, String> {
        let asked = self.docker.inspect_container(id, None);
        let answer = match tokio::time::timeout(self.timeout, asked).await {
            Err(_) => return Err(format!("no answer within {} s", self.timeout.as_secs_f64())),
            Ok(Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })) => {
                return Ok(Inspected::Unknown);
            }
            Ok(Err(e)) => return Err(e.to_string()),
            Ok(Ok(answer)) => answer,
        };
        let config = answer.config.unwrap_or_default();
        let labels = config.labels.unwrap_or_default();
        Ok(Inspected::Found(Container {
            id: id.chars().take(12).collect(),
            runtime: runtime.map(str::to_owned),
            name: answer.name.map(|n| bounded(n.trim_start_matches('/'))).filter(|n| !n.is_empty()),
            image: config.image.map(|i| bounded(&i)).filter(|i| !i.is_empty()),
            labels: bounded_labels(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())), owner_label),
            trusted: self.trusted,
        }))
    }

    /// The engine's name and version, e.g. "Docker Engine - Community 27.3.1 (API 1.47)", within the
    /// timeout: whether it answers at all (`gpudash doctor`).
    pub async fn version(&self) -> Result<String, String> {
        let answer = match tokio::time::timeout(self.timeout, self.docker.version()).await {
            Err(_) => return Err(format!("no answer within {} s", self.timeout.as_secs_f64())),
            Ok(Err(e)) => return Err(e.to_string()),
            Ok(Ok(answer)) => answer,
        };
        let name = answer.platform.map(|p| p.name).filter(|n| !n.trim().is_empty());
        let api = answer.api_version.map(|v| format!(" (API {v})")).unwrap_or_default();
        Ok(format!(
            "{} {}{api}",
            name.as_deref().unwrap_or("the engine"),
            answer.version.as_deref().unwrap_or("of an unknown version")
        ))
    }
}

/// Whether root controls the engine behind `socket`, so that its containers' owner labels may name
/// owners: the socket and every folder above it are owned by root (or by gpudash's own user `me`),
/// the socket is not writable by everyone, and no folder is writable by others unless sticky (as
/// `/tmp`). A rootless engine's socket (`/run/user/UID/podman/podman.sock`) is its user's: that
/// user could label any container with anyone's name. `Err` says why not, in words.
pub fn socket_trust(socket: &Path, me: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let trusted_owner = |uid: u32| uid == 0 || uid == me;
    let meta = std::fs::metadata(socket).map_err(|e| format!("{} cannot be read ({e})", socket.display()))?;
    if !trusted_owner(meta.uid()) {
        return Err(format!(
            "{} belongs to uid {}, not root: a user's (rootless) engine",
            socket.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o002 != 0 {
        return Err(format!("{} is writable by every user", socket.display()));
    }
    for folder in socket.ancestors().skip(1).filter(|f| !f.as_os_str().is_empty()) {
        let meta = std::fs::metadata(folder).map_err(|e| format!("{} cannot be read ({e})", folder.display()))?;
        let sticky = meta.mode() & 0o1000 != 0;
        if !trusted_owner(meta.uid()) {
            return Err(format!("its folder {} belongs to uid {}, not root", folder.display(), meta.uid()));
        }
        if meta.mode() & 0o022 != 0 && !sticky {
            return Err(format!("its folder {} is writable by others, who could replace the socket", folder.display()));
        }
    }
    Ok(())
}

/// The socket to use: the one given, else the first of [`DEFAULT_SOCKETS`] that exists.
pub fn find_socket(given: Option<&Path>) -> Option<PathBuf> {
    match given {
        Some(path) => Some(path.to_owned()),
        None => DEFAULT_SOCKETS.iter().map(PathBuf::from).find(|p| p.exists()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_socket_is_refused_at_once() {
        let err = Engine::new(Path::new("/nonexistent/docker.sock"), Duration::from_secs(1)).unwrap_err();
        assert!(err.contains("/nonexistent/docker.sock"), "{err}");
    }

    #[test]
    fn only_a_socket_root_controls_is_trusted() {
        use std::os::unix::fs::PermissionsExt as _;
        let me = rustix::process::geteuid().as_raw();
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("engine.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(socket_trust(&socket, me), Ok(()), "root's (or our own) socket in a private folder");
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(socket_trust(&socket, me).unwrap_err().contains("writable by every user"));
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o660)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(socket_trust(&socket, me).unwrap_err().contains("writable by others"), "a folder anyone may change");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(socket_trust(&socket, me), Ok(()), "a sticky folder (as /tmp) keeps others' entries");
        // Owned by someone else than root and us: a user's engine.
        assert!(
            socket_trust(&socket, me.wrapping_add(1)).is_ok() == (me == 0),
            "root owns nothing here unless we are root"
        );
        assert!(socket_trust(&dir.path().join("gone.sock"), me).unwrap_err().contains("cannot be read"));
    }

    #[tokio::test]
    async fn an_engine_that_never_answers_hits_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("hang.sock");
        // Accepts connections and reads, but never writes a byte back.
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let engine = Engine::new(&socket, Duration::from_millis(300)).unwrap();
        let started = std::time::Instant::now();
        let err = engine.inspect(&"a".repeat(64), None, "gpudash.user").await.unwrap_err();
        assert!(err.contains("no answer within"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }
}
