//! Whole pages of the app (there is one: the dashboard).

pub mod dashboard;
