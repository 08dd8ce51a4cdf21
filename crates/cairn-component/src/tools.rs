//! The host side of `cairn:tools/mcp@0.1.0`: `list` and `call` go through
//! the run's one durable host call (capability `tools`), so a replay
//! answers both from the journal. A call finds its tool in the list this
//! run last got (listing first when it has none), and a tool marked
//! `approve` is put to a person as an ordinary approval decision —
//! journaled, routed and replayed like any other — before it is called.

use super::HostState;
use super::host::{Answer, DecisionRequest};
use cairn_types::event::{CallError, CallErrorCode, RequestKind};
use cairn_types::tools::{ToolCallRequest, ToolInfo, ToolResult};

mod wit {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "cairn:tools/imports",
        imports: { default: async | trappable },
    });
    pub use self::cairn::tools::mcp;
}
use wit::mcp as t;

/// The capability's name in the journal.
const TOOLS: &str = "tools";

/// Link `cairn:tools` (an optional import).
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<HostState>,
) -> wasmtime::Result<()> {
    t::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(linker, |s| s)
}

fn error_of(e: CallError) -> t::ToolError {
    match e.code {
        CallErrorCode::Refused => t::ToolError::Refused(e.message),
        CallErrorCode::LimitExceeded => t::ToolError::LimitExceeded(e.message),
        CallErrorCode::Provider => t::ToolError::Server(e.message),
        CallErrorCode::Cancelled => t::ToolError::Cancelled,
        CallErrorCode::Interrupted => t::ToolError::Interrupted(e.message),
    }
}

fn info_of(i: &ToolInfo) -> t::ToolInfo {
    t::ToolInfo {
        server: i.server.clone(),
        name: i.name.clone(),
        description: i.description.clone(),
        input_schema: i.input_schema.to_string(),
        read_only: i.read_only,
        approve: i.approve,
    }
}

/// Whether a person's answer to a tool's approval approves it: `true`, or
/// an object with `"approved": true`.
fn approved(value: &serde_json::Value) -> (bool, String) {
    match value {
        serde_json::Value::Bool(b) => (*b, String::new()),
        serde_json::Value::Object(o) => (
            o.get("approved").and_then(|a| a.as_bool()).unwrap_or(false),
            o.get("reason")
                .and_then(|r| r.as_str())
                .unwrap_or_default()
                .to_string(),
        ),
        _ => (false, String::new()),
    }
}

impl HostState {
    /// List the session's tools through the durable host call, keeping the
    /// answer for later calls.
    async fn list_tools(&mut self) -> wasmtime::Result<Result<Vec<ToolInfo>, t::ToolError>> {
        let answer = super::host::host(self)?
            .host_call(TOOLS, "list", serde_json::json!({}))
            .await?;
        Ok(match answer {
            Ok(value) => match serde_json::from_value::<Vec<ToolInfo>>(value) {
                Ok(list) => {
                    self.tools = Some(list.clone());
                    Ok(list)
                }
                Err(e) => Err(t::ToolError::Server(format!(
                    "the tool list does not read: {e}"
                ))),
            },
            Err(e) => Err(error_of(e)),
        })
    }
}

impl t::Host for HostState {
    async fn list(&mut self) -> wasmtime::Result<Result<Vec<t::ToolInfo>, t::ToolError>> {
        Ok(self
            .list_tools()
            .await?
            .map(|list| list.iter().map(info_of).collect()))
    }

    async fn call(
        &mut self,
        name: String,
        arguments: String,
    ) -> wasmtime::Result<Result<t::ToolResult, t::ToolError>> {
        let arguments: serde_json::Value = if arguments.trim().is_empty() {
            serde_json::json!({})
        } else {
            match serde_json::from_str(&arguments) {
                Ok(v) => v,
                Err(e) => {
                    return Ok(Err(t::ToolError::Refused(format!(
                        "the arguments of {name:?} are not a JSON document: {e}"
                    ))));
                }
            }
        };
        if !arguments.is_object() {
            return Ok(Err(t::ToolError::Refused(format!(
                "the arguments of {name:?} must be a JSON object"
            ))));
        }
        if let Err(why) = cairn_types::json::check_json_depth("tool arguments", &arguments) {
            return Ok(Err(t::ToolError::Refused(why)));
        }
        if self.tools.is_none()
            && let Err(e) = self.list_tools().await?
        {
            return Ok(Err(e));
        }
        let Some(tool) = self
            .tools
            .as_ref()
            .and_then(|list| list.iter().find(|i| i.name == name))
            .cloned()
        else {
            return Ok(Err(t::ToolError::Refused(format!(
                "there is no tool {name:?} among the session's tools"
            ))));
        };
        let host = super::host::host(self)?;
        if tool.approve {
            let request = DecisionRequest {
                kind: RequestKind::Approval,
                prompt: format!("call {}'s tool {name}?", tool.server),
                details: serde_json::json!({
                    "capability": TOOLS,
                    "server": tool.server,
                    "tool": name,
                    "arguments": arguments,
                }),
                timeout_ms: None,
                default_value: None,
            };
            match host.wait(request).await? {
                Answer::Decided(value) => {
                    let (yes, reason) = approved(&value);
                    if !yes {
                        return Ok(Err(t::ToolError::Denied(reason)));
                    }
                }
                Answer::TimedOut => {
                    return Ok(Err(t::ToolError::Denied("no answer in time".into())));
                }
                Answer::Cancelled => return Ok(Err(t::ToolError::Cancelled)),
                Answer::Park => return Ok(Err(t::ToolError::Park)),
            }
        }
        // The server's own name for it (`list` may have qualified it).
        let own = tool
            .name
            .strip_prefix(&format!("{}__", tool.server))
            .unwrap_or(&tool.name)
            .to_string();
        let request = ToolCallRequest {
            server: tool.server.clone(),
            tool: own,
            arguments,
            read_only: tool.read_only,
        };
        let request = serde_json::to_value(&request)
            .map_err(|e| wasmtime::Error::msg(format!("cannot encode a tool call: {e}")))?;
        Ok(match host.host_call(TOOLS, "call", request).await? {
            Ok(value) => match serde_json::from_value::<ToolResult>(value) {
                Ok(r) => Ok(t::ToolResult {
                    text: r.text,
                    content: r.content.to_string(),
                    structured: r.structured.map(|s| s.to_string()),
                    is_error: r.is_error,
                }),
                Err(e) => Err(t::ToolError::Server(format!(
                    "the tool's result does not read: {e}"
                ))),
            },
            Err(e) => Err(error_of(e)),
        })
    }
}
