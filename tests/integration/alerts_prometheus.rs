//! `gpudash alerts export-prometheus` through Debian's promtool: the exported rules pass
//! `promtool check rules`, and `promtool test rules` (tests/prometheus/alerts_test.yml) shows
//! each rule firing on series written for it, and not firing where gpudash would not.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpudash::cli::alerts::{ExportArgs, export_prometheus};

fn promtool() -> String {
    let path = std::env::var("PROMTOOL").unwrap_or_else(|_| "/usr/bin/promtool".to_owned());
    assert!(
        Path::new(&path).exists(),
        "the Prometheus rules test needs promtool (Debian package `prometheus`; `bash tests/run.sh` installs it)"
    );
    path
}

/// Runs promtool with `args`; its exit status and everything it printed.
fn run_promtool(args: &[&Path]) -> (bool, String) {
    let out = Command::new(promtool()).args(args).output().expect("run promtool");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Exports the rules of `alerts_file` (the built-in ones without) beside a copy of the rule tests.
fn export(dir: &Path, alerts_file: Option<PathBuf>) -> (PathBuf, PathBuf) {
    let rules = dir.join("gpudash.rules.yml");
    export_prometheus(&ExportArgs { alerts_file, output: Some(rules.clone()) }).expect("export");
    let tests = dir.join("alerts_test.yml");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/prometheus/alerts_test.yml"), &tests).expect("copy tests");
    (rules, tests)
}

#[test]
fn exported_rules_pass_promtool_check_and_the_rule_tests() {
    let dir = tempfile::tempdir().unwrap();
    let (rules, tests) = export(dir.path(), None);
    let (ok, said) = run_promtool(&[Path::new("check"), Path::new("rules"), &rules]);
    assert!(ok && said.contains("SUCCESS: 9 rules found"), "promtool check rules:\n{said}");
    let (ok, said) = run_promtool(&[Path::new("test"), Path::new("rules"), &tests]);
    assert!(ok, "promtool test rules:\n{said}");
}

#[test]
fn thresholds_from_the_alerts_file_reach_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alerts.toml");
    let text = "[rules.temperature]\ncelsius = 90\n[rules.gpu_free]\nenabled = false\n[rules.xid]\nignore = [79]\n";
    std::fs::write(&file, text).unwrap();
    let (rules, tests) = export(dir.path(), Some(file));
    let (ok, said) = run_promtool(&[Path::new("check"), Path::new("rules"), &rules]);
    assert!(ok && said.contains("SUCCESS: 8 rules found"), "promtool check rules:\n{said}");
    // The rule tests hold the built-in thresholds: at 90 °C, with XID 79 ignored, those cases fail.
    let (ok, said) = run_promtool(&[Path::new("test"), Path::new("rules"), &tests]);
    assert!(!ok, "the rule tests passed with other thresholds:\n{said}");
    assert!(said.contains("alertname: GpudashTemperature, time: 1m30s"), "{said}");
    assert!(said.contains("alertname: GpudashXid, time: 1m"), "{said}");
    assert!(!said.contains("alertname: GpudashMemoryFull"), "memory kept its thresholds:\n{said}");
}

#[test]
fn the_alerts_file_in_the_docs_is_valid_and_shows_the_defaults() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ALERTS.md")).unwrap();
    let block = docs.split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("a toml block");
    let config = gpudash::alerts::AlertsConfig::parse(block, "docs/ALERTS.md").unwrap();
    assert_eq!(config.rules, gpudash::alerts::Rules::default(), "the documented thresholds are the built-in ones");
    assert_eq!(config.webhooks.len(), 1);
    assert_eq!(config.webhooks[0].format, gpudash::alerts::WebhookFormat::Slack);
}
