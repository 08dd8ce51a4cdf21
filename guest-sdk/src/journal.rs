use crate::__bindings::cairn::controller::journal as wit;

/// A journal sequence number: dense per session, from 1.
pub type Seq = u64;

/// Why an emit was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmitError {
    /// The run was cancelled.
    Cancelled,
    /// A limit of this worker was reached; the text names it.
    LimitExceeded(String),
    /// The event was malformed; the text says how.
    Invalid(String),
}

impl std::fmt::Display for EmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmitError::Cancelled => write!(f, "the run was cancelled"),
            EmitError::LimitExceeded(what) => write!(f, "limit exceeded: {what}"),
            EmitError::Invalid(why) => write!(f, "invalid event: {why}"),
        }
    }
}

impl std::error::Error for EmitError {}

impl From<EmitError> for crate::Error {
    fn from(e: EmitError) -> Self {
        let code = match &e {
            EmitError::Cancelled => "cancelled",
            EmitError::LimitExceeded(_) => "limit_exceeded",
            EmitError::Invalid(_) => "invalid_event",
        };
        crate::Error::new(code, e.to_string())
    }
}

fn emit(event: wit::AgentEvent) -> Result<Seq, EmitError> {
    wit::emit(&event).map_err(|e| match e {
        wit::EmitError::Cancelled => EmitError::Cancelled,
        wit::EmitError::LimitExceeded(what) => EmitError::LimitExceeded(what),
        wit::EmitError::Invalid(why) => EmitError::Invalid(why),
    })
}

/// Emit a piece of the answer.
pub fn emit_text(text: &str) -> Result<Seq, EmitError> {
    emit(wit::AgentEvent::TextDelta(text.to_string()))
}

/// Emit a piece of reasoning.
pub fn emit_reasoning(text: &str) -> Result<Seq, EmitError> {
    emit(wit::AgentEvent::ReasoningDelta(text.to_string()))
}

/// Emit a tool call; `arguments` must be a JSON document.
pub fn emit_tool_call(id: &str, name: &str, arguments: &str) -> Result<Seq, EmitError> {
    emit(wit::AgentEvent::ToolCall(wit::ToolCall {
        id: id.to_string(),
        name: name.to_string(),
        arguments: arguments.to_string(),
    }))
}

/// Emit progress: `done` units of `total` (when known).
pub fn emit_progress(message: &str, done: u64, total: Option<u64>) -> Result<Seq, EmitError> {
    emit(wit::AgentEvent::Progress(wit::Progress {
        message: message.to_string(),
        done,
        total,
    }))
}

/// Say that a provider call will be retried after `after_ms`.
pub fn emit_retrying(attempt: u32, after_ms: u64, reason: &str) -> Result<Seq, EmitError> {
    emit(wit::AgentEvent::Retrying(wit::Retrying {
        attempt,
        after_ms,
        reason: reason.to_string(),
    }))
}

/// Emit an event of your own; `data` is serialized as JSON.
pub fn emit_custom(name: &str, data: &serde_json::Value) -> Result<Seq, EmitError> {
    emit(wit::AgentEvent::Custom(wit::Custom {
        name: name.to_string(),
        data: data.to_string(),
    }))
}
