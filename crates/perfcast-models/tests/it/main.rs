//! Integration tests of perfcast-models: every family in the registry conforms to the one
//! interface (`conformance`).
#![allow(clippy::unwrap_used)]

mod conformance;
