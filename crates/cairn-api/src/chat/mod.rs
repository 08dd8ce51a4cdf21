//! `POST /v1/chat/completions` and `GET /v1/models`, OpenAI-compatible, so
//! the official SDKs and the frameworks on them work unchanged.
//!
//! A request attaches claiming and present, starts a run of the component
//! its `model` names (liveness `cancel`, no grace: a disconnect cancels) and
//! answers with the run's text: streamed as `chat.completion.chunk` frames
//! then `[DONE]`, or once. The session is the `x-cairn-session` header
//! (absent: a new session, and the messages before the one the run answers
//! are imported as its history). A decision the controller asks for reaches
//! a stream as a chunk with an empty delta and a `cairn_decision` field (the
//! SDKs' default loop survives it); a call that is not streamed returns at
//! once with `finish_reason: "decision_requested"` and `cairn_decision`, and
//! hands the run over (liveness `continue`) so the decision can be answered
//! with `POST /v1/decisions/{id}`. A `tool_call` the controller emits for a
//! tool the client offered (`tools`) is an OpenAI tool call: the client runs
//! it, and the finish reason is `tool_calls`. Errors carry `x-should-retry: false`
//! (except 429 and 503): one call is at most one run.

mod request;
mod respond;
pub mod retry;

pub use request::{ChatMessage, ChatRequest};

use super::AppState;
use super::auth::{Workspace, find_own};
use super::error::ApiError;
use super::runs::component_ref;
use super::tool_results;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cairn_runtime::ErrorCode;
use cairn_runtime::ids::SessionId;
use cairn_runtime::journal::event::{ImportedTurn, Liveness, LivenessPolicy};
use cairn_runtime::runtime::{AttachSpec, StartRun};

pub async fn completions(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    headers: HeaderMap,
    crate::body::RawBody(body): crate::body::RawBody,
) -> Result<Response, ApiError> {
    let req: ChatRequest = crate::body::parse(&body)?;
    // One call, one run: a retry of a call (the same `Idempotency-Key`, or
    // the OpenAI SDKs' `x-stainless-retry-count` ≥ 1 with the same body)
    // joins the run the first attempt started.
    let call = retry::Call::of(&ws.0, &headers, &body);
    if let Some(prev) = call.as_ref().and_then(|c| s.calls.joinable(c)) {
        return join(&s, &ws, prev, &req).await;
    }
    if req.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid("only n = 1 is supported"));
    }
    let range = req.prompt_range().ok_or_else(|| {
        ApiError::invalid("messages hold no user message (nor trailing tool results) to run")
    })?;
    let prompt = req.messages[range.clone()]
        .iter()
        .map(ChatMessage::text)
        .collect::<Vec<_>>()
        .join("\n");
    let component = component_ref(&s, &ws, &req.model).await?;
    let streamed = req.stream.unwrap_or(false);
    // A streamed answer is an open event stream: its place first.
    let slot = match streamed {
        true => Some(s.streams.take(&s.rt.host_config().server, &ws.0, None)?),
        false => None,
    };
    let rt = &s.rt;
    let named = match headers.get("x-cairn-session") {
        Some(v) => {
            Some(SessionId::parse(v.to_str().map_err(|_| {
                ApiError::invalid("x-cairn-session is not text")
            })?)?)
        }
        None => None,
    };
    let existing = match &named {
        Some(name) => find_own(&s, &ws, name)?,
        None => None,
    };
    // Tool results by call id: a run waiting on them goes on with them (on
    // the named session, or the one session whose run waits on these ids).
    let results = req.trailing_results();
    if !results.is_empty() && (named.is_none() || existing.is_some()) {
        let waits = tool_results::waits(&s, &ws, existing.as_ref()).await;
        if let Some(m) = tool_results::matching(&waits, &results) {
            return go_on(&s, m, &req, slot).await;
        }
        if let Some(id) = &existing
            && rt.live_runs().iter().any(|(live, _)| live == id)
        {
            return Err(ApiError::new(
                ErrorCode::LiveRun,
                tool_results::mismatch(id, &waits, &results),
            ));
        }
    }
    // A new message while the session's run waits on the client's tools:
    // the client went on, the calls are abandoned.
    if results.is_empty()
        && let Some(id) = &existing
    {
        tool_results::abandon(&s, &ws, id).await;
    }
    // Results no run waits on answer the calls a run ended with: a new run
    // continues the session's last one, given the results.
    let continues = match (&existing, results.is_empty()) {
        (Some(id), false) => rt.session_runs(id).await?.last().map(|r| r.run_id),
        _ => None,
    };
    // A session made here is started by its worker (no lookup to repeat).
    let (session, made) = if let Some(id) = existing {
        (id, None)
    } else {
        let (id, worker) = rt.create_session_first(named, &ws.0).await?;
        // A new session starts from the conversation the client brought.
        let earlier = &req.messages[..range.start];
        if !earlier.is_empty() {
            rt.import_history(&id, earlier.iter().map(imported).collect(), None)
                .await?;
        }
        (id, Some(worker))
    };
    let after = rt.minted_seq(&session).await?;
    let obs = rt
        .attach(&session, AttachSpec::claiming_present(after))
        .await?;
    // The call ends with its run: its detach goes in the run's end write.
    obs.leave_with_run();
    let started = rt
        .start(StartRun {
            session: Some(session.clone()),
            worker: made,
            component: Some(component),
            prompt,
            // A call that may be retried leaves its run a moment for the
            // retry to claim it.
            liveness: Liveness {
                policy: LivenessPolicy::Cancel,
                grace_ms: match call {
                    Some(_) => retry::GRACE_MS,
                    None => 0,
                },
            },
            timeout_ms: None,
            continues,
            workspace: Some(ws.0.clone()),
            limits: Default::default(),
            tools: req.tools_json(&results),
            first_commit: cairn_runtime::runtime::FirstCommit::WithRun,
            resume_on_start: None,
        })
        .await?;
    let run = started.run_id;
    if let Some(c) = call {
        s.calls.remember(
            c,
            retry::Started {
                session: session.clone(),
                run,
                after,
            },
        );
    }
    let shape = respond::Shape {
        run,
        model: req.model.clone(),
        include_usage: req.include_usage(),
        offered: req.offered_tools(),
        held: Default::default(),
    };
    Ok(answer(&s, obs, shape, slot, &session).await)
}

/// The client's tool results answer the waits of a live run: follow it
/// from here (claiming, present, so a disconnect cancels it as any chat
/// call's), answer the waits, and hold the results of calls it has not
/// waited on yet for when it does.
async fn go_on(
    s: &AppState,
    m: tool_results::Matched,
    req: &ChatRequest,
    slot: Option<crate::streams::Slot>,
) -> Result<Response, ApiError> {
    let (session, run) = (m.session.clone(), m.run);
    let (obs, _, held) = tool_results::take_up(s, m).await?;
    let shape = respond::Shape {
        run,
        model: req.model.clone(),
        include_usage: req.include_usage(),
        offered: req.offered_tools(),
        held,
    };
    Ok(answer(s, obs, shape, slot, &session).await)
}

/// The answer to a call following `shape.run` (streamed when it holds a
/// stream slot), with the run's ids on it, a failed run's error included.
async fn answer(
    s: &AppState,
    obs: cairn_runtime::runtime::Observation,
    shape: respond::Shape,
    slot: Option<crate::streams::Slot>,
    session: &SessionId,
) -> Response {
    let run = shape.run;
    let response = match slot {
        Some(slot) => respond::streamed(s.rt.clone(), obs, shape, slot).into_response(),
        None => match respond::once(s.rt.clone(), obs, shape).await {
            Ok(body) => body.into_response(),
            Err(e) => e.into_response(),
        },
    };
    crate::streams::with_run_ids(response, session, run)
}

/// A retry joins the first attempt's run: the run's entries from its start
/// (what the first attempt was answering), then the rest live, answered as
/// the first would have been; the claim is taken over from an attempt the
/// server has not yet seen go.
async fn join(
    s: &AppState,
    ws: &Workspace,
    prev: retry::Started,
    req: &ChatRequest,
) -> Result<Response, ApiError> {
    let streamed = req.stream.unwrap_or(false);
    let slot = match streamed {
        true => Some(s.streams.take(&s.rt.host_config().server, &ws.0, None)?),
        false => None,
    };
    let obs = crate::streams::claim_run(s, &prev.session, prev.after, prev.run).await?;
    let shape = respond::Shape {
        run: prev.run,
        model: req.model.clone(),
        include_usage: req.include_usage(),
        offered: req.offered_tools(),
        held: Default::default(),
    };
    Ok(answer(s, obs, shape, slot, &prev.session).await)
}

fn imported(m: &ChatMessage) -> ImportedTurn {
    ImportedTurn {
        role: m.role.as_str().to_string(),
        text: m.text(),
        tool_calls: m.tool_calls.clone().filter(|v| !v.is_null()),
        tool_call_id: m.tool_call_id.clone(),
    }
}

/// `GET /v1/models`: the components the caller may use, as OpenAI models
/// (`id` is the built-in name or the digest: what `model` takes).
pub async fn models(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let data: Vec<_> = super::components::usable(&s, &ws)
        .await?
        .into_iter()
        .map(model_entry)
        .collect();
    Ok(Json(serde_json::json!({ "object": "list", "data": data })))
}

/// A component as an OpenAI model (`id` is what `model` takes).
fn model_entry(c: super::wire::ComponentInfo) -> serde_json::Value {
    serde_json::json!({
        "id": c.built_in.clone().unwrap_or_else(|| c.digest.clone()),
        "object": "model",
        "created": 0,
        "owned_by": "cairn",
        "cairn": c,
    })
}

/// `GET /v1/models/{id}` (OpenAI's `models.retrieve`): one component the
/// caller may use, by the id `/v1/models` lists (a built-in's name or a
/// digest).
pub async fn model(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let found = super::components::usable(&s, &ws)
        .await?
        .into_iter()
        .find(|c| c.built_in.as_deref() == Some(id.as_str()) || c.digest == id)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no model {id}: GET /v1/models lists the components this caller may use"
            ))
        })?;
    Ok(Json(model_entry(found)))
}

/// The chat routes' errors tell OpenAI clients not to retry: a retried chat
/// call would start another run. Capacity answers (429, 503) stay
/// retryable.
pub async fn no_retry(mut response: Response) -> Response {
    let status = response.status();
    let retryable = matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    );
    if (status.is_client_error() || status.is_server_error()) && !retryable {
        response
            .headers_mut()
            .insert("x-should-retry", HeaderValue::from_static("false"));
    }
    response
}
