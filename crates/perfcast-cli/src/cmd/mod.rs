//! One module per top-level command.

pub mod backends;
pub mod bundle_eval;
pub mod collectives;
pub mod datasets;
pub mod devices;
pub mod devices_eval;
pub mod import;
pub mod map;
pub mod model;
pub mod networks;
pub mod plan;
pub mod predict;
pub mod profile;
pub mod quickstart;
pub mod scale;
pub mod serve;
pub mod train;
