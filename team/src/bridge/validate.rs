//! The rules a report must follow before anything of it is stored: sizes of
//! strings and lists, and values that make sense; an allocator map's figures must add up.

use shared::allocator::{AllocatorReport, DeviceMap, MAP_VERSION, MAX_BUCKETS, MAX_SEGMENTS, MapReason};
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

/// Most devices in one allocator report.
const MAX_MAP_DEVICES: usize = 16;

/// Refuses an allocator map whose figures do not add up or that breaks a bound, saying which.
pub fn validate_map(report: &AllocatorReport) -> Result<(), BridgeError> {
    let bad = |m: String| Err(BridgeError::Invalid(m));
    if report.version != MAP_VERSION {
        return bad(format!(
            "allocator map version {} is not supported; this server speaks version {MAP_VERSION}",
            report.version
        ));
    }
    if report.pid == 0 || report.host.is_empty() || report.host.len() > 255 {
        return bad("'pid' must be a process id (not 0) and 'host' 1 to 255 characters, as in its report".to_owned());
    }
    if !(report.cost_ms.is_finite() && report.cost_ms >= 0.0) {
        return bad(format!("'cost_ms' must be a finite number ≥ 0, not {}", report.cost_ms));
    }
    if report.maps.len() > MAX_MAP_DEVICES {
        return bad(format!("at most {MAX_MAP_DEVICES} device maps per report, not {}", report.maps.len()));
    }
    let mut devices: Vec<u32> = report.maps.iter().map(|m| m.device).collect();
    devices.sort_unstable();
    if devices.windows(2).any(|w| w[0] == w[1]) {
        return bad("each device may have one map per report".to_owned());
    }
    match (report.reason, report.oom) {
        (MapReason::Oom, None) => {
            return bad("a map with reason 'oom' needs its 'oom' (device, requested_bytes)".to_owned());
        }
        (MapReason::Oom, Some(oom)) if !devices.contains(&oom.device) => {
            return bad(format!("'oom' names device {}, which has no map in the report", oom.device));
        }
        (MapReason::Periodic | MapReason::Requested, Some(_)) => {
            return bad("'oom' belongs only in a map with reason 'oom'".to_owned());
        }
        _ => {}
    }
    report
        .maps
        .iter()
        .try_for_each(|m| check_map(m).map_err(|why| BridgeError::Invalid(format!("device {}: {why}", m.device))))
}

/// One device's map: every segment consistent, the totals their sums, the histogram the free blocks.
fn check_map(map: &DeviceMap) -> Result<(), String> {
    if map.segments.len() > MAX_SEGMENTS {
        return Err(format!(
            "at most {MAX_SEGMENTS} segments listed (fold the rest into 'other'), not {}",
            map.segments.len()
        ));
    }
    if map.free_histogram.len() > MAX_BUCKETS {
        return Err(format!("at most {MAX_BUCKETS} histogram buckets, not {}", map.free_histogram.len()));
    }
    // Sums in u128: no report can overflow them.
    let (mut size, mut allocated, mut active, mut free, mut blocks) = (0u128, 0u128, 0u128, 0u128, 0u128);
    for (i, s) in map.segments.iter().enumerate() {
        if s.allocated > s.active || s.active > s.size || s.free != s.size - s.active {
            return Err(format!(
                "segment {i}: needs allocated ≤ active ≤ size and free = size − active (size {}, active {}, allocated {}, free {})",
                s.size, s.active, s.allocated, s.free
            ));
        }
        if s.size == 0 || s.blocks == 0 || s.blocks > s.size {
            return Err(format!("segment {i}: a segment has a size > 0 and 1 to size blocks"));
        }
        (size, allocated, active, free, blocks) = (
            size + u128::from(s.size),
            allocated + u128::from(s.allocated),
            active + u128::from(s.active),
            free + u128::from(s.free),
            blocks + u128::from(s.blocks),
        );
    }
    let mut count = map.segments.len() as u128;
    if let Some(o) = &map.other {
        if o.allocated > o.active || o.active > o.size || o.free != o.size - o.active || o.blocks < o.segments {
            return Err(
                "'other' needs allocated ≤ active ≤ size, free = size − active and a block per segment".to_owned()
            );
        }
        (size, allocated, active, free, blocks) = (
            size + u128::from(o.size),
            allocated + u128::from(o.allocated),
            active + u128::from(o.active),
            free + u128::from(o.free),
            blocks + u128::from(o.blocks),
        );
        count += u128::from(o.segments);
    }
    let t = &map.totals;
    let sums = [
        ("reserved", t.reserved, size),
        ("allocated", t.allocated, allocated),
        ("active", t.active, active),
        ("free_in_segments", t.free_in_segments, free),
        ("segments", t.segments, count),
        ("blocks", t.blocks, blocks),
    ];
    if let Some((name, total, sum)) = sums.iter().find(|(_, total, sum)| u128::from(*total) != *sum) {
        return Err(format!("totals.{name} is {total} but the segments add up to {sum}"));
    }
    check_histogram(map)
}

/// Buckets in increasing order, each count's bytes inside its bucket, the bytes adding up to the free
/// bytes, and the largest free block in the top bucket.
fn check_histogram(map: &DeviceMap) -> Result<(), String> {
    let t = &map.totals;
    let (mut bytes, mut count, mut last) = (0u128, 0u128, None);
    for b in &map.free_histogram {
        let low = 1u128 << b.log2.min(63);
        if b.log2 > 63 || last.is_some_and(|l| b.log2 <= l) || b.count == 0 {
            return Err("histogram buckets need log2 0 to 63, increasing, each with a count > 0".to_owned());
        }
        let (n, sum) = (u128::from(b.count), u128::from(b.bytes));
        if sum < n * low || sum >= n.saturating_mul(low * 2) {
            return Err(format!("histogram bucket 2^{}: {} blocks cannot hold {} bytes", b.log2, b.count, b.bytes));
        }
        (bytes, count, last) = (bytes + sum, count + n, Some(b.log2));
    }
    if bytes != u128::from(t.free_in_segments) || count > u128::from(t.blocks) {
        return Err(format!(
            "the histogram holds {bytes} bytes in {count} blocks; it must hold free_in_segments ({}) in at most {} blocks",
            t.free_in_segments, t.blocks
        ));
    }
    let top_ok = match last {
        None => t.largest_free_block == 0,
        Some(log2) => t.largest_free_block >> log2 == 1,
    };
    if !top_ok || t.largest_free_block > t.free_in_segments {
        return Err(format!("largest_free_block ({}) must fall in the histogram's top bucket", t.largest_free_block));
    }
    Ok(())
}
