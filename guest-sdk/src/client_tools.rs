//! Tools the *client* offered — an OpenAI chat request's `tools`, a
//! Responses request's function tools — called mid-run: the client runs
//! them and sends the results back, and the run goes on with them.
//!
//! ```no_run
//! use cairn_guest::{Controller, Error, Outcome, Start, client_tools};
//! # struct Agent;
//! # impl Controller for Agent {
//! fn run(start: Start) -> Result<Outcome, Error> {
//!     let offered = client_tools::offered(&start);
//!     let Some(tool) = offered.first() else {
//!         return Ok(Outcome::Finished(start.prompt));
//!     };
//!     let weather = client_tools::call(&tool.name, &serde_json::json!({"city": "Oslo"}))?;
//!     Ok(Outcome::Finished(format!("it is {weather}")))
//! }
//! # }
//! ```
//!
//! A call is a `tool_call` event (id `call_<run>_<n>`, unique in the host)
//! and a `tool_result` decision whose details name it (`{"tool_call_id"}`):
//! the chat seam answers the client with the call (`finish_reason:
//! "tool_calls"`), and the client's follow-up — `tool` messages with that
//! `tool_call_id` — answers the decision, on the same run. Both are
//! journaled, so a replay gets the same results without asking. A run that
//! ends after emitting calls instead (no wait) is answered by a new run that
//! [`continues`](Start::continues) it, with the results in [`results`].

use crate::decisions::{Answer, RequestKind, request};
use crate::journal::{EmitError, emit_tool_call};
use crate::types::Start;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// The current run's id, for call ids; set when a run starts.
pub(crate) static RUN: Mutex<String> = Mutex::new(String::new());
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A function tool the client offered.
#[derive(Debug, Clone, PartialEq)]
pub struct Offered {
    /// Its name.
    pub name: String,
    /// What it does, when the client said.
    pub description: Option<String>,
    /// Its parameters' JSON Schema (`{}` when none).
    pub parameters: serde_json::Value,
}

/// A tool result the client sent with the request that started this run
/// (its call was emitted by the run this one continues).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// The call it answers.
    pub tool_call_id: String,
    /// What the tool said.
    pub content: String,
}

/// Why a client tool call did not return a result.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientToolError {
    /// The call could not be journaled.
    Emit(EmitError),
    /// The wait ended without a result (timed out, cancelled, park, refused).
    NotAnswered(Answer),
}

impl std::fmt::Display for ClientToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientToolError::Emit(e) => write!(f, "the tool call was not journaled: {e}"),
            ClientToolError::NotAnswered(a) => write!(f, "the client sent no result ({a:?})"),
        }
    }
}

impl std::error::Error for ClientToolError {}

impl From<ClientToolError> for crate::Error {
    fn from(e: ClientToolError) -> Self {
        let code = match e {
            ClientToolError::Emit(_) => "tool_call_refused",
            ClientToolError::NotAnswered(_) => "tool_result_missing",
        };
        crate::Error::new(code, e.to_string())
    }
}

fn start_json(start: &Start) -> serde_json::Value {
    start
        .tools
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// The function tools the client offered this run (chat's
/// `{"type": "function", "function": {...}}` entries).
pub fn offered(start: &Start) -> Vec<Offered> {
    let doc = start_json(start);
    let Some(tools) = doc["tools"].as_array() else {
        return Vec::new();
    };
    tools
        .iter()
        .filter_map(|t| {
            let f = &t["function"];
            Some(Offered {
                name: f["name"].as_str()?.to_string(),
                description: f["description"].as_str().map(str::to_string),
                parameters: match &f["parameters"] {
                    serde_json::Value::Null => serde_json::json!({}),
                    p => p.clone(),
                },
            })
        })
        .collect()
}

/// The tool results this run was started with (a client's answer to the
/// calls the run it continues ended with), in the client's order.
pub fn results(start: &Start) -> Vec<Given> {
    let doc = start_json(start);
    let Some(given) = doc["tool_results"].as_array() else {
        return Vec::new();
    };
    given
        .iter()
        .filter_map(|r| {
            Some(Given {
                tool_call_id: r["tool_call_id"].as_str()?.to_string(),
                content: r["content"].as_str().unwrap_or_default().to_string(),
            })
        })
        .collect()
}

fn next_id() -> String {
    let run = RUN.lock().map(|r| r.replace('-', "")).unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed) + 1;
    format!("call_{run}_{n}")
}

/// Call one client tool and wait for its result (the tool's text).
pub fn call(name: &str, arguments: &serde_json::Value) -> Result<String, ClientToolError> {
    call_all(&[(name, arguments.clone())])
        .pop()
        .unwrap_or(Err(ClientToolError::NotAnswered(Answer::TimedOut)))
}

/// Call several client tools at once (OpenAI's parallel tool calls: the
/// client sees them together) and wait for each result, in order.
pub fn call_all(calls: &[(&str, serde_json::Value)]) -> Vec<Result<String, ClientToolError>> {
    let mut ids = Vec::new();
    for (name, arguments) in calls {
        let id = next_id();
        ids.push(
            emit_tool_call(&id, name, &arguments.to_string())
                .map(|_| (id, *name))
                .map_err(ClientToolError::Emit),
        );
    }
    ids.into_iter()
        .map(|emitted| {
            let (id, name) = emitted?;
            let details = serde_json::json!({ "tool_call_id": id, "name": name });
            match request(RequestKind::ToolResult, name, &details, None, None) {
                Answer::Decided(serde_json::Value::String(text)) => Ok(text),
                Answer::Decided(other) => Ok(other.to_string()),
                other => Err(ClientToolError::NotAnswered(other)),
            }
        })
        .collect()
}
