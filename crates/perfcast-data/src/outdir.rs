//! Output directories written whole (trained models, bundles, imports), replaced safely.
//!
//! Every such directory is built in a staging directory beside its destination and swapped in
//! at the end. The rules that keep user data safe:
//! - an existing destination is replaced only when it is a perfcast output of the same kind
//!   (it carries [`MARKER`], or the files earlier versions wrote), never an arbitrary folder,
//!   and never one that holds (or is held by) an input of the run;
//! - the swap is atomic where the OS allows it (`renameat2(RENAME_EXCHANGE)` on Linux), so a
//!   kill leaves the old directory or the new one at the destination, never neither; elsewhere
//!   the old one is renamed aside first and a later run puts it back if the swap was cut short;
//! - staging directories carry their owner's process id; ones whose owner is gone are removed
//!   by the next run that stages beside them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// File written at the root of an import's output, describing what was imported.
pub const IMPORT_FILE: &str = "import.json";

/// The file that marks a directory as a perfcast output, with its kind.
pub const MARKER: &str = ".perfcast-output";

/// Prefix of every staging or trash directory (`.perfcast-<what>-<pid>-<random>`).
const STAGING_PREFIX: &str = ".perfcast-";
/// Name of the trash directory's record of where its `old` directory came from.
const TRASH_TARGET: &str = "target";

/// What a perfcast output directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputKind {
    /// `perfcast train --out`: models and reports.
    Models,
    /// A checkpoint bundle (`manifest.json` and model files).
    Bundle,
    /// `perfcast import --out`: dataset directories of imported measurements.
    Import,
}

impl OutputKind {
    fn name(self) -> &'static str {
        match self {
            OutputKind::Models => "trained models",
            OutputKind::Bundle => "a bundle",
            OutputKind::Import => "an import",
        }
    }

    /// Whether `dir` (an existing directory without a marker) looks like what earlier versions
    /// wrote for this kind.
    fn legacy(self, dir: &Path) -> bool {
        match self {
            OutputKind::Models => dir.join("report.json").is_file(),
            OutputKind::Bundle => dir.join("manifest.json").is_file(),
            OutputKind::Import => dir.join(IMPORT_FILE).is_file(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Marker {
    kind: OutputKind,
    perfcast_version: String,
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io {
        action,
        path,
        source,
    }
}

fn refuse(dest: &Path, message: String) -> Error {
    Error::Destination {
        path: dest.to_path_buf(),
        message: format!("{message}: not replacing it"),
    }
}

/// The kind recorded in `dir`'s marker, if it has a readable one.
fn marked_kind(dir: &Path) -> Option<OutputKind> {
    let text = std::fs::read_to_string(dir.join(MARKER)).ok()?;
    serde_json::from_str::<Marker>(&text).ok().map(|m| m.kind)
}

/// Writes the marker of `kind` into `dir` (a staging directory, before it is swapped in).
pub fn mark(dir: &Path, kind: OutputKind) -> Result<()> {
    let marker = Marker {
        kind,
        perfcast_version: perfcast_core::VERSION.to_string(),
    };
    let json = serde_json::to_vec_pretty(&marker).map_err(|e| Error::unreadable(dir, e))?;
    crate::write_atomic(&dir.join(MARKER), &json)
}

/// Checks that `dest` may be written as an output of `kind`: it does not exist yet, or it is
/// an earlier output of the same kind and `replace` is set (`--force`; bundles are replaced
/// without it), and it neither holds nor lies inside any of `inputs`.
pub fn check_destination(
    dest: &Path,
    kind: OutputKind,
    replace: bool,
    inputs: &[&Path],
) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(dest) else {
        return check_inputs(dest, inputs);
    };
    if meta.file_type().is_symlink() {
        return Err(refuse(dest, "it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(refuse(dest, "it is not a directory".into()));
    }
    check_inputs(dest, inputs)?;
    match marked_kind(dest) {
        Some(k) if k != kind => {
            return Err(refuse(
                dest,
                format!("it holds perfcast {}, not {}", k.name(), kind.name()),
            ));
        }
        None if !kind.legacy(dest) => {
            return Err(refuse(
                dest,
                format!("it exists and does not hold perfcast {}", kind.name()),
            ));
        }
        _ => {}
    }
    if !replace {
        return Err(refuse(
            dest,
            "it already exists (pass `--force` to replace it)".into(),
        ));
    }
    Ok(())
}

/// Refuses a destination that is, holds, or lies inside an input.
fn check_inputs(dest: &Path, inputs: &[&Path]) -> Result<()> {
    let dest_real = real_path(dest);
    for input in inputs {
        let input_real = real_path(input);
        if input_real.starts_with(&dest_real) || dest_real.starts_with(&input_real) {
            return Err(refuse(
                dest,
                format!("it is or holds the input `{}`", input.display()),
            ));
        }
    }
    Ok(())
}

/// The canonical form of `path`, or of its nearest existing ancestor with the rest appended
/// (a destination may not exist yet).
fn real_path(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut rest = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return absolute,
        }
    }
}

/// The directory `path` is created in.
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates a staging directory for an output of `what` beside `dest` (named with this
/// process's id, so a later run can tell a live one from a leftover), after removing the
/// leftovers of dead runs there.
pub fn stage_beside(dest: &Path, what: &str) -> Result<tempfile::TempDir> {
    let parent = parent_of(dest);
    std::fs::create_dir_all(parent).map_err(io("create", parent))?;
    clean_stale(parent);
    let mut builder = tempfile::Builder::new();
    let prefix = format!("{STAGING_PREFIX}{what}-{}-", std::process::id());
    builder.prefix(&prefix);
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755));
    builder
        .tempdir_in(parent)
        .map_err(io("create a temp directory in", parent))
}

/// The process id a staging name carries (`.perfcast-<what>-<pid>-<random>`).
fn owner_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(STAGING_PREFIX)?;
    let mut parts = rest.split('-');
    parts.next()?;
    parts.next()?.parse().ok()
}

/// Whether process `pid` is alive (unknown platforms: assume it is, keep the directory).
fn alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let proc = Path::new("/proc");
    if proc.is_dir() {
        return proc.join(pid.to_string()).exists();
    }
    true
}

/// Removes staging and trash directories in `parent` whose owning process has exited, first
/// putting back an old output that a cut-short swap left aside. Best effort: errors are
/// ignored (another run may be cleaning the same entries).
fn clean_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = owner_of(&name) else { continue };
        if alive(pid) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        restore_aside(&path, parent);
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// If `trash` holds an old output whose destination is missing, renames it back.
fn restore_aside(trash: &Path, parent: &Path) {
    let old = trash.join("old");
    let Ok(target) = std::fs::read_to_string(trash.join(TRASH_TARGET)) else {
        return;
    };
    let dest = parent.join(target.trim());
    if old.is_dir() && std::fs::symlink_metadata(&dest).is_err() {
        let _ = std::fs::rename(&old, &dest);
    }
}

/// Moves the finished staging directory to `dest`, replacing an existing `dest` so that the
/// destination always holds the old output or the new one. The old one is deleted after.
pub fn replace_with(staged: tempfile::TempDir, dest: &Path) -> Result<()> {
    if std::fs::symlink_metadata(dest).is_err() {
        std::fs::rename(staged.path(), dest).map_err(io("rename into", dest))?;
        let _ = staged.keep();
        return Ok(());
    }
    if exchange(staged.path(), dest).is_ok() {
        // `staged` now holds the old output; dropping it deletes it.
        return Ok(());
    }
    // No atomic exchange here: move the old output aside (recorded, so a later run can put it
    // back should this one be killed before the next rename), then move the new one in.
    let trash = stage_beside(dest, "replaced")?;
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::fs::write(trash.path().join(TRASH_TARGET), name)
        .map_err(io("write", &trash.path().join(TRASH_TARGET)))?;
    let old = trash.path().join("old");
    std::fs::rename(dest, &old).map_err(io("rename aside", dest))?;
    if let Err(e) = std::fs::rename(staged.path(), dest) {
        let _ = std::fs::rename(&old, dest);
        return Err(io("rename into", dest)(e));
    }
    let _ = staged.keep();
    drop(trash);
    Ok(())
}

#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(std::io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged_with(dest: &Path, file: &str, kind: OutputKind) -> tempfile::TempDir {
        let staged = stage_beside(dest, "test").unwrap();
        std::fs::write(staged.path().join(file), file).unwrap();
        mark(staged.path(), kind).unwrap();
        staged
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_an_output_of_its_kind_and_leaves_nothing_beside_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("out");
        check_destination(&dest, OutputKind::Models, false, &[]).unwrap();
        replace_with(staged_with(&dest, "a", OutputKind::Models), &dest).unwrap();
        assert!(dest.join("a").is_file());
        // Existing: refused without replace, replaced with it.
        let err = check_destination(&dest, OutputKind::Models, false, &[]).unwrap_err();
        assert!(err.to_string().contains("--force"), "{err}");
        check_destination(&dest, OutputKind::Models, true, &[]).unwrap();
        replace_with(staged_with(&dest, "b", OutputKind::Models), &dest).unwrap();
        assert!(dest.join("b").is_file() && !dest.join("a").exists());
        assert_eq!(names(tmp.path()), vec!["out"]);
    }

    #[test]
    fn refuses_folders_that_are_not_its_outputs_or_hold_inputs() {
        let tmp = tempfile::tempdir().unwrap();
        let docs = tmp.path().join("mydocs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join("thesis.tex"), "x").unwrap();
        for kind in [OutputKind::Models, OutputKind::Bundle, OutputKind::Import] {
            let err = check_destination(&docs, kind, true, &[]).unwrap_err();
            assert!(err.to_string().contains("not replacing it"), "{err}");
        }
        // A bundle is not a models directory and the other way round.
        let bundle = tmp.path().join("b");
        std::fs::create_dir_all(&bundle).unwrap();
        mark(&bundle, OutputKind::Bundle).unwrap();
        assert!(check_destination(&bundle, OutputKind::Models, true, &[]).is_err());
        check_destination(&bundle, OutputKind::Bundle, true, &[]).unwrap();
        // Inputs: the destination may not be, hold or sit inside one.
        let data = tmp.path().join("ds");
        std::fs::create_dir_all(data.join("cpu")).unwrap();
        std::fs::write(data.join("report.json"), "{}").unwrap();
        let err = check_destination(&data, OutputKind::Models, true, &[&data]).unwrap_err();
        assert!(err.to_string().contains("input"), "{err}");
        let inner = data.join("cpu");
        assert!(check_destination(&data, OutputKind::Models, true, &[&inner]).is_err());
        let below = data.join("cpu/new");
        assert!(check_destination(&below, OutputKind::Models, true, &[&data]).is_err());
    }

    #[test]
    fn stale_staging_directories_are_removed_and_an_aside_output_restored() {
        let tmp = tempfile::tempdir().unwrap();
        // A dead owner: pid 0 never names a user process.
        let dead = tmp.path().join(".perfcast-train-0-abc");
        std::fs::create_dir_all(dead.join("x")).unwrap();
        // A cut-short swap: the old output aside, its destination gone.
        let trash = tmp.path().join(".perfcast-replaced-0-def");
        std::fs::create_dir_all(trash.join("old")).unwrap();
        std::fs::write(trash.join("old/keep"), "k").unwrap();
        std::fs::write(trash.join(TRASH_TARGET), "models").unwrap();
        // A live owner (this process) and an unrelated hidden folder stay.
        let live = tmp
            .path()
            .join(format!(".perfcast-train-{}-xyz", std::process::id()));
        std::fs::create_dir_all(&live).unwrap();
        std::fs::create_dir_all(tmp.path().join(".other")).unwrap();
        clean_stale(tmp.path());
        let left = names(tmp.path());
        assert!(tmp.path().join("models/keep").is_file(), "{left:?}");
        assert!(!dead.exists() && !trash.exists(), "{left:?}");
        assert!(
            live.exists() && tmp.path().join(".other").exists(),
            "{left:?}"
        );
    }
}
