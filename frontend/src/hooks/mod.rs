//! Hooks that own the page's connections to the outside: the telemetry socket,
//! API calls and the theme.

pub mod api;
pub mod telemetry;
pub mod theme;
