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

// ---- Module loops: no two top-level modules of a crate may name each other, directly or round a ring.

/// `text` without comments, string contents, and `#[cfg(test)] mod … { … }` blocks: what the
/// module's own code names.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let rest = &text[at..];
        if rest.starts_with("//") {
            while chars.peek().is_some_and(|&(_, c)| c != '\n') {
                chars.next();
            }
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(text.len(), |e| at + e + 2);
            while chars.peek().is_some_and(|&(i, _)| i < end) {
                chars.next();
            }
        } else if c == '"' {
            let mut escaped = false;
            for (_, c) in chars.by_ref() {
                if c == '"' && !escaped {
                    break;
                }
                escaped = c == '\\' && !escaped;
            }
            out.push_str("\"\"");
        } else if let Some(after) = rest.strip_prefix("#[cfg(test)]")
            && after.trim_start().starts_with("mod ")
            && after.find('{').is_some_and(|b| after.find(';').is_none_or(|s| b < s))
        {
            let open = at + "#[cfg(test)]".len() + after.find('{').unwrap_or_default();
            let mut depth = 0usize;
            for (i, c) in text[open..].char_indices() {
                depth = match c {
                    '{' => depth + 1,
                    '}' => depth - 1,
                    _ => depth,
                };
                if depth == 0 {
                    while chars.peek().is_some_and(|&(j, _)| j <= open + i) {
                        chars.next();
                    }
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The top-level modules `code` names: `crate::x` and each first name inside `crate::{…}`.
fn named_modules(code: &str) -> Vec<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut start) = (0usize, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start => {
                        start = false;
                        found.push(ident(&group[i..]));
                    }
                    _ => {}
                }
            }
        } else {
            found.push(ident(rest));
        }
    }
    found
}

/// Each top-level module of the crate at `src` and the modules it names, with where.
fn module_graph(src: &Path) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let top = |path: &Path| {
        let first = path.strip_prefix(src).ok()?.components().next()?.as_os_str().to_string_lossy().into_owned();
        Some(first.strip_suffix(".rs").unwrap_or(&first).to_owned())
    };
    let modules: std::collections::BTreeSet<String> =
        files.iter().filter_map(|f| top(f)).filter(|m| m != "lib" && m != "main").collect();
    let mut graph = std::collections::BTreeMap::new();
    for file in &files {
        let Some(from) = top(file).filter(|m| modules.contains(m)) else { continue };
        let is_test = file.file_name().is_some_and(|n| n == "tests.rs")
            || file.strip_prefix(src).is_ok_and(|p| p.components().any(|c| c.as_os_str() == "tests"));
        if is_test {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let edges: &mut std::collections::BTreeMap<String, String> = graph.entry(from.clone()).or_default();
        for to in named_modules(&code_of(&text)) {
            if to != from && modules.contains(&to) {
                let relative = file.strip_prefix(src).unwrap_or(file).display().to_string();
                edges.entry(to).or_insert(relative);
            }
        }
    }
    graph
}

/// A ring of modules that name each other (`a → b (file) → … → a`), if the graph has one.
fn a_loop(graph: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>) -> Option<String> {
    fn visit<'a>(
        at: &'a str,
        graph: &'a std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
        path: &mut Vec<&'a str>,
        done: &mut std::collections::BTreeSet<&'a str>,
    ) -> Option<String> {
        if let Some(start) = path.iter().position(|m| *m == at) {
            let ring = &path[start..];
            let steps: Vec<String> = ring
                .iter()
                .zip(ring.iter().skip(1).chain(std::iter::once(&at)))
                .map(|(a, b)| format!("{a} → {b} ({})", graph[*a][*b]))
                .collect();
            return Some(steps.join(", "));
        }
        if !done.insert(at) {
            return None;
        }
        path.push(at);
        for next in graph.get(at).into_iter().flat_map(|e| e.keys()) {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph.keys().find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_two_top_level_modules_name_each_other() {
    for src in ["src", "../shared/src"] {
        let graph = module_graph(&root().join(src));
        assert!(graph.len() > 5, "{src}: too few modules found ({}): fix the test", graph.len());
        if let Some(ring) = a_loop(&graph) {
            panic!("{src}: an import loop between top-level modules (docs/ARCHITECTURE.md, Rules): {ring}");
        }
    }
}

#[test]
fn the_loop_finder_finds_an_injected_loop_and_skips_tests_and_comments() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    write("a.rs", "use crate::b::B;\n// crate::c\n#[cfg(test)]\nmod tests {\n    use crate::c::C;\n}\n");
    write("b/mod.rs", "use crate::{\n    c::{self, C},\n};\nconst S: &str = \"crate::a\";\n");
    write("c.rs", "pub struct C;\n");
    write("c/tests.rs", "use crate::a::A;\n");
    let graph = module_graph(src);
    assert_eq!(a_loop(&graph), None, "no loop yet: {graph:?}");
    assert!(graph["b"].contains_key("c"), "a multi-line group counts: {graph:?}");
    write("c.rs", "pub struct C;\nfn f() { crate::a::g() }\n");
    let ring = a_loop(&module_graph(src)).expect("the injected loop a → b → c → a is found");
    assert!(ring.contains("a → b (a.rs)") && ring.contains("c → a (c.rs)"), "{ring}");
}
