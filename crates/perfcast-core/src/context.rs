//! What besides the module decides its latency: batch, phase, threads, background load.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Which pass is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// One forward pass.
    Inference,
    /// One training step of the module: forward and backward (input and weight gradients).
    Training,
}

impl Phase {
    /// The phase's name in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Inference => "inference",
            Phase::Training => "training",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Phase {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "inference" | "forward" | "fwd" => Ok(Phase::Inference),
            "training" | "train" | "backward" => Ok(Phase::Training),
            other => Err(Error::InvalidContext(format!(
                "unknown phase `{other}` (expected `inference` or `training`)"
            ))),
        }
    }
}

/// Largest batch a context may hold: 2^24 samples. Batch-wide counts are computed in `f64`
/// (features) or checked integers, so this bounds them without any overflow.
pub const MAX_BATCH: usize = 1 << 24;

/// The context of one measurement or query.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// Samples per call.
    pub batch: usize,
    /// Forward only, or forward and backward.
    pub phase: Phase,
    /// Compute threads the backend may use.
    pub threads: usize,
    /// Share of the device's cores kept busy by background load while measuring, in [0, 1).
    pub utilisation: f64,
}

impl Context {
    /// Checks ranges; errors name the value.
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 {
            return Err(Error::InvalidContext(
                "`batch` must be at least 1, got 0".into(),
            ));
        }
        if self.batch > MAX_BATCH {
            return Err(Error::InvalidContext(format!(
                "`batch` must be at most {MAX_BATCH} (2^24), got {}",
                self.batch
            )));
        }
        if self.threads == 0 {
            return Err(Error::InvalidContext(
                "`threads` must be at least 1, got 0".into(),
            ));
        }
        if !(self.utilisation.is_finite() && (0.0..1.0).contains(&self.utilisation)) {
            return Err(Error::InvalidContext(format!(
                "`utilisation` must be in [0, 1), got {}",
                self.utilisation
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_parses_aliases_and_rejects_others() {
        assert_eq!("forward".parse::<Phase>().unwrap(), Phase::Inference);
        assert_eq!("Train".parse::<Phase>().unwrap(), Phase::Training);
        assert!(
            "sideways"
                .parse::<Phase>()
                .unwrap_err()
                .to_string()
                .contains("sideways")
        );
    }

    #[test]
    fn context_rejects_out_of_range_values() {
        let ok = Context {
            batch: 1,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.5,
        };
        assert!(ok.validate().is_ok());
        let bad = Context {
            utilisation: f64::NAN,
            ..ok.clone()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("NaN"));
        let bad = Context { batch: 0, ..ok };
        assert!(bad.validate().unwrap_err().to_string().contains("`batch`"));
    }
}

/// A module with its own context fields, each optional: one entry of `perfcast predict
/// --modules-file` and of `POST /v1/predict` (`{"kind": "conv2d", ..., "batch": 8}`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ModuleQuery {
    /// The module.
    #[serde(flatten)]
    pub spec: crate::spec::ModuleSpec,
    /// Batch size; default the caller's.
    pub batch: Option<usize>,
    /// Phase; default the caller's.
    pub phase: Option<Phase>,
    /// Compute threads; default the caller's.
    pub threads: Option<usize>,
}

impl ModuleQuery {
    /// The query's context: its own fields, the `defaults`' where it has none.
    pub fn context(&self, defaults: &Context) -> Context {
        Context {
            batch: self.batch.unwrap_or(defaults.batch),
            phase: self.phase.unwrap_or(defaults.phase),
            threads: self.threads.unwrap_or(defaults.threads),
            utilisation: defaults.utilisation,
        }
    }
}
