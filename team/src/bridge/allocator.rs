//! Allocator maps and out-of-memory errors of attached processes: what one process keeps
//! (its latest map, a "Refresh map" request on its way, its last few OOMs), how often it may
//! send, and the registry's side of `POST /api/bridge/allocator`.

use std::collections::VecDeque;

use shared::allocator::{AllocatorReport, AllocatorView, DeviceMap, MapReason, MapRequestState, OomRecord};
use shared::bridge::Command;

use super::attached::MapDetail;
use super::{BridgeError, Registry, Reporter};

/// Maps one process may send: at most one per this many ms (an OOM's map aside)...
pub const MAP_SPACING_MS: u64 = 200;
/// ...and out-of-memory reports, at most this many a minute.
pub const OOMS_PER_MINUTE: usize = 12;
/// Out-of-memory errors kept per process, newest last.
pub const OOMS_KEPT: usize = 8;

/// What the registry keeps of a process's allocator.
#[derive(Debug, Default)]
pub(super) struct AllocatorState {
    latest: Option<AllocatorView>,
    last_map_ms: Option<u64>,
    /// A "Refresh map" waiting for the next report.
    pending: Option<u64>,
    request: Option<MapRequestState>,
    ooms: VecDeque<OomRecord>,
    /// When the OOM reports of the last minute arrived.
    oom_times: VecDeque<u64>,
}

/// An accepted map: the process's id, and the OOM it reported, if any.
#[derive(Debug)]
pub struct MapAccepted {
    pub id: u64,
    pub oom: Option<OomRecord>,
}

/// The newest out-of-memory error of a process the server still hears from.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentOom {
    pub pid: u32,
    /// Whose process it is (the PID's Unix user, or who attached it when this host does not show it).
    pub owner: String,
    /// The token user whose report attached it.
    pub reporter: String,
    /// The device's UUID, as the process's latest report gave it.
    pub gpu_uuid: Option<String>,
    pub record: OomRecord,
}

impl AllocatorState {
    /// Takes a map (refusing one that comes too soon), keeping its OOM; returns that OOM.
    fn take(&mut self, report: AllocatorReport, now_ms: u64) -> Result<Option<OomRecord>, BridgeError> {
        if let Some(oom) = report.oom {
            while self.oom_times.front().is_some_and(|t| now_ms.saturating_sub(*t) >= 60_000) {
                self.oom_times.pop_front();
            }
            if self.oom_times.len() >= OOMS_PER_MINUTE {
                return Err(BridgeError::TooFast(format!(
                    "at most {OOMS_PER_MINUTE} out-of-memory reports a minute per process"
                )));
            }
            self.oom_times.push_back(now_ms);
            let totals = report.maps.iter().find(|m| m.device == oom.device).map(|m| m.totals).unwrap_or_default();
            let record = OomRecord { at_ms: now_ms, device: oom.device, requested_bytes: oom.requested_bytes, totals };
            if self.ooms.len() == OOMS_KEPT {
                self.ooms.pop_front();
            }
            self.ooms.push_back(record);
        } else if self.last_map_ms.is_some_and(|last| now_ms.saturating_sub(last) < MAP_SPACING_MS) {
            return Err(BridgeError::TooFast(format!(
                "at most one allocator map every {MAP_SPACING_MS} ms per process"
            )));
        }
        if report.reason == MapReason::Requested
            && let Some(request) = self.request.as_mut().filter(|r| r.done_ms.is_none())
        {
            request.done_ms = Some(now_ms);
        }
        self.last_map_ms = Some(now_ms);
        let record = report.oom.and(self.ooms.back().copied());
        self.latest =
            Some(AllocatorView { reason: report.reason, taken_ms: now_ms, cost_ms: report.cost_ms, maps: report.maps });
        Ok(record)
    }

    /// The "Refresh map" to hand over with this report's answer, if the process shares its map.
    pub(super) fn hand_over(&mut self, shares: bool) -> Option<Command> {
        let id = self.pending.take()?;
        shares.then_some(Command::AllocatorMap { id })
    }

    /// The page's view: the latest map (whole, or each device's totals only), the request, the OOMs.
    pub(super) fn view(&self, map: MapDetail) -> (Option<AllocatorView>, Option<MapRequestState>, Vec<OomRecord>) {
        let latest = self.latest.as_ref().map(|view| match map {
            MapDetail::Whole => view.clone(),
            MapDetail::Totals => AllocatorView {
                reason: view.reason,
                taken_ms: view.taken_ms,
                cost_ms: view.cost_ms,
                maps: view.maps.iter().map(totals_only).collect(),
            },
        });
        (latest, self.request, self.ooms.iter().copied().collect())
    }

    /// The newest OOM, when there is one.
    pub(super) fn newest_oom(&self) -> Option<OomRecord> {
        self.ooms.back().copied()
    }
}

/// A device's map without its segments and histogram: what the list carries.
fn totals_only(map: &DeviceMap) -> DeviceMap {
    DeviceMap { device: map.device, segments: Vec::new(), other: None, free_histogram: Vec::new(), totals: map.totals }
}

impl Registry {
    /// Takes `by`'s allocator map for a process they may report for (as [`Registry::report`]).
    pub fn allocator_report(
        &self,
        by: &Reporter,
        pid_owner: Option<&str>,
        report: AllocatorReport,
        now_ms: u64,
    ) -> Result<MapAccepted, BridgeError> {
        super::validate::validate_map(&report)?;
        let mut inner = self.lock();
        inner.expire(now_ms);
        let key = (report.host.clone(), report.pid);
        inner.admit(&key, by, pid_owner)?;
        let Some(entry) = inner.processes.get_mut(&key) else {
            return Err(BridgeError::NotAttached { pid: report.pid, host: report.host });
        };
        if entry.owner != by.user && !by.admin {
            return Err(BridgeError::NotOwner {
                pid: report.pid,
                host: report.host,
                owner: entry.owner.clone(),
                audit: false,
            });
        }
        let oom = entry.allocator.take(report, now_ms)?;
        Ok(MapAccepted { id: entry.id, oom })
    }

    /// Asks process `id` for a map with its next report.
    pub fn request_map(&self, id: u64, now_ms: u64) -> Result<MapRequestState, BridgeError> {
        let mut inner = self.lock();
        inner.expire(now_ms);
        let request_id = inner.next_id + 1;
        let process = inner.processes.values_mut().find(|p| p.id == id).ok_or(BridgeError::NoProcess(id))?;
        if !process.report.share_allocator_map {
            return Err(BridgeError::MapNotShared(process.report.pid));
        }
        if process.is_stale(now_ms) {
            return Err(BridgeError::Stale(process.report.pid));
        }
        let state = MapRequestState { id: request_id, requested_ms: now_ms, done_ms: None };
        process.allocator.pending = Some(request_id);
        process.allocator.request = Some(state);
        inner.next_id = request_id;
        Ok(state)
    }

    /// The newest OOM of every process that still reports (a stale one's OOM alert resolves).
    pub fn recent_ooms(&self, now_ms: u64) -> Vec<RecentOom> {
        let inner = self.lock();
        inner
            .processes
            .values()
            .filter(|p| !p.is_stale(now_ms))
            .filter_map(|p| {
                let record = p.allocator.newest_oom()?;
                let gpu_uuid = p.report.devices.iter().find(|d| d.device == record.device).and_then(|d| d.uuid.clone());
                Some(RecentOom {
                    pid: p.report.pid,
                    owner: p.owner.clone(),
                    reporter: p.reporter.clone(),
                    gpu_uuid,
                    record,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use shared::allocator::{DeviceMap, MapTotals, OomEvent};
    use shared::bridge::Report;

    use super::*;

    fn attach(registry: &Registry, share: bool) -> u64 {
        registry.report(&Reporter::user("ana"), None, report(share), 0).unwrap().id
    }

    fn report(share: bool) -> Report {
        serde_json::from_value(serde_json::json!({
            "version": 1, "pid": 9, "host": "node", "process_name": "p", "torch_version": "2", "cuda_version": null,
            "interval_s": 1.0, "allow_remote_empty_cache": false, "share_allocator_map": share,
            "devices": [{"device": 0, "uuid": "GPU-a", "allocated": 0, "allocated_peak": 0, "reserved": 0,
                         "reserved_peak": 0, "active": 0, "inactive_split": 0, "alloc_retries": 0, "ooms": 0}]
        }))
        .unwrap()
    }

    fn map(reason: MapReason, oom: Option<OomEvent>) -> AllocatorReport {
        AllocatorReport {
            version: 1,
            pid: 9,
            host: "node".into(),
            reason,
            taken_ms: 0,
            cost_ms: 0.5,
            maps: vec![DeviceMap {
                device: 0,
                segments: vec![],
                other: None,
                free_histogram: vec![],
                totals: MapTotals::default(),
            }],
            oom,
        }
    }

    #[test]
    fn maps_are_spaced_requests_handed_over_and_ooms_kept() {
        let registry = Registry::default();
        let periodic = map(MapReason::Periodic, None);
        assert!(matches!(
            registry.allocator_report(&Reporter::user("ana"), None, periodic.clone(), 0),
            Err(BridgeError::NotAttached { .. })
        ));
        let id = attach(&registry, true);
        registry.allocator_report(&Reporter::user("ana"), None, periodic.clone(), 1_000).unwrap();
        assert!(matches!(
            registry.allocator_report(&Reporter::user("ana"), None, periodic.clone(), 1_100),
            Err(BridgeError::TooFast(_))
        ));
        assert!(matches!(
            registry.allocator_report(&Reporter::user("bob"), None, periodic, 2_000),
            Err(BridgeError::NotOwner { .. })
        ));
        let request = registry.request_map(id, 1_200).unwrap();
        let answer = registry.report(&Reporter::user("ana"), None, report(true), 1_300).unwrap().answer;
        assert_eq!(answer.commands, [Command::AllocatorMap { id: request.id }]);
        registry.allocator_report(&Reporter::user("ana"), None, map(MapReason::Requested, None), 1_400).unwrap();
        let oom = Some(OomEvent { device: 0, requested_bytes: Some(1 << 30) });
        // An OOM's map is never refused for coming right after another.
        let accepted =
            registry.allocator_report(&Reporter::user("ana"), None, map(MapReason::Oom, oom), 1_450).unwrap();
        assert_eq!(accepted.oom.unwrap().requested_bytes, Some(1 << 30));
        let listed = &registry.list(&[], &[], 1_500)[0];
        assert_eq!(listed.map_request.unwrap().done_ms, Some(1_400));
        assert_eq!(listed.allocator.as_ref().unwrap().reason, MapReason::Oom);
        assert_eq!(listed.ooms.len(), 1);
        let recent = registry.recent_ooms(1_500);
        assert_eq!((recent[0].pid, recent[0].gpu_uuid.as_deref()), (9, Some("GPU-a")));
        assert!(registry.recent_ooms(60_000).is_empty(), "a process that stopped reporting has none");
    }

    #[test]
    fn a_process_that_does_not_share_its_map_cannot_be_asked() {
        let registry = Registry::default();
        let id = attach(&registry, false);
        assert_eq!(registry.request_map(id, 10), Err(BridgeError::MapNotShared(9)));
        assert_eq!(registry.request_map(id + 1, 10), Err(BridgeError::NoProcess(id + 1)));
    }

    #[test]
    fn ooms_are_rate_limited_and_bounded() {
        let registry = Registry::default();
        attach(&registry, true);
        let oom = || map(MapReason::Oom, Some(OomEvent { device: 0, requested_bytes: None }));
        for i in 0..OOMS_PER_MINUTE as u64 {
            registry.allocator_report(&Reporter::user("ana"), None, oom(), i).unwrap();
        }
        assert!(matches!(
            registry.allocator_report(&Reporter::user("ana"), None, oom(), 100),
            Err(BridgeError::TooFast(_))
        ));
        registry.allocator_report(&Reporter::user("ana"), None, oom(), 61_000).unwrap();
        assert_eq!(registry.detail(1, &[], &[], 61_000).unwrap().ooms.len(), OOMS_KEPT);
    }
}
