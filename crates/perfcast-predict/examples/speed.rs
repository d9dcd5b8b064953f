//! A profiling driver for the prediction hot path: loads a bundle and repeats one query kind
//! a number of times, so `perf record` sees nothing else and `perf stat` counts instructions
//! per call, which other work on the machine does not change. `perfcast bundle bench` is the
//! measurement; this is for looking inside it.
//!
//! `cargo run --release -p perfcast-predict --example speed -- checkpoints/gpu module 100000`
//! (`module`, `network`, `prepared` or `batch`; calls, in hundreds rounded up past 100).

use perfcast_predict::bench_queries::BenchQueries;
use perfcast_predict::{Bundle, Predictor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .ok_or("usage: speed BUNDLE [module|network|prepared|batch] [CALLS]")?;
    let what = args.get(2).map_or("module", String::as_str);
    let calls: u64 = args.get(3).map_or(Ok(100_000), |s| s.parse())?;
    let predictor = Predictor::new(Bundle::load(std::path::Path::new(dir))?);
    let BenchQueries {
        conv,
        one,
        vgg,
        batch: queries,
    } = BenchQueries::new()?;
    let prepared = predictor.prepare(&vgg)?;
    let start = std::time::Instant::now();
    let mut done = 0u64;
    // Fewer than 100 calls run exactly: a callgrind count of a 10,000-query batch needs few.
    let step = calls.clamp(1, 100);
    while done < calls {
        for _ in 0..step {
            match what {
                "module" => {
                    std::hint::black_box(predictor.predict_module(&conv, &one)?);
                }
                "network" => {
                    std::hint::black_box(predictor.predict_network(&vgg, &one)?);
                }
                "prepared" => {
                    std::hint::black_box(predictor.predict_prepared(&prepared, &one)?);
                }
                "batch" => {
                    std::hint::black_box(predictor.predict_modules_threads(&queries, 1)?);
                }
                other => return Err(format!("unknown query `{other}`").into()),
            }
        }
        done += step;
    }
    let per = start.elapsed().as_secs_f64() * 1e6 / done as f64;
    println!("{what}: {per:.3} us per call ({done} calls)");
    Ok(())
}
