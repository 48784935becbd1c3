//! The REST cases of the bad-input suite: one row per request, with the status and the words its
//! answer must contain. The routes of each part have their own list.

use reqwest::{Method, StatusCode};

use crate::security::{ADMIN, OPERATOR, VIEWER};

/// One REST case: request, expected status, words the answer must contain.
pub(super) struct Case {
    pub(super) method: Method,
    pub(super) path: &'static str,
    pub(super) token: Option<&'static str>,
    pub(super) headers: &'static [(&'static str, &'static str)],
    pub(super) body: Option<Vec<u8>>,
    pub(super) status: StatusCode,
    pub(super) says: &'static str,
}

pub(super) fn case(method: Method, path: &'static str, status: StatusCode, says: &'static str) -> Case {
    Case { method, path, token: Some(OPERATOR), headers: &[], body: None, status, says }
}

pub(super) fn post(path: &'static str, body: &str, status: StatusCode, says: &'static str) -> Case {
    Case {
        body: Some(body.as_bytes().to_vec()),
        headers: &[("content-type", "application/json")],
        ..case(Method::POST, path, status, says)
    }
}

/// `/api/fleet/host/` and a 301-character instance.
const LONG_INSTANCE: &str = concat!(
    "/api/fleet/host/",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "a"
);

pub(super) fn cases() -> Vec<Case> {
    use StatusCode as S;
    let mut all = vec![
        case(Method::GET, "/api/history?metric=gpu_util", S::BAD_REQUEST, "'device' is required"),
        case(Method::GET, "/api/history?device=0", S::BAD_REQUEST, "'metric' is required"),
        case(Method::GET, "/api/history?device=0&metric=fan", S::BAD_REQUEST, "the metrics are"),
        case(Method::GET, "/api/history?device=-1&metric=gpu_util", S::BAD_REQUEST, "whole number"),
        case(Method::GET, "/api/history?device=99999999999&metric=gpu_util", S::NOT_FOUND, "no GPU with index"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&from=9&to=1", S::BAD_REQUEST, "before"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&points=0", S::BAD_REQUEST, "from 1 to 10000"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&points=4294967296", S::BAD_REQUEST, "from 1 to 10000"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&from=1.5", S::BAD_REQUEST, "whole number"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&x=1", S::BAD_REQUEST, "unknown parameter 'x'"),
        case(Method::GET, "/api/history?device=%FF&metric=gpu_util", S::BAD_REQUEST, "whole number"),
        case(Method::GET, "/api/history?device=0&metric=gpu_util&to=18446744073709551615", S::BAD_REQUEST, "year 9999"),
        case(
            Method::GET,
            "/api/history?device=0&metric=gpu_util&from=9223372036854775808&to=18446744073709551615",
            S::BAD_REQUEST,
            "year 9999",
        ),
        case(Method::GET, "/api/history/all?range=2w", S::BAD_REQUEST, "the ranges are 5m, 1h, 24h, 7d"),
        case(Method::GET, "/api/history/all?range=1h&from=0", S::BAD_REQUEST, "not both"),
        case(Method::GET, "/api/history/all?points=0", S::BAD_REQUEST, "from 1 to 2000"),
        case(Method::GET, "/api/history/all?points=4294967296", S::BAD_REQUEST, "from 1 to 2000"),
        case(Method::GET, "/api/history/all?from=9&to=1", S::BAD_REQUEST, "before"),
        case(Method::GET, "/api/history/all?to=18446744073709551615", S::BAD_REQUEST, "year 9999"),
        case(Method::GET, "/api/history/all?from=%FF", S::BAD_REQUEST, "whole number"),
        case(Method::GET, "/api/history/all?metric=gpu_util", S::BAD_REQUEST, "unknown parameter 'metric'"),
        case(Method::POST, "/api/history/all", S::METHOD_NOT_ALLOWED, "not allowed"),
        case(Method::GET, "/api/fleet?gpus=some", S::BAD_REQUEST, "gpus=all or gpus=none"),
        case(Method::GET, "/api/fleet/host/a%20b", S::BAD_REQUEST, "is not a scrape target's instance"),
        case(Method::GET, "/api/fleet/host/a%22%7Db", S::BAD_REQUEST, "letters, digits"),
        case(Method::GET, LONG_INSTANCE, S::BAD_REQUEST, "at most 300 characters"),
        case(Method::GET, "/api/fleet/host/gpu-01:7070", S::SERVICE_UNAVAILABLE, "the fleet view is off"),
        case(Method::GET, "/api/fleet/owners?range=1w", S::BAD_REQUEST, "s, m, h or d (e.g. 90m, 24h, 30d)"),
        case(Method::GET, "/api/fleet/owners?range=401d", S::BAD_REQUEST, "between 1m and 400d"),
        case(Method::GET, "/api/fleet/owners?range=99999999999999999999d", S::BAD_REQUEST, "between 1m and 400d"),
        case(Method::GET, "/api/fleet/owners?range=%FF", S::BAD_REQUEST, "is not a range"),
        case(Method::GET, "/api/fleet/owners?range=24h", S::SERVICE_UNAVAILABLE, "the fleet view is off"),
        Case {
            headers: &[("host", "rebind.test:7070")],
            ..case(Method::GET, "/api/devices", S::MISDIRECTED_REQUEST, "--public-url")
        },
        Case { headers: &[("host", "bad host")], ..case(Method::GET, "/api/devices", S::BAD_REQUEST, "Host header") },
        case(Method::GET, "/api/nope", S::NOT_FOUND, "the API has"),
        case(Method::GET, "/assets/%2e%2e/Cargo.toml", S::NOT_FOUND, "no page or file"),
        case(Method::GET, "/assets/frontend.js%00.png", S::NOT_FOUND, "no page or file"),
        case(Method::PUT, "/api/devices", S::METHOD_NOT_ALLOWED, "not allowed"),
        case(Method::DELETE, "/api/runs", S::METHOD_NOT_ALLOWED, "not allowed"),
        post("/api/runs", "{\"device\": 0,", S::BAD_REQUEST, "invalid run request"),
        post("/api/runs/check", "{\"device\": 0,", S::BAD_REQUEST, "invalid run request"),
        post(
            "/api/runs/check",
            "{\"device\": 0, \"params\": {\"kind\": \"warp\"}}",
            S::BAD_REQUEST,
            "'warp' is not an experiment; use memory",
        ),
        case(Method::GET, "/api/runs/check", S::METHOD_NOT_ALLOWED, "not allowed"),
        post(
            "/api/runs",
            "{\"device\": \"zero\", \"params\": {\"kind\": \"latency\"}}",
            S::BAD_REQUEST,
            "invalid run request",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"latency\"}, \"colour\": 1}",
            S::BAD_REQUEST,
            "unknown field",
        ),
        post(
            "/api/runs",
            "{\"device\": -1, \"params\": {\"kind\": \"latency\"}}",
            S::BAD_REQUEST,
            "invalid run request",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"warp\"}}",
            S::BAD_REQUEST,
            "'warp' is not an experiment; use memory",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"../x\"}}",
            S::BAD_REQUEST,
            "is not an experiment name",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"transfer\", \"sizes\": [0]}}",
            S::BAD_REQUEST,
            "sizes",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"transfer\", \"sizes\": [1e30]}}",
            S::BAD_REQUEST,
            "transfer parameters: invalid type: floating point",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"latency\", \"repetitions\": 0}}",
            S::BAD_REQUEST,
            "repetitions",
        ),
        post(
            "/api/runs",
            "{\"device\": 0, \"params\": {\"kind\": \"latency\", \"repetitions\": -5}}",
            S::BAD_REQUEST,
            "latency parameters: invalid value: integer `-5`",
        ),
        // Collectives: the rule's words (lab/src/experiments/collectives/params.rs), what is allowed named.
        post(
            "/api/runs",
            r#"{"device": 0, "params": {"kind": "collectives", "dtype": "fp16"}}"#,
            S::BAD_REQUEST,
            "'dtype' must be fp32 or bf16, got 'fp16'",
        ),
        post(
            "/api/runs",
            r#"{"device": 0, "params": {"kind": "collectives", "sizes": [6]}}"#,
            S::BAD_REQUEST,
            "a multiple of 4",
        ),
        post(
            "/api/runs",
            r#"{"device": 0, "params": {"kind": "collectives", "ddp": {"bucket_cap_mb": 0}}}"#,
            S::BAD_REQUEST,
            "'ddp.bucket_cap_mb' must be from 1 to 1024, got '0'",
        ),
        post(
            "/api/runs",
            r#"{"device": 0, "params": {"kind": "collectives", "ddp": {"parameters": 1.3e9}}}"#,
            S::BAD_REQUEST,
            "collectives parameters: invalid type: floating point",
        ),
        post(
            "/api/runs",
            r#"{"device": 0, "params": {"kind": "collectives", "collectives": ["all_to_all"]}}"#,
            S::BAD_REQUEST,
            "unknown variant",
        ),
        post("/api/runs", "", S::BAD_REQUEST, "invalid run request"),
        post("/api/runs", "null", S::BAD_REQUEST, "invalid run request"),
        post("/api/runs", "{\"device\": 9, \"params\": {\"kind\": \"latency\"}}", S::NOT_FOUND, "9"),
        // Parameters are judged before the GPU: a bad request is a 400 on any GPU.
        post("/api/runs", "{\"device\": 9, \"params\": {\"kind\": \"fft\"}}", S::BAD_REQUEST, "not an experiment"),
        case(Method::GET, "/api/runs/abc", S::BAD_REQUEST, "parse"),
        case(Method::GET, "/api/runs/999999", S::NOT_FOUND, "999999"),
        case(Method::POST, "/api/runs/999999/cancel", S::NOT_FOUND, "999999"),
        case(Method::GET, "/api/runs?limit=abc", S::BAD_REQUEST, "accepted"),
        case(Method::GET, "/api/runs?kind=warp", S::BAD_REQUEST, "not an experiment"),
        case(Method::GET, "/api/runs?colour=red", S::BAD_REQUEST, "accepted"),
        case(Method::POST, "/api/lab/devices/9/empty_cache", S::NOT_FOUND, "9"),
        case(Method::GET, "/api/bridge/abc", S::BAD_REQUEST, "parse"),
        case(Method::GET, "/api/bridge/999999", S::NOT_FOUND, "999999"),
        case(Method::POST, "/api/bridge/999999/empty_cache", S::NOT_FOUND, "999999"),
        post("/api/bridge/report", "{\"version\": 1}", S::BAD_REQUEST, "invalid report"),
        post(
            "/api/bridge/report",
            concat!(
                "{\"version\": 1, \"pid\": 7, \"host\": \"h\", \"process_name\": \"p\", \"cuda_version\": null,",
                " \"torch_version\": \"00000000000000000000000000000000000000000000000000000000000000000\",",
                " \"allow_remote_empty_cache\": false, \"interval_s\": 1, \"devices\": []}"
            ),
            S::BAD_REQUEST,
            "at most 64 characters",
        ),
        post("/api/bridge/allocator", "{\"version\": 1}", S::BAD_REQUEST, "invalid allocator report"),
        post(
            "/api/bridge/allocator",
            concat!(
                "{\"version\": 1, \"pid\": 7, \"host\": \"h\", \"reason\": \"periodic\", \"taken_ms\": 1, \"cost_ms\": 0,",
                " \"maps\": [{\"device\": 0, \"free_histogram\": [], \"segments\": [{\"size\": 10, \"stream\": 0,",
                " \"pool\": \"large\", \"allocated\": 1, \"active\": 1, \"free\": 9, \"blocks\": 1}], \"totals\":",
                " {\"reserved\": 5, \"allocated\": 1, \"active\": 1, \"free_in_segments\": 9, \"largest_free_block\": 0,",
                " \"segments\": 1, \"blocks\": 1}}]}"
            ),
            S::BAD_REQUEST,
            "totals.reserved is 5 but the segments add up to 10",
        ),
        Case {
            body: Some(vec![b' '; 300 * 1024]),
            ..post("/api/bridge/allocator", "", S::PAYLOAD_TOO_LARGE, "over the limit of 256 KiB")
        },
        Case { token: Some(VIEWER), ..post("/api/bridge/allocator", "{}", S::FORBIDDEN, "operator role") },
        case(Method::POST, "/api/bridge/999999/allocator_map", S::NOT_FOUND, "999999"),
        Case {
            token: Some(VIEWER),
            ..case(Method::POST, "/api/bridge/999999/allocator_map", S::FORBIDDEN, "operator role")
        },
        post(
            "/api/bridge/report",
            concat!(
                "{\"version\": 1, \"pid\": 1, \"host\": \"h\", \"process_name\": \"p\", \"cuda_version\": null,",
                " \"torch_version\": \"2\", \"allow_remote_empty_cache\": true, \"interval_s\": 1, \"devices\": []}"
            ),
            S::FORBIDDEN,
            "or an admin may report for it, not 'omar'",
        ),
        post("/api/login", "{\"tok\": 1}", S::BAD_REQUEST, "invalid login"),
        case(Method::GET, "/auth/oidc/login?next=/", S::NOT_FOUND, "has no OIDC sign-in (--oidc-issuer)"),
        case(Method::GET, "/auth/oidc/callback?code=a&state=b", S::NOT_FOUND, "has no OIDC sign-in"),
        post("/api/login", "{\"token\": \"wrong-token-000000\"}", S::UNAUTHORIZED, "invalid token"),
        case(Method::GET, "/api/audit?limit=0", S::FORBIDDEN, "admin role"),
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?limit=0", S::BAD_REQUEST, "from 1 to 1000") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?limit=-1", S::BAD_REQUEST, "accepted") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?limit=1001", S::BAD_REQUEST, "from 1 to 1000") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?outcome=maybe", S::BAD_REQUEST, "`denied`") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?from=yesterday", S::BAD_REQUEST, "ms since epoch") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?from=9&to=1", S::BAD_REQUEST, "must not be after") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?user=", S::BAD_REQUEST, "'user' must be 1 to 100") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?colour=red", S::BAD_REQUEST, "unknown field") },
        Case { token: Some(ADMIN), ..case(Method::GET, "/api/audit?before=-3", S::BAD_REQUEST, "accepted") },
        Case {
            token: Some("wrong-token-000000"),
            ..case(Method::GET, "/api/devices", S::UNAUTHORIZED, "invalid token")
        },
        Case { token: None, ..case(Method::GET, "/api/devices", S::UNAUTHORIZED, "needs a token") },
        Case {
            token: None,
            headers: &[("cookie", "gpudash_session=forged")],
            ..case(Method::GET, "/api/devices", S::UNAUTHORIZED, "log in again")
        },
        Case {
            token: Some(VIEWER),
            ..post("/api/runs", "{\"device\": 0, \"params\": {\"kind\": \"latency\"}}", S::FORBIDDEN, "operator role")
        },
        Case {
            token: Some(VIEWER),
            ..case(Method::POST, "/api/lab/devices/0/empty_cache", S::FORBIDDEN, "operator role")
        },
        Case {
            headers: &[("content-type", "application/json"), ("origin", "https://evil.example")],
            ..post("/api/runs", "{\"device\": 0, \"params\": {\"kind\": \"latency\"}}", S::FORBIDDEN, "cross-site")
        },
        Case { token: None, ..case(Method::GET, "/metrics", S::UNAUTHORIZED, "token") },
        // This server runs without --allow-signals.
        post("/api/processes/4242/signal", r#"{"signal":"SIGTERM"}"#, S::FORBIDDEN, "--allow-signals"),
        Case {
            token: Some(ADMIN),
            ..post("/api/processes/1/signal", r#"{"signal":"SIGKILL"}"#, S::FORBIDDEN, "--allow-signals")
        },
    ];
    all.extend(alert_cases());
    all.extend(usage_cases());
    all.extend(jobs_cases());
    all.extend(super::notices::cases());
    all.extend(reservation_cases());
    all.extend(foreign_cases());
    // Not UTF-8 at all.
    all.push(Case {
        body: Some(vec![0xff, 0xfe, 0x00, 0x80]),
        ..post("/api/runs", "", S::BAD_REQUEST, "invalid run request")
    });
    // Over the body limit.
    all.push(Case { body: Some(vec![b' '; 2 << 20]), ..post("/api/runs", "", S::PAYLOAD_TOO_LARGE, "") });
    all
}

/// The usage API (`/api/usage` and its CSV): ranges, groups, numbers; each case asked of both.
/// This session's routes under the checks every route gets: a foreign browser Origin on a
/// state-changing request, a Host the dashboard does not answer to (DNS rebinding), a body over the limit.
fn foreign_cases() -> Vec<Case> {
    use StatusCode as S;
    const EVIL: &[(&str, &str)] = &[("content-type", "application/json"), ("origin", "https://evil.example")];
    const REBIND: &[(&str, &str)] = &[("content-type", "application/json"), ("host", "rebind.test:7070")];
    let reservation = r#"{"devices":[0],"start_ms":0,"end_ms":1,"note":""}"#;
    let mut all = Vec::new();
    for (path, body) in [
        ("/api/reservations", reservation),
        ("/api/processes/4242/signal", r#"{"signal":"SIGTERM"}"#),
        ("/api/bridge/allocator", "{}"),
        ("/api/bridge/1/allocator_map", ""),
    ] {
        all.push(Case { headers: EVIL, ..post(path, body, S::FORBIDDEN, "cross-site") });
        all.push(Case { headers: REBIND, ..post(path, body, S::MISDIRECTED_REQUEST, "--public-url") });
    }
    all.push(Case { headers: EVIL, ..case(Method::DELETE, "/api/reservations/1", S::FORBIDDEN, "cross-site") });
    for path in ["/api/usage", "/api/usage.csv", "/api/reservations", "/api/jobs", "/api/jobs.csv", "/api/jobs/1"] {
        all.push(Case { headers: REBIND, ..case(Method::GET, path, S::MISDIRECTED_REQUEST, "--public-url") });
    }
    // (`/api/bridge/{id}/allocator_map` reads no body.)
    for path in ["/api/reservations", "/api/processes/4242/signal"] {
        all.push(Case { body: Some(vec![b' '; 2 << 20]), ..post(path, "", S::PAYLOAD_TOO_LARGE, "over the limit") });
    }
    all
}

/// The jobs API (`/api/jobs`, its CSV, one job): filters, pages, ids.
fn jobs_cases() -> Vec<Case> {
    use StatusCode as S;
    macro_rules! both {
        ($query:literal, $says:literal) => {
            [
                case(Method::GET, concat!("/api/jobs?", $query), S::BAD_REQUEST, $says),
                case(Method::GET, concat!("/api/jobs.csv?", $query), S::BAD_REQUEST, $says),
            ]
        };
    }
    let mut all: Vec<Case> = [
        both!("limit=0", "a whole number from 1 to 1000"),
        both!("limit=1001", "a whole number from 1 to 1000"),
        both!("limit=ten", "a whole number from 1 to 1000"),
        both!("runtime=vm", "all, slurm, pod, container, process"),
        both!("state=done", "all, running, ended"),
        both!("before=-3", "is not a job id"),
        both!("user=ana", "unknown parameter 'user'; the parameters are owner, runtime, state, before, limit"),
    ]
    .into_iter()
    .flatten()
    .collect();
    all.push(case(Method::GET, "/api/jobs/0", S::BAD_REQUEST, "ids are whole numbers from 1"));
    all.push(case(Method::GET, "/api/jobs/abc", S::BAD_REQUEST, "'abc' is not a job id"));
    all.push(case(Method::GET, "/api/jobs/99999999999999999999999", S::BAD_REQUEST, "is not a job id"));
    all.push(case(Method::GET, "/api/jobs/424242", S::NOT_FOUND, "there is no job 424242"));
    all.push(case(Method::POST, "/api/jobs", S::METHOD_NOT_ALLOWED, "not allowed"));
    all
}

fn usage_cases() -> Vec<Case> {
    use StatusCode as S;
    macro_rules! both {
        ($query:literal, $says:literal) => {
            [
                case(Method::GET, concat!("/api/usage?", $query), S::BAD_REQUEST, $says),
                case(Method::GET, concat!("/api/usage.csv?", $query), S::BAD_REQUEST, $says),
            ]
        };
    }
    [
        both!("from=9&to=1", "'from' (9) must be before 'to' (1)"),
        both!("from=0&to=31708800001", "at most 366 days"),
        both!(
            "from=0&to=1&group=week",
            "the groups are user (or owner), gpu, day, user_gpu, user_day, container, pod, namespace and job"
        ),
        both!("from=yesterday&to=1", "whole number of ms"),
        both!("from=0&to=1.5", "whole number of ms"),
        both!("from=0&to=99999999999999999999", "whole number of ms"),
        both!("to=1", "'from' is required"),
        both!("from=0", "'to' is required"),
        both!("from=0&to=1&user=ana", "unknown parameter 'user'"),
        both!("from=0&to=1&utc_offset=900", "from -840 to 840"),
        both!("from=0&to=1&utc_offset=+1:00", "whole minutes east of UTC"),
        both!("from=0&to=1&utc_offset=", "not ''"),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The alerts API: filters, silences and subscriptions.
fn alert_cases() -> Vec<Case> {
    use StatusCode as S;
    const SILENCES: &str = "/api/alerts/silences";
    const SUBSCRIPTIONS: &str = "/api/alerts/subscriptions";
    vec![
        case(Method::GET, "/api/alerts?state=maybe", S::BAD_REQUEST, "use firing, resolved or all"),
        case(Method::GET, "/api/alerts?limit=0", S::BAD_REQUEST, "from 1 to 1000"),
        case(Method::GET, "/api/alerts?limit=1001", S::BAD_REQUEST, "from 1 to 1000"),
        case(Method::GET, "/api/alerts?limit=many", S::BAD_REQUEST, "from 1 to 1000"),
        case(Method::GET, "/api/alerts?rule=hot", S::BAD_REQUEST, "the rules are temperature, clock_events"),
        case(Method::GET, "/api/alerts?gpu=-1", S::BAD_REQUEST, "GPU index"),
        case(Method::GET, "/api/alerts?from=yesterday", S::BAD_REQUEST, "ms since epoch"),
        case(Method::GET, "/api/alerts?from=9&to=1", S::BAD_REQUEST, "must not be after"),
        case(Method::GET, "/api/alerts?colour=red", S::BAD_REQUEST, "accepted: state, from, to, gpu, rule, limit"),
        case(Method::PUT, "/api/alerts", S::METHOD_NOT_ALLOWED, "not allowed"),
        post(SILENCES, "{\"rule\":", S::BAD_REQUEST, "invalid silence"),
        post(SILENCES, "[]", S::BAD_REQUEST, "invalid silence"),
        post(
            SILENCES,
            r#"{"rule":"ecc","gpu":0,"duration":"2h","reason":"r","until":1}"#,
            S::BAD_REQUEST,
            "unknown field `until`",
        ),
        post(SILENCES, r#"{"rule":"hot","gpu":0,"duration":"2h","reason":"r"}"#, S::BAD_REQUEST, "unknown variant"),
        post(SILENCES, r#"{"rule":"ecc","gpu":-1,"duration":"2h","reason":"r"}"#, S::BAD_REQUEST, "invalid silence"),
        post(SILENCES, r#"{"rule":"ecc","gpu":0,"duration":"5s","reason":"r"}"#, S::BAD_REQUEST, "from 1m to 30d"),
        post(SILENCES, r#"{"rule":"ecc","gpu":0,"duration":"31d","reason":"r"}"#, S::BAD_REQUEST, "from 1m to 30d"),
        post(
            SILENCES,
            r#"{"rule":"ecc","gpu":0,"duration":"soon","reason":"r"}"#,
            S::BAD_REQUEST,
            "not a duration from 1m",
        ),
        post(
            SILENCES,
            r#"{"rule":"ecc","gpu":0,"duration":"2h","reason":"  "}"#,
            S::BAD_REQUEST,
            "1 to 200 characters",
        ),
        post(SILENCES, r#"{"rule":"ecc","gpu":9,"duration":"2h","reason":"r"}"#, S::NOT_FOUND, "no GPU 9"),
        Case {
            token: Some(VIEWER),
            ..post(SILENCES, r#"{"rule":"ecc","gpu":0,"duration":"2h","reason":"r"}"#, S::FORBIDDEN, "operator role")
        },
        case(Method::DELETE, "/api/alerts/silences/abc", S::BAD_REQUEST, "not a silence id"),
        case(Method::DELETE, "/api/alerts/silences/999", S::NOT_FOUND, "no silence 999"),
        Case { token: Some(VIEWER), ..case(Method::DELETE, "/api/alerts/silences/1", S::FORBIDDEN, "operator role") },
        post(SUBSCRIPTIONS, r#"{"kind":"nope"}"#, S::BAD_REQUEST, "invalid subscription"),
        post(SUBSCRIPTIONS, r#"{"kind":"critical","x":1}"#, S::BAD_REQUEST, "unknown field"),
        post(SUBSCRIPTIONS, r#"{"kind":"gpu_free"}"#, S::BAD_REQUEST, "invalid subscription"),
        post(SUBSCRIPTIONS, r#"{"kind":"gpu_free","gpu_uuid":"GPU-nope"}"#, S::BAD_REQUEST, "no GPU with UUID"),
        post(SUBSCRIPTIONS, "", S::BAD_REQUEST, "invalid subscription"),
        case(Method::DELETE, "/api/alerts/subscriptions/abc", S::BAD_REQUEST, "not a subscription id"),
        case(Method::DELETE, "/api/alerts/subscriptions/999", S::NOT_FOUND, "no subscription 999"),
        Case { token: None, ..case(Method::GET, SUBSCRIPTIONS, S::UNAUTHORIZED, "needs a token") },
        post(SILENCES, r#"{"rule":"device_lost","gpu":0,"duration":"1d","reason":"r"}"#, S::FORBIDDEN, "at most 4h"),
        post(
            SILENCES,
            r#"{"rule":"xid","gpu":0,"duration":"2h","reason":"a\nb"}"#,
            S::BAD_REQUEST,
            "control character",
        ),
    ]
}

/// The reservations API: every refusal names what is wrong and what is allowed.
fn reservation_cases() -> Vec<Case> {
    use StatusCode as S;
    const PATH: &str = "/api/reservations";
    let now = gpudash::telemetry::now_ms();
    let (soon, hour, day) = (now + 60_000, 3_600_000, 86_400_000);
    let body = |devices: &str, start: u64, end: u64, note: &str| {
        format!(r#"{{"devices":{devices},"start_ms":{start},"end_ms":{end},"note":"{note}"}}"#)
    };
    vec![
        post(PATH, &body("[7]", soon, soon + hour, "n"), S::BAD_REQUEST, "no GPU 7; this host has 2 GPUs"),
        post(PATH, &body("[]", soon, soon + hour, "n"), S::BAD_REQUEST, "name at least one GPU"),
        post(PATH, &body("[1,1]", soon, soon + hour, "n"), S::BAD_REQUEST, "GPU 1 is listed twice"),
        post(PATH, &body("[0]", soon + hour, soon, "n"), S::BAD_REQUEST, "must be after 'start_ms'"),
        post(PATH, &body("[0]", soon, soon + 400 * day, "n"), S::BAD_REQUEST, "the longest allowed is 366 days"),
        post(PATH, &body("[0]", now - day, now + hour, "n"), S::BAD_REQUEST, "more than 5 minutes in the past"),
        post(PATH, &body("[0]", now + 400 * day, now + 401 * day, "n"), S::BAD_REQUEST, "at most 366 days ahead"),
        post(PATH, &body("[0]", soon, soon + hour, &"x".repeat(5000)), S::BAD_REQUEST, "at most 200 are allowed"),
        post(PATH, &body("[0]", soon, soon + hour, "a\\u0007b"), S::BAD_REQUEST, "control character"),
        post(PATH, "{\"devices\":", S::BAD_REQUEST, "invalid reservation"),
        post(PATH, r#"{"devices":[-1],"start_ms":1,"end_ms":2}"#, S::BAD_REQUEST, "invalid reservation"),
        post(PATH, r#"{"devices":[0],"start_ms":"soon","end_ms":2}"#, S::BAD_REQUEST, "invalid reservation"),
        post(PATH, r#"{"devices":[0],"start_ms":1,"end_ms":2,"who":"ana"}"#, S::BAD_REQUEST, "unknown field `who`"),
        Case { token: Some(VIEWER), ..post(PATH, &body("[0]", soon, soon + hour, "n"), S::FORBIDDEN, "operator role") },
        case(Method::GET, "/api/reservations?all=maybe", S::BAD_REQUEST, "must be 1 or 0"),
        case(Method::GET, "/api/reservations?colour=red", S::BAD_REQUEST, "accepted: all=1"),
        case(Method::DELETE, "/api/reservations/abc", S::BAD_REQUEST, "not a reservation id"),
        case(Method::DELETE, "/api/reservations/-3", S::BAD_REQUEST, "not a reservation id"),
        case(Method::DELETE, "/api/reservations/999", S::NOT_FOUND, "no reservation 999"),
        Case { token: Some(VIEWER), ..case(Method::DELETE, "/api/reservations/1", S::FORBIDDEN, "operator role") },
        case(Method::PUT, "/api/reservations", S::METHOD_NOT_ALLOWED, "not allowed"),
        post(PATH, &body("[0,1]", soon, soon + 1, "n"), S::BAD_REQUEST, "the shortest allowed is 5 minutes"),
    ]
}
