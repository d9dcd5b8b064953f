//! The architecture of a MEDN network (saved beside every checkpoint and in every saved model):
//! the config is the predictor's ([`MednConfig`]); building its burn network is here.

use burn::nn::{DropoutConfig, LayerNormConfig, LinearConfig};
use burn::tensor::Device;
pub use perfcast_predict::medn::MednConfig;

use super::model::{DecoderHead, MednNet, ResidualBlock};

/// Building the burn network a [`MednConfig`] describes.
pub trait InitNet {
    /// A freshly initialised network on `device`.
    fn init(&self, device: &Device) -> MednNet;
}

impl InitNet for MednConfig {
    fn init(&self, device: &Device) -> MednNet {
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
}
