//! The host side of the world's imports. Each call is forwarded to the run's
//! [`RunHost`]; a guest-visible refusal is a value, a host failure a trap.

use super::HostState;
use super::bindings::{decisions, history, journal, types};
use async_trait::async_trait;
use cairn_types::event::{AgentEvent, RequestKind};

/// A host failure: it ends the run as a trap with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HostFailure(pub String);

/// How a run ends, as its controller said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The final answer.
    Finished(String),
    /// A clarifying question.
    Question(String),
    /// A checkpoint to resume from.
    Parked(Vec<u8>),
    /// The controller's own failure.
    Failed {
        /// Its code.
        code: String,
        /// Its message.
        message: String,
    },
}

/// A decision request, as the controller made it.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRequest {
    /// What is asked for.
    pub kind: RequestKind,
    /// The question.
    pub prompt: String,
    /// Details (JSON).
    pub details: serde_json::Value,
    /// The wait's limit.
    pub timeout_ms: Option<u64>,
    /// The answer recorded on expiry (JSON).
    pub default_value: Option<serde_json::Value>,
}

/// How a decision wait ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The recorded value.
    Decided(serde_json::Value),
    /// No answer in time, no default.
    TimedOut,
    /// The run was cancelled.
    Cancelled,
    /// Park now.
    Park,
}

/// Who spoke a history turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnRole {
    /// A run's prompt, or an imported user message.
    User,
    /// A run's final answer, or an imported assistant message.
    Assistant,
    /// Imported instructions (a system or developer message).
    System,
    /// A tool's result (imported, or given to a run).
    Tool,
}

/// A history turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Its seq.
    pub seq: u64,
    /// Its run (empty when imported).
    pub run_id: String,
    /// Who spoke.
    pub role: TurnRole,
    /// The text.
    pub text: String,
    /// A tool turn's call id.
    pub tool_call_id: Option<String>,
    /// An assistant turn's tool calls (OpenAI's `tool_calls` JSON).
    pub tool_calls: Option<String>,
}

impl Turn {
    /// Whether the user said it.
    pub fn user(&self) -> bool {
        self.role == TurnRole::User
    }
}

/// History as controllers built before 0.2.1 see it: user and assistant
/// turns only, the tool results a run was given one user turn (its prompt,
/// the results' texts joined by lines, as it was before results were
/// turns).
pub fn legacy(turns: Vec<Turn>) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::with_capacity(turns.len());
    for t in turns {
        match t.role {
            TurnRole::User | TurnRole::Assistant => out.push(t),
            TurnRole::System => {}
            TurnRole::Tool if t.run_id.is_empty() => {}
            TurnRole::Tool => match out.last_mut() {
                Some(prev) if prev.run_id == t.run_id && prev.role == TurnRole::User => {
                    prev.text.push('\n');
                    prev.text.push_str(&t.text);
                }
                _ => out.push(Turn {
                    role: TurnRole::User,
                    tool_call_id: None,
                    ..t
                }),
            },
        }
    }
    out
}

/// Why an emit was refused (a value the guest sees).
pub type EmitRefusal = journal::EmitError;

/// What an emit came to: its seq, a refusal the guest sees, or a failure
/// that ends the run.
pub type EmitDone = Result<Result<u64, EmitRefusal>, HostFailure>;

/// What a run provides to its instance.
#[async_trait]
pub trait RunHost: Send + Sync {
    /// Journal an agent event.
    async fn emit(&self, event: AgentEvent) -> Result<Result<u64, EmitRefusal>, HostFailure>;
    /// [`Self::emit`] done now, when it needs no wait (no future, no box:
    /// the path a streaming guest's every delta takes); `Err` gives the
    /// event back untouched, for [`Self::emit`].
    fn try_emit(&self, event: AgentEvent) -> Result<EmitDone, AgentEvent> {
        Err(event)
    }
    /// Journal a request and wait for its answer (journaled first).
    async fn wait(&self, request: DecisionRequest) -> Result<Answer, HostFailure>;
    /// The session's recent turns.
    async fn history(&self, limit: u32) -> Result<Vec<Turn>, HostFailure>;
    /// A host call (`model` `chat`, `workers` `spawn`, …) with its request as journaled
    /// JSON: live or replayed, journaled before the guest sees the answer.
    /// The inner `Err` is a value the guest gets; the outer one ends the run.
    async fn host_call(
        &self,
        capability: &str,
        op: &str,
        request: serde_json::Value,
    ) -> Result<Result<serde_json::Value, cairn_types::event::CallError>, HostFailure> {
        let _ = (op, request);
        Ok(Err(crate::capability::call_error(
            cairn_types::event::CallErrorCode::Refused,
            format!("this host provides no {capability} capability"),
        )))
    }
    /// A call id for a call the guest starts now and whose answer it takes
    /// later (an outgoing HTTP request): taken in the guest's order, so a
    /// replay gives each such call the id it had.
    fn reserve_call_id(&self) -> u64 {
        0
    }
    /// A host call under the id [`RunHost::reserve_call_id`] gave it: its
    /// entries may lie anywhere in the run's journal (responses arrive in
    /// any order), so a replay finds them by that id, not in sequence.
    async fn keyed_call(
        &self,
        call_id: u64,
        capability: &str,
        op: &str,
        request: serde_json::Value,
    ) -> Result<Result<serde_json::Value, cairn_types::event::CallError>, HostFailure> {
        let _ = call_id;
        self.host_call(capability, op, request).await
    }
    /// The `check`-th look at the run's timer `id` (due at `due_ms`, wall
    /// time, as the guest set it): see [`crate::timers`]. Without a journal,
    /// real time decides.
    async fn timer(&self, id: u64, due_ms: u64, check: u64) -> TimerState {
        let _ = (id, check);
        let now = wall_ms();
        match due_ms.checked_sub(now) {
            Some(left) if left > 0 => TimerState::Wait(std::time::Duration::from_millis(left)),
            _ => TimerState::Fired,
        }
    }
    /// The guest let timer `id` go (its resource dropped), fired or not.
    fn timer_dropped(&self, id: u64) {
        let _ = id;
    }
    /// The guest is blocked in a wait on timer `id` (`true`: a look said
    /// "wait"), or that wait ended (`false`: the sleep is over, or the
    /// `poll` it was part of returned on another pollable). Paired: every
    /// `true` is followed by one `false`.
    fn timer_blocked(&self, id: u64, blocked: bool) {
        let _ = (id, blocked);
    }
    /// The controller's instance is made (its set-up code ran): the run
    /// leaves seed 002's `Preparing` and its controller starts now.
    fn instantiated(&self) {}
    /// Whether the epoch callback should stop the instance now (cancelled
    /// past its grace, or a limit was broken).
    fn should_trap(&self) -> bool;
    /// The engine or a host stream saw a limit broken.
    fn limit_broken(&self, limit: &str, value: u64, max: u64);
    /// The workspace the run counts against (its CPU turns are shared
    /// with that workspace's other long runs).
    fn tenant(&self) -> String {
        String::new()
    }
}

pub(crate) fn host(state: &HostState) -> wasmtime::Result<std::sync::Arc<dyn RunHost>> {
    state.host.clone().ok_or_else(no_host)
}

/// [`host`], borrowed (no reference count touched: an emit's path).
fn host_ref(state: &HostState) -> wasmtime::Result<&dyn RunHost> {
    state.host.as_deref().ok_or_else(no_host)
}

fn no_host() -> wasmtime::Error {
    wasmtime::Error::msg("host imports are not available during describe()")
}

fn json_field(what: &str, text: &str) -> Result<serde_json::Value, EmitRefusal> {
    let value = serde_json::from_str(text)
        .map_err(|e| journal::EmitError::Invalid(format!("{what} is not JSON: {e}")))?;
    cairn_types::json::check_json_depth(what, &value).map_err(journal::EmitError::Invalid)?;
    Ok(value)
}

/// A decision argument: JSON, nested no deeper than the host accepts.
fn json_arg(what: &str, text: &str) -> Result<serde_json::Value, HostFailure> {
    let value =
        serde_json::from_str(text).map_err(|e| HostFailure(format!("{what} is not JSON: {e}")))?;
    cairn_types::json::check_json_depth(what, &value).map_err(HostFailure)?;
    Ok(value)
}

impl types::Host for HostState {}

impl journal::Host for HostState {
    async fn emit(
        &mut self,
        event: journal::AgentEvent,
    ) -> wasmtime::Result<Result<u64, journal::EmitError>> {
        let event = match event {
            journal::AgentEvent::TextDelta(text) => AgentEvent::TextDelta { text, by: None },
            journal::AgentEvent::ReasoningDelta(text) => {
                AgentEvent::ReasoningDelta { text, by: None }
            }
            journal::AgentEvent::ToolCall(call) => {
                match json_field("tool-call arguments", &call.arguments) {
                    Ok(arguments) => AgentEvent::ToolCall {
                        id: call.id,
                        name: call.name,
                        arguments,
                        by: None,
                    },
                    Err(e) => return Ok(Err(e)),
                }
            }
            journal::AgentEvent::Progress(p) => AgentEvent::Progress {
                message: p.message,
                done: p.done,
                total: p.total,
            },
            journal::AgentEvent::Retrying(r) => AgentEvent::Retrying {
                attempt: r.attempt,
                after_ms: r.after_ms,
                reason: r.reason,
            },
            journal::AgentEvent::Custom(c) => match json_field("custom data", &c.data) {
                Ok(data) => AgentEvent::Custom { name: c.name, data },
                Err(e) => return Ok(Err(e)),
            },
        };
        let event = match host_ref(self)?.try_emit(event) {
            Ok(done) => return Ok(done?),
            Err(event) => event,
        };
        Ok(host(self)?.emit(event).await?)
    }
}

/// A request as the host takes it; `Err`: why it is refused (a field that
/// must hold JSON does not, or nests too deep).
fn request_of(
    kind: RequestKind,
    prompt: String,
    details: &str,
    timeout_ms: Option<u64>,
    default_value: Option<&str>,
) -> Result<DecisionRequest, String> {
    let details = if details.trim().is_empty() {
        serde_json::json!({})
    } else {
        json_arg("decision details", details).map_err(|e| e.0)?
    };
    let default_value = match default_value {
        Some(v) => Some(json_arg("decision default value", v).map_err(|e| e.0)?),
        None => None,
    };
    Ok(DecisionRequest {
        kind,
        prompt,
        details,
        timeout_ms,
        default_value,
    })
}

fn kind_of(kind: decisions::RequestKind) -> RequestKind {
    match kind {
        decisions::RequestKind::Approval => RequestKind::Approval,
        decisions::RequestKind::ToolResult => RequestKind::ToolResult,
        decisions::RequestKind::Answer => RequestKind::Answer,
    }
}

impl decisions::Host for HostState {
    async fn wait(&mut self, req: decisions::Request) -> wasmtime::Result<decisions::Answer> {
        // 0.1.0 has no way to say a request was refused: the run ends.
        let request = request_of(
            kind_of(req.kind),
            req.prompt,
            &req.details,
            req.timeout_ms,
            req.default_value.as_deref(),
        )
        .map_err(|e| wasmtime::Error::from(HostFailure(e)))?;
        Ok(match host(self)?.wait(request).await? {
            Answer::Decided(v) => decisions::Answer::Decided(v.to_string()),
            Answer::TimedOut => decisions::Answer::TimedOut,
            Answer::Cancelled => decisions::Answer::Cancelled,
            Answer::Park => decisions::Answer::Park,
        })
    }
}

/// The latest `limit` turns as a controller built before 0.2.1 sees them.
async fn legacy_turns(state: &mut HostState, limit: u32) -> wasmtime::Result<Vec<Turn>> {
    let mut turns = legacy(host(state)?.history(u32::MAX).await?);
    let skip = turns.len().saturating_sub(limit.min(256) as usize);
    Ok(turns.split_off(skip))
}

impl history::Host for HostState {
    async fn turns(&mut self, limit: u32) -> wasmtime::Result<Vec<history::Turn>> {
        Ok(legacy_turns(self, limit)
            .await?
            .into_iter()
            .map(|t| history::Turn {
                seq: t.seq,
                role: if t.user() {
                    history::Role::User
                } else {
                    history::Role::Assistant
                },
                run_id: t.run_id,
                text: t.text,
            })
            .collect())
    }
}

/// 0.2.1's history: every role, call ids and calls.
mod rich {
    use super::super::bindings::v21::history as h;
    use super::*;

    impl h::Host for HostState {
        async fn turns(&mut self, limit: u32) -> wasmtime::Result<Vec<h::Turn>> {
            let turns = host(self)?.history(limit.min(256)).await?;
            Ok(turns
                .into_iter()
                .map(|t| h::Turn {
                    seq: t.seq,
                    run_id: t.run_id,
                    role: match t.role {
                        TurnRole::User => h::Role::User,
                        TurnRole::Assistant => h::Role::Assistant,
                        TurnRole::System => h::Role::System,
                        TurnRole::Tool => h::Role::Tool,
                    },
                    text: t.text,
                    tool_call_id: t.tool_call_id,
                    tool_calls: t.tool_calls,
                })
                .collect())
        }
    }
}

/// 0.2.0: the same host, its types converted; a
/// refused decision request is a value the controller can handle.
mod current {
    use super::super::bindings::{journal as j1, v2};
    use super::*;
    use v2::{decisions as d2, history as h2, journal as j2};

    impl v2::types::Host for HostState {}

    impl j2::Host for HostState {
        async fn emit(
            &mut self,
            event: j2::AgentEvent,
        ) -> wasmtime::Result<Result<u64, j2::EmitError>> {
            let event = match event {
                j2::AgentEvent::TextDelta(t) => j1::AgentEvent::TextDelta(t),
                j2::AgentEvent::ReasoningDelta(t) => j1::AgentEvent::ReasoningDelta(t),
                j2::AgentEvent::ToolCall(c) => j1::AgentEvent::ToolCall(j1::ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments,
                }),
                j2::AgentEvent::Progress(p) => j1::AgentEvent::Progress(j1::Progress {
                    message: p.message,
                    done: p.done,
                    total: p.total,
                }),
                j2::AgentEvent::Retrying(r) => j1::AgentEvent::Retrying(j1::Retrying {
                    attempt: r.attempt,
                    after_ms: r.after_ms,
                    reason: r.reason,
                }),
                j2::AgentEvent::Custom(c) => j1::AgentEvent::Custom(j1::Custom {
                    name: c.name,
                    data: c.data,
                }),
            };
            Ok(j1::Host::emit(self, event).await?.map_err(|e| match e {
                j1::EmitError::Cancelled => j2::EmitError::Cancelled,
                j1::EmitError::LimitExceeded(m) => j2::EmitError::LimitExceeded(m),
                j1::EmitError::Invalid(m) => j2::EmitError::Invalid(m),
            }))
        }
    }

    impl d2::Host for HostState {
        async fn wait(
            &mut self,
            req: d2::Request,
        ) -> wasmtime::Result<Result<d2::Answer, d2::WaitError>> {
            let kind = match req.kind {
                d2::RequestKind::Approval => RequestKind::Approval,
                d2::RequestKind::ToolResult => RequestKind::ToolResult,
                d2::RequestKind::Answer => RequestKind::Answer,
            };
            let request = match request_of(
                kind,
                req.prompt,
                &req.details,
                req.timeout_ms,
                req.default_value.as_deref(),
            ) {
                Ok(r) => r,
                Err(why) => return Ok(Err(d2::WaitError::Invalid(why))),
            };
            Ok(Ok(match host(self)?.wait(request).await? {
                Answer::Decided(v) => d2::Answer::Decided(v.to_string()),
                Answer::TimedOut => d2::Answer::TimedOut,
                Answer::Cancelled => d2::Answer::Cancelled,
                Answer::Park => d2::Answer::Park,
            }))
        }
    }

    impl h2::Host for HostState {
        async fn turns(&mut self, limit: u32) -> wasmtime::Result<Vec<h2::Turn>> {
            Ok(history::Host::turns(self, limit)
                .await?
                .into_iter()
                .map(|t| h2::Turn {
                    seq: t.seq,
                    run_id: t.run_id,
                    role: match t.role {
                        history::Role::User => h2::Role::User,
                        history::Role::Assistant => h2::Role::Assistant,
                    },
                    text: t.text,
                })
                .collect())
        }
    }

    use cairn_types::workers::{ChildLiveness, WorkersCall};
    use v2::workers as w2;

    /// A `workers` call through the run's one durable host call: its
    /// answer, or the reason it was refused (what the guest sees).
    async fn workers_call(
        host: std::sync::Arc<dyn RunHost>,
        call: WorkersCall,
    ) -> wasmtime::Result<Result<serde_json::Value, String>> {
        let op = call.op();
        let request = serde_json::to_value(&call)
            .map_err(|e| wasmtime::Error::msg(format!("cannot encode a workers call: {e}")))?;
        Ok(host
            .host_call("workers", op, request)
            .await?
            .map_err(|e| e.message))
    }

    fn status_of(v: serde_json::Value) -> w2::ChildStatus {
        let state = match v["state"].as_str().unwrap_or("") {
            "running" => w2::ChildState::Running,
            "finished" => w2::ChildState::Finished,
            "failed" => w2::ChildState::Failed,
            "cancelled" => w2::ChildState::Cancelled,
            "pruned" => w2::ChildState::Pruned,
            _ => w2::ChildState::Stopped,
        };
        w2::ChildStatus {
            state,
            text: v["text"].as_str().map(str::to_string),
            error: v["error"].as_str().map(str::to_string),
        }
    }

    fn child_of(v: &serde_json::Value) -> w2::Child {
        w2::Child {
            worker_id: v["worker_id"].as_str().unwrap_or_default().to_string(),
            session_id: v["session_id"].as_str().unwrap_or_default().to_string(),
        }
    }

    impl w2::Host for HostState {
        async fn spawn(
            &mut self,
            req: w2::SpawnRequest,
        ) -> wasmtime::Result<Result<w2::Child, String>> {
            let liveness = match req.liveness {
                w2::Liveness::Continue => ChildLiveness::Continue,
                w2::Liveness::Cancel => ChildLiveness::Cancel,
                w2::Liveness::Park => ChildLiveness::Park,
            };
            let call = WorkersCall::Spawn {
                component: req.component,
                prompt: req.prompt,
                scope: req.scope,
                liveness,
            };
            Ok(workers_call(host(self)?, call).await?.map(|v| child_of(&v)))
        }

        async fn status(
            &mut self,
            worker_id: String,
        ) -> wasmtime::Result<Result<w2::ChildStatus, String>> {
            let call = WorkersCall::Status { worker_id };
            Ok(workers_call(host(self)?, call).await?.map(status_of))
        }

        async fn wait(
            &mut self,
            worker_id: String,
            timeout_ms: u64,
        ) -> wasmtime::Result<Result<w2::ChildStatus, String>> {
            let call = WorkersCall::Wait {
                worker_id,
                timeout_ms,
            };
            Ok(workers_call(host(self)?, call).await?.map(status_of))
        }

        async fn cancel(&mut self, worker_id: String) -> wasmtime::Result<Result<(), String>> {
            let call = WorkersCall::Cancel { worker_id };
            Ok(workers_call(host(self)?, call).await?.map(|_| ()))
        }

        async fn register_peer(
            &mut self,
            worker_id: String,
        ) -> wasmtime::Result<Result<(), String>> {
            let call = WorkersCall::RegisterPeer { worker_id };
            Ok(workers_call(host(self)?, call).await?.map(|_| ()))
        }

        async fn peers(&mut self) -> wasmtime::Result<Vec<w2::Child>> {
            let peers = workers_call(host(self)?, WorkersCall::Peers)
                .await?
                .unwrap_or_default();
            Ok(peers
                .as_array()
                .map(|a| a.iter().map(child_of).collect())
                .unwrap_or_default())
        }
    }
}

/// What the host says of a timer at one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerState {
    /// Ready now (journaled; the clocks moved to its due time).
    Fired,
    /// Not ready at this look (a replay before the journaled one).
    NotYet,
    /// Live and not due: look again after this long.
    Wait(std::time::Duration),
}

/// Milliseconds since the Unix epoch, in real time.
pub(crate) fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
