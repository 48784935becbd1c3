//! The last few minutes of memory readings per device, for a page that just
//! connected: the ring and its window are shared with the page, which keeps the same.

pub use shared::ring::{HISTORY_WINDOW_MS, MemoryRing};
