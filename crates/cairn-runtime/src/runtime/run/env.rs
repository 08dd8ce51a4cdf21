//! What a run task is handed: the stores it writes, the engine it runs on,
//! and the few calls it makes back into the runtime — nothing else of the
//! runtime's world (as wasmtime hands a `Store` its data, not the
//! `Engine`'s).

use super::RunCtx;
use crate::component::Components;
use crate::ids::{Generation, RunId, SessionId, WorkerId};
use crate::journal::event::{Payload, RunFacts, RunStatus};
use crate::runtime::SeamGuard;
use crate::runtime::decisions::Broker;
use crate::store::{Store, Workers};
use crate::worker::GenerationDir;
use async_trait::async_trait;
use std::sync::Arc;

/// The narrow dependencies of one run task.
#[derive(Clone)]
pub(crate) struct RunEnv {
    /// The session's journal store: its size at start, park checkpoints.
    pub store: Arc<dyn Store>,
    /// The worker's generation directories (retention, `stale`).
    pub workers: Arc<dyn Workers>,
    /// The engine the controller runs on.
    pub components: Arc<Components>,
    /// Pending decisions, withdrawn at the run's end.
    pub broker: Arc<Broker>,
    /// What controllers may call beyond the journal.
    pub capabilities: Arc<super::Capabilities>,
    /// How many generations' worktrees a worker keeps (0: all).
    pub keep_generations: u64,
    /// `[runs] evict_idle_ms`: timer waits that evict the instance.
    pub evict_idle_ms: u64,
    /// Runs evicted now (`cairn_runs_evicted`) and evictions so far.
    pub evicted: (
        prometheus_client::metrics::gauge::Gauge,
        prometheus_client::metrics::counter::Counter,
    ),
    /// The runtime's side of what a run cannot do alone.
    pub supervisor: Arc<dyn Supervisor>,
}

/// The calls a run makes back into the runtime that started it: telling
/// the seams a generation is live, delegation (a `workers` import), the
/// worktree snapshot a shared store keeps, and the parent's bookkeeping
/// when a child ends.
#[async_trait]
pub(crate) trait Supervisor: Send + Sync + 'static {
    /// The generation is live: what the seams serve for it.
    fn generation_live(
        &self,
        run: RunId,
        session: &SessionId,
        dir: &GenerationDir,
    ) -> Vec<Box<dyn SeamGuard>>;

    /// The `/loan` this run of a child gets, if it holds the loan.
    fn loan(&self, worker: WorkerId, run: RunId) -> Option<cap_std::fs::Dir>;

    /// A parent restored into `to` from a run of generation `from`: the
    /// scopes it loaned follow it (see `delegation::loans_follow`).
    fn loans_follow(&self, parent: WorkerId, from: Generation, to: &GenerationDir);

    /// Answer one live `workers` call of `ctx`'s run.
    async fn workers_call(&self, ctx: &RunCtx, call: &serde_json::Value) -> serde_json::Value;

    /// The generation stopped: keep its worktree where the next
    /// generation, on any instance, starts from it.
    async fn generation_stopped(
        &self,
        worker: WorkerId,
        generation: Generation,
        budget: crate::worktree::Budget,
    );

    /// A worktree snapshot was recorded for `worker`: a shared store keeps
    /// it where every instance finds it.
    async fn snapshot_recorded(&self, worker: WorkerId, digest: &str);

    /// Observer entries that go in the run's end write (a claimant that
    /// leaves with the run).
    fn leaving_with_run(&self, session: &SessionId) -> Vec<Payload>;

    /// Another writer holds the session: forget what this process holds
    /// of its journal.
    fn lost_authority(&self, session: &SessionId);

    /// Whether the runtime is shutting down (a refused end is then not
    /// retried).
    fn draining(&self) -> bool;

    /// The run's end is durable and its followers have not heard of it:
    /// count it in the runtime's metrics (so a client that reads the end
    /// reads it counted, not a moment later).
    fn run_counted(&self, facts: &RunFacts);

    /// A run of a root (a worker with no parent) that spawned ended: stop
    /// its tree's unclaimed descendants that were not spawned `continue`.
    fn root_ended(&self, worker: WorkerId);

    /// The run's end is durable: a child's parent hears of it.
    async fn run_ended(
        &self,
        worker: WorkerId,
        session: &SessionId,
        run: RunId,
        status: RunStatus,
        shutdown: bool,
    );
}
