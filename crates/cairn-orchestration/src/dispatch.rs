//! The dispatcher: at most `[queue] max_concurrency` rows `processing`; each
//! dispatch persists the key's worker (session id first) before its run
//! starts, follows the run until it ends or waits on a decision, and writes
//! the row's outcome and one ledger row. On start, `processing` rows are
//! recovered without counting an attempt: the runtime's restore by replay
//! has already resumed their runs, the dispatcher only follows them again.

use super::model::{Record, RecordStatus, Records, Resume, Row, RowState};
use super::{Queue, QueueError, retire_in, supersede};
use cairn_runtime::ids::{DecisionId, RunId, Seq, SessionId};
use cairn_runtime::journal::Delivery;
use cairn_runtime::journal::event::{
    FinishOutcome, ImportedTurn, LifecycleEvent, Liveness, LivenessPolicy, Payload, RunStatus,
};
use cairn_runtime::runtime::{ComponentRef, StartRun};
use std::sync::Arc;
use std::time::Duration;

/// How a dispatch ended.
#[derive(Debug)]
enum Ending {
    /// The run finished with an answer.
    Done(String),
    /// It asked a question (its text).
    Question(String),
    /// It waits on a decision nobody present can answer: parked (or
    /// about to, its controller can park), or still live (`true`: its
    /// controller cannot park, so its run holds an instance until the
    /// answer; no ledger row, and it counts against `max_concurrency`).
    Waiting(DecisionId, String, bool),
    /// It parked.
    Parked,
    /// It failed or was cancelled.
    Failed(String),
    /// Its worker could not be resumed nor replayed.
    Blocked(String),
}

/// A dispatch under way: its run and the prompt it was given.
pub(crate) struct Dispatched {
    pub(crate) session: SessionId,
    pub(crate) run: RunId,
    pub(crate) prompt: String,
    /// An answer for the run's first decision request: the card's answer
    /// when the run that asked is gone (parked, or stopped by a shutdown)
    /// and this one asks again.
    pub(crate) answer: Option<serde_json::Value>,
}

fn component_of(name: &str) -> Result<ComponentRef, String> {
    ComponentRef::named(name).ok_or_else(|| {
        format!("component {name:?} is neither a built-in example nor a sha256: digest")
    })
}

impl Queue {
    /// Dispatch until the runtime closes; with `until_idle`, until no row
    /// is pending or processing.
    pub async fn work(self: &Arc<Self>, until_idle: bool) -> Result<(), QueueError> {
        self.recover().await?;
        let mut closing = self.rt.closing();
        loop {
            self.fill().await?;
            if until_idle && self.idle()? {
                return Ok(());
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = closing.changed() => if *closing.borrow() { return Ok(()) },
            }
        }
    }

    fn idle(&self) -> Result<bool, QueueError> {
        let busy = self
            .store
            .cards()?
            .rows
            .iter()
            .any(|r| matches!(r.state, RowState::Pending | RowState::Processing));
        Ok(!busy
            && self
                .inflight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty())
    }

    /// Follow again every row a crash left `processing` (no attempt counted).
    async fn recover(self: &Arc<Self>) -> Result<(), QueueError> {
        let rows: Vec<Row> = self
            .store
            .cards()?
            .rows
            .into_iter()
            .filter(|r| r.state == RowState::Processing)
            .collect();
        for row in rows {
            self.spawn(row, true);
        }
        Ok(())
    }

    /// Move pending rows to processing while there is room; start them.
    async fn fill(self: &Arc<Self>) -> Result<(), QueueError> {
        let chosen = {
            let _guard = self.lock.lock().await;
            // What to start depends on the rows alone: unchanged since a
            // fill that started nothing, there is nothing to start.
            let stamp = self.store.cards_stamp();
            let quiet = || self.quiet.lock().unwrap_or_else(|p| p.into_inner());
            if stamp.is_some() && *quiet() == stamp {
                return Ok(());
            }
            let mut cards = self.store.cards()?;
            // Open worker sessions are bounded (seed 001): a row processing,
            // and an awaiting one whose run is still live (a controller that
            // cannot park waits holding its instance).
            let live_awaiting = self.live_awaiting(&cards)?;
            let busy = cards
                .rows
                .iter()
                .filter(|r| r.state == RowState::Processing)
                .count()
                + live_awaiting;
            let room = self.max.saturating_sub(busy);
            let mut chosen = Vec::new();
            let now = cairn_runtime::fsutil::now_ms();
            for i in super::fairness::fair_picks(&cards.rows, self.max, room) {
                let row = &mut cards.rows[i];
                row.state = RowState::Processing;
                row.attempts += 1;
                row.updated_ms = now;
                chosen.push(row.clone());
            }
            if !chosen.is_empty() {
                self.store.put_cards(&cards)?;
                *quiet() = None;
            } else if live_awaiting == 0 {
                *quiet() = stamp;
            } else {
                // A live awaiting run may end without any row changing:
                // look again next tick.
                *quiet() = None;
            }
            chosen
        };
        for row in chosen {
            self.spawn(row, false);
        }
        Ok(())
    }

    /// Awaiting rows whose worker has a live run.
    fn live_awaiting(&self, cards: &super::model::Cards) -> Result<usize, QueueError> {
        if !cards.rows.iter().any(|r| r.state == RowState::Awaiting) {
            return Ok(0);
        }
        let records = self.store.records()?;
        let live: std::collections::HashSet<SessionId> =
            self.rt.live_runs().into_iter().map(|(s, _)| s).collect();
        Ok(cards
            .rows
            .iter()
            .filter(|r| r.state == RowState::Awaiting)
            .filter(|r| {
                records
                    .sessions
                    .get(&r.worker_key)
                    .is_some_and(|rec| live.contains(&rec.session_id))
            })
            .count())
    }

    /// Dispatch and follow a row (`recovering`: a row a crash left
    /// processing, whose journal is read before anything is dispatched).
    fn spawn(self: &Arc<Self>, row: Row, recovering: bool) {
        let key = format!("{}/{}", row.workspace, row.card);
        if !self
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone())
        {
            return;
        }
        let q = self.clone();
        tokio::spawn(async move {
            let dispatched = match recovering {
                true => match q.recovered(&row).await {
                    Ok(Some(d)) => Ok(d),
                    Ok(None) => q.dispatch(&row).await,
                    Err(e) => Err(e),
                },
                false => q.dispatch(&row).await,
            };
            let ending = match dispatched {
                Ok(d) => Some((q.follow(&d, &row).await, Some(d))),
                Err(QueueError::Runtime(cairn_runtime::runtime::RuntimeError::ShuttingDown)) => {
                    None
                }
                Err(e) => Some((Ending::Blocked(e.to_string()), None)),
            };
            if let Some((ending, dispatched)) = ending
                && !matches!(ending, Ending::Failed(ref m) if m == SHUTDOWN)
                && let Err(e) = q.end(&row, ending, dispatched.as_ref()).await
            {
                tracing::error!(
                    card = %row.card,
                    workspace = %row.workspace,
                    error = %e,
                    "the work queue could not record the card's end"
                );
            }
            q.inflight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            q.wake.notify_one();
        });
    }

    /// Give the row's key its worker and a run: the stored worker when it
    /// can be resumed, else a fresh one with the card's transcript
    /// replayed into it.
    async fn dispatch(&self, row: &Row) -> Result<Dispatched, QueueError> {
        let _guard = self.lock.lock().await;
        let mut records = self.store.records()?;
        let resume = self
            .store
            .cards()?
            .rows
            .into_iter()
            .find(|r| r.card == row.card && r.workspace == row.workspace)
            .and_then(|r| r.resume);
        let key = row.worker_key.clone();
        let Some(record) = records.sessions.get(&key).cloned() else {
            let record = self.fresh_worker(row, false, Vec::new(), None).await?;
            cairn_runtime::fsutil::crash_point("queue-worker-made");
            records.sessions.insert(key.clone(), record.clone());
            self.store.put_records(&records)?;
            return self
                .start(&mut records, &key, row, row.prompt.clone(), None)
                .await;
        };
        if record.status == RecordStatus::Blocked {
            return Err(QueueError::Conflict(format!(
                "worker {key} is blocked: {}",
                record.reason.clone().unwrap_or_default()
            )));
        }
        match self.resumable(&record, row).await {
            Ok(()) => self.resume(&mut records, &record, row, resume).await,
            Err(why) => self.replay(&mut records, &record, row, resume, why).await,
        }
    }

    /// Why the stored worker cannot be resumed, if it cannot.
    async fn resumable(&self, record: &Record, row: &Row) -> Result<(), String> {
        match self.rt.session_worker(&record.session_id) {
            Ok(Some(w)) if w == record.worker_id => {}
            Ok(_) => return Err(format!("its session {} is gone", record.session_id)),
            Err(e) => return Err(format!("its session cannot be read: {e}")),
        }
        let identity = self
            .rt
            .worktree_identity(record.worker_id)
            .map_err(|e| format!("its worker cannot be opened: {e}"))?;
        if identity != Some((record.key.clone(), record.worktree.clone())) {
            return Err("its worktree is missing or was recreated".into());
        }
        // Every entry parses (a page at a time: nothing is kept).
        self.rt
            .scan(&record.session_id, Seq(0), |_| true)
            .await
            .map_err(|e| format!("its session is unreadable: {e}"))?;
        let component = component_of(&row.component)?;
        self.rt
            .add_component(&component)
            .await
            .map_err(|e| format!("its component is not usable: {e}"))?;
        Ok(())
    }

    /// A new worker and session for the key, its worktree identity written
    /// before anything runs in it.
    async fn fresh_worker(
        &self,
        row: &Row,
        replayed: bool,
        transcript: Vec<super::model::TranscriptTurn>,
        reason: Option<String>,
    ) -> Result<Record, QueueError> {
        let (session, worker_id) = self.rt.create_session_in(None, &row.workspace).await?;
        let identity = uuid::Uuid::new_v4().to_string();
        self.rt
            .set_worktree_identity(worker_id, &row.worker_key, &identity)?;
        Ok(super::model::record_of(
            row, worker_id, session, identity, replayed, transcript, reason,
        ))
    }

    /// Start a run on the key's worker and record it.
    async fn start(
        &self,
        records: &mut Records,
        key: &str,
        row: &Row,
        prompt: String,
        continues: Option<RunId>,
    ) -> Result<Dispatched, QueueError> {
        let record = records
            .sessions
            .get(key)
            .cloned()
            .ok_or_else(|| QueueError::Conflict(format!("worker {key} has no record")))?;
        let component = component_of(&row.component).map_err(QueueError::Invalid)?;
        let (_, info) = self.rt.add_component(&component).await?;
        let started = self
            .rt
            .start(StartRun {
                session: Some(record.session_id.clone()),
                worker: None,
                component: Some(component),
                prompt: prompt.clone(),
                liveness: queue_liveness(info.can_park),
                timeout_ms: None,
                continues,
                workspace: Some(row.workspace.clone()),
                limits: Default::default(),
                tools: None,
                first_commit: cairn_runtime::runtime::FirstCommit::Now,
                resume_on_start: None,
            })
            .await?;
        self.record_run(records, key, started.run_id)?;
        Ok(Dispatched {
            session: record.session_id,
            run: started.run_id,
            prompt,
            answer: None,
        })
    }

    pub(crate) fn record_run(
        &self,
        records: &mut Records,
        key: &str,
        run: RunId,
    ) -> Result<(), QueueError> {
        if let Some(r) = records.sessions.get_mut(key) {
            r.last_run = Some(run);
            r.pending_decision = None;
        }
        self.store.put_records(records)?;
        Ok(())
    }

    /// The stored worker, resumed: its pending decision answered, or a new
    /// run that continues (or resumes) the last; a run a crash left is
    /// followed again.
    async fn resume(
        &self,
        records: &mut Records,
        record: &Record,
        row: &Row,
        resume: Option<Resume>,
    ) -> Result<Dispatched, QueueError> {
        let key = &record.key;
        let session = record.session_id.clone();
        // A run the record does not know yet (a crash after it started)
        // is adopted, never doubled.
        let newest = self.rt.session_runs(&session).await?.pop();
        let last = match (newest, record.last_run) {
            (Some(n), known) if Some(n.run_id) != known => {
                self.record_run(records, key, n.run_id)?;
                Some(n.run_id)
            }
            (_, known) => known,
        };
        let facts = match last {
            Some(run) => self.rt.find_run(run).await.ok().map(|(_, f)| f),
            None => None,
        };
        let live = |run: RunId| self.rt.live_runs().iter().any(|(_, r)| *r == run);
        match resume {
            None => match last {
                // Recovery: follow the run the crash left.
                Some(run) if live(run) || record.ended_run != Some(run) => Ok(Dispatched {
                    session,
                    run,
                    prompt: row.prompt.clone(),
                    answer: None,
                }),
                _ => {
                    let continues = facts
                        .filter(|f| f.status == RunStatus::Finished)
                        .map(|f| f.run_id);
                    self.start(records, key, row, row.prompt.clone(), continues)
                        .await
                }
            },
            Some(Resume::Decide { decision_id, value }) => {
                let prompt = format!("Answer: {value}");
                // A run restored by replay asks again in a moment.
                if let Some(run) = last.filter(|r| live(*r)) {
                    for _ in 0..100 {
                        let asked = self
                            .rt
                            .pending_decisions(Some(&session))
                            .iter()
                            .any(|p| p.decision_id == decision_id);
                        if asked || !live(run) {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    match self.rt.decide(&decision_id, value.clone()).await {
                        Ok(()) => {
                            return Ok(Dispatched {
                                session,
                                run,
                                prompt,
                                answer: None,
                            });
                        }
                        Err(cairn_runtime::runtime::RuntimeError::Decide(
                            cairn_runtime::runtime::DecideError::NotPending(_),
                        )) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                // The run that asked is gone: a parked one resumes, a
                // stopped one is run again; either gets the answer when it
                // asks.
                let mut d = match facts.as_ref().filter(|f| f.status == RunStatus::Parked) {
                    Some(f) => {
                        let started = self.rt.resume(f.run_id, None).await?;
                        self.record_run(records, key, started.run_id)?;
                        Dispatched {
                            session,
                            run: started.run_id,
                            prompt,
                            answer: None,
                        }
                    }
                    None => {
                        let continues = facts
                            .filter(|f| f.status == RunStatus::Finished)
                            .map(|f| f.run_id);
                        self.start(records, key, row, row.prompt.clone(), continues)
                            .await?
                    }
                };
                d.answer = Some(value);
                Ok(d)
            }
            Some(Resume::Prompt { prompt }) => {
                if let Some(f) = facts.as_ref().filter(|f| f.status == RunStatus::Parked) {
                    let started = self.rt.resume(f.run_id, None).await?;
                    self.record_run(records, key, started.run_id)?;
                    return Ok(Dispatched {
                        session,
                        run: started.run_id,
                        prompt,
                        answer: None,
                    });
                }
                let continues = facts
                    .filter(|f| f.status == RunStatus::Finished)
                    .map(|f| f.run_id);
                self.start(records, key, row, prompt, continues).await
            }
        }
    }

    /// The fallback: the card's transcript replayed into a fresh worker for
    /// the same key (the old record retired), marked `resumed_by_replay`.
    /// If that fails too the record is blocked.
    async fn replay(
        &self,
        records: &mut Records,
        old: &Record,
        row: &Row,
        resume: Option<Resume>,
        why: String,
    ) -> Result<Dispatched, QueueError> {
        if let Some(run) = old.last_run {
            let _ = self.rt.cancel(
                run,
                cairn_runtime::journal::event::CancelReason::External,
                "its worker is replaced by a replay",
            );
        }
        let prompt = match resume {
            Some(Resume::Prompt { prompt }) => prompt,
            Some(Resume::Decide { value, .. }) => format!("Answer: {value}"),
            None => row.prompt.clone(),
        };
        let attempt = async {
            component_of(&row.component).map_err(QueueError::Invalid)?;
            self.rt
                .add_component(&component_of(&row.component).map_err(QueueError::Invalid)?)
                .await?;
            let fresh = self
                .fresh_worker(row, true, old.transcript.clone(), Some(why.clone()))
                .await?;
            let turns = old
                .transcript
                .iter()
                .flat_map(|t| {
                    [("user", &t.prompt), ("assistant", &t.answer)].map(|(role, text)| {
                        ImportedTurn {
                            role: role.into(),
                            text: text.clone(),
                            tool_calls: None,
                            tool_call_id: None,
                        }
                    })
                })
                .collect::<Vec<_>>();
            self.rt
                .import_history(&fresh.session_id, turns, Some("resumed_by_replay".into()))
                .await?;
            retire_in(records, &old.key, &format!("replaced by a replay: {why}"));
            records.sessions.insert(old.key.clone(), fresh);
            self.store.put_records(records)?;
            self.start(records, &old.key, row, prompt, None).await
        };
        match attempt.await {
            Ok(d) => Ok(d),
            Err(e) => {
                let reason = format!("cannot resume ({why}) nor replay ({e})");
                let mut blocked = records
                    .sessions
                    .get(&old.key)
                    .cloned()
                    .unwrap_or_else(|| old.clone());
                blocked.status = RecordStatus::Blocked;
                blocked.reason = Some(reason.clone());
                records.sessions.insert(old.key.clone(), blocked);
                self.store.put_records(records)?;
                Err(QueueError::Conflict(reason))
            }
        }
    }

    /// Follow a dispatched run to its end, or until it waits on a decision
    /// nobody present can answer.
    async fn follow(&self, d: &Dispatched, row: &Row) -> Ending {
        let mut answer = d.answer.clone();
        // A run that cannot park and waits stays live: the card awaits
        // with its run holding an instance.
        let can_park = match component_of(&row.component) {
            Ok(c) => self
                .rt
                .add_component(&c)
                .await
                .map(|(_, info)| info.can_park)
                .unwrap_or(true),
            Err(_) => true,
        };
        let Ok(last) = self.rt.last_seq(&d.session).await else {
            return Ending::Failed("its session cannot be read".into());
        };
        let mut sub = match self.rt.subscribe(&d.session, Seq(0)).await {
            Ok(s) => s,
            Err(e) => return Ending::Failed(e.to_string()),
        };
        let mut pending: Vec<(DecisionId, String)> = Vec::new();
        let mut closing = self.rt.closing();
        loop {
            let next = tokio::select! {
                n = sub.next() => n,
                _ = closing.changed() => return Ending::Failed(SHUTDOWN.into()),
            };
            let e = match next {
                Some(Ok(Delivery::Event(e))) => e,
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Ending::Failed(e.to_string()),
                None => return Ending::Failed(SHUTDOWN.into()),
            };
            if e.run_id == Some(d.run)
                && let Payload::Lifecycle(l) = &e.payload
            {
                match l {
                    LifecycleEvent::DecisionRequested {
                        decision_id,
                        prompt,
                        ..
                    } => match answer.take() {
                        Some(value) => {
                            if let Err(e) = self.rt.decide(decision_id, value).await {
                                return Ending::Failed(format!(
                                    "the card's answer was refused: {e}"
                                ));
                            }
                        }
                        None => pending.push((decision_id.clone(), prompt.clone())),
                    },
                    LifecycleEvent::DecisionRecorded { decision_id, .. }
                    | LifecycleEvent::DecisionTimedOut { decision_id } => {
                        pending.retain(|(p, _)| p != decision_id);
                    }
                    LifecycleEvent::Finished { outcome, text, .. } => {
                        return match outcome {
                            FinishOutcome::Answer => Ending::Done(text.clone()),
                            FinishOutcome::Question => Ending::Question(text.clone()),
                        };
                    }
                    // A run that parked on an unanswered decision still
                    // waits on it: the answer resumes it (however soon it
                    // parked after asking, before or after this follower
                    // caught up).
                    LifecycleEvent::Parked { .. } => {
                        return match pending.first() {
                            Some((id, prompt)) => {
                                Ending::Waiting(id.clone(), prompt.clone(), false)
                            }
                            None => Ending::Parked,
                        };
                    }
                    LifecycleEvent::Cancelled { message, .. } => {
                        return Ending::Failed(format!("cancelled: {message}"));
                    }
                    LifecycleEvent::Failed { error } => {
                        return Ending::Failed(format!("{}: {}", error.code, error.message));
                    }
                    _ => {}
                }
            }
            let present = self.rt.observer_counts(&d.session).2;
            if e.seq >= last
                && present == 0
                && let Some((id, prompt)) = pending.first()
            {
                return Ending::Waiting(id.clone(), prompt.clone(), !can_park);
            }
        }
    }

    /// Write how a dispatch ended: the record, the row, one ledger row.
    async fn end(
        &self,
        row: &Row,
        ending: Ending,
        d: Option<&Dispatched>,
    ) -> Result<(), QueueError> {
        let _guard = self.lock.lock().await;
        let mut records = self.store.records()?;
        let mut cards = self.store.cards()?;
        let (state, reason) = match &ending {
            Ending::Done(_) => (RowState::Done, None),
            Ending::Question(q) => (RowState::Awaiting, Some(format!("asked: {q}"))),
            Ending::Waiting(id, p, _) => (
                RowState::Awaiting,
                Some(format!("waits on decision {id}: {p}")),
            ),
            Ending::Parked => (
                RowState::Awaiting,
                Some("parked: answer or rework resumes it".into()),
            ),
            Ending::Failed(m) => (RowState::Failed, Some(m.clone())),
            Ending::Blocked(m) => (RowState::Failed, Some(format!("blocked: {m}"))),
        };
        let record = records.sessions.get_mut(&row.worker_key);
        if let (Some(record), Some(d)) = (record, d) {
            record.pending_decision = match &ending {
                Ending::Waiting(id, _, _) => Some(id.clone()),
                _ => None,
            };
            let ended = !matches!(ending, Ending::Waiting(..));
            if ended && record.ended_run != Some(d.run) {
                record.ended_run = Some(d.run);
                if let Ending::Done(text) | Ending::Question(text) = &ending {
                    record.push_turn(d.prompt.clone(), text.clone());
                }
            }
        }
        let record = records.sessions.get(&row.worker_key).cloned();
        let Some(current) = cards
            .rows
            .iter_mut()
            .find(|r| r.card == row.card && r.workspace == row.workspace)
        else {
            return Ok(());
        };
        let state = match &ending {
            Ending::Blocked(_)
                if record
                    .as_ref()
                    .is_some_and(|r| r.status == RecordStatus::Blocked) =>
            {
                RowState::Failed
            }
            _ => state,
        };
        let now = cairn_runtime::fsutil::now_ms();
        let mut retire = None;
        current.state = state;
        current.last_reason = reason.clone();
        current.resume = None;
        current.updated_ms = now;
        let attempts = current.attempts;
        if let Some(next) = current.next.take() {
            retire = Some(current.worker_key.clone());
            let key = self.worker_key(&current.workspace, &current.card, next.round);
            supersede(current, next.round, next.component, next.prompt, key, now);
        }
        if let Some(old) = retire {
            retire_in(&mut records, &old, "superseded by a new round");
        }
        let ledger = serde_json::json!({
            "type": "worker-session",
            "key": row.worker_key,
            "card": row.card,
            "round": row.round,
            "workspace": row.workspace,
            "worker_id": record.as_ref().map(|r| r.worker_id),
            "session_id": record.as_ref().map(|r| r.session_id.clone()),
            "run_id": d.map(|d| d.run),
            "outcome": state,
            "reason": reason,
            "attempts": attempts,
            "resumed_by_replay": record.as_ref().is_some_and(|r| r.resumed_by_replay),
            "at_ms": now,
        });
        // The ledger row first: a crash after it leaves the row processing,
        // and the recovery that ends it again finds the row written.
        // Terminal rows only: a run still live waiting on its answer has
        // not ended (its end, after the answer, writes the row).
        if !matches!(ending, Ending::Waiting(_, _, true)) {
            self.ledger_once(&ledger)?;
        }
        cairn_runtime::fsutil::crash_point("queue-ledgered");
        self.store.put_records(&records)?;
        cairn_runtime::fsutil::crash_point("queue-recorded");
        self.store.put_cards(&cards)?;
        Ok(())
    }

    /// Append a ledger row unless the ledger holds this ending (key, run,
    /// outcome, reason) already.
    fn ledger_once(&self, row: &serde_json::Value) -> Result<(), QueueError> {
        let id = |r: &serde_json::Value| {
            let part = |k: &str| r[k].to_string();
            [part("key"), part("run_id"), part("outcome"), part("reason")].join("\u{0}")
        };
        let mut seen = self.ledgered.lock().unwrap_or_else(|p| p.into_inner());
        if seen.is_none() {
            *seen = Some(self.store.ledger()?.iter().map(id).collect());
        }
        let seen = seen.as_mut().expect("loaded above");
        if !seen.contains(&id(row)) {
            self.store.append_ledger(row)?;
            seen.insert(id(row));
        }
        Ok(())
    }
}

/// A dispatch interrupted by the host's shutdown: left `processing` for
/// the next start to recover.
const SHUTDOWN: &str = "the host is shutting down";

/// How a queue run meets its host's shutdown: parked when the controller
/// can park (a waiting run resumes from its checkpoint), else `continue`.
fn queue_liveness(can_park: bool) -> Liveness {
    Liveness {
        policy: match can_park {
            true => LivenessPolicy::Park,
            false => LivenessPolicy::Continue,
        },
        grace_ms: 0,
    }
}
