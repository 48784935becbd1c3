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
        Ok(Self { docker, socket: socket.to_owned(), timeout })
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
