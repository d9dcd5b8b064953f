//! Background load: keeps a share of the cores busy while measuring (MEDN's device utilisation).
//!
//! `utilisation` u on a machine of `cores` cores spawns ceil(u * cores) threads, each busy for
//! its share of every 5 ms period and asleep for the rest, so the machine as a whole is busy
//! u * cores core-seconds per second besides the measured work. The busy loop streams over a
//! 1 MiB buffer with multiply-adds, so it competes for caches and memory bandwidth as well as
//! for execution units, as a neighbouring process would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const PERIOD: Duration = Duration::from_millis(5);

/// A running load; stops (and joins its threads) when dropped.
#[derive(Debug)]
pub struct LoadGenerator {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    utilisation: f64,
}

impl LoadGenerator {
    /// Starts load worth `utilisation` (in [0, 1)) of `cores` cores; zero starts nothing.
    pub fn start(utilisation: f64, cores: usize) -> LoadGenerator {
        let stop = Arc::new(AtomicBool::new(false));
        let total = (utilisation.clamp(0.0, 1.0) * cores as f64).max(0.0);
        let count = total.ceil() as usize;
        let duty = if count == 0 {
            0.0
        } else {
            total / count as f64
        };
        let threads = (0..count)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || busy_loop(&stop, duty))
            })
            .collect();
        LoadGenerator {
            stop,
            threads,
            utilisation,
        }
    }

    /// The utilisation it was started with.
    pub fn utilisation(&self) -> f64 {
        self.utilisation
    }

    /// Load threads running.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }
}

fn busy_loop(stop: &AtomicBool, duty: f64) {
    let mut buf = vec![1.0f32; 1 << 18];
    let busy = PERIOD.mul_f64(duty);
    let mut acc = 0.0f32;
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        while start.elapsed() < busy {
            for v in buf.iter_mut() {
                *v = v.mul_add(0.999_9, 0.000_1);
            }
            acc += buf[acc as usize % buf.len()];
        }
        let rest = PERIOD.saturating_sub(start.elapsed());
        if !rest.is_zero() {
            std::thread::sleep(rest);
        }
    }
    std::hint::black_box(acc);
}

impl Drop for LoadGenerator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_count_follows_the_share_of_cores() {
        assert_eq!(LoadGenerator::start(0.0, 2).threads(), 0);
        assert_eq!(LoadGenerator::start(0.5, 2).threads(), 1);
        assert_eq!(LoadGenerator::start(0.75, 2).threads(), 2);
    }

    #[test]
    fn load_consumes_cpu_time_while_running() {
        // CPU time of this process grows while a full-core load runs for 100 ms.
        let before = process_cpu_seconds();
        let load = LoadGenerator::start(0.5, 2);
        std::thread::sleep(Duration::from_millis(200));
        drop(load);
        if let (Some(before), Some(after)) = (before, process_cpu_seconds()) {
            let used = after - before;
            assert!(used > 0.05, "load used only {used} s of CPU in 0.2 s");
        }
    }

    /// utime + stime of this process from /proc (None where there is no /proc).
    fn process_cpu_seconds() -> Option<f64> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: f64 =
            fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        Some(ticks / 100.0)
    }
}
