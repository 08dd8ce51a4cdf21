//! Segments inside a session (compaction, branch) and forks to a new worker.
//!
//! Compaction is a host policy: the summary is the active lineage's turns,
//! one line each (`user: …` / `assistant: …`), cut to 64 KiB; it becomes the
//! first own entry of the new segment and stands for the prefix in
//! `history`. The raw prefix stays readable (subscribers and export see it).

use super::lineage::active_lineage;
use super::{Runtime, RuntimeError};
use crate::SessionEvent;
use crate::ids::{DecisionId, RunId, SegmentId, Seq, SessionId, WorkerId};
use crate::journal::event::{LifecycleEvent, Payload};
use crate::store::JournalItem;
use crate::worker::ForkParent;
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::HashMap;

/// The longest compaction summary, in bytes.
pub const MAX_SUMMARY_BYTES: usize = 64 << 10;

/// A new segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct SegmentStarted {
    /// The session (unchanged).
    pub session_id: SessionId,
    /// The new, now active, segment.
    pub segment_id: SegmentId,
    /// Its `SegmentCreated` entry.
    pub seq: Seq,
}

/// A fork to a new worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Forked {
    /// The new session.
    pub session_id: SessionId,
    /// Its new worker.
    pub worker_id: WorkerId,
    /// The session it came from.
    pub parent_session_id: SessionId,
    /// The user message the fork was taken before, for re-editing.
    pub prompt: String,
}

pub(crate) use crate::fsutil::crash_point;

impl Runtime {
    /// Refuse while the session has a live run. A run whose terminal
    /// entry is being written is waited for (briefly), as a start does:
    /// whoever read its end may act on the session at once.
    async fn no_live_run(&self, session: &SessionId) -> Result<(), RuntimeError> {
        let mut waited = false;
        loop {
            let live = self
                .inner
                .registry
                .sessions()
                .get(session)
                .and_then(|l| l.live_run().cloned());
            match live {
                None => return Ok(()),
                Some(run) if run.finishing.load(std::sync::atomic::Ordering::SeqCst) && !waited => {
                    waited = true;
                    let _ = tokio::time::timeout(
                        std::time::Duration::from_secs(5),
                        self.wait(run.run_id),
                    )
                    .await;
                }
                Some(run) => {
                    return Err(RuntimeError::LiveRun {
                        session: session.clone(),
                        run: run.run_id,
                    });
                }
            }
        }
    }

    /// A session's well-formed entries, in order (unknown ones left out).
    pub(crate) async fn events_of(
        &self,
        session: &SessionId,
    ) -> Result<Vec<SessionEvent>, RuntimeError> {
        Ok(self
            .read(session, Seq(0))
            .await?
            .into_iter()
            .filter_map(JournalItem::into_event)
            .collect())
    }

    /// Compact the session: a new segment whose first own entry summarises
    /// the active lineage so far.
    pub async fn compact(&self, session: &SessionId) -> Result<SegmentStarted, RuntimeError> {
        self.open_worker_of(session)?;
        self.no_live_run(session).await?;
        let events = self.events_of(session).await?;
        let mut summary = String::new();
        let turns = super::history::turns_of(&events, None, usize::MAX);
        for turn in crate::component::legacy(turns) {
            let who = if turn.user() { "user" } else { "assistant" };
            summary.push_str(&format!("{who}: {}\n", turn.text));
        }
        if summary.len() > MAX_SUMMARY_BYTES {
            let mut cut = summary.len() - MAX_SUMMARY_BYTES;
            while !summary.is_char_boundary(cut) {
                cut += 1;
            }
            summary = format!("…{}", &summary[cut..]);
        }
        let journal = self.inner.journals.open(session).await?;
        let through = journal.last_seq().await;
        let written = journal
            .start_segment(Some((summary, through)), None)
            .await?;
        Ok(SegmentStarted {
            session_id: session.clone(),
            segment_id: written[0].segment_id,
            seq: written[0].seq,
        })
    }

    /// Branch the session at `at`: a sibling segment carrying the active
    /// lineage up to `at`, then its own entries.
    pub async fn branch(
        &self,
        session: &SessionId,
        at: Seq,
    ) -> Result<SegmentStarted, RuntimeError> {
        self.open_worker_of(session)?;
        self.no_live_run(session).await?;
        let events = self.events_of(session).await?;
        if !active_lineage(&events).iter().any(|e| e.seq == at) {
            return Err(RuntimeError::InvalidRequest(format!(
                "seq {at} is not an entry of session {session}'s active lineage"
            )));
        }
        let journal = self.inner.journals.open(session).await?;
        let written = journal.start_segment(None, Some(at)).await?;
        Ok(SegmentStarted {
            session_id: session.clone(),
            segment_id: written[0].segment_id,
            seq: written[0].seq,
        })
    }

    /// Fork the session before the user message at `before` (a `Started`
    /// entry) into a new worker and session: the history before it is
    /// carried (runs, tool records, decisions, compactions; ids rewritten),
    /// live runs, sockets and logs are not. Returns the message.
    pub async fn fork(
        &self,
        session: &SessionId,
        before: Seq,
        new_id: Option<SessionId>,
    ) -> Result<Forked, RuntimeError> {
        // The fork is a worker of the source's workspace: under its quota.
        let workspace = self.open_worker_of(session)?.record()?.workspace;
        self.reserve_worker(&workspace)?;
        let forked = self.fork_reserved(session, before, new_id).await;
        if forked.is_err() {
            self.worker_gone(&workspace);
        }
        forked
    }

    async fn fork_reserved(
        &self,
        session: &SessionId,
        before: Seq,
        new_id: Option<SessionId>,
    ) -> Result<Forked, RuntimeError> {
        let source = self.open_worker_of(session)?;
        let record = source.record()?;
        let events = self.events_of(session).await?;
        let lineage = active_lineage(&events);
        let prompt = lineage
            .iter()
            .find(|e| e.seq == before)
            .and_then(|e| match &e.payload {
                Payload::Lifecycle(LifecycleEvent::Started { prompt, resumes: None, .. }) => Some(prompt.to_string()),
                _ => None,
            })
            .ok_or_else(|| {
                RuntimeError::InvalidRequest(format!(
                    "seq {before} of session {session} is not a user message (a `started` entry of the active lineage)"
                ))
            })?;
        let carried: Vec<&SessionEvent> = lineage
            .into_iter()
            .filter(|e| e.seq < before)
            .filter(|e| {
                !matches!(
                    &e.payload,
                    Payload::Lifecycle(
                        LifecycleEvent::SegmentCreated { .. }
                            | LifecycleEvent::ObserverAttached { .. }
                            | LifecycleEvent::ObserverDetached { .. }
                            | LifecycleEvent::GenerationReserved { .. }
                            | LifecycleEvent::ResumedByReplay { .. }
                            | LifecycleEvent::ForkedFrom { .. }
                    )
                )
            })
            .collect();

        // The fork's id is of the source's workspace.
        let child = self.new_key(new_id, &record.workspace)?;
        if self.inner.workers.lookup(&child)?.is_some() {
            return Err(RuntimeError::SessionExists(child.unscoped()));
        }
        crash_point("fork-before-create");
        // On a shared store: the new session's lease first.
        self.lease_new(&child).await?;
        let window = self.crash_window();
        let worker = self.inner.workers.create_worker_staged(
            &child,
            record.component.as_deref(),
            &record.workspace,
        )?;
        // Derived from the source's metadata with the identity rewritten
        // (seed 003): its own segments, the fork's origin; its peers and
        // resolved manifest carried; the source's children not (owned work
        // does not move by copying a document).
        let mut meta = worker.metadata()?;
        let derived = source.metadata()?;
        meta.peers = derived.peers;
        meta.manifest = derived.manifest;
        meta.forked_from = Some(ForkParent {
            session_id: session.clone(),
            worker_id: source.id(),
            before_seq: before,
        });
        worker.write_metadata(&meta)?;
        // The artifacts the carried history references: the worktree of the
        // last generation before the message.
        let last_generation = carried.iter().rev().find_map(|e| match &e.payload {
            Payload::Lifecycle(LifecycleEvent::Started { generation, .. }) => Some(*generation),
            _ => None,
        });
        if let Some(generation) = last_generation {
            worker.seed_worktree(&source, generation)?;
        }
        worker.carry_snapshots(&source).map_err(|e| {
            RuntimeError::Storage(format!("the fork cannot carry its worktree snapshots: {e}"))
        })?;
        crash_point("fork-after-create");
        let journal = self
            .inner
            .journals
            .create(&child, meta.active_segment)
            .await?;
        let mut runs: HashMap<RunId, RunId> = HashMap::new();
        for e in &carried {
            if let Some(r) = e.run_id {
                runs.entry(r).or_default();
            }
        }
        // Park checkpoints go along under the new run ids.
        for e in &carried {
            if let Payload::Lifecycle(LifecycleEvent::Parked { checkpoint }) = &e.payload
                && let Some(old) = e.run_id
                && let Ok(bytes) = self.inner.store.checkpoint(session, checkpoint).await
            {
                self.inner
                    .store
                    .put_checkpoint(&child, runs[&old], &bytes)
                    .await?;
            }
        }
        crash_point("fork-mid-copy");
        let parent = session.clone();
        let prompt_copy = prompt.clone();
        journal
            .import(|first, segment| {
                let mut seqs: HashMap<Seq, Seq> = HashMap::new();
                let mut decisions: HashMap<DecisionId, DecisionId> = HashMap::new();
                let mut out = Vec::new();
                let mut next = first;
                out.push(SessionEvent {
                    session_id: child.clone(),
                    segment_id: segment,
                    run_id: None,
                    seq: next,
                    at_ms: crate::fsutil::now_ms(),
                    payload: Payload::Lifecycle(LifecycleEvent::ForkedFrom {
                        parent_session_id: parent.clone(),
                        before_seq: before,
                        prompt: prompt_copy,
                    }),
                    facts: None,
                    line: Default::default(),
                });
                for e in &carried {
                    next = next.next();
                    seqs.insert(e.seq, next);
                    let mut payload = e.payload.clone();
                    rewrite(&mut payload, &child, next, &mut decisions, &runs);
                    let facts = e.facts.clone().map(|mut f| {
                        f.run_id = runs.get(&f.run_id).copied().unwrap_or(f.run_id);
                        f.session_id = child.clone();
                        f.first_seq = seqs.get(&f.first_seq).copied().unwrap_or(next);
                        f.last_seq = next;
                        f.continues = f.continues.map(|r| runs.get(&r).copied().unwrap_or(r));
                        f.resumes = f.resumes.map(|r| runs.get(&r).copied().unwrap_or(r));
                        f.checkpoint = f
                            .checkpoint
                            .as_ref()
                            .and_then(|_| runs.get(&f.run_id).map(|r| r.to_string()));
                        f.pending_decisions = f
                            .pending_decisions
                            .iter()
                            .filter_map(|d| decisions.get(d).cloned())
                            .collect();
                        f
                    });
                    out.push(SessionEvent {
                        session_id: child.clone(),
                        segment_id: segment,
                        run_id: e.run_id.map(|r| runs[&r]),
                        seq: next,
                        at_ms: e.at_ms,
                        payload,
                        facts,
                        line: Default::default(),
                    });
                }
                out
            })
            .await?;
        crash_point("fork-before-publish");
        if last_generation.is_some() {
            // Generation 0 (the carried worktree) outlives this instance.
            self.snapshot_generation(worker.id(), crate::ids::Generation(0), &record.workspace)
                .await;
        }
        self.publish_new(&worker.record()?).await?;
        worker.publish()?;
        window.closed();
        self.index_session(worker.session_id(), &record.workspace)
            .await;
        Ok(Forked {
            session_id: worker.session_id().clone(),
            worker_id: worker.id(),
            parent_session_id: session.clone(),
            prompt,
        })
    }
}

/// Rewrite the identities inside a carried entry for the child session.
fn rewrite(
    payload: &mut Payload,
    child: &SessionId,
    seq: Seq,
    decisions: &mut HashMap<DecisionId, DecisionId>,
    runs: &HashMap<RunId, RunId>,
) {
    let map_run = |r: &mut Option<RunId>| {
        if let Some(old) = r {
            *r = Some(runs.get(old).copied().unwrap_or(*old));
        }
    };
    let Payload::Lifecycle(l) = payload else {
        return;
    };
    match l {
        LifecycleEvent::DecisionRequested { decision_id, .. } => {
            let new = DecisionId::derive(child, seq);
            decisions.insert(decision_id.clone(), new.clone());
            *decision_id = new;
        }
        LifecycleEvent::ApprovalRouted { decision_id, .. }
        | LifecycleEvent::DecisionRecorded { decision_id, .. }
        | LifecycleEvent::DecisionTimedOut { decision_id } => {
            if let Some(new) = decisions.get(decision_id) {
                *decision_id = new.clone();
            }
        }
        LifecycleEvent::Started {
            continues, resumes, ..
        } => {
            map_run(continues);
            map_run(resumes);
        }
        LifecycleEvent::Parked { checkpoint } => {
            if let Ok(old) = checkpoint.parse::<RunId>()
                && let Some(new) = runs.get(&old)
            {
                *checkpoint = new.to_string();
            }
        }
        _ => {}
    }
}
