fn main() -> std::process::ExitCode {
    perfcast_cli::main_entry()
}
