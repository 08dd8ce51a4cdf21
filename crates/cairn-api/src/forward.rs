//! Any instance serves any request (several instances on one shared
//! store). A request that names a session — in its path, through a run of
//! it, in `POST /v1/runs`'s body, chat's `x-cairn-session` header or an
//! A2A call's context or task — is
//! served where the session's lease is: here when this instance holds it
//! (or takes it now, because nobody does), otherwise forwarded to the
//! holder's registered URL and its response streamed back. A holder that
//! cannot be reached (it died; its lease has not expired yet) is retried
//! until the lease expires and the session is taken over, so a client
//! never needs to know the holder. An answer to a decision this instance
//! does not know is tried at the other instances.
//!
//! Event streams are never forwarded: a stream of a session written
//! elsewhere follows the store's rows here (the relay). On the home's own
//! store this layer does nothing.

use super::AppState;
use super::error::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cairn_runtime::ErrorCode;
use cairn_runtime::ids::SessionId;
use cairn_runtime::runtime::cluster::Route;
use std::time::{Duration, Instant};

/// Set on a forwarded request (its value: the forwarding instance): the
/// receiver serves it itself, so a request is forwarded at most once.
pub const FORWARDED: &str = "x-cairn-forwarded-by";

/// How long another instance has to answer a listing or a decision
/// this one does not know.
const MERGE_WAIT: Duration = Duration::from_secs(2);

/// What a request names.
enum Names {
    Session(String),
    Run(String),
    /// `POST /v1/runs`: the body's `session`.
    StartBody,
    /// An A2A call: its message's `contextId` or `taskId`, or its `id`.
    A2aBody,
    Decision,
    /// A listing every instance contributes to (`GET /v1/decisions`).
    Everywhere,
    Nothing,
}

fn names(method: &Method, path: &str, query: &str, headers: &HeaderMap) -> Names {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let session_query = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("session="))
        .map(decode);
    match parts.as_slice() {
        // One session's runs: where it is held.
        ["v1", "runs"] if method == Method::GET => match session_query {
            Some(s) => Names::Session(s),
            None => Names::Nothing,
        },
        // One session's decisions: where it is held; every session's:
        // merged from every instance.
        ["v1", "decisions"] if method == Method::GET => match session_query {
            Some(s) => Names::Session(s),
            None => Names::Everywhere,
        },
        // A stream follows the relay here; a listing is read here.
        ["v1", "sessions", _, "events"] | ["v1", "runs", _, "events"] => Names::Nothing,
        ["v1", "sessions", id]
        | ["v1", "sessions", id, _]
        | ["v1", "sessions", id, "observers" | "worktrees", _] => Names::Session(decode(id)),
        ["v1", "runs", id] | ["v1", "runs", id, _] => Names::Run(decode(id)),
        ["v1", "runs"] if method == Method::POST => Names::StartBody,
        ["v1", "a2a", _] if method == Method::POST => Names::A2aBody,
        ["v1", "decisions" | "approvals", _] if method == Method::POST => Names::Decision,
        ["v1", "chat", "completions"] => {
            match headers.get("x-cairn-session").and_then(|v| v.to_str().ok()) {
                Some(s) => Names::Session(s.to_string()),
                None => Names::Nothing,
            }
        }
        _ => Names::Nothing,
    }
}

/// Percent-decode a path segment (a session id may be any printable text).
fn decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

/// The layer.
pub async fn route(State(s): State<AppState>, req: Request, next: Next) -> Response {
    if !s.rt.clustered() || req.headers().contains_key(FORWARDED) {
        return next.run(req).await;
    }
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    // Ids are the caller's workspace's: each is looked up by its key there.
    let ws = req
        .extensions()
        .get::<super::auth::Workspace>()
        .map(|w| w.0.clone())
        .unwrap_or_else(|| s.rt.default_workspace().to_string());
    let key = |name: SessionId| {
        let (s, ws) = (&s, &ws);
        async move {
            match s.rt.resolve_shared(ws, &name).await {
                Some(key) => key,
                None => s.rt.scoped(&name, ws),
            }
        }
    };
    match names(req.method(), &path, &query, req.headers()) {
        Names::Everywhere => merged(&s, req, next).await,
        Names::Nothing => {
            if path == "/v1/sessions"
                && let Err(e) = s.rt.sync_catalog().await
            {
                return ApiError::from(e).into_response();
            }
            if let Some(name) = streamed_session(&path)
                && let Err(e) = s.rt.ensure_known(&key(name).await).await
            {
                return ApiError::from(e).into_response();
            }
            next.run(req).await
        }
        Names::Session(id) => match SessionId::parse(&id) {
            Ok(name) => serve_at_holder(&s, key(name).await, req, None, next).await,
            Err(_) => next.run(req).await,
        },
        Names::Run(id) => {
            let session = match super::runs::run_id(&id) {
                Ok(run) => s.rt.session_of_run(run).await.ok(),
                Err(_) => None,
            };
            match session {
                Some(session) => serve_at_holder(&s, session, req, None, next).await,
                None => next.run(req).await,
            }
        }
        Names::StartBody => {
            let (parts, body) = req.into_parts();
            let bytes = match buffered(body).await {
                Ok(b) => b,
                Err(response) => return response,
            };
            let session = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("session")?.as_str().map(str::to_string))
                .and_then(|id| SessionId::parse(&id).ok());
            let req = Request::from_parts(parts, Body::from(bytes.clone()));
            match session {
                Some(name) => serve_at_holder(&s, key(name).await, req, Some(bytes), next).await,
                None => next.run(req).await,
            }
        }
        Names::Decision => decision_anywhere(&s, req, next).await,
        Names::A2aBody => {
            let (parts, body) = req.into_parts();
            let bytes = match buffered(body).await {
                Ok(b) => b,
                Err(response) => return response,
            };
            let session = match a2a_session(&s, &bytes).await {
                // A context is named by its name; a task's session is a key.
                Some(name) if !name.is_scoped() => Some(key(name).await),
                other => other,
            };
            let req = Request::from_parts(parts, Body::from(bytes.clone()));
            match session {
                Some(session) => serve_at_holder(&s, session, req, Some(bytes), next).await,
                None => next.run(req).await,
            }
        }
    }
}

/// The session an A2A call is about (task id = run id, contextId =
/// session id): its message's task or context, or the task it names
/// (`GetTask`, `CancelTask`, `SubscribeToTask`), or the context it lists.
/// `None`: a new context, or a call that names none (served here).
async fn a2a_session(s: &AppState, body: &[u8]) -> Option<SessionId> {
    let call: serde_json::Value = serde_json::from_slice(body).ok()?;
    let params = call.get("params")?;
    let field = |v: &serde_json::Value, k: &str| v.get(k)?.as_str().map(str::to_string);
    let message = params.get("message");
    let task = message
        .and_then(|m| field(m, "taskId"))
        .or_else(|| field(params, "id"));
    if let Some(run) = task.and_then(|t| super::runs::run_id(&t).ok()) {
        return s.rt.session_of_run(run).await.ok();
    }
    message
        .and_then(|m| field(m, "contextId"))
        .or_else(|| field(params, "contextId"))
        .and_then(|c| SessionId::parse(&c).ok())
}

/// A request body, held to be sent (again): at most the JSON bodies'
/// limit.
async fn buffered(body: Body) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, super::body::MAX_JSON_BYTES)
        .await
        .map_err(|_| {
            ApiError::new(
                ErrorCode::TooLarge,
                format!(
                    "the request body is over {} bytes",
                    super::body::MAX_JSON_BYTES
                ),
            )
            .into_response()
        })
}

/// The session a stream names (copied here so the relay can serve it).
fn streamed_session(path: &str) -> Option<SessionId> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["v1", "sessions", id, "events"] | ["v1", "sessions", id, "journal"] => {
            SessionId::parse(&decode(id)).ok()
        }
        _ => None,
    }
}

/// Serve here or at the session's holder; a holder that cannot be reached
/// is retried until its lease expires and the session is taken over.
async fn serve_at_holder(
    s: &AppState,
    session: SessionId,
    req: Request,
    body: Option<Bytes>,
    next: Next,
) -> Response {
    let (parts, original) = req.into_parts();
    let bytes = match body {
        Some(b) => b,
        None => match buffered(original).await {
            Ok(b) => b,
            Err(response) => return response,
        },
    };
    let deadline = Instant::now() + s.rt.lease_ttl() + Duration::from_secs(5);
    let mut told = false;
    loop {
        match s.rt.route(&session).await {
            Ok(Route::Here | Route::Unknown) => {
                let req = Request::from_parts(parts, Body::from(bytes));
                return next.run(req).await;
            }
            Ok(Route::Holder { holder, url }) => {
                // A paused holder accepts the connection and never
                // answers: while waiting, watch its lease, and when it
                // moved, ask again where the session is (the paused one
                // can write nothing when it wakes: its token is stale).
                let sent = send(s, &url, &parts, bytes.clone());
                tokio::pin!(sent);
                let answer = loop {
                    tokio::select! {
                        r = &mut sent => break Some(r),
                        _ = tokio::time::sleep(s.rt.lease_ttl() / 2) => {
                            if s.rt.lease_holder(&session).await.as_deref() != Some(holder.as_str()) {
                                break None;
                            }
                        }
                    }
                };
                match answer {
                    None => continue,
                    Some(Ok(response)) => return response,
                    Some(Err(e)) if Instant::now() < deadline => {
                        if !std::mem::replace(&mut told, true) {
                            tracing::warn!(
                                session = %session,
                                holder = %holder,
                                url = %url,
                                error = %e,
                                "the session's holder does not answer; waiting for its lease to expire"
                            );
                        }
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Some(Err(e)) => {
                        return ApiError::new(ErrorCode::HeldElsewhere,
                            format!(
                                "session {session} is held by instance {holder} at {url}, which does not answer: {e}"
                            ),
                        )
                        .into_response();
                    }
                }
            }
            Err(e) => return ApiError::from(e).into_response(),
        }
    }
}

/// Send the request to `base` as it came; stream the answer back.
async fn send(
    s: &AppState,
    base: &str,
    parts: &axum::http::request::Parts,
    body: Bytes,
) -> Result<Response, reqwest::Error> {
    let url = format!(
        "{}{}",
        base.trim_end_matches('/'),
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut out = s.rt.forwarder().request(parts.method.clone(), url);
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            out = out.header(name, value);
        }
    }
    out = out.header(FORWARDED, s.rt.instance_id().unwrap_or("unknown"));
    let answer = out.body(body).send().await?;
    let mut response = Response::builder().status(answer.status());
    if let Some(headers) = response.headers_mut() {
        for (name, value) in answer.headers() {
            if !hop_by_hop(name) {
                headers.insert(name.clone(), value.clone());
            }
        }
        if let Ok(v) = HeaderValue::from_str(base) {
            headers.insert(HeaderName::from_static("x-cairn-served-by"), v);
        }
    }
    Ok(response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response()))
}

fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "proxy-connection"
            | "content-length"
    )
}

/// An answer to a decision: here first; when this instance does not know
/// the decision, at each other live instance until one does.
async fn decision_anywhere(s: &AppState, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match buffered(body).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let here = next
        .run(Request::from_parts(
            parts.clone(),
            Body::from(bytes.clone()),
        ))
        .await;
    if here.status() != StatusCode::NOT_FOUND {
        return here;
    }
    for instance in s.rt.other_instances().await {
        if let Ok(Ok(answer)) =
            tokio::time::timeout(MERGE_WAIT, send(s, &instance, &parts, bytes.clone())).await
            && answer.status() != StatusCode::NOT_FOUND
        {
            return answer;
        }
    }
    here
}

/// A JSON-array listing from every live instance, merged (this one's
/// first). An instance that does not answer is left out.
async fn merged(s: &AppState, req: Request, next: Next) -> Response {
    let (parts, _) = req.into_parts();
    let here = next
        .run(Request::from_parts(parts.clone(), Body::empty()))
        .await;
    if !here.status().is_success() {
        return here;
    }
    let (head, body) = here.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut all: Vec<serde_json::Value> = serde_json::from_slice(&bytes).unwrap_or_default();
    for instance in s.rt.other_instances().await {
        // A paused instance answers nothing: it is left out.
        let Ok(Ok(answer)) =
            tokio::time::timeout(MERGE_WAIT, send(s, &instance, &parts, Bytes::new())).await
        else {
            continue;
        };
        if !answer.status().is_success() {
            continue;
        }
        let Ok(bytes) = axum::body::to_bytes(answer.into_body(), usize::MAX).await else {
            continue;
        };
        if let Ok(theirs) = serde_json::from_slice::<Vec<serde_json::Value>>(&bytes) {
            all.extend(theirs);
        }
    }
    let mut response = axum::Json(all).into_response();
    *response.status_mut() = head.status;
    response
}
