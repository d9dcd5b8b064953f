//! `perfcast loadtest` as text.

use perfcast_serve::loadtest::LoadReport;

use crate::output::sig3;

/// `loadtest`: throughput, latency of valid and malformed requests, statuses, errors and
/// whether the server stayed healthy.
pub fn loadtest(r: &LoadReport) -> String {
    let statuses: Vec<String> = r
        .statuses
        .iter()
        .map(|(s, n)| format!("{s}: {n}"))
        .collect();
    let mut t = format!(
        "{} requests in {} s over {} connections{}: {} requests/s\n\
         {:<10} {:>9} {:>9} {:>10} {:>10} {:>10}\n",
        r.requests,
        sig3(r.duration_s),
        r.concurrency,
        if r.pipeline > 1 {
            format!(" ({} pipelined on each)", r.pipeline)
        } else {
            String::new()
        },
        sig3(r.throughput_rps),
        "requests",
        "count",
        "as meant",
        "p50 us",
        "p99 us",
        "max us"
    );
    for (name, l, ok) in [
        ("valid", &r.valid, r.valid_ok),
        ("malformed", &r.invalid, r.invalid_4xx),
    ] {
        t.push_str(&format!(
            "{name:<10} {:>9} {:>9} {:>10} {:>10} {:>10}\n",
            l.count,
            ok,
            sig3(l.p50_us),
            sig3(l.p99_us),
            sig3(l.max_us)
        ));
    }
    t.push_str(&format!(
        "statuses {}\nerrors {} (valid not answered 200, malformed not answered 4xx, no answer)\n\
         healthy after: {}\n",
        statuses.join(", "),
        r.errors,
        if r.healthy_after { "yes" } else { "no" }
    ));
    for e in &r.error_samples {
        t.push_str(&format!("  error: {e}\n"));
    }
    if r.shares_cores() {
        t.push_str(&format!(
            "note: the server's {} worker threads take all {} cores of this machine, and this \
             load generator needs one: `perfcast serve --threads {}` measures what the server \
             answers on the cores the generator leaves it\n",
            r.server_threads.unwrap_or(0),
            r.cores,
            r.cores - 1
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use perfcast_serve::loadtest::{LoadKind, LoadReport};

    fn report(server_threads: Option<usize>, cores: usize) -> LoadReport {
        LoadReport {
            addr: "127.0.0.1:8787".into(),
            kind: LoadKind::Module,
            concurrency: 32,
            pipeline: 1,
            requests: 10,
            duration_s: 1.0,
            throughput_rps: 10.0,
            valid: Default::default(),
            valid_ok: 10,
            invalid: Default::default(),
            invalid_4xx: 0,
            statuses: Default::default(),
            errors: 0,
            error_samples: Vec::new(),
            healthy_after: true,
            server_threads,
            cores,
        }
    }

    #[test]
    fn a_server_on_every_core_is_told_to_leave_the_generator_one() {
        let text = super::loadtest(&report(Some(2), 2));
        assert!(text.contains("`perfcast serve --threads 1`"), "{text}");
        for quiet in [
            report(Some(1), 2),
            report(None, 2),
            report(Some(1), 1),
            report(Some(4), 8),
        ] {
            let text = super::loadtest(&quiet);
            assert!(!text.contains("note:"), "{text}");
        }
    }
}
