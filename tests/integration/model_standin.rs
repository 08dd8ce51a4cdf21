//! A stand-in for a model provider (no hosted model is reachable here): a
//! real HTTP server on loopback that speaks the OpenAI chat-completions
//! wire (`POST /v1/chat/completions`, JSON or SSE chunks up to `[DONE]`)
//! and the Anthropic Messages wire (`POST /v1/messages`, named SSE
//! events), answering from a script and recording every request.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Text, streamed (when asked) in pieces of `piece` characters, one
    /// piece every `gap`.
    Text {
        text: String,
        piece: usize,
        gap: Duration,
    },
    /// Tool calls: (id, name, arguments JSON).
    Tools(Vec<(String, String, Value)>),
    /// An error status with this `Retry-After` (seconds), forever when
    /// it is the last reply.
    Status(u16, Option<u32>),
    /// A 401 whose body repeats the credentials it got (as some providers'
    /// error messages do).
    EchoKey,
}

impl Reply {
    pub fn text(t: &str) -> Reply {
        Reply::Text {
            text: t.into(),
            piece: 4,
            gap: Duration::ZERO,
        }
    }

    pub fn slow(t: &str, gap_ms: u64) -> Reply {
        Reply::Text {
            text: t.into(),
            piece: 2,
            gap: Duration::from_millis(gap_ms),
        }
    }

    pub fn tool(id: &str, name: &str, args: Value) -> Reply {
        Reply::Tools(vec![(id.into(), name.into(), args)])
    }
}

/// What the stand-in saw.
#[derive(Default)]
pub struct Seen {
    /// Request bodies, in order.
    pub bodies: Mutex<Vec<Value>>,
    /// Request headers, in order.
    pub headers: Mutex<Vec<HeaderMap>>,
    /// Streams whose client went away before the end.
    pub dropped: AtomicUsize,
    /// Streams begun.
    pub streams: AtomicUsize,
}

struct Standin {
    script: Mutex<VecDeque<Reply>>,
    seen: Arc<Seen>,
}

/// A running stand-in: its base URL (`http://127.0.0.1:PORT`) and what it saw.
pub struct Provider {
    pub base: String,
    pub seen: Arc<Seen>,
}

impl Provider {
    /// Requests so far.
    pub fn requests(&self) -> usize {
        self.seen.bodies.lock().unwrap().len()
    }

    /// The request bodies so far.
    pub fn bodies(&self) -> Vec<Value> {
        self.seen.bodies.lock().unwrap().clone()
    }
}

/// Start a stand-in on its own thread (it outlives any one runtime).
pub fn start(script: Vec<Reply>) -> Provider {
    let seen = Arc::new(Seen::default());
    let state = Arc::new(Standin {
        script: Mutex::new(script.into()),
        seen: seen.clone(),
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let serving = state.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let app = axum::Router::new()
                .route("/v1/chat/completions", axum::routing::post(openai))
                .route("/v1/messages", axum::routing::post(anthropic))
                .with_state(serving);
            axum::serve(listener, app).await.unwrap();
        });
    });
    let addr = rx.recv().unwrap();
    Provider {
        base: format!("http://{addr}"),
        seen,
    }
}

fn echo_key(headers: &HeaderMap) -> Response {
    let sent = headers
        .get("authorization")
        .or(headers.get("x-api-key"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({"error": {"message": format!("Incorrect API key provided: {sent}"), "type": "invalid_request_error"}})),
    )
        .into_response()
}

fn next(state: &Standin, headers: &HeaderMap, body: &Value) -> Reply {
    state.seen.bodies.lock().unwrap().push(body.clone());
    state.seen.headers.lock().unwrap().push(headers.clone());
    let mut script = state.script.lock().unwrap();
    match script.len() {
        0 => Reply::text("(the stand-in's script is done)"),
        1 if matches!(script[0], Reply::Status(..)) => script[0].clone(),
        _ => script.pop_front().unwrap(),
    }
}

fn status(code: u16, retry_after: Option<u32>) -> Response {
    let mut r = (
        StatusCode::from_u16(code).unwrap(),
        axum::Json(json!({"error": {"message": "the stand-in is busy", "type": "rate_limit"}})),
    )
        .into_response();
    if let Some(s) = retry_after {
        r.headers_mut()
            .insert("retry-after", s.to_string().parse().unwrap());
    }
    r
}

/// Notes a stream dropped by its client (the guard outlives a finished one
/// only when the client went away first).
struct DropGuard(Arc<Seen>, bool);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// An SSE body of `events` (event name or none, data), each after `gap`.
fn sse(seen: Arc<Seen>, events: Vec<(Option<&'static str>, String)>, gap: Duration) -> Response {
    seen.streams.fetch_add(1, Ordering::SeqCst);
    let stream = async_stream(seen, events, gap);
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn async_stream(
    seen: Arc<Seen>,
    events: Vec<(Option<&'static str>, String)>,
    gap: Duration,
) -> impl futures_util::Stream<Item = Result<String, std::io::Error>> {
    let total = events.len();
    futures_util::stream::unfold(
        (events.into_iter().enumerate(), DropGuard(seen, false)),
        move |(mut it, mut guard)| async move {
            let (i, (name, data)) = it.next()?;
            if !gap.is_zero() && i > 0 {
                tokio::time::sleep(gap).await;
            }
            if i + 1 == total {
                guard.1 = true;
            }
            let line = match name {
                Some(n) => format!("event: {n}\ndata: {data}\n\n"),
                None => format!("data: {data}\n\n"),
            };
            Some((Ok(line), (it, guard)))
        },
    )
}

fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

async fn openai(
    State(state): State<Arc<Standin>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let reply = next(&state, &headers, &body);
    let stream = body["stream"].as_bool().unwrap_or(false);
    let model = "standin-1";
    let usage = json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18});
    match reply {
        Reply::Status(code, after) => status(code, after),
        Reply::EchoKey => echo_key(&headers),
        Reply::Text { text, piece, gap } if stream => {
            let mut events: Vec<(Option<&str>, String)> = pieces(&text, piece)
                .into_iter()
                .map(|p| (None, json!({"model": model, "choices": [{"index": 0, "delta": {"content": p}}]}).to_string()))
                .collect();
            events.push((None, json!({"model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).to_string()));
            events.push((None, json!({"model": model, "choices": [], "usage": usage}).to_string()));
            events.push((None, "[DONE]".into()));
            sse(state.seen.clone(), events, gap)
        }
        Reply::Text { text, .. } => axum::Json(json!({
            "id": "chatcmpl-standin", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": usage,
        }))
        .into_response(),
        Reply::Tools(calls) if stream => {
            let mut events = Vec::new();
            for (i, (id, name, args)) in calls.iter().enumerate() {
                let args = args.to_string();
                let (a, b) = args.split_at(args.len() / 2);
                events.push((None, json!({"model": model, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": a}}]}}]}).to_string()));
                events.push((None, json!({"model": model, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": b}}]}}]}).to_string()));
            }
            events.push((None, json!({"model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string()));
            events.push((None, json!({"model": model, "choices": [], "usage": usage}).to_string()));
            events.push((None, "[DONE]".into()));
            sse(state.seen.clone(), events, Duration::ZERO)
        }
        Reply::Tools(calls) => axum::Json(json!({
            "id": "chatcmpl-standin", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                "tool_calls": calls.iter().map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})).collect::<Vec<_>>()}}],
            "usage": usage,
        }))
        .into_response(),
    }
}

async fn anthropic(
    State(state): State<Arc<Standin>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let reply = next(&state, &headers, &body);
    let stream = body["stream"].as_bool().unwrap_or(false);
    let model = "standin-claude";
    let start = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": [], "usage": {"input_tokens": 13, "output_tokens": 1}}});
    match reply {
        Reply::Status(code, after) => status(code, after),
        Reply::EchoKey => echo_key(&headers),
        Reply::Text { text, piece, gap } if stream => {
            let mut events = vec![
                (Some("message_start"), start.to_string()),
                (Some("content_block_start"), json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}).to_string()),
                (Some("ping"), json!({"type": "ping"}).to_string()),
            ];
            for p in pieces(&text, piece) {
                events.push((Some("content_block_delta"), json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}).to_string()));
            }
            events.push((Some("content_block_stop"), json!({"type": "content_block_stop", "index": 0}).to_string()));
            events.push((Some("message_delta"), json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}).to_string()));
            events.push((Some("message_stop"), json!({"type": "message_stop"}).to_string()));
            sse(state.seen.clone(), events, gap)
        }
        Reply::Text { text, .. } => axum::Json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 13, "output_tokens": 5},
        }))
        .into_response(),
        Reply::Tools(calls) if stream => {
            let mut events = vec![(Some("message_start"), start.to_string())];
            for (i, (id, name, args)) in calls.iter().enumerate() {
                events.push((Some("content_block_start"), json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}).to_string()));
                let args = args.to_string();
                let (a, b) = args.split_at(args.len() / 2);
                for part in [a, b] {
                    events.push((Some("content_block_delta"), json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": part}}).to_string()));
                }
                events.push((Some("content_block_stop"), json!({"type": "content_block_stop", "index": i}).to_string()));
            }
            events.push((Some("message_delta"), json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}).to_string()));
            events.push((Some("message_stop"), json!({"type": "message_stop"}).to_string()));
            sse(state.seen.clone(), events, Duration::ZERO)
        }
        Reply::Tools(calls) => axum::Json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": calls.iter().map(|(id, name, args)| json!({"type": "tool_use", "id": id, "name": name, "input": args})).collect::<Vec<_>>(),
            "stop_reason": "tool_use", "usage": {"input_tokens": 13, "output_tokens": 9},
        }))
        .into_response(),
    }
}
