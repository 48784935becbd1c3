//! The `oom` rule: an out-of-memory error that an attached PyTorch process reported through
//! the bridge fires at once, for the process's user; it resolves after `quiet` without another,
//! or as soon as the process stops reporting (the bridge no longer lists it).

use std::collections::HashSet;

use shared::alerts::{Rule, Silence};

use super::config::Rules;
use super::rules::Inputs;
use super::state::{Book, Change, ChangeKind, Draft, Key};

/// An out-of-memory error of a process the bridge still hears from.
#[derive(Debug, Clone, PartialEq)]
pub struct OomSignal {
    pub pid: u32,
    /// The GPU's UUID as the process reported it, when it did.
    pub gpu_uuid: Option<String>,
    /// The device index as the process numbers it (used when there is no UUID).
    pub device: u32,
    /// Who attached the process; NVML's user for the PID wins when it lists it.
    pub owner: String,
    /// When the server received it, ms since the epoch.
    pub at_ms: u64,
    /// "asked for 2.10 GiB, largest free block 512 MiB, 3.50 GiB free in total (fragmented)".
    pub what: String,
}

impl Book {
    /// Fires an alert per (GPU, process) with a fresh out-of-memory error; resolves the rest.
    pub(super) fn oom(&mut self, rules: &Rules, input: &Inputs<'_>, silences: &[Silence], now: u64) {
        let config = &rules.oom;
        let quiet = u64::try_from(rules.oom_quiet.as_millis()).unwrap_or(u64::MAX);
        let mut current = HashSet::new();
        for signal in input.ooms.iter().filter(|s| config.enabled && now.saturating_sub(s.at_ms) < quiet) {
            let by_uuid = signal.gpu_uuid.as_ref().and_then(|uuid| input.devices.iter().find(|d| &d.uuid == uuid));
            let Some(info) = by_uuid.or_else(|| input.devices.iter().find(|d| d.index == signal.device)) else {
                continue;
            };
            let key = Key { rule: Rule::Oom, gpu_uuid: info.uuid.clone(), pid: Some(signal.pid) };
            current.insert(key.clone());
            // Who it is travels in `user` (left out for anonymous viewers), never in the message.
            let message =
                format!("PID {} ran out of memory on GPU {} ({}): {}", signal.pid, info.index, info.name, signal.what);
            if let Some(firing) = self.firing.get_mut(&key) {
                if signal.at_ms > firing.last_event_ms {
                    firing.last_event_ms = signal.at_ms;
                    firing.events += 1;
                    firing.alert.message = message;
                    self.changes.push(Change { kind: ChangeKind::Updated, alert: firing.alert.clone() });
                }
                continue;
            }
            let user = input.processes.iter().find(|p| p.pid == signal.pid).and_then(|p| p.user.clone());
            let draft = Draft {
                key,
                gpu_index: info.index,
                severity: config.severity,
                user: user.or_else(|| Some(signal.owner.clone())),
                message,
                action: "open the process on the PyTorch view: its allocator map shows whether the memory was \
                         fragmented (try expandable_segments:True) or simply full (a smaller batch)"
                    .to_owned(),
                simulated: input.simulated || info.simulated,
            };
            self.fire(draft, silences, now);
        }
        let gone: Vec<Key> =
            self.firing.keys().filter(|k| k.rule == Rule::Oom && !current.contains(*k)).cloned().collect();
        gone.iter().for_each(|k| self.resolve(k, now));
    }
}
