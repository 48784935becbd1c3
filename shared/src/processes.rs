//! Who uses which GPU: processes as NVML and /proc see them.

use serde::{Deserialize, Serialize};

use crate::DeviceSample;

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
    /// User name, or the numeric uid when it has no name; `None` when /proc hides the process.
    pub user: Option<String>,
    /// Executable name, e.g. "python3".
    pub name: Option<String>,
    /// Full command line.
    pub command: Option<String>,
    /// When the process started, ms since the epoch.
    pub started_ms: Option<u64>,
    /// Short container id when the cgroup path names one.
    pub container: Option<String>,
    /// True when the server left out who runs the process and what (see [`GpuProcess::redact`]):
    /// `user`, `name`, `command` and `container` are then unknown to the viewer, not absent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// Set while the process holds memory on a GPU that does nothing (`--idle-memory`, `--idle-after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<crate::activity::IdleHold>,
}

impl GpuProcess {
    /// Leaves out what names a person or their work: user, executable, command line
    /// (it can hold secrets) and container. What remains says that a GPU is busy and
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
            idle: _,
            user,
            name,
            command,
            container,
            redacted,
        } = self;
        *user = None;
        *name = None;
        *command = None;
        *container = None;
        *redacted = true;
    }
}

/// [`GpuProcess::redact`] applied to every process.
pub fn redact_all(processes: &mut [GpuProcess]) {
    processes.iter_mut().for_each(GpuProcess::redact);
}

/// One user's share of the machine's GPUs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct UserUsage {
    /// User name; "unknown" for processes /proc does not show.
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

/// Sums processes per user, biggest memory first: the "who uses what" overview.
/// Redacted processes count for no one: who uses them is what was left out.
pub fn usage_by_user(processes: &[GpuProcess]) -> Vec<UserUsage> {
    let mut users: Vec<UserUsage> = Vec::new();
    for p in processes.iter().filter(|p| !p.redacted) {
        let name = p.user.clone().unwrap_or_else(|| "unknown".to_owned());
        let entry = match users.iter().position(|u| u.user == name) {
            Some(i) => &mut users[i],
            None => {
                users.push(UserUsage { user: name, devices: Vec::new(), memory: 0, processes: 0, idle_memory: 0 });
                users.last_mut().expect("just pushed")
            }
        };
        if !entry.devices.contains(&p.device) {
            entry.devices.push(p.device);
            entry.devices.sort_unstable();
        }
        entry.memory += p.used_memory.unwrap_or(0);
        if p.idle.is_some() {
            entry.idle_memory += p.used_memory.unwrap_or(0);
        }
        entry.processes += 1;
    }
    users.sort_by(|a, b| b.memory.cmp(&a.memory).then_with(|| a.user.cmp(&b.user)));
    users
}

/// GPUs no process holds, in the order given, each with its latest reading: a
/// GPU that stopped answering (its reading says `lost`) is never free.
pub fn free_devices<'a>(
    devices: impl IntoIterator<Item = (u32, Option<&'a DeviceSample>)>,
    processes: &[GpuProcess],
) -> Vec<u32> {
    devices
        .into_iter()
        .filter(|(index, latest)| {
            latest.is_none_or(|s| s.lost.is_none()) && !processes.iter().any(|p| p.device == *index)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn process(device: u32, user: Option<&str>, memory: u64) -> GpuProcess {
        GpuProcess {
            device,
            pid: 1,
            kind: ProcessKind::Compute,
            used_memory: Some(memory),
            sm_util: None,
            sm_util_seen_ms: None,
            user: user.map(str::to_owned),
            name: None,
            command: None,
            started_ms: None,
            container: None,
            redacted: false,
            idle: None,
        }
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
            container: Some("c0ffee123456".into()),
            started_ms: Some(7),
            ..process(1, Some("ana"), 40)
        };
        let kept = p.clone();
        redact_all(std::slice::from_mut(&mut p));
        assert_eq!((p.user, p.name, p.command, p.container), (None, None, None, None));
        assert!(p.redacted);
        assert_eq!((p.device, p.pid, p.used_memory, p.started_ms), (kept.device, kept.pid, Some(40), Some(7)));
    }

    #[test]
    fn free_means_answering_and_held_by_no_process() {
        let lost = DeviceSample { index: 2, lost: Some("fell off the bus".into()), ..Default::default() };
        let fine = DeviceSample { index: 1, ..Default::default() };
        let devices = [(0, None), (1, Some(&fine)), (2, Some(&lost)), (3, None)];
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
}
