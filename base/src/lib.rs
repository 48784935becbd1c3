//! What every part of the gpudash server leans on and nothing else: the one way it takes a lock
//! and waits across threads ([`sync`]), its clock ([`clock`]), its one rate limiter ([`rate`]), the
//! one writer of Prometheus' text format ([`prom_text`]), and how an error is said ([`error`]). It
//! depends on no other gpudash crate.

pub mod clock;
pub mod error;
pub mod prom_text;
pub mod rate;
pub mod sync;
