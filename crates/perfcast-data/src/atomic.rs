//! perfcast-core's one atomic writer with this crate's errors.

use std::path::Path;

use crate::error::{Error, Result};

/// Writes bytes to `path` atomically (temp file in the same directory, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    write_atomic_with(path, |file| {
        file.write_all(bytes).map_err(|source| Error::Io {
            action: "write",
            path: path.to_path_buf(),
            source,
        })
    })
}

/// Creates a temp file beside `path`, lets `fill` write it, syncs it and renames it over
/// `path`: readers see the old file or the new one, never a part. On error the temp file is
/// removed and `path` is untouched ([`perfcast_core::atomic`], with this crate's errors).
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> Result<()>,
) -> Result<()> {
    perfcast_core::atomic::write_atomic_with(path, fill, |action, path, source| Error::Io {
        action,
        path: path.to_path_buf(),
        source,
    })
}
