//! `GET /api/topology`: how the GPUs connect, like `nvidia-smi topo -m` and
//! `topo -p2p`, read once at start.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use shared::topology::Topology;

use super::{ApiError, AppState};

/// The pairs' link codes and P2P status, and each GPU's NVLinks; 503 where NVML could not be read.
pub async fn topology(State(state): State<AppState>) -> Result<Json<Topology>, ApiError> {
    state.telemetry.topology().cloned().map(Json).ok_or_else(|| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: "the GPU topology is unavailable: NVML could not be read at start".into(),
    })
}
