//! Hooks that own the page's connections to the outside: the telemetry socket,
//! the session, the lab, alerts and browser notifications, history fetches, API
//! calls and the theme.

pub mod alerts;
pub mod api;
pub mod bridge;
pub mod history;
pub mod lab;
pub mod notify;
pub mod poll;
pub mod reservations;
pub mod session;
pub mod telemetry;
pub mod theme;
pub mod url;
pub mod visible;
