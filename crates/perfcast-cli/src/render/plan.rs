//! `perfcast plan` as text.

use std::path::Path;

use perfcast_core::DType;
use perfcast_scale::memory::GIB;
use perfcast_scale::plan::DeviceLinks;
use perfcast_scale::plan::{PlanReport, PriceTable};

use crate::output::{fmt_ms, sig3};

/// `fp32`, `bf16 mixed precision (...)`, or per device when they differ.
fn precision(dtypes: &[(String, DType)]) -> String {
    let named = |d: DType| match d {
        DType::Fp32 | DType::Tf32 => d.name().to_string(),
        _ => format!("{} mixed precision", d.name()),
    };
    let half = dtypes.iter().any(|(_, d)| d.bytes() < 4.0);
    let note = if half {
        " (fp32 master weights and optimiser state)"
    } else {
        ""
    };
    match dtypes {
        [(_, first), rest @ ..] if rest.iter().all(|(_, d)| d == first) => {
            format!("{}{note}", named(*first))
        }
        _ => {
            let each: Vec<String> = dtypes
                .iter()
                .map(|(n, d)| format!("{n} {}", named(*d)))
                .collect();
            format!("{}{note}", each.join(", "))
        }
    }
}

fn gib(bytes: f64) -> String {
    format!("{:.1}", bytes / GIB)
}

/// `perfcast plan`: the job, the links and prices, then every plan (or the `top` fastest or
/// cheapest) with its step split, memory per GPU, throughput and cost.
pub fn plan(
    r: &PlanReport,
    links: &[DeviceLinks],
    dtypes: &[(String, DType)],
    prices: Option<&PriceTable>,
    bundle: &Path,
    top: usize,
) -> String {
    let c = &r.config;
    let mut t = format!(
        "{}: {} M parameters; global batch {}; {:?} optimiser; {}; compute from `{}`; \
         graph: {} (`--fusion {}`)\n",
        r.network,
        sig3(r.parameters / 1e6),
        c.global_batch,
        c.optimizer,
        precision(dtypes),
        bundle.display(),
        c.fusion.graph_style(),
        c.fusion
    );
    let l: Vec<String> = links
        .iter()
        .map(|d| match &d.pair_link {
            Some(pair) => format!("{} {} ({} on 2 GPUs)", d.device, d.link.name, pair.name),
            None => format!("{} {}", d.device, d.link.name),
        })
        .collect();
    t.push_str(&format!(
        "links inside a node: {}; memory limit {:.0}% of each GPU",
        l.join(", "),
        100.0 * c.max_memory_fraction
    ));
    match &c.collectives {
        Some(f) => t.push_str(&format!(
            "; collectives inside a node: {}, the link formula for the rest",
            f.describe()
        )),
        None => t.push_str("; collectives: the link's alpha-beta formula"),
    }
    match prices {
        Some(p) => t.push_str(&format!(
            "; prices {} ({})\n",
            p.date.as_deref().unwrap_or("undated"),
            p.currency.as_deref().unwrap_or("?")
        )),
        None => t.push_str("; no price file (`--price-file`)\n"),
    }
    // Device names as typed can be long (`a100-sxm4-40gb`): the column widens to them.
    let dw = r
        .rows
        .iter()
        .map(|row| row.device.len())
        .fold(6, usize::max);
    t.push_str(&format!(
        "\n{:<dw$} {:>4} {:<24} {:<9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11} {:<4} {:>9} {:>9}\n",
        "device",
        "gpus",
        "layout",
        "recompute",
        "step",
        "compute",
        "bubble",
        "p2p",
        "all-reduce",
        "update",
        "mem/GPU GiB",
        "fits",
        "samples/s",
        "$/1k steps"
    ));
    let shown = if top == 0 {
        r.rows.len()
    } else {
        top.min(r.rows.len())
    };
    for row in &r.rows[..shown] {
        t.push_str(&format!(
            "{:<dw$} {:>4} {:<24} {:<9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>5}/{:<5} {:<4} {:>9} {:>9}{}\n",
            row.device,
            row.gpus,
            row.layout_name,
            row.recompute.name(),
            fmt_ms(row.step_s * 1e3),
            fmt_ms(row.compute_s * 1e3),
            fmt_ms(row.bubble_s * 1e3),
            fmt_ms(row.pp_comm_s * 1e3),
            fmt_ms((row.exposed_comm_s - row.pp_comm_s) * 1e3),
            fmt_ms(row.update_s * 1e3),
            gib(row.memory.total),
            gib(row.capacity_bytes),
            if row.fits { "yes" } else { "no" },
            sig3(row.samples_per_s),
            row.cost_per_1000_steps
                .map_or("-".to_string(), |c| format!("{c:.2}")),
            if row.pareto { " *" } else { "" }
        ));
    }
    if shown < r.rows.len() {
        t.push_str(&format!(
            "... {} more (`--top 0` prints all)\n",
            r.rows.len() - shown
        ));
    }
    t.push_str(
        "\np2p: pipeline activation and gradient sends; all-reduce: TP all-reduces and the DP \
         all-reduce not hidden behind the backward pass; mem: peak per GPU / allowed; * on the \
         time-cost Pareto front\n",
    );
    let waiting = r.rows.iter().filter(|row| row.host_bound_s > 0.0).count();
    if let (true, Some(host)) = (waiting > 0, r.config.host) {
        let most = r
            .rows
            .iter()
            .max_by(|a, b| a.host_bound_s.total_cmp(&b.host_bound_s))
            .map_or(0.0, |row| row.host_bound_s);
        t.push_str(&format!(
            "{waiting} plan(s) wait on the framework's host dispatch (eager: {} per step and {} \
             per layer and micro-batch), up to {} per step; `--fusion compile` launches less\n",
            fmt_ms(host.per_step_s * 1e3),
            fmt_ms(host.per_layer_s * 1e3),
            fmt_ms(most * 1e3)
        ));
    }
    if !r.skipped.is_empty() {
        t.push_str(&format!(
            "{} layout(s) not planned, e.g. {} x {} {}: {}\n",
            r.skipped.len(),
            r.skipped[0].gpus,
            r.skipped[0].device,
            r.skipped[0].layout,
            r.skipped[0].reason
        ));
    }
    if let Some(m) = r.no_fit_message() {
        t.push_str(&format!("\n{m}\n"));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_names_each_devices_precision() {
        let d = |n: &str, t: DType| (n.to_string(), t);
        assert_eq!(
            precision(&[d("a100", DType::Fp32), d("l4", DType::Fp32)]),
            "fp32"
        );
        let bf16 = precision(&[d("h100:bf16", DType::Bf16), d("b200:bf16", DType::Bf16)]);
        assert_eq!(
            bf16,
            "bf16 mixed precision (fp32 master weights and optimiser state)"
        );
        let both = precision(&[d("a100", DType::Fp32), d("h100:fp16", DType::Fp16)]);
        assert!(
            both.starts_with("a100 fp32, h100:fp16 fp16 mixed precision"),
            "{both}"
        );
    }
}
