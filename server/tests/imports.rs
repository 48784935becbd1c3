//! The import rules of `docs/ARCHITECTURE.md` that cargo cannot see (one crate, many folders),
//! checked over the source text: a line that names what its folder may not fails the test with
//! its file and line. Comments are skipped; a `use crate::{…}` group counts as naming each part.
//!
//! Every rule is one line of `RULES`.

use std::path::{Path, PathBuf};

/// One rule: files under `scope` (relative to the crate root; `shared/src` is `../shared/src`),
/// except those under `allowed`, must not name `forbidden`.
struct Rule {
    scope: &'static str,
    allowed: &'static [&'static str],
    forbidden: &'static str,
    why: &'static str,
}

const fn rule(
    scope: &'static str,
    allowed: &'static [&'static str],
    forbidden: &'static str,
    why: &'static str,
) -> Rule {
    Rule { scope, allowed, forbidden, why }
}

const IO_IN_SHARED: &str = "shared does no I/O (rules both sides of the wire call)";

const RULES: &[Rule] = &[
    rule("src/telemetry", &[], "axum", "telemetry publishes typed values; web encodes"),
    rule("src/telemetry", &[], "crate::web", "telemetry knows no HTTP"),
    rule("src", &["src/web", "src/lib.rs"], "axum", "only web speaks HTTP"),
    rule("src/store", &[], "crate::lab", "storage knows no lab"),
    rule("src/store", &[], "crate::web", "storage knows no web"),
    rule("src/store", &[], "crate::telemetry", "storage knows no telemetry"),
    rule("src", &["src/telemetry"], "nvml_wrapper", "only telemetry holds the NVML handle"),
    rule("src", &["src/lab/cuda"], "cudarc", "only lab/cuda calls CUDA"),
    rule("src/alerts", &[], "crate::web", "alerts know no HTTP (text formats are crate::prom_text)"),
    rule("src/prom_text.rs", &[], "crate::", "the Prometheus text writer depends on nothing in the crate"),
    rule("../shared/src", &[], "std::fs", IO_IN_SHARED),
    rule("../shared/src", &[], "std::net", IO_IN_SHARED),
    rule("../shared/src", &[], "std::process", IO_IN_SHARED),
    rule("../shared/src", &[], "std::env", IO_IN_SHARED),
    rule("../shared/src", &[], "std::thread", IO_IN_SHARED),
    rule("../shared/src", &[], "tokio", IO_IN_SHARED),
    rule("../shared/src", &[], "rusqlite", IO_IN_SHARED),
    rule("../shared/src", &[], "reqwest", IO_IN_SHARED),
    rule("../shared/src", &[], "web_sys", IO_IN_SHARED),
];

/// The lab rule, apart: the lab is being cut loose from telemetry (issue 33, item 2).
const LAB_RULES: &[Rule] = &[
    rule("src/lab", &[], "crate::telemetry", "lab gets plain inputs from a wiring module"),
    rule("src/lab", &[], "crate::web", "lab knows no HTTP"),
    rule("src/export", &[], "crate::lab", "the SVG and CSV writers take plain values"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    if dir.is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `line` names `forbidden` as a path: `forbidden` itself (followed by `::`, `;`, `,`,
/// `}` or a space), or, for `crate::x`, `x` inside a `crate::{…}` group.
fn names(line: &str, forbidden: &str) -> bool {
    let code = line.split("//").next().unwrap_or_default();
    let bounded = |at: usize, len: usize| {
        let before = code[..at].chars().next_back();
        let after = code[at + len..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    };
    if code.match_indices(forbidden).any(|(at, _)| bounded(at, forbidden.len())) {
        return true;
    }
    if let Some(part) = forbidden.strip_prefix("crate::").filter(|p| !p.is_empty())
        && let Some(group) = code.find("crate::{")
    {
        let inside = &code[group + "crate::{".len()..];
        return inside.match_indices(part).any(|(at, _)| {
            let at = group + "crate::{".len() + at;
            bounded(at, part.len())
        });
    }
    false
}

fn violations(rules: &[Rule]) -> Vec<String> {
    let root = root();
    let mut found = Vec::new();
    for rule in rules {
        let mut files = Vec::new();
        rust_files(&root.join(rule.scope), &mut files);
        assert!(!files.is_empty(), "rule scope {} holds no Rust file: fix the rule", rule.scope);
        for file in files {
            let relative = file.strip_prefix(&root).unwrap_or(&file).to_string_lossy().into_owned();
            if rule.allowed.iter().any(|a| relative.starts_with(a)) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("cannot read {relative}: {e}"));
            for (number, line) in text.lines().enumerate() {
                let trimmed = line.trim_start();
                if trimmed.starts_with("//") {
                    continue;
                }
                if names(line, rule.forbidden) {
                    found.push(format!(
                        "{relative}:{}: names `{}` ({}): {}",
                        number + 1,
                        rule.forbidden,
                        rule.why,
                        line.trim()
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn each_folder_names_only_what_it_may() {
    let found = violations(RULES);
    assert!(found.is_empty(), "import rules broken (docs/ARCHITECTURE.md, Rules):\n{}", found.join("\n"));
}

#[test]
fn lab_and_export_name_no_telemetry_web_or_lab() {
    let found = violations(LAB_RULES);
    assert!(found.is_empty(), "import rules broken (docs/ARCHITECTURE.md, Rules):\n{}", found.join("\n"));
}

#[test]
fn the_matcher_sees_paths_groups_and_skips_comments() {
    assert!(names("use crate::telemetry::Telemetry;", "crate::telemetry"));
    assert!(names("use crate::{store, telemetry::now_ms};", "crate::telemetry"));
    assert!(names("    let t = crate::telemetry::now_ms();", "crate::telemetry"));
    assert!(!names("use crate::telemetryx::A;", "crate::telemetry"));
    assert!(!names("let x = 1; // crate::telemetry", "crate::telemetry"));
    assert!(names("use axum::Router;", "axum"));
    assert!(!names("let my_axum = 1;", "axum"));
    assert!(!names("use crate::{store, lab};", "crate::telemetry"));
}
