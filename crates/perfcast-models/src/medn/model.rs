//! The MEDN network in burn: encoder (input projection, pre-norm residual blocks, latent
//! projection) and one small decoder head per task.

use burn::module::Module;
use burn::nn::{Dropout, LayerNorm, Linear};
use burn::tensor::Tensor;
use burn::tensor::activation::relu;

/// `x + dropout(relu(linear(layer_norm(x))))`.
#[derive(Module, Debug)]
pub struct ResidualBlock {
    /// Pre-normalisation.
    pub norm: LayerNorm,
    /// Width-preserving projection.
    pub linear: Linear,
    /// Dropout on the branch.
    pub dropout: Dropout,
}

impl ResidualBlock {
    /// `[n, width] -> [n, width]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let branch = self
            .dropout
            .forward(relu(self.linear.forward(self.norm.forward(x.clone()))));
        x + branch
    }
}

/// `out(relu(hidden(z)))`: one target from the shared latent vector.
#[derive(Module, Debug)]
pub struct DecoderHead {
    /// Latent to hidden.
    pub hidden: Linear,
    /// Hidden to one output.
    pub out: Linear,
}

impl DecoderHead {
    /// `[n, latent] -> [n, 1]`.
    pub fn forward(&self, z: Tensor<2>) -> Tensor<2> {
        self.out.forward(relu(self.hidden.forward(z)))
    }
}

/// Multi-task encoder-decoder network.
#[derive(Module, Debug)]
pub struct MednNet {
    /// Features to the encoder width.
    pub input: Linear,
    /// Residual blocks.
    pub blocks: Vec<ResidualBlock>,
    /// Normalisation before the latent projection.
    pub out_norm: LayerNorm,
    /// Encoder width to the latent vector.
    pub latent: Linear,
    /// One head per task.
    pub heads: Vec<DecoderHead>,
    /// Inputs straight to the outputs, when configured.
    pub skip: Option<Linear>,
}

impl MednNet {
    /// The shared latent vector, `[n, d_input] -> [n, latent]`.
    pub fn encode(&self, x: Tensor<2>) -> Tensor<2> {
        let mut h = self.input.forward(x);
        for block in &self.blocks {
            h = block.forward(h);
        }
        relu(self.latent.forward(self.out_norm.forward(h)))
    }

    /// Every head's output (standardised log latency), `[n, d_input] -> [n, tasks]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let z = self.encode(x.clone());
        let outs: Vec<Tensor<2>> = self.heads.iter().map(|h| h.forward(z.clone())).collect();
        let deep = Tensor::cat(outs, 1);
        match &self.skip {
            Some(skip) => deep + skip.forward(x),
            None => deep,
        }
    }
}
