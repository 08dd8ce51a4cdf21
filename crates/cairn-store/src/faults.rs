//! The clock stores stamp with, and the points where tests make a store
//! (or anything beside it) fail on purpose.

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A crash point for tests: with `CAIRN_CRASH_AT=<name>` in the
/// environment, the process aborts here, as a SIGKILL would stop it.
pub fn crash_point(name: &str) {
    if std::env::var_os("CAIRN_CRASH_AT").is_some_and(|v| v == name) {
        std::process::abort();
    }
}

/// A fault point for tests: with `CAIRN_FAULT=<name>` in the environment,
/// true here — the caller then fails the way a rare fault would make it
/// (a lost message, a dropped handle), so tests can show that recovery
/// holds without waiting for the fault to happen by chance.
pub fn fault_point(name: &str) -> bool {
    std::env::var_os("CAIRN_FAULT").is_some_and(|v| v == name)
}
