//! What an audit entry records someone doing. Stored and sent by its id
//! ("experiment.start"), which the page and `GET /api/audit?action=` filter on.

/// An action the audit log records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// A login with a token (denied ones are aggregated).
    Login,
    /// A request with a wrong `Authorization: Bearer` token (aggregated).
    AuthBearer,
    ExperimentStart,
    ExperimentCancel,
    /// Trimming the lab's memory pool on a GPU.
    EmptyCache,
    AuditRead,
    /// A report for a PyTorch process someone else attached.
    BridgeReport,
    /// A PyTorch process's first report.
    BridgeAttach,
    /// A PyTorch process changed `allow_remote_empty_cache`.
    BridgeConsent,
    /// A remote `empty_cache` requested, handed over, withheld or done.
    BridgeEmptyCache,
    /// An allocator map requested from a PyTorch process ("Refresh map"), or an out-of-memory error it reported.
    BridgeAllocatorMap,
    /// Silencing an alert rule on a GPU for a while.
    AlertSilence,
    /// Ending a silence before its time.
    AlertUnsilence,
    /// Sending SIGTERM or SIGKILL to a GPU process (`--allow-signals`), sent or refused.
    ProcessSignal,
    /// Booking GPUs (advisory).
    ReservationCreate,
    /// Ending a reservation before its time.
    ReservationRelease,
    /// The auth file (or the web config file) re-read on SIGHUP: its tokens (accounts) put in force, or the file refused.
    AuthReload,
    /// A scrape of `/metrics` with a wrong `--web-config-file` password (aggregated).
    MetricsScrape,
    /// Someone switched their job notices or digest on or off.
    JobNotices,
    /// An admin sent the job digests now.
    JobDigest,
}

impl Action {
    pub const ALL: [Self; 20] = [
        Self::Login,
        Self::AuthBearer,
        Self::ExperimentStart,
        Self::ExperimentCancel,
        Self::EmptyCache,
        Self::AuditRead,
        Self::BridgeReport,
        Self::BridgeAttach,
        Self::BridgeConsent,
        Self::BridgeEmptyCache,
        Self::BridgeAllocatorMap,
        Self::AlertSilence,
        Self::AlertUnsilence,
        Self::ProcessSignal,
        Self::ReservationCreate,
        Self::ReservationRelease,
        Self::AuthReload,
        Self::MetricsScrape,
        Self::JobNotices,
        Self::JobDigest,
    ];

    /// The id stored in the log and sent in [`shared::auth::AuditEntry::action`].
    pub const fn id(self) -> &'static str {
        match self {
            Self::Login => "login",
            Self::AuthBearer => "auth.bearer",
            Self::ExperimentStart => "experiment.start",
            Self::ExperimentCancel => "experiment.cancel",
            Self::EmptyCache => "empty_cache",
            Self::AuditRead => "audit.read",
            Self::BridgeReport => "bridge.report",
            Self::BridgeAttach => "bridge.attach",
            Self::BridgeConsent => "bridge.consent",
            Self::BridgeEmptyCache => "bridge.empty_cache",
            Self::BridgeAllocatorMap => "bridge.allocator_map",
            Self::AlertSilence => "alert.silence",
            Self::AlertUnsilence => "alert.unsilence",
            Self::ProcessSignal => "process.signal",
            Self::ReservationCreate => "reservation.create",
            Self::ReservationRelease => "reservation.release",
            Self::AuthReload => "auth.reload",
            Self::MetricsScrape => "metrics.scrape",
            Self::JobNotices => "jobs.notices",
            Self::JobDigest => "jobs.digest",
        }
    }

    /// How a refusal names the action: "{doing} needs the operator role".
    pub const fn doing(self) -> &'static str {
        match self {
            Self::Login => "logging in",
            Self::AuthBearer => "sending a token",
            Self::ExperimentStart => "running an experiment",
            Self::ExperimentCancel => "cancelling a run",
            Self::EmptyCache => "emptying the lab's cache",
            Self::AuditRead => "reading the audit log",
            Self::BridgeReport => "reporting a PyTorch process",
            Self::BridgeAttach => "attaching a PyTorch process",
            Self::BridgeConsent => "changing a PyTorch process's consent",
            Self::BridgeEmptyCache => "emptying a process's cache",
            Self::BridgeAllocatorMap => "asking a process for its allocator map",
            Self::AlertSilence => "silencing an alert",
            Self::AlertUnsilence => "ending a silence",
            Self::ProcessSignal => "signalling a process",
            Self::ReservationCreate => "reserving a GPU",
            Self::ReservationRelease => "releasing a reservation",
            Self::AuthReload => "reloading the auth or web config file",
            Self::MetricsScrape => "scraping /metrics",
            Self::JobNotices => "changing your job notices",
            Self::JobDigest => "sending the job digests",
        }
    }
}

impl Action {
    /// The action changes something on the server or a GPU (a run, a cache, a silence, a signal, a booking):
    /// `--read-only` refuses exactly these. Logging in, reading the audit log, reloading the tokens and a
    /// PyTorch process's own reports (what the dashboard shows) are not changes.
    pub const fn changes(self) -> bool {
        match self {
            Self::ExperimentStart
            | Self::ExperimentCancel
            | Self::EmptyCache
            | Self::BridgeEmptyCache
            | Self::BridgeAllocatorMap
            | Self::AlertSilence
            | Self::AlertUnsilence
            | Self::ProcessSignal
            | Self::ReservationCreate
            | Self::ReservationRelease
            | Self::JobNotices
            | Self::JobDigest => true,
            Self::Login
            | Self::AuthBearer
            | Self::AuditRead
            | Self::BridgeReport
            | Self::BridgeAttach
            | Self::BridgeConsent
            | Self::AuthReload
            | Self::MetricsScrape => false,
        }
    }

    /// The action of a stored id, if it is one.
    pub fn from_id(id: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.id() == id)
    }

    /// What someone did, in the past tense: "ran an experiment".
    pub const fn done(self) -> &'static str {
        match self {
            Self::Login => "logged in",
            Self::AuthBearer => "sent a token",
            Self::ExperimentStart => "ran an experiment",
            Self::ExperimentCancel => "cancelled a run",
            Self::EmptyCache => "emptied the lab's cache",
            Self::AuditRead => "read the audit log",
            Self::BridgeReport => "reported a PyTorch process",
            Self::BridgeAttach => "attached a PyTorch process",
            Self::BridgeConsent => "changed a PyTorch process's consent",
            Self::BridgeEmptyCache => "emptied a process's cache",
            Self::BridgeAllocatorMap => "asked a process for its allocator map",
            Self::AlertSilence => "silenced an alert",
            Self::AlertUnsilence => "ended a silence",
            Self::ProcessSignal => "signalled a process",
            Self::ReservationCreate => "reserved a GPU",
            Self::ReservationRelease => "released a reservation",
            Self::AuthReload => "reloaded the auth or web config file",
            Self::MetricsScrape => "scraped /metrics",
            Self::JobNotices => "changed their job notices",
            Self::JobDigest => "sent the job digests",
        }
    }
}

/// An audit entry in words: "ana ran an experiment (run 12)", "bob was refused
/// signalling a process (pid 4242)", "ana tried running an experiment (GPU 0); it failed".
pub fn summary(user: &str, action: &str, target: &str, outcome: shared::auth::AuditOutcome) -> String {
    use shared::auth::AuditOutcome;
    let target = if target.is_empty() { String::new() } else { format!(" ({target})") };
    match (Action::from_id(action), outcome) {
        (Some(a), AuditOutcome::Ok) => format!("{user} {}{target}", a.done()),
        (Some(a), AuditOutcome::Denied) => format!("{user} was refused {}{target}", a.doing()),
        (Some(a), AuditOutcome::Failed) => format!("{user} tried {}{target}; it failed", a.doing()),
        (None, outcome) => format!("{user}: {action}{target}, {}", outcome.name()),
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_dotted_lowercase() {
        let mut ids: Vec<&str> = Action::ALL.iter().map(|a| a.id()).collect();
        assert!(ids.iter().all(|id| id.chars().all(|c| c.is_ascii_lowercase() || c == '.' || c == '_')));
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), Action::ALL.len());
    }

    #[test]
    fn the_ids_stored_before_the_enum_are_kept() {
        assert_eq!(Action::ExperimentStart.id(), "experiment.start");
        assert_eq!(Action::BridgeEmptyCache.id(), "bridge.empty_cache");
        assert_eq!(Action::ExperimentCancel.doing(), "cancelling a run");
    }

    #[test]
    fn entries_read_as_sentences() {
        use shared::auth::AuditOutcome;
        assert_eq!(summary("ana", "experiment.start", "run 12", AuditOutcome::Ok), "ana ran an experiment (run 12)");
        assert_eq!(
            summary("bob", "process.signal", "pid 4242", AuditOutcome::Denied),
            "bob was refused signalling a process (pid 4242)"
        );
        assert_eq!(
            summary("ana", "experiment.start", "GPU 0", AuditOutcome::Failed),
            "ana tried running an experiment (GPU 0); it failed"
        );
        assert_eq!(summary("ana", "old.thing", "", AuditOutcome::Ok), "ana: old.thing, ok");
        assert!(Action::ALL.iter().all(|a| Action::from_id(a.id()) == Some(*a)));
    }
}
