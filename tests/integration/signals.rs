//! Signalling GPU processes (`--allow-signals`) through the real path: the simulator lists
//! processes this test starts (`pid:INDEX:PID`), and the server's kill(2) ends them.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use gpudash::auth::AuthConfig;
use gpudash::telemetry::simulator::Simulator;
use reqwest::StatusCode;
use serde_json::{Value, json};
use shared::processes::SignalAnswer;

use crate::support::{TestServer, eventually};

pub const OWN_OPERATOR: &str = "own-operator-token-0123456789";
pub const OTHER_OPERATOR: &str = "other-operator-token-0123456789";
pub const VIEWER: &str = "signal-viewer-token-0123456789";
pub const ADMIN: &str = "signal-admin-token-0123456789";

/// Waits (5 s at most) until `pid`'s command line reads `expected`: `spawn` returns before the
/// child's exec is done, and until then /proc shows the shell's command line, or none at all.
fn exec_done(pid: u32, expected: &[u8]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default() != expected {
        assert!(std::time::Instant::now() < deadline, "PID {pid} did not exec within 5 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A child process the test owns; killed and reaped if the test ends first.
pub struct Started(pub Child);

impl Started {
    /// `sh -c script` (it may `exec` into the process the test wants: with `exec sleep 600`, this
    /// returns once it has).
    pub fn shell(script: &str) -> Self {
        let started = Self(Command::new("sh").arg("-c").arg(script).spawn().expect("spawn sh"));
        if script.ends_with("exec sleep 600") {
            exec_done(started.pid(), b"sleep\x00600\x00");
        }
        started
    }

    pub fn sleep() -> Self {
        let started = Self(Command::new("sleep").arg("600").spawn().expect("spawn sleep"));
        exec_done(started.pid(), b"sleep\x00600\x00");
        started
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// How it ended, failing the test unless it ends within `secs`.
    pub async fn ended(&mut self, secs: u64) -> ExitStatus {
        let child = &mut self.0;
        let what = format!("PID {} to end", child.id());
        eventually(secs, &what, || std::future::ready(child.try_wait().expect("try_wait"))).await
    }

    pub fn running(&mut self) -> bool {
        self.0.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Unix user this test runs as: the user of the processes it starts.
pub fn unix_user() -> String {
    gpudash::telemetry::procfs::ProcReader::new("/proc")
        .read(std::process::id())
        .user
        .expect("/proc shows this process")
}

/// Two simulated GPUs, `pids` listed as compute processes on GPU 0; signals on as `allow` says;
/// tokens for the test's own user (operator), 'olga' (operator), 'vera' (viewer), 'ada' (admin) when `tokens`.
pub async fn server(pids: &[u32], allow: bool, tokens: bool) -> TestServer {
    let source =
        pids.iter().fold(Simulator::new(2, 200), |sim, pid| sim.with_fault(format!("pid:0:{pid}").parse().unwrap()));
    let auth = if tokens {
        let user = unix_user();
        let list = format!(
            "{user}:operator:{OWN_OPERATOR},olga:operator:{OTHER_OPERATOR},vera:viewer:{VIEWER},ada:admin:{ADMIN}"
        );
        AuthConfig::load(None, Some(&list)).unwrap()
    } else {
        AuthConfig::default()
    };
    let options = gpudash::Options { auth, allow_signals: allow, ..gpudash::Options::new(Duration::from_millis(200)) };
    TestServer::with_options(Box::new(source), options).await
}

/// `POST /api/processes/{pid}/signal` with `{"signal": signal}`, as `token` (the local admin without one).
pub async fn signal(server: &TestServer, pid: &str, signal: &str, token: Option<&str>) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new()
        .post(server.url(&format!("/api/processes/{pid}/signal")))
        .json(&json!({ "signal": signal }));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.json().await.unwrap_or(Value::Null))
}

async fn processes(server: &TestServer, token: Option<&str>) -> Value {
    let mut request = reqwest::Client::new().get(server.url("/api/processes"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().json().await.unwrap()
}

/// Waits until GPU 0 lists `pid` as `name` (a shell that has exec'd shows its new name).
pub async fn listed(server: &TestServer, pid: u32, name: &str, token: Option<&str>) -> Value {
    eventually(15, &format!("PID {pid} listed as {name}"), || async {
        let all = processes(server, token).await;
        all["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == pid && p["name"] == name && p["device"] == 0)
            .cloned()
    })
    .await
}

async fn unlisted(server: &TestServer, pid: u32) {
    eventually(15, &format!("PID {pid} gone from the list"), || async {
        let all = processes(server, None).await;
        all["processes"].as_array().unwrap().iter().all(|p| p["pid"] != pid).then_some(())
    })
    .await;
}

/// The audit log's `process.signal` entries, newest first.
async fn audit(server: &TestServer, token: Option<&str>) -> Vec<Value> {
    let mut request = reqwest::Client::new().get(server.url("/api/audit?action=process.signal"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let log: Value = request.send().await.unwrap().json().await.unwrap();
    log.as_array().unwrap().clone()
}

fn error(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn without_the_flag_signals_are_refused_naming_it_and_audited() {
    let mut child = Started::sleep();
    let server = server(&[child.pid()], false, false).await;
    listed(&server, child.pid(), "sleep", None).await;
    let me: Value = reqwest::get(server.url("/api/me")).await.unwrap().json().await.unwrap();
    assert_eq!(me["signals"], false, "the page learns that signals are off");
    let (status, body) = signal(&server, &child.pid().to_string(), "SIGKILL", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(error(&body).contains("--allow-signals"), "{body}");
    assert!(child.running(), "nothing was sent");
    let log = audit(&server, None).await;
    assert_eq!(log.len(), 1, "{log:?}");
    // Without tokens the caller is the one local user, by name.
    let me = Some(gpudash::auth::local_user_name());
    assert_eq!((log[0]["outcome"].as_str(), log[0]["user"].as_str()), (Some("denied"), me), "{log:?}");
    server.stop().await;
}

#[tokio::test]
async fn sigterm_ends_a_real_gpu_process_and_says_so() {
    let mut child = Started::sleep();
    let pid = child.pid();
    let server = server(&[pid], true, false).await;
    let me: Value = reqwest::get(server.url("/api/me")).await.unwrap().json().await.unwrap();
    assert_eq!(me["signals"], true);
    listed(&server, pid, "sleep", None).await;
    let (status, body) = signal(&server, &pid.to_string(), "SIGTERM", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: SignalAnswer = serde_json::from_value(body).unwrap();
    assert_eq!((answer.pid, answer.sent, answer.exited), (pid, true, true));
    assert_eq!(child.ended(10).await.signal(), Some(15), "it died of SIGTERM");
    let log = audit(&server, None).await;
    assert_eq!(log[0]["outcome"], "ok", "{log:?}");
    assert_eq!(log[0]["target"], format!("PID {pid} ({}: sleep 600)", unix_user()));
    assert_eq!(log[0]["detail"], "SIGTERM sent; exited");
    unlisted(&server, pid).await;
    let (status, body) = signal(&server, &pid.to_string(), "SIGTERM", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(error(&body).contains("not a GPU process"), "{body}");
    server.stop().await;
}

#[tokio::test]
async fn sigkill_ends_a_process_that_ignores_sigterm() {
    // An ignored signal stays ignored across exec: this `sleep` shrugs off SIGTERM.
    let mut child = Started::shell("trap '' TERM; exec sleep 600");
    let pid = child.pid();
    let server = server(&[pid], true, false).await;
    listed(&server, pid, "sleep", None).await;
    let (status, body) = signal(&server, &pid.to_string(), "SIGTERM", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((body["sent"].as_bool(), body["exited"].as_bool()), (Some(true), Some(false)), "still running");
    assert!(child.running());
    let (status, body) = signal(&server, &pid.to_string(), "SIGKILL", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["exited"], true, "{body}");
    assert_eq!(child.ended(10).await.signal(), Some(9), "it died of SIGKILL");
    let details: Vec<_> = audit(&server, None).await.iter().map(|e| e["detail"].as_str().unwrap().to_owned()).collect();
    assert_eq!(details, ["SIGKILL sent; exited", "SIGTERM sent; still running"]);
    server.stop().await;
}

#[tokio::test]
async fn only_listed_gpu_processes_and_never_init_or_gpudash_itself() {
    let mut listed_child = Started::sleep();
    let mut other = Started::sleep();
    let server = server(&[listed_child.pid()], true, false).await;
    listed(&server, listed_child.pid(), "sleep", None).await;
    let (status, body) = signal(&server, &other.pid().to_string(), "SIGKILL", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(error(&body).contains(&format!("PID {} is not a GPU process", other.pid())), "{body}");
    let (status, body) = signal(&server, "1", "SIGKILL", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(error(&body).contains("init"), "{body}");
    let (status, body) = signal(&server, &std::process::id().to_string(), "SIGTERM", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(error(&body).contains("gpudash itself"), "{body}");
    assert!(other.running() && listed_child.running(), "nothing was sent");
    let log = audit(&server, None).await;
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(log.iter().all(|e| e["outcome"] == "denied"), "{log:?}");
    server.stop().await;
}

#[tokio::test]
async fn operators_signal_their_own_processes_only_and_viewers_none() {
    let mut child = Started::sleep();
    let pid = child.pid();
    let user = unix_user();
    let server = server(&[pid], true, true).await;
    listed(&server, pid, "sleep", Some(ADMIN)).await;
    let (status, body) = signal(&server, &pid.to_string(), "SIGTERM", Some(VIEWER)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(error(&body).contains("operator role"), "{body}");
    let (status, body) = signal(&server, &pid.to_string(), "SIGTERM", Some(OTHER_OPERATOR)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(error(&body).contains(&format!("PID {pid} belongs to '{user}', not 'olga'")), "{body}");
    assert!(child.running(), "refused: nothing sent");
    let (status, body) = signal(&server, &pid.to_string(), "SIGTERM", Some(OWN_OPERATOR)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(child.ended(10).await.signal(), Some(15));
    let log = audit(&server, Some(ADMIN)).await;
    let who: Vec<_> = log.iter().map(|e| (e["user"].as_str().unwrap(), e["outcome"].as_str().unwrap())).collect();
    assert_eq!(who, [(user.as_str(), "ok"), ("olga", "denied"), ("vera", "denied")]);
    server.stop().await;
}
