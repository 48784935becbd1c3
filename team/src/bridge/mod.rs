//! The PyTorch bridge: attached training processes report their caching
//! allocator's figures and their spans; the registry joins them with NVML's
//! process rows and carries remote `empty_cache` requests back to them.

use std::collections::HashMap;
use std::sync::Mutex;

use shared::DeviceInfo;
use shared::bridge::{AttachedProcess, EmptyCacheState, Report, ReportAnswer};
use shared::processes::GpuProcess;

mod allocator;
mod attached;
mod owner;
mod spans;
mod validate;

pub use allocator::{MAP_SPACING_MS, MapAccepted, OOMS_PER_MINUTE, RecentOom};
use attached::{Attached, MapDetail};
pub use owner::{Reporter, pid_owner};
use validate::validate;

/// Newest spans per process in `GET /api/bridge` (for chart annotations).
const RECENT_SPANS_LISTED: usize = 20;
/// Newest spans per process in `GET /api/bridge/{id}`.
const RECENT_SPANS_DETAILED: usize = 200;
/// Attached processes one token user may have attached at once (on a server without tokens, everyone is one user).
pub const MAX_PER_USER: usize = 32;
/// Attached processes the server keeps at once, whoever reported them.
pub const MAX_TOTAL: usize = 256;
/// A process with no report for this long (or ten of its intervals, if longer) is dropped...
pub const EXPIRE_AFTER_MS: u64 = 10 * 60 * 1000;
/// ...but never later than this.
pub const EXPIRE_AFTER_MAX_MS: u64 = 60 * 60 * 1000;
/// Refused reports for someone else's process are audited at most this often per process.
const REFUSAL_AUDIT_EVERY_MS: u64 = 60_000;

/// Why a report or request was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BridgeError {
    #[error("{0}")]
    Invalid(String),
    #[error("no attached process with id {0}")]
    NoProcess(u64),
    #[error(
        "process {0} did not allow remote empty_cache; it must attach with gpudash.attach(..., allow_remote_empty_cache=True)"
    )]
    NotAllowed(u32),
    #[error("process {0} is stale (no report for a while): it would not see the request")]
    Stale(u32),
    #[error(
        "process {0} does not share its allocator map; it must attach with gpudash.attach(..., share_allocator_map=True)"
    )]
    MapNotShared(u32),
    #[error(
        "process {pid} on '{host}' is not attached: send its report (POST /api/bridge/report) before its allocator map"
    )]
    NotAttached { pid: u32, host: String },
    #[error("too many allocator reports: {0}")]
    TooFast(String),
    /// `audit`: this refusal should go to the audit log (not every retry does).
    #[error(
        "process {pid} on '{host}' was attached by '{owner}': only they may report for it (an entry with no report for 10 minutes expires)"
    )]
    NotOwner { pid: u32, host: String, owner: String, audit: bool },
    #[error(
        "process {pid} runs as Unix user '{owner}' on this host: only a token named '{owner}' or an admin may report for it, not '{user}'"
    )]
    NotPidOwner { pid: u32, owner: String, user: String },
    #[error(
        "'{user}' already has {MAX_PER_USER} attached processes, the most one user may have; a process that stops reporting is dropped after 10 minutes"
    )]
    TooManyForUser { user: String },
    #[error(
        "the server already keeps {MAX_TOTAL} attached processes, the most it holds; a process that stops reporting is dropped after 10 minutes"
    )]
    TooMany,
}

/// What a report changed that belongs in the audit log (periodic reports themselves do not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The first report of a process.
    Attached { process_name: String, allow_remote_empty_cache: bool },
    /// `allow_remote_empty_cache` changed.
    ConsentChanged { allow: bool },
    /// A queued empty_cache was handed to the process.
    Delivered { command: u64 },
    /// A queued empty_cache was not handed over: the report withdrew consent.
    Withheld { command: u64 },
    /// The process reported what a delivered empty_cache did.
    Done { command: u64, ok: bool, released_bytes: u64 },
}

/// An accepted report: the answer for the client, and what to audit.
#[derive(Debug)]
pub struct Accepted {
    /// The server's id of the process.
    pub id: u64,
    pub answer: ReportAnswer,
    pub notices: Vec<Notice>,
}

/// Every attached process, by (host, pid).
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    processes: HashMap<(String, u32), Attached>,
}

impl Inner {
    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn expire(&mut self, now_ms: u64) {
        self.processes.retain(|_, p| {
            let keep = !p.is_expired(now_ms);
            if !keep {
                tracing::info!(pid = p.report.pid, host = %p.report.host, "PyTorch process expired (no report)");
            }
            keep
        });
    }

    /// Refuses a new entry attached by `reporter` past either cap.
    fn check_caps(&self, reporter: &str) -> Result<(), BridgeError> {
        if self.processes.len() >= MAX_TOTAL {
            return Err(BridgeError::TooMany);
        }
        if self.processes.values().filter(|p| p.reporter == reporter).count() >= MAX_PER_USER {
            return Err(BridgeError::TooManyForUser { user: reporter.to_owned() });
        }
        Ok(())
    }

    /// Refuses `by`'s report for a process that runs as someone else on this host. An entry bound
    /// to another user than the PID's describes a process that is gone (its PID reused) or was
    /// claimed before it existed: it is dropped, whoever reports now.
    fn admit(&mut self, key: &(String, u32), by: &Reporter, pid_owner: Option<&str>) -> Result<(), BridgeError> {
        if let Some(owner) = pid_owner
            && let Some(entry) = self.processes.get(key).filter(|p| p.owner != owner)
        {
            tracing::info!(pid = key.1, host = %key.0, bound_to = %entry.owner, owner, "PyTorch process dropped: its PID runs as another user");
            self.processes.remove(key);
        }
        owner::check(by, key.1, pid_owner)
    }
}

impl Registry {
    /// Takes `by`'s report for a process that runs as `pid_owner` on this host ([`pid_owner`]; `None`
    /// when the host shows no such PID) and returns the commands waiting for that process.
    pub fn report(
        &self,
        by: &Reporter,
        pid_owner: Option<&str>,
        mut report: Report,
        now_ms: u64,
    ) -> Result<Accepted, BridgeError> {
        validate(&report)?;
        // Names a client sent are kept as the system's are: without controls or format characters.
        report.process_name = shared::text::shown(&report.process_name);
        for span in &mut report.spans {
            span.name = shared::text::shown(&span.name);
        }
        let mut inner = self.lock();
        inner.expire(now_ms);
        let key = (report.host.clone(), report.pid);
        inner.admit(&key, by, pid_owner)?;
        let mut notices = Vec::new();
        match inner.processes.get_mut(&key) {
            Some(entry) if entry.owner != by.user && !by.admin => {
                let audit =
                    entry.refusal_audited_ms.is_none_or(|last| now_ms.saturating_sub(last) >= REFUSAL_AUDIT_EVERY_MS);
                if audit {
                    entry.refusal_audited_ms = Some(now_ms);
                }
                return Err(BridgeError::NotOwner {
                    pid: report.pid,
                    host: report.host,
                    owner: entry.owner.clone(),
                    audit,
                });
            }
            Some(entry) => {
                if entry.report.allow_remote_empty_cache != report.allow_remote_empty_cache {
                    notices.push(Notice::ConsentChanged { allow: report.allow_remote_empty_cache });
                }
            }
            None => {
                inner.check_caps(&by.user)?;
                let id = inner.take_id();
                let owner = owner::bound_to(by, pid_owner);
                tracing::info!(pid = report.pid, host = %report.host, %owner, reporter = %by.user, "PyTorch process attached: {}", report.process_name);
                notices.push(Notice::Attached {
                    process_name: report.process_name.clone(),
                    allow_remote_empty_cache: report.allow_remote_empty_cache,
                });
                let entry = Attached::new(id, &owner, &by.user, &report, now_ms);
                inner.processes.insert(key.clone(), entry);
            }
        }
        let Some(entry) = inner.processes.get_mut(&key) else {
            return Err(BridgeError::Invalid("the process vanished while its report was stored".to_owned()));
        };
        let commands = entry.take(report, now_ms, &mut notices);
        Ok(Accepted { id: entry.id, answer: ReportAnswer { commands }, notices })
    }

    /// Queues an empty_cache for process `id`; it runs at the client's next report.
    pub fn request_empty_cache(&self, id: u64, now_ms: u64) -> Result<EmptyCacheState, BridgeError> {
        let mut inner = self.lock();
        inner.expire(now_ms);
        let command_id = inner.next_id + 1;
        let process = inner.processes.values_mut().find(|p| p.id == id).ok_or(BridgeError::NoProcess(id))?;
        if !process.report.allow_remote_empty_cache {
            return Err(BridgeError::NotAllowed(process.report.pid));
        }
        if process.is_stale(now_ms) {
            return Err(BridgeError::Stale(process.report.pid));
        }
        let state = EmptyCacheState {
            id: command_id,
            requested_ms: now_ms,
            done_ms: None,
            released_bytes: None,
            refused: false,
        };
        process.pending = Some(command_id);
        process.empty_cache = Some(state);
        inner.next_id = command_id;
        Ok(state)
    }

    /// Every attached process joined with NVML's rows for its PID, newest first: summaries, each
    /// allocator map cut to its totals (the whole map is in [`Registry::detail`]).
    pub fn list(&self, devices: &[DeviceInfo], nvml: &[GpuProcess], now_ms: u64) -> Vec<AttachedProcess> {
        let mut inner = self.lock();
        inner.expire(now_ms);
        let mut out: Vec<AttachedProcess> = inner
            .processes
            .values()
            .map(|p| p.view(devices, nvml, now_ms, RECENT_SPANS_LISTED, MapDetail::Totals))
            .collect();
        out.sort_by(|a, b| b.last_seen_ms.cmp(&a.last_seen_ms).then(a.pid.cmp(&b.pid)));
        out
    }

    /// One attached process with more of its recent spans and its whole allocator map.
    pub fn detail(
        &self,
        id: u64,
        devices: &[DeviceInfo],
        nvml: &[GpuProcess],
        now_ms: u64,
    ) -> Result<AttachedProcess, BridgeError> {
        let mut inner = self.lock();
        inner.expire(now_ms);
        let process = inner.processes.values().find(|p| p.id == id).ok_or(BridgeError::NoProcess(id))?;
        Ok(process.view(devices, nvml, now_ms, RECENT_SPANS_DETAILED, MapDetail::Whole))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        base::sync::lock(&self.inner)
    }
}

#[cfg(test)]
mod tests;
