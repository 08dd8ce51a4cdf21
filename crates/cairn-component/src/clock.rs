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

/// A deterministic, endless byte stream from the journaled seed: SHA-256 in
/// counter mode over (`domain`, seed, block counter). The secure stream
/// (no domain) is the one earlier hosts gave for its first 64 KiB, and goes
/// on instead of cycling; `wasi:random/insecure` has its own domain. Not for
/// secrets: a controller's randomness must replay.
pub struct JournalRng {
    domain: &'static [u8],
    seed: u64,
    counter: u64,
    block: [u8; 32],
    used: usize,
}

impl JournalRng {
    /// The stream of `seed` in `domain` (`b""`: the secure stream).
    pub fn new(domain: &'static [u8], seed: u64) -> Self {
        JournalRng {
            domain,
            seed,
            counter: 0,
            block: [0; 32],
            used: 32,
        }
    }

    fn next_byte(&mut self) -> u8 {
        if self.used == 32 {
            let mut h = Sha256::new();
            h.update(self.domain);
            h.update(self.seed.to_le_bytes());
            h.update(self.counter.to_le_bytes());
            self.block = h.finalize().into();
            self.counter += 1;
            self.used = 0;
        }
        self.used += 1;
        self.block[self.used - 1]
    }
}

impl rand_core::TryRng for JournalRng {
    type Error = rand_core::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        let mut b = [0u8; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let mut b = [0u8; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for b in dst {
            *b = self.next_byte();
        }
        Ok(())
    }
}

/// The secure stream of `seed` (see [`JournalRng`]).
pub fn seeded_rng(seed: u64) -> JournalRng {
    JournalRng::new(b"", seed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::Rng;

    #[test]
    fn the_stream_is_the_old_one_then_never_cycles() {
        let mut rng = seeded_rng(42);
        let mut out = vec![0u8; 128 * 1024];
        rng.fill_bytes(&mut out);
        let mut h = Sha256::new();
        h.update(42u64.to_le_bytes());
        h.update(0u64.to_le_bytes());
        assert_eq!(
            &out[..32],
            h.finalize().as_slice(),
            "the first block as before"
        );
        assert_ne!(&out[..1024], &out[64 * 1024..65 * 1024], "no 64 KiB cycle");
        let mut again = seeded_rng(42);
        let mut same = vec![0u8; 128 * 1024];
        again.fill_bytes(&mut same);
        assert_eq!(out, same, "the same seed, the same stream");
        let mut insecure = JournalRng::new(b"insecure", 42);
        assert_ne!(insecure.next_u64(), seeded_rng(42).next_u64());
    }
}
