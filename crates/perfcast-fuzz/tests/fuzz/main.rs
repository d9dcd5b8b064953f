//! The fuzz harness: every reader of outside input, on mutated valid inputs and on
//! extreme values. A panic, a non-finite derived number or a row lost between an import and a
//! read fails the target, with the shrunk input.
//!
//! `PERFCAST_FUZZ_CASES` sets the cases of the cheap targets (default 1024; file-system targets
//! run an eighth of it, the bundle round trip, which fits models, a sixteenth) and `PERFCAST_FUZZ_SEED` replays a run; each target prints its cases,
//! executions and time to stderr (`-- --nocapture` shows them). Each target also prints its
//! seed when it starts, past the capture, so a case that aborts the process (an allocation
//! failure) replays too: `PERFCAST_FUZZ_SEED=<seed> cargo test --release -p perfcast-fuzz --
//! <target>`.

mod core;
mod data;
mod harness;
mod mutate;
mod onnx;
mod profile;
mod roundtrip;
mod select;
