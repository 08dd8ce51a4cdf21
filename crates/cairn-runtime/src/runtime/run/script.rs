//! The journaled script a replay feeds back: a run's guest-visible entries
//! after its `Started`, taken in order by the imports and checked against
//! what the controller does (a mismatch is a divergence).

use super::RunCtx;
use crate::SessionEvent;
use crate::component::{Answer, DecisionRequest, HostFailure};
use crate::ids::{RunId, Seq};
use crate::journal::event::{ApprovalRoute, CallError, LifecycleEvent, Payload};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;

/// The journaled entries a replay feeds back and checks, in order.
pub(crate) struct Script {
    entries: VecDeque<SessionEvent>,
    /// Offline replays never write: going past the journal is a divergence.
    offline: bool,
    /// The calls a replay finds by id, not in order (see `run/keyed.rs`).
    pub(super) keyed: BTreeMap<u64, KeyedCall>,
    /// The run's timers, found by number (see `run/timers.rs`).
    pub(super) timers: super::timers::Timers,
}

/// One journaled call a replay finds by its id: its start, and its end
/// when the journal has one.
pub(crate) struct KeyedCall {
    pub(super) started: SessionEvent,
    pub(super) finished: Option<SessionEvent>,
}

impl KeyedCall {
    /// Its journaled entries.
    pub(super) fn entries(&self) -> usize {
        1 + usize::from(self.finished.is_some())
    }
}

impl Script {
    /// The guest-visible entries of `run` after its `Started`; the calls
    /// whose answers arrive in any order (outgoing HTTP) apart, by id.
    pub(crate) fn of_run(events: &[SessionEvent], run: RunId, offline: bool) -> Script {
        let mut entries = VecDeque::new();
        let mut keyed: BTreeMap<u64, KeyedCall> = BTreeMap::new();
        for e in events
            .iter()
            .filter(|e| e.run_id == Some(run))
            .filter(|e| e.payload.replayed())
        {
            match &e.payload {
                Payload::Lifecycle(LifecycleEvent::HostCallStarted {
                    call_id,
                    capability,
                    ..
                }) if super::keyed::by_id(capability) => {
                    keyed.insert(
                        *call_id,
                        KeyedCall {
                            started: e.clone(),
                            finished: None,
                        },
                    );
                }
                Payload::Lifecycle(LifecycleEvent::HostCallFinished { call_id, .. })
                    if keyed.contains_key(call_id) =>
                {
                    if let Some(call) = keyed.get_mut(call_id) {
                        call.finished = Some(e.clone());
                    }
                }
                _ => entries.push_back(e.clone()),
            }
        }
        Script {
            entries,
            offline,
            keyed,
            timers: super::timers::Timers::of_run(events, run, offline),
        }
    }

    /// Its journaled entries, all told.
    pub(crate) fn len(&self) -> usize {
        self.entries.len() + self.keyed.values().map(KeyedCall::entries).sum::<usize>()
    }

    /// Whether it is an offline replay's.
    pub(super) fn offline(&self) -> bool {
        self.offline
    }
}

impl RunCtx {
    /// The next scripted entry, if replaying and the script is not done.
    fn script_next(&self) -> ScriptStep {
        if !self.scripted.load(Ordering::Acquire) {
            return ScriptStep::Live;
        }
        let mut script = self.script.lock().unwrap_or_else(|p| p.into_inner());
        match script.as_mut() {
            None => ScriptStep::Live,
            Some(s) => match s.entries.pop_front() {
                Some(e) => ScriptStep::Entry(Box::new(e)),
                None if s.offline => ScriptStep::PastEnd,
                None => {
                    *script = None;
                    self.scripted.store(false, Ordering::Release);
                    ScriptStep::Live
                }
            },
        }
    }

    /// The run goes live: no script is left to feed back.
    fn clear_script(&self) {
        *self.script.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.scripted.store(false, Ordering::Release);
    }

    fn script_peek(&self) -> Option<SessionEvent> {
        let script = self.script.lock().unwrap_or_else(|p| p.into_inner());
        script.as_ref().and_then(|s| s.entries.front().cloned())
    }

    fn script_done_offline(&self) -> bool {
        let script = self.script.lock().unwrap_or_else(|p| p.into_inner());
        script
            .as_ref()
            .is_some_and(|s| s.offline && s.entries.is_empty())
    }

    /// Whether an offline replay consumed its whole script.
    pub(crate) fn script_remaining(&self) -> usize {
        let script = self.script.lock().unwrap_or_else(|p| p.into_inner());
        script.as_ref().map_or(0, |s| s.entries.len()) + self.keyed_remaining()
    }

    /// Persist or replay, decided once per host call (golem's
    /// `Durability`): while a replay's script lasts, the call's journaled
    /// entry is the answer — `answer` reads it off the entry, or says the
    /// controller did something else (`got`), a divergence; once the script
    /// is done the call goes live and journals what it does.
    pub(super) fn durable<T>(
        &self,
        got: impl FnOnce() -> serde_json::Value,
        answer: impl FnOnce(&SessionEvent) -> Option<T>,
    ) -> Result<Recorded<T>, HostFailure> {
        match self.script_next() {
            ScriptStep::Live => Ok(Recorded::Live),
            ScriptStep::PastEnd => {
                Err(self.diverge(Seq(0), serde_json::json!("the end of the journal"), got()))
            }
            ScriptStep::Entry(entry) => match answer(&entry) {
                Some(value) => Ok(Recorded::Replayed(value)),
                None => Err(self.diverge(
                    entry.seq,
                    serde_json::to_value(&entry.payload).unwrap_or_default(),
                    got(),
                )),
            },
        }
    }

    /// Replay a decision wait from the script; `None` when the script ends
    /// before the request, so the caller goes live.
    pub(super) async fn wait_replayed(
        &self,
        request: &DecisionRequest,
    ) -> Result<Option<Answer>, HostFailure> {
        let requested = self.durable(
            || request_json(request),
            |entry| match &entry.payload {
                Payload::Lifecycle(LifecycleEvent::DecisionRequested {
                    decision_id,
                    request_kind,
                    prompt,
                    details,
                    timeout_ms,
                    default_value,
                }) if *request_kind == request.kind
                    && *prompt == request.prompt
                    && *details == request.details
                    && *timeout_ms == request.timeout_ms
                    && *default_value == request.default_value =>
                {
                    Some((decision_id.clone(), entry.seq, entry.at_ms))
                }
                _ => None,
            },
        )?;
        let (id, requested_at, requested_ms) = match requested {
            Recorded::Live => return Ok(None),
            Recorded::Replayed(found) => found,
        };
        // What answered it, if the journal says.
        let mut routed = None;
        while let Some(next) = self.script_peek() {
            match &next.payload {
                Payload::Lifecycle(LifecycleEvent::ApprovalRouted {
                    decision_id, route, ..
                }) if *decision_id == id => {
                    self.script_next();
                    if *route == ApprovalRoute::Parked {
                        return Ok(Some(Answer::Park));
                    }
                    routed = Some(*route);
                }
                Payload::Lifecycle(LifecycleEvent::DecisionRecorded {
                    decision_id, value, ..
                }) if *decision_id == id => {
                    self.script_next();
                    self.advance_clock(next.at_ms);
                    return Ok(Some(Answer::Decided(value.clone())));
                }
                Payload::Lifecycle(LifecycleEvent::DecisionTimedOut { decision_id })
                    if *decision_id == id =>
                {
                    self.script_next();
                    self.advance_clock(next.at_ms);
                    return Ok(Some(Answer::TimedOut));
                }
                _ => break,
            }
        }
        if self.script_done_offline() || self.script_peek().is_some() {
            // Offline, or the journal goes on without an answer: it diverged.
            return Err(self.diverge(
                requested_at,
                serde_json::json!("an answer to this request"),
                serde_json::json!("none in the journal"),
            ));
        }
        // The journal ends while it waits: re-register the same request and
        // wait live (nothing new is journaled for the request itself).
        self.clear_script();
        let rx = self.broker.register(
            id.clone(),
            self.session.clone(),
            self.run_id,
            self.journal.clone(),
        );
        // Answered while the run was restored (evicted meanwhile, it may
        // have been): the journal has the answer.
        if self.evicted.load(std::sync::atomic::Ordering::Relaxed)
            && let Some(answer) = self.journaled_answer(&id, requested_at).await?
        {
            self.broker.withdraw(&id);
            return Ok(Some(answer));
        }
        // A request the workspace's webhook was sent before the host died
        // is sent again: the delivery died with it (not an evicted run's:
        // its delivery lives on).
        if routed == Some(ApprovalRoute::Webhook)
            && !self.evicted.load(std::sync::atomic::Ordering::Relaxed)
            && let Some(caps) = self.capabilities.get()
        {
            let workspace = self.workspace.get().map(String::as_str).unwrap_or_default();
            if let Some(hook) = caps.webhook(workspace) {
                self.deliver(caps.clone(), hook, &id, request);
            }
        }
        // Its timeout keeps the deadline it was journaled with.
        Ok(Some(
            self.wait_live(id, rx, request, requested_at, Some(requested_ms))
                .await?,
        ))
    }
}

/// A host call's first journaled entry.
enum Journaled {
    /// Its `host_call_started`: (call id, seq).
    Started(u64, crate::ids::Seq),
    /// An older journal's one-entry answer (`worker_call`).
    Answered(Result<serde_json::Value, CallError>),
}

/// What the journal says of one host call.
pub(crate) enum ReplayedCall {
    /// The journaled answer.
    Answer(Result<serde_json::Value, CallError>),
    /// Not in the journal: do it live.
    Live,
    /// Its start is journaled, its end is not (the host died during it),
    /// and it is safe to send again: send it with this id, journal its end.
    Reissue(u64),
}

impl RunCtx {
    /// Replay a host call from the script: its `host_call_started` must
    /// match what the controller asks now; its progress (streamed tokens,
    /// retries) is passed over; its `host_call_finished` is the answer.
    pub(super) async fn host_call_replayed(
        &self,
        capability: &str,
        op: &str,
        request: &serde_json::Value,
    ) -> Result<ReplayedCall, HostFailure> {
        let started = self.durable(
            || {
                serde_json::json!({
                    "type": "host_call_started",
                    "capability": capability,
                    "op": op,
                    "request": request,
                })
            },
            |entry| match &entry.payload {
                Payload::Lifecycle(LifecycleEvent::HostCallStarted {
                    call_id,
                    capability: c,
                    op: o,
                    request: r,
                }) if c == capability && o == op && r == request => {
                    Some(Journaled::Started(*call_id, entry.seq))
                }
                // A delegation call journaled before it took this seam.
                Payload::Lifecycle(LifecycleEvent::WorkerCall { call, result })
                    if capability == super::host_call::WORKERS && call == request =>
                {
                    Some(Journaled::Answered(match result.get("error") {
                        Some(e) => Err(crate::component::capability::call_error(
                            crate::journal::event::CallErrorCode::Refused,
                            e.as_str().unwrap_or_default(),
                        )),
                        None => Ok(result.get("ok").cloned().unwrap_or_default()),
                    }))
                }
                _ => None,
            },
        )?;
        let (id, started_at) = match started {
            Recorded::Live => return Ok(ReplayedCall::Live),
            Recorded::Replayed(Journaled::Answered(answer)) => {
                self.count_call(None);
                return Ok(ReplayedCall::Answer(answer));
            }
            Recorded::Replayed(Journaled::Started(id, seq)) => (id, seq),
        };
        if capability == super::host_call::MODEL {
            self.model_calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if capability == super::host_call::TOOLS && op == "call" {
            self.tool_calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        while let Some(next) = self.script_peek() {
            match &next.payload {
                Payload::Lifecycle(LifecycleEvent::HostCallFinished {
                    call_id,
                    response,
                    error,
                    usage,
                }) if *call_id == id => {
                    self.script_next();
                    self.advance_clock(next.at_ms);
                    self.count_call(*usage);
                    return Ok(ReplayedCall::Answer(match (response, error) {
                        (_, Some(e)) => Err(e.clone()),
                        (Some(r), None) => Ok(r.clone()),
                        (None, None) => Ok(serde_json::Value::Null),
                    }));
                }
                // What the call journaled while it lasted.
                Payload::Agent(_) => {
                    self.script_next();
                    self.count(next.line().len() as u64);
                }
                _ => break,
            }
        }
        if self.script_done_offline() || self.script_peek().is_some() {
            return Err(self.diverge(
                started_at,
                serde_json::json!("the end of host call {id}"),
                serde_json::json!("none in the journal"),
            ));
        }
        // The journal ends inside the call: the host died while it was
        // under way. Sent again when that is safe, else answered so.
        self.clear_script();
        let idempotent = self
            .capabilities
            .get()
            .is_some_and(|c| c.idempotent(capability, op, request));
        if idempotent {
            return Ok(ReplayedCall::Reissue(id));
        }
        let error = crate::component::capability::call_error(
            crate::journal::event::CallErrorCode::Interrupted,
            format!(
                "the host stopped while this {capability} {op} call was under way, and it is not safe to send again"
            ),
        );
        let entry = self
            .lifecycle(LifecycleEvent::HostCallFinished {
                call_id: id,
                response: None,
                error: Some(error.clone()),
                usage: None,
            })
            .await?;
        self.advance_clock(entry.at_ms);
        self.count_call(None);
        Ok(ReplayedCall::Answer(Err(error)))
    }
}

/// What the journal says of one import call.
pub(super) enum Recorded<T> {
    /// Replaying: the journal's answer, given to the guest as it was.
    Replayed(T),
    /// Live: do the call and journal it.
    Live,
}

enum ScriptStep {
    Live,
    Entry(Box<SessionEvent>),
    PastEnd,
}

fn request_json(r: &DecisionRequest) -> serde_json::Value {
    serde_json::json!({
        "type": "decision_requested",
        "request_kind": r.kind,
        "prompt": r.prompt,
        "details": r.details,
        "timeout_ms": r.timeout_ms,
        "default_value": r.default_value,
    })
}
