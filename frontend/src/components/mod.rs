//! The page's building blocks: header, login, notices, GPU cards and their
//! charts, health, processes, who uses what, history, the lab's parts, and the
//! Alerts tab's panels.

pub mod activity;
pub mod alert_group;
pub mod alert_notify;
pub mod alert_panels;
pub mod bridge;
pub mod bridge_allocator;
pub mod chart;
pub mod device_card;
// Off the dashboard's cards (issue 19): the Lab page places it (helper "lab"); drop this allow then.
#[allow(dead_code)]
pub mod empty_cache;
pub mod format;
pub mod gpu_grid;
pub mod header;
pub mod health;
pub mod history;
pub mod history_chart;
pub mod history_plot;
pub mod job_detail;
pub mod job_notices;
pub mod lab;
pub mod login;
pub mod memory_chart;
pub mod meter;
pub mod notices;
pub mod overview;
pub mod process_sort;
pub mod processes;
pub mod reservation_timeline;
pub mod reservations;
pub mod severity_badges;
pub mod signals;
pub mod usage;
pub mod usage_chart;
pub mod usage_table;
