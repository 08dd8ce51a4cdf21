use crate::__bindings::cairn::controller::history as wit;

/// Who spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A run's prompt, or an imported user message.
    User,
    /// A run's final answer, or an imported assistant message.
    Assistant,
    /// Imported instructions (a system or developer message).
    System,
    /// A tool's result: imported, or given to a run that continues one
    /// that ended with tool calls.
    Tool,
}

/// One turn of the session's conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// The journal seq the turn was recorded at.
    pub seq: u64,
    /// The run it belongs to (empty for imported turns).
    pub run_id: String,
    /// Who spoke.
    pub role: Role,
    /// What was said.
    pub text: String,
    /// A tool turn's call id.
    pub tool_call_id: Option<String>,
    /// An assistant turn's tool calls, as OpenAI's `tool_calls` JSON text.
    pub tool_calls: Option<String>,
}

/// The latest `limit` turns of the session before this run, oldest first.
/// The host caps `limit` at 256.
pub fn turns(limit: u32) -> Vec<Turn> {
    wit::turns(limit)
        .into_iter()
        .map(|t| Turn {
            seq: t.seq,
            run_id: t.run_id,
            role: match t.role {
                wit::Role::User => Role::User,
                wit::Role::Assistant => Role::Assistant,
                wit::Role::System => Role::System,
                wit::Role::Tool => Role::Tool,
            },
            text: t.text,
            tool_call_id: t.tool_call_id,
            tool_calls: t.tool_calls,
        })
        .collect()
}
