//! Whether the server is whole (`/healthz`'s "ok" or "degraded" and why, which the page shows
//! too), and what of the host's facts a viewer who is not an admin may read.

use serde::{Deserialize, Serialize};

use crate::{DeviceSample, HostInfo};

/// What `/healthz` says of the server, beside "stalled" (no samples, answered 503).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ServiceStatus {
    /// Samples come and every GPU answers.
    Ok,
    /// Samples come, but no driver was found or a GPU stopped answering: see the reasons.
    Degraded,
}

impl ServiceStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Degraded => "degraded",
        }
    }
}

/// Why the server is degraded, one sentence each; empty when it is not. `latest` is the newest
/// reading of each GPU; `workload_problems` the broken workload sources (`Details::workload_problems`).
/// The reasons name no file path (`/healthz` is public): see [`hide_paths`].
pub fn degraded_reasons<'a>(
    host: &HostInfo,
    latest: impl IntoIterator<Item = &'a DeviceSample>,
    workload_problems: &[String],
) -> Vec<String> {
    let mut reasons = Vec::new();
    if let Some(error) = &host.gpu_error {
        reasons.push(format!("no GPU can be read: {}", hide_paths(error)));
    }
    for sample in latest {
        if let Some(lost) = &sample.lost {
            // The samplers already say "GPU 7 is lost: …"; a bare reason gets the GPU's name here.
            let lost = hide_paths(lost);
            let named = format!("GPU {} ", sample.index);
            reasons.push(if lost.starts_with(&named) { lost } else { format!("GPU {} is lost: {lost}", sample.index) });
        }
    }
    reasons.extend(workload_problems.iter().map(|p| hide_paths(p)));
    reasons
}

/// The status those reasons make.
pub fn status_of(reasons: &[String]) -> ServiceStatus {
    if reasons.is_empty() { ServiceStatus::Ok } else { ServiceStatus::Degraded }
}

/// What stands in for a file path in text shown to someone who is not an admin.
pub const HIDDEN_PATH: &str = "[path hidden]";

/// `text` with every word that is a file path (starts with `/`, `~/` or `./`, quotes and brackets
/// aside) replaced by [`HIDDEN_PATH`]: where the server keeps its files, libraries and
/// configuration is nothing a viewer needs (the server's log and an admin have the full text).
pub fn hide_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let start = word.len() - word.trim_start_matches(['\'', '"', '(', '[', '`']).len();
        let (before, rest) = word.split_at(start);
        if rest.starts_with('/') || rest.starts_with("~/") || rest.starts_with("./") {
            // Keep the punctuation that closes the path (a quote, a colon before the message).
            let end = rest.trim_end_matches(['\'', '"', ')', ']', '`', ':', ',', ';']);
            out.push_str(before);
            out.push_str(HIDDEN_PATH);
            out.push_str(&rest[end.len()..]);
        } else {
            out.push_str(word);
        }
    }
    out
}

impl HostInfo {
    /// These facts as a viewer who is not an admin reads them: the driver's error without file paths.
    pub fn without_paths(&self) -> Self {
        Self { gpu_error: self.gpu_error.as_deref().map(hide_paths), ..self.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_hidden_and_the_rest_of_the_message_kept() {
        assert_eq!(
            hide_paths(
                "NVIDIA driver not available: /usr/lib/x86_64/libnvidia-ml.so.1: cannot open shared object file"
            ),
            "NVIDIA driver not available: [path hidden]: cannot open shared object file"
        );
        assert_eq!(hide_paths("cannot read '/var/lib/gpudash/history.db'"), "cannot read '[path hidden]'");
        assert_eq!(
            hide_paths("see ~/.config/x and ./local (or /tmp/y)"),
            "see [path hidden] and [path hidden] (or [path hidden])"
        );
        assert_eq!(
            hide_paths("libnvidia-ml.so.1: cannot open"),
            "libnvidia-ml.so.1: cannot open",
            "a file name is no path"
        );
        assert_eq!(hide_paths("fell off the bus (XID 79)"), "fell off the bus (XID 79)");
    }

    fn host(gpu_error: Option<&str>) -> HostInfo {
        HostInfo {
            hostname: "h".into(),
            driver_version: None,
            cuda_driver_version: None,
            simulated: false,
            gpu_error: gpu_error.map(str::to_owned),
            interval_ms: 1000,
            version: "0".into(),
            history: false,
        }
    }

    #[test]
    fn a_missing_driver_or_a_lost_gpu_degrades() {
        let fine = DeviceSample { index: 0, ..Default::default() };
        assert!(degraded_reasons(&host(None), [&fine], &[]).is_empty());
        assert_eq!(status_of(&[]), ServiceStatus::Ok);

        let lost = DeviceSample { index: 1, lost: Some("fell off the bus".into()), ..Default::default() };
        let reasons = degraded_reasons(&host(None), [&fine, &lost], &[]);
        assert_eq!(reasons, ["GPU 1 is lost: fell off the bus"]);
        let named =
            DeviceSample { index: 1, lost: Some("GPU 1 is lost: fell off the bus".into()), ..Default::default() };
        assert_eq!(degraded_reasons(&host(None), [&named], &[]), ["GPU 1 is lost: fell off the bus"], "named once");
        assert_eq!(status_of(&reasons), ServiceStatus::Degraded);

        let reasons = degraded_reasons(&host(Some("NVIDIA driver not available: /lib/libnvidia-ml.so")), [], &[]);
        assert_eq!(reasons, ["no GPU can be read: NVIDIA driver not available: [path hidden]"]);
        assert_eq!(host(Some("at /x/y")).without_paths().gpu_error.as_deref(), Some("at [path hidden]"));

        let broken = ["the container engine at /run/docker.sock does not answer".to_owned()];
        let reasons = degraded_reasons(&host(None), [&fine], &broken);
        assert_eq!(reasons, ["the container engine at [path hidden] does not answer"]);
    }
}
