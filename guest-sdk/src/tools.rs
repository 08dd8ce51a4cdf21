//! The tools of MCP servers, reached through the host
//! (`cairn:tools/mcp@0.1.0`).
//!
//! The host runs the servers (`[mcp.servers.NAME]` in its `cairn.toml`),
//! keeps their connections open across the session's runs, asks a person
//! first for tools configured `approve`, and journals every list and call,
//! so a replay gets the same answers without reaching any server.
//!
//! Hand the tools to a model and run what it asks for, with no glue:
//!
//! ```no_run
//! use cairn_guest::{model::{self, Message, Request}, tools};
//! # fn f() -> Result<(), cairn_guest::Error> {
//! let available = tools::list()?;
//! let mut messages = vec![Message::user("What is 2 + 3?")];
//! let reply = model::chat(&Request::new(messages.clone()).tools(tools::for_model(&available)))?;
//! messages.push(Message::from_response(&reply));
//! for call in &reply.tool_calls {
//!     messages.push(tools::answer(call)?);
//! }
//! # Ok(()) }
//! ```

use crate::__bindings::cairn::tools::mcp as wit;

/// One tool of the session's servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// The server it belongs to.
    pub server: String,
    /// The name to call it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its arguments, a JSON Schema.
    pub input_schema: serde_json::Value,
    /// It changes nothing.
    pub read_only: bool,
    /// A person approves each call first.
    pub approve: bool,
}

/// A tool's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The text parts of its content, joined by newlines.
    pub text: String,
    /// Its whole content (MCP content blocks).
    pub content: serde_json::Value,
    /// Its structured result, if it gave one.
    pub structured: Option<serde_json::Value>,
    /// The tool reported a failure (`text` says what).
    pub is_error: bool,
}

/// Why a call gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// No such tool, not granted, or arguments that are not a JSON object.
    Refused(String),
    /// A person denied the call.
    Denied(String),
    /// The approval waits for a person: park the run (`Outcome::Parked`).
    Park,
    /// The server failed.
    Server(String),
    /// The run's `tool_calls` limit stops it.
    LimitExceeded(String),
    /// The run was cancelled.
    Cancelled,
    /// The host stopped during a call that changes things.
    Interrupted(String),
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolError::Refused(m) => write!(f, "refused: {m}"),
            ToolError::Denied(m) if m.is_empty() => f.write_str("a person denied the call"),
            ToolError::Denied(m) => write!(f, "a person denied the call: {m}"),
            ToolError::Park => f.write_str("the call waits for a person's approval"),
            ToolError::Server(m) => write!(f, "the tool server failed: {m}"),
            ToolError::LimitExceeded(m) => write!(f, "limit exceeded: {m}"),
            ToolError::Cancelled => f.write_str("cancelled"),
            ToolError::Interrupted(m) => write!(f, "interrupted: {m}"),
        }
    }
}

impl std::error::Error for ToolError {}

impl From<ToolError> for crate::Error {
    fn from(e: ToolError) -> Self {
        let code = match &e {
            ToolError::Refused(_) => "tool_refused",
            ToolError::Denied(_) => "tool_denied",
            ToolError::Park => "tool_approval_pending",
            ToolError::Server(_) => "tool_server",
            ToolError::LimitExceeded(_) => "limit_exceeded",
            ToolError::Cancelled => "cancelled",
            ToolError::Interrupted(_) => "tool_interrupted",
        };
        crate::Error::new(code, e.to_string())
    }
}

fn error_of(e: wit::ToolError) -> ToolError {
    match e {
        wit::ToolError::Refused(m) => ToolError::Refused(m),
        wit::ToolError::Denied(m) => ToolError::Denied(m),
        wit::ToolError::Park => ToolError::Park,
        wit::ToolError::Server(m) => ToolError::Server(m),
        wit::ToolError::LimitExceeded(m) => ToolError::LimitExceeded(m),
        wit::ToolError::Cancelled => ToolError::Cancelled,
        wit::ToolError::Interrupted(m) => ToolError::Interrupted(m),
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
}

/// The tools of every server the workspace is granted.
pub fn list() -> Result<Vec<ToolInfo>, ToolError> {
    wit::list()
        .map(|list| {
            list.into_iter()
                .map(|t| ToolInfo {
                    input_schema: json(&t.input_schema),
                    server: t.server,
                    name: t.name,
                    description: t.description,
                    read_only: t.read_only,
                    approve: t.approve,
                })
                .collect()
        })
        .map_err(error_of)
}

/// The tools, or none when the workspace is granted no server (any other
/// failure is still an error).
pub fn available() -> Result<Vec<ToolInfo>, ToolError> {
    match list() {
        Err(ToolError::Refused(_)) => Ok(Vec::new()),
        other => other,
    }
}

/// Call a tool by name with a JSON object of arguments.
pub fn call(name: &str, arguments: &serde_json::Value) -> Result<ToolResult, ToolError> {
    wit::call(name, &arguments.to_string())
        .map(|r| ToolResult {
            text: r.text,
            content: json(&r.content),
            structured: r.structured.as_deref().map(json),
            is_error: r.is_error,
        })
        .map_err(error_of)
}

/// The tools as a model takes them.
pub fn for_model(tools: &[ToolInfo]) -> Vec<crate::model::Tool> {
    tools
        .iter()
        .map(|t| crate::model::Tool::new(&t.name, &t.description, t.input_schema.clone()))
        .collect()
}

/// Run a tool call a model asked for and answer it: the tool's text, or
/// what went wrong (a model reads either and goes on). `Err` only when the
/// run should stop: it was cancelled, or an approval waits and the
/// controller should park.
pub fn answer(call_: &crate::model::ToolCall) -> Result<crate::model::Message, ToolError> {
    let args = match call_.args() {
        serde_json::Value::Null => serde_json::json!({}),
        a => a,
    };
    let text = match call(&call_.name, &args) {
        Ok(r) if r.is_error => format!("the tool failed: {}", r.text),
        Ok(r) => r.text,
        Err(e @ (ToolError::Park | ToolError::Cancelled)) => return Err(e),
        Err(e) => format!("error: {e}"),
    };
    Ok(crate::model::Message::tool(&call_.id, text))
}
