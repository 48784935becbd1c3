//! The rules a report must follow before anything of it is stored: sizes of
//! strings and lists, and values that make sense.

use shared::bridge::Report;

use super::BridgeError;

/// Limits of one report, so a confused client cannot bloat the server.
const MAX_DEVICES: usize = 16;
const MAX_SPANS_PER_REPORT: usize = 500;
const MAX_NAME: usize = 200;
const MAX_PROCESS_NAME: usize = 1_000;
const MAX_VERSION: usize = 64;

/// Refuses a report that breaks a rule, saying which.
pub fn validate(report: &Report) -> Result<(), BridgeError> {
    let bad = |m: String| Err(BridgeError::Invalid(m));
    if report.version != 1 {
        return bad(format!("protocol version {} is not supported; this server speaks version 1", report.version));
    }
    if report.pid == 0 {
        return bad("'pid' must be a process id, not 0".to_owned());
    }
    if report.host.is_empty() || report.host.len() > 255 {
        return bad("'host' must be 1 to 255 characters".to_owned());
    }
    if report.process_name.len() > MAX_PROCESS_NAME {
        return bad(format!("'process_name' is longer than {MAX_PROCESS_NAME} characters"));
    }
    let versions = [Some(&report.torch_version), report.cuda_version.as_ref()];
    if versions.into_iter().flatten().any(|v| v.len() > MAX_VERSION) {
        return bad(format!("'torch_version' and 'cuda_version' must be at most {MAX_VERSION} characters"));
    }
    if report.devices.iter().filter_map(|d| d.uuid.as_ref()).any(|uuid| uuid.len() > MAX_VERSION) {
        return bad(format!("a device 'uuid' must be at most {MAX_VERSION} characters"));
    }
    if !(report.interval_s.is_finite() && (0.1..=3600.0).contains(&report.interval_s)) {
        return bad(format!("'interval_s' must be from 0.1 to 3600, not {}", report.interval_s));
    }
    if report.devices.len() > MAX_DEVICES {
        return bad(format!("at most {MAX_DEVICES} devices per report, not {}", report.devices.len()));
    }
    if report.spans.len() > MAX_SPANS_PER_REPORT {
        return bad(format!("at most {MAX_SPANS_PER_REPORT} spans per report, not {}", report.spans.len()));
    }
    for d in &report.devices {
        if d.allocated > d.reserved && d.reserved > 0 {
            return bad(format!("device {}: allocated ({}) exceeds reserved ({})", d.device, d.allocated, d.reserved));
        }
    }
    for s in &report.spans {
        if s.name.is_empty() || s.name.len() > MAX_NAME {
            return bad(format!("span names must be 1 to {MAX_NAME} characters"));
        }
        if !(s.elapsed_ms.is_finite() && s.elapsed_ms >= 0.0) {
            return bad(format!("span '{}': elapsed_ms must be a finite number ≥ 0", s.name));
        }
    }
    Ok(())
}
