//! perfcast-data: measured datasets on polars.
//!
//! A dataset is a directory (`datasets/<device>/`) holding the device spec (`device.json`) and
//! one Parquet file per module kind: configuration columns, context columns, targets and
//! provenance. Writes go to a temp file and are renamed into place, so a killed run never leaves
//! a half-written table; reading validates the schema and every value.
//!
//! ```no_run
//! use perfcast_data::DatasetDir;
//! use perfcast_core::ModuleKind;
//!
//! let dir = DatasetDir::open("datasets/my-cpu")?;
//! let rows = dir.read(ModuleKind::Conv2d)?;
//! println!("{} conv2d rows", rows.len());
//! # Ok::<(), perfcast_data::Error>(())
//! ```

mod atomic;
pub mod consistency;
mod csv_file;
mod dataset;
mod error;
pub mod import;
pub mod merge;
pub mod networks;
pub mod outdir;
mod record;
mod resolve;
pub mod summary;
pub mod table;

pub use atomic::{write_atomic, write_atomic_with};
pub use csv_file::write_csv;
pub use dataset::{DEVICE_FILE, DatasetDir, LOCK_FILE};
pub use error::{Error, Result};
pub use record::{Outcome, Record, Timing, measurement_key};
pub use resolve::{names_device, resolve_datasets};

/// `text` cut to at most `max` bytes (on a character boundary), saying how much was cut:
/// messages echo input values, and a line must stay readable whatever the input held.
pub fn clip_text(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} more bytes)", &text[..end], text.len() - end).into()
}
