//! Running one target: case count from the environment, a seed that can be replayed, and one
//! summary line per target on stderr.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

/// How expensive one case of a target is.
#[derive(Clone, Copy)]
pub enum Cost {
    /// In-memory parsing: `PERFCAST_FUZZ_CASES` cases.
    Cheap,
    /// Temp directories, Parquet or model files per case: an eighth of them.
    Files,
    /// Models fitted and a bundle written per case: a sixteenth of them.
    Fits,
}

/// Cases of the cheap targets when `PERFCAST_FUZZ_CASES` is unset: the whole harness stays
/// within about a minute of CI on two cores.
const DEFAULT_CASES: u32 = 1024;

fn cases(cost: Cost) -> u32 {
    let base = std::env::var("PERFCAST_FUZZ_CASES")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(DEFAULT_CASES)
        .max(1);
    match cost {
        Cost::Cheap => base,
        Cost::Files => (base / 8).max(1),
        Cost::Fits => (base / 16).max(1),
    }
}

/// The seed of a run: `PERFCAST_FUZZ_SEED`, or a fresh one (printed, so a failure replays).
fn seed() -> u64 {
    if let Some(s) = std::env::var("PERFCAST_FUZZ_SEED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        return s;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    // Tests of one binary start within nanoseconds of each other: mix in the thread.
    let thread = format!("{:?}", std::thread::current().id());
    nanos
        ^ thread.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}

/// What one case reports: whether the reader accepted the input.
pub type Outcome = Result<bool, TestCaseError>;

/// Runs `test` on inputs drawn from `strategy`; a panic or a failed check fails the test with
/// the shrunk input. `test` returns whether the input was accepted (parsed, loaded, imported).
pub fn fuzz<S>(name: &str, cost: Cost, strategy: S, test: impl Fn(S::Value) -> Outcome)
where
    S: Strategy,
    S::Value: Debug,
{
    let cases = cases(cost);
    let seed = seed();
    // Straight to the process's stderr, past the test harness's capture: a case that aborts
    // the process (an allocation failure is no panic) leaves no report, and this line is
    // what replays it.
    {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "fuzz {name}: seed {seed} (replay with PERFCAST_FUZZ_SEED={seed})"
        );
    }
    let config = Config {
        cases,
        // Files under the source tree would be written by CI runs; the seed replays instead.
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 2048,
        ..Config::default()
    };
    let executions = AtomicU64::new(0);
    let accepted = AtomicU64::new(0);
    let start = Instant::now();
    let result = TestRunner::new(config).run(&strategy, |value| {
        executions.fetch_add(1, Ordering::Relaxed);
        let ok = test(value)?;
        if ok {
            accepted.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    let elapsed = start.elapsed().as_secs_f64();
    let executions = executions.into_inner();
    let accepted = accepted.into_inner();
    match result {
        Ok(()) => eprintln!(
            "fuzz {name}: {cases} cases, {executions} executions, {accepted} accepted, \
             {elapsed:.2} s, 0 panics (seed {seed})"
        ),
        Err(TestError::Fail(reason, input)) => panic!(
            "fuzz {name}: failed after {executions} executions ({elapsed:.2} s, seed {seed}): \
             {reason}\nminimal input: {input:#?}"
        ),
        Err(TestError::Abort(reason)) => {
            panic!("fuzz {name}: aborted (seed {seed}): {reason}")
        }
    }
}

/// Fails the case unless `v` is finite and not negative.
pub fn finite_non_negative(what: &str, v: f64) -> Result<(), TestCaseError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "{what} is {v}, not finite and non-negative"
        )))
    }
}

/// Fails the case with `message` unless `cond`.
pub fn check(cond: bool, message: impl FnOnce() -> String) -> Result<(), TestCaseError> {
    if cond {
        Ok(())
    } else {
        Err(TestCaseError::fail(message()))
    }
}
