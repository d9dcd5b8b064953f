//! Collectives fitted to measured timings, in place of the link formula where a fit covers them.
//!
//! The measurements are NCCL timings as Vidur publishes them (one CSV per collective: columns
//! `num_workers`, `devices_per_node`, `size` in fp16 elements, `collective`, and
//! `time_stats.<collective>.median` in milliseconds). Rows are grouped by collective and by the
//! number of nodes they span, and each group is fitted with the latency-bandwidth model of its
//! algorithm on `p` GPUs:
//!
//! `time = overhead + latency * steps(p) + volume(p) * bytes / bus_bandwidth`
//!
//! with NCCL's ring factors: an all-reduce takes `2 (p-1)` steps and moves `2 (p-1)/p` of the
//! bytes per GPU (so the bandwidth is NCCL's "bus bandwidth"); a send/recv one step and all of
//! them. The model may be piecewise in the message size, one line below a switch and another
//! above it, as NCCL switches protocols (LL, LL128, Simple) with the size. Which form, where the
//! switch lies and whether the errors are weighed as squares or absolute values is chosen on
//! the largest quarter of the training messages held out, not on the rows it is fitted to.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::link::ring_allreduce_s;
use crate::link::{Link, MAX_LINK_GBS};

/// A collective operation the measurements cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// Ring all-reduce.
    AllReduce,
    /// One point-to-point send and receive.
    SendRecv,
}

impl Collective {
    /// The name in the CSV files and tables.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::SendRecv => "send_recv",
        }
    }

    fn parse(text: &str) -> Option<Collective> {
        match text.trim() {
            "all_reduce" => Some(Collective::AllReduce),
            "send_recv" => Some(Collective::SendRecv),
            _ => None,
        }
    }

    /// Latency-bound steps on `p` GPUs.
    pub fn steps(self, p: usize) -> f64 {
        match self {
            Collective::AllReduce => 2.0 * (p as f64 - 1.0),
            Collective::SendRecv => 1.0,
        }
    }

    /// Share of the message each GPU sends on `p` GPUs.
    pub fn volume(self, p: usize) -> f64 {
        match self {
            Collective::AllReduce => 2.0 * (p as f64 - 1.0) / p as f64,
            Collective::SendRecv => 1.0,
        }
    }
}

/// One measured collective.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// The operation.
    pub collective: Collective,
    /// GPUs taking part.
    pub workers: usize,
    /// GPUs per node among them.
    pub devices_per_node: usize,
    /// Message size in bytes.
    pub bytes: f64,
    /// Median time, seconds.
    pub time_s: f64,
}

impl Sample {
    /// Nodes the collective spans.
    pub fn nodes(&self) -> usize {
        self.workers.div_ceil(self.devices_per_node)
    }
}

/// Bytes per element of the measured messages (fp16).
pub const BYTES_PER_ELEMENT: f64 = 2.0;

/// Reads one Vidur network CSV; errors name the file, the line, the column and the value.
pub fn read_samples(path: &Path) -> Result<Vec<Sample>> {
    let bad = |message: String| Error::Collectives {
        path: path.to_path_buf(),
        message,
    };
    let file = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut reader = csv::Reader::from_reader(std::io::BufReader::new(file));
    let headers = reader
        .headers()
        .map_err(|e| bad(format!("header: {}", one_line(&e.to_string()))))?
        .clone();
    let column = |name: &str| {
        headers
            .iter()
            .position(|h| h.trim() == name)
            .ok_or_else(|| bad(format!("no `{name}` column")))
    };
    let workers_at = column("num_workers")?;
    let per_node_at = column("devices_per_node")?;
    let size_at = column("size")?;
    let collective_at = column("collective")?;
    let mut medians: BTreeMap<Collective, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, record) in reader.records().enumerate() {
        // Line 1 is the header.
        let line = i + 2;
        let record =
            record.map_err(|e| bad(format!("line {line}: {}", one_line(&e.to_string()))))?;
        let cell = |at: usize, name: &str| {
            record
                .get(at)
                .map(str::trim)
                .ok_or_else(|| bad(format!("line {line}: no `{name}` cell")))
        };
        let text = cell(collective_at, "collective")?;
        let collective = Collective::parse(text).ok_or_else(|| {
            bad(format!(
                "line {line}: `collective` is `{}`, not `all_reduce` or `send_recv`",
                one_line(text)
            ))
        })?;
        let median_at = match medians.get(&collective) {
            Some(&at) => at,
            None => {
                let at = column(&format!("time_stats.{}.median", collective.name()))?;
                medians.insert(collective, at);
                at
            }
        };
        let count = |at: usize, name: &str| -> Result<usize> {
            let text = cell(at, name)?;
            match text.parse::<usize>() {
                Ok(v) if v >= 1 => Ok(v),
                _ => Err(bad(format!(
                    "line {line}: `{name}` is `{}`, not a count of at least 1",
                    one_line(text)
                ))),
            }
        };
        let workers = count(workers_at, "num_workers")?;
        let devices_per_node = count(per_node_at, "devices_per_node")?;
        if devices_per_node > workers {
            return Err(bad(format!(
                "line {line}: `devices_per_node` {devices_per_node} is more than `num_workers` \
                 {workers}"
            )));
        }
        let size_text = cell(size_at, "size")?;
        let size: f64 = match size_text.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => v,
            Ok(v) if v < 0.0 => {
                return Err(bad(format!(
                    "line {line}: `size` is `{size_text}`, a negative message size"
                )));
            }
            _ => {
                return Err(bad(format!(
                    "line {line}: `size` is `{}`, not a number of elements",
                    one_line(size_text)
                )));
            }
        };
        let name = format!("time_stats.{}.median", collective.name());
        let ms_text = cell(median_at, &name)?;
        let ms: f64 = match ms_text.parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => v,
            _ => {
                return Err(bad(format!(
                    "line {line}: `{name}` is `{}`, not a positive time in ms",
                    one_line(ms_text)
                )));
            }
        };
        out.push(Sample {
            collective,
            workers,
            devices_per_node,
            bytes: size * BYTES_PER_ELEMENT,
            time_s: ms * 1e-3,
        });
    }
    if out.is_empty() {
        return Err(bad("no rows".into()));
    }
    Ok(out)
}

/// A cell or message cut to its first line and 60 characters, so errors stay one line.
fn one_line(text: &str) -> String {
    let first = text.lines().next().unwrap_or("");
    let mut s: String = first.chars().take(60).collect();
    if s.len() < first.len() {
        s.push_str("...");
    }
    s
}

/// One line of the piecewise model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Piece {
    /// The largest message this piece prices, bytes; `None` for the last piece.
    pub up_to_bytes: Option<f64>,
    /// Fixed cost per collective, microseconds.
    pub overhead_us: f64,
    /// Cost per step, microseconds.
    pub latency_us: f64,
    /// Bus bandwidth, GB/s: the bytes a GPU sends over the time they take.
    pub bus_bandwidth_gbs: f64,
}

/// The samples a fit was made from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleRange {
    /// GPU counts.
    pub workers: Vec<usize>,
    /// GPUs per node.
    pub devices_per_node: Vec<usize>,
    /// Smallest message, bytes.
    pub min_bytes: f64,
    /// Largest message, bytes.
    pub max_bytes: f64,
    /// Rows.
    pub rows: usize,
}

/// A collective on some nodes, fitted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectiveFit {
    /// The operation.
    pub collective: Collective,
    /// Nodes the measured collectives spanned.
    pub nodes: usize,
    /// The one GPU count this fit prices; `None`: any up to the largest it was fitted on,
    /// through the algorithm's step and volume factors.
    #[serde(default)]
    pub only_workers: Option<usize>,
    /// How the errors were weighed: `squared` or `absolute` (relative errors both).
    pub loss: Loss,
    /// The model's lines by message size.
    pub pieces: Vec<Piece>,
    /// What it was fitted on.
    pub fitted_on: SampleRange,
    /// MAPE, %, on the largest quarter of the training messages when the form was chosen
    /// (`None` when too few rows to hold any out).
    pub selection_mape: Option<f64>,
}

impl CollectiveFit {
    /// Seconds for `bytes` on `p` GPUs; nothing on one.
    pub fn time_s(&self, p: usize, bytes: f64) -> f64 {
        if p <= 1 && self.collective == Collective::AllReduce {
            return 0.0;
        }
        let piece = self
            .pieces
            .iter()
            .find(|pc| pc.up_to_bytes.is_none_or(|up| bytes <= up))
            .or(self.pieces.last());
        piece.map_or(0.0, |pc| {
            1e-6 * (pc.overhead_us + pc.latency_us * self.collective.steps(p))
                + self.collective.volume(p) * bytes / (pc.bus_bandwidth_gbs * 1e9)
        })
    }

    /// `all_reduce, 1 node, 2-8 GPUs` for tables.
    pub fn describe(&self) -> String {
        let w = &self.fitted_on.workers;
        let gpus = match (w.first(), w.last()) {
            (Some(a), Some(b)) if a != b => format!("{a}-{b} GPUs"),
            (Some(a), _) => format!("{a} GPUs"),
            _ => "no GPUs".into(),
        };
        let nodes = if self.nodes == 1 { "node" } else { "nodes" };
        let only = if self.only_workers.is_some() {
            " only"
        } else {
            ""
        };
        format!(
            "{}, {} {nodes}, {gpus}{only}",
            self.collective.name(),
            self.nodes
        )
    }
}

/// How a fit weighs the errors of the rows: relative errors, squared or absolute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Loss {
    /// Least squares of the relative errors.
    Squared,
    /// Least absolute relative errors (iteratively reweighted), what MAPE measures.
    Absolute,
}

/// Fitted collectives of one machine, as written to and read from a JSON file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Collectives {
    /// The machine or topology (`a100-dgx`).
    pub name: String,
    /// The measurement files.
    pub sources: Vec<String>,
    /// Bytes per element assumed when reading the sizes.
    pub bytes_per_element: f64,
    /// One fit per collective and node count.
    pub fits: Vec<CollectiveFit>,
}

impl Collectives {
    /// Fits every collective and node count in `samples`, and, where several GPU counts were
    /// measured, each of them on its own (a topology may connect 2 GPUs unlike 4).
    pub fn fit(name: &str, sources: Vec<String>, samples: &[Sample]) -> Result<Collectives> {
        let mut fits = Vec::new();
        for ((collective, nodes), rows) in groups(samples) {
            let context = |e: Error| Error::Context {
                context: format!("fitting {} on {nodes} node(s)", collective.name()),
                source: Box::new(e),
            };
            fits.push(fit_group(&rows).map_err(context)?);
            fits.extend(fit_each_count(&rows).map_err(context)?);
        }
        Ok(Collectives {
            name: name.into(),
            sources,
            bytes_per_element: BYTES_PER_ELEMENT,
            fits,
        })
    }

    /// The fit of `collective` inside one node on `p` GPUs: the one of exactly `p` where `p`
    /// was measured, else one of any count up to the largest it was fitted on.
    pub fn inside_node(&self, collective: Collective, p: usize) -> Option<&CollectiveFit> {
        let mine = |f: &&CollectiveFit| f.collective == collective && f.nodes == 1;
        self.fits
            .iter()
            .filter(mine)
            .find(|f| f.only_workers == Some(p))
            .or_else(|| {
                self.fits.iter().filter(mine).find(|f| {
                    f.only_workers.is_none()
                        && f.fitted_on.workers.last().is_some_and(|&max| p <= max)
                })
            })
    }

    /// The most GPUs of one node an all-reduce fit covers.
    pub fn max_allreduce_gpus(&self) -> Option<usize> {
        self.fits
            .iter()
            .filter(|f| f.collective == Collective::AllReduce && f.nodes == 1)
            .filter_map(|f| f.fitted_on.workers.last().copied())
            .max()
    }

    /// Seconds to all-reduce `bytes` over `p` GPUs of one node, where a fit covers them.
    pub fn allreduce_s(&self, p: usize, bytes: f64) -> Option<f64> {
        if p <= 1 {
            return Some(0.0);
        }
        self.inside_node(Collective::AllReduce, p)
            .map(|f| f.time_s(p, bytes))
    }

    /// Seconds to send `bytes` to another GPU of the node, where a fit covers it.
    pub fn send_s(&self, bytes: f64) -> Option<f64> {
        self.inside_node(Collective::SendRecv, 2)
            .map(|f| f.time_s(2, bytes))
    }

    /// What the fits cover inside a node, for the line a report prints.
    pub fn describe(&self) -> String {
        let covered: Vec<String> = [Collective::AllReduce, Collective::SendRecv]
            .into_iter()
            .filter_map(|c| match c {
                Collective::AllReduce => self
                    .max_allreduce_gpus()
                    .map(|max| format!("all-reduce up to {max} GPUs")),
                Collective::SendRecv => self.inside_node(c, 2).map(|_| "send/recv".to_string()),
            })
            .collect();
        if covered.is_empty() {
            format!("fit `{}` covers nothing inside a node", self.name)
        } else {
            format!("fit `{}` ({})", self.name, covered.join(", "))
        }
    }

    /// Reads and checks a fitted file; errors name the file.
    pub fn from_file(path: &Path) -> Result<Collectives> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |message: String| Error::Collectives {
            path: path.to_path_buf(),
            message,
        };
        let c: Collectives =
            serde_json::from_str(&text).map_err(|e| bad(one_line(&e.to_string())))?;
        for f in &c.fits {
            if f.pieces.is_empty() {
                return Err(bad(format!("{}: no pieces", f.describe())));
            }
            for p in &f.pieces {
                let ok = |v: f64| v.is_finite() && v >= 0.0;
                let bandwidth_ok = p.bus_bandwidth_gbs > 0.0 && p.bus_bandwidth_gbs <= MAX_LINK_GBS;
                if !(ok(p.overhead_us) && ok(p.latency_us) && bandwidth_ok) {
                    return Err(bad(format!(
                        "{}: a piece has overhead {} us, latency {} us, bandwidth {} GB/s; \
                         times must be non-negative and the bandwidth in (0, {MAX_LINK_GBS}]",
                        f.describe(),
                        p.overhead_us,
                        p.latency_us,
                        p.bus_bandwidth_gbs
                    )));
                }
            }
        }
        Ok(c)
    }

    /// Writes the fits as JSON, replacing `path` atomically (a temp file beside it, renamed).
    pub fn write(&self, path: &Path) -> Result<()> {
        crate::runs::write_atomically(path, |mut file| {
            let mut text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
            text.push('\n');
            std::io::Write::write_all(&mut file, text.as_bytes())
        })
    }
}

/// Samples grouped by collective and node count, in a stable order.
pub fn groups(samples: &[Sample]) -> BTreeMap<(Collective, usize), Vec<Sample>> {
    let mut out: BTreeMap<(Collective, usize), Vec<Sample>> = BTreeMap::new();
    for s in samples {
        out.entry((s.collective, s.nodes())).or_default().push(*s);
    }
    out
}

/// One fit per GPU count where rows hold several, each pricing only its own count.
pub fn fit_each_count(rows: &[Sample]) -> Result<Vec<CollectiveFit>> {
    let mut workers: Vec<usize> = rows.iter().map(|r| r.workers).collect();
    workers.sort_unstable();
    workers.dedup();
    if workers.len() < 2 {
        return Ok(Vec::new());
    }
    workers
        .iter()
        .map(|&p| {
            let mine: Vec<Sample> = rows.iter().filter(|r| r.workers == p).copied().collect();
            let mut fit = fit_group(&mine)?;
            fit.only_workers = Some(p);
            Ok(fit)
        })
        .collect()
}

/// Rows on each side of a switch, at least.
const MIN_PIECE_ROWS: usize = 16;

/// Fits one group: every form (one line, or two with a switch at a power of two) under both
/// losses on the smaller three quarters of the messages, the best on the largest quarter
/// refitted on all.
pub fn fit_group(rows: &[Sample]) -> Result<CollectiveFit> {
    let Some(first) = rows.first() else {
        return Err(Error::Input("no samples to fit".into()));
    };
    let (collective, nodes) = (first.collective, first.nodes());
    if rows
        .iter()
        .any(|r| r.collective != collective || r.nodes() != nodes)
    {
        return Err(Error::Input(
            "samples of several collectives or node counts in one fit".into(),
        ));
    }
    let mut sizes: Vec<f64> = rows.iter().map(|r| r.bytes).collect();
    sizes.sort_by(f64::total_cmp);
    let cut = sizes[sizes.len() * 3 / 4];
    let (train, check): (Vec<Sample>, Vec<Sample>) = rows.iter().partition(|r| r.bytes < cut);
    // (held-out MAPE, training MAPE, switch, loss) of every form that could be fitted.
    let mut scored: Vec<(f64, f64, Option<f64>, Loss)> = Vec::new();
    if !train.is_empty() && !check.is_empty() {
        for loss in [Loss::Squared, Loss::Absolute] {
            for switch in switches(&train) {
                if let Some(fit) = fit_form(&train, switch, loss) {
                    let e = mape(&fit, &check);
                    if e.is_finite() {
                        scored.push((e, mape(&fit, &train), switch, loss));
                    }
                }
            }
        }
    }
    // The held-out rows decide; forms they cannot tell apart (a switch below all of them)
    // are told apart by the training rows.
    let least = scored.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let best = scored
        .iter()
        .filter(|s| s.0 <= least + 0.01)
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let (selection_mape, switch, loss) = match best {
        Some(&(e, _, switch, loss)) => (Some(e), switch, loss),
        None => (None, None, Loss::Squared),
    };
    let mut fit = fit_form(rows, switch, loss)
        .or_else(|| fit_form(rows, None, loss))
        .ok_or_else(|| {
            Error::Input(format!(
                "{} rows of {} on {nodes} node(s) cannot be fitted (all the same size?)",
                rows.len(),
                collective.name()
            ))
        })?;
    fit.selection_mape = selection_mape;
    Ok(fit)
}

/// Switch points to try: none, and the powers of two that leave enough rows on each side.
fn switches(rows: &[Sample]) -> Vec<Option<f64>> {
    let mut out = vec![None];
    for k in 10..40 {
        let at = 2f64.powi(k);
        let below = rows.iter().filter(|r| r.bytes <= at).count();
        if below >= MIN_PIECE_ROWS && rows.len() - below >= MIN_PIECE_ROWS {
            out.push(Some(at));
        }
    }
    out
}

/// MAPE, %, of a fit on rows.
pub fn mape(fit: &CollectiveFit, rows: &[Sample]) -> f64 {
    if rows.is_empty() {
        return f64::NAN;
    }
    100.0
        * rows
            .iter()
            .map(|r| (fit.time_s(r.workers, r.bytes) - r.time_s).abs() / r.time_s)
            .sum::<f64>()
        / rows.len() as f64
}

/// One form fitted to rows of one collective and node count: `None` when a piece cannot be.
pub fn fit_form(rows: &[Sample], switch: Option<f64>, loss: Loss) -> Option<CollectiveFit> {
    let first = rows.first()?;
    let collective = first.collective;
    // A constant apart from the per-step latency needs two step counts to tell them apart.
    let mut steps: Vec<f64> = rows.iter().map(|r| collective.steps(r.workers)).collect();
    steps.sort_by(f64::total_cmp);
    steps.dedup();
    let with_overhead = steps.len() > 1;
    let parts: Vec<(Option<f64>, Vec<&Sample>)> = match switch {
        None => vec![(None, rows.iter().collect())],
        Some(at) => vec![
            (Some(at), rows.iter().filter(|r| r.bytes <= at).collect()),
            (None, rows.iter().filter(|r| r.bytes > at).collect()),
        ],
    };
    let mut pieces = Vec::new();
    for (up_to_bytes, part) in parts {
        let coef = solve_piece(&part, collective, with_overhead, loss)?;
        // A piece whose time does not grow with the message is no model of a link.
        if !(coef[2] > 0.0 && 1.0 / coef[2] / 1e9 <= MAX_LINK_GBS) {
            return None;
        }
        pieces.push(Piece {
            up_to_bytes,
            overhead_us: coef[0] * 1e6,
            latency_us: coef[1] * 1e6,
            bus_bandwidth_gbs: 1.0 / coef[2] / 1e9,
        });
    }
    let mut workers: Vec<usize> = rows.iter().map(|r| r.workers).collect();
    workers.sort_unstable();
    workers.dedup();
    let mut per_node: Vec<usize> = rows.iter().map(|r| r.devices_per_node).collect();
    per_node.sort_unstable();
    per_node.dedup();
    let min_bytes = rows.iter().map(|r| r.bytes).fold(f64::INFINITY, f64::min);
    let max_bytes = rows.iter().map(|r| r.bytes).fold(0.0, f64::max);
    Some(CollectiveFit {
        collective,
        nodes: first.nodes(),
        only_workers: None,
        loss,
        pieces,
        fitted_on: SampleRange {
            workers,
            devices_per_node: per_node,
            min_bytes,
            max_bytes,
            rows: rows.len(),
        },
        selection_mape: None,
    })
}

/// Non-negative coefficients `[overhead s, latency s per step, s per byte sent]` minimising
/// the relative errors of rows; `None` when they do not determine them.
fn solve_piece(
    rows: &[&Sample],
    collective: Collective,
    with_overhead: bool,
    loss: Loss,
) -> Option<[f64; 3]> {
    if rows.len() < 2 {
        return None;
    }
    let features = |r: &Sample| {
        [
            if with_overhead { 1.0 } else { 0.0 },
            collective.steps(r.workers),
            collective.volume(r.workers) * r.bytes,
        ]
    };
    let x: Vec<[f64; 3]> = rows.iter().map(|r| features(r)).collect();
    let y: Vec<f64> = rows.iter().map(|r| r.time_s).collect();
    // Relative errors: each row weighed by 1/time^2.
    let mut w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
    let rounds = match loss {
        Loss::Squared => 1,
        Loss::Absolute => 30,
    };
    let mut coef = [0.0; 3];
    for _ in 0..rounds {
        coef = nnls(&x, &y, &w, with_overhead)?;
        if loss == Loss::Absolute {
            for (i, wi) in w.iter_mut().enumerate() {
                let pred: f64 = (0..3).map(|k| coef[k] * x[i][k]).sum();
                let rel = ((pred - y[i]) / y[i]).abs().max(1e-4);
                *wi = 1.0 / (y[i] * y[i] * rel);
            }
        }
    }
    Some(coef)
}

/// Weighted least squares over the active features, dropping those that come out negative
/// until none does.
fn nnls(x: &[[f64; 3]], y: &[f64], w: &[f64], with_overhead: bool) -> Option<[f64; 3]> {
    let mut active: Vec<usize> = if with_overhead {
        vec![0, 1, 2]
    } else {
        vec![1, 2]
    };
    loop {
        let n = active.len();
        let mut a = vec![vec![0.0; n + 1]; n];
        for (i, row) in x.iter().enumerate() {
            for (r, &j) in active.iter().enumerate() {
                for (c, &k) in active.iter().enumerate() {
                    a[r][c] += w[i] * row[j] * row[k];
                }
                a[r][n] += w[i] * row[j] * y[i];
            }
        }
        let sol = gauss(a)?;
        match sol.iter().position(|&v| v < 0.0) {
            None => {
                let mut out = [0.0; 3];
                for (v, &j) in sol.iter().zip(&active) {
                    out[j] = *v;
                }
                return Some(out);
            }
            Some(at) => {
                active.remove(at);
                if active.is_empty() {
                    return None;
                }
            }
        }
    }
}

/// Solves an augmented `n x (n+1)` system by Gaussian elimination with partial pivoting.
fn gauss(mut a: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let n = a.len();
    for i in 0..n {
        let pivot = (i..n).max_by(|&p, &q| a[p][i].abs().total_cmp(&a[q][i].abs()))?;
        a.swap(i, pivot);
        let scale = a.iter().map(|r| r[i].abs()).fold(0.0, f64::max);
        if a[i][i].abs() <= 1e-12 * scale || a[i][i] == 0.0 {
            return None;
        }
        let pivot_row = a[i].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != i {
                let f = row[i] / pivot_row[i];
                for (v, p) in row[i..].iter_mut().zip(&pivot_row[i..]) {
                    *v -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

/// A held-out split and how a fit on its training rows predicts the rest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitReport {
    /// What was fitted and what predicted (`size <= 16 MiB -> larger`).
    pub split: String,
    /// The collective and node count.
    pub group: String,
    /// Training rows.
    pub train_rows: usize,
    /// Held-out rows.
    pub test_rows: usize,
    /// MAPE on the training rows, %.
    pub train_mape: f64,
    /// MAPE on the held-out rows, %.
    pub test_mape: f64,
    /// Held-out MAPE per GPU count, %.
    pub test_mape_by_workers: Vec<(usize, f64)>,
    /// MAPE, %, of the link formula on the held-out rows, inside a node where a link was given.
    pub formula_test_mape: Option<f64>,
    /// The fits on the training rows (one, or one per GPU count).
    pub fits: Vec<CollectiveFit>,
}

/// MAPE, %, of the link's alpha-beta formula on rows (ring all-reduce, one transfer).
pub fn formula_mape(link: &Link, rows: &[Sample]) -> f64 {
    if rows.is_empty() {
        return f64::NAN;
    }
    let err = |r: &Sample| {
        let t = match r.collective {
            Collective::AllReduce => ring_allreduce_s(r.workers, r.bytes, link),
            Collective::SendRecv => link.transfer_s(r.bytes),
        };
        (t - r.time_s).abs() / r.time_s
    };
    100.0 * rows.iter().map(err).sum::<f64>() / rows.len() as f64
}

/// MAPE, %, of rows each priced by the fit for its GPU count.
fn mape_by_count(fits: &[CollectiveFit], rows: &[Sample]) -> f64 {
    let errors: Vec<f64> = rows
        .iter()
        .filter_map(|r| {
            let fit = fits
                .iter()
                .find(|f| f.only_workers == Some(r.workers))
                .or_else(|| fits.iter().find(|f| f.only_workers.is_none()))?;
            Some((fit.time_s(r.workers, r.bytes) - r.time_s).abs() / r.time_s)
        })
        .collect();
    if errors.is_empty() {
        return f64::NAN;
    }
    100.0 * errors.iter().sum::<f64>() / errors.len() as f64
}

/// Which rows of a split train the fit.
type TrainRows = Box<dyn Fn(&Sample) -> bool>;

/// Messages up to this size train the size split.
pub const SIZE_SPLIT_BYTES: f64 = 16.0 * 1024.0 * 1024.0;

/// The held-out splits of every group: messages up to [`SIZE_SPLIT_BYTES`] predicting larger
/// ones (by one fit, and by one per GPU count), and, where three or more GPU counts were
/// measured, the smaller counts predicting the largest. With a `link`, the link formula's
/// error on the same held-out rows inside a node beside them.
pub fn evaluate(samples: &[Sample], link: Option<&Link>) -> Result<Vec<SplitReport>> {
    let mut out = Vec::new();
    for ((collective, nodes), rows) in groups(samples) {
        let group = format!("{} on {nodes} node(s)", collective.name());
        let mut workers: Vec<usize> = rows.iter().map(|r| r.workers).collect();
        workers.sort_unstable();
        workers.dedup();
        // (name, training rows, one fit per GPU count)
        let mut splits: Vec<(String, TrainRows, bool)> = vec![(
            "size <= 16 MiB -> larger".into(),
            Box::new(|r: &Sample| r.bytes <= SIZE_SPLIT_BYTES),
            false,
        )];
        if workers.len() >= 2 {
            splits.push((
                "size <= 16 MiB -> larger, per p".into(),
                Box::new(|r: &Sample| r.bytes <= SIZE_SPLIT_BYTES),
                true,
            ));
        }
        if workers.len() >= 3 {
            let largest = workers[workers.len() - 1];
            let below = workers[workers.len() - 2];
            splits.push((
                format!("p <= {below} -> p = {largest}"),
                Box::new(move |r: &Sample| r.workers <= below),
                false,
            ));
        }
        for (split, is_train, per_count) in splits {
            let (train, test): (Vec<Sample>, Vec<Sample>) = rows.iter().partition(|r| is_train(r));
            if train.is_empty() || test.is_empty() {
                continue;
            }
            let context = |e: Error| Error::Context {
                context: format!("{group}, {split}"),
                source: Box::new(e),
            };
            let fits = if per_count {
                fit_each_count(&train).map_err(context)?
            } else {
                vec![fit_group(&train).map_err(context)?]
            };
            let mut test_workers: Vec<usize> = test.iter().map(|r| r.workers).collect();
            test_workers.sort_unstable();
            test_workers.dedup();
            let test_mape_by_workers = test_workers
                .iter()
                .map(|&w| {
                    let rows: Vec<Sample> =
                        test.iter().filter(|r| r.workers == w).copied().collect();
                    (w, mape_by_count(&fits, &rows))
                })
                .collect();
            out.push(SplitReport {
                split,
                group: group.clone(),
                train_rows: train.len(),
                test_rows: test.len(),
                train_mape: mape_by_count(&fits, &train),
                test_mape: mape_by_count(&fits, &test),
                test_mape_by_workers,
                formula_test_mape: link.filter(|_| nodes == 1).map(|l| formula_mape(l, &test)),
                fits,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples of a known model, with a deterministic ripple of +-`noise` (relative).
    fn synthetic(
        collective: Collective,
        workers: &[usize],
        overhead_us: f64,
        latency_us: f64,
        gbs: f64,
        noise: f64,
    ) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut k = 0usize;
        for &p in workers {
            for e in 0..40 {
                let bytes = 4096.0 * 1.25f64.powi(e);
                let t = 1e-6 * (overhead_us + latency_us * collective.steps(p))
                    + collective.volume(p) * bytes / (gbs * 1e9);
                k += 1;
                let ripple = if k.is_multiple_of(2) { 1.0 } else { -1.0 };
                out.push(Sample {
                    collective,
                    workers: p,
                    devices_per_node: p,
                    bytes,
                    time_s: t * (1.0 + noise * ripple),
                });
            }
        }
        out
    }

    #[test]
    fn a_fit_recovers_known_parameters() {
        let rows = synthetic(Collective::AllReduce, &[2, 4, 8], 12.0, 3.0, 240.0, 0.0);
        let fit = fit_group(&rows).unwrap();
        let last = fit.pieces.last().unwrap();
        // Any switch it picks, the piece above it is the model itself.
        assert!(
            (last.bus_bandwidth_gbs - 240.0).abs() < 1e-6 * 240.0,
            "{fit:?}"
        );
        assert!((last.latency_us - 3.0).abs() < 1e-6, "{fit:?}");
        assert!((last.overhead_us - 12.0).abs() < 1e-6, "{fit:?}");
        assert!(fit.selection_mape.unwrap() < 1e-6);
        // With noise it still lands near them, and predicts a GPU count it never saw.
        let rows = synthetic(Collective::AllReduce, &[2, 4], 12.0, 3.0, 240.0, 0.02);
        let fit = fit_group(&rows).unwrap();
        let eight = synthetic(Collective::AllReduce, &[8], 12.0, 3.0, 240.0, 0.0);
        assert!(mape(&fit, &eight) < 3.0, "{fit:?}");
        // A send/recv: one step, no separate overhead.
        let rows = synthetic(Collective::SendRecv, &[2], 0.0, 8.0, 150.0, 0.0);
        let fit = fit_group(&rows).unwrap();
        let p = fit.pieces.last().unwrap();
        assert!(
            (p.bus_bandwidth_gbs - 150.0).abs() < 1e-6 * 150.0,
            "{fit:?}"
        );
        assert!((p.latency_us - 8.0).abs() < 1e-6, "{fit:?}");
        assert!((fit.time_s(2, 1e6) - (8e-6 + 1e6 / 150e9)).abs() < 1e-12);
    }

    #[test]
    fn a_protocol_switch_is_found_where_it_predicts_the_held_out_sizes() {
        // Below 1 MiB a fast-latency, slow-bandwidth line; above it the other.
        let mut rows = Vec::new();
        for e in 0..80 {
            let bytes = 4096.0 * 1.15f64.powi(e);
            let t = if bytes <= 1048576.0 {
                5e-6 + bytes / 50e9
            } else {
                30e-6 + bytes / 200e9
            };
            rows.push(Sample {
                collective: Collective::SendRecv,
                workers: 2,
                devices_per_node: 2,
                bytes,
                time_s: t,
            });
        }
        let fit = fit_group(&rows).unwrap();
        assert_eq!(fit.pieces.len(), 2, "{fit:?}");
        assert_eq!(fit.pieces[0].up_to_bytes, Some(1048576.0));
        assert!((fit.pieces[1].bus_bandwidth_gbs - 200.0).abs() < 1e-6 * 200.0);
        assert!(mape(&fit, &rows) < 1e-6);
    }

    #[test]
    fn the_committed_sample_predicts_eight_gpus_better_than_the_link_formula() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/collectives/a100-dgx-sample.csv");
        let samples = read_samples(&path).unwrap();
        assert!(
            samples
                .iter()
                .all(|s| s.collective == Collective::AllReduce)
        );
        let nvlink = Link::preset("nvlink").unwrap();
        let splits = evaluate(&samples, Some(&nvlink)).unwrap();
        let by_p = splits
            .iter()
            .find(|s| s.group == "all_reduce on 1 node(s)" && s.split.starts_with("p <="))
            .unwrap();
        // The NVLink preset's ring formula on the same held-out rows.
        let eight: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.workers == 8 && s.nodes() == 1)
            .collect();
        let formula = 100.0
            * eight
                .iter()
                .map(|s| {
                    let t = ring_allreduce_s(8, s.bytes, &nvlink);
                    (t - s.time_s).abs() / s.time_s
                })
                .sum::<f64>()
            / eight.len() as f64;
        assert_eq!(by_p.test_rows, eight.len());
        assert!(by_p.test_mape < formula, "{} vs {formula}", by_p.test_mape);
        assert!((by_p.formula_test_mape.unwrap() - formula).abs() < 1e-9);
        assert!(by_p.test_mape < 15.0, "{by_p:?}");
    }

    #[test]
    fn bad_files_are_one_line_naming_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let header = "time_stats.all_reduce.median,num_workers,size,collective,devices_per_node\n";
        let cases = [
            ("0.5,2,-4,all_reduce,2\n", "`size` is `-4`, a negative"),
            ("NaN,2,4,all_reduce,2\n", "is `NaN`, not a positive time"),
            ("0.5,2,4,reduce,2\n", "`collective` is `reduce`"),
            ("0.5,0,4,all_reduce,2\n", "`num_workers` is `0`"),
            ("0.5,2,4,all_reduce,4\n", "`devices_per_node` 4 is more"),
        ];
        for (i, (row, want)) in cases.iter().enumerate() {
            let path = dir.path().join(format!("bad{i}.csv"));
            std::fs::write(&path, format!("{header}{row}")).unwrap();
            let e = read_samples(&path).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("line 2"), "{e}");
            assert!(
                e.contains(&format!("bad{i}.csv")) && !e.contains('\n'),
                "{e}"
            );
        }
        let path = dir.path().join("nocol.csv");
        std::fs::write(&path, "num_workers,size,collective\n2,4,all_reduce\n").unwrap();
        let e = read_samples(&path).unwrap_err().to_string();
        assert!(e.contains("no `devices_per_node` column"), "{e}");
        let path = dir.path().join("nomedian.csv");
        std::fs::write(
            &path,
            "num_workers,size,collective,devices_per_node\n2,4,send_recv,2\n",
        )
        .unwrap();
        let e = read_samples(&path).unwrap_err().to_string();
        assert!(e.contains("no `time_stats.send_recv.median` column"), "{e}");
    }

    #[test]
    fn fits_round_trip_and_price_inside_a_node_only() {
        let rows = synthetic(Collective::AllReduce, &[2, 4, 8], 10.0, 2.0, 200.0, 0.0);
        let c = Collectives::fit("test", vec!["x.csv".into()], &rows).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        c.write(&path).unwrap();
        let back = Collectives::from_file(&path).unwrap();
        // One of any count, one per count measured.
        assert_eq!(back.fits.len(), 4);
        assert_eq!(
            back.inside_node(Collective::AllReduce, 4)
                .unwrap()
                .only_workers,
            Some(4)
        );
        assert_eq!(
            back.inside_node(Collective::AllReduce, 6)
                .unwrap()
                .only_workers,
            None
        );
        assert_eq!(back.max_allreduce_gpus(), Some(8));
        let want = 1e-6 * (10.0 + 2.0 * 14.0) + 1.75 * 1e8 / 200e9;
        let got = back.allreduce_s(8, 1e8).unwrap();
        assert!((got - want).abs() < 1e-9 * want, "{got} vs {want}");
        assert_eq!(back.allreduce_s(1, 1e8), Some(0.0));
        // Beyond the GPUs it was fitted on, and for sends it never saw: no fit.
        assert_eq!(back.allreduce_s(16, 1e8), None);
        assert_eq!(back.send_s(1e6), None);
        std::fs::write(&path, "{\"name\": 3}").unwrap();
        let e = Collectives::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("c.json") && !e.contains('\n'), "{e}");
    }
}
