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
    t
}
