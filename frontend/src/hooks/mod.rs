//! Hooks that own the page's connections to the outside: the telemetry socket and the theme.

pub mod telemetry;
pub mod theme;
