//! The allocator map over HTTP: a map is checked (its figures must add up), stored and listed
//! (its totals in the list, whole in the detail), spaced, asked for from the page ("Refresh map"
//! travels back in a report's answer), and an out-of-memory report is kept, audited and fires the
//! `oom` alert for the process's user; a burst of them fires only a few.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{TestServer, eventually};

const MIB: u64 = 1 << 20;

/// A report as `gpudash.attach(..., share_allocator_map=True)` sends it.
pub fn report(pid: u32) -> Value {
    json!({
        "version": 1, "pid": pid, "host": "node1", "process_name": "python train.py",
        "torch_version": "2.11.0", "cuda_version": "13.0", "allow_remote_empty_cache": false,
        "share_allocator_map": true, "interval_s": 1.0,
        "devices": [{ "device": 0, "allocated": 0, "allocated_peak": 0, "reserved": 0, "reserved_peak": 0,
                      "active": 0, "inactive_split": 0, "alloc_retries": 0, "ooms": 0 }],
    })
}

/// A map of `count` 20 MiB segments, each with 12 MiB allocated and one free 8 MiB block, as the client sums it.
pub fn map(pid: u32, count: u64, reason: &str) -> Value {
    let segments: Vec<Value> = (0..count)
        .map(|i| {
            json!({ "size": 20 * MIB, "stream": 0, "pool": "large", "allocated": 12 * MIB, "active": 12 * MIB,
                    "free": 8 * MIB, "blocks": 2 + i % 2 })
        })
        .collect();
    let blocks: u64 = (0..count).map(|i| 2 + i % 2).sum();
    json!({
        "version": 1, "pid": pid, "host": "node1", "reason": reason, "taken_ms": 1, "cost_ms": 1.5,
        "maps": [{
            "device": 0, "segments": segments,
            "free_histogram": [{ "log2": 23, "count": count, "bytes": count * 8 * MIB }],
            "totals": { "reserved": count * 20 * MIB, "allocated": count * 12 * MIB, "active": count * 12 * MIB,
                        "free_in_segments": count * 8 * MIB, "largest_free_block": 8 * MIB, "segments": count,
                        "blocks": blocks },
        }],
    })
}

async fn post(server: &TestServer, path: &str, body: &Value) -> (StatusCode, Value) {
    let response = reqwest::Client::new().post(server.url(path)).json(body).send().await.unwrap();
    (response.status(), response.json().await.unwrap_or(Value::Null))
}

async fn get(server: &TestServer, path: &str) -> Value {
    reqwest::get(server.url(path)).await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn a_map_is_stored_listed_folded_and_spaced() {
    let server = TestServer::simulated(1, 500).await;
    let (status, answer) = post(&server, "/api/bridge/allocator", &map(70, 3, "periodic")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("report (POST /api/bridge/report) before"), "{answer}");
    let (status, _) = post(&server, "/api/bridge/report", &report(70)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, answer) = post(&server, "/api/bridge/allocator", &map(70, 300, "periodic")).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    let (status, answer) = post(&server, "/api/bridge/allocator", &map(70, 300, "periodic")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("at most one allocator map every 200 ms"), "{answer}");

    let list = get(&server, "/api/bridge").await;
    let process = &list[0];
    assert_eq!(process["share_allocator_map"], json!(true));
    let listed = &process["allocator"]["maps"][0];
    assert_eq!(listed["segments"], json!([]), "the list carries totals only");
    assert_eq!(listed["totals"]["reserved"], json!(300 * 20 * MIB), "totals are whole");
    let detail = get(&server, &format!("/api/bridge/{}", process["id"])).await;
    assert_eq!(detail["allocator"]["maps"][0]["segments"].as_array().unwrap().len(), 300);
    assert_eq!(detail["allocator"]["cost_ms"], json!(1.5));
    server.stop().await;
}

#[tokio::test]
async fn refresh_map_travels_back_in_the_next_answer() {
    let server = TestServer::simulated(1, 500).await;
    let mut quiet = report(71);
    quiet["share_allocator_map"] = json!(false);
    post(&server, "/api/bridge/report", &quiet).await;
    let id = get(&server, "/api/bridge").await[0]["id"].as_u64().unwrap();
    let (status, answer) = post(&server, &format!("/api/bridge/{id}/allocator_map"), &json!(null)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(answer["error"].as_str().unwrap().contains("share_allocator_map=True"), "{answer}");

    post(&server, "/api/bridge/report", &report(71)).await;
    let (status, pending) = post(&server, &format!("/api/bridge/{id}/allocator_map"), &json!(null)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{pending}");
    let (_, answer) = post(&server, "/api/bridge/report", &report(71)).await;
    assert_eq!(answer["commands"], json!([{ "kind": "allocator_map", "id": pending["id"] }]));
    let (_, answer) = post(&server, "/api/bridge/report", &report(71)).await;
    assert_eq!(answer["commands"], json!([]), "handed over once");
    assert_eq!(post(&server, "/api/bridge/allocator", &map(71, 2, "requested")).await.0, StatusCode::NO_CONTENT);
    let process = &get(&server, "/api/bridge").await[0];
    assert!(process["map_request"]["done_ms"].as_u64().is_some(), "{process}");
    assert_eq!(process["allocator"]["reason"], json!("requested"));
    eventually(10, "the request in the audit log", || async {
        let log = get(&server, "/api/audit").await;
        log.as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "bridge.allocator_map" && e["outcome"] == "ok")
            .then_some(())
    })
    .await;
    server.stop().await;
}

/// One change that breaks a map.
type Edit = dyn Fn(&mut Value);

#[tokio::test]
async fn maps_whose_figures_do_not_add_up_are_refused() {
    let server = TestServer::simulated(1, 500).await;
    post(&server, "/api/bridge/report", &report(72)).await;
    let edits: Vec<(&str, Box<Edit>, &str)> = vec![
        ("segment free", Box::new(|m| m["maps"][0]["segments"][0]["free"] = json!(1)), "free = size − active"),
        ("reserved", Box::new(|m| m["maps"][0]["totals"]["reserved"] = json!(1)), "totals.reserved is 1"),
        ("histogram", Box::new(|m| m["maps"][0]["free_histogram"][0]["log2"] = json!(30)), "cannot hold"),
        ("largest", Box::new(|m| m["maps"][0]["totals"]["largest_free_block"] = json!(MIB)), "top bucket"),
        ("oom", Box::new(|m| m["reason"] = json!("oom")), "needs its 'oom'"),
        ("stray oom", Box::new(|m| m["oom"] = json!({ "device": 0, "requested_bytes": 1 })), "only in a map"),
        (
            "oom device",
            Box::new(|m| {
                m["reason"] = json!("oom");
                m["oom"] = json!({ "device": 5, "requested_bytes": 1 });
            }),
            "has no map",
        ),
        ("version", Box::new(|m| m["version"] = json!(2)), "version 2 is not supported"),
        ("frames", Box::new(|m| m["maps"][0]["segments"][0]["frames"] = json!([])), "unknown field `frames`"),
    ];
    for (what, edit, says) in edits {
        let mut body = map(72, 4, "periodic");
        edit(&mut body);
        let (status, answer) = post(&server, "/api/bridge/allocator", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(says), "{what}: {answer}");
    }
    let (status, answer) = post(&server, "/api/bridge/allocator", &map(72, 513, "periodic")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(answer["error"].as_str().unwrap().contains("at most 512 segments"), "{answer}");
    let (status, answer) = post(&server, "/api/bridge/allocator", &map(72, 3_000, "periodic")).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(answer["error"].as_str().unwrap().contains("over the limit of 256 KiB"), "{answer}");
    assert_eq!(get(&server, "/api/bridge").await[0]["allocator"], Value::Null, "nothing refused was kept");
    server.stop().await;
}

#[tokio::test]
async fn an_oom_report_is_kept_audited_and_fires_the_oom_alert() {
    let server = TestServer::simulated(1, 200).await;
    post(&server, "/api/bridge/report", &report(73)).await;
    let mut body = map(73, 4, "oom");
    body["oom"] = json!({ "device": 0, "requested_bytes": 16 * MIB });
    assert_eq!(post(&server, "/api/bridge/allocator", &body).await.0, StatusCode::NO_CONTENT);
    let process = &get(&server, "/api/bridge").await[0];
    let oom = &process["ooms"][0];
    assert_eq!(
        (oom["requested_bytes"].as_u64(), oom["totals"]["largest_free_block"].as_u64()),
        (Some(16 * MIB), Some(8 * MIB))
    );
    let alert = eventually(10, "an oom alert", || async {
        let alerts = get(&server, "/api/alerts").await;
        alerts["alerts"].as_array().unwrap().iter().find(|a| a["rule"] == "oom").cloned()
    })
    .await;
    assert_eq!((alert["severity"].as_str(), alert["pid"].as_u64()), (Some("critical"), Some(73)));
    assert!(alert["user"].as_str().is_some_and(|u| !u.is_empty()), "named for the process's user: {alert}");
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.contains("asked for 16.0 MiB, largest free block 8.00 MiB, 32.0 MiB free in total (fragmented)"),
        "{message}"
    );
    eventually(10, "the OOM in the audit log", || async {
        let log = get(&server, "/api/audit").await;
        log.as_array()
            .unwrap()
            .iter()
            .any(|e| {
                e["action"] == "bridge.allocator_map"
                    && e["detail"].as_str().is_some_and(|d| d.contains("out-of-memory"))
            })
            .then_some(())
    })
    .await;
    // The process stops reporting: after three intervals (at least 5 s) it is stale and the alert resolves.
    let resolved = eventually(15, "the oom alert resolved", || async {
        let alerts = get(&server, "/api/alerts?state=resolved").await;
        alerts["alerts"].as_array().unwrap().iter().find(|a| a["rule"] == "oom").cloned()
    })
    .await;
    assert!(resolved["resolved_ms"].as_u64().is_some());
    server.stop().await;
}

#[tokio::test]
async fn the_list_carries_summaries_only_however_large_the_maps() {
    const PROCESSES: u32 = 8;
    let server = TestServer::simulated(1, 500).await;
    for pid in 80..80 + PROCESSES {
        assert_eq!(post(&server, "/api/bridge/report", &report(pid)).await.0, StatusCode::OK);
        let (status, answer) = post(&server, "/api/bridge/allocator", &map(pid, 512, "periodic")).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    }
    let body = reqwest::get(server.url("/api/bridge")).await.unwrap().bytes().await.unwrap();
    let list: Vec<Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(list.len(), PROCESSES as usize);
    assert!(body.len() <= list.len() * 4 * 1024, "{} bytes for {} processes", body.len(), list.len());
    for process in &list {
        let device = &process["allocator"]["maps"][0];
        assert_eq!((&device["segments"], &device["free_histogram"]), (&json!([]), &json!([])), "{process}");
        assert_eq!(device["totals"]["segments"], json!(512), "the totals stay whole");
    }
    let detail = get(&server, &format!("/api/bridge/{}", list[0]["id"])).await;
    assert_eq!(detail["allocator"]["maps"][0]["segments"].as_array().unwrap().len(), 512, "the detail has the map");
    server.stop().await;
}

#[tokio::test]
async fn a_burst_of_oom_reports_from_one_reporter_fires_only_a_few_alerts() {
    // gpudash's cap: oom alerts of the processes one token user attached, in 10 minutes.
    const CAP: usize = 3;
    const BURST: u32 = 10;
    let server = TestServer::simulated(1, 200).await;
    for pid in 90..90 + BURST {
        assert_eq!(post(&server, "/api/bridge/report", &report(pid)).await.0, StatusCode::OK);
        let mut body = map(pid, 4, "oom");
        body["oom"] = json!({ "device": 0, "requested_bytes": 16 * MIB });
        assert_eq!(post(&server, "/api/bridge/allocator", &body).await.0, StatusCode::NO_CONTENT);
    }
    let held = format!("{} more out-of-memory errors", BURST as usize - CAP);
    let alerts = eventually(15, "every OOM of the burst judged", || async {
        let alerts = get(&server, "/api/alerts?state=all").await;
        let ooms: Vec<Value> =
            alerts["alerts"].as_array().unwrap().iter().filter(|a| a["rule"] == "oom").cloned().collect();
        let counted = ooms.iter().any(|a| a["message"].as_str().is_some_and(|m| m.contains(&held)));
        (counted || ooms.len() > CAP).then_some(ooms)
    })
    .await;
    assert_eq!(alerts.len(), CAP, "{alerts:#?}");
    let messages: Vec<&str> = alerts.iter().filter_map(|a| a["message"].as_str()).collect();
    // Without tokens the reporter is the one local user, by name.
    let counted =
        format!("attached by '{}' were counted, not alerted (at most 3 oom alerts", gpudash::auth::local_user_name());
    assert!(messages.iter().any(|m| m.contains(&counted)), "{messages:#?}");
    server.stop().await;
}
