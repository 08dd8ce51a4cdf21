//! The clocks and randomness a guest sees: deterministic functions of the
//! journal, so a replay sees the same values. Wall time is the journaled time
//! of the latest input (the run's start, then each recorded decision);
//! monotonic time is the wall time since the run's start, in nanoseconds.

use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A clock advanced only by journaled inputs.
#[derive(Debug, Clone)]
pub struct JournalClock {
    start_ms: u64,
    now_ms: Arc<AtomicU64>,
}

impl JournalClock {
    /// A clock reading `start_ms` (the `Started` entry's time).
    pub fn new(start_ms: u64) -> Self {
        JournalClock {
            start_ms,
            now_ms: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    /// Advance to the time of a journaled input (never backwards).
    pub fn advance_to(&self, at_ms: u64) {
        self.now_ms.fetch_max(at_ms, Ordering::Relaxed);
    }
}

impl wasmtime_wasi::HostWallClock for JournalClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(self.now_ms.load(Ordering::Relaxed))
    }
}

impl wasmtime_wasi::HostMonotonicClock for JournalClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        let now = self.now_ms.load(Ordering::Relaxed);
        now.saturating_sub(self.start_ms).saturating_mul(1_000_000)
    }
}

/// A deterministic byte stream from `seed`: SHA-256 in counter mode, 64 KiB
/// of it, cycled. Not for secrets: a controller's randomness must replay.
pub fn seeded_rng(seed: u64) -> wasmtime_wasi::Deterministic {
    let mut bytes = Vec::with_capacity(64 * 1024);
    let mut counter = 0u64;
    while bytes.len() < 64 * 1024 {
        let mut h = Sha256::new();
        h.update(seed.to_le_bytes());
        h.update(counter.to_le_bytes());
        bytes.extend_from_slice(&h.finalize());
        counter += 1;
    }
    wasmtime_wasi::Deterministic::new(bytes)
}
