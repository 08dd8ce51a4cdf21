//! OpenAI-compatible chat completions (`POST {base_url}/chat/completions`):
//! OpenAI, Ollama, vLLM, llama.cpp's server, LM Studio. Streaming reads
//! `data:` chunks up to `[DONE]`, with `stream_options.include_usage`.

use super::wire;
use super::{Attempt, AttemptError, stream_event, stream_tool_call};
use cairn_types::event::{AgentEvent, By};
use cairn_types::model::{ChatRequest, ChatResponse, FinishReason, Role, ToolCall, ToolChoice};
use futures_util::StreamExt;
use serde_json::{Value, json};

fn body(entry_model: &str, r: &ChatRequest) -> Value {
    let messages: Vec<Value> = r
        .messages
        .iter()
        .map(|m| match m.role {
            Role::System => json!({"role": "system", "content": m.content}),
            Role::User => json!({"role": "user", "content": m.content}),
            Role::Assistant => {
                let mut msg = json!({"role": "assistant", "content": m.content});
                if !m.tool_calls.is_empty() {
                    if m.content.is_empty() {
                        msg["content"] = Value::Null;
                    }
                    msg["tool_calls"] = m
                        .tool_calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}})
                        })
                        .collect();
                }
                msg
            }
            Role::Tool => json!({"role": "tool", "content": m.content,
                                 "tool_call_id": m.tool_call_id.clone().unwrap_or_default()}),
        })
        .collect();
    let mut body = json!({"model": entry_model, "messages": messages, "stream": r.stream});
    if !r.tools.is_empty() {
        body["tools"] = r
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
    }
    if let Some(choice) = &r.tool_choice {
        body["tool_choice"] = match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Named(n) => json!({"type": "function", "function": {"name": n}}),
        };
    }
    if let Some(n) = r.max_tokens {
        body["max_tokens"] = json!(n);
    }
    if let Some(t) = r.temperature {
        body["temperature"] = json!(t);
    }
    if r.stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

fn finish_reason(s: Option<&str>) -> FinishReason {
    match s {
        Some("stop") | None => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        Some("content_filter") => FinishReason::ContentFilter,
        Some(_) => FinishReason::Other,
    }
}

fn usage(v: &Value) -> (u64, u64) {
    (
        v["prompt_tokens"].as_u64().unwrap_or(0),
        v["completion_tokens"].as_u64().unwrap_or(0),
    )
}

/// One attempt.
pub(crate) async fn send(a: Attempt<'_>) -> Result<ChatResponse, AttemptError> {
    wire::within(a.timeout, attempt(&a)).await
}

async fn attempt(a: &Attempt<'_>) -> Result<ChatResponse, AttemptError> {
    let url = wire::join(&a.entry.base_url, "chat/completions");
    let mut headers = Vec::new();
    if let Some(key) = a.key {
        headers.push(("authorization", format!("Bearer {}", key.expose())));
    }
    let response = wire::post(a, &url, &headers, &body(&a.entry.model, a.request)).await?;
    if !a.request.stream {
        let v = wire::json(response).await?;
        let choice = &v["choices"][0];
        if choice.is_null() {
            return Err(AttemptError::fatal("the provider's answer has no choices"));
        }
        let message = &choice["message"];
        let tool_calls = message["tool_calls"]
            .as_array()
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| ToolCall {
                        id: c["id"].as_str().unwrap_or_default().to_string(),
                        name: c["function"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        arguments: c["function"]["arguments"]
                            .as_str()
                            .unwrap_or("{}")
                            .to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let (input_tokens, output_tokens) = usage(&v["usage"]);
        return Ok(ChatResponse {
            text: message["content"].as_str().unwrap_or_default().to_string(),
            tool_calls,
            finish_reason: finish_reason(choice["finish_reason"].as_str()),
            input_tokens,
            output_tokens,
            model: v["model"].as_str().unwrap_or(&a.entry.model).to_string(),
        });
    }
    let mut events = wire::events(response);
    let mut text = String::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut finish = None;
    let mut tokens = (0, 0);
    let mut model = a.entry.model.clone();
    let mut done = false;
    while let Some(event) = events.next().await {
        let event = event?;
        if event.data.trim() == "[DONE]" {
            done = true;
            break;
        }
        let chunk = wire::data(&event)?;
        if let Some(error) = chunk.get("error") {
            return Err(AttemptError::retry(format!(
                "the provider's stream reported an error: {}",
                error["message"].as_str().unwrap_or("(no message)")
            )));
        }
        if let Some(m) = chunk["model"].as_str() {
            model = m.to_string();
        }
        if chunk["usage"].is_object() {
            tokens = usage(&chunk["usage"]);
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
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
        let reasoning = delta["reasoning_content"]
            .as_str()
            .or(delta["reasoning"].as_str());
        if let Some(t) = reasoning.filter(|t| !t.is_empty()) {
            stream_event(
                a.ctx,
                AgentEvent::ReasoningDelta {
                    text: t.to_string(),
                    by: Some(By::Model),
                },
            )
            .await?;
        }
        for c in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = c["index"].as_u64().unwrap_or(calls.len() as u64) as usize;
            if index > calls.len() || index > 1024 {
                return Err(AttemptError::fatal(
                    "the provider streamed a tool call out of order",
                ));
            }
            if index == calls.len() {
                calls.push(ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
            }
            let call = &mut calls[index];
            if let Some(id) = c["id"].as_str() {
                call.id = id.to_string();
            }
            if let Some(n) = c["function"]["name"].as_str() {
                call.name.push_str(n);
            }
            if let Some(args) = c["function"]["arguments"].as_str() {
                call.arguments.push_str(args);
            }
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    if !done && finish.is_none() {
        return Err(AttemptError::retry(
            "the provider's stream ended before it finished",
        ));
    }
    for call in &calls {
        stream_tool_call(a.ctx, call).await?;
    }
    Ok(ChatResponse {
        text,
        tool_calls: calls,
        finish_reason: finish_reason(finish.as_deref()),
        input_tokens: tokens.0,
        output_tokens: tokens.1,
        model,
    })
}
