//! perfcast-graph's integration tests: ONNX files built in Rust through the public API.

mod onnx;
