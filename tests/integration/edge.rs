//! The edge of the server: which Host names it answers to (DNS rebinding), public URLs and
//! trusted proxies, throttled wrong tokens, session cookies and lifetimes, and the errors
//! that layers below the handlers give.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use gpudash::auth::AuthConfig;
use gpudash::telemetry::simulator::Simulator;
use gpudash::web::site::{PublicUrl, parse_trusted_proxy};
use reqwest::StatusCode;
use reqwest::header::{COOKIE, HOST, ORIGIN, SET_COOKIE};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::security::{ADMIN, OPERATOR, VIEWER};
use crate::support::{TestServer, TlsFiles};

/// A dashboard with the security suite's four users (or none), shaped by `configure`.
pub async fn server_with(tokens: bool, configure: impl FnOnce(&mut gpudash::Options)) -> TestServer {
    let auth = if tokens {
        let spec = format!("vera:viewer:{VIEWER},omar:operator:{OPERATOR},ada:admin:{ADMIN}");
        AuthConfig::load(None, Some(&spec)).unwrap()
    } else {
        AuthConfig::default()
    };
    let mut options = gpudash::Options { auth, ..gpudash::Options::new(Duration::from_millis(200)) };
    configure(&mut options);
    let scheme = if options.tls.is_some() { "https" } else { "http" };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = gpudash::start_with(listener, Box::new(Simulator::new(1, 200)), options).await.unwrap();
    let base = format!("{scheme}://{}", running.addr());
    TestServer { running, base }
}

async fn send(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn error(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

/// The close code a socket ends with, within `secs`.
async fn close_code(socket: &mut crate::support::Socket, secs: u64) -> Option<CloseCode> {
    tokio::time::timeout(Duration::from_secs(secs), async {
        while let Some(frame) = socket.next().await {
            match frame {
                Ok(Message::Close(frame)) => return frame.map(|f| f.code),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    })
    .await
    .expect("the socket closes in time")
}

#[tokio::test]
async fn a_page_on_a_rebound_name_cannot_read_or_run_anything() {
    // The default install: loopback, no tokens. The attacker's name resolves to 127.0.0.1,
    // so its page's requests carry Host and Origin `rebind.test`.
    let server = TestServer::simulated(1, 200).await;
    let port = server.running.addr().port();
    let rebound = format!("rebind.test:{port}");
    let client = reqwest::Client::new();
    for path in
        ["/api/processes", "/api/audit", "/api/devices", "/metrics", "/", "/auth/oidc/login", "/auth/oidc/callback"]
    {
        let (status, body) = send(client.get(server.url(path)).header(HOST, &rebound)).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{path}: {body}");
        assert!(error(&body).contains("--public-url"), "{path}: {body}");
    }
    let run = json!({ "device": 0, "params": { "kind": "latency" }, "force": true });
    let post = client
        .post(server.url("/api/runs"))
        .header(HOST, &rebound)
        .header(ORIGIN, format!("http://{rebound}"))
        .json(&run);
    assert_eq!(send(post).await.0, StatusCode::MISDIRECTED_REQUEST);
    let mut request = server.ws_url().into_client_request().unwrap();
    request.headers_mut().insert("host", rebound.parse().unwrap());
    let refused = tokio_tungstenite::connect_async(request).await.unwrap_err();
    assert!(refused.to_string().contains("421"), "{refused}");

    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("LocalHost:{port}")] {
        let (status, _) = send(client.get(server.url("/api/processes")).header(HOST, &host)).await;
        assert_eq!(status, StatusCode::OK, "{host}");
    }
    server.stop().await;
}

#[tokio::test]
async fn without_tokens_only_the_local_user_is_served() {
    let server = TestServer::simulated(1, 200).await;
    let client = reqwest::Client::new();
    let (status, body) = send(client.get(server.url("/api/devices")).header("x-forwarded-for", "203.0.113.5")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(error(&body).contains("no tokens") && error(&body).contains("proxy"), "{body}");
    server.stop().await;

    let public = vec![PublicUrl::parse("http://gpu1.example.com").unwrap()];
    let closed = server_with(false, |o| o.site.public.clone_from(&public)).await;
    let (status, body) = send(client.get(closed.url("/api/devices")).header(HOST, "gpu1.example.com")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(error(&body).contains("--allow-anonymous"), "{body}");
    closed.stop().await;

    let open = server_with(false, |o| {
        o.site.public = public;
        o.allow_anonymous = true;
    })
    .await;
    let (status, _) = send(client.get(open.url("/api/devices")).header(HOST, "gpu1.example.com")).await;
    assert_eq!(status, StatusCode::OK, "--allow-anonymous says it is meant");
    open.stop().await;
}

#[tokio::test]
async fn wrong_tokens_are_throttled_per_client_but_never_lock_out_a_right_one() {
    let server = server_with(true, |o| o.site.trusted_proxies = vec![parse_trusted_proxy("127.0.0.1").unwrap()]).await;
    let client = reqwest::Client::new();
    // Everyone behind one proxy shares its address: one client floods wrong logins and Bearer tokens.
    let mut statuses = Vec::new();
    for _ in 0..30 {
        statuses.push(send(client.post(server.url("/api/login")).json(&json!({ "token": "guess" }))).await.0);
        statuses.push(send(client.get(server.url("/api/devices")).bearer_auth("wrong-token-0123456789")).await.0);
    }
    assert!(statuses.contains(&StatusCode::TOO_MANY_REQUESTS), "wrong tokens get throttled: {statuses:?}");
    let (status, body) = send(client.post(server.url("/api/login")).json(&json!({ "token": ADMIN }))).await;
    assert_eq!(status, StatusCode::OK, "the admin still logs in: {body}");
    let (status, _) = send(client.get(server.url("/api/devices")).bearer_auth(VIEWER)).await;
    assert_eq!(status, StatusCode::OK, "a right Bearer token still works");

    // Behind the trusted proxy, the forwarded address is the client: throttling and the audit use it.
    for _ in 0..15 {
        send(
            client
                .get(server.url("/api/devices"))
                .bearer_auth("wrong-token-0123456789")
                .header("x-forwarded-for", "10.1.1.1"),
        )
        .await;
    }
    let (throttled, _) = send(
        client
            .get(server.url("/api/devices"))
            .bearer_auth("wrong-token-0123456789")
            .header("x-forwarded-for", "10.1.1.1"),
    )
    .await;
    assert_eq!(throttled, StatusCode::TOO_MANY_REQUESTS);
    let (other, _) = send(
        client
            .get(server.url("/api/devices"))
            .bearer_auth("wrong-token-0123456789")
            .header("x-forwarded-for", "10.1.1.2"),
    )
    .await;
    assert_eq!(other, StatusCode::UNAUTHORIZED, "another client behind the proxy is not throttled");

    let (_, log) = send(client.get(server.url("/api/audit?limit=1000")).bearer_auth(ADMIN)).await;
    let denied_bearer: Vec<&Value> = log.as_array().unwrap().iter().filter(|e| e["action"] == "auth.bearer").collect();
    assert!(!denied_bearer.is_empty(), "wrong Bearer tokens are audited");
    assert!(denied_bearer.iter().any(|e| e["client"] == "10.1.1.1"), "with the forwarded address");
    server.stop().await;
}

/// Logs `token` in and returns the `name=value` of the session cookie and the whole Set-Cookie.
async fn login(server: &TestServer, client: &reqwest::Client, token: &str) -> (String, String) {
    let response = client.post(server.url("/api/login")).json(&json!({ "token": token })).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let set = response.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    (set.split(';').next().unwrap().to_owned(), set)
}

async fn socket_with_cookie(server: &TestServer, cookie: &str) -> crate::support::Socket {
    let mut request = server.ws_url().into_client_request().unwrap();
    request.headers_mut().insert("cookie", cookie.parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.expect("the session may connect");
    assert!(matches!(socket.next().await, Some(Ok(Message::Text(_)))), "a snapshot first");
    socket
}

#[tokio::test]
async fn logging_out_or_expiring_closes_the_sessions_sockets() {
    let server = server_with(true, |o| o.auth.open_viewing = false).await;
    let client = reqwest::Client::new();
    let (session, set) = login(&server, &client, OPERATOR).await;
    assert!(set.starts_with("gpudash_session=") && set.contains("Max-Age=43200"), "{set}");
    let mut socket = socket_with_cookie(&server, &session).await;
    let out = client.post(server.url("/api/logout")).header(COOKIE, &session).send().await.unwrap();
    assert_eq!(out.status(), StatusCode::NO_CONTENT);
    assert_eq!(close_code(&mut socket, 10).await, Some(CloseCode::Policy), "logout closes the open socket");
    server.stop().await;

    let short = server_with(true, |o| {
        o.auth.open_viewing = false;
        o.auth.admin_session = Duration::from_secs(1);
    })
    .await;
    let (session, set) = login(&short, &client, ADMIN).await;
    assert!(set.contains("Max-Age=1"), "admins get their own lifetime: {set}");
    let mut socket = socket_with_cookie(&short, &session).await;
    assert_eq!(close_code(&mut socket, 10).await, Some(CloseCode::Policy), "expiry closes the open socket");
    let (status, _) = send(client.get(short.url("/api/devices")).header(COOKIE, &session)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    short.stop().await;
}

#[tokio::test]
async fn over_tls_the_cookie_is_host_bound_and_browsers_stay_on_https() {
    let dir = tempfile::tempdir().unwrap();
    let tls = TlsFiles::generate_for(&["127.0.0.1"], dir.path());
    let server = server_with(true, |o| o.tls = Some((tls.cert.clone(), tls.key.clone()))).await;
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&tls.ca).unwrap()).unwrap();
    let client = reqwest::Client::builder().use_rustls_tls().add_root_certificate(ca).build().unwrap();
    let (session, set) = login(&server, &client, OPERATOR).await;
    assert!(set.starts_with("__Host-gpudash_session=") && set.contains("Secure") && set.contains("Path=/"), "{set}");
    assert!(!set.contains("Domain"), "{set}");
    let response = client.get(server.url("/api/devices")).header(COOKIE, &session).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["strict-transport-security"], "max-age=31536000");
    // Over https only the __Host- name counts: a plain `gpudash_session`, which any plain-http port of
    // the host could plant, is not a session there, even with a live session's value.
    let me = |cookie: String| {
        let request = client.get(server.url("/api/me")).header(COOKIE, cookie);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    assert_eq!(me(session.clone()).await["anonymous"], false, "the __Host- cookie signs in");
    let planted = session.replacen("__Host-gpudash_session=", "gpudash_session=", 1);
    assert!(planted.starts_with("gpudash_session="), "{planted}");
    let as_planted = me(planted).await;
    assert_eq!(as_planted["anonymous"], true, "a plain-named cookie is no session over https: {as_planted}");
    server.stop().await;
}

#[tokio::test]
async fn errors_below_the_handlers_are_json_and_big_socket_messages_get_1009() {
    let server = TestServer::simulated(1, 1000).await;
    let huge = format!("{{\"token\":\"{}\"}}", "x".repeat(1 << 20));
    let (status, body) = send(
        reqwest::Client::new().post(server.url("/api/login")).header("content-type", "application/json").body(huge),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(error(&body).contains("64 KiB"), "{body}");
    let (status, body) = send(reqwest::Client::new().delete(server.url("/api/devices"))).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(error(&body).contains("not allowed"), "{body}");

    let (mut socket, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
    let _ = socket.send(Message::text("x".repeat(64 * 1024))).await;
    assert_eq!(close_code(&mut socket, 10).await, Some(CloseCode::Size));
    assert_eq!(reqwest::get(server.url("/healthz")).await.unwrap().status(), StatusCode::OK);
    server.stop().await;
}
