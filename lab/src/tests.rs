//! The lab's API against the simulated executor: what `submit` refuses, the
//! per-user queue limit, cancel, get and list, and the events it publishes.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::experiments::latency::params::LatencyParams;
use crate::values::CopyKind;
use shared::lab::{ExperimentKind, ExperimentParams, LabEvent, Run, RunRequest, RunStatus};
use tokio::sync::broadcast::error::TryRecvError;

use super::guards::SimulatedProbe;
use super::{Lab, LabConfig, LabError, LabGpu, LabHost, LabSetup};
use store::runs::RunFilter;

/// Long enough for a run to stay running while a test acts on the queue behind it.
const SLOW: u64 = 200;
const FAST: u64 = 1;

fn setup(devices: u32, step_ms: u64, config: LabConfig) -> LabSetup {
    let gpus = (0..devices)
        .map(|index| LabGpu { index, name: format!("Simulated GPU {index}"), uuid: format!("GPU-{index}") })
        .collect();
    let host = LabHost { hostname: "test-host".into(), ..LabHost::default() };
    let probe = Arc::new(SimulatedProbe::default());
    LabSetup::simulated(config, host, gpus, probe, Duration::from_millis(step_ms))
}

fn lab(devices: u32, step_ms: u64) -> Lab {
    Lab::start(setup(devices, step_ms, LabConfig::default()))
}

fn request(device: u32, kind: ExperimentKind) -> RunRequest {
    RunRequest { device, params: ExperimentParams::defaults(kind), force: false }
}

/// Polls `get(id)` until `done` holds for the run, for at most ten seconds.
fn wait_for(lab: &Lab, id: u64, done: impl Fn(&Run) -> bool) -> Run {
    let deadline = base::clock::Deadline::after(Duration::from_secs(10));
    loop {
        let run = lab.get(id).unwrap();
        if done(&run) {
            return run;
        }
        assert!(!deadline.passed(), "run {id} stayed {:?}", run.summary.status);
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn ended(lab: &Lab, id: u64) -> Run {
    wait_for(lab, id, |r| r.summary.status.is_final())
}

#[test]
fn submit_refuses_bad_requests_before_queueing() {
    let lab = lab(1, FAST);
    assert_eq!(lab.submit(request(7, ExperimentKind::named("latency")), "alice"), Err(LabError::NoDevice(7)));
    let few = RunRequest {
        params: crate::experiments::params_of::<crate::experiments::latency::Latency>(&LatencyParams {
            repetitions: 1,
            ..LatencyParams::default()
        }),
        ..request(0, ExperimentKind::named("latency"))
    };
    let Err(LabError::Invalid(message)) = lab.submit(few, "alice") else { panic!("1 repetition accepted") };
    assert!(message.contains("repetitions"), "{message}");
    let Err(LabError::Conflict(message)) = lab.submit(request(0, ExperimentKind::named("p2p")), "alice") else {
        panic!("p2p accepted on one GPU")
    };
    assert_eq!(message, "P2P needs two GPUs; this server has one");
    assert_eq!(lab.status().queue_total, 0, "nothing was queued");
    assert!(lab.list(&RunFilter::default()).unwrap().is_empty(), "nothing was stored");
    lab.shutdown();
}

#[test]
#[cfg(feature = "cuda")]
fn an_unavailable_lab_says_why() {
    use super::Unavailable;
    use super::cuda::MissingLibraries;

    let mut setup = setup(1, FAST, LabConfig::default());
    let missing = MissingLibraries { missing: vec!["libcuda (the NVIDIA driver) not found (tried libcuda.so)".into()] };
    setup.executors = Err(missing.into());
    let lab = Lab::start(setup);
    let status = lab.status();
    assert!(!status.available);
    let reason =
        "libcuda (the NVIDIA driver) not found (tried libcuda.so); install them or add their folder to LD_LIBRARY_PATH";
    assert_eq!(status.reason.as_deref(), Some(reason));
    let err = lab.submit(request(0, ExperimentKind::named("latency")), "alice").unwrap_err();
    assert!(matches!(err, LabError::Unavailable(Unavailable::Cuda(_))), "{err:?}");
    assert_eq!(err.to_string(), format!("the GPU lab is unavailable: {reason}"));
    // Every experiment is still listed, each with the lab's reason.
    let listed = lab.experiments();
    assert_eq!(listed.len(), crate::experiments::ALL.len());
    for e in listed {
        assert_eq!(e.unavailable.as_deref(), Some(format!("the GPU lab is unavailable: {reason}").as_str()));
    }
    lab.shutdown();
}

#[test]
fn one_user_may_queue_only_so_many_runs() {
    let config = LabConfig { queue_per_user: 2, ..LabConfig::default() };
    let lab = Lab::start(setup(1, SLOW, config));
    for _ in 0..2 {
        lab.submit(request(0, ExperimentKind::named("latency")), "alice").unwrap();
    }
    let Err(LabError::QueueFull(message)) = lab.submit(request(0, ExperimentKind::named("latency")), "alice") else {
        panic!("a third run accepted")
    };
    assert!(message.starts_with("'alice' already has 2 lab runs queued or running"), "{message}");
    assert!(message.contains("--lab-queue-per-user 2"), "{message}");
    lab.submit(request(0, ExperimentKind::named("latency")), "bob").expect("another user's run");
    assert_eq!(lab.status().queue_total, 3);
    assert_eq!(lab.status().queue_per_user, 2);
    lab.shutdown();
}

#[test]
fn cancel_stops_queued_and_running_runs() {
    let lab = lab(1, SLOW);
    let first = lab.submit(request(0, ExperimentKind::named("latency")), "alice").unwrap().summary.id;
    let second = lab.submit(request(0, ExperimentKind::named("latency")), "alice").unwrap().summary.id;
    wait_for(&lab, first, |r| r.summary.status == RunStatus::Running);

    let queued = lab.cancel(second).unwrap();
    assert_eq!(queued.status, RunStatus::Cancelled);
    assert_eq!(queued.error.as_deref(), Some("cancelled before it started"));
    assert_eq!(lab.cancel(second), Err(LabError::Conflict(format!("run {second} already ended (\"cancelled\")"))));
    assert_eq!(lab.cancel(99), Err(LabError::NoRun(99)));

    assert_eq!(lab.cancel(first).unwrap().status, RunStatus::Running, "it stops at its next check");
    assert_eq!(ended(&lab, first).summary.status, RunStatus::Cancelled);
    assert_eq!(lab.status().queue_total, 0);
    lab.shutdown();
}

#[test]
fn get_and_list_find_runs_and_their_predecessor() {
    let lab = lab(2, FAST);
    let mut ids = Vec::new();
    for (device, kind) in [
        (0, ExperimentKind::named("latency")),
        (0, ExperimentKind::named("memory")),
        (1, ExperimentKind::named("latency")),
    ] {
        let id = lab.submit(request(device, kind), "alice").unwrap().summary.id;
        assert_eq!(ended(&lab, id).summary.status, RunStatus::Succeeded);
        ids.push(id);
    }
    let all: Vec<u64> = lab.list(&RunFilter::default()).unwrap().iter().map(|r| r.id).collect();
    assert_eq!(all, ids.iter().rev().copied().collect::<Vec<_>>(), "newest first");
    let on_one = lab.list(&RunFilter { device: Some(1), ..RunFilter::default() }).unwrap();
    assert_eq!(on_one.iter().map(|r| r.id).collect::<Vec<_>>(), vec![ids[2]]);

    let run = lab.get(ids[2]).unwrap();
    assert!(run.result.is_some(), "a finished run has its result");
    assert_eq!(run.environment.gpu_uuid, "GPU-1");
    assert_eq!(run.environment.hostname, "test-host");
    assert_eq!(run.previous_id, None, "no earlier latency run on GPU 1");
    let again = lab.submit(request(1, ExperimentKind::named("latency")), "alice").unwrap().summary.id;
    ended(&lab, again);
    assert_eq!(lab.get(again).unwrap().previous_id, Some(ids[2]));
    assert_eq!(lab.get(42), Err(LabError::NoRun(42)));
    lab.shutdown();
}

#[test]
fn a_run_publishes_queued_running_and_ended_events() {
    let lab = lab(1, FAST);
    let mut events = lab.subscribe();
    let id = lab.submit(request(0, ExperimentKind::named("latency")), "alice").unwrap().summary.id;
    let deadline = base::clock::Deadline::after(Duration::from_secs(10));
    let mut statuses = Vec::new();
    let mut saw_status = false;
    while !statuses.last().is_some_and(|s: &RunStatus| s.is_final()) {
        match events.try_recv() {
            Ok(LabEvent::Run(summary)) => {
                assert_eq!((summary.id, summary.requested_by.as_str()), (id, "alice"));
                statuses.push(summary.status);
            }
            Ok(LabEvent::Status(_)) => saw_status = true,
            Ok(_) => {}
            Err(TryRecvError::Empty) => {
                assert!(!deadline.passed(), "no end event; got {statuses:?}");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(statuses, vec![RunStatus::Queued, RunStatus::Running, RunStatus::Succeeded]);
    assert!(saw_status, "every queue change sends the status");
    lab.shutdown();
}

#[test]
fn every_experiment_is_described_with_its_defaults() {
    let lab = lab(1, 1);
    let experiments = lab.experiments();
    assert_eq!(experiments.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(), crate::experiments::kinds());
    for e in experiments {
        assert_eq!(e.defaults.kind(), &e.kind);
        assert!(!e.title.is_empty() && !e.description.is_empty());
        assert_eq!(e.unavailable, None, "a simulated lab runs every kind: {e:?}");
    }
    lab.shutdown();
}

/// Every check of `kind`'s run on `device`, as (name, passed).
fn checks_of(lab: &Lab, device: u32, kind: &ExperimentKind) -> Vec<(String, bool)> {
    let run = lab.submit(request(device, kind.clone()), "alice").unwrap();
    let run = ended(lab, run.summary.id);
    assert_eq!(run.summary.status, RunStatus::Succeeded, "{kind:?}: {:?}", run.summary.error);
    let checks: Vec<(String, bool)> =
        run.result.as_ref().unwrap().checks.iter().map(|c| (c.name.clone(), c.passed)).collect();
    assert_eq!(run.summary.passed, Some(checks.iter().all(|(_, passed)| *passed)), "{kind:?}");
    checks
}

#[test]
fn a_gpu_giving_wrong_results_fails_every_correctness_check_and_a_sound_one_none() {
    let probe = Arc::new(SimulatedProbe::default());
    probe.give_wrong_results(1);
    let gpus = (0..2).map(|index| LabGpu { index, name: format!("GPU {index}"), uuid: String::new() }).collect();
    let host = LabHost::default();
    let lab = Lab::start(LabSetup::simulated(LabConfig::default(), host, gpus, probe, Duration::from_millis(FAST)));
    let kinds = [
        ExperimentKind::named("memory"),
        ExperimentKind::named("transfer"),
        ExperimentKind::named("streams"),
        ExperimentKind::named("precision"),
    ];
    for kind in kinds {
        let sound = checks_of(&lab, 0, &kind);
        assert!(sound.iter().all(|(_, passed)| *passed), "{kind:?} on a sound GPU: {sound:?}");
        let faulty = checks_of(&lab, 1, &kind);
        // Every check of the run's outputs fails; only the overlap check judges timings alone.
        let wrong: Vec<_> = faulty.iter().filter(|(name, _)| name != "copy overlaps compute").collect();
        assert!(!wrong.is_empty() && wrong.iter().all(|(_, passed)| !passed), "{kind:?} on a faulty GPU: {faulty:?}");
    }
    let transfer = checks_of(&lab, 1, &ExperimentKind::named("transfer"));
    assert_eq!(transfer.len(), CopyKind::ALL.len(), "one check per copy kind: {transfer:?}");
    // P2P: copies landing on the faulty GPU fail, in both modes; those landing on the sound one pass.
    let p2p = checks_of(&lab, 0, &ExperimentKind::named("p2p"));
    assert_eq!(p2p.len(), 4, "{p2p:?}");
    for (name, passed) in &p2p {
        assert_eq!(*passed, name.starts_with("GPU 1 → 0"), "{name}");
    }
}
