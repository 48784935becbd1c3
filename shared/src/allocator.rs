//! The caching allocator's map: a compact, address-free summary of
//! `torch.cuda.memory_snapshot()` that an attached process sends (every few
//! seconds, on request, and at an out-of-memory error), and the figures both the
//! server (the `oom` alert) and the page read from it.

use serde::{Deserialize, Serialize};

use crate::units::format_bytes;

/// Protocol version of [`AllocatorReport`].
pub const MAP_VERSION: u32 = 1;
/// Segments a map lists one by one (largest first); the rest are folded into [`OtherSegments`].
pub const MAX_SEGMENTS: usize = 512;
/// Segments per device the page draws (the rest folded into one); `GET /api/bridge` lists none,
/// `GET /api/bridge/{id}` all.
pub const LISTED_SEGMENTS: usize = 128;
/// Power-of-two buckets of the free-block histogram: 2^0 … 2^63 bytes.
pub const MAX_BUCKETS: usize = 64;

/// Which of the allocator's pools a segment belongs to: blocks of at most 1 MiB come from
/// 2 MiB "small" segments, larger ones from "large" segments.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SegmentPool {
    Large,
    Small,
}

/// One segment (one `cudaMalloc` of the allocator), without its address or its blocks' frames.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    /// Bytes the segment holds from the driver (`total_size`).
    pub size: u64,
    /// The CUDA stream it serves (an opaque handle; 0 is the default stream).
    pub stream: u64,
    pub pool: SegmentPool,
    /// It belongs to a private pool (a CUDA graph's, or a `MemPool`), not the default one.
    #[serde(default)]
    pub private_pool: bool,
    /// An expandable segment (`expandable_segments:True`): it grows instead of splitting.
    #[serde(default)]
    pub expandable: bool,
    /// Bytes in allocated blocks (`allocated_size`).
    pub allocated: u64,
    /// Bytes in active blocks: allocated, and freed but still used by a stream (`active_size`).
    pub active: u64,
    /// Bytes in inactive (free) blocks: `size - active`.
    pub free: u64,
    /// Number of blocks (allocated and free) the segment is split into.
    pub blocks: u64,
}

/// The segments past [`MAX_SEGMENTS`], summed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct OtherSegments {
    pub segments: u64,
    pub size: u64,
    pub allocated: u64,
    pub active: u64,
    pub free: u64,
    pub blocks: u64,
}

/// Free blocks of 2^`log2` to 2^(`log2`+1) − 1 bytes.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FreeBucket {
    pub log2: u8,
    pub count: u64,
    pub bytes: u64,
}

/// A device's totals, over every segment (listed or folded).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct MapTotals {
    /// Sum of the segments' sizes: `memory_reserved()`.
    pub reserved: u64,
    /// `memory_allocated()`.
    pub allocated: u64,
    pub active: u64,
    /// Bytes in free blocks inside segments: cached, reusable without asking the driver.
    pub free_in_segments: u64,
    /// The largest free block: an allocation larger than this needs a new segment.
    pub largest_free_block: u64,
    pub segments: u64,
    pub blocks: u64,
}

impl MapTotals {
    /// Internal fragmentation: the share of reserved bytes that sit in free blocks (0 to 1).
    pub fn fragmentation(&self) -> f64 {
        if self.reserved == 0 { 0.0 } else { self.free_in_segments as f64 / self.reserved as f64 }
    }
}

/// One device's map.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeviceMap {
    /// CUDA device index as the process sees it.
    pub device: u32,
    /// Largest first, at most [`MAX_SEGMENTS`].
    pub segments: Vec<Segment>,
    #[serde(default)]
    pub other: Option<OtherSegments>,
    /// Free blocks by size, smallest bucket first, empty buckets left out.
    pub free_histogram: Vec<FreeBucket>,
    pub totals: MapTotals,
}

impl DeviceMap {
    /// The map with at most `keep` segments listed; the smaller rest join `other`.
    pub fn folded(&self, keep: usize) -> DeviceMap {
        if self.segments.len() <= keep {
            return self.clone();
        }
        let mut other = self.other.clone().unwrap_or_default();
        for s in &self.segments[keep..] {
            other.segments += 1;
            other.size += s.size;
            other.allocated += s.allocated;
            other.active += s.active;
            other.free += s.free;
            other.blocks += s.blocks;
        }
        DeviceMap { segments: self.segments[..keep].to_vec(), other: Some(other), ..self.clone() }
    }
}

/// Why a map was taken.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MapReason {
    /// Every `map_interval` seconds.
    Periodic,
    /// The page asked for one ("Refresh map").
    Requested,
    /// Taken as `torch.cuda.OutOfMemoryError` was raised, before it propagated.
    Oom,
}

/// The out-of-memory error a map was taken at.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OomEvent {
    /// The device the allocation was for.
    pub device: u32,
    /// "Tried to allocate 2.10 GiB", in bytes (as precise as the message).
    pub requested_bytes: Option<u64>,
}

/// Body of `POST /api/bridge/allocator`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AllocatorReport {
    /// [`MAP_VERSION`].
    pub version: u32,
    /// The process, as in its `POST /api/bridge/report`: it must be attached already.
    pub pid: u32,
    pub host: String,
    pub reason: MapReason,
    /// When the snapshot was taken, ms since the epoch.
    pub taken_ms: u64,
    /// What `memory_snapshot()` and the summary cost the process, ms.
    pub cost_ms: f64,
    pub maps: Vec<DeviceMap>,
    #[serde(default)]
    pub oom: Option<OomEvent>,
}

/// A process's latest map, as the page reads it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AllocatorView {
    pub reason: MapReason,
    pub taken_ms: u64,
    pub cost_ms: f64,
    pub maps: Vec<DeviceMap>,
}

/// A "Refresh map" request and whether the process answered it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapRequestState {
    pub id: u64,
    pub requested_ms: u64,
    pub done_ms: Option<u64>,
}

/// One out-of-memory error of a process, with the allocator's state at that moment.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct OomRecord {
    pub at_ms: u64,
    /// The device as the process numbers it.
    pub device: u32,
    pub requested_bytes: Option<u64>,
    pub totals: MapTotals,
}

impl OomRecord {
    /// Why the allocation failed, as far as the map tells.
    pub fn verdict(&self) -> &'static str {
        match self.requested_bytes {
            Some(asked) if asked <= self.totals.free_in_segments && asked > self.totals.largest_free_block => {
                "fragmented"
            }
            Some(asked) if asked > self.totals.free_in_segments => {
                "not enough cached memory; the GPU had no room for a new segment"
            }
            _ => "the GPU had no room for a new segment",
        }
    }

    /// "asked for 2.1 GiB, largest free block 0.6 GiB, 3.4 GiB free in total (fragmented)".
    pub fn figures(&self) -> String {
        let asked = self.requested_bytes.map_or_else(|| "an unknown size".to_owned(), format_bytes);
        format!(
            "asked for {asked}, largest free block {}, {} free in total ({})",
            format_bytes(self.totals.largest_free_block),
            format_bytes(self.totals.free_in_segments),
            self.verdict()
        )
    }

    /// "OOM at 14:02: asked for …"; `at` is the time as the reader shows it.
    pub fn describe(&self, at: &str) -> String {
        format!("OOM at {at}: {}", self.figures())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(size: u64, allocated: u64) -> Segment {
        Segment {
            size,
            stream: 0,
            pool: SegmentPool::Large,
            private_pool: false,
            expandable: false,
            allocated,
            active: allocated,
            free: size - allocated,
            blocks: 2,
        }
    }

    #[test]
    fn folding_keeps_the_totals_and_lists_the_largest() {
        let map = DeviceMap {
            device: 0,
            segments: vec![segment(40, 10), segment(30, 30), segment(20, 5), segment(10, 0)],
            other: Some(OtherSegments { segments: 1, size: 5, allocated: 5, active: 5, free: 0, blocks: 1 }),
            free_histogram: vec![],
            totals: MapTotals::default(),
        };
        let folded = map.folded(2);
        assert_eq!(folded.segments.len(), 2);
        let other = folded.other.unwrap();
        assert_eq!((other.segments, other.size, other.allocated, other.free, other.blocks), (3, 35, 10, 25, 5));
        assert_eq!(map.folded(10), map);
    }

    #[test]
    fn oom_lines_say_why() {
        let gib = 1u64 << 30;
        let totals = MapTotals {
            reserved: 10 * gib,
            free_in_segments: 3 * gib + gib / 2,
            largest_free_block: gib / 2,
            ..MapTotals::default()
        };
        let oom = OomRecord { at_ms: 0, device: 0, requested_bytes: Some(2 * gib), totals };
        assert_eq!(
            oom.describe("14:02"),
            "OOM at 14:02: asked for 2.00 GiB, largest free block 512 MiB, 3.50 GiB free in total (fragmented)"
        );
        let bigger = OomRecord { requested_bytes: Some(8 * gib), ..oom };
        assert!(bigger.describe("x").ends_with("(not enough cached memory; the GPU had no room for a new segment)"));
        assert!((totals.fragmentation() - 0.35).abs() < 1e-9);
    }
}
