//! `use_bridge()`: the PyTorch processes attached through `gpudash.attach()`
//! (`GET /api/bridge`, summaries), reloaded every 2 s while the dashboard is shown;
//! one process's whole allocator map (`GET /api/bridge/{id}`), and their remote
//! `empty_cache` requests.

use std::time::Duration;

use leptos::{logging, prelude::*, task::spawn_local};
use shared::allocator::MapRequestState;
use shared::bridge::{AttachedProcess, EmptyCacheState};

use super::{
    api::{ApiFailure, get_json, post_json},
    poll::use_poll,
};

/// How often the list is reloaded while the dashboard is shown.
const BRIDGE_PERIOD: Duration = Duration::from_secs(2);

/// The attached processes as last listed.
#[derive(Debug, Clone, Copy)]
pub struct Bridge {
    pub processes: RwSignal<Vec<AttachedProcess>>,
    pub error: RwSignal<Option<String>>,
}

/// Starts reloading the list while `shown` holds.
pub fn use_bridge(shown: Memo<bool>) -> Bridge {
    let bridge = Bridge { processes: RwSignal::new(Vec::new()), error: RwSignal::new(None) };
    use_poll(shown, BRIDGE_PERIOD, move || spawn_local(bridge.reload()));
    bridge
}

impl Bridge {
    async fn reload(self) {
        match get_json::<Vec<AttachedProcess>>("/api/bridge").await {
            Ok(list) => {
                self.processes.try_set(list);
                self.error.try_set(None);
            }
            Err(failure) => {
                logging::warn!("gpudash: /api/bridge: {}", failure.message);
                self.error.try_set(Some(failure.message));
            }
        }
    }

    /// `GET /api/bridge/{id}`: one process with its whole allocator map (the list carries only its totals).
    pub async fn detail(self, id: u64) -> Result<AttachedProcess, ApiFailure> {
        get_json(&format!("/api/bridge/{id}")).await
    }

    /// `POST /api/bridge/{id}/empty_cache`: the request is handed to the process with its next report.
    pub async fn empty_cache(self, id: u64) -> Result<(), ApiFailure> {
        let pending: EmptyCacheState = post_json(&format!("/api/bridge/{id}/empty_cache"), None).await?;
        self.processes.try_update(|list| {
            if let Some(process) = list.iter_mut().find(|p| p.id == id) {
                process.empty_cache = Some(pending);
            }
        });
        Ok(())
    }

    /// `POST /api/bridge/{id}/allocator_map`: the process sends a map after its next report.
    pub async fn request_map(self, id: u64) -> Result<(), ApiFailure> {
        let pending: MapRequestState = post_json(&format!("/api/bridge/{id}/allocator_map"), None).await?;
        self.processes.try_update(|list| {
            if let Some(process) = list.iter_mut().find(|p| p.id == id) {
                process.map_request = Some(pending);
            }
        });
        Ok(())
    }
}
