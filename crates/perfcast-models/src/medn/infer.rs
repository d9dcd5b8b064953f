//! Weights copied between a trained burn network and the fast inference path
//! (perfcast-predict's [`FastNet`]: `f32` arrays and an allocation-free forward pass), out for
//! serving and back in for checkpoints and burn's own forward pass.

use burn::module::Param;
use burn::nn::{LayerNorm, Linear};
use burn::tensor::{Device, Tensor, TensorData};
pub use perfcast_predict::medn::infer::*;

use super::config::{InitNet, MednConfig};
use super::model::MednNet;
use crate::error::{Error, Result};

/// A [`FastNet`] to and from burn.
pub trait BurnWeights: Sized {
    /// Copies a burn network's weights out.
    fn from_burn(net: &MednNet) -> Result<Self>;

    /// A burn network holding these weights (for checkpoints and the burn forward).
    fn to_burn(&self, config: &MednConfig, device: &Device) -> Result<MednNet>;
}

impl BurnWeights for FastNet {
    fn from_burn(net: &MednNet) -> Result<FastNet> {
        Ok(FastNet {
            input: dense_from_burn(&net.input)?,
            blocks: net
                .blocks
                .iter()
                .map(|b| Ok((norm_from_burn(&b.norm)?, dense_from_burn(&b.linear)?)))
                .collect::<Result<_>>()?,
            out_norm: norm_from_burn(&net.out_norm)?,
            latent: dense_from_burn(&net.latent)?,
            heads: net
                .heads
                .iter()
                .map(|h| Ok((dense_from_burn(&h.hidden)?, dense_from_burn(&h.out)?)))
                .collect::<Result<_>>()?,
            skip: net.skip.as_ref().map(dense_from_burn).transpose()?,
        })
    }

    fn to_burn(&self, config: &MednConfig, device: &Device) -> Result<MednNet> {
        self.check(config)?;
        let mut net = config.init(device);
        dense_to_burn(&self.input, &mut net.input, device);
        for ((norm, dense), block) in self.blocks.iter().zip(&mut net.blocks) {
            norm_to_burn(norm, &mut block.norm, device);
            dense_to_burn(dense, &mut block.linear, device);
        }
        norm_to_burn(&self.out_norm, &mut net.out_norm, device);
        dense_to_burn(&self.latent, &mut net.latent, device);
        for ((hidden, out), head) in self.heads.iter().zip(&mut net.heads) {
            dense_to_burn(hidden, &mut head.hidden, device);
            dense_to_burn(out, &mut head.out, device);
        }
        if let (Some(dense), Some(skip)) = (&self.skip, &mut net.skip) {
            dense_to_burn(dense, skip, device);
        }
        Ok(net)
    }
}

fn dense_from_burn(l: &Linear) -> Result<Dense> {
    let w = floats(l.weight.val().into_data())?;
    let [d_in, d_out] = l.weight.val().dims();
    let b = match &l.bias {
        Some(b) => floats(b.val().into_data())?,
        None => vec![0.0; d_out],
    };
    Ok(Dense { d_in, d_out, w, b })
}

fn dense_to_burn(d: &Dense, l: &mut Linear, device: &Device) {
    l.weight = Param::from_tensor(Tensor::from_data(
        TensorData::new(d.w.clone(), [d.d_in, d.d_out]),
        device,
    ));
    l.bias = Some(Param::from_tensor(Tensor::from_data(
        TensorData::new(d.b.clone(), [d.d_out]),
        device,
    )));
}

fn norm_from_burn(n: &LayerNorm) -> Result<Norm> {
    let gamma = floats(n.gamma.val().into_data())?;
    let beta = match &n.beta {
        Some(b) => floats(b.val().into_data())?,
        None => vec![0.0; gamma.len()],
    };
    Ok(Norm { gamma, beta })
}

fn norm_to_burn(n: &Norm, l: &mut LayerNorm, device: &Device) {
    let d = n.gamma.len();
    l.gamma = Param::from_tensor(Tensor::from_data(
        TensorData::new(n.gamma.clone(), [d]),
        device,
    ));
    l.beta = Some(Param::from_tensor(Tensor::from_data(
        TensorData::new(n.beta.clone(), [d]),
        device,
    )));
}

fn floats(data: TensorData) -> Result<Vec<f32>> {
    data.convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| Error::InvalidData(format!("MEDN weights are not f32: {e:?}")))
}
