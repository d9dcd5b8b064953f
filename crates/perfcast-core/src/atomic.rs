//! Files replaced whole: the one atomic writer every crate writes its outputs through, so a
//! reader, a crash or a Ctrl-C sees the old file or the new one, never a part.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A temp file beside its destination, removed on drop unless it was renamed over it.
struct Staged {
    path: PathBuf,
    file: File,
    renamed: bool,
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A fresh temp file in `dir`, named so concurrent writers (threads or processes) never meet.
fn stage_in(dir: &Path) -> io::Result<Staged> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(
            ".perfcast-{}-{nanos:x}-{n}.tmp",
            std::process::id()
        ));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        // An ordinary data file when renamed, readable like the file it replaces.
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
        match options.open(&path) {
            Ok(file) => {
                return Ok(Staged {
                    path,
                    file,
                    renamed: false,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Writes `path` atomically: `fill` writes a temp file beside it, which is synced and renamed
/// over `path`. On any error the temp file is removed and `path` is as it was. `io` turns an
/// I/O failure (its action, the path it concerns) into the caller's error type.
pub fn write_atomic_with<E>(
    path: &Path,
    fill: impl FnOnce(&mut File) -> Result<(), E>,
    io: impl Fn(&'static str, &Path, io::Error) -> E,
) -> Result<(), E> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut staged = stage_in(dir).map_err(|e| io("create a temp file in", dir, e))?;
    fill(&mut staged.file)?;
    staged.file.sync_all().map_err(|e| io("sync", path, e))?;
    std::fs::rename(&staged.path, path).map_err(|e| io("rename into", path, e))?;
    staged.renamed = true;
    Ok(())
}

/// [`write_atomic_with`] for bytes already in memory, with plain I/O errors.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    write_atomic_with(path, |f| f.write_all(bytes), |_, _, e| e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        // A failing fill leaves the old file and no temp file.
        let failed: Result<(), String> = write_atomic_with(
            &path,
            |f| {
                use std::io::Write as _;
                f.write_all(b"half").unwrap();
                Err("no".to_string())
            },
            |a, p, e| format!("{a} {}: {e}", p.display()),
        );
        assert_eq!(failed, Err("no".to_string()));
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn the_result_is_an_ordinary_readable_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        write_atomic(&path, b"x").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o044, 0o044, "{mode:o}");
    }
}
