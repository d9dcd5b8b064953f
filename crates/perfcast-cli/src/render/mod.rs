//! Text renderers: report values from the libraries to the tables the commands print. Pure
//! functions of their arguments (no I/O), so they are snapshot-tested on values built in the
//! tests.

pub mod charts;
pub mod datasets;
pub mod devices;
pub mod networks;
pub mod profile;
pub mod train;
