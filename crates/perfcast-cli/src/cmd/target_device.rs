//! The device `perfcast predict` predicts for: `--device-spec <file.json>` or `--device <name>`
//! (the table of known GPUs), checked field by field with one-line errors naming the field and
//! the file.

use std::path::Path;

use perfcast_core::DeviceSpec;
use perfcast_data::import::known;

/// Reads a device spec file ([`DeviceSpec::read_file`]: perfcast's format or NeuSight's).
pub fn read_device_spec(path: &Path) -> anyhow::Result<DeviceSpec> {
    Ok(DeviceSpec::read_file(path)?)
}

/// The device `--device-spec` or `--device` names, if either is given.
pub fn target_device(
    spec_file: Option<&Path>,
    name: Option<&str>,
) -> anyhow::Result<Option<DeviceSpec>> {
    match (spec_file, name) {
        (Some(path), _) => Ok(Some(read_device_spec(path)?)),
        (None, Some(name)) => Ok(Some(known::lookup(name).map_err(|e| {
            anyhow::anyhow!(
                "{e}\n\nhint: `perfcast predict --list-devices` lists them, or pass \
                             `--device-spec <file.json>`"
            )
        })?)),
        (None, None) => Ok(None),
    }
}
