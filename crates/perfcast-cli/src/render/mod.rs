//! Renderers: report values from the libraries to the tables the commands print, pure
//! functions of their arguments (no I/O), snapshot-tested on values built in the tests; and
//! the charts some commands write beside their reports (`charts`).

pub mod backends;
pub mod bundle_eval;
pub mod charts;
pub mod collectives;
pub mod datasets;
pub mod devices;
pub mod import;
pub mod model;
pub mod networks;
pub mod plan;
pub mod predict;
pub mod profile;
pub mod scale;
pub mod serve;
pub mod train;

#[cfg(test)]
mod tests;
