//! The `perfcast` binary, built again inside the tests crate so its end-to-end tests get its
//! path from Cargo (`CARGO_BIN_EXE_perfcast-under-test`) in whatever profile the tests run.

fn main() -> std::process::ExitCode {
    perfcast_cli::main_entry()
}
