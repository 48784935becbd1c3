//! How the linker lays out the `gpudash` binary (x86-64 Linux, where Rust links with its own lld).
//!
//! - `-z pack-relative-relocs`, in the packaged build only (`--profile dist`: the image, the .deb),
//!   stores the position-independent binary's relocations as a bitmap (DT_RELR): 16,000 of them took
//!   387 KiB that the loader reads at start. Only a glibc from 2.36 loads such a binary, so it is
//!   packed only where the C library it is built against is that new (Debian 12); on older systems
//!   (Ubuntu 22.04, RHEL 9) it is built as before.
//! - A function order, only when a packager asks for one with `GPUDASH_SYMBOL_ORDER=FILE` (a path
//!   from the repository root). `packaging/symbol-order.sh` writes it, measured from this very
//!   toolchain's dist build idling: the functions an idle dashboard runs, which the linker then puts
//!   first and together, so the code an idle server touches fills about half as many pages and the
//!   kernel's fault-around (the 64 KiB around each touched page) maps the rarely run code only when
//!   it runs. The list names functions by their mangled names, which change with the toolchain,
//!   the lockfile and the profile, so it is made where it is used and never committed
//!   (packaging/README.md, "The binary's layout").

use std::env;
use std::path::Path;
use std::process::Command;

/// Prints the link arguments for the `gpudash` binary.
pub fn link_layout(manifest_dir: &Path) -> Result<(), String> {
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    println!("cargo:rerun-if-env-changed=GPUDASH_SYMBOL_ORDER");
    let order = env::var_os("GPUDASH_SYMBOL_ORDER").filter(|p| !p.is_empty());
    let target = env::var("TARGET").unwrap_or_default();
    // Rust's own lld links this target unless the build names another linker, which may not
    // know these options (GNU ld has no --symbol-ordering-file): then the binary is linked as is.
    let rustflags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let other_linker = ["linker", "fuse-ld"].iter().any(|word| rustflags.contains(word))
        || env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some();
    if target != "x86_64-unknown-linux-gnu" || other_linker {
        if order.is_some() {
            return Err(format!(
                "GPUDASH_SYMBOL_ORDER is set, but this build ({target}{}) does not link with Rust's lld, \
                 which alone reads a function order; unset it",
                if other_linker { ", another linker" } else { "" }
            ));
        }
        return Ok(());
    }
    if let Some(order) = order {
        let root = manifest_dir.parent().ok_or("server/ has no parent directory")?;
        let order = root.join(order);
        if !order.is_file() {
            return Err(format!(
                "GPUDASH_SYMBOL_ORDER names {}, which is not a file; make it with `sudo packaging/symbol-order.sh` \
                 or unset it",
                order.display()
            ));
        }
        println!("cargo:rerun-if-changed={}", order.display());
        println!("cargo:rustc-link-arg-bin=gpudash=-Wl,--symbol-ordering-file={}", order.display());
    }
    if packaged_build() && env::var("HOST").as_deref() == Ok(target.as_str()) && glibc_at_least(2, 36) {
        println!("cargo:rustc-link-arg-bin=gpudash=-Wl,-z,pack-relative-relocs");
    }
    Ok(())
}

/// Whether this is the packaged build (`--profile dist`): Cargo names a build script's profile only
/// as "release" or "debug", but its output folder sits under the profile's own,
/// `target/[TRIPLE/]dist/build/gpudash-HASH/out`.
fn packaged_build() -> bool {
    let out_dir = env::var_os("OUT_DIR").map(std::path::PathBuf::from).unwrap_or_default();
    out_dir.ancestors().nth(3).and_then(Path::file_name).is_some_and(|profile| profile == "dist")
}

/// Whether this machine's C library is glibc of at least `major.minor` (`getconf GNU_LIBC_VERSION`
/// prints e.g. "glibc 2.36"); false when it cannot tell.
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(output) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(found_major), Some(found_minor)) => (found_major, found_minor) >= (major, minor),
        _ => false,
    }
}
