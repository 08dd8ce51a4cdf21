//! The runtime's side of a run: what a run task is handed ([`RunEnv`]) and
//! the calls it makes back ([`Supervisor`]).

use super::Runtime;
use super::run::{RunCtx, RunEnv, Supervisor};
use crate::ids::{Generation, RunId, SessionId, WorkerId};
use crate::journal::event::{Payload, RunFacts, RunStatus};
use crate::worker::GenerationDir;
use async_trait::async_trait;
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Runtime {
    /// What one run task is given of this runtime.
    pub(crate) fn run_env(&self) -> RunEnv {
        RunEnv {
            store: self.inner.store.clone(),
            workers: self.inner.workers.clone(),
            components: self.inner.components.clone(),
            broker: self.inner.broker.clone(),
            capabilities: self.inner.capabilities.clone(),
            keep_generations: self.inner.config.host.retention.keep_generations,
            evict_idle_ms: self.inner.config.host.runs.evict_idle_ms,
            evicted: (
                self.inner.telemetry.evicted.clone(),
                self.inner.telemetry.evictions.clone(),
            ),
            supervisor: Arc::new(self.clone()),
        }
    }
}

#[async_trait]
impl Supervisor for Runtime {
    fn generation_live(
        &self,
        run: RunId,
        session: &SessionId,
        dir: &GenerationDir,
    ) -> Vec<Box<dyn super::SeamGuard>> {
        self.inner
            .seams
            .iter()
            .filter_map(|seam| seam.live(self, super::LiveGeneration { run, session, dir }))
            .collect()
    }

    fn loan(&self, worker: WorkerId, run: RunId) -> Option<cap_std::fs::Dir> {
        super::delegation::loan_for(self, worker, run)
    }

    fn loans_follow(
        &self,
        parent: WorkerId,
        from: crate::ids::Generation,
        to: &crate::worker::GenerationDir,
    ) {
        super::delegation::loans_follow(self, parent, from, to);
    }

    async fn workers_call(&self, ctx: &RunCtx, call: &serde_json::Value) -> serde_json::Value {
        super::delegation::call(self, ctx, call).await
    }

    async fn generation_stopped(
        &self,
        worker: WorkerId,
        generation: Generation,
        budget: crate::worktree::Budget,
    ) {
        self.snapshot_with(worker, generation, budget).await;
    }

    async fn snapshot_recorded(&self, worker: WorkerId, digest: &str) {
        self.share_snapshot(worker, digest).await;
    }

    fn leaving_with_run(&self, session: &SessionId) -> Vec<Payload> {
        Runtime::leaving_with_run(self, session)
    }

    fn lost_authority(&self, session: &SessionId) {
        self.inner.journals.close(session);
    }

    fn draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }

    async fn run_ended(
        &self,
        worker: WorkerId,
        session: &SessionId,
        run: RunId,
        status: RunStatus,
        shutdown: bool,
    ) {
        super::delegation::child_ended(self, worker, session, run, status, shutdown).await;
    }

    fn root_ended(&self, worker: WorkerId) {
        Runtime::root_ended(self, worker);
    }

    fn run_counted(&self, facts: &RunFacts) {
        let t = &self.inner.telemetry;
        let status = super::telemetry::StatusLabel {
            status: super::status_name(facts.status),
        };
        t.runs_ended.get_or_create(&status).inc();
        t.run_seconds
            .get_or_create(&status)
            .observe(facts.usage.wall_ms as f64 / 1000.0);
        let i = match facts.status {
            RunStatus::Finished => 0,
            RunStatus::Failed => 1,
            RunStatus::Cancelled => 2,
            RunStatus::Parked => 3,
        };
        self.inner.ended[i].fetch_add(1, Ordering::Relaxed);
    }
}
