//! One run: its context (the instance's side of every import) and its task,
//! from Preparing to the one terminal write. In replay mode the context
//! feeds the journaled answers back and compares every emit with the
//! journal, then goes on live where the journal ends.

use super::decisions::Broker;
use super::failure::FailureCode;
use crate::component::{
    Answer, DecisionRequest, EmitDone, EmitRefusal, HostFailure, JournalClock, Outcome, Prepared,
    RunHost, RunStart, RunTrap, Sandbox, Turn,
};
use crate::ids::{DecisionId, Generation, RunId, Seq, SessionId, WorkerId};
use crate::journal::SessionJournal;
use crate::journal::event::{
    AgentEvent, ApprovalRoute, CancelReason, DecidedBy, ErrorInfo, FinishOutcome, LifecycleEvent,
    Liveness, LivenessPolicy, Measured, Payload, RunFacts, RunStatus, SessionEvent, Usage,
};
use crate::limits::Limits;
use crate::worker::WorkerDir;
use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

mod env;
mod evict;
mod host_call;
mod imports;
mod keyed;
mod limit_watch;
mod ready;
mod script;
mod task;
mod timers;
pub(crate) use env::{RunEnv, Supervisor};
pub(crate) use host_call::Capabilities;
pub(crate) use script::Script;
pub(crate) use task::*;

/// How long a cancelled guest may go on before the epoch deadline traps it.
pub const CANCEL_GRACE: Duration = Duration::from_millis(500);

/// A cancellation: why, and when it was asked.
#[derive(Debug, Clone)]
pub struct Cancel {
    /// Why.
    pub reason: CancelReason,
    /// For people.
    pub message: String,
    at: Instant,
}

/// Where a run lives.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub worker_id: crate::ids::WorkerId,
    pub generation: crate::ids::Generation,
    pub artifacts: std::path::PathBuf,
}

/// The live side of one run. Never serialized.
pub struct RunCtx {
    pub(crate) run_id: RunId,
    pub(crate) session: SessionId,
    /// The session's durable head when the run was made: the last ended
    /// run's end is at or before it, and the run's own entries after it.
    pub(crate) began_after: Seq,
    pub(crate) journal: Arc<SessionJournal>,
    pub(crate) store: Arc<dyn crate::store::Store>,
    pub(crate) broker: Arc<Broker>,
    pub(crate) cancel: watch::Sender<Option<Cancel>>,
    pub(crate) park: watch::Sender<Option<String>>,
    pub(crate) liveness: Liveness,
    present: AtomicBool,
    pub(crate) limits: Limits,
    pub(crate) journal_bytes: AtomicU64,
    pub(crate) clock: Mutex<Option<JournalClock>>,
    pub(crate) running: AtomicBool,
    /// Set once the terminal entry is durable: the session is free for the
    /// next run from then on.
    pub(crate) ended: AtomicBool,
    /// Set while the terminal entry is being written.
    pub(crate) finishing: AtomicBool,
    /// The workspace the run counts against.
    pub(crate) workspace: std::sync::OnceLock<String>,
    pub(crate) retrying: AtomicBool,
    events: AtomicU64,
    event_bytes: AtomicU64,
    broken: Mutex<Option<ErrorInfo>>,
    /// `broken` holds a failure (read on every emit without its lock).
    has_broken: AtomicBool,
    script: Mutex<Option<Script>>,
    /// `script` holds one (read on every emit without its lock: a live
    /// run's is gone for good until a restore sets one again).
    scripted: AtomicBool,
    /// The journaled calls a replay finds by id (outgoing HTTP).
    keyed: Mutex<keyed::Keyed>,
    timers: Mutex<timers::Timers>,
    /// The session's turns before this run, read on the first `history`.
    history: tokio::sync::OnceCell<Vec<Turn>>,
    /// What the guest is doing, for the limit watcher: it measures the
    /// artifacts only while the guest runs (suspended in a decision wait it
    /// can write nothing), and ends with the run.
    activity: watch::Sender<Activity>,
    /// What the seams serve for the live generation (`worker.sock`): told
    /// when the run begins a wait, stopped with the generation.
    seams: Mutex<Vec<Box<dyn crate::runtime::SeamGuard>>>,
    /// The runtime's side of delegation (set by the run task; an offline
    /// replay has none and never goes live).
    pub(crate) supervisor: std::sync::OnceLock<std::sync::Weak<dyn Supervisor>>,
    /// Where the run lives: its worker, generation and `artifacts/` (a
    /// run evicted and restored lives in a later generation).
    place: Mutex<Option<Place>>,
    /// An offline replay's worker: where the snapshots it lays out are.
    pub(crate) replay_worker: std::sync::OnceLock<crate::worker::WorkerDir>,
    /// `workers.spawn` calls so far (live or replayed).
    pub(crate) spawned: AtomicU64,
    /// The host's capabilities (set by the run task; an offline replay has
    /// none and never goes live).
    pub(crate) capabilities: std::sync::OnceLock<Arc<Capabilities>>,
    /// Host calls begun (live or replayed): the next `call_id`.
    host_call_ids: AtomicU64,
    /// Host calls ended, for `usage.host_calls`.
    host_call_count: AtomicU64,
    /// Model calls charged against `model_calls`.
    model_calls: AtomicU64,
    /// Model tokens used, for `model_tokens` and `usage`.
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
    /// Wall time spent in live model calls, for `model_wall_ms`.
    model_wall_ms: AtomicU64,
    /// Tool calls charged against `tool_calls`.
    tool_calls: AtomicU64,
    /// Outgoing HTTP requests charged against `http_requests`.
    http_requests: AtomicU64,
    /// Host waits other than a timer's under way (decisions, host calls,
    /// emits, outgoing HTTP from its call id to its answer): a run with
    /// any is never evicted.
    inflight: AtomicU64,
    /// How long the guest has emitted without letting its worker go.
    slice: imports::Slice,
    /// A timer wait at least this long (ms) lets the task evict the
    /// instance; 0: never (see `evict.rs`).
    evict_after_ms: AtomicU64,
    /// The timers the guest waits on now (by number: due, wall ms); a
    /// look that fires one takes it out.
    waiting: Mutex<std::collections::BTreeMap<u64, u64>>,
    /// Timer looks the guest is blocked in now (a look said "wait" and its
    /// sleep has not ended): a timer in `waiting` while none is — a poll
    /// another timer answered, the guest working on — is not a wait.
    timer_blocks: AtomicU64,
    /// The decision the guest waits on now, if it does.
    deciding: Mutex<Option<evict::Deciding>>,
    /// Set once the run was evicted: a decision its restore waits on again
    /// was delivered to the webhook already (the delivery lives on).
    pub(crate) evicted: AtomicBool,
    /// Told when the guest begins a wait the task may evict it for (a far
    /// timer, a decision); the task then looks (an offer left from an
    /// instance since dropped costs one look).
    idle: tokio::sync::Notify,
}

/// Counts a host wait in [`RunCtx::inflight`] until dropped.
struct Inflight<'a>(&'a AtomicU64);

impl<'a> Inflight<'a> {
    fn begin(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Inflight(count)
    }

    /// One begun elsewhere (an outgoing request's call id).
    fn adopt(count: &'a AtomicU64) -> Self {
        Inflight(count)
    }
}

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activity {
    Running,
    Waiting,
    Ended,
}

/// Move `activity` from `from` to `to` (nothing when it is elsewhere, such
/// as `Ended`).
fn shift(activity: &watch::Sender<Activity>, from: Activity, to: Activity) {
    activity.send_if_modified(|a| {
        let moved = *a == from;
        if moved {
            *a = to;
        }
        moved
    });
}

/// Marks the guest suspended in a wait until dropped.
struct Suspended<'a>(&'a watch::Sender<Activity>);

impl<'a> Suspended<'a> {
    fn begin(activity: &'a watch::Sender<Activity>) -> Self {
        shift(activity, Activity::Running, Activity::Waiting);
        Suspended(activity)
    }
}

impl Drop for Suspended<'_> {
    fn drop(&mut self) {
        shift(self.0, Activity::Waiting, Activity::Running);
    }
}

impl RunCtx {
    pub(crate) fn new(
        run_id: RunId,
        session: SessionId,
        journal: Arc<SessionJournal>,
        store: Arc<dyn crate::store::Store>,
        broker: Arc<Broker>,
        liveness: Liveness,
        limits: Limits,
    ) -> Self {
        RunCtx {
            run_id,
            session,
            began_after: journal.durable_seq(),
            journal,
            store,
            broker,
            cancel: watch::channel(None).0,
            park: watch::channel(None).0,
            liveness,
            present: AtomicBool::new(false),
            limits,
            journal_bytes: AtomicU64::new(0),
            clock: Mutex::new(None),
            running: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            finishing: AtomicBool::new(false),
            workspace: std::sync::OnceLock::new(),
            retrying: AtomicBool::new(false),
            events: AtomicU64::new(0),
            event_bytes: AtomicU64::new(0),
            broken: Mutex::new(None),
            has_broken: AtomicBool::new(false),
            script: Mutex::new(None),
            scripted: AtomicBool::new(false),
            keyed: Mutex::new(keyed::Keyed::default()),
            timers: Mutex::new(timers::Timers::default()),
            history: tokio::sync::OnceCell::new(),
            activity: watch::channel(Activity::Running).0,
            seams: Mutex::new(Vec::new()),
            supervisor: std::sync::OnceLock::new(),
            place: Mutex::new(None),
            replay_worker: std::sync::OnceLock::new(),
            spawned: AtomicU64::new(0),
            capabilities: std::sync::OnceLock::new(),
            host_call_ids: AtomicU64::new(0),
            host_call_count: AtomicU64::new(0),
            model_calls: AtomicU64::new(0),
            input_tokens: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            model_wall_ms: AtomicU64::new(0),
            tool_calls: AtomicU64::new(0),
            http_requests: AtomicU64::new(0),
            inflight: AtomicU64::new(0),
            slice: imports::Slice::new(),
            evict_after_ms: AtomicU64::new(0),
            waiting: Mutex::new(std::collections::BTreeMap::new()),
            timer_blocks: AtomicU64::new(0),
            deciding: Mutex::new(None),
            evicted: AtomicBool::new(false),
            idle: tokio::sync::Notify::new(),
        }
    }

    /// Mark the guest suspended (in a host wait) until the guard drops;
    /// the live generation's seams hear of it first.
    pub(crate) fn suspended(&self) -> impl Drop + '_ {
        for seam in self.seams.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            seam.waiting();
        }
        Suspended::begin(&self.activity)
    }

    /// The live generation's seams: those of `generation` from now on
    /// (the ones before are stopped).
    pub(crate) fn serve_seams(&self, seams: Vec<Box<dyn crate::runtime::SeamGuard>>) {
        let before = std::mem::replace(
            &mut *self.seams.lock().unwrap_or_else(|p| p.into_inner()),
            seams,
        );
        for seam in before {
            seam.stop();
        }
    }

    /// Where the run lives now.
    pub(crate) fn place(&self) -> Option<Place> {
        self.place.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set_place(&self, place: Place) {
        *self.place.lock().unwrap_or_else(|p| p.into_inner()) = Some(place);
    }

    pub(crate) fn set_present(&self, present: bool) {
        self.present.store(present, Ordering::Relaxed);
    }

    pub(crate) fn set_script(&self, mut script: Script) {
        *self.keyed.lock().unwrap_or_else(|p| p.into_inner()) = keyed::Keyed {
            calls: std::mem::take(&mut script.keyed),
            offline: script.offline(),
        };
        *self.timers.lock().unwrap_or_else(|p| p.into_inner()) = std::mem::take(&mut script.timers);
        *self.script.lock().unwrap_or_else(|p| p.into_inner()) = Some(script);
        self.scripted.store(true, Ordering::Release);
    }

    /// Ask the run to stop. The first reason wins.
    pub fn cancel(&self, reason: CancelReason, message: impl Into<String>) {
        self.cancel.send_if_modified(|c| {
            if c.is_some() {
                return false;
            }
            *c = Some(Cancel {
                reason,
                message: message.into(),
                at: Instant::now(),
            });
            true
        });
    }

    /// Ask the run to park at its next (or current) decision wait.
    pub fn request_park(&self, because: &str) {
        self.park.send_if_modified(|p| {
            if p.is_some() {
                return false;
            }
            *p = Some(because.to_string());
            true
        });
    }

    pub(crate) fn cancelled(&self) -> Option<Cancel> {
        self.cancel.borrow().clone()
    }

    /// Whether the run was asked to stop ([`Self::cancelled`], nothing
    /// cloned).
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancel.borrow().is_some()
    }

    fn fail(&self, error: ErrorInfo) {
        let mut broken = self.broken.lock().unwrap_or_else(|p| p.into_inner());
        if broken.is_none() {
            *broken = Some(error);
            self.has_broken.store(true, Ordering::Release);
        }
    }

    pub(crate) fn break_limit(&self, limit: &str, value: u64, max: u64) -> String {
        let what = format!("{limit}: {value} (at most {max})");
        self.fail(ErrorInfo {
            code: FailureCode::LimitExceeded,
            message: format!("the run exceeded a limit: {what}"),
            details: Some(serde_json::json!({ "limit": limit, "value": value, "max": max })),
        });
        // Wake any wait; the terminal still says Failed (a failure wins).
        self.cancel(CancelReason::External, format!("limit exceeded: {what}"));
        what
    }

    pub(crate) fn diverge(
        &self,
        seq: Seq,
        expected: serde_json::Value,
        got: serde_json::Value,
    ) -> HostFailure {
        let message = format!(
            "replay diverged at seq {seq}: the journal has {expected}, the controller did {got}"
        );
        self.fail(ErrorInfo {
            code: FailureCode::ReplayDiverged,
            message: message.clone(),
            details: Some(serde_json::json!({ "seq": seq, "expected": expected, "got": got })),
        });
        HostFailure(message)
    }

    /// The journal refused a write: a fence conflict means another writer
    /// holds the session (this run has lost authority and writes nothing
    /// more); any other store failure is the disk's (`storage`). Either
    /// ends the run.
    pub(crate) fn refused(&self, what: &str, e: crate::store::StoreError) -> HostFailure {
        let code = match e.is_lost_authority() {
            true => FailureCode::LostAuthority,
            false => FailureCode::Storage,
        };
        let message = format!("the journal refused {what}: {e}");
        self.fail(ErrorInfo {
            code,
            message: message.clone(),
            details: None,
        });
        HostFailure(message)
    }

    /// The broken limit or divergence, if any.
    pub(crate) fn failure(&self) -> Option<ErrorInfo> {
        self.broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether [`Self::failure`] has one, without its lock.
    pub(crate) fn has_failed(&self) -> bool {
        self.has_broken.load(Ordering::Acquire)
    }

    fn usage(&self, started: Instant) -> Usage {
        Usage {
            events: self.events.load(Ordering::Relaxed),
            event_bytes: self.event_bytes.load(Ordering::Relaxed),
            wall_ms: started.elapsed().as_millis() as u64,
            host_calls: self.host_call_count.load(Ordering::Relaxed),
            input_tokens: self.input_tokens.load(Ordering::Relaxed),
            output_tokens: self.output_tokens.load(Ordering::Relaxed),
        }
    }

    pub(crate) async fn lifecycle(
        &self,
        event: LifecycleEvent,
    ) -> Result<SessionEvent, HostFailure> {
        self.journal
            .append(Some(self.run_id), Payload::Lifecycle(event))
            .await
            .map_err(|e| self.refused("an entry", e))
    }

    pub(crate) fn advance_clock(&self, at_ms: u64) {
        if let Some(clock) = &*self.clock.lock().unwrap_or_else(|p| p.into_inner()) {
            clock.advance_to(at_ms);
        }
    }

    pub(crate) fn count(&self, size: u64) {
        self.events.fetch_add(1, Ordering::Relaxed);
        self.event_bytes.fetch_add(size, Ordering::Relaxed);
        self.journal_bytes.fetch_add(size, Ordering::Relaxed);
    }

    /// Admit entries of these sizes to the journal under the run's limits
    /// (every journaled byte counts: decisions and the end of a run as
    /// much as emits), and count them; the broken limit when not.
    pub(crate) fn admit(&self, sizes: &[u64]) -> Result<(), String> {
        if let Some(&size) = sizes.iter().find(|&&s| s > self.limits.event_bytes) {
            return Err(self.break_limit("event_bytes", size, self.limits.event_bytes));
        }
        let count = self.events.load(Ordering::Relaxed) + sizes.len() as u64;
        if count > self.limits.events_per_run {
            return Err(self.break_limit("events_per_run", count, self.limits.events_per_run));
        }
        let total: u64 = sizes.iter().sum();
        let journal = self.journal_bytes.load(Ordering::Relaxed) + total;
        if journal > self.limits.journal_bytes {
            return Err(self.break_limit("journal_bytes", journal, self.limits.journal_bytes));
        }
        for &size in sizes {
            self.count(size);
        }
        Ok(())
    }

    /// An agent entry's payload JSON measured (written, or for a delta
    /// only counted: see [`Measured`]), within the run's `event_bytes`,
    /// `events_per_run` and `journal_bytes`; else the limit it breaks (the
    /// run then ends).
    pub(crate) fn measured(&self, payload: &Payload) -> Result<Measured, String> {
        let json = payload
            .measure(self.limits.event_bytes)
            .map_err(|size| self.break_limit("event_bytes", size, self.limits.event_bytes))?;
        let count = self.events.load(Ordering::Relaxed) + 1;
        if count > self.limits.events_per_run {
            return Err(self.break_limit("events_per_run", count, self.limits.events_per_run));
        }
        let journal = self.journal_bytes.load(Ordering::Relaxed) + json.len();
        if journal > self.limits.journal_bytes {
            return Err(self.break_limit("journal_bytes", journal, self.limits.journal_bytes));
        }
        Ok(json)
    }

    /// Journal a [`Self::measured`] agent entry (group-committed) and
    /// count it; `what` names it if the journal refuses.
    pub(crate) async fn append_agent(
        &self,
        payload: Payload,
        json: &Measured,
        what: &str,
    ) -> Result<Seq, HostFailure> {
        // A guest emitting in a loop lets its worker go by the clock (the
        // emit's slice in `imports.rs`), not by tokio's cooperative budget:
        // the minting lock spends none unless it waits.
        let seq = self
            .journal
            .append_emit(Some(self.run_id), payload, json)
            .await
            .map_err(|e| self.refused(what, e))?;
        self.count(json.len());
        Ok(seq)
    }

    /// Wait for the answer to decision `id` (requested at seq `asked`).
    /// Should the broker lose its sender — whatever drops it — the journal
    /// is the authority: an answer recorded there is the answer, and a
    /// request it has not answered is registered again and waited on.
    async fn wait_live(
        &self,
        id: DecisionId,
        mut rx: tokio::sync::oneshot::Receiver<super::decisions::Delivered>,
        request: &DecisionRequest,
        asked: Seq,
        requested_ms: Option<u64>,
    ) -> Result<Answer, HostFailure> {
        // The deadline runs from the request's journaled time: a wait
        // restored after a crash times out when it was due, not a whole
        // timeout after the restart.
        let timeout = request.timeout_ms.map(|ms| {
            let waited = requested_ms.map_or(0, |at| crate::fsutil::now_ms().saturating_sub(at));
            Duration::from_millis(ms.saturating_sub(waited))
        });
        let sleep = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(sleep);
        let mut cancel = self.cancel.subscribe();
        let mut park = self.park.subscribe();
        // Waiting on somebody: the task may evict the instance meanwhile.
        let _deciding = self.deciding_on(&id, timeout);
        loop {
            tokio::select! {
                answer = &mut rx => match answer {
                    Ok((value, at_ms)) => {
                        self.advance_clock(at_ms);
                        return Ok(Answer::Decided(value));
                    }
                    Err(_) => match self.journaled_answer(&id, asked).await? {
                        Some(answer) => return Ok(answer),
                        None => match self.broker.register_again(
                            id.clone(),
                            self.session.clone(),
                            self.run_id,
                            self.journal.clone(),
                        ) {
                            Some(again) => {
                                rx = again;
                                continue;
                            }
                            None => {
                                return Err(HostFailure(format!(
                                    "decision {id} is waited on by another run of this session"
                                )));
                            }
                        },
                    },
                },
                _ = &mut sleep => {}
                _ = async { let _ = cancel.wait_for(|c| c.is_some()).await; } => {
                    if self.broker.withdraw(&id) {
                        return Ok(Answer::Cancelled);
                    }
                }
                _ = async { let _ = park.wait_for(|p| p.is_some()).await; } => {
                    if self.broker.withdraw(&id) {
                        let because = self.park.borrow().clone().unwrap_or_default();
                        self.lifecycle(LifecycleEvent::ApprovalRouted {
                            decision_id: id,
                            route: ApprovalRoute::Parked,
                            because,
                        })
                        .await?;
                        return Ok(Answer::Park);
                    }
                }
            }
            break;
        }
        // The timeout fired (or a cancel or park lost the race to an answer).
        if self.broker.withdraw(&id) {
            let event = match &request.default_value {
                Some(value) => {
                    let e = self
                        .lifecycle(LifecycleEvent::DecisionRecorded {
                            decision_id: id,
                            value: value.clone(),
                            by: DecidedBy::Expiry,
                        })
                        .await?;
                    self.advance_clock(e.at_ms);
                    return Ok(Answer::Decided(value.clone()));
                }
                None => {
                    self.lifecycle(LifecycleEvent::DecisionTimedOut { decision_id: id })
                        .await?
                }
            };
            self.advance_clock(event.at_ms);
            return Ok(Answer::TimedOut);
        }
        // An answer won the race: it is journaled; take it.
        match rx.await {
            Ok((value, at_ms)) => {
                self.advance_clock(at_ms);
                Ok(Answer::Decided(value))
            }
            Err(_) => self.journaled_answer(&id, asked).await?.ok_or_else(|| {
                HostFailure(format!(
                    "decision {id} was taken as answered, and the journal records no answer to it"
                ))
            }),
        }
    }

    /// What the journal records as the answer to decision `id`, reading
    /// from its request at `asked` on (a page at a time).
    async fn journaled_answer(
        &self,
        id: &DecisionId,
        asked: Seq,
    ) -> Result<Option<Answer>, HostFailure> {
        // The answer may still be on its way to the store.
        self.journal
            .commit()
            .await
            .map_err(|e| self.refused("reading the journal for an answer", e))?;
        let mut after = Seq(asked.0.saturating_sub(1));
        loop {
            let page = self
                .store
                .read_bytes(&self.session, after, 512, 1 << 20)
                .await
                .map_err(|e| self.refused("reading the journal for an answer", e))?;
            let Some(last) = page.last() else {
                return Ok(None);
            };
            after = last.seq();
            for event in page.iter().filter_map(|item| item.event()) {
                match &event.payload {
                    Payload::Lifecycle(LifecycleEvent::DecisionRecorded {
                        decision_id,
                        value,
                        ..
                    }) if decision_id == id => {
                        self.advance_clock(event.at_ms);
                        return Ok(Some(Answer::Decided(value.clone())));
                    }
                    Payload::Lifecycle(LifecycleEvent::DecisionTimedOut { decision_id })
                        if decision_id == id =>
                    {
                        self.advance_clock(event.at_ms);
                        return Ok(Some(Answer::TimedOut));
                    }
                    _ => {}
                }
            }
        }
    }
}
