//! A dataset directory: `device.json` plus one Parquet file per module kind.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use perfcast_core::{DeviceSpec, ModuleKind};

use crate::atomic::write_atomic;
use crate::error::{Error, Result};
use crate::record::Record;
use crate::table;

/// File holding the device spec beside the Parquet files.
pub const DEVICE_FILE: &str = "device.json";

/// The file writers lock (an OS file lock) while they change a dataset's tables.
pub const LOCK_FILE: &str = ".perfcast.lock";

/// A dataset directory on disk (`datasets/<device>/`).
#[derive(Clone, Debug)]
pub struct DatasetDir {
    root: PathBuf,
}

impl DatasetDir {
    /// Opens an existing dataset directory (it must hold `device.json`).
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        if !root.join(DEVICE_FILE).is_file() {
            let hint = format!(
                "create one with `perfcast profile --out {}`",
                root.display()
            );
            return Err(Error::Missing {
                path: root,
                hint: perfcast_core::Hint::new(hint),
            });
        }
        Ok(DatasetDir { root })
    }

    /// Opens `root`, creating it with `device` when it does not exist yet.
    ///
    /// An existing directory must describe the same device: measurements of two machines never
    /// mix in one dataset.
    pub fn create_or_open(root: impl Into<PathBuf>, device: &DeviceSpec) -> Result<Self> {
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(|source| Error::Io {
            action: "create",
            path: root.clone(),
            source,
        })?;
        let dir = DatasetDir { root };
        let device_path = dir.root.join(DEVICE_FILE);
        if device_path.is_file() {
            let existing = dir.device()?;
            if existing.name != device.name {
                return Err(Error::schema(
                    &device_path,
                    format!(
                        "dataset was measured on `{}`, not on this device `{}`",
                        existing.name, device.name
                    ),
                ));
            }
        } else {
            let json = serde_json::to_string_pretty(device)
                .map_err(|e| Error::unreadable(&device_path, e))?;
            write_atomic(&device_path, json.as_bytes())?;
        }
        Ok(dir)
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The device spec stored beside the data.
    pub fn device(&self) -> Result<DeviceSpec> {
        let path = self.root.join(DEVICE_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            action: "read",
            path: path.clone(),
            source,
        })?;
        DeviceSpec::from_json(&text).map_err(|e| Error::schema(&path, e.to_string()))
    }

    /// Path of the Parquet file of one kind.
    pub fn module_path(&self, kind: ModuleKind) -> PathBuf {
        self.root.join(format!("{}.parquet", kind.name()))
    }

    /// Kinds with a Parquet file, in [`ModuleKind::ALL`] order.
    pub fn kinds(&self) -> Vec<ModuleKind> {
        ModuleKind::ALL
            .into_iter()
            .filter(|k| self.module_path(*k).is_file())
            .collect()
    }

    /// Reads and validates every record of one kind (empty when the kind has no file).
    pub fn read(&self, kind: ModuleKind) -> Result<Vec<Record>> {
        let path = self.module_path(kind);
        if !path.exists() {
            return Ok(Vec::new());
        }
        let df = table::read_parquet(&path)?;
        table::from_frame(kind, &df, &path)
    }

    /// Keys ([`Record::key`]) of the rows already stored for a kind.
    pub fn measured_keys(&self, kind: ModuleKind) -> Result<HashSet<String>> {
        Ok(self.read(kind)?.iter().map(Record::key).collect())
    }

    /// Takes the dataset's write lock (an OS lock on [`LOCK_FILE`]), waiting while another
    /// process holds it; released when the returned file is dropped.
    fn lock(&self) -> Result<std::fs::File> {
        let path = self.root.join(LOCK_FILE);
        let io = |action: &'static str| {
            let path = path.clone();
            move |source| Error::Io {
                action,
                path,
                source,
            }
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("open the lock file"))?;
        file.lock().map_err(io("lock"))?;
        Ok(file)
    }

    /// Appends records of one kind atomically: the old file stays intact until the new one,
    /// holding the old rows and the new, replaces it by rename.
    ///
    /// Writers take the dataset's lock for the read-modify-write, so concurrent writers (two
    /// `profile --resume` runs on one dataset) wait for each other instead of losing rows; a
    /// record whose key ([`Record::key`]) the table already holds, or that repeats an earlier
    /// record of the call, is not stored again. Returns how many were stored.
    pub fn append(&self, kind: ModuleKind, records: &[Record]) -> Result<usize> {
        if records.is_empty() {
            return Ok(0);
        }
        if let Some(bad) = records.iter().find(|r| r.spec.kind() != kind) {
            return Err(Error::schema(
                &self.module_path(kind),
                format!(
                    "cannot append a `{}` row to the `{kind}` table",
                    bad.spec.kind()
                ),
            ));
        }
        let _lock = self.lock()?;
        let mut all = self.read(kind)?;
        let mut keys: HashSet<String> = all.iter().map(Record::key).collect();
        let before = all.len();
        all.extend(records.iter().filter(|r| keys.insert(r.key())).cloned());
        let stored = all.len() - before;
        if stored > 0 {
            self.write_unlocked(kind, &all)?;
        }
        Ok(stored)
    }

    /// Replaces the timings of stored rows (by key, [`Record::key`]) atomically, under the
    /// dataset's lock, so rows another writer appended meanwhile stay. Keys the table does not
    /// hold are ignored. Returns how many rows changed.
    pub fn replace_timings(
        &self,
        kind: ModuleKind,
        timings: &std::collections::HashMap<String, crate::Timing>,
    ) -> Result<usize> {
        if timings.is_empty() {
            return Ok(0);
        }
        let _lock = self.lock()?;
        let mut all = self.read(kind)?;
        let mut changed = 0;
        for record in &mut all {
            if let Some(t) = timings.get(&record.key())
                && record.timing() != Some(t)
            {
                record.outcome = crate::Outcome::Ok(t.clone());
                changed += 1;
            }
        }
        if changed > 0 {
            self.write_unlocked(kind, &all)?;
        }
        Ok(changed)
    }

    /// Replaces the table of one kind atomically, under the dataset's lock.
    pub fn write(&self, kind: ModuleKind, records: &[Record]) -> Result<()> {
        let _lock = self.lock()?;
        self.write_unlocked(kind, records)
    }

    fn write_unlocked(&self, kind: ModuleKind, records: &[Record]) -> Result<()> {
        let path = self.module_path(kind);
        let mut df = table::to_frame(kind, records).map_err(|e| Error::unreadable(&path, e))?;
        table::write_parquet_atomic(&path, &mut df)
    }
}
