//! gpudash's integration tests, built as one binary: the server runs in-process
//! on port 0 with simulated GPUs; browser tests drive Debian's Chromium.

mod api;
mod browser;
mod budgets;
mod browser_auth;
mod browser_lab;
mod fleet;
mod history;
mod lab;
mod lab_store;
mod metrics;
mod p2p;
mod support;
mod ws;
