// mimalloc rather than glibc's allocator: a server spends ~7 % less CPU a
// run (glibc's `malloc`/`free` were 7.5 % of it under load), and a waiting
// run holds less (bench/peer's "memory per waiting execution": 22.5 KiB
// against 26.0). The README's Performance section has the figures.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cairn_cli::main()
}
