//! The shape of one MEDN network, saved with every fitted model.
//!
//! Its serde form is the one burn's `#[derive(Config)]` gave it when MEDN first wrote
//! bundles (every field, in this order), so bundles read and write the same bytes;
//! perfcast-models builds the burn network of a config (`InitNet`).

use serde::{Deserialize, Serialize};

/// Shape of one MEDN network: an encoder from `d_input` standardised features to a `latent`
/// vector, and one decoder head per task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MednConfig {
    /// Width of a feature row.
    pub d_input: usize,
    /// Number of decoder heads (targets).
    pub tasks: usize,
    /// Hidden width of the encoder; default 64.
    pub width: usize,
    /// Residual blocks in the encoder; default 2.
    pub depth: usize,
    /// Width of the latent vector the heads share; default 32.
    pub latent: usize,
    /// Hidden width of each decoder head; default 32.
    pub head_width: usize,
    /// Dropout inside the residual blocks while training; default 0.
    pub dropout: f64,
    /// A linear path from the inputs straight to every output, added to the heads (wide and
    /// deep): the log-linear trend of latency in log features comes for free and the deep part
    /// learns what bends it; default true.
    pub skip: bool,
}

impl MednConfig {
    /// The default shape for `d_input` features and `tasks` heads.
    pub fn new(d_input: usize, tasks: usize) -> MednConfig {
        MednConfig {
            d_input,
            tasks,
            width: 64,
            depth: 2,
            latent: 32,
            head_width: 32,
            dropout: 0.0,
            skip: true,
        }
    }

    /// With the encoder width.
    pub fn with_width(self, width: usize) -> MednConfig {
        MednConfig { width, ..self }
    }

    /// With the number of residual blocks.
    pub fn with_depth(self, depth: usize) -> MednConfig {
        MednConfig { depth, ..self }
    }

    /// With the latent width.
    pub fn with_latent(self, latent: usize) -> MednConfig {
        MednConfig { latent, ..self }
    }

    /// With the heads' hidden width.
    pub fn with_head_width(self, head_width: usize) -> MednConfig {
        MednConfig { head_width, ..self }
    }

    /// With the training dropout.
    pub fn with_dropout(self, dropout: f64) -> MednConfig {
        MednConfig { dropout, ..self }
    }

    /// With or without the skip path.
    pub fn with_skip(self, skip: bool) -> MednConfig {
        MednConfig { skip, ..self }
    }

    /// Trainable parameters of the network.
    pub fn num_params(&self) -> usize {
        let lin = |i: usize, o: usize| i * o + o;
        lin(self.d_input, self.width)
            + self.depth * (2 * self.width + lin(self.width, self.width))
            + 2 * self.width
            + lin(self.width, self.latent)
            + self.tasks * (lin(self.latent, self.head_width) + lin(self.head_width, 1))
            + if self.skip {
                lin(self.d_input, self.tasks)
            } else {
                0
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_saved_form_is_every_field_in_order() {
        let c = MednConfig::new(73, 2).with_width(16).with_skip(false);
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"d_input":73,"tasks":2,"width":16,"depth":2,"latent":32,"head_width":32,"dropout":0.0,"skip":false}"#
        );
        // Fields it does not know are ignored, as burn's derived form ignored them.
        let back: MednConfig = serde_json::from_str(
            r#"{"d_input":73,"tasks":2,"width":16,"depth":2,"latent":32,"head_width":32,"dropout":0.0,"skip":false,"new":1}"#,
        )
        .unwrap();
        assert_eq!(back, c);
    }
}
