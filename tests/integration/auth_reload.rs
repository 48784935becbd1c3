//! Tokens without a restart, as an administrator does it: `gpudash token add` appends a token to
//! the auth file of a running `gpudash`, SIGHUP puts it in force; a broken file is refused and the
//! tokens in force stay; a removed token stops working and its browser session ends.

use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use gpudash::auth::{Role, file_entry, hash_token};
use reqwest::StatusCode;
use reqwest::header::{COOKIE, SET_COOKIE};
use serde_json::{Value, json};

use crate::signals_os::Server;
use crate::support::eventually;
use crate::support::gpudash_binary;

const ROOT: &str = "root-token-for-the-reload-test-0123";

/// Starts the real binary on `auth_file` and returns it, its URL, and its log lines as they come.
fn start(auth_file: &std::path::Path) -> (Server, String, Receiver<String>) {
    start_with(&["--auth-file".as_ref(), auth_file.as_os_str()])
}

/// Starts the real binary (simulated, no history, on loopback) with `args` added.
fn start_with(args: &[&std::ffi::OsStr]) -> (Server, String, Receiver<String>) {
    let (server, rx) = start_on("127.0.0.1:0", args);
    let url = logged(&rx, "serving on ", 30).split("serving on ").nth(1).expect("an address").trim().to_owned();
    (server, url, rx)
}

/// Starts the real binary (simulated, no history) on `listen` with `args` added; its log lines as they come.
pub(crate) fn start_on(listen: &str, args: &[&std::ffi::OsStr]) -> (Server, Receiver<String>) {
    let mut child = Command::new(gpudash_binary())
        .args(["--simulate", "1", "--interval", "200ms", "--no-history", "--listen", listen])
        .args(args)
        .env_remove("GPUDASH_TOKENS")
        .env("GPUDASH_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpudash starts");
    let stderr = child.stderr.take().expect("piped");
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (server, rx)
}

/// The first line of the log from now on that contains `part`, failing after `secs`.
pub(crate) fn logged(lines: &Receiver<String>, part: &str, secs: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(part) => return line,
            Ok(_) => {}
            Err(_) => panic!("gpudash did not log '{part}' within {secs} s"),
        }
    }
}

pub(crate) fn hangup(server: &Server) {
    let status = Command::new("kill").args(["-HUP", &server.0.id().to_string()]).status().expect("kill runs");
    assert!(status.success());
}

/// `GET path` with `Authorization: Bearer token`: the status, and the body as JSON (null if none).
async fn get(url: &str, path: &str, token: &str) -> (StatusCode, Value) {
    let response = reqwest::Client::new().get(format!("{url}{path}")).bearer_auth(token).send().await.unwrap();
    (response.status(), response.json().await.unwrap_or(Value::Null))
}

/// `gpudash token add NAME ROLE --auth-file FILE`: exit code, standard output, standard error.
fn token_add(name: &str, role: &str, file: &std::path::Path) -> (Option<i32>, String, String) {
    let out = Command::new(gpudash_binary())
        .args(["token", "add", name, role, "--auth-file"])
        .arg(file)
        .env_remove("GPUDASH_AUTH_FILE")
        .output()
        .expect("gpudash token add runs");
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("utf-8");
    (out.status.code(), text(out.stdout), text(out.stderr))
}

#[tokio::test]
async fn a_token_added_with_the_cli_works_after_sighup_and_a_removed_one_stops() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auth.toml");
    let root_only = format!("viewers = \"token\"\n\n{}", file_entry("root", Role::Admin, &hash_token(ROOT)));
    std::fs::write(&file, &root_only).unwrap();
    let (server, url, log) = start(&file);

    let (code, out, err) = token_add("ana", "operator", &file);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("send SIGHUP (systemctl reload gpudash) to apply"), "{out}");
    let line = out.lines().find(|l| l.starts_with("token (give it to ana")).unwrap_or_else(|| panic!("{out}"));
    let ana = line.rsplit(' ').next().unwrap().to_owned();
    let (code, out, err) = token_add("ana", "viewer", &file);
    assert_eq!(code, Some(2), "a second token for ana is refused: {out}");
    assert!(err.contains("'ana' already has a token"), "{err}");
    let (code, _, err) = token_add("ana b", "viewer", &file);
    assert_eq!(code, Some(2));
    assert!(err.contains("user name 'ana b' must be"), "{err}");

    assert_eq!(get(&url, "/api/me", &ana).await.0, StatusCode::UNAUTHORIZED, "not before SIGHUP");
    hangup(&server);
    let me = eventually(10, "ana's token accepted", || async {
        let (status, me) = get(&url, "/api/me", &ana).await;
        (status == StatusCode::OK).then_some(me)
    })
    .await;
    assert_eq!((me["user"].as_str(), me["role"].as_str()), (Some("ana"), Some("operator")), "{me}");
    assert!(logged(&log, "auth file", 10).contains("reloaded: added ana"));
    // Ana logs in on the page: a session that must end with her token.
    let client = reqwest::Client::new();
    let login = client.post(format!("{url}/api/login")).json(&json!({ "token": ana })).send().await.unwrap();
    assert_eq!(login.status(), StatusCode::OK);
    let cookie = login.headers()[SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_owned();
    let devices = || client.get(format!("{url}/api/devices")).header(COOKIE, &cookie).send();
    assert_eq!(devices().await.unwrap().status(), StatusCode::OK);

    // A broken file: refused, logged, and every token in force keeps working.
    let good = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{good}\n[[token]\n")).unwrap();
    hangup(&server);
    // The refusal names the file and the fault (TOML's message runs over several lines).
    let refused = logged(&log, "ERROR", 10);
    assert!(refused.contains(&format!("auth file '{}': TOML parse error", file.display())), "{refused}");
    logged(&log, "the tokens already in force stay", 10);
    assert_eq!(get(&url, "/api/me", &ana).await.0, StatusCode::OK);
    assert_eq!(get(&url, "/api/me", ROOT).await.0, StatusCode::OK);
    assert_eq!(devices().await.unwrap().status(), StatusCode::OK, "ana's session goes on");

    // Ana's entry removed: her token and her session stop working, root's goes on.
    std::fs::write(&file, &root_only).unwrap();
    hangup(&server);
    eventually(10, "ana's token refused", || async {
        (get(&url, "/api/me", &ana).await.0 == StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
    assert_eq!(devices().await.unwrap().status(), StatusCode::UNAUTHORIZED, "her session ended");
    assert_eq!(get(&url, "/api/devices", ROOT).await.0, StatusCode::OK);
    let (_, audit) = get(&url, "/api/audit?action=auth.reload", ROOT).await;
    let entries: Vec<(&str, &str)> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["outcome"].as_str().unwrap(), e["detail"].as_str().unwrap()))
        .collect();
    assert_eq!(entries.len(), 3, "{audit}");
    assert_eq!(entries[0], ("ok", "removed ana; 1 session ended"), "newest first: {audit}");
    assert_eq!(entries[1].0, "failed", "{audit}");
    assert_eq!(entries[2], ("ok", "added ana"), "{audit}");
    drop(server);
}

#[tokio::test]
async fn the_web_config_files_accounts_change_on_sighup_and_a_bad_file_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    let write = |password: &str| {
        let hash = bcrypt::hash(password, 4).unwrap();
        std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    };
    write("first-password");
    let (server, url, rx) = start_with(&["--web-config-file".as_ref(), web.as_os_str()]);
    let scrape = |password: &'static str| {
        let url = format!("{url}/metrics");
        async move {
            reqwest::Client::new().get(url).basic_auth("prometheus", Some(password)).send().await.unwrap().status()
        }
    };
    assert_eq!(scrape("first-password").await, StatusCode::OK);
    assert_eq!(scrape("second-password").await, StatusCode::UNAUTHORIZED);

    write("second-password");
    hangup(&server);
    logged(&rx, "reloaded: 1 scraper account(s)", 10);
    assert_eq!(scrape("second-password").await, StatusCode::OK);
    assert_eq!(scrape("first-password").await, StatusCode::UNAUTHORIZED, "the old password stops working");

    std::fs::write(&web, "basic_auth_users:\n  prometheus: plain-text\n").unwrap();
    hangup(&server);
    let refused = logged(&rx, "the scraper accounts already in force stay", 10);
    assert!(refused.contains("not a bcrypt hash"), "{refused}");
    assert_eq!(scrape("second-password").await, StatusCode::OK, "a bad file changes nothing");
}
