//! Integration tests of perfcast-data: round trips, atomic appends, schema validation.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod import;
mod roundtrip;
