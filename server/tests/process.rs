//! The `gpudash` binary as an operator runs it: exit codes, messages, and
//! history that survives `kill -9`.

// Test code: a failed unwrap is a failed test; children are killed and waited for by each test.
#![allow(clippy::unwrap_used, clippy::zombie_processes)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base::clock::Deadline;

const BIN: &str = env!("CARGO_BIN_EXE_gpudash");

/// Starts gpudash and returns it with the `http://IP:PORT` it logged.
fn spawn(args: &[&str]) -> (Child, String) {
    spawn_logged(args, "http://")
}

/// Starts gpudash and returns it with the address it logged after `scheme`.
fn spawn_logged(args: &[&str], scheme: &str) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("GPUDASH_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpudash");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Deadline::after(Duration::from_secs(20));
    while !deadline.passed() {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(at) = line.find(scheme) {
            let url = line[at..].split_whitespace().next().unwrap_or_default().to_owned();
            // Keep draining stderr so the child never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return (child, url);
        }
    }
    let _ = child.kill();
    panic!("gpudash did not log its address");
}

/// Polls `check` every 100 ms until it returns `Some`, failing with `what` after `secs`.
fn eventually<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Deadline::after(Duration::from_secs(secs));
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(!deadline.passed(), "timed out after {secs} s waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn get(url: &str) -> String {
    // A blocking HTTP GET without extra dependencies: curl is everywhere this test runs.
    let out = Command::new("curl").args(["-sf", url]).output().expect("curl");
    assert!(out.status.success(), "GET {url} failed");
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn bad_flags_exit_2_with_what_is_allowed() {
    for (args, expected) in [
        (&["--listen", "nowhere"][..], "use IP:PORT"),
        (&["--listen", "127.0.0.1:99999"][..], "use IP:PORT"),
        (&["--listen", ""][..], "use IP:PORT"),
        (&["--interval", "10ms"][..], "between 100ms and 60s"),
        (&["--interval", "fortnight"][..], "not a duration"),
        (&["--interval=-1s"][..], "not a duration"),
        (&["--simulate", "1000"][..], "from 1 to 64"),
        (&["--simulate", "two"][..], "from 1 to 64"),
        (&["--history-raw", "1s"][..], "from 10m to 10 years"),
        (&["--history-rollup", "100y"][..], "from 10m to 10 years"),
        (&["--no-history", "--data-dir", "/tmp"][..], "cannot be used with"),
        (&["--simulate", "2", "--simulate-fault", "melt:1@1s"][..], "lost:INDEX@DELAY"),
        (&["--lab-time-limit", "soon"][..], "lab-time-limit"),
        (&["--lab-runs-kept", "3"][..], "use a whole number from 10 to 1000000"),
        (&["--lab-runs-kept", "many"][..], "not a number of runs to keep"),
        (&["--lab-user=-x"][..], "'-x' is not a user name; use 1 to 32 letters, digits"),
        (&["--lab-user", "root;id"][..], "'root;id' is not a user name"),
        (&["--lab-user", ""][..], "is not a user name"),
        (&["--fleet-prometheus-ca", "/etc/ssl/ca.pem"][..], "--fleet-prometheus <URL>"),
        (&["--fleet-prometheus", "gopher://prom:70"][..], "use http://HOST:PORT or https://"),
        (&["--job-verdict-after", "0s"][..], "between 1s and 7d"),
        (&["--job-verdict-after", "later"][..], "5m, 1h or 30s"),
        (&["--energy-price", "cheap"][..], "is not a price per kWh"),
        (&["--energy-price", "0.30 euro"][..], "is not a currency code"),
        (&["--energy-price=-1"][..], "above 0 and at most 100"),
        (&["--carbon-intensity", "5000"][..], "0 to 2000"),
        (&["--bogus"][..], "unexpected argument"),
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn bad_auth_configuration_stops_startup_saying_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let bad_toml = dir.path().join("bad.toml");
    std::fs::write(&bad_toml, "[[token]\nuser = 1").unwrap();
    let bad_role = dir.path().join("role.toml");
    std::fs::write(&bad_role, "[[token]]\nuser = \"a\"\nrole = \"root\"\nsha256 = \"00\"\n").unwrap();
    for (file, env, expected) in [
        (Some("/nonexistent/auth.toml"), None, "cannot read auth file '/nonexistent/auth.toml'"),
        (Some(bad_toml.to_str().unwrap()), None, "bad.toml"),
        (Some(bad_role.to_str().unwrap()), None, "roles are viewer, operator, admin"),
        (None, Some("ana:admin:short"), "shorter than 16"),
        (None, Some("just-a-token"), "user:role:token"),
    ] {
        let mut command = Command::new(BIN);
        command.args(["--simulate", "1", "--no-history", "--listen", "127.0.0.1:0"]);
        if let Some(file) = file {
            command.args(["--auth-file", file]);
        }
        match env {
            Some(env) => command.env("GPUDASH_TOKENS", env),
            None => command.env_remove("GPUDASH_TOKENS"),
        };
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{file:?} {env:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{file:?} {env:?}: {stderr}");
    }
}

/// As root the Lab's worker process runs as `--lab-user`: a user the host does not know stops the start.
#[test]
#[allow(clippy::print_stderr)]
fn an_unknown_lab_user_stops_startup_as_root() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1));
    if euid != Some("0") {
        eprintln!("skipped: --lab-user is looked up only when gpudash runs as root (this test is not root)");
        return;
    }
    let out = Command::new(BIN)
        .args(["--simulate", "1", "--no-history", "--listen", "127.0.0.1:0", "--lab-user", "no-such-user-gpudash"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--lab-user 'no-such-user-gpudash' is no user on this host"), "{stderr}");
}

#[test]
fn an_unusable_fleet_ca_stops_startup_saying_why() {
    let out = Command::new(BIN)
        .args(["--simulate", "1", "--no-history", "--listen", "127.0.0.1:0"])
        .args(["--fleet-prometheus", "https://prom:9090", "--fleet-prometheus-ca", "/nonexistent/ca.pem"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot use '/nonexistent/ca.pem' as --fleet-prometheus-ca"), "{stderr}");
}

#[test]
fn environment_values_are_checked_like_flags() {
    let out = Command::new(BIN).env("GPUDASH_INTERVAL", "0s").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("between 100ms and 60s"));
}

#[test]
fn an_unusable_data_dir_stops_startup_with_a_clear_message() {
    let out = Command::new(BIN)
        .args(["--simulate", "1", "--listen", "127.0.0.1:0", "--data-dir", "/proc/gpudash"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot use data directory '/proc/gpudash'") && stderr.contains("--no-history"),
        "{stderr}"
    );
}

#[test]
fn history_survives_kill_9_up_to_two_seconds_before() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let args = ["--simulate", "2", "--interval", "100ms", "--listen", "127.0.0.1:0", "--data-dir", data];
    let (mut child, url) = spawn(&args);
    eventually(20, "25 samples of GPU 0 on disk", || {
        let history = get(&format!("{url}/api/history?device=0&metric=memory_used&points=10000"));
        let history: serde_json::Value = serde_json::from_str(&history).ok()?;
        (history["points"].as_array()?.len() >= 25).then_some(())
    });
    let devices: serde_json::Value = serde_json::from_str(&get(&format!("{url}/api/devices"))).unwrap();
    let last_seen = devices["devices"][0]["latest"]["timestamp_ms"].as_u64().unwrap();
    // Not a wait: samples keep coming for 300 ms after `last_seen`, then the kill lands mid-batch.
    std::thread::sleep(Duration::from_millis(300));
    // SIGKILL: no shutdown code runs.
    child.kill().unwrap();
    child.wait().unwrap();

    let (mut child, url) = spawn(&args);
    let history: serde_json::Value = serde_json::from_str(&get(&format!(
        "{url}/api/history?device=0&metric=memory_used&from={}&to={}&points=10000",
        last_seen - 10_000,
        last_seen + 5_000
    )))
    .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let points = history["points"].as_array().unwrap();
    let newest = points.iter().filter_map(|p| p["t"].as_u64()).filter(|&t| t <= last_seen + 300).max().unwrap();
    assert!(points.len() >= 20, "{} points before the kill", points.len());
    // `last_seen` was read 300 ms before the kill: everything up to it minus ~2 s must be on disk.
    assert!(newest + 2_000 >= last_seen, "newest stored {newest}, last seen {last_seen}");
}

#[test]
fn a_lan_address_without_tokens_is_refused_unless_anonymous_is_allowed() {
    let out = Command::new(BIN)
        .args(["--simulate", "1", "--no-history", "--listen", "0.0.0.0:0"])
        .env_remove("GPUDASH_TOKENS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without authentication") && stderr.contains("gpudash token"), "{stderr}");

    let (mut child, _) = spawn(&["--simulate", "1", "--no-history", "--listen", "0.0.0.0:0", "--allow-anonymous"]);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn an_auth_proxy_needs_a_trusted_proxy_and_then_serves_the_lan_without_tokens() {
    let proxied =
        ["--simulate", "1", "--no-history", "--listen", "0.0.0.0:0", "--auth-proxy-header", "X-Forwarded-User"];
    let out = Command::new(BIN).args(proxied).env_remove("GPUDASH_TOKENS").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--auth-proxy-header needs --trusted-proxy"), "{stderr}");

    let loopback: Vec<&str> = proxied.iter().copied().chain(["--trusted-proxy", "127.0.0.1"]).collect();
    let out = Command::new(BIN).args(&loopback).env_remove("GPUDASH_TOKENS").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "a loopback auth proxy needs its user named");
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --trusted-proxy-user"));
    let me = uzers::get_current_uid().to_string();
    let trusted: Vec<&str> = loopback.iter().copied().chain(["--trusted-proxy-user", me.as_str()]).collect();
    let (mut child, _) = spawn(&trusted);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_bad_web_config_file_stops_start_up_with_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, "basic_auth_users:\n  prometheus: s3cret\n").unwrap();
    let out = Command::new(BIN)
        .args(["--simulate", "1", "--no-history", "--listen", "127.0.0.1:0", "--web-config-file"])
        .arg(&web)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a bcrypt hash") && stderr.contains("htpasswd -nBC 10 prometheus"), "{stderr}");
}

#[test]
fn token_prints_a_usable_auth_file_entry() {
    let out = Command::new(BIN).args(["token", "--user", "ana", "--role", "operator"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let token = text.lines().next().unwrap().rsplit(' ').next().unwrap();
    assert_eq!(token.len(), 64);
    assert!(text.contains("user = \"ana\"") && text.contains("role = \"operator\""), "{text}");
    let bad = Command::new(BIN).args(["token", "--role", "god"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn sigterm_drains_and_exits_zero_with_history_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let (child, url) =
        spawn(&["--simulate", "1", "--interval", "100ms", "--listen", "127.0.0.1:0", "--data-dir", data]);
    // A second of samples: some written in batches already, the newest still pending at the signal.
    let first = eventually(10, "a first sample", || {
        let devices: serde_json::Value = serde_json::from_str(&get(&format!("{url}/api/devices"))).ok()?;
        devices["devices"][0]["latest"]["timestamp_ms"].as_u64()
    });
    let last_seen = eventually(10, "a second of samples", || {
        let devices: serde_json::Value = serde_json::from_str(&get(&format!("{url}/api/devices"))).ok()?;
        devices["devices"][0]["latest"]["timestamp_ms"].as_u64().filter(|&t| t >= first + 1_000)
    });
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let mut child = child;
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(0), "SIGTERM must drain and exit 0");
    // Everything sampled before the signal is on disk: nothing pending was dropped.
    let db = rusqlite_count(&dir.path().join("history-simulated.db"), last_seen);
    assert!(db > 0, "no history up to {last_seen}");
}

/// Samples of GPU 0 at or after `since` in the database file.
fn rusqlite_count(path: &std::path::Path, since: u64) -> i64 {
    let conn = rusqlite::Connection::open(path).expect("history database");
    conn.query_row("SELECT count(*) FROM samples WHERE device = 0 AND ts >= ?1", [since as i64], |r| r.get(0))
        .expect("count samples")
}

#[test]
fn tls_serves_https_and_refuses_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    let args = [
        "--simulate",
        "1",
        "--no-history",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let (mut child, url) = spawn_logged(&args, "https://");
    let port = url.rsplit(':').next().unwrap().to_owned();
    let https = format!("https://localhost:{port}");
    let out = Command::new("curl")
        .args(["-sf", "--cacert", cert.to_str().unwrap(), "--resolve", &format!("localhost:{port}:127.0.0.1")])
        .arg(format!("{https}/healthz"))
        .output()
        .unwrap();
    assert!(out.status.success(), "HTTPS request failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"ok\""));
    let plain = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://127.0.0.1:{port}/healthz"))
        .output()
        .unwrap();
    assert_ne!(String::from_utf8_lossy(&plain.stdout), "200", "plain HTTP must not be served on the TLS port");
    child.kill().unwrap();
    child.wait().unwrap();

    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "junk").unwrap();
    let out = Command::new(BIN)
        .args(["--simulate", "1", "--no-history", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&junk)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("junk.pem"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Linux keeps 15 bytes of a thread's name (`comm`); std cuts a longer one silently, and tools that
/// read threads by name (tests/gpu/sampler_cost.py, top -H) then miss it. Every name in the source
/// fits, and the running server's threads carry them whole.
#[test]
fn every_thread_name_fits_in_comm_and_the_threads_carry_them() {
    // The server's crates: this one and those it is built from (the sampler is telemetry's, the
    // recorder the store's).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for src in ["server/src", "web/src", "team/src", "base/src", "store/src", "telemetry/src", "lab/src"] {
        common::rust_files(&root.join(src), &mut files);
    }
    let mut names = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let named = text.split(".name(\"").skip(1);
        for part in named.chain(text.split("DbWriter::start(\"").skip(1)) {
            let name = part.split('"').next().unwrap_or_default();
            if name.starts_with("gpudash") {
                names.push((name.to_owned(), file.display().to_string()));
            }
        }
    }
    assert!(names.len() >= 5, "thread names not found in the source: fix the test ({names:?})");
    let long: Vec<_> = names.iter().filter(|(name, _)| name.len() > 15).collect();
    assert!(long.is_empty(), "thread names over 15 bytes, cut in /proc/*/comm: {long:?}");

    let dir = tempfile::tempdir().unwrap();
    let args = ["--simulate", "1", "--listen", "127.0.0.1:0", "--data-dir", dir.path().to_str().unwrap()];
    let (mut child, _url) = spawn(&args);
    let pid = child.id();
    let running = eventually(20, "the sampler's and recorder's threads", || {
        let comms: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .map(|comm| comm.trim().to_owned())
            .collect();
        ["gpudash-sampler", "gpudash-record"].iter().all(|n| comms.iter().any(|c| c == n)).then_some(comms)
    });
    child.kill().unwrap();
    child.wait().unwrap();
    for comm in running.iter().filter(|c| c.starts_with("gpudash-")) {
        assert!(names.iter().any(|(name, _)| name == comm), "thread {comm} is not a name of the source: {running:?}");
    }
}
