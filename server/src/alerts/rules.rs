//! Each rule's condition, as ISSUE 17's "Rule semantics" state them, over one reading of every
//! GPU and process: O(GPUs + processes) per evaluation, with no I/O.

use std::collections::{HashMap, HashSet};

use shared::activity::IDLE_SM_PERCENT;
use shared::alerts::{Rule, Silence};
use shared::health::{DeviceHealth, xid_meaning};
use shared::processes::GpuProcess;
use shared::reservations::{Reservation, holder, is_intruder};
use shared::severity::{Condition, clock_event, memory_level, temperature_level, xid_level};
use shared::usability::unhealthy;
use shared::{DeviceInfo, DeviceSample};

use super::config::{RuleConfig, Rules};
use super::state::{Book, Change, ChangeKind, Draft, Key, human};

/// One reading of everything the rules look at.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub devices: &'a [DeviceInfo],
    /// The fast loop's newest samples.
    pub samples: &'a [DeviceSample],
    /// The slow loop's newest health readings (with recent XIDs).
    pub health: &'a [DeviceHealth],
    pub processes: &'a [GpuProcess],
    /// The slow loop has reported at least once: no process listed means none, not "not read yet".
    pub details_seen: bool,
    /// Every GPU is the simulator's.
    pub simulated: bool,
    /// The reservations in force (`reservation_intruder`).
    pub reservations: &'a [Reservation],
    /// Out-of-memory errors attached PyTorch processes reported (the bridge's newest per process).
    pub ooms: &'a [super::OomSignal],
}

/// One GPU's part of the reading.
struct Gpu<'a> {
    info: &'a DeviceInfo,
    sample: Option<&'a DeviceSample>,
    health: Option<&'a DeviceHealth>,
    processes: &'a [&'a GpuProcess],
    simulated: bool,
    reservation: Option<&'a Reservation>,
}

impl Gpu<'_> {
    fn label(&self) -> String {
        format!("GPU {} ({})", self.info.index, self.info.name)
    }

    /// The sample, when the GPU answered.
    fn answering(&self) -> Option<&DeviceSample> {
        self.sample.filter(|s| s.lost.is_none())
    }
}

fn ms(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Book {
    /// Evaluates every rule on one reading at `now_ms`; returns what fired, resolved, changed.
    pub fn evaluate(&mut self, rules: &Rules, input: &Inputs<'_>, silences: &[Silence], now_ms: u64) -> Vec<Change> {
        let mut by_device: HashMap<u32, Vec<&GpuProcess>> = HashMap::new();
        for p in input.processes {
            by_device.entry(p.device).or_default().push(p);
        }
        let none = Vec::new();
        for rule in Rule::ALL {
            if !rules.rule(rule).enabled {
                self.resolve_rule(rule, now_ms);
            }
        }
        for info in input.devices {
            let gpu = Gpu {
                info,
                sample: input.samples.iter().find(|s| s.index == info.index),
                health: input.health.iter().find(|h| h.index == info.index),
                processes: by_device.get(&info.index).unwrap_or(&none),
                simulated: input.simulated || info.simulated,
                reservation: holder(input.reservations, info.index, now_ms),
            };
            self.device_lost(rules, &gpu, silences, now_ms);
            self.temperature(rules, &gpu, silences, now_ms);
            self.clock_events(rules, &gpu, silences, now_ms);
            self.memory_full(rules, &gpu, silences, now_ms);
            self.xid(rules, &gpu, silences, now_ms);
            self.ecc(rules, &gpu, silences, now_ms);
            if input.details_seen {
                self.idle_held(rules, &gpu, silences, now_ms);
                self.gpu_free(rules, &gpu, silences, now_ms);
                self.reservation_intruder(rules, &gpu, silences, now_ms);
            }
        }
        self.oom(rules, input, silences, now_ms);
        self.resolve_gone(input, now_ms);
        let mut changes = std::mem::take(&mut self.changes);
        changes.extend(self.apply_silences(silences, now_ms));
        changes
    }

    /// Alerts about a GPU this host no longer has resolve; so do those about processes that are gone.
    fn resolve_gone(&mut self, input: &Inputs<'_>, now_ms: u64) {
        let uuids: HashSet<&str> = input.devices.iter().map(|d| d.uuid.as_str()).collect();
        let index_of: HashMap<&str, u32> = input.devices.iter().map(|d| (d.uuid.as_str(), d.index)).collect();
        let running: HashSet<(u32, u32)> = input.processes.iter().map(|p| (p.device, p.pid)).collect();
        let gone: Vec<Key> = self
            .firing
            .keys()
            .filter(|k| {
                // An `oom` alert follows the bridge, which hears from processes NVML may not list (containers).
                !uuids.contains(k.gpu_uuid.as_str())
                    || k.rule != Rule::Oom
                        && k.pid.is_some_and(|pid| {
                            input.details_seen
                                && !index_of.get(k.gpu_uuid.as_str()).is_some_and(|i| running.contains(&(*i, pid)))
                        })
            })
            .cloned()
            .collect();
        gone.iter().for_each(|k| self.resolve(k, now_ms));
    }

    fn draft(&self, config: &RuleConfig, key: Key, gpu: &Gpu<'_>, message: String, action: &str) -> Draft {
        Draft {
            key,
            gpu_index: gpu.info.index,
            severity: config.severity,
            user: None,
            message,
            action: action.to_owned(),
            simulated: gpu.simulated,
        }
    }

    fn device_lost(&mut self, rules: &Rules, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let config = &rules.device_lost;
        let key = Key::gpu(Rule::DeviceLost, &gpu.info.uuid);
        if !config.enabled {
            return;
        }
        let Some(sample) = gpu.sample else { return };
        match &sample.lost {
            None => self.resolve(&key, now),
            Some(reason) => {
                if let Some(held) = self.held(&key, true, ms(config.hold), now) {
                    let message = format!("{} stopped answering{}: {reason}", gpu.label(), for_(held));
                    let action = "check `nvidia-smi` and the kernel log (dmesg) for XID 79; the GPU usually needs a \
                                  reset or a reboot, and the jobs on it are lost";
                    self.fire(self.draft(config, key, gpu, message, action), silences, now);
                }
            }
        }
    }

    fn temperature(&mut self, rules: &Rules, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let (config, celsius) = (&rules.temperature, rules.temperature_celsius);
        let key = Key::gpu(Rule::Temperature, &gpu.info.uuid);
        if !config.enabled {
            return;
        }
        if gpu.sample.is_some_and(|s| s.lost.is_some()) {
            return self.resolve(&key, now);
        }
        let Some(t) = gpu.answering().and_then(|s| s.temperature_c) else { return };
        // How bad it is, the overview's own rule: critical from the GPU's slowdown threshold.
        let severity = config.severity.rated(temperature_level(Some(t), gpu.info.slowdown_temp_c));
        if self.is_firing(&key) {
            if t + 3 < celsius {
                self.resolve(&key, now);
            } else {
                self.rate(&key, severity);
            }
        } else if let Some(held) = self.held(&key, t >= celsius, ms(config.hold), now) {
            let message = format!("{} at {t} °C{}, at or above {celsius} °C", gpu.label(), for_(held));
            let action = "check the fans and the airflow; the GPU holds its clocks down to cool, so jobs slow down";
            let draft = Draft { severity, ..self.draft(config, key, gpu, message, action) };
            self.fire(draft, silences, now);
        }
    }

    fn clock_events(&mut self, rules: &Rules, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let config = &rules.clock_events;
        let key = Key::gpu(Rule::ClockEvents, &gpu.info.uuid);
        if !config.enabled {
            return;
        }
        if gpu.sample.is_some_and(|s| s.lost.is_some()) {
            return self.resolve(&key, now);
        }
        let Some(events) = gpu.answering().and_then(|s| s.clock_events.as_ref()) else { return };
        let active: Vec<&str> =
            events.iter().filter(|e| rules.clock_event_reasons.contains(e)).map(String::as_str).collect();
        let level = active.iter().filter_map(|e| clock_event(e)).map(|(level, _)| level).max().unwrap_or_default();
        let severity = config.severity.rated(level);
        if self.is_firing(&key) {
            if active.is_empty() {
                self.resolve(&key, now);
            } else {
                self.rate(&key, severity);
            }
        } else if let Some(held) = self.held(&key, !active.is_empty(), ms(config.hold), now) {
            let message = format!("{} has its clocks held down by {}{}", gpu.label(), active.join(", "), for_(held));
            let action = "the GPU protects itself from heat or a power emergency: check cooling, power supply and \
                          `nvidia-smi -q -d PERFORMANCE`; jobs run slower until it clears";
            let draft = Draft { severity, ..self.draft(config, key, gpu, message, action) };
            self.fire(draft, silences, now);
        }
    }

    fn memory_full(&mut self, rules: &Rules, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let (config, percent) = (&rules.memory_full, rules.memory_full_percent);
        let key = Key::gpu(Rule::MemoryFull, &gpu.info.uuid);
        if !config.enabled {
            return;
        }
        if gpu.sample.is_some_and(|s| s.lost.is_some()) {
            return self.resolve(&key, now);
        }
        let total = gpu.info.memory_total;
        let Some(used) = gpu.answering().and_then(|s| s.memory_used).filter(|_| total > 0) else { return };
        let share = used as f64 / total as f64 * 100.0;
        let severity = config.severity.rated(memory_level(Some(used), total));
        if self.is_firing(&key) {
            if share < percent - 2.0 {
                self.resolve(&key, now);
            } else {
                self.rate(&key, severity);
            }
        } else if let Some(held) = self.held(&key, share >= percent, ms(config.hold), now) {
            let message =
                format!("{} has {share:.1}% of its memory in use{} (threshold {percent}%)", gpu.label(), for_(held));
            let action = "the next allocation on it may fail with out-of-memory: see who holds it on the Processes \
                          view, and free what is not needed";
            let draft = Draft { severity, ..self.draft(config, key, gpu, message, action) };
            self.fire(draft, silences, now);
        }
    }

    fn xid(&mut self, rules: &Rules, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let config = &rules.xid;
        let key = Key::gpu(Rule::Xid, &gpu.info.uuid);
        if !config.enabled {
            return;
        }
        let seen = self.gpus.entry(gpu.info.uuid.clone()).or_default().newest_xid_ms;
        let fresh: Vec<_> =
            gpu.health.map(|h| h.xids.iter().filter(|x| x.timestamp_ms > seen).collect()).unwrap_or_default();
        if let Some(newest) = fresh.iter().map(|x| x.timestamp_ms).max() {
            self.gpus.entry(gpu.info.uuid.clone()).or_default().newest_xid_ms = newest;
        }
        let counted: Vec<_> = fresh.into_iter().filter(|x| !rules.xid_ignore.contains(&x.code)).collect();
        let label = gpu.label();
        // An application's fault warns, any other code is critical: the overview's rule.
        let level = counted.iter().map(|x| xid_level(x.code)).max().unwrap_or_default();
        let severity = config.severity.rated(level);
        if let Some(latest) = counted.iter().max_by_key(|x| x.timestamp_ms) {
            let (code, meaning) = (latest.code, xid_meaning(latest.code));
            if let Some(firing) = self.firing.get_mut(&key) {
                firing.events += u32::try_from(counted.len()).unwrap_or(u32::MAX);
                firing.last_event_ms = now;
                firing.alert.message = format!(
                    "{label} reported {} XID errors since {}; the latest is XID {code}: {meaning}",
                    firing.events,
                    human_ago(firing.alert.fired_ms, now)
                );
                // A worse code makes the alert worse (announced); a milder one leaves it as it was.
                let kind = if severity > firing.alert.severity { ChangeKind::Rated } else { ChangeKind::Updated };
                firing.alert.severity = firing.alert.severity.max(severity);
                self.changes.push(Change { kind, alert: firing.alert.clone() });
                return;
            }
            let message = format!("{label} reported XID {code}: {meaning}");
            let action = "look the code up in NVIDIA's XID catalogue and the kernel log (dmesg); application faults \
                          (13, 31, 43) need the job's owner, hardware ones (48, 79, 94, 95) a reset or a ticket";
            let draft = Draft { severity, ..self.draft(config, key, gpu, message, action) };
            self.fire(draft, silences, now);
        } else if self.firing.get(&key).is_some_and(|f| now.saturating_sub(f.last_event_ms) >= ms(rules.xid_quiet)) {
            self.resolve(&key, now);
        }
    }

    fn ecc(&mut self, rules: &Rules, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let config = &rules.ecc;
        let key = Key::gpu(Rule::Ecc, &gpu.info.uuid);
        let Some(health) = gpu.health.filter(|_| config.enabled) else { return };
        let mut what = Vec::new();
        if let Some(n) = health.ecc_volatile.uncorrected.filter(|n| *n > 0) {
            what.push(format!("{n} uncorrectable ECC error{} since the driver loaded", if n == 1 { "" } else { "s" }));
        }
        if health.remapped_rows.failed == Some(true) {
            what.push("a row remap failed".to_owned());
        }
        if health.remapped_rows.pending == Some(true) {
            what.push("a row remap is pending a reset".to_owned());
        }
        if self.is_firing(&key) {
            if what.is_empty() {
                self.resolve(&key, now);
            }
        } else if let Some(held) = self.held(&key, !what.is_empty(), ms(config.hold), now) {
            let message = format!("{} has {}{}", gpu.label(), what.join(", "), for_(held));
            let action = "drain the GPU and reset it (`nvidia-smi -r`) when its jobs end; if a remap failed or \
                          errors come back, the GPU needs replacing: open a ticket with its serial";
            self.fire(self.draft(config, key, gpu, message, action), silences, now);
        }
    }

    fn idle_held(&mut self, rules: &Rules, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let config = &rules.idle_held;
        if !config.enabled {
            return;
        }
        let computing = gpu.answering().is_some_and(|s| match s.activity.as_ref().and_then(|a| a.sm_active) {
            Some(sm) => sm >= IDLE_SM_PERCENT,
            None => s.gpu_util.is_some_and(|u| u > 0),
        });
        for p in gpu.processes {
            let key = Key { rule: Rule::IdleHeld, gpu_uuid: gpu.info.uuid.clone(), pid: Some(p.pid) };
            if let Some(firing) = self.firing.get_mut(&key) {
                // After a restart the idle tracker starts its clock again: until it flags the process
                // anew, only a GPU that computes ends the alert.
                if firing.adopted && p.idle.is_none() {
                    if computing {
                        self.resolve(&key, now);
                    }
                } else if p.idle.is_none() {
                    self.resolve(&key, now);
                } else {
                    firing.adopted = false;
                }
                continue;
            }
            let idle_for = p.idle.map(|idle| now.saturating_sub(idle.since_ms));
            let holds = idle_for.is_some_and(|held| held >= ms(config.hold));
            let idle_since = p.idle.map_or(now, |idle| idle.since_ms);
            if self.held(&key, holds, 0, now).is_some() {
                // Who it is and what it runs travel in `user` (left out for anonymous viewers), never in
                // the message, which every viewer reads.
                let memory = p.used_memory.map_or_else(String::new, |b| format!(" {}", gib(b)));
                let sample = gpu.answering();
                let sm = sample.and_then(|s| s.activity.as_ref()).and_then(|a| a.sm_active);
                // A moment, not a length: the message is written once and read for as long as the alert
                // fires (the page shows the moment in the reader's zone; the row says how long it fires).
                let since = format!("since {}", shared::time::utc_minute(idle_since));
                // "Computed nothing" would be false at high util: say what was seen instead.
                let message = match shared::activity::idle_despite_util(sample.and_then(|s| s.gpu_util), sm, &since) {
                    Some(why) => format!("PID {} holds{memory} on {} and looks idle: {why}", p.pid, gpu.label()),
                    None => format!("PID {} holds{memory} on {} and has computed nothing {since}", p.pid, gpu.label()),
                };
                let action = "ask its owner to finish or restart it (a notebook kernel left open?) so the memory goes \
                              back to the team";
                let mut draft = self.draft(config, key, gpu, message, action);
                draft.user = p.owner_name().map(str::to_owned);
                self.fire(draft, silences, now);
            }
        }
    }

    fn gpu_free(&mut self, rules: &Rules, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let config = &rules.gpu_free;
        let key = Key::gpu(Rule::GpuFree, &gpu.info.uuid);
        if !config.enabled {
            return;
        }
        // Free by the one rule (`shared::usability`): an unhealthy GPU whose jobs ended is not.
        let unhealthy = unhealthy(&Condition::of(gpu.info, gpu.sample, gpu.health)).is_some();
        let memory = self.gpus.entry(gpu.info.uuid.clone()).or_default();
        if gpu.answering().is_none() || unhealthy {
            // Lost, faulty (or not sampled yet): neither free nor in use; start over when it is fine.
            memory.had_process = false;
            return self.resolve(&key, now);
        }
        if let Some(p) = gpu.processes.first() {
            memory.had_process = true;
            memory.last_user = p.owner_name().map(str::to_owned).or(memory.last_user.take());
            return self.resolve(&key, now);
        }
        // No process listed, but its memory or utilization says someone uses it: in use, not free.
        if gpu.sample.and_then(shared::in_use::unseen).is_some() {
            memory.had_process = true;
            return self.resolve(&key, now);
        }
        let (had, user) = (memory.had_process, memory.last_user.clone());
        if let Some(held) = self.held(&key, had, ms(config.hold), now) {
            // A moment, as the idle alert says it: the message is read for as long as the alert fires.
            let free_since = shared::time::utc_minute(now.saturating_sub(held));
            let message = format!("{} is free: no process has held it since {free_since}", gpu.label());
            let action = "it is yours to use; say so to the team if you take it";
            let mut draft = self.draft(config, key, gpu, message, action);
            draft.user = user;
            self.fire(draft, silences, now);
        }
    }
}

impl Book {
    /// Another user's process on a GPU while it is reserved: one alert per process, whose `user`
    /// is the holder (the one to tell); who the intruder is stays out of the message.
    fn reservation_intruder(&mut self, rules: &Rules, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let config = &rules.reservation_intruder;
        if !config.enabled {
            return;
        }
        for p in gpu.processes {
            let key = Key { rule: Rule::ReservationIntruder, gpu_uuid: gpu.info.uuid.clone(), pid: Some(p.pid) };
            let reservation = gpu.reservation.filter(|r| is_intruder(r, p, now));
            if self.is_firing(&key) {
                if reservation.is_none() {
                    self.resolve(&key, now);
                }
                continue;
            }
            let Some(r) = reservation else {
                self.held(&key, false, 0, now);
                continue;
            };
            if let Some(held) = self.held(&key, true, ms(config.hold), now) {
                let message = format!(
                    "PID {} runs on {} during reservation {} (until {}){}; the holder's process it is not",
                    p.pid,
                    gpu.label(),
                    r.id,
                    shared::reservations::utc_minute(r.end_ms),
                    for_(held)
                );
                let action = "reservations are advisory: ask the process's owner to move to a free GPU, or the \
                              holder to release the reservation";
                let mut draft = self.draft(config, key, gpu, message, action);
                draft.user = Some(r.user.clone());
                self.fire(draft, silences, now);
            }
        }
    }
}

/// " for 1m 5s", or nothing for a condition that fires at once.
fn for_(held_ms: u64) -> String {
    if held_ms < 1000 { String::new() } else { format!(" for {}", human(held_ms)) }
}

fn human_ago(then_ms: u64, now_ms: u64) -> String {
    format!("{} ago", human(now_ms.saturating_sub(then_ms)))
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}
