//! Telemetry's build script: the kubelet's pod-resources gRPC client (`src/identity/kubelet.rs` asks
//! it which pod holds a GPU), generated from `proto/`.

use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").map(PathBuf::from).map_err(|e| e.to_string());
    if let Err(message) = manifest_dir.and_then(|dir| pod_resources_api(&dir)) {
        // A build script reports through panics; make the message the whole story.
        panic!("\n\ngpudash-telemetry: the build failed:\n{message}\n");
    }
}

/// Generates the kubelet's pod-resources gRPC client and server (`v1.rs` in OUT_DIR) from
/// `proto/`, with protox (a protobuf compiler in Rust, so no `protoc` need be installed).
/// The server half is for the tests' stand-in kubelet.
fn pod_resources_api(manifest_dir: &Path) -> Result<(), String> {
    let include = manifest_dir.join("proto");
    let proto = "kubelet/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={}", include.join(proto).display());
    let descriptors = protox::compile([proto], [&include]).map_err(|e| format!("{proto}: {e}"))?;
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_fds(descriptors)
        .map_err(|e| format!("generating the pod-resources API: {e}"))
}
