//! Unit tests of every rule: fire and resolve, holds, hysteresis, one at a time, restarts.

use std::time::Duration;

use shared::activity::{IdleHold, IdleSignal};
use shared::alerts::{Alert, Rule, Severity, Silence};
use shared::health::{DeviceHealth, XidEvent};
use shared::processes::GpuProcess;
use shared::{DeviceInfo, DeviceSample};

use super::config::Rules;
use super::rules::Inputs;
use super::state::{Book, Change, ChangeKind, human};
use super::{Alerts, AlertsConfig};

const S: u64 = 1000;

/// Two GPUs, their readings and processes, that a test changes between evaluations.
struct World {
    devices: Vec<DeviceInfo>,
    samples: Vec<DeviceSample>,
    health: Vec<DeviceHealth>,
    processes: Vec<GpuProcess>,
    ooms: Vec<super::OomSignal>,
    details_seen: bool,
    rules: Rules,
    silences: Vec<Silence>,
    reservations: Vec<shared::reservations::Reservation>,
    book: Book,
}

fn device(index: u32) -> DeviceInfo {
    DeviceInfo { memory_total: 100 << 30, ..shared::testing::device(index) }
}

fn process(device: u32, pid: u32, user: &str) -> GpuProcess {
    GpuProcess {
        used_memory: Some(8 << 30),
        user: Some(user.into()),
        name: Some("python3".into()),
        ..shared::testing::process(device, pid)
    }
}

impl World {
    fn new() -> Self {
        let samples = (0..2)
            .map(|index| DeviceSample {
                index,
                temperature_c: Some(40),
                memory_used: Some(1 << 30),
                gpu_util: Some(50),
                clock_events: Some(Vec::new()),
                ..DeviceSample::default()
            })
            .collect();
        let health = (0..2).map(|index| DeviceHealth { index, ..DeviceHealth::default() }).collect();
        Self {
            devices: vec![device(0), device(1)],
            samples,
            health,
            processes: Vec::new(),
            ooms: Vec::new(),
            details_seen: true,
            rules: Rules::default(),
            silences: Vec::new(),
            reservations: Vec::new(),
            book: Book::default(),
        }
    }

    fn at(&mut self, now: u64) -> Vec<Change> {
        let input = Inputs {
            devices: &self.devices,
            samples: &self.samples,
            health: &self.health,
            processes: &self.processes,
            details_seen: self.details_seen,
            simulated: false,
            reservations: &self.reservations,
            ooms: &self.ooms,
        };
        self.book.evaluate(&self.rules, &input, &self.silences, now)
    }
}

/// (kind, rule, gpu) of each change.
fn kinds(changes: &[Change]) -> Vec<(ChangeKind, Rule, u32)> {
    changes.iter().map(|c| (c.kind, c.alert.rule, c.alert.gpu_index)).collect()
}

#[test]
fn temperature_fires_after_its_hold_and_resolves_below_the_hysteresis() {
    let mut w = World::new();
    w.rules.temperature.config.hold = Duration::from_secs(60);
    w.samples[1].temperature_c = Some(91);
    assert!(w.at(0).is_empty(), "not held long enough");
    assert!(w.at(59 * S).is_empty());
    let fired = w.at(65 * S);
    assert_eq!(kinds(&fired), [(ChangeKind::Fired, Rule::Temperature, 1)]);
    let alert = &fired[0].alert;
    assert_eq!(alert.message, "GPU 1 (NVIDIA H200) at 91 °C for 1m 5s, at or above 85 °C");
    assert!(alert.action.contains("fans"), "{}", alert.action);
    assert_eq!((alert.severity, alert.gpu_uuid.as_str(), alert.fired_ms), (Severity::Warning, "GPU-1", 65 * S));
    assert!(w.at(70 * S).is_empty(), "one alert at a time");
    w.samples[1].temperature_c = Some(83);
    assert!(w.at(80 * S).is_empty(), "83 °C is within the 3 °C hysteresis");
    w.samples[1].temperature_c = Some(81);
    let resolved = w.at(90 * S);
    assert_eq!(kinds(&resolved), [(ChangeKind::Resolved, Rule::Temperature, 1)]);
    assert_eq!(resolved[0].alert.resolved_ms, Some(90 * S));
    assert_eq!(resolved[0].alert.id, alert.id);
}

#[test]
fn a_dip_restarts_the_hold() {
    let mut w = World::new();
    w.rules.temperature.config.hold = Duration::from_secs(60);
    w.samples[0].temperature_c = Some(90);
    w.at(0);
    w.samples[0].temperature_c = Some(84);
    w.at(30 * S);
    w.samples[0].temperature_c = Some(90);
    assert!(w.at(40 * S).is_empty());
    assert!(w.at(99 * S).is_empty(), "held only 59 s since the dip");
    assert_eq!(kinds(&w.at(100 * S)), [(ChangeKind::Fired, Rule::Temperature, 0)]);
}

#[test]
fn clock_events_fire_for_the_named_reasons_only() {
    let mut w = World::new();
    w.rules.clock_events.config.hold = Duration::from_secs(10);
    w.samples[0].clock_events = Some(vec!["sw_power_cap".into()]);
    w.at(0);
    assert!(w.at(20 * S).is_empty(), "a power cap is not a thermal event");
    w.samples[0].clock_events = Some(vec!["hw_thermal_slowdown".into()]);
    w.at(30 * S);
    let fired = w.at(40 * S);
    assert_eq!(kinds(&fired), [(ChangeKind::Fired, Rule::ClockEvents, 0)]);
    assert!(fired[0].alert.message.contains("hw_thermal_slowdown for 10s"), "{}", fired[0].alert.message);
    w.samples[0].clock_events = Some(vec!["idle".into()]);
    assert_eq!(kinds(&w.at(41 * S)), [(ChangeKind::Resolved, Rule::ClockEvents, 0)]);
}

#[test]
fn memory_full_fires_at_its_share_and_resolves_two_points_below() {
    let mut w = World::new();
    w.rules.memory_full.config.hold = Duration::ZERO;
    w.samples[0].memory_used = Some(96 << 30);
    let fired = w.at(0);
    assert_eq!(kinds(&fired), [(ChangeKind::Fired, Rule::MemoryFull, 0)]);
    assert!(fired[0].alert.message.contains("96.0% of its memory"), "{}", fired[0].alert.message);
    w.samples[0].memory_used = Some(94 << 30);
    assert!(w.at(S).is_empty(), "94% is within the hysteresis");
    w.samples[0].memory_used = Some(92 << 30);
    assert_eq!(kinds(&w.at(2 * S)), [(ChangeKind::Resolved, Rule::MemoryFull, 0)]);
}

fn xid(device: u32, at: u64, code: u64) -> XidEvent {
    XidEvent { device, timestamp_ms: at, code, meaning: shared::health::xid_meaning(code).into() }
}

#[test]
fn an_xid_fires_at_once_extends_while_firing_and_resolves_when_quiet() {
    let mut w = World::new();
    w.rules.xid.settings.quiet = Duration::from_secs(600);
    w.rules.xid.settings.ignore = vec![43];
    w.health[1].xids.push(xid(1, 10, 43));
    assert!(w.at(S).is_empty(), "43 is ignored");
    w.health[1].xids.push(xid(1, 20, 79));
    let fired = w.at(2 * S);
    assert_eq!(kinds(&fired), [(ChangeKind::Fired, Rule::Xid, 1)]);
    assert_eq!(fired[0].alert.message, "GPU 1 (NVIDIA H200) reported XID 79: GPU has fallen off the bus");
    assert_eq!(fired[0].alert.severity, Severity::Critical);
    assert!(w.at(3 * S).is_empty(), "the same XID is not new");
    w.health[1].xids.push(xid(1, 30, 94));
    let updated = w.at(100 * S);
    assert_eq!(kinds(&updated), [(ChangeKind::Updated, Rule::Xid, 1)]);
    assert!(updated[0].alert.message.contains("2 XID errors") && updated[0].alert.message.contains("XID 94"));
    assert!(w.at(699 * S).is_empty(), "quiet is counted from the latest XID");
    assert_eq!(kinds(&w.at(700 * S)), [(ChangeKind::Resolved, Rule::Xid, 1)]);
}

#[test]
fn ecc_fires_on_uncorrectable_errors_or_remaps_and_resolves_after_a_reset() {
    let mut w = World::new();
    w.health[0].remapped_rows.pending = Some(true);
    let fired = w.at(0);
    assert_eq!(kinds(&fired), [(ChangeKind::Fired, Rule::Ecc, 0)]);
    assert!(fired[0].alert.message.contains("pending a reset"));
    w.health[0].ecc_volatile.uncorrected = Some(2);
    assert!(w.at(S).is_empty());
    w.health[0].remapped_rows.pending = Some(false);
    assert!(w.at(2 * S).is_empty(), "the uncorrectable errors still count");
    w.health[0].ecc_volatile.uncorrected = Some(0);
    assert_eq!(kinds(&w.at(3 * S)), [(ChangeKind::Resolved, Rule::Ecc, 0)]);
    w.health[1].remapped_rows.failed = Some(true);
    assert_eq!(kinds(&w.at(4 * S)), [(ChangeKind::Fired, Rule::Ecc, 1)]);
}

#[test]
fn a_lost_gpu_fires_and_resolves_its_gauges_alerts_then_resolves_when_it_answers() {
    let mut w = World::new();
    w.rules.memory_full.config.hold = Duration::ZERO;
    w.samples[1].memory_used = Some(99 << 30);
    assert_eq!(kinds(&w.at(0)), [(ChangeKind::Fired, Rule::MemoryFull, 1)]);
    w.samples[1] = DeviceSample { index: 1, lost: Some("GPU is lost".into()), ..DeviceSample::default() };
    let changes = w.at(S);
    assert_eq!(
        kinds(&changes),
        [(ChangeKind::Fired, Rule::DeviceLost, 1), (ChangeKind::Resolved, Rule::MemoryFull, 1)]
    );
    assert!(changes[0].alert.message.contains("stopped answering: GPU is lost"));
    assert!(w.at(2 * S).is_empty());
    w.samples[1] = DeviceSample { index: 1, temperature_c: Some(40), ..DeviceSample::default() };
    assert_eq!(kinds(&w.at(3 * S)), [(ChangeKind::Resolved, Rule::DeviceLost, 1)]);
}

#[test]
fn idle_held_fires_per_process_and_resolves_when_the_flag_clears_or_it_is_gone() {
    let mut w = World::new();
    w.rules.idle_held.config.hold = Duration::from_secs(60);
    let mut a = process(0, 7, "eli");
    a.idle = Some(IdleHold { since_ms: 0, signal: IdleSignal::SmActivity });
    let mut b = process(0, 8, "ana");
    b.idle = a.idle;
    w.processes = vec![a, b];
    assert!(w.at(30 * S).is_empty());
    let fired = w.at(60 * S);
    assert_eq!(fired.len(), 2, "one per process");
    assert_eq!((fired[0].alert.pid, fired[0].alert.user.as_deref()), (Some(7), Some("eli")));
    let message = &fired[0].alert.message;
    // The moment it went idle (the epoch here), not a length that would freeze while the alert fires.
    assert!(message.contains("PID 7 holds") && message.contains(" since 1970-01-01 00:00 UTC"), "{message}");
    assert!(!message.contains("eli"), "the user travels in `user`, which anonymous viewers do not get: {message}");
    w.processes[0].idle = None;
    let resolved = w.at(61 * S);
    assert_eq!(resolved.len(), 1);
    assert_eq!((resolved[0].kind, resolved[0].alert.pid), (ChangeKind::Resolved, Some(7)));
    w.processes.pop();
    let gone = w.at(62 * S);
    assert_eq!((gone[0].kind, gone[0].alert.pid), (ChangeKind::Resolved, Some(8)));
}

#[test]
fn an_intruder_on_a_reserved_gpu_alerts_the_holder_until_the_reservation_ends() {
    let mut w = World::new();
    w.reservations = vec![shared::reservations::Reservation {
        id: 3,
        devices: vec![1],
        user: "ana".into(),
        start_ms: 10 * S,
        end_ms: 100 * S,
        note: String::new(),
        created_ms: 0,
        released_ms: None,
        intruders: Vec::new(),
        redacted: false,
    }];
    w.processes = vec![process(1, 7, "bo"), process(1, 8, "ana"), process(0, 9, "bo")];
    assert!(w.at(5 * S).iter().all(|c| c.alert.rule != Rule::ReservationIntruder), "not in force yet");
    let fired: Vec<_> = w.at(20 * S).into_iter().filter(|c| c.alert.rule == Rule::ReservationIntruder).collect();
    assert_eq!(fired.len(), 1, "only bo's process on GPU 1: {fired:?}");
    let alert = &fired[0].alert;
    assert_eq!((alert.pid, alert.user.as_deref(), alert.severity), (Some(7), Some("ana"), Severity::Warning));
    assert!(alert.message.contains("reservation 3") && !alert.message.contains("bo"), "{}", alert.message);
    assert!(w.at(30 * S).is_empty(), "fires once");
    let ended = w.at(100 * S);
    assert_eq!(kinds(&ended), [(ChangeKind::Resolved, Rule::ReservationIntruder, 1)]);
}

#[test]
fn a_gpu_that_comes_free_fires_but_one_free_since_start_up_does_not() {
    let mut w = World::new();
    w.rules.gpu_free.config.hold = Duration::from_secs(30);
    w.processes = vec![process(0, 7, "eli")];
    assert!(w.at(0).is_empty());
    w.processes.clear();
    idle_figures(&mut w, 0);
    assert!(w.at(S).is_empty());
    assert!(w.at(30 * S).is_empty(), "free for 29 s only");
    let fired = w.at(31 * S);
    assert_eq!(kinds(&fired), [(ChangeKind::Fired, Rule::GpuFree, 0)], "GPU 1 was never used");
    assert_eq!((fired[0].alert.user.as_deref(), fired[0].alert.severity), (Some("eli"), Severity::Info));
    assert!(w.at(100 * S).is_empty());
    w.processes = vec![process(0, 9, "ana")];
    assert_eq!(kinds(&w.at(101 * S)), [(ChangeKind::Resolved, Rule::GpuFree, 0)]);
}

/// GPU `index` reads as a GPU nobody uses: no utilization, a few MiB of memory (else it is in
/// use with no visible process, and never free: `tests/integration/trust.rs`).
fn idle_figures(w: &mut World, index: usize) {
    (w.samples[index].gpu_util, w.samples[index].memory_used) = (Some(0), Some(4 << 20));
}

#[test]
fn processes_are_not_judged_before_the_slow_loop_reports() {
    let mut w = World::new();
    w.rules.gpu_free.config.hold = Duration::ZERO;
    w.processes = vec![process(0, 7, "eli")];
    w.at(0);
    w.processes.clear();
    idle_figures(&mut w, 0);
    w.details_seen = false;
    assert!(w.at(S).is_empty());
    w.details_seen = true;
    assert_eq!(kinds(&w.at(2 * S)), [(ChangeKind::Fired, Rule::GpuFree, 0)]);
}

fn stored(id: u64, rule: Rule, gpu: u32, pid: Option<u32>) -> Alert {
    Alert {
        id,
        rule,
        severity: Severity::Warning,
        gpu_index: gpu,
        gpu_uuid: format!("GPU-{gpu}"),
        pid,
        user: None,
        message: "before".into(),
        action: String::new(),
        fired_ms: 5,
        resolved_ms: None,
        silenced: None,
        simulated: false,
        redacted: false,
    }
}

#[test]
fn alerts_firing_before_a_restart_are_carried_on_not_fired_twice() {
    let mut w = World::new();
    let firing = vec![
        stored(7, Rule::DeviceLost, 1, None),
        stored(8, Rule::IdleHeld, 0, Some(41)),
        stored(9, Rule::Temperature, 5, None),
    ];
    w.book = Book::new(3, firing, 1000);
    w.samples[1].lost = Some("GPU is lost".into());
    let mut holder = process(0, 41, "eli");
    holder.idle = None;
    w.samples[0].gpu_util = Some(0);
    w.processes = vec![holder];
    let changes = w.at(2000);
    assert_eq!(kinds(&changes), [(ChangeKind::Resolved, Rule::Temperature, 5)], "GPU 5 is gone");
    assert_eq!(w.book.firing_count(), 2, "lost and idle_held carry on, not fired again");
    w.samples[1].lost = None;
    w.samples[1].temperature_c = Some(40);
    w.samples[0].gpu_util = Some(80);
    let changes = w.at(3000);
    assert_eq!(
        kinds(&changes),
        [(ChangeKind::Resolved, Rule::IdleHeld, 0), (ChangeKind::Resolved, Rule::DeviceLost, 1)]
    );
    w.health[0].remapped_rows.failed = Some(true);
    assert_eq!(w.at(4000)[0].alert.id, 10, "new ids follow the stored ones");
}

#[test]
fn silences_mark_firing_alerts_and_lapse() {
    let mut w = World::new();
    w.health[0].remapped_rows.failed = Some(true);
    w.silences = vec![Silence {
        id: 1,
        rule: Rule::Ecc,
        gpu_uuid: "GPU-0".into(),
        by: "omar".into(),
        reason: "ticket 12".into(),
        from_ms: 0,
        until_ms: 10 * S,
    }];
    let fired = w.at(S);
    assert!(fired[0].alert.silenced.is_some(), "fired under a silence");
    let lapsed = w.at(10 * S);
    assert_eq!(kinds(&lapsed), [(ChangeKind::Silenced, Rule::Ecc, 0)]);
    assert!(lapsed[0].alert.silenced.is_none());
}

#[test]
fn a_rule_switched_off_resolves_its_alerts() {
    let mut w = World::new();
    w.health[0].remapped_rows.failed = Some(true);
    w.at(0);
    w.rules.ecc.config.enabled = false;
    assert_eq!(kinds(&w.at(S)), [(ChangeKind::Resolved, Rule::Ecc, 0)]);
    assert!(w.at(2 * S).is_empty());
}

#[test]
fn spans_read_as_people_say_them() {
    assert_eq!(human(45 * S), "45s");
    assert_eq!(human(65 * S), "1m 5s");
    assert_eq!(human(120 * S), "2m");
    assert_eq!(human(3 * 3600 * S + 60 * S), "3h 1m");
    assert_eq!(human(26 * 3600 * S), "1d 2h");
}

#[test]
fn the_handle_announces_fires_with_the_firing_count_and_reloads_only_good_files() {
    let alerts = Alerts::in_memory(AlertsConfig::default()).unwrap();
    let mut events = alerts.subscribe();
    let w = World::new();
    let mut health = w.health.clone();
    health[0].remapped_rows.failed = Some(true);
    health[1].ecc_volatile.uncorrected = Some(1);
    let input = Inputs {
        devices: &w.devices,
        samples: &w.samples,
        health: &health,
        processes: &[],
        details_seen: true,
        simulated: true,
        reservations: &[],
        ooms: &[],
    };
    assert_eq!(alerts.evaluate(&input, 1000).len(), 2);
    let (first, second) = (events.try_recv().unwrap(), events.try_recv().unwrap());
    assert_eq!((first.firing, second.firing), (1, 2));
    assert!(first.alert.simulated);
    alerts.sync().unwrap();
    assert_eq!(alerts.list(store::alerts::AlertFilter::default()).unwrap().len(), 2);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alerts.toml");
    std::fs::write(&file, "[rules.temperature]\ncelsius = 999\n").unwrap();
    assert!(alerts.reload(&file).is_err());
    assert!(alerts.reload_error().unwrap().contains("use 30 to 120"));
    assert_eq!(alerts.config().borrow().rules.temperature.settings.celsius, 85, "the old rules keep running");
    std::fs::write(&file, "[rules.temperature]\ncelsius = 70\n").unwrap();
    alerts.reload(&file).unwrap();
    assert_eq!((alerts.reload_error(), alerts.config().borrow().rules.temperature.settings.celsius), (None, 70));
    assert!(alerts.rules()[0].condition.contains("≥ 70 °C"), "{:?}", alerts.rules()[0]);
}

#[test]
fn an_oom_fires_at_once_for_the_processs_user_and_resolves_when_quiet_or_gone() {
    let mut w = World::new();
    let oom = |at_ms| super::OomSignal {
        pid: 77,
        gpu_uuid: Some("GPU-1".into()),
        device: 0,
        owner: "ana".into(),
        reporter: "ana".into(),
        at_ms,
        what: "asked for 2.00 GiB, largest free block 512 MiB, 3.50 GiB free in total (fragmented)".into(),
    };
    w.ooms = vec![oom(S)];
    let fired = w.at(S);
    assert_eq!(kinds(&fired), [(ChangeKind::Fired, Rule::Oom, 1)], "matched by UUID, not the process's index");
    let alert = &fired[0].alert;
    assert_eq!((alert.severity, alert.pid, alert.user.as_deref()), (Severity::Critical, Some(77), Some("ana")));
    assert!(alert.message.contains("PID 77 ran out of memory on GPU 1") && alert.message.contains("fragmented"));
    // NVML does not list PID 77 (a container): the alert stays, the bridge still hears from the process.
    assert!(w.at(2 * S).is_empty());
    w.ooms = vec![oom(3 * S)];
    assert_eq!(kinds(&w.at(3 * S)), [(ChangeKind::Updated, Rule::Oom, 1)], "a second OOM updates it");
    assert_eq!(kinds(&w.at(3 * S + 600 * S)), [(ChangeKind::Resolved, Rule::Oom, 1)], "quiet for 10 minutes");
    w.ooms = vec![oom(700 * S)];
    assert_eq!(kinds(&w.at(700 * S)), [(ChangeKind::Fired, Rule::Oom, 1)]);
    w.ooms.clear();
    assert_eq!(kinds(&w.at(701 * S)), [(ChangeKind::Resolved, Rule::Oom, 1)], "the process stopped reporting");
    w.rules.oom.config.enabled = false;
    w.ooms = vec![oom(702 * S)];
    assert!(w.at(702 * S).is_empty(), "turned off in the alerts file");
}

#[test]
fn an_alert_is_as_bad_as_the_overview_rates_its_reading() {
    let mut w = World::new();
    (w.rules.temperature.config.hold, w.rules.temperature.settings.celsius) = (Duration::ZERO, 80);
    w.devices[0].slowdown_temp_c = Some(87);
    w.samples[0].temperature_c = Some(84);
    let fired = w.at(0);
    assert_eq!((fired[0].kind, fired[0].alert.severity), (ChangeKind::Fired, Severity::Warning), "⚠ near slowdown");
    w.samples[0].temperature_c = Some(92);
    let rated = w.at(S);
    assert_eq!((rated[0].kind, rated[0].alert.severity), (ChangeKind::Rated, Severity::Critical), "✖ past it");
    assert!(w.at(2 * S).is_empty(), "rated once");
    // An application's XID warns, a hardware one is critical, and makes the alert critical.
    w.health[1].xids.push(xid(1, 10, 13));
    assert_eq!(w.at(3 * S)[0].alert.severity, Severity::Warning);
    w.health[1].xids.push(xid(1, 20, 79));
    let worse = w.at(4 * S);
    assert_eq!((worse[0].kind, worse[0].alert.severity), (ChangeKind::Rated, Severity::Critical));
}

#[test]
fn an_unhealthy_gpu_whose_jobs_ended_is_not_announced_free() {
    let mut w = World::new();
    w.rules.gpu_free.config.hold = Duration::ZERO;
    w.rules.xid.config.enabled = false;
    w.processes = vec![process(0, 7, "eli")];
    w.at(0);
    w.processes.clear();
    w.health[0].xids.push(xid(0, 1, 79));
    assert!(w.at(S).is_empty(), "XID 79: not free");
    w.health[0].xids.clear();
    assert!(w.at(2 * S).is_empty(), "its jobs were lost with it: nothing came free");
}
