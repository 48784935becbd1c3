//! The import rules of `docs/ARCHITECTURE.md` that cargo cannot see (one crate, many folders),
//! checked over the source text: a line that names what its folder may not fails the test with
//! its file and line. Comments are skipped; a `use crate::{…}` group counts as naming each part.
//!
//! Every rule is one line of `RULES`. Rules between crates are Cargo's: `base`, `store` and
//! `telemetry` are crates of their own (telemetry alone depends on nvml-wrapper and names no axum;
//! store names only `base` and `shared`), so they cannot reach the lab or the web.

mod common;

use std::path::{Path, PathBuf};

use common::rust_files;

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
    rule("src", &["src/web", "src/lib.rs"], "axum", "only web speaks HTTP"),
    rule("../lab/src", &["../lab/src/cuda"], "cudarc", "only the lab's cuda/ calls CUDA"),
    rule("src/alerts", &[], "crate::web", "alerts know no HTTP (text formats are base::prom_text)"),
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

/// The export rule, apart (the lab crate itself cannot name telemetry or the web: Cargo refuses).
const LAB_RULES: &[Rule] = &[rule("src/export", &[], "use lab", "the SVG and CSV writers take plain values")];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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
fn export_names_no_lab() {
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

// ---- Module loops: no two top-level modules of a crate, nor two modules one level inside web/, telemetry/
// or lab/, may name each other, directly or round a ring (through `crate::`, `super::` or `self::` paths).

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

/// The paths `code` names from `crate::`, `super::` and `self::`, one per leaf of a `{…}` group,
/// each as its names (`super::{a::B, c}` gives `[super, a, B]` and `[super, c]`).
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    /// The paths of the tree at the start of `s` (`a::b`, `a::{b, c::d}`, `*`), each after `prefix`.
    fn tree(s: &str, prefix: &[String], ident: &dyn Fn(&str) -> String, out: &mut Vec<Vec<String>>) {
        let s = s.trim_start();
        let name = ident(s);
        let mut path = prefix.to_vec();
        if name.is_empty() {
            out.push(path);
            return;
        }
        path.push(name.clone());
        let Some(rest) = s[name.len()..].trim_start().strip_prefix("::") else {
            out.push(path);
            return;
        };
        let Some(group) = rest.trim_start().strip_prefix('{') else { return tree(rest, &path, ident, out) };
        let (mut depth, mut start) = (0usize, 0usize);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth > 0 => depth -= 1,
                '}' | ',' if depth == 0 => {
                    tree(&group[start..i], &path, ident, out);
                    start = i + 1;
                    if c == '}' {
                        return;
                    }
                }
                _ => {}
            }
        }
    }
    let mut found = Vec::new();
    for root in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(root) {
            let before = code[..at].trim_end();
            if code[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') || before.ends_with("::")
            {
                continue;
            }
            tree(&code[at..], &[], &ident, &mut found);
        }
    }
    found
}

/// The module a file of the crate at `src` is (`web/serve/mod.rs` and `web/serve.rs` are `[web, serve]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let mut path: Vec<String> = file
        .strip_prefix(src)
        .unwrap_or(file)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = path.pop() {
        let stem = last.strip_suffix(".rs").unwrap_or(&last).to_owned();
        let crate_root = path.is_empty() && (stem == "lib" || stem == "main");
        if stem != "mod" && !crate_root {
            path.push(stem);
        }
    }
    path
}

/// A named path made absolute from the module `at` (`super` and `self` resolved; `None` if it climbs
/// out of the crate).
fn absolute(at: &[String], named: &[String]) -> Option<Vec<String>> {
    let mut path = at.to_vec();
    let mut names = named.iter().peekable();
    if names.peek().is_some_and(|n| *n == "crate") {
        path.clear();
        names.next();
    }
    while let Some(name) = names.next_if(|n| *n == "super" || *n == "self") {
        if name == "super" {
            path.pop()?;
        }
    }
    path.extend(names.filter(|n| *n != "self").cloned());
    Some(path)
}

type Graph = std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>;

/// The modules directly inside `parent` (`&[]`: the crate's top-level modules) of the crate at
/// `src`, each with the sibling modules its files name (through `crate::`, `super::` or `self::`)
/// and the first file that does. Tests (`tests.rs`, `tests/`, `#[cfg(test)] mod … { … }`) are skipped.
fn module_graph(src: &Path, parent: &[&str]) -> Graph {
    let mut files = Vec::new();
    rust_files(&src.join(parent.join("/")), &mut files);
    let child = |module: &[String]| {
        let inside = module.len() > parent.len() && module.iter().zip(parent).all(|(m, p)| m == p);
        inside.then(|| module[parent.len()].clone())
    };
    let modules: std::collections::BTreeSet<String> = files.iter().filter_map(|f| child(&module_of(src, f))).collect();
    let mut graph = Graph::new();
    for file in &files {
        let module = module_of(src, file);
        let Some(from) = child(&module) else { continue };
        let is_test = file.file_name().is_some_and(|n| n == "tests.rs")
            || file.strip_prefix(src).is_ok_and(|p| p.components().any(|c| c.as_os_str() == "tests"));
        if is_test {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let edges = graph.entry(from.clone()).or_default();
        for named in named_paths(&code_of(&text)) {
            let Some(to) = absolute(&module, &named).and_then(|p| child(&p)) else { continue };
            if to != from && modules.contains(&to) {
                let relative = file.strip_prefix(src).unwrap_or(file).display().to_string();
                edges.entry(to).or_insert(relative);
            }
        }
    }
    graph
}

/// A ring of modules that name each other (`a → b (file) → … → a`), if the graph has one.
fn a_loop(graph: &Graph) -> Option<String> {
    fn visit<'a>(
        at: &'a str,
        graph: &'a Graph,
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

/// Where no two modules may name each other round a ring: each crate's top level (crate root, `&[]`)
/// and the modules one level inside the server's largest folders.
const LOOP_FREE: &[(&str, &[&str])] = &[
    ("src", &[]),
    ("../shared/src", &[]),
    ("src", &["web"]),
    ("../telemetry/src", &[]),
    ("../store/src", &[]),
    ("../lab/src", &[]),
];

/// Loops known and not yet cut, as the one step of each that closes it: (place, from, to, why). The
/// test leaves these steps out and fails when one is gone, so that the list only shrinks.
const KNOWN_LOOPS: &[(&str, &str, &str, &str)] = &[(
    "../lab/src/",
    "cuda",
    "experiments",
    "the CUDA executor asks the kind (`experiments::of(params).run_cuda`), the kind calls its run in \
     `cuda/<kind>.rs`, and that run shapes its figures with the kind's `report.rs`",
)];

#[test]
fn no_two_modules_of_one_folder_name_each_other() {
    for &(src, parent) in LOOP_FREE {
        let mut graph = module_graph(&root().join(src), parent);
        let place = format!("{src}/{}", parent.join("/"));
        assert!(graph.len() > 5, "{place}: too few modules found ({}): fix the test", graph.len());
        for &(folder, from, to, why) in KNOWN_LOOPS.iter().filter(|k| place == k.0) {
            let step = graph.get_mut(from).and_then(|edges| edges.remove(to));
            assert!(step.is_some(), "{folder}: {from} no longer names {to}: take it off KNOWN_LOOPS ({why})");
        }
        if let Some(ring) = a_loop(&graph) {
            panic!("{place}: an import loop between its modules (docs/ARCHITECTURE.md, Rules): {ring}");
        }
    }
}

/// Writes `text` to `path` under `src`, making its folders.
fn plant(src: &Path, path: &str, text: &str) {
    let path = src.join(path);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// A crate of `(path, text)` files in a temporary folder, for the self-tests.
fn planted(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, text) in files {
        plant(dir.path(), path, text);
    }
    dir
}

#[test]
fn the_loop_finder_finds_an_injected_loop_and_skips_tests_and_comments() {
    let dir = planted(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a.rs", "use crate::b::B;\n// crate::c\n#[cfg(test)]\nmod tests {\n    use crate::c::C;\n}\n"),
        ("b/mod.rs", "use crate::{\n    c::{self, C},\n};\nconst S: &str = \"crate::a\";\n"),
        ("c.rs", "pub struct C;\n"),
        ("c/tests.rs", "use crate::a::A;\n"),
    ]);
    let src = dir.path();
    let graph = module_graph(src, &[]);
    assert_eq!(a_loop(&graph), None, "no loop yet: {graph:?}");
    assert!(graph["b"].contains_key("c"), "a multi-line group counts: {graph:?}");
    plant(src, "c.rs", "pub struct C;\nfn f() { crate::a::g() }\n");
    let ring = a_loop(&module_graph(src, &[])).expect("the injected loop a → b → c → a is found");
    assert!(ring.contains("a → b (a.rs)") && ring.contains("c → a (c.rs)"), "{ring}");
}

#[test]
fn the_loop_finder_sees_a_loop_inside_a_folder_through_super_and_crate_paths() {
    let dir = planted(&[
        ("lib.rs", "pub mod web;\n"),
        ("web/mod.rs", "mod x;\nmod y;\nmod z;\npub struct ApiError;\nuse self::x::X;\n"),
        ("web/x.rs", "use super::{ApiError, y::Y};\n"),
        ("web/y.rs", "pub struct Y;\nuse super::super::web::ApiError;\n"),
        ("web/y/inner.rs", "use super::super::z::Z;\nuse super::Y;\n"),
        ("web/z.rs", "pub struct Z;\n#[cfg(test)]\nmod tests {\n    use super::super::x::X;\n}\n"),
    ]);
    let src = dir.path();
    let graph = module_graph(src, &["web"]);
    assert_eq!(a_loop(&graph), None, "no loop yet (the parent's own items are no module): {graph:?}");
    assert!(graph["y"].contains_key("z"), "a file deeper in y names z through super::super: {graph:?}");
    assert!(module_graph(src, &[]).get("web").is_none_or(|e| e.is_empty()), "one folder, no top-level edge");
    plant(src, "web/z.rs", "pub struct Z;\nfn f() { crate::web::x::g() }\n");
    let ring = a_loop(&module_graph(src, &["web"])).expect("the injected loop x → y → z → x is found");
    assert!(ring.contains("x → y (web/x.rs)") && ring.contains("y → z (web/y/inner.rs)"), "{ring}");
    assert!(ring.contains("z → x (web/z.rs)"), "{ring}");
}
