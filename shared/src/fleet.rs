//! The fleet view: every host and GPU a Prometheus server scrapes (gpudash
//! instances and plain dcgm-exporter nodes), as `GET /api/fleet` returns it.
//!
//! Figures a node does not export are `None` (shown "n/a"): dcgm-exporter has
//! no per-process series, so its GPUs' `users` is `None`, not empty.

use serde::{Deserialize, Serialize};

/// Body of `GET /api/fleet`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct FleetResponse {
    /// The Prometheus server asked (its base URL, never credentials).
    pub prometheus: String,
    /// When the figures were queried, ms since the epoch (answers are cached for a few seconds).
    pub queried_ms: u64,
    /// How long the queries took together, ms.
    pub query_ms: u64,
    /// Why there are no figures (Prometheus unreachable, refused the token, bad answer).
    /// When set, `nodes` and `gpus` are empty.
    pub error: Option<String>,
    /// A node is stale when its last scrape failed or its GPU series stopped; its
    /// last known figures are kept this long (the `last_over_time` window), ms.
    pub window_ms: u64,
    /// Every node with GPU series in the window, by host name.
    pub nodes: Vec<FleetNode>,
    /// Every GPU: free ones first, then busy ones, then lost or stale ones; each group by host and index.
    pub gpus: Vec<FleetGpu>,
    /// Counts over the whole fleet, before filters.
    pub summary: FleetSummary,
    /// Values the filters can take (distinct hosts, models, users), sorted, before filters.
    pub choices: FleetChoices,
    /// The engine's own warnings with its answer (e.g. Thanos' "partial response" when a store is
    /// down): the figures shown may be missing hosts. Empty when the answer is whole.
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl FleetResponse {
    /// Leaves out who holds each GPU (for an anonymous visitor when tokens exist): the
    /// shares stay, their names read [`crate::lab::HIDDEN_REQUESTER`], and the user picker is empty.
    pub fn hide_people(&mut self) {
        for node in &mut self.nodes {
            node.owners.clear();
        }
        for user in self.gpus.iter_mut().filter_map(|gpu| gpu.users.as_mut()).flatten() {
            crate::lab::HIDDEN_REQUESTER.clone_into(&mut user.user);
        }
        self.choices.users.clear();
    }
}

/// One scraped node (a Prometheus `instance`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct FleetNode {
    /// Prometheus's `instance` label, e.g. "gpu-07:7070".
    pub instance: String,
    /// Prometheus's `job` label.
    pub job: String,
    /// The exporter's `Hostname` label, else the instance without its port.
    pub hostname: String,
    /// What serves the metrics.
    pub kind: NodeKind,
    /// gpudash's version, for gpudash nodes.
    pub version: Option<String>,
    /// The node's own dashboard (`http://<instance>/`), for gpudash nodes.
    pub url: Option<String>,
    /// True when the node reports simulated GPUs (gpudash `--simulate`).
    pub simulated: bool,
    /// Prometheus's last scrape of it succeeded (`up == 1`); `None` when it no longer scrapes it.
    pub up: Option<bool>,
    /// Its series are not current: the last scrape failed, the target is gone, or its GPU series stopped.
    pub stale: bool,
    /// Last successful scrape, ms since the epoch (to the subquery step, 1 s), when within the window.
    pub last_seen_ms: Option<u64>,
    /// Why Prometheus's last scrape of it failed, in Prometheus's words, while it is down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub gpus: u32,
    pub free_gpus: u32,
    /// GPUs held and working (or otherwise not free: unhealthy), neither stale, lost nor reserved.
    #[serde(default)]
    pub busy_gpus: u32,
    /// GPUs held at 0% utilization now ("held idle").
    #[serde(default)]
    pub idle_gpus: u32,
    /// GPUs that fell off the bus.
    #[serde(default)]
    pub lost_gpus: u32,
    /// GPUs under a reservation now (and not free for that).
    #[serde(default)]
    pub reserved_gpus: u32,
    /// GPUs whose figures are not current (not lost).
    #[serde(default)]
    pub stale_gpus: u32,
    /// Who holds its GPUs now, sorted, without repeats.
    #[serde(default)]
    pub owners: Vec<String>,
}

/// What serves a node's metrics.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// gpudash (it exports `gpudash_info`): users per GPU, a dashboard to link to.
    Gpudash,
    /// Anything else exporting dcgm-exporter's `DCGM_FI_DEV_*` names.
    #[default]
    DcgmExporter,
}

/// One GPU of the fleet.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FleetGpu {
    /// Prometheus's `instance` label of its node.
    pub instance: String,
    pub hostname: String,
    /// Index on its node (the `gpu` label).
    pub gpu: u32,
    pub uuid: Option<String>,
    /// The `modelName` label, e.g. "NVIDIA H200".
    pub model: Option<String>,
    /// Percent.
    pub gpu_util: Option<f64>,
    /// Bytes.
    pub memory_used: Option<u64>,
    /// Bytes: used + free + reserved.
    pub memory_total: Option<u64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
    /// Who holds it: per user, biggest first. `Some(empty)` means nobody; `None` means the
    /// node cannot tell (dcgm-exporter without pod labels, or a stale node).
    pub users: Option<Vec<FleetUser>>,
    /// Free by `shared::usability::is_free`: healthy, and no process on it (gpudash), or for
    /// nodes without process data under 1% memory used and 0% utilization. Never free when
    /// stale, lost, unhealthy or reserved.
    pub free: bool,
    /// Its critical fault in words ("XID 79", "ECC: 2 uncorrected", "lost"), by
    /// `shared::usability::unhealthy` over what Prometheus holds of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy: Option<String>,
    /// The holder of the reservation in force on it (gpudash's `gpudash_reservation_active`;
    /// "reserved" when the node hides names). Advisory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_by: Option<String>,
    /// Its node is stale, or this GPU's series stopped while the node still answers.
    pub stale: bool,
    /// gpudash reports it fell off the bus.
    pub lost: bool,
    pub simulated: bool,
}

impl FleetGpu {
    /// What the GPU counts as, for its host's line and its own row (each GPU counts once), in the
    /// order the page's words take (lost before stale, stale before reserved). Held idle here is
    /// held at 0% utilization now: the Fleet sees no idle flags. A GPU held but not free by its
    /// figures (`fleet::usable::held` on the server) is busy.
    pub fn state(&self) -> crate::activity::GpuState {
        use crate::activity::GpuState;
        let held = self.users.as_ref().is_some_and(|users| !users.is_empty());
        if self.lost {
            GpuState::Lost
        } else if self.stale {
            GpuState::Stale
        } else if self.free {
            GpuState::Free
        } else if self.reserved_by.is_some() {
            GpuState::Reserved
        } else if held && self.gpu_util.is_some_and(|u| u <= 0.0) && self.unhealthy.is_none() {
            GpuState::HeldIdle
        } else {
            GpuState::Busy
        }
    }
}

/// One user's share of one GPU.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FleetUser {
    /// User name (gpudash), or "namespace/pod" (dcgm-exporter on Kubernetes).
    pub user: String,
    /// Device memory the user's processes hold, bytes; `None` when the exporter does not say.
    pub memory: Option<u64>,
    pub processes: u32,
}

/// Counts over the whole fleet.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FleetSummary {
    pub nodes: u32,
    pub stale_nodes: u32,
    pub gpus: u32,
    pub free_gpus: u32,
    /// The per-node counts of [`FleetNode`], summed.
    #[serde(default)]
    pub busy_gpus: u32,
    #[serde(default)]
    pub idle_gpus: u32,
    #[serde(default)]
    pub lost_gpus: u32,
    #[serde(default)]
    pub reserved_gpus: u32,
    #[serde(default)]
    pub stale_gpus: u32,
}

/// Which GPUs `GET /api/fleet` lists: `gpus=all` (the default: every GPU that passes the
/// filters) or `gpus=none` (hosts and counts only: the page's first answer, small at any size;
/// a host's GPUs come from `GET /api/fleet/host/{instance}`).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum FleetGpus {
    #[default]
    All,
    None,
}

/// The query string of `GET /api/fleet` besides the filters.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FleetListing {
    #[serde(default)]
    pub gpus: FleetGpus,
}

/// Distinct values for the filter pickers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct FleetChoices {
    pub hosts: Vec<String>,
    pub models: Vec<String>,
    pub users: Vec<String>,
}

/// Filters of `GET /api/fleet?host=…&model=…&user=…&free=true`: case-insensitive substrings.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct FleetFilter {
    /// Matches the host name or the instance.
    pub host: Option<String>,
    pub model: Option<String>,
    /// Matches any user on the GPU.
    pub user: Option<String>,
    /// Only free GPUs.
    #[serde(default)]
    pub free: bool,
}

impl FleetFilter {
    /// Whether `gpu` passes every filter given.
    pub fn matches(&self, gpu: &FleetGpu) -> bool {
        let has = |haystack: &str, needle: &str| haystack.to_lowercase().contains(&needle.to_lowercase());
        let host_ok = self.host.as_deref().is_none_or(|h| has(&gpu.hostname, h) || has(&gpu.instance, h));
        let model_ok = self.model.as_deref().is_none_or(|m| gpu.model.as_deref().is_some_and(|model| has(model, m)));
        let user_ok = self
            .user
            .as_deref()
            .is_none_or(|u| gpu.users.as_ref().is_some_and(|users| users.iter().any(|user| has(&user.user, u))));
        host_ok && model_ok && user_ok && (!self.free || gpu.free)
    }

    /// Whether `node`, a node without GPU figures (its target is down), passes: only the host
    /// filter can say anything of it, so any other filter leaves it out.
    pub fn matches_node(&self, node: &FleetNode) -> bool {
        let has = |haystack: &str, needle: &str| haystack.to_lowercase().contains(&needle.to_lowercase());
        let host_ok = self.host.as_deref().is_none_or(|h| has(&node.hostname, h) || has(&node.instance, h));
        host_ok && self.model.is_none() && self.user.is_none() && !self.free
    }

    /// True when no filter is set.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(host: &str, model: &str, users: Option<&[&str]>, free: bool) -> FleetGpu {
        FleetGpu {
            instance: format!("{host}:7070"),
            hostname: host.to_owned(),
            gpu: 0,
            uuid: None,
            model: Some(model.to_owned()),
            gpu_util: None,
            memory_used: None,
            memory_total: None,
            temperature_c: None,
            power_w: None,
            users: users.map(|u| {
                u.iter().map(|name| FleetUser { user: (*name).to_owned(), memory: None, processes: 1 }).collect()
            }),
            free,
            unhealthy: None,
            reserved_by: None,
            stale: false,
            lost: false,
            simulated: false,
        }
    }

    #[test]
    fn hiding_people_keeps_the_shares_and_drops_the_names() {
        let mut fleet = FleetResponse {
            prometheus: String::new(),
            queried_ms: 0,
            query_ms: 0,
            error: None,
            window_ms: 0,
            nodes: Vec::new(),
            gpus: vec![gpu("node-a", "H200", Some(&["ana", "bo"]), false), gpu("node-b", "H200", None, true)],
            summary: FleetSummary::default(),
            choices: FleetChoices { users: vec!["ana".into(), "bo".into()], ..FleetChoices::default() },
            warnings: Vec::new(),
        };
        fleet.hide_people();
        let users = fleet.gpus[0].users.as_ref().unwrap();
        assert_eq!(users.len(), 2);
        assert!(users.iter().all(|u| u.user == crate::lab::HIDDEN_REQUESTER));
        assert!(fleet.gpus[1].users.is_none() && fleet.choices.users.is_empty());
    }

    #[test]
    fn filters_are_case_insensitive_substrings() {
        let a = gpu("node-a", "NVIDIA H200", Some(&["ana", "bo"]), false);
        let b = gpu("node-b", "NVIDIA A100-SXM4-80GB", None, true);
        let by_host = FleetFilter { host: Some("NODE-A".to_owned()), ..FleetFilter::default() };
        assert!(by_host.matches(&a) && !by_host.matches(&b));
        let by_model = FleetFilter { model: Some("a100".to_owned()), ..FleetFilter::default() };
        assert!(!by_model.matches(&a) && by_model.matches(&b));
        let by_user = FleetFilter { user: Some("bo".to_owned()), ..FleetFilter::default() };
        assert!(by_user.matches(&a) && !by_user.matches(&b), "a node without users never matches a user filter");
        let free = FleetFilter { free: true, ..FleetFilter::default() };
        assert!(!free.matches(&a) && free.matches(&b));
        assert!(FleetFilter::default().is_empty() && FleetFilter::default().matches(&a));
    }
}
