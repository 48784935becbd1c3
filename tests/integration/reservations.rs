//! Advisory reservations end to end: booking, conflicts naming the holder and the times,
//! back-to-back bookings, release by the holder or an admin only, expiry, the free list, the
//! metric, intruders (marked and alerted to the holder), the audit log, a restart, and the
//! limits: five minutes at least, sixteen per user, notes without hidden characters.

use std::time::Duration;

use gpudash::telemetry::simulator::Simulator;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use shared::alerts::{AlertsResponse, Rule};
use shared::reservations::{Reservation, ReservationsResponse};

use crate::security::{ADMIN, OPERATOR, OTHER_OPERATOR, VIEWER, team_server};
use crate::support::{TestServer, eventually, get_json};

const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;

fn now_ms() -> u64 {
    gpudash::telemetry::now_ms()
}

async fn send(
    server: &TestServer,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new().request(method, server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn reserve(
    server: &TestServer,
    token: Option<&str>,
    devices: &[u32],
    start: u64,
    end: u64,
) -> (StatusCode, Value) {
    let body = json!({ "devices": devices, "start_ms": start, "end_ms": end, "note": "fine-tuning" });
    send(server, Method::POST, "/api/reservations", token, Some(body)).await
}

async fn listed(server: &TestServer, token: Option<&str>) -> Vec<Reservation> {
    let (status, body) = send(server, Method::GET, "/api/reservations", token, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_value::<ReservationsResponse>(body).unwrap().reservations
}

#[tokio::test]
async fn book_conflict_back_to_back_release_roles_and_audit() {
    let server = team_server("open", "open").await;
    let start = now_ms() + HOUR;
    let (status, made) = reserve(&server, Some(OPERATOR), &[1], start, start + 4 * HOUR).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let id = made["id"].as_u64().unwrap();
    assert_eq!((made["user"].as_str(), made["devices"].clone()), (Some("omar"), json!([1])));
    assert_eq!(listed(&server, Some(VIEWER)).await.iter().map(|r| r.id).collect::<Vec<_>>(), [id]);

    let (status, refused) = reserve(&server, Some(OTHER_OPERATOR), &[0, 1], start + HOUR, start + 2 * HOUR).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let message = refused["error"].as_str().unwrap();
    let from = shared::reservations::utc_minute(start);
    assert!(message.contains(&format!("GPU 1 is reserved by omar from {from} to ")), "{message}");
    assert!(message.contains(&format!("(reservation {id})")), "{message}");

    let (status, next) = reserve(&server, Some(OTHER_OPERATOR), &[1], start + 4 * HOUR, start + 5 * HOUR).await;
    assert_eq!(status, StatusCode::CREATED, "back to back is no overlap: {next}");
    let next_id = next["id"].as_u64().unwrap();
    let (status, _) = reserve(&server, Some(VIEWER), &[0], start, start + HOUR).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "viewers do not book");

    let path = |id: u64| format!("/api/reservations/{id}");
    let (status, body) = send(&server, Method::DELETE, &path(id), Some(OTHER_OPERATOR), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["error"].as_str().unwrap().contains("omar's"), "{body}");
    let (status, body) = send(&server, Method::DELETE, &path(next_id), Some(ADMIN), None).await;
    assert_eq!(status, StatusCode::OK, "an admin may release anyone's: {body}");
    let (status, body) = send(&server, Method::DELETE, &path(id), Some(OPERATOR), None).await;
    assert_eq!((status, body["released_ms"].is_u64()), (StatusCode::OK, true), "{body}");
    let (status, _) = send(&server, Method::DELETE, &path(id), Some(OPERATOR), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "released once");
    assert!(listed(&server, Some(VIEWER)).await.is_empty());
    let (_, all) = send(&server, Method::GET, "/api/reservations?all=1", Some(VIEWER), None).await;
    assert_eq!(all["reservations"].as_array().unwrap().len(), 2, "{all}");

    let (_, audit) = send(&server, Method::GET, "/api/audit?limit=100", Some(ADMIN), None).await;
    let entries: Vec<(String, String, String)> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"].as_str().unwrap().starts_with("reservation."))
        .map(|e| {
            (
                e["user"].as_str().unwrap().into(),
                e["action"].as_str().unwrap().into(),
                e["outcome"].as_str().unwrap().into(),
            )
        })
        .collect();
    for expected in [
        ("omar", "reservation.create", "ok"),
        ("olga", "reservation.create", "failed"),
        ("olga", "reservation.create", "ok"),
        ("vera", "reservation.create", "denied"),
        ("olga", "reservation.release", "denied"),
        ("ada", "reservation.release", "ok"),
        ("omar", "reservation.release", "ok"),
    ] {
        let expected = (expected.0.to_owned(), expected.1.to_owned(), expected.2.to_owned());
        assert!(entries.contains(&expected), "{expected:?} missing from {entries:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn anonymous_viewers_see_that_a_gpu_is_reserved_but_not_by_whom() {
    let server = team_server("open", "open").await;
    let start = now_ms();
    let (status, made) = reserve(&server, Some(OPERATOR), &[0], start, start + HOUR).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let seen = listed(&server, None).await;
    assert_eq!((seen[0].user.as_str(), seen[0].note.as_str(), seen[0].redacted), ("reserved", "", true));
    let metrics = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    let line = metrics.lines().find(|l| l.starts_with("gpudash_reservation_active{")).unwrap();
    assert!(line.contains("user=\"reserved\"") && !line.contains("omar"), "{line}");
    server.stop().await;
}

/// GPU 0 stays free (its job ended at once), GPU 1 runs another user's job for ten minutes.
async fn workstation() -> TestServer {
    let sim = Simulator::new(2, 100)
        .with_fault("job-ends:0@0s".parse().unwrap())
        .with_fault("job-ends:1@10m".parse().unwrap());
    TestServer::with_options(Box::new(sim), gpudash::Options::new(Duration::from_millis(100))).await
}

/// A reservation on GPU 0 ending in 20 s, held by "ana", put in the history in `dir` as an
/// older gpudash (one without the five-minute minimum) left it: expiry without a long wait.
fn stored_short_reservation(dir: &std::path::Path) -> gpudash::store::Store {
    let store = gpudash::store::Store::open(dir, true, gpudash::store::Retention::default()).unwrap();
    let table = gpudash::store::reservations::ReservationStore::open(store.path()).unwrap();
    let now = now_ms();
    let short = Reservation {
        id: 0,
        devices: vec![0],
        user: "ana".into(),
        start_ms: now,
        end_ms: now + 20_000,
        note: "warm-up".into(),
        created_ms: now,
        released_ms: None,
        intruders: Vec::new(),
        redacted: false,
    };
    table.insert(&short).unwrap();
    store
}

#[tokio::test]
async fn a_reservation_leaves_the_free_list_shows_in_metrics_and_expires_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Simulator::new(2, 100)
        .with_fault("job-ends:0@0s".parse().unwrap())
        .with_fault("job-ends:1@10m".parse().unwrap());
    let options = gpudash::Options {
        store: Some(stored_short_reservation(dir.path())),
        ..gpudash::Options::new(Duration::from_millis(100))
    };
    let server = TestServer::with_options(Box::new(sim), options).await;
    let held = listed(&server, None).await;
    let first = held.first().map(|r| (r.user.as_str(), r.devices.as_slice()));
    assert_eq!((held.len(), first), (1, Some(("ana", &[0][..]))), "{held:?}");
    // The slow loop lists GPU 1's job a moment after start: until then GPU 1 reads free.
    let p: Value = eventually(10, "GPU 1's job listed", || async {
        let p: Value = get_json(&server, "/api/processes").await;
        p["processes"].as_array().is_some_and(|list| !list.is_empty()).then_some(p)
    })
    .await;
    assert_eq!(p["free_devices"], json!([]), "GPU 0 is reserved now, GPU 1 busy: {p}");
    let metrics = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    let line = metrics.lines().find(|l| l.starts_with("gpudash_reservation_active{")).unwrap();
    assert!(line.starts_with("gpudash_reservation_active{gpu=\"0\",UUID=\"GPU-"), "{line}");
    assert!(line.contains("user=\"ana\"") && line.ends_with(" 1"), "{line}");

    eventually(40, "the reservation to expire", || async {
        let p: Value = get_json(&server, "/api/processes").await;
        let gone = listed(&server, None).await.is_empty();
        (gone && p["free_devices"] == json!([0])).then_some(())
    })
    .await;
    let metrics = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    assert!(!metrics.lines().any(|l| l.starts_with("gpudash_reservation_active{")), "expired");
    server.stop().await;
}

#[tokio::test]
async fn bookings_last_at_least_five_minutes_and_one_user_holds_at_most_sixteen() {
    use shared::reservations::{MAX_PER_USER, MIN_LENGTH_MS};
    let server = team_server("open", "open").await;
    let start = now_ms() + HOUR;
    // The flood seen: all GPUs for 1 ms.
    let (status, refused) = reserve(&server, Some(OPERATOR), &[0, 1], start, start + 1).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let message = refused["error"].as_str().unwrap();
    assert!(message.contains("lasts 0 s") && message.contains("the shortest allowed is 5 minutes"), "{message}");
    let (status, refused) = reserve(&server, Some(OPERATOR), &[0], start, start + MIN_LENGTH_MS - 1).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");

    // Sixteen back-to-back five-minute bookings of both GPUs, then no more for omar.
    let slot = |i: u64| (start + i * MIN_LENGTH_MS, start + (i + 1) * MIN_LENGTH_MS);
    let mut ids = Vec::new();
    for i in 0..MAX_PER_USER as u64 {
        let (status, made) = reserve(&server, Some(OPERATOR), &[0, 1], slot(i).0, slot(i).1).await;
        assert_eq!(status, StatusCode::CREATED, "booking {i}: {made}");
        ids.push(made["id"].as_u64().unwrap());
    }
    let next = slot(MAX_PER_USER as u64);
    let (status, refused) = reserve(&server, Some(OPERATOR), &[0, 1], next.0, next.1).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let message = refused["error"].as_str().unwrap();
    assert!(message.contains("omar already holds 16") && message.contains("at most 16: release one"), "{message}");
    let (status, made) = reserve(&server, Some(OTHER_OPERATOR), &[0, 1], next.0, next.1).await;
    assert_eq!(status, StatusCode::CREATED, "the cap is per user: {made}");
    let (status, body) =
        send(&server, Method::DELETE, &format!("/api/reservations/{}", ids[0]), Some(OPERATOR), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let after = slot(MAX_PER_USER as u64 + 1);
    let (status, made) = reserve(&server, Some(OPERATOR), &[0, 1], after.0, after.1).await;
    assert_eq!(status, StatusCode::CREATED, "a release makes room: {made}");
    let mine = listed(&server, Some(VIEWER)).await.into_iter().filter(|r| r.user == "omar").count();
    assert_eq!(mine, MAX_PER_USER);
    server.stop().await;
}

#[tokio::test]
async fn notes_lose_bidi_overrides_and_zero_width_characters() {
    let server = team_server("open", "open").await;
    let start = now_ms() + HOUR;
    // U+202E would show "gninut-enif" as "fine-tuning"; U+200B and U+FEFF show as nothing.
    let note = "\u{202E}gninut-enif\u{202C} for\u{200B} ana\u{FEFF}";
    let body = json!({ "devices": [0], "start_ms": start, "end_ms": start + HOUR, "note": note });
    let (status, made) = send(&server, Method::POST, "/api/reservations", Some(OPERATOR), Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["note"], "gninut-enif for ana", "{made}");
    let seen = listed(&server, Some(VIEWER)).await;
    assert_eq!(seen[0].note, "gninut-enif for ana");
    let body = json!({ "devices": [1], "start_ms": start, "end_ms": start + HOUR, "note": "a\u{2029}\nb" });
    let (status, refused) = send(&server, Method::POST, "/api/reservations", Some(OPERATOR), Some(body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a newline is still refused: {refused}");
    server.stop().await;
}

#[tokio::test]
async fn another_users_process_on_a_reserved_gpu_is_marked_and_alerts_the_holder() {
    let server = workstation().await;
    let job = eventually(10, "a job on GPU 1", || async {
        let p: Value = get_json(&server, "/api/processes").await;
        p["processes"]
            .as_array()?
            .iter()
            .find(|p| p["device"] == 1)
            // Whom it counts for: its owner (a container's label, a job's user...), not its Unix user.
            .map(|p| (p["pid"].as_u64().unwrap(), p["owner"]["name"].clone()))
    })
    .await;
    let (status, made) = reserve(&server, None, &[1], now_ms(), now_ms() + 10 * MINUTE).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let holder = made["user"].as_str().unwrap().to_owned();
    assert_ne!(Some(holder.as_str()), job.1.as_str(), "the simulated job is someone else's");
    eventually(10, "the job marked an intruder", || async {
        let p: Value = get_json(&server, "/api/processes").await;
        let listed = listed(&server, None).await;
        (p["intruders"] == json!([job.0]) && listed[0].intruders == [job.0 as u32]).then_some(())
    })
    .await;
    let alert = eventually(10, "a reservation_intruder alert", || async {
        let alerts: AlertsResponse = get_json(&server, "/api/alerts?rule=reservation_intruder&state=firing").await;
        alerts.alerts.into_iter().find(|a| a.rule == Rule::ReservationIntruder)
    })
    .await;
    assert_eq!((alert.gpu_index, alert.pid, alert.user.as_deref()), (1, Some(job.0 as u32), Some(holder.as_str())));
    let (status, _) = send(&server, Method::DELETE, &format!("/api/reservations/{}", made["id"]), None, None).await;
    assert_eq!(status, StatusCode::OK);
    eventually(10, "the alert to resolve and the mark to go", || async {
        let alerts: AlertsResponse = get_json(&server, "/api/alerts?rule=reservation_intruder&state=firing").await;
        let p: Value = get_json(&server, "/api/processes").await;
        (alerts.alerts.is_empty() && p["intruders"] == json!([])).then_some(())
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn reservations_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = TestServer::with_history(2, 200, dir.path()).await;
    let start = now_ms() + HOUR;
    let (status, made) = reserve(&first, None, &[0, 1], start, start + HOUR).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    first.stop().await;

    let second = TestServer::with_history(2, 200, dir.path()).await;
    let kept = listed(&second, None).await;
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (kept[0].id, kept[0].devices.as_slice(), kept[0].start_ms),
        (made["id"].as_u64().unwrap(), &[0, 1][..], start)
    );
    let (status, refused) = reserve(&second, None, &[1], start, start + HOUR).await;
    assert_eq!(status, StatusCode::CONFLICT, "still in force after the restart: {refused}");
    second.stop().await;
}
