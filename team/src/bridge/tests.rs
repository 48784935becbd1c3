//! The registry's unit tests: joins, staleness and expiry, consent, caps, and who may report for a process.

use shared::bridge::{Command, CommandResult, Span, TorchMemory};

use super::*;

fn report(pid: u32, allow: bool) -> Report {
    Report {
        version: 1,
        pid,
        host: "node".into(),
        process_name: "python train.py".into(),
        torch_version: "2.11.0".into(),
        cuda_version: Some("13.0".into()),
        allow_remote_empty_cache: allow,
        share_allocator_map: false,
        interval_s: 1.0,
        devices: vec![TorchMemory {
            device: 0,
            uuid: Some("GPU-a".into()),
            allocated: 100,
            reserved: 400,
            ..Default::default()
        }],
        spans: vec![],
        command_results: vec![],
    }
}

fn device(index: u32, uuid: &str) -> DeviceInfo {
    DeviceInfo {
        name: "g".into(),
        uuid: uuid.into(),
        memory_total: 1000,
        simulated: true,
        ..shared::testing::device(index)
    }
}

fn nvml_row(pid: u32, device: u32, used: u64) -> GpuProcess {
    GpuProcess { used_memory: Some(used), user: Some("ana".into()), ..shared::testing::process(device, pid) }
}

#[test]
fn reports_join_nvml_by_pid_and_uuid() {
    let registry = Registry::default();
    registry.report(&Reporter::user("ana"), None, report(42, false), 1_000).unwrap();
    let devices = [device(0, "GPU-x"), device(3, "GPU-a")];
    let list = registry.list(&devices, &[nvml_row(42, 3, 900)], 1_500);
    let p = &list[0];
    assert!(p.pid_matched && !p.stale);
    assert_eq!(p.user.as_deref(), Some("ana"));
    assert_eq!(p.devices[0].gpu, 3, "matched by UUID, not by the process's own index");
    assert_eq!((p.devices[0].nvml_used, p.devices[0].overhead), (Some(900), Some(500)));
    let unmatched = registry.list(&devices, &[], 1_500);
    assert!(!unmatched[0].pid_matched, "another PID namespace");
}

#[test]
fn silent_processes_turn_stale_but_stay() {
    let registry = Registry::default();
    registry.report(&Reporter::user("ana"), None, report(7, false), 0).unwrap();
    assert!(!registry.list(&[], &[], 4_000)[0].stale);
    let later = registry.list(&[], &[], 6_000);
    assert_eq!(later.len(), 1);
    assert!(later[0].stale);
}

#[test]
fn empty_cache_needs_consent_and_round_trips() {
    let registry = Registry::default();
    registry.report(&Reporter::user("ana"), None, report(1, false), 0).unwrap();
    registry.report(&Reporter::user("ana"), None, Report { host: "other".into(), ..report(2, true) }, 0).unwrap();
    let list = registry.list(&[], &[], 0);
    let (refuses, allows) =
        (list.iter().find(|p| p.pid == 1).unwrap().id, list.iter().find(|p| p.pid == 2).unwrap().id);
    assert_eq!(registry.request_empty_cache(refuses, 10), Err(BridgeError::NotAllowed(1)));
    assert_eq!(registry.request_empty_cache(999, 10), Err(BridgeError::NoProcess(999)));
    let state = registry.request_empty_cache(allows, 10).unwrap();
    let answer = registry
        .report(&Reporter::user("ana"), None, Report { host: "other".into(), ..report(2, true) }, 20)
        .unwrap()
        .answer;
    assert_eq!(answer.commands, vec![Command::EmptyCache { id: state.id }]);
    let done = Report {
        host: "other".into(),
        command_results: vec![CommandResult { id: state.id, ok: true, released_bytes: 300 }],
        ..report(2, true)
    };
    assert!(registry.report(&Reporter::user("ana"), None, done, 30).unwrap().answer.commands.is_empty());
    let after = registry.list(&[], &[], 30);
    let process = after.iter().find(|p| p.pid == 2).unwrap();
    assert_eq!(process.empty_cache.unwrap().released_bytes, Some(300));
}

#[test]
fn bad_reports_are_refused_with_the_rule() {
    let registry = Registry::default();
    for (report, expected) in [
        (Report { version: 2, ..report(1, false) }, "version 1"),
        (Report { pid: 0, ..report(1, false) }, "'pid'"),
        (Report { interval_s: f64::NAN, ..report(1, false) }, "'interval_s'"),
        (Report { host: String::new(), ..report(1, false) }, "'host'"),
        (Report { torch_version: "9".repeat(65), ..report(1, false) }, "'torch_version'"),
        (Report { devices: vec![TorchMemory::default(); 17], ..report(1, false) }, "at most 16 devices"),
    ] {
        let err = registry.report(&Reporter::user("ana"), None, report, 0).unwrap_err().to_string();
        assert!(err.contains(expected), "{err}");
    }
    assert!(registry.list(&[], &[], 0).is_empty(), "nothing stored");
}

#[test]
fn silent_processes_expire_after_ten_minutes_or_ten_intervals() {
    let registry = Registry::default();
    registry.report(&Reporter::user("ana"), None, report(7, false), 0).unwrap();
    registry.report(&Reporter::user("ana"), None, Report { interval_s: 600.0, ..report(8, false) }, 0).unwrap();
    assert_eq!(registry.list(&[], &[], EXPIRE_AFTER_MS).len(), 2);
    let pids: Vec<u32> = registry.list(&[], &[], EXPIRE_AFTER_MS + 1).iter().map(|p| p.pid).collect();
    assert_eq!(pids, [8], "ten 600 s intervals are longer than 10 minutes, but capped at an hour");
    assert!(registry.list(&[], &[], EXPIRE_AFTER_MAX_MS + 1).is_empty());
}

#[test]
fn caps_per_user_and_in_total_refuse_new_processes_only() {
    let registry = Registry::default();
    for pid in 1..=MAX_PER_USER as u32 {
        registry.report(&Reporter::user("ana"), None, report(pid, false), 0).unwrap();
    }
    let refused = registry.report(&Reporter::user("ana"), None, report(1_000, false), 0).unwrap_err();
    assert_eq!(refused, BridgeError::TooManyForUser { user: "ana".into() });
    assert!(refused.to_string().contains("32 attached processes"), "{refused}");
    registry.report(&Reporter::user("ana"), None, report(1, false), 1).expect("a known process keeps reporting");
    let mut user = 0;
    while registry.list(&[], &[], 1).len() < MAX_TOTAL {
        user += 1;
        for pid in 1..=MAX_PER_USER as u32 {
            registry.report(&Reporter::user(&format!("user{user}")), None, report(pid + 100 * user, false), 1).unwrap();
        }
    }
    assert_eq!(
        registry.report(&Reporter::user("newcomer"), None, report(99_999, false), 1).unwrap_err(),
        BridgeError::TooMany
    );
    // Once the flood goes silent, it expires and makes room again.
    registry
        .report(&Reporter::user("newcomer"), None, report(99_999, false), 2 + EXPIRE_AFTER_MS)
        .expect("room after expiry");
}

#[test]
fn another_users_report_for_the_same_process_is_refused_and_changes_nothing() {
    let registry = Registry::default();
    let first = registry.report(&Reporter::user("ana"), None, report(5, false), 0).unwrap();
    assert!(matches!(first.notices[..], [Notice::Attached { .. }]));
    let spoof = Report { allow_remote_empty_cache: true, ..report(5, true) };
    let refused = registry.report(&Reporter::user("eve"), None, spoof.clone(), 10).unwrap_err();
    assert!(matches!(&refused, BridgeError::NotOwner { owner, audit: true, .. } if owner == "ana"), "{refused:?}");
    assert!(refused.to_string().contains("attached by 'ana'"), "{refused}");
    let again = registry.report(&Reporter::user("eve"), None, spoof, 20).unwrap_err();
    assert!(matches!(again, BridgeError::NotOwner { audit: false, .. }), "retries are not audited each time");
    let listed = &registry.list(&[], &[], 30)[0];
    assert!(!listed.allow_remote_empty_cache, "the spoofed consent was not stored");
    assert_eq!(registry.request_empty_cache(first.id, 30), Err(BridgeError::NotAllowed(5)));
}

#[test]
fn a_pid_that_runs_as_someone_else_is_theirs_whoever_attached_it() {
    let registry = Registry::default();
    let (eve, ana) = (Reporter::user("eve"), Reporter::user("ana"));
    // Claimed while this host did not show the PID, then it runs as ana: eve's entry goes.
    let squat = registry.report(&eve, None, report(5, true), 0).unwrap();
    let refused = registry.report(&eve, Some("ana"), report(5, true), 10).unwrap_err();
    assert_eq!(refused, BridgeError::NotPidOwner { pid: 5, owner: "ana".into(), user: "eve".into() });
    assert!(registry.list(&[], &[], 10).is_empty(), "the squatted entry was dropped");
    let attached = registry.report(&ana, Some("ana"), report(5, false), 20).unwrap();
    assert_ne!(attached.id, squat.id);
    assert!(matches!(registry.report(&eve, Some("ana"), report(5, true), 30), Err(BridgeError::NotPidOwner { .. })));
    // An admin may report for it; it stays ana's.
    let ada = Reporter { user: "ada".into(), admin: true };
    assert_eq!(registry.report(&ada, Some("ana"), report(5, false), 40).unwrap().id, attached.id);
    assert_eq!(registry.report(&ana, Some("ana"), report(5, false), 50).unwrap().id, attached.id);
    let listed = &registry.list(&[], &[], 50)[0];
    assert!(!listed.allow_remote_empty_cache, "eve's consent was never stored");
    // An admin's attach binds the entry to the PID's user, not to the admin.
    registry.report(&ada, Some("bo"), report(6, false), 60).unwrap();
    registry.report(&Reporter::user("bo"), Some("bo"), report(6, false), 70).expect("bo's own process");
}

#[test]
fn consent_is_checked_again_at_delivery_and_results_need_a_delivered_command() {
    let registry = Registry::default();
    let id = registry.report(&Reporter::user("ana"), None, report(9, true), 0).unwrap().id;
    let state = registry.request_empty_cache(id, 10).unwrap();
    let early = Report {
        command_results: vec![CommandResult { id: state.id, ok: true, released_bytes: 1 << 40 }],
        ..report(9, false)
    };
    let withdrawn = registry.report(&Reporter::user("ana"), None, early, 20).unwrap();
    assert!(withdrawn.answer.commands.is_empty(), "consent withdrawn: not delivered");
    assert_eq!(withdrawn.notices, [Notice::ConsentChanged { allow: false }, Notice::Withheld { command: state.id }]);
    let after = registry.list(&[], &[], 20)[0].empty_cache.unwrap();
    assert!(after.refused && after.released_bytes.is_none(), "an undelivered command takes no result: {after:?}");

    registry.report(&Reporter::user("ana"), None, report(9, true), 30).unwrap();
    let state = registry.request_empty_cache(id, 40).unwrap();
    let delivered = registry.report(&Reporter::user("ana"), None, report(9, true), 50).unwrap();
    assert_eq!(delivered.notices, [Notice::Delivered { command: state.id }]);
    let done = Report {
        command_results: vec![CommandResult { id: state.id, ok: true, released_bytes: 300 }],
        ..report(9, true)
    };
    let notices = registry.report(&Reporter::user("ana"), None, done.clone(), 60).unwrap().notices;
    assert_eq!(notices, [Notice::Done { command: state.id, ok: true, released_bytes: 300 }]);
    assert!(
        registry.report(&Reporter::user("ana"), None, done, 70).unwrap().notices.is_empty(),
        "a result counts once"
    );
}

#[test]
fn the_list_keeps_only_a_few_recent_spans_and_the_detail_more() {
    let registry = Registry::default();
    let spans: Vec<Span> = (0..300)
        .map(|i| Span {
            name: "step".into(),
            device: 0,
            start_ms: i,
            elapsed_ms: 1.0,
            memory_delta: 0,
            memory_peak: 0,
            peak_bound: false,
        })
        .collect();
    let id = registry.report(&Reporter::user("ana"), None, Report { spans, ..report(3, false) }, 0).unwrap().id;
    let listed = &registry.list(&[], &[], 0)[0];
    assert_eq!((listed.recent_spans.len(), listed.spans[0].count), (RECENT_SPANS_LISTED, 300));
    assert_eq!(registry.detail(id, &[], &[], 0).unwrap().recent_spans.len(), RECENT_SPANS_DETAILED);
    assert_eq!(registry.detail(id + 1, &[], &[], 0), Err(BridgeError::NoProcess(id + 1)));
}

#[test]
fn names_a_client_sends_lose_bidi_overrides_and_zero_width_characters() {
    let registry = Registry::default();
    let sneaky = Report { process_name: "python \u{202E}yp.niart\u{200B}".into(), ..report(9, false) };
    registry.report(&Reporter::user("ana"), None, sneaky, 0).unwrap();
    assert_eq!(registry.list(&[], &[], 0)[0].process_name, "python yp.niart");
}
