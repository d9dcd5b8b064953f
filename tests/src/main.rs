//! The `perfcast` binary, built again inside the tests crate so its end-to-end tests get its
//! path from Cargo (`CARGO_BIN_EXE_perfcast-under-test`) in whatever profile the tests run.

/// Counts live and peak heap bytes, as the real binary does (`perfcast measure`'s peak memory).
#[global_allocator]
static ALLOC: perfcast_cli::alloc::CountingAlloc = perfcast_cli::alloc::CountingAlloc;

fn main() -> std::process::ExitCode {
    perfcast_cli::alloc::mark_installed();
    perfcast_cli::main_entry()
}
