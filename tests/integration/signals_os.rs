//! When the OS refuses a signal (EPERM), gpudash says so and nothing happens. Root may signal
//! anyone, so as root this runs the real binary without CAP_KILL (`setpriv --bounding-set -kill`)
//! against a `sleep` of user nobody; as another user it needs no such trick but a process of
//! someone else, which a test cannot start, so it says that it did not run.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::signals::Started;
use crate::support::{eventually, gpudash_binary};

/// A server process, killed when the test ends.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `gpudash` without CAP_KILL, listing `pid` on simulated GPU 0, and returns its URL.
fn start_without_cap_kill(pid: u32) -> (Server, String) {
    let mut child = Command::new("setpriv")
        .args(["--bounding-set", "-kill", "--"])
        .arg(gpudash_binary())
        .args(["--simulate", "1", "--interval", "200ms", "--no-history", "--allow-signals", "--listen", "127.0.0.1:0"])
        .args(["--simulate-fault", &format!("pid:0:{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux) runs gpudash");
    let stderr = child.stderr.take().expect("piped");
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("serving on ").nth(1) {
                let _ = tx.send(url.trim().to_owned());
            }
        }
    });
    let url = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("gpudash says where it serves within 30 s");
    (server, url)
}

#[tokio::test]
#[allow(clippy::print_stderr, reason = "a test that cannot run here says so")]
async fn the_os_refusing_a_signal_is_said_clearly_and_changes_nothing() {
    // /proc/self belongs to the process's effective user.
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) != 0 {
        eprintln!("not run: as a user other than root no test-started process belongs to someone else");
        return;
    }
    let mut nobody = Started(Command::new("sleep").arg("600").uid(65534).gid(65534).spawn().expect("sleep as nobody"));
    let pid = nobody.pid();
    let (_server, url) = start_without_cap_kill(pid);
    let client = reqwest::Client::new();
    eventually(15, &format!("PID {pid} listed"), || async {
        let all: Value = client.get(format!("{url}/api/processes")).send().await.ok()?.json().await.ok()?;
        all["processes"].as_array()?.iter().any(|p| p["pid"] == pid).then_some(())
    })
    .await;
    let response = client
        .post(format!("{url}/api/processes/{pid}/signal"))
        .json(&json!({ "signal": "SIGKILL" }))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("the OS refused") && error.contains("'nobody'"), "{body}");
    assert!(nobody.running(), "the process lives on");
    let log: Value =
        client.get(format!("{url}/api/audit?action=process.signal")).send().await.unwrap().json().await.unwrap();
    assert_eq!(log[0]["outcome"], "denied", "{log}");
    assert!(log[0]["detail"].as_str().is_some_and(|d| d.contains("the OS refused")), "{log}");
}

/// SIGHUP (what `systemctl reload` sends) never ends the server, with or without an alerts file.
#[tokio::test]
async fn sighup_without_an_alerts_file_keeps_the_server_running() {
    let mut child = Command::new(gpudash_binary())
        .args(["--simulate", "1", "--interval", "200ms", "--no-history", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpudash starts");
    let stderr = child.stderr.take().expect("piped");
    let pid = child.id();
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let url = loop {
        let line = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("gpudash says where it serves");
        if let Some(url) = line.split("serving on ").nth(1) {
            break url.trim().to_owned();
        }
    };
    assert!(Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap().success());
    let said = loop {
        let line = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("gpudash logs the SIGHUP");
        if line.contains("SIGHUP") {
            break line;
        }
    };
    assert!(said.contains("nothing to re-read"), "{said}");
    let health = reqwest::get(format!("{url}/healthz")).await.expect("still serving after SIGHUP");
    assert!(health.status().is_success());
    drop(server);
}
