//! The dataset directories behind the paths a user names: a directory with a `device.json` is
//! one device's dataset; any other directory stands for every dataset directly inside it
//! (`datasets/neusight` is the five NeuSight GPUs).

use std::path::{Path, PathBuf};

use crate::dataset::{DEVICE_FILE, DatasetDir};
use crate::error::{Error, Result};

/// Resolves each path to one dataset, or to the datasets inside it (sorted by name), in the
/// order given.
pub fn resolve_datasets(paths: &[PathBuf]) -> Result<Vec<DatasetDir>> {
    let mut out: Vec<DatasetDir> = Vec::new();
    for path in paths {
        if path.join(DEVICE_FILE).is_file() {
            out.push(DatasetDir::open(path)?);
            continue;
        }
        if !path.is_dir() {
            return Err(
                Error::Input(format!("`{}` is not a dataset directory", path.display()))
                    .with_hint("`perfcast import` writes one per device"),
            );
        }
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| Error::Input(format!("reading `{}`: {e}", path.display())))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join(DEVICE_FILE).is_file())
            .collect();
        subdirs.sort();
        if subdirs.is_empty() {
            return Err(Error::Input(format!(
                "`{}` holds neither a `device.json` nor dataset directories with one",
                path.display()
            )));
        }
        for d in subdirs {
            out.push(DatasetDir::open(d)?);
        }
    }
    Ok(out)
}

/// Whether `dir` (of `device`) is named by one of `wanted`: its folder name, its device name,
/// or the device's slug.
pub fn names_device(dir: &Path, device: &perfcast_core::DeviceSpec, wanted: &[String]) -> bool {
    let folder = dir
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    wanted
        .iter()
        .any(|w| *w == folder || *w == device.name || perfcast_core::slugify(w) == device.slug())
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::DeviceSpec;

    fn device(name: &str) -> DeviceSpec {
        DeviceSpec {
            name: name.into(),
            ..perfcast_core::testing::cpu_device()
        }
    }

    #[test]
    fn a_dataset_is_itself_and_a_folder_is_the_datasets_inside_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let folder = tmp.path().join("gpus");
        for name in ["b-gpu", "a-gpu"] {
            DatasetDir::create_or_open(folder.join(name), &device(name)).expect("dataset");
        }
        std::fs::create_dir_all(folder.join("not-a-dataset")).expect("dir");
        let one = resolve_datasets(&[folder.join("b-gpu")]).expect("one");
        assert_eq!(one.len(), 1);
        let all = resolve_datasets(std::slice::from_ref(&folder)).expect("folder");
        let names: Vec<_> = all
            .iter()
            .map(|d| d.root().file_name().expect("name").to_owned())
            .collect();
        assert_eq!(names, ["a-gpu", "b-gpu"]);

        let empty = tmp.path().join("empty");
        std::fs::create_dir_all(&empty).expect("dir");
        let err = resolve_datasets(&[empty])
            .expect_err("no datasets")
            .to_string();
        assert!(err.contains("holds neither a `device.json`"), "{err}");
        let err = resolve_datasets(&[tmp.path().join("missing")]).expect_err("missing");
        assert_eq!(err.hint(), Some("`perfcast import` writes one per device"));
        let err = err.to_string();
        assert!(
            err.contains("is not a dataset directory\n\nhint: `perfcast import`"),
            "{err}"
        );
    }

    #[test]
    fn a_device_is_named_by_folder_name_or_slug() {
        let d = device("NVIDIA Tesla V100");
        let dir = Path::new("datasets/neusight/v100");
        assert!(names_device(dir, &d, &["v100".into()]));
        assert!(names_device(dir, &d, &["NVIDIA Tesla V100".into()]));
        assert!(names_device(dir, &d, &["nvidia-tesla-v100".into()]));
        assert!(!names_device(dir, &d, &["a100".into()]));
    }
}
