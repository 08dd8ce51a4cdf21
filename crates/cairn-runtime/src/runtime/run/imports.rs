//! The run's side of every import: [`RunHost`] for [`RunCtx`] — emits,
//! decision waits, host calls, history, timers — live or replayed.

use super::*;

/// How long a guest emitting in a loop keeps its worker before it lets
/// the others run: an emit taken without a wait spends none of tokio's
/// cooperative budget, so nothing else would make it yield before its
/// epoch tick (10 ms, what a guest that only computes keeps it for). Its
/// yields cost it little since the commits it starts run on the other
/// workers (`cairn-journal`'s `away.rs`): 2 ms slices measured the same.
const EMIT_SLICE: Duration = Duration::from_micros(500);
/// Emits between looks at the clock for [`EMIT_SLICE`].
const EMITS_A_LOOK: u64 = 32;

/// The guest's time on its worker since it last let it go, as its emits
/// see it (see [`EMIT_SLICE`]).
pub(super) struct Slice {
    base: Instant,
    emits: AtomicU64,
    /// Nanoseconds from `base` to the slice's start.
    began: AtomicU64,
}

impl Slice {
    pub(super) fn new() -> Self {
        Slice {
            base: Instant::now(),
            emits: AtomicU64::new(0),
            began: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Whether this emit, one of a guest's many, should let the worker go
    /// first: one in [`EMITS_A_LOOK`] looks at the clock.
    fn due(&self) -> bool {
        self.emits
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(EMITS_A_LOOK)
            && self.spent()
    }

    /// The slice is spent.
    fn spent(&self) -> bool {
        self.now()
            .saturating_sub(self.began.load(Ordering::Relaxed))
            >= EMIT_SLICE.as_nanos() as u64
    }

    fn restart(&self) {
        self.began.store(self.now(), Ordering::Relaxed);
    }
}

/// An emit checked against the run's state and limits (and its replay).
enum Checked {
    /// Answered already: refused, or replayed from the journal.
    Done(Result<u64, EmitRefusal>),
    /// To journal: the payload and its JSON, measured.
    Append(Payload, Measured),
}

impl RunCtx {
    fn emit_checked(&self, event: AgentEvent) -> Result<Checked, HostFailure> {
        if self.is_cancelled() {
            return Ok(Checked::Done(Err(EmitRefusal::Cancelled)));
        }
        if self.has_failed() {
            return Ok(Checked::Done(Err(EmitRefusal::LimitExceeded(
                "a limit of this run was exceeded".into(),
            ))));
        }
        let payload = Payload::Agent(event);
        let json = match self.measured(&payload) {
            Ok(json) => json,
            Err(what) => return Ok(Checked::Done(Err(EmitRefusal::LimitExceeded(what)))),
        };
        self.retrying.store(
            matches!(payload, Payload::Agent(AgentEvent::Retrying { .. })),
            Ordering::Relaxed,
        );
        let replayed = self.durable(
            || serde_json::to_value(&payload).unwrap_or_default(),
            |entry| (entry.payload == payload).then_some(entry.seq),
        )?;
        if let script::Recorded::Replayed(seq) = replayed {
            self.count(json.len());
            return Ok(Checked::Done(Ok(seq.0)));
        }
        Ok(Checked::Append(payload, json))
    }
}

#[async_trait]
impl RunHost for RunCtx {
    async fn emit(&self, event: AgentEvent) -> EmitDone {
        let _inflight = Inflight::begin(&self.inflight);
        if self.slice.spent() {
            tokio::task::yield_now().await;
            self.slice.restart();
        }
        match self.emit_checked(event)? {
            Checked::Done(done) => Ok(done),
            Checked::Append(payload, json) => {
                Ok(Ok(self.append_agent(payload, &json, "an event").await?.0))
            }
        }
    }

    fn try_emit(&self, event: AgentEvent) -> Result<EmitDone, AgentEvent> {
        if self.slice.due() {
            return Err(event);
        }
        let Some(emitter) = self.journal.try_emitter() else {
            return Err(event);
        };
        let _inflight = Inflight::begin(&self.inflight);
        Ok(match self.emit_checked(event) {
            Err(failure) => Err(failure),
            Ok(Checked::Done(done)) => Ok(done),
            Ok(Checked::Append(payload, json)) => {
                let seq = emitter.append(Some(self.run_id), payload, &json);
                self.count(json.len());
                Ok(Ok(seq.0))
            }
        })
    }

    async fn wait(&self, request: DecisionRequest) -> Result<Answer, HostFailure> {
        // Not counted in flight: a decision wait is what an eviction waits
        // out (see `evict.rs`), from the moment `wait_live` marks it.
        if self.cancelled().is_some() {
            return Ok(Answer::Cancelled);
        }
        if let Some(answer) = self.wait_replayed(&request).await? {
            return Ok(answer);
        }
        // The request, its route and its answer (whoever gives it) count
        // like any entry.
        let request_size = crate::journal::json_len(&request.details)
            + request
                .default_value
                .as_ref()
                .map_or(0, crate::journal::json_len)
            + request.prompt.len() as u64
            + 256;
        if let Err(what) = self.admit(&[request_size, 256, 256]) {
            return Err(HostFailure(format!(
                "the decision request broke a limit: {what}"
            )));
        }
        let _suspended = self.suspended();
        // The request and its route are one batch, written before anyone can
        // see the request, and the id is registered before anyone can answer.
        let present = self.present.load(Ordering::Relaxed);
        let park = self.park.borrow().clone().or_else(|| {
            (!present && self.liveness.policy == LivenessPolicy::Park)
                .then(|| "nobody is present and the liveness policy is park".to_string())
        });
        let webhook = self.capabilities.get().and_then(|c| {
            let workspace = self.workspace.get().map(String::as_str).unwrap_or_default();
            c.webhook(workspace)
        });
        let (route, because) = match (&park, present, &webhook) {
            (Some(why), _, _) => (ApprovalRoute::Parked, why.clone()),
            (None, true, _) => (
                ApprovalRoute::Conversational,
                "a present observer is attached".to_string(),
            ),
            (None, false, Some(_)) => (
                ApprovalRoute::Webhook,
                "nobody is present; sent to the workspace's decisions webhook (any seam may answer too)".to_string(),
            ),
            (None, false, None) => (
                ApprovalRoute::Poll,
                "nobody is present; any seam may answer".to_string(),
            ),
        };
        let mut registered = None;
        let requested = self
            .journal
            .append_with(Some(self.run_id), |seq| {
                let decision_id = DecisionId::derive(&self.session, seq);
                if park.is_none() {
                    let rx = self.broker.register(
                        decision_id.clone(),
                        self.session.clone(),
                        self.run_id,
                        self.journal.clone(),
                    );
                    registered = Some((decision_id.clone(), rx));
                }
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
                        route,
                        because,
                    }),
                ]
            })
            .await;
        let asked = match requested {
            Ok(events) => events.first().map_or(Seq(0), |e| e.seq),
            Err(e) => {
                if let Some((id, _)) = &registered {
                    self.broker.withdraw(id);
                }
                return Err(self.refused("a decision request", e));
            }
        };
        match registered {
            None => Ok(Answer::Park),
            Some((id, rx)) => {
                if route == ApprovalRoute::Webhook
                    && let (Some(hook), Some(caps)) = (webhook, self.capabilities.get())
                {
                    self.deliver(caps.clone(), hook, &id, &request);
                }
                self.wait_live(id, rx, &request, asked, None).await
            }
        }
    }

    async fn host_call(
        &self,
        capability: &str,
        op: &str,
        request: serde_json::Value,
    ) -> Result<Result<serde_json::Value, crate::journal::event::CallError>, HostFailure> {
        let _inflight = Inflight::begin(&self.inflight);
        let call_id = self.host_call_ids.fetch_add(1, Ordering::Relaxed) + 1;
        if capability == host_call::WORKERS && op == "spawn" {
            self.spawned.fetch_add(1, Ordering::Relaxed);
        }
        match self.host_call_replayed(capability, op, &request).await? {
            script::ReplayedCall::Answer(answer) => {
                if capability == host_call::WORKERS
                    && let Ok(answer) = &answer
                {
                    crate::runtime::loan::lay_out_returned(self, answer)
                        .await
                        .map_err(HostFailure)?;
                }
                Ok(answer)
            }
            script::ReplayedCall::Live => {
                self.host_call_live(call_id, capability, op, request, false)
                    .await
            }
            script::ReplayedCall::Reissue(id) => {
                self.host_call_live(id, capability, op, request, true).await
            }
        }
    }

    async fn history(&self, limit: u32) -> Result<Vec<Turn>, HostFailure> {
        let _inflight = Inflight::begin(&self.inflight);
        if !self.store.is_complete() {
            return Err(HostFailure(
                "history needs the complete journal; this host keeps only a bounded window in memory".into(),
            ));
        }
        // The turns before this run do not change while it lives (one run a
        // session): read them once, not once per call.
        let turns = self
            .history
            .get_or_try_init(|| {
                crate::runtime::history::turns(&*self.store, &self.session, self.run_id, usize::MAX)
            })
            .await
            .map_err(|e| HostFailure(format!("cannot read history: {e}")))?;
        let skip = turns.len().saturating_sub(limit as usize);
        Ok(turns[skip..].to_vec())
    }

    fn reserve_call_id(&self) -> u64 {
        // In flight until its `keyed_call` ends (never, should the guest
        // drop the request before it is sent: that run is not evicted).
        self.inflight.fetch_add(1, Ordering::SeqCst);
        self.host_call_ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    async fn keyed_call(
        &self,
        call_id: u64,
        capability: &str,
        op: &str,
        request: serde_json::Value,
    ) -> Result<Result<serde_json::Value, crate::journal::event::CallError>, HostFailure> {
        let _inflight = Inflight::adopt(&self.inflight);
        self.call_by_id(call_id, capability, op, request).await
    }

    async fn timer(
        &self,
        id: u64,
        due_ms: u64,
        check: u64,
    ) -> crate::component::timers::TimerState {
        self.timer_look(id, due_ms, check)
    }

    fn timer_dropped(&self, id: u64) {
        self.timer_done(id);
    }

    fn timer_blocked(&self, _id: u64, blocked: bool) {
        RunCtx::timer_blocked(self, blocked);
    }

    fn instantiated(&self) {
        self.running.store(true, Ordering::Relaxed);
    }

    fn limit_broken(&self, limit: &str, value: u64, max: u64) {
        self.break_limit(limit, value, max);
    }

    fn tenant(&self) -> String {
        self.workspace.get().cloned().unwrap_or_default()
    }

    fn should_trap(&self) -> bool {
        if self.failure().is_some() {
            return true;
        }
        self.cancel
            .borrow()
            .as_ref()
            .is_some_and(|c| c.at.elapsed() >= CANCEL_GRACE)
    }
}
