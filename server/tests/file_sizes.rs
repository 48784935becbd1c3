//! The size rule of `docs/ARCHITECTURE.md`: no Rust file in the workspace (every crate,
//! tests included) is over 500 lines. A file that grows past it is split by topic.

mod common;

use std::path::Path;

use common::rust_files;

/// Most lines a Rust file may have.
const MOST_LINES: usize = 500;

/// The workspace's folders of Rust source, relative to the workspace root.
const FOLDERS: &[&str] = &[
    "server/src",
    "server/tests",
    "server/build",
    "team/src",
    "web/src",
    "web/build",
    "base/src",
    "store/src",
    "telemetry/src",
    "lab/src",
    "shared/src",
    "frontend/src",
    "tests",
];

/// Each file under `folders` of `root` over [`MOST_LINES`], as "path: N lines".
fn too_long(root: &Path, folders: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    for folder in folders {
        rust_files(&root.join(folder), &mut files);
    }
    assert!(!files.is_empty(), "no Rust file under {}: fix the test", root.display());
    let mut found: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
            let lines = text.lines().count();
            let relative = file.strip_prefix(root).unwrap_or(file).display();
            (lines > MOST_LINES).then(|| format!("{relative}: {lines} lines"))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn no_rust_file_is_over_500_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let found = too_long(&root, FOLDERS);
    assert!(found.is_empty(), "files over {MOST_LINES} lines (split them by topic):\n{}", found.join("\n"));
}

#[test]
fn a_file_of_501_lines_is_found_and_one_of_500_is_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("src/deep")).expect("mkdir");
    std::fs::write(dir.path().join("src/ok.rs"), "//\n".repeat(MOST_LINES)).expect("write");
    std::fs::write(dir.path().join("src/deep/long.rs"), "//\n".repeat(MOST_LINES + 1)).expect("write");
    std::fs::write(dir.path().join("src/notes.txt"), "x\n".repeat(900)).expect("write");
    assert_eq!(too_long(dir.path(), &["src"]), vec![format!("src/deep/long.rs: {} lines", MOST_LINES + 1)]);
}
