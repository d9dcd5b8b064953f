//! Integration tests of perfcast-data: round trips, atomic appends, schema validation.

mod roundtrip;
