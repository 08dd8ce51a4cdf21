//! The Anthropic Messages API (`POST {base_url}/v1/messages`): system
//! messages go in `system`, tool calls are `tool_use` blocks and their
//! results `tool_result` blocks of a user turn; streaming reads the named
//! events (`message_start`, `content_block_*`, `message_delta`, …).

use super::wire;
use super::{Attempt, AttemptError, stream_event, stream_tool_call};
use cairn_types::event::{AgentEvent, By};
use cairn_types::model::{ChatRequest, ChatResponse, FinishReason, Role, ToolCall, ToolChoice};
use futures_util::StreamExt;
use serde_json::{Value, json};

/// `max_tokens` is required by the API; this when the request has none.
const DEFAULT_MAX_TOKENS: u32 = 4096;
const VERSION: &str = "2023-06-01";

fn body(entry_model: &str, r: &ChatRequest) -> Value {
    let mut system = Vec::new();
    // (role, content blocks); consecutive turns of one role are merged,
    // as the API wants user and assistant to alternate.
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for m in &r.messages {
        let (role, blocks) = match m.role {
            Role::System => {
                system.push(m.content.clone());
                continue;
            }
            Role::User => ("user", vec![json!({"type": "text", "text": m.content})]),
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                for c in &m.tool_calls {
                    let input: Value = serde_json::from_str(&c.arguments).unwrap_or(json!({}));
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                ("assistant", blocks)
            }
            Role::Tool => (
                "user",
                vec![json!({"type": "tool_result",
                            "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                            "content": m.content})],
            ),
        };
        match turns.last_mut() {
            Some((last, b)) if *last == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "model": entry_model,
        "messages": messages,
        "max_tokens": r.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "stream": r.stream,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if !r.tools.is_empty() {
        body["tools"] = r
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    if let Some(choice) = &r.tool_choice {
        body["tool_choice"] = match choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Named(n) => json!({"type": "tool", "name": n}),
        };
    }
    if let Some(t) = r.temperature {
        body["temperature"] = json!(t);
    }
    body
}

fn finish_reason(s: Option<&str>) -> FinishReason {
    match s {
        Some("end_turn") | Some("stop_sequence") | None => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("refusal") => FinishReason::ContentFilter,
        Some(_) => FinishReason::Other,
    }
}

/// One attempt.
pub(crate) async fn send(a: Attempt<'_>) -> Result<ChatResponse, AttemptError> {
    wire::within(a.timeout, attempt(&a)).await
}

fn url(base: &str) -> String {
    match base.trim_end_matches('/').ends_with("/v1") {
        true => wire::join(base, "messages"),
        false => wire::join(base, "v1/messages"),
    }
}

async fn attempt(a: &Attempt<'_>) -> Result<ChatResponse, AttemptError> {
    let mut headers = vec![("anthropic-version", VERSION.to_string())];
    if let Some(key) = a.key {
        headers.push(("x-api-key", key.expose().to_string()));
    }
    let response = wire::post(
        a,
        &url(&a.entry.base_url),
        &headers,
        &body(&a.entry.model, a.request),
    )
    .await?;
    if !a.request.stream {
        let v = wire::json(response).await?;
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for block in v["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
                Some("tool_use") => tool_calls.push(ToolCall {
                    id: block["id"].as_str().unwrap_or_default().to_string(),
                    name: block["name"].as_str().unwrap_or_default().to_string(),
                    arguments: block["input"].to_string(),
                }),
                _ => {}
            }
        }
        return Ok(ChatResponse {
            text,
            tool_calls,
            finish_reason: finish_reason(v["stop_reason"].as_str()),
            input_tokens: v["usage"]["input_tokens"].as_u64().unwrap_or(0),
            output_tokens: v["usage"]["output_tokens"].as_u64().unwrap_or(0),
            model: v["model"].as_str().unwrap_or(&a.entry.model).to_string(),
        });
    }
    let mut events = wire::events(response);
    let mut text = String::new();
    // Blocks by index: (kind, tool call being built).
    let mut blocks: Vec<(String, ToolCall)> = Vec::new();
    let mut stop = None;
    let (mut input_tokens, mut output_tokens) = (0, 0);
    let mut model = a.entry.model.clone();
    let mut stopped = false;
    while let Some(event) = events.next().await {
        let event = event?;
        let name = match event.name.as_str() {
            "" | "message" => String::new(),
            n => n.to_string(),
        };
        if name == "ping" {
            continue;
        }
        let v = wire::data(&event)?;
        let kind = if name.is_empty() {
            v["type"].as_str().unwrap_or_default().to_string()
        } else {
            name
        };
        match kind.as_str() {
            "message_start" => {
                let m = &v["message"];
                if let Some(id) = m["model"].as_str() {
                    model = id.to_string();
                }
                input_tokens = m["usage"]["input_tokens"].as_u64().unwrap_or(0);
                output_tokens = m["usage"]["output_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let b = &v["content_block"];
                let index = v["index"].as_u64().unwrap_or(blocks.len() as u64) as usize;
                if index != blocks.len() {
                    return Err(AttemptError::fatal(
                        "the provider streamed a content block out of order",
                    ));
                }
                blocks.push((
                    b["type"].as_str().unwrap_or_default().to_string(),
                    ToolCall {
                        id: b["id"].as_str().unwrap_or_default().to_string(),
                        name: b["name"].as_str().unwrap_or_default().to_string(),
                        arguments: String::new(),
                    },
                ));
            }
            "content_block_delta" => {
                let d = &v["delta"];
                let index = v["index"].as_u64().unwrap_or(0) as usize;
                match d["type"].as_str() {
                    Some("text_delta") => {
                        let t = d["text"].as_str().unwrap_or_default();
                        text.push_str(t);
                        stream_event(
                            a.ctx,
                            AgentEvent::TextDelta {
                                text: t.to_string(),
                                by: Some(By::Model),
                            },
                        )
                        .await?;
                    }
                    Some("thinking_delta") => {
                        let t = d["thinking"].as_str().unwrap_or_default();
                        stream_event(
                            a.ctx,
                            AgentEvent::ReasoningDelta {
                                text: t.to_string(),
                                by: Some(By::Model),
                            },
                        )
                        .await?;
                    }
                    Some("input_json_delta") => {
                        let Some((_, call)) = blocks.get_mut(index) else {
                            return Err(AttemptError::fatal(
                                "the provider streamed a delta for no block",
                            ));
                        };
                        call.arguments
                            .push_str(d["partial_json"].as_str().unwrap_or_default());
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = v["index"].as_u64().unwrap_or(0) as usize;
                if let Some((kind, call)) = blocks.get_mut(index)
                    && kind == "tool_use"
                {
                    if call.arguments.is_empty() {
                        call.arguments = "{}".into();
                    }
                    stream_tool_call(a.ctx, call).await?;
                }
            }
            "message_delta" => {
                if let Some(s) = v["delta"]["stop_reason"].as_str() {
                    stop = Some(s.to_string());
                }
                if let Some(n) = v["usage"]["output_tokens"].as_u64() {
                    output_tokens = n;
                }
            }
            "message_stop" => {
                stopped = true;
                break;
            }
            "error" => {
                let e = &v["error"];
                let message = format!(
                    "the provider's stream reported {}: {}",
                    e["type"].as_str().unwrap_or("an error"),
                    e["message"].as_str().unwrap_or("(no message)")
                );
                return Err(match e["type"].as_str() {
                    Some("overloaded_error") | Some("api_error") | Some("rate_limit_error") => {
                        AttemptError::retry(message)
                    }
                    _ => AttemptError::fatal(message),
                });
            }
            _ => {}
        }
    }
    if !stopped {
        return Err(AttemptError::retry(
            "the provider's stream ended before it finished",
        ));
    }
    let tool_calls = blocks
        .into_iter()
        .filter(|(kind, _)| kind == "tool_use")
        .map(|(_, c)| c)
        .collect();
    Ok(ChatResponse {
        text,
        tool_calls,
        finish_reason: finish_reason(stop.as_deref()),
        input_tokens,
        output_tokens,
        model,
    })
}
