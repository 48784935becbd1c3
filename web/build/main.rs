//! The web crate's build script: the browser app (frontend/), built for wasm, split, compressed
//! and embedded ([`assets`]), so that `cargo build --release` alone yields one `gpudash` binary
//! that serves its own page.

// Clippy spares a file named build.rs only; this one is main.rs.
#![allow(clippy::print_stdout, reason = "a build script speaks to Cargo through stdout")]

mod assets;

use std::path::PathBuf;

fn main() {
    let built = std::env::var("CARGO_MANIFEST_DIR")
        .map_err(|e| e.to_string())
        .and_then(|dir| assets::build(&PathBuf::from(dir)));
    if let Err(message) = built {
        // A build script reports through panics; make the message the whole story.
        panic!("\n\ngpudash: the build failed:\n{message}\n");
    }
}
