//! Every alert rule end to end through the simulator: one server with a fault for each rule on its
//! own GPU fires and resolves all eight; each alert is stored, listed by `GET /api/alerts` and
//! delivered to real HTTP receivers (one healthy, one that answers 500 before it accepts, one that
//! hangs past the timeout and holds up nothing); after a restart on the same data directory every
//! alert is still there, once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gpudash::alerts::AlertsConfig;
use gpudash::telemetry::IdleRule;
use gpudash::telemetry::simulator::Simulator;
use shared::alerts::{Alert, AlertsResponse, Rule};

use crate::alerts_webhook::{Answer, Receiver};
use crate::support::{TestServer, eventually, eventually_every, get_json};

/// Which GPU each rule's fault strikes, and the fault (nine GPUs; the demo's notebook sits on GPU 8).
pub(crate) const FAULTS: [(Rule, u32, &str); 8] = [
    (Rule::Temperature, 0, "hot:0@1s+6s"),
    (Rule::ClockEvents, 1, "power-brake:1@1s+4s"),
    (Rule::Xid, 2, "xid:2:13@2s"),
    (Rule::Ecc, 3, "ecc:3@1s+4s"),
    (Rule::DeviceLost, 4, "lost:4@1s+4s"),
    (Rule::MemoryFull, 5, "memory-full:5@1s+5s"),
    (Rule::GpuFree, 6, "job-ends:6@2s+6s"),
    (Rule::IdleHeld, 7, "idle-holder:7@1s+8s"),
];

/// Short holds, so each rule fires within seconds of its fault.
pub(crate) const SHORT_HOLDS: &str = r#"
        [rules.temperature]
        for = "1s"
        [rules.clock_events]
        for = "1s"
        [rules.memory_full]
        for = "1s"
        percent = 97
        [rules.gpu_free]
        for = "1s"
        [rules.xid]
        quiet = "3s"
"#;

/// [`SHORT_HOLDS`] and three webhooks.
fn alerts_file(good: &Receiver, flaky: &Receiver, hung: &Receiver) -> AlertsConfig {
    let text = format!(
        r#"{SHORT_HOLDS}
        [[webhook]]
        url = "{}"
        [[webhook]]
        url = "{}"
        [[webhook]]
        url = "{}"
        timeout = "300ms"
        "#,
        good.url("/good"),
        flaky.url("/flaky"),
        hung.url("/hung"),
    );
    AlertsConfig::parse(&text, "test.toml").unwrap()
}

/// Nine simulated GPUs with history in `dir`, a fault for every rule (or none), idle after 2 s.
pub(crate) async fn server(dir: &Path, config: AlertsConfig, faults: bool) -> TestServer {
    let store = gpudash::store::Store::open(dir, true, gpudash::store::Retention::default()).unwrap();
    let sim = Simulator::new(9, 200).with_idle_holder();
    let sim = if faults { FAULTS.iter().fold(sim, |sim, (_, _, f)| sim.with_fault(f.parse().unwrap())) } else { sim };
    let options = gpudash::Options {
        store: Some(store),
        idle: IdleRule { memory: 1 << 30, after: Duration::from_secs(2) },
        alerts: config,
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(sim), options).await
}

/// The faulted GPUs' alerts, by rule.
fn by_rule(response: &AlertsResponse) -> BTreeMap<Rule, Vec<Alert>> {
    let mut out: BTreeMap<Rule, Vec<Alert>> = BTreeMap::new();
    for (rule, gpu, _) in FAULTS {
        let found = response.alerts.iter().filter(|a| a.rule == rule && a.gpu_index == gpu).cloned().collect();
        out.insert(rule, found);
    }
    out
}

/// (rule, state) pairs the receiver got for the faulted GPUs.
fn delivered(receiver: &Receiver, path: &str) -> Vec<(String, String, u64)> {
    receiver
        .got()
        .into_iter()
        .filter(|g| g.path == path)
        .filter_map(|g| {
            let body: serde_json::Value = serde_json::from_str(&g.body).ok()?;
            let alert: Alert = serde_json::from_value(body["alert"].clone()).ok()?;
            FAULTS
                .iter()
                .any(|(r, gpu, _)| *r == alert.rule && *gpu == alert.gpu_index)
                .then(|| (alert.rule.as_str().to_owned(), body["state"].as_str().unwrap_or("?").to_owned(), alert.id))
        })
        .collect()
}

#[tokio::test]
async fn every_rule_fires_resolves_is_delivered_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let good = Receiver::start(&[], Answer::Status(200)).await;
    let flaky = Receiver::start(&[Answer::Status(500); 3], Answer::Status(200)).await;
    let hung = Receiver::start(&[], Answer::Hang).await;
    let config = alerts_file(&good, &flaky, &hung);

    let first = server(dir.path(), config.clone(), true).await;
    // A failure names each rule still waiting: not fired yet, or fired and not resolved.
    let fired_and_resolved =
        eventually_every(60, Duration::from_millis(100), "every rule to fire and resolve on its GPU", || async {
            let response: AlertsResponse = get_json(&first, "/api/alerts?state=all&limit=1000").await;
            let rules = by_rule(&response);
            let waiting: Vec<String> = FAULTS
                .iter()
                .filter_map(|(rule, gpu, _)| match rules.get(rule) {
                    None => Some(format!("{} on GPU {gpu}: not fired", rule.as_str())),
                    Some(alerts) if !alerts.iter().any(|a| a.resolved_ms.is_some()) => {
                        Some(format!("{} on GPU {gpu}: fired, not resolved", rule.as_str()))
                    }
                    Some(_) => None,
                })
                .collect();
            if waiting.is_empty() {
                return Ok(rules);
            }
            let processes: serde_json::Value = get_json(&first, "/api/processes").await;
            Err((waiting, processes))
        })
        .await;
    for (rule, alerts) in &fired_and_resolved {
        let alert = alerts.iter().find(|a| a.resolved_ms.is_some()).unwrap();
        assert!(alert.simulated, "{rule:?}: the simulator's alerts say so");
        assert!(!alert.message.is_empty() && !alert.action.is_empty(), "{rule:?}: {alert:?}");
        assert!(alert.resolved_ms.unwrap() >= alert.fired_ms, "{rule:?}: resolved before it fired");
    }
    let idle = fired_and_resolved[&Rule::IdleHeld].iter().find(|a| a.resolved_ms.is_some()).unwrap();
    assert!(idle.pid.is_some() && idle.user.is_some(), "idle_held names the process and its user: {idle:?}");
    let xid = &fired_and_resolved[&Rule::Xid][0];
    assert!(xid.message.contains("13"), "the XID alert names its code: {}", xid.message);

    // Every fire and every resolve reached the healthy receiver, and the one that failed first.
    for path in ["/good", "/flaky"] {
        let receiver = if path == "/good" { &good } else { &flaky };
        eventually(30, &format!("every rule's firing and resolved deliveries at {path}"), || async {
            let got = delivered(receiver, path);
            let missing: Vec<String> = FAULTS
                .iter()
                .flat_map(|(rule, _, _)| ["firing", "resolved"].map(|state| (rule.as_str(), state)))
                .filter(|(rule, state)| !got.iter().any(|(r, s, _)| r == rule && s == state))
                .map(|(rule, state)| format!("{rule} {state}"))
                .collect();
            missing.is_empty().then_some(())
        })
        .await;
    }
    // The first three requests were answered 500 and sent again: three more requests than payloads.
    let payloads: std::collections::BTreeSet<_> = flaky.got().into_iter().map(|g| g.body).collect();
    assert!(flaky.got().len() >= payloads.len() + 3, "the flaky receiver's 500s were retried");
    let statuses = eventually(30, "the hung webhook to be counted as failing", || async {
        let response: AlertsResponse = get_json(&first, "/api/alerts?state=firing").await;
        let hung = response.webhooks.iter().find(|w| w.target.contains(&hung.url("/").port().unwrap().to_string()))?;
        (hung.failed > 0).then(|| response.webhooks.clone())
    })
    .await;
    let by_target = |port: u16| statuses.iter().find(|w| w.target.contains(&format!(":{port}"))).unwrap().clone();
    let hung_status = by_target(hung.url("/").port().unwrap());
    assert!(hung_status.last_error.as_deref().unwrap_or("").contains("timed out"), "{hung_status:?}");
    let flaky_status = by_target(flaky.url("/").port().unwrap());
    assert!(flaky_status.delivered >= 16 && flaky_status.failed == 0, "retried into success: {flaky_status:?}");
    let before: Vec<u64> = fired_and_resolved.values().flatten().map(|a| a.id).collect();
    first.stop().await;

    // After a restart (no faults now) every alert is still there, once, with the same id.
    let second = server(dir.path(), config, false).await;
    let response: AlertsResponse = get_json(&second, "/api/alerts?state=all&limit=1000").await;
    let after = by_rule(&response);
    for id in &before {
        let copies = after.values().flatten().filter(|a| a.id == *id).count();
        assert_eq!(copies, 1, "alert {id} after the restart");
    }
    second.stop().await;
}
