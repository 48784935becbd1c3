//! A container's name, image, labels and main process, from the Docker Engine API on a unix
//! socket (Docker's own, or Podman's compatible `podman system service`): two GET requests
//! (`/containers/ID/json`, `/version`) over hyper's HTTP/1 client, each answer read to at most
//! [`MAX_ANSWER`] bytes. (bollard, used before, reads an answer whole: an engine that answers
//! gigabytes took gpudash with it.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use serde::Deserialize;
use shared::workload::{Container, bounded, bounded_labels};

/// Where Docker and Podman (rootful) serve the API, tried in this order when no socket is given.
pub const DEFAULT_SOCKETS: [&str; 2] = ["/var/run/docker.sock", "/run/podman/podman.sock"];

/// Largest answer read: a container's inspection with its labels is a few KiB.
pub const MAX_ANSWER: usize = 1 << 20;

/// A connection to one engine (a connection per question, closed after it).
#[derive(Debug, Clone)]
pub struct Engine {
    socket: PathBuf,
    timeout: Duration,
    /// Root controls the socket ([`socket_trust`]): its owner labels name owners.
    trusted: bool,
}

/// What an engine said of a container id.
#[derive(Debug, Clone, PartialEq)]
pub enum Inspected {
    /// The container, and the host PID of its main process (0 when it runs none).
    Found(Container, u32),
    /// The engine does not know it (another runtime's container, or it has just gone).
    Unknown,
}

/// The parts of `GET /containers/ID/json` gpudash reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspection {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    config: InspectionConfig,
    #[serde(default)]
    state: InspectionState,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectionConfig {
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    labels: Option<std::collections::HashMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectionState {
    #[serde(default)]
    pid: Option<i64>,
}

/// The parts of `GET /version` gpudash reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Version {
    #[serde(default)]
    platform: Option<Platform>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    api_version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Platform {
    #[serde(default)]
    name: String,
}

impl Engine {
    /// Nothing is sent until the first question; fails only when the socket is absent.
    pub fn new(socket: &Path, timeout: Duration) -> Result<Self, String> {
        if !socket.exists() {
            return Err(format!("{} does not exist", socket.display()));
        }
        let trusted = socket_trust(socket, rustix::process::geteuid().as_raw()).is_ok();
        Ok(Self { socket: socket.to_owned(), timeout, trusted })
    }

    /// Why the engine's owner labels are not believed, when they are not ([`socket_trust`]).
    pub fn distrust(&self) -> Option<String> {
        socket_trust(&self.socket, rustix::process::geteuid().as_raw()).err()
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `GET path`: the status and at most [`MAX_ANSWER`] bytes of body, within the timeout.
    async fn get(&self, path: &str) -> Result<(hyper::StatusCode, Bytes), String> {
        let ask = async {
            let stream =
                tokio::net::UnixStream::connect(&self.socket).await.map_err(|e| format!("cannot connect: {e}"))?;
            let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
            let request = hyper::Request::get(path)
                .header(hyper::header::HOST, "engine")
                .header(hyper::header::CONNECTION, "close")
                .body(Empty::<Bytes>::new())
                .map_err(|e| e.to_string())?;
            let answer = async {
                let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
                let status = response.status();
                let body = Limited::new(response.into_body(), MAX_ANSWER)
                    .collect()
                    .await
                    .map_err(|e| format!("the answer is over {MAX_ANSWER} bytes or broken ({e})"))?
                    .to_bytes();
                Ok::<_, String>((status, body))
            };
            let mut connection = std::pin::pin!(connection);
            let mut answer = std::pin::pin!(answer);
            tokio::select! {
                biased;
                done = &mut answer => done,
                closed = &mut connection => match closed {
                    Ok(()) => answer.await,
                    Err(e) => Err(e.to_string()),
                },
            }
        };
        tokio::time::timeout(self.timeout, ask)
            .await
            .map_err(|_| format!("no answer within {} s", self.timeout.as_secs_f64()))?
    }

    /// The container with full id `id` (64 hex digits, as the cgroup path names it), its labels
    /// bounded as [`bounded_labels`] keeps them.
    pub async fn inspect(&self, id: &str, runtime: Option<&str>, owner_label: &str) -> Result<Inspected, String> {
        if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(Inspected::Unknown);
        }
        let (status, body) = self.get(&format!("/containers/{id}/json")).await?;
        if status == hyper::StatusCode::NOT_FOUND {
            return Ok(Inspected::Unknown);
        }
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        let answer: Inspection =
            serde_json::from_slice(&body).map_err(|e| format!("an answer that is not a container: {e}"))?;
        let labels = answer.config.labels.unwrap_or_default();
        let container = Container {
            id: id.chars().take(12).collect(),
            runtime: runtime.map(str::to_owned),
            name: answer.name.map(|n| bounded(n.trim_start_matches('/'))).filter(|n| !n.is_empty()),
            image: answer.config.image.map(|i| bounded(&i)).filter(|i| !i.is_empty()),
            labels: bounded_labels(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())), owner_label),
            trusted: self.trusted,
        };
        let pid = answer.state.pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0);
        Ok(Inspected::Found(container, pid))
    }

    /// The engine's name and version, e.g. "Docker Engine - Community 27.3.1 (API 1.47)", within the
    /// timeout: whether it answers at all (`gpudash doctor`).
    pub async fn version(&self) -> Result<String, String> {
        let (status, body) = self.get("/version").await?;
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        let answer: Version =
            serde_json::from_slice(&body).map_err(|e| format!("an answer that is not a version: {e}"))?;
        let name = answer.platform.map(|p| p.name).filter(|n| !n.trim().is_empty());
        let api = answer.api_version.map(|v| format!(" (API {v})")).unwrap_or_default();
        Ok(format!(
            "{} {}{api}",
            name.as_deref().map_or("the engine".to_owned(), bounded),
            answer.version.as_deref().map_or("of an unknown version".to_owned(), bounded)
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

    /// A stand-in engine on `socket` that answers every request with `head` and then `body_bytes` of
    /// zeros (never all of them when the head promises more).
    fn flooding_engine(socket: &Path, head: String, body_bytes: u64) {
        let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
        std::thread::spawn(move || {
            use std::io::{Read as _, Write as _};
            while let Ok((mut stream, _)) = listener.accept() {
                let mut buf = [0; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(head.as_bytes());
                let zeros = vec![b'0'; 64 << 10];
                let mut sent = 0;
                while sent < body_bytes && stream.write_all(&zeros).is_ok() {
                    sent += zeros.len() as u64;
                }
            }
        });
    }

    #[tokio::test]
    async fn an_engine_answering_gigabytes_is_cut_at_a_mebibyte() {
        let dir = tempfile::tempdir().unwrap();
        // 4,000 MiB promised (as the red-team's hostile engine), and 64 MiB sent at most.
        let promised = dir.path().join("promised.sock");
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4194304000\r\n\r\n".to_owned();
        flooding_engine(&promised, head, 64 << 20);
        // Chunked, no length said: the cap must hold as it reads.
        let chunked = dir.path().join("chunked.sock");
        let chunk = format!("{:x}\r\n{}\r\n", 1 << 16, "0".repeat(1 << 16)).repeat(40);
        let head = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}");
        flooding_engine(&chunked, head, 0);
        for socket in [promised, chunked] {
            let engine = Engine::new(&socket, Duration::from_secs(10)).unwrap();
            let err = engine.inspect(&"a".repeat(64), None, "gpudash.user").await.unwrap_err();
            assert!(err.contains("over 1048576 bytes"), "{}: {err}", socket.display());
        }
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
        let started = base::clock::Stopwatch::start();
        let err = engine.inspect(&"a".repeat(64), None, "gpudash.user").await.unwrap_err();
        assert!(err.contains("no answer within"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }
}
