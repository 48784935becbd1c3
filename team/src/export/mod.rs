//! A lab run written out for people and other programs: its chart as SVG (`GET /api/runs/{id}/chart.svg`),
//! its figures as CSV (`GET /api/runs/{id}/results.csv`) and as the aligned text `gpudash bench` prints.
//!
//! These are text formats over a finished [`shared::lab::Run`], called by `web/` and `cli/` only: they
//! live outside `lab/` (which runs experiments and knows no output format) and depend on `shared` alone.

pub mod svg;
pub mod table;
