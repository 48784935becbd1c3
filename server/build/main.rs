//! The server's build script, one line per job (the kubelet's gRPC client is telemetry's own
//! build script):
//!
//! - [`layout`]: how the linker lays out the `gpudash` binary (x86-64 Linux);
//! - [`assets`]: the browser app (frontend/), built for wasm, split, compressed and embedded, so
//!   that `cargo build --release` alone yields one `gpudash` binary that serves its own page.

// Clippy spares a file named build.rs only; this one is main.rs.
#![allow(clippy::print_stdout, reason = "a build script speaks to Cargo through stdout")]

mod assets;
mod layout;

use std::path::PathBuf;

fn main() {
    if let Err(message) = build() {
        // A build script reports through panics; make the message the whole story.
        panic!("\n\ngpudash: the build failed:\n{message}\n");
    }
}

fn build() -> Result<(), String> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    layout::link_layout(&manifest_dir)?;
    assets::build(&manifest_dir)
}
