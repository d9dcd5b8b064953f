//! One module per top-level command.

pub mod backends;
pub mod datasets;
pub mod devices;
pub mod import;
pub mod profile;
pub mod train;
