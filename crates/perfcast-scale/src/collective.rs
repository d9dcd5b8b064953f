//! How long an all-reduce of the gradients takes under a communication strategy.
//!
//! Every cost is the `alpha`-`beta` model over a [`Link`]: a message of `m` bytes costs
//! `alpha + m / B`. `P` devices all-reduce `S` bytes:
//!
//! - **ring** (Patarasuk and Yuan, 2009; NCCL, Horovod): a reduce-scatter then an all-gather,
//!   each `P - 1` steps in which every device sends `S / P` bytes to its neighbour:
//!   `2 (P-1)/P * S/B + 2 (P-1) alpha`. Bandwidth-optimal; latency grows linearly with `P`.
//! - **tree**: a binary tree, gradients reduced up to the root and broadcast back down,
//!   pipelined in `k` chunks: `2 (d + k - 1) (alpha + S / (k B))` with `d = ceil(log2 P)` and
//!   the `k` that minimises it. `k = 1` is the textbook binomial-tree cost `2 d (alpha + S/B)`
//!   (Thakur et al., 2005); large `k` approaches `2 S/B`, the bandwidth NCCL's double binary
//!   tree reaches, with a latency that grows with `log2 P` only.
//! - **parameter server** with `servers` shards on their own links: every worker pushes `S`
//!   and pulls `S`; each server receives and sends `P S / servers`, so the busier end decides:
//!   `2 (alpha + max(1, P / servers) S / B)`.
//! - **hierarchical** (Horovod's hierarchical all-reduce; 2D rings): devices in nodes of `g`.
//!   A ring reduce-scatter and all-gather inside each node over the intra-node link,
//!   `2 (g-1)/g * S/B_intra + 2 (g-1) alpha_intra`, and between them each of the `g` local
//!   ranks all-reduces its `S/g` shard across the `N = ceil(P/g)` nodes by ring or tree over
//!   the inter-node link, whose bandwidth the node's `g` ranks share. With one NIC per node
//!   the inter-node ring costs `2 (N-1)/N * S/B_inter + 2 (N-1) alpha_inter`.
//!
//! One device communicates nothing: every strategy costs 0 at `P = 1`, the single-device
//! baseline scaling efficiency is measured against.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::link::Link;
use crate::measured::Collectives;
// The ring formula lives with the link so measured fits can fall back to it without a circle.
pub use crate::link::ring_allreduce_s;

/// Smallest chunk a pipelined tree splits a message into: below it per-chunk overheads
/// dominate (NCCL's chunks are hundreds of KiB).
const MIN_TREE_CHUNK_BYTES: f64 = 64.0 * 1024.0;

/// The algorithm between nodes of a hierarchical all-reduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InterNode {
    /// Ring across nodes.
    Ring,
    /// Pipelined binary tree across nodes.
    Tree,
}

/// How gradients are exchanged in data-parallel training.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Strategy {
    /// Workers push gradients to parameter servers and pull the parameters back.
    ParameterServer {
        /// Server shards, each on its own link.
        servers: usize,
    },
    /// Ring all-reduce.
    Ring,
    /// Pipelined binary-tree all-reduce.
    Tree,
    /// Ring inside nodes, ring or tree between them.
    Hierarchical {
        /// Devices per node.
        gpus_per_node: usize,
        /// The link between nodes (shared by a node's devices); the strategy's `link` argument
        /// is the link inside a node.
        inter_link: Link,
        /// The algorithm between nodes.
        inter: InterNode,
    },
    /// All-reduces priced by fits to measured timings where they cover the device count
    /// (inside one node), by `beyond` elsewhere.
    Fitted {
        /// The fits.
        fits: Box<Collectives>,
        /// The strategy for what the fits do not cover.
        beyond: Box<Strategy>,
    },
}

impl Strategy {
    /// A short name for tables.
    pub fn name(&self) -> String {
        match self {
            Strategy::ParameterServer { servers } => format!("parameter server ({servers})"),
            Strategy::Ring => "ring all-reduce".into(),
            Strategy::Tree => "tree all-reduce".into(),
            Strategy::Hierarchical {
                gpus_per_node,
                inter_link,
                inter,
            } => format!(
                "hierarchical ({gpus_per_node}/node, {} between nodes over {})",
                match inter {
                    InterNode::Ring => "ring",
                    InterNode::Tree => "tree",
                },
                inter_link.name
            ),
            Strategy::Fitted { fits, beyond } => match fits.max_allreduce_gpus() {
                Some(max) => format!(
                    "all-reduce from fit `{}` up to {max} devices, {} beyond",
                    fits.name,
                    beyond.name()
                ),
                None => format!(
                    "{} (fit `{}` has no all-reduce inside a node)",
                    beyond.name(),
                    fits.name
                ),
            },
        }
    }

    /// Checks the strategy's parameters; errors name the value.
    pub fn validate(&self) -> Result<()> {
        match self {
            Strategy::ParameterServer { servers: 0 } => Err(Error::invalid(
                "strategy",
                "a parameter server needs at least 1 server, got 0",
            )),
            Strategy::Hierarchical {
                gpus_per_node: 0, ..
            } => Err(Error::invalid(
                "strategy",
                "`gpus_per_node` must be at least 1, got 0",
            )),
            Strategy::Hierarchical { inter_link, .. } => inter_link.validate(),
            Strategy::Fitted { beyond, .. } => beyond.validate(),
            _ => Ok(()),
        }
    }

    /// Whether gradient exchange can start while the backward pass still runs. Every
    /// data-parallel strategy here can: a layer's gradients are final once its backward is
    /// done, and ring, tree and hierarchical all-reduces as well as parameter-server pushes
    /// work on any slice of them (PyTorch DDP and Horovod bucket them; BytePS and
    /// ps-lite push per tensor).
    pub fn overlaps_backward(&self) -> bool {
        true
    }

    /// Seconds to all-reduce `bytes` over `devices` devices, `link` being the link between
    /// devices (inside a node, for the hierarchical strategy).
    pub fn allreduce_s(&self, devices: usize, bytes: f64, link: &Link) -> Result<f64> {
        self.validate()?;
        link.validate()?;
        if devices == 0 {
            return Err(Error::invalid(
                "device count",
                "at least 1 device is needed, got 0",
            ));
        }
        if !(bytes.is_finite() && bytes >= 0.0) {
            return Err(Error::invalid(
                "gradient size",
                format!("must be a non-negative number of bytes, got {bytes}"),
            ));
        }
        Ok(match self {
            Strategy::Ring => ring_allreduce_s(devices, bytes, link),
            Strategy::Tree => tree_allreduce_s(devices, bytes, link),
            Strategy::ParameterServer { servers } => {
                parameter_server_s(devices, *servers, bytes, link)
            }
            Strategy::Hierarchical {
                gpus_per_node,
                inter_link,
                inter,
            } => hierarchical_s(devices, *gpus_per_node, bytes, link, inter_link, *inter),
            Strategy::Fitted { fits, beyond } => {
                // The fits are of one node: a hierarchical strategy's devices fill nodes first.
                let inside = match beyond.as_ref() {
                    Strategy::Hierarchical { gpus_per_node, .. } => devices <= *gpus_per_node,
                    _ => true,
                };
                match fits.allreduce_s(devices, bytes).filter(|_| inside) {
                    Some(s) => s,
                    None => beyond.allreduce_s(devices, bytes, link)?,
                }
            }
        })
    }
}

/// Pipelined binary-tree all-reduce (reduce up, broadcast down) with the best chunk count.
pub fn tree_allreduce_s(devices: usize, bytes: f64, link: &Link) -> f64 {
    if devices <= 1 {
        return 0.0;
    }
    let depth = (devices as f64).log2().ceil();
    let s = bytes / link.bytes_per_s();
    let alpha = link.latency_s();
    let cost = |k: f64| 2.0 * (depth + k - 1.0) * (alpha + s / k);
    let max_chunks = (bytes / MIN_TREE_CHUNK_BYTES).floor().max(1.0);
    // d/dk of the cost is zero at k = sqrt((d - 1) s / alpha); try the integers around it.
    let best = if alpha > 0.0 {
        ((depth - 1.0) * s / alpha).sqrt()
    } else {
        max_chunks
    }
    .clamp(1.0, max_chunks);
    [best.floor(), best.ceil()]
        .into_iter()
        .map(|k| cost(k.clamp(1.0, max_chunks)))
        .fold(f64::INFINITY, f64::min)
}

/// Parameter servers: push and pull, the busier of a worker's and a server's links decides.
pub fn parameter_server_s(devices: usize, servers: usize, bytes: f64, link: &Link) -> f64 {
    if devices <= 1 {
        return 0.0;
    }
    let load = (devices as f64 / servers.max(1) as f64).max(1.0);
    2.0 * (link.latency_s() + load * bytes / link.bytes_per_s())
}

/// Hierarchical all-reduce: ring inside nodes of `gpus_per_node`, `inter` between nodes.
pub fn hierarchical_s(
    devices: usize,
    gpus_per_node: usize,
    bytes: f64,
    intra: &Link,
    inter_link: &Link,
    inter: InterNode,
) -> f64 {
    if devices <= 1 {
        return 0.0;
    }
    let g = gpus_per_node.clamp(1, devices);
    // A partly filled last node is modelled as full: the fullest node decides.
    let nodes = devices.div_ceil(g);
    let intra_s = ring_allreduce_s(g, bytes, intra);
    if nodes == 1 {
        return intra_s;
    }
    let shard = bytes / g as f64;
    let shared = inter_link.shared(g);
    let inter_s = match inter {
        InterNode::Ring => ring_allreduce_s(nodes, shard, &shared),
        InterNode::Tree => tree_allreduce_s(nodes, shard, &shared),
    };
    intra_s + inter_s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(gbs: f64, us: f64) -> Link {
        Link::custom(gbs, us).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
    }

    #[test]
    fn ring_matches_the_closed_form() {
        // 2(P-1)/P * S/B + 2(P-1) alpha, for several sizes, links and device counts.
        for (gbs, us) in [(10.0, 5.0), (300.0, 3.4), (1.25, 30.0)] {
            let l = link(gbs, us);
            let (b, alpha) = (gbs * 1e9, us * 1e-6);
            for bytes in [0.0, 4096.0, 102_228_128.0, 1e9] {
                for p in [1usize, 2, 3, 4, 8, 13, 64] {
                    let pf = p as f64;
                    let closed = 2.0 * (pf - 1.0) / pf * bytes / b + 2.0 * (pf - 1.0) * alpha;
                    let got = Strategy::Ring.allreduce_s(p, bytes, &l).unwrap();
                    assert!(close(got, closed), "P={p} S={bytes}: {got} vs {closed}");
                }
            }
        }
        // A hand-worked case: 4 devices, 100 MB, 10 GB/s, 5 us: 0.015 s + 30 us.
        let got = ring_allreduce_s(4, 1e8, &link(10.0, 5.0));
        assert!(close(got, 0.015_03), "{got}");
    }

    #[test]
    fn ring_closed_form_equals_its_steps() {
        // The algorithm itself: 2(P-1) steps, each rank sending one S/P chunk at once.
        let l = link(25.0, 9.6);
        for p in [2usize, 5, 8, 32] {
            let bytes = 123_456_789.0;
            let steps: f64 = (0..2 * (p - 1))
                .map(|_| l.transfer_s(bytes / p as f64))
                .sum();
            assert!(close(ring_allreduce_s(p, bytes, &l), steps), "P={p}");
        }
    }

    #[test]
    fn tree_is_binomial_for_small_messages_and_near_two_s_over_b_for_large() {
        let l = link(10.0, 10.0);
        // One 4 KiB chunk: k = 1, 2 d (alpha + S/B) with d = 3 for 8 devices.
        let small = tree_allreduce_s(8, 4096.0, &l);
        assert!(close(small, 6.0 * (10e-6 + 4096.0 / 1e10)), "{small}");
        // 1 GB: close to 2 S/B = 0.2 s, above it, and above the ring at 8 devices.
        let large = tree_allreduce_s(8, 1e9, &l);
        assert!(large > 0.2 && large < 0.21, "{large}");
        assert!(large > ring_allreduce_s(8, 1e9, &l));
        // Latency-bound: with tiny messages and many devices the tree beats the ring.
        assert!(tree_allreduce_s(256, 1024.0, &l) < ring_allreduce_s(256, 1024.0, &l));
        assert_eq!(tree_allreduce_s(1, 1e9, &l), 0.0);
    }

    #[test]
    fn parameter_server_is_limited_by_the_server_link() {
        let l = link(10.0, 0.0);
        // One server, 8 workers: it receives 8 S and sends 8 S.
        assert!(close(parameter_server_s(8, 1, 1e9, &l), 2.0 * 8.0 * 0.1));
        // As many servers as workers: each end moves S each way.
        assert!(close(parameter_server_s(8, 8, 1e9, &l), 2.0 * 0.1));
        assert_eq!(parameter_server_s(1, 1, 1e9, &l), 0.0);
    }

    #[test]
    fn hierarchical_reduces_to_rings_at_the_edges() {
        let (nv, ib) = (link(300.0, 3.4), link(25.0, 9.6));
        let h = |g: usize, p: usize| {
            Strategy::Hierarchical {
                gpus_per_node: g,
                inter_link: ib.clone(),
                inter: InterNode::Ring,
            }
            .allreduce_s(p, 1e8, &nv)
            .unwrap()
        };
        // One node: a ring over the intra-node link.
        assert!(close(h(8, 8), ring_allreduce_s(8, 1e8, &nv)));
        assert!(close(h(8, 4), ring_allreduce_s(4, 1e8, &nv)));
        // One device per node: a ring over the inter-node link.
        assert!(close(h(1, 4), ring_allreduce_s(4, 1e8, &ib)));
        // 4 nodes of 8: intra ring + each node's NIC carrying a full inter-node ring.
        let want = ring_allreduce_s(8, 1e8, &nv) + 2.0 * 3.0 / 4.0 * 1e8 / 25e9 + 6.0 * 9.6e-6;
        assert!(close(h(8, 32), want), "{} vs {want}", h(8, 32));
        // Faster than a flat ring of 32 over the slow link.
        assert!(h(8, 32) < ring_allreduce_s(32, 1e8, &ib));
    }

    #[test]
    fn fitted_all_reduces_inside_a_node_and_the_formula_beyond() {
        use crate::measured::{Collective, Sample};
        // Timings of a 100 GB/s, 2 us-per-step ring on 2 to 8 GPUs, fitted.
        let l = link(100.0, 2.0);
        let samples: Vec<Sample> = [2usize, 4, 8]
            .iter()
            .flat_map(|&p| {
                (0..40).map(move |e| {
                    let bytes = 4096.0 * 1.3f64.powi(e);
                    Sample {
                        collective: Collective::AllReduce,
                        workers: p,
                        devices_per_node: p,
                        bytes,
                        time_s: ring_allreduce_s(p, bytes, &link(100.0, 2.0)),
                    }
                })
            })
            .collect();
        let fits = Collectives::fit("test", vec![], &samples).unwrap();
        let slow = link(10.0, 50.0);
        let fitted = Strategy::Fitted {
            fits: Box::new(fits.clone()),
            beyond: Box::new(Strategy::Ring),
        };
        // Inside the fitted range the measurements decide, not the (slow) link given.
        let got = fitted.allreduce_s(8, 1e8, &slow).unwrap();
        assert!(
            (got - ring_allreduce_s(8, 1e8, &l)).abs() < 1e-9 * got,
            "{got}"
        );
        // Beyond it, the ring formula over the link given.
        let got = fitted.allreduce_s(16, 1e8, &slow).unwrap();
        assert!(close(got, ring_allreduce_s(16, 1e8, &slow)), "{got}");
        assert!(
            fitted
                .name()
                .contains("fit `test` up to 8 devices, ring all-reduce beyond")
        );
        // A hierarchical strategy with 4 GPUs per node: 8 devices span two nodes.
        let h = Strategy::Hierarchical {
            gpus_per_node: 4,
            inter_link: slow.clone(),
            inter: InterNode::Ring,
        };
        let fitted = Strategy::Fitted {
            fits: Box::new(fits),
            beyond: Box::new(h.clone()),
        };
        let got = fitted.allreduce_s(8, 1e8, &slow).unwrap();
        assert!(close(got, h.allreduce_s(8, 1e8, &slow).unwrap()));
    }

    #[test]
    fn bad_parameters_are_refused() {
        let l = link(10.0, 1.0);
        let e = Strategy::ParameterServer { servers: 0 }
            .allreduce_s(4, 1.0, &l)
            .unwrap_err();
        assert!(e.to_string().contains("got 0"), "{e}");
        let e = Strategy::Ring.allreduce_s(0, 1.0, &l).unwrap_err();
        assert!(e.to_string().contains("got 0"), "{e}");
        let e = Strategy::Ring.allreduce_s(2, f64::NAN, &l).unwrap_err();
        assert!(e.to_string().contains("NaN"), "{e}");
    }
}
