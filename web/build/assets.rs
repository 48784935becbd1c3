//! The browser app: builds frontend/ for wasm32-unknown-unknown in a nested cargo (its own target
//! directory, `target/frontend`, which keeps the outer build's lock free), cuts its lazily loaded
//! tabs into modules of their own, runs wasm-bindgen, compresses every file (gzip through zopfli,
//! brotli) and writes `assets.rs`, the table the server embeds and serves.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const WASM_TARGET: &str = "wasm32-unknown-unknown";

/// Builds, splits, binds, compresses and embeds the browser app into `OUT_DIR/assets.rs`.
pub fn build(manifest_dir: &Path) -> Result<(), String> {
    let root = manifest_dir.parent().ok_or("web/ has no parent directory")?.to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    for watched in [
        "frontend/src",
        "frontend/Cargo.toml",
        "frontend/index.html",
        "frontend/boot.js",
        "shared/src",
        "shared/Cargo.toml",
        "style",
        "Cargo.lock",
        "Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    println!("cargo:rerun-if-env-changed=GPUDASH_FRONTEND_WASM");

    println!("cargo:rerun-if-env-changed=RUSTC_WORKSPACE_WRAPPER");

    let bindgen_dir = out_dir.join("bindgen");
    let _ = fs::remove_dir_all(&bindgen_dir);
    if is_lint_run() {
        // `cargo clippy` only type-checks the server and links nothing, so the page's
        // script and wasm are empty here; the real app is built by every build that links.
        fs::create_dir_all(&bindgen_dir).map_err(|e| e.to_string())?;
        fs::write(bindgen_dir.join("frontend.js"), "").map_err(|e| e.to_string())?;
        fs::write(bindgen_dir.join("frontend_bg.wasm"), "").map_err(|e| e.to_string())?;
        return embed(&root, &bindgen_dir, &out_dir);
    }
    // For server work while the frontend is mid-change: embed an already built wasm.
    let wasm = match env::var_os("GPUDASH_FRONTEND_WASM").filter(|p| !p.is_empty()) {
        Some(prebuilt) => {
            println!("cargo:warning=embedding the prebuilt browser app {}", PathBuf::from(&prebuilt).display());
            PathBuf::from(prebuilt)
        }
        None => build_wasm(&root)?,
    };
    let main = split(&wasm, &bindgen_dir, &out_dir)?;
    wasm_bindgen_cli_support::Bindgen::new()
        .input_path(&main)
        .web(true)
        .map_err(|e| format!("wasm-bindgen: {e:#}"))?
        .typescript(false)
        .out_name("frontend")
        // The split modules import the main module's functions by their link names.
        .keep_lld_exports(true)
        .demangle(false)
        .remove_name_section(true)
        .remove_producers_section(true)
        .generate(&bindgen_dir)
        .map_err(|e| format!("wasm-bindgen: {e:#}"))?;
    embed(&root, &bindgen_dir, &out_dir)
}

/// Cuts the app's split points (`#[lazy]`: the tabs opened now and then, `frontend/src/split.rs`)
/// out of `wasm` into modules of their own in `dir` (`split_<name>.wasm`, `chunk_<n>.wasm` for code
/// two of them share, and the loader `split.js`), fetched when first called; returns the main
/// module, for wasm-bindgen. The wasm is linked with `--emit-relocs` (`.cargo/config.toml`), which
/// is how the splitter finds every reference to a function it moves.
fn split(wasm: &Path, dir: &Path, out_dir: &Path) -> Result<PathBuf, String> {
    let input = fs::read(wasm).map_err(|e| format!("reading {}: {e}", wasm.display()))?;
    let main = out_dir.join("frontend_split.wasm");
    let mut options = wasm_split_cli_support::Options::new(&input);
    options.output_dir = dir;
    options.main_out_path = &main;
    options.link_name = SPLIT_LOADER;
    options.main_module = "./frontend.js";
    wasm_split_cli_support::transform(options).map_err(|e| {
        format!("splitting {} into lazily loaded modules: {e:#}\n(is it linked with --emit-relocs?)", wasm.display())
    })?;
    Ok(main)
}

/// The split modules' loader, beside `frontend.js`, which imports it.
const SPLIT_LOADER: &str = "./split.js";

/// True under `cargo clippy`, whose driver wraps rustc for the workspace's crates.
fn is_lint_run() -> bool {
    env::var_os("RUSTC_WORKSPACE_WRAPPER")
        .and_then(|wrapper| PathBuf::from(wrapper).file_stem().map(|stem| stem.to_string_lossy().contains("clippy")))
        .unwrap_or(false)
}

/// Writes `assets.rs`: each file of the page, plain, gzip and brotli, with its ETag.
fn embed(root: &Path, bindgen_dir: &Path, out_dir: &Path) -> Result<(), String> {
    const JS: &str = "text/javascript; charset=utf-8";
    const WASM: &str = "application/wasm";
    // The first load: the page and what it loads before the app runs (`split.js` is imported by `frontend.js`).
    let mut assets = vec![
        ("/".to_owned(), "text/html; charset=utf-8", root.join("frontend/index.html"), false),
        ("/assets/boot.js".to_owned(), JS, root.join("frontend/boot.js"), false),
        ("/assets/frontend.js".to_owned(), JS, bindgen_dir.join("frontend.js"), false),
        ("/assets/frontend_bg.wasm".to_owned(), WASM, bindgen_dir.join("frontend_bg.wasm"), false),
        ("/assets/style.css".to_owned(), "text/css; charset=utf-8", stylesheet(root, out_dir)?, false),
    ];
    // Then the split modules, fetched when a tab first needs one (none under clippy).
    let mut lazy: Vec<PathBuf> = fs::read_dir(bindgen_dir)
        .map_err(|e| format!("reading {}: {e}", bindgen_dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| !matches!(file_name(path).as_str(), "frontend.js" | "frontend_bg.wasm"))
        .collect();
    lazy.sort();
    for path in lazy {
        let name = file_name(&path);
        let (content_type, later) = match path.extension().and_then(|e| e.to_str()) {
            Some("js") => (JS, false),
            Some("wasm") => (WASM, true),
            _ => return Err(format!("{}: not a file the page loads", path.display())),
        };
        assets.push((format!("/assets/{name}"), content_type, path, later));
    }
    let mut table =
        String::from("/// The browser app, embedded at build time by build.rs.\npub static ASSETS: &[Asset] = &[\n");
    for (i, (path, content_type, source, lazy)) in assets.iter().enumerate() {
        let body = fs::read(source).map_err(|e| format!("reading {}: {e}", source.display()))?;
        let plain = out_dir.join(format!("asset{i}"));
        let gzip = out_dir.join(format!("asset{i}.gz"));
        let brotli = out_dir.join(format!("asset{i}.br"));
        fs::write(&plain, &body).map_err(|e| e.to_string())?;
        fs::write(&gzip, gzip_bytes(&body)?).map_err(|e| e.to_string())?;
        fs::write(&brotli, brotli_bytes(&body)?).map_err(|e| e.to_string())?;
        let etag = format!("\"{:016x}\"", fnv1a(&body));
        let _ = writeln!(
            table,
            "    Asset {{ path: {path:?}, content_type: {content_type:?}, lazy: {lazy}, etag: {etag:?}, body: include_bytes!({:?}), gzip: include_bytes!({:?}), brotli: include_bytes!({:?}) }},",
            plain.display().to_string(),
            gzip.display().to_string(),
            brotli.display().to_string()
        );
    }
    table.push_str("];\n");
    fs::write(out_dir.join("assets.rs"), table).map_err(|e| e.to_string())
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Joins `style/*.css` in name order (`00-base.css` first) into one stylesheet in `out_dir`: each
/// part of the page keeps its own file, the browser still fetches one.
fn stylesheet(root: &Path, out_dir: &Path) -> Result<PathBuf, String> {
    let dir = root.join("style");
    let mut parts: Vec<PathBuf> = fs::read_dir(&dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "css"))
        .collect();
    parts.sort();
    let mut joined = String::new();
    for part in &parts {
        let text = fs::read_to_string(part).map_err(|e| format!("reading {}: {e}", part.display()))?;
        joined.push_str(&text);
        joined.push('\n');
    }
    let path = out_dir.join("style.css");
    fs::write(&path, joined).map_err(|e| e.to_string())?;
    Ok(path)
}

/// Runs `cargo build` for the frontend crate and returns the path of its `.wasm`.
fn build_wasm(root: &Path) -> Result<PathBuf, String> {
    check_wasm_target()?;
    let target_dir =
        env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from).join("frontend");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .args(["build", "--package", "gpudash-frontend", "--bin", "frontend", "--target", WASM_TARGET])
        .args(["--profile", "wasm-release", "--target-dir"])
        .arg(&target_dir);
    if env::var_os("CARGO_NET_OFFLINE").is_some() {
        command.arg("--offline");
    }
    // The outer build's flags, wrappers (clippy) and target are for the server, not the wasm app.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_PROFILE_RELEASE_LTO",
        "CARGO_INCREMENTAL",
    ] {
        command.env_remove(var);
    }
    let status = command.status().map_err(|e| format!("could not start cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "`cargo build -p gpudash-frontend --target {WASM_TARGET}` failed ({status}); its errors are above"
        ));
    }
    Ok(target_dir.join(WASM_TARGET).join("wasm-release").join("frontend.wasm"))
}

/// Fails early, with the fix, when rustup has not installed the wasm target.
fn check_wasm_target() -> Result<(), String> {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output =
        Command::new(rustc).args(["--print", "sysroot"]).output().map_err(|e| format!("could not run rustc: {e}"))?;
    let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let target_lib = Path::new(&sysroot).join("lib/rustlib").join(WASM_TARGET);
    if target_lib.exists() {
        Ok(())
    } else {
        Err(format!(
            "the Rust target {WASM_TARGET} is not installed (looked in {}).\nInstall it with:\n    rustup target add {WASM_TARGET}",
            target_lib.display()
        ))
    }
}

/// Brotli at its best quality and a 4 MiB window: a quarter smaller than gzip on the wasm.
fn brotli_bytes(body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut encoder = brotli::CompressorWriter::new(&mut out, 64 * 1024, 11, 22);
    encoder.write_all(body).map_err(|e| e.to_string())?;
    drop(encoder);
    Ok(out)
}

/// Gzip through zopfli: any gzip reader takes it, and it is 4% smaller than zlib's best level
/// (the wasm: 704.8 → 677.0 KB), for a few seconds here (docs/CHANGELOG.md, "Browser app budgets").
fn gzip_bytes(body: &[u8]) -> Result<Vec<u8>, String> {
    let options = zopfli::Options { iteration_count: ZOPFLI_ITERATIONS, ..zopfli::Options::default() };
    let mut out = Vec::new();
    zopfli::compress(options, zopfli::Format::Gzip, body, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Five of zopfli's default fifteen: the rest shave under 0.1% off the wasm for several seconds more.
const ZOPFLI_ITERATIONS: std::num::NonZeroU64 = std::num::NonZeroU64::new(5).expect("five is not zero");

/// A content hash for ETags (FNV-1a: tiny, and collisions only cost a re-download).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
