//! A pod's owner label or annotation, from the Kubernetes API server: the one thing about a pod
//! the kubelet's pod-resources API does not say. In a cluster gpudash finds the API server and
//! its service account from the environment Kubernetes gives every pod; it needs `get` on pods
//! (the ClusterRole in deploy/kubernetes/). Without it, a pod is owned by its namespace.

use std::path::Path;
use std::time::Duration;

use shared::workload::bounded;

/// Where a pod's service account lives.
const ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Largest pod object read.
const MAX_POD: usize = 4 << 20;

/// A client of the API server, reading pods.
#[derive(Debug, Clone)]
pub struct KubeApi {
    client: reqwest::Client,
    base: url::Url,
    token: Option<String>,
    timeout: Duration,
}

impl KubeApi {
    /// The API server of the cluster this runs in (`KUBERNETES_SERVICE_HOST`/`_PORT`, the service
    /// account's token and CA); `None` outside a cluster, or in one without a token mounted (the
    /// base DaemonSet: reading pods' labels is the optional `pod-owner-labels` component).
    pub fn in_cluster(timeout: Duration) -> Option<Result<Self, String>> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".to_owned());
        let account = Path::new(ACCOUNT);
        if !account.join("token").exists() {
            return None;
        }
        let host = if host.contains(':') { format!("[{host}]") } else { host };
        Some((|| {
            let base = url::Url::parse(&format!("https://{host}:{port}/")).map_err(|e| e.to_string())?;
            let token = std::fs::read_to_string(account.join("token"))
                .map_err(|e| format!("the service account's token: {e}"))?;
            let ca = std::fs::read(account.join("ca.crt")).map_err(|e| format!("the service account's CA: {e}"))?;
            Self::new(base, Some(token.trim().to_owned()), Some(&ca), timeout)
        })())
    }

    /// A client of the API server at `base`, with a bearer token and a CA (PEM) to trust.
    pub fn new(
        base: url::Url,
        token: Option<String>,
        ca_pem: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let mut builder = reqwest::Client::builder().timeout(timeout).connect_timeout(timeout);
        if let Some(pem) = ca_pem {
            let ca = reqwest::Certificate::from_pem(pem).map_err(|e| format!("the API server's CA: {e}"))?;
            builder = builder.add_root_certificate(ca);
        }
        let client = builder.build().map_err(|e| e.to_string())?;
        Ok(Self { client, base, token, timeout })
    }

    /// Pod `namespace/name`'s UID and the value of its label `key`, else of its annotation `key`;
    /// `None` when there is no such pod. The names come from the kubelet: only Kubernetes names
    /// (lowercase letters, digits, '-' and '.') are asked about, each one path segment, so none can
    /// reach another API path.
    pub async fn pod_facts(&self, namespace: &str, name: &str, key: &str) -> Result<Option<PodFacts>, String> {
        let url = pod_url(&self.base, namespace, name)?;
        let mut request = self.client.get(url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let ask = async {
            let answer = request.send().await.map_err(|e| e.to_string())?;
            let status = answer.status();
            if status == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if !status.is_success() {
                let hint = if status == reqwest::StatusCode::FORBIDDEN { " (gpudash needs `get` on pods)" } else { "" };
                return Err(format!("HTTP {status}{hint}"));
            }
            if answer.content_length().is_some_and(|n| n > MAX_POD as u64) {
                return Err(format!("the pod object is over {MAX_POD} bytes"));
            }
            // Read chunk by chunk: an answer without a length (chunked) stops at the cap too.
            let mut body = Vec::new();
            let mut answer = answer;
            while let Some(chunk) = answer.chunk().await.map_err(|e| e.to_string())? {
                if body.len() + chunk.len() > MAX_POD {
                    return Err(format!("the pod object is over {MAX_POD} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            let pod: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
            Ok(Some(pod))
        };
        let pod = tokio::time::timeout(self.timeout, ask)
            .await
            .map_err(|_| format!("no answer within {} s", self.timeout.as_secs_f64()))??;
        Ok(pod.map(|pod| {
            let meta = &pod["metadata"];
            let value = meta["labels"][key].as_str().or_else(|| meta["annotations"][key].as_str());
            PodFacts {
                uid: meta["uid"].as_str().map(bounded).filter(|v| !v.is_empty()),
                owner: value.map(bounded).filter(|v| !v.is_empty()),
            }
        }))
    }
}

/// What the API server says of a pod that the kubelet does not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// `metadata.uid`: a process belongs to the pod only when its cgroup names this UID.
    pub uid: Option<String>,
    /// The owner label's value, else the owner annotation's.
    pub owner: Option<String>,
}

/// `base/api/v1/namespaces/NS/pods/NAME`, refusing what is not a Kubernetes name (a DNS-1123
/// subdomain: 1 to 253 of lowercase letters, digits, '-' and '.', starting and ending with a
/// letter or digit), so no name from the kubelet can climb out of its path segment.
fn pod_url(base: &url::Url, namespace: &str, name: &str) -> Result<url::Url, String> {
    let valid = |n: &str| {
        (1..=253).contains(&n.len())
            && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && n.starts_with(|c: char| c.is_ascii_alphanumeric())
            && n.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if !valid(namespace) || !valid(name) {
        return Err(format!("pod {:?}/{:?} is not a Kubernetes name; not asked", bounded(namespace), bounded(name)));
    }
    let mut url = base.clone();
    url.path_segments_mut().map_err(|()| format!("{base} cannot take a path"))?.pop_if_empty().extend([
        "api",
        "v1",
        "namespaces",
        namespace,
        "pods",
        name,
    ]);
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kubernetes_names_become_one_path_segment_each() {
        let base = url::Url::parse("https://10.0.0.1:443/").unwrap();
        assert_eq!(
            pod_url(&base, "ml", "bert-0").unwrap().as_str(),
            "https://10.0.0.1/api/v1/namespaces/ml/pods/bert-0"
        );
        let prefixed = url::Url::parse("https://proxy/k8s/").unwrap();
        assert_eq!(pod_url(&prefixed, "ml", "a.b").unwrap().path(), "/k8s/api/v1/namespaces/ml/pods/a.b");
        for (ns, name) in [
            ("ml", "../../secrets"),
            ("..", "x"),
            ("ml", "x?watch=1"),
            ("ml", "x#y"),
            ("kube-system/secrets", "x"),
            ("ml", "X"),
            ("ml", ""),
            ("ml", "-x"),
            ("ml", "x%2F"),
        ] {
            assert!(pod_url(&base, ns, name).is_err(), "{ns}/{name}");
        }
    }
}
