//! The fleet against a stand-in Prometheus that answers badly: slowly (past the timeout), with an
//! error, with an answer past the 64 MiB bound, or partially (with warnings). Each gives a clear
//! `error`, or figures labelled partial, within a deadline: never a hang, never a panic, and the
//! local dashboard keeps answering.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use shared::fleet::FleetResponse;
use shared::fleet_owners::FleetOwners;

use crate::fleet::instance;

/// How the stand-in answers every query.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    Slow,
    Error,
    Huge,
    Partial,
}

async fn answer(behaviour: Behaviour) -> axum::response::Response {
    match behaviour {
        Behaviour::Slow => {
            // Longer than the fleet's timeout; the fleet gives up first.
            tokio::time::sleep(Duration::from_secs(30)).await;
            "{}".into_response()
        }
        Behaviour::Error => (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"status":"error","errorType":"unavailable","error":"too many concurrent queries"}"#,
        )
            .into_response(),
        Behaviour::Huge => {
            // One 65 MiB body shared by every answer (the fleet asks many queries at once).
            static HUGE: std::sync::OnceLock<axum::body::Bytes> = std::sync::OnceLock::new();
            let body = HUGE.get_or_init(|| {
                let mut body = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#.to_vec();
                body.resize(65 * 1024 * 1024, b' ');
                body.into()
            });
            body.clone().into_response()
        }
        Behaviour::Partial => r#"{"status":"success","warnings":["partial response: store 10.0.0.3:10901 is down"],
            "data":{"resultType":"vector","result":[]}}"#
            .into_response(),
    }
}

/// A stand-in query API on loopback answering as `behaviour` says; its base URL.
async fn stand_in(behaviour: Behaviour) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/api/v1/query", axum::routing::get(move || answer(behaviour)))
        .route("/api/v1/targets", axum::routing::get(move || answer(behaviour)));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// `path` as JSON within 20 s (the fleet's timeout is 5 s): a hang fails the test.
async fn within_deadline<T: serde::de::DeserializeOwned>(url: String) -> T {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let response = client.get(&url).send().await.unwrap_or_else(|e| panic!("{url}: no answer in 20 s: {e}"));
    assert_eq!(response.status(), 200, "{url}");
    response.json().await.expect("JSON")
}

async fn fleet_against(behaviour: Behaviour) -> (FleetResponse, FleetOwners) {
    let url = stand_in(behaviour).await;
    // 5 s: long enough for a 64 MiB answer to reach its bound on two busy cores (at 1 s, a loaded
    // run timed out first), short enough that the slow engine's 30 s answer is cut.
    let config = gpudash::fleet::FleetConfig {
        timeout: Duration::from_secs(5),
        ..gpudash::fleet::FleetConfig::new(gpudash::fleet::parse_prometheus_url(&url).unwrap())
    };
    let viewer = instance("viewer", 1, Some(config)).await;
    let fleet: FleetResponse = within_deadline(viewer.url("/api/fleet?gpus=none")).await;
    let owners: FleetOwners = within_deadline(viewer.url("/api/fleet/owners?range=1h")).await;
    let devices = reqwest::get(viewer.url("/api/devices")).await.unwrap();
    assert_eq!(devices.status(), 200, "the local dashboard does not depend on the engine");
    viewer.stop().await;
    (fleet, owners)
}

#[tokio::test]
async fn a_slow_engine_times_out_with_a_clear_error() {
    let (fleet, owners) = fleet_against(Behaviour::Slow).await;
    let error = fleet.error.unwrap_or_default();
    assert!(error.contains("did not answer within 5 s"), "{error}");
    assert!(fleet.nodes.is_empty());
    assert!(owners.error.unwrap_or_default().contains("did not answer within 5 s"));
}

#[tokio::test]
async fn an_engine_error_is_passed_on_in_its_words() {
    let (fleet, owners) = fleet_against(Behaviour::Error).await;
    let error = fleet.error.unwrap_or_default();
    assert!(error.contains("unavailable: too many concurrent queries"), "{error}");
    assert!(owners.error.unwrap_or_default().contains("too many concurrent queries"));
}

#[tokio::test]
async fn a_huge_answer_is_refused_at_the_bound() {
    let (fleet, _) = fleet_against(Behaviour::Huge).await;
    let error = fleet.error.unwrap_or_default();
    assert!(error.contains("answered more than 64 MiB for one query"), "{error}");
}

#[tokio::test]
async fn a_partial_answer_is_labelled_partial() {
    let (fleet, owners) = fleet_against(Behaviour::Partial).await;
    assert_eq!(fleet.error, None);
    assert_eq!(fleet.warnings, ["partial response: store 10.0.0.3:10901 is down"]);
    assert_eq!(owners.error, None, "{owners:?}");
}
