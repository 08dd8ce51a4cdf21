//! A run's CPU: charged by epoch ticks while its guest runs (the epoch
//! callback fires only inside guest code), ended at `cpu_ms`, and shared
//! fairly once a guest has run long. A guest past [`HEAVY_AFTER_TICKS`]
//! takes turns of one tick: first its workspace's gate (one turn per
//! workspace at a time), then the host's (one fewer turn than the
//! runtime's threads), both first come first served. So a spinning tenant
//! never holds every thread, and tenants' long runs alternate; a short
//! run never waits on either gate.

use super::EPOCH_TICK;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Ticks a guest runs before it takes turns (50 ms of guest time).
pub const HEAVY_AFTER_TICKS: u64 = 5;

/// A turn lasts at most this many ticks: a guest that stops in a host call
/// (a sleep, a decision) keeps nobody waiting.
const TURN_TICKS: u32 = 3;

/// The host's turns and each workspace's.
pub struct CpuGate {
    host: Arc<Semaphore>,
    workspaces: Mutex<HashMap<String, Arc<Semaphore>>>,
    per_workspace: usize,
}

impl std::fmt::Debug for CpuGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuGate")
            .field("host_turns", &self.host.available_permits())
            .field("per_workspace", &self.per_workspace)
            .finish()
    }
}

impl CpuGate {
    /// Gates for a runtime of `threads` threads: one thread always left to
    /// short runs; a workspace takes at most half of the rest (at least one).
    pub fn new(threads: usize) -> CpuGate {
        let host = threads.saturating_sub(1).max(1);
        CpuGate {
            host: Arc::new(Semaphore::new(host)),
            workspaces: Mutex::new(HashMap::new()),
            per_workspace: (host / 2).max(1),
        }
    }

    fn workspace(&self, name: &str) -> Arc<Semaphore> {
        let mut map = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        // Gates nobody holds or waits on are dropped as the map grows.
        if map.len() > 1024 {
            let full = self.per_workspace;
            map.retain(|_, g| Arc::strong_count(g) > 1 || g.available_permits() != full);
        }
        map.entry(name.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_workspace)))
            .clone()
    }
}

struct Turn {
    id: u64,
    _workspace: Option<OwnedSemaphorePermit>,
    _host: Option<OwnedSemaphorePermit>,
}

/// One run's meter, owned by its epoch callback.
pub struct Meter {
    gate: Arc<CpuGate>,
    workspace: String,
    ticks: u64,
    turn: Arc<Mutex<Option<Turn>>>,
    turns: u64,
}

/// What the epoch callback does after a tick.
pub enum Charge {
    /// Go on after a plain yield.
    Yield,
    /// Wait for a turn, then go on.
    Turn(Pin<Box<dyn Future<Output = ()> + Send>>),
}

impl Meter {
    /// A meter for a run of `workspace`.
    pub fn new(gate: Arc<CpuGate>, workspace: String) -> Meter {
        Meter {
            gate,
            workspace,
            ticks: 0,
            turn: Arc::new(Mutex::new(None)),
            turns: 0,
        }
    }

    /// The guest's time so far, in milliseconds.
    pub fn used_ms(&self) -> u64 {
        self.ticks.saturating_mul(EPOCH_TICK.as_millis() as u64)
    }

    /// Count one tick; past [`HEAVY_AFTER_TICKS`], end the turn held and
    /// queue for the next.
    pub fn tick(&mut self) -> Charge {
        self.ticks += 1;
        if self.ticks <= HEAVY_AFTER_TICKS {
            return Charge::Yield;
        }
        drop(self.turn.lock().unwrap_or_else(|p| p.into_inner()).take());
        self.turns += 1;
        let id = self.turns;
        let (workspace, host, slot) = (
            self.gate.workspace(&self.workspace),
            self.gate.host.clone(),
            self.turn.clone(),
        );
        Charge::Turn(Box::pin(async move {
            let w = workspace.acquire_owned().await.ok();
            let h = host.acquire_owned().await.ok();
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(Turn {
                id,
                _workspace: w,
                _host: h,
            });
            tokio::spawn(async move {
                tokio::time::sleep(EPOCH_TICK * TURN_TICKS).await;
                let mut held = slot.lock().unwrap_or_else(|p| p.into_inner());
                if held.as_ref().is_some_and(|t| t.id == id) {
                    *held = None;
                }
            });
        }))
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        drop(self.turn.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_long_guest_takes_turns_and_a_short_one_never_waits() {
        let gate = Arc::new(CpuGate::new(2));
        let mut a = Meter::new(gate.clone(), "a".into());
        let mut b = Meter::new(gate.clone(), "b".into());
        for _ in 0..HEAVY_AFTER_TICKS {
            assert!(matches!(a.tick(), Charge::Yield));
        }
        // a's turn: it holds the host's one turn.
        let Charge::Turn(t) = a.tick() else {
            panic!("no turn")
        };
        t.await;
        assert_eq!(gate.host.available_permits(), 0);
        for _ in 0..HEAVY_AFTER_TICKS {
            assert!(matches!(b.tick(), Charge::Yield), "a short run waited");
        }
        let Charge::Turn(wait_b) = b.tick() else {
            panic!("no turn")
        };
        let waiting = tokio::spawn(wait_b);
        tokio::time::sleep(EPOCH_TICK / 2).await;
        assert!(!waiting.is_finished(), "b ran while a held the turn");
        // a's next tick ends its turn; b gets it.
        let Charge::Turn(next_a) = a.tick() else {
            panic!("no turn")
        };
        waiting.await.unwrap();
        let queued = tokio::spawn(next_a);
        // A turn ends by itself after TURN_TICKS even with no tick.
        tokio::time::timeout(EPOCH_TICK * (TURN_TICKS + 5), queued)
            .await
            .expect("a turn held by a stopped guest ended")
            .unwrap();
        assert_eq!(a.used_ms(), (HEAVY_AFTER_TICKS + 2) * 10);
    }
}
