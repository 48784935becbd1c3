//! The alert rules, one file each: a rule's settings in the alerts file, its condition over one
//! reading of every GPU and process (as ISSUE 17's "Rule semantics" state them: O(GPUs +
//! processes) per evaluation, no I/O), its words on the Alerts tab and its Prometheus twin.
//!
//! Adding a rule is its file here and one line in [`rules!`] below, besides its name and title in
//! `shared::alerts::rules!` (the wire's list, which the page reads).

mod clock_events;
mod device_lost;
mod ecc;
mod gpu_free;
mod idle_held;
mod memory_full;
pub(super) mod oom;
pub(super) mod prom;
mod reservation_intruder;
mod settings;
mod temperature;
mod xid;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use shared::alerts::{Rule, Severity, Silence};
use shared::health::DeviceHealth;
use shared::processes::GpuProcess;
use shared::reservations::{Reservation, holder};
use shared::{DeviceInfo, DeviceSample};

use super::state::{Book, Change, ChangeKind, Draft, Key, human};

/// One rule's settings that every rule has, after defaults and the alerts file.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleConfig {
    pub enabled: bool,
    pub severity: Severity,
    /// How long the condition must hold before the alert fires (zero: at once).
    pub hold: Duration,
}

/// One rule's settings: the common ones and its own (`S`, the extra keys of its table).
#[derive(Debug, Clone, PartialEq)]
pub struct Configured<S> {
    pub config: RuleConfig,
    pub settings: S,
}

impl<S> Configured<S> {
    /// On, at `severity`, holding `secs` seconds before it fires.
    const fn on(severity: Severity, secs: u64, settings: S) -> Self {
        Configured { config: RuleConfig { enabled: true, severity, hold: Duration::from_secs(secs) }, settings }
    }
}

/// A rule in Prometheus' words (`gpudash alerts export-prometheus`), over the series `/metrics` exposes.
#[derive(Debug, Clone)]
pub struct Prom {
    /// Comment lines above the rule: where it differs from gpudash's engine.
    pub notes: Vec<String>,
    pub expr: String,
    /// The rule's `for` (zero: none).
    pub hold: Duration,
    /// The `severity` label: the rule's own, or a template where the engine rates it by the reading.
    pub severity: String,
    pub summary: String,
    pub description: String,
}

/// One alert rule, whole.
pub trait AlertRule {
    /// Its settings beyond `enabled`, `severity` and `for`.
    type Settings: Clone + std::fmt::Debug + PartialEq;
    /// The extra keys of its `[rules.NAME]` table.
    const KEYS: &[&str] = &[];
    /// Why `for` does not apply to it (an event fires when it is reported); `None` when it does.
    const NO_HOLD: Option<&str> = None;
    /// Judged only once the slow loop listed the processes (no process listed means none).
    const NEEDS_PROCESSES: bool = false;

    /// Its settings when the alerts file says nothing.
    fn defaults() -> Configured<Self::Settings>;
    /// Sets extra key `key` (one of [`Self::KEYS`]) from the file; the message says what is allowed.
    fn set(_settings: &mut Self::Settings, key: &str, _value: &toml::Value) -> Result<(), String> {
        Err(format!("has no key '{key}'"))
    }
    /// Judges one GPU of a reading (every rule but those about the reading as a whole).
    fn on_gpu(_book: &mut Book, _rule: &Configured<Self::Settings>, _gpu: &Gpu<'_>, _silences: &[Silence], _now: u64) {}
    /// Judges the reading as a whole (`oom`, whose reports name their GPU themselves).
    fn on_reading(
        _book: &mut Book,
        _rule: &Configured<Self::Settings>,
        _input: &Inputs<'_>,
        _silences: &[Silence],
        _now: u64,
    ) {
    }
    /// The rule as it runs, in words (`held`: " for 1m", or empty when its `for` is zero).
    fn condition(rule: &Configured<Self::Settings>, held: &str) -> String;
    /// Its Prometheus twin; `None` when no series carries what it judges.
    fn prometheus(rule: &Configured<Self::Settings>) -> Option<Prom>;
}

/// The registry: each rule's name on the wire, its field in [`Rules`] and its unit, in the order a
/// GPU's rules are judged. Generates [`Rules`] and the calls into each unit.
macro_rules! rules {
    ($($variant:ident => $field:ident: $unit:ty,)*) => {
        /// Every rule's settings after defaults and the alerts file, as the engine and the exports read them.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Rules {
            $(pub $field: Configured<<$unit as AlertRule>::Settings>,)*
        }

        impl Default for Rules {
            fn default() -> Self {
                Rules { $($field: <$unit>::defaults(),)* }
            }
        }

        impl Rules {
            /// The settings every rule has.
            pub fn rule(&self, rule: Rule) -> &RuleConfig {
                match rule {
                    $(Rule::$variant => &self.$field.config,)*
                }
            }

            /// Reads `[rules.NAME]`'s `table` into `rule`.
            pub(crate) fn load(&mut self, rule: Rule, table: &toml::Table) -> Result<(), String> {
                match rule {
                    $(Rule::$variant => settings::load::<$unit>(rule, &mut self.$field, table),)*
                }
            }

            /// `rule` as it runs, in words.
            pub(crate) fn condition(&self, rule: Rule) -> String {
                match rule {
                    $(Rule::$variant => <$unit>::condition(&self.$field, &held(self.$field.config.hold)),)*
                }
            }

            /// `rule` in Prometheus' words.
            pub(crate) fn prometheus(&self, rule: Rule) -> Option<Prom> {
                match rule {
                    $(Rule::$variant => <$unit>::prometheus(&self.$field),)*
                }
            }
        }

        impl Book {
            fn judge_gpu(&mut self, rules: &Rules, gpu: &Gpu<'_>, details_seen: bool, silences: &[Silence], now: u64) {
                $(if rules.$field.config.enabled && (details_seen || !<$unit>::NEEDS_PROCESSES) {
                    <$unit>::on_gpu(self, &rules.$field, gpu, silences, now);
                })*
            }

            fn judge_reading(&mut self, rules: &Rules, input: &Inputs<'_>, silences: &[Silence], now: u64) {
                $(if rules.$field.config.enabled {
                    <$unit>::on_reading(self, &rules.$field, input, silences, now);
                })*
            }
        }
    };
}

rules! {
    DeviceLost => device_lost: device_lost::DeviceLost,
    Temperature => temperature: temperature::Temperature,
    ClockEvents => clock_events: clock_events::ClockEvents,
    MemoryFull => memory_full: memory_full::MemoryFull,
    Xid => xid: xid::Xid,
    Ecc => ecc: ecc::Ecc,
    IdleHeld => idle_held: idle_held::IdleHeld,
    GpuFree => gpu_free: gpu_free::GpuFree,
    ReservationIntruder => reservation_intruder: reservation_intruder::ReservationIntruder,
    Oom => oom: oom::Oom,
}

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
pub struct Gpu<'a> {
    pub info: &'a DeviceInfo,
    pub sample: Option<&'a DeviceSample>,
    pub health: Option<&'a DeviceHealth>,
    pub processes: &'a [&'a GpuProcess],
    pub simulated: bool,
    pub reservation: Option<&'a Reservation>,
}

impl Gpu<'_> {
    pub fn label(&self) -> String {
        format!("GPU {} ({})", self.info.index, self.info.name)
    }

    /// The sample, when the GPU answered.
    pub fn answering(&self) -> Option<&DeviceSample> {
        self.sample.filter(|s| s.lost.is_none())
    }
}

fn ms(duration: Duration) -> u64 {
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
            self.judge_gpu(rules, &gpu, input.details_seen, silences, now_ms);
        }
        self.judge_reading(rules, input, silences, now_ms);
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

    /// An alert of `config`'s rule on `gpu`, at the rule's own severity, for nobody in particular.
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
}

/// " for 1m 5s" in a rule's words, or nothing when its `for` is zero.
fn held(hold: Duration) -> String {
    if hold.is_zero() { String::new() } else { format!(" for {}", human(ms(hold))) }
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
