//! Who uses which GPU: processes as NVML and /proc see them.

use serde::{Deserialize, Serialize};

use crate::severity::Condition;

/// Whether a process uses the GPU for compute (CUDA), graphics, or both.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ProcessKind {
    Compute,
    Graphics,
    Both,
}

/// A process holding a context on one GPU.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct GpuProcess {
    pub device: u32,
    /// Host PID (processes in containers appear with their host PID).
    pub pid: u32,
    pub kind: ProcessKind,
    /// Device memory the process holds, bytes (NVML: its CUDA context, caches and tensors).
    pub used_memory: Option<u64>,
    /// Percent of SM time over the last sampling window.
    pub sm_util: Option<u32>,
    /// When NVML last saw the process on the SMs, ms since the epoch.
    pub sm_util_seen_ms: Option<u64>,
    /// The process's Unix user: its name, or the numeric uid when it has no name; `None` when /proc
    /// hides the process. Inside a container this is usually root: see `owner`.
    pub user: Option<String>,
    /// Executable name, e.g. "python3".
    pub name: Option<String>,
    /// Full command line.
    pub command: Option<String>,
    /// When the process started, ms since the epoch.
    pub started_ms: Option<u64>,
    /// Its process group (the shell's job: a `torchrun` and its workers share one); `None` when
    /// /proc hides it. A job outside any container, pod or Slurm job is its group (`shared::jobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u32>,
    /// The container, pod or Slurm job it runs in, when it runs in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<crate::workload::Workload>,
    /// Whom it belongs to, by [`crate::workload::owner_of`]: what every team feature calls its user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<crate::workload::Owner>,
    /// True when the server left out who runs the process and what (see [`GpuProcess::redact`]):
    /// `user`, `owner`, `name`, `command` and `workload` are then unknown to the viewer, not absent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// Set while the process holds memory on a GPU that does nothing (`--idle-memory`, `--idle-after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<crate::idle::IdleHold>,
}

impl GpuProcess {
    /// Leaves out what names a person or their work: user, owner, executable, command line
    /// (it can hold secrets) and workload. What remains says that a GPU is busy and
    /// how much it holds: the view of an anonymous visitor to a server with tokens.
    /// The PID stays: it keeps rows and metric series apart and names no one.
    pub fn redact(&mut self) {
        // Every field is listed, so a new one cannot be added without deciding whether it names someone.
        let GpuProcess {
            device: _,
            pid: _,
            kind: _,
            used_memory: _,
            sm_util: _,
            sm_util_seen_ms: _,
            started_ms: _,
            group: _,
            idle: _,
            user,
            name,
            command,
            workload,
            owner,
            redacted,
        } = self;
        *user = None;
        *name = None;
        *command = None;
        *workload = None;
        *owner = None;
        *redacted = true;
    }
}

/// [`GpuProcess::redact`] applied to every process.
pub fn redact_all(processes: &mut [GpuProcess]) {
    processes.iter_mut().for_each(GpuProcess::redact);
}

/// One owner's share of the machine's GPUs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct UserUsage {
    /// The owner ([`GpuProcess::user_name`]); "unknown" for processes /proc does not show.
    pub user: String,
    /// GPU indexes the user has processes on, ascending.
    pub devices: Vec<u32>,
    /// Device memory held across all of them, bytes.
    pub memory: u64,
    pub processes: u32,
    /// Of `memory`, what processes flagged idle hold, bytes.
    #[serde(default)]
    pub idle_memory: u64,
}

/// What stands for the user of a process whose owner the server could not read.
pub const UNKNOWN_USER: &str = "unknown";

impl GpuProcess {
    /// Whom this process counts for in every team feature: its owner by the owner rule
    /// ([`crate::workload::owner_of`]), else its Unix user, else [`UNKNOWN_USER`].
    pub fn user_name(&self) -> &str {
        self.owner_name().unwrap_or(UNKNOWN_USER)
    }

    /// Its owner by the owner rule, else its Unix user; `None` when neither is known.
    pub fn owner_name(&self) -> Option<&str> {
        self.owner.as_ref().map(|o| o.name.as_str()).or(self.user.as_deref())
    }

    /// The Unix user, when it differs from [`GpuProcess::user_name`] (a container's root, a job's
    /// runner): shown beside the owner.
    pub fn unix_user_if_other(&self) -> Option<&str> {
        self.user.as_deref().filter(|u| *u != self.user_name())
    }

    /// The owner rule applied to what is known of this process: sets `owner`.
    pub fn apply_owner_rule(&mut self, owner_label: &str) {
        self.owner = crate::workload::owner_of(self.user.as_deref(), self.workload.as_ref(), owner_label);
    }
}

/// Sums processes per user, biggest memory first: the "who uses what" overview.
/// Redacted processes count for no one: who uses them is what was left out.
pub fn usage_by_user(processes: &[GpuProcess]) -> Vec<UserUsage> {
    let mut users: Vec<UserUsage> = Vec::new();
    for p in processes.iter().filter(|p| !p.redacted) {
        let name = p.user_name().to_owned();
        let entry = match users.iter().position(|u| u.user == name) {
            Some(i) => &mut users[i],
            None => {
                users.push(UserUsage { user: name, devices: Vec::new(), memory: 0, processes: 0, idle_memory: 0 });
                users.last_mut().expect("just pushed")
            }
        };
        if !entry.devices.contains(&p.device) {
            entry.devices.push(p.device);
            crate::order::sort(&mut entry.devices);
        }
        entry.memory += p.used_memory.unwrap_or(0);
        if p.idle.is_some() {
            entry.idle_memory += p.used_memory.unwrap_or(0);
        }
        entry.processes += 1;
    }
    crate::order::sort_by(&mut users, |a, b| b.memory.cmp(&a.memory).then_with(|| a.user.cmp(&b.user)));
    users
}

/// The free GPUs among `devices`, in the order given, each with its condition
/// ([`Condition::of`] its latest sample and health): by [`crate::usability::is_free`], a GPU is
/// free when no process holds it and nothing critical is wrong with it (it answers, no recent
/// hardware XID, no uncorrectable ECC error...).
pub fn free_devices<'a>(devices: impl IntoIterator<Item = (u32, &'a Condition)>, processes: &[GpuProcess]) -> Vec<u32> {
    devices
        .into_iter()
        .filter(|(index, condition)| {
            let held = processes.iter().any(|p| p.device == *index);
            crate::usability::is_free(condition, Some(held), false)
        })
        .map(|(index, _)| index)
        .collect()
}

/// A command line cut to `max` characters for a table cell, with an ellipsis.
pub fn shorten(command: &str, max: usize) -> String {
    if command.chars().count() <= max {
        return command.to_owned();
    }
    let mut out: String = command.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A signal gpudash sends to a GPU process (`POST /api/processes/{pid}/signal`).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// Asks the process to end: it may clean up, or ignore it.
    #[serde(rename = "SIGTERM")]
    Term,
    /// Ends the process at once; it cannot be caught.
    #[serde(rename = "SIGKILL")]
    Kill,
}

impl Signal {
    pub const ALL: [Signal; 2] = [Signal::Term, Signal::Kill];

    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "SIGTERM",
            Signal::Kill => "SIGKILL",
        }
    }

    /// `SIGTERM` or `SIGKILL`, exactly; anything else is refused (see [`SignalNameError`]).
    pub fn parse(name: &str) -> Result<Signal, SignalNameError> {
        Self::ALL.into_iter().find(|s| s.name() == name).ok_or_else(|| SignalNameError(shorten(name, 40)))
    }
}

/// A signal name gpudash does not send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a signal gpudash sends; send {{\"signal\": \"SIGTERM\"}} (asks the process to end) or {{\"signal\": \"SIGKILL\"}} (ends it at once)"
)]
pub struct SignalNameError(pub String);

/// Body of `POST /api/processes/{pid}/signal`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// `SIGTERM` or `SIGKILL`, checked with [`Signal::parse`].
    pub signal: String,
}

/// Answer of `POST /api/processes/{pid}/signal`: the signal went out; whether the process went away.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SignalAnswer {
    pub pid: u32,
    pub signal: Signal,
    /// Always true in an answer: a signal that was not sent is an error instead.
    pub sent: bool,
    /// The process was gone (or a zombie) within [`SIGNAL_WAIT_MS`] of the signal.
    pub exited: bool,
}

/// How long the server watches a signalled process go away before answering, ms.
pub const SIGNAL_WAIT_MS: u64 = 2_000;

/// Largest PID Linux hands out (`PID_MAX_LIMIT`, 2^22 on 64-bit systems).
pub const PID_MAX: u32 = 1 << 22;

/// Why a caller may not signal a process (the rule both the server and the page apply).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignalRefused {
    #[error("signalling a process needs the operator role (for your own processes) or admin; {who} has viewer")]
    Viewer { who: String },
    #[error(
        "an operator may signal only processes they own: PID {pid} belongs to '{owner}', not '{caller}'; an admin may signal any"
    )]
    NotOwner { pid: u32, owner: String, caller: String },
    #[error("PID {pid}'s owner is not known to gpudash (hidden by /proc), so only an admin may signal it")]
    UnknownOwner { pid: u32 },
}

/// Who may signal `process`: an admin any GPU process; an operator only a process its token's
/// user name owns (by the owner rule: a job's user, a container's owner label... or the Unix
/// user); a viewer none. `who` names the caller in a refusal.
pub fn may_signal(
    role: crate::auth::Role,
    caller_user: &str,
    who: &str,
    process: &GpuProcess,
) -> Result<(), SignalRefused> {
    use crate::auth::Role;
    match role {
        Role::Admin => Ok(()),
        Role::Viewer => Err(SignalRefused::Viewer { who: who.to_owned() }),
        Role::Operator => match Some(process.user_name()).filter(|o| !process.redacted && *o != UNKNOWN_USER) {
            Some(owner) if owner == caller_user => Ok(()),
            Some(owner) => Err(SignalRefused::NotOwner {
                pid: process.pid,
                owner: owner.to_owned(),
                caller: caller_user.to_owned(),
            }),
            None => Err(SignalRefused::UnknownOwner { pid: process.pid }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(device: u32, user: Option<&str>, memory: u64) -> GpuProcess {
        GpuProcess { user: user.map(str::to_owned), used_memory: Some(memory), ..crate::testing::process(device, 1) }
    }

    #[test]
    fn usage_groups_by_user_and_sorts_by_memory() {
        let usage = usage_by_user(&[
            process(1, Some("ana"), 10),
            process(0, Some("bo"), 50),
            process(0, Some("ana"), 5),
            process(1, None, 1),
        ]);
        assert_eq!(usage.iter().map(|u| u.user.as_str()).collect::<Vec<_>>(), ["bo", "ana", "unknown"]);
        assert_eq!(usage[1].devices, [0, 1]);
        assert_eq!(usage[1].memory, 15);
        assert_eq!(usage[1].idle_memory, 0);
        assert_eq!(usage[1].processes, 2);
    }

    #[test]
    fn redaction_leaves_load_and_drops_who_and_what() {
        let mut p = GpuProcess {
            name: Some("python3".into()),
            command: Some("python3 serve.py --api-key=s3cret".into()),
            workload: Some(crate::workload::Workload {
                container: Some(crate::workload::Container { id: "c0ffee123456".into(), ..Default::default() }),
                ..Default::default()
            }),
            started_ms: Some(7),
            ..process(1, Some("ana"), 40)
        };
        let kept = p.clone();
        redact_all(std::slice::from_mut(&mut p));
        assert_eq!((p.user, p.name, p.command, p.workload, p.owner), (None, None, None, None, None));
        assert!(p.redacted);
        assert_eq!((p.device, p.pid, p.used_memory, p.started_ms), (kept.device, kept.pid, Some(40), Some(7)));
    }

    #[test]
    fn free_means_healthy_and_held_by_no_process() {
        let lost = Condition { lost: true, ..Condition::default() };
        let fine = Condition::default();
        let fell_off = Condition { recent_xids: vec![79], ..Condition::default() };
        let devices = [(0, &fine), (1, &fine), (2, &lost), (3, &fine), (4, &fell_off)];
        assert_eq!(free_devices(devices, &[process(3, Some("ana"), 1)]), [0, 1]);
        assert_eq!(free_devices(devices, &[]), [0, 1, 3]);
    }

    #[test]
    fn redacted_flag_is_on_the_wire_only_when_set() {
        let mut p = process(0, Some("ana"), 1);
        assert!(!serde_json::to_string(&p).unwrap().contains("redacted"));
        p.redact();
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains("\"redacted\":true") && !json.contains("ana"), "{json}");
        assert_eq!(serde_json::from_str::<GpuProcess>(&json).unwrap(), p);
    }

    #[test]
    fn redacted_processes_count_for_no_user() {
        let mut hidden = process(0, Some("bo"), 50);
        hidden.redact();
        let usage = usage_by_user(&[hidden, process(1, Some("ana"), 10)]);
        assert_eq!(usage.iter().map(|u| u.user.as_str()).collect::<Vec<_>>(), ["ana"]);
    }

    #[test]
    fn shorten_keeps_short_commands_and_marks_cuts() {
        assert_eq!(shorten("python train.py", 40), "python train.py");
        assert_eq!(shorten("abcdef", 4), "abc…");
    }

    #[test]
    fn admins_signal_any_operators_their_own_viewers_none() {
        use crate::auth::Role;
        let ana = GpuProcess { pid: 77, ..process(0, Some("ana"), 1) };
        assert_eq!(may_signal(Role::Admin, "root", "'root'", &ana), Ok(()));
        assert_eq!(may_signal(Role::Operator, "ana", "'ana'", &ana), Ok(()));
        let refused = may_signal(Role::Operator, "bo", "'bo'", &ana).unwrap_err();
        assert!(refused.to_string().contains("PID 77 belongs to 'ana', not 'bo'"), "{refused}");
        assert!(matches!(may_signal(Role::Viewer, "ana", "'ana'", &ana), Err(SignalRefused::Viewer { .. })));
        let hidden = GpuProcess { pid: 78, ..process(0, None, 1) };
        assert_eq!(may_signal(Role::Operator, "ana", "'ana'", &hidden), Err(SignalRefused::UnknownOwner { pid: 78 }));
        let mut redacted = ana;
        redacted.redact();
        assert!(may_signal(Role::Operator, "ana", "'ana'", &redacted).is_err(), "a redacted user proves nothing");
        assert_eq!(may_signal(Role::Admin, "root", "'root'", &hidden), Ok(()));
    }

    #[test]
    fn operators_signal_what_the_owner_rule_gives_them_not_what_root_runs() {
        use crate::auth::Role;
        use crate::workload::{Container, DEFAULT_OWNER_LABEL, Workload};
        let in_container = |labels: Vec<(String, String)>| {
            let mut p = GpuProcess { pid: 90, ..process(0, Some("root"), 1) };
            let container = Container {
                id: "c0ffee123456".into(),
                name: Some("trainer".into()),
                labels,
                trusted: true,
                ..Default::default()
            };
            p.workload = Some(Workload { container: Some(container), ..Default::default() });
            p.apply_owner_rule(DEFAULT_OWNER_LABEL);
            p
        };
        let labelled = in_container(vec![("gpudash.user".into(), "ana".into())]);
        assert_eq!((labelled.user_name(), labelled.unix_user_if_other()), ("ana", Some("root")));
        assert_eq!(may_signal(Role::Operator, "ana", "'ana'", &labelled), Ok(()));
        assert!(may_signal(Role::Operator, "root", "'root'", &labelled).is_err(), "root in a container is not root");
        let unlabelled = in_container(Vec::new());
        assert_eq!(unlabelled.user_name(), "container trainer");
        let refused = may_signal(Role::Operator, "ana", "'ana'", &unlabelled).unwrap_err();
        assert!(refused.to_string().contains("belongs to 'container trainer'"), "{refused}");
        assert_eq!(
            usage_by_user(&[labelled, unlabelled]).iter().map(|u| u.user.as_str()).collect::<Vec<_>>(),
            ["ana", "container trainer"]
        );
    }

    #[test]
    fn only_sigterm_and_sigkill_parse() {
        assert_eq!(Signal::parse("SIGTERM"), Ok(Signal::Term));
        assert_eq!(Signal::parse("SIGKILL"), Ok(Signal::Kill));
        for bad in ["sigterm", "TERM", "SIGHUP", "", "9"] {
            let err = Signal::parse(bad).unwrap_err().to_string();
            assert!(err.contains("SIGTERM") && err.contains("SIGKILL"), "{err}");
        }
        assert_eq!(serde_json::to_string(&Signal::Kill).unwrap(), "\"SIGKILL\"");
    }
}
