//! The host side of the world's imports. Each call is forwarded to the run's
//! [`RunHost`]; a guest-visible refusal is a value, a host failure a trap.

use super::HostState;
use super::bindings::{decisions, history, journal, types};
use crate::journal::event::{AgentEvent, RequestKind};
use async_trait::async_trait;

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

/// A history turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Its seq.
    pub seq: u64,
    /// Its run.
    pub run_id: String,
    /// True for the user, false for the assistant.
    pub user: bool,
    /// The text.
    pub text: String,
}

/// Why an emit was refused (a value the guest sees).
pub type EmitRefusal = journal::EmitError;

/// What a run provides to its instance.
#[async_trait]
pub trait RunHost: Send + Sync {
    /// Journal an agent event.
    async fn emit(&self, event: AgentEvent) -> Result<Result<u64, EmitRefusal>, HostFailure>;
    /// Journal a request and wait for its answer (journaled first).
    async fn wait(&self, request: DecisionRequest) -> Result<Answer, HostFailure>;
    /// The session's recent turns.
    async fn history(&self, limit: u32) -> Result<Vec<Turn>, HostFailure>;
    /// Whether the epoch callback should stop the instance now (cancelled
    /// past its grace, or a limit was broken).
    fn should_trap(&self) -> bool;
    /// The engine or a host stream saw a limit broken.
    fn limit_broken(&self, limit: &str, value: u64, max: u64);
}

fn host(state: &HostState) -> wasmtime::Result<std::sync::Arc<dyn RunHost>> {
    state
        .host
        .clone()
        .ok_or_else(|| wasmtime::Error::msg("host imports are not available during describe()"))
}

fn json_field(what: &str, text: &str) -> Result<serde_json::Value, EmitRefusal> {
    let value = serde_json::from_str(text)
        .map_err(|e| journal::EmitError::Invalid(format!("{what} is not JSON: {e}")))?;
    crate::journal::check_json_depth(what, &value).map_err(journal::EmitError::Invalid)?;
    Ok(value)
}

/// A decision argument: JSON, nested no deeper than the host accepts.
fn json_arg(what: &str, text: &str) -> Result<serde_json::Value, HostFailure> {
    let value =
        serde_json::from_str(text).map_err(|e| HostFailure(format!("{what} is not JSON: {e}")))?;
    crate::journal::check_json_depth(what, &value).map_err(HostFailure)?;
    Ok(value)
}

impl types::Host for HostState {}

impl journal::Host for HostState {
    async fn emit(
        &mut self,
        event: journal::AgentEvent,
    ) -> wasmtime::Result<Result<u64, journal::EmitError>> {
        let event = match event {
            journal::AgentEvent::TextDelta(text) => AgentEvent::TextDelta { text },
            journal::AgentEvent::ReasoningDelta(text) => AgentEvent::ReasoningDelta { text },
            journal::AgentEvent::ToolCall(call) => {
                match json_field("tool-call arguments", &call.arguments) {
                    Ok(arguments) => AgentEvent::ToolCall {
                        id: call.id,
                        name: call.name,
                        arguments,
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
        Ok(host(self)?.emit(event).await?)
    }
}

impl decisions::Host for HostState {
    async fn wait(&mut self, req: decisions::Request) -> wasmtime::Result<decisions::Answer> {
        let details = if req.details.trim().is_empty() {
            serde_json::json!({})
        } else {
            json_arg("decision details", &req.details)?
        };
        let default_value = match req.default_value {
            Some(v) => Some(json_arg("decision default value", &v)?),
            None => None,
        };
        let request = DecisionRequest {
            kind: match req.kind {
                decisions::RequestKind::Approval => RequestKind::Approval,
                decisions::RequestKind::ToolResult => RequestKind::ToolResult,
                decisions::RequestKind::Answer => RequestKind::Answer,
            },
            prompt: req.prompt,
            details,
            timeout_ms: req.timeout_ms,
            default_value,
        };
        Ok(match host(self)?.wait(request).await? {
            Answer::Decided(v) => decisions::Answer::Decided(v.to_string()),
            Answer::TimedOut => decisions::Answer::TimedOut,
            Answer::Cancelled => decisions::Answer::Cancelled,
            Answer::Park => decisions::Answer::Park,
        })
    }
}

impl history::Host for HostState {
    async fn turns(&mut self, limit: u32) -> wasmtime::Result<Vec<history::Turn>> {
        let turns = host(self)?.history(limit.min(256)).await?;
        Ok(turns
            .into_iter()
            .map(|t| history::Turn {
                seq: t.seq,
                run_id: t.run_id,
                role: if t.user {
                    history::Role::User
                } else {
                    history::Role::Assistant
                },
                text: t.text,
            })
            .collect())
    }
}
