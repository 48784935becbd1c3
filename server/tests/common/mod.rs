//! What the source-rule tests (`file_sizes.rs`, and `process.rs`'s thread names) share: the walk over Rust files.

use std::path::{Path, PathBuf};

/// Appends to `out` every `.rs` file under `dir` (or `dir` itself when it is a file), skipping
/// build output (`target`) and npm's `node_modules`.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    if dir.is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target" || n == "node_modules") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
