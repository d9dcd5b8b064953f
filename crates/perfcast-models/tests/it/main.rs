//! Integration tests of perfcast-models: every family in the registry conforms to the one
//! interface (`conformance`), and a family added from outside the crate runs through the
//! same code (`toy_family`).
#![allow(clippy::unwrap_used)]

mod conformance;
mod toy_family;
