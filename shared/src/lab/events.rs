//! The lab as viewers see it: the queue, each GPU's pool, the status body of
//! `GET /api/lab`, and the events pushed over `/ws`.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::{ExperimentKind, ExperimentParams, Progress, RunSummary};
use crate::tagged::{leading_tag, rest};

/// A run waiting or running, as the queue shows it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct QueueEntry {
    pub run: RunSummary,
    /// 0 for the running one, then 1, 2, … in order per GPU.
    pub position: u32,
    pub progress: Option<Progress>,
}

/// The lab's state on one GPU.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabDevice {
    pub index: u32,
    /// True while the lab holds a CUDA context (and its pool) on the GPU.
    pub context_open: bool,
    /// Bytes the lab's pool holds from the driver, and how many of them are in use.
    pub pool_reserved: u64,
    pub pool_used: u64,
    /// Runs queued or running that occupy this GPU, whether [`LabStatus::queue`] lists them or not.
    pub pending: u32,
}

/// Most waiting runs one [`LabStatus`] lists: the rest are only counted ([`LabStatus::unlisted`]), so a
/// status event stays small however long the queue (`GET /api/runs?status=queued` lists every run).
pub const QUEUE_LISTED: usize = 20;

/// Body of `GET /api/lab`, and the WebSocket's `lab` snapshot.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LabStatus {
    /// False when experiments cannot run here; `reason` says why.
    pub available: bool,
    pub reason: Option<String>,
    pub simulated: bool,
    pub devices: Vec<LabDevice>,
    /// Every running run and the first [`QUEUE_LISTED`] waiting ones (the next to start on each GPU
    /// first), in order per GPU.
    pub queue: Vec<QueueEntry>,
    /// Runs queued or running on all GPUs, listed in `queue` or not.
    pub queue_total: u32,
    /// Most runs one user may have queued or running at once (`--lab-queue-per-user`).
    pub queue_per_user: u32,
    /// Hard limit on one run, ms; idle time after which the lab releases the GPU, ms.
    pub time_limit_ms: u64,
    pub idle_release_ms: u64,
}

impl LabStatus {
    /// Runs queued that `queue` does not list ("… and 980 more").
    pub fn unlisted(&self) -> u32 {
        self.queue_total.saturating_sub(u32::try_from(self.queue.len()).unwrap_or(u32::MAX))
    }
}

/// Body of `POST /api/lab/devices/{index}/empty_cache`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct TrimOutcome {
    pub device: u32,
    pub reserved_before: u64,
    pub reserved_after: u64,
    /// Bytes handed back to the driver.
    pub released_bytes: u64,
}

fn one() -> u32 {
    1
}

/// An experiment described for the page's forms (`GET /api/lab/experiments`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ExperimentInfo {
    pub kind: ExperimentKind,
    pub title: String,
    pub description: String,
    /// What it measures in PyTorch's words: a short script the page shows with a copy button.
    #[serde(default)]
    pub snippet: String,
    pub defaults: ExperimentParams,
    /// The form's inputs, in the order the page shows them; their values start at `defaults`.
    #[serde(default)]
    pub fields: Vec<super::FieldSpec>,
    /// Runs on several GPUs at once (p2p, collectives): the page puts such a run to the server and asks
    /// before queueing it.
    #[serde(default)]
    pub multi_gpu: bool,
    /// The fewest GPUs the server must have for the page to offer it (p2p: 2).
    #[serde(default = "one")]
    pub min_gpus: u32,
    /// Why it cannot run on this server (e.g. NCCL not found, with where gpudash looked and how to point
    /// at it; or the lab's own reason, such as no GPU); `None` when it can. The page lists it greyed out
    /// with this sentence rather than hiding it.
    #[serde(default)]
    pub unavailable: Option<String>,
}

/// What the lab pushes over `/ws` inside `{"type":"lab", ...}`, tagged by `"event"`
/// right after: `{"type":"lab","event":"run",…}`. (Decoded tag first: see [`crate::tagged`].)
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LabEvent {
    /// The whole lab state: sent on connect, after a client fell behind, and whenever the queue changes.
    Status(LabStatus),
    /// A run changed state (queued, started, finished). Fetch `/api/runs/{id}` for its result.
    Run(RunSummary),
    /// A running run moved on.
    Progress { id: u64, device: u32, progress: Progress },
    /// The lab's pool on a GPU was trimmed (empty_cache, or released after idling).
    Trimmed(TrimOutcome),
}

impl LabEvent {
    /// Leaves out who asked for the runs it names; false when it names nobody.
    pub fn hide_people(&mut self) -> bool {
        match self {
            LabEvent::Status(status) => {
                status.queue.iter_mut().for_each(|entry| entry.run.hide_requester());
                !status.queue.is_empty()
            }
            LabEvent::Run(summary) => {
                summary.hide_requester();
                true
            }
            LabEvent::Progress { .. } | LabEvent::Trimmed(_) => false,
        }
    }
}

impl<'de> Deserialize<'de> for LabEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Event {
            Status,
            Run,
            Progress,
            Trimmed,
        }
        #[derive(Deserialize)]
        struct ProgressFields {
            id: u64,
            device: u32,
            progress: Progress,
        }
        struct TagFirst;
        impl<'de> Visitor<'de> for TagFirst {
            type Value = LabEvent;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a lab event: an object whose first key is \"event\"")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LabEvent, A::Error> {
                let event = leading_tag(&mut map, "event")?;
                let rest = rest(map);
                Ok(match event {
                    Event::Status => LabEvent::Status(LabStatus::deserialize(rest)?),
                    Event::Run => LabEvent::Run(RunSummary::deserialize(rest)?),
                    Event::Progress => {
                        let ProgressFields { id, device, progress } = ProgressFields::deserialize(rest)?;
                        LabEvent::Progress { id, device, progress }
                    }
                    Event::Trimmed => LabEvent::Trimmed(TrimOutcome::deserialize(rest)?),
                })
            }
        }
        deserializer.deserialize_map(TagFirst)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lab_events_are_tagged() {
        let e = LabEvent::Progress { id: 3, device: 0, progress: Progress { fraction: 0.5, message: "x".into() } };
        let json = serde_json::to_string(&e).unwrap();
        assert!(json.starts_with(r#"{"event":"progress","id":3"#), "{json}");
        assert_eq!(serde_json::from_str::<LabEvent>(&json).unwrap(), e);
    }
}
