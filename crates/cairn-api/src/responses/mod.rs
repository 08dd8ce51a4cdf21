//! The OpenAI Responses API — `POST /v1/responses`, `GET
//! /v1/responses/{id}`, `POST /v1/responses/{id}/cancel` — what the OpenAI
//! Agents SDK and newer OpenAI clients call. It fronts the same start as
//! chat (seed 002, open question 6): `model` names the component, the
//! input's last user message is the run's prompt, a new session imports
//! the input before it (and `instructions`, as a system turn) as history,
//! and `previous_response_id` continues that response's session.
//! `background: true` is a headless run (liveness `continue`): the call
//! returns at once and `GET` polls it. Function tools reach the controller
//! as chat's do; a controller's call of one ends the response with
//! `function_call` items, and the client's `function_call_output` items
//! answer the run's waits by `call_id` (see [`crate::tool_results`]).
//!
//! A response is a run's entries after the seq its call began at: its id
//! is `resp_<run>_<seq>`, and the journal is all that is kept of it.

mod project;
mod request;

pub use request::ResponsesRequest;

use super::AppState;
use super::auth::{Workspace, own_run};
use super::chat::retry;
use super::error::ApiError;
use super::runs::component_ref;
use super::tool_results;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cairn_runtime::ErrorCode;
use cairn_runtime::ids::{RunId, Seq, SessionId};
use cairn_runtime::journal::Delivery;
use cairn_runtime::journal::event::{
    CancelReason, ImportedTurn, LifecycleEvent, Liveness, LivenessPolicy, Payload,
};
use cairn_runtime::runtime::RuntimeError;
use cairn_runtime::runtime::{AttachSpec, FirstCommit, Observation, StartRun};
use project::{Builder, End};
use serde_json::{Value, json};
use std::convert::Infallible;

/// A response's id: its run, and the seq its call began after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseId {
    pub run: RunId,
    pub after: Seq,
}

impl std::fmt::Display for ResponseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "resp_{}_{}", self.run, self.after.0)
    }
}

impl ResponseId {
    fn parse(text: &str) -> Result<Self, ApiError> {
        let not_found = || ApiError::not_found(format!("no response {text}"));
        let (run, after) = text
            .strip_prefix("resp_")
            .and_then(|t| t.rsplit_once('_'))
            .ok_or_else(not_found)?;
        Ok(ResponseId {
            run: run.parse().map_err(|_| not_found())?,
            after: Seq(after.parse().map_err(|_| not_found())?),
        })
    }
}

pub async fn create(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    headers: HeaderMap,
    crate::body::RawBody(body): crate::body::RawBody,
) -> Result<Response, ApiError> {
    let req: ResponsesRequest = crate::body::parse(&body)?;
    req.check()?;
    let streamed = req.stream.unwrap_or(false);
    let background = req.background.unwrap_or(false);
    // One call, one run: a retry joins the run its first attempt started.
    let call = retry::Call::of(&format!("{}\u{0}responses", ws.0), &headers, &body);
    if let Some(prev) = call.as_ref().and_then(|c| s.calls.joinable(c)) {
        let id = ResponseId {
            run: prev.run,
            after: prev.after,
        };
        let slot = slot_of(&s, &ws, streamed)?;
        let obs = crate::streams::claim_run(&s, &prev.session, prev.after, prev.run).await?;
        let builder = Builder::new(id, req.model.clone(), req.echoed_tools(), true);
        return follow(&s, obs, builder, slot, &prev.session).await;
    }
    let input = req.input()?;
    let component = component_ref(&s, &ws, &req.model).await?;
    // Where the conversation goes on: the previous response's session.
    let previous = match &req.previous_response_id {
        Some(id) => {
            let id = ResponseId::parse(id)?;
            Some((own_run(&s, &ws, id.run).await?, id.run))
        }
        None => None,
    };
    // Function results by call id: a run waiting on them goes on.
    if !input.results.is_empty() {
        let waits = tool_results::waits(&s, &ws, previous.as_ref().map(|p| &p.0)).await;
        if let Some(m) = tool_results::matching(&waits, &input.results) {
            let slot = slot_of(&s, &ws, streamed)?;
            return go_on(&s, m, &req, slot).await;
        }
        if let Some((session, _)) = &previous
            && s.rt.live_runs().iter().any(|(live, _)| live == session)
        {
            return Err(ApiError::new(
                ErrorCode::LiveRun,
                tool_results::mismatch(session, &waits, &input.results),
            ));
        }
    }
    // A new message while the session's run waits on the client's tools:
    // the client went on, the calls are abandoned.
    if input.results.is_empty()
        && let Some((session, _)) = &previous
    {
        tool_results::abandon(&s, &ws, session).await;
    }
    let rt = &s.rt;
    // A streamed answer is an open event stream: its place first.
    let slot = slot_of(&s, &ws, streamed)?;
    let (session, made, continues) = match previous {
        Some((session, run)) => (session, None, Some(run)),
        None => {
            let (id, worker) = rt.create_session_first(None, &ws.0).await?;
            let mut earlier: Vec<ImportedTurn> = req
                .instructions()
                .map(|text| ImportedTurn {
                    role: "system".into(),
                    text,
                    tool_calls: None,
                    tool_call_id: None,
                })
                .into_iter()
                .collect();
            earlier.extend(input.earlier.iter().cloned());
            if !earlier.is_empty() {
                rt.import_history(&id, earlier, None).await?;
            }
            (id, Some(worker), None)
        }
    };
    let after = rt.minted_seq(&session).await?;
    // A background response is headless: no claimant, nothing a
    // disconnect cancels. Otherwise the call claims its run.
    let obs = match background {
        true if !streamed => None,
        true => Some(rt.attach(&session, AttachSpec::collecting(after)).await?),
        false => {
            let obs = rt
                .attach(&session, AttachSpec::claiming_present(after))
                .await?;
            obs.leave_with_run();
            Some(obs)
        }
    };
    let started = rt
        .start(StartRun {
            session: Some(session.clone()),
            worker: made,
            component: Some(component),
            prompt: input.prompt.clone(),
            liveness: Liveness {
                policy: match background {
                    true => LivenessPolicy::Continue,
                    false => LivenessPolicy::Cancel,
                },
                grace_ms: match call {
                    Some(_) => retry::GRACE_MS,
                    None => 0,
                },
            },
            timeout_ms: None,
            continues,
            workspace: Some(ws.0.clone()),
            limits: Default::default(),
            tools: req.start_tools(&input.results),
            first_commit: FirstCommit::WithRun,
            resume_on_start: None,
        })
        .await?;
    let id = ResponseId {
        run: started.run_id,
        after,
    };
    if let Some(c) = call {
        s.calls.remember(
            c,
            retry::Started {
                session: session.clone(),
                run: id.run,
                after,
            },
        );
    }
    let builder = Builder::new(id, req.model.clone(), req.echoed_tools(), true);
    match obs {
        Some(obs) => follow(&s, obs, builder, slot, &session).await,
        None => Ok(with_ids(
            Json(builder.response()).into_response(),
            &session,
            id,
        )),
    }
}

/// An event stream's place, when the answer is streamed.
fn slot_of(
    s: &AppState,
    ws: &Workspace,
    streamed: bool,
) -> Result<Option<crate::streams::Slot>, ApiError> {
    match streamed {
        true => Ok(Some(s.streams.take(
            &s.rt.host_config().server,
            &ws.0,
            None,
        )?)),
        false => Ok(None),
    }
}

/// The client's function results answer the waits of a live run: a new
/// response of that run, from here.
async fn go_on(
    s: &AppState,
    m: tool_results::Matched,
    req: &ResponsesRequest,
    slot: Option<crate::streams::Slot>,
) -> Result<Response, ApiError> {
    let (session, run) = (m.session.clone(), m.run);
    let (obs, after, held) = tool_results::take_up(s, m).await?;
    let id = ResponseId { run, after };
    let mut builder = Builder::new(id, req.model.clone(), req.echoed_tools(), true);
    builder.held = held;
    follow(s, obs, builder, slot, &session).await
}

fn with_ids(response: Response, session: &SessionId, id: ResponseId) -> Response {
    crate::streams::with_run_ids(response, session, id.run)
}

/// Feed one observed entry; `None` when it is not the run's.
async fn step(s: &AppState, b: &mut Builder, d: Delivery) -> Option<project::Fed> {
    let Delivery::Event(e) = d else { return None };
    if e.run_id != Some(b.run()) {
        return None;
    }
    let fed = b.feed(&e);
    if let Some((decision, content)) = &fed.answer
        && let Err(err) = s.rt.decide(decision, Value::String(content.clone())).await
    {
        tracing::warn!(decision = %decision, "a held function result was refused: {err}");
    }
    Some(fed)
}

/// Answer the call: follow the run to the response's end, streamed as
/// the Responses API's events or returned once. A response that ends on
/// a wait (the client's tool results, another decision) hands the run
/// over to wait for the answer.
async fn follow(
    s: &AppState,
    mut obs: Observation,
    mut b: Builder,
    slot: Option<crate::streams::Slot>,
    session: &SessionId,
) -> Result<Response, ApiError> {
    let id = b.id();
    let Some(slot) = slot else {
        loop {
            let d = match obs.next().await {
                Some(Ok(d)) => d,
                Some(Err(e)) => return Err(ApiError::new(ErrorCode::Internal, e.to_string())),
                None => return Err(ApiError::new(ErrorCode::Internal, "the journal closed")),
            };
            let Some(fed) = step(s, &mut b, d).await else {
                continue;
            };
            match fed.end {
                None => continue,
                Some(End::ClientWait | End::Decision) => {
                    obs.hand_over(LivenessPolicy::Continue).await;
                }
                Some(_) => {}
            }
            return Ok(with_ids(Json(b.response()).into_response(), session, id));
        }
    };
    let s = s.clone();
    let opening = b.opening();
    let frames = futures_util::stream::unfold(
        (Some(obs), b, Some(opening)),
        move |(mut obs, mut b, mut opening)| {
            let s = s.clone();
            async move {
                if let Some(events) = opening.take() {
                    return Some((events, (obs, b, None)));
                }
                let o = obs.as_mut()?;
                loop {
                    let d = match o.next().await {
                        Some(Ok(d)) => d,
                        _ => return None,
                    };
                    let Some(fed) = step(&s, &mut b, d).await else {
                        continue;
                    };
                    match fed.end {
                        None if fed.events.is_empty() => continue,
                        None => return Some((fed.events, (obs, b, None))),
                        Some(end) => {
                            if matches!(end, End::ClientWait | End::Decision)
                                && let Some(o) = obs.take()
                            {
                                o.hand_over(LivenessPolicy::Continue).await;
                            }
                            return Some((fed.events, (None, b, None)));
                        }
                    }
                }
            }
        },
    );
    let flat = futures_util::StreamExt::flat_map(frames, |events: Vec<Value>| {
        futures_util::stream::iter(events.into_iter().map(|v| {
            let kind = v["type"].as_str().unwrap_or("message").to_string();
            Ok::<_, Infallible>(Event::default().event(kind).data(v.to_string()))
        }))
    });
    let sse = Sse::new(crate::streams::holding(flat, slot))
        .keep_alive(KeepAlive::new().interval(super::events::KEEP_ALIVE));
    Ok(with_ids(sse.into_response(), session, id))
}

/// `GET /v1/responses/{id}`: the response rebuilt from its run's entries.
pub async fn get(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = ResponseId::parse(&id)?;
    let session = own_run(&s, &ws, id.run).await?;
    Ok(Json(rebuild(&s, &session, id).await?))
}

async fn rebuild(s: &AppState, session: &SessionId, id: ResponseId) -> Result<Value, ApiError> {
    let mut b: Option<Builder> = None;
    let mut ended = false;
    let from = s.rt.run_after(id.run).await;
    s.rt.scan(session, from, |item| {
        let Some(e) = item.event() else { return true };
        if e.run_id != Some(id.run) {
            return true;
        }
        if let Payload::Lifecycle(LifecycleEvent::Started {
            component, tools, ..
        }) = &e.payload
        {
            b = Some(Builder::new(
                id,
                component.to_string(),
                responses_tools(tools.as_deref()),
                false,
            ));
        }
        let Some(b) = b.as_mut().filter(|_| e.seq > id.after) else {
            return true;
        };
        ended = b.feed(e).end.is_some();
        !ended
    })
    .await?;
    let b = b.ok_or_else(|| ApiError::not_found(format!("no response {id}")))?;
    Ok(b.response())
}

/// The chat-form tools a run started with, as the Responses API's.
fn responses_tools(tools: Option<&str>) -> Value {
    let doc: Value = tools
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    let list: Vec<Value> = doc["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| {
                    let f = &t["function"];
                    json!({ "type": "function", "name": f["name"],
                            "description": f["description"], "parameters": f["parameters"] })
                })
                .collect()
        })
        .unwrap_or_default();
    Value::Array(list)
}

/// `POST /v1/responses/{id}/cancel`: cancel the response's run, then the
/// response as it ended (a run that ended already is left as it ended).
pub async fn cancel(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = ResponseId::parse(&id)?;
    let session = own_run(&s, &ws, id.run).await?;
    match s.rt.cancel(
        id.run,
        CancelReason::External,
        "cancelled through the Responses API",
    ) {
        Ok(()) => {
            s.rt.wait(id.run).await?;
        }
        // Ended already (here, or before this process): as it ended.
        Err(RuntimeError::UnknownRun(_) | RuntimeError::WrongRunState { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Json(rebuild(&s, &session, id).await?))
}
