//! A profiling driver for the prediction hot path: loads a bundle and repeats one query kind
//! for a number of seconds, so `perf record` sees nothing else. `perfcast bundle bench` is the
//! measurement; this is for looking inside it.
//!
//! `cargo run --release -p perfcast-predict --example speed -- checkpoints/gpu module 5`
//! (`module`, `network`, `prepared` or `batch`; seconds).

use perfcast_core::{Context, ModuleSpec, Phase, zoo};
use perfcast_predict::{Bundle, Predictor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .ok_or("usage: speed BUNDLE [module|network|prepared|batch] [SECONDS]")?;
    let what = args.get(2).map_or("module", String::as_str);
    let seconds: f64 = args.get(3).map_or(Ok(3.0), |s| s.parse())?;
    let predictor = Predictor::new(Bundle::load(std::path::Path::new(dir))?);
    let conv = ModuleSpec::from_json(
        r#"{"kind": "conv2d", "in_channels": 64, "out_channels": 64, "input_hw": 56, "kernel": 3, "padding": 1}"#,
    )?;
    let one = Context {
        batch: 1,
        phase: Phase::Inference,
        threads: 1,
        utilisation: 0.0,
    };
    let vgg = zoo::build("vgg16", None)?;
    let prepared = predictor.prepare(&vgg)?;
    let queries: Vec<(ModuleSpec, Context)> = (0..10_000)
        .map(|i| {
            let (_, spec) = vgg.modules()[i % vgg.layers.len()];
            let context = Context {
                batch: 1 << (i % 6),
                ..one.clone()
            };
            (spec.clone(), context)
        })
        .collect();
    let start = std::time::Instant::now();
    let mut calls = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..100 {
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
        calls += 100;
    }
    let per = start.elapsed().as_secs_f64() * 1e6 / calls as f64;
    println!("{what}: {per:.3} us per call ({calls} calls)");
    Ok(())
}
