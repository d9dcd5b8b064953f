//! perfcast-fuzz: the fuzz harness ("nothing lost, nothing panics").
//!
//! The crate holds no code of its own: its one test binary (`tests/fuzz/main.rs`) drives
//! proptest strategies over every input perfcast reads from outside — module specs, network
//! JSON, device specs, sweep TOML, CSV importers, Parquet datasets, bundle manifests and ONNX
//! models (random graphs encoded as protobuf, hostile seeds mutated) — and
//! fails on any panic, on a derived number that is not finite, and on rows that an import
//! writes but a read does not give back.
//!
//! It runs in CI with the workspace tests, bounded in time; `PERFCAST_FUZZ_CASES` sets the
//! cases of the cheap targets (default 1024; file-system targets run an eighth of it):
//!
//! ```text
//! PERFCAST_FUZZ_CASES=20000 cargo test --release -p perfcast-fuzz -- --nocapture
//! ```
//!
//! Each target prints one line to stderr: its cases, executions (with shrinking), time, and
//! how many inputs were accepted.
