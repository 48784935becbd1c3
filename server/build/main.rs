//! The `gpudash` binary's build script: how the linker lays it out ([`layout`], x86-64 Linux).
//! The browser app it serves is built by the web crate's own build script (web/build/).

// Clippy spares a file named build.rs only; this one is main.rs.
#![allow(clippy::print_stdout, reason = "a build script speaks to Cargo through stdout")]

mod layout;

use std::path::PathBuf;

fn main() {
    let laid_out = std::env::var("CARGO_MANIFEST_DIR")
        .map_err(|e| e.to_string())
        .and_then(|dir| layout::link_layout(&PathBuf::from(dir)));
    if let Err(message) = laid_out {
        // A build script reports through panics; make the message the whole story.
        panic!("\n\ngpudash: the build failed:\n{message}\n");
    }
}
