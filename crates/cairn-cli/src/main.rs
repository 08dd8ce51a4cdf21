fn main() -> std::process::ExitCode {
    cairn_cli::main()
}
