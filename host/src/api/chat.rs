//! `POST /v1/chat/completions`, OpenAI-compatible. The request attaches
//! claiming and present, starts a run of the component its `model` names
//! (liveness `cancel`, no grace: a disconnect cancels), and streams the
//! run's text as `chat.completion.chunk` frames, then `[DONE]`. Decision
//! requests arrive as `event: cairn.decision_requested` (OpenAI clients skip
//! named events); answer them with `POST /v1/decisions/{id}`. The session is
//! the `x-cairn-session` header (absent: a new session).

use super::AppState;
use super::auth::{Workspace, own_session};
use super::body::JsonBody;
use super::error::ApiError;
use super::runs::component_ref;
use crate::ids::{RunId, SessionId};
use crate::journal::Delivery;
use crate::journal::event::{
    AgentEvent, FinishOutcome, LifecycleEvent, Liveness, LivenessPolicy, Payload,
};
use crate::runtime::{AttachSpec, Observation, StartRun};
use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use schemars::JsonSchema;
use serde::Deserialize;
use std::convert::Infallible;

/// One chat message.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code, reason = "accepted for OpenAI compatibility")]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Text, or an array of content parts (`{"type": "text", "text"}`).
    #[serde(default)]
    pub content: serde_json::Value,
    /// An optional participant name.
    #[serde(default)]
    pub name: Option<String>,
}

/// The request body (OpenAI's, with the sampling fields accepted and ignored).
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(
    dead_code,
    reason = "sampling fields are accepted for OpenAI compatibility"
)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    /// The component: a built-in example name or `sha256:<hex>`.
    pub model: String,
    /// The conversation; the last `user` message is the run's prompt.
    pub messages: Vec<ChatMessage>,
    /// Stream chunks (SSE) or answer once.
    #[serde(default)]
    pub stream: bool,
    /// Accepted, ignored.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    /// Only 1 is supported.
    #[serde(default)]
    pub n: Option<u32>,
    /// Accepted, ignored.
    #[serde(default)]
    pub user: Option<String>,
    /// Accepted, ignored.
    #[serde(default)]
    pub stream_options: Option<serde_json::Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub stop: Option<serde_json::Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
}

fn text_of(content: &serde_json::Value) -> Option<String> {
    match content {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(parts) => Some(
            parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => None,
    }
}

fn now_secs() -> u64 {
    crate::fsutil::now_ms() / 1000
}

fn chunk(run: RunId, model: &str, delta: serde_json::Value, finish: Option<&str>) -> String {
    serde_json::json!({
        "id": format!("chatcmpl-{run}"),
        "object": "chat.completion.chunk",
        "created": now_secs(),
        "model": model,
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
    })
    .to_string()
}

fn finish_reason(end: &LifecycleEvent) -> Result<&'static str, (String, String)> {
    match end {
        LifecycleEvent::Finished { .. } => Ok("stop"),
        LifecycleEvent::Parked { .. } => Ok("stop"),
        LifecycleEvent::Cancelled { message, .. } => Err(("cancelled".into(), message.clone())),
        LifecycleEvent::Failed { error } => Err((error.code.clone(), error.message.clone())),
        _ => Ok("stop"),
    }
}

pub async fn completions(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<ChatRequest>,
) -> Result<Response, ApiError> {
    if req.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid("only n = 1 is supported"));
    }
    let prompt = req
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .and_then(|m| text_of(&m.content))
        .ok_or_else(|| ApiError::invalid("messages hold no user message with text content"))?;
    let component = component_ref(&s, &ws, &req.model)?;
    // A streamed answer is an open event stream: its place first.
    let slot = match req.stream {
        true => Some(s.streams.take(&s.rt.host_config().server, &ws.0, None)?),
        false => None,
    };
    let rt = &s.rt;
    let session = match headers.get("x-cairn-session") {
        Some(v) => {
            let id = SessionId::parse(
                v.to_str()
                    .map_err(|_| ApiError::invalid("x-cairn-session is not text"))?,
            )?;
            if rt
                .home()
                .lookup(&id)
                .map_err(crate::runtime::RuntimeError::from)?
                .is_none()
            {
                rt.create_session_in(Some(id.clone()), &ws.0).await?;
            } else {
                own_session(&s, &ws, &id)?;
            }
            id
        }
        None => rt.create_session_in(None, &ws.0).await?.0,
    };
    let after = rt.last_seq(&session).await?;
    let obs = rt
        .attach(&session, AttachSpec::claiming_present(after))
        .await?;
    let started = rt
        .start(StartRun {
            session: Some(session.clone()),
            worker: None,
            component: Some(component),
            prompt,
            liveness: Liveness {
                policy: LivenessPolicy::Cancel,
                grace_ms: 0,
            },
            timeout_ms: None,
            continues: None,
            workspace: Some(ws.0.clone()),
            limits: Default::default(),
        })
        .await?;
    let run = started.run_id;
    let model = req.model.clone();
    let mut response = if let Some(slot) = slot {
        stream_response(obs, run, model, slot).into_response()
    } else {
        once_response(obs, run, model).await?.into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(session.as_str()) {
        h.insert("x-cairn-session", v);
    }
    if let Ok(v) = HeaderValue::from_str(&run.to_string()) {
        h.insert("x-cairn-run", v);
    }
    Ok(response)
}

enum Step {
    Head(Observation),
    Body(Observation),
    Done,
}

fn stream_response(
    obs: Observation,
    run: RunId,
    model: String,
    slot: super::streams::Slot,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let stream = stream::unfold(Step::Head(obs), move |step| {
        let model = model.clone();
        async move {
            let mut obs = match step {
                Step::Head(obs) => {
                    let first = chunk(
                        run,
                        &model,
                        serde_json::json!({ "role": "assistant", "content": "" }),
                        None,
                    );
                    return Some((vec![Event::default().data(first)], Step::Body(obs)));
                }
                Step::Body(obs) => obs,
                Step::Done => return None,
            };
            loop {
                let d = match obs.next().await {
                    Some(Ok(d)) => d,
                    _ => return None,
                };
                let Delivery::Event(e) = d else { continue };
                if e.run_id != Some(run) {
                    continue;
                }
                match &e.payload {
                    Payload::Agent(AgentEvent::TextDelta { text }) => {
                        let c = chunk(run, &model, serde_json::json!({ "content": text }), None);
                        return Some((vec![Event::default().data(c)], Step::Body(obs)));
                    }
                    Payload::Lifecycle(LifecycleEvent::DecisionRequested {
                        decision_id,
                        request_kind,
                        prompt,
                        details,
                        ..
                    }) => {
                        let data = serde_json::json!({
                            "decision_id": decision_id,
                            "run_id": run,
                            "request_kind": request_kind,
                            "prompt": prompt,
                            "details": details,
                        });
                        let ev = Event::default()
                            .event("cairn.decision_requested")
                            .data(data.to_string());
                        return Some((vec![ev], Step::Body(obs)));
                    }
                    Payload::Lifecycle(end) if end.is_terminal() => {
                        let mut out = Vec::new();
                        match finish_reason(end) {
                            Ok(reason) => out.push(Event::default().data(chunk(run, &model, serde_json::json!({}), Some(reason)))),
                            Err((code, message)) => out.push(Event::default().data(
                                serde_json::json!({ "error": { "code": code, "message": message } }).to_string(),
                            )),
                        }
                        out.push(Event::default().data("[DONE]"));
                        drop(obs);
                        return Some((out, Step::Done));
                    }
                    _ => continue,
                }
            }
        }
    });
    let flat = futures_util::StreamExt::flat_map(stream, |events| {
        stream::iter(events.into_iter().map(Ok))
    });
    Sse::new(super::streams::holding(flat, slot))
        .keep_alive(KeepAlive::new().interval(super::events::KEEP_ALIVE))
}

async fn once_response(
    mut obs: Observation,
    run: RunId,
    model: String,
) -> Result<Json<serde_json::Value>, ApiError> {
    loop {
        let d = match obs.next().await {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                return Err(ApiError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    e.to_string(),
                ));
            }
            None => {
                return Err(ApiError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the journal closed",
                ));
            }
        };
        let Delivery::Event(e) = d else { continue };
        if e.run_id != Some(run) {
            continue;
        }
        let Payload::Lifecycle(end) = &e.payload else {
            continue;
        };
        if !end.is_terminal() {
            continue;
        }
        let (text, outcome) = match end {
            LifecycleEvent::Finished { text, outcome, .. } => (text.clone(), *outcome),
            other => match finish_reason(other) {
                Err((code, message)) => {
                    return Err(ApiError::new(
                        axum::http::StatusCode::BAD_GATEWAY,
                        "run_failed",
                        format!("run {run} ended {code}: {message}"),
                    ));
                }
                Ok(_) => (String::new(), FinishOutcome::Answer),
            },
        };
        let usage = e.facts.as_ref().map(|f| f.usage).unwrap_or_default();
        return Ok(Json(serde_json::json!({
            "id": format!("chatcmpl-{run}"),
            "object": "chat.completion",
            "created": now_secs(),
            "model": model,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": text },
                "finish_reason": "stop",
                "cairn_outcome": outcome,
            }],
            "usage": { "prompt_tokens": 0, "completion_tokens": usage.events, "total_tokens": usage.events },
        })));
    }
}
