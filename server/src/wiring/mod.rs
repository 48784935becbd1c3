//! Wiring between parts that must not name each other: each submodule turns one part's values into
//! the plain inputs another takes.

pub mod lab;
