//! What a shared GPU server adds to the samples, with no HTTP in it (the web crate serves all of
//! this; Cargo keeps axum out of here): who is signed in ([`auth`]) and what they did ([`audit`]),
//! who uses what ([`usage`]), bookings ([`reservations`]), [`alerts`] and their deliveries, stopping
//! a job ([`signals`]), the PyTorch allocator [`bridge`], other hosts ([`fleet`]), the Lab's SVG and
//! CSV writers ([`export`], which take plain values and cannot name the Lab), and the checks every
//! part's flags share ([`flags`]).

pub mod alerts;
pub mod audit;
pub mod auth;
pub mod bridge;
pub mod export;
pub mod flags;
pub mod fleet;
pub mod jobs;
pub mod reservations;
pub mod signals;
pub mod usage;
