//! Alerts end to end through the simulator: a rule fires, the alert is stored, listed by
//! `GET /api/alerts` and pushed on the WebSocket, survives a restart on the same data directory
//! without firing twice, and resolves; silences and subscriptions through the API.

use std::path::Path;
use std::time::Duration;

use clap::Parser as _;
use gpudash::telemetry::IdleRule;
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::ServerMessage;
use shared::alerts::{Alert, AlertState, AlertsResponse, Rule, Severity, Subscription, SubscriptionsResponse};

use crate::support::{TestServer, connect, eventually, get_json, next_message};

/// Two simulated GPUs sampled every 200 ms with history in `dir`; GPU 1 holds the demo's idle
/// notebook, flagged idle after 1 s; `faults` as `--simulate-fault` takes them.
async fn server(dir: &Path, faults: &[&str]) -> TestServer {
    let store = gpudash::store::Store::open(dir, true, gpudash::store::Retention::default()).unwrap();
    let sim =
        faults.iter().fold(Simulator::new(2, 200).with_idle_holder(), |sim, f| sim.with_fault(f.parse().unwrap()));
    let options = gpudash::Options {
        store: Some(store),
        idle: IdleRule { memory: 1 << 30, after: Duration::from_secs(1) },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    TestServer::with_options(Box::new(sim), options).await
}

async fn alerts(server: &TestServer) -> AlertsResponse {
    get_json(server, "/api/alerts?state=all").await
}

fn find(response: &AlertsResponse, rule: Rule, gpu: u32) -> Vec<Alert> {
    response.alerts.iter().filter(|a| a.rule == rule && a.gpu_index == gpu).cloned().collect()
}

/// The one alert of `rule` on `gpu` once it is in `state`.
async fn one_in(server: &TestServer, rule: Rule, gpu: u32, state: AlertState) -> Alert {
    let what = format!("{} on GPU {gpu} {}", rule.as_str(), state.as_str());
    eventually(30, &what, || async {
        let all = find(&alerts(server).await, rule, gpu);
        (all.len() == 1 && all[0].state() == state).then(|| all[0].clone())
    })
    .await
}

#[tokio::test]
async fn alerts_fire_are_stored_survive_a_restart_without_firing_twice_and_resolve() {
    let dir = tempfile::tempdir().unwrap();

    // GPU 0 falls off the bus after 2 s; GPU 1's notebook is flagged idle after 1 s.
    let first = server(dir.path(), &["lost:0@2s"]).await;
    let mut socket = connect(&first.ws_url()).await;
    let lost = one_in(&first, Rule::DeviceLost, 0, AlertState::Firing).await;
    assert_eq!(lost.severity, Severity::Critical);
    assert!(lost.message.contains("GPU 0") && lost.message.contains("stopped answering"), "{}", lost.message);
    assert!(lost.action.contains("reset"), "{}", lost.action);
    assert!(lost.simulated, "the simulator's alerts say so");
    let idle = one_in(&first, Rule::IdleHeld, 1, AlertState::Firing).await;
    assert_eq!(idle.user.as_deref(), Some("eli"));
    let pid = idle.pid.expect("an idle_held alert names its process");
    assert!(idle.message.contains(&format!("PID {pid}")), "{}", idle.message);
    let pushed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let ServerMessage::Alert(event) = next_message(&mut socket, 30).await
                && event.alert.id == lost.id
            {
                return event;
            }
        }
    })
    .await
    .expect("the fire pushed on the WebSocket");
    assert!(pushed.firing >= 1 && pushed.alert.resolved_ms.is_none());
    assert!(alerts(&first).await.firing >= 2);
    first.stop().await;

    // Restarted on the same data: GPU 0 answers again, the notebook still holds GPU 1.
    let second = server(dir.path(), &[]).await;
    let resolved = one_in(&second, Rule::DeviceLost, 0, AlertState::Resolved).await;
    assert_eq!(resolved.id, lost.id, "the stored alert resolved, not a new one");
    assert!(resolved.resolved_ms.unwrap() >= resolved.fired_ms);
    // The idle tracker starts its clock again: wait until it flags the notebook anew.
    eventually(30, "the notebook flagged idle again", || async {
        let processes: Value = get_json(&second, "/api/processes").await;
        processes["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == pid && p.get("idle").is_some())
            .then_some(())
    })
    .await;
    let after = alerts(&second).await;
    let carried = find(&after, Rule::IdleHeld, 1);
    assert_eq!(carried.len(), 1, "not fired twice: {carried:#?}");
    assert_eq!((carried[0].id, carried[0].state()), (idle.id, AlertState::Firing));
    second.stop().await;

    // Restarted once more, and the notebook's GPU is lost: its process is gone, so idle_held resolves.
    let third = server(dir.path(), &["lost:1@1s"]).await;
    let gone = one_in(&third, Rule::IdleHeld, 1, AlertState::Resolved).await;
    assert_eq!(gone.id, idle.id);
    let lost_again = one_in(&third, Rule::DeviceLost, 1, AlertState::Firing).await;
    assert!(lost_again.id > idle.id, "new alerts get new ids");
    let history = alerts(&third).await;
    assert_eq!(find(&history, Rule::DeviceLost, 0).len(), 1, "GPU 0's loss is still in the history");
    let filtered: AlertsResponse = get_json(&third, "/api/alerts?state=resolved&rule=device_lost&gpu=0").await;
    assert_eq!(filtered.alerts.iter().map(|a| a.id).collect::<Vec<_>>(), [lost.id]);
    assert_eq!(history.rules.len(), Rule::ALL.len());
    third.stop().await;
}

#[tokio::test]
async fn operators_silence_a_firing_alert_and_users_keep_their_own_subscriptions() {
    // No tokens: the local user may do everything, and subscribes as the OS user.
    let source = Simulator::new(2, 200).with_fault("lost:1@1s".parse().unwrap());
    let server = TestServer::with_options(Box::new(source), gpudash::Options::new(Duration::from_millis(200))).await;
    let lost = one_in(&server, Rule::DeviceLost, 1, AlertState::Firing).await;
    let client = reqwest::Client::new();
    let body = json!({"rule": "device_lost", "gpu": 1, "duration": "2h", "reason": "card being reseated"});
    let response = client.post(server.url("/api/alerts/silences")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let silence: shared::alerts::Silence = response.json().await.unwrap();
    assert_eq!((silence.rule, silence.until_ms - silence.from_ms), (Rule::DeviceLost, 2 * 3600 * 1000));
    let now = alerts(&server).await;
    assert_eq!(now.silences, std::slice::from_ref(&silence));
    let shown = find(&now, Rule::DeviceLost, 1);
    assert_eq!((shown[0].id, shown[0].silenced.as_ref()), (lost.id, Some(&silence)), "the firing alert is silenced");
    let audit: Value = get_json(&server, "/api/audit?action=alert.silence").await;
    assert_eq!(audit.as_array().unwrap().len(), 1, "{audit}");
    let url = server.url(&format!("/api/alerts/silences/{}", silence.id));
    assert_eq!(client.delete(&url).send().await.unwrap().status(), StatusCode::NO_CONTENT);
    assert_eq!(client.delete(&url).send().await.unwrap().status(), StatusCode::NOT_FOUND, "already ended");
    let after = alerts(&server).await;
    assert!(after.silences.is_empty() && find(&after, Rule::DeviceLost, 1)[0].silenced.is_none());

    let subscriptions = server.url("/api/alerts/subscriptions");
    let kind = json!({"kind": "any_gpu_free"});
    let response = client.post(&subscriptions).json(&kind).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let made: Subscription = response.json().await.unwrap();
    let again = client.post(&subscriptions).json(&kind).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT, "a duplicate");
    let mine: SubscriptionsResponse = get_json(&server, "/api/alerts/subscriptions").await;
    assert_eq!(mine.subscriptions, std::slice::from_ref(&made));
    let id = std::process::Command::new("id").arg("-un").output().unwrap();
    let os_user = String::from_utf8_lossy(&id.stdout).trim().to_owned();
    assert_eq!(mine.user, os_user, "without tokens the subscriber is the OS user");
    let one = server.url(&format!("/api/alerts/subscriptions/{}", made.id));
    assert_eq!(client.delete(&one).send().await.unwrap().status(), StatusCode::NO_CONTENT);
    let mine: SubscriptionsResponse = get_json(&server, "/api/alerts/subscriptions").await;
    assert!(mine.subscriptions.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_bad_alerts_file_stops_start_up_with_where_and_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alerts.toml");
    std::fs::write(&file, "[rules.temperature]\ncelsius = 300\n").unwrap();
    let args = ["gpudash", "--simulate", "1", "--listen", "127.0.0.1:0", "--no-history", "--alerts-file"];
    let cli = gpudash::cli::Cli::try_parse_from(args.iter().copied().chain([file.to_str().unwrap()])).unwrap();
    let error = gpudash::run(gpudash::config::Config::from(cli), std::future::pending()).await.unwrap_err();
    let message = format!("{error:#}");
    assert!(message.contains("alerts.toml") && message.contains("use 30 to 120"), "{message}");
}

#[tokio::test]
async fn a_fault_on_a_gpu_the_simulator_lacks_stops_start_up() {
    let args =
        ["gpudash", "--simulate", "2", "--listen", "127.0.0.1:0", "--no-history", "--simulate-fault", "hot:2@1s"];
    let cli = gpudash::cli::Cli::try_parse_from(args).unwrap();
    let error = gpudash::run(gpudash::config::Config::from(cli), std::future::pending()).await.unwrap_err();
    let message = format!("{error:#}");
    assert!(message.contains("GPU 2") && message.contains("GPUs 0 to 1"), "{message}");
}

/// A server whose rules come from an alerts file (temperature at 70 °C) it re-reads on SIGHUP; the
/// directory holding the file lives as long as the returned handle.
async fn reloading_server() -> (TestServer, tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alerts.toml");
    std::fs::write(&file, "[rules.temperature]\ncelsius = 70\n").unwrap();
    let options = gpudash::Options {
        alerts: gpudash::alerts::AlertsConfig::load(&file).unwrap(),
        alerts_file: Some(file.clone()),
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    (TestServer::with_options(Box::new(Simulator::new(1, 200)), options).await, dir, file)
}

#[tokio::test]
async fn sighup_rereads_the_alerts_file_and_a_bad_one_keeps_the_running_rules() {
    let (server, _dir, file) = reloading_server().await;
    let temperature = |r: &AlertsResponse| r.rules[0].condition.clone();
    assert!(temperature(&alerts(&server).await).contains("≥ 70 °C"));
    let hangup = || {
        let status = std::process::Command::new("kill").args(["-HUP", &std::process::id().to_string()]).status();
        assert!(status.unwrap().success());
    };
    std::fs::write(&file, "[rules.temperature]\ncelsius = 7\n").unwrap();
    hangup();
    let refused = eventually(10, "the bad file refused", || async {
        let now = alerts(&server).await;
        now.reload_error.clone().map(|e| (e, now))
    })
    .await;
    assert!(refused.0.contains("use 30 to 120"), "{}", refused.0);
    assert!(temperature(&refused.1).contains("≥ 70 °C"), "the running rules stay");
    std::fs::write(&file, "[rules.temperature]\ncelsius = 60\n").unwrap();
    hangup();
    eventually(10, "the good file in force", || async {
        let now = alerts(&server).await;
        (now.reload_error.is_none() && temperature(&now).contains("≥ 60 °C")).then_some(())
    })
    .await;
    server.stop().await;
}

/// On a server with tokens and open viewing, an anonymous viewer sees the idle_held alert but not
/// whose process it is, over HTTP and on the WebSocket; a signed-in viewer sees the user.
#[tokio::test]
async fn anonymous_viewers_see_alerts_without_user_names() {
    use crate::security::{OPERATOR, VIEWER};
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "viewers = \"open\"\n").unwrap();
    let tokens = format!("vera:viewer:{VIEWER},omar:operator:{OPERATOR}");
    let auth = gpudash::auth::AuthConfig::load(Some(file.path()), Some(&tokens)).unwrap();
    let hook = "[[webhook]]\nurl = \"http://hooks.internal:9/t/SECRET-TOKEN\"\n";
    let options = gpudash::Options {
        auth,
        alerts: gpudash::alerts::AlertsConfig::parse(hook, "a.toml").unwrap(),
        idle: IdleRule { memory: 1 << 30, after: Duration::from_secs(1) },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    let server = TestServer::with_options(Box::new(Simulator::new(2, 200).with_idle_holder()), options).await;
    let mut socket = connect(&server.ws_url()).await;
    let signed_in = || async {
        let response = reqwest::Client::new()
            .get(server.url("/api/alerts?state=firing&rule=idle_held"))
            .bearer_auth(VIEWER)
            .send()
            .await
            .ok()?;
        response.json::<AlertsResponse>().await.ok()
    };
    let seen = eventually(30, "the idle_held alert, as a signed-in viewer", || async {
        signed_in().await?.alerts.into_iter().next()
    })
    .await;
    assert_eq!(seen.user.as_deref(), Some("eli"), "a signed-in viewer sees whose process it is");
    let anonymous: AlertsResponse = get_json(&server, "/api/alerts?state=firing&rule=idle_held").await;
    let hidden = anonymous.alerts.iter().find(|a| a.id == seen.id).expect("the anonymous view lists it too");
    assert!(hidden.user.is_none() && hidden.redacted, "{hidden:?}");
    for word in ["eli", "python3"] {
        assert!(!hidden.message.contains(word) && !hidden.action.contains(word), "{word} in {hidden:?}");
    }
    let pushed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let ServerMessage::Alert(event) = next_message(&mut socket, 30).await {
                return event;
            }
        }
    })
    .await
    .expect("an alert pushed to the anonymous socket");
    assert!(pushed.alert.user.is_none(), "the anonymous socket's alert names nobody: {pushed:?}");

    // An operator silences it: anonymous viewers see that it is silenced, not by whom, and no receivers.
    let body = json!({"rule": "idle_held", "gpu": seen.gpu_index, "duration": "1h", "reason": "asked eli"});
    let client = reqwest::Client::new();
    let response = client.post(server.url("/api/alerts/silences")).bearer_auth(OPERATOR).json(&body).send().await;
    assert_eq!(response.unwrap().status(), StatusCode::CREATED);
    let anonymous = eventually(10, "the silence on the anonymous view", || async {
        let r: AlertsResponse = get_json(&server, "/api/alerts?state=firing&rule=idle_held").await;
        r.alerts.iter().any(|a| a.silenced.is_some()).then_some(r)
    })
    .await;
    let text = serde_json::to_string(&anonymous).unwrap();
    assert!(!text.contains("omar") && !text.contains("hooks.internal"), "{text}");
    assert!(anonymous.webhooks.is_empty(), "receivers are for signed-in viewers");
    let signed: AlertsResponse = signed_in().await.unwrap();
    assert_eq!(signed.webhooks.len(), 1, "a signed-in viewer sees the receiver");
    assert!(serde_json::to_string(&signed).unwrap().contains("omar"));
    server.stop().await;
}

/// `POST /api/alerts/silences` of `rule` on GPU `gpu` for `duration` as `token`.
async fn silence(server: &TestServer, token: &str, rule: &str, gpu: u32, duration: &str) -> (StatusCode, Value) {
    let body = json!({"rule": rule, "gpu": gpu, "duration": duration, "reason": "maintenance"});
    let response =
        reqwest::Client::new().post(server.url("/api/alerts/silences")).bearer_auth(token).json(&body).send().await;
    let response = response.unwrap();
    (response.status(), response.json().await.unwrap_or(Value::Null))
}

async fn unsilence(server: &TestServer, token: &str, id: &Value) -> (StatusCode, Value) {
    let url = server.url(&format!("/api/alerts/silences/{id}"));
    let response = reqwest::Client::new().delete(url).bearer_auth(token).send().await.unwrap();
    (response.status(), response.json().await.unwrap_or(Value::Null))
}

/// The flood and the overreach seen: an operator silenced `device_lost` for 30 days, set
/// thousands of silences, and ended other people's. Now hardware faults take an admin past 4h,
/// one user has at most 32 in force, and only a silence's author or an admin ends it.
#[tokio::test]
async fn silences_are_capped_per_user_ended_by_their_author_and_long_fault_silences_take_an_admin() {
    use crate::security::{ADMIN, OPERATOR, OTHER_OPERATOR, team_server};
    use shared::alerts::MAX_SILENCES_PER_USER;
    let server = team_server("open", "open").await;
    for rule in ["device_lost", "xid", "ecc"] {
        let (status, refused) = silence(&server, OPERATOR, rule, 0, "30d").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{rule}: {refused}");
        let message = refused["error"].as_str().unwrap();
        assert!(message.contains(&format!("'{rule}' reports a broken GPU")), "{message}");
        assert!(message.contains("at most 4h, not '30d'") && message.contains("ask an admin"), "{message}");
    }
    let (status, ours) = silence(&server, OPERATOR, "device_lost", 0, "4h").await;
    assert_eq!(status, StatusCode::CREATED, "4h is an operator's to set: {ours}");
    let (status, long) = silence(&server, ADMIN, "xid", 1, "30d").await;
    assert_eq!(status, StatusCode::CREATED, "an admin may: {long}");
    let (status, body) = silence(&server, OPERATOR, "temperature", 0, "30s").await;
    assert!(status == StatusCode::BAD_REQUEST && body["error"].as_str().unwrap().contains("from 1m to 30d"), "{body}");

    // Someone else's silence: not another operator's to end.
    let (status, refused) = unsilence(&server, OTHER_OPERATOR, &ours["id"]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("is omar's: only who set it or an admin"), "{refused}");
    let now: AlertsResponse = get_json(&server, "/api/alerts").await;
    assert_eq!(now.silences.len(), 2, "still in force: {:?}", now.silences);

    // Up to 32 in force per user; the 33rd is refused, another user is not.
    for i in 1..MAX_SILENCES_PER_USER {
        let (status, body) = silence(&server, OPERATOR, "temperature", u32::try_from(i % 2).unwrap(), "1h").await;
        assert_eq!(status, StatusCode::CREATED, "silence {i}: {body}");
    }
    let (status, refused) = silence(&server, OPERATOR, "gpu_free", 1, "1h").await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let message = refused["error"].as_str().unwrap();
    assert!(message.contains("omar already has 32 silences in force") && message.contains("at most 32"), "{message}");
    let (status, theirs) = silence(&server, OTHER_OPERATOR, "gpu_free", 1, "1h").await;
    assert_eq!(status, StatusCode::CREATED, "the cap is per user: {theirs}");

    // An admin may end anyone's; the room it makes is the author's again.
    let (status, body) = unsilence(&server, ADMIN, &ours["id"]).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = silence(&server, OPERATOR, "gpu_free", 1, "1h").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = unsilence(&server, OTHER_OPERATOR, &theirs["id"]).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "one's own: {body}");

    let client = reqwest::Client::new();
    let audit = client.get(server.url("/api/audit?limit=1000")).bearer_auth(ADMIN).send().await.unwrap();
    let triples = crate::support::audit_triples(&audit.json().await.unwrap());
    for expected in [
        ("omar", "alert.silence", "denied"),
        ("omar", "alert.silence", "failed"),
        ("olga", "alert.unsilence", "denied"),
        ("ada", "alert.unsilence", "ok"),
    ] {
        let expected = (expected.0.to_owned(), expected.1.to_owned(), expected.2.to_owned());
        assert!(triples.contains(&expected), "{expected:?} missing from {triples:?}");
    }
    server.stop().await;
}

/// A reload refused for a bad webhook URL, or for TOML syntax on the line holding it, says what
/// is wrong and where, but never the URL's path (a Slack webhook's path is its token).
#[tokio::test]
async fn a_refused_reload_never_shows_a_webhooks_token() {
    const SECRET: &str = "T0AAAA/B0BBBB/XOXB-SECRET-TOKEN";
    let (server, _dir, file) = reloading_server().await;
    let hangup = || {
        let status = std::process::Command::new("kill").args(["-HUP", &std::process::id().to_string()]).status();
        assert!(status.unwrap().success());
    };
    let cases = [
        // A port out of range: the URL does not parse; the host and the port are what is shown.
        (
            format!("[[webhook]]\nurl = \"https://hooks.slack.com:99999/services/{SECRET}\"\n"),
            &["invalid port number", "'https://hooks.slack.com:99999/…'", "(line 2)"][..],
        ),
        // Two keys on one line: toml's own message quotes the line.
        (
            format!("[[webhook]]\nurl = \"https://hooks.slack.com/services/{SECRET}\" format = \"slack\"\n"),
            &["is not valid", "(line 2, column"][..],
        ),
        // A string left open on the URL's line.
        (
            format!("[[webhook]]\nformat = \"slack\"\nurl = \"https://hooks.slack.com/services/{SECRET}\n"),
            &["is not valid", "(line 3, column"][..],
        ),
    ];
    for (text, says) in &cases {
        std::fs::write(&file, text).unwrap();
        hangup();
        let response = eventually(10, &format!("the file refused, saying {says:?}"), || async {
            let now = alerts(&server).await;
            now.reload_error.as_deref().is_some_and(|e| says.iter().all(|s| e.contains(s))).then_some(now)
        })
        .await;
        let error = response.reload_error.clone().unwrap_or_default();
        assert!(error.contains("alerts.toml"), "{error}");
        let whole = serde_json::to_string(&response).unwrap();
        assert!(!whole.contains("SECRET") && !whole.contains("B0BBBB"), "{whole}");
    }
    server.stop().await;
}
