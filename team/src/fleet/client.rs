//! A small client for Prometheus's HTTP API: instant PromQL queries
//! (`GET /api/v1/query`), with a bearer token or basic auth, bounded by timeouts.
//!
//! http, or https verified against the system's CAs plus any given with
//! `--fleet-prometheus-ca` (rustls, through reqwest).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;

pub use super::answer::Answered;

/// How gpudash proves itself to Prometheus.
#[derive(Clone, Default)]
pub enum PrometheusAuth {
    #[default]
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// HTTP basic auth.
    Basic { user: String, password: String },
}

// Secrets stay out of logs and panics.
impl fmt::Debug for PrometheusAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Self::Basic { user, .. } => write!(f, "Basic {{ user: {user:?}, password: <redacted> }}"),
        }
    }
}

/// Why a query brought back no figures, in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("cannot reach Prometheus at '{url}': {reason}; is it running, and is --fleet-prometheus right?")]
    Unreachable { url: String, reason: String },
    #[error(
        "the TLS connection to Prometheus at '{url}' failed: {reason}; if its certificate comes from a \
         private CA, pass that CA's PEM file with --fleet-prometheus-ca"
    )]
    Tls { url: String, reason: String },
    #[error("cannot use '{path}' as --fleet-prometheus-ca: {reason}")]
    Ca { path: String, reason: String },
    #[error("Prometheus at '{url}' did not answer within {} s", .after.as_secs_f64())]
    Timeout { url: String, after: Duration },
    #[error(
        "Prometheus at '{url}' refused gpudash's credentials (HTTP {status}); check --fleet-prometheus-token, \
         or --fleet-prometheus-user and GPUDASH_FLEET_PROMETHEUS_PASSWORD"
    )]
    Unauthorized { url: String, status: u16 },
    #[error("Prometheus rejected the query '{query}': {kind}: {message}")]
    Query { query: String, kind: String, message: String },
    #[error("'{url}' answered HTTP {status}, not Prometheus's query API; is --fleet-prometheus its base URL?")]
    Status { url: String, status: u16 },
    #[error("'{url}' did not answer like Prometheus's query API ({reason}); is --fleet-prometheus its base URL?")]
    Decode { url: String, reason: String },
    #[error("Prometheus answered the query '{query}' with a {kind}, not an instant vector")]
    NotAVector { query: String, kind: String },
    #[error(
        "Prometheus at '{url}' answered more than {} MiB for one query; the fleet reads at most that much",
        .limit / (1024 * 1024)
    )]
    TooLarge { url: String, limit: usize },
}

/// The most one answer may hold: a 1,000-host fleet's largest answer is a few MiB.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// One series of an instant vector: its labels (without `__name__`) and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Series {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }
}

/// Talks to one Prometheus server.
#[derive(Debug, Clone)]
pub struct PrometheusClient {
    http: reqwest::Client,
    /// Base URL, ending in '/' so that `api/v1/query` joins under a path prefix.
    base: Url,
    query_url: Url,
    auth: PrometheusAuth,
    timeout: Duration,
}

impl PrometheusClient {
    /// A client for the Prometheus at `base` (e.g. `http://prometheus:9090` or `https://host/prometheus/`),
    /// trusting the CA certificates in the PEM file `ca` besides the system's.
    pub fn new(
        base: &Url,
        auth: PrometheusAuth,
        ca: Option<&Path>,
        timeout: Duration,
    ) -> Result<Self, PrometheusError> {
        let mut base = base.clone();
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let query_url = base.join("api/v1/query").map_err(|e| PrometheusError::Decode {
            url: base.to_string(),
            reason: format!("cannot form the query URL: {e}"),
        })?;
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(2)));
        if let Some(path) = ca {
            for certificate in ca_certificates(path)? {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder
            .build()
            .map_err(|e| PrometheusError::Unreachable { url: base.to_string(), reason: innermost(&e) })?;
        Ok(Self { http, base, query_url, auth, timeout })
    }

    /// The base URL, for display (it never carries credentials: see [`parse_prometheus_url`]).
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// Evaluates `query` at `time_s` (seconds since the epoch) and returns its instant vector.
    pub async fn query(&self, query: &str, time_s: f64) -> Result<Vec<Series>, PrometheusError> {
        Ok(self.query_at(query, Some(time_s)).await?.series.into_iter().map(|(_, series)| series).collect())
    }

    /// Evaluates `query` at `time_s`, or at the engine's now when `None`: the series with their
    /// metric names (`__name__`, empty when the query drops it), the engine's warnings (a partial
    /// answer says so there) and the instant it evaluated at.
    pub async fn query_at(&self, query: &str, time_s: Option<f64>) -> Result<Answered, PrometheusError> {
        let url = self.base.to_string();
        let mut params = vec![("query", query.to_owned())];
        params.extend(time_s.map(|t| ("time", format!("{t:.3}"))));
        let request = self.http.get(self.query_url.clone()).query(&params);
        let request = match &self.auth {
            PrometheusAuth::None => request,
            PrometheusAuth::Bearer(token) => request.bearer_auth(token),
            PrometheusAuth::Basic { user, password } => request.basic_auth(user, Some(password)),
        };
        let response = request.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if matches!(status.as_u16(), 401 | 403) {
            return Err(PrometheusError::Unauthorized { url, status: status.as_u16() });
        }
        let body = self.bounded_body(response).await?;
        super::answer::decode(&body, status.as_u16(), query, &url)
    }

    /// The active scrape targets that are not up (`GET /api/v1/targets?state=active`), with the
    /// error of their last scrape. Not every Prometheus-compatible server has this API: a caller
    /// treats an error as "no errors known".
    pub async fn down_targets(&self) -> Result<Vec<DownTarget>, PrometheusError> {
        let url = self.base.to_string();
        let targets_url = self.base.join("api/v1/targets").map_err(|e| PrometheusError::Decode {
            url: url.clone(),
            reason: format!("cannot form the targets URL: {e}"),
        })?;
        let request = self.http.get(targets_url).query(&[("state", "active")]);
        let request = match &self.auth {
            PrometheusAuth::None => request,
            PrometheusAuth::Bearer(token) => request.bearer_auth(token),
            PrometheusAuth::Basic { user, password } => request.basic_auth(user, Some(password)),
        };
        let response = request.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(PrometheusError::Status { url, status: status.as_u16() });
        }
        let answer: TargetsAnswer =
            response.json().await.map_err(|e| PrometheusError::Decode { url, reason: e.to_string() })?;
        Ok(answer
            .data
            .active_targets
            .into_iter()
            .filter(|t| t.health != "up")
            .filter_map(|t| {
                Some(DownTarget {
                    instance: t.labels.get("instance")?.clone(),
                    job: t.labels.get("job").cloned().unwrap_or_default(),
                    last_error: Some(t.last_error).filter(|e| !e.is_empty()),
                })
            })
            .collect())
    }

    /// The body of `response`, refused past [`MAX_ANSWER_BYTES`] (a misdirected URL or a runaway
    /// query must not fill this server's memory).
    async fn bounded_body(&self, mut response: reqwest::Response) -> Result<Vec<u8>, PrometheusError> {
        let too_large = || PrometheusError::TooLarge { url: self.base.to_string(), limit: MAX_ANSWER_BYTES };
        if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport_error(&e))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn transport_error(&self, e: &reqwest::Error) -> PrometheusError {
        let url = self.base.to_string();
        if e.is_timeout() {
            PrometheusError::Timeout { url, after: self.timeout }
        } else if let Some(tls) = tls_cause(e) {
            PrometheusError::Tls { url, reason: tls.to_string() }
        } else {
            PrometheusError::Unreachable { url, reason: innermost(e) }
        }
    }
}

/// The certificates of a PEM file, or why it cannot be used.
fn ca_certificates(path: &Path) -> Result<Vec<reqwest::Certificate>, PrometheusError> {
    let error = |reason: String| PrometheusError::Ca { path: path.display().to_string(), reason };
    let pem = std::fs::read(path).map_err(|e| error(e.to_string()))?;
    let certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| error(innermost(&e)))?;
    if certificates.is_empty() {
        return Err(error("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned()));
    }
    Ok(certificates)
}

/// The rustls error under a transport error, if TLS is what failed. (An `io::Error`
/// does not list the error it wraps as its source, so each one is looked into.)
fn tls_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = e.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    let wrapped = e.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref);
    if let Some(found) = wrapped.and_then(|inner| tls_cause(inner)) {
        return Some(found);
    }
    e.source().and_then(tls_cause)
}

/// The root cause of a transport error ("Connection refused (os error 111)"),
/// rather than reqwest's outer "error sending request for url".
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Why a `--fleet-prometheus` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrometheusUrlError {
    #[error("'{value}' is not a URL ({reason}); use e.g. http://prometheus:9090")]
    NotAUrl { value: String, reason: url::ParseError },
    #[error("'{value}': scheme '{scheme}' is not supported; use http://HOST:PORT or https://")]
    Scheme { value: String, scheme: String },
    #[error("'{value}' has no host; use e.g. http://prometheus:9090")]
    NoHost { value: String },
    #[error(
        "'{value}' carries credentials; pass them with --fleet-prometheus-user and \
         GPUDASH_FLEET_PROMETHEUS_PASSWORD (or --fleet-prometheus-token) instead"
    )]
    Credentials { value: String },
    #[error("'{value}' has a query or fragment; give Prometheus's base URL only")]
    QueryOrFragment { value: String },
}

/// `--fleet-prometheus`: an http or https URL with a host, no credentials, query or fragment.
pub fn parse_prometheus_url(value: &str) -> Result<Url, PrometheusUrlError> {
    let url =
        Url::parse(value.trim()).map_err(|reason| PrometheusUrlError::NotAUrl { value: value.to_owned(), reason })?;
    match url.scheme() {
        "http" | "https" => {}
        other => return Err(PrometheusUrlError::Scheme { value: value.to_owned(), scheme: other.to_owned() }),
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(PrometheusUrlError::NoHost { value: value.to_owned() });
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(PrometheusUrlError::Credentials { value: value.to_owned() });
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(PrometheusUrlError::QueryOrFragment { value: value.to_owned() });
    }
    Ok(url)
}

/// A scrape target Prometheus could not scrape last time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownTarget {
    pub instance: String,
    pub job: String,
    /// Prometheus's words, e.g. "Get \"http://gpu-07:7070/metrics\": connection refused".
    pub last_error: Option<String>,
}

#[derive(Deserialize)]
struct TargetsAnswer {
    data: TargetsData,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TargetsData {
    #[serde(default)]
    active_targets: Vec<RawTarget>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTarget {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    health: String,
    #[serde(default)]
    last_error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_http_or_https_without_credentials() {
        assert_eq!(parse_prometheus_url("http://prom:9090").unwrap().as_str(), "http://prom:9090/");
        assert!(parse_prometheus_url("http://127.0.0.1:9090/prometheus").is_ok());
        assert!(parse_prometheus_url("https://prom.example:9090").is_ok());
        for (value, expected) in [
            ("prom:9090", "scheme 'prom'"),
            ("ftp://prom:9090", "use http://HOST:PORT or https://"),
            ("http://ana:pw@prom:9090", "--fleet-prometheus-user"),
            ("http://prom:9090/?x=1", "base URL only"),
            ("not a url", "not a URL"),
        ] {
            let err = parse_prometheus_url(value).unwrap_err().to_string();
            assert!(err.contains(expected), "{value}: {err}");
        }
        assert_eq!(
            parse_prometheus_url("ftp://prom:9090").unwrap_err().to_string(),
            "'ftp://prom:9090': scheme 'ftp' is not supported; use http://HOST:PORT or https://"
        );
        assert_eq!(
            parse_prometheus_url("http://ana:pw@prom:9090").unwrap_err().to_string(),
            "'http://ana:pw@prom:9090' carries credentials; pass them with --fleet-prometheus-user and \
             GPUDASH_FLEET_PROMETHEUS_PASSWORD (or --fleet-prometheus-token) instead"
        );
    }

    #[test]
    fn secrets_are_not_debug_printed() {
        let auth = PrometheusAuth::Basic { user: "ana".to_owned(), password: "hunter2".to_owned() };
        assert!(!format!("{auth:?}").contains("hunter2"));
        assert!(!format!("{:?}", PrometheusAuth::Bearer("s3cret".to_owned())).contains("s3cret"));
    }

    #[test]
    fn a_path_prefix_is_kept() {
        let url = parse_prometheus_url("http://host/prometheus").unwrap();
        let client = PrometheusClient::new(&url, PrometheusAuth::None, None, Duration::from_secs(1)).unwrap();
        assert_eq!(client.query_url.as_str(), "http://host/prometheus/api/v1/query");
    }

    #[test]
    fn a_ca_file_must_hold_certificates() {
        let url = parse_prometheus_url("https://prom:9090").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        for (path, expected) in [(dir.path().join("missing.pem"), "No such file"), (empty, "holds no PEM certificate")]
        {
            let err = PrometheusClient::new(&url, PrometheusAuth::None, Some(&path), Duration::from_secs(1))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(&format!("cannot use '{}' as --fleet-prometheus-ca", path.display())), "{err}");
            assert!(err.contains(expected), "{err}");
        }
    }

    #[tokio::test]
    async fn an_unreachable_server_says_so() {
        // A port nobody listens on: bind one, then free it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = parse_prometheus_url(&format!("http://127.0.0.1:{port}")).unwrap();
        let client = PrometheusClient::new(&url, PrometheusAuth::None, None, Duration::from_secs(2)).unwrap();
        let err = client.query("up", 0.0).await.unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot reach Prometheus at 'http://127.0.0.1:{port}/'")), "{err}");
    }
}
