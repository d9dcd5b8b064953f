/// Counts live and peak heap bytes, for `perfcast measure`'s peak memory.
#[global_allocator]
static ALLOC: perfcast_cli::alloc::CountingAlloc = perfcast_cli::alloc::CountingAlloc;

fn main() -> std::process::ExitCode {
    perfcast_cli::alloc::mark_installed();
    perfcast_cli::main_entry()
}
