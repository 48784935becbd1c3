//! The recording rules shipped in deploy/prometheus/gpudash-rules.yml: `promtool check rules`
//! takes them, and `promtool test rules` runs their unit tests (a host scraped twice counted once,
//! a counter reset, idle memory per owner). The same tests with one expectation changed must fail,
//! so the check is not one that always passes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus")
}

/// Runs promtool with `args` in `dir`: (success, its output).
fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(crate::metrics::promtool()).args(args).current_dir(dir).output().expect("run promtool");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn the_shipped_recording_rules_pass_their_promtool_tests_and_a_wrong_expectation_fails() {
    let dir = deploy_dir();
    let (ok, text) = promtool(&dir, &["check", "rules", "gpudash-rules.yml"]);
    assert!(ok && text.contains("SUCCESS: 5 rules found"), "{text}");
    let (ok, text) = promtool(&dir, &["test", "rules", "gpudash-rules.test.yml"]);
    assert!(ok && text.contains("SUCCESS"), "{text}");

    // A copy whose expectation says a host scraped twice counts twice: promtool must refuse it.
    let scratch = tempfile::tempdir().unwrap();
    std::fs::copy(dir.join("gpudash-rules.yml"), scratch.path().join("gpudash-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("gpudash-rules.test.yml")).unwrap();
    let wrong = tests.replacen("value: 1.5", "value: 2", 1);
    assert_ne!(wrong, tests, "the expectation to change is in the file");
    std::fs::write(scratch.path().join("gpudash-rules.test.yml"), wrong).unwrap();
    let (ok, text) = promtool(scratch.path(), &["test", "rules", "gpudash-rules.test.yml"]);
    assert!(!ok && text.contains("FAILED"), "{text}");
}
