//! `gpudash doctor` as a user runs it: the built binary, its words, its JSON and its exit code.

use std::net::TcpListener;
use std::process::Command;

use serde_json::Value;

use crate::support::gpudash_binary;

/// Runs `gpudash doctor ARGS` with no GPUDASH_* setting of this environment: its exit code and output.
fn doctor(args: &[&str]) -> (i32, String) {
    let mut command = Command::new(gpudash_binary());
    command.arg("doctor").args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GPUDASH_") {
            command.env_remove(name);
        }
    }
    let out = command.output().expect("gpudash runs");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    (out.status.code().expect("an exit code, not a signal"), stdout)
}

/// `doctor --json …`: the exit code and the report, checked for its shape.
fn doctor_json(args: &[&str]) -> (i32, Value) {
    let (code, stdout) = doctor(&[&["--json"], args].concat());
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    assert_eq!(report["ok"], code == 0, "ok says what the exit code says: {report}");
    for check in report["checks"].as_array().expect("a list of checks") {
        for key in ["name", "status", "summary", "detail", "fix"] {
            assert!(check.get(key).is_some(), "{key} missing: {check}");
        }
        assert!(matches!(check["status"].as_str(), Some("ok" | "warn" | "fail" | "skip")), "{check}");
    }
    (code, report)
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {name} check"))
}

/// The last line's "N blockers, M warnings", as numbers.
fn counts(text: &str) -> (usize, usize) {
    let last = text.trim_end().lines().last().unwrap_or_default();
    let numbers: Vec<usize> = last.split(", ").filter_map(|part| part.split(' ').next()?.parse().ok()).collect();
    assert!(numbers.len() == 2 && last.contains(" blocker") && last.contains(" warning"), "last line: {last}");
    (numbers[0], numbers[1])
}

/// A port nothing listens on (a moment ago).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn doctor_without_a_driver_fails_and_says_how_to_get_one() {
    let data = tempfile::tempdir().unwrap();
    let args = ["--listen", "127.0.0.1:0", "--data-dir", data.path().to_str().unwrap()];
    let (code, text) = doctor(&args);
    let (json_code, report) = doctor_json(&args);
    assert_eq!(code, json_code);
    let driver = check(&report, "driver");
    if std::path::Path::new("/proc/driver/nvidia").exists() {
        // On a GPU machine the same check lists the GPUs instead.
        assert_eq!(driver["status"], "ok", "{driver}");
        assert!(driver["summary"].as_str().unwrap().contains("NVIDIA driver"), "{driver}");
        return;
    }
    assert_eq!(code, 1, "no driver is a blocker:\n{text}");
    assert_eq!(driver["status"], "fail", "{driver}");
    let fix = driver["fix"].as_str().unwrap();
    assert!(fix.contains("nvidia-smi") && fix.contains("--gpus all") && fix.contains("CDI"), "{fix}");
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("✖ driver") && first.contains("no NVIDIA driver"), "{text}");
    assert!(text.contains("fix: install the NVIDIA driver"), "{text}");
    assert!(counts(&text).0 >= 1, "{text}");
    assert_eq!(check(&report, "gpm")["status"], "skip");
}

#[test]
fn doctor_with_simulated_gpus_a_free_port_and_a_data_dir_passes() {
    let data = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let args = ["--simulate", "2", "--listen", &listen, "--data-dir", data.path().to_str().unwrap()];
    let (code, report) = doctor_json(&args);
    assert_eq!(code, 0, "{report:#}");
    for c in report["checks"].as_array().unwrap() {
        assert_ne!(c["status"], "fail", "{c}");
    }
    assert!(check(&report, "driver")["summary"].as_str().unwrap().starts_with("2 simulated GPUs"), "{report:#}");
    assert_eq!(check(&report, "data-dir")["status"], "ok");
    assert_eq!(check(&report, "listen")["status"], "ok");
    assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 0, "the doctor leaves the data directory as it was");
    let (code, text) = doctor(&args);
    assert_eq!(code, 0, "{text}");
    assert_eq!(counts(&text).0, 0, "{text}");
}

#[test]
fn doctor_names_the_missing_tokens_beyond_loopback() {
    let data = tempfile::tempdir().unwrap();
    let listen = format!("0.0.0.0:{}", free_port());
    let args = ["--simulate", "2", "--listen", &listen, "--data-dir", data.path().to_str().unwrap()];
    let (code, text) = doctor(&args);
    assert_eq!(code, 1, "{text}");
    let line =
        text.lines().find(|l| l.starts_with("✖ tokens")).unwrap_or_else(|| panic!("no failed tokens line:\n{text}"));
    assert!(line.contains(&format!("listens on {listen}")) && line.contains("refuses to start"), "{line}");
    assert!(text.contains("gpudash token --user NAME --role ROLE"), "{text}");
    let (_, report) = doctor_json(&args);
    let failed: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["tokens"], "{report:#}");
}

#[test]
fn doctor_names_a_port_in_use() {
    let data = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let args = ["--simulate", "2", "--listen", &listen, "--data-dir", data.path().to_str().unwrap()];
    let (code, text) = doctor(&args);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("✖ listen") && text.contains(&format!("port {port} is in use by another process")), "{text}");
    assert!(text.contains("--listen 127.0.0.1:PORT"), "the fix names the flag: {text}");
    drop(taken);
    let (code, report) = doctor_json(&args);
    assert_eq!((code, &check(&report, "listen")["status"]), (0, &Value::from("ok")), "free again: {report:#}");
}
