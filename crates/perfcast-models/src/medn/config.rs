//! The architecture of a MEDN network, as a burn `Config` (saved beside every checkpoint).

use burn::config::Config;
use burn::nn::{DropoutConfig, LayerNormConfig, LinearConfig};
use burn::tensor::Device;

use super::model::{DecoderHead, MednNet, ResidualBlock};

/// Shape of one MEDN network: an encoder from `d_input` standardised features to a `latent`
/// vector, and one decoder head per task.
#[derive(Config, Debug, PartialEq)]
pub struct MednConfig {
    /// Width of a feature row.
    pub d_input: usize,
    /// Number of decoder heads (targets).
    pub tasks: usize,
    /// Hidden width of the encoder.
    #[config(default = 64)]
    pub width: usize,
    /// Residual blocks in the encoder.
    #[config(default = 2)]
    pub depth: usize,
    /// Width of the latent vector the heads share.
    #[config(default = 32)]
    pub latent: usize,
    /// Hidden width of each decoder head.
    #[config(default = 32)]
    pub head_width: usize,
    /// Dropout inside the residual blocks while training.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// A linear path from the inputs straight to every output, added to the heads (wide and
    /// deep): the log-linear trend of latency in log features comes for free and the deep part
    /// learns what bends it.
    #[config(default = true)]
    pub skip: bool,
}

impl MednConfig {
    /// A freshly initialised network on `device`.
    pub fn init(&self, device: &Device) -> MednNet {
        MednNet {
            input: LinearConfig::new(self.d_input, self.width).init(device),
            blocks: (0..self.depth)
                .map(|_| ResidualBlock {
                    norm: LayerNormConfig::new(self.width).init(device),
                    linear: LinearConfig::new(self.width, self.width).init(device),
                    dropout: DropoutConfig::new(self.dropout).init(),
                })
                .collect(),
            out_norm: LayerNormConfig::new(self.width).init(device),
            latent: LinearConfig::new(self.width, self.latent).init(device),
            heads: (0..self.tasks)
                .map(|_| DecoderHead {
                    hidden: LinearConfig::new(self.latent, self.head_width).init(device),
                    out: LinearConfig::new(self.head_width, 1).init(device),
                })
                .collect(),
            skip: self
                .skip
                .then(|| LinearConfig::new(self.d_input, self.tasks).init(device)),
        }
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
