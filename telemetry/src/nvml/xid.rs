//! The XID watcher: critical XID errors as NVML's event sets report them.

use std::sync::atomic::{AtomicBool, Ordering};

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use shared::health::{XidEvent, xid_meaning};

use crate::{XidSink, now_ms};

/// Waits on NVML event sets (one per GPU, so one GPU without event
/// support does not cost the others theirs) for critical XID errors until `stop` is set.
pub(super) fn watch_xids(nvml: &Nvml, indexes: &[u32], sink: &XidSink, stop: &AtomicBool) {
    let mut sets = Vec::new();
    for &index in indexes {
        let registered = nvml.device_by_index(index).map_err(Into::into).and_then(|device| {
            let set = nvml.create_event_set()?;
            device.register_events(EventTypes::CRITICAL_XID_ERROR, set)
        });
        match registered {
            Ok(set) => sets.push((index, set)),
            Err(e) => tracing::info!(index, "XID events unavailable: {}", base::error::chain(&e.error)),
        }
    }
    if sets.is_empty() {
        return;
    }
    let wait_ms = u32::try_from(500 / sets.len()).unwrap_or(50).max(20);
    while !stop.load(Ordering::Relaxed) {
        for (index, set) in &sets {
            match set.wait(wait_ms) {
                Ok(event) => {
                    let code = match event.event_data {
                        Some(XidError::Value(code)) => code,
                        Some(XidError::Unknown) | None => 0,
                    };
                    sink(XidEvent {
                        device: *index,
                        timestamp_ms: now_ms(),
                        code,
                        meaning: xid_meaning(code).to_owned(),
                    });
                }
                Err(NvmlError::Timeout) => {}
                Err(e) => {
                    tracing::warn!("XID watcher stopped: {}", base::error::chain(&e));
                    return;
                }
            }
        }
    }
}
