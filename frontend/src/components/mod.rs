//! The page's building blocks: header, notices, GPU cards and their charts.

pub mod device_card;
pub mod header;
pub mod memory_chart;
pub mod notices;
