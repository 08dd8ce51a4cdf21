//! A chat run's journal projected to OpenAI's answer: chunks on a stream, or
//! one `chat.completion`.

use super::super::error::ApiError;
use super::super::streams::{Slot, holding};
use axum::Json;
use axum::response::sse::{Event, KeepAlive, Sse};
use cairn_runtime::ErrorCode;
use cairn_runtime::SessionEvent;
use cairn_runtime::ids::RunId;
use cairn_runtime::journal::Delivery;
use cairn_runtime::journal::event::{
    AgentEvent, FinishOutcome, LifecycleEvent, LivenessPolicy, Payload, RequestKind, Usage,
};
use cairn_runtime::runtime::{Observation, Runtime};
use futures_util::stream;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;

/// What every frame of one answer shares.
pub struct Shape {
    pub run: RunId,
    pub model: String,
    pub include_usage: bool,
    /// The function tools the client offered: a controller's `tool_call`
    /// of one of them is an OpenAI tool call for the client to run.
    pub offered: Vec<String>,
    /// Results the client sent for calls the run has not waited on yet:
    /// each answers its wait when it comes.
    pub held: HashMap<String, String>,
}

/// What a decision request means to this answer.
enum Wait {
    /// A tool result the client already sent: answered here.
    Answered,
    /// A client's tool result: the answer ends with the calls, the run
    /// handed over to wait for the client's follow-up.
    Client,
    /// A decision like any other.
    Other,
}

/// Sort a decision request: a `tool_result` wait on a client call
/// (`unlinked`: the client calls this answer emitted and no wait named
/// yet) is the client's, unless its result is held.
async fn wait_of(rt: &Runtime, shape: &mut Shape, unlinked: &mut Vec<String>, p: &Payload) -> Wait {
    let Payload::Lifecycle(LifecycleEvent::DecisionRequested {
        decision_id,
        request_kind: RequestKind::ToolResult,
        details,
        ..
    }) = p
    else {
        return Wait::Other;
    };
    let Some(call) = crate::tool_results::call_of(details, unlinked) else {
        return Wait::Other;
    };
    match shape.held.remove(&call) {
        Some(content) => match rt.decide(decision_id, Value::String(content)).await {
            Ok(()) => Wait::Answered,
            Err(e) => {
                tracing::warn!(decision = %decision_id, "a held tool result was refused: {e}");
                Wait::Other
            }
        },
        None => Wait::Client,
    }
}

/// A controller's tool call as OpenAI's, when it calls a tool the client
/// offered (a tool call its model asked of the controller, `by: model`,
/// is the controller's own business).
fn client_tool_call(shape: &Shape, payload: &Payload) -> Option<Value> {
    let Payload::Agent(AgentEvent::ToolCall {
        id,
        name,
        arguments,
        by: None,
    }) = payload
    else {
        return None;
    };
    shape.offered.iter().any(|o| o == name).then(|| {
        json!({
            "id": id,
            "type": "function",
            "function": { "name": name, "arguments": arguments.to_string() },
        })
    })
}

impl Shape {
    fn id(&self) -> String {
        format!("chatcmpl-{}", self.run)
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        let mut c = json!({
            "id": self.id(),
            "object": "chat.completion.chunk",
            "created": now_secs(),
            "model": self.model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        });
        if self.include_usage {
            c["usage"] = Value::Null;
        }
        c
    }

    fn usage_chunk(&self, usage: Usage) -> Value {
        json!({
            "id": self.id(),
            "object": "chat.completion.chunk",
            "created": now_secs(),
            "model": self.model,
            "choices": [],
            "usage": usage_of(usage),
        })
    }
}

fn now_secs() -> u64 {
    cairn_runtime::fsutil::now_ms() / 1000
}

/// OpenAI's usage: cairn counts a run's events, not tokens; each event the
/// controller emitted is one completion token here.
fn usage_of(usage: Usage) -> Value {
    json!({
        "prompt_tokens": 0,
        "completion_tokens": usage.events,
        "total_tokens": usage.events,
    })
}

/// The `cairn_decision` extension: what the run waits on, and where to
/// answer it.
fn decision_of(run: RunId, payload: &Payload) -> Option<Value> {
    let Payload::Lifecycle(LifecycleEvent::DecisionRequested {
        decision_id,
        request_kind,
        prompt,
        details,
        ..
    }) = payload
    else {
        return None;
    };
    Some(json!({
        "decision_id": decision_id,
        "run_id": run,
        "request_kind": request_kind,
        "prompt": prompt,
        "details": details,
        "answer_url": format!("/v1/decisions/{decision_id}"),
    }))
}

/// How a run's end reads to an OpenAI client: `Ok((finish_reason, text))`,
/// or the error a failed or cancelled run is.
fn ending(end: &LifecycleEvent) -> Result<(&'static str, Option<&str>), (String, String)> {
    match end {
        LifecycleEvent::Finished { text, .. } => Ok(("stop", Some(text))),
        LifecycleEvent::Cancelled { message, .. } => Err(("cancelled".into(), message.clone())),
        LifecycleEvent::Failed { error } => Err((error.code.to_string(), error.message.clone())),
        _ => Ok(("stop", None)),
    }
}

fn ours(d: Delivery, run: RunId) -> Option<std::sync::Arc<SessionEvent>> {
    match d {
        Delivery::Event(e) if e.run_id == Some(run) => Some(e),
        _ => None,
    }
}

struct Follow {
    rt: Runtime,
    obs: Option<Observation>,
    shape: Shape,
    head_sent: bool,
    streamed_text: bool,
    tool_calls: usize,
    /// Client calls emitted and not waited on (end-of-run calls, at the end).
    unlinked: Vec<String>,
}

/// The streamed answer: a role chunk, content chunks, decision chunks, the
/// finish chunk (or an `error` frame), the usage chunk when asked, `[DONE]`.
pub fn streamed(
    rt: Runtime,
    obs: Observation,
    shape: Shape,
    slot: Slot,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let follow = Follow {
        rt,
        obs: Some(obs),
        shape,
        head_sent: false,
        streamed_text: false,
        tool_calls: 0,
        unlinked: Vec::new(),
    };
    let frames = stream::unfold(follow, |mut f| async move {
        let data = |v: Value| Event::default().data(v.to_string());
        if !f.head_sent {
            f.head_sent = true;
            let head = f
                .shape
                .chunk(json!({ "role": "assistant", "content": "" }), None);
            return Some((vec![data(head)], f));
        }
        let obs = f.obs.as_mut()?;
        loop {
            let e = match obs.next().await {
                Some(Ok(d)) => match ours(d, f.shape.run) {
                    Some(e) => e,
                    None => continue,
                },
                _ => return None,
            };
            let run = f.shape.run;
            match &e.payload {
                Payload::Agent(AgentEvent::TextDelta { text, .. }) => {
                    f.streamed_text = true;
                    let c = f.shape.chunk(json!({ "content": text }), None);
                    return Some((vec![data(c)], f));
                }
                Payload::Agent(AgentEvent::ReasoningDelta { text, .. }) => {
                    let c = f.shape.chunk(json!({ "reasoning_content": text }), None);
                    return Some((vec![data(c)], f));
                }
                p @ Payload::Agent(AgentEvent::ToolCall { .. }) => {
                    let Some(mut call) = client_tool_call(&f.shape, p) else {
                        continue;
                    };
                    call["index"] = json!(f.tool_calls);
                    f.tool_calls += 1;
                    f.unlinked.extend(call["id"].as_str().map(str::to_string));
                    let c = f.shape.chunk(json!({ "tool_calls": [call] }), None);
                    return Some((vec![data(c)], f));
                }
                p @ Payload::Lifecycle(LifecycleEvent::DecisionRequested { .. }) => {
                    let rt = f.rt.clone();
                    let wait = wait_of(&rt, &mut f.shape, &mut f.unlinked, p).await;
                    let mut c = f.shape.chunk(json!({}), None);
                    c["cairn_decision"] = decision_of(run, p).unwrap_or_default();
                    match wait {
                        Wait::Answered => continue,
                        Wait::Other => return Some((vec![data(c)], f)),
                        Wait::Client => {
                            // The client runs the calls and answers with a
                            // follow-up: this answer ends, the run waits.
                            c["choices"][0]["finish_reason"] = json!("tool_calls");
                            let mut out = vec![data(c)];
                            if f.shape.include_usage {
                                let usage = e.facts.as_ref().map(|x| x.usage).unwrap_or_default();
                                out.push(data(f.shape.usage_chunk(usage)));
                            }
                            out.push(Event::default().data("[DONE]"));
                            if let Some(obs) = f.obs.take() {
                                obs.hand_over(LivenessPolicy::Continue).await;
                            }
                            return Some((out, f));
                        }
                    }
                }
                Payload::Lifecycle(end) if end.is_terminal() => {
                    let mut out = Vec::new();
                    match ending(end) {
                        Ok((reason, text)) => {
                            if let Some(text) = text.filter(|t| !f.streamed_text && !t.is_empty()) {
                                out.push(data(f.shape.chunk(json!({ "content": text }), None)));
                            }
                            let reason = if !f.unlinked.is_empty() {
                                "tool_calls"
                            } else {
                                reason
                            };
                            out.push(data(f.shape.chunk(json!({}), Some(reason))));
                            if f.shape.include_usage {
                                let usage = e.facts.as_ref().map(|x| x.usage).unwrap_or_default();
                                out.push(data(f.shape.usage_chunk(usage)));
                            }
                        }
                        Err((code, message)) => out.push(data(json!({
                            "error": { "code": code, "message": message, "type": "run_failed" }
                        }))),
                    }
                    out.push(Event::default().data("[DONE]"));
                    f.obs = None;
                    return Some((out, f));
                }
                _ => continue,
            }
        }
    });
    let flat = futures_util::StreamExt::flat_map(frames, |events| {
        stream::iter(events.into_iter().map(Ok))
    });
    Sse::new(holding(flat, slot))
        .keep_alive(KeepAlive::new().interval(super::super::events::KEEP_ALIVE))
}

/// The answer in one piece: once the run ends, or at once when it waits on
/// a decision (the run is handed over, liveness `continue`).
pub async fn once(
    rt: Runtime,
    mut obs: Observation,
    mut shape: Shape,
) -> Result<Json<Value>, ApiError> {
    let internal = |m: String| ApiError::new(ErrorCode::Internal, m);
    let mut text = String::new();
    let mut calls: Vec<Value> = Vec::new();
    let mut unlinked: Vec<String> = Vec::new();
    loop {
        let e = match obs.next().await {
            Some(Ok(d)) => match ours(d, shape.run) {
                Some(e) => e,
                None => continue,
            },
            Some(Err(e)) => return Err(internal(e.to_string())),
            None => return Err(internal("the journal closed".into())),
        };
        let (finish, outcome, decision) = match &e.payload {
            Payload::Agent(AgentEvent::TextDelta { text: t, .. }) => {
                text.push_str(t);
                continue;
            }
            p @ Payload::Agent(AgentEvent::ToolCall { .. }) => {
                if let Some(call) = client_tool_call(&shape, p) {
                    unlinked.extend(call["id"].as_str().map(str::to_string));
                    calls.push(call);
                }
                continue;
            }
            p @ Payload::Lifecycle(LifecycleEvent::DecisionRequested { .. }) => {
                let finish = match wait_of(&rt, &mut shape, &mut unlinked, p).await {
                    Wait::Answered => continue,
                    Wait::Client => "tool_calls",
                    Wait::Other => "decision_requested",
                };
                let decision = decision_of(shape.run, p);
                obs.hand_over(LivenessPolicy::Continue).await;
                (finish, None, decision)
            }
            Payload::Lifecycle(end) if end.is_terminal() => match ending(end) {
                Ok((reason, final_text)) => {
                    if let Some(t) = final_text {
                        text = t.to_string();
                    }
                    let outcome = match end {
                        LifecycleEvent::Finished { outcome, .. } => *outcome,
                        _ => FinishOutcome::Answer,
                    };
                    (reason, Some(outcome), None)
                }
                Err((code, message)) => {
                    return Err(ApiError::new(
                        ErrorCode::RunFailed,
                        format!("run {} ended {code}: {message}", shape.run),
                    ));
                }
            },
            _ => continue,
        };
        let usage = e.facts.as_ref().map(|f| f.usage).unwrap_or_default();
        let mut body = json!({
            "id": shape.id(),
            "object": "chat.completion",
            "created": now_secs(),
            "model": shape.model,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": text, "refusal": null },
                "finish_reason": finish,
                "logprobs": null,
            }],
            "usage": usage_of(usage),
        });
        if let Some(outcome) = outcome {
            body["choices"][0]["cairn_outcome"] = json!(outcome);
        }
        if !calls.is_empty() {
            body["choices"][0]["message"]["tool_calls"] = json!(calls);
            if finish == "stop" {
                body["choices"][0]["finish_reason"] = json!("tool_calls");
            }
            if text.is_empty() {
                body["choices"][0]["message"]["content"] = Value::Null;
            }
        }
        if let Some(decision) = decision {
            body["cairn_decision"] = decision;
        }
        return Ok(Json(body));
    }
}
