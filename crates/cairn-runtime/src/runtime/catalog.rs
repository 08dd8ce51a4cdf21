//! Listing runs, one run's summary, and deleting a session.

use super::state::{ObserverCounts, runs_of};
use super::{Runtime, RuntimeError};
use crate::ids::{RunId, SessionId};
use crate::journal::event::{CancelReason, LifecycleEvent, Payload, RunFacts, RunStatus};
use schemars::JsonSchema;
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Held, its controller not yet started.
    Preparing,
    /// Live.
    Running,
    /// Finished (an answer or a question).
    Finished,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Parked.
    Parked,
    /// Ended longer ago than the retention window (`[retention]
    /// ended_runs_ms`): `facts.status` says how it ended; its journal stays
    /// readable.
    Retired,
}

impl From<RunStatus> for RunState {
    fn from(s: RunStatus) -> Self {
        match s {
            RunStatus::Finished => RunState::Finished,
            RunStatus::Failed => RunState::Failed,
            RunStatus::Cancelled => RunState::Cancelled,
            RunStatus::Parked => RunState::Parked,
        }
    }
}

/// What `GET /v1/runs/{id}` reports: the run's facts (once ended) and this
/// instance's observer counts of its session.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RunSummary {
    /// The run.
    pub run_id: RunId,
    /// Its session.
    pub session_id: SessionId,
    /// Where it stands.
    pub state: RunState,
    /// Its facts, once it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub facts: Option<RunFacts>,
    /// Observers of its session here.
    pub observers: ObserverCounts,
}

impl Runtime {
    /// An ended run's state: how it ended, or `retired` once the retention
    /// window passed since.
    fn ended_state(&self, facts: &RunFacts) -> RunState {
        let window = self.inner.config.retention.as_millis() as u64;
        match crate::fsutil::now_ms().saturating_sub(facts.ended_at_ms) >= window {
            true => RunState::Retired,
            false => facts.status.into(),
        }
    }
}

impl Runtime {
    fn counts(&self, session: &SessionId) -> ObserverCounts {
        let (collecting, claiming, present) = self.observer_counts(session);
        ObserverCounts {
            collecting,
            claiming,
            present,
        }
    }

    /// The runs of one session, oldest first.
    pub async fn session_runs(&self, session: &SessionId) -> Result<Vec<RunSummary>, RuntimeError> {
        let events = self.events_of(session).await?;
        Ok(self.summaries(session, &events))
    }

    /// The summaries of the runs whose entries are in `events`, and of the
    /// session's live run.
    fn summaries(&self, session: &SessionId, events: &[crate::SessionEvent]) -> Vec<RunSummary> {
        let live = {
            let sessions = self.inner.registry.sessions();
            sessions.get(session).and_then(|l| l.live_run().cloned())
        };
        let observers = self.counts(session);
        let mut out = Vec::new();
        for (run, _, terminal) in runs_of(events) {
            let facts = terminal.and_then(|t| t.facts).map(|f| *f);
            let state = match (&facts, &live) {
                (Some(f), _) => self.ended_state(f),
                (None, Some(ctx)) if ctx.run_id == run => {
                    if ctx.running.load(Ordering::Relaxed) {
                        RunState::Running
                    } else {
                        RunState::Preparing
                    }
                }
                // No terminal and not live here: interrupted, awaiting restore.
                (None, _) => RunState::Running,
            };
            out.push(RunSummary {
                run_id: run,
                session_id: session.clone(),
                state,
                facts,
                observers,
            });
        }
        if let Some(ctx) = live
            && !out.iter().any(|r| r.run_id == ctx.run_id)
        {
            out.push(RunSummary {
                run_id: ctx.run_id,
                session_id: session.clone(),
                state: RunState::Preparing,
                facts: None,
                observers,
            });
        }
        out
    }

    /// A page of runs, newest first (by RunId, a UUIDv7): those of
    /// `workspace` (`None`: all), older than the run `cursor`, at most
    /// `limit`. Read from the run index, not the journals.
    pub async fn runs_page(
        &self,
        workspace: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<super::Page<RunSummary>, RuntimeError> {
        let before: Option<RunId> = super::listing::parse_cursor(cursor)?;
        let limit = limit.clamp(1, super::MAX_PAGE);
        let (rows, more) = self
            .run_index()
            .await?
            .page(workspace, before, limit)
            .await?;
        let live: std::collections::HashMap<RunId, bool> = {
            let sessions = self.inner.registry.sessions();
            sessions
                .values()
                .filter_map(|l| l.live_run())
                .map(|r| (r.run_id, r.running.load(Ordering::Relaxed)))
                .collect()
        };
        let next_cursor = more
            .then(|| rows.last().map(|(id, _)| id.to_string()))
            .flatten();
        let items = rows
            .into_iter()
            .map(|(run_id, r)| {
                let state = match (&r.facts, live.get(&run_id)) {
                    (Some(f), _) => self.ended_state(f),
                    (None, Some(false)) => RunState::Preparing,
                    // Running here, or interrupted and awaiting restore.
                    (None, _) => RunState::Running,
                };
                RunSummary {
                    run_id,
                    observers: self.counts(&r.session),
                    session_id: r.session,
                    state,
                    facts: r.facts,
                }
            })
            .collect();
        Ok(super::Page { items, next_cursor })
    }

    /// The session a run belongs to.
    pub async fn session_of_run(&self, run: RunId) -> Result<SessionId, RuntimeError> {
        if let Some(r) = self.inner.registry.runs().get(&run) {
            return Ok(r.ctx.session.clone());
        }
        if let Some(r) = self.run_index().await?.get(run).await? {
            return Ok(r.session);
        }
        // On a shared store: a run another instance started.
        match self.shared_session_of_run(run).await? {
            Some(session) if self.ensure_known(&session).await? => Ok(session),
            _ => Err(RuntimeError::UnknownRun(run)),
        }
    }

    /// One run's summary.
    pub async fn run_summary(&self, run: RunId) -> Result<RunSummary, RuntimeError> {
        let session = self.session_of_run(run).await?;
        // Only the run's start and end, read from where its entries begin
        // a bounded page at a time, never the whole journal.
        let mut ends = Vec::new();
        self.scan(&session, self.run_after(run).await, |item| {
            let Some(e) = item.event().filter(|e| e.run_id == Some(run)) else {
                return true;
            };
            let terminal = matches!(&e.payload, Payload::Lifecycle(l) if l.is_terminal());
            if terminal
                || matches!(
                    &e.payload,
                    Payload::Lifecycle(LifecycleEvent::Started { .. })
                )
            {
                ends.push(e.clone());
            }
            !terminal
        })
        .await?;
        self.summaries(&session, &ends)
            .into_iter()
            .find(|r| r.run_id == run)
            .ok_or(RuntimeError::UnknownRun(run))
    }

    /// Delete a session (seed 003's order): it stops accepting starts, its
    /// live run is stopped and awaited, then its index entry and directory
    /// go. A retried delete finishes an interrupted one.
    pub async fn delete_session(&self, session: &SessionId) -> Result<(), RuntimeError> {
        let worker = self
            .inner
            .workers
            .lookup(session)?
            .ok_or_else(|| RuntimeError::UnknownSession(session.clone()))?;
        // A start that has not taken the worker it was made with opens it
        // again (and finds it gone).
        self.inner.registry.made().retain(|w| w.id() != worker);
        let live = {
            let mut sessions = self.inner.registry.sessions();
            let entry = sessions.entry(session.clone()).or_default();
            entry.deleting = true;
            entry.run.clone()
        };
        if let Some(ctx) = live {
            ctx.cancel(CancelReason::External, "the session is being deleted");
            let _ = tokio::time::timeout(Duration::from_secs(30), self.wait(ctx.run_id)).await;
        }
        for pending in self.pending_decisions(Some(session)) {
            self.inner.broker.withdraw(&pending.decision_id);
        }
        // Owned work next (seed 003): every run below it stops, and each
        // child is pruned with its loan ended — no child outlives its
        // deleted parent still naming it as live.
        self.stop_below(worker).await;
        if let Ok(meta) = self
            .inner
            .workers
            .open_worker(worker)
            .and_then(|w| w.metadata())
        {
            for child in &meta.children {
                if let Ok(w) = self.inner.workers.open_worker(child.worker_id) {
                    let _ = w.update_record(|record| match record.parent.as_mut() {
                        Some(p) => !std::mem::replace(&mut p.loan_reclaimed, true),
                        None => false,
                    });
                }
            }
        }
        let window = self.crash_window();
        // A child deleted ends its loan: its parent records it pruned.
        let record = self
            .inner
            .workers
            .open_worker(worker)
            .and_then(|w| w.record())
            .ok();
        let workspace = record.as_ref().map(|r| r.workspace.clone());
        let parent = record.and_then(|r| r.parent);
        if let Some(p) = parent {
            self.mark_pruned(&p.worker_id, worker);
        }
        super::segments::crash_point("delete-before-remove");
        // The shared store's rows first: no instance serves it after this.
        self.forget_shared(session).await?;
        self.inner.workers.delete_worker(worker, session)?;
        self.inner.journals.close(session);
        if let Err(e) = self.inner.run_index.forget_session(session).await {
            tracing::warn!(session_id = %session, "its runs not unindexed: {e}");
        }
        if let Some(fs) = &self.inner.file_store {
            fs.forget(session);
        }
        self.inner.registry.sessions().remove(session);
        // What capabilities kept warm for it (MCP servers) goes too.
        self.inner.capabilities.forget(session.as_str()).await;
        if let Some(ws) = workspace {
            self.worker_gone(&ws);
        }
        window.closed();
        Ok(())
    }
}

/// Process metrics, for `GET /metrics`.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Runs by state: live ones now, ended ones since the process started.
    pub runs: Vec<(RunState, u64)>,
    /// Journal entries this process appended.
    pub events_appended: u64,
    /// Journal subscribers now.
    pub subscribers: usize,
    /// Decisions waiting for an answer.
    pub decisions_pending: usize,
    /// Live runs blocked on at least one of them.
    pub runs_waiting: usize,
    /// Sessions whose journal (and live window) is held in memory.
    pub open_journals: usize,
    /// Bytes (as journaled) the live windows hold together.
    pub live_window_bytes: u64,
    /// Live windows emptied to stay under the host-wide cap.
    pub live_windows_evicted: u64,
    /// Compiled components held ready, and their bytes.
    pub compiled_components: (usize, u64),
    /// On a shared store: leases this instance holds, and relay
    /// notifications heard since it started.
    pub shared: Option<(usize, u64)>,
}

impl Runtime {
    /// The process's metrics now.
    pub fn metrics(&self) -> Metrics {
        let pending = self.pending_decisions(None);
        let (mut preparing, mut running) = (0, 0);
        {
            let sessions = self.inner.registry.sessions();
            for live in sessions.values() {
                if let Some(run) = live.live_run() {
                    if run.running.load(Ordering::Relaxed) {
                        running += 1;
                    } else {
                        preparing += 1;
                    }
                }
            }
        }
        let ended = |i: usize| self.inner.ended[i].load(Ordering::Relaxed);
        Metrics {
            runs: vec![
                (RunState::Preparing, preparing),
                (RunState::Running, running),
                (RunState::Finished, ended(0)),
                (RunState::Failed, ended(1)),
                (RunState::Cancelled, ended(2)),
                (RunState::Parked, ended(3)),
            ],
            events_appended: self.inner.telemetry.appended.get(),
            subscribers: self.inner.journals.subscriber_total(),
            decisions_pending: pending.len(),
            runs_waiting: {
                let mut runs: Vec<_> = pending.iter().map(|d| d.run_id).collect();
                runs.sort();
                runs.dedup();
                runs.len()
            },
            open_journals: self.inner.journals.open_count(),
            live_window_bytes: self.inner.journals.window_total(),
            live_windows_evicted: self.inner.journals.windows_evicted(),
            compiled_components: self.inner.components.cache_usage(),
            shared: self.shared_metrics(),
        }
    }
}
