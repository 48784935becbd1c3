//! The page's building blocks: header, notices, GPU cards and their charts,
//! health, processes, who uses what, and history.

pub mod chart;
pub mod device_card;
pub mod format;
pub mod header;
pub mod health;
pub mod history;
pub mod history_chart;
pub mod memory_chart;
pub mod notices;
pub mod processes;
pub mod usage;
