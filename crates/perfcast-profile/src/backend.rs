//! burn backends, chosen in this one place.
//!
//! Flex (burn 0.22's pure-Rust CPU backend) and NdArray are always built; wgpu only with the
//! `wgpu` cargo feature. Everything else takes a [`burn::tensor::Device`] and is backend-agnostic.

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A burn backend perfcast can measure on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// burn-flex, pure Rust; the default (faster on this project's CPU measurements overall).
    Flex,
    /// burn-ndarray (deprecated upstream in burn 0.22, kept selectable).
    Ndarray,
    /// burn-wgpu (GPU, or Mesa's software Vulkan); needs the `wgpu` feature.
    Wgpu,
}

impl Backend {
    /// CPU backends compiled into every build.
    pub const CPU: [Backend; 2] = [Backend::Flex, Backend::Ndarray];

    /// Name as in datasets and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Flex => "flex",
            Backend::Ndarray => "ndarray",
            Backend::Wgpu => "wgpu",
        }
    }

    /// Whether this build can run the backend.
    pub fn available(self) -> bool {
        match self {
            Backend::Flex | Backend::Ndarray => true,
            Backend::Wgpu => cfg!(feature = "wgpu"),
        }
    }

    /// Whether the backend computes on the host CPU (so the thread count applies).
    pub fn is_cpu(self) -> bool {
        !matches!(self, Backend::Wgpu)
    }

    /// A device of this backend; the allocator keeps freed memory from here on
    /// ([`crate::heap`]), so every measurement sees the same allocation costs.
    pub fn device(self) -> Result<Device> {
        crate::heap::keep_freed_memory();
        match self {
            Backend::Flex => Ok(Device::flex()),
            #[allow(deprecated)] // NdArray stays selectable for comparison
            Backend::Ndarray => Ok(Device::ndarray()),
            Backend::Wgpu => wgpu_device(),
        }
    }
}

#[cfg(feature = "wgpu")]
fn wgpu_device() -> Result<Device> {
    Ok(Device::wgpu(burn::tensor::DeviceKind::DefaultDevice))
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_device() -> Result<Device> {
    Err(Error::Backend {
        name: "wgpu".into(),
        reason: "this build has no GPU backend; rebuild with `--features wgpu`".into(),
    })
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Backend {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "flex" => Ok(Backend::Flex),
            "ndarray" => Ok(Backend::Ndarray),
            "wgpu" => Ok(Backend::Wgpu),
            other => Err(Error::Backend {
                name: other.into(),
                reason: "unknown backend (expected `flex`, `ndarray` or `wgpu`)".into(),
            }),
        }
    }
}
