//! One run: its context (the instance's side of every import) and its task,
//! from Preparing to the one terminal write.

use super::decisions::Broker;
use super::{Inner, RunLimits};
use crate::component::{
    Answer, DecisionRequest, HostFailure, JournalClock, Outcome, Prepared, RunHost, RunStart,
    RunTrap, Sandbox, Turn,
};
use crate::ids::{DecisionId, Generation, RunId, Seq, SessionId, WorkerId};
use crate::journal::SessionJournal;
use crate::journal::event::{
    AgentEvent, ApprovalRoute, CancelReason, DecidedBy, ErrorInfo, FinishOutcome, LifecycleEvent,
    Liveness, Payload, RunFacts, RunStatus, Usage,
};
use crate::worker::WorkerDir;
use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

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

/// The live side of one run. Never serialized.
pub struct RunCtx {
    pub(super) run_id: RunId,
    pub(super) session: SessionId,
    pub(super) journal: Arc<SessionJournal>,
    pub(super) store: Arc<dyn crate::store::Store>,
    pub(super) broker: Arc<Broker>,
    pub(super) cancel: watch::Sender<Option<Cancel>>,
    pub(super) present: AtomicBool,
    pub(super) limits: RunLimits,
    pub(super) clock: Mutex<Option<JournalClock>>,
    events: AtomicU64,
    event_bytes: AtomicU64,
    broken: Mutex<Option<ErrorInfo>>,
}

impl RunCtx {
    pub(super) fn new(
        run_id: RunId,
        session: SessionId,
        journal: Arc<SessionJournal>,
        store: Arc<dyn crate::store::Store>,
        broker: Arc<Broker>,
        present: bool,
        limits: RunLimits,
    ) -> Self {
        RunCtx {
            run_id,
            session,
            journal,
            store,
            broker,
            cancel: watch::channel(None).0,
            present: AtomicBool::new(present),
            limits,
            clock: Mutex::new(None),
            events: AtomicU64::new(0),
            event_bytes: AtomicU64::new(0),
            broken: Mutex::new(None),
        }
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

    fn cancelled(&self) -> Option<Cancel> {
        self.cancel.borrow().clone()
    }

    fn break_limit(&self, limit: &str, value: u64, max: u64) -> String {
        let what = format!("{limit}: {value} (at most {max})");
        let mut broken = self.broken.lock().unwrap_or_else(|p| p.into_inner());
        if broken.is_none() {
            *broken = Some(ErrorInfo {
                code: "limit_exceeded".into(),
                message: format!("the run exceeded a limit: {what}"),
                details: Some(serde_json::json!({ "limit": limit, "value": value, "max": max })),
            });
        }
        what
    }

    fn usage(&self, started: Instant) -> Usage {
        Usage {
            events: self.events.load(Ordering::Relaxed),
            event_bytes: self.event_bytes.load(Ordering::Relaxed),
            wall_ms: started.elapsed().as_millis() as u64,
        }
    }

    async fn lifecycle(&self, event: LifecycleEvent) -> Result<crate::SessionEvent, HostFailure> {
        self.journal
            .append(Some(self.run_id), Payload::Lifecycle(event))
            .await
            .map_err(|e| HostFailure(format!("the journal refused an entry: {e}")))
    }

    fn advance_clock(&self, at_ms: u64) {
        if let Some(clock) = &*self.clock.lock().unwrap_or_else(|p| p.into_inner()) {
            clock.advance_to(at_ms);
        }
    }
}

#[async_trait]
impl RunHost for RunCtx {
    async fn emit(
        &self,
        event: AgentEvent,
    ) -> Result<Result<u64, crate::component::EmitRefusal>, HostFailure> {
        use crate::component::EmitRefusal;
        if self.cancelled().is_some() {
            return Ok(Err(EmitRefusal::Cancelled));
        }
        if self
            .broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            return Ok(Err(EmitRefusal::LimitExceeded(
                "a limit of this run was exceeded".into(),
            )));
        }
        let payload = Payload::Agent(event);
        let size = serde_json::to_vec(&payload)
            .map(|v| v.len() as u64)
            .unwrap_or(u64::MAX);
        if size > self.limits.max_event_bytes {
            let what = self.break_limit("event_bytes", size, self.limits.max_event_bytes);
            return Ok(Err(EmitRefusal::LimitExceeded(what)));
        }
        let count = self.events.load(Ordering::Relaxed) + 1;
        if count > self.limits.max_events {
            let what = self.break_limit("events_per_run", count, self.limits.max_events);
            return Ok(Err(EmitRefusal::LimitExceeded(what)));
        }
        let event = self
            .journal
            .append(Some(self.run_id), payload)
            .await
            .map_err(|e| HostFailure(format!("the journal refused an event: {e}")))?;
        self.events.fetch_add(1, Ordering::Relaxed);
        self.event_bytes.fetch_add(size, Ordering::Relaxed);
        Ok(Ok(event.seq.0))
    }

    async fn wait(&self, request: DecisionRequest) -> Result<Answer, HostFailure> {
        if self.cancelled().is_some() {
            return Ok(Answer::Cancelled);
        }
        // The request and its route are one batch, written before anyone can
        // see the request, and the id is registered before anyone can answer.
        let present = self.present.load(Ordering::Relaxed);
        let mut registered = None;
        let requested = self
            .journal
            .append_with(Some(self.run_id), |seq| {
                let decision_id = DecisionId::derive(&self.session, seq);
                registered = Some((
                    decision_id.clone(),
                    self.broker.register(
                        decision_id.clone(),
                        self.session.clone(),
                        self.run_id,
                        self.journal.clone(),
                    ),
                ));
                vec![
                    Payload::Lifecycle(LifecycleEvent::DecisionRequested {
                        decision_id: decision_id.clone(),
                        request_kind: request.kind,
                        prompt: request.prompt.clone(),
                        details: request.details.clone(),
                        timeout_ms: request.timeout_ms,
                        default_value: request.default_value.clone(),
                    }),
                    Payload::Lifecycle(LifecycleEvent::ApprovalRouted {
                        decision_id,
                        route: if present {
                            ApprovalRoute::Conversational
                        } else {
                            ApprovalRoute::Poll
                        },
                        because: if present {
                            "a present observer is attached".into()
                        } else {
                            "nobody is present; any seam may answer".into()
                        },
                    }),
                ]
            })
            .await;
        let (id, mut rx) = registered.expect("append_with runs its builder");
        if let Err(e) = requested {
            self.broker.withdraw(&id);
            return Err(HostFailure(format!(
                "the journal refused a decision request: {e}"
            )));
        }

        let timeout = request.timeout_ms.map(Duration::from_millis);
        let sleep = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let mut cancel = self.cancel.subscribe();
        tokio::select! {
            answer = &mut rx => {
                return match answer {
                    Ok((value, at_ms)) => {
                        self.advance_clock(at_ms);
                        Ok(Answer::Decided(value))
                    }
                    Err(_) => Err(HostFailure("the decision broker went away".into())),
                };
            }
            _ = sleep => {}
            _ = cancel.wait_for(|c| c.is_some()) => {
                if self.broker.withdraw(&id) {
                    return Ok(Answer::Cancelled);
                }
            }
        }
        // The timeout fired (or a cancel lost the race to an answer).
        if self.broker.withdraw(&id) {
            let event = match request.default_value {
                Some(value) => {
                    let e = self
                        .lifecycle(LifecycleEvent::DecisionRecorded {
                            decision_id: id,
                            value: value.clone(),
                            by: DecidedBy::Expiry,
                        })
                        .await?;
                    self.advance_clock(e.at_ms);
                    return Ok(Answer::Decided(value));
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
            Err(_) => Err(HostFailure("the decision broker went away".into())),
        }
    }

    async fn history(&self, limit: u32) -> Result<Vec<Turn>, HostFailure> {
        if !self.store.is_complete() {
            return Err(HostFailure(
                "history needs the complete journal; this host keeps only a bounded window in memory".into(),
            ));
        }
        super::history::turns(&*self.store, &self.session, self.run_id, limit as usize)
            .await
            .map_err(|e| HostFailure(format!("cannot read history: {e}")))
    }

    fn should_trap(&self) -> bool {
        if self
            .broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            return true;
        }
        self.cancel
            .borrow()
            .as_ref()
            .is_some_and(|c| c.at.elapsed() >= CANCEL_GRACE)
    }
}

/// What a run task is given.
pub(super) struct RunPlan {
    pub ctx: Arc<RunCtx>,
    pub worker: WorkerDir,
    pub worker_id: WorkerId,
    pub prepared: Arc<Prepared>,
    pub prompt: String,
    pub liveness: Liveness,
    pub timeout_ms: Option<u64>,
    pub continues: Option<RunId>,
    pub resumes: Option<RunId>,
    pub checkpoint: Option<Vec<u8>>,
    pub previous_generation: Option<Generation>,
}

/// Run to the end and make the terminal write. Returns the run's facts.
pub(super) async fn run_task(inner: Arc<Inner>, plan: RunPlan) -> Result<RunFacts, String> {
    let ctx = plan.ctx.clone();
    let started = Instant::now();
    let started_at_ms = crate::fsutil::now_ms();
    let mut first_seq: Option<Seq> = None;
    let mut generation = Generation(0);

    let result: Result<Outcome, ErrorOrCancel> = async {
        let worker = &plan.worker;
        let gen_dir = worker
            .reserve_generation(plan.previous_generation)
            .map_err(|e| ErrorOrCancel::error("generation", e.to_string()))?;
        generation = gen_dir.generation;
        let reserved = ctx
            .lifecycle(LifecycleEvent::GenerationReserved {
                worker_id: plan.worker_id,
                generation,
            })
            .await
            .map_err(|e| ErrorOrCancel::error("journal", e.0))?;
        first_seq = Some(reserved.seq);
        let log = |name: &str| {
            gen_dir
                .dir
                .open_with(name, cap_std::fs::OpenOptions::new().append(true))
                .map(|f| f.into_std())
                .map_err(|e| ErrorOrCancel::error("generation", format!("cannot open runs/{generation}/{name}: {e}")))
        };
        let stdout = log("worker.out.log")?;
        let stderr = log("worker.err.log")?;
        let seed: u64 = rand_seed();
        let started_event = ctx
            .lifecycle(LifecycleEvent::Started {
                component: plan.prepared.digest().to_string(),
                prompt: plan.prompt.clone(),
                timeout_ms: plan.timeout_ms,
                liveness: plan.liveness,
                generation,
                continues: plan.continues,
                resumes: plan.resumes,
                seed,
            })
            .await
            .map_err(|e| ErrorOrCancel::error("journal", e.0))?;
        let clock = JournalClock::new(started_event.at_ms);
        *ctx.clock.lock().unwrap_or_else(|p| p.into_inner()) = Some(clock.clone());
        if let Some(ms) = plan.timeout_ms {
            let deadline_ctx = ctx.clone();
            tokio::spawn(async move {
                let mut rx = deadline_ctx.cancel.subscribe();
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {
                        deadline_ctx.cancel(CancelReason::Deadline, format!("the run's timeout of {ms} ms ran out"));
                    }
                    _ = rx.wait_for(|c| c.is_some()) => {}
                }
            });
        }
        let sandbox = Sandbox {
            artifacts: gen_dir.artifacts_path.clone(),
            stdout,
            stderr,
            clock,
            max_memory_bytes: ctx.limits.max_memory_bytes,
            host: ctx.clone(),
        };
        let start = RunStart {
            run_id: ctx.run_id,
            session_id: ctx.session.clone(),
            worker_id: plan.worker_id,
            generation,
            prompt: plan.prompt.clone(),
            continues: plan.continues,
            checkpoint: plan.checkpoint.clone(),
            seed,
        };
        let run = inner.components.run(&plan.prepared, sandbox, start);
        let mut cancel_rx = ctx.cancel.subscribe();
        // The instance runs until it returns or traps; a cancel is noticed by
        // its next host call, and by the epoch callback after the grace.
        let outcome = tokio::select! {
            outcome = run => outcome,
            _ = async {
                let _ = cancel_rx.wait_for(|c| c.is_some()).await;
                tokio::time::sleep(CANCEL_GRACE * 4).await;
            } => Err(RunTrap::Trap("the controller did not stop after cancel".into())),
        };
        match outcome {
            Ok(o) => Ok(o),
            Err(RunTrap::Setup(m)) => Err(ErrorOrCancel::error("setup", m)),
            Err(RunTrap::Trap(m)) => Err(ErrorOrCancel::error("trap", m)),
        }
    }
    .await;

    let broken = ctx.broken.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let cancelled = ctx.cancelled();
    let (terminal, status, outcome, checkpoint) = match (broken, cancelled, result) {
        (Some(error), _, _) => (
            LifecycleEvent::Failed { error },
            RunStatus::Failed,
            None,
            None,
        ),
        (None, Some(c), _) => (
            LifecycleEvent::Cancelled {
                reason: c.reason,
                message: c.message,
            },
            RunStatus::Cancelled,
            None,
            None,
        ),
        (None, None, Ok(Outcome::Finished(text))) => (
            LifecycleEvent::Finished {
                usage: ctx.usage(started),
                outcome: FinishOutcome::Answer,
                text,
            },
            RunStatus::Finished,
            Some(FinishOutcome::Answer),
            None,
        ),
        (None, None, Ok(Outcome::Question(text))) => (
            LifecycleEvent::Finished {
                usage: ctx.usage(started),
                outcome: FinishOutcome::Question,
                text,
            },
            RunStatus::Finished,
            Some(FinishOutcome::Question),
            None,
        ),
        (None, None, Ok(Outcome::Parked(bytes))) => {
            match inner
                .store
                .put_checkpoint(&ctx.session, ctx.run_id, &bytes)
                .await
            {
                Ok(key) => (
                    LifecycleEvent::Parked {
                        checkpoint: key.clone(),
                    },
                    RunStatus::Parked,
                    None,
                    Some(key),
                ),
                Err(e) => (
                    LifecycleEvent::Failed {
                        error: ErrorInfo {
                            code: "checkpoint".into(),
                            message: format!("cannot store the park checkpoint: {e}"),
                            details: None,
                        },
                    },
                    RunStatus::Failed,
                    None,
                    None,
                ),
            }
        }
        (None, None, Ok(Outcome::Failed { code, message })) => (
            LifecycleEvent::Failed {
                error: ErrorInfo {
                    code: "controller_error".into(),
                    message: format!("{code}: {message}"),
                    details: Some(serde_json::json!({ "controller_code": code })),
                },
            },
            RunStatus::Failed,
            None,
            None,
        ),
        (None, None, Err(ErrorOrCancel { code, message })) => (
            LifecycleEvent::Failed {
                error: ErrorInfo {
                    code,
                    message,
                    details: None,
                },
            },
            RunStatus::Failed,
            None,
            None,
        ),
    };
    let usage = ctx.usage(started);
    let pending: Vec<DecisionId> = inner
        .broker
        .pending(Some(&ctx.session))
        .into_iter()
        .filter(|p| p.run_id == ctx.run_id)
        .map(|p| p.decision_id)
        .collect();
    for id in &pending {
        inner.broker.withdraw(id);
    }
    let component = plan.prepared.digest().to_string();
    let (run_id, session) = (ctx.run_id, ctx.session.clone());
    let (continues, resumes) = (plan.continues, plan.resumes);
    ctx.journal
        .finish(run_id, terminal, |seq, at_ms| RunFacts {
            run_id,
            session_id: session,
            component,
            status,
            outcome,
            usage,
            started_at_ms,
            ended_at_ms: at_ms,
            first_seq: first_seq.unwrap_or(seq),
            last_seq: seq,
            generation,
            checkpoint,
            pending_decisions: pending,
            continues,
            resumes,
        })
        .await
        .map(|e| e.facts.expect("a terminal event carries its facts"))
        .map_err(|e| format!("cannot journal the end of run {run_id}: {e}"))
}

struct ErrorOrCancel {
    code: String,
    message: String,
}

impl ErrorOrCancel {
    fn error(code: &str, message: impl Into<String>) -> Self {
        ErrorOrCancel {
            code: code.to_string(),
            message: message.into(),
        }
    }
}

fn rand_seed() -> u64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
}
