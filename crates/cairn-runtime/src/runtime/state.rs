//! `AgentState` and session summaries: computed from the records on every
//! read, never stored, never an event.

use super::{Runtime, RuntimeError};
use crate::ids::{RunId, Seq, SessionId, WorkerId};
use crate::journal::event::{LifecycleEvent, Payload, RunFacts, RunStatus};
use crate::store::JournalItem;
use crate::worker::WorkerStatus;
use schemars::JsonSchema;
use serde::Serialize;
use std::sync::atomic::Ordering;

/// What a session is blocked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BlockReason {
    /// A decision is pending.
    Approval,
    /// The controller said it is retrying a provider.
    ProviderRetry,
}

/// A session's outward state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum AgentState {
    /// A run is held but its controller has not started.
    Preparing,
    /// A live run waits.
    Blocked {
        /// On what.
        on: BlockReason,
    },
    /// A run is live.
    Running,
    /// The last run parked.
    Parked,
    /// No live run; the last one ended otherwise, or there was none.
    Done,
    /// The session's files are damaged (`corrupt` says how); every other
    /// session is unaffected.
    Corrupt,
}

/// Observer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ObserverCounts {
    /// Collecting observers.
    pub collecting: usize,
    /// Claiming observers (0 or 1).
    pub claiming: usize,
    /// Observers with a human present.
    pub present: usize,
}

/// What `inspect` and `GET /v1/sessions/{id}` report.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SessionSummary {
    /// The session.
    pub session_id: SessionId,
    /// Its worker.
    pub worker_id: WorkerId,
    /// Its state, computed now.
    pub state: AgentState,
    /// Its observers in this process.
    pub observers: ObserverCounts,
    /// The live run, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_run: Option<RunId>,
    /// The last ended run's facts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunFacts>,
    /// The component it is bound to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// Whether a replay diverged (the worker never runs again).
    pub stale: bool,
    /// Its last seq.
    pub last_seq: Seq,
    /// Its workspace.
    pub workspace: String,
    /// The segment appends go to.
    pub active_segment: crate::ids::SegmentId,
    /// Every segment, in creation order.
    pub segments: Vec<crate::ids::SegmentId>,
    /// The session this one was forked from, and before which seq.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<(SessionId, Seq)>,
    /// Why the session cannot be read (`path:line: what`), when it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrupt: Option<String>,
    /// The workers it spawned (delegation), with their scopes and states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<crate::worker::ChildRef>,
    /// The peers it registered (status only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<crate::worker::PeerRef>,
    /// The worker that spawned it, when it is a child.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<crate::worker::ParentRef>,
    /// A component update asked while a run was live, taken at the next
    /// run's start (or why it was not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_update: Option<super::update::PendingUpdate>,
}

impl Runtime {
    /// The session's summary, computed from the records.
    pub async fn summary(&self, session: &SessionId) -> Result<SessionSummary, RuntimeError> {
        self.summary_inner(session)
            .await
            .map_err(|e| self.home_relative(e.for_session(session)))
    }

    /// The facts of the session's last ended run: its journal read from the
    /// end, a page at a time, until a terminal entry (a summary must not
    /// read a million entries to find one near the end).
    async fn last_facts(
        &self,
        session: &SessionId,
        last_seq: Seq,
    ) -> Result<Option<crate::journal::event::RunFacts>, RuntimeError> {
        const PAGE: u64 = 1024;
        let mut end = last_seq.0;
        while end > 0 {
            let from = end.saturating_sub(PAGE);
            let items = self
                .read_page(session, Seq(from), (end - from) as usize)
                .await?;
            let found = items.iter().rev().find_map(|i| match i {
                JournalItem::Event(e) => e.facts.as_deref().cloned(),
                JournalItem::Unknown { .. } => None,
            });
            if found.is_some() {
                return Ok(found);
            }
            end = from;
        }
        Ok(None)
    }

    async fn summary_inner(&self, session: &SessionId) -> Result<SessionSummary, RuntimeError> {
        let worker = self.open_worker_of(session)?;
        let record = worker.record()?;
        let meta = worker.metadata()?;
        let last_seq = self.last_seq(session).await?;
        let live = {
            let sessions = self.inner.registry.sessions();
            sessions.get(session).and_then(|l| l.live_run().cloned())
        };
        // The last ended run's end is before a live run's entries: looked
        // for from there, not through everything the live run emitted (a
        // poll of an emitting session read its whole journal, seconds of
        // it on a loaded database).
        let search_from = live
            .as_ref()
            .map_or(last_seq, |run| run.began_after.min(last_seq));
        let last_run = self.last_facts(session, search_from).await?;
        let state = match &live {
            Some(run) => {
                if !run.running.load(Ordering::Relaxed) {
                    AgentState::Preparing
                } else if self
                    .pending_decisions(Some(session))
                    .iter()
                    .any(|p| p.run_id == run.run_id)
                {
                    AgentState::Blocked {
                        on: BlockReason::Approval,
                    }
                } else if run.retrying.load(Ordering::Relaxed) {
                    AgentState::Blocked {
                        on: BlockReason::ProviderRetry,
                    }
                } else {
                    AgentState::Running
                }
            }
            None => match &last_run {
                Some(f) if f.status == RunStatus::Parked => AgentState::Parked,
                _ => AgentState::Done,
            },
        };
        let (collecting, claiming, present) = self.observer_counts(session);
        Ok(SessionSummary {
            session_id: session.clone(),
            worker_id: worker.id(),
            state,
            observers: ObserverCounts {
                collecting,
                claiming,
                present,
            },
            live_run: live.map(|r| r.run_id),
            last_run,
            component: record.component,
            stale: record.status == WorkerStatus::Stale,
            last_seq,
            workspace: record.workspace,
            active_segment: meta.active_segment,
            segments: meta.segments.iter().map(|s| s.segment_id).collect(),
            forked_from: meta.forked_from.map(|f| (f.session_id, f.before_seq)),
            corrupt: None,
            children: meta.children,
            peers: meta.peers,
            parent: record.parent,
            pending_update: self.pending_update(session),
        })
    }
}

/// The runs of a journal, in order: (run, its `Started`, its terminal).
pub(crate) fn runs_of(
    events: &[crate::SessionEvent],
) -> Vec<(
    RunId,
    Option<crate::SessionEvent>,
    Option<crate::SessionEvent>,
)> {
    let mut runs: Vec<(
        RunId,
        Option<crate::SessionEvent>,
        Option<crate::SessionEvent>,
    )> = Vec::new();
    for e in events {
        let Some(run) = e.run_id else { continue };
        let index = match runs.iter().position(|(r, _, _)| *r == run) {
            Some(i) => i,
            None => {
                runs.push((run, None, None));
                runs.len() - 1
            }
        };
        match &e.payload {
            Payload::Lifecycle(LifecycleEvent::Started { .. }) => runs[index].1 = Some(e.clone()),
            Payload::Lifecycle(l) if l.is_terminal() => runs[index].2 = Some(e.clone()),
            _ => {}
        }
    }
    runs
}
