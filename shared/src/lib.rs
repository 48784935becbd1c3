//! Wire types and pure helpers shared by the gpudash server and its browser app.
//!
//! Everything here is plain data: no I/O, no async runtime. Bytes are `u64`,
//! times are milliseconds since the Unix epoch, and a field a GPU cannot report
//! is `None` (shown as "n/a"), never an error.

pub mod activity;
pub mod alerts;
pub mod allocator;
pub mod auth;
pub mod bridge;
#[cfg(feature = "chart")]
pub mod chart;
pub mod csv;
pub mod firing;
pub mod fleet;
pub mod fleet_owners;
pub mod health;
pub mod history;
pub mod idle;
pub mod in_use;
pub mod jobs;
pub mod lab;
pub mod lab_view;
pub mod order;
pub mod processes;
pub mod readings;
pub mod reservations;
pub mod ring;
pub mod severity;
pub mod status;
mod tagged;
pub mod telemetry;
/// Builders for tests (the `testing` feature): never in release code.
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;
pub mod time;
pub mod time_axis;
pub mod topology;
pub mod units;
pub mod usability;
pub mod usage;
pub mod workload;
pub mod ws;

pub use ring::{HISTORY_WINDOW_MS, MemoryRing};
pub use telemetry::{
    Clocks, ComputeCapability, Device, DeviceInfo, DeviceSample, DevicesResponse, HostInfo, MemoryPoint, PcieLink,
};
pub use ws::{ClientMessage, Details, DeviceHistory, ServerMessage, Snapshot, Tick};
