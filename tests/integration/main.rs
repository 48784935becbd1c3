//! gpudash's integration tests, built as one binary: the server runs in-process
//! on port 0 with simulated GPUs; browser tests drive Debian's Chromium.

// Every function here is test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod alerts;
mod alerts_prometheus;
mod alerts_rules;
mod alerts_webhook;
mod anonymous;
mod api;
#[path = "../load/attack.rs"]
mod attack;
mod auth_reload;
mod bad_input;
mod bridge;
mod bridge_allocator;
mod browser;
mod browser_a11y;
mod browser_alerts;
mod browser_auth;
mod browser_bridge;
mod browser_fleet;
mod browser_history;
mod browser_idle_wording;
mod browser_lab;
mod browser_overview;
mod browser_processes;
mod browser_reservations;
mod browser_signals;
mod browser_telemetry;
mod browser_usage;
mod browser_views;
mod budgets;
mod budgets_64;
mod connections;
mod doctor;
mod edge;
mod fleet;
mod fleet_down;
mod floods;
mod gpm;
mod health_status;
mod history;
mod identity;
mod lab;
mod lab_busy;
mod lab_checks;
mod lab_collectives;
mod lab_store;
mod local_user;
mod metrics;
mod p2p;
mod proxy;
mod reservations;
mod security;
mod signals;
mod signals_os;
mod support;
mod usage;
mod ws;
