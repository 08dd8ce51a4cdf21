//! The clock stores stamp with, and the points where tests make a store
//! (or anything beside it) fail on purpose.

/// Milliseconds since the Unix epoch (0 for a clock set before it). Read
/// on every emit: straight from the vDSO's clock, without `SystemTime`'s
/// checked subtraction and 128-bit millisecond count, which cost as much
/// again as the read.
pub fn now_ms() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    match u64::try_from(now.tv_sec) {
        Ok(secs) => secs * 1000 + now.tv_nsec as u64 / 1_000_000,
        Err(_) => 0,
    }
}

/// A test's setting, read from the environment once per process: the
/// points below are passed many times a run (a lookup of the environment
/// takes its lock and walks every variable), and nothing sets them after
/// the process starts.
fn setting(
    cell: &'static std::sync::OnceLock<Option<std::ffi::OsString>>,
    var: &str,
) -> Option<&'static std::ffi::OsStr> {
    cell.get_or_init(|| std::env::var_os(var)).as_deref()
}

/// A crash point for tests: with `CAIRN_CRASH_AT=<name>` in the
/// environment, the process aborts here, as a SIGKILL would stop it.
pub fn crash_point(name: &str) {
    static AT: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();
    if setting(&AT, "CAIRN_CRASH_AT").is_some_and(|v| v == name) {
        std::process::abort();
    }
}

/// A fault point for tests: with `CAIRN_FAULT=<name>` in the environment,
/// true here — the caller then fails the way a rare fault would make it
/// (a lost message, a dropped handle), so tests can show that recovery
/// holds without waiting for the fault to happen by chance.
pub fn fault_point(name: &str) -> bool {
    static FAULT: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();
    setting(&FAULT, "CAIRN_FAULT").is_some_and(|v| v == name)
}

#[cfg(test)]
mod clock_tests {
    #[test]
    fn now_ms_is_the_system_clock_in_milliseconds() {
        let ms = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
        };
        let before = ms();
        let now = super::now_ms();
        let after = ms();
        assert!(before <= now && now <= after, "{before} ≤ {now} ≤ {after}");
    }
}
