//! The host side of `cairn:model/chat@0.1.0`: the WIT records become the
//! journaled JSON ([`cairn_types::model`]) and go through the run's one
//! durable host call; the answer comes back as WIT records. Every failure
//! the guest can meet is a `model-error` value.

use super::HostState;
use cairn_types::event::{CallError, CallErrorCode};
use cairn_types::model as m;

mod wit {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "cairn:model/imports",
        imports: { default: async | trappable },
    });
    pub use self::cairn::model::chat;
}
use wit::chat as c;

/// Link `cairn:model` (an optional import: components that do not import
/// it are not affected).
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<HostState>,
) -> wasmtime::Result<()> {
    c::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(linker, |s| s)
}

fn role(r: c::Role) -> m::Role {
    match r {
        c::Role::System => m::Role::System,
        c::Role::User => m::Role::User,
        c::Role::Assistant => m::Role::Assistant,
        c::Role::Tool => m::Role::Tool,
    }
}

fn call_of(t: c::ToolCall) -> m::ToolCall {
    m::ToolCall {
        id: t.id,
        name: t.name,
        arguments: t.arguments,
    }
}

fn request_of(req: c::Request) -> Result<m::ChatRequest, String> {
    let mut tools = Vec::with_capacity(req.tools.len());
    for t in req.tools {
        let parameters: serde_json::Value = if t.parameters.trim().is_empty() {
            serde_json::json!({"type": "object", "properties": {}})
        } else {
            serde_json::from_str(&t.parameters).map_err(|e| {
                format!(
                    "the parameters of tool {:?} are not a JSON document: {e}",
                    t.name
                )
            })?
        };
        cairn_types::json::check_json_depth("tool parameters", &parameters)?;
        tools.push(m::Tool {
            name: t.name,
            description: t.description,
            parameters,
        });
    }
    Ok(m::ChatRequest {
        model: if req.model.is_empty() {
            "default".into()
        } else {
            req.model
        },
        messages: req
            .messages
            .into_iter()
            .map(|msg| m::Message {
                role: role(msg.role),
                content: msg.content,
                tool_calls: msg.tool_calls.into_iter().map(call_of).collect(),
                tool_call_id: msg.tool_call_id,
            })
            .collect(),
        tools,
        tool_choice: req.tool_choice.map(|c| match c {
            c::ToolChoice::Auto => m::ToolChoice::Auto,
            c::ToolChoice::None => m::ToolChoice::None,
            c::ToolChoice::Required => m::ToolChoice::Required,
            c::ToolChoice::Named(n) => m::ToolChoice::Named(n),
        }),
        max_tokens: req.max_tokens,
        temperature: req.temperature.filter(|t| t.is_finite()),
        stream: req.stream,
    })
}

fn response_of(r: m::ChatResponse) -> c::Response {
    c::Response {
        text: r.text,
        tool_calls: r
            .tool_calls
            .into_iter()
            .map(|t| c::ToolCall {
                id: t.id,
                name: t.name,
                arguments: t.arguments,
            })
            .collect(),
        finish_reason: match r.finish_reason {
            m::FinishReason::Stop => c::FinishReason::Stop,
            m::FinishReason::Length => c::FinishReason::Length,
            m::FinishReason::ToolCalls => c::FinishReason::ToolCalls,
            m::FinishReason::ContentFilter => c::FinishReason::ContentFilter,
            m::FinishReason::Other => c::FinishReason::Other,
        },
        usage: c::Usage {
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
        },
        model: r.model,
    }
}

fn error_of(e: CallError) -> c::ModelError {
    match e.code {
        CallErrorCode::Refused => c::ModelError::Refused(e.message),
        CallErrorCode::LimitExceeded => c::ModelError::LimitExceeded(e.message),
        CallErrorCode::Provider => c::ModelError::Provider(e.message),
        CallErrorCode::Cancelled => c::ModelError::Cancelled,
        CallErrorCode::Interrupted => c::ModelError::Interrupted(e.message),
    }
}

impl c::Host for HostState {
    async fn chat(
        &mut self,
        req: c::Request,
    ) -> wasmtime::Result<Result<c::Response, c::ModelError>> {
        let request = match request_of(req) {
            Ok(r) => r,
            Err(why) => return Ok(Err(c::ModelError::Refused(why))),
        };
        let request = serde_json::to_value(&request)
            .map_err(|e| wasmtime::Error::msg(format!("cannot encode a model request: {e}")))?;
        let answer = super::host::host(self)?
            .host_call("model", "chat", request)
            .await?;
        Ok(match answer {
            Ok(value) => match serde_json::from_value::<m::ChatResponse>(value) {
                Ok(r) => Ok(response_of(r)),
                Err(e) => Err(c::ModelError::Provider(format!(
                    "the model's response does not read: {e}"
                ))),
            },
            Err(e) => Err(error_of(e)),
        })
    }
}
